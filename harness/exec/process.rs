//! A cell's command: started in its own process group with the cell's environment, its stdout
//! and stderr drained concurrently into the cell's log, and torn down so that nothing is left.

use super::cgroup::CellCgroup;
use super::logsink::{LineSplitter, LogSink};
use super::procfs::{self, CELL_TOKEN_VAR, ProcInfo, RUN_TOKEN_VAR, Selector};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// How a cell's command is started.
#[derive(Debug, Clone)]
pub struct CellCommand {
    /// Shell text, run with `sh -c`.
    pub script: String,
    pub cwd: PathBuf,
    /// Variables set over the harness's own environment.
    pub env: Vec<(String, String)>,
    pub run_token: String,
    /// Unique per cell attempt; every process of the attempt inherits it.
    pub cell_token: String,
}

/// The log shared by the drain tasks and the harness's notes.
pub type SharedLog = Arc<Mutex<LogSink>>;

/// Locks the log; a panic elsewhere while holding it must not stop the cell from being recorded.
pub fn lock(log: &SharedLog) -> std::sync::MutexGuard<'_, LogSink> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A started cell command.
#[derive(Debug)]
pub struct Running {
    child: tokio::process::Child,
    pgid: i32,
    selector: Selector,
    drains: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
    /// Holds every process the cell forks, where the host allows it.
    cgroup: CellCgroup,
}

/// What teardown found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Teardown {
    /// Processes of the cell still alive when teardown began.
    pub found: usize,
    /// Processes that ignored SIGTERM for the whole grace period and got SIGKILL.
    pub killed: usize,
    /// Pids still alive after SIGKILL (stuck in the kernel, usually a GPU driver call).
    pub survivors: Vec<i32>,
    /// Of `found`, processes only the cell's cgroup found: they had left the process group and
    /// cleared their environment. Killed with the cgroup.
    pub escaped: usize,
}

/// Starts `cmd` in a new process group, with stdin closed and both output streams going to `log`.
pub fn spawn(cmd: &CellCommand, log: &SharedLog) -> io::Result<Running> {
    let cgroup = CellCgroup::make(&cmd.cell_token);
    // The shell moves itself into the cell's cgroup before it runs the script, so every process
    // of the cell is born inside (no window in which a fork escapes it).
    let script = match cgroup.enter_prefix() {
        prefix if prefix.is_empty() => cmd.script.clone(),
        prefix => format!(
            "{prefix} || echo '[gpucompat] escape detection limited: cannot enter the cell cgroup' >&2\n{}",
            cmd.script
        ),
    };
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(&script)
        .current_dir(&cmd.cwd)
        .envs(cmd.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env(RUN_TOKEN_VAR, &cmd.run_token)
        .env(CELL_TOKEN_VAR, &cmd.cell_token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // A net under the net: if this handle is dropped early the direct child still dies.
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| io::Error::other("started process has no pid"))?;
    let mut drains = Vec::new();
    if let Some(out) = child.stdout.take() {
        drains.push(tokio::spawn(drain(out, Arc::clone(log))));
    }
    if let Some(err) = child.stderr.take() {
        drains.push(tokio::spawn(drain(err, Arc::clone(log))));
    }
    Ok(Running {
        child,
        pgid,
        selector: Selector::cell(pgid, &cmd.cell_token),
        drains,
        status: None,
        cgroup,
    })
}

/// Copies one output stream into the log, line by line, until it closes.
async fn drain(mut stream: impl AsyncRead + Unpin, log: SharedLog) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut splitter = LineSplitter::default();
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut sink = lock(&log);
                sink.received(n);
                splitter.feed(&buf[..n], |line| sink.line(line));
                sink.flush();
            }
        }
    }
    let mut sink = lock(&log);
    splitter.finish(|line| sink.line(line));
    sink.flush();
}

impl Running {
    /// Process group id (equal to the main process's pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// Why teardown can find only the processes that kept the group or the token (no cgroup).
    pub fn escape_detection_limited(&self) -> Option<&str> {
        match &self.cgroup {
            CellCgroup::Made(_) => None,
            CellCgroup::Limited(why) => Some(why),
        }
    }

