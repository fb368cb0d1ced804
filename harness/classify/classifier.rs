//! The classifier's public face: evidence in, one [`Classification`] out.
//!
//! Choosing the root cause, in order:
//! 1. the first fatal line of the log (a higher-ranked fatal line a few lines later, in the same
//!    error block, replaces it): a fatal error before a hang or a crash wins over both;
//! 2. the watchdog's verdict (`deadlock`, `timeout`), pointing at the log's hang lines if any;
//! 3. hang lines seen often enough (vLLM's repeating "no shared memory broadcast block");
//! 4. the exit status: SIGSEGV (139) is a `segfault`, SIGILL an `illegal_instruction`, SIGKILL
//!    with the OOM killer's mark in the log (`Killed`) an `oom`;
//! 5. the first weak line (a generic exception, "worker died", a bare `Killed`);
//! 6. otherwise `unknown`, with no line.

use super::fingerprint::fingerprint;
use super::rules::Table;
use super::scan::{self, Excerpt, Findings, Hit};
use crate::matrix::UserRule;
use crate::record::Exit;
use crate::signature::Signature;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

/// The harness watchdog's verdict on a cell that did not end by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No progress (no output, CPU or GPU activity) for the no-progress window.
    Deadlock,
    /// Still busy when the deadline passed.
    Timeout,
}

impl Verdict {
    pub fn signature(self) -> Signature {
        match self {
            Verdict::Deadlock => Signature::Deadlock,
            Verdict::Timeout => Signature::Timeout,
        }
    }
}

/// What is known about a cell's end besides its log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evidence {
    /// How the main process ended, when it ended by itself.
    pub exit: Option<Exit>,
    /// The watchdog's verdict, when it stopped the cell.
    pub watchdog: Option<Verdict>,
}

/// The root cause of one failed cell, as named from its log and evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Classification {
    pub signature: Signature,
    /// The normalised root-cause line, for deduplication across nights and hosts.
    pub fingerprint: Option<String>,
    /// 1-based line number of the root cause; `None` when no line names it.
    pub line: Option<u64>,
    /// A few lines around the root cause (or the end of the log when no line names it).
    pub excerpt: Option<String>,
    /// Infrastructure fault (runner, network, disk, hardware): never a regression.
    pub spurious: bool,
    /// What the failure means.
    pub explanation: Option<String>,
    /// What to try.
    pub hint: Option<String>,
    /// The id of the rule that decided (`rules.toml`, or `matrix-rule-N` for the matrix file's).
    pub rule: Option<String>,
    /// 1-based line number of the excerpt's first line.
    pub excerpt_start: Option<u64>,
}

impl Classification {
    /// Nothing in the log or the evidence names a failure.
    pub fn unknown() -> Classification {
        Classification {
            signature: Signature::Unknown,
            fingerprint: None,
            line: None,
            excerpt: None,
            spurious: false,
            explanation: None,
            hint: None,
            rule: None,
            excerpt_start: None,
        }
    }
}

/// The classifier could not be built (a user rule's pattern does not compile).
#[derive(Debug, thiserror::Error)]
pub enum ClassifyError {
    #[error("invalid pattern in rule `{rule}`: `{pattern}`")]
    Pattern {
        rule: String,
        pattern: String,
        #[source]
        source: regex::Error,
    },
    #[error("the rules do not compile together")]
    Set {
        #[source]
        source: regex::Error,
    },
    #[error("the built-in rule table is invalid")]
    Table {
        #[source]
        source: Box<toml::de::Error>,
    },
}

/// Names root causes. Built once, shared freely (`Send + Sync`, cheap to clone).
#[derive(Debug, Clone)]
pub struct Classifier {
    table: Arc<Table>,
}

/// The built-in table, compiled on first use. It is data compiled into the binary and checked by
/// the tests in `rules.rs`, so failing here is a build defect, not a runtime condition.
static BUILTIN: LazyLock<Arc<Table>> = LazyLock::new(|| {
    #[expect(
        clippy::expect_used,
        reason = "the embedded rules.toml is validated by unit tests"
    )]
    Arc::new(Table::build(&[]).expect("built-in rules.toml compiles"))
});

impl Classifier {
    /// The built-in rule table only.
    pub fn builtin() -> Classifier {
        Classifier {
            table: Arc::clone(&BUILTIN),
        }
    }

    /// The built-in table plus a matrix file's `[[rules]]`, which are tried first: on the same
    /// line a user rule beats any built-in one.
    pub fn with_rules(user: &[UserRule]) -> Result<Classifier, ClassifyError> {
        if user.is_empty() {
            return Ok(Classifier::builtin());
        }
        Ok(Classifier {
            table: Arc::new(Table::build(user)?),
        })
    }

    /// Classifies a log read from `reader` (streamed; memory stays bounded).
    pub fn classify_reader<R: io::Read>(
        &self,
        reader: R,
        evidence: &Evidence,
    ) -> io::Result<Classification> {
        let found = scan::scan(&self.table, reader)?;
        Ok(self.resolve(found, evidence))
    }

    /// Classifies a log file. Errors name the path.
    pub fn classify_file(&self, path: &Path, evidence: &Evidence) -> io::Result<Classification> {
        let file = std::fs::File::open(path).map_err(|err| with_path(path, err))?;
        self.classify_reader(file, evidence)
            .map_err(|err| with_path(path, err))
    }

