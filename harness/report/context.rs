//! The report's view model: everything every format shows, as plain serializable data.
//!
//! As crater does for its HTML, the formats (Markdown, CSV, JSON, JUnit, HTML, plots) only lay
//! this out; decisions (layout, labels, history, what is new tonight, what changed since the
//! previous run, reproducers, excerpts) are made here, once, and snapshot-tested as JSON.

use super::error::ReportError;
use super::layout::{self, Axis, Layout, value_of};
use super::load::LoadedRun;
use super::logs::{self, Excerpt};
use super::plots::{self, PlotSpec};
use super::repro::{self, Reproducer};
use super::text::{self, file_stem, http_link};
use crate::compare::{self, Comparison, Outcome};
use crate::matrix::template::value_text;
use crate::record::{CellRecord, ExpectationRef, Metrics, Phase, RunState, Runner, Status};
use crate::signature::Signature;
use indexmap::IndexMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Options that change what a report shows.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// Axis whose values become rows (default: the first version-like axis).
    pub rows: Option<String>,
    /// Axis whose values become columns (default: the first GPU-like axis).
    pub cols: Option<String>,
    /// Title of the report (default: the matrix file's name).
    pub title: Option<String>,
}

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
    /// Problems that did not stop the report.
    pub warnings: Vec<String>,
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
    pub duration_s: f64,
    pub attempts: u32,
    pub metrics: Metrics,
    pub runner: Runner,
    pub pins: Vec<String>,
    pub log: Option<LogRef>,
    pub excerpt: Option<Excerpt>,
    pub reproducer: Reproducer,
    pub history: CellHistory,
    /// Against the previous run.
    pub change: Option<Comparison>,
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
    fn of(record: &CellRecord) -> StateView {
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

/// The label shown for a record's status: its signature for a failure.
fn label(record: &CellRecord) -> String {
    let sig = record.signature.map(Signature::as_str);
    match record.status {
        Status::Pass => "pass".to_owned(),
        Status::Fail => sig.unwrap_or("fail").to_owned(),
        Status::Flaky => match sig {
            Some(sig) => format!("flaky ({sig})"),
            None => "flaky".to_owned(),
        },
        Status::Xfail => match sig {
            Some(sig) => format!("xfail {sig}"),
            None => "xfail".to_owned(),
        },
        Status::Xpass => "XPASS".to_owned(),
        Status::Skip => "skip".to_owned(),
        Status::Error => match sig {
            Some(sig) => format!("error ({sig})"),
            None => "error".to_owned(),
        },
    }
}

fn note(record: &CellRecord) -> Option<String> {
    let reason = record.reason.as_deref().map(text::one_line);
    match record.status {
        Status::Xpass => Some(text::XPASS_NOTE.to_owned()),
        Status::Xfail => Some(
            record
                .expectation
                .as_ref()
                .and_then(|e| e.reason.as_deref())
                .map(text::one_line)
                .unwrap_or_else(|| "known upstream failure".to_owned()),
        ),
        Status::Error => Some(
            reason
                .unwrap_or_else(|| "infrastructure fault: says nothing about the cell".to_owned()),
        ),
        Status::Skip | Status::Flaky | Status::Fail => reason,
        Status::Pass => None,
    }
}

fn upstream(record: &CellRecord) -> Option<String> {
    let link = record.expectation.as_ref()?.link.as_deref()?;
    http_link(link).map(str::to_owned)
}

/// The page of a cell, relative to the report folder.
pub(crate) fn page_of(id: &str) -> String {
    format!("cells/{}.html", file_stem(id))
}

/// Whether two paths are the same folder (both must exist).
pub(crate) fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn log_ref(record: &CellRecord, run: &LoadedRun, in_place: bool) -> Option<LogRef> {
    let relative = text::inside(&record.log)?;
    let source = run.dir.join(&relative);
    if !source.is_file() {
        return None;
    }
    if in_place {
        let href = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        return Some(LogRef {
            href,
            source,
            copy: false,
        });
    }
    Some(LogRef {
        href: format!("logs/{}.log", file_stem(&record.id)),
        source,
        copy: true,
    })
}

fn history(id: &str, runs: &[LoadedRun], indexes: &[HashMap<&str, &CellRecord>]) -> CellHistory {
    let states: Vec<Option<StateView>> = indexes
        .iter()
        .map(|index| index.get(id).map(|r| StateView::of(r)))
        .collect();
    let present: Vec<(usize, StateView)> = states
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|s| (i, s)))
        .collect();
    let mut last_change = None;
    let mut same_for = 0;
    if let Some((_, tonight)) = present.last() {
        same_for = present
            .iter()
            .rev()
            .take_while(|(_, s)| s == tonight)
            .count();
        if let Some(pair) = present.windows(2).rev().find(|w| w[0].1 != w[1].1) {
            let (run, to) = pair[1];
            last_change = Some(StateChange {
                run: runs[run].name.clone(),
                run_index: run,
                started_at: runs[run].started_at().map(str::to_owned),
                from: pair[0].1,
                to,
            });
        }
    }
    CellHistory {
        states,
        last_change,
        same_for,
    }
}

