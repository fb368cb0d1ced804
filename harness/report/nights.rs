//! The published dashboard over many nights: every cell x the last nights, when each cell
//! started failing and last passed, how often it flaked, and the pass-rate trend per matrix.
//!
//! A night's verdict of a cell is one of four ([`Verdict`]): good (`pass`, `flaky`, `xfail`:
//! what the matrix expects), bad (`fail`, `xpass`: what makes a run exit 1), or none (`error`,
//! `skip`, no record: the night says nothing about the cell). A night flaked when its status is
//! `flaky` (the cell failed, then passed on a retry), or when its verdict differs from both the
//! night before and the night after (nights with a verdict) while the pins are the same on all
//! three: the result flipped and flipped back with nothing the matrix controls changed. A flip
//! that stays (a regression, or a fix) is not a flake, nor is one that came with new pins; the
//! newest night cannot be called a flip yet. The flake rate is flaked nights over nights with a
//! verdict.

use super::load::LoadedRun;
use super::text;
use super::view::{
    CellEntry, Counts, NightHead, NightRow, NightState, NightsView, ReportContext, TrendSeries,
};
use crate::record::{CellRecord, Status};
use std::collections::{HashMap, HashSet};

/// What a night says of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Good,
    Bad,
    None,
}

fn verdict(status: Status) -> Verdict {
    match status {
        Status::Pass | Status::Flaky | Status::Xfail => Verdict::Good,
        Status::Fail | Status::Xpass => Verdict::Bad,
        Status::Error | Status::Skip => Verdict::None,
    }
}

/// The grid of `runs` (the nights shown, oldest first), `left_out` runs before them not shown.
/// `ctx` gives tonight's cells in table order, their bisects, and the matrices of a split report.
pub(crate) fn build(runs: &[LoadedRun], left_out: usize, ctx: &ReportContext) -> NightsView {
    let indexes: Vec<HashMap<&str, &CellRecord>> = runs.iter().map(LoadedRun::index).collect();
    let tonight: HashMap<&str, &CellEntry> = ctx.cells.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut rows: Vec<NightRow> = ids(runs, ctx)
        .into_iter()
        .map(|id| row(id, runs, &indexes, tonight.get(id).copied()))
        .collect();
    let place: HashMap<&str, usize> = ctx
        .cells
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id.as_str(), i))
        .collect();
    let since: HashMap<&str, usize> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    rows.sort_by_cached_key(|r| attention(r, &since, &place));
    NightsView {
        nights: heads(runs),
        left_out,
        rows,
        trend: trend(runs, ctx),
    }
}

/// Every cell id of the nights: tonight's in table order, then those only earlier nights have.
fn ids<'a>(runs: &'a [LoadedRun], ctx: &'a ReportContext) -> Vec<&'a str> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut ids: Vec<&str> = Vec::new();
    for cell in &ctx.cells {
        if seen.insert(cell.id.as_str()) {
            ids.push(cell.id.as_str());
        }
    }
    let mut earlier: Vec<&str> = runs
        .iter()
        .flat_map(|r| r.records.iter().map(|rec| rec.id.as_str()))
        .filter(|id| seen.insert(id))
        .collect();
    earlier.sort_unstable();
    ids.extend(earlier);
    ids
}

/// Failing rows first (the newest breakage first), then flaky ones (most flaky first), then the
/// rest in table order.
fn attention(
    row: &NightRow,
    since: &HashMap<&str, usize>,
    place: &HashMap<&str, usize>,
) -> (u8, usize, u64, usize) {
    let table = place.get(row.id.as_str()).copied().unwrap_or(usize::MAX);
    match &row.failing_since {
        Some(night) => {
            let newest_first = usize::MAX - since.get(night.as_str()).copied().unwrap_or(0);
            (0, newest_first, 0, table)
        }
        None if row.flakes > 0 => (1, 0, u64::MAX - (row.flake_rate * 1e6) as u64, table),
        None => (2, 0, 0, table),
    }
}

