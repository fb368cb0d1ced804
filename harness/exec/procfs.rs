//! What `/proc` says about a cell's processes.
//!
//! A cell's processes are those in its process group plus those whose environment carries the
//! cell's token: a server that calls `setsid` for its workers leaves the group but keeps the
//! environment it inherited, so the token still finds it.
//!
//! A scan reads `/proc/<pid>/stat` of every process of the host; the environment (the costly read:
//! the kernel walks the other process's memory) only of processes that started no earlier than
//! the cell, since no older one can be its descendant. On a host with a thousand processes that
//! is the difference between a millisecond and tens of milliseconds per scan.

use ::procfs::FromRead;
use ::procfs::process::{Process, Stat};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

/// The environment variable every process of a run carries (value: the run token).
pub const RUN_TOKEN_VAR: &str = crate::env::EnvVars::GPUCOMPAT_RUN_TOKEN;
/// The environment variable every process of one cell attempt carries.
pub const CELL_TOKEN_VAR: &str = crate::env::EnvVars::GPUCOMPAT_CELL_TOKEN;

/// One live process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// User + system CPU time, own and of waited-for children, in clock ticks.
    pub cpu_ticks: u64,
    /// `R`, `S`, `D`, `Z`, ... as in `ps`.
    pub state: char,
    /// When the process started, in clock ticks since boot.
    pub start_ticks: u64,
}

impl ProcInfo {
    /// A zombie has exited; only its parent's `wait` is missing.
    pub fn is_alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Which processes belong to a cell.
#[derive(Debug, Clone)]
pub struct Selector {
    /// Process group of the cell's main process.
    pub pgid: Option<i32>,
    /// `NAME=value` that must appear in the process's environment.
    pub env_marker: Option<Vec<u8>>,
    /// Only processes started at or after this (clock ticks since boot) can match by
    /// environment; `None` looks at every process.
    pub started_since: Option<u64>,
}

impl Selector {
    /// The processes of a cell whose main process (and group leader) is `pgid`, just started.
    pub fn cell(pgid: i32, cell_token: &str) -> Self {
        Selector {
            pgid: Some(pgid),
            env_marker: Some(format!("{CELL_TOKEN_VAR}={cell_token}").into_bytes()),
            started_since: read_stat(pgid).map(|info| info.start_ticks),
        }
    }

    /// The processes of a run, as the reaper sees them: it starts before any cell of the run,
    /// so nothing older than the calling process belongs to the run.
    pub fn run(run_token: &str) -> Self {
        let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        Selector {
            pgid: None,
            env_marker: Some(format!("{RUN_TOKEN_VAR}={run_token}").into_bytes()),
            started_since: read_stat(me).map(|info| info.start_ticks),
        }
    }
}

/// Parses a `/proc/<pid>/stat` line (the `procfs` crate counts fields from the last `)`, since the
/// command name may hold spaces and parentheses).
pub fn parse_stat(text: &str) -> Option<ProcInfo> {
    Stat::from_read(text.as_bytes())
        .ok()
        .map(|stat| info(&stat))
}

fn info(stat: &Stat) -> ProcInfo {
    // Children's times are signed in the kernel's interface but never negative in practice.
    let children = |ticks: i64| u64::try_from(ticks).unwrap_or(0);
    ProcInfo {
        pid: stat.pid,
        ppid: stat.ppid,
        pgid: stat.pgrp,
        cpu_ticks: stat.utime + stat.stime + children(stat.cutime) + children(stat.cstime),
        state: stat.state,
        start_ticks: stat.starttime,
    }
}

/// This runs for every process of the host on every scan: one `stat` read each.
pub(super) fn read_stat(pid: i32) -> Option<ProcInfo> {
    Process::new(pid).ok()?.stat().ok().map(|stat| info(&stat))
}

/// The process's command name (`/proc/<pid>/comm`, at most 15 bytes), if readable.
pub(super) fn command_name(pid: i32) -> Option<String> {
    Some(Process::new(pid).ok()?.stat().ok()?.comm)
}

/// The value of `name` in the environment `pid` started with, if it is there and readable.
pub(super) fn environ_value(pid: i32, name: &str) -> Option<Vec<u8>> {
    let mut environ = Process::new(pid).ok()?.environ().ok()?;
    environ
        .remove(OsStr::new(name))
        .map(|value| value.into_vec())
}

/// Whether the environment of `pid` holds `marker` (`NAME=value`) exactly.
fn environ_has(pid: i32, marker: &[u8]) -> bool {
    let Some(eq) = marker.iter().position(|b| *b == b'=') else {
        return false;
    };
    let (name, value) = (&marker[..eq], &marker[eq + 1..]);
    std::str::from_utf8(name)
        .ok()
        .and_then(|name| environ_value(pid, name))
        .is_some_and(|found| found == value)
}

/// Every process id on the host.
pub(super) fn all_pids() -> Vec<i32> {
    ::procfs::process::all_processes()
        .map(|procs| procs.filter_map(|p| Some(p.ok()?.pid())).collect())
        .unwrap_or_default()
}

/// Every process the selector matches, zombies included, except this one.
pub fn find(selector: &Selector) -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .filter_map(read_stat)
        .filter(|info| {
            selector.pgid == Some(info.pgid)
                || (selector
                    .started_since
                    .is_none_or(|since| info.start_ticks >= since)
                    && selector
                        .env_marker
                        .as_deref()
                        .is_some_and(|marker| environ_has(info.pid, marker)))
        })
        .collect()
}

