//! `gpucompat plan`.

use crate::errors::CliError;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// Matrix file.
    file: PathBuf,
}

pub(crate) fn run(args: PlanArgs) -> Result<u8, CliError> {
    Err(CliError::harness(anyhow::anyhow!(
        "not yet: {}",
        args.file.display()
    )))
}
