//! One cell, from launch to teardown: the phases, the watchdog over all of them, retries, and the
//! record that says what happened.
//!
//! A cell failure is data: everything here ends in a [`CellRecord`]. Only an interruption
//! (Ctrl-C) ends without one, so that `--resume` runs the cell again. Each phase returns how it
//! ended (`Result<_, Halt>`); an attempt is classified once, from that end and its log.
//!
//! - [`env`]: the cell's environment, JIT cache folder and installed environment.
//! - [`guard`]: the main process under the watchdog, the deadline and Ctrl-C; teardown.
//! - [`serve`]: a server cell's phases.

mod env;
mod guard;
mod hang;
mod serve;

use super::folder::log_relative;
use super::outcome::{self, LastAttempt};
use crate::classify::{Classification, Classifier, Clue, ClueKind, DecidedBy, Evidence, Verdict};
use crate::engines::ServerSpec;
use crate::engines::{self, ResolvedServer};
use crate::exec::logsink::{self, LogLimits, LogSink};
use crate::exec::process::{self, SharedLog};
use crate::exec::reaper::Reaper;
use crate::matrix::{CacheMode, Cell, Engine, Plan};
use crate::record::{CellRecord, Exit, FORMAT_VERSION, GpuInfo, Metrics, Phase, Runner, Status};
use crate::signature::Signature;
use crate::watchdog::GpuActivity;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a failed request waits for the server's exit to show (see `server`).
const EXIT_SETTLE: Duration = Duration::from_secs(1);

/// What every cell of a run shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub plan: Plan,
    pub run_token: String,
    /// The run folder.
    pub root: PathBuf,
    /// Where warm JIT caches live, per (pin set, GPU archs).
    pub cache_root: PathBuf,
    pub classifier: Classifier,
    pub reaper: Option<Reaper>,
    pub gpu_activity: Option<Arc<GpuActivity>>,
    pub limits: LogLimits,
    /// Time between TERM and KILL at teardown.
    pub grace: Duration,
    /// Turns true on a second Ctrl-C or SIGTERM: teardowns skip what is left of the grace.
    pub hurry: tokio::sync::watch::Receiver<bool>,
    pub host: String,
    pub http: reqwest::Client,
    /// What the terminal shows of each running cell (its SLOW lines).
    pub board: crate::run::progress::Board,
}

/// How a cell ended.
#[derive(Debug)]
pub(crate) enum CellEnd {
    Finished(Box<CellRecord>),
    /// Torn down by Ctrl-C before it finished: no record, `--resume` runs it again.
    Interrupted,
}

/// Why an attempt failed, before classification.
#[derive(Debug)]
enum Trouble {
    /// The main process exited non-zero or by a signal.
    Exited,
    /// The server exited while the harness waited for it.
    ServerExited,
    Watchdog(Verdict),
    Request(String),
    Invalid(String),
    /// The cell's environment could not be installed; the installer's output is in the log.
    Provision(String),
    /// The harness could not run the cell as asked (spawn failed, port or log unavailable, the
    /// cell's port answered by another process, the log could not be written).
    Infra(String),
}

impl Trouble {
    /// What the record's reason says about it, when the log alone does not.
    fn detail(&self) -> Option<&str> {
        match self {
            Trouble::Request(text)
            | Trouble::Invalid(text)
            | Trouble::Provision(text)
            | Trouble::Infra(text) => Some(text),
            Trouble::Exited | Trouble::ServerExited | Trouble::Watchdog(_) => None,
        }
    }
}

/// How a phase ended when its work was not done.
#[derive(Debug)]
enum Halt {
    /// The attempt failed; its root cause is named from the log.
    Failed(Trouble),
    /// Torn down by Ctrl-C: no record.
    Interrupted,
}

impl From<Trouble> for Halt {
    fn from(trouble: Trouble) -> Halt {
        Halt::Failed(trouble)
    }
}

/// What an attempt learned on its way, however it ended.
#[derive(Debug)]
struct Facts {
    /// When the cell's command was launched (after its environment was ready): notes of why it
    /// stopped say how long after (hang timings in logs).
    began: Instant,
    phase: Phase,
    exit: Option<Exit>,
    metrics: Metrics,
    leaked: usize,
    /// Where the processes were stuck, when the watchdog stopped the attempt.
    hang: Option<crate::record::HangSummary>,
}