/// Live (non-zombie) processes the selector matches.
pub fn find_alive(selector: &Selector) -> Vec<ProcInfo> {
    find(selector)
        .into_iter()
        .filter(ProcInfo::is_alive)
        .collect()
}

/// Time the process's threads spent runnable but waiting for a CPU, summed, in clock ticks
/// (from each `/proc/<pid>/task/<tid>/schedstat`; the main thread's alone where the threads
/// cannot be listed, `None` where the kernel keeps no schedstat). On a crowded machine a process
/// that wants the CPU and does not get it uses no CPU time, yet it is not idle; and the thread
/// that wants it is often not the main one (an engine's main thread sleeps on a queue while a
/// worker thread compiles), so every thread counts, as every thread's CPU time does.
pub fn runqueue_wait_ticks(pid: i32) -> Option<u64> {
    let waited_ns: u64 = thread_waits(pid)?.iter().map(|(_, ns)| ns).sum();
    Some(waited_ns / NS_PER_TICK)
}

/// Each thread's time runnable but waiting for a CPU, in nanoseconds, by thread id (see
/// [`runqueue_wait_ticks`]). A thread that exits takes its count with it, so a sum over the
/// threads can fall between two reads: a meter compares thread by thread.
fn thread_waits(pid: i32) -> Option<Vec<(i32, u64)>> {
    let process = Process::new(pid).ok()?;
    match process.tasks() {
        Ok(tasks) => Some(
            tasks
                .flatten()
                .filter_map(|task| Some((task.tid, task.schedstat().ok()?.run_delay)))
                .collect(),
        ),
        Err(_) => Some(vec![(pid, process.schedstat().ok()?.run_delay)]),
    }
}

const NS_PER_TICK: u64 = 1_000_000_000 / TICKS_PER_SECOND;

/// CPU ticks per second (`getconf CLK_TCK`); 100 on every Linux the project runs on.
pub const TICKS_PER_SECOND: u64 = 100;

/// CPU time consumed by a set of processes between two samples: the sum of each process's
/// increase (a process that exits between samples stops counting, it does not subtract), and
/// all the time of every process that appeared. A process is its pid and its start time: one
/// that took the pid of a process gone since the last sample is new (a compile's many short
/// processes wrap the pids of a host with a small `pid_max` between two SLOW lines).
///
/// Counting a new process's whole time is right for a cell's processes, which all started with
/// the cell: so the first sample needs no baseline taken at the cell's start, and measures
/// everything since then however late it comes.
///
/// Waiting for a CPU is counted thread by thread, as the kernel keeps it: a thread that exits
/// between samples takes its count with it (the process's CPU time keeps a dead thread's, its
/// wait does not), so a sum over the threads could fall and hide the other threads' waits; a
/// thread seen for the first time counts all its wait, as a new process does.
#[derive(Debug, Default)]
pub struct CpuMeter {
    /// Each process's (pid, start ticks) to its CPU ticks and its threads' wait (thread id to
    /// nanoseconds) at the previous sample.
    last: HashMap<(i32, u64), (u64, HashMap<i32, u64>)>,
    /// Nanoseconds of waiting counted so far, and how much of it was reported in whole ticks:
    /// the remainder carries over, so that frequent samples do not round each share away.
    waited_ns: u64,
    waited_ticks: u64,
}

