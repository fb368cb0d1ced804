//! A server cell's settings as the matrix renders them for one cell (`[server]` or a built-in
//! engine's name): what `engines` turns into a launch command, a readiness check and a request.

use serde::Serialize;
use std::time::Duration;

/// Which server engine; the built-in ones bring defaults for command, readiness and request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerKind {
    /// `[server]` with an explicit command.
    Generic,
    Sglang,
    Vllm,
    Ktransformers,
    FlashinferProbe,
}

impl ServerKind {
    pub const NAMES: [(&'static str, ServerKind); 5] = [
        ("server", ServerKind::Generic),
        ("sglang", ServerKind::Sglang),
        ("vllm", ServerKind::Vllm),
        ("ktransformers", ServerKind::Ktransformers),
        ("flashinfer-probe", ServerKind::FlashinferProbe),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::Generic => "server",
            ServerKind::Sglang => "sglang",
            ServerKind::Vllm => "vllm",
            ServerKind::Ktransformers => "ktransformers",
            ServerKind::FlashinferProbe => "flashinfer-probe",
        }
    }
}

/// `[server]` settings rendered for one cell. `None` means "the engine's default".
#[derive(Debug, Clone, Serialize)]
pub struct ServerSpec {
    pub kind: ServerKind,
    /// Full launch command; may contain `{port}`.
    pub command: Option<String>,
    pub model: Option<String>,
    /// Tensor-parallel size.
    pub tp: Option<u32>,
    /// Extra arguments appended to the engine's command.
    pub args: Option<String>,
    /// HTTP path polled until it answers 200.
    pub health: Option<String>,
    /// Regex on the log that says the server is ready (instead of, or before, `health`).
    pub ready_line: Option<String>,
    #[serde(with = "duration_text_opt")]
    pub ready_timeout: Option<Duration>,
    /// Completion route (`/v1/completions`).
    pub endpoint: Option<String>,
    pub prompt: Option<String>,
    pub max_tokens: Option<u32>,
    /// Regex the answer must match.
    pub expect: Option<String>,
    /// How the answer is judged: `text` (the default: real text, matching `expect`) or `tokens`
    /// (exactly `max-tokens` tokens, whatever they say: for random-weight models).
    pub check: Option<String>,
    /// Worker processes (the probe engine's tensor-parallel stand-in).
    pub workers: Option<u32>,
}

mod duration_text_opt {
    use serde::Serializer;
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.collect_str(&humantime::format_duration(*d)),
            None => s.serialize_none(),
        }
    }
}
