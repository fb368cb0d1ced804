//! The report's view model: everything every format shows, as plain serializable data.
//!
//! As crater does for its HTML, the formats (Markdown, CSV, JSON, JUnit, HTML, plots) only lay
//! this out; `context` makes the decisions (layout, labels, history, what is new tonight, what
//! changed since the previous run, reproducers, excerpts, what to plot) and fills these types,
//! which are snapshot-tested as JSON. This module holds data only, so every format and the
//! builder depend on it and it depends on none of them.

use super::layout::{Axis, Layout};
use super::logs::Excerpt;
use super::repro::Reproducer;
use super::text;
pub use crate::bisect::search::Verdict;
pub use crate::bisect::summary::{Kind as BisectKind, State as BisectState};
use crate::compare::{Comparison, Outcome};
use crate::record::{CellRecord, ExpectationRef, Metrics, Phase, RunState, Runner, Status};
use crate::signature::Signature;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Everything a report shows.
#[derive(Debug, Clone, Serialize)]
pub struct ReportContext {
    pub title: String,
    pub harness_version: &'static str,
    /// The runs, oldest first; the last one is tonight's.
    pub runs: Vec<RunView>,
    pub axes: Vec<Axis>,
    pub layout: Layout,
    /// Axes with one value in tonight's run: said once instead of in every table.
    pub constant: Vec<AxisValue>,
    /// Tonight's statuses.
    pub counts: Counts,
    /// Cells of tonight's plan with no record (interrupted, or not run yet).
    pub not_run: Vec<String>,
    pub tables: Vec<PivotTable>,
    /// Tonight's cells, in table order.
    pub cells: Vec<CellEntry>,
    /// Failure fingerprints tonight that no earlier run had (empty with a single run).
    pub new_fingerprints: Vec<NewFingerprint>,
    /// Tonight against the previous run (absent with a single run).
    pub changes: Option<Changes>,
    /// Cells whose state changed within the loaded runs, the most recent change first.
    pub recent_changes: Vec<RecentChange>,
    pub plots: Vec<PlotSpec>,
    /// Bisects (`gpucompat bisect` folders) given to the report, each with the cells it
    /// explains; absent when none was given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bisects: Vec<BisectView>,
    /// Problems that did not stop the report.
    pub warnings: Vec<String>,
    /// When the cells are those of several matrices (a replay of several recorded runs; see
    /// [`Layout::split`]): each matrix, with its own layout and its tables.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matrices: Vec<MatrixView>,
    /// Several runs (nights): every cell across the last nights, with when it started failing,
    /// when it last passed and how often it flaked; absent with a single run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nights: Option<NightsView>,
}

/// The cells x nights grid of the published dashboard (`report::nights`).
#[derive(Debug, Clone, Serialize)]
pub struct NightsView {
    /// The nights shown, oldest first (the last `--nights` runs loaded; tonight last).
    pub nights: Vec<NightHead>,
    /// Runs given beyond the window, left out of the report.
    pub left_out: usize,
    /// Every cell of these nights, those that need attention first: failing tonight (the most
    /// recent breakage first), then flaky ones (the highest flake rate first), then the rest in
    /// table order.
    pub rows: Vec<NightRow>,
    /// The share of cells with an expected verdict per night, per matrix.
    pub trend: Vec<TrendSeries>,
}

/// One night (a run) as a column of the grid.
#[derive(Debug, Clone, Serialize)]
pub struct NightHead {
    pub name: String,
    pub started_at: Option<String>,
    /// `11-21` (`11-21 02:00` when two nights share a day), for the column header.
    pub label: String,
    pub counts: Counts,
}

/// One cell across the nights.
#[derive(Debug, Clone, Serialize)]
pub struct NightRow {
    pub id: String,
    /// Tonight's page of the cell, when tonight has it.
    pub page: Option<String>,
    /// One entry per night (`None`: no record that night).
    pub states: Vec<Option<NightState>>,
    /// The first night of the unexpected failure that lasts until the newest night the cell
    /// has a verdict in; absent when that verdict is not a failure.
    pub failing_since: Option<String>,
    /// The failure already showed on the first night shown: it may be older.
    pub failing_since_window_start: bool,
    /// The newest night the cell passed (or failed as expected).
    pub last_good: Option<String>,
    /// Nights that flaked (see [`NightState::flake`]) and nights with a verdict.
    pub flakes: usize,
    pub judged: usize,
    /// `flakes / judged`, 0 when no night judged it.
    pub flake_rate: f64,
    /// The bisect that explains tonight's failure, as the tables say it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bisect: Option<String>,
}

