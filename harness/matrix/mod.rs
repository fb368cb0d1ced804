//! Matrix files: parse, expand with GitHub Actions semantics, validate into a [`Plan`].

mod plan;

pub use plan::*;
