//! `gpucompat gate`: one answer for a pull request that bumps pins: which cells it breaks, which
//! it fixes, which were already broken.
//!
//! - [`pins`]: the two pin sets (files, lists, or git revisions).
//! - [`driver`]: both sides through [`crate::run::execute`], pairing ([`crate::compare`]), one
//!   confirmation retry per regression, attribution ([`crate::bisect`]) of confirmed ones.
//! - [`summary`]: `gate.json`, the verdict.
//! - [`comment`]: the verdict as one PR comment, under GitHub's size limit.
//!
//! # The gate folder
//!
//! `base/` and `head/` are run folders (the cells with the base and the head pins; a cell keeps
//! its id on both sides), `head-retry/` the confirmation retries, `attribution/<cell>/` a
//! bisect folder per attributed regression, `base-pins.txt` and `head-pins.txt` the two sets,
//! and `gate.json`, rewritten atomically after each step. `--resume` continues a gate and runs
//! only the cells that have no record yet.
//!
//! # The verdict
//!
//! Only a confirmed regression blocks (exit 1): a cell that passed (or was flaky) on base and
//! fails on head, and fails again on one retry. A retry that passes makes it `flaky`; a retry
//! that is an infrastructure fault makes it `spurious`. Cells failing on both sides are
//! `still_failing`, never blamed on the bump (Dr.CI's rule); infrastructure faults on either
//! side are `spurious` and never block.

pub mod comment;
pub mod driver;
pub mod pins;
pub mod summary;

pub use driver::{GateError, Request, gate};
pub use summary::GateFile;
