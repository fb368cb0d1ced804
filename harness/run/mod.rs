//! `gpucompat run`: every cell of a plan, concurrently on the right GPUs, into a run folder.
//!
//! - [`folder`]: the run folder (results, logs, plan, manifest, lock) and resuming it.
//! - [`slots`]: which GPUs are free and which a cell gets.
//! - [`cell`]: one cell's lifecycle: launch, ready, infer, validate, teardown, retries.
//! - [`server`]: readiness, the completion request and answer validation over loopback HTTP.
//! - [`outcome`]: the table from attempts and expectations to a status.
//! - [`progress`]: the live display and the per-cell lines.
//!
//! The dispatcher here is the single owner of the run folder: cells report back through their
//! task's result and only this loop appends to `results.jsonl`, so records never interleave.

pub mod cell;
pub mod folder;
pub mod outcome;
pub mod port;
pub mod progress;
pub mod server;
pub mod slots;

use crate::classify::Classifier;
use crate::digest::sha256_hex;
use crate::exec::logsink::LogLimits;
use crate::exec::reaper::Reaper;
use crate::inventory::Inventory;
use crate::matrix::{Plan, gpus};
use crate::record::{CellRecord, FORMAT_VERSION, Manifest, RunState, Runner, Status};
use crate::schedule::{Job, Scheduler};
use crate::watchdog::GpuActivity;
use cell::{CellEnd, Shared};
use folder::{FolderError, RunFolder};
use progress::Reporter;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub out: PathBuf,
    /// Cells at a time; `None` picks one per GPU (or per CPU when no cell needs a GPU).
    pub jobs: Option<usize>,
    pub inventory: Inventory,
    pub resume: bool,
    /// Only these cell ids (all when empty).
    pub cells: Vec<String>,
    pub cache_root: PathBuf,
    pub limits: LogLimits,
    pub grace: Duration,
    /// The binary to start as the reaper (`None`: no reaper, for library use in tests).
    pub reaper_exe: Option<PathBuf>,
    /// Draw a live bar instead of plain lines.
    pub interactive: bool,
}

/// What a run left behind.
#[derive(Debug)]
pub struct RunSummary {
    pub folder: PathBuf,
    /// The last record of every cell that has one, in plan order (earlier runs' included).
    pub records: Vec<CellRecord>,
    /// Records written by this invocation.
    pub new_records: usize,
    /// Cells torn down by an interruption (they have no record; `--resume` runs them).
    pub interrupted: Option<usize>,
    pub manifest: Manifest,
}