/// An attempt that ran to its end (an interrupted one has none).
#[derive(Debug)]
struct Attempt {
    facts: Facts,
    /// The log, relative to the run folder.
    log: String,
    /// `None`: it passed.
    failure: Option<Failure>,
}

#[derive(Debug)]
struct Failure {
    trouble: Trouble,
    classification: Classification,
}

impl Failure {
    /// The harness could not run the cell as asked: a spurious `error`, never a verdict.
    fn infra(reason: String) -> Failure {
        Failure {
            trouble: Trouble::Infra(reason),
            classification: infra_classification(),
        }
    }
}

/// The pieces of one attempt every phase needs.
struct AttemptCx<'a> {
    shared: &'a Shared,
    cell: &'a Cell,
    attempt: u32,
    log: SharedLog,
    cancel: watch::Receiver<bool>,
    /// The cell's GPUs (indices), for the hang capture's `nvidia-smi`.
    gpus: Vec<u32>,
    /// The hang capture, when the watchdog stopped the attempt.
    hang: Option<hang::Captured>,
}

impl AttemptCx<'_> {
    fn note(&self, text: &str) {
        process::lock(&self.log).note(text);
    }

    /// Tells the terminal the cell entered `phase` (for its SLOW lines).
    fn show_phase(&self, phase: crate::record::Phase) {
        if let Some(watched) = self.shared.board.get(self.cell.id.as_str()) {
            watched.phase(phase);
        }
    }

    /// Unique per attempt; every process of the attempt carries it.
    fn cell_token(&self) -> String {
        format!(
            "{}.{}.{}",
            self.shared.run_token, self.cell.id, self.attempt
        )
    }
}

/// Runs one cell with its retries on the given GPUs.
pub(crate) async fn run_cell(
    shared: Arc<Shared>,
    index: usize,
    gpus: Vec<GpuInfo>,
    cancel: watch::Receiver<bool>,
) -> CellEnd {
    let cell = &shared.plan.cells[index];
    let started = SystemTime::now();
    let clock = Instant::now();
    match run_tries(&shared, cell, &gpus, &cancel).await {
        Some(tries) => {
            let record = record(&shared, cell, gpus, tries, started, clock.elapsed());
            CellEnd::Finished(Box::new(record))
        }
        None => CellEnd::Interrupted,
    }
}

/// The attempts of a cell: the last one, and what failed before it.
struct Tries {
    last: Attempt,
    count: u32,
    failures: u32,
    /// The first failed attempt: a flaky cell's record says what flaked and where its log is.
    first_failure: Option<(Classification, String)>,
    /// Launched again after a fault a fresh launch avoids: how often, and the first such log.
    relaunched: Option<(u32, String)>,
}

/// How often an attempt is launched again after a fault a fresh launch avoids (a rule with
/// `relaunch`, e.g. a port another process took before the server bound it).
pub(crate) const RELAUNCHES: u32 = 2;

/// Whether the attempt ended in a fault a fresh launch avoids: its rule says `relaunch`, and its
/// server exited before it was ready.
fn relaunchable(attempt: &Attempt) -> bool {
    attempt.failure.as_ref().is_some_and(|f| {
        f.classification.relaunch
            && matches!(f.trouble, Trouble::ServerExited)
            && matches!(attempt.facts.phase, Phase::Launch | Phase::Ready)
    })
}

/// Attempts the cell until it passes or its failure is not retried; `None` when interrupted.
async fn run_tries(
    shared: &Shared,
    cell: &Cell,
    gpus: &[GpuInfo],
    cancel: &watch::Receiver<bool>,
) -> Option<Tries> {
    let mut failures = 0u32;
    let mut first_failure = None;
    let mut count = 0u32;
    let mut relaunches = 0u32;
    let mut first_relaunch = None;
    loop {
        count += 1;
        let attempt = run_attempt(shared, cell, gpus, count, cancel.clone()).await?;
        // A fault a fresh launch avoids says nothing about the cell: run it again at once,
        // outside the matrix's `[retry]`, and never count it as a failure (no `flaky`). Only a
        // server that died before it was ready: a line about a port in a cell that answered,
        // hung or ran to its end says nothing about a launch.
        if relaunches < RELAUNCHES && relaunchable(&attempt) {
            relaunches += 1;
            first_relaunch.get_or_insert(attempt.log);
            continue;
        }
        let retry = attempt.failure.as_ref().is_some_and(|f| {
            shared
                .plan
                .retry
                .should_retry(count - relaunches, f.classification.signature)
        });
        if !retry {
            return Some(Tries {
                last: attempt,
                count,
                failures,
                first_failure,
                relaunched: first_relaunch.map(|log| (relaunches, log)),
            });
        }
        failures += 1;
        if first_failure.is_none() {
            first_failure = attempt.failure.map(|f| (f.classification, attempt.log));
        }
    }
}

