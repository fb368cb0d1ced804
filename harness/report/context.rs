//! Builds the report's view model ([`super::view`]) from loaded runs, in named steps: tables,
//! cell entries (with their history), new fingerprints, changes since the previous run, and what
//! to plot. Every decision a format shows is made here, once, and snapshot-tested as JSON.

use super::bisects::{self, LoadedBisect};
use super::error::ReportError;
use super::layout::{self, Axis, Layout, value_of};
use super::load::LoadedRun;
use super::logs;
use super::plots;
use super::repro;
use super::text::{self, file_stem, http_link};
use super::view::{
    AxisValue, CellBadge, CellBisect, CellEntry, CellHistory, CellLink, ChangeRow, Changes, Counts,
    LogRef, MatrixView, NewFingerprint, PivotRow, PivotTable, RecentChange, ReportContext, RunView,
    StateChange, StateView,
};
use crate::compare::{self, Comparison, RunComparison};
use crate::matrix::template::value_text;
use crate::record::{CellRecord, Status};
use crate::signature::Signature;
use indexmap::IndexMap;
use std::collections::{HashMap, HashSet};
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
    /// Bisect folders (or folders of them) to show beside the cells they explain; bisect folders
    /// among the run folders are recognised too.
    pub bisects: Vec<PathBuf>,
    /// A line of `results.jsonl` that is not a record is an error, not a warning.
    pub strict: bool,
    /// Only the cells whose values this filter expression selects (`crate::filter`), in every
    /// run, so that tables, history and changes speak of the same cells.
    pub filter: Option<String>,
    /// How many of the newest runs (nights) the report covers: its history, changes and the
    /// cells x nights grid ([`DEFAULT_NIGHTS`] when `None`); older runs given are left out.
    pub nights: Option<usize>,
}

/// The nights a report covers unless told otherwise: two weeks of nightlies.
pub const DEFAULT_NIGHTS: usize = 14;
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

/// Where a cell's log is, or why it is refused (see [`logs::locate`]).
fn log_ref(record: &CellRecord, run: &LoadedRun, in_place: bool) -> Result<Option<LogRef>, String> {
    let Some(relative) = text::inside(&record.log) else {
        return Ok(None);
    };
    let Some(source) = logs::locate(&run.dir, &relative)? else {
        return Ok(None);
    };
    if in_place {
        let href = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        return Ok(Some(LogRef {
            href,
            source,
            copy: false,
        }));
    }
    Ok(Some(LogRef {
        href: format!("logs/{}.log", file_stem(&record.id)),
        source,
        copy: true,
    }))
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
    loaded_bisects: &[LoadedBisect],
    out: &Path,
    options: &ReportOptions,
) -> Result<ReportContext, ReportError> {
    // The window: the newest nights only (at least tonight).
    let window = options.nights.unwrap_or(DEFAULT_NIGHTS).max(1);
    let left_out = runs.len().saturating_sub(window);
    let runs = &runs[left_out..];
    let tonight = runs.last().ok_or(ReportError::NoRuns)?;
    let records: Vec<&CellRecord> = tonight.records.iter().collect();
    let axes = layout::axes(&records, &plan_keys(tonight));
    let (layout, parts) = parts(&records, &axes, &plan_keys(tonight), options)?;
    let previous = runs.len().checked_sub(2).map(|i| &runs[i]);
    let comparison = previous.map(|base| compare::compare_runs(&base.records, &tonight.records));
    let change_of = changes_by_id(&records, comparison.as_ref());
    let (bisects, bisect_of) = bisects::attach(loaded_bisects, &records, &layout.details);
    let marks = Marks {
        change_of: &change_of,
        bisect_of: &bisect_of,
    };
    let (tables, table_order, matrices) = tables(&parts, &marks);
    let new_fingerprints = new_fingerprints(runs, &table_order);
    let entries = Entries {
        runs,
        indexes: runs.iter().map(LoadedRun::index).collect(),
        is_new: new_fingerprints
            .iter()
            .flat_map(|f| f.cells.iter().map(|c| c.id.as_str()))
            .collect(),
        marks: &marks,
        in_place: same_folder(out, &tonight.dir),
    };
    let cells: Vec<CellEntry> = table_order.iter().map(|r| entries.entry(r)).collect();
    let tonight_ids: HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
    let mut context = ReportContext {
        title: options
            .title
            .clone()
            .unwrap_or_else(|| default_title(tonight)),
        harness_version: env!("CARGO_PKG_VERSION"),
        runs: runs.iter().map(run_view).collect(),
        constant: constant(&axes),
        axes,
        layout,
        counts: Counts::of(records.iter().copied()),
        not_run: not_run(tonight, &tonight_ids),
        tables,
        recent_changes: recent_changes(&cells),
        cells,
        changes: previous
            .zip(comparison)
            .map(|(base, cmp)| changes(base, &cmp, &tonight_ids)),
        new_fingerprints,
        plots: Vec::new(),
        warnings: Vec::new(),
        bisects,
        matrices,
        nights: None,
    };
    if runs.len() > 1 {
        context.nights = Some(super::nights::build(runs, left_out, &context));
    }
    context.warnings = warnings(runs, &records, &context.cells);
    context.warnings.extend(bisects::warnings(&context.bisects));
    context.plots = plots::specs(&context);
    Ok(context)
}

