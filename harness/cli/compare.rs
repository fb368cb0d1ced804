//! `gpucompat compare`: a thin wrapper over [`crate::compare`], on run folders read by
//! [`crate::report::load_run_with`].

use super::report::report_error;
use crate::cli::print_stdout;
use crate::compare::{self, Comparison, RunComparison};
use crate::errors::{CliError, exit};
use crate::report;
use clap::{Args, ValueEnum};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompareFormat {
    /// Aligned text: every cell that is not passing on both sides.
    Table,
    /// Every cell with both outcomes and its comparison.
    Json,
    /// A Markdown table, for a PR comment or a job summary.
    Md,
}

const AFTER_HELP: &str = "\
Examples:
  gpucompat compare runs/2026-11-20 runs/2026-11-21
  gpucompat compare runs/main runs/pr-1234 --format md >> \"$GITHUB_STEP_SUMMARY\"
  gpucompat compare runs/2026-11-20 runs/2026-11-21 --format json | jq '.cells[]'

Exit codes:
  0  no regression (cells fixed, still failing, flaky or spurious are not regressions)
  1  at least one cell regressed (passed in BASE, fails in HEAD)
  2  bad input (a folder that is not a run folder, or cannot be read)
  3  the harness itself failed";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct CompareArgs {
    /// Baseline run folder.
    base: PathBuf,
    /// Candidate run folder.
    head: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: CompareFormat,
    /// A line of results.jsonl that is not a record is an error (exit 2); by default it is a
    /// warning naming the file and line, and every other record is compared.
    #[arg(long)]
    strict: bool,
    /// How cells are paired: `auto` (by id, then cells a bump renamed by their values minus the
    /// moved keys), `id`, or the keys whose values identify a cell (`model,gpu`).
    #[arg(long, value_name = "auto|id|KEY,...", default_value = "auto")]
    pair_by: compare::PairBy,
}

/// Text from run folders, fit for a terminal: invisible characters (escape sequences, bidi
/// overrides) shown, not obeyed.
fn plain(text: &str) -> String {
    report::visible(text).into_owned()
}

fn outcome(o: Option<&compare::Outcome>) -> String {
    o.map_or_else(|| "—".to_owned(), ToString::to_string)
}

fn counts_line(result: &RunComparison) -> String {
    if result.counts.is_empty() {
        return "no cells on either side".to_owned();
    }
    result
        .counts
        .iter()
        .map(|(c, n)| format!("{n} {}", c.as_str().replace('_', " ")))
        .collect::<Vec<_>>()
        .join(", ")
}

fn markdown(base: &str, head: &str, result: &RunComparison) -> String {
    let esc = |s: &str| {
        report::visible(s)
            .chars()
            .map(|c| match c {
                '|' | '<' | '>' | '`' | '[' | ']' | '*' | '\\' => format!("\\{c}"),
                c if c.is_control() => " ".to_owned(),
                c => c.to_string(),
            })
            .collect::<String>()
    };
    let mut md = format!(
        "### {} → {}\n\n{}.\n\n",
        esc(base),
        esc(head),
        counts_line(result)
    );
    if let Some(moved) = result.pairing.describe() {
        let _ = writeln!(md, "{}.\n", esc(&moved));
    }
    let rows: Vec<_> = result
        .cells
        .iter()
        .filter(|c| c.comparison != Comparison::Passing)
        .collect();
    if !rows.is_empty() {
        md.push_str("| cell | change | base | head |\n|---|---|---|---|\n");
        for c in rows {
            let change = if c.comparison.is_regression() {
                format!("**{}**", c.comparison.as_str())
            } else {
                c.comparison.as_str().to_owned()
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} |",
                esc(&c.id),
                change,
                esc(&outcome(c.base.as_ref())),
                esc(&outcome(c.head.as_ref()))
            );
        }
    }
    md
}

pub(crate) fn run(args: CompareArgs) -> Result<u8, CliError> {
    let base = report::load_run_with(&args.base, args.strict).map_err(report_error)?;
    let head = report::load_run_with(&args.head, args.strict).map_err(report_error)?;
    {
        let mut stderr = std::io::stderr().lock();
        for warning in base.warnings.iter().chain(&head.warnings) {
            let _ = writeln!(stderr, "warning: {}", report::visible(warning));
        }
    }
    let result = compare::compare_runs_by(&base.records, &head.records, &args.pair_by)
        .map_err(CliError::input)?;
    let text = match args.format {
        CompareFormat::Json => {
            let value = serde_json::json!({
                "base": args.base.display().to_string(),
                "head": args.head.display().to_string(),
                "regressions": result.regressions(),
                "counts": result.counts,
                "pairing": result.pairing,
                "cells": result.cells,
            });
            let mut text = serde_json::to_string_pretty(&value).map_err(CliError::harness)?;
            text.push('\n');
            text
        }
        CompareFormat::Md => markdown(&base.name, &head.name, &result),
        CompareFormat::Table => {
            let rows: Vec<Vec<String>> = result
                .cells
                .iter()
                .filter(|c| c.comparison != Comparison::Passing)
                .map(|c| {
                    vec![
                        match &c.base_id {
                            Some(base_id) => format!("{} (was {})", plain(&c.id), plain(base_id)),
                            None => plain(&c.id),
                        },
                        c.comparison.as_str().to_owned(),
                        outcome(c.base.as_ref()),
                        outcome(c.head.as_ref()),
                    ]
                })
                .collect();
            let mut text = String::new();
            if !rows.is_empty() {
                text.push_str(&super::table::render(
                    &["cell", "change", "base", "head"],
                    &rows,
                ));
                text.push('\n');
            }
            let _ = writeln!(
                text,
                "{} -> {}: {}",
                args.base.display(),
                args.head.display(),
                counts_line(&result)
            );
            if let Some(moved) = result.pairing.describe() {
                let _ = writeln!(text, "{}", plain(&moved));
            }
            text
        }
    };
    print_stdout(&text)?;
    Ok(if result.regressions() > 0 {
        exit::FAILURES
    } else {
        exit::SUCCESS
    })
}