/// A run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Folder(#[from] FolderError),
    #[error("no cell `{id}` in the plan{hint}")]
    UnknownCell { id: String, hint: String },
    #[error("cannot start the reaper process (`{exe}`)")]
    Reaper {
        exe: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot install the Ctrl-C handler")]
    Signals(#[source] std::io::Error),
}

impl RunError {
    pub fn is_input(&self) -> bool {
        match self {
            RunError::Folder(err) => err.is_input(),
            RunError::UnknownCell { .. } => true,
            RunError::Reaper { .. } | RunError::Signals(_) => false,
        }
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn run_token(host: &str) -> String {
    let seed = format!(
        "{host}\n{}\n{:?}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
    );
    sha256_hex(seed.as_bytes(), 8)
}

/// Picks the cells to run: all, or those named with `--cell`.
fn select(plan: &Plan, wanted: &[String]) -> Result<Vec<usize>, RunError> {
    if wanted.is_empty() {
        return Ok((0..plan.cells.len()).collect());
    }
    let mut picked = Vec::new();
    for id in wanted {
        match plan.cells.iter().position(|c| c.id.as_str() == id) {
            Some(index) if !picked.contains(&index) => picked.push(index),
            Some(_) => {}
            None => {
                let ids: Vec<&str> = plan.cells.iter().map(|c| c.id.as_str()).collect();
                let near = ids
                    .iter()
                    .map(|c| (strsim::jaro_winkler(id, c), *c))
                    .filter(|(score, _)| *score > 0.85)
                    .max_by(|a, b| a.0.total_cmp(&b.0));
                let hint = match near {
                    Some((_, c)) => format!("; did you mean `{c}`?"),
                    None => "; `gpucompat matrix expand FILE` lists the ids".to_owned(),
                };
                return Err(RunError::UnknownCell {
                    id: id.clone(),
                    hint,
                });
            }
        }
    }
    picked.sort_unstable();
    Ok(picked)
}

/// Cells with the same group share an environment and a JIT cache: the pins, the base
/// requirement file and the GPU archs.
pub fn environment_group(plan: &Plan, index: usize) -> String {
    let cell = &plan.cells[index];
    format!(
        "{}|{}|{}",
        cell.pins_text(),
        cell.requirements
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        gpus::format(&cell.gpus)
    )
}

/// A record for a cell this host cannot serve.
fn skip_record(plan: &Plan, index: usize, folder: &RunFolder, inventory: &Inventory) -> CellRecord {
    let cell = &plan.cells[index];
    let have = if inventory.gpus.is_empty() {
        "no GPUs".to_owned()
    } else {
        gpus::format(
            &inventory
                .gpus
                .iter()
                .map(|g| g.arch.clone())
                .collect::<Vec<_>>(),
        )
    };
    let reason = format!(
        "needs {} GPUs; this host has {have} (inventory: {})",
        gpus::format(&cell.gpus),
        inventory.source
    );
    let (path, _) = folder.log_path(cell.id.as_str(), 1);
    let _ = std::fs::write(&path, format!("[gpucompat] skipped: {reason}\n"));
    CellRecord {
        attempts: 0,
        ..unrun_record(plan, index, &inventory.host, Status::Skip, reason)
    }
}

/// A record for a cell whose task died: a fault of the harness, kept as data so nothing is lost.
fn harness_fault_record(plan: &Plan, index: usize, host: &str, what: &str) -> CellRecord {
    CellRecord {
        spurious: true,
        ..unrun_record(
            plan,
            index,
            host,
            Status::Error,
            format!("harness fault: {what}"),
        )
    }
}

/// A record of a cell the harness has nothing else to say about: no run, no timings, a reason.
fn unrun_record(
    plan: &Plan,
    index: usize,
    host: &str,
    status: Status,
    reason: String,
) -> CellRecord {
    let cell = &plan.cells[index];
    CellRecord {
        id: cell.id.to_string(),
        values: cell.values.clone(),
        pins: cell.pins.iter().map(ToString::to_string).collect(),
        status,
        signature: None,
        phase: None,
        duration_s: 0.0,
        attempts: 1,
        log: folder::log_relative(cell.id.as_str(), 1),
        metrics: Default::default(),
        runner: Runner {
            host: host.to_owned(),
            gpus: Vec::new(),
        },
        fingerprint: None,
        line: None,
        excerpt: None,
        exit: None,
        spurious: false,
        reason: Some(reason),
        expectation: cell.expectation.clone(),
        started_at: Some(now()),
        leaked: 0,
        format_version: FORMAT_VERSION,
    }
}

/// Runs the plan. Cell failures are records; `Err` is only for a run that could not happen.
pub async fn execute(plan: Plan, options: RunOptions) -> Result<RunSummary, RunError> {
    let selected = select(&plan, &options.cells)?;
    let (mut folder, (previous, existing)) =
        RunFolder::open(&options.out, &plan.file_hash, options.resume)?;
    let inventory = options.inventory.clone();
    let mut manifest = match previous {
        Some(mut manifest) => {
            manifest.resumes += 1;
            manifest.state = RunState::Running;
            manifest.finished_at = None;
            manifest.cells = plan.cells.len();
            manifest.replay = plan.replay;
            manifest
        }
        None => Manifest {
            format_version: FORMAT_VERSION,
            harness_version: env!("CARGO_PKG_VERSION").to_owned(),
            matrix: plan.path.display().to_string(),
            matrix_hash: plan.file_hash.clone(),
            host: inventory.host.clone(),
            started_at: now(),
            finished_at: None,
            state: RunState::Running,
            cells: plan.cells.len(),
            replay: plan.replay,
            resumes: 0,
            inventory: inventory.source.clone(),
        },
    };
    folder.write_manifest(&manifest)?;
    let plan_json = serde_json::to_vec_pretty(&plan).unwrap_or_default();
    folder.write_atomic(folder::PLAN, &plan_json)?;

    // A resumed run keeps finished cells; skipped ones get another chance (the host may differ).
    let mut records: HashMap<String, CellRecord> = existing;
    let to_run: Vec<usize> = selected
        .into_iter()
        .filter(|&i| {
            records
                .get(plan.cells[i].id.as_str())
                .is_none_or(|r| r.status == Status::Skip)
        })
        .collect();
    let kept = plan.cells.len().min(records.len());

    let needs_gpus = to_run.iter().any(|&i| !plan.cells[i].gpus.is_empty());
    let jobs = options
        .jobs
        .unwrap_or_else(|| {
            if needs_gpus {
                inventory.gpus.len()
            } else {
                std::thread::available_parallelism().map_or(1, usize::from)
            }
        })
        .max(1);

    let run_token = run_token(&inventory.host);
    let reaper = match &options.reaper_exe {
        Some(exe) => Some(
            Reaper::start(exe, &run_token).map_err(|source| RunError::Reaper {
                exe: exe.display().to_string(),
                source,
            })?,
        ),
        None => None,
    };
    let classifier = Classifier::with_rules(&plan.rules).unwrap_or_else(|_| Classifier::builtin());
    let gpu_activity = if needs_gpus {
        GpuActivity::start()
    } else {
        None
    };
    let mut reporter = Reporter::new(to_run.len(), 0, options.interactive);
    reporter.line(&format!(
        "{} {} of {} cells of {} into {} ({} at a time; GPUs: {}){}",
        if plan.replay {
            "replaying recorded runs:"
        } else {
            "running"
        },
        to_run.len(),
        plan.cells.len(),
        plan.path.display(),
        options.out.display(),
        jobs,
        if inventory.gpus.is_empty() {
            "none".to_owned()
        } else {
            inventory
                .gpus
                .iter()
                .map(|g| format!("{}:{}", g.index, g.arch))
                .collect::<Vec<_>>()
                .join(" ")
        },
        if kept > 0 {
            format!("; {kept} finished earlier")
        } else {
            String::new()
        }
    ));

    let schedule_jobs: Vec<Job> = to_run
        .iter()
        .map(|&index| {
            let cell = &plan.cells[index];
            Job {
                index,
                gpus: cell.gpus.clone(),
                group: environment_group(&plan, index),
                duration: None,
            }
        })
        .collect();
    let (mut scheduler, never) = Scheduler::new(schedule_jobs, inventory.gpus.clone());
    let mut new_records = 0usize;
    let mut never: Vec<usize> = never.iter().map(|&p| scheduler.job(p).index).collect();
    never.sort_unstable();
    for index in never {
        let record = skip_record(&plan, index, &folder, &inventory);
        folder.append(&record)?;
        new_records += 1;
        reporter.finished(&record, false);
        records.insert(record.id.clone(), record);
    }

    let plan_order: Vec<String> = plan.cells.iter().map(|c| c.id.to_string()).collect();
    let shared = Arc::new(Shared {
        plan,
        run_token,
        root: options.out.clone(),
        cache_root: options.cache_root.clone(),
        classifier,
        reaper,
        gpu_activity,
        limits: options.limits,
        grace: options.grace,
        host: inventory.host.clone(),
        http: server::client(),
    });
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(RunError::Signals)?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(RunError::Signals)?;
    let mut tasks: JoinSet<CellEnd> = JoinSet::new();
    let mut in_flight: HashMap<tokio::task::Id, (usize, Vec<usize>)> = HashMap::new();
    let mut interrupted: Option<usize> = None;
    let mut fault: Option<FolderError> = None;

    loop {
        if interrupted.is_none() && fault.is_none() {
            for (position, taken) in scheduler.start(tasks.len(), jobs) {
                let index = scheduler.job(position).index;
                let gpus: Vec<_> = taken.iter().map(|&s| scheduler.gpu(s).clone()).collect();
                reporter.started(shared.plan.cells[index].id.as_str(), &gpus);
                let handle = tasks.spawn(cell::run_cell(
                    Arc::clone(&shared),
                    index,
                    gpus,
                    cancel_rx.clone(),
                ));
                in_flight.insert(handle.id(), (index, taken));
            }
        }
        if tasks.is_empty() {
            break;
        }
        let stop_asked = async {
            tokio::select! {
                _ = interrupt.recv() => "interrupted (SIGINT)",
                _ = terminate.recv() => "terminated (SIGTERM)",
            }
        };
        tokio::select! {
            Some(joined) = tasks.join_next_with_id() => {
                let (id, end) = match joined {
                    Ok((id, end)) => (id, Ok(end)),
                    Err(err) => (err.id(), Err(err.to_string())),
                };
                let Some((index, taken)) = in_flight.remove(&id) else { continue };
                scheduler.release(&taken);
                let record = match end {
                    Ok(CellEnd::Finished(record)) => *record,
                    Ok(CellEnd::Interrupted) => {
                        reporter.interrupted_cell();
                        continue;
                    }
                    Err(what) => harness_fault_record(&shared.plan, index, &shared.host, &what),
                };
                if let Err(err) = folder.append(&record) {
                    // The run cannot keep results: stop starting cells, tear down the rest.
                    reporter.line(&format!("error: {err}; stopping the run"));
                    let _ = cancel_tx.send(true);
                    fault = Some(err);
                    continue;
                }
                new_records += 1;
                reporter.finished(&record, true);
                records.insert(record.id.clone(), record);
            }
            why = stop_asked, if interrupted.is_none() => {
                reporter.line(&format!(
                    "{why}: tearing down {} running cell(s) (up to {:?} each); finished cells are kept",
                    tasks.len(),
                    shared.grace
                ));
                interrupted = Some(tasks.len());
                let _ = cancel_tx.send(true);
            }
        }
    }
    reporter.done();
    if let Some(gpu) = &shared.gpu_activity {
        gpu.stop();
    }
    if let Ok(shared) = Arc::try_unwrap(shared) {
        if let Some(reaper) = shared.reaper {
            reaper.finish();
        }
    }
    manifest.finished_at = Some(now());
    manifest.state = if interrupted.is_some() || fault.is_some() || scheduler.pending() > 0 {
        RunState::Interrupted
    } else {
        RunState::Finished
    };
    folder.write_manifest(&manifest)?;
    if let Some(err) = fault {
        return Err(err.into());
    }
    let mut ordered = Vec::with_capacity(records.len());
    for id in &plan_order {
        if let Some(record) = records.remove(id) {
            ordered.push(record);
        }
    }
    Ok(RunSummary {
        folder: options.out,
        records: ordered,
        new_records,
        interrupted: interrupted.map(|n| n + scheduler.pending()),
        manifest,
    })
}