/// The record of a finished cell.
fn record(
    shared: &Shared,
    cell: &Cell,
    gpus: Vec<GpuInfo>,
    tries: Tries,
    started: SystemTime,
    took: Duration,
) -> CellRecord {
    let Tries {
        last,
        count,
        failures,
        first_failure,
        relaunched,
    } = tries;
    let (status, classification, reason) = verdict(cell, last.failure, failures, first_failure);
    let relaunch_note = relaunched.map(|(times, log)| {
        format!(
            "launched again {times} time(s) after an infrastructure fault a fresh launch avoids (first: {log})"
        )
    });
    let reason = joined(reason, relaunch_note);
    let facts = last.facts;
    CellRecord {
        id: cell.id.to_string(),
        values: cell.values.clone(),
        pins: cell.pins.iter().map(ToString::to_string).collect(),
        status,
        signature: classification.as_ref().map(|c| c.signature),
        phase: Some(facts.phase),
        duration_s: round3(took.as_secs_f64()),
        attempts: count,
        log: last.log,
        metrics: facts.metrics,
        runner: Runner {
            host: shared.host.clone(),
            gpus,
        },
        fingerprint: classification.as_ref().and_then(|c| c.fingerprint.clone()),
        line: classification.as_ref().and_then(|c| c.line),
        excerpt: classification.as_ref().and_then(|c| c.excerpt.clone()),
        decided_by: classification
            .as_ref()
            .and_then(|c| c.decided_by)
            .map(|d| d.as_str().to_owned()),
        evidence: classification
            .as_ref()
            .map(|c| c.evidence.clone())
            .unwrap_or_default(),
        exit: facts.exit,
        spurious: classification.as_ref().is_some_and(|c| c.spurious),
        reason,
        expectation: cell.expectation.clone(),
        started_at: Some(humantime::format_rfc3339_seconds(started).to_string()),
        leaked: u32::try_from(facts.leaked).unwrap_or(u32::MAX),
        hang: facts.hang,
        format_version: FORMAT_VERSION,
    }
}

/// The status, the classification the record shows and its reason: the last attempt's, or for
/// a flaky cell the first failure's.
fn verdict(
    cell: &Cell,
    last: Option<Failure>,
    failures: u32,
    first_failure: Option<(Classification, String)>,
) -> (Status, Option<Classification>, Option<String>) {
    let last_attempt = match &last {
        None => LastAttempt::Passed,
        Some(f) => LastAttempt::Failed {
            signature: f.classification.signature,
            spurious: f.classification.spurious,
        },
    };
    let (status, reason) = outcome::decide(last_attempt, failures, cell.expectation.as_ref());
    // An infrastructure fault's reason says which fault it was (the rule's explanation): "says
    // nothing about the cell" alone leaves the reader to open the log to learn what to fix.
    let detail = last.as_ref().and_then(|f| {
        let fault = (status == Status::Error && f.classification.rule.is_some())
            .then(|| f.classification.explanation.clone())
            .flatten();
        let detail = f.trouble.detail().map(str::to_owned);
        if fault == detail {
            fault
        } else {
            joined(fault, detail)
        }
    });
    let reason = joined(reason, detail);
    match (last, status, first_failure) {
        (None, Status::Flaky, Some((failed, log))) => {
            let reason = format!(
                "{}; first failure: {} (log {log})",
                reason.unwrap_or_default(),
                failed.signature
            );
            (status, Some(failed), Some(reason))
        }
        (last, _, _) => (status, last.map(|f| f.classification), reason),
    }
}

