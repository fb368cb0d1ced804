//! Server engines: what a cell's server is launched with, how readiness is told, what it is asked.
//!
//! [`resolve`] turns a cell's rendered `[server]` settings into a [`ResolvedServer`], filling the
//! built-in engines' defaults (sglang, vLLM, ktransformers, the FlashInfer probe) where the matrix
//! file leaves a setting out. Pure data: nothing here starts processes.

mod spec;

use regex::Regex;
pub use spec::{ServerKind, ServerSpec};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default wait for a server to become ready (JIT warm-up happens here).
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// A metric an engine prints in its log, parsed into `metrics` of the cell's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricName {
    TimeToReady,
    Jit,
    Ttft,
    Tpot,
    TokensPerS,
}

/// Stores an engine-reported value into the matching field of `metrics`.
pub fn store_metric(metrics: &mut crate::record::Metrics, name: MetricName, value: f64) {
    let slot = match name {
        MetricName::TimeToReady => &mut metrics.time_to_ready_s,
        MetricName::Jit => &mut metrics.jit_s,
        MetricName::Ttft => &mut metrics.ttft_s,
        MetricName::Tpot => &mut metrics.tpot_s,
        MetricName::TokensPerS => &mut metrics.tokens_per_s,
    };
    *slot = Some(value);
}

/// A log-line pattern whose first capture group is the metric's value (in seconds or tokens/s).
#[derive(Debug, Clone)]
pub struct MetricPattern {
    pub name: MetricName,
    pub regex: Regex,
}

/// How a server's answer is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerCheck {
    /// Real text: not empty, not garbage, matching `expect` when given.
    Text,
    /// Exactly `max_tokens` tokens by the engine's own count, whatever they say, asked with
    /// `ignore_eos` (a random-weight model emits garbage and would end at once otherwise).
    Tokens,
}

/// Everything the runner needs to launch, wait for and ask one server.
#[derive(Debug, Clone)]
pub struct ResolvedServer {
    /// Launch command, run through `sh -c`; still contains `{port}`.
    pub command: String,
    /// HTTP path polled until it answers 200; `None` when only `ready_line` tells readiness.
    pub health: Option<String>,
    /// Log line that says the server is ready.
    pub ready_line: Option<Regex>,
    pub ready_timeout: Duration,
    /// OpenAI-style completion route.
    pub endpoint: String,
    pub model: Option<String>,
    pub prompt: String,
    pub max_tokens: u32,
    /// Regex the completion text must match.
    pub expect: Option<Regex>,
    pub check: AnswerCheck,
    /// The text comes from a random-weight toy model (the `flashinfer-probe`'s Markov chain over a
    /// few words): it may repeat itself by design, so `check = "text"` does not judge repetition.
    pub random_text: bool,
    /// Ask `GET /v1/models` for the served model name (real engines answer only to it), instead
    /// of sending `model` as written.
    pub discover_model: bool,
    pub metrics: Vec<MetricPattern>,
    /// Extra environment the engine wants.
    pub env: Vec<(String, String)>,
}

/// The probe engine's source, built into the binary so `engine = "flashinfer-probe"` works from
/// any folder and always matches the harness that launches it.
pub const PROBE_SOURCE: &str = include_str!("../../engines/flashinfer_probe.py");

/// The variable that tells a probe cell's command where [`PROBE_SOURCE`] was written.
pub const PROBE_ENV: &str = crate::env::EnvVars::GPUCOMPAT_PROBE;

