//! `gpucompat bisect`: the version, or the set of bumped packages, that introduced a failure.
//!
//! - [`search`]: the version search, pure and tri-state (good, bad, unknown), ends first.
//! - [`ddmin`]: attribution, pure: delta debugging over the packages a bump moved.
//! - [`verdict`]: the one table from a cell's record to a probe's verdict.
//! - [`index`]: candidate versions from a PEP 691 index and `--find-links` folders.
//! - [`probes`]: the probe cells: the chosen cell re-rendered with another axis value, or with a
//!   pin set; pin files; bumps.
//! - [`driver`]: runs the probes as real cells through [`crate::run::execute`], reuses known
//!   records, resumes, writes `bisect.json`.
//! - [`summary`]: `bisect.json` itself.
//!
//! # The bisect folder
//!
//! A bisect folder is a run folder (`results.jsonl`, `logs/`, `plan.json`, `manifest.json`,
//! written by the regular runner, one probe cell at a time) plus `bisect.json`. Probe cells have
//! ids of their own, so records never collide: the matrix's id for a probed value
//! (`0.6.10-sm_90`), `<cell>-attr-<8 hex>` for an attribution pin set, `<id>-tryN` for a further
//! attempt at the same probe. Each record keeps the probe's real values and pins.
//!
//! # `bisect.json` (format_version 1; fields are only added)
//!
//! | field | meaning |
//! |---|---|
//! | `format_version` | 1 |
//! | `kind` | `version` or `attribution` |
//! | `state` | `running`, `finished`, `interrupted` (a `--resume` continues it) |
//! | `matrix`, `matrix_hash` | the matrix file and the sha256 of its text |
//! | `cell` | the id, in the matrix, of the cell the bisect explains (the report shows it there) |
//! | `values` | that cell's values (version bisect: the bad end's); `gpucompat report` matches them, minus the bisected axis, against a run's cells |
//! | `inputs` | what was asked: `axis`, `good`, `bad` or `base`, `head` (pins); `signature` (given), `retries`, `candidates_from`, `runs_from` (reused run folders) |
//! | `candidates` | version bisect: every value searched, oldest first (PEP 440 order) |
//! | `bumps` | attribution: `[{package, base, head}]`, a version `null` where a set lacks the package |
//! | `signature` | the failure bisected: `--signature`, else the bad end's |
//! | `first_bad`, `last_good` | version bisect: the answer; when not converged, the change is in `(last_good, first_bad]` (either `null` when an end failed) |
//! | `culprits` | attribution: the packages of the smallest failing set of bumps |
//! | `converged` | the answer is proven (`false`: `reason` says why not) |
//! | `reason` | why it did not converge |
//! | `probes` | distinct values or pin sets probed |
//! | `bound` | version bisect: `ceil(log2 n) + 2`, what a noiseless search needs at most |
//! | `runs` | every probe attempt, in order: `value` or `bumps`, `pins`, `cell` (its id in `results.jsonl`), `attempt`, `verdict` (`good`/`bad`/`unknown`), `status`, `signature`, `phase`, `log` (relative to the bisect folder; reused logs are copied in), `reason`, `flaky`, `reused_from`, `duration_s` |
//! | `started_at`, `finished_at` | RFC 3339 |

pub mod ddmin;
pub mod driver;
pub mod index;
pub mod probes;
pub mod search;
pub mod summary;
pub mod verdict;

pub use driver::{BisectError, Ended, Mode, Request, bisect};
