//! A server cell's phases: lease a port, launch, wait until ready, send one completion, validate
//! the answer, tear down. Each phase returns how it ended.

use super::guard::{Launched, Stop};
use super::{AttemptCx, EXIT_SETTLE, Facts, Halt, Trouble, error_chain, fill_metrics, round3};
use crate::engines::{self, AnswerCheck, ResolvedServer};
use crate::exec::listeners::{self, Holder};
use crate::exec::process::{self, SharedLog};
use crate::exec::procfs::Selector;
use crate::record::{Metrics, Phase};
use crate::run::port;
use crate::run::server::{self, Answer, Request};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Set when the engine's ready line shows in the log.
type LineSeen = Arc<(AtomicBool, Notify)>;

/// What a server's phases share.
struct Serving<'r> {
    resolved: &'r ResolvedServer,
    port: u16,
    /// When the server was launched (time to ready counts from here).
    clock: Instant,
    deadline: Instant,
    line_seen: LineSeen,
}

/// Runs a server cell: every phase, then teardown whatever happened.
pub(super) async fn server(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
    resolved: &ResolvedServer,
    mut env: Vec<(String, String)>,
) -> Result<(), Halt> {
    let clock = Instant::now();
    // Held until the cell is torn down: no other cell is handed this port meanwhile.
    let lease =
        port::lease().map_err(|err| Trouble::Infra(format!("no free port on loopback: {err}")))?;
    let port = lease.port;
    env.push((
        crate::env::EnvVars::GPUCOMPAT_PORT.to_owned(),
        port.to_string(),
    ));
    // The engine's defaults, unless the cell's environment (its matrix's `[env]`) names them.
    for (key, value) in &resolved.env {
        if !env.iter().any(|(k, _)| k == key) {
            env.push((key.clone(), value.clone()));
        }
    }
    let (line_seen, reported) = watch_log(&cx.log, resolved);
    let mut launched = cx.start(resolved.command.replace("{port}", &port.to_string()), env)?;
    let serving = Serving {
        resolved,
        port,
        clock,
        deadline: clock + cx.cell.timeout,
        line_seen,
    };
    let served = serve(cx, facts, &mut launched, &serving).await;
    if served.is_ok() {
        facts.phase = Phase::Teardown;
    }
    cx.teardown(&mut launched.running, facts).await;
    drop(lease);
    // Engine-reported metrics fill what the harness could not measure itself.
    if let Ok(reported) = reported.lock() {
        fill_metrics(&mut facts.metrics, &reported);
    }
    served
}

/// Ready, infer, validate.
async fn serve(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
    launched: &mut Launched,
    s: &Serving<'_>,
) -> Result<(), Halt> {
    facts.phase = Phase::Ready;
    wait_ready(cx, facts, launched, s).await?;
    launched.dog.phase_done();
    facts.metrics.time_to_ready_s = Some(round3(s.clock.elapsed().as_secs_f64()));
    cx.note(&format!(
        "ready after {:.2}s on port {}",
        s.clock.elapsed().as_secs_f64(),
        s.port
    ));
    facts.phase = Phase::Infer;
    let answer = infer(cx, facts, launched, s).await?;
    keep_answer(cx, facts, &answer);
    facts.phase = Phase::Validate;
    let checked = match s.resolved.check {
        AnswerCheck::Text => server::validate(
            &answer,
            &server::TextCheck {
                expect: s.resolved.expect.as_ref(),
                repetition: !s.resolved.random_text,
            },
        ),
        AnswerCheck::Tokens => server::validate_tokens(&answer, s.resolved.max_tokens),
    };
    checked.map_err(|reason| {
        cx.note(&format!("answer rejected: {reason}"));
        Trouble::Invalid(reason).into()
    })
}

