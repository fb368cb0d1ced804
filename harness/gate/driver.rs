//! Runs a gate: both pin sets through [`run::execute`] into one gate folder, pairs the cells,
//! confirms each regression by one retry, attributes confirmed regressions to the moved
//! packages, and writes `gate.json`.

use super::pins::SidePins;
use super::summary::{self, Attribution, GateCell, GateFile, SideInfo, State};
use crate::bisect::{self, BisectError, probes};
use crate::compare::{self, Comparison, Outcome, PairBy, PairError};
use crate::matrix::{self, Cell, Plan};
use crate::record::CellRecord;
use crate::redact;
use crate::report;
use crate::run::{self, RunError, RunOptions, folder};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// A gate to run.
#[derive(Debug, Clone)]
pub struct Request {
    pub matrix: PathBuf,
    pub base: SidePins,
    pub head: SidePins,
    /// Only these cells (all when empty).
    pub cells: Vec<String>,
    /// A recent run whose records stand for the base side where pins and harness match.
    pub baseline_run: Option<PathBuf>,
    pub pair_by: PairBy,
    /// The gate folder.
    pub out: PathBuf,
    /// Continue the gate in `out`, keeping every record it has.
    pub resume: bool,
    /// Run attribution on confirmed regressions when several packages moved.
    pub attribute: bool,
    /// How cells run (`out`, `cells` and `resume` are set per side).
    pub run: RunOptions,
}

