//! Hang forensics: when the watchdog calls a hang (no progress, or the deadline), where every
//! process of the cell is stuck, captured before teardown destroys the evidence (docs/hang.md).
//!
//! A capture, within a bounded budget (`GPUCOMPAT_HANG_CAPTURE`, default 20 s; teardown never
//! waits longer), takes:
//! - every process of the cell (process group and cell token, as teardown finds them): parent,
//!   command line, state, `wchan`, CPU time and whether it used CPU during the capture, threads;
//! - the Python stacks of every Python process, all threads, with `py-spy dump` (`--native`
//!   where it works); without py-spy, a `faulthandler` dump by SIGUSR1 into the cell's log, only
//!   for a process that catches SIGUSR1 (a `faulthandler.register`);
//! - `nvidia-smi`'s per-process memory and utilisation of the cell's GPUs;
//! - the lock files the cell's processes have open, their holders and waiters (`/proc/locks`).
//!
//! It is written as `<log stem>.hang.json` next to the attempt's log, summarised in the log
//! (`[gpucompat]` lines, which the classifier ignores), grouped by place ("3 processes in
//! `filelock._api:BaseFileLock.acquire` <- ..."), and decides the hang's signature on its
//! evidence ([`verdict`]).
//!
//! - [`procs`]: `/proc` reads (command line, `wchan`, caught signals, open lock files).
//! - [`stacks`]: py-spy's JSON, frame names, grouping.
//! - [`verdict`]: collective, slow compile or the watchdog's verdict, and why.
//! - [`gpu`]: `nvidia-smi` per process.

pub mod gpu;
pub mod procs;
pub mod stacks;
pub mod text;
pub mod verdict;

use crate::exec::procfs::{self, Selector};
use crate::exec::pyspy::{self, PySpy};
use crate::record::HangSummary;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use verdict::{DecidedBy, HangVerdict};

/// The shape of `hang.json`; bumped when a field changes meaning (adding one does not).
pub const FORMAT_VERSION: u32 = 1;

/// The default capture budget.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(20);

/// The CPU samples that tell a busy process from an idle one are at least this far apart.
const MIN_SAMPLE_GAP: Duration = Duration::from_millis(300);

/// What made the watchdog call the hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    NoProgress,
    Deadline,
}

/// One Python frame (or a native one, with `--native`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// `module:function` for Python frames, the symbol for native ones.
    pub label: String,
    pub file: String,
    pub line: u32,
    #[serde(default)]
    pub native: bool,
}

/// One thread's stack, top frame first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStack {
    pub thread: Option<String>,
    pub tid: Option<i64>,
    /// py-spy's guess that the thread was running (not idle) when sampled.
    pub active: Option<bool>,
    pub frames: Vec<Frame>,
}

/// One process of the cell at the capture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcSnapshot {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    pub comm: String,
    pub cmdline: String,
    /// `R`, `S`, `D`, `Z`, ... as in `ps`.
    pub state: String,
    /// The kernel function a sleeping process waits in (`futex_wait_queue`, `pipe_read`, ...).
    pub wchan: Option<String>,
    /// CPU time used so far (own and reaped children's).
    pub cpu_s: f64,
    /// CPU time used between the capture's two samples.
    pub cpu_during_capture_s: f64,
    /// Time spent runnable but waiting for a CPU between the two samples (a crowded host).
    #[serde(default)]
    pub waited_during_capture_s: f64,
    /// Used a noticeable share of a CPU during the capture, or waited for one most of the time.
    pub busy: bool,
    pub threads: u32,
    pub python: bool,
    /// Catches SIGUSR1 (`SigCgt`): a `faulthandler.register(SIGUSR1)` may dump its stacks.
    pub catches_sigusr1: bool,
    /// `py-spy`, `py-spy --native`, or `faulthandler (in the log)`.
    pub stack_source: Option<String>,
    /// Why a Python process has no stack.
    pub stack_note: Option<String>,
    pub stacks: Vec<ThreadStack>,
}