/// The axes the plan names, in its order (empty without a `plan.json`).
fn plan_keys(tonight: &LoadedRun) -> Vec<String> {
    tonight
        .plan
        .as_ref()
        .map(|p| p.keys.clone())
        .unwrap_or_default()
}

/// Axes with one (non-empty) value tonight: said once instead of in every table.
fn constant(axes: &[Axis]) -> Vec<AxisValue> {
    axes.iter()
        .filter(|a| a.values.len() == 1 && !a.values[0].is_empty())
        .map(|a| AxisValue {
            axis: a.name.clone(),
            value: a.values[0].clone(),
        })
        .collect()
}

/// Each of tonight's cells' comparison with the previous run.
fn changes_by_id<'a>(
    records: &[&'a CellRecord],
    comparison: Option<&RunComparison>,
) -> HashMap<&'a str, Comparison> {
    let Some(comparison) = comparison else {
        return HashMap::new();
    };
    let by_id: HashMap<&str, Comparison> = comparison
        .cells
        .iter()
        .map(|cell| (cell.id.as_str(), cell.comparison))
        .collect();
    records
        .iter()
        .filter_map(|r| Some((r.id.as_str(), *by_id.get(r.id.as_str())?)))
        .collect()
}

/// What marks a cell beyond its record: its change since the previous run, the bisect that
/// explains it.
struct Marks<'a> {
    change_of: &'a HashMap<&'a str, Comparison>,
    bisect_of: &'a HashMap<String, CellBisect>,
}

/// A cell as a table shows it.
fn badge(record: &CellRecord, marks: &Marks) -> CellBadge {
    CellBadge {
        id: record.id.clone(),
        page: page_of(&record.id),
        status: record.status,
        symbol: text::symbol(record.status),
        label: label(record),
        link: upstream(record),
        note: note(record),
        change: marks.change_of.get(record.id.as_str()).copied(),
        bisect: marks.bisect_of.get(&record.id).map(|b| b.note.clone()),
    }
}

/// One matrix of the report: the whole run, or the cells of one value of a split key (a
/// recorded run in a replay), with its own axes and layout.
struct Part<'a> {
    split: Option<AxisValue>,
    records: Vec<&'a CellRecord>,
    axes: Vec<Axis>,
    layout: Layout,
}