/// Two parts of a record's reason, either of which may be missing, as one.
fn joined(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// A metric a cell prints about itself: `GPUCOMPAT_METRIC jit_s=81.2` (names as in the record's
/// `metrics`: `time_to_ready_s`, `jit_s`, `ttft_s`, `tpot_s`, `tokens_per_s`).
pub(crate) fn reported_metric(line: &[u8]) -> Option<(engines::MetricName, f64)> {
    let rest = line.strip_prefix(b"GPUCOMPAT_METRIC ")?;
    let text = std::str::from_utf8(rest).ok()?.trim();
    let (name, value) = text.split_once('=')?;
    let name = match name.trim() {
        "time_to_ready_s" => engines::MetricName::TimeToReady,
        "jit_s" => engines::MetricName::Jit,
        "ttft_s" => engines::MetricName::Ttft,
        "tpot_s" => engines::MetricName::Tpot,
        "tokens_per_s" => engines::MetricName::TokensPerS,
        _ => return None,
    };
    // Times and rates are never negative; a negative value is a bug in the cell, not a metric.
    let value: f64 = value
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)?;
    Some((name, value))
}

/// Fills the timings `into` lacks from `from` (what the harness measured itself wins).
fn fill_metrics(into: &mut Metrics, from: &Metrics) {
    into.time_to_ready_s = into.time_to_ready_s.or(from.time_to_ready_s);
    into.jit_s = into.jit_s.or(from.jit_s);
    into.ttft_s = into.ttft_s.or(from.ttft_s);
    into.tpot_s = into.tpot_s.or(from.tpot_s);
    into.tokens_per_s = into.tokens_per_s.or(from.tokens_per_s);
}

/// One attempt: its log, its phases, the log closed, then its failure (if any) classified.
/// `None` when it was interrupted.
async fn run_attempt(
    shared: &Shared,
    cell: &Cell,
    gpus: &[GpuInfo],
    attempt: u32,
    cancel: watch::Receiver<bool>,
) -> Option<Attempt> {
    let log_rel = log_relative(cell.id.as_str(), attempt);
    let log_path = shared.root.join(&log_rel);
    let mut facts = Facts {
        began: Instant::now(),
        phase: Phase::Launch,
        exit: None,
        metrics: Metrics::default(),
        leaked: 0,
        hang: None,
    };
    let sink = match LogSink::create(&log_path, shared.limits) {
        Ok(sink) => sink,
        Err(err) => {
            let reason = format!("cannot create log {}: {err}", log_path.display());
            return Some(Attempt {
                facts,
                log: log_rel,
                failure: Some(Failure::infra(reason)),
            });
        }
    };
    let mut cx = AttemptCx {
        shared,
        cell,
        attempt,
        log: Arc::new(Mutex::new(sink)),
        cancel,
        gpus: gpus.iter().map(|g| g.index).collect(),
        hang: None,
    };
    let ran = run_phases(&mut cx, &mut facts, gpus).await;
    // Close the log (its kept tail is written now) before the classifier reads it.
    let closed = process::lock(&cx.log).close();
    let trouble = match (ran, closed) {
        (Err(Halt::Interrupted), _) => return None,
        // A log that could not be written is not the cell's output: whatever the cell did, the
        // record is the harness's fault, never a verdict read from a cut log.
        (_, Err(err)) => Some(Trouble::Infra(log_write_reason(&err))),
        (Ok(()), Ok(())) => None,
        (Err(Halt::Failed(trouble)), Ok(())) => Some(trouble),
    };
    let captured = cx.hang.take();
    facts.hang = captured.as_ref().map(hang::Captured::summary);
    let failure = trouble.map(|trouble| {
        let mut failure = failure(shared, &log_path, trouble, facts.exit);
        if let (Trouble::Watchdog(_), Some(captured)) = (&failure.trouble, &captured) {
            let refined = captured.refine(&mut failure.classification);
            facts.hang = Some(captured.summary_after(refined, &failure.classification));
        }
        failure
    });
    Some(Attempt {
        facts,
        log: log_rel,
        failure,
    })
}

/// [`env::cache_files`] on a blocking thread: a shared cache on a network filesystem can take
/// seconds to walk.
async fn count_cache_files(jit: &Path) -> u64 {
    let jit = jit.to_path_buf();
    tokio::task::spawn_blocking(move || env::cache_files(&jit))
        .await
        .unwrap_or(0)
}

/// What the record's reason says of a log that could not be written.
fn log_write_reason(err: &std::io::Error) -> String {
    if logsink::is_disk_full(err) {
        format!("disk full while writing the log: {err}")
    } else {
        format!("cannot write the log: {err}")
    }
}