impl ProcSnapshot {
    /// A snapshot with nothing known but the pid (tests, and processes gone mid-capture).
    pub fn bare(pid: i32) -> ProcSnapshot {
        ProcSnapshot {
            pid,
            ppid: 0,
            pgid: 0,
            comm: String::new(),
            cmdline: String::new(),
            state: "S".to_owned(),
            wchan: None,
            cpu_s: 0.0,
            cpu_during_capture_s: 0.0,
            waited_during_capture_s: 0.0,
            busy: false,
            threads: 1,
            python: false,
            catches_sigusr1: false,
            stack_source: None,
            stack_note: None,
            stacks: Vec::new(),
        }
    }
}

/// Processes that share a place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// "`a` <- `b`" (top frames), or "`ninja` (busy)" for a process without a Python stack.
    pub place: String,
    /// The top frames (empty for a process without a Python stack).
    pub frames: Vec<String>,
    pub python: bool,
    pub pids: Vec<i32>,
}

/// A lock file the cell's processes have open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockFile {
    pub path: String,
    /// `FLOCK`, `POSIX`, `OFDLCK`; `None` when nobody holds it.
    pub kind: Option<String>,
    pub mode: Option<String>,
    pub holder: Option<i32>,
    /// Blocked in the kernel on it.
    pub waiters: Vec<i32>,
    /// Cell processes that have it open.
    pub openers: Vec<i32>,
}

/// `hang.json`: everything one capture saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HangCapture {
    pub format_version: u32,
    pub trigger: Trigger,
    /// Seconds the capture took, and its budget.
    pub took_s: f64,
    pub budget_s: f64,
    /// False when the budget ran out before every part was taken.
    pub complete: bool,
    /// Which py-spy read the stacks, or why none did.
    pub stacks_by: String,
    pub processes: Vec<ProcSnapshot>,
    pub groups: Vec<Group>,
    pub locks: Vec<LockFile>,
    pub gpu: gpu::GpuCapture,
    /// The signature the capture supports and the evidence (filled by the caller, who knows the
    /// watchdog's verdict).
    pub verdict: Option<HangVerdict>,
    pub notes: Vec<String>,
}

impl HangCapture {
    pub fn empty(trigger: Trigger) -> HangCapture {
        HangCapture {
            format_version: FORMAT_VERSION,
            trigger,
            took_s: 0.0,
            budget_s: 0.0,
            complete: true,
            stacks_by: String::new(),
            processes: Vec::new(),
            groups: Vec::new(),
            locks: Vec::new(),
            gpu: gpu::GpuCapture::default(),
            verdict: None,
            notes: Vec::new(),
        }
    }

    /// The record's short `hang` summary; `capture` is `hang.json`'s path in the run folder.
    pub fn summary(&self, capture: &str) -> HangSummary {
        let dominant = self
            .groups
            .iter()
            .find(|g| g.python)
            .or_else(|| self.groups.first());
        HangSummary {
            summary: dominant
                .map(stacks::describe)
                .unwrap_or_else(|| "no process left".to_owned()),
            frames: dominant.map(|g| g.frames.clone()).unwrap_or_default(),
            processes: u32::try_from(self.processes.len()).unwrap_or(u32::MAX),
            decided_by: self
                .verdict
                .as_ref()
                .map(|v| <&str>::from(v.decided_by).to_owned()),
            evidence: self.verdict.as_ref().map(|v| v.evidence.clone()),
            capture: capture.to_owned(),
        }
    }
}

/// What to capture and where the tools come from.
#[derive(Debug, Clone)]
pub struct Request {
    pub selector: Selector,
    pub trigger: Trigger,
    pub budget: Duration,
    /// The cell's GPUs (`nvidia-smi` indices); empty: no GPU part.
    pub gpus: Vec<u32>,
    pub tools: pyspy::Source,
}

