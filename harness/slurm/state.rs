//! What Slurm says about array tasks: `squeue` and `sacct --parsable2` lines parsed, and which
//! states are still going and which ended a task for reasons of the cluster, not of its cells.

use std::collections::HashMap;

/// An array task, as Slurm names it: `JOB_TASK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId {
    pub job: u64,
    pub task: u32,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_{}", self.job, self.task)
    }
}

/// What Slurm last said about a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskState {
    /// The state's name as Slurm prints it (`RUNNING`, `TIMEOUT`, `CANCELLED`, ...), without
    /// `sacct`'s ` by UID` suffix.
    pub state: String,
    /// `sacct`'s `ExitCode` (`1:0`), when it came from `sacct`.
    pub exit: Option<String>,
    /// The node(s) it ran on, when it started.
    pub nodes: Option<String>,
    /// Why it waits (squeue's reason), when pending.
    pub reason: Option<String>,
    /// When it ended, in seconds since the epoch (`sacct`'s `End`).
    pub ended_at: Option<u64>,
}

/// States of a task that has not ended yet (a requeued task runs again).
const GOING: &[&str] = &[
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
];

/// States in which Slurm itself ended a task: it signalled every process of the task (`SIGTERM`,
/// then `SIGKILL`), its cells' included, or lost them with their node.
const ENDED_BY_CLUSTER: &[&str] = &[
    "TIMEOUT",
    "CANCELLED",
    "PREEMPTED",
    "NODE_FAIL",
    "BOOT_FAIL",
    "OUT_OF_MEMORY",
    "DEADLINE",
];

impl TaskState {
    /// Whether Slurm ended the task (time limit, cancel, preemption, node failure, memory):
    /// a cell killed by a signal then was killed by Slurm, not by its own fault.
    pub fn ended_by_cluster(&self) -> bool {
        ENDED_BY_CLUSTER.contains(&self.state.as_str())
    }

    /// Whether the task may still run (or is running).
    pub fn going(&self) -> bool {
        GOING.contains(&self.state.as_str())
    }

    /// Why a cell of a task that ended in this state has no record, for the cell's spurious
    /// `error` record. The state is always named, as Slurm spells it.
    pub fn reason(&self, id: TaskId) -> String {
        let why = match self.state.as_str() {
            "TIMEOUT" => "hit its Slurm time limit",
            "CANCELLED" => "was cancelled (scancel or an administrator)",
            "PREEMPTED" => "was preempted by a job of higher priority",
            "NODE_FAIL" => "lost its node",
            "BOOT_FAIL" => "could not boot its node",
            "OUT_OF_MEMORY" => "ran out of its memory allocation",
            "DEADLINE" => "passed its deadline",
            "FAILED" => "ended with an error before the cell's record was written",
            "COMPLETED" => "ended without a record of the cell",
            _ => "ended",
        };
        let mut text = format!("Slurm {}: task {id} {why}", self.state);
        if let Some(exit) = self.exit.as_deref().filter(|e| *e != "0:0") {
            text.push_str(&format!(" (exit {exit})"));
        }
        if let Some(nodes) = &self.nodes {
            text.push_str(&format!(" on {nodes}"));
        }
        text
    }
}

/// A line Slurm printed that is not what was asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read `{program}` output line `{line}`: {why}")]
pub struct ParseError {
    pub program: &'static str,
    pub line: String,
    pub why: &'static str,
}

/// `sbatch --parsable`: `JOBID` or `JOBID;CLUSTER`.
pub fn parse_sbatch(text: &str) -> Result<u64, ParseError> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let id = line.split(';').next().unwrap_or("").trim();
    id.parse().map_err(|_| ParseError {
        program: "sbatch",
        line: line.to_owned(),
        why: "expected a job id",
    })
}

/// `JOB_TASK`; `None` for a line that names a whole array or several tasks (`12_[3-5]`: tasks
/// not yet split off a pending array) or a job that is not an array.
fn task_id(text: &str) -> Option<TaskId> {
    let (job, task) = text.trim().split_once('_')?;
    Some(TaskId {
        job: job.parse().ok()?,
        task: task.parse().ok()?,
    })
}

/// `12_[3-5,7]` or `12_[3-5%2]`: the tasks of a pending array that Slurm prints on one line.
fn pending_tasks(text: &str) -> Vec<TaskId> {
    let Some((job, rest)) = text.trim().split_once('_') else {
        return Vec::new();
    };
    let (Ok(job), Some(list)) = (
        job.parse::<u64>(),
        rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')),
    ) else {
        return Vec::new();
    };
    let list = list.split('%').next().unwrap_or("");
    let mut tasks = Vec::new();
    for part in list.split(',') {
        let (from, to) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(from), Ok(to)) = (from.parse::<u32>(), to.parse::<u32>()) {
            tasks.extend(
                (from..=to.min(from.saturating_add(100_000))).map(|task| TaskId { job, task }),
            );
        }
    }
    tasks
}

