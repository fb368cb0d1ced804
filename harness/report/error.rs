//! Why a report or a comparison could not be made.

use crate::run::folder::{FolderError, MANIFEST, RESULTS};
use std::io;

/// A report could not be rendered, or run folders could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no run folders given")]
    NoRuns,
    #[error("`{0}` is not a run folder: it has neither {RESULTS} nor {MANIFEST}")]
    NotARunFolder(String),
    #[error("`{0}` is not a bisect folder: it has no bisect.json, and no folder in it has one")]
    NotABisectFolder(String),
    #[error(
        "only bisect folders were given; a report shows a bisect beside the cells of a run, so name a run folder too"
    )]
    OnlyBisects,
    #[error("cannot read bisect folder `{path}`")]
    Bisect {
        path: String,
        #[source]
        source: crate::bisect::summary::ReadError,
    },
    #[error("cannot read run folder `{path}`")]
    Folder {
        path: String,
        #[source]
        source: FolderError,
    },
    #[error("`{path}` is not a run manifest")]
    Manifest {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("`--{flag} {axis}`: no such axis (the runs have: {known})")]
    UnknownAxis {
        flag: &'static str,
        axis: String,
        known: String,
    },
    #[error("`--rows` and `--cols` both name `{0}`; pick two different axes")]
    SameAxis(String),
    #[error(
        "`{0}` holds another run than tonight's; a report there would overwrite its logs (pick another `--out`, or that run's own folder for a report of that run)"
    )]
    OutIsAnotherRun(String),
    #[error("cannot write `{path}`")]
    Write {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot draw `{path}`: {message}")]
    Plot { path: String, message: String },
    #[error("{}", .0.message)]
    Filter(crate::filter::FilterError),
}

impl ReportError {
    /// Whether the user can fix it by changing arguments or inputs (exit 2) rather than a fault
    /// of the harness (exit 3).
    pub fn is_input(&self) -> bool {
        match self {
            ReportError::NoRuns
            | ReportError::NotARunFolder(_)
            | ReportError::Manifest { .. }
            | ReportError::UnknownAxis { .. }
            | ReportError::SameAxis(_)
            | ReportError::OutIsAnotherRun(_)
            | ReportError::NotABisectFolder(_)
            | ReportError::OnlyBisects
            | ReportError::Filter(_) => true,
            ReportError::Bisect { source, .. } => {
                matches!(source, crate::bisect::summary::ReadError::Json { .. })
            }
            ReportError::Folder { source, .. } => match source {
                FolderError::Corrupt { .. } => true,
                other => other.is_input(),
            },
            ReportError::Write { .. } | ReportError::Plot { .. } => false,
        }
    }
}

pub(crate) fn write_err(path: &std::path::Path) -> impl FnOnce(io::Error) -> ReportError + '_ {
    move |source| ReportError::Write {
        path: path.display().to_string(),
        source,
    }
}
