//! What `/proc` says about one stuck process (command line, `wchan`, threads, caught signals,
//! open files) and about file locks (`/proc/locks`: who holds which lock, who waits).

use super::{LockFile, ProcSnapshot};
use crate::exec::procfs::{ProcInfo, TICKS_PER_SECOND};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// The bit of `SIGUSR1` in `/proc/<pid>/status`'s `SigCgt` mask (signal n is bit n - 1).
const SIGUSR1_BIT: u64 = 1 << (10 - 1);

fn read(pid: i32, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()
}

/// A snapshot of `info`'s process, without stacks.
pub(super) fn snapshot(info: &ProcInfo) -> ProcSnapshot {
    let pid = info.pid;
    let comm = read(pid, "comm")
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_default();
    let cmdline = read(pid, "cmdline")
        .map(|c| c.trim_end_matches('\0').replace(['\0', '\n', '\r'], " "))
        .unwrap_or_default();
    // `0` means running (or the kernel hides it); an empty file the same.
    let wchan = read(pid, "wchan").filter(|w| !w.is_empty() && w != "0");
    let status = read(pid, "status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let threads = field("Threads:").and_then(|t| t.parse().ok()).unwrap_or(1);
    let caught = field("SigCgt:")
        .and_then(|m| u64::from_str_radix(m, 16).ok())
        .unwrap_or(0);
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    ProcSnapshot {
        pid,
        ppid: info.ppid,
        pgid: info.pgid,
        python: is_python(exe.as_ref(), &comm),
        comm,
        cmdline,
        state: info.state.to_string(),
        wchan,
        cpu_s: info.cpu_ticks as f64 / TICKS_PER_SECOND as f64,
        cpu_during_capture_s: 0.0,
        waited_during_capture_s: 0.0,
        busy: false,
        threads,
        catches_sigusr1: caught & SIGUSR1_BIT != 0,
        stack_source: None,
        stack_note: None,
        stacks: Vec::new(),
    }
}

/// A Python interpreter by its executable (`python3.12`, `pypy3`), or by its name when the
/// executable cannot be read.
fn is_python(exe: Option<&PathBuf>, comm: &str) -> bool {
    let name = exe
        .and_then(|e| e.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| comm.to_owned());
    name.starts_with("python") || name.starts_with("pypy")
}

/// One line of `/proc/locks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LockLine {
    /// `FLOCK`, `POSIX`, `OFDLCK`.
    pub kind: String,
    /// `READ` or `WRITE`.
    pub mode: String,
    pub pid: i32,
    /// `(major:minor, inode)` as the kernel writes them (hex major:minor).
    pub file: (String, u64),
    /// A waiter (`->` line), not a holder.
    pub blocked: bool,
}

/// Parses `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF`, waiters as
/// `1: -> FLOCK ...`).
pub(super) fn parse_locks(text: &str) -> Vec<LockLine> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace().skip(1).peekable();
            let blocked = words.peek() == Some(&"->");
            if blocked {
                words.next();
            }
            let kind = words.next()?.to_owned();
            let _advisory = words.next()?;
            let mode = words.next()?.to_owned();
            let pid = words.next()?.parse().ok()?;
            let id = words.next()?;
            let (dev, inode) = id.rsplit_once(':')?;
            Some(LockLine {
                kind,
                mode,
                pid,
                file: (dev.to_owned(), inode.parse().ok()?),
                blocked,
            })
        })
        .collect()
}

/// `major:minor` as `/proc/locks` writes a device number (hex, two digits at least).
fn dev_text(dev: u64) -> String {
    let major = nix::sys::stat::major(dev);
    let minor = nix::sys::stat::minor(dev);
    format!("{major:02x}:{minor:02x}")
}

/// The locked files the cell's processes have open, with their holders and waiters; also any
/// open `*.lock` file nobody holds (a waiter polling, as Python's `filelock` does).
pub(super) fn lock_files(pids: &[i32], locks_text: &str) -> Vec<LockFile> {
    let locks = parse_locks(locks_text);
    // (device, inode) -> path and the cell's processes that have it open.
    let mut open: BTreeMap<(String, u64), (String, Vec<i32>)> = BTreeMap::new();
    for &pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if !target.is_absolute() {
                continue; // pipes, sockets, anonymous inodes
            }
            let Ok(meta) = std::fs::metadata(fd.path()) else {
                continue;
            };
            // Matched by inode alone: on overlay file systems (containers) `stat` gives the
            // overlay's device while `/proc/locks` names the underlying one.
            let key = (dev_text(meta.dev()), meta.ino());
            let locked = locks.iter().any(|l| l.file.1 == key.1);
            let named = target.extension().is_some_and(|e| e == "lock");
            if !(locked || named) {
                continue;
            }
            let entry = open
                .entry(key)
                .or_insert_with(|| (target.display().to_string(), Vec::new()));
            if !entry.1.contains(&pid) {
                entry.1.push(pid);
            }
        }
    }
    let mut by_inode: HashMap<u64, Vec<&LockLine>> = HashMap::new();
    for lock in &locks {
        by_inode.entry(lock.file.1).or_default().push(lock);
    }
    open.into_iter()
        .map(|(key, (path, openers))| {
            let lines = by_inode.get(&key.1).cloned().unwrap_or_default();
            let holder = lines.iter().find(|l| !l.blocked);
            LockFile {
                path,
                kind: holder.map(|l| l.kind.clone()),
                mode: holder.map(|l| l.mode.clone()),
                holder: holder.map(|l| l.pid),
                waiters: lines.iter().filter(|l| l.blocked).map(|l| l.pid).collect(),
                openers,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_holders_and_waiters() {
        let text = "1: FLOCK  ADVISORY  WRITE 4242 00:2d:131090 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 4243 00:2d:131090 0 EOF\n\
                    2: POSIX  ADVISORY  READ 77 fd:01:99 0 EOF\n\
                    garbage\n";
        let locks = parse_locks(text);
        assert_eq!(locks.len(), 3);
        assert_eq!(locks[0].pid, 4242);
        assert!(!locks[0].blocked);
        assert_eq!(locks[1].pid, 4243);
        assert!(locks[1].blocked);
        assert_eq!(locks[1].file, ("00:2d".to_owned(), 131090));
        assert_eq!(
            (locks[2].kind.as_str(), locks[2].mode.as_str()),
            ("POSIX", "READ")
        );
        assert_eq!(locks[2].file, ("fd:01".to_owned(), 99));
    }
}
