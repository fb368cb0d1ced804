//! The watchdog: tells a long silent compile from a hang.
//!
//! Progress is any of: new output in the cell's log, CPU time consumed anywhere in the cell's
//! process tree (at least [`CPU_RATE`] of one core over a short horizon, so an idle server's
//! heartbeat threads do not count; or runnable most of the horizon, so a process starved of CPU on
//! a crowded host counts: see [`procfs::is_busy`]), or GPU activity of
//! the cell's processes where `nvidia-smi` can tell. A cell idle for the whole no-progress
//! window is in a deadlock; the deadlines of its phases are enforced by the cell's runner, which
//! calls a cell still busy at its deadline a timeout. So a worker that compiles silently for
//! minutes while its siblings wait is progress, and once it finishes and the rest sit idle, the
//! window starts counting.

use crate::exec::probe;
use crate::exec::procfs::{self, CpuMeter, Demand, Selector};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// Share of one core the process tree must use over the horizon to count as busy.
pub const CPU_RATE: f64 = 0.05;

/// What was last seen moving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    Start,
    Output,
    Cpu,
    Gpu,
    /// The harness saw the cell finish a phase (a server became ready).
    Phase,
}

impl Activity {
    pub fn as_str(self) -> &'static str {
        match self {
            Activity::Start => "start",
            Activity::Output => "output",
            Activity::Cpu => "CPU time",
            Activity::Gpu => "GPU activity",
            Activity::Phase => "the end of a phase",
        }
    }
}

/// Watches one cell attempt.
#[derive(Debug)]
pub struct Watchdog {
    selector: Selector,
    output: Arc<AtomicU64>,
    window: Duration,
    tick: Duration,
    horizon: Duration,
    gpu: Option<Arc<GpuActivity>>,
    last_output: u64,
    meter: CpuMeter,
    /// (time, cumulative CPU demand) over the horizon.
    cpu_history: VecDeque<(Instant, Demand)>,
    cpu_total: Demand,
    gpu_seen: u64,
    last_progress: Instant,
    last_activity: Activity,
    /// Whether [`Watchdog::sample`] ran yet.
    sampled: bool,
}

/// Returned when the cell has been idle for the whole window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idle {
    pub idle_for: Duration,
    /// What moved last, before the silence.
    pub last_activity: Activity,
}

