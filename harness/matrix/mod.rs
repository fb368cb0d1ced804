//! Matrix files: parse, expand with GitHub Actions semantics, validate into a [`Plan`].
//!
//! Two stages, as ripgrep and nextest do it: `raw` mirrors the TOML with a span on every value a
//! user can get wrong; `load` runs the checks of `validate`, expands the cells and renders them
//! with `render`.
//! Problems are collected, not thrown: a file with five mistakes gets five diagnostics at once
//! (a file that is not valid TOML gets its syntax errors and what can be checked reliably around
//! them). [`expand`] is GitHub Actions' include/exclude algorithm, pure; [`ids`] names cells;
//! [`template`] fills `{key}`; [`gpus`] reads GPU specs. [`load_for_inspection`] is [`load()`] for
//! commands that only look at a matrix (`matrix expand`, `plan`).
//! The module reads the matrix file and nothing else: no processes, no network.

pub mod expand;
pub mod gpus;
pub mod ids;
mod load;
mod plan;
mod raw;
mod render;
pub mod template;
mod validate;

pub use load::{
    DEFAULT_NO_PROGRESS, DEFAULT_TIMEOUT, LoadError, Loaded, from_str, load, load_for_inspection,
    load_verbose,
};
pub use plan::*;
