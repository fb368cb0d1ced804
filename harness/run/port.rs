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
//! runs, a lease holds an exclusive `flock` on `<port>.lock` in two folders for as long as the
//! cell runs, and a port whose lock another process holds in either is skipped:
//!
//! - a per-user folder (`$XDG_RUNTIME_DIR/gpucompat-ports`, else `/tmp/gpucompat-ports-<uid>`,
//!   mode 0700 and owned by this user, or not used): this user's runs exclude each other, whatever
//!   another user did to `/tmp`;
//! - the shared folder `/tmp/gpucompat-ports`, only when it is safe (a folder, not a link; sticky,
//!   or not writable by others; a folder of another non-root user only if sticky): every user's
//!   runs exclude each other. A folder that is not safe is refused with a warning, and only the
//!   per-user lock is taken (another user's runs are then not excluded: a port they take first
//!   makes our server fail to bind, a spurious error, never another server's verdict, since
//!   `exec::listeners` checks who answers).
//!
//! Another user may have made the shared folder or a lock file in it, so nothing there is trusted:
//! lock files are opened relative to the folder opened once (no path swapped in between), with
//! `O_NOFOLLOW` (a planted link fails to open and its port is skipped; its target is never opened,
//! chmod-ed or touched), `O_NONBLOCK` (a planted FIFO cannot hang the open) and `O_CLOEXEC`, and
//! must be plain files. Only a lock file this process just created (`O_CREAT|O_EXCL`) is made
//! readable by every user (so their runs can lock it too); an existing one is used as it is.
//!
//! The kernel drops a lock when its holder dies, so a killed harness never strands a port. Lock
//! files are never deleted (deleting a lock file races with its next locker); there is one per
//! port ever leased, a few bytes of directory each.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::{Mode, SFlag};
use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Ports handed out lately by this process: never handed out again while they are on the list,
/// so a port is not reused the moment its cell ends.
static RECENT_PORTS: Mutex<VecDeque<u16>> = Mutex::new(VecDeque::new());
/// How many recent ports are kept (more than cells that start at once).
const RECENT_KEPT: usize = 512;
/// How many offers from the kernel to try before giving up.
const TRIES: usize = 64;
/// The folder every user's runs share.
const SHARED_DIR: &str = "/tmp/gpucompat-ports";

/// A port reserved for one cell, until dropped.
#[derive(Debug)]
pub(crate) struct PortLease {
    pub port: u16,
    /// One lock per usable folder; none where no folder can be used: the lease then only
    /// protects against the cells of this run.
    _locks: Vec<Flock<File>>,
}

/// A lock folder, opened once and checked.
#[derive(Debug)]
struct LockDir {
    fd: OwnedFd,
    path: PathBuf,
    /// Lock files here are for every user: a new one is made readable by all.
    shared: bool,
}

/// The folders to lock in: the per-user one, then the shared one, each only where it is safe.
fn lock_dirs() -> Vec<LockDir> {
    let mut dirs = Vec::new();
    let own = per_user_dir();
    match open_per_user(&own) {
        Ok(dir) => dirs.push(dir),
        Err(err) => tracing::debug!(
            "per-user port locks unavailable in {}: {err}",
            own.display()
        ),
    }
    match open_shared(Path::new(SHARED_DIR)) {
        Ok(dir) => dirs.push(dir),
        Err(err) => warn_once(&format!(
            "not using the shared port-lock folder {SHARED_DIR}: {err}; runs of other users on this host are not kept off this run's ports"
        )),
    }
    dirs
}

fn warn_once(text: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| tracing::warn!("{text}"));
}

fn me() -> u32 {
    nix::unistd::getuid().as_raw()
}

fn per_user_dir() -> PathBuf {
    match crate::env::var_os(crate::env::EnvVars::XDG_RUNTIME_DIR).map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("gpucompat-ports"),
        _ => PathBuf::from(format!("{SHARED_DIR}-{}", me())),
    }
}

/// Opens `path` as a folder without following a link in its last component.
fn open_dir(path: &Path, create_mode: u32) -> io::Result<(OwnedFd, nix::sys::stat::FileStat)> {
    match nix::unistd::mkdir(path, Mode::from_bits_truncate(create_mode)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(errno) => return Err(errno.into()),
    }
    let fd = nix::fcntl::open(
        path,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY,
        Mode::empty(),
    )
    .map_err(|errno| match errno {
        Errno::ELOOP | Errno::ENOTDIR => io::Error::other("it is not a folder (a link or a file)"),
        errno => errno.into(),
    })?;
    let stat = nix::sys::stat::fstat(&fd)?;
    Ok((fd, stat))
}

/// The per-user folder: this user's, and nobody else may write it.
fn open_per_user(path: &Path) -> io::Result<LockDir> {
    let (fd, stat) = open_dir(path, 0o700)?;
    if stat.st_uid != me() {
        return Err(io::Error::other(format!(
            "it belongs to uid {}",
            stat.st_uid
        )));
    }
    if stat.st_mode & 0o022 != 0 {
        return Err(io::Error::other("others may write it"));
    }
    Ok(LockDir {
        fd,
        path: path.to_owned(),
        shared: false,
    })
}

