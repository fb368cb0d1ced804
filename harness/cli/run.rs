//! `gpucompat run`: run every cell of a matrix into a run folder.

use crate::env::{self, EnvVars};
use crate::errors::{CliError, exit};
use crate::exec::logsink::LogLimits;
use crate::inventory;
use crate::record::Status;
use crate::report::{self, ReportOptions};
use crate::run::{self, RunOptions, RunSummary, progress::Reporter};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

const AFTER_HELP: &str = "\
Examples:
  gpucompat run matrices/demo.toml
  gpucompat run matrices/nightly.toml --out runs/2026-11-21 -j 4
  gpucompat run matrices/nightly.toml --out runs/2026-11-21 --resume
  gpucompat run matrices/nightly.toml --out runs/try --force --cell 0.6.3-sm_90
  gpucompat run matrices/nightly.toml --executor slurm --slurm-partition gpu --out /shared/run

Without `--out`, every run gets a new folder, runs/<matrix name>/<UTC time>; the last lines of
the run name it and its report (index.html).

Exit codes:
  0    every cell ran and nothing unexpected happened (fail with an expectation is xfail)
  1    a cell failed unexpectedly, passed unexpectedly (xpass) or hit an infrastructure error
  2    bad input (matrix file, arguments, inventory, an `--out` that is not a run folder)
  3    the harness itself failed (a run folder it cannot write)
  4    every cell was skipped (no matching GPU), so nothing was tested
  130  interrupted; finished cells are kept, `--out DIR --resume` finishes the run";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct RunArgs {
    /// Matrix file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Run folder to write: results.jsonl, logs/, plan.json, manifest.json (created if missing)
    /// [default: a new folder per run, `runs/<matrix name>/<UTC time>`].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Replace the run in `--out`: its records, logs and report are deleted first. Only a
    /// gpucompat run folder is replaced; a folder holding other files is still refused.
    #[arg(long, requires = "out", conflicts_with = "resume")]
    force: bool,
    /// Cells to run at a time [default: one per GPU, or one per CPU when no cell needs a GPU].
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    jobs: Option<usize>,
    /// GPUs of this host as a TOML file of `[[gpu]]` tables (`index`, `name`, `arch`)
    /// [default: detected with nvidia-smi].
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Finish an interrupted run in `--out`: cells with a record are not run again, except skipped
    /// cells and cells that ended in an infrastructure (spurious) error, which run again.
    #[arg(long, requires = "out")]
    resume: bool,
    /// With `--resume`, keep the records of cells that ended in an infrastructure (spurious) error
    /// instead of running them again.
    #[arg(long, requires = "resume")]
    no_retry_errors: bool,
    /// Run only this cell (repeatable); ids as `gpucompat matrix expand` prints them.
    #[arg(long = "cell", value_name = "ID")]
    cells: Vec<String>,
    #[arg(long, value_name = "EXPR", help = super::FILTER_HELP)]
    filter: Option<String>,
    /// Where shared JIT caches live [default: $GPUCOMPAT_CACHE_DIR, else ~/.cache/gpucompat].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Most of a cell's output kept in its log: the head and the tail, the middle dropped
    /// (e.g. `64MiB`, `500KB`).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size)]
    log_limit: u64,
    /// Say `SLOW` for a cell each time it has run this much longer, with its phase and what the
    /// watchdog sees (`0s`: never).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    slow_after: Duration,
    /// Time between SIGTERM and SIGKILL when a cell is torn down.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Where cells run: `local`, on this host's GPUs; `slurm`, as Slurm job arrays (one task per
    /// cell), every task running this gpucompat into the run folder, which must be on a
    /// filesystem the nodes share, as must the cache.
    #[arg(long, value_enum, default_value_t = Executor::Local)]
    executor: Executor,
    /// With `--executor slurm`: the partition [default: the matrix's `[slurm] partition`, else
    /// the cluster's default].
    #[arg(long, value_name = "NAME")]
    slurm_partition: Option<String>,
    /// With `--executor slurm`: put before each GPU arch to name the node feature asked with
    /// `--constraint` (`gpu_` asks for `gpu_sm_90`) [default: the matrix's `[slurm]
    /// constraint-prefix`, else none: `sm_90`].
    #[arg(long, value_name = "PREFIX")]
    slurm_constraint_prefix: Option<String>,
    /// With `--executor slurm`: an extra `sbatch` argument, after the matrix's `[slurm] args`
    /// (repeatable; e.g. `--slurm-arg=--account=ml`).
    #[arg(long = "slurm-arg", value_name = "ARG", allow_hyphen_values = true)]
    slurm_args: Vec<String>,
    /// With `--executor slurm`: the longest wait between two polls of `squeue`.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    slurm_poll: Duration,
    /// With `--executor slurm`: the most array tasks; past it, cells sharing an environment and
    /// GPUs share a task (Slurm's default MaxArraySize allows 1001).
    #[arg(long, value_name = "N", default_value_t = crate::slurm::tasks::DEFAULT_MAX_TASKS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    slurm_max_tasks: usize,
    /// Internal: this run is one Slurm array task; its GPUs are the ones Slurm gave it.
    #[arg(long, hide = true)]
    slurm_task: bool,
}

