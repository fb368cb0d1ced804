//! gpucompat: a regression-matrix harness for GPU LLM serving.
//!
//! Codemap (data flows top to bottom; `ARCHITECTURE.md` has the long form):
//!
//! - [`matrix`]: matrix files. `raw` walks the TOML with spans, `expand` applies GitHub Actions'
//!   include/exclude rules, `load` validates everything into a [`matrix::Plan`] of cells. No I/O
//!   besides reading the file.
//! - [`diag`]: renders problems in files as `--> file:line:col` with a caret.
//! - [`signature`]: the root-cause taxonomy shared by everything below.
//! - [`record`]: one line of `results.jsonl`, the stable output format.
//! - [`report`]: compatibility tables (Markdown, CSV, JSON, JUnit), the static HTML dashboard and
//!   SVG plots from run folders, with history across nightlies; one serializable view model.
//! - [`compare`]: a baseline run against a candidate, cell by cell, in one exhaustive rule table.
//! - [`cli`]: the command line; each subcommand is a thin wrapper over the modules above.
//! - [`errors`]: exit codes and the error type the command line prints.

pub mod classify;
pub mod cli;
pub mod compare;
pub mod diag;
pub mod engines;
pub mod errors;
pub mod exec;
pub mod inventory;
pub mod matrix;
pub mod provision;
pub mod record;
pub mod report;
pub mod run;
pub mod schedule;
pub mod signature;
pub mod watchdog;
