//! `gpucompat bisect`: the first bad version of an axis, or the bumped packages that break a cell.

use crate::bisect::{self, BisectError, Mode, Request, probes::InputError, summary::BisectFile};
use crate::errors::{CliError, exit};
use crate::exec::logsink::LogLimits;
use crate::inventory;
use crate::run::RunOptions;
use crate::signature::Signature;
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

const AFTER_HELP: &str = "\
Examples:
  Version bisect:  gpucompat bisect FILE --axis flashinfer --good 0.6.3 --bad 0.6.11.post1 [--cell ID]
  Attribution:     gpucompat bisect FILE --base base.txt --head head.txt [--cell ID]
  Continue one:    gpucompat bisect FILE --axis flashinfer --good 0.6.3 --bad 0.6.11.post1 --resume

Each probe is a real cell run (environment, watchdog, classifier) recorded in the bisect folder
(results.jsonl, logs/, bisect.json). A probe is good, bad (the target failure) or unknown (an
infrastructure fault, pins that cannot be installed together, another failure): unknowns are
retried, then stepped around, and never decide.

Exit codes:
  0    the search converged
  1    it did not (an end is not what it was said to be, or the values that matter stayed
       unknown); the summary says why
  2    bad input (matrix file, arguments, pins, index)
  3    the harness itself failed
  130  interrupted; `--resume` continues";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct BisectArgs {
    /// Matrix file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The axis whose values are searched (ordered as PEP 440 versions).
    #[arg(long, value_name = "NAME", requires_all = ["good", "bad"], conflicts_with_all = ["base", "head"])]
    axis: Option<String>,
    /// A value known good (older).
    #[arg(long, value_name = "V", requires = "axis")]
    good: Option<String>,
    /// A value known bad (newer).
    #[arg(long, value_name = "V", requires = "axis")]
    bad: Option<String>,
    /// Attribution: the pins before the bump (a requirement file, or `name==version,...`).
    #[arg(long, value_name = "PINS", requires = "head")]
    base: Option<String>,
    /// Attribution: the pins after the bump.
    #[arg(long, value_name = "PINS", requires = "base")]
    head: Option<String>,
    /// The cell whose other values stay fixed [default: the only one that has the axis].
    #[arg(
        long,
        visible_alias = "cell-filter",
        value_name = "ID",
        conflicts_with = "filter"
    )]
    cell: Option<String>,
    /// The cell by its values instead of its id: a filter expression (as for `run --filter`)
    /// that selects one cell, or, for a version bisect, cells that differ only in the axis.
    #[arg(long, value_name = "EXPR")]
    filter: Option<String>,
    /// The failure searched for [default: the bad end's signature].
    #[arg(long, value_name = "NAME")]
    signature: Option<Signature>,
    /// Further attempts at a probe whose verdict is unknown.
    #[arg(long, value_name = "N", default_value_t = 1)]
    retries: u32,
    /// Candidates from the package index (the JSON simple API) instead of the matrix's values.
    #[arg(long, requires = "axis")]
    from_index: bool,
    /// The index to read [default: `[python] index-url`, UV_INDEX_URL, PIP_INDEX_URL, pip.conf, PyPI].
    #[arg(long, value_name = "URL", requires = "from_index")]
    index_url: Option<String>,
    /// Pre-releases and dev releases are candidates too.
    #[arg(long, requires = "from_index")]
    pre: bool,
    /// With `--from-index`: a folder of wheels whose versions are candidates too (nightly
    /// builds); repeatable. A matrix with `[python] no-index` reads only these and its own
    /// `find-links` folders, never the network.
    #[arg(long, value_name = "DIR", requires = "from_index")]
    find_links: Vec<PathBuf>,
    /// Run folders whose records count as probes already made (e.g. last night's run).
    #[arg(long, value_name = "DIR", num_args = 1..)]
    runs: Vec<PathBuf>,
    /// The bisect folder [default: bisects/<cell>-<axis>-<good>-<bad>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Continue the bisect in `--out`, reusing every probe it recorded.
    #[arg(long)]
    resume: bool,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// GPUs of this host as a TOML file of `[[gpu]]` tables [default: detected with nvidia-smi].
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Where environments and JIT caches live [default: $GPUCOMPAT_CACHE_DIR, else ~/.cache/gpucompat].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when a probe is torn down.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

