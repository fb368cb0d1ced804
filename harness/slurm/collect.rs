//! The array tasks' shard run folders into the run folder: each record with its logs (read and
//! copied by [`crate::merge`]), and for a cell whose task Slurm ended before it had a record, a
//! spurious `error` that names the Slurm state, with the task's output in its log.

use super::state::{TaskId, TaskState};
use super::{SlurmError, Submitted, script};
use crate::matrix::Plan;
use crate::merge;
use crate::record::{CellRecord, Shard, Status};
use crate::run::{self, folder::RunFolder};
use std::collections::HashMap;
use std::path::Path;

/// What the collection added to the run folder.
pub(super) struct Collected {
    pub(super) records: Vec<CellRecord>,
    pub(super) shards: Vec<Shard>,
    pub(super) new_records: usize,
    /// Cells of tasks an interruption cancelled: no record, so `--resume` runs them.
    pub(super) unfinished: usize,
}

/// Lines of a task's Slurm output kept in a lost cell's log.
const OUTPUT_TAIL: usize = 40;

pub(super) fn collect(
    plan: &Plan,
    folder: &mut RunFolder,
    out: &Path,
    submitted: &[Submitted],
    states: &HashMap<TaskId, TaskState>,
    interrupted: bool,
) -> Result<Collected, SlurmError> {
    let mut collected = Collected {
        records: Vec::new(),
        shards: Vec::new(),
        new_records: 0,
        unfinished: 0,
    };
    let slurm = out.join(script::SLURM_DIR);
    for array in submitted {
        for (index, task) in array.array.tasks.iter().enumerate() {
            let id = TaskId {
                job: array.job,
                task: u32::try_from(index).unwrap_or(u32::MAX),
            };
            let shard = latest_shard(&slurm.join(script::TASKS_DIR), id);
            // A shard that cannot be read (its task died writing it) costs its cells' records,
            // never the run's.
            let read = shard
                .join(run::folder::MANIFEST)
                .is_file()
                .then(|| merge::read_shard(&shard).ok())
                .flatten();
            let mut taken = 0;
            let state = states.get(&id);
            for &cell in &task.cells {
                let cell_id = plan.cells[cell].id.as_str();
                let found = read
                    .as_ref()
                    .and_then(|r| r.records.iter().find(|rec| rec.id == cell_id))
                    .filter(|record| !killed_by_slurm(record, state));
                let record = match found {
                    Some(record) => {
                        merge::copy_files(&shard, record, out).map_err(SlurmError::Collect)?;
                        taken += 1;
                        record.clone()
                    }
                    None => {
                        // Cancelled by this run's Ctrl-C: not run, not an error.
                        if interrupted && state.is_none_or(|s| s.state == "CANCELLED" || s.going())
                        {
                            collected.unfinished += 1;
                            continue;
                        }
                        lost_record(plan, cell, id, state, out, &shard)
                    }
                };
                folder.append(&record)?;
                collected.new_records += 1;
                collected.records.push(record);
            }
            if let Some(read) = &read {
                collected.shards.push(merge::shard_entry(read, taken));
            }
        }
    }
    Ok(collected)
}

/// The shard of a task's last try: `JOB_TASK.restartN` with the largest N after requeues, else
/// `JOB_TASK`.
fn latest_shard(tasks: &Path, id: TaskId) -> std::path::PathBuf {
    let prefix = format!("{id}.restart");
    let restart = std::fs::read_dir(tasks)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)?.parse::<u32>().ok()
        })
        .max();
    match restart {
        Some(n) => tasks.join(format!("{prefix}{n}")),
        None => tasks.join(id.to_string()),
    }
}

/// On `--resume`: the records that earlier submissions' tasks wrote into their shards but that
/// never reached the run folder (the submitting process died while they ran), so that they are
/// not run again. A failure ended by a signal in a shard whose task was stopped is left out:
/// the cell runs again.
pub(super) fn adopt_earlier(
    plan: &Plan,
    folder: &mut RunFolder,
    out: &Path,
    known: &HashMap<String, CellRecord>,
) -> Result<(Vec<CellRecord>, Vec<Shard>), SlurmError> {
    let tasks = out.join(script::SLURM_DIR).join(script::TASKS_DIR);
    let mut shards: Vec<std::path::PathBuf> = match std::fs::read_dir(&tasks) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(_) => return Ok((Vec::new(), Vec::new())),
    };
    shards.sort();
    let mut adopted: Vec<CellRecord> = Vec::new();
    let mut entries = Vec::new();
    for shard in shards {
        let Ok(read) = merge::read_shard(&shard) else {
            continue;
        };
        let stopped = read.manifest.state != crate::record::RunState::Finished;
        let mut taken = 0;
        for record in &read.records {
            let in_plan = plan.cells.iter().any(|c| c.id.as_str() == record.id);
            let seen = known.contains_key(&record.id) || adopted.iter().any(|r| r.id == record.id);
            let signalled = record
                .exit
                .and_then(|e| e.signal)
                .is_some_and(|s| SLURM_SIGNALS.contains(&s));
            if !in_plan || seen || (stopped && signalled) {
                continue;
            }
            merge::copy_files(&shard, record, out).map_err(SlurmError::Collect)?;
            folder.append(record)?;
            adopted.push(record.clone());
            taken += 1;
        }
        if taken > 0 {
            entries.push(merge::shard_entry(&read, taken));
        }
    }
    Ok((adopted, entries))
}

/// Signals Slurm sends every process of a task it ends: `SIGTERM`, then `SIGKILL`.
const SLURM_SIGNALS: [i32; 2] = [15, 9];

/// A failure recorded this close to its task's end (start times are to the second, and the
/// node's clock may be a little off the controller's) is taken as Slurm's doing.
const END_WINDOW_S: u64 = 3;

