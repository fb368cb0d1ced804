//! The hang capture between the watchdog's verdict and teardown (see `forensics`): taken on a
//! blocking thread within its budget, written as `hang.json` next to the log and summarised in
//! the log; the attempt keeps it for the verdict and the record.

use super::AttemptCx;
use super::guard::Launched;
use crate::classify::{Classification, Clue, ClueKind, DecidedBy, Verdict};
use crate::exec::pyspy;
use crate::forensics::{self, HangCapture, Trigger, verdict};
use crate::record::HangSummary;
use crate::run::folder::log_relative;
use crate::signature::Signature;

/// A capture and where it was written.
#[derive(Debug)]
pub(super) struct Captured {
    pub capture: HangCapture,
    /// `hang.json`, relative to the run folder.
    pub rel: String,
}

impl Captured {
    pub(super) fn summary(&self) -> HangSummary {
        self.capture.summary(&self.rel)
    }

    /// Names a hang the watchdog decided by the capture's evidence: a collective
    /// (`collective_timeout`), a busy compiler (`timeout`), or the watchdog's verdict described;
    /// its fingerprint is where the processes were, so two different hangs are two failures.
    /// False when the log named an error before the hang: that stays the root cause.
    pub(super) fn refine(&self, found: &mut Classification) -> bool {
        if !matches!(found.signature, Signature::Deadlock | Signature::Timeout) {
            return false;
        }
        let Some(v) = &self.capture.verdict else {
            return false;
        };
        found.signature = v.signature;
        // Only Python frames make a stable fingerprint; a process's kernel wait alone does not.
        let summary = self.summary();
        if !summary.frames.is_empty() {
            found.fingerprint = Some(format!(
                "{} in {}",
                v.signature,
                summary.frames.join(" <- ")
            ));
        }
        found.decided_by = Some(DecidedBy::HangCapture);
        found.evidence.push(Clue::new(
            ClueKind::Harness,
            format!(
                "hang capture ({}): {}",
                <&str>::from(v.decided_by),
                v.evidence
            ),
            None,
        ));
        let said = found.explanation.take().unwrap_or_default();
        found.explanation = Some(format!(
            "{said}{}decided by the hang capture ({}): {}",
            if said.is_empty() { "" } else { "; " },
            <&str>::from(v.decided_by),
            v.evidence
        ));
        true
    }

    /// The record's summary; when the log decided, it says so instead of the capture's verdict.
    pub(super) fn summary_after(&self, refined: bool, found: &Classification) -> HangSummary {
        let mut summary = self.summary();
        if !refined {
            summary.decided_by = Some("log".to_owned());
            summary.evidence = Some(format!(
                "the log names an error before the hang ({}); the capture only says where the processes were",
                found.signature
            ));
        }
        summary
    }
}

impl AttemptCx<'_> {
    /// Captures where the cell's processes are, before teardown, within the budget.
    pub(super) async fn capture_hang(&mut self, launched: &Launched, trigger: Trigger) {
        let budget = forensics::budget().unwrap_or_else(|why| {
            self.note(&why);
            forensics::DEFAULT_BUDGET
        });
        if budget.is_zero() {
            return;
        }
        let log_rel = log_relative(self.cell.id.as_str(), self.attempt);
        let rel = forensics::hang_path_for(std::path::Path::new(&log_rel))
            .to_string_lossy()
            .into_owned();
        let request = forensics::Request {
            selector: launched.running.selector().clone(),
            trigger,
            budget,
            gpus: self.gpus.clone(),
            tools: self.tool_source(),
        };
        let task = tokio::task::spawn_blocking(move || forensics::capture(&request));
        // Ctrl-C does not wait for the capture: teardown comes first.
        let cancel = &mut self.cancel;
        let cancelled = async {
            if cancel.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let taken = tokio::select! {
            taken = tokio::time::timeout(budget, task) => taken,
            () = cancelled => {
                self.note("hang capture abandoned: interrupted");
                return;
            }
        };
        let mut capture = match taken {
            Ok(Ok(capture)) => capture,
            Ok(Err(err)) => {
                self.note(&format!("hang capture failed: {err}"));
                return;
            }
            Err(_) => {
                self.note(&format!(
                    "hang capture did not finish within its budget ({}); tearing down without it",
                    humantime::format_duration(budget)
                ));
                return;
            }
        };
        let watchdog = match trigger {
            Trigger::NoProgress => Verdict::Deadlock,
            Trigger::Deadline => Verdict::Timeout,
        };
        capture.verdict = Some(verdict::decide(&capture, watchdog));
        let path = self.shared.root.join(&rel);
        let written = serde_json::to_vec_pretty(&capture)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&path, bytes));
        if let Err(err) = written {
            capture.notes.push(format!("cannot write {rel}: {err}"));
        }
        self.note(&forensics::text::log_section(&capture, &rel));
        self.hang = Some(Captured { capture, rel });
    }

    /// Where a missing py-spy comes from: the matrix's wheelhouse and index, if it has them.
    fn tool_source(&self) -> pyspy::Source {
        let plan = &self.shared.plan;
        let python = plan.python.as_ref();
        pyspy::Source {
            cache_root: self.shared.cache_root.clone(),
            find_links: python
                .map(|p| p.find_links.iter().map(|l| plan.dir.join(l)).collect())
                .unwrap_or_default(),
            no_index: python.is_some_and(|p| p.no_index),
            index_url: python.and_then(|p| p.index_url.clone()),
        }
    }
}
