//! `gpucompat run --executor slurm`: the cells as Slurm job arrays, one run folder at the end.
//!
//! - [`tasks`]: which cells each array task runs (one per cell, or cells sharing an
//!   environment past the array size limit) and the arrays by node shape: `--constraint` from the
//!   GPU archs' node features, `--gres=gpu:N`, `--time` from the cells' timeouts.
//! - [`script`]: each array's batch script (every task runs the same gpucompat, `run --cell ...
//!   --out SHARD`, into `slurm/tasks/JOB_TASK` of the run folder) and its `sbatch` arguments.
//! - [`state`]: `sbatch --parsable`, `squeue` and `sacct --parsable2` output, and what a state
//!   means for a task's cells.
//! - `collect`: the shards' records (and their logs) into the run folder, through
//!   [`crate::merge`]'s reading and copying; a cell of a task that Slurm ended before it had a
//!   record (time limit, cancel, preemption, lost node) gets a spurious `error` naming the state.
//!
//! The commands themselves run in [`crate::exec::slurm`]. The submitting process waits, polling
//! `squeue` with a growing interval; Ctrl-C cancels the jobs (`scancel`) and keeps what finished.
//! The run folder and the cache must be on a filesystem every node shares.

mod collect;
pub mod script;
pub mod state;
pub mod tasks;

use crate::exec::slurm::{self as commands, SlurmCommandError};
use crate::inventory::{self, Inventory};
use crate::matrix::{Plan, SlurmSettings};
use crate::record::{CellRecord, Manifest, RunState};
use crate::run::folder::{FolderError, RunFolder};
use crate::run::progress::Reporter;
use crate::run::{self, RunError, RunSummary};
use serde::Serialize;
use state::{TaskId, TaskState};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tasks::{Array, Shape};

/// How to submit and wait.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// The run folder (absolute: the tasks write into it from other hosts).
    pub out: PathBuf,
    pub resume: bool,
    pub retry_errors: bool,
    /// Only these cell ids (all when empty).
    pub cells: Vec<String>,
    /// The matrix's `[slurm]` with the command line's overrides applied.
    pub settings: SlurmSettings,
    /// The longest wait between two `squeue` polls.
    pub poll: Duration,
    /// Most array tasks; past it, cells sharing an environment share a task.
    pub max_tasks: usize,
    /// The gpucompat binary every task runs.
    pub exe: PathBuf,
    /// Options every task's `gpucompat run` gets (`--cache-dir`, `--log-limit`, ...).
    pub task_args: Vec<String>,
    pub quiet: bool,
}

