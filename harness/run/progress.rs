//! What a person sees while a run goes: a live bar on a terminal (cells done, running, failed,
//! ETA), one plain line per event in CI logs, and the summary at the end.

use crate::record::{CellRecord, GpuInfo, Status};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Live progress of a run.
#[derive(Debug)]
pub(crate) struct Reporter {
    bar: Option<ProgressBar>,
    running: usize,
    failed: usize,
    /// No per-cell lines (see `RunOptions::quiet`).
    quiet: bool,
}

impl Reporter {
    /// A bar on an interactive terminal; plain lines otherwise (CI, pipes, `CI=true`); neither
    /// bar nor per-cell lines when `quiet`.
    pub(crate) fn new(total: usize, already_done: usize, interactive: bool, quiet: bool) -> Self {
        let bar = (interactive && !quiet).then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} cells  {msg}  ETA {eta}",
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