    /// Waits for the main process to exit. Cancel-safe: use it in `select!`.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.status = Some(status);
        Ok(status)
    }

    /// Exit status if the main process has already exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.status
    }

    /// Reaps the main process if it has exited (the rest are reaped by their parents or init).
    fn reap_main(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            self.status = Some(status);
        }
    }

    /// Polls until none of the cell's processes is alive or `limit` passes; returns those left.
    /// With `resend`, what each poll finds gets that signal again, so a process forked meanwhile
    /// (even out of the group) gets it too. (TERM is not sent twice: to many servers a second
    /// TERM means "skip the graceful shutdown".)
    async fn wait_gone(&mut self, limit: Duration, resend: Option<Signal>) -> Vec<ProcInfo> {
        let deadline = Instant::now() + limit;
        loop {
            sleep(Duration::from_millis(10)).await;
            self.reap_main();
            let left = procfs::find_alive(&self.selector);
            if left.is_empty() || Instant::now() >= deadline {
                return left;
            }
            if let Some(signal) = resend {
                signal_all(&left, self.pgid, signal);
            }
        }
    }

    /// TERM to every process of the cell, `grace` to exit, KILL to the rest, then a check that
    /// none is left. Waits for the output streams to close so the log is complete.
    pub async fn teardown(&mut self, grace: Duration) -> Teardown {
        self.teardown_unless_hurried(grace, None).await
    }

    /// [`Running::teardown`], with the grace cut short the moment `hurry` turns true (a second
    /// Ctrl-C: the user wants the harness gone now, so whatever is left gets KILL at once).
    pub async fn teardown_unless_hurried(
        &mut self,
        grace: Duration,
        hurry: Option<watch::Receiver<bool>>,
    ) -> Teardown {
        // Each look at the cell's processes is a scan of /proc, the main cost of a short cell:
        // every scan's result is used, and a cell with nothing left costs one scan.
        let alive = procfs::find_alive(&self.selector);
        let escaped = self
            .cgroup
            .pids()
            .into_iter()
            .filter(|pid| alive.iter().all(|p| p.pid != *pid))
            .count();
        let mut report = Teardown {
            found: alive.len() + escaped,
            escaped,
            ..Teardown::default()
        };
        if alive.is_empty() {
            self.reap_main();
        } else {
            signal_all(&alive, self.pgid, Signal::SIGTERM);
            let left = match hurry {
                Some(mut hurry) => {
                    let hurried = async {
                        if hurry.wait_for(|h| *h).await.is_err() {
                            std::future::pending::<()>().await;
                        }
                    };
                    tokio::select! {
                        left = self.wait_gone(grace, None) => left,
                        () = hurried => procfs::find_alive(&self.selector),
                    }
                }
                None => self.wait_gone(grace, None).await,
            };
            if !left.is_empty() {
                report.killed = left.len();
                signal_all(&left, self.pgid, Signal::SIGKILL);
                report.survivors = self
                    .wait_gone(Duration::from_secs(5), Some(Signal::SIGKILL))
                    .await
                    .iter()
                    .map(|p| p.pid)
                    .collect();
            }
        }
        // Whatever is left in the cgroup (an escaped daemon, which the scans cannot see) goes now,
        // before the drains are awaited: it may hold the output pipes.
        self.cgroup.kill_and_remove(Duration::from_secs(5)).await;
        if self.status.is_none() {
            if let Ok(Ok(status)) =
                tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await
            {
                self.status = Some(status);
            }
        }
        // Every writer of the pipes is gone now, so the drains end promptly; the timeout only
        // guards against a writer stuck in the kernel.
        for drain in self.drains.drain(..) {
            let abort = drain.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), drain)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        report
    }
}

/// Sends `signal` to the cell's group and to each of `procs` outside the group.
fn signal_all(procs: &[ProcInfo], pgid: i32, signal: Signal) {
    let _ = killpg(Pid::from_raw(pgid), signal);
    for info in procs {
        if info.pgid != pgid {
            let _ = kill(Pid::from_raw(info.pid), signal);
        }
    }
}

/// Exit code and signal of a finished process.
pub fn exit_of(status: ExitStatus) -> crate::record::Exit {
    crate::record::Exit {
        code: status.code(),
        signal: status.signal(),
    }
}
