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
//!
//! Where that leaves the log `unknown` without having called it an infrastructure fault or
//! something outside the taxonomy on purpose (nothing matched, or only a line that names no cause:
//! a generic exception, a reported death), the lexical model reads the words of the log's last
//! lines (`lexical.rs`) and names a signature if it is sure enough.
//!
//! Each step that decides says so ([`DecidedBy`]) and keeps its evidence (`explain.rs`): the rule
//! and line, what the line names, the wrapper it replaced, the exit and the watchdog's verdict.

use super::answer::empty_message;
use super::explain::{self, Clue, ClueKind, DecidedBy};
use super::fingerprint::fingerprint;
use super::frames::py_spy_frames;
use super::lexical::{self, Model, Words};
use super::line::{Cleaned, Level, clean, delivered};
use super::repetition::{
    asked_in_object, repeated_lines, repeated_phrase, repeated_sentences, token_zero,
    token_zero_below_label,
};
use super::rules::{Kind, Rule, Table};
use super::scan::{self, Excerpt, Findings, Hit, Scanned};
use super::soup::mixed_scripts;
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
    /// A spurious fault a fresh launch avoids (a port taken before the server bound it): the
    /// harness runs the attempt again at once.
    #[serde(skip)]
    pub relaunch: bool,
    /// What the failure means.
    pub explanation: Option<String>,
    /// What to try.
    pub hint: Option<String>,
    /// The id of the rule that decided (`rules.toml`, or `matrix-rule-N` for the matrix file's).
    pub rule: Option<String>,
    /// 1-based line number of the excerpt's first line.
    pub excerpt_start: Option<u64>,
    /// Which evidence decided the signature; `None` when nothing did (`unknown`, no line).
    pub decided_by: Option<DecidedBy>,
    /// The evidence: the rule and line, what the line names (exception, CUDA/NCCL error), the
    /// exit and the watchdog's verdict where given.
    pub evidence: Vec<Clue>,
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
            relaunch: false,
            explanation: None,
            hint: None,
            rule: None,
            excerpt_start: None,
            decided_by: None,
            evidence: Vec::new(),
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
    /// The lexical model, for a log the rules leave `unknown` (`None`: rules only).
    lexical: Option<Arc<Model>>,
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
            lexical: lexical::BUILTIN.clone(),
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
            lexical: lexical::BUILTIN.clone(),
        })
    }

    /// The same classifier without the lexical model: rules, exit and watchdog only.
    pub fn rules_only(&self) -> Classifier {
        Classifier {
            table: Arc::clone(&self.table),
            lexical: None,
        }
    }

    /// This classifier with a lexical model read from `text` (tests of what reads with it).
    #[cfg(test)]
    pub(crate) fn with_test_model(self, text: &str) -> Classifier {
        self.with_lexical_model(Model::parse(text).expect("test model"))
    }

    #[cfg(test)]
    fn with_lexical_model(self, model: Model) -> Classifier {
        Classifier {
            lexical: Some(Arc::new(model)),
            ..self
        }
    }

    /// Classifies a log, and also returns the words of its last lines as the lexical model
    /// reads them (for training it): one pass over the log for both.
    pub fn classify_with_words<R: io::Read>(
        &self,
        reader: R,
        evidence: &Evidence,
    ) -> io::Result<(Classification, Words)> {
        let scanned = scan::scan(&self.table, reader)?;
        let words = lexical::words(&scanned.tail_text);
        Ok((self.resolve(scanned, evidence), words))
    }

    /// The built-in or user rule with this id.
    fn rule(&self, id: &str) -> Option<&Rule> {
        self.table.rules.iter().find(|rule| rule.id == id)
    }

    /// Classifies a log read from `reader` (streamed; memory stays bounded).
    pub fn classify_reader<R: io::Read>(
        &self,
        reader: R,
        evidence: &Evidence,
    ) -> io::Result<Classification> {
        let scanned = scan::scan(&self.table, reader)?;
        Ok(self.resolve(scanned, evidence))
    }

    /// Classifies a log file. Errors name the path.
    pub fn classify_file(&self, path: &Path, evidence: &Evidence) -> io::Result<Classification> {
        let file = std::fs::File::open(path).map_err(|err| with_path(path, err))?;
        self.classify_reader(file, evidence)
            .map_err(|err| with_path(path, err))
    }

    /// `found` was decided by a complaint a process may survive (a background rule: a library's
    /// import-time warning). What the harness saw of a cell that served (its answer failed the
    /// check, the server's error answer) says more than such a line.
    pub fn decided_by_complaint(&self, found: &Classification) -> bool {
        found.decided_by == Some(DecidedBy::LexicalModel)
            || found
                .rule
                .as_deref()
                .and_then(|id| self.rule(id))
                .is_some_and(|rule| rule.kind == Kind::Background)
    }

    fn resolve(&self, scanned: Scanned, evidence: &Evidence) -> Classification {
        // The model reads the same last lines the tail checks read, each cleaned as the rules
        // read it: only for a verdict left open to it, not for every log the rules named.
        let Scanned { found, tail_text } = scanned;
        let tail = found.tail.clone();
        let mut out = self.decide(found, &tail_text, evidence);
        if let Some(model) = self.lexical.as_ref().filter(|_| self.open_to_lexical(&out)) {
            guess(&mut out, model, &lexical::words(&tail_text), &tail);
        }
        // How the process ended and what the watchdog said are evidence whatever decided.
        if out.decided_by.is_some() || out.excerpt.is_some() {
            out.evidence
                .extend(evidence.exit.as_ref().and_then(explain::exit_clue));
            if let Some(verdict) = evidence.watchdog {
                out.evidence.push(Clue::new(
                    ClueKind::Watchdog,
                    verdict.signature().as_str(),
                    None,
                ));
            }
        }
        out
    }

    /// `tail_text` is the text of the log's last lines (see [`Scanned`]).
    fn decide(&self, found: Findings, tail_text: &[String], evidence: &Evidence) -> Classification {
        let Findings {
            strong,
            wrapped,
            weak,
            weak_by_signature,
            background,
            hangs,
            tail,
        } = found;
        if let Some(hit) = strong {
            let mut out = self.name_hit(hit, DecidedBy::FatalLine);
            if let Some(first) = wrapped {
                let rule = &self.table.rules[first.rule];
                out.evidence
                    .push(Clue::new(ClueKind::Wrapped, &rule.id, Some(first.line)));
            }
            return out;
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
                Some(seen) => {
                    let mut out = self.name_hit(seen.first, DecidedBy::Watchdog);
                    out.evidence.push(hang_clue(seen.count, &out));
                    out
                }
                None => from_tail(&tail),
            };
            out.decided_by = Some(DecidedBy::Watchdog);
            out.signature = verdict.signature();
            out.spurious = false;
            out.explanation = Some(explanation.to_owned());
            out.hint = Some(hint.to_owned());
            if out.line.is_none() {
                out.rule = None;
            }
            return out;
        }
        // A process that died of a crash signal crashed: a stack dump in its log is no sign of a
        // hang (those rules look only at logs where nothing failed).
        let exit_signal = evidence.exit.as_ref().and_then(exit_signal);
        let crashed =
            exit_signal.is_some_and(|signal| matches!(signal, SIGSEGV | SIGBUS | SIGILL | SIGFPE));
        let errors_seen = weak.is_some() || crashed;
        if let Some(seen) = hangs.into_iter().find(|h| {
            let rule = &self.table.rules[h.first.rule];
            h.count >= rule.min_count
                && !(rule.only_without_errors && errors_seen)
                && (!rule.ends_log || ends_the_log(&tail, h.last))
        }) {
            let mut out = self.name_hit(seen.first, DecidedBy::HangLines);
            out.evidence.push(hang_clue(seen.count, &out));
            return out;
        }
        // A process that raised an exception and was SIGKILLed after it was not killed for
        // memory: engines end their own process tree with SIGKILL once a child fails (SGLang's
        // `kill_process_tree`, which logs "kill_process_tree called"), and the shell then says
        // `Killed` (exit 137). The exception is the cause; `Killed` names nothing.
        let first_of = |sig: Signature| {
            weak_by_signature
                .iter()
                .find(|(s, _)| *s == sig)
                .map(|(_, hit)| hit.clone())
        };
        // A deadline that passed before the kill is such a cause too: the tree was ended after it.
        let deadline = weak
            .as_ref()
            .filter(|w| self.table.rules[w.rule].signature == Signature::Timeout)
            .cloned();
        let raised = [first_of(Signature::Unknown), deadline]
            .into_iter()
            .flatten()
            .filter(|e| first_of(Signature::Oom).is_some_and(|killed| e.line < killed.line))
            .min_by_key(|e| e.line);
        if let Some(signal) = exit_signal {
            match signal {
                SIGKILL if raised.is_none() => {
                    if let Some(hit) = first_of(Signature::Oom) {
                        return self.name_hit(hit, DecidedBy::ExitSignal);
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
        // The first weak line decides, unless it only reports a death (a launcher's
        // ChildFailedError, Ray's worker-died): then a weak line that names why (a bare `Killed`)
        // says more.
        // A weak wrapper of a named signature (a deadline passing, `timeout-exception`) gives way
        // only to a later weak line that names a cause of its own (a refusal, a missing
        // dependency): what follows a deadline is mostly its consequence (a peer's abort, the
        // tree killed after it).
        let (weak, report) = match weak {
            Some(first) if self.table.rules[first.rule].wrapper => {
                let own = self.table.rules[first.rule].signature;
                let gives_way_to = |sig: Signature| {
                    own == Signature::Unknown
                        || matches!(
                            sig,
                            Signature::UnsupportedConfig | Signature::DependencyError
                        )
                };
                match weak_by_signature.into_iter().find(|(sig, _)| {
                    *sig != Signature::Unknown && *sig != own && gives_way_to(*sig)
                }) {
                    Some((Signature::Oom, _)) if raised.is_some() => (raised, Some(first)),
                    Some((_, why)) => (Some(why), Some(first)),
                    // A death reported with no weak line saying why: a complaint the process
                    // might have survived (a background line) is then the best account of it.
                    None if own == Signature::Unknown && raised.is_none() => {
                        match background.clone() {
                            Some(why) => (Some(why), Some(first)),
                            None => (Some(first), None),
                        }
                    }
                    None => (Some(first), None),
                }
            }
            other => (other, None),
        };
        if let Some(hit) = weak {
            let mut out = self.name_hit(hit, DecidedBy::WeakLine);
            if let Some(report) = report {
                let rule = &self.table.rules[report.rule];
                out.evidence.push(Clue::new(
                    ClueKind::DeathReport,
                    &rule.id,
                    Some(report.line),
                ));
            }
            return out;
        }
        // The checks of the last lines read them cleaned, once.
        let cleaned: Vec<Cleaned> = tail_text.iter().map(|l| clean(l.as_bytes())).collect();
        if let Some(out) = degenerate_output(&tail, tail_text, &cleaned) {
            return out;
        }
        if let Some(out) = stack_only(&tail, &cleaned) {
            return out;
        }
        // A complaint the process may survive is no account of a process killed by a signal
        // (SIGKILL with no sign of memory, a crash): that stays unnamed.
        if let Some(hit) = background.filter(|_| exit_signal.is_none()) {
            return self.name_hit(hit, DecidedBy::WeakLine);
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

    /// Whether the verdict leaves the log to the lexical model: `unknown`, not an infrastructure
    /// fault, and decided by nothing or by a line that names no cause.
    pub fn open_to_lexical(&self, out: &Classification) -> bool {
        out.signature == Signature::Unknown
            && !out.spurious
            && out.decided_by.is_none_or(|d| d == DecidedBy::WeakLine)
            && out
                .rule
                .as_deref()
                .is_none_or(|id| self.rule(id).is_some_and(|rule| rule.names_nothing))
    }

    fn name_hit(&self, hit: Hit, decided_by: DecidedBy) -> Classification {
        let rule = &self.table.rules[hit.rule];
        let mut evidence = vec![Clue::new(ClueKind::Rule, &rule.id, Some(hit.line))];
        evidence.extend(explain::line_clues(&hit.text, hit.line));
        let mut out = Classification {
            signature: rule.signature,
            fingerprint: Some(fingerprint(&hit.text)),
            line: Some(hit.line),
            excerpt: Some(excerpt_text(&hit.excerpt)),
            spurious: rule.spurious,
            relaunch: rule.spurious && rule.relaunch,
            explanation: rule.explanation.clone(),
            hint: rule.hint.clone(),
            rule: Some(rule.id.clone()),
            excerpt_start: Some(hit.excerpt.start),
            decided_by: Some(decided_by),
            evidence,
        };
        if let Some(context) = hit.tainted_by.map(|i| &self.table.rules[i]) {
            out.evidence
                .push(Clue::new(ClueKind::Infrastructure, &context.id, None));
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

/// A hang rule's sightings, as evidence.
fn hang_clue(count: u32, named: &Classification) -> Clue {
    let rule = named.rule.as_deref().unwrap_or_default();
    Clue::new(
        ClueKind::HangLines,
        format!(
            "{rule} seen {count} time{}",
            if count == 1 { "" } else { "s" }
        ),
        named.line,
    )
}

/// Whether the log ends at the line `last`: nothing after it but blank lines and the fence that
/// closes a pasted block. The tail holds the log's last lines; a sighting before them has at
/// least that many lines after it.
fn ends_the_log(tail: &Excerpt, last: u64) -> bool {
    let Some(through) = (last + 1).checked_sub(tail.start) else {
        return false;
    };
    tail.lines
        .iter()
        .skip(usize::try_from(through).unwrap_or(usize::MAX))
        .all(|line| line.trim().trim_start_matches('`').is_empty())
}

const SIGILL: i32 = 4;
const SIGBUS: i32 = 7;
const SIGFPE: i32 = 8;
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
    out.decided_by = Some(DecidedBy::ExitSignal);
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

/// The rule ids of the checks on what the process printed last (they have no pattern: see
/// `repetition.rs` and `soup.rs`).
const REPEATED_OUTPUT: &str = "repeated-output";
const TOKEN_SOUP: &str = "token-soup";
const REPEATED_LINES: &str = "repeated-lines";
const EMPTY_MESSAGE: &str = "empty-message";
const PY_SPY_FRAMES: &str = "py-spy-frames";

/// A check of the line at an index of the kept text: what it found and why it is degenerate.
type LineCheck<'a> = dyn Fn(usize, &str) -> Option<(String, String)> + 'a;

/// No line names a failure, but what the process printed last is a degenerate generation: one
/// of the last lines (prefixes stripped) repeats a phrase over and over or is token soup of four
/// writing systems and more, or the log ends with a few sentences printed over and over. A weak
/// line of its own: it decides only where nothing else does.
fn degenerate_output(
    tail: &Excerpt,
    text: &[String],
    cleaned: &[Cleaned],
) -> Option<Classification> {
    // `text` ends with the excerpt's lines: the line checks look at those, the loop over whole
    // lines at all of `text`, and so does token 0 (a run of `!` or `\u0000` after an output's
    // label, a text broken off into a run of `!` longer than a person types), which is no
    // healthy line anywhere (a response printed as indented JSON ends with its metadata).
    let first_shown = text.len().saturating_sub(tail.lines.len());
    let first = |from: usize, check: &LineCheck| {
        cleaned
            .iter()
            .enumerate()
            .skip(from)
            .find_map(|(i, line)| check(i, &line.text).map(|found| (i, found)))
    };
    // A run of `!` in a message that a request holds is the prompt, whichever line its role is on.
    let lines: Vec<&str> = cleaned.iter().map(|line| line.text.as_str()).collect();
    let asked = |i: usize, line: &str| token_zero(line).is_some() && asked_in_object(&lines, i);
    let repeats = |phrase: String| {
        let phrase = phrase.trim().to_owned();
        let why = if phrase == "!" {
            "the output is `!` over and over (token 0 of GPT-2-style vocabularies, what an argmax over NaN logits picks) and the log names no error: a degenerate generation".to_owned()
        } else if phrase == "NUL" {
            "the output is NUL (`\\u0000`) over and over (token 0 of vocabularies whose first token is a control character, what an argmax over NaN logits picks) and the log names no error: a degenerate generation".to_owned()
        } else {
            format!(
                "the output repeats one phrase over and over ({phrase:?}) and the log names no error: a degenerate generation"
            )
        };
        (format!("repeats {phrase:?}"), why)
    };
    let (rule, (index, (what, why))) = first(first_shown, &|i, line| {
        repeated_phrase(line)
            .filter(|_| !asked(i, line))
            .map(repeats)
    })
    .or_else(|| {
        first(0, &|i, line| {
            token_zero(line)
                .filter(|_| !asked(i, line))
                .or_else(|| token_zero_below_label(&lines, i).then_some("!"))
                .map(|token| repeats(token.to_owned()))
        })
    })
    .map(|found| (REPEATED_OUTPUT, found))
    .or_else(|| {
        first(first_shown, &|_, line| {
            mixed_scripts(line).map(|scripts| {
                (
                    format!("token soup of {} scripts", scripts.len()),
                    format!("the output mixes {} writing systems in one line ({}) and the log names no error: token soup, not text", scripts.len(), scripts.join(", ")),
                )
            })
        })
        .map(|found| (TOKEN_SOUP, found))
    })
    .or_else(|| {
        empty_message(&lines).map(|index| {
            let what = "empty assistant message".to_owned();
            let why = "the answer's assistant message has no text (`\"content\": \"\"`, printed one key a line), no tool call and no thinking, and the log names no error: the model generated nothing readable".to_owned();
            (EMPTY_MESSAGE, (index, (what, why)))
        })
    })
    .or_else(|| looping_lines(text, cleaned).map(|found| (REPEATED_LINES, found)))?;
    Some(TailFinding {
        index,
        signature: Signature::WrongOutput,
        rule,
        decided_by: DecidedBy::WeakLine,
        what,
        why,
        hint: "compare with a reference run of the same prompt; a kernel or quantization that corrupts the logits (dtype, scale, a wrong arch path) is the usual cause",
    }.classify(tail, text.len()))
}

/// No line names a failure, and the last lines are Python frames in py-spy's form (`frames.rs`):
/// a hang, shown by where the process waited when someone dumped it.
fn stack_only(tail: &Excerpt, cleaned: &[Cleaned]) -> Option<Classification> {
    let index = py_spy_frames(cleaned.iter().map(|line| line.text.as_str()))?;
    Some(TailFinding {
        index,
        signature: Signature::Deadlock,
        rule: PY_SPY_FRAMES,
        decided_by: DecidedBy::HangLines,
        what: cleaned[index].text.trim().to_owned(),
        why: "the log ends with Python frames as py-spy dumps them (`function (file.py:line)`) and names no error: the process was dumped where it waited, it hung".to_owned(),
        hint: "read the frames of every rank: a collective, a queue, a lock or a synchronize that never returned is where it hangs; the rank not waiting where the others are stopped first",
    }.classify(tail, cleaned.len()))
}

/// What a check of the log's last lines found: the line (an index into the kept text, which
/// ends with the excerpt's lines), the rule and signature it names, and how it reads.
struct TailFinding {
    index: usize,
    signature: Signature,
    rule: &'static str,
    decided_by: DecidedBy,
    /// What the fingerprint is made of.
    what: String,
    why: String,
    hint: &'static str,
}

impl TailFinding {
    /// The verdict, its line numbered in the log: `kept` lines were kept, the excerpt's last.
    fn classify(self, tail: &Excerpt, kept: usize) -> Classification {
        let first_shown = kept.saturating_sub(tail.lines.len());
        let line = (tail.start + self.index as u64).saturating_sub(first_shown as u64);
        let mut out = from_tail(tail);
        out.signature = self.signature;
        out.fingerprint = Some(fingerprint(&self.what));
        out.line = Some(line);
        out.rule = Some(self.rule.to_owned());
        out.decided_by = Some(self.decided_by);
        out.explanation = Some(self.why);
        out.hint = Some(self.hint.to_owned());
        out.evidence = vec![Clue::new(ClueKind::Rule, self.rule, Some(line))];
        out
    }
}

/// The log ends with a few sentences printed over and over: where the loop starts in `text`,
/// and what it repeats. A line a logger wrote (a level or a prefix stripped) is no generation.
fn looping_lines(text: &[String], cleaned: &[Cleaned]) -> Option<(usize, (String, String))> {
    let written: Vec<Option<String>> = text
        .iter()
        .zip(cleaned)
        .map(|(raw, line)| {
            // What a process printed as it printed it: no logger's level or clock before it (a
            // record repeated is a log, not a loop), whatever delivered the log (a CI's clock, a
            // compose service's name, a rank).
            let as_written =
                line.level == Level::Unknown && line.text.trim() == delivered(raw).trim();
            as_written.then(|| line.text.clone())
        })
        .collect();
    let (start, unit, what) = match repeated_lines(&written) {
        Some((start, unit)) => (start, unit, "line"),
        None => {
            let (start, unit) = repeated_sentences(&written)?;
            (start, unit, "sentence")
        }
    };
    let first = unit.first()?.trim().to_owned();
    let group = match unit.len() {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    };
    Some((
        start,
        (
            format!("repeats {group} from {first:?}"),
            format!(
                "the output ends by printing the same {group} over and over (from {first:?}) and the log names no error: a generation stuck in a loop"
            ),
        ),
    ))
}

/// Names `out` by the lexical model's reading of `words`, if it is sure enough. A line the rules
/// found (a generic exception) stays the verdict's line; otherwise the excerpt is the log's end.
fn guess(out: &mut Classification, model: &Model, words: &Words, tail: &Excerpt) {
    let Some(guess) = model
        .guess(words)
        .filter(|g| g.signature != Signature::Unknown && g.probability >= model.threshold)
    else {
        return;
    };
    let heaviest: Vec<&str> = guess.words.iter().map(|(w, _)| w.as_str()).collect();
    out.signature = guess.signature;
    out.decided_by = Some(DecidedBy::LexicalModel);
    out.rule = None;
    out.explanation = Some(format!(
        "no rule names this failure; the words of the log's last lines read as a `{}` log to the lexical model (probability {:.2}; heaviest words: {})",
        guess.signature,
        guess.probability,
        heaviest.join(", ")
    ));
    out.hint = Some(
        "a reading of the log's words, not of one line: confirm it in the excerpt, and add a `[[rules]]` entry to the matrix file for the line that names it".to_owned(),
    );
    if out.excerpt.is_none() && !tail.lines.is_empty() {
        out.excerpt = Some(excerpt_text(tail));
        out.excerpt_start = Some(tail.start);
    }
    out.evidence
        .push(Clue::new(ClueKind::LexicalModel, guess.describe(), None));
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The rules' verdict (the lexical model has tests of its own, with a model of their own).
    fn classify(text: &str, evidence: Evidence) -> Classification {
        Classifier::builtin()
            .rules_only()
            .classify_reader(text.as_bytes(), &evidence)
            .expect("classify")
    }

    fn log(text: &str) -> Classification {
        classify(text, Evidence::default())
    }

    fn exit(code: Option<i32>, signal: Option<i32>) -> Evidence {
        Evidence {
            exit: Some(Exit { code, signal }),
            watchdog: None,
        }
    }

    /// A model of one word, `zorblax`, that reads as wrong output, and a faint one, `glimmer`.
    fn tiny_model() -> Classifier {
        let model = Model::parse(
            "classes oom wrong_output unknown\nthreshold 0.6\nintercept 0 0 0.5\n\
             term zorblax 2.0 1:4\nterm glimmer 2.0 1:0.5\n",
        )
        .expect("tiny model");
        Classifier::builtin().with_lexical_model(model)
    }

    fn tiny(text: &str, evidence: Evidence) -> Classification {
        tiny_model()
            .classify_reader(text.as_bytes(), &evidence)
            .expect("classify")
    }

    #[test]
    fn the_lexical_model_names_a_log_no_rule_names() {
        let text = "INFO starting the engine\nthe answer came out zorblax zorblax\n";
        let c = tiny(text, Evidence::default());
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.decided_by, Some(DecidedBy::LexicalModel));
        assert_eq!((c.rule.as_deref(), c.line), (None, None));
        assert_eq!(c.excerpt.as_deref(), Some(text.trim_end()));
        let clue = c.evidence.last().expect("a clue");
        assert_eq!(clue.kind, "lexical_model");
        // The only known word, normalised to 1: scores 0, 4 and 0.5.
        let p = 4f64.exp() / (1.0 + 4f64.exp() + 0.5f64.exp());
        assert_eq!(clue.value, format!("wrong_output p={p:.2}: zorblax"));
        assert!(
            tiny_model().decided_by_complaint(&c),
            "the harness's evidence outranks it"
        );
        // Rules only: nothing names it.
        let rules = Classifier::builtin()
            .rules_only()
            .classify_reader(text.as_bytes(), &Evidence::default())
            .expect("classify");
        assert_eq!(rules.signature, Signature::Unknown);
        // A faint reading stays unknown.
        assert_eq!(
            tiny("it went glimmer\n", Evidence::default()).signature,
            Signature::Unknown
        );
    }

    #[test]
    fn the_lexical_model_names_a_generic_exception_and_keeps_its_line() {
        let c = tiny(
            "INFO loading\nValueError: the result is zorblax\n",
            Evidence::default(),
        );
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.decided_by, Some(DecidedBy::LexicalModel));
        assert_eq!(c.line, Some(2));
        assert_eq!(c.evidence[0].value, "python-exception");
        // With an exit status too.
        let c = tiny("ValueError: the result is zorblax\n", exit(Some(1), None));
        assert_eq!(c.signature, Signature::WrongOutput);
    }

    #[test]
    fn the_lexical_model_leaves_alone_what_the_rules_decided() {
        for (text, evidence, want) in [
            // An infrastructure fault stays one.
            (
                "zorblax zorblax\nOSError: [Errno 28] No space left on device\n",
                Evidence::default(),
                Signature::Unknown,
            ),
            // A device-side assert is outside the taxonomy on purpose.
            (
                "zorblax zorblax\nRuntimeError: CUDA error: device-side assert triggered\n",
                Evidence::default(),
                Signature::Unknown,
            ),
            // The watchdog's verdict is evidence of its own.
            (
                "zorblax zorblax\n",
                Evidence {
                    exit: None,
                    watchdog: Some(Verdict::Deadlock),
                },
                Signature::Deadlock,
            ),
            // The harness's notes are not the cell's words.
            (
                "[gpucompat] answer rejected: zorblax zorblax\n",
                Evidence::default(),
                Signature::Unknown,
            ),
            // A rule's name stands.
            (
                "zorblax\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
                Evidence::default(),
                Signature::Oom,
            ),
        ] {
            let c = tiny(text, evidence);
            assert_eq!(c.signature, want, "{text}");
            assert_ne!(c.decided_by, Some(DecidedBy::LexicalModel), "{text}");
        }
    }

    /// The model file's `check` lines are the training's own probabilities for corpus logs: the
    /// words read here and the arithmetic done here must give the same.
    #[test]
    fn the_built_in_model_reads_corpus_logs_as_its_training_did() {
        let model = lexical::BUILTIN.as_ref().expect("lexical.model parses");
        let classifier = Classifier::builtin();
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus/real");
        assert!(model.checks.len() >= 10);
        for check in &model.checks {
            let path = corpus.join(format!("{}.log", check.log));
            let file = std::fs::File::open(&path).expect("corpus log");
            let (_, words) = classifier
                .classify_with_words(file, &Evidence::default())
                .expect("read");
            let guess = model.guess(&words).expect("known words");
            assert_eq!(guess.signature, check.signature, "{}", check.log);
            assert!(
                (guess.probability - check.probability).abs() < 1e-5,
                "{}: {} here, {} in training",
                check.log,
                guess.probability,
                check.probability
            );
        }
    }

    const NOISE: &str = "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 12.4 tokens/s\n\
        [2025-12-09 02:28:12 TP0] Prefill batch, #new-seq: 1, #new-token: 1025, #cached-token: 0\n";

    #[test]
    fn py_spy_frames_alone_are_a_hang_only_where_nothing_failed() {
        let frames = "    wait (threading.py:320)\n    get (queue.py:171)\n    run_busy_loop (vllm/v1/engine/core.py:561)\n    <module> (serve.py:12)\n";
        let c = log(&format!("{NOISE}{frames}"));
        assert_eq!(c.signature, Signature::Deadlock);
        assert_eq!(c.rule.as_deref(), Some(PY_SPY_FRAMES));
        assert_eq!(c.line, Some(3));
        assert_eq!(c.decided_by, Some(DecidedBy::HangLines));
        // An error anywhere names the failure; three frames are no stack.
        let c = log(&format!("{NOISE}ValueError: x\n{frames}"));
        assert_eq!(c.signature, Signature::Unknown);
        assert_eq!(c.rule.as_deref(), Some("python-exception"));
        let three: String = frames.lines().take(3).map(|l| format!("{l}\n")).collect();
        assert_eq!(
            log(&format!("{NOISE}{three}")).signature,
            Signature::Unknown
        );
        // A crash is no hang, whatever its log ends with.
        let c = classify(&format!("{NOISE}{frames}"), exit(Some(139), None));
        assert_eq!(c.signature, Signature::Segfault);
    }

    #[test]
    fn a_crash_after_a_long_progress_bar_on_one_line_is_found() {
        let mut text = String::from("Capturing CUDA graphs:");
        for step in 0..20_000 {
            text.push_str(&format!("\r{step:5}/51 [00:05<00:06]"));
        }
        text.push_str("\rRuntimeError: CUDA error: an illegal memory access was encountered\n");
        assert!(text.len() > 4 * MAX_LINE_FOR_TEST);
        let c = log(&text);
        assert_eq!(c.signature, Signature::IllegalAddress, "{c:?}");
        assert_eq!(c.line, Some(1));
    }

    const MAX_LINE_FOR_TEST: usize = super::super::line::MAX_LINE;

    #[test]
    fn the_harness_notes_are_not_the_cells_failure() {
        let text = "[gpucompat] watchdog: no output, CPU or GPU activity for 2.0s; calling it a hang (phase ready)\n\
            [gpucompat] request failed: connection refused (phase infer)\n\
            [gpucompat] answer rejected: the answer is NaN\n";
        assert_eq!(log(text), Classification::unknown());
    }

    #[test]
    fn classifier_is_shareable() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Classifier>();
    }

    #[test]
    fn a_clean_log_without_evidence_is_unknown_without_a_line() {
        let c = log(NOISE);
        assert_eq!(c, Classification::unknown());
        assert_eq!(log(""), Classification::unknown());
    }

    #[test]
    fn first_fatal_line_wins_across_interleaved_ranks() {
        let text = format!(
            "{NOISE}\
            [rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n\
            [rank2]: Traceback (most recent call last):\n\
            {NOISE}{NOISE}{NOISE}\
            [rank3]:[E1209 02:28:15.28 ProcessGroupNCCL.cpp:1] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600009 milliseconds before timing out.\n\
            [rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n\
            [rank2]: RuntimeError: NCCL communicator was aborted on rank 2.\n\
            Segmentation fault (core dumped)\n"
        );
        let c = log(&text);
        assert_eq!(c.signature, Signature::IllegalAddress);
        assert_eq!(c.line, Some(3));
        assert_eq!(
            c.fingerprint.as_deref(),
            Some("RuntimeError: CUDA error: an illegal memory access was encountered")
        );
        // The most frequent line and the last line do not decide either.
        let flood = format!(
            "RuntimeError: FlashInfer requires sm75+\n{}Killed\n",
            "[rank1]: ncclInternalError: Internal check failed.\n".repeat(50)
        );
        assert_eq!(log(&flood).signature, Signature::UnsupportedConfig);
    }

    #[test]
    fn a_more_specific_cause_right_after_a_wrapper_wins() {
        // NCCL says a CUDA call failed; the CUDA error it names is the root cause.
        let text = "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n\
            ncclUnhandledCudaError: Call to CUDA function failed.\n\
            Last error:\n\
            Cuda failure 'an illegal memory access was encountered'\n";
        let c = log(text);
        assert_eq!(c.signature, Signature::IllegalAddress);
        assert_eq!(c.line, Some(4));
        // Triton prints the kernel's source between the wrapper and the reason.
        let source: String = (0..20)
            .map(|i| format!("    x{i} = tl.load(ptr + {i})\n"))
            .collect();
        let text = format!(
            "triton.compiler.errors.CompilationError: at 1:0:\n{source}ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')\")\n"
        );
        assert_eq!(log(&text).signature, Signature::UnsupportedConfig);
        // Beyond the wrapper's reach, a later error is secondary even if it ranks higher.
        let text = format!(
            "subprocess.CalledProcessError: Command '['ninja', '-v']' returned non-zero exit status 1.\n{}RuntimeError: CUDA error: out of memory\n",
            NOISE.repeat(30)
        );
        assert_eq!(log(&text).signature, Signature::JitCompileError);
        // A first line that is not a wrapper stands, even if a higher-ranked error follows at
        // once (a DeepEP timeout makes its kernel trap: the launch failure is a consequence).
        let text = "DeepEP timeout check failed: rank = 3, thread = 0, value = 1024\n\
            terminate called after throwing an instance of 'EPException'\n\
            what():  Failed: CUDA error deep_ep.cpp:889 'unspecified launch failure'\n";
        assert_eq!(log(text).signature, Signature::CollectiveTimeout);
    }

    #[test]
    fn weak_lines_never_beat_a_fatal_line() {
        let text = "Worker proc VllmWorker-0 died unexpectedly, shutting down executor.\n\
            Fatal Python error: Aborted\n\
            Killed\n\
            ERROR 01-01 00:00:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
        let c = log(text);
        assert_eq!(c.signature, Signature::Oom);
        assert_eq!(c.rule.as_deref(), Some("cuda-oom"));
        assert_eq!(c.line, Some(4));
        // Only weak lines: the first one, and an honest unknown for a generic exception.
        let c = log("ValueError: bad config value\nKilled\n");
        assert_eq!((c.signature, c.line), (Signature::Unknown, Some(1)));
        assert_eq!(log("Killed\n").signature, Signature::Oom);
        // A deadline gives way to a later weak line that names another cause, not to a generic one.
        let c = log(
            "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.\n\
            ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (3).\n",
        );
        assert_eq!(
            (c.signature, c.line),
            (Signature::UnsupportedConfig, Some(2))
        );
        let c = log(
            "requests.exceptions.ReadTimeout: HTTPConnectionPool(host='10.0.0.5', port=8000): Read timed out.\n\
            kill_process_tree called: parent_pid=631\nKilled\n",
        );
        assert_eq!(c.signature, Signature::Timeout);
        let c = classify("TimeoutError\nKilled\n", exit(Some(137), None));
        assert_eq!(c.signature, Signature::Timeout);
        let c = log(
            "ray.exceptions.RayChannelTimeoutError: System error: Timed out waiting for object available to read.\n\
            [rank3]: RuntimeError: NCCL communicator was aborted on rank 3.\n",
        );
        assert_eq!(c.signature, Signature::Timeout);
        let c = log("TimeoutError\nKeyError: 'x'\n");
        assert_eq!((c.signature, c.line), (Signature::Timeout, Some(1)));
    }

    /// A generation that loops names the failure only where no line does, and says which line.
    #[test]
    fn a_looping_generation_is_wrong_output_when_nothing_else_failed() {
        let looping = format!(
            "INFO 01-01 00:00:00 [llm.py:1] Processed prompts: 100%\nGenerated text: '{}'\n",
            "France is ".repeat(12)
        );
        let c = log(&looping);
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.rule.as_deref(), Some(REPEATED_OUTPUT));
        assert_eq!(c.line, Some(2));
        assert_eq!(c.decided_by, Some(DecidedBy::WeakLine));
        assert!(c.evidence.iter().any(|clue| clue.kind == "rule"
            && clue.value == REPEATED_OUTPUT
            && clue.line == Some(2)));
        // Any line that names a failure decides instead, a generic exception included.
        let crashed = format!(
            "{looping}RuntimeError: CUDA error: an illegal memory access was encountered\n"
        );
        assert_eq!(log(&crashed).signature, Signature::IllegalAddress);
        let raised = format!("{looping}ValueError: bad config value\n");
        assert_eq!(
            (log(&raised).signature, log(&raised).line),
            (Signature::Unknown, Some(3))
        );
        // A loop far above the last lines is not looked for.
        let early = format!("{looping}{}", "INFO ok\n".repeat(20));
        assert_eq!(log(&early).signature, Signature::Unknown);
    }

    /// A log that ends with the same sentences over and over is a generation stuck in a loop,
    /// named where no line names a failure, at the line where the loop starts.
    #[test]
    fn sentences_looping_at_the_end_are_wrong_output_when_nothing_else_failed() {
        let pair = "Wait, but in the code the answer is five.\nYes, that is correct, the answer is five.\n";
        let looping = format!(
            "{}Let me check the sum.\n{}",
            "INFO 01-01 00:00:00 [llm.py:1] Processed prompts: 100%\n".repeat(100),
            pair.repeat(8)
        );
        let c = log(&looping);
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.rule.as_deref(), Some(REPEATED_LINES));
        assert_eq!(
            (c.line, c.decided_by),
            (Some(102), Some(DecidedBy::WeakLine))
        );
        assert!(
            c.explanation
                .is_some_and(|e| e.contains("Wait, but in the code"))
        );
        let crashed = format!("{looping}torch.OutOfMemoryError: CUDA out of memory.\n");
        assert_eq!(log(&crashed).signature, Signature::Oom);
        // Records a logger wrote are no generation, however alike.
        let polls = "INFO 01-01 00:00:00 [api.py:1] GET /health 200 OK\nINFO 01-01 00:00:00 [api.py:1] Waiting for requests to arrive\n";
        assert_eq!(log(&polls.repeat(20)).signature, Signature::Unknown);
    }

    /// Dynamo's wrapper gives way to the error its backend raised, on the next line.
    #[test]
    fn torch_compile_names_what_its_backend_raised() {
        let text = "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n\
            ImportError: cannot import name 'triton_key' from 'triton.compiler.compiler'\n";
        let c = log(text);
        assert_eq!((c.signature, c.line), (Signature::DependencyError, Some(2)));
        let bare = log("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n");
        assert_eq!(bare.signature, Signature::JitCompileError);
    }

    /// A background line (bitsandbytes' import-time complaint, which it survives) names the
    /// failure only where no other line does: a later generic exception or `Killed` decides.
    #[test]
    fn a_background_line_decides_only_where_nothing_else_does() {
        let bnb = "bitsandbytes library load error: Configured CUDA binary not found at /site-packages/bitsandbytes/libbitsandbytes_cuda130.so\n\
            Traceback (most recent call last):\n\
            RuntimeError: Configured CUDA binary not found at /site-packages/bitsandbytes/libbitsandbytes_cuda130.so\n\
            {'loss': 1.2, 'epoch': 0.1}\n";
        let alone = log(bnb);
        assert_eq!(alone.signature, Signature::DependencyError);
        assert_eq!(alone.rule.as_deref(), Some("bitsandbytes-binary-missing"));
        assert_eq!(alone.line, Some(1));
        let raised = log(&format!("{bnb}ValueError: bad config value\n"));
        assert_eq!(
            (raised.signature, raised.line),
            (Signature::Unknown, Some(5))
        );
        let killed = log(&format!("{bnb}Killed\n"));
        assert_eq!(
            (killed.signature, killed.rule.as_deref()),
            (Signature::Oom, Some("killed"))
        );
        let oom = log(&format!(
            "{bnb}torch.OutOfMemoryError: CUDA out of memory.\n"
        ));
        assert_eq!(oom.signature, Signature::Oom);
        // A process killed by a signal with no sign of why is not accounted for by a complaint
        // it might have survived.
        let complaint = "bitsandbytes library load error: Configured CUDA binary not found at /x/libbitsandbytes_cuda130.so\n";
        let signalled = classify(
            complaint,
            Evidence {
                exit: Some(Exit {
                    code: None,
                    signal: Some(9),
                }),
                watchdog: None,
            },
        );
        assert_eq!(signalled.signature, Signature::Unknown);
    }

    /// NumPy's NaN-cast warning is printed by healthy runs too (a map utility casting a column
    /// with NaNs to int, thousands of times in a training run that goes on): it names the failure
    /// only where nothing else does, not ahead of a later `Killed`, a generic exception or a hang.
    #[test]
    fn a_nan_cast_warning_names_only_what_nothing_else_does() {
        let cast = "/root/code/nuplan-devkit/nuplan/common/maps/nuplan_map/utils.py:413: RuntimeWarning: invalid value encountered in cast\n\
            \x20 return elements.iloc[np.where(elements[column_label].to_numpy().astype(int) == int(desired_value))]\n";
        let alone = log(cast);
        assert_eq!(
            (alone.signature, alone.rule.as_deref()),
            (Signature::WrongOutput, Some("nan-cast"))
        );
        let killed = log(&format!(
            "{cast}Epoch 3: 41%|####      | 410/1000\nKilled\n"
        ));
        assert_eq!(
            (killed.signature, killed.rule.as_deref()),
            (Signature::Oom, Some("killed"))
        );
        let raised = log(&format!("{cast}KeyError: 'scenario_token'\n"));
        assert_eq!(
            (raised.signature, raised.line),
            (Signature::Unknown, Some(3))
        );
        let hung = log(&format!(
            "{cast}#0  0x00007f in __pthread_cond_wait_common (cond=0x1) at pthread_cond_wait.c:503\n\
            #1  0x00007f in __futex_abstimed_wait_common64 (private=128) at futex-internal.c:57\n"
        ));
        assert_eq!(hung.signature, Signature::Deadlock);
    }

    /// The traceback a library logs with a complaint it survives is part of the complaint: its
    /// failure of the same kind is no fatal line, and a later failure still decides.
    #[test]
    fn a_survived_complaint_covers_its_logged_traceback() {
        let bnb = "Could not load bitsandbytes native library: libcusparse.so.12: cannot open shared object file: No such file or directory\n\
            Traceback (most recent call last):\n\
            \x20 File \"/venv/lib/python3.11/site-packages/bitsandbytes/cextension.py\", line 85, in <module>\n\
            \x20   lib = get_native_library()\n\
            OSError: libcusparse.so.12: cannot open shared object file: No such file or directory\n";
        let oom = log(&format!(
            "{bnb}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        ));
        assert_eq!(oom.signature, Signature::Oom);
        let alone = log(bnb);
        assert_eq!(
            (alone.signature, alone.rule.as_deref()),
            (
                Signature::DependencyError,
                Some("bitsandbytes-load-traceback")
            )
        );
        // Past the lines it covers, the same failure is a failure of its own.
        let later = log(&format!(
            "{bnb}{}ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n",
            "step\n".repeat(20)
        ));
        assert_eq!(later.rule.as_deref(), Some("shared-library"));
    }

    /// A death reported with no weak line saying why is accounted for by a background line
    /// (TensorFlow's allocator failing at warning level in the actor that died); a generic
    /// exception after the background line still decides.
    #[test]
    fn a_reported_death_takes_a_background_line_as_its_reason() {
        let bfc = "(ModelWorker pid=1) 2022-11-12 18:21:06.985303: W external/org_tensorflow/tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_0_bfc) ran out of memory trying to allocate 22.0KiB (rounded to 22528)requested by op\n";
        let died = log(&format!(
            "{bfc}(ModelWorker pid=1) ERROR worker.py:451 -- Exception raised in creation task: The actor died because of an error raised in its creation task, ray::ModelWorker.__init__()\n"
        ));
        assert_eq!(
            (died.signature, died.rule.as_deref()),
            (Signature::Oom, Some("bfc-allocator-oom"))
        );
        assert!(
            died.evidence
                .iter()
                .any(|e| e.kind == "death_report" && e.value == "process-died"),
            "{died:?}"
        );
        let raised = log(&format!("{bfc}KeyError: 'params'\n"));
        assert_eq!(raised.signature, Signature::Unknown);
    }

    /// A stack dump shows a hang only where nothing failed: an exit by a crash signal did.
    #[test]
    fn a_dump_in_a_crashed_process_is_no_hang() {
        let dump = "#0  0x00007f in __pthread_cond_wait_common (cond=0x1) at pthread_cond_wait.c:503\n\
            #1  0x00007f in __futex_abstimed_wait_common64 (private=128) at futex-internal.c:57\n";
        assert_eq!(log(dump).signature, Signature::Deadlock);
        let c = classify(dump, exit(Some(139), None));
        assert_eq!(c.signature, Signature::Segfault);
    }

    /// Token soup (four writing systems in a line) names the failure only where no line does.
    #[test]
    fn token_soup_is_wrong_output_when_nothing_else_failed() {
        let soup = "INFO 01-01 00:00:00 [llm.py:1] Processed prompts: 100%\n\
            assistant hazır(DisplayGithub thẩm_resume Votingेव223 scripted(char список Changesesehen relics 全面.unshift 문제 stepper\n";
        let c = log(soup);
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.rule.as_deref(), Some(TOKEN_SOUP));
        assert_eq!((c.line, c.decided_by), (Some(2), Some(DecidedBy::WeakLine)));
        assert!(c.explanation.is_some_and(|e| e.contains("Cyrillic")));
        let crashed = format!("{soup}torch.OutOfMemoryError: CUDA out of memory.\n");
        assert_eq!(log(&crashed).signature, Signature::Oom);
        let plain = "INFO done\nThe answer is 42. Ответ: сорок два.\n";
        assert_eq!(log(plain).signature, Signature::Unknown);
    }

    /// A reasoning model's answer of `!` only (token 0), printed as indented JSON whose metadata
    /// fills the last lines: found above the excerpt, at its own line.
    #[test]
    fn token_zero_answer_is_found_above_trailing_metadata() {
        let mut text = String::from("{\n  \"message\": {\n    \"content\": null,\n");
        text.push_str(&format!(
            "    \"reasoning\": \"{}\"\n  }},\n",
            "!".repeat(64)
        ));
        for field in [
            "logprobs",
            "finish_reason",
            "stop_reason",
            "token_ids",
            "usage",
        ] {
            text.push_str(&format!("  \"{field}\": null,\n"));
        }
        text.push_str("  \"prompt_tokens\": 13,\n  \"total_tokens\": 525,\n}\n");
        let c = log(&text);
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.rule.as_deref(), Some(REPEATED_OUTPUT));
        assert_eq!(c.line, Some(4));
        // The user's own message of `!` is no answer.
        let asked = text.replace("\"reasoning\"", "\"role\": \"user\", \"content\"");
        assert_eq!(log(&asked).signature, Signature::Unknown);
    }

    /// A prompt of `!` printed as a request over several lines (indented JSON puts the role above
    /// the content, `pprint` below it; SGLang's `/generate` body calls its prompt `text`), then a
    /// healthy answer: the prompt is no generation. The same answer of `!` after a user's message
    /// in the same printed conversation is one.
    #[test]
    fn a_prompt_of_token_zero_printed_over_several_lines_is_no_answer() {
        let bang = "!".repeat(40);
        let answer = "It looks like you are excited! How can I help?";
        let json = format!(
            "Request:\n{{\n  \"model\": \"Qwen/Qwen2.5-0.5B-Instruct\",\n  \"messages\": [\n    {{\n      \"role\": \"user\",\n      \"content\": \"{bang}\"\n    }}\n  ],\n  \"max_tokens\": 32\n}}\nResponse:\n{{\n  \"choices\": [\n    {{\n      \"message\": {{\n        \"role\": \"assistant\",\n        \"content\": \"{answer}\"\n      }},\n      \"finish_reason\": \"stop\"\n    }}\n  ]\n}}\n"
        );
        let pprint = format!(
            "{{'max_tokens': 32,\n 'messages': [{{'content': '{bang}',\n               'role': 'user'}}],\n 'model': 'Qwen/Qwen2.5-0.5B-Instruct'}}\n{{'choices': [{{'finish_reason': 'stop',\n              'message': {{'content': '{answer}',\n                          'role': 'assistant'}}}}]}}\n"
        );
        let sglang = format!(
            "{{\n  \"text\": \"{bang}\",\n  \"sampling_params\": {{\n    \"max_new_tokens\": 16\n  }}\n}}\n{{\n  \"text\": \" {answer}\",\n  \"meta_info\": {{\n    \"completion_tokens\": 16\n  }}\n}}\n"
        );
        for text in [&json, &pprint, &sglang] {
            let c = log(text);
            assert_eq!(c.signature, Signature::Unknown, "{text}");
            assert_eq!(c.rule, None, "{text}");
        }
        let answered = format!(
            "[\n  {{\n    \"role\": \"user\",\n    \"content\": \"Hi\"\n  }},\n  {{\n    \"role\": \"assistant\",\n    \"content\": \"{bang}\"\n  }}\n]\n"
        );
        let c = log(&answered);
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.line, Some(8));
        let sorted = format!(
            "{{'messages': [{{'content': 'Hi', 'role': 'user'}},\n              {{'content': '{bang}',\n               'role': 'assistant'}}]}}\n"
        );
        let c = log(&sorted);
        assert_eq!(c.signature, Signature::WrongOutput);
        assert_eq!(c.line, Some(2));
    }

    /// An exception, then the engine's own SIGKILL of its tree (SGLang's `kill_process_tree`)
    /// and the shell's `Killed`, exit 137: not the OOM killer. Recorded on an H100
    /// (tests/fixtures/corpus/gpu/h100-sglang-self-kill.log).
    #[test]
    fn a_self_kill_after_an_exception_is_not_oom() {
        let text = "AttributeError: 'Qwen3NextConfig' object has no attribute 'full_attention_interval'\n\
            [2026-11-25 23:15:08] Received sigquit from a child process. It usually means the child failed.\n\
            [2026-11-25 23:15:08] kill_process_tree called: parent_pid=631, include_parent=True, pid=631\n\
            Killed\n";
        let c = classify(text, exit(Some(137), None));
        assert_eq!(
            (c.signature, c.line),
            (Signature::Unknown, Some(1)),
            "{c:?}"
        );
        // Killed alone under SIGKILL is still the OOM killer's mark.
        let c = classify("Killed\n", exit(Some(137), None));
        assert_eq!(c.signature, Signature::Oom);
    }

    #[test]
    fn scary_warnings_do_not_decide() {
        let text = "WARNING 05-12 19:01:18 [__init__.py:26] Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'vllm._C'\")\n\
            gpu-node-3:1234:5678 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory\n\
            [W1209 02:28:15.28 CUDAAllocatorConfig.h:28] Warning: expandable_segments not supported on this platform (function operator())\n\
            /usr/lib/python3/site-packages/torch/cuda/__init__.py:209: UserWarning: ImportError: flash_attn is missing\n\
            INFO 01-01 00:00:00 [gpu_worker.py:1] To avoid out of memory errors, reduce max_num_seqs\n\
            ERROR 05-12 19:01:19 [core.py:1] RuntimeError: CUDA error: misaligned address\n";
        let c = log(text);
        assert_eq!(c.signature, Signature::MisalignedAddress);
        assert_eq!(c.line, Some(6));
    }

    #[test]
    fn watchdog_verdict_decides_only_when_the_log_names_no_fatal_error() {
        let deadlock = Evidence {
            exit: Some(Exit {
                code: None,
                signal: Some(9),
            }),
            watchdog: Some(Verdict::Deadlock),
        };
        let c = classify(NOISE, deadlock);
        assert_eq!(c.signature, Signature::Deadlock);
        assert_eq!(c.line, None);
        assert!(c.excerpt.is_some_and(|e| e.contains("Prefill batch")));
        // Weak lines (the harness killed it) do not beat the verdict.
        let c = classify(&format!("{NOISE}Killed\nKeyboardInterrupt\n"), deadlock);
        assert_eq!(c.signature, Signature::Deadlock);
        // A fatal error before the hang wins.
        let text = format!(
            "{NOISE}RuntimeError: CUDA error: an illegal memory access was encountered\n{NOISE}"
        );
        let c = classify(&text, deadlock);
        assert_eq!(c.signature, Signature::IllegalAddress);
        assert_eq!(c.line, Some(3));
        // The verdict names the signature; the log's hang lines give the line.
        let shm = "INFO 05-28 14:44:28 [shm_broadcast.py:681] No available shared memory broadcast block found in 60 seconds.\n";
        let timeout = Evidence {
            exit: None,
            watchdog: Some(Verdict::Timeout),
        };
        let c = classify(&format!("{NOISE}{shm}"), timeout);
        assert_eq!((c.signature, c.line), (Signature::Timeout, Some(3)));
        // Without a verdict one such line could be a long compile: still busy or stuck, the log
        // cannot tell, so `timeout`; next to an error line it decides nothing; repeated, it is a
        // hang.
        assert_eq!(log(&format!("{NOISE}{shm}")).signature, Signature::Timeout);
        assert_eq!(
            log(&format!("{NOISE}{shm}ValueError: x\n")).signature,
            Signature::Unknown
        );
        let c = log(&format!("{NOISE}{shm}{shm}{shm}"));
        assert_eq!((c.signature, c.line), (Signature::Deadlock, Some(3)));
    }

    /// vLLM's API server polls for its engine core every 10 s; waits that end the log are an
    /// engine that never came up, waits the engine went on from are a slow start.
    #[test]
    fn startup_waits_are_a_hang_only_where_they_end_the_log() {
        let wait = "DEBUG 04-18 18:08:25 [core_client.py:421] Waiting for 1 core engine proc(s) to start: {0}\n";
        let waits = wait.repeat(4);
        let c = log(&format!("{NOISE}{waits}"));
        assert_eq!((c.signature, c.line), (Signature::Deadlock, Some(3)));
        // A pasted block closed by its fence and a blank line still ends with the waits.
        assert_eq!(
            log(&format!("{NOISE}{waits}```\n\n")).signature,
            Signature::Deadlock
        );
        let progress =
            "INFO 04-18 18:08:51 [kv_cache_utils.py:634] GPU KV cache size: 233,936 tokens\n";
        assert_eq!(
            log(&format!("{NOISE}{waits}{progress}")).signature,
            Signature::Unknown
        );
        // Progress between the waits is no progress past them.
        assert_eq!(
            log(&format!("{NOISE}{wait}{progress}{wait}{wait}")).signature,
            Signature::Deadlock
        );
    }

    #[test]
    fn the_evidence_says_what_decided() {
        let has = |c: &Classification, kind: &str, value: &str, line: Option<u64>| {
            c.evidence
                .iter()
                .any(|e| e.kind == kind && e.value == value && e.line == line)
        };
        let shm = "INFO 05-28 14:44:28 [shm_broadcast.py:681] No available shared memory broadcast block found in 60 seconds.\n";
        let c = log(&format!("{NOISE}{shm}{shm}{shm}"));
        assert_eq!(c.decided_by, Some(DecidedBy::HangLines));
        assert!(
            has(
                &c,
                "hang_lines",
                "shm-broadcast-stall seen 3 times",
                Some(3)
            ),
            "{c:?}"
        );
        // A reported death gives way to a later line that says why, and stays as evidence.
        let ray = "(raylet) A worker died or was killed while executing a task by an unexpected system error. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage.\n";
        let c = log(&format!("{ray}{NOISE}Killed\n"));
        assert_eq!(
            (c.signature, c.decided_by),
            (Signature::Oom, Some(DecidedBy::WeakLine))
        );
        assert!(has(&c, "rule", "killed", Some(4)), "{c:?}");
        assert!(has(&c, "death_report", "process-died", Some(1)), "{c:?}");
        // An infrastructure context line is named.
        let retry = "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f0d>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/torch/\n";
        let pin = "ERROR: Could not find a version that satisfies the requirement torch==2.5.1 (from versions: none)\n";
        let c = log(&format!("{retry}{pin}"));
        assert!(has(&c, "infrastructure", "network-retry", None), "{c:?}");
        // The exit decides a silent log; a clean exit with nothing found says nothing.
        let c = classify(NOISE, exit(Some(-11), None));
        assert_eq!(c.decided_by, Some(DecidedBy::ExitSignal));
        assert!(has(&c, "exit", "code -11 (SIGSEGV)", None), "{c:?}");
        let c = classify(NOISE, exit(Some(1), None));
        assert_eq!(c.decided_by, None);
        assert!(has(&c, "exit", "code 1", None), "{c:?}");
        assert!(classify(NOISE, exit(Some(0), None)).evidence.is_empty());
    }

    #[test]
    fn exit_status_decides_when_the_log_is_silent() {
        let c = classify(NOISE, exit(Some(139), None));
        assert_eq!((c.signature, c.line), (Signature::Segfault, None));
        assert!(c.explanation.is_some_and(|e| e.contains("SIGSEGV")));
        assert_eq!(
            classify(NOISE, exit(None, Some(11))).signature,
            Signature::Segfault
        );
        assert_eq!(
            classify(NOISE, exit(Some(-11), None)).signature,
            Signature::Segfault
        );
        assert_eq!(
            classify(NOISE, exit(None, Some(4))).signature,
            Signature::IllegalInstruction
        );
        // SIGKILL plus the OOM killer's mark is an OOM; SIGKILL alone says nothing.
        let killed = format!("{NOISE}Killed\n");
        let c = classify(&killed, exit(None, Some(9)));
        assert_eq!((c.signature, c.line), (Signature::Oom, Some(3)));
        assert_eq!(
            classify(&killed, exit(Some(137), None)).signature,
            Signature::Oom
        );
        let c = classify(NOISE, exit(None, Some(9)));
        assert_eq!((c.signature, c.line), (Signature::Unknown, None));
        assert!(c.excerpt.is_some());
        // A generic exception does not explain a SIGSEGV; a named cause does.
        let c = classify(&format!("ValueError: x\n{NOISE}"), exit(Some(139), None));
        assert_eq!(c.signature, Signature::Segfault);
        let c = classify(
            "RuntimeError: CUDA error: an illegal memory access was encountered\n",
            exit(Some(139), None),
        );
        assert_eq!(c.signature, Signature::IllegalAddress);
        // A clean exit with a clean log: nothing to name, nothing to show.
        assert_eq!(
            classify(NOISE, exit(Some(0), None)),
            Classification::unknown()
        );
    }

    #[test]
    fn infrastructure_faults_are_spurious() {
        let c = log("OSError: [Errno 28] No space left on device\n");
        assert!(c.spurious);
        assert_eq!(c.signature, Signature::Unknown);
        // An unresolvable pin is a dependency error, unless the index could not be reached.
        let pin = "ERROR: Could not find a version that satisfies the requirement torch==2.5.1 (from versions: none)\n";
        let c = log(pin);
        assert_eq!(
            (c.signature, c.spurious),
            (Signature::DependencyError, false)
        );
        let retry = "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f0d>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/torch/\n";
        let c = log(&format!("{retry}{retry}{pin}"));
        assert_eq!(
            (c.signature, c.spurious),
            (Signature::DependencyError, true)
        );
        assert!(c.hint.is_some_and(|h| h.contains("network")));
        // A retry long before, which then succeeded, does not taint a later failure.
        let c = log(&format!("{retry}{}{pin}", NOISE.repeat(40)));
        assert!(!c.spurious);
    }

    #[test]
    fn excerpt_shows_lines_around_the_root_cause() {
        let mut text = String::new();
        for i in 1..=20 {
            if i == 10 {
                text.push_str("RuntimeError: CUDA error: unspecified launch failure\n");
            } else {
                text.push_str(&format!("INFO step {i}\n"));
            }
        }
        let c = log(&text);
        assert_eq!(c.line, Some(10));
        assert_eq!(c.excerpt_start, Some(7));
        let excerpt = c.excerpt.expect("excerpt");
        let lines: Vec<&str> = excerpt.lines().collect();
        assert_eq!(lines.len(), 9);
        assert_eq!(lines[0], "INFO step 7");
        assert_eq!(
            lines[3],
            "RuntimeError: CUDA error: unspecified launch failure"
        );
        assert_eq!(lines[8], "INFO step 15");
        // At the very start and end of a log the excerpt is shorter.
        let c = log("RuntimeError: CUDA error: unspecified launch failure\nlast\n");
        assert_eq!(c.excerpt_start, Some(1));
        assert_eq!(
            c.excerpt.as_deref(),
            Some("RuntimeError: CUDA error: unspecified launch failure\nlast")
        );
    }

    #[test]
    fn binary_garbage_invalid_utf8_and_odd_line_endings_are_handled() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(b"\x00\x01\xff\xfe garbage \x80\x81 error? \xc3\x28\n");
        bytes.extend((0..=255u8).cycle().take(10_000).filter(|&b| b != b'\n'));
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(b"progress 10%\rprogress 90%\rRuntimeError: CUDA error: \xffno kernel image is available for execution on the device\r\n");
        bytes.extend_from_slice(b"\x1b[31mtail without newline\x1b[0m");
        let c = Classifier::builtin()
            .classify_reader(bytes.as_slice(), &Evidence::default())
            .expect("classify");
        assert_eq!(c.signature, Signature::NoKernelImage);
        assert_eq!(c.line, Some(3));
        let excerpt = c.excerpt.expect("excerpt");
        assert!(excerpt.ends_with("tail without newline"), "{excerpt}");
        assert!(!excerpt.contains('\u{1b}') && !excerpt.contains('\0'));
    }

    #[test]
    fn very_long_lines_are_cut_not_loaded() {
        // A 3 MiB line (longer than a read block) before the root cause, then one after.
        let mut text = "x".repeat(3 << 20);
        text.push_str(" error at the far end\n");
        text.push_str("RuntimeError: CUDA error: an illegal instruction was encountered\n");
        text.push_str(&"y".repeat(200_000));
        text.push('\n');
        let c = log(&text);
        assert_eq!(
            (c.signature, c.line),
            (Signature::IllegalInstruction, Some(2))
        );
        let excerpt = c.excerpt.expect("excerpt");
        assert!(
            excerpt.len() < 4_000,
            "excerpt is capped: {} bytes",
            excerpt.len()
        );
        // The root cause at the start of a long line is still seen.
        let mut text = String::from("RuntimeError: CUDA error: misaligned address ");
        text.push_str(&"z".repeat(2 << 20));
        let c = log(&text);
        assert_eq!(
            (c.signature, c.line),
            (Signature::MisalignedAddress, Some(1))
        );
    }

    /// Lines of exactly 64 bytes: a 1 MiB read block holds 16384 of them, so line 16384 ends the
    /// first block and line 16385 starts the second.
    fn fixed_lines(count: u64, hits: &[(u64, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for n in 1..=count {
            let text = hits
                .iter()
                .find(|(at, _)| *at == n)
                .map_or_else(|| format!("INFO step {n}"), |(_, t)| (*t).to_owned());
            let mut line = format!("{text:<63}").into_bytes();
            line.truncate(63);
            line.push(b'\n');
            out.extend_from_slice(&line);
        }
        out
    }

    #[test]
    fn excerpts_and_reach_span_read_blocks() {
        let ima = "RuntimeError: CUDA error: an illegal memory access";
        // The root cause ends the first block: the lines after it come from the second.
        let bytes = fixed_lines(40_000, &[(16_384, ima)]);
        let c = Classifier::builtin()
            .classify_reader(bytes.as_slice(), &Evidence::default())
            .expect("classify");
        assert_eq!(c.line, Some(16_384));
        let excerpt = c.excerpt.expect("excerpt");
        let lines: Vec<&str> = excerpt.lines().collect();
        assert_eq!(lines.len(), 9, "{excerpt}");
        assert_eq!(lines[0].trim_end(), "INFO step 16381");
        assert_eq!(lines[8].trim_end(), "INFO step 16389");
        // The root cause starts the second block: the lines before it come from the first.
        let bytes = fixed_lines(40_000, &[(16_385, ima)]);
        let c = Classifier::builtin()
            .classify_reader(bytes.as_slice(), &Evidence::default())
            .expect("classify");
        assert_eq!((c.line, c.excerpt_start), (Some(16_385), Some(16_382)));
        let excerpt = c.excerpt.expect("excerpt");
        assert!(excerpt.starts_with("INFO step 16382"), "{excerpt}");
        // A wrapper at the end of one block yields to its cause at the start of the next.
        let bytes = fixed_lines(
            40_000,
            &[
                (16_383, "RuntimeError: NCCL error: unhandled cuda error"),
                (
                    16_386,
                    "Cuda failure 'an illegal memory access was encountered'",
                ),
            ],
        );
        let c = Classifier::builtin()
            .classify_reader(bytes.as_slice(), &Evidence::default())
            .expect("classify");
        assert_eq!(
            (c.signature, c.line),
            (Signature::IllegalAddress, Some(16_386))
        );
        // The end of the log is the tail, across blocks too.
        let bytes = fixed_lines(40_000, &[]);
        let c = Classifier::builtin()
            .classify_reader(bytes.as_slice(), &exit(Some(139), None))
            .expect("classify");
        assert_eq!(c.excerpt_start, Some(39_993));
        assert!(
            c.excerpt
                .is_some_and(|e| e.trim_end().ends_with("INFO step 40000"))
        );
    }

    /// Generates a log of `lines` noise lines with a root cause at line `root`, without holding it.
    struct Generated {
        next: u64,
        lines: u64,
        root: u64,
        pending: Vec<u8>,
        offset: usize,
    }

    impl Read for Generated {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.offset == self.pending.len() {
                if self.next > self.lines {
                    return Ok(0);
                }
                self.pending.clear();
                self.offset = 0;
                // A few hundred lines at a time.
                while self.pending.len() < 64 * 1024 && self.next <= self.lines {
                    let line = if self.next == self.root {
                        "(VllmWorker TP0 pid=265) ERROR 05-12 19:01:18 [multiproc_executor.py:470] RuntimeError: CUDA error: an illegal memory access was encountered\n".to_owned()
                    } else if self.next > self.root && self.next % 3 == 0 {
                        format!(
                            "[rank{}]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error, NCCL version 2.21.5\n",
                            self.next % 8
                        )
                    } else {
                        format!(
                            "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: {}.4 tokens/s, Running: 12 reqs, request errors: 0\n",
                            self.next
                        )
                    };
                    self.pending.extend_from_slice(line.as_bytes());
                    self.next += 1;
                }
            }
            let n = out.len().min(self.pending.len() - self.offset);
            out[..n].copy_from_slice(&self.pending[self.offset..self.offset + n]);
            self.offset += n;
            Ok(n)
        }
    }

    /// Peak resident memory of this process, from /proc (Linux only).
    fn peak_rss_kib() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    #[test]
    fn streams_a_large_log_in_bounded_memory() {
        let lines = 2_000_000; // about 200 MB
        let root = lines - 1_000;
        // Compiling the rules costs a fixed amount (tens of MiB for hundreds of Unicode patterns);
        // what must not grow with the log is what the scan holds.
        let classifier = Classifier::builtin();
        // Rules are compiled when a line first calls for them: a small log of the same lines
        // first, so that what is measured is the scan's own memory.
        let mut warm = Generated {
            next: 1,
            lines: 4_000,
            root: 3_000,
            pending: Vec::new(),
            offset: 0,
        };
        classifier
            .classify_reader(&mut warm, &Evidence::default())
            .expect("classify");
        let before = peak_rss_kib();
        let mut reader = Generated {
            next: 1,
            lines,
            root,
            pending: Vec::new(),
            offset: 0,
        };
        let c = classifier
            .classify_reader(&mut reader, &Evidence::default())
            .expect("classify");
        assert_eq!(c.signature, Signature::IllegalAddress);
        assert_eq!(c.line, Some(root));
        assert_eq!(c.excerpt_start, Some(root - 3));
        // nextest runs each test in its own process, so the peak is this test's own.
        if crate::env::var_os("NEXTEST_EXECUTION_MODE").is_some_and(|m| m == "process-per-test") {
            if let (Some(before), Some(after)) = (before, peak_rss_kib()) {
                let grown_mib = after.saturating_sub(before) / 1024;
                assert!(grown_mib < 64, "peak memory grew by {grown_mib} MiB");
            }
        }
    }

    /// A run stopped by hand shows a hang only where nothing failed before the interrupt, and only
    /// where the program reacted to it: a bare `^C` also ends `journalctl -f` over any log.
    #[test]
    fn an_interrupt_by_hand_is_a_hang_only_where_nothing_failed() {
        let interrupt = "^CTraceback (most recent call last):\n  File \"launch.py\", line 253, in main\n    process.wait()\nKeyboardInterrupt\n";
        let c = log(&format!("{NOISE}{interrupt}"));
        assert_eq!(c.signature, Signature::Deadlock);
        assert_eq!(c.rule.as_deref(), Some("interrupted-by-hand"));
        assert_eq!(
            (c.line, c.decided_by),
            (Some(3), Some(DecidedBy::HangLines))
        );
        let c = log(&format!(
            "{NOISE}RuntimeError: CUDA error: an illegal memory access was encountered\n{interrupt}"
        ));
        assert_eq!(c.signature, Signature::IllegalAddress);
        let c = log(&format!(
            "{NOISE}ERROR    Error loading the model: exit code: -4\n^C\n"
        ));
        assert_eq!(c.signature, Signature::Unknown);
        // A server stopped by hand after serving well.
        let c = log(&format!(
            "{NOISE}^CINFO:     Shutting down\nINFO:     Application shutdown complete.\n"
        ));
        assert_eq!(c.signature, Signature::Unknown);
    }

    /// CPython's fatal-error handler lists the extension modules after the stacks; a dump on a
    /// timer does not. Stacks that end with the list are a crash whose header was cut.
    #[test]
    fn a_stack_dump_of_a_fatal_error_is_no_hang() {
        let stacks = "Thread 0x00007f1 (most recent call first):\n  File \"/usr/lib/python3.12/threading.py\", line 359 in wait\n  File \"/usr/lib/python3.12/threading.py\", line 655 in wait\n\nCurrent thread 0x00007f2 (most recent call first):\n  File \"/usr/lib/python3.12/ast.py\", line 274 in iter_child_nodes\n";
        let c = log(&format!("{NOISE}{stacks}"));
        assert_eq!(c.signature, Signature::Deadlock);
        let c = log(&format!(
            "{NOISE}{stacks}\nExtension modules: numpy._core._multiarray_umath, torch._C (total: 2)\n"
        ));
        assert_eq!(c.signature, Signature::Unknown);
        assert_eq!(c.rule.as_deref(), Some("fatal-error-modules"));
    }

    #[test]
    fn file_errors_name_the_path() {
        let err = Classifier::builtin()
            .classify_file(Path::new("/nonexistent/cell.log"), &Evidence::default())
            .expect_err("missing");
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("/nonexistent/cell.log"), "{err}");
    }

    #[test]
    fn user_rules_are_tried_first() {
        let user = [UserRule {
            pattern: "Unsupported tile shape config \\d+ for MoE gemm".to_owned(),
            signature: Signature::NoKernelImage,
            precedence: 0,
            spurious: false,
            explanation: Some("SM110 reuses SM100 cubins".to_owned()),
            hint: None,
        }];
        let classifier = Classifier::with_rules(&user).expect("rules");
        let c = classifier
            .classify_reader(
                "RuntimeError: Unsupported tile shape config 256256128 for MoE gemm\n".as_bytes(),
                &Evidence::default(),
            )
            .expect("classify");
        assert_eq!(c.signature, Signature::NoKernelImage);
        assert_eq!(c.rule.as_deref(), Some("matrix-rule-1"));
        assert_eq!(c.explanation.as_deref(), Some("SM110 reuses SM100 cubins"));
        // Anchored user patterns see the line without its prefixes.
        let user = [UserRule {
            pattern: "^MyEngineError: .*$".to_owned(),
            signature: Signature::WrongOutput,
            ..user[0].clone()
        }];
        let classifier = Classifier::with_rules(&user).expect("rules");
        let c = classifier
            .classify_reader(
                "[rank0]: MyEngineError: answer drifted\n".as_bytes(),
                &Evidence::default(),
            )
            .expect("classify");
        assert_eq!((c.signature, c.line), (Signature::WrongOutput, Some(1)));
    }
}
