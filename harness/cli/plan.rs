//! `gpucompat plan`: what a run would do, for people (`table`), CI (`github`) and tools (`json`).

use crate::errors::{CliError, exit};
use crate::matrix::{Cell, CellId, Engine, Plan, Runners, gpus};
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;

/// Examples and exit codes: what `-h` shows below the options.
macro_rules! plan_after_help {
    () => {
        "\
Examples:
  gpucompat plan matrices/nightly.toml
  gpucompat plan matrices/nightly.toml --format github --runner-label self-hosted --runner-label gpu

`--format github` prints one line, {\"include\": [...]}, for a GitHub Actions job matrix. \
Each entry has `id`, `runs-on` (the runner labels, one `gpu-<arch>` per arch its cells need and \
`gpus-<n>` when they need several GPUs; a matrix's `[runners]` table renames them), `gpus` (the GPU spec), `cells` and `args` (the `--cell` \
arguments that run them). With more cells than `--max-jobs` (default 256, GitHub's limit), cells \
with the same labels and pins share a job; a one-cell entry also has `cell`, its id:

  strategy:
    matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}
  runs-on: ${{ matrix.runs-on }}
  steps:
    - run: gpucompat run matrices/nightly.toml ${{ matrix.args }} --out run

Exit codes:
  0  planned
  2  the matrix file is invalid"
    };
}

/// `--help` also says what the command prints.
const PLAN_AFTER_LONG_HELP: &str = concat!(
    "Loads the matrix exactly as `gpucompat run` would (every problem is reported as by \
     `gpucompat check`) and prints each cell with the GPUs it needs (from `[resources] gpus`, in \
     CUDA_VISIBLE_DEVICES order), its engine, the `name==version` pins `[packages]` gives it, and \
     whether an `[[expect]]` rule marks it as a known failure.",
    "\n\n",
    plan_after_help!()
);

#[derive(Debug, Args)]
#[command(after_help = plan_after_help!(), after_long_help = PLAN_AFTER_LONG_HELP)]
pub(crate) struct PlanArgs {
    /// Matrix file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    #[arg(long, value_name = "EXPR", help = super::FILTER_HELP)]
    filter: Option<String>,
    /// `table`: cells, GPU needs, pins, engine; `github`: `{"include": [...]}` for a GitHub Actions
    /// `strategy.matrix`, each entry with `runs-on` labels and the cell id; `json`: the whole plan.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// The most jobs `--format github` prints (GitHub allows 256 per matrix): beyond it, cells
    /// with the same runner labels and pins share a job.
    #[arg(long, value_name = "N", default_value_t = 256)]
    max_jobs: usize,
    /// Labels every GitHub entry's `runs-on` starts with (repeatable; replaces the matrix's
    /// `[runners] labels`) [default: self-hosted, linux].
    #[arg(long = "runner-label", value_name = "LABEL")]
    runner_labels: Vec<String>,
    /// Simulate a run instead: print the makespan and GPU utilisation this host (or
    /// `--inventory`) would get, with cell durations from a CSV (`id,duration_s`), a
    /// `results.jsonl` or a run folder. No cell runs.
    #[arg(long, value_name = "DURATIONS")]
    simulate: Option<PathBuf>,
    /// GPUs to simulate on, as for `gpucompat run --inventory` [default: this host's].
    #[arg(long, value_name = "FILE", requires = "simulate")]
    inventory: Option<PathBuf>,
    /// Cells at a time in the simulation [default: one per GPU].
    #[arg(long, value_name = "N", requires = "simulate", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    jobs: Option<usize>,
    /// Duration of cells the durations file lacks [default: the median of those it has].
    #[arg(long, value_name = "DURATION", requires = "simulate", value_parser = humantime::parse_duration)]
    default_duration: Option<std::time::Duration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Github,
    Json,
}

pub(crate) fn run(args: PlanArgs) -> Result<u8, CliError> {
    let mut plan = super::matrix::load_for_inspection(&args.file)?;
    if let Some(expr) = &args.filter {
        let selected = super::filter_cells(&plan, expr)?;
        let mut index = 0;
        plan.cells.retain(|_| {
            index += 1;
            selected.binary_search(&(index - 1)).is_ok()
        });
    }
    if let Some(durations) = &args.simulate {
        let text = super::simulate::run(
            &plan,
            &super::simulate::SimulateArgs {
                durations,
                inventory: args.inventory.as_deref(),
                jobs: args.jobs,
                default: args.default_duration,
                json: args.format == Format::Json,
            },
        )?;
        super::print_stdout(&text)?;
        return Ok(exit::SUCCESS);
    }
    let text = match args.format {
        Format::Table => table(&plan),
        Format::Github => {
            let base = base_labels(&plan, &args.runner_labels);
            let include = github_jobs(&plan, &base, args.max_jobs)?;
            let mut text =
                serde_json::to_string(&GithubMatrix { include }).map_err(CliError::harness)?;
            text.push('\n');
            text
        }
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&plan).map_err(CliError::harness)?;
            text.push('\n');
            text
        }
    };
    super::print_stdout(&text)?;
    // The process ends next; freeing every cell of a large matrix one by one would take as long
    // as building them.
    std::mem::forget(plan);
    Ok(exit::SUCCESS)
}