/// The report's layout and its matrices: one, or one per value of the key that splits the cells
/// into different matrices ([`layout::split_key`]).
fn parts<'a>(
    records: &[&'a CellRecord],
    axes: &[Axis],
    plan_keys: &[String],
    options: &ReportOptions,
) -> Result<(Layout, Vec<Part<'a>>), ReportError> {
    let whole = layout::choose(
        axes,
        records,
        options.rows.as_deref(),
        options.cols.as_deref(),
    )?;
    let Some(key) = layout::split_key(axes, records) else {
        let part = Part {
            split: None,
            records: records.to_vec(),
            axes: axes.to_vec(),
            layout: whole.clone(),
        };
        return Ok((whole, vec![part]));
    };
    let values = axes
        .iter()
        .find(|a| a.name == key)
        .map(|a| a.values.clone())
        .unwrap_or_default();
    let mut parts = Vec::with_capacity(values.len());
    let mut details: Vec<String> = Vec::new();
    for value in values {
        let members: Vec<&CellRecord> = records
            .iter()
            .copied()
            .filter(|r| value_of(r, &key) == value)
            .collect();
        let ids = layout::id_like(&layout::axes(&members, plan_keys), &members);
        let sub_axes: Vec<Axis> = layout::axes(&members, plan_keys)
            .into_iter()
            .filter(|a| a.name != key && !ids.contains(&a.name))
            .collect();
        // `--rows`/`--cols` apply to the matrices that have the axis.
        let has = |name: &Option<String>| {
            name.as_deref()
                .filter(|n| sub_axes.iter().any(|a| a.name == *n))
                .map(str::to_owned)
        };
        let (rows, cols) = (has(&options.rows), has(&options.cols));
        let mut sub = layout::choose(&sub_axes, &members, rows.as_deref(), cols.as_deref())?;
        sub.details.extend(ids);
        for d in &sub.details {
            if !details.contains(d) {
                details.push(d.clone());
            }
        }
        parts.push(Part {
            split: Some(AxisValue {
                axis: key.clone(),
                value,
            }),
            records: members,
            axes: sub_axes,
            layout: sub,
        });
    }
    let layout = Layout {
        rows: None,
        cols: None,
        groups: Vec::new(),
        details,
        split: Some(key),
    };
    Ok((layout, parts))
}

/// The tables of every part, one per combination of its grouping keys in axis order; tonight's
/// records in the order the tables show them (the order of the cell entries); and, for a split
/// report, each matrix with its layout and tables.
fn tables<'a>(
    parts: &[Part<'a>],
    marks: &Marks,
) -> (Vec<PivotTable>, Vec<&'a CellRecord>, Vec<MatrixView>) {
    let mut tables = Vec::new();
    let mut order = Vec::new();
    let mut matrices = Vec::new();
    for part in parts {
        let axis = |name: &Option<String>| -> Option<&Axis> {
            name.as_ref()
                .and_then(|n| part.axes.iter().find(|a| &a.name == n))
        };
        let pivot = Pivot {
            rows: axis(&part.layout.rows),
            cols: axis(&part.layout.cols),
            groups: &part.layout.groups,
            split: part.split.as_ref(),
            corner: corner(&part.layout),
            marks,
        };
        let first = tables.len();
        for (key, members) in &groups(&part.records, &part.axes, &part.layout.groups) {
            tables.push(pivot.table(key, members, &mut order));
        }
        if let Some(split) = &part.split {
            matrices.push(MatrixView {
                split: split.clone(),
                layout: part.layout.clone(),
                tables: (first..tables.len()).collect(),
                counts: Counts::of(part.records.iter().copied()),
            });
        }
    }
    (tables, order, matrices)
}

/// Tonight's records by their values of the grouping axes, groups in axis-value order.
fn groups<'a>(
    records: &[&'a CellRecord],
    axes: &[Axis],
    grouping: &[String],
) -> IndexMap<Vec<String>, Vec<&'a CellRecord>> {
    let position = |name: &str, value: &str| -> usize {
        axes.iter()
            .find(|a| a.name == name)
            .and_then(|a| a.values.iter().position(|v| v == value))
            .unwrap_or(usize::MAX)
    };
    let mut groups: IndexMap<Vec<String>, Vec<&CellRecord>> = IndexMap::new();
    for record in records {
        let key: Vec<String> = grouping.iter().map(|g| value_of(record, g)).collect();
        groups.entry(key).or_default().push(record);
    }
    groups.sort_by_cached_key(|key, _| {
        key.iter()
            .zip(grouping)
            .map(|(v, g)| position(g, v))
            .collect::<Vec<_>>()
    });
    groups
}