/// The capture budget: `GPUCOMPAT_HANG_CAPTURE` (humantime; `0` turns it off), else 20 s. An
/// unreadable value falls back to the default, and says so in the log (`Err`).
pub fn budget() -> Result<Duration, String> {
    match crate::env::var(crate::env::EnvVars::GPUCOMPAT_HANG_CAPTURE) {
        None => Ok(DEFAULT_BUDGET),
        Some(text) if text.trim() == "0" => Ok(Duration::ZERO),
        Some(text) => humantime::parse_duration(text.trim()).map_err(|err| {
            format!("GPUCOMPAT_HANG_CAPTURE={text:?} is not a duration ({err}); using 20s")
        }),
    }
}

/// `logs/<cell>.log` -> `logs/<cell>.hang.json`.
pub fn hang_path_for(log: &Path) -> PathBuf {
    let stem = log
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    log.with_file_name(format!("{stem}.hang.json"))
}

/// Takes a capture; blocking (run it on a blocking thread). Every step watches the deadline, so
/// a capture returns, with what it has, a little before its budget ends.
pub fn capture(req: &Request) -> HangCapture {
    let start = Instant::now();
    // Leave a margin for writing the result before the caller stops waiting.
    let deadline = start + req.budget.saturating_sub(req.budget / 10);
    let mut out = HangCapture::empty(req.trigger);
    out.budget_s = req.budget.as_secs_f64();
    let found = procfs::find_alive(&req.selector);
    let first = Instant::now();
    let waited: Vec<u64> = found
        .iter()
        .map(|p| procfs::runqueue_wait_ticks(p.pid).unwrap_or(0))
        .collect();
    out.processes = found.iter().map(procs::snapshot).collect();
    let pids: Vec<i32> = found.iter().map(|p| p.pid).collect();
    out.locks = procs::lock_files(
        &pids,
        &std::fs::read_to_string("/proc/locks").unwrap_or_default(),
    );
    python_stacks(req, &mut out, deadline);
    out.gpu = if req.gpus.is_empty() {
        gpu::GpuCapture::not_asked()
    } else {
        gpu::capture(
            &req.gpus,
            &pids,
            remaining(deadline).min(Duration::from_secs(5)),
        )
    };
    second_sample(&mut out, &found, &waited, first, deadline);
    out.groups = stacks::group(&out.processes);
    out.complete = Instant::now() < deadline;
    if !out.complete {
        out.notes
            .push("the budget ran out: later parts may be missing".to_owned());
    }
    out.took_s = round3(start.elapsed().as_secs_f64());
    out
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The second CPU sample, at least [`MIN_SAMPLE_GAP`] after the first, says which processes were
/// busy in between (see [`is_busy`]). `waited`: each process's time spent waiting for a CPU at the
/// first sample, in ticks.
fn second_sample(
    out: &mut HangCapture,
    first: &[procfs::ProcInfo],
    waited: &[u64],
    at: Instant,
    deadline: Instant,
) {
    let gap = MIN_SAMPLE_GAP
        .saturating_sub(at.elapsed())
        .min(remaining(deadline));
    std::thread::sleep(gap);
    let elapsed = at.elapsed().as_secs_f64().max(0.001);
    let seconds = |ticks: u64| ticks as f64 / procfs::TICKS_PER_SECOND as f64;
    for ((p, before), &waited_before) in out.processes.iter_mut().zip(first).zip(waited) {
        let Some(after) = procfs::parse_stat(
            &std::fs::read_to_string(format!("/proc/{}/stat", p.pid)).unwrap_or_default(),
        ) else {
            continue;
        };
        let used = seconds(after.cpu_ticks.saturating_sub(before.cpu_ticks));
        let waited = seconds(
            procfs::runqueue_wait_ticks(p.pid)
                .unwrap_or(0)
                .saturating_sub(waited_before),
        );
        p.cpu_during_capture_s = round3(used);
        p.waited_during_capture_s = round3(waited);
        p.busy = is_busy(used, waited, elapsed);
    }
}

/// Share of a CPU a process must have used during the capture to be busy: a tenth, higher than
/// the watchdog's bar, as a capture's sample is short (see [`procfs::is_busy`] for the rest).
const CAPTURE_CPU_RATE: f64 = 0.1;

fn is_busy(used_s: f64, waited_s: f64, elapsed_s: f64) -> bool {
    procfs::is_busy(used_s / elapsed_s, waited_s / elapsed_s, CAPTURE_CPU_RATE)
}

/// py-spy over every Python process; without it, SIGUSR1 to those that catch it.
fn python_stacks(req: &Request, out: &mut HangCapture, deadline: Instant) {
    if !out.processes.iter().any(|p| p.python) {
        out.stacks_by = "no Python process".to_owned();
        return;
    }
    let tool = pyspy::locate(&req.tools, deadline);
    match &tool {
        Ok(t) => {
            out.stacks_by = format!(
                "{}{}",
                t.version,
                if t.installed {
                    " (installed into the tool cache for this capture)"
                } else {
                    ""
                }
            );
        }
        Err(why) => out.stacks_by = format!("py-spy unavailable: {why}"),
    }
    let python: Vec<&mut ProcSnapshot> = out.processes.iter_mut().filter(|p| p.python).collect();
    match &tool {
        // Dumps run side by side, a few at a time: each pauses only its own process, and eight
        // ranks of a torch job take a while each with native frames.
        Ok(t) => {
            let mut python = python;
            for chunk in python.chunks_mut(PARALLEL_DUMPS) {
                std::thread::scope(|scope| {
                    for p in chunk.iter_mut() {
                        scope.spawn(|| dump_one(t, p, deadline));
                    }
                });
            }
        }
        Err(_) => python.into_iter().for_each(faulthandler),
    }
}

/// py-spy dumps run at once.
const PARALLEL_DUMPS: usize = 8;

fn dump_one(tool: &PySpy, p: &mut ProcSnapshot, deadline: Instant) {
    let mut last_err = String::new();
    for native in [true, false] {
        let left = remaining(deadline).min(Duration::from_secs(8));
        if left.is_zero() {
            p.stack_note = Some("no budget left for its stack".to_owned());
            return;
        }
        match pyspy::dump(tool, p.pid, native, left)
            .map_err(|e| e.to_string())
            .and_then(|json| stacks::parse_dump(&json).map_err(|e| e.to_string()))
        {
            Ok(threads) => {
                p.stacks = threads;
                p.stack_source = Some(if native { "py-spy --native" } else { "py-spy" }.to_owned());
                return;
            }
            Err(err) => last_err = err,
        }
    }
    p.stack_note = Some(format!(
        "py-spy could not read it: {}",
        first_line(&last_err)
    ));
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(text)
        .trim()
}

/// Asks a process that catches SIGUSR1 (`faulthandler.register(signal.SIGUSR1)`) for its
/// stacks; they land in the cell's log. A process that does not catch it is left alone: SIGUSR1's
/// default action would kill it.
fn faulthandler(p: &mut ProcSnapshot) {
    if !p.catches_sigusr1 {
        p.stack_note =
            Some("no py-spy, and it registered no SIGUSR1 handler (faulthandler)".to_owned());
        return;
    }
    let sent = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.pid),
        nix::sys::signal::Signal::SIGUSR1,
    );
    match sent {
        Ok(()) => {
            p.stack_source = Some("faulthandler (SIGUSR1; the stacks are in the log)".to_owned())
        }
        Err(err) => p.stack_note = Some(format!("cannot send SIGUSR1: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capture_file_sits_next_to_the_log() {
        assert_eq!(
            hang_path_for(Path::new("run/logs/c1.attempt2.log")),
            PathBuf::from("run/logs/c1.attempt2.hang.json")
        );
    }

    #[test]
    fn a_starved_spinner_is_busy_and_a_poller_that_waits_at_wake_ups_is_not() {
        // A spinner alone on a CPU; one given a twentieth of a CPU on a crowded host, waiting
        // for it the rest of the time (less a pause for its stack dump).
        assert!(is_busy(0.3, 0.0, 0.3));
        assert!(is_busy(0.015, 0.22, 0.3));
        // Blocked on a lock; polling one, its wake-ups queued on a crowded host.
        assert!(!is_busy(0.0, 0.0, 0.3));
        assert!(!is_busy(0.0, 0.02, 0.3));
        assert!(!is_busy(0.01, 0.1, 0.3));
    }
}
