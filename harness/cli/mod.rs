//! The command line. Each subcommand lives in its own file and is a thin wrapper over the library:
//! it parses arguments, calls one operation, prints, and returns an exit code.

mod bisect;
mod check;
mod classify;
mod compare;
mod gate;
mod matrix;
mod merge;
mod plan;
mod publish;
mod report;
mod run;
mod simulate;
mod table;

use crate::errors::{CliError, exit};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0    success: everything ran and nothing unexpected failed
  1    the run found failures that matter (unexpected failures, regressions, xpass)
  2    bad input or configuration (matrix file, arguments, inventory)
  3    the harness itself failed (I/O, a run folder it cannot write)
  4    `run`: every cell was skipped (no matching GPU), so nothing was tested
  130  interrupted; finished cells are kept";

/// Regression-matrix harness for GPU LLM serving: expand a version x GPU-arch x model matrix, run
/// each cell as a launch-plus-inference smoke job, name every failure by its root cause, report.
#[derive(Debug, Parser)]
#[command(name = "gpucompat", version, after_help = EXIT_CODES_HELP, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate matrix files and report every problem at once, with file, line and column.
    Check(check::CheckArgs),
    /// Inspect a matrix.
    #[command(subcommand)]
    Matrix(matrix::MatrixCommand),
    /// Show what a run would do: cells, their GPU needs and the pins each would install.
    Plan(plan::PlanArgs),
    /// Run every cell of a matrix and record what happened in a run folder.
    Run(run::RunArgs),
    /// Name the root cause of failure logs.
    Classify(classify::ClassifyArgs),
    /// Render compatibility tables and a dashboard from run folders.
    Report(report::ReportArgs),
    /// Compare two run folders cell by cell: regressed, fixed, still failing, flaky, spurious.
    Compare(compare::CompareArgs),
    /// Join shard run folders of one matrix (jobs, tasks, hosts) into one run folder.
    Merge(merge::MergeArgs),
    /// Find the first bad version of an axis, or the bumped packages that break a cell.
    Bisect(bisect::BisectArgs),
    /// Gate a dependency bump: base and head pins; exit 1 only for confirmed regressions
    Gate(gate::GateArgs),
    /// Publish a run to GitHub: one issue per new failure fingerprint.
    Publish(publish::PublishArgs),
    /// Internal: the guardian that kills a run's cells if the harness dies.
    #[command(name = "__reap", hide = true)]
    Reap {
        /// The run's token.
        token: String,
    },
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help/version to stdout with exit 0, usage errors to stderr with exit 2.
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() {
                exit::BAD_INPUT
            } else {
                exit::SUCCESS
            });
        }
    };
    init_tracing();
    match dispatch(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let _ = writeln!(std::io::stderr().lock(), "{err}");
            ExitCode::from(err.code)
        }
    }
}

fn dispatch(command: Command) -> Result<u8, CliError> {
    match command {
        Command::Check(args) => check::run(args),
        Command::Matrix(cmd) => matrix::run(cmd),
        Command::Plan(args) => plan::run(args),
        Command::Run(args) => run::run(args),
        Command::Classify(args) => classify::run(args),
        Command::Report(args) => report::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Bisect(args) => bisect::run(args),
        Command::Gate(args) => gate::run(args),
        Command::Publish(args) => publish::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Reap { token } => {
            crate::exec::reaper::serve(&token, std::io::stdin().lock());
            Ok(exit::SUCCESS)
        }
    }
}

fn init_tracing() {
    // Diagnostics of the harness itself go to stderr, off unless `GPUCOMPAT_LOG` asks for them.
    let filter = tracing_subscriber::EnvFilter::try_from_env(crate::env::EnvVars::GPUCOMPAT_LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The `--filter EXPR` option, one definition for every command that selects cells.
pub(crate) const FILTER_HELP: &str = "Only the cells whose values match EXPR: `KEY=VALUE` (`*` matches \
any run of characters), `KEY!=VALUE`, joined with `&` (and), `|` (or), `!` (not) and parentheses, \
e.g. 'flashinfer=0.6.8.post1 & gpu=sm_90*'";

/// The cells of `plan` a `--filter EXPR` selects, as indices in plan order. A parse error or an unknown key
/// is shown with a caret under it (exit 2); a filter that selects no cell is an error too (it is
/// almost always a typo in a value).
pub(crate) fn filter_cells(plan: &crate::matrix::Plan, expr: &str) -> Result<Vec<usize>, CliError> {
    let filter = crate::filter::Filter::parse(expr, &plan.keys)
        .map_err(|err| CliError::rendered(exit::BAD_INPUT, err.render()))?;
    let selected: Vec<usize> = (0..plan.cells.len())
        .filter(|&i| filter.matches(&plan.cells[i].values))
        .collect();
    if selected.is_empty() {
        return Err(CliError::input(anyhow::anyhow!(
            "the filter `{expr}` selects none of the {} cells of {} (see their values with `gpucompat matrix expand`)",
            plan.cells.len(),
            plan.path.display()
        )));
    }
    Ok(selected)
}

/// Writes to stdout; a closed pipe (`gpucompat ... | head`) is not an error.
pub(crate) fn print_stdout(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(CliError::harness),
    }
}
