//! `gpucompat bisect`: the version, or the set of bumped packages, that introduced a failure.
//!
//! - [`search`]: the version search, pure and tri-state (good, bad, unknown), ends first.
//! - [`ddmin`]: attribution, pure: delta debugging over the packages a bump moved.
//! - [`verdict`]: the one table from a cell's record to a probe's verdict.

pub mod ddmin;
pub mod search;
pub mod verdict;
