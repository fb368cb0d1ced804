//! One cell, from launch to teardown: the phases, the watchdog over all of them, retries, and the
//! record that says what happened.
//!
//! A cell failure is data: everything here ends in a [`CellRecord`]. Only an interruption
//! (Ctrl-C) ends without one, so that `--resume` runs the cell again.

use super::folder::log_relative;
use super::outcome::{self, LastAttempt};
use super::port;
use super::server::{self, Request};
use crate::classify::{Classification, Classifier, Evidence, Verdict};
use crate::digest::sha256_hex;
use crate::engines::{self, ResolvedServer};
use crate::exec::listeners::{self, Holder};
use crate::exec::logsink::{LogLimits, LogSink};
use crate::exec::process::{self, CellCommand, Running, SharedLog};
use crate::exec::procfs::Selector;
use crate::exec::reaper::Reaper;
use crate::matrix::template::value_text;
use crate::matrix::{CacheMode, Cell, Engine, Plan};
use crate::provision::{self, EnvSpec, ProvisionError};
use crate::record::{CellRecord, Exit, FORMAT_VERSION, GpuInfo, Metrics, Phase, Runner, Status};
use crate::signature::Signature;
use crate::watchdog::{GpuActivity, Idle, Watchdog};
use std::future::Future;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// How long a failed request waits for the server's exit to show (see `server`).
const EXIT_SETTLE: Duration = Duration::from_secs(1);

/// What every cell of a run shares.
#[derive(Debug)]
pub struct Shared {
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
    pub host: String,
    pub http: reqwest::Client,
}

/// How a cell ended.
#[derive(Debug)]
pub enum CellEnd {
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
    /// cell's port answered by another process).
    Infra(String),
}

#[derive(Debug)]
struct Attempt {
    /// When the cell's command was launched (after its environment was ready): notes of why it
    /// stopped say how long after (hang timings in logs).
    began: Instant,
    trouble: Option<Trouble>,
    phase: Phase,
    exit: Option<Exit>,
    metrics: Metrics,
    leaked: usize,
    log: String,
    interrupted: bool,
    classification: Option<Classification>,
}

