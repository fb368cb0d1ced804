//! One integration-test binary driving the real `gpucompat` CLI (one module per capability).
#![allow(
    clippy::disallowed_methods,
    reason = "tests start servers and read the environment themselves"
)]

mod util;

mod bisect;
mod classify;
mod corpus;
mod cuda_errors;
mod demo;
mod engines;
mod gate;
pub(crate) mod github;
mod hang;
mod hardening;
mod matrix;
mod matrix_cli;
mod matrix_errors;
mod matrix_github;
mod matrix_good;
mod matrix_ids;
mod matrix_props;
mod merge;
mod newcomer;
mod provision;
mod report;
mod run;
mod schedule;
mod slurm;
mod workflows;
mod wrapped;