impl CpuMeter {
    /// CPU used, and time spent waiting for a CPU, since the previous call.
    pub fn sample(&mut self, procs: &[ProcInfo]) -> Demand {
        self.tally(procs.iter().map(|p| {
            let waits = thread_waits(p.pid).unwrap_or_default();
            ((p.pid, p.start_ticks), p.cpu_ticks, waits)
        }))
    }

    /// [`CpuMeter::sample`] over ((pid, start ticks), CPU ticks, (thread id, wait ns) of each
    /// thread) readings.
    fn tally(
        &mut self,
        readings: impl Iterator<Item = ((i32, u64), u64, Vec<(i32, u64)>)>,
    ) -> Demand {
        let mut used_total = 0;
        let mut next = HashMap::new();
        for (process, used, waits) in readings {
            let before = self.last.get(&process);
            used_total += used.saturating_sub(before.map_or(0, |(used, _)| *used));
            let threads_before = before.map(|(_, threads)| threads);
            for &(tid, waited) in &waits {
                // A count below the last one is another thread that took the id: all of it is new.
                let waited_before = threads_before
                    .and_then(|threads| threads.get(&tid))
                    .copied()
                    .filter(|before| *before <= waited)
                    .unwrap_or(0);
                self.waited_ns += waited - waited_before;
            }
            next.insert(process, (used, waits.into_iter().collect()));
        }
        self.last = next;
        let ticks = self.waited_ns / NS_PER_TICK;
        let demand = Demand {
            used: used_total,
            waited: ticks - self.waited_ticks,
        };
        self.waited_ticks = ticks;
        demand
    }
}

/// What a set of processes asked of the CPUs over some span, in clock ticks: time on a CPU, and
/// time runnable but waiting for one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    pub used: u64,
    pub waited: u64,
}

impl std::ops::Add for Demand {
    type Output = Demand;
    fn add(self, other: Demand) -> Demand {
        Demand {
            used: self.used + other.used,
            waited: self.waited + other.waited,
        }
    }
}

impl std::ops::Sub for Demand {
    type Output = Demand;
    fn sub(self, other: Demand) -> Demand {
        Demand {
            used: self.used.saturating_sub(other.used),
            waited: self.waited.saturating_sub(other.waited),
        }
    }
}

impl Demand {
    /// Shares of one core over `span`: (used, waited).
    pub fn shares(self, span: Duration) -> (f64, f64) {
        let ticks = span.as_secs_f64().max(0.001) * TICKS_PER_SECOND as f64;
        (self.used as f64 / ticks, self.waited as f64 / ticks)
    }

    /// See [`is_busy`].
    pub fn is_busy(self, span: Duration, cpu_rate: f64) -> bool {
        let (used, waited) = self.shares(span);
        is_busy(used, waited, cpu_rate)
    }
}

/// Share of a span that processes must have been runnable (on a CPU or waiting for one) to be
/// busy whatever CPU they got.
pub const RUNNABLE_SHARE: f64 = 0.5;

