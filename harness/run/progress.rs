//! What a person sees while a run goes: a live bar on a terminal (cells done, running, failed,
//! ETA), one plain line per event in CI logs, and the summary at the end.

use crate::exec::procfs::{self, CpuMeter, Selector};
use crate::record::{CellRecord, GpuInfo, Phase, Status};
use crate::watchdog::CPU_RATE;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the dispatcher calls [`Reporter::tick`]: SLOW lines and the ETA are this fine.
pub(crate) const TICK: Duration = Duration::from_secs(1);

/// What the terminal knows of each running cell, by id: its phase and what the watchdog watches
/// (its output counter and its processes), published by the cell's task as it moves on, read by
/// [`Reporter::tick`] for SLOW lines. The watchdog itself stays private to the cell's task.
#[derive(Debug, Default)]
pub(crate) struct Board {
    cells: Mutex<BTreeMap<String, Arc<Watched>>>,
}

impl Board {
    /// A cell started: it is watched from now.
    pub(crate) fn enter(&self, id: &str) {
        self.lock().insert(id.to_owned(), Arc::new(Watched::new()));
    }

    /// A cell ended.
    pub(crate) fn leave(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The running cell `id` (`None` for a cell run outside the dispatcher, as in unit tests).
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Watched>> {
        self.lock().get(id).cloned()
    }

    fn running(&self) -> Vec<(String, Arc<Watched>)> {
        self.lock()
            .iter()
            .map(|(id, w)| (id.clone(), Arc::clone(w)))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Watched>>> {
        // A panic elsewhere while holding it leaves a map that is still whole.
        self.cells.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One running cell, as the terminal sees it.
#[derive(Debug)]
pub(crate) struct Watched {
    started: Instant,
    state: Mutex<WatchState>,
}

#[derive(Debug)]
struct WatchState {
    phase: Option<Phase>,
    /// The attempt's processes and its log's output counter, once launched.
    processes: Option<(Selector, Arc<AtomicU64>)>,
    last_output: u64,
    output_at: Instant,
    meter: CpuMeter,
    cpu_since: Instant,
    /// SLOW lines said so far.
    slow_lines: u32,
}

impl Watched {
    fn new() -> Self {
        let now = Instant::now();
        Watched {
            started: now,
            state: Mutex::new(WatchState {
                phase: None,
                processes: None,
                last_output: 0,
                output_at: now,
                meter: CpuMeter::default(),
                cpu_since: now,
                slow_lines: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cell entered `phase`.
    pub(crate) fn phase(&self, phase: Phase) {
        self.lock().phase = Some(phase);
    }

    /// An attempt launched its main process (a retry's replaces the last one's).
    pub(crate) fn launched(&self, selector: Selector, output: Arc<AtomicU64>) {
        let now = Instant::now();
        let mut state = self.lock();
        state.processes = Some((selector, output));
        state.last_output = 0;
        state.output_at = now;
        state.meter = CpuMeter::default();
        state.cpu_since = now;
    }

    /// Notes new output (cheap: one atomic load); called every tick so that "output Ns ago" is
    /// right to a tick.
    fn observe(&self, now: Instant) {
        let mut state = self.lock();
        if let Some((_, output)) = &state.processes {
            let bytes = output.load(Ordering::Relaxed);
            if bytes != state.last_output {
                state.last_output = bytes;
                state.output_at = now;
            }
        }
    }

    /// A SLOW line when the cell has run past its next multiple of `every`.
    fn slow_line(&self, id: &str, every: Duration, now: Instant) -> Option<String> {
        let elapsed = now.duration_since(self.started);
        let mut state = self.lock();
        let due = every.checked_mul(state.slow_lines + 1)?;
        if elapsed < due {
            return None;
        }
        state.slow_lines = (elapsed.as_secs_f64() / every.as_secs_f64().max(0.001)) as u32;
        let phase = state.phase.map_or("start", Phase::as_str);
        let seen = match &state.processes {
            None => "not launched yet".to_owned(),
            Some((selector, _)) => {
                let selector = selector.clone();
                let output = if state.last_output == 0 {
                    "no output yet".to_owned()
                } else {
                    format!(
                        "output {}s ago",
                        now.duration_since(state.output_at).as_secs()
                    )
                };
                let cpu = state.cpu_seen(&selector, now);
                format!("{output}, {cpu}")
            }
        };
        Some(format!(
            "{:>8} [{:>6}s] {id} in {phase}: {seen}",
            "SLOW",
            // The multiple of `every` passed, not the exact time: a late tick on a busy host
            // would print 3s then 4s, lines that read as closer together than they are.
            every.saturating_mul(state.slow_lines).as_secs()
        ))
    }
}

impl WatchState {
    /// CPU over the time since the last SLOW line, busy as the watchdog judges it
    /// ([`procfs::is_busy`]): a compile starved on a crowded host, runnable most of the time, is
    /// not called idle, and a server that only answers health checks is.
    fn cpu_seen(&mut self, selector: &Selector, now: Instant) -> String {
        let demand = self.meter.sample(&procfs::find_alive(selector));
        let span = now.duration_since(self.cpu_since);
        self.cpu_since = now;
        let (cores, waiting) = demand.shares(span);
        if !procfs::is_busy(cores, waiting, CPU_RATE) {
            "CPU idle".to_owned()
        } else if waiting < CPU_RATE {
            format!("CPU busy ({:.0}% of a core)", cores * 100.0)
        } else {
            format!(
                "CPU busy ({:.0}% of a core, {:.0}% waiting for one)",
                cores * 100.0,
                waiting * 100.0
            )
        }
    }
}

/// Live progress of a run.
#[derive(Debug)]
pub(crate) struct Reporter {
    bar: Option<ProgressBar>,
    running: usize,
    failed: usize,
    /// No per-cell lines (see `RunOptions::quiet`).
    quiet: bool,
    /// A SLOW line for a cell each time it has run this much longer (`None`: never).
    slow_after: Option<Duration>,
    total: usize,
    done: usize,
    /// Seconds the finished cells of this run took, for the ETA.
    finished_s: f64,
    /// Cells at a time, for the ETA.
    parallel: usize,
}

impl Reporter {
    /// A bar on an interactive terminal; plain lines otherwise (CI, pipes, `CI=true`); neither
    /// bar nor per-cell lines when `quiet`.
    /// SLOW lines every `slow_after`; `parallel` cells at a time (for the ETA).
    pub(crate) fn new(
        total: usize,
        already_done: usize,
        interactive: bool,
        quiet: bool,
        slow_after: Option<Duration>,
        parallel: usize,
    ) -> Self {
        let bar = (interactive && !quiet).then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            bar.set_style(
                // The ETA is in the message: indicatif's reads 0 s while the last cells still run.
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} cells  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_position(already_done as u64);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Reporter {
            bar,
            running: 0,
            failed: 0,
            quiet,
            slow_after: slow_after.filter(|d| !d.is_zero()),
            total,
            done: already_done,
            finished_s: 0.0,
            parallel: parallel.max(1),
        }
    }

    /// Whether stderr is a terminal a person is watching.
    pub(crate) fn stderr_is_interactive() -> bool {
        std::io::stderr().is_terminal() && crate::env::var_os(crate::env::EnvVars::CI).is_none()
    }

    /// A line above the bar, or on stderr.
    pub(crate) fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => {
                let _ = writeln!(std::io::stderr().lock(), "{text}");
            }
        }
    }

    /// A progress line: said unless quiet.
    pub(crate) fn progress(&self, text: &str) {
        if !self.quiet {
            self.line(text);
        }
    }

    pub(crate) fn started(&mut self, id: &str, gpus: &[GpuInfo]) {
        self.running += 1;
        if self.bar.is_none() {
            let on = if gpus.is_empty() {
                String::new()
            } else {
                format!(
                    " on GPU {}",
                    gpus.iter()
                        .map(|g| format!("{} ({})", g.index, g.arch))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            self.progress(&format!("   START {id}{on}"));
        }
        self.update();
    }

    pub(crate) fn finished(&mut self, record: &CellRecord, was_running: bool) {
        if was_running {
            self.running = self.running.saturating_sub(1);
        }
        if record.status.is_unexpected() || record.status == Status::Error {
            self.failed += 1;
        }
        if was_running {
            self.done += 1;
            self.finished_s += record.duration_s;
        } else {
            self.total = self.total.saturating_sub(1);
        }
        self.progress(&finish_line(record));
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        self.update();
    }

    pub(crate) fn interrupted_cell(&mut self) {
        self.running = self.running.saturating_sub(1);
        self.update();
    }

    /// Called every [`TICK`] while cells run: SLOW lines for cells running long, and the ETA.
    pub(crate) fn tick(&mut self, board: &Board) {
        let now = Instant::now();
        let running = board.running();
        for (_, watched) in &running {
            watched.observe(now);
        }
        if let Some(every) = self.slow_after.filter(|_| !self.quiet) {
            for (id, watched) in &running {
                if let Some(line) = watched.slow_line(id, every, now) {
                    self.line(&line);
                }
            }
        }
        if let Some(bar) = &self.bar {
            let elapsed: Vec<f64> = running
                .iter()
                .map(|(_, w)| now.duration_since(w.started).as_secs_f64())
                .collect();
            bar.set_message(format!(
                "running {}, failed {}  ETA {}",
                self.running,
                self.failed,
                eta(
                    self.total,
                    self.done,
                    self.finished_s,
                    &elapsed,
                    self.parallel
                )
            ));
        }
    }

    fn update(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("running {}, failed {}", self.running, self.failed));
        }
    }

    pub(crate) fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The time left, from the mean duration of the cells finished so far: the cells not started
/// yet, plus what the running ones still need (at least a second each: a running cell is never
/// done), spread over `parallel` slots. `?` before any cell finished.
pub(crate) fn eta(
    total: usize,
    done: usize,
    finished_s: f64,
    running_elapsed: &[f64],
    parallel: usize,
) -> String {
    if done == 0 {
        return "?".to_owned();
    }
    let mean = finished_s / done as f64;
    let waiting = total.saturating_sub(done + running_elapsed.len()) as f64 * mean;
    let running: f64 = running_elapsed
        .iter()
        .map(|elapsed| (mean - elapsed).max(1.0))
        .sum();
    let left = (waiting + running) / parallel.max(1) as f64;
    let left = if running_elapsed.is_empty() {
        left
    } else {
        left.max(1.0)
    };
    humantime::format_duration(Duration::from_secs(left.ceil() as u64)).to_string()
}

/// `    PASS [  12.3s] cell-id`, with the signature, phase and log of failures.
pub(crate) fn finish_line(record: &CellRecord) -> String {
    let label = record.status.as_str().to_ascii_uppercase();
    let detail = match record.status {
        Status::Pass => String::new(),
        Status::Skip => format!("  ({})", record.reason.as_deref().unwrap_or("skipped")),
        Status::Flaky => format!(
            "  after {} attempts ({})",
            record.attempts,
            record.signature.map_or("unknown", |s| s.as_str())
        ),
        Status::Xpass => format!(
            "  known failure no longer fails{}",
            record
                .expectation
                .as_ref()
                .and_then(|e| e.link.as_ref())
                .map(|l| format!(": {l}"))
                .unwrap_or_default()
        ),
        // An infrastructure error with no root cause in a log (a harness fault, a task Slurm
        // ended): its reason says what happened.
        Status::Error if record.signature.is_none() && record.reason.is_some() => format!(
            "  ({})  {}",
            record.reason.as_deref().unwrap_or_default(),
            record.log
        ),
        Status::Xfail | Status::Fail | Status::Error => format!(
            "  {} in {}  {}",
            record.signature.map_or("unknown", |s| s.as_str()),
            record.phase.map_or("-", |p| p.as_str()),
            record.log
        ),
    };
    format!(
        "{label:>8} [{:>7.1}s] {}{detail}",
        record.duration_s, record.id
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eta_never_reads_zero_while_cells_run() {
        // Nothing finished yet: no guess.
        assert_eq!(eta(4, 0, 0.0, &[3.0], 1), "?");
        // 2 of 4 done in 10 s each, one running for 30 s already (past the mean), none waiting.
        assert_eq!(eta(4, 3, 30.0, &[30.0], 2), "1s");
        // Everything finished: nothing left.
        assert_eq!(eta(2, 2, 4.0, &[], 1), "0s");
        // 10 waiting at 6 s each, 2 slots.
        assert_eq!(eta(12, 2, 12.0, &[], 2), "30s");
    }
}
