//! `render`: run folders in, report folder out.
//!
//! ```text
//! OUT/index.html         the dashboard (written last: its presence means the report is whole)
//! OUT/compat.md          tables in Markdown (README, GitHub job summary)
//! OUT/compat.csv         one row per cell
//! OUT/compat.json        the view model
//! OUT/junit.xml          one test case per cell
//! OUT/plots/*.svg        status heatmaps, timing bars
//! OUT/cells/<id>.html    one page per cell: excerpt, timings, reproducer, history, log
//! OUT/logs/<id>.log      copies of tonight's logs (linked in place when OUT is the run folder)
//! OUT/bisects/<name>/    copies of the probe logs of each bisect shown
//! ```

use super::bisects::{self, LoadedBisect};
use super::context::{self, ReportOptions, same_folder};
use super::error::{ReportError, write_err};
use super::load::{LoadedRun, load_runs};
use super::text::visible;
use super::view::{Counts, ReportContext};
use super::{csv, hang, html, json, junit, logs, markdown, plots};
use crate::record::CellRecord;
use crate::run::folder::{MANIFEST, RESULTS};
use std::fs;
use std::path::{Path, PathBuf};

/// What a report wrote.
#[derive(Debug, Clone)]
pub struct ReportSummary {
    pub out: PathBuf,
    /// Files written, relative to `out`, top-level files first (cell pages, logs and plots
    /// counted below rather than listed).
    pub files: Vec<String>,
    pub runs: usize,
    /// The newest run's name.
    pub tonight: String,
    /// Tonight's statuses.
    pub counts: Counts,
    pub cell_pages: usize,
    pub plots: usize,
    pub logs_copied: usize,
    /// Regressions since the previous run (0 with a single run).
    pub regressions: usize,
    /// Bisect folders shown.
    pub bisects: usize,
    /// Tonight's cells a bisect explains.
    pub explained: usize,
    pub warnings: Vec<String>,
}

/// Renders a report of `runs` (run folders; the newest by `started_at` is tonight) into `out`.
pub fn render(
    runs: &[PathBuf],
    out: &Path,
    options: &ReportOptions,
) -> Result<ReportSummary, ReportError> {
    let (runs, bisect_dirs) = bisects::split(runs, &options.bisects)?;
    let mut loaded = load_runs(&runs, options.strict)?;
    filter_records(&mut loaded, options.filter.as_deref())?;
    let bisects = bisects::load(&bisect_dirs)?;
    render_loaded(&loaded, &bisects, out, options)
}

/// The view model of `runs` as a report in `out` would show it (no file is written).
pub fn build_context(
    runs: &[PathBuf],
    out: &Path,
    options: &ReportOptions,
) -> Result<ReportContext, ReportError> {
    let (runs, bisect_dirs) = bisects::split(runs, &options.bisects)?;
    let mut loaded = load_runs(&runs, options.strict)?;
    filter_records(&mut loaded, options.filter.as_deref())?;
    let bisects = bisects::load(&bisect_dirs)?;
    context::build(&loaded, &bisects, out, options)
}

/// Keeps the records a `--filter` selects in every run; its keys are checked against the keys
/// the runs' cells have.
fn filter_records(loaded: &mut [LoadedRun], expr: Option<&str>) -> Result<(), ReportError> {
    let Some(expr) = expr else {
        return Ok(());
    };
    let mut keys: Vec<String> = Vec::new();
    for key in loaded
        .iter()
        .flat_map(|run| run.records.iter().flat_map(|r| r.values.keys()))
    {
        if !keys.contains(key) {
            keys.push(key.clone());
        }
    }
    let filter = crate::filter::Filter::parse(expr, &keys).map_err(ReportError::Filter)?;
    for run in loaded.iter_mut() {
        let (kept, dropped): (Vec<CellRecord>, Vec<CellRecord>) = std::mem::take(&mut run.records)
            .into_iter()
            .partition(|r| filter.matches(&r.values));
        run.records = kept;
        // A cell the filter leaves out is not "not run" either.
        if let Some(plan) = run.plan.as_mut() {
            for record in &dropped {
                plan.cells.shift_remove(&record.id);
            }
        }
    }
    Ok(())
}

fn write(out: &Path, name: &str, bytes: &[u8]) -> Result<(), ReportError> {
    let path = out.join(name);
    fs::write(&path, bytes).map_err(write_err(&path))
}

fn mkdir(path: &Path) -> Result<(), ReportError> {
    fs::create_dir_all(path).map_err(write_err(path))
}

