//! The validated plan: every cell of a matrix file with everything needed to run it.
//!
//! Built by [`crate::matrix::load()`] from the raw file; nothing here refers back to TOML. Templates
//! are already rendered per cell, except `{port}`, which only the runner knows.

use crate::record::{ExpectationRef, Values};
use crate::signature::Signature;
use serde::Serialize;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Placeholder left in server commands for the runner to fill with a free port.
pub const PORT_PLACEHOLDER: &str = "{port}";

/// A validated matrix: its cells in expansion order plus run-wide settings.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The matrix file as given on the command line.
    pub path: PathBuf,
    /// Folder the cells' commands run in (the matrix file's folder).
    pub dir: PathBuf,
    /// sha256 of the matrix file's bytes, hex.
    pub file_hash: String,
    /// `name` and `description` from the file, when given.
    pub name: Option<String>,
    pub description: Option<String>,
    /// The cells replay recorded runs (`replay = true`): said in the manifest and the report.
    pub replay: bool,
    /// Every key a cell can have, axes first, then keys added by `include`, in file order.
    pub keys: Vec<String>,
    pub cells: Vec<Cell>,
    pub retry: RetryPolicy,
    /// User signature rules from `[[rules]]`, tried before the built-in table.
    pub rules: Vec<UserRule>,
    /// Where pins get installed; `None` means pins only reach the command in `GPUCOMPAT_PINS`.
    pub python: Option<PythonEnv>,
    /// `[runners]`: the `runs-on` labels of `plan --format github`.
    #[serde(skip_serializing_if = "Runners::is_default")]
    pub runners: Runners,
    /// `[slurm]`: how `gpucompat run --executor slurm` asks for nodes (empty: Slurm's defaults).
    #[serde(skip_serializing_if = "SlurmSettings::is_empty")]
    pub slurm: SlurmSettings,
}

/// The labels GitHub runners advertise for the cells' needs (`[runners]`, docs/matrix.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Runners {
    /// Labels every job starts with; `None`: `self-hosted`, `linux`.
    pub labels: Option<Vec<String>>,
    /// The label of an arch, `{arch}` filled; `None`: `gpu-{arch}`.
    pub arch_label: Option<String>,
    /// Labels for one arch instead of `arch_label`'s, by arch.
    pub arch: Vec<(String, Vec<String>)>,
}

impl Runners {
    /// What `runs-on` starts with when neither the file nor the command line says.
    pub const DEFAULT_LABELS: [&str; 2] = ["self-hosted", "linux"];

    fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The labels that say a runner has a GPU of `arch`.
    pub fn arch_labels(&self, arch: &str) -> Vec<String> {
        if let Some((_, labels)) = self.arch.iter().find(|(a, _)| a == arch) {
            return labels.clone();
        }
        let template = self.arch_label.as_deref().unwrap_or("gpu-{arch}");
        vec![template.replace("{arch}", arch)]
    }
}

/// `[slurm]`: the partition, the node feature per GPU arch, extra `sbatch` arguments and the
/// tasks' time limits. The command line's `--slurm-*` flags override or extend it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SlurmSettings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    /// Put before an arch to name its node feature (`gpu_` gives `gpu_sm_90`); default none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint_prefix: Option<String>,
    /// Arch -> node feature, where a cluster names them otherwise (`sm_90` -> `h100`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<(String, String)>,
    /// Extra `sbatch` arguments (`--account=ml`, `--qos=nightly`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// One time limit for every task instead of the one its cells' timeouts give.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "duration_text::serialize_opt"
    )]
    pub time_limit: Option<Duration>,
    /// Added to a task's cells' timeouts for installing environments and starting up
    /// [default: 10 minutes].
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "duration_text::serialize_opt"
    )]
    pub time_margin: Option<Duration>,
}

impl SlurmSettings {
    pub fn is_empty(&self) -> bool {
        *self == SlurmSettings::default()
    }
}

/// Stable identifier of a cell, made from its values; only `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct CellId(pub String);

impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl CellId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One combination of the matrix.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub id: CellId,
    pub values: Values,
    /// GPU archs the cell needs, in `CUDA_VISIBLE_DEVICES` order (`["sm_86", "sm_89"]`).
    pub gpus: Vec<String>,
    /// Pins from `[packages]`, sorted by package name.
    pub pins: Vec<Pin>,
    /// Extra environment from `[env]`, rendered for this cell, in file order. An entry that
    /// renders to an empty string is left out, so `X = "{key}"` sets `X` only where `key` is set.
    pub env: Vec<(String, String)>,
    pub engine: Engine,
    /// Whole-cell deadline.
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    /// Idle window after which a hang is called a deadlock.
    #[serde(with = "duration_text")]
    pub no_progress: Duration,
    pub cache: CacheMode,
    /// Base requirement file from `[python] requirements`, rendered for this cell, relative to
    /// the matrix file's folder.
    pub requirements: Option<PathBuf>,
    /// `[python] site` entries rendered for this cell, relative to the matrix file's folder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub site: Vec<PathBuf>,
    /// The `[[expect]]` rule that covers this cell, if any (the first that matches).
    pub expectation: Option<ExpectationRef>,
}

impl Cell {
    /// `GPUCOMPAT_PINS`: space-separated `name==version`.
    pub fn pins_text(&self) -> String {
        self.pins
            .iter()
            .map(Pin::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// `name==version`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Pin {
    pub name: String,
    pub version: String,
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=={}", self.name, self.version)
    }
}

/// How a cell is launched, probed and asked.
#[derive(Debug, Clone, Serialize)]
// `type`, not `kind`: a server's settings carry their own `kind` (sglang, vllm, ...).
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Engine {
    /// One command; exit 0 is a pass.
    Job { command: String },
    /// A long-running server, asked one completion.
    Server(Box<crate::engines::ServerSpec>),
}

/// Whether a cell gets the shared JIT cache of its (pins, archs) or a fresh one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    #[default]
    Warm,
    Cold,
}

/// `[retry]`: how often to retry a failed cell, and for which signatures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = none, the default).
    pub count: u32,
    /// Signatures worth retrying; empty means any failure.
    pub on: Vec<Signature>,
}

impl RetryPolicy {
    pub fn should_retry(&self, attempts_so_far: u32, signature: Signature) -> bool {
        attempts_so_far <= self.count && (self.on.is_empty() || self.on.contains(&signature))
    }
}

/// A user signature rule from `[[rules]]`.
#[derive(Debug, Clone, Serialize)]
pub struct UserRule {
    /// Regex matched against each log line.
    pub pattern: String,
    pub signature: Signature,
    /// Higher wins among lines that are equally early; default 0.
    pub precedence: i32,
    /// Infrastructure fault: never a regression.
    pub spurious: bool,
    pub explanation: Option<String>,
    pub hint: Option<String>,
}

/// `[python]`: the environment pins are installed into.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PythonEnv {
    /// Interpreter that creates the environment (`python3`).
    pub python: Option<String>,
    /// Base requirement file as written (may hold `{key}`); each cell has it rendered.
    pub requirements: Option<PathBuf>,
    pub index_url: Option<String>,
    /// Wheelhouse folders, relative to the matrix file.
    pub find_links: Vec<PathBuf>,
    /// Prebuilt site folders and archives of them (`.tar`, `.tar.gz`, `.tar.xz`), relative to
    /// the matrix file: what an engine bundle brings, put on the environment's path after its
    /// own packages (so a pinned package wins over the bundle's copy) and before the system's.
    pub site: Vec<PathBuf>,
    pub no_index: bool,
    /// Install over the system's packages (its torch) instead of an isolated environment.
    pub system_site_packages: bool,
    /// Install exactly what the base set and the pins name, none of their dependencies (for a
    /// wheelhouse that carries only what the system lacks).
    pub no_deps: bool,
}

mod duration_text {
    use serde::Serializer;
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub(super) fn serialize_opt<S: Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => serialize(d, s),
            None => s.serialize_none(),
        }
    }
}