/// A cell's state on one night.
#[derive(Debug, Clone, Serialize)]
pub struct NightState {
    pub status: Status,
    pub symbol: &'static str,
    pub signature: Option<Signature>,
    /// The night flaked: its status is `flaky` (it failed, then passed on a retry), or its
    /// pass/fail verdict differs from the nights before and after it, all three with the same
    /// pins (it flipped and flipped back).
    pub flake: bool,
}

/// One line of a pass-rate trend plot: a matrix's pass rate per night.
#[derive(Debug, Clone, Serialize)]
pub struct TrendSeries {
    /// The matrix (the split key's value, or the matrix file's name).
    pub name: String,
    /// Per night, in percent; `None` where no cell of the matrix had a verdict.
    pub values: Vec<Option<f64>>,
}

/// One matrix of a split report.
#[derive(Debug, Clone, Serialize)]
pub struct MatrixView {
    /// The split key's value that selects the matrix's cells (`run = gpu-smoke-h100`).
    pub split: AxisValue,
    pub layout: Layout,
    /// Its tables' places in [`ReportContext::tables`].
    pub tables: Vec<usize>,
    pub counts: Counts,
}

/// One run, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub name: String,
    pub dir: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub state: Option<RunState>,
    pub host: Option<String>,
    pub matrix: Option<String>,
    pub harness_version: Option<String>,
    /// Cells in the plan, when the manifest says.
    pub planned: Option<usize>,
    /// The run replayed recorded runs (`replay = true` in its matrix): not a live result.
    pub replay: bool,
    pub counts: Counts,
}

/// How many cells had each status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub total: usize,
    pub pass: usize,
    pub fail: usize,
    pub flaky: usize,
    pub xfail: usize,
    pub xpass: usize,
    pub skip: usize,
    pub error: usize,
}

impl Counts {
    pub(crate) fn of<'a>(records: impl IntoIterator<Item = &'a CellRecord>) -> Counts {
        let mut counts = Counts::default();
        for record in records {
            counts.add(record.status);
        }
        counts
    }

    fn add(&mut self, status: Status) {
        self.total += 1;
        *self.slot(status) += 1;
    }

    fn slot(&mut self, status: Status) -> &mut usize {
        match status {
            Status::Pass => &mut self.pass,
            Status::Fail => &mut self.fail,
            Status::Flaky => &mut self.flaky,
            Status::Xfail => &mut self.xfail,
            Status::Xpass => &mut self.xpass,
            Status::Skip => &mut self.skip,
            Status::Error => &mut self.error,
        }
    }

    pub fn get(&self, status: Status) -> usize {
        let mut copy = *self;
        *copy.slot(status)
    }

    /// `3 ✓ pass · 1 ✗ fail`, statuses with no cell left out.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = text::STATUSES
            .iter()
            .filter(|s| self.get(**s) > 0)
            .map(|s| format!("{} {} {}", self.get(*s), text::symbol(*s), text::word(*s)))
            .collect();
        if parts.is_empty() {
            "no cells".to_owned()
        } else {
            parts.join(" · ")
        }
    }
}

/// `axis = value`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AxisValue {
    pub axis: String,
    pub value: String,
}

/// One table: rows x columns for one combination of the grouping keys.
#[derive(Debug, Clone, Serialize)]
pub struct PivotTable {
    /// `model = qwen3 · engine = sglang`, or `all cells`.
    pub title: String,
    pub group: Vec<AxisValue>,
    /// Header of the label column: `flashinfer ↓ gpu →`.
    pub corner: String,
    pub columns: Vec<String>,
    pub rows: Vec<PivotRow>,
    pub counts: Counts,
}

/// One row of a table; `cells[i]` holds the cells of column `i` (usually one, none where the
/// matrix has no such combination).
#[derive(Debug, Clone, Serialize)]
pub struct PivotRow {
    pub label: String,
    pub cells: Vec<Vec<CellBadge>>,
}

