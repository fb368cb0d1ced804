//! Loopback ports for server cells.
//!
//! The harness asks the kernel for a free port (bind to port 0, read it, close), and hands it to
//! the server in `{port}`. Between that close and the server's own bind the port is free, and the
//! kernel may offer it to anyone who asks: another cell of this run, or a cell of another
//! gpucompat run on the same host (two CI jobs on one runner, tests run in parallel). Both would
//! then be told the same port; one server dies on "address in use", and the other cell's health
//! checks can be answered by the wrong server.
//!
//! So a port is leased: within a run, ports handed out lately are not handed out again; across
//! runs, a lease holds an exclusive `flock` on `/tmp/gpucompat-ports/<port>.lock` for as long as
//! the cell runs, and a port whose lock another process holds is skipped. The kernel drops the lock
//! when its holder dies, so a killed harness never strands a port. Lock files are never deleted
//! (deleting a lock file races with its next locker); there is one per port ever leased, a few
//! bytes of directory each.

use nix::fcntl::{Flock, FlockArg};
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Ports handed out lately by this process: never handed out again while they are on the list,
/// so a port is not reused the moment its cell ends.
static RECENT_PORTS: Mutex<VecDeque<u16>> = Mutex::new(VecDeque::new());
/// How many recent ports are kept (more than cells that start at once).
const RECENT_KEPT: usize = 512;
/// How many offers from the kernel to try before giving up.
const TRIES: usize = 64;

/// A port reserved for one cell, until dropped.
#[derive(Debug)]
pub(crate) struct PortLease {
    pub port: u16,
    /// `None` where the lock folder cannot be used: the lease then only protects against the
    /// cells of this run.
    _lock: Option<Flock<File>>,
}

/// Where the lock files live: one fixed folder per host for every user and every job, so runs with
/// different `TMPDIR`s still exclude each other. Sticky like `/tmp` itself (nobody removes
/// another's files); the files are world-readable and `flock` needs only read access.
fn lock_dir() -> PathBuf {
    PathBuf::from("/tmp/gpucompat-ports")
}

/// A free loopback port that no other cell, of this run or another, has been handed and still
/// holds.
pub(crate) fn lease() -> io::Result<PortLease> {
    lease_from(|| {
        Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
            .local_addr()?
            .port())
    })
}

/// [`lease`] over the ports `offer` proposes (the kernel's free ones, outside tests).
fn lease_from(mut offer: impl FnMut() -> io::Result<u16>) -> io::Result<PortLease> {
    let dir = lock_dir();
    // Without the folder there are no cross-run locks at all: the lease still keeps this run's
    // cells apart.
    let locks = match ensure_dir(&dir) {
        Ok(()) => true,
        Err(err) => {
            tracing::debug!("port locks unavailable in {}: {err}", dir.display());
            false
        }
    };
    // Held across the check and the insert, so two cells of this run never take one port.
    let mut recent = RECENT_PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..TRIES {
        let port = offer()?;
        if recent.contains(&port) {
            continue;
        }
        let lock = if locks {
            match lock_port(&dir, port) {
                Ok(Some(lock)) => Some(lock),
                // Another process holds this port's lease.
                Ok(None) => continue,
                // A lock file this user cannot open: whoever made it may be using the port.
                Err(err) => {
                    tracing::debug!("cannot lock port {port}: {err}; trying another");
                    continue;
                }
            }
        } else {
            None
        };
        if recent.len() == RECENT_KEPT {
            recent.pop_front();
        }
        recent.push_back(port);
        return Ok(PortLease { port, _lock: lock });
    }
    Err(io::Error::other(format!(
        "the kernel kept offering ports that are leased already ({TRIES} tries)"
    )))
}

/// Makes the lock folder, open to every user. A folder this user made earlier with other
/// permissions is opened up again; one of another user's is used as it is.
fn ensure_dir(dir: &Path) -> io::Result<()> {
    match fs::create_dir(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o1777)),
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            let meta = fs::metadata(dir)?;
            if !meta.is_dir() {
                return Err(io::Error::other("it is not a folder"));
            }
            if meta.permissions().mode() & 0o7777 != 0o1777
                && meta.uid() == nix::unistd::getuid().as_raw()
            {
                fs::set_permissions(dir, fs::Permissions::from_mode(0o1777))?;
            }
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// The lock of `port`, or `None` when another process holds it.
fn lock_port(dir: &Path, port: u16) -> io::Result<Option<Flock<File>>> {
    let path = dir.join(format!("{port}.lock"));
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    {
        Ok(file) => {
            // The umask may have taken read access from the others: give it back, so every user
            // can lock this port (only the owner can, and only the owner needs to).
            let meta = file.metadata()?;
            if meta.permissions().mode() & 0o444 != 0o444
                && meta.uid() == nix::unistd::getuid().as_raw()
            {
                file.set_permissions(fs::Permissions::from_mode(0o644))?;
            }
            file
        }
        // Another user's lock file: reading is enough to lock it.
        Err(err) if err.kind() == io::ErrorKind::PermissionDenied => File::open(&path)?,
        Err(err) => return Err(err),
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            // Age-based cleaners of /tmp spare files touched lately; a held lock must not go.
            let _ = lock.set_modified(std::time::SystemTime::now());
            Ok(Some(lock))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(io::Error::from(errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leased_ports_are_not_handed_out_twice() {
        let leases: Vec<PortLease> = (0..200).map(|_| lease().expect("port")).collect();
        let mut ports: Vec<u16> = leases.iter().map(|l| l.port).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 200);
    }

    #[test]
    fn a_port_another_process_leased_is_skipped_until_released() {
        let dir = lock_dir();
        ensure_dir(&dir).expect("lock folder");
        let held = lease().expect("port");
        assert!(held._lock.is_some(), "the lease holds its lock");
        // A second open of the lock file is another open file description: to `flock` it is as
        // good as another process.
        assert!(
            lock_port(&dir, held.port).expect("lock").is_none(),
            "a leased port cannot be locked again"
        );
        let port = held.port;
        drop(held);
        assert!(
            lock_port(&dir, port).expect("lock").is_some(),
            "released with the lease"
        );
    }

    #[test]
    fn ports_locked_by_another_run_are_passed_over() {
        // `taken` holds its lock as another run's lease would (to `flock`, another open of the
        // file is as good as another process); `free` was leased and given back.
        let taken = lease().expect("port");
        let free = lease().expect("port");
        let free_port = free.port;
        drop(free);
        // Forget both here, so only the lock can keep `taken` out.
        RECENT_PORTS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|p| *p != taken.port && *p != free_port);
        let mut offers = [taken.port, taken.port, free_port].into_iter();
        let leased = lease_from(|| Ok(offers.next().expect("an offer"))).expect("a lease");
        assert_eq!(leased.port, free_port);
    }

    #[test]
    fn lock_files_and_their_folder_are_opened_up_to_every_user() {
        let scratch = tempfile::tempdir().expect("scratch folder");
        let dir = scratch.path().join("ports");
        fs::create_dir(&dir).expect("folder");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        // As a umask of 077 would have made them.
        let path = dir.join("4242.lock");
        File::create(&path).expect("lock file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");

        ensure_dir(&dir).expect("folder opened up");
        let lock = lock_port(&dir, 4242).expect("lock").expect("not held");
        let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o1777);
        assert_eq!(mode(&path) & 0o444, 0o444);
        drop(lock);
    }
}