/// Header of the label column: `flashinfer ↓ gpu →`.
fn corner(layout: &Layout) -> String {
    match (&layout.rows, &layout.cols) {
        (Some(r), Some(c)) => format!("{r} ↓ {c} →"),
        (Some(r), None) => r.clone(),
        (None, Some(c)) => format!("{c} →"),
        (None, None) => String::new(),
    }
}

/// What every table shares: the row and column axes, the grouping keys, the corner label.
struct Pivot<'a> {
    rows: Option<&'a Axis>,
    cols: Option<&'a Axis>,
    groups: &'a [String],
    /// The matrix's value of the split key, said first in each table's title.
    split: Option<&'a AxisValue>,
    corner: String,
    marks: &'a Marks<'a>,
}

impl Pivot<'_> {
    /// The table of one group; its records are appended to `order` as the table shows them.
    fn table<'r>(
        &self,
        key: &[String],
        members: &[&'r CellRecord],
        order: &mut Vec<&'r CellRecord>,
    ) -> PivotTable {
        let row_values = present(self.rows, members);
        let col_values = present(self.cols, members);
        let slots = self.slots(members);
        let mut rows = Vec::with_capacity(row_values.len());
        for r in &row_values {
            let mut cells = Vec::with_capacity(col_values.len());
            for c in &col_values {
                let here = slots
                    .get(&(r.clone(), c.clone()))
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                order.extend(here.iter().copied());
                cells.push(here.iter().map(|rec| badge(rec, self.marks)).collect());
            }
            rows.push(PivotRow {
                label: axis_label(r, self.rows.is_some()),
                cells,
            });
        }
        let group: Vec<AxisValue> = self
            .split
            .cloned()
            .into_iter()
            .chain(self.groups.iter().zip(key).map(|(axis, value)| AxisValue {
                axis: axis.clone(),
                value: value.clone(),
            }))
            .collect();
        PivotTable {
            title: group_title(&group),
            group,
            corner: self.corner.clone(),
            columns: col_values
                .iter()
                .map(|c| match self.cols {
                    None => "status".to_owned(),
                    Some(_) => axis_label(c, true),
                })
                .collect(),
            rows,
            counts: Counts::of(members.iter().copied()),
        }
    }

    /// The group's records by (row value, column value).
    fn slots<'r>(
        &self,
        members: &[&'r CellRecord],
    ) -> HashMap<(String, String), Vec<&'r CellRecord>> {
        let of = |axis: Option<&Axis>, record: &CellRecord| {
            axis.map(|a| value_of(record, &a.name)).unwrap_or_default()
        };
        let mut slots: HashMap<(String, String), Vec<&CellRecord>> = HashMap::new();
        for record in members {
            let key = (of(self.rows, record), of(self.cols, record));
            slots.entry(key).or_default().push(record);
        }
        slots
    }
}

/// The values of `axis` that the group's records have, in axis order (one empty value when
/// there is no such axis).
fn present(axis: Option<&Axis>, members: &[&CellRecord]) -> Vec<String> {
    let Some(axis) = axis else {
        return vec![String::new()];
    };
    let here: HashSet<String> = members.iter().map(|r| value_of(r, &axis.name)).collect();
    axis.values
        .iter()
        .filter(|v| here.contains(*v))
        .cloned()
        .collect()
}

/// A row or column label: `(none)` for a cell with no value of a real axis.
fn axis_label(value: &str, real_axis: bool) -> String {
    if value.is_empty() && real_axis {
        "(none)".to_owned()
    } else {
        value.to_owned()
    }
}