/// The shared folder, where it is safe (see the module's comment).
fn open_shared(path: &Path) -> io::Result<LockDir> {
    let (fd, stat) = open_dir(path, 0o1777)?;
    let mode = stat.st_mode & 0o7777;
    if stat.st_uid == me() && mode != 0o1777 {
        // Ours (the umask may have narrowed it): open to every user, sticky like /tmp.
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o1777))?;
    } else {
        shared_dir_is_safe(stat.st_uid, mode, me()).map_err(io::Error::other)?;
    }
    Ok(LockDir {
        fd,
        path: path.to_owned(),
        shared: true,
    })
}

/// Whether a shared folder owned by `owner` with `mode` may hold this user's lock files: nobody
/// but its owner and root may remove or replace what is in it.
fn shared_dir_is_safe(owner: u32, mode: u32, me: u32) -> Result<(), String> {
    let sticky = mode & 0o1000 != 0;
    let others_write = mode & 0o022 != 0;
    if owner != me && owner != 0 && !sticky {
        return Err(format!(
            "it belongs to uid {owner} and is not sticky (mode {mode:o}), so its owner could swap its files"
        ));
    }
    if others_write && !sticky {
        return Err(format!(
            "others may write it and it is not sticky (mode {mode:o}), so anyone could swap its files"
        ));
    }
    Ok(())
}

/// A free loopback port that no other cell, of this run or another, has been handed and still
/// holds.
pub(crate) fn lease() -> io::Result<PortLease> {
    lease_from(&lock_dirs(), || {
        Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
            .local_addr()?
            .port())
    })
}

/// [`lease`] over the ports `offer` proposes (the kernel's free ones, outside tests), locked in
/// `dirs`.
fn lease_from(
    dirs: &[LockDir],
    mut offer: impl FnMut() -> io::Result<u16>,
) -> io::Result<PortLease> {
    // Held across the check and the insert, so two cells of this run never take one port.
    let mut recent = RECENT_PORTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    'offers: for _ in 0..TRIES {
        let port = offer()?;
        if recent.contains(&port) {
            continue;
        }
        let mut locks = Vec::with_capacity(dirs.len());
        for dir in dirs {
            match lock_port(dir, port) {
                Ok(Some(lock)) => locks.push(lock),
                // Another process holds this port's lease.
                Ok(None) => continue 'offers,
                // A lock file this user cannot use (or a planted link): whoever made it may be
                // using the port.
                Err(err) => {
                    tracing::debug!(
                        "cannot lock port {port} in {}: {err}; trying another",
                        dir.path.display()
                    );
                    continue 'offers;
                }
            }
        }
        if recent.len() == RECENT_KEPT {
            recent.pop_front();
        }
        recent.push_back(port);
        return Ok(PortLease {
            port,
            _locks: locks,
        });
    }
    Err(io::Error::other(format!(
        "the kernel kept offering ports that are leased already ({TRIES} tries)"
    )))
}

