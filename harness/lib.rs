//! gpucompat: a regression-matrix harness for GPU LLM serving.
//!
//! Codemap (data flows top to bottom; `ARCHITECTURE.md` has the long form):
//!
//! - [`matrix`]: matrix files. `raw` walks the TOML with spans, `expand` applies GitHub Actions'
//!   include/exclude rules, `load` validates (`validate`) and renders (`render`) everything into a
//!   [`matrix::Plan`] of cells. No I/O besides reading the file.
//! - [`diag`]: renders problems in files as `--> file:line:col` with a caret.
//! - `suggest`: the one did-you-mean (likely typos of keys, names, ids).
//! - [`digest`]: short sha256 hex names (cache folders, environments, ids).
//! - [`signature`]: the root-cause taxonomy shared by everything below.
//! - [`record`]: one line of `results.jsonl`, the stable output format, and the run manifest.
//! - [`inventory`]: the host's GPUs (declared or from `nvidia-smi`) and arch matching.
//! - [`schedule`]: which cell runs next on which GPUs, for live runs and `plan --simulate`.
//! - [`exec`]: the only module that starts processes (process groups, bounded logs, teardown,
//!   the reaper).
//! - [`watchdog`]: progress (output, CPU, GPU) and the no-progress verdict.
//! - [`provision`]: environments with a cell's pins, installed once per pin set.
//! - [`engines`]: how a server engine is launched, told ready and asked.
//! - [`run`]: `gpucompat run`: the dispatcher, one cell's lifecycle, the run folder.
//! - [`slurm`]: `gpucompat run --executor slurm`: the cells as Slurm job arrays, each task the
//!   same `gpucompat run` into a shard, collected into one run folder.
//! - [`classify`]: names a failed cell's root cause from its log, exit status and watchdog verdict
//!   (built-in rules in `classify/rules.toml`, plus a matrix file's `[[rules]]`).
//! - [`report`]: compatibility tables (Markdown, CSV, JSON, JUnit), the static HTML dashboard and
//!   SVG plots from run folders, with history across nightlies; one serializable view model.
//! - [`compare`]: a baseline run against a candidate, cell by cell, in one exhaustive rule table.
//! - [`bisect`]: `gpucompat bisect`: the first bad version of an axis, or the bumped packages
//!   that break a cell (ddmin), each probe a real cell run through [`run`]; `bisect.json`.
//! - [`redact`]: tokens (GitHub, Hugging Face, bearer headers) masked before text is written
//!   to a report or posted.
//! - [`gate`]: `gpucompat gate`: a dependency bump's cells on both pin sets, paired; confirmed
//!   regressions block, with their culprit; `gate.json`.
//! - [`github`]: the gate's sticky PR comment and check run, a nightly's issues (octocrab).
//! - [`cli`]: the command line; each subcommand is a thin wrapper over the modules above.
//! - [`errors`]: exit codes and the error type the command line prints.

pub mod bisect;
pub mod classify;
pub mod cli;
pub mod compare;
pub mod diag;
pub mod digest;
pub mod engines;
pub mod env;
pub mod errors;
pub mod exec;
pub mod filter;
pub mod forensics;
pub mod gate;
pub mod github;
mod http;
pub mod inventory;
pub mod matrix;
pub mod merge;
pub mod provision;
pub mod record;
pub mod redact;
pub mod report;
pub mod run;
pub mod schedule;
pub mod signature;
pub mod slurm;
mod suggest;
pub mod watchdog;
