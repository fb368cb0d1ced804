//! `gpucompat plan`: what a run would do, for people (`table`), CI (`github`) and tools (`json`).

use crate::errors::{CliError, exit};
use crate::matrix::{Cell, Engine, Plan, gpus};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Matrix file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// `table`: cells, GPU needs, pins, engine; `github`: `{"include": [...]}` for a GitHub Actions
    /// `strategy.matrix`, each entry with `runs-on` labels and the cell id; `json`: the whole plan.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Labels every GitHub entry's `runs-on` starts with.
    #[arg(long = "runner-label", value_name = "LABEL", default_values_t = ["self-hosted".to_owned(), "linux".to_owned()])]
    runner_labels: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Github,
    Json,
}

pub(crate) fn run(args: PlanArgs) -> Result<u8, CliError> {
    let plan = super::matrix::load(&args.file)?;
    let text = match args.format {
        Format::Table => table(&plan),
        Format::Github => {
            let include: Vec<_> = plan
                .cells
                .iter()
                .map(|cell| {
                    json!({
                        "cell": cell.id,
                        "runs-on": runner_labels(&args.runner_labels, cell),
                        "gpus": gpus::format(&cell.gpus),
                    })
                })
                .collect();
            format!("{}\n", json!({ "include": include }))
        }
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&plan).map_err(CliError::harness)?;
            text.push('\n');
            text
        }
    };
    super::print_stdout(&text)?;
    Ok(exit::SUCCESS)
}

/// `runs-on` labels: the base labels, one `gpu-<arch>` per distinct arch, and `gpus-<n>` when a
/// cell needs more than one GPU, so a runner advertises exactly what it can serve.
pub(crate) fn runner_labels(base: &[String], cell: &Cell) -> Vec<String> {
    let mut labels = base.to_vec();
    for arch in &cell.gpus {
        let label = format!("gpu-{arch}");
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    if cell.gpus.len() > 1 {
        labels.push(format!("gpus-{}", cell.gpus.len()));
    }
    labels
}

fn table(plan: &Plan) -> String {
    let rows: Vec<Vec<String>> = plan
        .cells
        .iter()
        .map(|cell| {
            let engine = match &cell.engine {
                Engine::Job { .. } => "job".to_owned(),
                Engine::Server(spec) => spec.kind.as_str().to_owned(),
            };
            let expect = match &cell.expectation {
                Some(e) => format!("xfail {}", e.signature.map_or("any", |s| s.as_str())),
                None => String::new(),
            };
            vec![
                cell.id.to_string(),
                if cell.gpus.is_empty() {
                    "-".to_owned()
                } else {
                    gpus::format(&cell.gpus)
                },
                engine,
                if cell.pins.is_empty() {
                    "-".to_owned()
                } else {
                    cell.pins_text()
                },
                expect,
            ]
        })
        .collect();
    let mut text = super::table::render(&["cell", "gpus", "engine", "pins", "expect"], &rows);
    let gpu_cells = plan.cells.iter().filter(|c| !c.gpus.is_empty()).count();
    let pin_sets: std::collections::BTreeSet<String> =
        plan.cells.iter().map(Cell::pins_text).collect();
    text.push_str(&format!(
        "{} cells ({} need GPUs), {} distinct pin sets\n",
        plan.cells.len(),
        gpu_cells,
        pin_sets.len()
    ));
    text
}
