//! Bisects beside the cells they explain.
//!
//! A bisect folder (`gpucompat bisect`) is a run folder plus `bisect.json`; its records are
//! probes, never cells of a nightly, so it is read here and not by [`super::load`]. A bisect
//! explains a cell of tonight's run when the cell has the bisected cell's values (`values` in
//! `bisect.json`) except the bisected axis and the keys the others determine (`include` keys),
//! fails with the bisected signature (or either is unknown), and, for a version bisect, sits
//! after the last good value (PEP 440 order): the cell at the bad version and the later ones
//! that still fail (a bisect without a first bad value: its bad end only). An attribution
//! explains the cell with all of its values.

use super::error::ReportError;
use super::logs;
use super::text::{self, file_stem};
use super::view::{BisectView, CellBisect, CellLink, LogRef, ProbeView};
use crate::bisect::summary::{self, BisectFile, Kind, State};
use crate::matrix::template::value_text;
use crate::record::{CellRecord, Status, Values};
use crate::run::folder::{RESULTS, read_results};
use pep440_rs::Version;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// One bisect folder, read.
#[derive(Debug, Clone)]
pub(crate) struct LoadedBisect {
    pub dir: PathBuf,
    pub file: BisectFile,
    /// The bisected cell's values: `bisect.json`'s, else those of one of its own probe records.
    pub values: Option<Values>,
}

/// The folders a report was given, sorted: run folders, and bisect folders (a folder holding
/// `bisect.json`, or a folder of such folders, like `bisects/`). `explicit` folders (`--bisect`)
/// must be bisect folders.
pub(crate) fn split(
    given: &[PathBuf],
    explicit: &[PathBuf],
) -> Result<(Vec<PathBuf>, Vec<PathBuf>), ReportError> {
    let mut runs = Vec::new();
    let mut bisects = Vec::new();
    for dir in given {
        match bisect_folders(dir) {
            Some(found) => bisects.extend(found),
            None => runs.push(dir.clone()),
        }
    }
    for dir in explicit {
        bisects.extend(
            bisect_folders(dir)
                .ok_or_else(|| ReportError::NotABisectFolder(dir.display().to_string()))?,
        );
    }
    // The same folder given twice (positionally and with `--bisect`) is one bisect.
    let mut seen = Vec::new();
    bisects.retain(|d| {
        let key = d.canonicalize().unwrap_or_else(|_| d.clone());
        let fresh = !seen.contains(&key);
        seen.push(key);
        fresh
    });
    if runs.is_empty() && !bisects.is_empty() {
        return Err(ReportError::OnlyBisects);
    }
    Ok((runs, bisects))
}

/// `dir` itself when it is a bisect folder; the bisect folders right under it when it is not a
/// run folder but holds some; `None` otherwise.
fn bisect_folders(dir: &Path) -> Option<Vec<PathBuf>> {
    if summary::is_bisect_folder(dir) {
        return Some(vec![dir.to_path_buf()]);
    }
    if super::load::is_run_folder(dir) {
        return None;
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| summary::is_bisect_folder(p))
        .collect();
    found.sort();
    (!found.is_empty()).then_some(found)
}

/// Reads bisect folders.
pub(crate) fn load(dirs: &[PathBuf]) -> Result<Vec<LoadedBisect>, ReportError> {
    dirs.iter().map(|d| load_one(d)).collect()
}

fn load_one(dir: &Path) -> Result<LoadedBisect, ReportError> {
    let file = summary::read(dir).map_err(|source| ReportError::Bisect {
        path: dir.display().to_string(),
        source,
    })?;
    let values = if file.values.is_empty() {
        own_record_values(dir, &file)
    } else {
        Some(file.values.clone())
    };
    Ok(LoadedBisect {
        dir: dir.to_path_buf(),
        file,
        values,
    })
}

/// For a `bisect.json` without `values`: a probe the bisect ran itself has the cell's values
/// (with another value of the bisected axis, which matching ignores).
fn own_record_values(dir: &Path, file: &BisectFile) -> Option<Values> {
    let records = read_results(&dir.join(RESULTS), false).ok()?;
    file.runs
        .iter()
        .filter(|r| r.reused_from.is_none())
        .find_map(|r| records.get(&r.cell))
        .map(|r| r.values.clone())
}