/// `{"include": [...]}` for a GitHub Actions `strategy.matrix`.
#[derive(Serialize)]
struct GithubMatrix<'a> {
    include: Vec<GithubEntry<'a>>,
}

/// One job of the GitHub matrix: a name (`id`; the cell's id when the job runs one cell, which
/// is then also `cell`), the labels of the runners that can serve it, its GPU spec, its cells and
/// the `--cell` arguments that run them.
#[derive(Serialize)]
struct GithubEntry<'a> {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cell: Option<&'a CellId>,
    #[serde(rename = "runs-on")]
    runs_on: Vec<String>,
    gpus: String,
    cells: Vec<&'a CellId>,
    args: String,
}

/// The jobs of the GitHub matrix, at most `max_jobs`: one per cell when they fit, else cells that
/// share runner labels and pins (one environment, one JIT cache) go to one job, each group given
/// jobs in proportion to its cells. Labels that differ can never share a job: more distinct label
/// sets than `max_jobs` is an error.
fn github_jobs<'a>(
    plan: &'a Plan,
    base: &[String],
    max_jobs: usize,
) -> Result<Vec<GithubEntry<'a>>, CliError> {
    let max_jobs = max_jobs.max(1);
    let entry = |cells: Vec<&'a Cell>, name: String| GithubEntry {
        cell: (cells.len() == 1).then(|| &cells[0].id),
        id: name,
        runs_on: runner_labels(&plan.runners, base, cells[0]),
        gpus: gpus::format(&cells[0].gpus),
        args: cells
            .iter()
            .map(|c| format!("--cell {}", crate::provision::shell_quote(c.id.as_str())))
            .collect::<Vec<_>>()
            .join(" "),
        cells: cells.iter().map(|c| &c.id).collect(),
    };
    if plan.cells.len() <= max_jobs {
        return Ok(plan
            .cells
            .iter()
            .map(|c| entry(vec![c], c.id.to_string()))
            .collect());
    }
    let group_by = |with_pins: bool| {
        let mut groups: indexmap::IndexMap<(Vec<String>, String), Vec<&'a Cell>> =
            indexmap::IndexMap::new();
        for cell in &plan.cells {
            let pins = if with_pins {
                cell.pins_text()
            } else {
                String::new()
            };
            groups
                .entry((runner_labels(&plan.runners, base, cell), pins))
                .or_default()
                .push(cell);
        }
        groups
    };
    let mut groups = group_by(true);
    if groups.len() > max_jobs {
        groups = group_by(false);
    }
    if groups.len() > max_jobs {
        return Err(CliError::input(anyhow::anyhow!(
            "the cells need {} distinct sets of runner labels, more than --max-jobs {max_jobs}: raise it or split the matrix",
            groups.len()
        )));
    }
    let total = plan.cells.len();
    let mut shares: Vec<usize> = groups
        .values()
        .map(|cells| (cells.len() * max_jobs / total).max(1))
        .collect();
    while shares.iter().sum::<usize>() > max_jobs {
        if let Some(big) = (0..shares.len()).max_by_key(|i| shares[*i]) {
            shares[big] -= 1;
        }
    }
    let mut jobs = Vec::new();
    for (((labels, _), cells), share) in groups.iter().zip(shares) {
        let size = cells.len().div_ceil(share);
        for (n, chunk) in cells.chunks(size).enumerate() {
            let name = match labels.get(base.len()..).filter(|l| !l.is_empty()) {
                Some(own) => format!("{}-{}", own.join("-"), n + 1),
                None => format!("cpu-{}", n + 1),
            };
            jobs.push(entry(chunk.to_vec(), name));
        }
    }
    Ok(jobs)
}

/// The labels every job starts with: the command line's, else the matrix's `[runners] labels`,
/// else `self-hosted`, `linux`.
fn base_labels(plan: &Plan, given: &[String]) -> Vec<String> {
    if !given.is_empty() {
        return given.to_vec();
    }
    match &plan.runners.labels {
        Some(labels) => labels.clone(),
        None => Runners::DEFAULT_LABELS.map(str::to_owned).to_vec(),
    }
}

/// `runs-on` labels: the base labels, each distinct arch's labels (`gpu-<arch>` unless
/// `[runners]` says otherwise), and `gpus-<n>` when a cell needs more than one GPU, so a runner
/// advertises exactly what it can serve.
fn runner_labels(runners: &Runners, base: &[String], cell: &Cell) -> Vec<String> {
    let mut labels = base.to_vec();
    for arch in &cell.gpus {
        for label in runners.arch_labels(gpus::split_device(arch).0) {
            if !labels.contains(&label) {
                labels.push(label);
            }
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
                Engine::Job { command } if command.is_empty() => "-".to_owned(),
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
        "{} cell{} ({} need{} GPUs), {} distinct pin set{}\n",
        plan.cells.len(),
        plural(plan.cells.len()),
        gpu_cells,
        if gpu_cells == 1 { "s" } else { "" },
        pin_sets.len(),
        plural(pin_sets.len()),
    ));
    text
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