fn field(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty() && text != "None" && text != "None assigned" && text != "(null)")
        .then(|| text.to_owned())
}

/// `squeue --array --format=%i|%T|%r|%N` lines.
pub fn parse_squeue(text: &str) -> Result<HashMap<TaskId, TaskState>, ParseError> {
    let mut states = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split('|').collect();
        let [id, state, reason, nodes] = fields[..] else {
            return Err(ParseError {
                program: "squeue",
                line: line.to_owned(),
                why: "expected 4 fields separated by `|`",
            });
        };
        let value = TaskState {
            state: state.trim().to_owned(),
            exit: None,
            nodes: field(nodes),
            reason: field(reason),
            ended_at: None,
        };
        match task_id(id) {
            Some(id) => {
                states.insert(id, value);
            }
            None => {
                for id in pending_tasks(id) {
                    states.insert(id, value.clone());
                }
            }
        }
    }
    Ok(states)
}

/// `sacct --allocations --parsable2 --noheader --format=JobID,State,ExitCode,NodeList,Start,End,...`
/// lines (times as `SLURM_TIME_FORMAT=%s` prints them); `CANCELLED by 0` is read as `CANCELLED`.
pub fn parse_sacct(text: &str) -> Result<HashMap<TaskId, TaskState>, ParseError> {
    let mut states = HashMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split('|').collect();
        if fields.len() < 4 {
            return Err(ParseError {
                program: "sacct",
                line: line.to_owned(),
                why: "expected at least 4 fields separated by `|`",
            });
        }
        let state = fields[1].split_whitespace().next().unwrap_or("").to_owned();
        let value = TaskState {
            state,
            exit: field(fields[2]),
            nodes: field(fields[3]),
            reason: None,
            ended_at: fields.get(5).and_then(|end| end.trim().parse().ok()),
        };
        match task_id(fields[0]) {
            Some(id) => {
                states.insert(id, value);
            }
            None => {
                for id in pending_tasks(fields[0]) {
                    states.insert(id, value.clone());
                }
            }
        }
    }
    Ok(states)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbatch_ids_with_and_without_a_cluster() {
        assert_eq!(parse_sbatch("12\n"), Ok(12));
        assert_eq!(parse_sbatch("345;gpu-cluster\n"), Ok(345));
        assert!(parse_sbatch("Submitted batch job 12\n").is_err());
        assert!(parse_sbatch("").is_err());
    }

    #[test]
    fn squeue_lines_split_pending_arrays_into_tasks() {
        let states = parse_squeue(
            "7_[2-3,5%2]|PENDING|Resources|\n7_0|RUNNING|None|node1\n7_1|COMPLETED|None|node2\n",
        )
        .expect("parses");
        let id = |task| TaskId { job: 7, task };
        assert_eq!(states.len(), 5);
        assert_eq!(states[&id(3)].state, "PENDING");
        assert_eq!(states[&id(3)].reason.as_deref(), Some("Resources"));
        assert_eq!(states[&id(5)].state, "PENDING");
        assert!(states[&id(0)].going());
        assert_eq!(states[&id(0)].nodes.as_deref(), Some("node1"));
        assert!(!states[&id(1)].going());
        assert!(parse_squeue("7_0 RUNNING\n").is_err());
    }

    #[test]
    fn sacct_states_drop_who_cancelled() {
        let states = parse_sacct(
            "9_0|COMPLETED|0:0|vm|1795647572|1795647573|00:00:01\n\
             9_1|TIMEOUT|0:15|vm|1795647572|1795647656|00:01:24\n\
             9_2|CANCELLED by 0|0:0|vm|1795647572|1795647575|00:00:03\n\
             9_3|NODE_FAIL|0:0|gpu7|1795647572|Unknown|00:00:03\n",
        )
        .expect("parses");
        let id = |task| TaskId { job: 9, task };
        assert_eq!(states[&id(2)].state, "CANCELLED");
        assert_eq!(states[&id(1)].ended_at, Some(1_795_647_656));
        assert_eq!(states[&id(3)].ended_at, None);
        assert_eq!(
            states[&id(1)].reason(id(1)),
            "Slurm TIMEOUT: task 9_1 hit its Slurm time limit (exit 0:15) on vm"
        );
        assert!(
            states[&id(3)]
                .reason(id(3))
                .starts_with("Slurm NODE_FAIL: task 9_3 lost its node")
        );
        assert!(!states[&id(2)].going());
        assert!(parse_sacct("9_0|COMPLETED\n").is_err());
    }
}
