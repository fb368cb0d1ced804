//! `gpucompat check`: validate matrix files offline and report every problem at once.

use crate::errors::{CliError, exit};
use crate::matrix;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
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
                summary.push_str(&format!(
                    "ok: {}: {} cells, {} axes{}\n",
                    file.display(),
                    plan.cells.len(),
                    plan.keys.len(),
                    match plan
                        .cells
                        .iter()
                        .filter(|c| c.expectation.is_some())
                        .count()
                    {
                        0 => String::new(),
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