/// The note a table shows: `first bad 0.6.10 (bisected, 5 probes)`.
pub(crate) fn note(file: &BisectFile) -> String {
    let probes = match file.probes {
        1 => "1 probe".to_owned(),
        n => format!("{n} probes"),
    };
    match (file.state, file.kind, file.converged) {
        (State::Running, ..) => format!("bisect running ({probes} so far)"),
        (State::Interrupted, ..) => format!("bisect interrupted after {probes}"),
        (State::Finished, Kind::Version, true) => format!(
            "first bad {} (bisected, {probes})",
            file.first_bad.clone().flatten().unwrap_or_default()
        ),
        (State::Finished, Kind::Attribution, true) => {
            let culprits = file.culprits.clone().unwrap_or_default();
            format!(
                "{}: {} (attributed, {probes})",
                if culprits.len() == 1 {
                    "culprit"
                } else {
                    "culprits"
                },
                culprits.join(" + ")
            )
        }
        (State::Finished, _, false) => format!(
            "not converged: {}",
            short(file.reason.as_deref().unwrap_or("no reason recorded"))
        ),
    }
}

/// A reason short enough for a table cell (the cell page has it whole).
fn short(reason: &str) -> String {
    const MAX: usize = 90;
    let line = text::one_line(reason);
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", line[..cut].trim_end()),
        None => line,
    }
}

/// Whether the bisect explains `record`, one of tonight's cells; `details` are the keys other
/// keys determine (not compared).
fn explains(bisect: &LoadedBisect, record: &CellRecord, details: &[String]) -> bool {
    let file = &bisect.file;
    if !matches!(record.status, Status::Fail | Status::Flaky | Status::Xfail) {
        return false;
    }
    if let (Some(want), Some(got)) = (file.signature, record.signature) {
        if want != got {
            return false;
        }
    }
    let Some(values) = &bisect.values else {
        return record.id == file.cell;
    };
    let axis = match file.kind {
        Kind::Version => file.inputs.axis.as_deref(),
        Kind::Attribution => None,
    };
    let skip = |key: &str| Some(key) == axis || details.iter().any(|d| d == key);
    let text_of = |map: &Values, key: &str| map.get(key).map(value_text).unwrap_or_default();
    let same = values
        .keys()
        .chain(record.values.keys())
        .filter(|k| !skip(k))
        .all(|k| text_of(values, k) == text_of(&record.values, k));
    if !same {
        return false;
    }
    match axis {
        None => true,
        Some(axis) => in_failing_range(file, &text_of(&record.values, axis)),
    }
}