    fn resolve(&self, found: Findings, evidence: &Evidence) -> Classification {
        let Findings {
            strong,
            weak,
            weak_by_signature,
            hangs,
            tail,
            ..
        } = found;
        if let Some(hit) = strong {
            return self.from_hit(hit);
        }
        if let Some(verdict) = evidence.watchdog {
            let (explanation, hint) = match verdict {
                Verdict::Deadlock => (
                    "the harness watchdog saw no progress (no output, CPU or GPU activity) for the no-progress window, and the log shows no fatal error before the hang",
                    "find the process that stopped first (a JIT compile lock held across ranks, a collective missing a rank); `py-spy dump` of each process shows where it waits",
                ),
                Verdict::Timeout => (
                    "the cell was still busy when its deadline passed, and the log shows no fatal error",
                    "a cold JIT compile can take minutes: raise the cell's `timeout` if the work was progressing, or look for the slow phase",
                ),
            };
            let mut out = match hangs.into_iter().next() {
                Some(seen) => self.from_hit(seen.first),
                None => from_tail(&tail),
            };
            out.signature = verdict.signature();
            out.spurious = false;
            out.explanation = Some(explanation.to_owned());
            out.hint = Some(hint.to_owned());
            if out.line.is_none() {
                out.rule = None;
            }
            return out;
        }
        if let Some(seen) = hangs
            .into_iter()
            .find(|h| h.count >= self.table.rules[h.first.rule].min_count)
        {
            return self.from_hit(seen.first);
        }
        if let Some(signal) = evidence.exit.as_ref().and_then(exit_signal) {
            let weak_of = |sig: Signature| {
                weak_by_signature
                    .iter()
                    .find(|(s, _)| *s == sig)
                    .map(|(_, hit)| hit.clone())
            };
            match signal {
                SIGKILL => {
                    if let Some(hit) = weak_of(Signature::Oom) {
                        return self.from_hit(hit);
                    }
                }
                SIGSEGV | SIGBUS => {
                    return from_signal(
                        &tail,
                        Signature::Segfault,
                        signal,
                        "a native crash in host code (C++/CUDA extension, driver library), or a too-small /dev/shm for SIGBUS",
                        "run the cell with `PYTHONFAULTHANDLER=1` (and `ulimit -c unlimited`) to get the native stack; check extensions built against another torch",
                    );
                }
                SIGILL => {
                    return from_signal(
                        &tail,
                        Signature::IllegalInstruction,
                        signal,
                        "the CPU hit an instruction it does not support: a build for newer CPU features than the runner has",
                        "use a build for the runner's CPU, or a runner with the required instruction set",
                    );
                }
                _ => {}
            }
        }
        if let Some(hit) = weak {
            return self.from_hit(hit);
        }
        let failed = evidence
            .exit
            .is_some_and(|exit| exit.signal.is_some() || exit.code.is_some_and(|c| c != 0));
        if failed {
            from_tail(&tail)
        } else {
            Classification::unknown()
        }
    }

    fn from_hit(&self, hit: Hit) -> Classification {
        let rule = &self.table.rules[hit.rule];
        let mut out = Classification {
            signature: rule.signature,
            fingerprint: Some(fingerprint(&hit.text)),
            line: Some(hit.line),
            excerpt: Some(excerpt_text(&hit.excerpt)),
            spurious: rule.spurious,
            explanation: rule.explanation.clone(),
            hint: rule.hint.clone(),
            rule: Some(rule.id.clone()),
            excerpt_start: Some(hit.excerpt.start),
        };
        if let Some(context) = hit.tainted_by.map(|i| &self.table.rules[i]) {
            out.spurious = true;
            out.explanation = match (&rule.explanation, &context.explanation) {
                (Some(a), Some(b)) => Some(format!("{a}; {b}")),
                (a, b) => a.clone().or_else(|| b.clone()),
            };
            out.hint = context.hint.clone().or(out.hint);
        }
        out
    }
}

const SIGILL: i32 = 4;
const SIGBUS: i32 = 7;
const SIGKILL: i32 = 9;
const SIGSEGV: i32 = 11;

/// The signal that ended a process: given directly, as a negative code (Python's `returncode`),
/// or as the shell's `128 + n`.
fn exit_signal(exit: &Exit) -> Option<i32> {
    exit.signal.or(match exit.code {
        Some(code) if (129..160).contains(&code) => Some(code - 128),
        Some(code) if (-64..0).contains(&code) => Some(-code),
        _ => None,
    })
}

fn from_signal(
    tail: &Excerpt,
    signature: Signature,
    signal: i32,
    what: &str,
    hint: &str,
) -> Classification {
    let mut out = from_tail(tail);
    out.signature = signature;
    out.explanation = Some(format!(
        "the process died of signal {signal} ({}) and the log names no earlier cause: {what}",
        signal_name(signal)
    ));
    out.hint = Some(hint.to_owned());
    out
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        SIGILL => "SIGILL",
        SIGBUS => "SIGBUS",
        SIGKILL => "SIGKILL",
        SIGSEGV => "SIGSEGV",
        _ => "signal",
    }
}

/// No line names the cause: show the end of the log.
fn from_tail(tail: &Excerpt) -> Classification {
    let mut out = Classification::unknown();
    if !tail.lines.is_empty() {
        out.excerpt = Some(excerpt_text(tail));
        out.excerpt_start = Some(tail.start);
    }
    out
}

fn excerpt_text(excerpt: &Excerpt) -> String {
    excerpt.lines.join("\n")
}

/// An I/O error that says which file it was about.
#[derive(Debug)]
struct PathError {
    path: PathBuf,
    source: io::Error,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read `{}`", self.path.display())
    }
}

impl std::error::Error for PathError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn with_path(path: &Path, source: io::Error) -> io::Error {
    io::Error::new(
        source.kind(),
        PathError {
            path: path.to_path_buf(),
            source,
        },
    )
}