/// The attempt's phases between opening and closing its log.
async fn run_phases(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
    gpus: &[GpuInfo],
) -> Result<(), Halt> {
    let (shared, cell) = (cx.shared, cx.cell);
    introduce(cx, gpus);
    let jit = env::jit_dir(shared, cell, gpus, cx.attempt);
    if matches!(cell.cache, CacheMode::Cold) {
        // A killed run may have left this attempt's cold cache behind: cold means empty.
        let _ = std::fs::remove_dir_all(&jit);
    }
    let files_before = count_cache_files(&jit).await;
    if let Err(err) = std::fs::create_dir_all(&jit) {
        cx.note(&format!(
            "cannot create the JIT cache folder {}: {err}",
            jit.display()
        ));
    }
    let reported = collect_reported_metrics(&cx.log);
    let ran = launch(cx, facts, gpus, &jit).await;
    // A hit: the cache had files, and the cell added none (it compiled nothing). A cell that
    // shares the folder with one compiling at the same time counts as a miss too. Not counted
    // again for an interrupted attempt: Ctrl-C does not wait on a walk of the cache.
    if !matches!(ran, Err(Halt::Interrupted)) {
        let hit = files_before > 0 && count_cache_files(&jit).await == files_before;
        facts.metrics.jit_cache_hit = Some(hit);
    }
    // What the cell reported itself fills what the harness could not measure.
    if let Ok(reported) = reported.lock() {
        fill_metrics(&mut facts.metrics, &reported);
    }
    if matches!(cell.cache, CacheMode::Cold) {
        let _ = std::fs::remove_dir_all(&jit);
    }
    ran
}