impl Watchdog {
    pub fn new(
        selector: Selector,
        output: Arc<AtomicU64>,
        window: Duration,
        gpu: Option<Arc<GpuActivity>>,
    ) -> Self {
        let tick = (window / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let horizon = (window / 4).clamp(tick, Duration::from_secs(2));
        Watchdog {
            selector,
            output,
            window,
            tick,
            horizon,
            gpu,
            last_output: 0,
            meter: CpuMeter::default(),
            // Nothing of the cell has used CPU at its start (see `CpuMeter`): a base to compare
            // the first sample with, without a scan of /proc.
            cpu_history: VecDeque::from([(Instant::now(), Demand::default())]),
            cpu_total: Demand::default(),
            gpu_seen: 0,
            last_progress: Instant::now(),
            last_activity: Activity::Start,
            sampled: false,
        }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// Resolves once the cell has made no progress for the window. Cancel-safe: the state lives
    /// in `self`, so it can sit in one `select!` per phase.
    pub async fn idle(&mut self) -> Idle {
        loop {
            // No sample at the very start: the start counts as progress anyway, and a cell that
            // ends within a tick (most short jobs) then costs no scan of /proc at all.
            if self.sampled || self.last_progress.elapsed() >= self.tick {
                self.sample();
            }
            let idle_for = self.last_progress.elapsed();
            if idle_for >= self.window {
                return Idle {
                    idle_for,
                    last_activity: self.last_activity,
                };
            }
            sleep(self.tick.min(self.window - idle_for)).await;
        }
    }

    /// The harness saw the cell move on (a server answered its health check): that is progress,
    /// so the silence before it does not count against the next phase.
    pub fn phase_done(&mut self) {
        self.progress(Instant::now(), Activity::Phase);
    }

    /// Takes one sample and records progress.
    pub fn sample(&mut self) {
        self.sampled = true;
        let now = Instant::now();
        let output = self.output.load(Ordering::Relaxed);
        if output != self.last_output {
            self.last_output = output;
            self.progress(now, Activity::Output);
        }
        let procs = procfs::find_alive(&self.selector);
        self.cpu_total = self.cpu_total + self.meter.sample(&procs);
        self.cpu_history.push_back((now, self.cpu_total));
        // The base is the oldest sample within the horizon, or the one before this sample when
        // none is. (Dropping every sample older than the horizon would, after a late sample,
        // leave only the new one and compare it with itself: the CPU used while the harness was
        // late to look would be lost, and a busy cell called idle. That happens when the
        // harness itself is short of CPU.)
        while self.cpu_history.len() > 2
            && self
                .cpu_history
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > self.horizon)
        {
            self.cpu_history.pop_front();
        }
        if let Some((since, base)) = self.cpu_history.front() {
            let span = now.duration_since(*since).max(self.tick);
            // On a crowded machine a starved process (a server still starting up) gets little
            // CPU time but waits for more: busy. A server answering the harness's health checks
            // waits a little at each one: not busy (`is_busy` sets the bars).
            if (self.cpu_total - *base).is_busy(span, CPU_RATE) {
                self.progress(now, Activity::Cpu);
            }
        }
        if let Some(gpu) = &self.gpu {
            let pids: Vec<i32> = procs.iter().map(|p| p.pid).collect();
            if let Some(sample) = gpu.active_since(self.gpu_seen, &pids) {
                self.gpu_seen = sample;
                self.progress(now, Activity::Gpu);
            }
        }
    }

    fn progress(&mut self, now: Instant, activity: Activity) {
        self.last_progress = now;
        self.last_activity = activity;
    }
}

/// GPU utilisation per process, sampled with `nvidia-smi pmon` on a background thread for the
/// whole run (one sampler however many cells run).
#[derive(Debug, Default)]
pub struct GpuActivity {
    /// Sample number and the pids with non-zero SM utilisation in it.
    latest: RwLock<(u64, HashMap<i32, u32>)>,
    stop: AtomicBool,
}

impl GpuActivity {
    /// Starts sampling when `nvidia-smi` answers; `None` on hosts without it.
    pub fn start() -> Option<Arc<GpuActivity>> {
        probe::capture("nvidia-smi", &["-L"], Duration::from_secs(10)).ok()?;
        let activity = Arc::new(GpuActivity::default());
        let sampler = Arc::clone(&activity);
        std::thread::spawn(move || {
            let mut number = 0;
            while !sampler.stop.load(Ordering::Relaxed) {
                if let Ok(text) = probe::capture(
                    "nvidia-smi",
                    &["pmon", "-c", "1", "-s", "u"],
                    Duration::from_secs(15),
                ) {
                    number += 1;
                    let busy = parse_pmon(&text);
                    if let Ok(mut latest) = sampler.latest.write() {
                        *latest = (number, busy);
                    }
                }
                std::thread::sleep(Duration::from_secs(2));
            }
        });
        Some(activity)
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// The number of a sample newer than `seen` in which one of `pids` used the GPU.
    fn active_since(&self, seen: u64, pids: &[i32]) -> Option<u64> {
        let latest = self.latest.read().ok()?;
        (latest.0 > seen && pids.iter().any(|pid| latest.1.contains_key(pid))).then_some(latest.0)
    }
}

/// Pids with SM utilisation above zero in `nvidia-smi pmon -s u` output.
pub fn parse_pmon(text: &str) -> HashMap<i32, u32> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let pid = fields.get(1)?.parse().ok()?;
            let sm: u32 = fields.get(3)?.parse().ok()?;
            (sm > 0).then_some((pid, sm))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pmon_output() {
        let text = "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command\n\
                    # Idx           #    C/G      %      %      %      %      %      %    name\n\
                        0      12345     C     45     12      -      -      -      -    python\n\
                        1      12346     C      0      0      -      -      -      -    python\n\
                        2          -     -      -      -      -      -      -      -    -\n";
        let busy = parse_pmon(text);
        assert_eq!(busy.get(&12345), Some(&45));
        assert_eq!(busy.len(), 1);
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the test starts a busy process to watch"
    )]
    fn cpu_used_while_sampling_was_late_is_progress() {
        use std::os::unix::process::CommandExt;
        let mut busy = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .process_group(0)
            .spawn()
            .expect("spawn a busy loop");
        let pid = i32::try_from(busy.id()).expect("pid");
        let selector = Selector {
            pgid: Some(pid),
            env_marker: None,
            started_since: None,
        };
        let window = Duration::from_secs(1);
        let mut dog = Watchdog::new(selector, Arc::new(AtomicU64::new(0)), window, None);
        dog.sample();
        // The next look comes late: longer than the CPU horizon after the first.
        std::thread::sleep(dog.horizon * 3);
        dog.sample();
        let _ = busy.kill();
        let _ = busy.wait();
        assert_eq!(dog.last_activity, Activity::Cpu);
    }

    #[tokio::test]
    async fn silent_selector_goes_idle_after_the_window() {
        let output = Arc::new(AtomicU64::new(0));
        let selector = Selector {
            pgid: Some(-7),
            env_marker: None,
            started_since: None,
        };
        let mut dog = Watchdog::new(
            selector,
            Arc::clone(&output),
            Duration::from_millis(300),
            None,
        );
        let start = Instant::now();
        let idle = dog.idle().await;
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert_eq!(idle.last_activity, Activity::Start);
    }
}
