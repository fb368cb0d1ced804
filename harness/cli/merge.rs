//! `gpucompat merge DIR... --out DIR`: a thin wrapper over [`crate::merge`].

use crate::cli::print_stdout;
use crate::errors::{CliError, exit};
use crate::merge;
use clap::Args;
use std::io::Write as _;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Joins the run folders of several shards of one matrix (GitHub jobs, Slurm tasks, hosts) into one
run folder of the same format: records with their logs and hang captures, plan.json, and a manifest
naming every shard and host. A cell two shards recorded is reported, and the record that finished
later is kept. report, compare, bisect and gate read the merged folder as any run.

Examples:
  gpucompat merge shards/* --out runs/nightly/2026-11-23
  gpucompat merge job-sm90/run job-sm89/run --out merged && gpucompat report merged --out merged

Exit codes:
  0  merged (conflicts, if any, are listed on stderr)
  2  bad input (a folder that is not a run folder, shards of different matrix files, an --out
     folder that is not empty)
  3  the harness itself failed (the merged folder could not be written)";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct MergeArgs {
    /// Shard run folders, each a run of the same matrix file.
    #[arg(required = true, value_name = "DIR")]
    shards: Vec<PathBuf>,
    /// The merged run folder (created; must be new or empty).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

pub(crate) fn run(args: MergeArgs) -> Result<u8, CliError> {
    let merged = merge::merge(&args.shards, &args.out).map_err(|err| {
        if err.is_input() {
            CliError::input(err)
        } else {
            CliError::harness(err)
        }
    })?;
    let mut stderr = std::io::stderr().lock();
    for conflict in &merged.conflicts {
        let _ = writeln!(
            stderr,
            "warning: cell `{}` is in two shards: kept the later record, from `{}` (dropped `{}`)",
            crate::report::visible(&conflict.cell),
            conflict.kept,
            conflict.dropped
        );
    }
    drop(stderr);
    print_stdout(&format!(
        "merged {} shard(s) from {} into {}: {} record(s), {} conflict(s)\n",
        merged.shards,
        merged.hosts.join(", "),
        args.out.display(),
        merged.records,
        merged.conflicts.len()
    ))?;
    Ok(exit::SUCCESS)
}
