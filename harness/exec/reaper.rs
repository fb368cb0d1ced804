//! The reaper: a small guardian process started with every run.
//!
//! The harness cannot clean up after itself when it is killed with SIGKILL, so it starts a copy of
//! itself (`gpucompat __reap TOKEN`) in a process group of its own (out of reach of the terminal's
//! Ctrl-C and hang-up) and keeps the write end of a pipe to it. The harness tells it each cell's
//! process group as it starts. When the pipe closes, for whatever reason the harness ended, the
//! reaper sends TERM, then after a second KILL, to those groups and to every process that carries
//! the run's token in its environment, then exits. After a clean run it finds nothing to do.

use super::procfs::{self, Selector};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::io::{self, BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The hidden subcommand that runs [`serve`].
pub const SUBCOMMAND: &str = "__reap";

/// The harness's end of the reaper.
#[derive(Debug)]
pub struct Reaper {
    child: Child,
    stdin: Mutex<Option<ChildStdin>>,
}

impl Reaper {
    /// Starts `exe __reap run_token`.
    pub fn start(exe: &Path, run_token: &str) -> io::Result<Reaper> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(exe)
            .arg(SUBCOMMAND)
            .arg(run_token)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Reaper {
            child,
            stdin: Mutex::new(stdin),
        })
    }

    /// Tells the reaper about a cell's process group.
    pub fn register(&self, pgid: i32) {
        self.send(&format!("+{pgid}\n"));
    }

    /// The group was torn down; the reaper can forget it.
    pub fn unregister(&self, pgid: i32) {
        self.send(&format!("-{pgid}\n"));
    }

    fn send(&self, line: &str) {
        let mut stdin = self
            .stdin
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(pipe) = stdin.as_mut() {
            let _ = pipe.write_all(line.as_bytes()).and_then(|()| pipe.flush());
        }
    }

    /// Closes the pipe and waits for the reaper to finish its sweep.
    pub fn finish(mut self) {
        self.stdin
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let _ = self.child.wait();
    }
}

/// The reaper's main loop: remember groups until stdin closes, then kill what is left.
pub fn serve(run_token: &str, input: impl BufRead) -> usize {
    let mut groups: Vec<i32> = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        let (sign, number) = line.split_at(line.len().min(1));
        let Ok(pgid) = number.trim().parse::<i32>() else {
            continue;
        };
        match sign {
            "+" if pgid > 1 => groups.push(pgid),
            "-" => groups.retain(|g| *g != pgid),
            _ => {}
        }
    }
    sweep(run_token, &groups)
}

/// TERM, a second's grace, then KILL, to the groups and to every process of the run; returns
/// how many processes it found.
pub fn sweep(run_token: &str, groups: &[i32]) -> usize {
    let selector = Selector::run(run_token);
    let mut found = procfs::find_alive(&selector).len();
    let signal_all = |signal: Signal| {
        for pgid in groups {
            let _ = killpg(Pid::from_raw(*pgid), signal);
        }
        for info in procfs::find_alive(&selector) {
            let _ = kill(Pid::from_raw(info.pid), signal);
        }
    };
    signal_all(Signal::SIGTERM);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(1) {
        if procfs::find_alive(&selector).is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A process forking while we kill may leave a child behind: sweep until quiet.
    for _ in 0..20 {
        let left = procfs::find_alive(&selector);
        found = found.max(left.len());
        signal_all(Signal::SIGKILL);
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_tracks_registrations_and_ignores_noise() {
        // No process carries this token, so the sweep finds nothing and returns promptly.
        let input = io::Cursor::new("+999999\n-999999\ngarbage\n+\n");
        assert_eq!(serve("no-such-token-for-test", input), 0);
    }
}