/// The first lines of an attempt's log: which cell, where, with which pins.
fn introduce(cx: &AttemptCx<'_>, gpus: &[GpuInfo]) {
    let (shared, cell) = (cx.shared, cx.cell);
    cx.note(&format!(
        "cell {} attempt {} on {} GPUs [{}]",
        cell.id,
        cx.attempt,
        shared.host,
        gpus.iter()
            .map(|g| format!("{}:{}", g.index, g.arch))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !cell.pins.is_empty() {
        cx.note(&format!("pins: {}", cell.pins_text()));
    }
}

/// Collects the `GPUCOMPAT_METRIC` lines a cell prints.
fn collect_reported_metrics(log: &SharedLog) -> Arc<Mutex<Metrics>> {
    let reported = Arc::new(Mutex::new(Metrics::default()));
    let into = Arc::clone(&reported);
    process::lock(log).add_hook(Box::new(move |line| {
        if let Some((name, value)) = reported_metric(line) {
            if let Ok(mut m) = into.lock() {
                engines::store_metric(&mut m, name, value);
            }
        }
    }));
    reported
}

/// Provision, then the job or the server.
async fn launch(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
    gpus: &[GpuInfo],
    jit: &Path,
) -> Result<(), Halt> {
    let venv = env::provision_env(cx, facts).await?;
    // Stop notes count from the launch: an install's minutes say nothing about a hang.
    facts.began = Instant::now();
    let cell = cx.cell;
    let env = env::cell_env(cell, gpus, cx.attempt, jit, &venv);
    match &cell.engine {
        Engine::Job { command } => job(cx, facts, command, env).await,
        Engine::Server(spec) => {
            let resolved = resolve_server(cx.shared, spec)
                .map_err(|err| Trouble::Infra(format!("engine settings: {}", error_chain(&err))))?;
            serve::server(cx, facts, &resolved, env).await
        }
    }
}

/// The engine's settings for a server cell, with the built-in probe written where it needs it.
fn resolve_server(
    shared: &Shared,
    spec: &ServerSpec,
) -> Result<ResolvedServer, engines::EngineError> {
    let mut resolved = engines::resolve(spec)?;
    if engines::needs_probe(spec) {
        let path = engines::write_probe(&shared.cache_root.join("engines"))
            .map_err(engines::EngineError::Probe)?;
        resolved
            .env
            .push((engines::PROBE_ENV.to_owned(), path.display().to_string()));
    }
    Ok(resolved)
}

/// A job cell: its command runs to its end under guard, then teardown.
async fn job(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
    command: &str,
    env: Vec<(String, String)>,
) -> Result<(), Halt> {
    let deadline = Instant::now() + cx.cell.timeout;
    let mut launched = cx.start(command.to_owned(), env)?;
    facts.phase = Phase::Launch;
    let pending = std::future::pending::<()>();
    let ended = match cx.guard(pending, &mut launched, facts, deadline).await {
        guard::Stop::Done(()) => Ok(()),
        guard::Stop::Exited(status) => {
            facts.exit = Some(process::exit_of(status));
            if status.success() {
                Ok(())
            } else {
                cx.note_stop(facts, &format!("main process ended: {status}"));
                Err(Trouble::Exited.into())
            }
        }
        guard::Stop::Halted(halt) => Err(halt),
    };
    if ended.is_ok() {
        facts.phase = Phase::Teardown;
    }
    cx.teardown(&mut launched.running, facts).await;
    ended
}

/// The failure of an attempt, its root cause named from the log.
fn failure(shared: &Shared, log_path: &Path, trouble: Trouble, exit: Option<Exit>) -> Failure {
    match classify(shared, log_path, &trouble, exit) {
        Ok(classification) => Failure {
            trouble,
            classification,
        },
        Err(err) => Failure::infra(format!(
            "cannot read the log {} back to classify it: {err}",
            log_path.display()
        )),
    }
}

fn infra_classification() -> Classification {
    Classification {
        spurious: true,
        decided_by: Some(DecidedBy::Harness),
        explanation: Some(
            "the harness could not run the cell as asked (the reason says why); not a verdict on \
             the versions under test"
                .to_owned(),
        ),
        ..Classification::unknown()
    }
}

/// Names the root cause: the log with the exit and the watchdog's verdict; where the log says
/// nothing, what the harness saw (an answer that failed validation is `wrong_output`).
fn classify(
    shared: &Shared,
    log_path: &Path,
    trouble: &Trouble,
    exit: Option<Exit>,
) -> std::io::Result<Classification> {
    if let Trouble::Infra(_) = trouble {
        return Ok(infra_classification());
    }
    let evidence = Evidence {
        exit,
        watchdog: match trouble {
            Trouble::Watchdog(verdict) => Some(*verdict),
            _ => None,
        },
    };
    let mut found = read_log(&shared.classifier, log_path, trouble, &evidence)?;
    // A complaint the process survived (NumPy's or bitsandbytes' import-time message) names a
    // failure only where nothing else does; what the harness saw of the cell does.
    let open = |found: &Classification| {
        found.signature == Signature::Unknown || shared.classifier.decided_by_complaint(found)
    };
    // A server that failed a request often says why only in its answer (an HTTP 500 body, an
    // error event in the stream): where the log names nothing, name what the server said.
    if open(&found) {
        if let Trouble::Request(text) = trouble {
            if let Some(said) = server_said(&shared.classifier, text, &evidence) {
                found = said;
            }
        }
    }
    // An install that failed without a named cause in its output still failed to produce the
    // pin set: a dependency problem, not nothing.
    if found.signature == Signature::Unknown && matches!(trouble, Trouble::Provision(_)) {
        found.signature = Signature::DependencyError;
        found.decided_by = Some(DecidedBy::Install);
        found.evidence.push(Clue::new(
            ClueKind::Harness,
            "the cell's environment could not be installed",
            None,
        ));
    }
    if open(&found) {
        if let Trouble::Invalid(reason) = trouble {
            // The cell served and answered wrong: a verdict, whatever line the log had before.
            found.spurious = false;
            found.relaunch = false;
            found.rule = None;
            found.line = None;
            found.hint = None;
            found.signature = Signature::WrongOutput;
            found.fingerprint = Some(normalise_reason(reason));
            found.explanation = Some(reason.clone());
            found.decided_by = Some(DecidedBy::AnswerCheck);
            found
                .evidence
                .push(Clue::new(ClueKind::Harness, reason.clone(), None));
        }
    }
    Ok(found)
}

/// What the cell's log names. A failed install is known to be one: what the harness saw
/// outranks the lexical model's reading of the installer's words, so only the rules read its log.
fn read_log(
    classifier: &Classifier,
    log_path: &Path,
    trouble: &Trouble,
    evidence: &Evidence,
) -> std::io::Result<Classification> {
    if matches!(trouble, Trouble::Provision(_)) {
        classifier.rules_only().classify_file(log_path, evidence)
    } else {
        classifier.classify_file(log_path, evidence)
    }
}

/// What a server's answer to a failed request names, by the rules alone: an answer body is no
/// log, and the lexical model, trained on logs, does not read it.
fn server_said(classifier: &Classifier, text: &str, evidence: &Evidence) -> Option<Classification> {
    let said = classifier
        .rules_only()
        .classify_reader(text.as_bytes(), evidence)
        .ok()
        .filter(|said| said.signature != Signature::Unknown)?;
    // The evidence's lines are the answer's, not the log's.
    let mut clues: Vec<Clue> = said
        .evidence
        .iter()
        .map(|c| Clue {
            line: None,
            ..c.clone()
        })
        .collect();
    clues.push(Clue::new(
        ClueKind::Harness,
        "the server's answer to a request that failed",
        None,
    ));
    Some(Classification {
        line: None,
        excerpt: Some(text.chars().take(2000).collect()),
        decided_by: Some(DecidedBy::ServerAnswer),
        evidence: clues,
        ..said
    })
}

/// A fingerprint for a validation failure: its kind, without the answer's text.
fn normalise_reason(reason: &str) -> String {
    reason.split(':').next().unwrap_or(reason).trim().to_owned()
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in rules with a model that reads `zorblax` as wrong output, sure of it.
    fn zorblax_classifier() -> Classifier {
        Classifier::builtin().with_test_model(
            "classes wrong_output unknown\nthreshold 0.6\nintercept 0 0\nterm zorblax 2.0 0:9\n",
        )
    }

    #[test]
    fn a_servers_answer_is_read_by_the_rules_alone() {
        let classifier = zorblax_classifier();
        let log = classifier
            .classify_reader(&b"zorblax zorblax\n"[..], &Evidence::default())
            .expect("classify");
        assert_eq!(
            log.signature,
            Signature::WrongOutput,
            "the model reads logs"
        );
        let body = r#"{"object":"error","message":"zorblax zorblax","code":400}"#;
        assert_eq!(server_said(&classifier, body, &Evidence::default()), None);
        // What a rule names in an answer is still the server's word.
        let body = r#"{"object":"error","message":"CUDA out of memory. Tried to allocate 2.00 GiB","code":500}"#;
        let said = server_said(&classifier, body, &Evidence::default()).expect("named");
        assert_eq!(said.signature, Signature::Oom);
        assert_eq!(said.decided_by, Some(DecidedBy::ServerAnswer));
    }

    #[test]
    fn a_failed_installs_log_is_read_by_the_rules_alone() {
        let classifier = zorblax_classifier();
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("cell.log");
        std::fs::write(&log, "Resolving dependencies\nzorblax zorblax\n").expect("write");
        let read = |trouble: &Trouble| {
            read_log(&classifier, &log, trouble, &Evidence::default()).expect("read")
        };
        let exited = read(&Trouble::Exited);
        assert_eq!(
            exited.signature,
            Signature::WrongOutput,
            "the model reads logs"
        );
        assert_eq!(exited.decided_by, Some(DecidedBy::LexicalModel));
        let install = read(&Trouble::Provision("uv pip install failed".into()));
        assert_eq!(install.signature, Signature::Unknown);
        assert_eq!(install.decided_by, None);
        // What a rule names in an installer's log is still named.
        std::fs::write(
            &log,
            "ERROR: No matching distribution found for flashinfer-python==0.9.9\n",
        )
        .expect("write");
        let install = read(&Trouble::Provision("uv pip install failed".into()));
        assert_eq!(install.signature, Signature::DependencyError);
    }

    #[test]
    fn cells_can_report_their_own_metrics() {
        assert_eq!(
            reported_metric(b"GPUCOMPAT_METRIC jit_s=81.25"),
            Some((engines::MetricName::Jit, 81.25))
        );
        assert_eq!(
            reported_metric(b"GPUCOMPAT_METRIC tokens_per_s = 1200"),
            Some((engines::MetricName::TokensPerS, 1200.0))
        );
        assert_eq!(reported_metric(b"GPUCOMPAT_METRIC jit_s=NaN"), None);
        assert_eq!(
            reported_metric(b"GPUCOMPAT_METRIC time_to_ready_s=-3"),
            None
        );
        assert_eq!(reported_metric(b"GPUCOMPAT_METRIC speed=3"), None);
        assert_eq!(reported_metric(b"jit_s=3"), None);
    }
}
