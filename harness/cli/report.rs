//! `gpucompat report`: a thin wrapper over [`crate::report`].

use crate::cli::print_stdout;
use crate::errors::{CliError, exit};
use crate::report::{self, ReportError, ReportOptions};
use clap::Args;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Bisects: a folder written by `gpucompat bisect` (it holds bisect.json) is shown beside the cells
it explains, whether it is named among the run folders or with `--bisect`; a folder of bisect
folders (such as `bisects/`) brings all of them. Its probes are never counted as cells of a run.
A bisect explains each of tonight's failing cells that has the bisected cell's values except the
bisected axis (and keys the others determine) and a value after the last good one: the table
says `first bad 0.6.10 (bisected, 5 probes)`, `culprit: flashinfer-cubin (attributed, 7
probes)` or `not converged: <why>`, and the cell's page lists the probes with their logs.

Examples:
  gpucompat report runs/2026-11-20 runs/2026-11-21 --out site
  gpucompat report runs/2026-11-21 bisects/ --out site
  gpucompat report runs/2026-11-21 --bisect bisects/0.6.11-sm_90-flashinfer-0.6.3-0.6.11 --out site
  gpucompat report runs/demo/* --out site

Exit codes:
  0  the report was written (failing cells are data, not an error of this command)
  2  bad input (no run folder given or readable, a corrupt results.jsonl with --strict, an
     unknown --rows/--cols axis, an --out that holds other files)
  3  the harness itself failed (the report folder cannot be written)";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct ReportArgs {
    /// Run folders; with several (nightlies), the newest by start time is tonight and the others
    /// give the history. Bisect folders among them are shown as with `--bisect`.
    #[arg(required = true, value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// A bisect folder, or a folder of them, to show beside the cells it explains; repeatable.
    #[arg(long = "bisect", value_name = "DIR")]
    bisects: Vec<PathBuf>,
    /// Folder to write the report into (created if missing; may be the run folder itself).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Axis whose values become table rows [default: the first version-like axis].
    #[arg(long, value_name = "AXIS")]
    rows: Option<String>,
    /// Axis whose values become table columns [default: the first GPU-like axis].
    #[arg(long, value_name = "AXIS")]
    cols: Option<String>,
    /// Title of the report [default: from the matrix file's name].
    #[arg(long)]
    title: Option<String>,
    /// A line of results.jsonl that is not a record is an error (exit 2); by default it is a
    /// warning naming the file and line, and every other record is kept.
    #[arg(long)]
    strict: bool,
    #[arg(long, value_name = "EXPR", help = super::FILTER_HELP)]
    filter: Option<String>,
    /// How many of the newest runs (nights) the report covers: the cells x nights grid, the
    /// pass-rate trend, flake rates, history and changes. Older run folders given are left out.
    #[arg(long, value_name = "N", default_value_t = report::DEFAULT_NIGHTS as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    nights: u64,
}

/// A report error as the CLI says it: bad input (exit 2) or a harness fault (exit 3).
pub(super) fn report_error(err: ReportError) -> CliError {
    if let ReportError::Filter(filter) = &err {
        return CliError::rendered(crate::errors::exit::BAD_INPUT, filter.render());
    }
    if err.is_input() {
        CliError::input(err)
    } else {
        CliError::harness(err)
    }
}

pub(crate) fn run(args: ReportArgs) -> Result<u8, CliError> {
    let options = ReportOptions {
        rows: args.rows,
        cols: args.cols,
        title: args.title,
        bisects: args.bisects,
        strict: args.strict,
        filter: args.filter,
        nights: Some(usize::try_from(args.nights).unwrap_or(usize::MAX)),
    };
    let summary = report::render(&args.runs, &args.out, &options).map_err(report_error)?;
    {
        let mut stderr = std::io::stderr().lock();
        for warning in &summary.warnings {
            let _ = writeln!(stderr, "warning: {}", report::visible(warning));
        }
    }
    let mut text = format!(
        "wrote {} ({} run{}, tonight `{}`): {}, {} cell page{}, {} plot{}\n{}\n",
        summary.out.display(),
        summary.runs,
        if summary.runs == 1 { "" } else { "s" },
        report::visible(&summary.tonight),
        summary.files.join(", "),
        summary.cell_pages,
        if summary.cell_pages == 1 { "" } else { "s" },
        summary.plots,
        if summary.plots == 1 { "" } else { "s" },
        summary.counts.summary(),
    );
    if summary.bisects > 0 {
        let _ = writeln!(
            text,
            "{} bisect{} shown, explaining {} cell{}",
            summary.bisects,
            if summary.bisects == 1 { "" } else { "s" },
            summary.explained,
            if summary.explained == 1 { "" } else { "s" }
        );
    }
    if summary.runs > 1 {
        let _ = writeln!(
            text,
            "{} regression{} since the previous run",
            summary.regressions,
            if summary.regressions == 1 { "" } else { "s" }
        );
    }
    print_stdout(&text)?;
    Ok(exit::SUCCESS)
}
