//! Who listens on a TCP port, as this host's `/proc` tells it: the listening socket's inode from
//! `/proc/net/tcp` and `/proc/net/tcp6`, then the process that holds that inode open.
//!
//! A server cell is ready when its port answers. If the port is held by another cell's server (of
//! a run that was handed the same port), the answer is that server's, and every verdict built on it
//! would be wrong. Any other process outside the cell may be a port forwarder working for the cell,
//! so it is only named, never blamed: a good cell must not become an error on a guess.

use super::procfs::{self, CELL_TOKEN_VAR, Selector};
use ::procfs::net::{TcpNetEntry, TcpState};
use ::procfs::process::{FDTarget, Process};
use std::net::{IpAddr, Ipv4Addr};

/// Who holds a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// A process of the cell listens on it.
    Cell,
    /// Another gpucompat cell's process listens on it (it carries another cell's token): certainly
    /// not this cell's server.
    OtherCell { pid: i32, command: String },
    /// A process outside the cell listens on it. It may be a port forwarder working for the cell
    /// (a container runtime's, an ssh tunnel's), which can have started long before the cell, so
    /// it is trusted; the runner notes it in the cell's log.
    Outside {
        pid: i32,
        command: String,
        /// Whether it was already running when the cell started.
        older: bool,
    },
    /// This host cannot tell: no listener is visible in this network namespace (the server lives
    /// in a container or on another node), or a listener's holder cannot be read (another user's
    /// process). Trusted.
    Unseen,
}

/// Who listens on `127.0.0.1:port`, judged against the cell `selector` describes.
///
/// Only sockets that accept connections to 127.0.0.1 count (bound to it, to every address, or to
/// IPv6's every address), since that is where the runner connects. The cell wins if it holds any
/// of them; otherwise every one of them must have a holder that can be read, or nothing is
/// claimed. Cheap when the cell holds the port (only its own processes' files are read); otherwise
/// one pass over every process's open files.
pub fn holder(port: u16, selector: &Selector) -> Holder {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return Holder::Unseen;
    }
    if procfs::find_alive(selector)
        .iter()
        .any(|p| holds_any(p.pid, &inodes))
    {
        return Holder::Cell;
    }
    // Every process holding one of the sockets, with the ones it holds.
    let holders: Vec<(i32, Vec<u64>)> = procfs::all_pids()
        .into_iter()
        .map(|pid| (pid, held(pid, &inodes)))
        .filter(|(_, held)| !held.is_empty())
        .collect();
    if inodes
        .iter()
        .any(|inode| !holders.iter().any(|(_, held)| held.contains(inode)))
    {
        return Holder::Unseen;
    }
    let described: Vec<Holder> = holders
        .iter()
        .filter_map(|&(pid, _)| {
            let info = procfs::read_stat(pid)?;
            let command = procfs::command_name(pid).unwrap_or_default();
            // Not found by the selector, so a cell token it carries is another cell's.
            Some(if procfs::environ_value(pid, CELL_TOKEN_VAR).is_some() {
                Holder::OtherCell { pid, command }
            } else {
                Holder::Outside {
                    pid,
                    command,
                    older: selector
                        .started_since
                        .is_some_and(|since| info.start_ticks < since),
                }
            })
        })
        .collect();
    // Another cell's listener on the port is proof enough; otherwise the first outside holder.
    described
        .iter()
        .find(|h| matches!(h, Holder::OtherCell { .. }))
        .or_else(|| described.first())
        .cloned()
        .unwrap_or(Holder::Unseen)
}

/// Inodes of the sockets listening on `port` that accept connections to 127.0.0.1, over IPv4
/// and IPv6.
fn listening_inodes(port: u16) -> Vec<u64> {
    [::procfs::net::tcp(), ::procfs::net::tcp6()]
        .into_iter()
        .filter_map(Result::ok)
        .flat_map(|table| listeners_in(&table, port))
        .collect()
}

/// Whether a socket bound to `address` accepts a connection to 127.0.0.1: bound to it, to every
/// IPv4 address, to every IPv6 address (dual stack), or to their IPv4-mapped forms.
fn reachable_at_loopback(address: IpAddr) -> bool {
    let v4 = match address {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) if v6.is_unspecified() => return true,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4,
            None => return false,
        },
    };
    v4 == Ipv4Addr::LOCALHOST || v4.is_unspecified()
}

/// The inodes of `LISTEN` sockets on `port` reachable at 127.0.0.1 in one socket table.
fn listeners_in(table: &[TcpNetEntry], port: u16) -> Vec<u64> {
    table
        .iter()
        .filter(|entry| {
            entry.state == TcpState::Listen
                && entry.inode != 0
                && entry.local_address.port() == port
                && reachable_at_loopback(entry.local_address.ip())
        })
        .map(|entry| entry.inode)
        .collect()
}

/// Which of these sockets `pid` holds open (`/proc/<pid>/fd/N -> socket:[INODE]`).
fn held(pid: i32, inodes: &[u64]) -> Vec<u64> {
    let Ok(fds) = Process::new(pid).and_then(|p| p.fd()) else {
        return Vec::new();
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| match fd.target {
            FDTarget::Socket(inode) if inodes.contains(&inode) => Some(inode),
            _ => None,
        })
        .collect()
}

/// Whether `pid` holds one of these sockets open.
fn holds_any(pid: i32, inodes: &[u64]) -> bool {
    !held(pid, inodes).is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};

    /// The listeners on `port` in a `/proc/net/tcp`-style table (proc(5)), parsed as the host's are.
    fn parse_listeners(table: &str, port: u16) -> Vec<u64> {
        use ::procfs::FromReadSI;
        ::procfs::net::TcpNetEntries::from_read(table.as_bytes(), ::procfs::current_system_info())
            .map(|entries| listeners_in(&entries.0, port))
            .unwrap_or_default()
    }

    #[test]
    fn parses_listening_sockets_reachable_at_loopback() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 424242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 515151 1 0000000000000000 20 4 30 10 -1
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
   3: 0200007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 888 1 0000000000000000 100 0 0 10 0
   4: 0A00000A:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 999 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(
            parse_listeners(tcp, 8080),
            vec![424242],
            "not 127.0.0.2, 10.0.0.10"
        );
        assert_eq!(parse_listeners(tcp, 22), vec![777], "0.0.0.0");
        assert!(parse_listeners(tcp, 50000).is_empty(), "not listening");
        let tcp6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 99 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 98 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 97 1 0000000000000000 100 0 0 10 0
";
        assert_eq!(
            parse_listeners(tcp6, 8080),
            vec![99, 97],
            "::, ::ffff:127.0.0.1, not ::1"
        );
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
    fn tells_the_cells_own_listener_from_outside_ones() {
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
            matches!(&seen.1, Holder::Outside { pid: p, older: true, .. } if *p == pid),
            "{:?}",
            seen.1
        );
        assert!(
            matches!(&seen.2, Holder::Outside { pid: p, older: false, .. } if *p == pid),
            "{:?}",
            seen.2
        );
    }

    #[test]
    fn another_cells_listener_is_another_cells_whatever_its_age() {
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
            matches!(&seen, Holder::OtherCell { pid: p, command } if *p == pid && command.starts_with("python")),
            "{seen:?}"
        );
    }

    #[test]
    fn a_port_nobody_listens_on_is_unseen() {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .expect("probe")
            .port();
        let anyone = Selector {
            pgid: None,
            env_marker: None,
            started_since: None,
        };
        assert_eq!(holder(port, &anyone), Holder::Unseen);
    }
}
