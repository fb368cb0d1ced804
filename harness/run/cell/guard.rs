//! A started cell command under guard: the watchdog, the deadline and Ctrl-C over whatever the
//! harness waits for, and teardown.

use super::{AttemptCx, Facts, Halt, Trouble};
use crate::classify::Verdict;
use crate::exec::process::{self, CellCommand, Running};
use crate::watchdog::{Idle, Watchdog};
use std::future::Future;
use std::process::ExitStatus;
use std::sync::Arc;
use tokio::time::Instant;

/// A cell's main process and the watchdog over it.
pub(super) struct Launched {
    pub running: Running,
    pub dog: Watchdog,
}

/// How a guarded wait ended.
pub(super) enum Stop<T> {
    /// The work finished.
    Done(T),
    /// The cell's main process exited first.
    Exited(ExitStatus),
    /// The watchdog, the deadline, Ctrl-C or the harness stopped it (already noted in the log).
    Halted(Halt),
}

/// Why a guarded wait was cut short, before it is noted and turned into a [`Halt`].
enum Cut {
    Idle(Idle),
    Deadline,
    Cancelled,
    /// Waiting for the main process failed: the harness lost track of it.
    WaitFailed(std::io::Error),
}

impl AttemptCx<'_> {
    /// Starts `script` as the cell's main process, with a watchdog over it.
    pub(super) fn start(
        &self,
        script: String,
        env: Vec<(String, String)>,
    ) -> Result<Launched, Halt> {
        let command = CellCommand {
            script,
            cwd: self.shared.plan.dir.clone(),
            env,
            run_token: self.shared.run_token.clone(),
            cell_token: self.cell_token(),
        };
        self.note(&format!("command: {}", command.script));
        let running = process::spawn(&command, &self.log)
            .map_err(|err| Trouble::Infra(format!("cannot start `sh`: {err}")))?;
        if let Some(reaper) = &self.shared.reaper {
            reaper.register(running.pgid());
        }
        if let Some(why) = running.escape_detection_limited() {
            self.note(&format!(
                "escape detection limited: {why}; a process that leaves the process group and clears its environment would not be found"
            ));
        }
        let output = process::lock(&self.log).output_counter();
        if let Some(watched) = self.shared.board.get(self.cell.id.as_str()) {
            watched.launched(running.selector().clone(), Arc::clone(&output));
        }
        let dog = Watchdog::new(
            running.selector().clone(),
            output,
            self.cell.no_progress,
            self.shared.gpu_activity.clone(),
        );
        Ok(Launched { running, dog })
    }

    /// Runs `work` until it finishes, or the cell's main process exits, or the watchdog sees no
    /// progress for its window, or the deadline passes, or the run is interrupted.
    pub(super) async fn guard<T>(
        &mut self,
        work: impl Future<Output = T>,
        launched: &mut Launched,
        facts: &Facts,
        deadline: Instant,
    ) -> Stop<T> {
        self.show_phase(facts.phase);
        let cancel = &mut self.cancel;
        let cancelled = async {
            if cancel.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let cut = tokio::select! {
            value = work => return Stop::Done(value),
            status = launched.running.wait() => match status {
                Ok(status) => return Stop::Exited(status),
                Err(err) => Cut::WaitFailed(err),
            },
            idle = launched.dog.idle() => Cut::Idle(idle),
            () = tokio::time::sleep_until(deadline) => Cut::Deadline,
            () = cancelled => Cut::Cancelled,
        };
        let hang = match &cut {
            Cut::Idle(_) => Some(crate::forensics::Trigger::NoProgress),
            Cut::Deadline => Some(crate::forensics::Trigger::Deadline),
            Cut::Cancelled | Cut::WaitFailed(_) => None,
        };
        let halt = self.halt(cut, facts);
        // Where every process is stuck, before teardown destroys it (bounded; see `hang`).
        if let Some(trigger) = hang {
            self.capture_hang(launched, trigger).await;
        }
        Stop::Halted(halt)
    }

    /// Notes why a guarded wait was cut short and says how the attempt ends.
    fn halt(&self, cut: Cut, facts: &Facts) -> Halt {
        match cut {
            Cut::Idle(idle) => {
                self.note_stop(
                    facts,
                    &format!(
                        "watchdog: no output, CPU or GPU activity for {:.1}s (window {}; last seen: {}); calling it a hang",
                        idle.idle_for.as_secs_f64(),
                        humantime::format_duration(self.cell.no_progress),
                        idle.last_activity.as_str()
                    ),
                );
                Trouble::Watchdog(Verdict::Deadlock).into()
            }
            Cut::Deadline => {
                self.note_stop(facts, "deadline reached while the cell was still busy");
                Trouble::Watchdog(Verdict::Timeout).into()
            }
            Cut::Cancelled => {
                self.note_stop(facts, "interrupted by the user; tearing down");
                Halt::Interrupted
            }
            // Not a hang and not the cell's verdict: the harness cannot tell how the cell ended.
            Cut::WaitFailed(err) => {
                let what = format!("cannot wait for the cell's main process: {err}");
                self.note_stop(facts, &what);
                Trouble::Infra(what).into()
            }
        }
    }

    /// A note of why the cell stopped, with the phase and the time since launch.
    pub(super) fn note_stop(&self, facts: &Facts, what: &str) {
        self.note(&format!(
            "{what} (phase {}, {:.1}s after launch)",
            facts.phase,
            facts.began.elapsed().as_secs_f64()
        ));
    }

    /// Tears the cell down and records what was left behind.
    pub(super) async fn teardown(&self, running: &mut Running, facts: &mut Facts) {
        self.show_phase(crate::record::Phase::Teardown);
        let shared = self.shared;
        let main_exited = running.exit_status().is_some();
        let report = running
            .teardown_unless_hurried(shared.grace, Some(shared.hurry.clone()))
            .await;
        if let Some(reaper) = &shared.reaper {
            reaper.unregister(running.pgid());
        }
        // `facts.exit` is only ever how the cell's process ended by itself: a server stopped by
        // this teardown did not "exit with SIGTERM".
        let mut sink = process::lock(&self.log);
        if main_exited && report.found > 0 {
            facts.leaked = report.found;
            sink.note(&format!(
                "{} process(es) of the cell were still running after its main process exited; terminated",
                report.found
            ));
        }
        if report.escaped > 0 {
            sink.note(&format!(
                "{} process(es) had left the process group and cleared their environment; found by the cell's cgroup and killed",
                report.escaped
            ));
        }
        if report.killed > 0 {
            sink.note(&format!(
                "{} process(es) ignored SIGTERM for {:?} and were killed",
                report.killed, shared.grace
            ));
        }
        if !report.survivors.is_empty() {
            sink.note(&format!(
                "processes {:?} survived SIGKILL (stuck in the kernel)",
                report.survivors
            ));
        }
    }
}