/// Renders already loaded runs (oldest first).
pub(crate) fn render_loaded(
    runs: &[LoadedRun],
    bisects: &[LoadedBisect],
    out: &Path,
    options: &ReportOptions,
) -> Result<ReportSummary, ReportError> {
    // A report copies tonight's logs into `OUT/logs/`: never over another run's logs.
    if let Some(tonight) = runs.last() {
        let is_run = out.join(MANIFEST).is_file() || out.join(RESULTS).is_file();
        if is_run && !same_folder(out, &tonight.dir) {
            return Err(ReportError::OutIsAnotherRun(out.display().to_string()));
        }
    }
    mkdir(out)?;
    let mut ctx = context::build(runs, bisects, out, options)?;

    let mut svgs = Vec::with_capacity(ctx.plots.len());
    if !ctx.plots.is_empty() {
        mkdir(&out.join("plots"))?;
    }
    let mut plot_warnings = Vec::new();
    for spec in &ctx.plots {
        match plots::draw(spec, &ctx) {
            Ok(svg) => {
                let svg = visible(&svg).into_owned();
                write(out, &spec.file, svg.as_bytes())?;
                svgs.push(Some(svg));
            }
            Err(message) => {
                plot_warnings.push(format!(
                    "plot `{}` could not be drawn: {message}",
                    spec.file
                ));
                svgs.push(None);
            }
        }
    }
    ctx.warnings.extend(plot_warnings);

    let mut files = Vec::new();
    let json = json::render(&ctx).map_err(|e| ReportError::Write {
        path: out.join("compat.json").display().to_string(),
        source: std::io::Error::other(e),
    })?;
    write(out, "compat.json", &json)?;
    files.push("compat.json".to_owned());
    write(out, "compat.md", markdown::render(&ctx).as_bytes())?;
    files.push("compat.md".to_owned());
    let csv = csv::render(&ctx).map_err(|e| ReportError::Write {
        path: out.join("compat.csv").display().to_string(),
        source: std::io::Error::other(e),
    })?;
    write(out, "compat.csv", &csv)?;
    files.push("compat.csv".to_owned());
    write(out, "junit.xml", junit::render(&ctx).as_bytes())?;
    files.push("junit.xml".to_owned());

    mkdir(&out.join("cells"))?;
    if ctx
        .cells
        .iter()
        .any(|c| c.log.as_ref().is_some_and(|l| l.copy))
    {
        mkdir(&out.join("logs"))?;
    }
    let mut logs_copied = 0;
    for cell in &ctx.cells {
        let mut full = None;
        let hang = cell.log.as_ref().and_then(|l| hang::load(&l.source));
        if let Some(log) = &cell.log {
            if log.copy {
                let dest = out.join(&log.href);
                logs::copy(&log.source, &dest).map_err(write_err(&dest))?;
                logs_copied += 1;
            }
            full = logs::page_text(&log.source).ok();
        }
        write(
            out,
            &cell.page,
            html::cell_page(
                &ctx,
                cell,
                full.as_deref(),
                hang.as_ref().map(hang::section),
            )
            .as_bytes(),
        )?;
    }
    logs_copied += copy_probe_logs(&ctx, out)?;
    write(out, "index.html", html::index(&ctx, &svgs).as_bytes())?;
    files.insert(0, "index.html".to_owned());

    Ok(ReportSummary {
        out: out.to_path_buf(),
        files,
        runs: ctx.runs.len(),
        tonight: ctx.runs.last().map(|r| r.name.clone()).unwrap_or_default(),
        counts: ctx.counts,
        cell_pages: ctx.cells.len(),
        plots: svgs.iter().filter(|s| s.is_some()).count(),
        logs_copied,
        regressions: ctx.changes.as_ref().map_or(0, |c| c.regressions),
        bisects: ctx.bisects.len(),
        explained: ctx.cells.iter().filter(|c| c.bisect.is_some()).count(),
        warnings: ctx.warnings.clone(),
    })
}

/// Copies every bisect probe's log to `OUT/bisects/<name>/`, where the cell pages link it.
fn copy_probe_logs(ctx: &ReportContext, out: &Path) -> Result<usize, ReportError> {
    let mut copied = 0;
    for log in ctx
        .bisects
        .iter()
        .flat_map(|b| b.runs.iter())
        .filter_map(|p| p.log.as_ref())
    {
        let dest = out.join(&log.href);
        if let Some(parent) = dest.parent() {
            mkdir(parent)?;
        }
        logs::copy(&log.source, &dest).map_err(write_err(&dest))?;
        copied += 1;
    }
    Ok(copied)
}