/// `model = qwen3 · engine = sglang`, or `all cells`.
fn group_title(group: &[AxisValue]) -> String {
    if group.is_empty() {
        return "all cells".to_owned();
    }
    group
        .iter()
        .map(|g| format!("{} = {}", g.axis, g.value))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// Fingerprints tonight that no earlier run has, in table order (none with a single run).
fn new_fingerprints(runs: &[LoadedRun], table_order: &[&CellRecord]) -> Vec<NewFingerprint> {
    let Some((_, earlier_runs)) = runs.split_last().filter(|(_, earlier)| !earlier.is_empty())
    else {
        return Vec::new();
    };
    let earlier: HashSet<&str> = earlier_runs
        .iter()
        .flat_map(|r| r.records.iter())
        .filter_map(|r| r.fingerprint.as_deref())
        .collect();
    let mut fresh: IndexMap<&str, NewFingerprint> = IndexMap::new();
    for record in table_order {
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
    fresh.into_values().collect()
}

/// What the cell entries are made from, besides the record.
struct Entries<'a> {
    runs: &'a [LoadedRun],
    /// Each run's records by id, for the history.
    indexes: Vec<HashMap<&'a str, &'a CellRecord>>,
    /// Cells whose fingerprint is new tonight.
    is_new: HashSet<&'a str>,
    marks: &'a Marks<'a>,
    /// The report is written into tonight's run folder: logs are linked, not copied.
    in_place: bool,
}

impl Entries<'_> {
    /// Everything about one of tonight's cells.
    fn entry(&self, record: &CellRecord) -> CellEntry {
        let tonight = &self.runs[self.runs.len() - 1];
        let (log, log_refused) = match log_ref(record, tonight, self.in_place) {
            Ok(log) => (log, None),
            Err(why) => (None, Some(why)),
        };
        let excerpt = logs::excerpt(record, log.as_ref().map(|l| l.source.as_path()));
        CellEntry {
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
            new_fingerprint: self.is_new.contains(record.id.as_str()),
            line: record.line,
            decided_by: record.decided_by.clone(),
            evidence: record.evidence.clone(),
            duration_s: record.duration_s,
            replay_duration_s: tonight.replay_durations.get(&record.id).copied(),
            attempts: record.attempts,
            metrics: record.metrics.clone(),
            runner: record.runner.clone(),
            pins: record.pins.clone(),
            log,
            log_refused,
            excerpt,
            reproducer: repro::reproducer(record, tonight),
            history: history(&record.id, self.runs, &self.indexes),
            change: self.marks.change_of.get(record.id.as_str()).copied(),
            bisect: self.marks.bisect_of.get(&record.id).cloned(),
        }
    }
}

/// Cells whose state changed within the loaded runs, the most recent change first.
fn recent_changes(cells: &[CellEntry]) -> Vec<RecentChange> {
    let mut recent: Vec<RecentChange> = cells
        .iter()
        .filter_map(|c| {
            Some(RecentChange {
                id: c.id.clone(),
                page: c.page.clone(),
                change: c.history.last_change.clone()?,
            })
        })
        .collect();
    recent.sort_by(|a, b| {
        b.change
            .run_index
            .cmp(&a.change.run_index)
            .then_with(|| a.id.cmp(&b.id))
    });
    recent
}

/// Tonight against `base`, the previous run: every cell except those passing on both sides.
fn changes(base: &LoadedRun, cmp: &RunComparison, tonight_ids: &HashSet<&str>) -> Changes {
    Changes {
        base: base.name.clone(),
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
    }
}

/// Cells of tonight's plan with no record (interrupted, or not run yet).
fn not_run(tonight: &LoadedRun, tonight_ids: &HashSet<&str>) -> Vec<String> {
    let Some(plan) = tonight.plan.as_ref() else {
        return Vec::new();
    };
    plan.cells
        .keys()
        .filter(|id| !tonight_ids.contains(id.as_str()))
        .cloned()
        .collect()
}

/// Problems that did not stop the report: the loader's, and logs a report never reads.
fn warnings(runs: &[LoadedRun], records: &[&CellRecord], cells: &[CellEntry]) -> Vec<String> {
    let mut warnings: Vec<String> = runs.iter().flat_map(|r| r.warnings.clone()).collect();
    for record in records {
        if text::inside(&record.log).is_none() && !record.log.is_empty() {
            warnings.push(format!(
                "cell `{}`: log path `{}` leaves the run folder; not read",
                text::one_line(&record.id),
                text::one_line(&record.log)
            ));
        }
    }
    for cell in cells {
        if let Some(why) = &cell.log_refused {
            warnings.push(format!(
                "cell `{}`: log not read: {why}",
                text::one_line(&cell.id)
            ));
        }
    }
    warnings
}
