//! Who listens on a TCP port, as this host's `/proc` tells it: the listening socket's inode from
//! `/proc/net/tcp` and `/proc/net/tcp6`, then the process that holds that inode open.
//!
//! A server cell is ready when its port answers. If the port is held by some other process (a
//! server of another run that was handed the same port, something left over from an earlier job),
//! the answer is that process's, and every verdict built on it would be wrong. This is how the
//! runner tells the two apart before it believes a port.

use super::procfs::{self, CELL_TOKEN_VAR, Selector};
use std::fs;

/// Who holds a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A process of the cell listens on it.
    Cell,
    /// A process that cannot be the cell's server listens on it.
    Foreign {
        pid: i32,
        /// Its name, as in `/proc/<pid>/comm`.
        command: String,
        /// Why it cannot be the cell's.
        why: &'static str,
    },
    /// This host cannot tell: no listener is visible in this network namespace (the server lives
    /// in a container or on another node), its holder cannot be read (another user's process),
    /// or the holder is a process outside the cell that started after it (a container runtime's
    /// port forwarder, started on the cell's behalf). The answer is taken on trust.
    Unknown,
}

/// Who listens on `port` (any local address), judged against the cell `selector` describes.
///
/// Only a holder that is known not to be the cell's is called foreign: one that carries another
/// cell's token, or one that was already running when the cell started. Cheap when the cell holds
/// the port (only its own processes' files are read); a foreign holder costs one pass over every
/// process's open files.
pub fn holder(port: u16, selector: &Selector) -> Holder {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return Holder::Unknown;
    }
    if procfs::find_alive(selector)
        .iter()
        .any(|p| holds_any(p.pid, &inodes))
    {
        return Holder::Cell;
    }
    for pid in procfs::all_pids() {
        if !holds_any(pid, &inodes) {
            continue;
        }
        let Some(info) = procfs::read_stat(pid) else {
            continue;
        };
        let command = fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim_end().to_owned())
            .unwrap_or_default();
        let why = if procfs::environ_value(pid, CELL_TOKEN_VAR).is_some() {
            // Not found by the selector, so the token is not this cell's.
            "it belongs to another gpucompat cell"
        } else if selector
            .started_since
            .is_some_and(|since| info.start_ticks < since)
        {
            "it was already running when the cell started"
        } else {
            return Holder::Unknown;
        };
        return Holder::Foreign { pid, command, why };
    }
    Holder::Unknown
}

/// Inodes of the sockets listening on `port`, over IPv4 and IPv6.
fn listening_inodes(port: u16) -> Vec<u64> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| fs::read_to_string(table).ok())
        .flat_map(|table| parse_listeners(&table, port))
        .collect()
}

/// The inodes of `LISTEN` sockets on `port` in one `/proc/net/tcp`-style table (proc(5)): after
/// a header line, `sl local_address rem_address st ... uid timeout inode`, addresses as
/// `HEXADDR:HEXPORT`, state `0A` for listening.
fn parse_listeners(table: &str, port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (_, local_port) = fields.get(1)?.rsplit_once(':')?;
            let listening = *fields.get(3)? == LISTEN;
            let inode: u64 = fields.get(9)?.parse().ok()?;
            (listening && inode != 0 && u16::from_str_radix(local_port, 16).ok()? == port)
                .then_some(inode)
        })
        .collect()
}

/// Whether `pid` holds one of these sockets open (`/proc/<pid>/fd/N -> socket:[INODE]`).
fn holds_any(pid: i32, inodes: &[u64]) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok).any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| {
            target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|inode| inodes.contains(&inode))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};

    #[test]
    fn parses_listening_sockets_of_both_families() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 424242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 515151 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(parse_listeners(tcp, 8080), vec![424242]);
        assert_eq!(parse_listeners(tcp, 22), vec![777]);
        assert!(parse_listeners(tcp, 50000).is_empty(), "not listening");
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 99 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(parse_listeners(tcp6, 8080), vec![99]);
        assert!(parse_listeners("garbage\nmore garbage here", 8080).is_empty());
    }

    /// A Python process in its own process group listening on a free loopback port.
    fn listener(env: &[(&str, &str)]) -> (Child, u16) {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import socket, time\n\
                 s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
                 print(s.getsockname()[1], flush=True)\n\
                 time.sleep(60)",
            ])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("port line");
        let port = line.trim().parse().expect("a port");
        (child, port)
    }

    #[test]
    fn tells_the_cells_own_listener_from_older_and_unrelated_ones() {
        let (mut child, port) = listener(&[]);
        let pid = i32::try_from(child.id()).expect("pid");
        let own = Selector::cell(pid, "token-of-this-cell");
        let later_cell = Selector {
            pgid: Some(-5),
            env_marker: None,
            started_since: Some(u64::MAX),
        };
        let earlier_cell = Selector {
            started_since: Some(0),
            ..later_cell.clone()
        };
        let seen = (
            holder(port, &own),
            holder(port, &later_cell),
            holder(port, &earlier_cell),
        );
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(seen.0, Holder::Cell);
        assert!(
            matches!(&seen.1, Holder::Foreign { pid: p, why, .. } if *p == pid && why.contains("already running")),
            "{:?}",
            seen.1
        );
        assert_eq!(
            seen.2,
            Holder::Unknown,
            "younger and not the cell's: trusted"
        );
    }

    #[test]
    fn another_cells_listener_is_foreign_whatever_its_age() {
        let (mut child, port) = listener(&[(CELL_TOKEN_VAR, "run.other-cell.1")]);
        let pid = i32::try_from(child.id()).expect("pid");
        let seen = holder(
            port,
            &Selector {
                pgid: Some(-5),
                env_marker: Some(format!("{CELL_TOKEN_VAR}=run.this-cell.1").into_bytes()),
                started_since: Some(0),
            },
        );
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            matches!(&seen, Holder::Foreign { pid: p, command, why } if *p == pid && command.starts_with("python") && why.contains("another gpucompat cell")),
            "{seen:?}"
        );
    }

    #[test]
    fn a_port_nobody_listens_on_is_unknown() {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .expect("probe")
            .port();
        let anyone = Selector {
            pgid: None,
            env_marker: None,
            started_since: None,
        };
        assert_eq!(holder(port, &anyone), Holder::Unknown);
    }
}
