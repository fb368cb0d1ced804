//! `gpucompat check`: validate matrix files.

use crate::errors::CliError;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Matrix files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

pub(crate) fn run(args: CheckArgs) -> Result<u8, CliError> {
    Err(CliError::harness(anyhow::anyhow!(
        "not yet: {}",
        args.files.len()
    )))
}