/// Hooks on the log: the engine's ready line, and the metrics it prints.
fn watch_log(log: &SharedLog, resolved: &ResolvedServer) -> (LineSeen, Arc<Mutex<Metrics>>) {
    let line_seen: LineSeen = Arc::new((AtomicBool::new(false), Notify::new()));
    let metrics = Arc::new(Mutex::new(Metrics::default()));
    let mut sink = process::lock(log);
    if let Some(pattern) = resolved.ready_line.clone() {
        let seen = Arc::clone(&line_seen);
        sink.add_hook(Box::new(move |line| {
            if !seen.0.load(Ordering::Relaxed) && pattern.is_match(&String::from_utf8_lossy(line)) {
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
    (line_seen, metrics)
}

/// The ready phase, bounded by the engine's ready timeout.
async fn wait_ready(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
    launched: &mut Launched,
    s: &Serving<'_>,
) -> Result<(), Halt> {
    let ready_deadline = s.deadline.min(s.clock + s.resolved.ready_timeout);
    let shared = cx.shared;
    let work = ready(
        &shared.http,
        s,
        launched.running.selector().clone(),
        Arc::clone(&cx.log),
    );
    match cx.guard(work, launched, facts, ready_deadline).await {
        Stop::Done(Ok(())) => Ok(()),
        // Not the cell's fault and not its answer: a harness error, which is spurious.
        Stop::Done(Err(taken)) => {
            cx.note_stop(facts, &taken);
            Err(Trouble::Infra(taken).into())
        }
        Stop::Exited(status) => Err(server_exited(cx, facts, status, "before it was ready")),
        Stop::Halted(halt) => Err(halt),
    }
}

/// The infer phase: one completion request.
async fn infer(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
    launched: &mut Launched,
    s: &Serving<'_>,
) -> Result<Answer, Halt> {
    let shared = cx.shared;
    let http = &shared.http;
    let served = if s.resolved.discover_model {
        server::served_model(http, s.port).await
    } else {
        None
    };
    if let Some(name) = &served {
        cx.note(&format!(
            "asking for the served model `{name}` (from /v1/models)"
        ));
    }
    let request = Request {
        port: s.port,
        endpoint: &s.resolved.endpoint,
        model: served.as_deref().or(s.resolved.model.as_deref()),
        prompt: &s.resolved.prompt,
        max_tokens: s.resolved.max_tokens,
        ignore_eos: s.resolved.check == AnswerCheck::Tokens,
    };
    match cx
        .guard(
            server::complete(http, &request),
            launched,
            facts,
            s.deadline,
        )
        .await
    {
        Stop::Done(Ok(answer)) => Ok(answer),
        Stop::Done(Err(err)) => Err(request_failed(cx, facts, launched, &err).await),
        Stop::Exited(status) => Err(server_exited(cx, facts, status, "during the request")),
        Stop::Halted(halt) => Err(halt),
    }
}

fn server_exited(cx: &AttemptCx<'_>, facts: &mut Facts, status: ExitStatus, when: &str) -> Halt {
    facts.exit = Some(process::exit_of(status));
    cx.note_stop(facts, &format!("server exited {when}: {status}"));
    Trouble::ServerExited.into()
}

async fn request_failed(
    cx: &AttemptCx<'_>,
    facts: &mut Facts,
    launched: &mut Launched,
    err: &server::RequestError,
) -> Halt {
    let text = error_chain(err);
    cx.note_stop(facts, &format!("request failed: {text}"));
    // A server that crashes mid-request drops the connection a moment before its exit can be
    // seen; wait that moment so the record keeps the exit code or signal.
    if let Ok(Ok(status)) = tokio::time::timeout(EXIT_SETTLE, launched.running.wait()).await {
        facts.exit = Some(process::exit_of(status));
        cx.note_stop(
            facts,
            &format!("server exited during the request: {status}"),
        );
    }
    Trouble::Request(text).into()
}

/// The answer's timings into the metrics, and the answer into the log.
fn keep_answer(cx: &AttemptCx<'_>, facts: &mut Facts, answer: &Answer) {
    facts.metrics.ttft_s = answer.ttft_s.map(round3);
    let (tpot, tokens_per_s) = answer.rates();
    facts.metrics.tpot_s = tpot.map(|t| (t * 1e6).round() / 1e6);
    facts.metrics.tokens_per_s = tokens_per_s.map(|t| (t * 100.0).round() / 100.0);
    cx.note(&format!(
        "answer ({} tokens in {:.3}s): {:?}",
        answer
            .completion_tokens
            .map_or_else(|| "?".to_owned(), |t| t.to_string()),
        answer.total_s,
        answer.text.chars().take(300).collect::<String>()
    ));
}

/// Waits for the ready line (if any), then for the health route (if any), then looks at who
/// listens on the port: `Err` names another cell's process holding it; a process outside the cell
/// is trusted (it may be the cell's port forwarder) and noted in the log.
async fn ready(
    http: &reqwest::Client,
    s: &Serving<'_>,
    cell: Selector,
    log: SharedLog,
) -> Result<(), String> {
    let (port, resolved, line_seen) = (s.port, s.resolved, &s.line_seen);
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
            process::lock(&log).note(&format!(
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
