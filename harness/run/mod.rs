//! `gpucompat run`: every cell of a plan, concurrently on the right GPUs, into a run folder.
//!
//! - [`folder`]: the run folder (results, logs, plan, manifest, lock) and resuming it.
//! - `cell`: one cell's lifecycle: launch, ready, infer, validate, teardown, retries.
//! - `server`: readiness, the completion request and answer validation over loopback HTTP.
//! - `outcome`: the table from attempts and expectations to a status.
//! - `progress`: the live display and the per-cell lines.
//!
//! The dispatcher here is the single owner of the run folder: cells report back through their
//! task's result and only this loop appends to `results.jsonl`, so records never interleave.

pub(crate) mod cell;
pub mod folder;
pub(crate) mod outcome;
pub(crate) mod port;
pub(crate) mod progress;
pub(crate) mod server;

use crate::classify::{Classifier, ClassifyError};
use crate::digest::sha256_hex;
use crate::exec::logsink::LogLimits;
use crate::exec::reaper::Reaper;
use crate::inventory::Inventory;
use crate::matrix::{Plan, gpus};
use crate::record::{CellRecord, FORMAT_VERSION, Manifest, RunState, Runner, Status};
use crate::schedule::{self, Scheduler};
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
    /// On resume, run again the cells whose record is a spurious (infrastructure) `error`.
    pub retry_errors: bool,
    /// Only these cell ids (all when empty).
    pub cells: Vec<String>,
    pub cache_root: PathBuf,
    pub limits: LogLimits,
    pub grace: Duration,
    /// The binary to start as the reaper (`None`: no reaper, for library use in tests).
    pub reaper_exe: Option<PathBuf>,
    /// Draw a live bar instead of plain lines.
    pub interactive: bool,
    /// A SLOW line for a cell each time it has run this much longer (`None`: never).
    pub slow_after: Option<Duration>,
    /// No line per cell and no intro line (`false` for `gpucompat run`): a caller that reports
    /// each cell itself, such as `gpucompat bisect`. Faults and interruptions are still said.
    pub quiet: bool,
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
    /// A `[[rules]]` pattern of the matrix file does not compile.
    #[error("cannot use the matrix file's `[[rules]]`")]
    Rules(#[source] ClassifyError),
    #[error("cannot build the HTTP client for the cells' servers")]
    Http(#[source] reqwest::Error),
    #[error("cannot write the plan as JSON")]
    PlanJson(#[source] serde_json::Error),
}

impl RunError {
    pub fn is_input(&self) -> bool {
        match self {
            RunError::Folder(err) => err.is_input(),
            RunError::UnknownCell { .. } | RunError::Rules(_) => true,
            RunError::Reaper { .. }
            | RunError::Signals(_)
            | RunError::Http(_)
            | RunError::PlanJson(_) => false,
        }
    }
}

pub(crate) fn now() -> String {
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
pub(crate) fn select(plan: &Plan, wanted: &[String]) -> Result<Vec<usize>, RunError> {
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
                let hint = match crate::suggest::did_you_mean(id, &ids) {
                    Some(c) => format!("; did you mean `{c}`?"),
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
    // The record says why whether or not its log could be written; a log that could not be
    // is named in the reason, not left to look empty.
    let reason = match std::fs::write(&path, format!("[gpucompat] skipped: {reason}\n")) {
        Ok(()) => reason,
        Err(err) => format!("{reason}; its log could not be written: {err}"),
    };
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
pub(crate) fn unrun_record(
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
        decided_by: None,
        evidence: Vec::new(),
        exit: None,
        spurious: false,
        reason: Some(reason),
        expectation: cell.expectation.clone(),
        started_at: Some(now()),
        leaked: 0,
        hang: None,
        format_version: FORMAT_VERSION,
    }
}

/// Runs the plan. Cell failures are records; `Err` is only for a run that could not happen.
pub async fn execute(plan: Plan, options: RunOptions) -> Result<RunSummary, RunError> {
    let selected = select(&plan, &options.cells)?;
    // Everything that can fail before a cell runs fails before the run folder exists.
    let classifier = Classifier::with_rules(&plan.rules).map_err(RunError::Rules)?;
    let http = server::client().map_err(RunError::Http)?;
    let plan_json = serde_json::to_vec_pretty(&plan).map_err(RunError::PlanJson)?;
    let (folder, previous) = RunFolder::open(&options.out, &plan.file_hash, options.resume)?;
    let mut records = previous.records;
    let mut manifest = open_manifest(previous.manifest, &plan, &options.inventory);
    folder.write_manifest(&manifest)?;
    folder.write_atomic(folder::PLAN, &plan_json)?;
    let to_run = still_to_run(&plan, selected, &records, options.retry_errors);
    let kept = plan.cells.len().min(records.len());
    let needs_gpus = to_run.iter().any(|&i| !plan.cells[i].gpus.is_empty());
    let limit = job_limit(&options, needs_gpus);
    let run_token = run_token(&options.inventory.host);
    let reaper = start_reaper(&options, &run_token)?;
    let reporter = Reporter::new(
        to_run.len(),
        0,
        options.interactive,
        options.quiet,
        options.slow_after,
        limit,
    );
    for bad in &previous.bad_lines {
        reporter.line(&format!("warning: {bad}"));
    }
    reporter.progress(&intro_line(&plan, &options, to_run.len(), limit, kept));
    let jobs = schedule::jobs(&plan, to_run.iter().copied(), &HashMap::new());
    let (scheduler, never) = Scheduler::new(jobs, options.inventory.gpus.clone());
    let (hurry_tx, hurry) = watch::channel(false);
    let shared = Arc::new(Shared {
        run_token,
        root: options.out.clone(),
        cache_root: options.cache_root.clone(),
        classifier,
        reaper,
        gpu_activity: if needs_gpus {
            GpuActivity::start()
        } else {
            None
        },
        limits: options.limits,
        grace: options.grace,
        hurry,
        host: options.inventory.host.clone(),
        http,
        plan,
        board: progress::Board::default(),
    });
    let mut dispatch = Dispatch {
        shared,
        scheduler,
        folder,
        reporter,
        records: std::mem::take(&mut records),
        new_records: 0,
        limit,
        interrupted: None,
        hurry: hurry_tx,
        fault: None,
    };
    dispatch.record_unservable(never, &options.inventory)?;
    dispatch.run().await?;
    dispatch.finish(&mut manifest, options.out)
}

/// The manifest at the start of a run: a fresh one, or the resumed run's, marked running again.
pub(crate) fn open_manifest(
    previous: Option<Manifest>,
    plan: &Plan,
    inventory: &Inventory,
) -> Manifest {
    match previous {
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
            shards: Vec::new(),
        },
    }
}

/// The selected cells without a record yet. A resumed run keeps finished cells; skipped ones get
/// another chance (the host may differ), and so do cells that ended in a spurious `error` unless
/// `retry_errors` is off: an infrastructure fault says nothing about the cell, so it is queued
/// again, as crater and LAVA re-queue theirs.
pub(crate) fn still_to_run(
    plan: &Plan,
    selected: Vec<usize>,
    records: &HashMap<String, CellRecord>,
    retry_errors: bool,
) -> Vec<usize> {
    selected
        .into_iter()
        .filter(|&i| {
            records.get(plan.cells[i].id.as_str()).is_none_or(|r| {
                r.status == Status::Skip
                    || (retry_errors && r.status == Status::Error && r.spurious)
            })
        })
        .collect()
}

/// Cells at a time: as asked, else one per GPU (or per CPU when no cell needs a GPU).
fn job_limit(options: &RunOptions, needs_gpus: bool) -> usize {
    options
        .jobs
        .unwrap_or_else(|| {
            if needs_gpus {
                options.inventory.gpus.len()
            } else {
                std::thread::available_parallelism().map_or(1, usize::from)
            }
        })
        .max(1)
}

fn start_reaper(options: &RunOptions, run_token: &str) -> Result<Option<Reaper>, RunError> {
    let Some(exe) = &options.reaper_exe else {
        return Ok(None);
    };
    Reaper::start(exe, run_token)
        .map(Some)
        .map_err(|source| RunError::Reaper {
            exe: exe.display().to_string(),
            source,
        })
}

/// The run's first line: what runs, from where, into where, how many at a time on which GPUs.
fn intro_line(
    plan: &Plan,
    options: &RunOptions,
    count: usize,
    limit: usize,
    kept: usize,
) -> String {
    let gpus = &options.inventory.gpus;
    format!(
        "{} {count} of {} cells of {} into {} ({limit} at a time; GPUs: {}){}",
        if plan.replay {
            "replaying recorded runs:"
        } else {
            "running"
        },
        plan.cells.len(),
        plan.path.display(),
        options.out.display(),
        if gpus.is_empty() {
            "none".to_owned()
        } else {
            gpus.iter()
                .map(|g| format!("{}:{}", g.index, g.arch))
                .collect::<Vec<_>>()
                .join(" ")
        },
        if kept > 0 {
            format!("; {kept} finished earlier")
        } else {
            String::new()
        }
    )
}

/// The dispatcher: starts what the scheduler says, collects what cells return, and is the one
/// writer of the run folder.
struct Dispatch {
    shared: Arc<Shared>,
    scheduler: Scheduler,
    folder: RunFolder,
    reporter: Reporter,
    /// The last record of every cell, by id (earlier runs' included).
    records: HashMap<String, CellRecord>,
    new_records: usize,
    /// Cells at a time.
    limit: usize,
    /// Cells running when a stop was asked.
    interrupted: Option<usize>,
    /// Sent on a second stop: teardowns kill at once instead of waiting out the grace.
    hurry: watch::Sender<bool>,
    /// The run folder could not take a record: the run stops.
    fault: Option<FolderError>,
}

/// The cells running now: their task, their plan index and GPU slots.
struct InFlight {
    tasks: JoinSet<CellEnd>,
    cells: HashMap<tokio::task::Id, (usize, Vec<usize>)>,
}

impl Dispatch {
    /// Skip records for the cells this host can never serve.
    fn record_unservable(
        &mut self,
        never: Vec<usize>,
        inventory: &Inventory,
    ) -> Result<(), RunError> {
        let mut never: Vec<usize> = never.iter().map(|&p| self.scheduler.job(p).index).collect();
        never.sort_unstable();
        for index in never {
            let record = skip_record(&self.shared.plan, index, &self.folder, inventory);
            self.folder.append(&record)?;
            self.keep(record, false);
        }
        Ok(())
    }

    fn keep(&mut self, record: CellRecord, was_running: bool) {
        self.new_records += 1;
        self.reporter.finished(&record, was_running);
        self.records.insert(record.id.clone(), record);
    }

    /// Runs cells until every one has ended, a stop was asked or the folder failed.
    async fn run(&mut self) -> Result<(), RunError> {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let signal = |kind| tokio::signal::unix::signal(kind).map_err(RunError::Signals);
        let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut terminate = signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut running = InFlight {
            tasks: JoinSet::new(),
            cells: HashMap::new(),
        };
        let mut ticker = tokio::time::interval(progress::TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.interrupted.is_none() && self.fault.is_none() {
                self.start_cells(&mut running, &cancel_rx);
            }
            if running.tasks.is_empty() {
                return Ok(());
            }
            let stop_asked = async {
                tokio::select! {
                    _ = interrupt.recv() => "interrupted (SIGINT)",
                    _ = terminate.recv() => "terminated (SIGTERM)",
                }
            };
            tokio::select! {
                _ = ticker.tick() => self.reporter.tick(&self.shared.board),
                Some(joined) = running.tasks.join_next_with_id() => {
                    if !self.ended(joined, &mut running) {
                        let _ = cancel_tx.send(true);
                    }
                }
                why = stop_asked, if !*self.hurry.borrow() => {
                    if self.interrupted.is_none() {
                        self.reporter.line(&format!(
                            "{why}: tearing down {} running cell(s) (up to {:?} each); finished cells are kept; press Ctrl-C again to kill them now",
                            running.tasks.len(),
                            self.shared.grace
                        ));
                        self.interrupted = Some(running.tasks.len());
                        let _ = cancel_tx.send(true);
                    } else {
                        // The user will not wait for the grace: KILL what is left, keep what
                        // finished.
                        self.reporter.line(&format!(
                            "{why} again: killing {} cell(s) now",
                            running.tasks.len()
                        ));
                        self.hurry.send_replace(true);
                    }
                }
            }
        }
    }

    /// Starts every cell the scheduler places now.
    fn start_cells(&mut self, running: &mut InFlight, cancel: &watch::Receiver<bool>) {
        for (position, taken) in self.scheduler.start(running.tasks.len(), self.limit) {
            let index = self.scheduler.job(position).index;
            let gpus: Vec<_> = taken
                .iter()
                .map(|&s| self.scheduler.gpu(s).clone())
                .collect();
            let id = self.shared.plan.cells[index].id.as_str();
            self.reporter.started(id, &gpus);
            self.shared.board.enter(id);
            let handle = running.tasks.spawn(cell::run_cell(
                Arc::clone(&self.shared),
                index,
                gpus,
                cancel.clone(),
            ));
            running.cells.insert(handle.id(), (index, taken));
        }
    }

    /// A cell's task ended: its record goes into the folder. `false` when the folder refused
    /// it: the run cannot keep results, so it stops starting cells and tears down the rest.
    fn ended(
        &mut self,
        joined: Result<(tokio::task::Id, CellEnd), tokio::task::JoinError>,
        running: &mut InFlight,
    ) -> bool {
        let (id, end) = match joined {
            Ok((id, end)) => (id, Ok(end)),
            Err(err) => (err.id(), Err(err.to_string())),
        };
        let Some((index, taken)) = running.cells.remove(&id) else {
            return true;
        };
        self.scheduler.release(&taken);
        self.shared
            .board
            .leave(self.shared.plan.cells[index].id.as_str());
        let record = match end {
            Ok(CellEnd::Finished(record)) => *record,
            Ok(CellEnd::Interrupted) => {
                self.reporter.interrupted_cell();
                return true;
            }
            Err(what) => harness_fault_record(&self.shared.plan, index, &self.shared.host, &what),
        };
        match self.folder.append(&record) {
            Ok(()) => {
                self.keep(record, true);
                true
            }
            Err(err) => {
                self.reporter
                    .line(&format!("error: {err}; stopping the run"));
                self.fault = Some(err);
                false
            }
        }
    }

    /// Stops the helpers, writes the final manifest and returns the summary.
    fn finish(mut self, manifest: &mut Manifest, out: PathBuf) -> Result<RunSummary, RunError> {
        self.reporter.done();
        if let Some(gpu) = &self.shared.gpu_activity {
            gpu.stop();
        }
        let plan_order: Vec<String> = self
            .shared
            .plan
            .cells
            .iter()
            .map(|c| c.id.to_string())
            .collect();
        if let Ok(shared) = Arc::try_unwrap(self.shared) {
            if let Some(reaper) = shared.reaper {
                reaper.finish();
            }
        }
        let pending = self.scheduler.pending();
        manifest.finished_at = Some(now());
        manifest.state = if self.interrupted.is_some() || self.fault.is_some() || pending > 0 {
            RunState::Interrupted
        } else {
            RunState::Finished
        };
        self.folder.write_manifest(manifest)?;
        if let Some(err) = self.fault {
            return Err(err.into());
        }
        let records = plan_order
            .iter()
            .filter_map(|id| self.records.remove(id))
            .collect();
        Ok(RunSummary {
            folder: out,
            records,
            new_records: self.new_records,
            interrupted: self.interrupted.map(|n| n + pending),
            manifest: manifest.clone(),
        })
    }
}
