//! `gpucompat classify`: name the root cause of failure logs.

use crate::errors::CliError;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct ClassifyArgs {
    /// Log files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub(crate) fn run(args: ClassifyArgs) -> Result<u8, CliError> {
    Err(CliError::harness(anyhow::anyhow!(
        "`classify` is not available yet in this build ({} files)",
        args.files.len()
    )))
}