/// A cell as a table shows it.
#[derive(Debug, Clone, Serialize)]
pub struct CellBadge {
    pub id: String,
    /// The cell's page, relative to the report folder.
    pub page: String,
    pub status: Status,
    pub symbol: &'static str,
    /// `pass`, the signature of a failure, `xfail <signature>`, `XPASS`...
    pub label: String,
    /// The upstream issue of an xfail/xpass (http(s) only).
    pub link: Option<String>,
    /// What a reader should know: the xpass note, a skip reason.
    pub note: Option<String>,
    /// Against the previous run.
    pub change: Option<Comparison>,
    /// The bisect that explains the cell, as a short note (`first bad 0.6.10 (bisected, 5
    /// probes)`); absent when none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bisect: Option<String>,
}

/// Everything about one of tonight's cells (its page).
#[derive(Debug, Clone, Serialize)]
pub struct CellEntry {
    pub id: String,
    pub page: String,
    pub values: Vec<AxisValue>,
    pub status: Status,
    pub symbol: &'static str,
    pub label: String,
    pub note: Option<String>,
    pub signature: Option<Signature>,
    pub phase: Option<Phase>,
    pub spurious: bool,
    pub reason: Option<String>,
    pub expectation: Option<ExpectationRef>,
    /// The expectation's link when it may be a link (http or https).
    pub upstream: Option<String>,
    pub fingerprint: Option<String>,
    /// The fingerprint is new tonight.
    pub new_fingerprint: bool,
    pub line: Option<u64>,
    /// Which evidence decided the signature, and the evidence (the record's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<crate::classify::Clue>,
    pub duration_s: f64,
    /// In a replay, the replay's own duration (`duration_s` and the timings are the
    /// recording's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_duration_s: Option<f64>,
    pub attempts: u32,
    pub metrics: Metrics,
    pub runner: Runner,
    pub pins: Vec<String>,
    pub log: Option<LogRef>,
    /// Why the cell's log was not read (a symbolic link, or a path out of the run folder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_refused: Option<String>,
    pub excerpt: Option<Excerpt>,
    pub reproducer: Reproducer,
    pub history: CellHistory,
    /// Against the previous run.
    pub change: Option<Comparison>,
    /// The bisect that explains the cell (converged ones first, then the newest); the page
    /// lists every bisect that explains it. Absent when none does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bisect: Option<CellBisect>,
}

/// A bisect's answer for a cell it explains.
#[derive(Debug, Clone, Serialize)]
pub struct CellBisect {
    /// Its place in [`ReportContext::bisects`].
    pub bisect: usize,
    pub kind: BisectKind,
    /// Version bisect: the first bad and last good values.
    pub first_bad: Option<String>,
    pub last_good: Option<String>,
    /// Attribution: the packages of the smallest failing set of bumps.
    pub culprits: Vec<String>,
    pub converged: bool,
    /// Why it did not converge.
    pub reason: Option<String>,
    /// Distinct values or pin sets probed.
    pub probes: usize,
    pub signature: Option<Signature>,
    /// The bisect folder.
    pub source: String,
    /// What the table shows: `first bad 0.6.10 (bisected, 5 probes)`.
    pub note: String,
}

/// A bisect folder, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct BisectView {
    /// Unique within the report; its probe logs are under `bisects/<name>/`.
    pub name: String,
    /// The bisect folder as given.
    pub dir: String,
    pub kind: BisectKind,
    pub state: BisectState,
    /// The bisected cell's id in the bisect's matrix.
    pub cell: String,
    pub axis: Option<String>,
    /// What was searched (the first line of `gpucompat bisect`'s summary).
    pub heading: String,
    /// The answer, or why there is none (its last line).
    pub answer: String,
    pub note: String,
    pub converged: bool,
    pub first_bad: Option<String>,
    pub last_good: Option<String>,
    pub culprits: Vec<String>,
    pub reason: Option<String>,
    pub signature: Option<Signature>,
    pub probes: usize,
    pub bound: Option<u32>,
    /// Every probe attempt, in order.
    pub runs: Vec<ProbeView>,
    /// Tonight's cells it explains.
    pub cells: Vec<CellLink>,
}

