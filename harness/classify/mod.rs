//! Failure classification: name the root cause of a failed cell from its log and how it ended
//! (docs/signatures.md).
//!
//! Brief overview:
//! - `rules.toml` is the one table of what log lines mean: pattern, signature, precedence,
//!   whether it is an infrastructure fault, an explanation and a hint, with example lines that
//!   the tests run. Matrix files add `[[rules]]` on top ([`Classifier::with_rules`]).
//! - [`Classifier`] streams a log once (bounded memory, invalid UTF-8 and binary bytes welcome):
//!   a trigger-word prefilter skips most lines unexamined, the rest are stripped of process,
//!   rank, timestamp and level prefixes and matched against the rules their words gate.
//! - The root cause is the first fatal line, not the last or the most frequent: errors that
//!   follow it (an NCCL watchdog on another rank, "worker died", "core dumped") are secondary.
//!   The watchdog's [`Verdict`] and the exit status ([`Evidence`]) decide only when the log
//!   names no fatal error.
//! - A [`Classification`] carries the signature, a [`fingerprint()`] (the root-cause line with
//!   addresses, numbers, ranks, paths and times normalised away), the line number and an excerpt,
//!   and which evidence decided it ([`DecidedBy`], with the [`Clue`]s: rule and line, exception
//!   type, CUDA/NCCL error, exit, watchdog).
//!
//! Module layout: `classifier` (public types, choosing the root cause), `scan` (the streaming
//! pass), `line` (prefix stripping), `rules` (the table), `explain` (the evidence behind a
//! verdict), `fingerprint`, `repetition` (a generation that loops), `soup` (a generation of
//! many writing systems at once), `answer` (an empty answer printed one key a line) and `frames` (a hang shown by py-spy's frames alone), all looked
//! for in the log's last lines when nothing else names a failure; last, `lexical` (a linear model
//! of the last lines' words, trained on the corpus) for a log the rules leave `unknown`.

mod answer;
mod classifier;
mod explain;
mod fingerprint;
mod frames;
mod gates;
mod lexical;
mod line;
mod repetition;
mod rules;
mod scan;
mod soup;

pub(crate) use line::strip_ansi;

pub use classifier::{Classification, Classifier, ClassifyError, Evidence, Verdict};
pub use explain::{Clue, ClueKind, DecidedBy};
pub use fingerprint::fingerprint;
pub use rules::BUILTIN_RULES;
