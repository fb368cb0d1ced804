//! `gpucompat matrix expand`: every cell of a matrix with its id and values.

use crate::errors::{CliError, exit};
use crate::matrix::{self, Plan, template::value_text};
use clap::{Subcommand, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum MatrixCommand {
    /// Print every cell of a matrix with its id and values (GitHub Actions include/exclude rules).
    Expand {
        /// Matrix file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// `json`: an array of `{"id", "values"}`; `table`: one row per cell.
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
    let plan = load(&file)?;
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
    Ok(exit::SUCCESS)
}

/// Loads a matrix for a command, printing warnings to stderr and mapping errors to exit 2.
pub(crate) fn load(file: &std::path::Path) -> Result<Plan, CliError> {
    match matrix::load_verbose(file) {
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
