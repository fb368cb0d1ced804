//! `gpucompat check`: validate matrix files offline and report every problem at once.

use crate::errors::{CliError, exit};
use crate::matrix;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Examples and exit codes: what `-h` shows below the options.
macro_rules! check_after_help {
    () => {
        "\
Examples:
  gpucompat check matrices/nightly.toml
  gpucompat check matrices/*.toml

Exit codes:
  0  every file is valid (warnings allowed)
  2  at least one file has a problem, or cannot be read"
    };
}

/// `--help` also says what the command checks and prints.
const CHECK_AFTER_LONG_HELP: &str = concat!(
    "Each file is read, parsed and expanded exactly as `gpucompat run` would, without running \
     anything. Checked: TOML syntax, unknown keys (with a did-you-mean), wrong types, bad \
     durations, `{key}` placeholders that no cell has, exclude keys that are not axes, malformed \
     GPU specs (`sm_90`, `2xsm_90`, `sm_86+sm_89`), a matrix that expands to nothing, duplicate \
     cells, and `[[expect]]` rules with an unknown signature or a bad version range.\n\n\
     Problems print to stderr as `--> FILE:LINE:COLUMN` with a caret under the offending text. \
     Warnings (an exclude entry that matches nothing, an expect rule that covers no cell) print \
     too, but do not fail the check. A summary line per valid file goes to stdout.",
    "\n\n",
    check_after_help!()
);

#[derive(Debug, Args)]
#[command(after_help = check_after_help!(), after_long_help = CHECK_AFTER_LONG_HELP)]
pub(crate) struct CheckArgs {
    /// Matrix files to validate.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

pub(crate) fn run(args: CheckArgs) -> Result<u8, CliError> {
    let mut failed = 0;
    let mut summary = String::new();
    let mut stderr = std::io::stderr().lock();
    for file in &args.files {
        match matrix::load_verbose(file) {
            Ok(loaded) => {
                if !loaded.warnings.is_empty() {
                    let _ = write!(stderr, "{}", loaded.warnings);
                }
                let plan = &loaded.plan;
                let counted = |n: usize, what: &str| match n {
                    1 => format!("1 {what}"),
                    n => format!("{n} {what}s"),
                };
                summary.push_str(&format!(
                    "ok: {}: {}, {}{}\n",
                    file.display(),
                    counted(plan.cells.len(), "cell"),
                    counted(plan.keys.len(), "key"),
                    match plan
                        .cells
                        .iter()
                        .filter(|c| c.expectation.is_some())
                        .count()
                    {
                        0 => String::new(),
                        1 => ", 1 with a known failure".to_owned(),
                        n => format!(", {n} with known failures"),
                    }
                ));
            }
            Err(err) => {
                failed += 1;
                let _ = writeln!(stderr, "{}\n", err.render().trim_end());
            }
        }
    }
    super::print_stdout(&summary)?;
    if failed > 0 {
        return Err(CliError::rendered(
            exit::BAD_INPUT,
            format!(
                "error: {failed} of {} matrix file{} invalid",
                args.files.len(),
                if args.files.len() == 1 {
                    " is"
                } else {
                    "s are"
                }
            ),
        ));
    }
    Ok(exit::SUCCESS)
}
