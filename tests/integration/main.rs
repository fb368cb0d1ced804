//! One integration-test binary driving the real `gpucompat` CLI (one module per capability).

mod util;

mod bisect;
mod classify;
mod corpus;
mod demo;
mod engines;
mod matrix;
mod matrix_cli;
mod matrix_errors;
mod matrix_github;
mod matrix_good;
mod matrix_ids;
mod matrix_props;
mod provision;
mod report;
mod run;
mod schedule;
