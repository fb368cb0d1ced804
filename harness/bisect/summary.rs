//! `bisect.json` (also what `--format json` prints) and the human summary.
//!
//! The format is documented in the module docs of [`super`]; fields are only ever added.

use super::probes::Bump;
use super::search::Verdict;
use crate::record::{Phase, Status, Values};
use crate::signature::Signature;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Current shape of `bisect.json`.
pub const FORMAT_VERSION: u32 = 1;
/// The file's name in the bisect folder.
pub const FILE: &str = "bisect.json";

/// What is being searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Values of one axis, in PEP 440 order.
    Version,
    /// Subsets of the packages a bump moved.
    Attribution,
}

/// Where the bisect stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Running,
    Finished,
    Interrupted,
}

/// What the bisect was asked; a `--resume` must ask the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inputs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub axis: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub good: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub head: Vec<String>,
    /// `--signature`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
    pub retries: u32,
    /// Where the candidates came from: `matrix`, or the index URL (and `--find-links` folders).
    pub candidates_from: String,
    /// Run folders whose records were reused (`--runs`), absolute.
    #[serde(default)]
    pub runs_from: Vec<String>,
}

/// One cell run of the bisect (or one reused record): a probe attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEntry {
    /// The axis value probed (version bisect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The bumps applied over the base set (attribution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bumps: Option<Vec<String>>,
    /// The cell's pins, `name==version`.
    pub pins: Vec<String>,
    /// The probe cell's id in `results.jsonl` (or in the run folder it was reused from).
    pub cell: String,
    /// Attempt at this value or pin set, 1-based.
    pub attempt: u32,
    pub verdict: Verdict,
    pub status: Status,
    pub signature: Option<Signature>,
    pub phase: Option<Phase>,
    /// The cell's log, relative to the bisect folder.
    pub log: String,
    /// Why an unknown is unknown; what a flake was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Failed with the target, then passed on the cell's own retry.
    #[serde(default)]
    pub flaky: bool,
    /// The run folder the record came from, when it was not run by this bisect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<String>,
    pub duration_s: f64,
}

/// `bisect.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BisectFile {
    pub format_version: u32,
    pub kind: Kind,
    pub state: State,
    pub matrix: String,
    pub matrix_hash: String,
    /// The cell the bisect explains (its id in the matrix).
    pub cell: String,
    /// That cell's values: what a report matches against its run's cells (ids depend on the
    /// matrix, values do not). Absent in files written before it was added.
    #[serde(default, skip_serializing_if = "Values::is_empty")]
    pub values: Values,
    pub inputs: Inputs,
    /// Version bisect: every candidate, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<String>,
    /// Attribution: the packages the bump moved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bumps: Vec<Bump>,
    /// The failure bisected: `--signature`, or the bad end's.
    pub signature: Option<Signature>,
    /// Version bisect: the first value seen bad after the last good one. When not converged,
    /// the change is somewhere in `(last_good, first_bad]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good: Option<Option<String>>,
    /// Attribution: the packages of the smallest failing set of bumps found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub culprits: Option<Vec<String>>,
    pub converged: bool,
    /// Why it did not converge (or what it is doing while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Distinct values or pin sets probed.
    pub probes: usize,
    /// Version bisect: `ceil(log2 n) + 2`, the most probes a noiseless search needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<u32>,
    pub runs: Vec<RunEntry>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

/// Why a folder's `bisect.json` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read `{path}`")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{path}` is not a bisect file")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Whether `folder` is a bisect folder (it holds `bisect.json`).
pub fn is_bisect_folder(folder: &Path) -> bool {
    folder.join(FILE).is_file()
}

/// Reads the `bisect.json` of a bisect folder.
pub fn read(folder: &Path) -> Result<BisectFile, ReadError> {
    let path = folder.join(FILE);
    let shown = || path.display().to_string();
    let bytes = std::fs::read(&path).map_err(|source| ReadError::Io {
        path: shown(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| ReadError::Json {
        path: shown(),
        source,
    })
}

impl BisectFile {
    /// The runs that flaked (failed with the target, then passed on a retry).
    pub fn flaky(&self) -> impl Iterator<Item = &RunEntry> {
        self.runs.iter().filter(|r| r.flaky)
    }

    /// What a run probed, for people: the value, or the bumps applied.
    pub fn probe_label(run: &RunEntry) -> String {
        match (&run.value, &run.bumps) {
            (Some(v), _) => v.clone(),
            (None, Some(b)) if b.is_empty() => "(base)".to_owned(),
            (None, Some(b)) => format!("+ {}", b.join(" + ")),
            (None, None) => run.pins.join(" "),
        }
    }

    /// The first line of the summary: what is searched, where, for which signature.
    pub fn heading(&self) -> String {
        let signature = self
            .signature
            .map_or("not known yet".to_owned(), |s| s.to_string());
        match self.kind {
            Kind::Version => format!(
                "bisect of `{}` for cell {} of {}: {} candidates from {} ({}), signature {signature}",
                self.inputs.axis.as_deref().unwrap_or("?"),
                self.cell,
                self.matrix,
                self.candidates.len(),
                self.inputs.candidates_from,
                self.candidates
                    .first()
                    .zip(self.candidates.last())
                    .map_or(String::new(), |(a, b)| format!("{a} .. {b}")),
            ),
            Kind::Attribution => format!(
                "attribution for cell {} of {}: {} bumped packages ({}), signature {signature}",
                self.cell,
                self.matrix,
                self.bumps.len(),
                self.bumps
                    .iter()
                    .map(|b| format!(
                        "{} {} -> {}",
                        b.package,
                        b.base.as_deref().unwrap_or("(none)"),
                        b.head.as_deref().unwrap_or("(none)")
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// The last line of the summary: the answer, or why there is none.
    pub fn answer(&self) -> String {
        let runs = self.runs.len();
        let bound = self
            .bound
            .map_or(String::new(), |b| format!("; bound without noise {b}"));
        let tally = format!("{} probes, {runs} cell runs{bound}", self.probes);
        let flat = |v: &Option<Option<String>>| v.clone().flatten();
        match (self.kind, self.converged) {
            (Kind::Version, true) => format!(
                "first bad: {} (last good: {}); converged in {tally}",
                flat(&self.first_bad).unwrap_or_default(),
                flat(&self.last_good).unwrap_or_default()
            ),
            (Kind::Attribution, true) => format!(
                "culprits: {}; converged in {tally}",
                self.culprits.clone().unwrap_or_default().join(" + ")
            ),
            (_, false) => format!(
                "not converged: {} ({tally})",
                self.reason.as_deref().unwrap_or("no reason recorded")
            ),
        }
    }
}