/// One probe attempt of a bisect.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeView {
    /// The value probed, or the bumps applied (`+ flashinfer-cubin`).
    pub probe: String,
    pub pins: Vec<String>,
    /// The probe's cell id (in the bisect folder, or the run folder it was reused from).
    pub cell: String,
    pub attempt: u32,
    pub verdict: Verdict,
    pub status: Status,
    pub signature: Option<Signature>,
    pub phase: Option<Phase>,
    pub duration_s: f64,
    pub reason: Option<String>,
    pub flaky: bool,
    pub reused_from: Option<String>,
    /// The probe's log, copied into the report.
    pub log: Option<LogRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_refused: Option<String>,
}

/// Where a cell's full log is, relative to the report folder.
#[derive(Debug, Clone, Serialize)]
pub struct LogRef {
    pub href: String,
    /// The log in the run folder.
    #[serde(skip)]
    pub source: PathBuf,
    /// Whether the report copies it to `href` (false when the report is the run folder).
    #[serde(skip)]
    pub copy: bool,
}

/// A cell's status and signature in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StateView {
    pub status: Status,
    pub signature: Option<Signature>,
}

impl StateView {
    pub(crate) fn of(record: &CellRecord) -> StateView {
        StateView {
            status: record.status,
            signature: record.signature,
        }
    }

    pub fn text(&self) -> String {
        match self.signature {
            Some(sig) => format!("{} {sig}", self.status),
            None => self.status.to_string(),
        }
    }
}

/// A cell across the loaded runs.
#[derive(Debug, Clone, Serialize)]
pub struct CellHistory {
    /// One entry per run (oldest first); `None` where the run has no record of the cell.
    pub states: Vec<Option<StateView>>,
    /// The most recent change of state within the loaded runs.
    pub last_change: Option<StateChange>,
    /// Runs in a row, ending tonight, with tonight's state.
    pub same_for: usize,
}

/// A change of state between two runs that have the cell.
#[derive(Debug, Clone, Serialize)]
pub struct StateChange {
    /// The run where the new state first showed: its name and its place (0 = oldest).
    pub run: String,
    pub run_index: usize,
    pub started_at: Option<String>,
    pub from: StateView,
    pub to: StateView,
}

/// A failure fingerprint seen tonight and in no earlier run.
#[derive(Debug, Clone, Serialize)]
pub struct NewFingerprint {
    pub fingerprint: String,
    pub signature: Option<Signature>,
    pub cells: Vec<CellLink>,
}

/// A cell id with its page.
#[derive(Debug, Clone, Serialize)]
pub struct CellLink {
    pub id: String,
    pub page: String,
}

/// Tonight against the previous run.
#[derive(Debug, Clone, Serialize)]
pub struct Changes {
    pub base: String,
    pub counts: BTreeMap<Comparison, usize>,
    pub regressions: usize,
    /// Every cell except those passing on both sides, most urgent first.
    pub cells: Vec<ChangeRow>,
}

/// One cell of [`Changes`].
#[derive(Debug, Clone, Serialize)]
pub struct ChangeRow {
    pub id: String,
    /// The cell's page when tonight has the cell.
    pub page: Option<String>,
    pub comparison: Comparison,
    pub description: &'static str,
    pub base: Option<Outcome>,
    pub head: Option<Outcome>,
}

/// A cell's last change of state, for the history list.
#[derive(Debug, Clone, Serialize)]
pub struct RecentChange {
    pub id: String,
    pub page: String,
    pub change: StateChange,
}

/// One plot: its file under the report folder and what it shows.
#[derive(Debug, Clone, Serialize)]
pub struct PlotSpec {
    /// Relative to the report folder (`plots/heatmap-1.svg`).
    pub file: String,
    pub title: String,
    pub chart: Chart,
}

/// What a plot draws.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Chart {
    /// The statuses of `tables[table]`.
    Heatmap { table: usize },
    /// A matrix's pass rate per night: `nights.trend[series]`.
    Trend { series: usize },
    /// Grouped bars: one group per `groups` value, one bar per series; means over cells.
    Bars {
        x_axis: String,
        series_axis: String,
        unit: String,
        groups: Vec<String>,
        series: Vec<BarSeries>,
    },
}

/// One series of a bar chart; `values[i]` belongs to group `i` (`None`: no cell measured it).
#[derive(Debug, Clone, Serialize)]
pub struct BarSeries {
    pub name: String,
    pub values: Vec<Option<f64>>,
}