fn row(
    id: &str,
    runs: &[LoadedRun],
    indexes: &[HashMap<&str, &CellRecord>],
    tonight: Option<&CellEntry>,
) -> NightRow {
    let records: Vec<Option<&CellRecord>> = indexes.iter().map(|ix| ix.get(id).copied()).collect();
    let flipped = flips(&records);
    let judged = records
        .iter()
        .flatten()
        .filter(|r| verdict(r.status) != Verdict::None)
        .count();
    let mut flakes = 0;
    let states: Vec<Option<NightState>> = records
        .iter()
        .enumerate()
        .map(|(i, record)| {
            let record = (*record)?;
            let flake = record.status == Status::Flaky || flipped.contains(&i);
            flakes += usize::from(flake);
            Some(NightState {
                status: record.status,
                symbol: text::symbol(record.status),
                signature: record.signature,
                flake,
            })
        })
        .collect();
    let (failing_since, failing_since_window_start) = failing_since(&records, runs);
    let last_good = records
        .iter()
        .rposition(|r| r.is_some_and(|r| verdict(r.status) == Verdict::Good))
        .map(|i| runs[i].name.clone());
    NightRow {
        id: id.to_owned(),
        // A cell only earlier nights had has no page (pages are tonight's).
        page: tonight.map(|c| c.page.clone()),
        states,
        failing_since,
        failing_since_window_start,
        last_good,
        flakes,
        judged,
        flake_rate: if judged == 0 {
            0.0
        } else {
            (flakes as f64 / judged as f64 * 1000.0).round() / 1000.0
        },
        bisect: tonight.and_then(|c| c.bisect.as_ref().map(|b| b.note.clone())),
    }
}

/// The nights whose verdict differs from both neighbouring verdicts, with the same pins on all
/// three.
fn flips(records: &[Option<&CellRecord>]) -> HashSet<usize> {
    let judged: Vec<(usize, Verdict, &[String])> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let r = (*r)?;
            Some((i, verdict(r.status), r.pins.as_slice()))
        })
        .filter(|(_, v, _)| *v != Verdict::None)
        .collect();
    judged
        .windows(3)
        .filter(|w| w[1].1 != w[0].1 && w[1].1 != w[2].1 && w[0].2 == w[1].2 && w[1].2 == w[2].2)
        .map(|w| w[1].0)
        .collect()
}

/// The first night of the failure that lasts until the newest verdict, and whether it reaches
/// back to the first night shown (nights without a verdict neither end nor start it).
fn failing_since(records: &[Option<&CellRecord>], runs: &[LoadedRun]) -> (Option<String>, bool) {
    let judged: Vec<(usize, Verdict)> = records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, verdict(r.as_ref()?.status))))
        .filter(|(_, v)| *v != Verdict::None)
        .collect();
    if judged.last().is_none_or(|(_, v)| *v != Verdict::Bad) {
        return (None, false);
    }
    let streak = judged
        .iter()
        .rev()
        .take_while(|(_, v)| *v == Verdict::Bad)
        .count();
    let (first, _) = judged[judged.len() - streak];
    (Some(runs[first].name.clone()), first == 0)
}

/// Column headers: the night's date (and time when two nights share a date).
fn heads(runs: &[LoadedRun]) -> Vec<NightHead> {
    let date = |r: &LoadedRun| r.started_at().map(|s| s.get(5..10).unwrap_or(s).to_owned());
    let mut per_day: HashMap<String, usize> = HashMap::new();
    for run in runs {
        if let Some(d) = date(run) {
            *per_day.entry(d).or_default() += 1;
        }
    }
    runs.iter()
        .map(|run| {
            let label = match (date(run), run.started_at()) {
                (Some(d), Some(full)) if per_day[&d] > 1 => {
                    format!("{d} {}", full.get(11..16).unwrap_or_default())
                }
                (Some(d), _) => d,
                (None, _) => run.name.clone(),
            };
            NightHead {
                name: run.name.clone(),
                started_at: run.started_at().map(str::to_owned),
                label,
                counts: Counts::of(&run.records),
            }
        })
        .collect()
}

/// The newest night's matrix, by its file's name (`nightly`), else `all cells`.
fn matrix_name(runs: &[LoadedRun]) -> String {
    runs.last()
        .and_then(|r| r.manifest.as_ref())
        .and_then(|m| std::path::Path::new(&m.matrix).file_stem())
        .map_or_else(
            || "all cells".to_owned(),
            |s| s.to_string_lossy().into_owned(),
        )
}