/// Where `gpucompat run` runs cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Executor {
    Local,
    Slurm,
}

/// Where runs go when no `--out` is given: `runs/<matrix name>/<UTC time>`, relative to the
/// current folder, so that running the same command again adds to the history.
const RUNS: &str = "runs";

/// The matrix's `name`, else its file stem, as one folder name.
fn folder_name(plan: &crate::matrix::Plan) -> String {
    let name = plan.name.clone().unwrap_or_else(|| {
        plan.path
            .file_stem()
            .map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned())
    });
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if safe.trim_matches('.').is_empty() {
        "run".to_owned()
    } else {
        safe
    }
}

fn folder_error(err: run::folder::FolderError) -> CliError {
    if err.is_input() {
        CliError::input(err)
    } else {
        CliError::harness(err)
    }
}

/// `64MiB`, `500KB`, `1G`, `4096`: a size in bytes.
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size (e.g. `64MiB`, `500KB`)"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use KB, MiB, GB, ...)"
            ));
        }
    };
    let bytes = number
        .checked_mul(factor)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    if bytes < 1024 {
        return Err(format!(
            "`{text}` is too small to keep a useful log (at least 1KiB)"
        ));
    }
    Ok(bytes)
}

pub(super) fn default_cache_dir() -> PathBuf {
    if let Some(dir) = env::var_os(EnvVars::GPUCOMPAT_CACHE_DIR) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = env::var_os(EnvVars::XDG_CACHE_HOME) {
        return PathBuf::from(dir).join("gpucompat");
    }
    match env::var_os(EnvVars::HOME) {
        Some(home) => PathBuf::from(home).join(".cache").join("gpucompat"),
        None => std::env::temp_dir().join("gpucompat-cache"),
    }
}

pub(crate) fn run(args: RunArgs) -> Result<u8, CliError> {
    let plan = super::matrix::load(&args.file)?;
    let cells = match &args.filter {
        None => args.cells.clone(),
        Some(expr) => {
            let selected: Vec<String> = super::filter_cells(&plan, expr)?
                .into_iter()
                .map(|i| plan.cells[i].id.to_string())
                .collect();
            if args.cells.is_empty() {
                selected
            } else {
                // Both: the `--cell`s the filter selects (an unknown id still gets its error).
                let known = |id: &String| plan.cells.iter().any(|c| c.id.as_str() == id);
                let both: Vec<String> = args
                    .cells
                    .iter()
                    .filter(|&id| selected.contains(id) || !known(id))
                    .cloned()
                    .collect();
                if both.is_empty() {
                    return Err(CliError::input(anyhow::anyhow!(
                        "no `--cell` given is selected by the filter `{expr}`"
                    )));
                }
                both
            }
        }
    };
    check_slurm_flags(&args)?;
    // Everything that can fail on bad input fails before a run folder is made.
    let inventory = match args.executor {
        Executor::Local => Some(local_inventory(&args)?),
        Executor::Slurm => None,
    };
    // Cells run in the matrix file's folder: every path handed to them (JIT caches, environments)
    // must not depend on where the harness was started.
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    let (out, created) = match args.out.clone() {
        Some(out) => {
            if args.force {
                run::folder::clear(&out).map_err(folder_error)?;
            }
            (out, false)
        }
        None => {
            let parent = PathBuf::from(RUNS).join(folder_name(&plan));
            let out = run::folder::create_timestamped(&parent, std::time::SystemTime::now())
                .map_err(folder_error)?;
            (out, true)
        }
    };
    let cache_root = absolute(args.cache_dir.clone().unwrap_or_else(default_cache_dir));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::harness)?;
    let clock = std::time::Instant::now();
    let executed = match inventory {
        Some(inventory) => {
            let options = local_options(&args, inventory, absolute(out.clone()), cells, cache_root);
            runtime
                .block_on(run::execute(plan, options))
                .map_err(|err| (err.is_input(), anyhow::Error::from(err)))
        }
        None => {
            let options = slurm_options(&args, &plan, absolute(out.clone()), cells, cache_root);
            runtime
                .block_on(crate::slurm::execute(plan, options))
                .map_err(|err| (err.is_input(), anyhow::Error::from(err)))
        }
    };
    let summary = executed
        .inspect_err(|_| {
            // A new folder that the run never got to use is not left behind as an empty run
            // (`remove_dir` removes only an empty folder).
            if created {
                let _ = std::fs::remove_dir(&out);
            }
        })
        .map_err(|(input, err)| {
            if input {
                CliError::input(err)
            } else {
                CliError::harness(err)
            }
        })?;
    // Cells may still be tearing down their last output streams; do not wait for them.
    runtime.shutdown_timeout(Duration::from_secs(1));
    // The run folder carries its own report (compat.md, index.html, ...). A report that cannot be
    // written is worth a warning, never the loss of the run's verdict.
    let folder = summary.folder.clone();
    if args.slurm_task {
        // A Slurm task's shard is collected into the run folder, which gets the report.
        let text = summary_text(
            &summary,
            &out,
            Err("a Slurm task's shard has none".to_owned()),
            clock.elapsed(),
        );
        super::print_stdout(&text)?;
        return Ok(exit_code(&summary));
    }
    let report = report::render(
        std::slice::from_ref(&folder),
        &folder,
        &ReportOptions::default(),
    )
    .map(|_| out.join("index.html"))
    .map_err(|err| err.to_string());
    let text = summary_text(&summary, &out, report, clock.elapsed());
    super::print_stdout(&text)?;
    Ok(exit_code(&summary))
}

