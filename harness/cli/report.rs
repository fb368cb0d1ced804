//! `gpucompat report` and `gpucompat compare`.

use crate::errors::CliError;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// Run folders.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Folder to write the report into.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// Baseline run folder.
    base: PathBuf,
    /// Candidate run folder.
    head: PathBuf,
}

pub(crate) fn run(args: ReportArgs) -> Result<u8, CliError> {
    Err(CliError::harness(anyhow::anyhow!(
        "`report` is not available yet in this build ({} runs into {})",
        args.runs.len(),
        args.out.display()
    )))
}

pub(crate) fn run_compare(args: CompareArgs) -> Result<u8, CliError> {
    Err(CliError::harness(anyhow::anyhow!(
        "`compare` is not available yet in this build ({} vs {})",
        args.base.display(),
        args.head.display()
    )))
}