/// Runs one cell with its retries on the given GPUs.
pub async fn run_cell(
    shared: Arc<Shared>,
    index: usize,
    gpus: Vec<GpuInfo>,
    cancel: watch::Receiver<bool>,
) -> CellEnd {
    let cell = &shared.plan.cells[index];
    let started = SystemTime::now();
    let clock = Instant::now();
    let mut failures = 0u32;
    // The first failed attempt: a flaky cell's record says what flaked and where its log is.
    let mut first_failure: Option<(Classification, String)> = None;
    let mut attempt_number = 0u32;
    let last = loop {
        attempt_number += 1;
        let attempt = run_attempt(&shared, cell, &gpus, attempt_number, cancel.clone()).await;
        if attempt.interrupted {
            return CellEnd::Interrupted;
        }
        let signature = attempt.classification.as_ref().map(|c| c.signature);
        match signature {
            Some(signature) if shared.plan.retry.should_retry(attempt_number, signature) => {
                failures += 1;
                if first_failure.is_none() {
                    first_failure = attempt
                        .classification
                        .clone()
                        .map(|c| (c, attempt.log.clone()));
                }
            }
            _ => break attempt,
        }
    };
    let last_attempt = match &last.classification {
        None => LastAttempt::Passed,
        Some(c) => LastAttempt::Failed {
            signature: c.signature,
            spurious: c.spurious,
        },
    };
    let (status, reason) = outcome::decide(last_attempt, failures, cell.expectation.as_ref());
    let detail = match &last.trouble {
        Some(
            Trouble::Request(text)
            | Trouble::Invalid(text)
            | Trouble::Provision(text)
            | Trouble::Infra(text),
        ) => Some(text.clone()),
        _ => None,
    };
    let reason = match (reason, detail) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    let (classification, reason) = match (last.classification, status, first_failure) {
        (None, Status::Flaky, Some((failed, log))) => {
            let reason = format!(
                "{}; first failure: {} (log {log})",
                reason.unwrap_or_default(),
                failed.signature
            );
            (Some(failed), Some(reason))
        }
        (classification, _, _) => (classification, reason),
    };
    CellEnd::Finished(Box::new(CellRecord {
        id: cell.id.to_string(),
        values: cell.values.clone(),
        pins: cell.pins.iter().map(ToString::to_string).collect(),
        status,
        signature: classification.as_ref().map(|c| c.signature),
        phase: Some(last.phase),
        duration_s: round3(clock.elapsed().as_secs_f64()),
        attempts: attempt_number,
        log: last.log,
        metrics: last.metrics,
        runner: Runner {
            host: shared.host.clone(),
            gpus,
        },
        fingerprint: classification.as_ref().and_then(|c| c.fingerprint.clone()),
        line: classification.as_ref().and_then(|c| c.line),
        excerpt: classification.as_ref().and_then(|c| c.excerpt.clone()),
        exit: last.exit,
        spurious: classification.as_ref().is_some_and(|c| c.spurious),
        reason,
        expectation: cell.expectation.clone(),
        started_at: Some(humantime::format_rfc3339_seconds(started).to_string()),
        leaked: u32::try_from(last.leaked).unwrap_or(u32::MAX),
        format_version: FORMAT_VERSION,
    }))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The environment a cell's command gets over the harness's own (DESIGN.md "Contract").
fn cell_env(
    cell: &Cell,
    gpus: &[GpuInfo],
    attempt: u32,
    jit_dir: &std::path::Path,
    venv: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = vec![
        ("GPUCOMPAT_CELL_ID".to_owned(), cell.id.to_string()),
        ("GPUCOMPAT_PINS".to_owned(), cell.pins_text()),
        ("GPUCOMPAT_ATTEMPT".to_owned(), attempt.to_string()),
        (
            "CUDA_VISIBLE_DEVICES".to_owned(),
            gpus.iter()
                .map(|g| g.index.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        // GPUs in the order the cell asked for them, as the driver will number them.
        ("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned()),
    ];
    for (key, value) in &cell.values {
        env.push((
            format!("GPUCOMPAT_{}", key.to_ascii_uppercase().replace('-', "_")),
            value_text(value),
        ));
    }
    let jit = |sub: &str| jit_dir.join(sub).display().to_string();
    env.push((
        "GPUCOMPAT_JIT_CACHE".to_owned(),
        jit_dir.display().to_string(),
    ));
    env.push(("FLASHINFER_WORKSPACE_BASE".to_owned(), jit("flashinfer")));
    env.push(("TRITON_CACHE_DIR".to_owned(), jit("triton")));
    env.push(("TORCHINDUCTOR_CACHE_DIR".to_owned(), jit("inductor")));
    env.extend(venv.iter().cloned());
    // The matrix file's `[env]` comes last: it may override anything above on purpose.
    env.extend(cell.env.iter().cloned());
    env
}

/// Variables that choose which GPU archs a JIT compiles for (torch extensions, FlashInfer,
/// Triton-free CUDA builds): part of a warm cache's key.
const JIT_TARGET_VARS: &[&str] = &[
    "TORCH_CUDA_ARCH_LIST",
    "FLASHINFER_CUDA_ARCH_LIST",
    "CUDAARCHS",
    "CUDA_ARCH_LIST",
];

/// The JIT cache folder of a cell: shared per (pin set, GPU archs) when warm, fresh when cold.
fn jit_dir(shared: &Shared, cell: &Cell, gpus: &[GpuInfo], attempt: u32) -> PathBuf {
    match cell.cache {
        CacheMode::Cold => shared
            .root
            .join("cache")
            .join(format!("{}.attempt{attempt}", cell.id)),
        CacheMode::Warm => {
            let archs: Vec<&str> = gpus.iter().map(|g| g.arch.as_str()).collect();
            let archs = if archs.is_empty() {
                "cpu".to_owned()
            } else {
                archs.join("+")
            };
            // What a JIT compiles for is also chosen by the arch-list variables: kernels built
            // for `8.6` must never be found by a cell that builds for the GPU (or the reverse).
            // The value the cell will see: the matrix's `[env]` (last one wins), else the
            // harness's own environment, which the cell inherits.
            let targets: Vec<String> = JIT_TARGET_VARS
                .iter()
                .filter_map(|name| {
                    let value = cell
                        .env
                        .iter()
                        .rev()
                        .find(|(key, _)| key == name)
                        .map(|(_, value)| value.clone())
                        .or_else(|| std::env::var(name).ok())?;
                    Some(format!("{name}={value}"))
                })
                .collect();
            let hash = sha256_hex(
                format!("{}\n{archs}\n{}", cell.pins_text(), targets.join("\n")).as_bytes(),
                6,
            );
            shared
                .cache_root
                .join("jit")
                .join(format!("{}-{hash}", archs.replace('+', "_")))
        }
    }
}

/// Installs (or finds) the cell's environment when the plan asks for one, and returns the
/// variables that put it first: `VIRTUAL_ENV`, `PATH`, `GPUCOMPAT_PYTHON`.
async fn provision_env(
    shared: &Shared,
    cell: &Cell,
    attempt: u32,
    log: &SharedLog,
    cancel: &mut watch::Receiver<bool>,
    result: &mut Attempt,
) -> Vec<(String, String)> {
    let spec = match EnvSpec::for_cell(&shared.plan, cell) {
        Ok(Some(spec)) => spec,
        Ok(None) => return Vec::new(),
        Err(err) => {
            result.phase = Phase::Provision;
            result.trouble = Some(Trouble::Infra(error_chain(&err)));
            return Vec::new();
        }
    };
    result.phase = Phase::Provision;
    let cell_token = format!("{}.{}.{attempt}", shared.run_token, cell.id);
    let cx = provision::Context {
        cache_root: &shared.cache_root,
        cwd: &shared.plan.dir,
        run_token: &shared.run_token,
        cell_token: &cell_token,
        reaper: shared.reaper.as_ref(),
        grace: shared.grace,
    };
    match provision::provision(&spec, &cx, log, cancel).await {
        Ok(env) => {
            result.metrics.provision_s = Some(round3(env.seconds));
            result.phase = Phase::Launch;
            let bin = env.dir.join("bin");
            let path = match std::env::var_os("PATH") {
                Some(old) => format!("{}:{}", bin.display(), old.to_string_lossy()),
                None => bin.display().to_string(),
            };
            vec![
                ("VIRTUAL_ENV".to_owned(), env.dir.display().to_string()),
                ("PATH".to_owned(), path),
                (
                    "GPUCOMPAT_PYTHON".to_owned(),
                    env.python.display().to_string(),
                ),
            ]
        }
        Err(ProvisionError::Interrupted) => {
            result.interrupted = true;
            Vec::new()
        }
        Err(err @ ProvisionError::Install { .. }) => {
            process::lock(log).note(&format!("environment: {err}"));
            result.trouble = Some(Trouble::Provision(err.to_string()));
            Vec::new()
        }
        Err(err) => {
            result.trouble = Some(Trouble::Infra(error_chain(&err)));
            Vec::new()
        }
    }
}

/// A metric a cell prints about itself: `GPUCOMPAT_METRIC jit_s=81.2` (names as in the record's
/// `metrics`: `time_to_ready_s`, `jit_s`, `ttft_s`, `tpot_s`, `tokens_per_s`).
pub fn reported_metric(line: &[u8]) -> Option<(engines::MetricName, f64)> {
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

fn dir_has_entries(path: &std::path::Path) -> bool {
    std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_some())
}

async fn run_attempt(
    shared: &Shared,
    cell: &Cell,
    gpus: &[GpuInfo],
    attempt: u32,
    cancel: watch::Receiver<bool>,
) -> Attempt {
    let log_rel = log_relative(cell.id.as_str(), attempt);
    let mut result = Attempt {
        began: Instant::now(),
        trouble: None,
        phase: Phase::Launch,
        exit: None,
        metrics: Metrics::default(),
        leaked: 0,
        log: log_rel.clone(),
        interrupted: false,
        classification: None,
    };
    let log_path = shared.root.join(&log_rel);
    let sink = match LogSink::create(&log_path, shared.limits) {
        Ok(sink) => sink,
        Err(err) => {
            result.trouble = Some(Trouble::Infra(format!(
                "cannot create log {}: {err}",
                log_path.display()
            )));
            result.classification = Some(infra_classification());
            return result;
        }
    };
    let jit = jit_dir(shared, cell, gpus, attempt);
    result.metrics.jit_cache_hit = Some(dir_has_entries(&jit));
    let _ = std::fs::create_dir_all(&jit);
    let log: SharedLog = Arc::new(Mutex::new(sink));
    {
        let mut sink = process::lock(&log);
        sink.note(&format!(
            "cell {} attempt {attempt} on {} GPUs [{}]",
            cell.id,
            shared.host,
            gpus.iter()
                .map(|g| format!("{}:{}", g.index, g.arch))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if !cell.pins.is_empty() {
            sink.note(&format!("pins: {}", cell.pins_text()));
        }
    }
    let mut cancel = cancel;
    let reported = Arc::new(Mutex::new(Metrics::default()));
    {
        let reported = Arc::clone(&reported);
        process::lock(&log).add_hook(Box::new(move |line| {
            if let Some((name, value)) = reported_metric(line) {
                if let Ok(mut m) = reported.lock() {
                    engines::store_metric(&mut m, name, value);
                }
            }
        }));
    }
    let venv = provision_env(shared, cell, attempt, &log, &mut cancel, &mut result).await;
    // Stop notes count from the launch: an install's minutes say nothing about a hang.
    result.began = Instant::now();
    let env = cell_env(cell, gpus, attempt, &jit, &venv);
    let engine = if result.trouble.is_some() || result.interrupted {
        None
    } else {
        Some(&cell.engine)
    };
    match engine {
        None => {}
        Some(Engine::Job { command }) => {
            job(
                shared,
                cell,
                command,
                env,
                &log,
                attempt,
                cancel,
                &mut result,
            )
            .await;
        }
        Some(Engine::Server(spec)) => match engines::resolve(spec).and_then(|mut resolved| {
            if engines::needs_probe(spec) {
                let path = engines::write_probe(&shared.cache_root.join("engines"))
                    .map_err(engines::EngineError::Probe)?;
                resolved
                    .env
                    .push((engines::PROBE_ENV.to_owned(), path.display().to_string()));
            }
            Ok(resolved)
        }) {
            Ok(resolved) => {
                server(
                    shared,
                    cell,
                    &resolved,
                    env,
                    &log,
                    attempt,
                    cancel,
                    &mut result,
                )
                .await;
            }
            Err(err) => {
                result.trouble = Some(Trouble::Infra(format!(
                    "engine settings: {}",
                    error_chain(&err)
                )));
            }
        },
    }
    // What the cell reported itself fills what the harness could not measure.
    if let Ok(reported) = reported.lock() {
        fill_metrics(&mut result.metrics, &reported);
    }
    if matches!(cell.cache, CacheMode::Cold) {
        let _ = std::fs::remove_dir_all(&jit);
    }
    // Close the log (its kept tail is written now) before the classifier reads it.
    let sink = match Arc::try_unwrap(log) {
        Ok(mutex) => Some(
            mutex
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        ),
        Err(_) => None,
    };
    if let Some(sink) = sink {
        let _ = sink.finish();
    }
    if result.interrupted {
        return result;
    }
    if let Some(trouble) = &result.trouble {
        result.classification = Some(classify(shared, &log_path, trouble, result.exit));
    }
    result
}

fn infra_classification() -> Classification {
    Classification {
        spurious: true,
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
    log_path: &std::path::Path,
    trouble: &Trouble,
    exit: Option<Exit>,
) -> Classification {
    if let Trouble::Infra(_) = trouble {
        return infra_classification();
    }
    let evidence = Evidence {
        exit,
        watchdog: match trouble {
            Trouble::Watchdog(verdict) => Some(*verdict),
            _ => None,
        },
    };
    let mut found = shared
        .classifier
        .classify_file(log_path, &evidence)
        .unwrap_or_else(|_| Classification::unknown());
    // A server that failed a request often says why only in its answer (an HTTP 500 body, an
    // error event in the stream): where the log names nothing, name what the server said.
    if found.signature == Signature::Unknown {
        if let Trouble::Request(text) = trouble {
            if let Ok(said) = shared
                .classifier
                .classify_reader(text.as_bytes(), &evidence)
            {
                if said.signature != Signature::Unknown {
                    found = Classification {
                        line: None,
                        excerpt: Some(text.chars().take(2000).collect()),
                        ..said
                    };
                }
            }
        }
    }
    // An install that failed without a named cause in its output still failed to produce the
    // pin set: a dependency problem, not nothing.
    if found.signature == Signature::Unknown && matches!(trouble, Trouble::Provision(_)) {
        found.signature = Signature::DependencyError;
    }
    if found.signature == Signature::Unknown {
        if let Trouble::Invalid(reason) = trouble {
            found.signature = Signature::WrongOutput;
            found.fingerprint = Some(normalise_reason(reason));
            found.explanation = Some(reason.clone());
        }
    }
    found
}

/// A fingerprint for a validation failure: its kind, without the answer's text.
fn normalise_reason(reason: &str) -> String {
    reason.split(':').next().unwrap_or(reason).trim().to_owned()
}

/// What stopped a guarded phase.
enum Stop<T> {
    Done(T),
    Exited(ExitStatus),
    Idle(Idle),
    Deadline,
    Cancelled,
}

/// Runs `work` until it finishes, or the cell's main process exits, or the watchdog sees no
/// progress for its window, or the deadline passes, or the run is interrupted.
async fn guard<T>(
    work: impl Future<Output = T>,
    running: &mut Running,
    dog: &mut Watchdog,
    deadline: Instant,
    cancel: &mut watch::Receiver<bool>,
) -> Stop<T> {
    let cancelled = async {
        if cancel.wait_for(|c| *c).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        value = work => Stop::Done(value),
        status = running.wait() => match status {
            Ok(status) => Stop::Exited(status),
            // Waiting failed: the process is gone as far as we can tell.
            Err(_) => Stop::Deadline,
        },
        idle = dog.idle() => Stop::Idle(idle),
        () = tokio::time::sleep_until(deadline) => Stop::Deadline,
        () = cancelled => Stop::Cancelled,
    }
}

fn start(
    shared: &Shared,
    cell: &Cell,
    script: String,
    env: Vec<(String, String)>,
    log: &SharedLog,
    attempt: u32,
) -> std::io::Result<(Running, Watchdog)> {
    let command = CellCommand {
        script,
        cwd: shared.plan.dir.clone(),
        env,
        run_token: shared.run_token.clone(),
        cell_token: format!("{}.{}.{attempt}", shared.run_token, cell.id),
    };
    process::lock(log).note(&format!("command: {}", command.script));
    let running = process::spawn(&command, log)?;
    if let Some(reaper) = &shared.reaper {
        reaper.register(running.pgid());
    }
    let output = process::lock(log).output_counter();
    let dog = Watchdog::new(
        running.selector().clone(),
        output,
        cell.no_progress,
        shared.gpu_activity.clone(),
    );
    Ok((running, dog))
}

/// Tears the cell down and records what was left behind.
async fn finish(shared: &Shared, running: &mut Running, log: &SharedLog, result: &mut Attempt) {
    let main_exited = running.exit_status().is_some();
    let report = running.teardown(shared.grace).await;
    if let Some(reaper) = &shared.reaper {
        reaper.unregister(running.pgid());
    }
    // `result.exit` is only ever how the cell's process ended by itself: a server stopped by
    // this teardown did not "exit with SIGTERM".
    let mut sink = process::lock(log);
    if main_exited && report.found > 0 {
        result.leaked = report.found;
        sink.note(&format!(
            "{} process(es) of the cell were still running after its main process exited; terminated",
            report.found
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

fn note_stop(log: &SharedLog, result: &Attempt, what: &str) {
    process::lock(log).note(&format!(
        "{what} (phase {}, {:.1}s after launch)",
        result.phase,
        result.began.elapsed().as_secs_f64()
    ));
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces of one attempt"
)]
async fn job(
    shared: &Shared,
    cell: &Cell,
    command: &str,
    env: Vec<(String, String)>,
    log: &SharedLog,
    attempt: u32,
    mut cancel: watch::Receiver<bool>,
    result: &mut Attempt,
) {
    let deadline = Instant::now() + cell.timeout;
    let (mut running, mut dog) = match start(shared, cell, command.to_owned(), env, log, attempt) {
        Ok(started) => started,
        Err(err) => {
            result.trouble = Some(Trouble::Infra(format!("cannot start `sh`: {err}")));
            return;
        }
    };
    result.phase = Phase::Launch;
    let stop = guard(
        std::future::pending::<()>(),
        &mut running,
        &mut dog,
        deadline,
        &mut cancel,
    )
    .await;
    stopped(stop, cell, log, result);
    result.phase = match result.trouble {
        None if !result.interrupted => Phase::Teardown,
        _ => result.phase,
    };
    finish(shared, &mut running, log, result).await;
}

/// Records why a guarded phase ended (when it did not end with its work done).
fn stopped<T>(stop: Stop<T>, cell: &Cell, log: &SharedLog, result: &mut Attempt) -> Option<T> {
    match stop {
        Stop::Done(value) => Some(value),
        Stop::Exited(status) => {
            let exit = process::exit_of(status);
            result.exit = Some(exit);
            if !status.success() {
                note_stop(log, result, &format!("main process ended: {status}"));
                result.trouble = Some(Trouble::Exited);
            }
            None
        }
        Stop::Idle(idle) => {
            note_stop(
                log,
                result,
                &format!(
                    "watchdog: no output, CPU or GPU activity for {:.1}s (window {}; last seen: {}); calling it a hang",
                    idle.idle_for.as_secs_f64(),
                    humantime::format_duration(cell.no_progress),
                    idle.last_activity.as_str()
                ),
            );
            result.trouble = Some(Trouble::Watchdog(Verdict::Deadlock));
            None
        }
        Stop::Deadline => {
            note_stop(
                log,
                result,
                "deadline reached while the cell was still busy",
            );
            result.trouble = Some(Trouble::Watchdog(Verdict::Timeout));
            None
        }
        Stop::Cancelled => {
            note_stop(log, result, "interrupted by the user; tearing down");
            result.interrupted = true;
            None
        }
    }
}

/// Waits for the ready line (if any), then for the health route (if any), then looks at who
/// listens on the port: `Err` names another cell's process holding it; a process outside the cell
/// is trusted (it may be the cell's port forwarder) and noted in the log.
async fn ready(
    http: &reqwest::Client,
    port: u16,
    resolved: &ResolvedServer,
    line_seen: Arc<(AtomicBool, Notify)>,
    cell: Selector,
    log: &SharedLog,
) -> Result<(), String> {
    if resolved.ready_line.is_some() {
        loop {
            let notified = line_seen.1.notified();
            if line_seen.0.load(Ordering::Acquire) {
                break;
            }
            notified.await;
        }
    }
    if let Some(path) = &resolved.health {
        server::wait_healthy(http, port, path).await;
    }
    // Reading every process's open files can take a while on a crowded host; off the runtime.
    let holder = tokio::task::spawn_blocking(move || listeners::holder(port, &cell))
        .await
        .unwrap_or(Holder::Unseen);
    match holder {
        Holder::OtherCell { pid, command } => Err(format!(
            "port {port} answers, but it is held by pid {pid} ({command}), another gpucompat \
             cell's process, not by this cell's server"
        )),
        Holder::Outside {
            pid,
            command,
            older,
        } => {
            process::lock(log).note(&format!(
                "port {port} is held by pid {pid} ({command}), a process outside the cell{}; \
                 trusting it as the cell's port forwarder",
                if older {
                    " that was running before the cell started"
                } else {
                    ""
                }
            ));
            Ok(())
        }
        Holder::Cell | Holder::Unseen => Ok(()),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces of one attempt"
)]
async fn server(
    shared: &Shared,
    cell: &Cell,
    resolved: &ResolvedServer,
    mut env: Vec<(String, String)>,
    log: &SharedLog,
    attempt: u32,
    mut cancel: watch::Receiver<bool>,
    result: &mut Attempt,
) {
    let clock = Instant::now();
    let deadline = clock + cell.timeout;
    // Held until the cell is torn down: no other cell is handed this port meanwhile.
    let lease = match port::lease() {
        Ok(lease) => lease,
        Err(err) => {
            result.trouble = Some(Trouble::Infra(format!("no free port on loopback: {err}")));
            return;
        }
    };
    let port = lease.port;
    env.push(("GPUCOMPAT_PORT".to_owned(), port.to_string()));
    env.extend(resolved.env.iter().cloned());
    let line_seen = Arc::new((AtomicBool::new(false), Notify::new()));
    let metrics = Arc::new(Mutex::new(Metrics::default()));
    {
        let mut sink = process::lock(log);
        if let Some(pattern) = resolved.ready_line.clone() {
            let seen = Arc::clone(&line_seen);
            sink.add_hook(Box::new(move |line| {
                if !seen.0.load(Ordering::Relaxed)
                    && pattern.is_match(&String::from_utf8_lossy(line))
                {
                    seen.0.store(true, Ordering::Release);
                    seen.1.notify_waiters();
                }
            }));
        }
        if !resolved.metrics.is_empty() {
            let patterns = resolved.metrics.clone();
            let metrics = Arc::clone(&metrics);
            sink.add_hook(Box::new(move |line| {
                let text = String::from_utf8_lossy(line);
                for pattern in &patterns {
                    if let Some(value) = pattern
                        .regex
                        .captures(&text)
                        .and_then(|c| c.get(1))
                        .and_then(|m| m.as_str().parse::<f64>().ok())
                    {
                        if let Ok(mut m) = metrics.lock() {
                            engines::store_metric(&mut m, pattern.name, value);
                        }
                    }
                }
            }));
        }
    }
    let script = resolved.command.replace("{port}", &port.to_string());
    let (mut running, mut dog) = match start(shared, cell, script, env, log, attempt) {
        Ok(started) => started,
        Err(err) => {
            result.trouble = Some(Trouble::Infra(format!("cannot start `sh`: {err}")));
            return;
        }
    };

    result.phase = Phase::Ready;
    let ready_deadline = deadline.min(clock + resolved.ready_timeout);
    let cell_processes = running.selector().clone();
    let stop = guard(
        ready(
            &shared.http,
            port,
            resolved,
            Arc::clone(&line_seen),
            cell_processes,
            log,
        ),
        &mut running,
        &mut dog,
        ready_deadline,
        &mut cancel,
    )
    .await;
    let is_ready = match stop {
        Stop::Exited(status) => {
            result.exit = Some(process::exit_of(status));
            note_stop(
                log,
                result,
                &format!("server exited before it was ready: {status}"),
            );
            result.trouble = Some(Trouble::ServerExited);
            false
        }
        // Not the cell's fault and not its answer: a harness error, which is spurious.
        Stop::Done(Err(taken)) => {
            note_stop(log, result, &taken);
            result.trouble = Some(Trouble::Infra(taken));
            false
        }
        other => stopped(other, cell, log, result).is_some(),
    };
    if is_ready {
        dog.phase_done();
        result.metrics.time_to_ready_s = Some(round3(clock.elapsed().as_secs_f64()));
        process::lock(log).note(&format!(
            "ready after {:.2}s on port {port}",
            clock.elapsed().as_secs_f64()
        ));
        result.phase = Phase::Infer;
        let request = Request {
            port,
            endpoint: &resolved.endpoint,
            model: resolved.model.as_deref(),
            prompt: &resolved.prompt,
            max_tokens: resolved.max_tokens,
        };
        let stop = guard(
            server::complete(&shared.http, &request),
            &mut running,
            &mut dog,
            deadline,
            &mut cancel,
        )
        .await;
        let answer = match stop {
            Stop::Exited(status) => {
                result.exit = Some(process::exit_of(status));
                note_stop(
                    log,
                    result,
                    &format!("server exited during the request: {status}"),
                );
                result.trouble = Some(Trouble::ServerExited);
                None
            }
            other => stopped(other, cell, log, result),
        };
        match answer {
            Some(Ok(answer)) => {
                result.metrics.ttft_s = answer.ttft_s.map(round3);
                let (tpot, tokens_per_s) = answer.rates();
                result.metrics.tpot_s = tpot.map(|t| (t * 1e6).round() / 1e6);
                result.metrics.tokens_per_s = tokens_per_s.map(|t| (t * 100.0).round() / 100.0);
                process::lock(log).note(&format!(
                    "answer ({} tokens in {:.3}s): {:?}",
                    answer
                        .completion_tokens
                        .map_or_else(|| "?".to_owned(), |t| t.to_string()),
                    answer.total_s,
                    answer.text.chars().take(300).collect::<String>()
                ));
                result.phase = Phase::Validate;
                if let Err(reason) = server::validate(&answer.text, resolved.expect.as_ref()) {
                    process::lock(log).note(&format!("answer rejected: {reason}"));
                    result.trouble = Some(Trouble::Invalid(reason));
                }
            }
            Some(Err(err)) => {
                let text = error_chain(&err);
                note_stop(log, result, &format!("request failed: {text}"));
                // A server that crashes mid-request drops the connection a moment before its
                // exit can be seen; wait that moment so the record keeps the exit code or signal.
                if let Ok(Ok(status)) = tokio::time::timeout(EXIT_SETTLE, running.wait()).await {
                    result.exit = Some(process::exit_of(status));
                    note_stop(
                        log,
                        result,
                        &format!("server exited during the request: {status}"),
                    );
                }
                result.trouble = Some(Trouble::Request(text));
            }
            None => {}
        }
    }
    if result.trouble.is_none() && !result.interrupted {
        result.phase = Phase::Teardown;
    }
    finish(shared, &mut running, log, result).await;
    // Engine-reported metrics fill what the harness could not measure itself.
    if let Ok(reported) = metrics.lock() {
        fill_metrics(&mut result.metrics, &reported);
    }
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