/// Writes [`PROBE_SOURCE`] under `dir` (once per content: the name carries its hash, and it is
/// written to a temporary name and renamed, so concurrent cells never read half a file) and
/// returns its path.
pub fn write_probe(dir: &Path) -> std::io::Result<PathBuf> {
    let hash = crate::digest::sha256_hex(PROBE_SOURCE.as_bytes(), 6);
    let path = dir.join(format!("flashinfer_probe-{hash}.py"));
    if std::fs::read(&path).is_ok_and(|text| text == PROBE_SOURCE.as_bytes()) {
        return Ok(path);
    }
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut file, PROBE_SOURCE.as_bytes())?;
        // Readable by all: a cache folder may be shared by the users of one runner.
        std::fs::set_permissions(
            file.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )?;
        file.persist(&path).map_err(|err| err.error)?;
        Ok(())
    };
    write().map_err(|err| std::io::Error::new(err.kind(), format!("{}: {err}", path.display())))?;
    Ok(path)
}

/// Whether a cell gets the shipped probe written out and named in [`PROBE_ENV`]: every
/// `flashinfer-probe` cell, so a matrix that spells its own command (a wrapper, another python)
/// can still run the probe its harness was built with.
pub fn needs_probe(spec: &ServerSpec) -> bool {
    spec.kind == ServerKind::FlashinferProbe
}

/// A `[server]` setting could not be turned into something runnable.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("engine `{engine}` needs `{key}` in [server]")]
    Missing {
        engine: &'static str,
        key: &'static str,
    },
    #[error("cannot write the probe engine's script")]
    Probe(#[source] std::io::Error),
    #[error("`check` in [server] must be \"text\" or \"tokens\", found \"{0}\"")]
    Check(String),
    #[error("invalid regex in `{key}`")]
    Regex {
        key: &'static str,
        #[source]
        source: regex::Error,
    },
}

/// Resolves a cell's server settings against its engine's defaults.
pub fn resolve(spec: &ServerSpec) -> Result<ResolvedServer, EngineError> {
    let regex = |key: &'static str, text: &Option<String>| {
        text.as_deref()
            .map(Regex::new)
            .transpose()
            .map_err(|source| EngineError::Regex { key, source })
    };
    let builtin = builtin(spec)?;
    let mut command = match (&spec.command, &builtin) {
        (Some(command), _) => command.clone(),
        (None, Some(builtin)) => builtin.command.clone(),
        (None, None) => {
            return Err(EngineError::Missing {
                engine: spec.kind.as_str(),
                key: "command",
            });
        }
    };
    // `args` extends the command, so an axis can add flags to a shared command line.
    if let Some(args) = spec.args.as_deref().filter(|a| !a.trim().is_empty()) {
        command.push(' ');
        command.push_str(args);
    }
    let ready_line = regex("ready-line", &spec.ready_line)?;
    let health = match (&spec.health, &ready_line) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(_)) => None,
        (None, None) => Some("/health".to_owned()),
    };
    let endpoint = spec
        .endpoint
        .clone()
        .or_else(|| builtin.as_ref().map(|b| b.endpoint.to_owned()))
        .unwrap_or_else(|| "/v1/completions".to_owned());
    Ok(ResolvedServer {
        command,
        health,
        ready_line,
        ready_timeout: spec.ready_timeout.unwrap_or(DEFAULT_READY_TIMEOUT),
        endpoint,
        model: spec.model.clone(),
        prompt: spec
            .prompt
            .clone()
            .unwrap_or_else(|| "The capital of France is".to_owned()),
        max_tokens: spec.max_tokens.unwrap_or(16),
        expect: regex("expect", &spec.expect)?,
        check: match spec.check.as_deref() {
            None | Some("text") => AnswerCheck::Text,
            Some("tokens") => AnswerCheck::Tokens,
            Some(other) => return Err(EngineError::Check(other.to_owned())),
        },
        random_text: spec.kind == ServerKind::FlashinferProbe,
        discover_model: builtin.as_ref().is_some_and(|b| b.discover_model),
        env: builtin
            .as_ref()
            .map(|b| {
                b.env
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            })
            .unwrap_or_default(),
        metrics: builtin.map(|b| b.metrics).unwrap_or_default(),
    })
}

