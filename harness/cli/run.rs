//! `gpucompat run`: run every cell of a matrix into a run folder.

use crate::errors::CliError;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Matrix file.
    file: PathBuf,
    /// Run folder to write (created if missing).
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn run(args: RunArgs) -> Result<u8, CliError> {
    Err(CliError::harness(anyhow::anyhow!(
        "`run` is not available yet in this build (asked to run {} into {})",
        args.file.display(),
        args.out.display()
    )))
}