/// The local executor's options: this host's GPUs (or, in a Slurm task, those Slurm gave it).
fn local_inventory(args: &RunArgs) -> Result<inventory::Inventory, CliError> {
    let inventory = match &args.inventory {
        Some(path) => inventory::load(path).map_err(CliError::input)?,
        None => inventory::detect(),
    };
    Ok(if args.slurm_task {
        inventory::allocated(
            inventory,
            env::var(EnvVars::CUDA_VISIBLE_DEVICES).as_deref(),
        )
    } else {
        inventory
    })
}

fn local_options(
    args: &RunArgs,
    inventory: inventory::Inventory,
    out: PathBuf,
    cells: Vec<String>,
    cache_root: PathBuf,
) -> RunOptions {
    RunOptions {
        out,
        jobs: args.jobs,
        inventory,
        resume: args.resume,
        retry_errors: !args.no_retry_errors,
        cells,
        cache_root,
        limits: LogLimits::from_total(args.log_limit),
        grace: args.grace,
        reaper_exe: std::env::current_exe().ok(),
        interactive: !args.slurm_task && Reporter::stderr_is_interactive(),
        slow_after: Some(args.slow_after),
        quiet: false,
    }
}

/// The Slurm executor's options: the matrix's `[slurm]` under the command line's flags, and
/// what every task's `gpucompat run` is given.
fn slurm_options(
    args: &RunArgs,
    plan: &crate::matrix::Plan,
    out: PathBuf,
    cells: Vec<String>,
    cache_root: PathBuf,
) -> crate::slurm::SlurmOptions {
    let mut settings = plan.slurm.clone();
    if let Some(partition) = &args.slurm_partition {
        settings.partition = Some(partition.clone());
    }
    if let Some(prefix) = &args.slurm_constraint_prefix {
        settings.constraint_prefix = Some(prefix.clone());
    }
    settings.args.extend(args.slurm_args.iter().cloned());
    // `current_exe` fails only where /proc is missing; the name on PATH is the best guess then.
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gpucompat"));
    let mut task_args = vec![
        "--cache-dir".to_owned(),
        cache_root.display().to_string(),
        "--log-limit".to_owned(),
        args.log_limit.to_string(),
        "--slow-after".to_owned(),
        humantime::format_duration(args.slow_after).to_string(),
        "--grace".to_owned(),
        humantime::format_duration(args.grace).to_string(),
    ];
    if let Some(path) = &args.inventory {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        task_args.extend(["--inventory".to_owned(), path.display().to_string()]);
    }
    crate::slurm::SlurmOptions {
        out,
        resume: args.resume,
        retry_errors: !args.no_retry_errors,
        cells,
        settings,
        poll: args.slurm_poll,
        max_tasks: args.slurm_max_tasks,
        exe,
        task_args,
        quiet: false,
    }
}

/// `--slurm-*` flags mean nothing to the local executor: given without `--executor slurm`, they
/// are a mistake worth saying.
fn check_slurm_flags(args: &RunArgs) -> Result<(), CliError> {
    if args.executor == Executor::Slurm {
        return Ok(());
    }
    let given = [
        ("--slurm-partition", args.slurm_partition.is_some()),
        (
            "--slurm-constraint-prefix",
            args.slurm_constraint_prefix.is_some(),
        ),
        ("--slurm-arg", !args.slurm_args.is_empty()),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((flag, _)) => Err(CliError::input(anyhow::anyhow!(
            "`{flag}` needs `--executor slurm`"
        ))),
        None => Ok(()),
    }
}