/// Pass rate (good verdicts over verdicts, in percent) per night, per matrix: the values of the
/// split key of a split report, else the whole report.
fn trend(runs: &[LoadedRun], ctx: &ReportContext) -> Vec<TrendSeries> {
    let split = ctx.layout.split.as_deref();
    let names: Vec<String> = match split {
        Some(key) => ctx
            .matrices
            .iter()
            .map(|m| m.split.value.clone())
            .chain(
                // Matrices earlier nights had and tonight lacks.
                runs.iter()
                    .flat_map(|r| r.records.iter())
                    .map(|r| super::layout::value_of(r, key)),
            )
            .fold(Vec::new(), |mut names, n| {
                if !names.contains(&n) {
                    names.push(n);
                }
                names
            }),
        None => vec![matrix_name(runs)],
    };
    names
        .iter()
        .map(|name| TrendSeries {
            name: name.clone(),
            values: runs
                .iter()
                .map(|run| {
                    let (good, judged) = run
                        .records
                        .iter()
                        .filter(|r| split.is_none_or(|k| super::layout::value_of(r, k) == *name))
                        .map(|r| verdict(r.status))
                        .filter(|v| *v != Verdict::None)
                        .fold((0usize, 0usize), |(g, n), v| {
                            (g + usize::from(v == Verdict::Good), n + 1)
                        });
                    (judged > 0).then(|| (good as f64 * 1000.0 / judged as f64).round() / 10.0)
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn run(night: usize, cells: &[(&str, Status, &str)]) -> LoadedRun {
        let records = cells
            .iter()
            .map(|(id, status, pin)| {
                serde_json::from_value(serde_json::json!({
                    "id": id, "values": {"x": id}, "pins": [pin], "status": status,
                    "signature": null, "phase": null, "duration_s": 1.0, "attempts": 1, "log": ""
                }))
                .expect("record")
            })
            .collect();
        LoadedRun {
            dir: PathBuf::from(format!("n{night}")),
            name: format!("n{night}"),
            manifest: None,
            plan: None,
            records,
            warnings: Vec::new(),
            replay_durations: HashMap::new(),
        }
    }

    /// One cell's row over nights of the given statuses (`None`: no record), pins per night.
    fn row_of(nights: &[(Option<Status>, &str)]) -> NightRow {
        let runs: Vec<LoadedRun> = nights
            .iter()
            .enumerate()
            .map(|(i, (status, pin))| match status {
                Some(s) => run(i, &[("c", *s, pin)]),
                None => run(i, &[]),
            })
            .collect();
        let indexes: Vec<HashMap<&str, &CellRecord>> = runs.iter().map(LoadedRun::index).collect();
        row("c", &runs, &indexes, None)
    }

    use Status::{Error, Fail, Flaky, Pass, Xfail};

    #[test]
    fn a_failure_that_stays_is_failing_since_its_first_night_and_never_a_flake() {
        let r = row_of(&[
            (Some(Pass), "a"),
            (Some(Pass), "a"),
            (Some(Fail), "a"),
            (None, "a"),
            (Some(Error), "a"),
            (Some(Fail), "a"),
        ]);
        assert_eq!(r.failing_since.as_deref(), Some("n2"));
        assert!(!r.failing_since_window_start);
        assert_eq!(r.last_good.as_deref(), Some("n1"));
        assert_eq!((r.flakes, r.judged), (0, 4));
        assert_eq!(r.flake_rate, 0.0);
        // Failing on every night shown: it may be older than the window.
        let r = row_of(&[(Some(Fail), "a"), (Some(Fail), "a")]);
        assert_eq!(r.failing_since.as_deref(), Some("n0"));
        assert!(r.failing_since_window_start);
        assert_eq!(r.last_good, None);
    }

    #[test]
    fn flips_and_back_with_the_same_pins_are_flakes_and_retries_too() {
        let r = row_of(&[
            (Some(Pass), "a"),
            (Some(Fail), "a"), // flipped and back: a flake
            (Some(Pass), "a"),
            (Some(Flaky), "a"), // passed on a retry: a flake
            (Some(Xfail), "a"),
            (Some(Fail), "a"), // tonight: cannot be called a flip yet
        ]);
        let flaked: Vec<bool> = r.states.iter().map(|s| s.as_ref().unwrap().flake).collect();
        assert_eq!(flaked, [false, true, false, true, false, false]);
        assert_eq!((r.flakes, r.judged), (2, 6));
        assert_eq!(r.flake_rate, 0.333);
        assert_eq!(r.failing_since.as_deref(), Some("n5"));
        assert_eq!(r.last_good.as_deref(), Some("n4"));
    }

    #[test]
    fn a_flip_that_comes_with_new_pins_is_not_a_flake() {
        let r = row_of(&[(Some(Pass), "a"), (Some(Fail), "b"), (Some(Pass), "a")]);
        assert_eq!(r.flakes, 0);
        assert_eq!(r.failing_since, None);
    }
}