/// A version bisect: whether `value` is in the failing range: later than the last good value
/// (from the first bad one when no good one is known). A bisect with no first bad value (the bad
/// end passed, or an end failed otherwise) speaks only of its bad end.
fn in_failing_range(file: &BisectFile, value: &str) -> bool {
    let same = |a: &str, b: &str| match (Version::from_str(a), Version::from_str(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    let Some(first_bad) = file.first_bad.clone().flatten() else {
        return file
            .inputs
            .bad
            .as_deref()
            .is_some_and(|bad| same(bad, value));
    };
    let Ok(version) = Version::from_str(value) else {
        return value == first_bad;
    };
    let good = file.last_good.clone().flatten();
    match good.as_deref().map(Version::from_str) {
        Some(Ok(good)) => version > good,
        _ => Version::from_str(&first_bad).map_or(value == first_bad, |bad| version >= bad),
    }
}

/// The bisects as the report shows them, and the one each explained cell carries (converged
/// before not, then the newest).
pub(crate) fn attach(
    bisects: &[LoadedBisect],
    records: &[&CellRecord],
    details: &[String],
) -> (Vec<BisectView>, HashMap<String, CellBisect>) {
    let names = slugs(bisects);
    let mut views = Vec::with_capacity(bisects.len());
    let mut best: HashMap<String, CellBisect> = HashMap::new();
    for (index, (bisect, slug)) in bisects.iter().zip(&names).enumerate() {
        let cells: Vec<CellLink> = records
            .iter()
            .filter(|r| explains(bisect, r, details))
            .map(|r| CellLink {
                id: r.id.clone(),
                page: super::context::page_of(&r.id),
            })
            .collect();
        let summary = cell_bisect(index, bisect);
        for cell in &cells {
            let better = match best.get(&cell.id) {
                None => true,
                Some(held) => {
                    let rank = |b: &CellBisect, at: &str| (b.converged, at.to_owned());
                    rank(&summary, &bisect.file.started_at)
                        > rank(held, &bisects[held.bisect].file.started_at)
                }
            };
            if better {
                best.insert(cell.id.clone(), summary.clone());
            }
        }
        views.push(view(bisect, slug, cells));
    }
    (views, best)
}

/// A name per bisect folder, unique within the report: where its logs go (`bisects/<name>/`).
fn slugs(bisects: &[LoadedBisect]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(bisects.len());
    for bisect in bisects {
        let base = file_stem(
            &bisect
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "bisect".to_owned()),
        );
        let mut name = base.clone();
        let mut n = 1;
        while names.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        names.push(name);
    }
    names
}

fn cell_bisect(index: usize, bisect: &LoadedBisect) -> CellBisect {
    let file = &bisect.file;
    CellBisect {
        bisect: index,
        kind: file.kind,
        first_bad: file.first_bad.clone().flatten(),
        last_good: file.last_good.clone().flatten(),
        culprits: file.culprits.clone().unwrap_or_default(),
        converged: file.converged,
        reason: file.reason.clone(),
        probes: file.probes,
        signature: file.signature,
        source: bisect.dir.display().to_string(),
        note: note(file),
    }
}

fn view(bisect: &LoadedBisect, slug: &str, cells: Vec<CellLink>) -> BisectView {
    let file = &bisect.file;
    BisectView {
        name: slug.to_owned(),
        dir: bisect.dir.display().to_string(),
        kind: file.kind,
        state: file.state,
        cell: file.cell.clone(),
        axis: file.inputs.axis.clone(),
        heading: file.heading(),
        answer: file.answer(),
        note: note(file),
        converged: file.converged,
        first_bad: file.first_bad.clone().flatten(),
        last_good: file.last_good.clone().flatten(),
        culprits: file.culprits.clone().unwrap_or_default(),
        reason: file.reason.clone(),
        signature: file.signature,
        probes: file.probes,
        bound: file.bound,
        runs: file
            .runs
            .iter()
            .enumerate()
            .map(|(i, run)| probe(bisect, slug, i, run))
            .collect(),
        cells,
    }
}

fn probe(bisect: &LoadedBisect, slug: &str, i: usize, run: &summary::RunEntry) -> ProbeView {
    let located = match text::inside(&run.log) {
        Some(relative) => logs::locate(&bisect.dir, &relative),
        None if run.log.is_empty() => Ok(None),
        None => Err(format!("`{}` leaves the bisect folder", run.log)),
    };
    let (log, log_refused) = match located {
        Ok(source) => (
            source.map(|source| LogRef {
                href: format!("bisects/{slug}/{}-{}.log", i + 1, file_stem(&run.cell)),
                source,
                copy: true,
            }),
            None,
        ),
        Err(why) => (None, Some(why)),
    };
    ProbeView {
        probe: BisectFile::probe_label(run),
        pins: run.pins.clone(),
        cell: run.cell.clone(),
        attempt: run.attempt,
        verdict: run.verdict,
        status: run.status,
        signature: run.signature,
        phase: run.phase,
        duration_s: run.duration_s,
        reason: run.reason.clone(),
        flaky: run.flaky,
        reused_from: run.reused_from.clone(),
        log,
        log_refused,
    }
}

/// Problems worth a warning: bisects that explain none of tonight's cells, refused probe logs.
pub(crate) fn warnings(views: &[BisectView]) -> Vec<String> {
    let mut out = Vec::new();
    for view in views {
        if view.cells.is_empty() {
            out.push(format!(
                "bisect `{}` (cell `{}`, {}) explains no failing cell of tonight's run; it is listed under Bisects only",
                text::one_line(&view.dir),
                text::one_line(&view.cell),
                text::one_line(&view.answer)
            ));
        }
        for (i, probe) in view.runs.iter().enumerate() {
            if let Some(why) = &probe.log_refused {
                out.push(format!(
                    "bisect `{}`, probe {}: log not read: {why}",
                    text::one_line(&view.dir),
                    i + 1
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bisect::summary::Inputs;

    fn file(kind: Kind, converged: bool) -> BisectFile {
        BisectFile {
            format_version: 1,
            kind,
            state: State::Finished,
            matrix: "m.toml".into(),
            matrix_hash: String::new(),
            cell: "1.5".into(),
            values: Values::new(),
            inputs: Inputs {
                axis: Some("v".into()),
                good: Some("1.0".into()),
                bad: Some("1.8".into()),
                base: Vec::new(),
                head: Vec::new(),
                signature: None,
                retries: 1,
                candidates_from: "matrix".into(),
                runs_from: Vec::new(),
            },
            candidates: Vec::new(),
            bumps: Vec::new(),
            signature: None,
            first_bad: Some(Some("0.6.10".into())),
            last_good: Some(Some("0.6.9".into())),
            culprits: Some(vec!["flashinfer-cubin".into()]),
            converged,
            reason: Some("the bad end `v = 1.4` passed".into()),
            probes: 5,
            bound: None,
            runs: Vec::new(),
            started_at: String::new(),
            finished_at: None,
        }
    }

    #[test]
    fn notes_say_the_answer_or_why_there_is_none() {
        assert_eq!(
            note(&file(Kind::Version, true)),
            "first bad 0.6.10 (bisected, 5 probes)"
        );
        assert_eq!(
            note(&file(Kind::Attribution, true)),
            "culprit: flashinfer-cubin (attributed, 5 probes)"
        );
        assert_eq!(
            note(&file(Kind::Version, false)),
            "not converged: the bad end `v = 1.4` passed"
        );
        let mut long = file(Kind::Version, false);
        long.reason = Some("x".repeat(200));
        assert!(note(&long).ends_with('…') && note(&long).chars().count() < 110);
        let mut running = file(Kind::Version, false);
        running.state = State::Running;
        assert_eq!(note(&running), "bisect running (5 probes so far)");
    }

    #[test]
    fn a_version_bisect_explains_failing_cells_after_the_last_good_value() {
        let mut values = Values::new();
        values.insert("v".into(), "0.6.10".into());
        values.insert("gpu".into(), "sm_90".into());
        let bisect = LoadedBisect {
            dir: PathBuf::from("b"),
            file: file(Kind::Version, true),
            values: Some(values),
        };
        let cell = |v: &str, gpu: &str, status: Status| {
            let mut r: CellRecord = serde_json::from_value(serde_json::json!({
                "id": format!("{v}-{gpu}"), "values": {"v": v, "gpu": gpu},
                "pins": [], "status": status, "log": "", "duration_s": 1.0,
                "attempts": 1, "runner": {"host": "h", "gpus": []}
            }))
            .expect("a record");
            r.status = status;
            r
        };
        assert!(explains(
            &bisect,
            &cell("0.6.10", "sm_90", Status::Fail),
            &[]
        ));
        assert!(explains(
            &bisect,
            &cell("0.6.11", "sm_90", Status::Xfail),
            &[]
        ));
        assert!(!explains(
            &bisect,
            &cell("0.6.9", "sm_90", Status::Fail),
            &[]
        ));
        assert!(!explains(
            &bisect,
            &cell("0.6.11", "sm_90", Status::Pass),
            &[]
        ));
        assert!(!explains(
            &bisect,
            &cell("0.6.11", "sm_89", Status::Fail),
            &[]
        ));
        // With no first bad value, only the bad end.
        let mut open = bisect.clone();
        open.file.first_bad = Some(None);
        open.file.last_good = Some(None);
        open.file.inputs.bad = Some("0.6.10".into());
        assert!(explains(&open, &cell("0.6.10", "sm_90", Status::Fail), &[]));
        assert!(!explains(
            &open,
            &cell("0.6.11", "sm_90", Status::Fail),
            &[]
        ));
        // A key the others determine (an `include` key) is not compared.
        assert!(explains(
            &bisect,
            &cell("0.6.11", "sm_89", Status::Fail),
            &["gpu".to_owned()]
        ));
    }
}