/// The lock of `port` in `dir`, or `None` when another process holds it.
fn lock_port(dir: &LockDir, port: u16) -> io::Result<Option<Flock<File>>> {
    let name = format!("{port}.lock");
    let safe = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let open =
        |flags: OFlag| nix::fcntl::openat(&dir.fd, name.as_str(), flags | safe, Mode::empty());
    let (fd, created) = match nix::fcntl::openat(
        &dir.fd,
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | safe,
        Mode::from_bits_truncate(0o644),
    ) {
        Ok(fd) => (fd, true),
        Err(Errno::EEXIST) => match open(OFlag::O_RDWR) {
            Ok(fd) => (fd, false),
            // Another user's lock file: reading is enough to lock it.
            Err(Errno::EACCES) => (open(OFlag::O_RDONLY)?, false),
            Err(errno) => return Err(errno.into()),
        },
        Err(errno) => return Err(errno.into()),
    };
    let stat = nix::sys::stat::fstat(&fd)?;
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(io::Error::other("the lock file is not a plain file"));
    }
    if created && dir.shared {
        // The umask may have taken read access from the others: give it back, so every user can
        // lock this port. Only this file, which this call just created.
        nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(0o644))?;
    }
    let file = File::from(fd);
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            // Age-based cleaners of /tmp spare files touched lately; a held lock must not go.
            // Only this user's files: another's is not ours to touch.
            if stat.st_uid == me() {
                let _ = lock.set_modified(std::time::SystemTime::now());
            }
            Ok(Some(lock))
        }
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(io::Error::from(errno)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A shared-style lock folder in a scratch folder (made sticky and open, as the real one).
    fn scratch_shared(scratch: &tempfile::TempDir) -> LockDir {
        open_shared(&scratch.path().join("ports")).expect("lock folder")
    }

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
        let scratch = tempfile::tempdir().expect("scratch");
        let dirs = [scratch_shared(&scratch)];
        let mut offers = std::iter::repeat_with(|| {
            Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?
                .local_addr()?
                .port())
        });
        let held = lease_from(&dirs, || offers.next().expect("offer")).expect("port");
        assert_eq!(held._locks.len(), 1, "the lease holds its lock");
        // A second open of the lock file is another open file description: to `flock` it is as
        // good as another process.
        assert!(
            lock_port(&dirs[0], held.port).expect("lock").is_none(),
            "a leased port cannot be locked again"
        );
        let port = held.port;
        drop(held);
        assert!(
            lock_port(&dirs[0], port).expect("lock").is_some(),
            "released with the lease"
        );
    }

    #[test]
    fn ports_locked_by_another_run_are_passed_over() {
        // `taken` holds its lock as another run's lease would; `free` was leased and given back.
        let scratch = tempfile::tempdir().expect("scratch");
        let dirs = [scratch_shared(&scratch)];
        let taken = lock_port(&dirs[0], 41001).expect("lock").expect("free");
        let mut offers = [41001, 41001, 41002].into_iter();
        let leased = lease_from(&dirs, || Ok(offers.next().expect("an offer"))).expect("a lease");
        assert_eq!(leased.port, 41002);
        drop(taken);
    }

    #[test]
    fn a_planted_link_is_never_followed_chmod_ed_or_touched() {
        // As another local user would plant it in the shared folder, pointing at a secret.
        let scratch = tempfile::tempdir().expect("scratch");
        let dirs = [scratch_shared(&scratch)];
        let secret = scratch.path().join("id_ed25519");
        fs::write(&secret, "PRIVATE KEY").expect("secret");
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).expect("chmod");
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        File::options()
            .write(true)
            .open(&secret)
            .and_then(|f| f.set_modified(old))
            .expect("set mtime");
        std::os::unix::fs::symlink(&secret, dirs[0].path.join("41011.lock")).expect("plant");

        let mut offers = [41011, 41012].into_iter();
        let leased = lease_from(&dirs, || Ok(offers.next().expect("an offer"))).expect("a lease");
        assert_eq!(
            leased.port, 41012,
            "the port with a planted link is skipped"
        );
        let meta = fs::metadata(&secret).expect("secret");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "mode unchanged");
        assert_eq!(meta.modified().expect("mtime"), old, "mtime unchanged");
        assert_eq!(fs::read_to_string(&secret).expect("read"), "PRIVATE KEY");
    }

    #[test]
    fn an_existing_lock_file_is_used_as_it_is() {
        let scratch = tempfile::tempdir().expect("scratch");
        let dirs = [scratch_shared(&scratch)];
        let path = dirs[0].path.join("41021.lock");
        File::create(&path).expect("lock file");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        let lock = lock_port(&dirs[0], 41021).expect("lock").expect("not held");
        assert_eq!(fs::metadata(&path).expect("meta").mode() & 0o7777, 0o600);
        drop(lock);
    }

    #[test]
    fn new_lock_files_and_own_shared_folder_are_open_to_every_user() {
        let scratch = tempfile::tempdir().expect("scratch");
        let dir = scratch.path().join("ports");
        fs::create_dir(&dir).expect("folder");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).expect("chmod");
        let shared = open_shared(&dir).expect("our own folder, opened up");
        let lock = lock_port(&shared, 41031).expect("lock").expect("not held");
        let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o1777);
        assert_eq!(mode(&dir.join("41031.lock")), 0o644);
        drop(lock);
    }

    #[test]
    fn unsafe_shared_folders_are_refused() {
        let me = 1000;
        assert!(
            shared_dir_is_safe(0, 0o1777, me).is_ok(),
            "/tmp-like, root's"
        );
        assert!(shared_dir_is_safe(me, 0o755, me).is_ok(), "ours, closed");
        assert!(
            shared_dir_is_safe(1001, 0o1777, me).is_ok(),
            "another's, sticky"
        );
        assert!(
            shared_dir_is_safe(1001, 0o777, me).is_err(),
            "another's, not sticky"
        );
        assert!(
            shared_dir_is_safe(1001, 0o755, me).is_err(),
            "another's, not sticky"
        );
        assert!(
            shared_dir_is_safe(0, 0o777, me).is_err(),
            "open to all, not sticky"
        );
        // A link where the folder should be is not a folder.
        let scratch = tempfile::tempdir().expect("scratch");
        let link = scratch.path().join("ports");
        std::os::unix::fs::symlink(scratch.path(), &link).expect("link");
        let err = open_shared(&link).expect_err("a link is refused");
        assert!(err.to_string().contains("not a folder"), "{err}");
        let err = open_per_user(&link).expect_err("a link is refused");
        assert!(err.to_string().contains("not a folder"), "{err}");
    }
}