pub(crate) fn run(args: BisectArgs) -> Result<u8, CliError> {
    let mode = match (args.axis, args.good, args.bad, args.base, args.head) {
        (Some(axis), Some(good), Some(bad), None, None) => Mode::Version { axis, good, bad },
        (None, None, None, Some(base), Some(head)) => Mode::Attribution { base, head },
        _ => {
            return Err(CliError::input(anyhow::anyhow!(
                "say what to bisect: `--axis NAME --good V --bad V`, or `--base PINS --head PINS`"
            )));
        }
    };
    let inventory = match &args.inventory {
        Some(path) => inventory::load(path).map_err(CliError::input)?,
        None => inventory::detect(),
    };
    let cell = match &args.filter {
        Some(expr) => Some(filtered_cell(&args.file, expr, &mode)?),
        None => args.cell,
    };
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    let request = Request {
        matrix: args.file,
        mode,
        cell,
        signature: args.signature,
        retries: args.retries,
        from_index: args.from_index,
        index_url: args.index_url,
        pre: args.pre,
        find_links: args.find_links.into_iter().map(absolute).collect(),
        runs_from: args.runs,
        out: args.out,
        resume: args.resume,
        run: RunOptions {
            out: PathBuf::new(),
            jobs: Some(1),
            inventory,
            resume: false,
            cells: Vec::new(),
            cache_root: absolute(args.cache_dir.unwrap_or_else(super::run::default_cache_dir)),
            limits: LogLimits::from_total(64 << 20),
            grace: args.grace,
            reaper_exe: std::env::current_exe().ok(),
            interactive: false,
            // A probe that ended in an infrastructure fault decided nothing: run it again.
            retry_errors: true,
            // One `[bisect]` line per probe instead of the run's lines per cell.
            slow_after: None,
            quiet: true,
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::harness)?;
    let mut on_run = |run: &bisect::summary::RunEntry| {
        let line = format!(
            "[bisect] {}: {}{}{}",
            BisectFile::probe_label(run),
            run.verdict.as_str(),
            run.signature.map_or(String::new(), |s| format!(" ({s})")),
            run.reason
                .as_deref()
                .map_or(String::new(), |r| format!(" - {r}"))
        );
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    };
    let ended = runtime
        .block_on(bisect::bisect(request, &mut on_run))
        .map_err(cli_error)?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    let text = match args.format {
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&ended.file).map_err(CliError::harness)?;
            text.push('\n');
            text
        }
        Format::Text => summary_text(&ended.file, &ended.folder),
    };
    super::print_stdout(&text)?;
    if ended.interrupted {
        let _ = writeln!(
            std::io::stderr().lock(),
            "interrupted: {} probe run(s) kept in {}; continue with the same command and `--out {} --resume`",
            ended.file.runs.len(),
            ended.folder.display(),
            ended.folder.display()
        );
        return Ok(exit::INTERRUPTED);
    }
    Ok(if ended.file.converged {
        exit::SUCCESS
    } else {
        exit::FAILURES
    })
}

fn cli_error(err: BisectError) -> CliError {
    match err {
        BisectError::Input(InputError::Matrix(rendered)) => {
            CliError::rendered(exit::BAD_INPUT, rendered)
        }
        err if err.is_input() => CliError::input(err),
        err => CliError::harness(err),
    }
}

/// The human summary: what was searched, one line per probe run, the answer.
fn summary_text(file: &BisectFile, folder: &std::path::Path) -> String {
    let rows: Vec<Vec<String>> = file
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                BisectFile::probe_label(r),
                r.verdict.as_str().to_owned(),
                r.status.as_str().to_owned(),
                r.signature.map_or("-", |s| s.as_str()).to_owned(),
                match &r.reused_from {
                    Some(dir) => format!("{} (reused from {dir})", r.log),
                    None => folder.join(&r.log).display().to_string(),
                },
                r.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let mut text = format!("{}\n\n", file.heading());
    text.push_str(&super::table::render(
        &[
            "#",
            "probe",
            "verdict",
            "status",
            "signature",
            "log",
            "note",
        ],
        &rows,
    ));
    text.push('\n');
    text.push_str(&file.answer());
    text.push('\n');
    for run in file.flaky() {
        text.push_str(&format!(
            "flaky: {} (attempt {}): {}\n",
            BisectFile::probe_label(run),
            run.attempt,
            run.reason.as_deref().unwrap_or("")
        ));
    }
    text.push_str(&format!(
        "bisect folder: {} ({})\n",
        folder.display(),
        bisect::summary::FILE
    ));
    text
}
/// The cell a `--filter` names: the one cell it selects or, for a version bisect, the first of
/// the cells it selects when they differ only in the bisected axis (any of them fixes the
/// other values). Several different cells are an error that lists them.
fn filtered_cell(file: &std::path::Path, expr: &str, mode: &Mode) -> Result<String, CliError> {
    let plan = super::matrix::load(file)?;
    let selected = super::filter_cells(&plan, expr)?;
    let others = |i: usize| -> Vec<(String, String)> {
        plan.cells[i]
            .values
            .iter()
            .filter(|(k, _)| !matches!(mode, Mode::Version { axis, .. } if axis == *k))
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect()
    };
    let first = selected[0];
    if selected.iter().all(|&i| others(i) == others(first)) {
        return Ok(plan.cells[first].id.to_string());
    }
    let ids: Vec<&str> = selected
        .iter()
        .take(5)
        .map(|&i| plan.cells[i].id.as_str())
        .collect();
    Err(CliError::input(anyhow::anyhow!(
        "the filter `{expr}` selects {} different cells ({}{}); a bisect needs one: narrow the filter",
        selected.len(),
        ids.join(", "),
        if selected.len() > 5 { ", ..." } else { "" }
    )))
}