/// What a built-in engine brings: the launch command users type (from each engine's
/// documentation), its completion route and the throughput lines its log prints.
struct Builtin {
    command: String,
    endpoint: &'static str,
    metrics: Vec<MetricPattern>,
    /// Real engines serve a model under its served name: ask them for it.
    discover_model: bool,
    /// Variables the engine should see unless the matrix's `[env]` says otherwise.
    env: &'static [(&'static str, &'static str)],
}

/// sglang's scheduler: `Decode batch, ... gen throughput (token/s): 86.67, ...`.
const SGLANG_THROUGHPUT: &str = r"gen throughput \(token/s\): ([0-9.]+)";
/// vLLM's periodic stats: `Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.3 tokens/s`.
const VLLM_THROUGHPUT: &str = r"Avg generation throughput: ([0-9.]+) tokens/s";

fn builtin(spec: &ServerSpec) -> Result<Option<Builtin>, EngineError> {
    let throughput = |pattern: &str| {
        Regex::new(pattern)
            .map(|regex| {
                vec![MetricPattern {
                    name: MetricName::TokensPerS,
                    regex,
                }]
            })
            .unwrap_or_default()
    };
    let model = |engine: &'static str| {
        spec.model
            .as_deref()
            .map(crate::provision::shell_quote)
            .ok_or(EngineError::Missing {
                engine,
                key: "model",
            })
    };
    let tp = spec.tp.unwrap_or(1);
    Ok(match spec.kind {
        ServerKind::Generic => None,
        // The project's own probe (`engines/flashinfer_probe.py`, shipped inside the binary and
        // written out by the runner, which names it in `GPUCOMPAT_PROBE`). `workers` (or `tp`)
        // sets its worker processes; `args` adds `--kernels ...`.
        ServerKind::FlashinferProbe => Some(Builtin {
            command: format!(
                "python3 \"${PROBE_ENV}\" --port {{port}} --workers {}",
                spec.workers.or(spec.tp).unwrap_or(1)
            ),
            endpoint: "/v1/completions",
            metrics: Vec::new(),
            discover_model: false,
            env: &[],
        }),
        // `python -m sglang.launch_server` (sglang docs: server arguments). Its `/health` fails
        // for a while after "ready to roll" (SGLang 0.5.17 on an H100: 80 s, "couldn't get a
        // response from detokenizer"): readiness is `/health` answering 200, never the line.
        ServerKind::Sglang => Some(Builtin {
            command: format!(
                "python3 -m sglang.launch_server --model-path {} --host 127.0.0.1 --port {{port}} --tp-size {tp}",
                model("sglang")?
            ),
            endpoint: "/v1/completions",
            metrics: throughput(SGLANG_THROUGHPUT),
            discover_model: true,
            env: &[("SGLANG_DISABLE_REQUEST_LOGGING", "1")],
        }),
        // vLLM's OpenAI-compatible server as a module (what `vllm serve MODEL` runs; a module
        // also works where vLLM is on the path without its console script, as a bundle is).
        ServerKind::Vllm => Some(Builtin {
            command: format!(
                "python3 -m vllm.entrypoints.openai.api_server --model {} --host 127.0.0.1 --port {{port}} --tensor-parallel-size {tp}",
                model("vllm")?
            ),
            endpoint: "/v1/completions",
            metrics: throughput(VLLM_THROUGHPUT),
            discover_model: true,
            env: &[("VLLM_NO_USAGE_STATS", "1"), ("DO_NOT_TRACK", "1")],
        }),
        // ktransformers serves through its sglang fork (SGLang-KT): the same launcher with
        // `--kt-*` options (given in `args`), answering on the chat route.
        ServerKind::Ktransformers => Some(Builtin {
            command: format!(
                "python3 -m sglang.launch_server --model-path {} --host 127.0.0.1 --port {{port}} --tensor-parallel-size {tp}",
                model("ktransformers")?
            ),
            endpoint: "/v1/chat/completions",
            metrics: throughput(SGLANG_THROUGHPUT),
            discover_model: true,
            env: &[],
        }),
    })
}