/// A gate could not be carried out (its cells' failures are data, never this).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(transparent)]
    Input(#[from] probes::InputError),
    #[error(transparent)]
    Pairing(#[from] PairError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Bisect(#[from] BisectError),
    #[error("cannot use the gate folder `{path}`")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`--baseline-run {0}`")]
    Baseline(String, #[source] report::ReportError),
    #[error("interrupted; the records are kept in `{0}`: run the same command with `--resume`")]
    Interrupted(String),
}

impl GateError {
    /// Whether the user can fix it by changing arguments (exit 2).
    pub fn is_input(&self) -> bool {
        match self {
            GateError::Input(_) | GateError::Pairing(_) | GateError::Baseline(..) => true,
            GateError::Run(err) => err.is_input(),
            GateError::Bisect(err) => err.is_input(),
            GateError::Io { .. } | GateError::Interrupted(_) => false,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> GateError + '_ {
    move |source| GateError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

pub const BASE: &str = "base";
pub const HEAD: &str = "head";
pub const RETRY: &str = "head-retry";
pub const BASE_PINS: &str = "base-pins.txt";
pub const HEAD_PINS: &str = "head-pins.txt";

/// Runs the gate; `say` hears one line per step.
pub async fn gate(request: Request, say: &mut dyn FnMut(&str)) -> Result<GateFile, GateError> {
    let plan = matrix::load(&request.matrix).map_err(|e| probes::InputError::Matrix(e.render()))?;
    let out = std::path::absolute(&request.out).unwrap_or_else(|_| request.out.clone());
    open_folder(&out, request.resume)?;
    let bumps = probes::bumps(&request.base.pins, &request.head.pins);
    let all: Vec<usize> = (0..bumps.len()).collect();
    let base_plan = with_pins(&plan, &request, &bumps, &[]);
    let head_plan = with_pins(&plan, &request, &bumps, &all);
    let wanted = selected(&plan, &request.cells)?;
    write_pins(&out, BASE_PINS, &request.base)?;
    write_pins(&out, HEAD_PINS, &request.head)?;
    let mut file = GateFile {
        format_version: summary::FORMAT_VERSION,
        state: State::Running,
        harness_version: env!("CARGO_PKG_VERSION").to_owned(),
        matrix: request.matrix.display().to_string(),
        matrix_hash: plan.file_hash.clone(),
        base: side_info(&request.base),
        head: side_info(&request.head),
        bumps: bumps.clone(),
        pairing: compare::Pairing::default(),
        baseline_run: request
            .baseline_run
            .as_ref()
            .map(|d| d.display().to_string()),
        reused: 0,
        regressions: Vec::new(),
        fixed: Vec::new(),
        still_failing: Vec::new(),
        flaky: Vec::new(),
        spurious: Vec::new(),
        expected: Vec::new(),
        counts: Default::default(),
        attribution: Vec::new(),
        verdict: String::new(),
        github: None,
        notes: Vec::new(),
        started_at: now(),
        finished_at: None,
    };
    if bumps.is_empty() {
        file.notes
            .push("base and head pin the same versions: nothing moved, nothing to gate".into());
    }
    write(&out, &file)?;

    // The base side: a recent run's records where they match, the rest run here.
    let (mut base_records, reuse_notes) = reusable(&request, &base_plan, &wanted)?;
    file.notes.extend(reuse_notes);
    file.reused = base_records.len();
    let to_run: Vec<String> = wanted
        .iter()
        .filter(|id| !base_records.iter().any(|r| &&r.id == id))
        .cloned()
        .collect();
    if !to_run.is_empty() && !bumps.is_empty() {
        say(&format!("[gate] base: {} cell(s)", to_run.len()));
        base_records.extend(side(&request, &out, BASE, base_plan, to_run).await?);
    }
    let head_records = if bumps.is_empty() {
        Vec::new()
    } else {
        say(&format!("[gate] head: {} cell(s)", wanted.len()));
        side(&request, &out, HEAD, head_plan.clone(), wanted.clone()).await?
    };
    let result = compare::compare_runs_by(&base_records, &head_records, &request.pair_by)?;
    file.pairing = result.pairing.clone();
    file.counts = result.counts.clone();

    // Confirm each regression by one retry of the head cell.
    let regressed: Vec<String> = result
        .cells
        .iter()
        .filter(|c| c.comparison == Comparison::Regressed)
        .map(|c| c.id.clone())
        .collect();
    let retries: HashMap<String, CellRecord> = if regressed.is_empty() {
        HashMap::new()
    } else {
        say(&format!(
            "[gate] confirming {} regression(s) with one retry",
            regressed.len()
        ));
        side(&request, &out, RETRY, head_plan, regressed)
            .await?
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect()
    };
    let head_by_id: HashMap<&str, &CellRecord> =
        head_records.iter().map(|r| (r.id.as_str(), r)).collect();
    let base_by_id: HashMap<&str, &CellRecord> =
        base_records.iter().map(|r| (r.id.as_str(), r)).collect();
    for cell in &result.cells {
        let head = head_by_id.get(cell.id.as_str()).copied();
        let base = base_by_id
            .get(cell.base_id.as_deref().unwrap_or(&cell.id))
            .copied();
        let mut entry = gate_cell(&request, cell, base, head);
        match cell.comparison {
            Comparison::Regressed => {
                let retry = retries.get(&cell.id);
                entry.retry = retry.map(Outcome::of);
                match retry.map(|r| compare::compare(base, Some(r))) {
                    Some(Some(Comparison::Regressed)) => {
                        entry.confirmed = Some(true);
                        file.regressions.push(entry);
                    }
                    Some(Some(Comparison::Spurious)) | None => {
                        entry.confirmed = Some(false);
                        entry.note = Some(
                            "failed once; the confirmation retry was an infrastructure fault, so it does not block"
                                .into(),
                        );
                        file.spurious.push(entry);
                    }
                    Some(_) => {
                        entry.confirmed = Some(false);
                        entry.note =
                            Some("failed once, then passed on the gate's retry: flaky".into());
                        file.flaky.push(entry);
                    }
                }
            }
            Comparison::Fixed => file.fixed.push(entry),
            Comparison::StillFailingSame | Comparison::StillFailingDifferent => {
                file.still_failing.push(entry);
            }
            Comparison::NewlyFlaky => file.flaky.push(entry),
            Comparison::Spurious => file.spurious.push(entry),
            Comparison::NewlyExpected => file.expected.push(entry),
            Comparison::StillFlaky
            | Comparison::New
            | Comparison::Removed
            | Comparison::Skipped
            | Comparison::Passing => {}
        }
    }
    file.verdict = file.verdict_line();
    write(&out, &file)?;

    if !file.regressions.is_empty() {
        attribute(&request, &out, &mut file, say).await?;
    }
    file.state = State::Finished;
    file.finished_at = Some(now());
    file.verdict = file.verdict_line();
    write(&out, &file)?;
    Ok(file)
}

/// Creates the gate folder; a folder that holds a gate is continued only with `--resume`.
fn open_folder(out: &Path, resume: bool) -> Result<(), GateError> {
    if out.exists() && !out.is_dir() {
        return Err(probes::InputError::Usage(format!(
            "`--out {}` is a file; a gate folder must be a directory",
            out.display()
        ))
        .into());
    }
    let holds_gate = out.join(summary::FILE).exists();
    if holds_gate && !resume {
        return Err(probes::InputError::Usage(format!(
            "`{}` already holds a gate; pass `--resume` to continue it, or choose another `--out`",
            out.display()
        ))
        .into());
    }
    if !holds_gate && out.join(folder::MANIFEST).exists() {
        return Err(probes::InputError::Usage(format!(
            "`{}` holds a run; choose another `--out` for the gate",
            out.display()
        ))
        .into());
    }
    std::fs::create_dir_all(out).map_err(io_err(out))
}

/// The plan with every cell's pins: the base set over the cell's own, and the bumps in
/// `applied` on top (the same rule attribution uses, so its probes reuse these records).
fn with_pins(plan: &Plan, request: &Request, bumps: &[probes::Bump], applied: &[usize]) -> Plan {
    let mut plan = plan.clone();
    for cell in &mut plan.cells {
        cell.pins =
            probes::attribution_pins(cell, &request.base.pins, &request.head.pins, bumps, applied);
    }
    plan
}

/// The ids to gate: `--cell` ones (each must exist), or every cell.
fn selected(plan: &Plan, wanted: &[String]) -> Result<Vec<String>, GateError> {
    if wanted.is_empty() {
        return Ok(plan.cells.iter().map(|c| c.id.to_string()).collect());
    }
    let ids: Vec<&str> = plan.cells.iter().map(|c| c.id.as_str()).collect();
    for id in wanted {
        if !ids.contains(&id.as_str()) {
            let hint = match crate::suggest::did_you_mean(id, &ids) {
                Some(c) => format!("; did you mean `{c}`?"),
                None => "; `gpucompat matrix expand FILE` lists the ids".to_owned(),
            };
            return Err(
                probes::InputError::Usage(format!("`--cell {id}`: no such cell{hint}")).into(),
            );
        }
    }
    Ok(wanted.to_vec())
}

fn side_info(side: &SidePins) -> SideInfo {
    SideInfo {
        source: side.source.clone(),
        pins: side.pins.iter().map(ToString::to_string).collect(),
    }
}

fn write_pins(out: &Path, name: &str, side: &SidePins) -> Result<(), GateError> {
    let mut text = format!("# {}\n", side.source.replace('\n', " "));
    for pin in &side.pins {
        text.push_str(&format!("{pin}\n"));
    }
    let path = out.join(name);
    std::fs::write(&path, text).map_err(io_err(&path))
}

/// Writes `gate.json` atomically (a crash never leaves half a verdict).
pub(crate) fn write(out: &Path, file: &GateFile) -> Result<(), GateError> {
    let path = out.join(summary::FILE);
    let mut bytes = serde_json::to_vec_pretty(file).map_err(|e| GateError::Io {
        path: path.display().to_string(),
        source: std::io::Error::other(e),
    })?;
    bytes.push(b'\n');
    let tmp = out.join(format!(".{}.tmp", summary::FILE));
    std::fs::write(&tmp, &bytes).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io_err(&path))
}

/// Runs one side's cells into `out/<name>` and returns their records.
async fn side(
    request: &Request,
    out: &Path,
    name: &str,
    plan: Plan,
    cells: Vec<String>,
) -> Result<Vec<CellRecord>, GateError> {
    let dir = out.join(name);
    let options = RunOptions {
        out: dir.clone(),
        cells: cells.clone(),
        resume: request.resume && dir.join(folder::MANIFEST).exists(),
        ..request.run.clone()
    };
    let summary = run::execute(plan, options).await?;
    if summary.interrupted.is_some() {
        return Err(GateError::Interrupted(out.display().to_string()));
    }
    Ok(summary
        .records
        .into_iter()
        .filter(|r| cells.contains(&r.id))
        .collect())
}

/// Records of `--baseline-run` that stand for base cells: same harness version, same values,
/// same pins. Returns them and notes on what could not be reused.
fn reusable(
    request: &Request,
    base_plan: &Plan,
    wanted: &[String],
) -> Result<(Vec<CellRecord>, Vec<String>), GateError> {
    let Some(dir) = &request.baseline_run else {
        return Ok((Vec::new(), Vec::new()));
    };
    let shown = dir.display().to_string();
    let run =
        report::load_run_with(dir, false).map_err(|e| GateError::Baseline(shown.clone(), e))?;
    let ours = env!("CARGO_PKG_VERSION");
    let theirs = run.manifest.as_ref().map(|m| m.harness_version.as_str());
    if theirs != Some(ours) {
        return Ok((
            Vec::new(),
            vec![format!(
                "`--baseline-run {shown}` was recorded by harness {} (this is {ours}): base cells run here",
                theirs.unwrap_or("unknown")
            )],
        ));
    }
    let by_id: HashMap<&str, &CellRecord> =
        run.records.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut reused = Vec::new();
    let mut mismatched = 0;
    for cell in base_plan.cells.iter().filter(|c| wanted.contains(&c.id.0)) {
        match by_id.get(cell.id.as_str()) {
            Some(r) if matches_cell(r, cell) => {
                let mut record = (*r).clone();
                // The log stays where the nightly wrote it; say so in the path.
                record.log = std::path::absolute(dir.join(&record.log))
                    .unwrap_or_else(|_| dir.join(&record.log))
                    .display()
                    .to_string();
                reused.push(record);
            }
            Some(_) => mismatched += 1,
            None => {}
        }
    }
    let mut notes = vec![format!(
        "base: {} record(s) reused from `{shown}`",
        reused.len()
    )];
    if mismatched > 0 {
        notes.push(format!(
            "{mismatched} record(s) of `{shown}` have other pins or values than the base side: run here"
        ));
    }
    Ok((reused, notes))
}

fn matches_cell(record: &CellRecord, cell: &Cell) -> bool {
    let pins: Vec<String> = cell.pins.iter().map(ToString::to_string).collect();
    record.values == cell.values && record.pins == pins && !record.spurious
}

/// One cell of a verdict list, from its comparison and records.
fn gate_cell(
    request: &Request,
    cell: &compare::CellComparison,
    base: Option<&CellRecord>,
    head: Option<&CellRecord>,
) -> GateCell {
    let shown = head.filter(|h| h.signature.is_some()).or(base).or(head);
    let log = shown.map(|r| {
        if Path::new(&r.log).is_absolute() {
            r.log.clone()
        } else if head.is_some_and(|h| std::ptr::eq(h, r)) {
            format!("{HEAD}/{}", r.log)
        } else {
            format!("{BASE}/{}", r.log)
        }
    });
    GateCell {
        id: cell.id.clone(),
        base_id: cell.base_id.clone(),
        values: cell.values.clone(),
        comparison: cell.comparison,
        base: cell.base.clone(),
        head: cell.head.clone(),
        signature: shown.and_then(|r| r.signature),
        excerpt: shown
            .and_then(|r| r.excerpt.as_deref())
            .map(|e| redact::redact(e).into_owned()),
        log,
        reproducer: reproducer(request, &cell.id),
        confirmed: None,
        retry: None,
        culprits: None,
        note: None,
    }
}

/// `gpucompat gate MATRIX <base> <head> --cell ID`, quoted for `sh`.
fn reproducer(request: &Request, id: &str) -> String {
    let q = crate::provision::shell_quote;
    let mut words = vec![
        "gpucompat".to_owned(),
        "gate".to_owned(),
        q(&request.matrix.display().to_string()),
    ];
    for flag in request.base.flags.iter().chain(&request.head.flags) {
        words.push(q(flag));
    }
    words.push("--cell".to_owned());
    words.push(q(id));
    words.join(" ")
}

/// Names the culprit of each confirmed regression: the one moved package, or attribution
/// (ddmin over the moved packages, reusing the gate's records) on the first cell of each
/// signature.
async fn attribute(
    request: &Request,
    out: &Path,
    file: &mut GateFile,
    say: &mut dyn FnMut(&str),
) -> Result<(), GateError> {
    if let [bump] = file.bumps.as_slice() {
        for cell in &mut file.regressions {
            cell.culprits = Some(vec![bump.package.clone()]);
        }
        return Ok(());
    }
    if !request.attribute {
        return Ok(());
    }
    let mut done: Vec<(
        Option<crate::signature::Signature>,
        Option<Vec<String>>,
        String,
    )> = Vec::new();
    for i in 0..file.regressions.len() {
        let (id, signature) = (
            file.regressions[i].id.clone(),
            file.regressions[i].signature,
        );
        if let Some((_, culprits, on)) = done.iter().find(|(s, _, _)| *s == signature) {
            file.regressions[i].culprits.clone_from(culprits);
            file.regressions[i].note = Some(format!("culprit from the attribution on `{on}`"));
            continue;
        }
        say(&format!(
            "[gate] attributing {id} to the {} moved packages",
            file.bumps.len()
        ));
        let folder = out.join("attribution").join(&id);
        let mut runs_from = vec![out.join(BASE), out.join(HEAD), out.join(RETRY)];
        if let Some(dir) = &request.baseline_run {
            runs_from.push(dir.clone());
        }
        let bisect_request = bisect::Request {
            matrix: request.matrix.clone(),
            mode: bisect::Mode::Attribution {
                base: out.join(BASE_PINS).display().to_string(),
                head: out.join(HEAD_PINS).display().to_string(),
            },
            cell: Some(id.clone()),
            signature,
            retries: 1,
            from_index: false,
            index_url: None,
            pre: false,
            find_links: Vec::new(),
            runs_from: runs_from.into_iter().filter(|d| d.is_dir()).collect(),
            out: Some(folder.clone()),
            resume: folder.join(bisect::summary::FILE).exists(),
            run: request.run.clone(),
        };
        let mut on_run = |run: &bisect::summary::RunEntry| {
            say(&format!(
                "[gate] attribution {}: {}",
                bisect::summary::BisectFile::probe_label(run),
                run.verdict.as_str()
            ));
        };
        let ended = bisect::bisect(bisect_request, &mut on_run).await?;
        if ended.interrupted {
            return Err(GateError::Interrupted(out.display().to_string()));
        }
        let culprits = ended.file.culprits.clone().filter(|_| ended.file.converged);
        file.regressions[i].culprits.clone_from(&culprits);
        file.attribution.push(Attribution {
            cell: id.clone(),
            signature,
            culprits: culprits.clone(),
            converged: ended.file.converged,
            folder: Some(format!("attribution/{id}")),
            reason: ended.file.reason.clone(),
        });
        done.push((signature, culprits, id));
        write(out, file)?;
    }
    Ok(())
}
