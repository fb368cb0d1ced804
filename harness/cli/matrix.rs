//! `gpucompat matrix expand`.

use crate::errors::CliError;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum MatrixCommand {
    /// Print every cell of a matrix with its id and values.
    Expand {
        /// Matrix file.
        file: PathBuf,
    },
}

pub(crate) fn run(cmd: MatrixCommand) -> Result<u8, CliError> {
    let MatrixCommand::Expand { file } = cmd;
    Err(CliError::harness(anyhow::anyhow!(
        "not yet: {}",
        file.display()
    )))
}