/// Whether a shard's record is the cell dying of Slurm ending its task: Slurm signals every
/// process of the task at once, so the cell's command may end (and be recorded as failing)
/// before the task's gpucompat hears of it. Such a failure ended by Slurm's signal, or within
/// moments of the task's end (a server that exits cleanly on `SIGTERM`), is not the cell's. A
/// cell that passed, or failed earlier, keeps its record.
fn killed_by_slurm(record: &CellRecord, state: Option<&TaskState>) -> bool {
    let Some(state) = state.filter(|s| s.ended_by_cluster()) else {
        return false;
    };
    let failed = matches!(record.status, Status::Fail | Status::Xfail | Status::Xpass);
    let signalled = record
        .exit
        .and_then(|e| e.signal)
        .is_some_and(|s| SLURM_SIGNALS.contains(&s));
    let finished = merge::finished(record)
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let at_the_end = state
        .ended_at
        .is_some_and(|end| finished.saturating_add(END_WINDOW_S) >= end);
    failed && (signalled || at_the_end)
}

/// The record of a cell its task never recorded: a spurious `error` (the cluster's doing, not
/// the cell's), the Slurm state in `reason`, and a log with whatever the cell wrote before and
/// the end of the task's Slurm output.
fn lost_record(
    plan: &Plan,
    cell: usize,
    id: TaskId,
    state: Option<&TaskState>,
    out: &Path,
    shard: &Path,
) -> CellRecord {
    let output = format!("{}/{}/{id}.out", script::SLURM_DIR, script::OUTPUT_DIR);
    let reason = match state {
        Some(state) => format!("{}; task output: {output}", state.reason(id)),
        None => format!(
            "Slurm: task {id} ended without Slurm reporting a state (cancelled before it started?); task output: {output}"
        ),
    };
    let host = state
        .and_then(|s| s.nodes.clone())
        .unwrap_or_else(|| "slurm".to_owned());
    let record = CellRecord {
        spurious: true,
        // The cluster's state decided, not anything the cell printed.
        decided_by: Some("harness".to_owned()),
        ..run::unrun_record(plan, cell, &host, Status::Error, reason.clone())
    };
    let mut log = std::fs::read_to_string(shard.join(&record.log)).unwrap_or_default();
    if !log.is_empty() && !log.ends_with('\n') {
        log.push('\n');
    }
    log.push_str(&format!("[gpucompat] {reason}\n"));
    if let Ok(text) = std::fs::read_to_string(out.join(&output)) {
        let lines: Vec<&str> = text.lines().collect();
        log.push_str(&format!("[gpucompat] the last lines of {output}:\n"));
        for line in &lines[lines.len().saturating_sub(OUTPUT_TAIL)..] {
            log.push_str(&format!("[gpucompat] | {line}\n"));
        }
    }
    // The record says why either way; a log that cannot be written is not worth more.
    let _ = std::fs::write(out.join(&record.log), log);
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Exit;

    fn record(
        status: Status,
        signal: Option<i32>,
        started_at: &str,
        duration_s: f64,
    ) -> CellRecord {
        CellRecord {
            id: "c".into(),
            values: Default::default(),
            pins: Vec::new(),
            status,
            signature: None,
            phase: None,
            duration_s,
            attempts: 1,
            log: "logs/c.log".into(),
            metrics: Default::default(),
            runner: Default::default(),
            fingerprint: None,
            line: None,
            excerpt: None,
            exit: Some(Exit { code: None, signal }),
            spurious: false,
            reason: None,
            expectation: None,
            started_at: Some(started_at.into()),
            leaked: 0,
            hang: None,
            decided_by: None,
            evidence: Vec::new(),
            format_version: 1,
        }
    }

    fn state(name: &str, ended_at: Option<u64>) -> TaskState {
        TaskState {
            state: name.into(),
            exit: None,
            nodes: None,
            reason: None,
            ended_at,
        }
    }

    #[test]
    fn a_requeued_task_is_read_from_its_last_try() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = TaskId { job: 7, task: 2 };
        assert_eq!(latest_shard(dir.path(), id), dir.path().join("7_2"));
        for name in [
            "7_2",
            "7_2.restart1",
            "7_2.restart10",
            "7_2.restart9",
            "7_20.restart99",
        ] {
            std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        }
        assert_eq!(
            latest_shard(dir.path(), id),
            dir.path().join("7_2.restart10")
        );
    }

    #[test]
    fn only_failures_slurm_caused_lose_their_record() {
        // 2026-11-25T23:00:00Z
        let end = 1_795_647_600;
        let at = "2026-11-25T22:59:00Z";
        let timeout = state("TIMEOUT", Some(end));
        // Killed by Slurm's SIGTERM, or failing as the task ended: Slurm's doing.
        assert!(killed_by_slurm(
            &record(Status::Fail, Some(15), at, 1.0),
            Some(&timeout)
        ));
        assert!(killed_by_slurm(
            &record(Status::Fail, None, at, 59.0),
            Some(&timeout)
        ));
        // A failure of its own, well before the end, and any pass, are the cell's.
        assert!(!killed_by_slurm(
            &record(Status::Fail, Some(11), at, 1.0),
            Some(&timeout)
        ));
        assert!(!killed_by_slurm(
            &record(Status::Pass, Some(15), at, 59.0),
            Some(&timeout)
        ));
        // A task that ended on its own says nothing about its cells' signals.
        let completed = state("COMPLETED", Some(end));
        assert!(!killed_by_slurm(
            &record(Status::Fail, Some(15), at, 59.0),
            Some(&completed)
        ));
        assert!(!killed_by_slurm(
            &record(Status::Fail, Some(9), at, 1.0),
            None
        ));
    }
}