/// The one rule for busy, used by the watchdog, the SLOW lines and the hang capture: used at
/// least `cpu_rate` of one core, or was runnable at least [`RUNNABLE_SHARE`] of the time (shares
/// of one core). On a crowded host a spinning process gets a sliver of a CPU and waits for the
/// rest: it is busy. A process woken now and then (a server answering the harness's health
/// checks, a lock poller) waits a little at each wake-up on a crowded host, which is no reason to
/// call it busy: hence the higher bar for waiting than for running.
pub fn is_busy(used_share: f64, waited_share: f64, cpu_rate: f64) -> bool {
    used_share >= cpu_rate || used_share + waited_share >= RUNNABLE_SHARE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_names() {
        // All 52 fields, as a 6.x kernel writes them.
        let line = "4242 (python3 (worker) 1) S 4000 4100 4100 0 -1 4194560 100 0 0 0 \
                    250 30 7 3 20 0 4 0 98765 3133440 362 18446744073709551615 \
                    94161103368192 94161103388073 140725070701536 0 0 0 0 0 0 0 0 0 17 0 0 0 \
                    0 0 0 94161103404080 94161103405696 94161510965248 140725070707425 \
                    140725070707445 140725070707445 140725070708715 0";
        let info = parse_stat(line).expect("parse");
        assert_eq!(info.pid, 4242);
        assert_eq!(info.ppid, 4000);
        assert_eq!(info.pgid, 4100);
        assert_eq!(info.state, 'S');
        assert_eq!(info.cpu_ticks, 250 + 30 + 7 + 3);
        assert_eq!(info.start_ticks, 98765);
    }

    #[test]
    fn finds_itself_by_nothing_and_a_child_by_group() {
        // This process is excluded; a selector that matches nothing finds nothing.
        let none = Selector {
            pgid: Some(-5),
            env_marker: None,
            started_since: None,
        };
        assert!(find(&none).is_empty());
    }

    #[test]
    fn finds_by_environment_only_processes_no_older_than_the_selector() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("GPUCOMPAT_PROCFS_TEST", "marked")
            .spawn()
            .expect("spawn sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        // Right after spawning, the child may still be inside exec, with no environment yet.
        let marker = b"GPUCOMPAT_PROCFS_TEST=marked";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !environ_has(pid, marker) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let start = read_stat(pid).expect("stat of the child").start_ticks;
        let found = |since| {
            find(&Selector {
                pgid: None,
                env_marker: Some(marker.to_vec()),
                started_since: since,
            })
            .iter()
            .any(|p| p.pid == pid)
        };
        let results = (found(None), found(Some(start)), found(Some(start + 1)));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(results, (true, true, false));
    }

    #[test]
    fn cpu_meter_counts_increases_and_new_processes() {
        let mut meter = CpuMeter::default();
        let d = |used, waited| Demand { used, waited };
        // One thread of each process, waits in ticks.
        let one =
            |pid, start, used, waited: u64| ((pid, start), used, vec![(pid, waited * NS_PER_TICK)]);
        assert_eq!(meter.tally([one(1, 10, 100, 7)].into_iter()), d(100, 7));
        assert_eq!(
            meter.tally([one(1, 10, 130, 9), one(2, 20, 500, 40), one(3, 30, 0, 0)].into_iter()),
            d(30 + 500, 2 + 40)
        );
        // Processes 1 and 3 exited: no negative contribution.
        assert_eq!(meter.tally([one(2, 20, 505, 40)].into_iter()), d(5, 0));
        // Process 2 exited and a new one took its pid: all of the new one's time counts, none
        // of it is lost to the old one's larger count.
        assert_eq!(meter.tally([one(2, 900, 60, 3)].into_iter()), d(60, 3));
    }

    #[test]
    fn cpu_meter_keeps_waits_of_live_threads_when_a_thread_exits() {
        let mut meter = CpuMeter::default();
        let tick = NS_PER_TICK;
        let process = |waits: Vec<(i32, u64)>| [((7, 70), 0, waits)].into_iter();
        assert_eq!(
            meter
                .tally(process(vec![(7, 0), (8, 500 * tick), (9, 0)]))
                .waited,
            500
        );
        // Thread 8 (500 ticks of waiting) exited; 9 waited 30 more and a new thread 10 waited 20:
        // 50 ticks, where the sum over the threads fell from 500 to 50.
        assert_eq!(
            meter
                .tally(process(vec![(7, 0), (9, 30 * tick), (10, 20 * tick)]))
                .waited,
            50
        );
        // Thread 9's id went to a new thread whose count (5) is below the old one's: all new.
        assert_eq!(
            meter
                .tally(process(vec![(7, 0), (9, 5 * tick), (10, 20 * tick)]))
                .waited,
            5
        );
        // Waits of less than a tick a sample add up instead of rounding away.
        let mut waited = 0;
        for n in 1..=10u64 {
            waited += meter.tally(process(vec![(7, n * tick / 2)])).waited;
        }
        assert_eq!(waited, 5);
    }

    #[test]
    fn busy_is_running_a_little_or_runnable_most_of_the_time() {
        let d = |used, waited| Demand { used, waited };
        // A compile alone on a CPU; a spinner given a twentieth of a CPU on a crowded host,
        // waiting for it the rest of the time.
        assert!(is_busy(1.0, 0.0, 0.05));
        assert!(is_busy(0.05, 0.73, 0.1));
        // Idle; a server answering a health check every 200 ms on a crowded host, each answer
        // taking a few milliseconds of CPU and queued for tens of milliseconds.
        assert!(!is_busy(0.0, 0.0, 0.05));
        assert!(!is_busy(0.04, 0.3, 0.05));
        // Span in ticks: 40 of 100 ticks used over one second is 40% of a core.
        assert_eq!(d(40, 10).shares(Duration::from_secs(1)), (0.4, 0.1));
        assert!(d(2, 60).is_busy(Duration::from_secs(1), 0.05));
        assert!(!d(2, 30).is_busy(Duration::from_secs(1), 0.05));
    }

    /// The first CPU this process may run on (a container's cpuset need not hold CPU 0).
    fn first_allowed_cpu() -> String {
        let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
        let list = status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list in /proc/self/status");
        list.trim()
            .split([',', '-'])
            .next()
            .expect("a CPU")
            .to_owned()
    }

    /// A Python process whose main thread waits on a worker thread that spins on `cpu` at the
    /// lowest priority (Linux pins and nices a thread alone). Returned once the worker spins, so
    /// that what is measured is the wait, not the interpreter's start.
    #[allow(
        clippy::disallowed_methods,
        reason = "the test starts the processes it measures"
    )]
    fn starved_worker_thread(cpu: &str) -> std::process::Child {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let script = format!(
            "import os, threading\n\
             ready = threading.Event()\n\
             def spin():\n    \
                 os.sched_setaffinity(0, {{{cpu}}})\n    \
                 os.setpriority(os.PRIO_PROCESS, 0, 19)\n    \
                 ready.set()\n    \
                 while True: pass\n\
             t = threading.Thread(target=spin)\n\
             t.start()\n\
             ready.wait()\n\
             print('spinning', flush=True)\n\
             t.join()\n"
        );
        let mut child = std::process::Command::new("python3")
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|err| panic!("start python3: {err}"));
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the worker's start");
        assert_eq!(line.trim(), "spinning", "the worker thread did not start");
        child
    }

    /// The watchdog's rule on real processes over its horizon (two seconds): a spinner is busy;
    /// a spinner starved of CPU (pinned to the spinner's CPU at the lowest priority, so it runs
    /// a sliver of the time and waits for the CPU the rest) is busy too, and so is a process
    /// whose main thread sleeps while a starved worker thread spins; a process woken every
    /// 200 ms to do a little work, as a server answering health checks is, is idle.
    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the test starts the processes it measures"
    )]
    fn a_starved_spinner_is_busy_and_a_process_woken_every_200ms_is_not() {
        use crate::watchdog::CPU_RATE;
        use std::os::unix::process::CommandExt;
        use std::process::{Child, Command};
        use std::time::Instant;
        let cpu = first_allowed_cpu();
        let spawn = |args: &[&str]| -> Child {
            Command::new(args[0])
                .args(&args[1..])
                .process_group(0)
                .spawn()
                .unwrap_or_else(|err| panic!("start {args:?}: {err}"))
        };
        let spin = "while :; do :; done";
        let mut children = [
            spawn(&["taskset", "-c", &cpu, "sh", "-c", spin]),
            spawn(&["taskset", "-c", &cpu, "nice", "-n", "19", "sh", "-c", spin]),
            spawn(&["sh", "-c", "while :; do sleep 0.2; done"]),
            starved_worker_thread(&cpu),
        ];
        let selectors: Vec<Selector> = children
            .iter()
            .map(|child| Selector {
                pgid: Some(i32::try_from(child.id()).expect("pid")),
                env_marker: None,
                started_since: None,
            })
            .collect();
        let mut meters: Vec<CpuMeter> = selectors.iter().map(|_| CpuMeter::default()).collect();
        for (meter, selector) in meters.iter_mut().zip(&selectors) {
            meter.sample(&find_alive(selector));
        }
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs(2));
        let demands: Vec<Demand> = meters
            .iter_mut()
            .zip(&selectors)
            .map(|(meter, selector)| meter.sample(&find_alive(selector)))
            .collect();
        let span = start.elapsed();
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let [spinner, starved, woken, worker] = [demands[0], demands[1], demands[2], demands[3]];
        assert!(
            spinner.is_busy(span, CPU_RATE),
            "spinner: {spinner:?} over {span:?}"
        );
        assert!(
            starved.shares(span).0 < CPU_RATE,
            "the low-priority spinner was not starved: {starved:?} over {span:?}"
        );
        assert!(
            starved.is_busy(span, CPU_RATE),
            "starved: {starved:?} over {span:?}"
        );
        assert!(
            !woken.is_busy(span, CPU_RATE),
            "woken: {woken:?} over {span:?}"
        );
        assert!(
            worker.shares(span).0 < CPU_RATE,
            "the low-priority worker thread was not starved: {worker:?} over {span:?}"
        );
        assert!(
            worker.is_busy(span, CPU_RATE),
            "starved worker thread: {worker:?} over {span:?}"
        );
    }
}