/// A Slurm run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Command(SlurmCommandError),
    #[error("sbatch refused array {array} ({shape}); nothing of this run was left queued")]
    Rejected {
        array: usize,
        shape: String,
        #[source]
        source: SlurmCommandError,
    },
    #[error(transparent)]
    Parse(#[from] state::ParseError),
    #[error("`squeue` failed {0} times in a row; the jobs are left to Slurm")]
    Lost(usize, #[source] SlurmCommandError),
    #[error("cannot write `{path}`")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot collect the tasks' records")]
    Collect(#[source] crate::merge::MergeError),
    #[error("cannot install the Ctrl-C handler")]
    Signals(#[source] std::io::Error),
}

impl SlurmError {
    /// Bad input or configuration (exit 2) rather than a harness fault (exit 3): no Slurm client
    /// on PATH, or a submission Slurm refuses (an unknown partition or feature).
    pub fn is_input(&self) -> bool {
        match self {
            SlurmError::Run(err) => err.is_input(),
            SlurmError::Command(SlurmCommandError::Missing { .. }) => true,
            SlurmError::Rejected { .. } => true,
            _ => false,
        }
    }
}

impl From<FolderError> for SlurmError {
    fn from(err: FolderError) -> Self {
        SlurmError::Run(RunError::Folder(err))
    }
}

/// One submitted array, as `slurm/jobs.json` lists it.
#[derive(Debug, Clone, Serialize)]
struct Submitted {
    job: u64,
    script: String,
    constraint: Option<String>,
    gpus: usize,
    minutes: u64,
    /// Cell ids per array task index.
    tasks: Vec<Vec<String>>,
    #[serde(skip)]
    array: Array,
}

/// Submits the cells still to run, waits for every task, and collects their records into the
/// run folder. Cell failures are records; `Err` only for a run that could not happen.
pub async fn execute(plan: Plan, options: SlurmOptions) -> Result<RunSummary, SlurmError> {
    let selected = run::select(&plan, &options.cells)?;
    // No Slurm here is said before a run folder is made.
    commands::sbatch_version().map_err(SlurmError::Command)?;
    let mut opened = open(&plan, &options, selected.len())?;
    let to_run = run::still_to_run(&plan, selected, &opened.records, options.retry_errors);
    let shape = Shape {
        settings: options.settings.clone(),
    };
    let arrays = shape.arrays(&plan, &to_run, options.max_tasks);
    let submitted = match submit(&plan, &options, &arrays, &opened.reporter) {
        Ok(submitted) => submitted,
        Err(err) => {
            // Nothing ran: a new run folder is emptied again, so the same `--out` can be used
            // once the submission is fixed.
            if !options.resume {
                drop(opened.folder);
                if run::folder::clear(&options.out).is_ok() {
                    let _ = std::fs::remove_file(options.out.join(".lock"));
                }
            }
            return Err(err);
        }
    };
    let jobs: Vec<String> = submitted.iter().map(|s| s.job.to_string()).collect();
    let (states, interrupted) = if jobs.is_empty() {
        (HashMap::new(), false)
    } else {
        let waited = wait(&jobs, options.poll, &opened.reporter, &submitted, &plan).await?;
        (final_states(&jobs, waited.states), waited.interrupted)
    };
    let collected = collect::collect(
        &plan,
        &mut opened.folder,
        &options.out,
        &submitted,
        &states,
        interrupted,
    )?;
    finish(plan, options.out, opened, collected, interrupted)
}

/// The run folder as a Slurm run starts: opened (or resumed), its manifest and plan written,
/// and on `--resume` the records earlier tasks left in their shards taken in.
struct Opened {
    folder: RunFolder,
    manifest: Manifest,
    records: HashMap<String, CellRecord>,
    reporter: Reporter,
}

fn open(plan: &Plan, options: &SlurmOptions, selected: usize) -> Result<Opened, SlurmError> {
    let plan_json = serde_json::to_vec_pretty(plan).map_err(RunError::PlanJson)?;
    let (mut folder, previous) = RunFolder::open(&options.out, &plan.file_hash, options.resume)?;
    let submitter = Inventory {
        host: inventory::hostname(),
        gpus: Vec::new(),
        source: "slurm".to_owned(),
    };
    let mut manifest = run::open_manifest(previous.manifest, plan, &submitter);
    folder.write_manifest(&manifest)?;
    folder.write_atomic(run::folder::PLAN, &plan_json)?;
    let mut records = previous.records;
    let reporter = Reporter::new(selected, 0, false, options.quiet, None, 1);
    for bad in &previous.bad_lines {
        reporter.line(&format!("warning: {bad}"));
    }
    if options.resume {
        let (adopted, shards) = collect::adopt_earlier(plan, &mut folder, &options.out, &records)?;
        if !adopted.is_empty() {
            reporter.progress(&format!(
                "kept {} record(s) that earlier Slurm tasks wrote after this run stopped waiting",
                adopted.len()
            ));
        }
        manifest.shards.extend(shards);
        for record in adopted {
            records.insert(record.id.clone(), record);
        }
    }
    Ok(Opened {
        folder,
        manifest,
        records,
        reporter,
    })
}

/// The collected records said, the manifest closed, the summary in plan order.
fn finish(
    plan: Plan,
    out: PathBuf,
    opened: Opened,
    collected: collect::Collected,
    interrupted: bool,
) -> Result<RunSummary, SlurmError> {
    let Opened {
        folder,
        mut manifest,
        mut records,
        mut reporter,
    } = opened;
    for record in collected.records {
        reporter.finished(&record, true);
        records.insert(record.id.clone(), record);
    }
    reporter.done();
    manifest.finished_at = Some(run::now());
    manifest.state = if interrupted {
        RunState::Interrupted
    } else {
        RunState::Finished
    };
    manifest.shards.extend(collected.shards);
    folder.write_manifest(&manifest)?;
    let records = plan
        .cells
        .iter()
        .filter_map(|c| records.remove(c.id.as_str()))
        .collect();
    Ok(RunSummary {
        folder: out,
        records,
        new_records: collected.new_records,
        interrupted: interrupted.then_some(collected.unfinished),
        manifest,
    })
}

/// Writes each array's script and submits it. A refusal cancels the arrays already queued, so
/// a failed submission leaves nothing behind on the cluster.
fn submit(
    plan: &Plan,
    options: &SlurmOptions,
    arrays: &[Array],
    reporter: &Reporter,
) -> Result<Vec<Submitted>, SlurmError> {
    let slurm = options.out.join(script::SLURM_DIR);
    for dir in [script::TASKS_DIR, script::OUTPUT_DIR] {
        let path = slurm.join(dir);
        std::fs::create_dir_all(&path).map_err(|source| SlurmError::Write {
            path: path.display().to_string(),
            source,
        })?;
    }
    let matrix = std::path::absolute(&plan.path).unwrap_or_else(|_| plan.path.clone());
    let command = script::TaskCommand {
        exe: &options.exe,
        matrix: &matrix,
        out: &options.out,
        args: &options.task_args,
    };
    let name = format!("gpucompat-{}", plan.name.as_deref().unwrap_or("run"));
    let mut submitted: Vec<Submitted> = Vec::new();
    for (n, array) in arrays.iter().enumerate() {
        let path = free_name(&slurm, "array", "sh");
        let text = script::batch_script(plan, array, &command);
        std::fs::write(&path, text).map_err(|source| SlurmError::Write {
            path: path.display().to_string(),
            source,
        })?;
        let mut extra = options.settings.args.clone();
        extra.retain(|a| !a.is_empty());
        let args = script::sbatch_args(
            array,
            options.settings.partition.as_deref(),
            &name,
            &options.out,
            &extra,
        );
        let job = commands::sbatch(&args, &path, &options.out)
            .map_err(|source| match source {
                SlurmCommandError::Missing { .. } => SlurmError::Command(source),
                source => SlurmError::Rejected {
                    array: n + 1,
                    shape: describe(array),
                    source,
                },
            })
            .and_then(|text| state::parse_sbatch(&text).map_err(SlurmError::Parse));
        let job = match job {
            Ok(job) => job,
            Err(err) => {
                let queued: Vec<String> = submitted.iter().map(|s| s.job.to_string()).collect();
                if !queued.is_empty() {
                    let _ = commands::scancel(&queued);
                }
                return Err(err);
            }
        };
        reporter.progress(&format!(
            "submitted Slurm job {job}: {} task(s), {}",
            array.tasks.len(),
            describe(array)
        ));
        submitted.push(Submitted {
            job,
            script: path.display().to_string(),
            constraint: array.constraint.clone(),
            gpus: array.gpus,
            minutes: array.minutes,
            tasks: array
                .tasks
                .iter()
                .map(|t| {
                    t.cells
                        .iter()
                        .map(|&i| plan.cells[i].id.to_string())
                        .collect()
                })
                .collect(),
            array: array.clone(),
        });
    }
    if submitted.is_empty() {
        return Ok(submitted);
    }
    let path = free_name(&slurm, "jobs", "json");
    let text = serde_json::to_vec_pretty(&submitted).unwrap_or_default();
    std::fs::write(&path, text).map_err(|source| SlurmError::Write {
        path: path.display().to_string(),
        source,
    })?;
    Ok(submitted)
}

/// `constraint sm_90, gres gpu:1, time 11 min`.
fn describe(array: &Array) -> String {
    let mut parts = Vec::new();
    if let Some(c) = &array.constraint {
        parts.push(format!("constraint {c}"));
    }
    if array.gpus > 0 {
        parts.push(format!("gres gpu:{}", array.gpus));
    }
    parts.push(format!("time {} min", array.minutes));
    parts.join(", ")
}

/// `dir/STEM-N.EXT` for the first N not taken: a resumed run submits again beside the first.
fn free_name(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    (1..)
        .map(|n| dir.join(format!("{stem}-{n}.{ext}")))
        .find(|p| !p.exists())
        .unwrap_or_else(|| dir.join(format!("{stem}.{ext}")))
}

/// What the wait saw.
struct Waited {
    /// The last state `squeue` gave each task.
    states: HashMap<TaskId, TaskState>,
    /// Ctrl-C or SIGTERM cancelled the jobs.
    interrupted: bool,
}

/// First poll after this long, then twice as long each time up to the `--slurm-poll` maximum.
const FIRST_POLL: Duration = Duration::from_millis(250);
/// `squeue` failures in a row (a controller restarting) before the wait gives up.
const SQUEUE_RETRIES: usize = 8;

/// Polls `squeue` until no task of `jobs` can run any more. The first Ctrl-C cancels the jobs
/// and keeps waiting for Slurm to end them; a second stops waiting.
async fn wait(
    jobs: &[String],
    poll: Duration,
    reporter: &Reporter,
    submitted: &[Submitted],
    plan: &Plan,
) -> Result<Waited, SlurmError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(SlurmError::Signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(SlurmError::Signals)?;
    let mut states: HashMap<TaskId, TaskState> = HashMap::new();
    let mut interrupted = false;
    let mut failures = 0;
    let mut delay = FIRST_POLL;
    loop {
        match commands::squeue(jobs) {
            Ok(text) => {
                failures = 0;
                let now = state::parse_squeue(&text)?;
                for (id, new) in &now {
                    if states.get(id).is_none_or(|old| old.state != new.state) {
                        reporter.progress(&transition(*id, new, submitted, plan));
                        delay = FIRST_POLL;
                    }
                }
                let going = now.values().any(TaskState::going);
                states.extend(now);
                if !going {
                    break;
                }
            }
            // The controller forgot the jobs (they ended longer ago than its MinJobAge).
            Err(SlurmCommandError::Failed { ref stderr, .. })
                if stderr.contains("Invalid job id") =>
            {
                break;
            }
            Err(err @ SlurmCommandError::Missing { .. }) => return Err(SlurmError::Command(err)),
            Err(err) => {
                failures += 1;
                if failures >= SQUEUE_RETRIES {
                    return Err(SlurmError::Lost(failures, err));
                }
            }
        }
        let stop = async {
            tokio::select! {
                _ = interrupt.recv() => "interrupted (SIGINT)",
                _ = terminate.recv() => "terminated (SIGTERM)",
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            why = stop => {
                if interrupted {
                    reporter.line(&format!("{why} again: not waiting for Slurm to end the cancelled tasks"));
                    break;
                }
                interrupted = true;
                reporter.line(&format!(
                    "{why}: cancelling Slurm job(s) {}; finished cells are kept; press Ctrl-C again to stop waiting",
                    jobs.join(", ")
                ));
                if let Err(err) = commands::scancel(jobs) {
                    reporter.line(&format!("warning: {err}"));
                }
                delay = FIRST_POLL;
                continue;
            }
        }
        delay = (delay * 2).min(poll.max(FIRST_POLL));
    }
    Ok(Waited {
        states,
        interrupted,
    })
}

/// `slurm 12_0 RUNNING on node3: cell-a, cell-b`.
fn transition(id: TaskId, state: &TaskState, submitted: &[Submitted], plan: &Plan) -> String {
    let cells = submitted
        .iter()
        .find(|s| s.job == id.job)
        .and_then(|s| s.array.tasks.get(id.task as usize))
        .map(|t| {
            t.cells
                .iter()
                .map(|&i| plan.cells[i].id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let place = match (&state.nodes, &state.reason) {
        (Some(nodes), _) if state.state != "PENDING" => format!(" on {nodes}"),
        (_, Some(reason)) if state.state == "PENDING" => format!(" ({reason})"),
        _ => String::new(),
    };
    format!("   SLURM {id} {}{place}: {cells}", state.state)
}

/// How long `sacct` is given to catch up with `squeue`: the controller sends a job's end to the
/// accounting daemon asynchronously.
const SACCT_CATCH_UP: Duration = Duration::from_secs(10);

/// The tasks' final states: `sacct`'s (with exit codes, and for tasks the controller already
/// forgot) where accounting has them, else the last `squeue` state.
fn final_states(
    jobs: &[String],
    mut states: HashMap<TaskId, TaskState>,
) -> HashMap<TaskId, TaskState> {
    let start = std::time::Instant::now();
    loop {
        // Without accounting (`sacct` refuses), `squeue`'s states are all there is.
        let Some(accounted) = commands::sacct(jobs)
            .ok()
            .and_then(|text| state::parse_sacct(&text).ok())
        else {
            return states;
        };
        let behind = states.iter().any(|(id, s)| {
            accounted
                .get(id)
                .is_none_or(|a| a.going() || a.state != s.state)
        });
        if !behind || start.elapsed() > SACCT_CATCH_UP {
            for (id, state) in accounted {
                if !state.going() {
                    states.insert(id, state);
                }
            }
            return states;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
