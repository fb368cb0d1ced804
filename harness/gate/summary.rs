//! `gate.json`: the verdict of a gate, written into the gate folder before anything is posted.

use crate::bisect::probes::Bump;
use crate::compare::{Comparison, Outcome, Pairing};
use crate::record::Values;
use crate::signature::Signature;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const FILE: &str = "gate.json";
pub const FORMAT_VERSION: u32 = 1;

/// Where a gate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Running,
    Finished,
}

/// One side's pins.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SideInfo {
    pub source: String,
    pub pins: Vec<String>,
}

/// One cell in a verdict list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateCell {
    pub id: String,
    /// The baseline's id, when a bump renamed the cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_id: Option<String>,
    pub values: Values,
    pub comparison: Comparison,
    pub base: Option<Outcome>,
    pub head: Option<Outcome>,
    /// The root cause on head (on base when head has none).
    pub signature: Option<Signature>,
    /// A few lines around the root cause, tokens redacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
    /// The log, relative to the gate folder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// A command that runs this cell's gate again.
    pub reproducer: String,
    /// Regressions: whether the confirmation retry failed again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
    /// Regressions: the retry's outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<Outcome>,
    /// Regressions: the packages attribution blamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub culprits: Option<Vec<String>>,
    /// Why the cell is in its list, when that is not plain from the comparison.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// An attribution run for a regression.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attribution {
    pub cell: String,
    pub signature: Option<Signature>,
    pub culprits: Option<Vec<String>>,
    pub converged: bool,
    /// The bisect folder, relative to the gate folder (absent when one package moved).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What happened when the verdict was posted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Posted {
    /// `posted`, or `failed` (the verdict stands; the reason says why).
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `gate.json` (format_version 1; fields are only added).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GateFile {
    pub format_version: u32,
    pub state: State,
    pub harness_version: String,
    pub matrix: String,
    pub matrix_hash: String,
    pub base: SideInfo,
    pub head: SideInfo,
    /// Packages whose pins differ.
    pub bumps: Vec<Bump>,
    /// How cells were paired and what moved.
    pub pairing: Pairing,
    /// `--baseline-run`, and how many base records it gave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_run: Option<String>,
    pub reused: usize,
    /// Confirmed regressions: the cells that block.
    pub regressions: Vec<GateCell>,
    pub fixed: Vec<GateCell>,
    /// Failing on both sides (`comparison` says whether the root cause changed).
    pub still_failing: Vec<GateCell>,
    /// Newly flaky cells, and regressions whose retry passed.
    pub flaky: Vec<GateCell>,
    /// Infrastructure faults on either side (and regressions whose retry was one).
    pub spurious: Vec<GateCell>,
    /// Failing now as an `[[expect]]` rule says (a known upstream failure).
    pub expected: Vec<GateCell>,
    /// Cells per comparison.
    pub counts: BTreeMap<Comparison, usize>,
    pub attribution: Vec<Attribution>,
    /// The one line: blocked or not, and why.
    pub verdict: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github: Option<Posted>,
    pub notes: Vec<String>,
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

impl GateFile {
    /// Whether the gate blocks the bump (exit 1).
    pub fn blocks(&self) -> bool {
        !self.regressions.is_empty()
    }

    /// The one line for people.
    pub fn verdict_line(&self) -> String {
        if self.blocks() {
            let cells: Vec<String> = self
                .regressions
                .iter()
                .take(3)
                .map(|c| {
                    let culprit = c
                        .culprits
                        .as_ref()
                        .filter(|c| !c.is_empty())
                        .map_or(String::new(), |c| format!(", culprit {}", c.join("+")));
                    format!(
                        "{} ({}{culprit})",
                        c.id,
                        c.signature.map_or("unknown", |s| s.as_str())
                    )
                })
                .collect();
            let more = self.regressions.len().saturating_sub(3);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!(
                "gate: blocked: {} confirmed regression(s): {}{more}",
                self.regressions.len(),
                cells.join(", ")
            )
        } else {
            format!(
                "gate: passed: no confirmed regression ({} fixed, {} still failing, {} flaky, {} spurious)",
                self.fixed.len(),
                self.still_failing.len(),
                self.flaky.len(),
                self.spurious.len()
            )
        }
    }
}
