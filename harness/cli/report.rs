//! `gpucompat report` and `gpucompat compare`: thin wrappers over [`crate::report`] and
//! [`crate::compare`].

use crate::cli::print_stdout;
use crate::compare::{self, Comparison, RunComparison};
use crate::errors::{CliError, exit};
use crate::report::{self, ReportError, ReportOptions};
use clap::{Args, ValueEnum};
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

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompareFormat {
    /// Aligned text: every cell that is not passing on both sides.
    Table,
    /// Every cell with both outcomes and its comparison.
    Json,
    /// A Markdown table, for a PR comment or a job summary.
    Md,
}

#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Baseline run folder.
    base: PathBuf,
    /// Candidate run folder.
    head: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: CompareFormat,
}

fn report_error(err: ReportError) -> CliError {
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
            let _ = writeln!(stderr, "warning: {warning}");
        }
    }
    let mut text = format!(
        "wrote {} ({} run{}, tonight `{}`): {}, {} cell page{}, {} plot{}\n{}\n",
        summary.out.display(),
        summary.runs,
        if summary.runs == 1 { "" } else { "s" },
        summary.tonight,
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

/// Text from run folders, fit for a terminal: control characters (escape sequences) replaced.
fn plain(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect()
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
        s.chars()
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

pub(crate) fn run_compare(args: CompareArgs) -> Result<u8, CliError> {
    let base = report::load_run(&args.base).map_err(report_error)?;
    let head = report::load_run(&args.head).map_err(report_error)?;
    let result = compare::compare_runs(&base.records, &head.records);
    let text = match args.format {
        CompareFormat::Json => {
            let value = serde_json::json!({
                "base": args.base.display().to_string(),
                "head": args.head.display().to_string(),
                "regressions": result.regressions(),
                "counts": result.counts,
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
                        plain(&c.id),
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