/// 130 when interrupted; 1 when a cell failed unexpectedly, passed unexpectedly (xpass) or hit
/// an infrastructure error; 4 when every cell was skipped (a run that tested nothing is not a
/// green one); 0 otherwise.
fn exit_code(summary: &RunSummary) -> u8 {
    if summary.interrupted.is_some() {
        return exit::INTERRUPTED;
    }
    if summary.records.iter().all(|r| r.status == Status::Skip) {
        return exit::NOTHING_RAN;
    }
    let bad = summary
        .records
        .iter()
        .any(|r| r.status.is_unexpected() || r.status == Status::Error);
    if bad { exit::FAILURES } else { exit::SUCCESS }
}

/// The statuses in the order the summary says them: what needs a person first (unexpected
/// failures and passes, infrastructure errors), then flaky cells, then what went as expected.
const SUMMARY_ORDER: [Status; 7] = [
    Status::Fail,
    Status::Xpass,
    Status::Error,
    Status::Flaky,
    Status::Pass,
    Status::Xfail,
    Status::Skip,
];

/// Statuses listed cell by cell; the others are collapsed to a count.
fn listed(status: Status) -> bool {
    matches!(
        status,
        Status::Fail | Status::Xpass | Status::Error | Status::Flaky
    )
}

/// The end of a run, as nextest ends: the cells that need a person (unexpected ones first), the
/// expected ones as counts, where the run folder and its report are, and a last line with the
/// elapsed time and every count. `shown`: the run folder as the user gave it (or as it was named
/// for them); `report`: the written report's index, or why it was not written.
fn summary_text(
    summary: &RunSummary,
    shown: &std::path::Path,
    report: Result<PathBuf, String>,
    elapsed: Duration,
) -> String {
    let count = |status: Status| {
        summary
            .records
            .iter()
            .filter(|r| r.status == status)
            .count()
    };
    let counts: Vec<String> = SUMMARY_ORDER
        .iter()
        .map(|&s| (s, count(s)))
        .filter(|&(_, n)| n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    let mut rows: Vec<Vec<String>> = Vec::new();
    for status in SUMMARY_ORDER.into_iter().filter(|&s| listed(s)) {
        for r in summary.records.iter().filter(|r| r.status == status) {
            rows.push(vec![
                r.status.as_str().to_ascii_uppercase(),
                r.id.clone(),
                r.signature.map_or("-", |s| s.as_str()).to_owned(),
                r.phase.map_or("-", |p| p.as_str()).to_owned(),
                match r.status {
                    Status::Xpass | Status::Flaky | Status::Error => {
                        r.reason.clone().unwrap_or_default()
                    }
                    _ => r.log.clone(),
                },
            ]);
        }
    }
    let mut text = String::from("\n");
    if !rows.is_empty() {
        text.push_str(&super::table::render(
            &["status", "cell", "signature", "phase", "log / reason"],
            &rows,
        ));
        text.push('\n');
    }
    let expected: Vec<String> = SUMMARY_ORDER
        .iter()
        .filter(|&&s| !listed(s))
        .map(|&s| (s, count(s)))
        .filter(|&(_, n)| n > 0)
        .map(|(s, n)| format!("{n} {s}"))
        .collect();
    if !expected.is_empty() {
        text.push_str(&format!(
            "as expected: {} (every cell is in the report)\n",
            expected.join(", ")
        ));
    }
    if let Some(torn_down) = summary.interrupted {
        text.push_str(&format!(
            "interrupted: {} cell(s) kept in {}; {torn_down} not finished; finish with `gpucompat run ... --out {} --resume`\n",
            summary.records.len(),
            shown.join(run::folder::RESULTS).display(),
            shown.display()
        ));
    }
    text.push_str(&format!("run folder: {}\n", shown.display()));
    match report {
        Ok(index) => text.push_str(&format!("report: {}\n", index.display())),
        Err(err) => text.push_str(&format!("warning: no report written: {err}\n")),
    }
    text.push_str(&format!(
        "{:>8} [{:>7.1}s] {} cells: {}\n",
        "Summary",
        elapsed.as_secs_f64(),
        summary.records.len(),
        if counts.is_empty() {
            "none finished".to_owned()
        } else {
            counts.join(", ")
        }
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("500KB"), Ok(500_000));
        assert_eq!(parse_size("2048"), Ok(2048));
        assert!(parse_size("12").is_err());
        assert!(parse_size("5 parsecs").is_err());
        assert!(parse_size("99999999999999999999GB").is_err());
    }
}
