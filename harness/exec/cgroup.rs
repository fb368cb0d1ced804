//! A cgroup per cell, where the host lets the harness make one.
//!
//! The process group and the token in the environment find every process of a cell except one
//! that leaves the group *and* clears its environment (`setsid env -i ...`, a daemon). A cgroup
//! holds it whatever it does: every process forked inside stays inside, and `cgroup.kill` kills
//! them all. So where cgroup v2 is mounted and the harness may make a child of its own cgroup
//! (root, a delegated subtree, a `systemd-run --user --scope`), each cell gets
//! `<own cgroup>/gpucompat-<cell token>`, its first process moves itself in before it runs
//! anything, and teardown kills what is left in it and removes it. Elsewhere teardown works as
//! before and the cell's log says that escape detection was limited, and why.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A cell's cgroup, or why there is none.
#[derive(Debug)]
pub enum CellCgroup {
    Made(PathBuf),
    /// Why escape detection is limited to the process group and the token.
    Limited(String),
}

impl CellCgroup {
    /// Makes the cgroup of the cell whose token is `cell_token`.
    pub fn make(cell_token: &str) -> CellCgroup {
        match parent() {
            Ok(parent) => {
                let dir = parent.join(format!("gpucompat-{cell_token}"));
                match std::fs::create_dir(&dir) {
                    Ok(()) => CellCgroup::Made(dir),
                    Err(err) if err.kind() == io::ErrorKind::AlreadyExists => CellCgroup::Made(dir),
                    Err(err) => CellCgroup::Limited(format!(
                        "cannot make a cgroup under {}: {err}",
                        parent.display()
                    )),
                }
            }
            Err(why) => CellCgroup::Limited(why.clone()),
        }
    }

    /// Shell text that moves the shell running it into the cgroup (before it starts anything,
    /// so every descendant is born inside). Empty without a cgroup.
    pub fn enter_prefix(&self) -> String {
        match self {
            CellCgroup::Made(dir) => format!(
                "{{ echo 0 >{}; }} 2>/dev/null",
                shell_quote(&dir.join("cgroup.procs"))
            ),
            CellCgroup::Limited(_) => String::new(),
        }
    }

    /// Whether `pid` is in the cgroup (the move worked).
    pub fn holds(&self, pid: i32) -> bool {
        self.pids().contains(&pid)
    }

    /// The processes in the cgroup.
    pub fn pids(&self) -> Vec<i32> {
        match self {
            CellCgroup::Made(dir) => std::fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect(),
            CellCgroup::Limited(_) => Vec::new(),
        }
    }

    /// Kills every process in the cgroup (`cgroup.kill`), waits up to `limit` for it to empty and
    /// removes it. Returns the pids that were still there when it began.
    pub async fn kill_and_remove(&self, limit: std::time::Duration) -> Vec<i32> {
        let CellCgroup::Made(dir) = self else {
            return Vec::new();
        };
        let left = self.pids();
        if !left.is_empty() {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        }
        let deadline = tokio::time::Instant::now() + limit;
        // `rmdir` fails while the cgroup holds a process (a dying one included): poll.
        while std::fs::remove_dir(dir).is_err() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        left
    }
}

/// The cgroup cells are made under (the harness's own), or why there is none; found once.
fn parent() -> &'static Result<PathBuf, String> {
    static PARENT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PARENT.get_or_init(|| {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let dir = own_cgroup_dir(&mounts, &own)?;
        check_usable(&dir)?;
        Ok(dir)
    })
}

/// The harness's own cgroup v2 folder, from `/proc/self/mounts` and `/proc/self/cgroup`.
pub fn own_cgroup_dir(mounts: &str, own: &str) -> Result<PathBuf, String> {
    let mount = mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"cgroup2"))
        .and_then(|f| f.get(1).map(|m| PathBuf::from(*m)))
        .ok_or_else(|| "no cgroup v2 file system is mounted".to_owned())?;
    let relative = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| "this process is in no cgroup v2 group".to_owned())?;
    Ok(mount.join(relative.trim().trim_start_matches('/')))
}

/// Whether cells can be made, entered and killed under `dir`.
fn check_usable(dir: &Path) -> Result<(), String> {
    let probe = dir.join(format!("gpucompat-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|err| {
        format!(
            "cannot make a cgroup under {} ({err}): no delegated cgroup v2 subtree for this user",
            dir.display()
        )
    })?;
    let kill = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    if !kill {
        return Err("the kernel has no cgroup.kill (before Linux 5.14)".to_owned());
    }
    Ok(())
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cgroup_from_mounts_and_membership() {
        let mounts = "proc /proc proc rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        let own = "0::/user.slice/user-1000.slice/session-3.scope\n";
        assert_eq!(
            own_cgroup_dir(mounts, own),
            Ok(PathBuf::from(
                "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"
            ))
        );
        // Hybrid hosts mount v2 elsewhere; v1 lines are ignored.
        let hybrid = "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            own_cgroup_dir(hybrid, "4:memory:/x\n0::/\n"),
            Ok(PathBuf::from("/sys/fs/cgroup/unified/"))
        );
        let v1_only = "cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n";
        assert!(own_cgroup_dir(v1_only, "0::/\n").is_err_and(|e| e.contains("no cgroup v2")));
    }

    #[test]
    fn a_cgroup_that_cannot_be_made_is_a_limited_reason() {
        let scratch = tempfile::tempdir().expect("scratch");
        let missing = scratch.path().join("no-such-cgroup");
        let err = check_usable(&missing).expect_err("no such folder");
        assert!(err.contains("no delegated cgroup v2 subtree"), "{err}");
        // A plain folder is not a cgroup: no cgroup.kill appears in a child.
        let err = check_usable(scratch.path()).expect_err("not a cgroup");
        assert!(err.contains("cgroup.kill"), "{err}");
    }
}
