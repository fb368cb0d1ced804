//! Exit codes and the error type the command line reports.
//!
//! A cell failure is data (a record in `results.jsonl`), never one of these. These are for bad input
//! (exit 2) and for faults of the harness itself (exit 3), so scripts can tell the three apart.

use std::fmt;

/// Documented exit codes (`gpucompat --help` lists them).
pub mod exit {
    /// Everything ran and nothing unexpected failed.
    pub const SUCCESS: u8 = 0;
    /// The run found failures that matter: regressions, unexpected failures, stale expectations.
    pub const FAILURES: u8 = 1;
    /// Bad input or configuration: a matrix file, an argument, an inventory.
    pub const BAD_INPUT: u8 = 2;
    /// The harness itself failed (I/O error, a run folder it cannot write).
    pub const HARNESS: u8 = 3;
    /// Every cell was skipped (no GPU matched): the run tested nothing. (nextest uses 4 for "no
    /// tests to run".)
    pub const NOTHING_RAN: u8 = 4;
    /// Interrupted (Ctrl-C / SIGTERM); what finished is kept.
    pub const INTERRUPTED: u8 = 130;
}

/// An error that ends a command, with the exit code it maps to.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    kind: CliErrorKind,
}

#[derive(Debug)]
enum CliErrorKind {
    /// Printed as `error: ...` with its `Caused by:` chain.
    Error(anyhow::Error),
    /// Already rendered diagnostics (with file, line, column and carets), printed as they are.
    Rendered(String),
}

impl CliError {
    /// Bad input or configuration (exit 2).
    pub fn input(err: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: exit::BAD_INPUT,
            kind: CliErrorKind::Error(err.into()),
        }
    }

    /// A fault of the harness itself (exit 3).
    pub fn harness(err: impl Into<anyhow::Error>) -> Self {
        CliError {
            code: exit::HARNESS,
            kind: CliErrorKind::Error(err.into()),
        }
    }

    /// Diagnostics rendered elsewhere; `code` is usually [`exit::BAD_INPUT`].
    pub fn rendered(code: u8, text: String) -> Self {
        CliError {
            code,
            kind: CliErrorKind::Rendered(text),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            CliErrorKind::Rendered(text) => f.write_str(text.trim_end()),
            CliErrorKind::Error(err) => {
                write!(f, "error: {err}")?;
                let mut chain = err.chain().skip(1).peekable();
                if chain.peek().is_some() {
                    write!(f, "\n\nCaused by:")?;
                    for cause in chain {
                        write!(f, "\n    {cause}")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        CliError::harness(err)
    }
}
