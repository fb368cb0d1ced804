//! One integration-test binary driving the real `gpucompat` CLI (one module per capability).

mod util;

mod matrix;
mod run;
