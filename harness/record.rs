//! One line of `results.jsonl`: what happened to one cell (docs/results.md).
//!
//! This is the project's stable output format: reports, comparisons, bisection and outside tools
//! read it. Fields are only ever added; `format_version` says which shape a line has.

use crate::classify::Clue;
use crate::signature::Signature;
use serde::{Deserialize, Serialize};

/// Current shape of a record. Bump when a field changes meaning (adding a field does not).
pub const FORMAT_VERSION: u32 = 1;

/// A cell's values in axis order (`{"flashinfer": "0.6.3", "gpu": "sm_90"}`).
pub type Values = serde_json::Map<String, serde_json::Value>;

/// Final status of a cell.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Status {
    /// Launched, answered and validated.
    Pass,
    /// Failed, then passed on a retry.
    Flaky,
    /// Failed, and no expectation covers it.
    Fail,
    /// Failed as an `[[expect]]` rule says it would (known upstream failure).
    Xfail,
    /// An `[[expect]]` rule says it fails, but it passed: the exclusion or workaround can go.
    Xpass,
    /// Not run: no GPU of this host can serve it, or it was filtered out.
    Skip,
    /// The harness or the infrastructure failed (install could not reach the index, disk full):
    /// says nothing about the cell itself; never a regression.
    Error,
}

impl Status {
    /// The stable name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the run should exit 1 because of this cell: an unexpected failure, or a known
    /// failure that no longer fails (the expectation is stale and would hide the next breakage).
    pub fn is_unexpected(self) -> bool {
        match self {
            Status::Fail | Status::Xpass => true,
            Status::Pass | Status::Flaky | Status::Xfail | Status::Skip | Status::Error => false,
        }
    }
}

/// Where in its lifecycle a cell was when it ended.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Phase {
    Provision,
    Launch,
    Ready,
    Infer,
    Validate,
    Teardown,
}

impl Phase {
    /// The stable name used in files.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Timings and throughput, where the engine or the harness could tell them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_ready_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jit_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// Whether the cell found its JIT cache already populated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jit_cache_hit: Option<bool>,
    /// Seconds spent installing (or finding) the cell's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provision_s: Option<f64>,
}

/// One GPU as the inventory describes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuInfo {
    pub index: u32,
    pub name: String,
    pub arch: String,
    /// Total memory in MiB, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    /// The driver's stable id (`GPU-...`), where known: indices can change across reboots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// The host a cell ran on and the GPUs it was given, in `CUDA_VISIBLE_DEVICES` order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Runner {
    pub host: String,
    pub gpus: Vec<GpuInfo>,
}

/// How the cell's main process ended, when it ended by itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// The `[[expect]]` rule that applied to a cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectationRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellRecord {
    pub id: String,
    pub values: Values,
    /// `name==version`, sorted by name.
    pub pins: Vec<String>,
    pub status: Status,
    /// `None` exactly when the cell passed (or was skipped).
    pub signature: Option<Signature>,
    /// Phase the cell ended in; for a pass, the last phase it completed.
    pub phase: Option<Phase>,
    pub duration_s: f64,
    pub attempts: u32,
    /// Path of the cell's log, relative to the run folder.
    pub log: String,
    #[serde(default)]
    pub metrics: Metrics,
    #[serde(default)]
    pub runner: Runner,
    /// Normalised root-cause line, for deduplication across nights and hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// 1-based line number of the root cause in the log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// A few lines around the root cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
    /// Which evidence decided the signature (docs/signatures.md): `fatal_line`, `watchdog`,
    /// `hang_lines`, `exit_signal`, `weak_line`, `hang_capture`, `server_answer`, `install`,
    /// `answer_check`, `harness`. Absent for a pass and where nothing decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// The evidence behind the signature, `{kind, value, line}` each: the rule and its line, the
    /// exception type, the CUDA/NCCL error, the exit, the watchdog's verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<Clue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
    /// Infrastructure fault (runner lost, index unreachable): never a regression, never a bisect step.
    #[serde(default)]
    pub spurious: bool,
    /// Human-readable reason, for skips and errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectation: Option<ExpectationRef>,
    /// RFC 3339 start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Processes of the cell still running after its main process exited (killed at teardown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leaked: u32,
    /// Where the processes were stuck when the watchdog called a hang (docs/hang.md); absent
    /// when the last attempt was not stopped by the watchdog or the capture was off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<HangSummary>,
    #[serde(default = "default_format_version")]
    pub format_version: u32,
}

/// A hang capture in short: the dominant place and the evidence that decided the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HangSummary {
    /// "3 processes in `threading:Condition.wait` <- `threading:Event.wait` <- `probe:worker`".
    pub summary: String,
    /// The dominant group's top frames (`module:function`, top first).
    #[serde(default)]
    pub frames: Vec<String>,
    /// Processes of the cell at the capture.
    #[serde(default)]
    pub processes: u32,
    /// Which evidence decided the signature: `collective_stacks`, `busy_compiler`, `watchdog`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// The full capture (`hang.json`), relative to the run folder.
    pub capture: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn default_format_version() -> u32 {
    FORMAT_VERSION
}

/// `manifest.json` of a run folder: what ran, where, when, and whether it finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    #[serde(default = "default_format_version")]
    pub format_version: u32,
    /// Version of the harness that wrote the run.
    pub harness_version: String,
    /// The matrix file as given.
    pub matrix: String,
    /// sha256 of the matrix file, hex.
    pub matrix_hash: String,
    pub host: String,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339; `None` while running or after a crash.
    #[serde(default)]
    pub finished_at: Option<String>,
    pub state: RunState,
    /// Number of cells in the plan.
    pub cells: usize,
    /// A replay of recorded runs rather than a live run.
    #[serde(default)]
    pub replay: bool,
    /// How many times the run was resumed after an interruption.
    #[serde(default)]
    pub resumes: u32,
    /// Where the GPU list came from (`nvidia-smi`, an inventory file, none).
    #[serde(default)]
    pub inventory: String,
    /// For a run `gpucompat merge` joined from shard run folders: each shard, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<Shard>,
}

/// One shard of a merged run, as its own manifest described it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    /// The shard's folder as given to `merge`.
    pub folder: String,
    pub host: String,
    pub started_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
    pub state: RunState,
    /// Records taken from this shard.
    pub records: usize,
}

/// Lifecycle of a run folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Running,
    Finished,
    Interrupted,
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    /// The text names (strum) and the JSON names (serde) must never drift apart: reports, compare
    /// and outside tools read one and the command line prints the other.
    #[test]
    fn text_and_json_names_agree_and_round_trip() {
        for &status in Status::VARIANTS {
            let json = serde_json::to_string(&status).expect("serialize");
            assert_eq!(json, format!("\"{status}\""));
            assert_eq!(status.as_str().parse::<Status>(), Ok(status));
        }
        for &phase in Phase::VARIANTS {
            let json = serde_json::to_string(&phase).expect("serialize");
            assert_eq!(json, format!("\"{}\"", phase.as_str()));
            assert_eq!(phase.as_str().parse::<Phase>(), Ok(phase));
        }
        assert_eq!(Status::VARIANTS.len(), 7);
        assert_eq!(Phase::VARIANTS.len(), 6);
        assert_eq!(Status::Xpass.as_str(), "xpass");
        assert!("x-pass".parse::<Status>().is_err());
    }
}