fn run_view(run: &LoadedRun) -> RunView {
    let manifest = run.manifest.as_ref();
    RunView {
        name: run.name.clone(),
        dir: run.dir.display().to_string(),
        started_at: manifest.map(|m| m.started_at.clone()),
        finished_at: manifest.and_then(|m| m.finished_at.clone()),
        state: manifest.map(|m| m.state),
        host: manifest.map(|m| m.host.clone()),
        matrix: manifest.map(|m| m.matrix.clone()),
        harness_version: manifest.map(|m| m.harness_version.clone()),
        planned: manifest.map(|m| m.cells),
        replay: manifest.is_some_and(|m| m.replay),
        counts: Counts::of(&run.records),
    }
}

fn default_title(tonight: &LoadedRun) -> String {
    let matrix = tonight
        .manifest
        .as_ref()
        .map(|m| m.matrix.clone())
        .or_else(|| tonight.plan.as_ref().and_then(|p| p.matrix.clone()));
    match matrix
        .as_deref()
        .and_then(|m| Path::new(m).file_stem())
        .map(|s| s.to_string_lossy().into_owned())
    {
        Some(name) => format!("{name}: compatibility"),
        None => "compatibility".to_owned(),
    }
}

/// Builds the view model of `runs` (oldest first, as [`super::load_runs`] orders them) for a
/// report written to `out` (which decides whether logs are copied or linked in place).
pub(crate) fn build(
    runs: &[LoadedRun],
    out: &Path,
    options: &ReportOptions,
) -> Result<ReportContext, ReportError> {
    let tonight = runs.last().ok_or(ReportError::NoRuns)?;
    let records: Vec<&CellRecord> = tonight.records.iter().collect();
    let plan_keys = tonight
        .plan
        .as_ref()
        .map(|p| p.keys.clone())
        .unwrap_or_default();
    let axes = layout::axes(&records, &plan_keys);
    let layout = layout::choose(
        &axes,
        &records,
        options.rows.as_deref(),
        options.cols.as_deref(),
    )?;
    let axis = |name: &Option<String>| -> Option<&Axis> {
        name.as_ref()
            .and_then(|n| axes.iter().find(|a| &a.name == n))
    };
    let constant: Vec<AxisValue> = axes
        .iter()
        .filter(|a| a.values.len() == 1 && !a.values[0].is_empty())
        .map(|a| AxisValue {
            axis: a.name.clone(),
            value: a.values[0].clone(),
        })
        .collect();

    let indexes: Vec<HashMap<&str, &CellRecord>> = runs.iter().map(LoadedRun::index).collect();
    let changes_cmp = (runs.len() >= 2)
        .then(|| compare::compare_runs(&runs[runs.len() - 2].records, &tonight.records));
    let change_of: HashMap<&str, Comparison> = changes_cmp
        .as_ref()
        .map(|c| {
            c.cells
                .iter()
                .map(|cell| (cell.id.as_str(), cell.comparison))
                .collect()
        })
        .unwrap_or_default();

    // Tables: one per combination of the grouping keys, in axis order.
    let position = |name: &str, value: &str| -> usize {
        axes.iter()
            .find(|a| a.name == name)
            .and_then(|a| a.values.iter().position(|v| v == value))
            .unwrap_or(usize::MAX)
    };
    let mut groups: IndexMap<Vec<String>, Vec<&CellRecord>> = IndexMap::new();
    for record in &records {
        let key: Vec<String> = layout.groups.iter().map(|g| value_of(record, g)).collect();
        groups.entry(key).or_default().push(record);
    }
    groups.sort_by_cached_key(|key, _| {
        key.iter()
            .zip(&layout.groups)
            .map(|(v, g)| position(g, v))
            .collect::<Vec<_>>()
    });
    let row_axis = axis(&layout.rows);
    let col_axis = axis(&layout.cols);
    let corner = match (&layout.rows, &layout.cols) {
        (Some(r), Some(c)) => format!("{r} ↓ {c} →"),
        (Some(r), None) => r.clone(),
        (None, Some(c)) => format!("{c} →"),
        (None, None) => String::new(),
    };
    let badge = |record: &CellRecord| CellBadge {
        id: record.id.clone(),
        page: page_of(&record.id),
        status: record.status,
        symbol: text::symbol(record.status),
        label: label(record),
        link: upstream(record),
        note: note(record),
        change: change_of.get(record.id.as_str()).copied(),
    };
    let mut tables = Vec::with_capacity(groups.len());
    let mut table_order: Vec<&CellRecord> = Vec::with_capacity(records.len());
    for (key, members) in &groups {
        let present = |axis: Option<&Axis>| -> Vec<String> {
            match axis {
                Some(axis) => {
                    let here: HashSet<String> =
                        members.iter().map(|r| value_of(r, &axis.name)).collect();
                    axis.values
                        .iter()
                        .filter(|v| here.contains(*v))
                        .cloned()
                        .collect()
                }
                None => vec![String::new()],
            }
        };
        let row_values = present(row_axis);
        let col_values = present(col_axis);
        let mut slots: HashMap<(String, String), Vec<&CellRecord>> = HashMap::new();
        for record in members {
            let r = row_axis
                .map(|a| value_of(record, &a.name))
                .unwrap_or_default();
            let c = col_axis
                .map(|a| value_of(record, &a.name))
                .unwrap_or_default();
            slots.entry((r, c)).or_default().push(record);
        }
        let mut rows = Vec::with_capacity(row_values.len());
        for r in &row_values {
            let mut cells = Vec::with_capacity(col_values.len());
            for c in &col_values {
                let here = slots
                    .get(&(r.clone(), c.clone()))
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                table_order.extend(here.iter().copied());
                cells.push(here.iter().map(|rec| badge(rec)).collect());
            }
            rows.push(PivotRow {
                label: if r.is_empty() && row_axis.is_some() {
                    "(none)".to_owned()
                } else {
                    r.clone()
                },
                cells,
            });
        }
        let group: Vec<AxisValue> = layout
            .groups
            .iter()
            .zip(key)
            .map(|(axis, value)| AxisValue {
                axis: axis.clone(),
                value: value.clone(),
            })
            .collect();
        let title = if group.is_empty() {
            "all cells".to_owned()
        } else {
            group
                .iter()
                .map(|g| format!("{} = {}", g.axis, g.value))
                .collect::<Vec<_>>()
                .join(" · ")
        };
        tables.push(PivotTable {
            title,
            group,
            corner: corner.clone(),
            columns: col_values
                .iter()
                .map(|c| {
                    if col_axis.is_none() {
                        "status".to_owned()
                    } else if c.is_empty() {
                        "(none)".to_owned()
                    } else {
                        c.clone()
                    }
                })
                .collect(),
            rows,
            counts: Counts::of(members.iter().copied()),
        });
    }

    // Fingerprints tonight that no earlier run has.
    let earlier: HashSet<&str> = runs[..runs.len() - 1]
        .iter()
        .flat_map(|r| r.records.iter())
        .filter_map(|r| r.fingerprint.as_deref())
        .collect();
    let mut fresh: IndexMap<&str, NewFingerprint> = IndexMap::new();
    if runs.len() >= 2 {
        for record in &table_order {
            let Some(fp) = record.fingerprint.as_deref() else {
                continue;
            };
            if earlier.contains(fp) {
                continue;
            }
            fresh
                .entry(fp)
                .or_insert_with(|| NewFingerprint {
                    fingerprint: text::one_line(fp),
                    signature: record.signature,
                    cells: Vec::new(),
                })
                .cells
                .push(CellLink {
                    id: record.id.clone(),
                    page: page_of(&record.id),
                });
        }
    }
    let new_fingerprints: Vec<NewFingerprint> = fresh.into_values().collect();
    let is_new: HashSet<&str> = new_fingerprints
        .iter()
        .flat_map(|f| f.cells.iter().map(|c| c.id.as_str()))
        .collect();

    // Cell entries, in table order.
    let in_place = same_folder(out, &tonight.dir);
    let mut cells = Vec::with_capacity(table_order.len());
    for record in &table_order {
        let log = log_ref(record, tonight, in_place);
        let excerpt = logs::excerpt(record, log.as_ref().map(|l| l.source.as_path()));
        cells.push(CellEntry {
            id: record.id.clone(),
            page: page_of(&record.id),
            values: record
                .values
                .iter()
                .map(|(k, v)| AxisValue {
                    axis: k.clone(),
                    value: value_text(v),
                })
                .collect(),
            status: record.status,
            symbol: text::symbol(record.status),
            label: label(record),
            note: note(record),
            signature: record.signature,
            phase: record.phase,
            spurious: record.spurious,
            reason: record.reason.clone(),
            expectation: record.expectation.clone(),
            upstream: upstream(record),
            fingerprint: record.fingerprint.clone(),
            new_fingerprint: is_new.contains(record.id.as_str()),
            line: record.line,
            duration_s: record.duration_s,
            attempts: record.attempts,
            metrics: record.metrics.clone(),
            runner: record.runner.clone(),
            pins: record.pins.clone(),
            log,
            excerpt,
            reproducer: repro::reproducer(record, tonight),
            history: history(&record.id, runs, &indexes),
            change: change_of.get(record.id.as_str()).copied(),
        });
    }

    let mut recent_changes: Vec<(usize, RecentChange)> = cells
        .iter()
        .filter_map(|c| {
            let change = c.history.last_change.clone()?;
            Some((
                change.run_index,
                RecentChange {
                    id: c.id.clone(),
                    page: c.page.clone(),
                    change,
                },
            ))
        })
        .collect();
    recent_changes.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));

    let tonight_ids: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let changes = changes_cmp.map(|cmp| Changes {
        base: runs[runs.len() - 2].name.clone(),
        regressions: cmp.regressions(),
        counts: cmp.counts.clone(),
        cells: cmp
            .cells
            .iter()
            .filter(|c| c.comparison != Comparison::Passing)
            .map(|c| ChangeRow {
                id: c.id.clone(),
                page: tonight_ids.contains(c.id.as_str()).then(|| page_of(&c.id)),
                comparison: c.comparison,
                description: c.comparison.describe(),
                base: c.base.clone(),
                head: c.head.clone(),
            })
            .collect(),
    });

    let not_run: Vec<String> = tonight
        .plan
        .as_ref()
        .map(|p| {
            p.cells
                .keys()
                .filter(|id| !tonight_ids.contains(id.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();

    let mut warnings: Vec<String> = runs.iter().flat_map(|r| r.warnings.clone()).collect();
    for record in &records {
        if text::inside(&record.log).is_none() && !record.log.is_empty() {
            warnings.push(format!(
                "cell `{}`: log path `{}` leaves the run folder; not read",
                text::one_line(&record.id),
                text::one_line(&record.log)
            ));
        }
    }

    let mut context = ReportContext {
        title: options
            .title
            .clone()
            .unwrap_or_else(|| default_title(tonight)),
        harness_version: env!("CARGO_PKG_VERSION"),
        runs: runs.iter().map(run_view).collect(),
        axes,
        layout,
        constant,
        counts: Counts::of(records.iter().copied()),
        not_run,
        tables,
        cells,
        new_fingerprints,
        changes,
        recent_changes: recent_changes.into_iter().map(|(_, c)| c).collect(),
        plots: Vec::new(),
        warnings,
    };
    context.plots = plots::specs(&context);
    Ok(context)
}
