//! `gpucompat matrix expand`: every cell of a matrix with its id and values.

use crate::errors::{CliError, exit};
use crate::matrix::{self, Plan, template::value_text};
use clap::{Subcommand, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;

const EXPAND_LONG_ABOUT: &str = "\
Print every cell of a matrix with its id and values.

`[matrix]` follows GitHub Actions' `strategy.matrix` rules exactly: the cross product of the axes
(the first axis varies slowest), minus the combinations an `exclude` entry matches (partially: every
key it names must match), then each `include` entry is added to every remaining combination whose
axis values it matches (its other keys are added, overwriting what earlier entries added), or
becomes a new cell of its own when it matches none. Values compare as GitHub compares them: strings
ignoring case, numbers with numeric strings, tables field by field.

A cell's id is made from its axis values (all its values in a matrix without axes), uses only
`[A-Za-z0-9._-]`, and stays the same when other axes gain values or includes add keys.";

const EXPAND_AFTER_HELP: &str = "\
Examples:
  gpucompat matrix expand matrices/nightly.toml
  gpucompat matrix expand matrices/nightly.toml --format json | jq -r '.[].id'

JSON output: [{\"id\": \"0.6.3-sm_90\", \"values\": {\"flashinfer\": \"0.6.3\", \"gpu\": \"sm_90\"}}, ...]

Exit codes:
  0  expanded
  2  the matrix file is invalid (problems print as with `gpucompat check`)";

#[derive(Debug, Subcommand)]
pub(crate) enum MatrixCommand {
    /// Print every cell of a matrix with its id and values (GitHub Actions include/exclude rules).
    #[command(long_about = EXPAND_LONG_ABOUT, after_help = EXPAND_AFTER_HELP)]
    Expand {
        /// Matrix file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// `json`: an array of `{"id", "values"}` in expansion order; `table`: one row per cell,
        /// one column per key.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Json,
    Table,
}

#[derive(Serialize)]
struct Entry<'a> {
    id: &'a str,
    values: &'a crate::record::Values,
}

pub(crate) fn run(cmd: MatrixCommand) -> Result<u8, CliError> {
    let MatrixCommand::Expand { file, format } = cmd;
    let plan = load_for_inspection(&file)?;
    let text = match format {
        Format::Json => {
            let entries: Vec<Entry<'_>> = plan
                .cells
                .iter()
                .map(|c| Entry {
                    id: c.id.as_str(),
                    values: &c.values,
                })
                .collect();
            let mut text = serde_json::to_string_pretty(&entries).map_err(CliError::harness)?;
            text.push('\n');
            text
        }
        Format::Table => values_table(&plan),
    };
    super::print_stdout(&text)?;
    // The process ends next; freeing every cell of a large matrix one by one would take as long
    // as building them.
    std::mem::forget(plan);
    Ok(exit::SUCCESS)
}

/// Loads a matrix to run it, printing warnings to stderr and mapping errors to exit 2.
#[allow(
    dead_code,
    reason = "`gpucompat run` loads through this; it lives on another branch for now"
)]
pub(crate) fn load(file: &std::path::Path) -> Result<Plan, CliError> {
    report(matrix::load_verbose(file))
}

/// Loads a matrix to look at it (`matrix expand`, `plan`): a file with nothing to run is shown,
/// with a warning.
pub(crate) fn load_for_inspection(file: &std::path::Path) -> Result<Plan, CliError> {
    report(matrix::load_for_inspection(file))
}

fn report(loaded: Result<matrix::Loaded, matrix::LoadError>) -> Result<Plan, CliError> {
    match loaded {
        Ok(loaded) => {
            if !loaded.warnings.is_empty() {
                use std::io::Write;
                let _ = write!(std::io::stderr().lock(), "{}", loaded.warnings);
            }
            Ok(loaded.plan)
        }
        Err(err) => Err(CliError::rendered(exit::BAD_INPUT, err.render())),
    }
}

fn values_table(plan: &Plan) -> String {
    let mut header = vec!["id"];
    header.extend(plan.keys.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = plan
        .cells
        .iter()
        .map(|cell| {
            let mut row = vec![cell.id.to_string()];
            row.extend(
                plan.keys
                    .iter()
                    .map(|k| cell.values.get(k).map(value_text).unwrap_or_default()),
            );
            row
        })
        .collect();
    let mut text = super::table::render(&header, &rows);
    text.push_str(&format!("{} cells\n", plan.cells.len()));
    text
}
