//! `gpucompat report`: a thin wrapper over [`crate::report`].

use crate::cli::print_stdout;
use crate::errors::{CliError, exit};
use crate::report::{self, ReportError, ReportOptions};
use clap::Args;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Run folders; with several (nightlies), the newest by start time is tonight and the others
    /// give the history.
    #[arg(required = true, value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
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
}

/// A report error as the CLI says it: bad input (exit 2) or a harness fault (exit 3).
pub(super) fn report_error(err: ReportError) -> CliError {
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
