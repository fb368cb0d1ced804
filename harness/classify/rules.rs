//! The rule table: the built-in rules of `rules.toml` plus a matrix file's `[[rules]]`, compiled
//! into one trigger prefilter and, for each trigger word, the rules it gates (`gates.rs`).
//!
//! The data file is the single place where log lines get their meaning; this module only parses,
//! validates and compiles it. Its tests run every rule's examples through the whole classifier.

use super::ClassifyError;
use super::gates::{Gates, gates, relaxed};
use super::scan::ScratchPool;
use crate::matrix::UserRule;
use crate::signature::Signature;
use aho_corasick::{AhoCorasick, AhoCorasickKind};
use regex::{Regex, RegexBuilder};
use regex_automata::nfa::thompson;
use regex_automata::{MatchKind, hybrid};
use serde::Deserialize;
use std::cmp::Reverse;
use std::fmt;
use std::sync::OnceLock;

/// The built-in rule table, as shipped.
pub const BUILTIN_RULES: &str = include_str!("rules.toml");

/// Compiled-program limits: generous, for the longest rules (and the trigger regex that holds a
/// matrix file's patterns).
const SIZE_LIMIT: usize = 256 << 20;
const DFA_SIZE_LIMIT: usize = 64 << 20;
/// Lazy-DFA cache of the quiet-line set, per scan worker, kept between logs. At 4 MiB the variety
/// of real healthy logs overflowed it again and again (`benches/classify.rs`, `healthy-logs`).
const RAW_DFA_SIZE_LIMIT: usize = 16 << 20;

/// How a rule's line takes part in picking the root cause (see `rules.toml`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A root-cause candidate: the first one in the log wins.
    #[default]
    Fatal,
    /// Context that never beats a fatal line.
    Weak,
    /// The log shows a hang; loses to any fatal line.
    Hang,
    /// Never a root cause; marks a later fatal line as spurious.
    Context,
    /// Noise that may also be a cause (a library's import-time complaint it survives): names
    /// the failure only where the log has no fatal, hang or weak line and no degenerate output.
    Background,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RulesFile {
    pub(crate) triggers: Vec<String>,
    #[serde(rename = "rule")]
    pub(crate) rules: Vec<RuleSpec>,
}

/// One `[[rule]]` of `rules.toml`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RuleSpec {
    pub(crate) id: String,
    pub(crate) signature: Signature,
    pub(crate) pattern: String,
    #[serde(default)]
    pub(crate) kind: Kind,
    #[serde(default)]
    pub(crate) precedence: i32,
    #[serde(default)]
    pub(crate) any_level: bool,
    #[serde(default)]
    pub(crate) wrapper: bool,
    #[serde(default)]
    pub(crate) spurious: bool,
    #[serde(default)]
    pub(crate) relaunch: bool,
    #[serde(default)]
    pub(crate) tag: Option<String>,
    #[serde(default)]
    pub(crate) spurious_if: Option<String>,
    #[serde(default = "one")]
    pub(crate) min_count: u32,
    #[serde(default)]
    pub(crate) unless: Option<String>,
    #[serde(default)]
    pub(crate) code: bool,
    #[serde(default)]
    pub(crate) only_without_errors: bool,
    #[serde(default)]
    pub(crate) ends_log: bool,
    #[serde(default)]
    pub(crate) names_nothing: bool,
    #[serde(default)]
    pub(crate) covers: u32,
    #[serde(default)]
    pub(crate) covers_exception: Option<String>,
    #[serde(default)]
    pub(crate) covers_signature: Option<Signature>,
    pub(crate) explanation: String,
    #[serde(default)]
    pub(crate) hint: Option<String>,
    /// Lines the rule must classify (checked by the tests only).
    #[serde(default)]
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
    pub(crate) examples: Vec<String>,
    #[serde(default)]
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
    pub(crate) not_examples: Vec<String>,
}

fn one() -> u32 {
    1
}

/// A compiled rule.
#[derive(Debug)]
pub(crate) struct Rule {
    pub(crate) id: String,
    pub(crate) signature: Signature,
    pub(crate) kind: Kind,
    pub(crate) precedence: i32,
    /// From the matrix file: tried before the built-in rules on the same line.
    pub(crate) user: bool,
    pub(crate) any_level: bool,
    pub(crate) wrapper: bool,
    pub(crate) spurious: bool,
    /// A spurious fault a fresh launch avoids: the attempt is run again at once.
    pub(crate) relaunch: bool,
    pub(crate) tag: Option<String>,
    pub(crate) spurious_if: Option<String>,
    pub(crate) min_count: u32,
    pub(crate) unless: Option<Regex>,
    /// Also fires on source lines a traceback quotes (`File "..."`, `raise X("...")`): the raise
    /// site names the exception even when the log was cut before its message.
    pub(crate) code: bool,
    /// A hang rule that decides only when the log has no error line at all (a stack dump is a
    /// hang only if nothing crashed).
    pub(crate) only_without_errors: bool,
    /// A hang rule whose sightings must end the log: a waiting message the process went on from
    /// (a line of progress after the last one) shows a wait, not a hang.
    pub(crate) ends_log: bool,
    /// (`unknown` rules) The line says a process failed but not why (a generic exception, a
    /// reported death): the lexical model may still name the log. Rules that leave a log
    /// `unknown` on purpose (an infrastructure fault, a device-side assert) do not say this.
    pub(crate) names_nothing: bool,
    /// (background rules) Lines after the complaint that still belong to it: the traceback a
    /// library logs with its warning. A fatal line of the same signature within them is read as
    /// part of the complaint, which the process survived.
    pub(crate) covers: u32,
    /// (background rules) An exception line of another kind the covered traceback ends with
    /// (`OSError`, what a failed library load raises), absorbed as well.
    pub(crate) covers_exception: Option<String>,
    /// (background rules) The signature of the fatal lines `covers` reads as the complaint's,
    /// where it is not the rule's own: xFormers' Triton probe names no failure, but the
    /// traceback it logs ends in an import error.
    pub(crate) covers_signature: Signature,
    pub(crate) explanation: Option<String>,
    pub(crate) hint: Option<String>,
}

/// Orders rules that compete on one line or a near tie: user rules first, then precedence, then
/// the earlier rule of the table.
pub(crate) type Rank = (bool, i32, Reverse<usize>);

/// Every rule, compiled for one streaming pass.
pub(crate) struct Table {
    pub(crate) rules: Vec<Rule>,
    /// Raw-byte prefilter: a line is examined only if it matches. `None` examines every line
    /// (a user pattern with anchors cannot be prefiltered on raw lines).
    pub(crate) trigger: Option<Trigger>,
    /// Whether some rule looks at quoted source lines.
    pub(crate) any_code: bool,
    /// The trigger words again, every occurrence found: which rules a line's words gate.
    pub(crate) gate: AhoCorasick,
    /// For each trigger word, the rules it gates, in table order (`gates.rs`).
    pub(crate) gated: Vec<Vec<usize>>,
    /// Rules no trigger word gates (a matrix file's, or a branch of short text): tried on every
    /// examined line.
    pub(crate) ungated: Vec<usize>,
    /// Each rule's own pattern, compiled the first time a line's words call for it.
    pub(crate) matchers: Vec<OnceLock<Option<Regex>>>,
    /// Each rule's relaxed pattern (`gates::relaxed`), for plain raw lines, compiled when first
    /// needed.
    loose: Vec<OnceLock<Loose>>,
    /// The relaxed patterns of every `any-level` rule (what a quiet line can fire) as one lazy
    /// DFA, built when a quiet line first needs it: quiet lines come by the thousand, alike but
    /// for their numbers, and one warm automaton reads them at once. `None`: some pattern could
    /// not be relaxed, and every quiet line is examined.
    raw_quiet: OnceLock<Option<RawSet>>,
    patterns: Vec<String>,
    /// The scan workers' caches, kept from one scan to the next.
    pub(crate) scratch: ScratchPool,
}

/// What a rule's relaxed pattern says of a raw line.
#[derive(Debug)]
pub(crate) enum Loose {
    /// A pattern that could not be relaxed or compiled: the rule may fire on any line.
    Always,
    Regex(regex::bytes::Regex),
}

impl Loose {
    fn is_match(&self, raw: &[u8]) -> bool {
        match self {
            Loose::Always => true,
            Loose::Regex(re) => re.is_match(raw),
        }
    }
}

/// The first-stage prefilter: the trigger words (Aho-Corasick, ASCII case-insensitive, plus the
/// non-ASCII words exactly), or a regex when a matrix file's own patterns have to be searched too.
pub(crate) enum Trigger {
    Words(AhoCorasick),
    Regex(regex::bytes::Regex),
}

impl Trigger {
    /// The end of the earliest match at or after `start`.
    pub(crate) fn next_end(&self, haystack: &[u8], start: usize) -> Option<usize> {
        match self {
            Trigger::Words(ac) => ac
                .find(aho_corasick::Input::new(haystack).span(start..haystack.len()))
                .map(|m| m.end()),
            Trigger::Regex(re) => re.shortest_match_at(haystack, start),
        }
    }
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("rules", &self.rules.len())
            .field("prefiltered", &self.trigger.is_some())
            .finish()
    }
}

impl Table {
    /// The built-in table plus `user` rules.
    pub(crate) fn build(user: &[UserRule]) -> Result<Table, ClassifyError> {
        let file = parse_builtin()?;
        Table::compile(&file, user)
    }

    pub(crate) fn compile(file: &RulesFile, user: &[UserRule]) -> Result<Table, ClassifyError> {
        let mut rules = Vec::with_capacity(file.rules.len() + user.len());
        let mut patterns = Vec::with_capacity(rules.capacity());
        for (i, r) in user.iter().enumerate() {
            let id = format!("matrix-rule-{}", i + 1);
            compile_one(&id, &r.pattern)?;
            patterns.push(r.pattern.clone());
            rules.push(Rule {
                id,
                signature: r.signature,
                kind: Kind::Fatal,
                precedence: r.precedence,
                user: true,
                any_level: true,
                wrapper: false,
                spurious: r.spurious,
                relaunch: false,
                tag: None,
                spurious_if: None,
                min_count: 1,
                unless: None,
                code: false,
                only_without_errors: false,
                ends_log: false,
                names_nothing: false,
                covers: 0,
                covers_exception: None,
                covers_signature: r.signature,
                explanation: Some(
                    r.explanation.clone().unwrap_or_else(|| {
                        format!("matched the matrix file's rule `{}`", r.pattern)
                    }),
                ),
                hint: r.hint.clone(),
            });
        }
        for spec in &file.rules {
            check_syntax(&spec.id, &spec.pattern)?;
            let unless = match &spec.unless {
                Some(p) => Some(compile_one(&spec.id, p)?),
                None => None,
            };
            patterns.push(spec.pattern.clone());
            rules.push(Rule {
                id: spec.id.clone(),
                signature: spec.signature,
                kind: spec.kind,
                precedence: spec.precedence,
                user: false,
                any_level: spec.any_level,
                wrapper: spec.wrapper,
                spurious: spec.spurious,
                relaunch: spec.relaunch,
                tag: spec.tag.clone(),
                spurious_if: spec.spurious_if.clone(),
                min_count: spec.min_count.max(1),
                unless,
                code: spec.code,
                only_without_errors: spec.only_without_errors,
                ends_log: spec.ends_log,
                names_nothing: spec.names_nothing,
                covers: spec.covers,
                covers_exception: spec.covers_exception.clone(),
                covers_signature: spec.covers_signature.unwrap_or(spec.signature),
                explanation: Some(spec.explanation.clone()),
                hint: spec.hint.clone(),
            });
        }
        let trigger = trigger(&file.triggers, user)?;
        let any_code = rules.iter().any(|r| r.code);
        let to_gate: Vec<Option<&str>> = rules
            .iter()
            .zip(&patterns)
            .map(|(rule, pattern)| (!rule.user).then_some(pattern.as_str()))
            .collect();
        let Gates {
            words,
            rules: gates,
        } = gates(&to_gate, &file.triggers);
        let mut gated = vec![Vec::new(); words.len()];
        let mut ungated = Vec::new();
        for (index, gate) in gates.into_iter().enumerate() {
            match gate {
                Some(words) => words.into_iter().for_each(|w| gated[w].push(index)),
                None => ungated.push(index),
            }
        }
        let matchers: Vec<OnceLock<Option<Regex>>> =
            (0..rules.len()).map(|_| OnceLock::new()).collect();
        let loose = (0..rules.len()).map(|_| OnceLock::new()).collect();
        for (index, r) in user.iter().enumerate() {
            let _ = matchers[index].set(compile_one(&rules[index].id, &r.pattern).ok());
        }
        let gate = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(AhoCorasickKind::DFA))
            .build(&words)
            .map_err(|err| ClassifyError::Set {
                source: regex::Error::Syntax(err.to_string()),
            })?;
        Ok(Table {
            rules,
            trigger,
            any_code,
            gate,
            gated,
            ungated,
            matchers,
            loose,
            raw_quiet: OnceLock::new(),
            patterns,
            scratch: ScratchPool::default(),
        })
    }

    /// The rules that may fire on `text` (the words in it gate them, or no word gates them), in
    /// table order.
    fn candidates(&self, text: &[u8]) -> Vec<usize> {
        let mut out = self.ungated.clone();
        for found in self.gate.find_overlapping_iter(text) {
            out.extend_from_slice(&self.gated[found.pattern().as_usize()]);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether some rule may fire on a plain raw line once it is cleaned: the raw text's words
    /// gate it, and its relaxed pattern matches the raw text (the cleaned line is a piece of it).
    /// Each rule is tried on its own: a log's failure lines vary, and one automaton of many
    /// rules builds states for each new line.
    pub(crate) fn may_fire(&self, raw: &[u8]) -> bool {
        self.candidates(raw)
            .into_iter()
            .any(|i| self.loose_of(i).is_match(raw))
    }

    /// The set of every `any-level` rule's relaxed pattern, for quiet lines ([`Table::raw_quiet`]).
    pub(crate) fn raw_quiet(&self) -> Option<&RawSet> {
        self.raw_quiet
            .get_or_init(|| {
                let patterns: Option<Vec<String>> = self
                    .rules
                    .iter()
                    .zip(&self.patterns)
                    .filter(|(rule, _)| rule.any_level)
                    .map(|(_, pattern)| relaxed(pattern).ok())
                    .collect();
                relaxed_set(&patterns?).ok()
            })
            .as_ref()
    }

    /// Rule `index`'s relaxed pattern, compiled the first time it is asked for.
    fn loose_of(&self, index: usize) -> &Loose {
        self.loose[index].get_or_init(|| {
            // A pattern that cannot be relaxed (a matrix rule's odd syntax) matches every line.
            relaxed(&self.patterns[index])
                .ok()
                .map_or(Loose::Always, |pattern| {
                    regex::bytes::RegexBuilder::new(&pattern)
                        .unicode(false)
                        .size_limit(SIZE_LIMIT)
                        .build()
                        .map_or(Loose::Always, Loose::Regex)
                })
        })
    }

    /// The rules whose patterns match `text` (a cleaned line), in table order.
    pub(crate) fn matching(&self, text: &str) -> Vec<usize> {
        let mut found = self.candidates(text.as_bytes());
        found.retain(|&i| {
            self.matchers[i]
                .get_or_init(|| {
                    compile_one(&self.rules[i].id, &self.patterns[i])
                        .inspect_err(|err| tracing::warn!("rule left out: {err}"))
                        .ok()
                })
                .as_ref()
                .is_some_and(|re| re.is_match(text))
        });
        found
    }

    /// Orders rules that fire on the same line.
    pub(crate) fn rank(&self, index: usize) -> Rank {
        let rule = &self.rules[index];
        (rule.user, rule.precedence, Reverse(index))
    }

    /// Orders fatal lines near a wrapper: only a strictly higher precedence replaces it.
    pub(crate) fn precedence(&self, index: usize) -> (bool, i32) {
        let rule = &self.rules[index];
        (rule.user, rule.precedence)
    }
}

pub(crate) fn parse_builtin() -> Result<RulesFile, ClassifyError> {
    toml::from_str(BUILTIN_RULES).map_err(|source| ClassifyError::Table {
        source: Box::new(source),
    })
}

/// Checks a built-in pattern's syntax and names the rule if it is wrong. Compiling every pattern
/// at start-up, as a matrix file's rules are, would cost a third of it: each is compiled the first
/// time a line's words call for it ([`Table::matching`]), and the tests compile them all.
fn check_syntax(rule: &str, pattern: &str) -> Result<(), ClassifyError> {
    regex_syntax::Parser::new()
        .parse(pattern)
        .map(drop)
        .map_err(|err| bad_pattern(rule, pattern, regex::Error::Syntax(err.to_string())))
}

fn compile_one(rule: &str, pattern: &str) -> Result<Regex, ClassifyError> {
    RegexBuilder::new(pattern)
        .size_limit(SIZE_LIMIT)
        .build()
        .map_err(|source| bad_pattern(rule, pattern, source))
}

fn bad_pattern(rule: &str, pattern: &str, source: regex::Error) -> ClassifyError {
    ClassifyError::Pattern {
        rule: rule.to_owned(),
        pattern: pattern.to_owned(),
        source,
    }
}

/// One raw-line set of patterns already relaxed (see [`relaxed`]).
fn relaxed_set<P: AsRef<str>>(patterns: &[P]) -> Result<RawSet, ClassifyError> {
    let syntax = regex_automata::util::syntax::Config::new()
        .unicode(false)
        .utf8(false);
    // A lazy DFA on its own rather than the `meta` engine, for one setting: the meta engine's
    // lazy DFA gives up after three cache clears that built a state every few bytes, and falls
    // back to an NFA simulation 70 to 200 times slower for as long as the cache lives; the
    // caches live from one log to the next (`scan::ScratchPool`). Here a full cache is cleared
    // and rebuilt, never abandoned.
    let config = hybrid::dfa::Config::new()
        .match_kind(MatchKind::All)
        .cache_capacity(RAW_DFA_SIZE_LIMIT)
        .minimum_cache_clear_count(None);
    hybrid::dfa::Builder::new()
        .syntax(syntax)
        .thompson(thompson::Config::new().nfa_size_limit(Some(SIZE_LIMIT)))
        .configure(config)
        .build_many(patterns)
        .map(RawSet)
        .map_err(|err| ClassifyError::Set {
            source: regex::Error::Syntax(err.to_string()),
        })
}

/// Relaxed patterns for raw lines, searched with a cache the caller keeps: each scan worker has
/// its own, where the `regex` crate's shared pool would make every thread but its first one take
/// a lock per line.
pub(crate) struct RawSet(hybrid::dfa::DFA);

impl RawSet {
    pub(crate) fn cache(&self) -> hybrid::dfa::Cache {
        self.0.create_cache()
    }

    /// Whether some pattern matches somewhere in `raw`; `cache` must come from [`RawSet::cache`]
    /// of this set. A search the lazy DFA cannot finish (it has no quit bytes and never gives up,
    /// so this is not expected) answers yes: the line is then examined, never skipped.
    pub(crate) fn is_match(&self, cache: &mut hybrid::dfa::Cache, raw: &[u8]) -> bool {
        self.0
            .try_search_fwd(cache, &regex_automata::Input::new(raw).earliest(true))
            .map_or(true, |found| found.is_some())
    }
}

impl fmt::Debug for RawSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RawSet")
    }
}

/// The prefilter: the trigger words, any case, plus every user pattern. A user pattern that is
/// anchored (or might be: any `^`, `$`, `\A`, `\z`) refers to the cleaned line, which a raw-line
/// search cannot see, so then there is no prefilter at all.
fn trigger(words: &[String], user: &[UserRule]) -> Result<Option<Trigger>, ClassifyError> {
    if user.iter().any(|r| {
        r.pattern.contains(['^', '$']) || r.pattern.contains("\\A") || r.pattern.contains("\\z")
    }) {
        return Ok(None);
    }
    if user.is_empty() {
        // Words only: one Aho-Corasick automaton, ASCII case folded (non-ASCII words are exact).
        return AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .kind(Some(AhoCorasickKind::DFA))
            .build(words)
            .map(|ac| Some(Trigger::Words(ac)))
            .map_err(|err| ClassifyError::Set {
                source: regex::Error::Syntax(err.to_string()),
            });
    }
    // ASCII words match in any case, byte by byte (fast); others (`已杀死`) exactly.
    let (ascii, other): (Vec<&String>, Vec<&String>) = words.iter().partition(|w| w.is_ascii());
    let join = |words: &[&String]| {
        words
            .iter()
            .map(|w| regex::escape(w))
            .collect::<Vec<_>>()
            .join("|")
    };
    let mut alternatives: Vec<String> = vec![format!("(?i-u:{})", join(&ascii))];
    if !other.is_empty() {
        alternatives.push(format!("(?:{})", join(&other)));
    }
    alternatives.extend(user.iter().map(|r| format!("(?:{})", r.pattern)));
    regex::bytes::RegexBuilder::new(&alternatives.join("|"))
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(DFA_SIZE_LIMIT)
        .build()
        .map(|re| Some(Trigger::Regex(re)))
        .map_err(|source| ClassifyError::Set { source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::gates::{branches, longest_text, parse_ascii, witness};
    use crate::classify::{Classifier, Evidence};
    use std::collections::{HashMap, HashSet};

    /// Prefixes real logs put in front of a message; every example must survive each of them.
    const PREFIXES: [&str; 5] = [
        "",
        "[rank3]: ",
        "(VllmWorker TP1 pid=4242) ",
        "vllm-1  | ",
        "[2025-12-09 02:28:15 TP0] ",
    ];

    fn classify(text: &str) -> crate::classify::Classification {
        Classifier::builtin()
            .rules_only()
            .classify_reader(text.as_bytes(), &Evidence::default())
            .expect("classify")
    }

    #[test]
    fn table_is_valid() {
        let file = parse_builtin().expect("rules.toml parses");
        assert!(file.rules.len() >= 40, "{} rules", file.rules.len());
        let mut ids = HashSet::new();
        let tags: HashSet<&str> = file.rules.iter().filter_map(|r| r.tag.as_deref()).collect();
        for rule in &file.rules {
            assert!(ids.insert(rule.id.as_str()), "duplicate id {}", rule.id);
            assert!(
                rule.id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{}: ids are kebab-case",
                rule.id
            );
            assert!(
                !rule.explanation.trim().is_empty(),
                "{}: explanation",
                rule.id
            );
            assert!(!rule.examples.is_empty(), "{}: needs an example", rule.id);
            Regex::new(&rule.pattern).unwrap_or_else(|e| panic!("{}: {e}", rule.id));
            if let Some(unless) = &rule.unless {
                Regex::new(unless).unwrap_or_else(|e| panic!("{}: unless: {e}", rule.id));
            }
            if let Some(tag) = &rule.spurious_if {
                assert!(
                    tags.contains(tag.as_str()),
                    "{}: no rule has tag {tag}",
                    rule.id
                );
            }
            assert!(
                !rule.relaunch || rule.spurious,
                "{}: only an infrastructure fault is relaunched",
                rule.id
            );
            if rule.kind == Kind::Context {
                assert!(
                    rule.tag.is_some(),
                    "{}: a context rule needs a tag",
                    rule.id
                );
            }
            if rule.kind == Kind::Hang {
                assert!(
                    matches!(rule.signature, Signature::Deadlock | Signature::Timeout),
                    "{}: hang rules name a hang",
                    rule.id
                );
            }
            if rule.spurious {
                assert_eq!(
                    rule.signature,
                    Signature::Unknown,
                    "{}: infrastructure faults are outside the taxonomy",
                    rule.id
                );
            }
        }
        Table::compile(&file, &[]).expect("compiles");
    }

    /// A test per rule: every example classifies as its rule's signature, by that rule, bare and
    /// behind the prefixes of real logs; every not-example does not fire the rule.
    #[test]
    fn every_rule_classifies_its_examples() {
        let file = parse_builtin().expect("rules.toml parses");
        let mut failures = Vec::new();
        for rule in &file.rules {
            for example in &rule.examples {
                for prefix in PREFIXES {
                    let text = match rule.kind {
                        Kind::Hang => {
                            format!("{prefix}{example}\n").repeat(rule.min_count as usize)
                        }
                        Kind::Context => format!(
                            "{prefix}{example}\nERROR: No matching distribution found for torch==2.5.1\n"
                        ),
                        Kind::Fatal | Kind::Weak | Kind::Background => {
                            format!("{prefix}{example}\n")
                        }
                    };
                    let got = classify(&text);
                    let (want_rule, want_sig) = match rule.kind {
                        Kind::Context => ("unresolvable-pins", Signature::DependencyError),
                        _ => (rule.id.as_str(), rule.signature),
                    };
                    let ok = got.rule.as_deref() == Some(want_rule)
                        && got.signature == want_sig
                        && got.line == Some(1 + u64::from(rule.kind == Kind::Context))
                        && (rule.kind != Kind::Context || got.spurious)
                        && got.spurious == (rule.spurious || rule.kind == Kind::Context);
                    if !ok {
                        failures.push(format!(
                            "{}: {prefix:?}{example:?} -> {} by {:?} at {:?} (spurious {})",
                            rule.id, got.signature, got.rule, got.line, got.spurious
                        ));
                    }
                }
            }
            for line in &rule.not_examples {
                let got = classify(&format!("{line}\n"));
                if got.rule.as_deref() == Some(rule.id.as_str()) {
                    failures.push(format!("{}: fired on not-example {line:?}", rule.id));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    /// The trigger words are what keeps the scan fast: a word that healthy serving lines hold
    /// (`.py:` is in every vLLM log line) sends each of them through the rules.
    #[test]
    fn trigger_words_pass_over_healthy_serving_lines() {
        let file = parse_builtin().expect("rules.toml parses");
        let Some(Trigger::Words(words)) = trigger(&file.triggers, &[]).expect("triggers build")
        else {
            panic!("the built-in triggers are plain words");
        };
        for line in [
            "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.2 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 2.1%, Prefix cache hit rate: 0.0%",
            "INFO 05-28 14:44:28 [async_llm.py:261] Added request chatcmpl-6d4c0f.",
            "(APIServer pid=81599) INFO:     127.0.0.1:56038 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
            "node-0:2874:7128 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM/read",
            "[2025-12-09 02:28:15 TP0] Decode batch. #running-req: 12, #token: 4096, token usage: 0.05, gen throughput (token/s): 812.33, #queue-req: 0",
            "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.12s/it]",
        ] {
            assert!(
                words.find(line.as_bytes()).is_none(),
                "a trigger word matches a healthy line: {line}"
            );
        }
    }

    /// A trigger word that holds another (`read timeout` holds `timeout`) can never be the reason
    /// a line is examined: it only makes the automaton bigger, and hides which word does the work.
    #[test]
    fn no_trigger_word_holds_another() {
        let file = parse_builtin().expect("rules.toml parses");
        let fold = |w: &String| {
            if w.is_ascii() {
                w.to_ascii_lowercase()
            } else {
                w.clone()
            }
        };
        let words: Vec<String> = file.triggers.iter().map(fold).collect();
        let mut held = Vec::new();
        for (i, word) in words.iter().enumerate() {
            for (j, other) in words.iter().enumerate() {
                if i != j && word.contains(other.as_str()) && (word != other || i > j) {
                    held.push(format!("{word:?} holds {other:?}"));
                }
            }
        }
        assert!(
            held.is_empty(),
            "redundant trigger words:\n{}",
            held.join("\n")
        );
    }

    /// The raw-line prefilter is only as good as its weakest pattern: one that cannot be relaxed
    /// would match every line.
    #[test]
    fn every_pattern_relaxes_for_the_raw_prefilter() {
        let file = parse_builtin().expect("rules.toml parses");
        for rule in &file.rules {
            let relaxed = relaxed(&rule.pattern).unwrap_or_else(|e| panic!("{}: {e}", rule.id));
            let re = regex::bytes::RegexBuilder::new(&relaxed)
                .unicode(false)
                .build()
                .unwrap_or_else(|e| panic!("{}: {e}", rule.id));
            for example in &rule.examples {
                if example.is_ascii() {
                    assert!(re.is_match(example.as_bytes()), "{}: {example}", rule.id);
                }
            }
        }
    }

    /// Every way a pattern can match must hold a trigger word, since the scan skips lines
    /// without one unexamined: a branch that holds none (`Duplicate GPU detected : rank \d+`
    /// once) fires only where some other word shares its line. A branch is covered when a run
    /// of literal text it always matches holds a word, or when each of its own branches is
    /// covered. A branch whose longest literal text is short (`\bSIGTERM\b`, `cudaErrorX = 700`)
    /// is left to the words around it on purpose: a short word would send many healthy lines
    /// through the rules.
    #[test]
    fn every_branch_of_a_pattern_holds_a_trigger_word() {
        let file = parse_builtin().expect("rules.toml parses");
        let words: Vec<Vec<u8>> = file
            .triggers
            .iter()
            .map(|w| w.to_ascii_lowercase().into_bytes())
            .collect();
        let mut dead = Vec::new();
        for rule in &file.rules {
            let hir = parse_ascii(&rule.pattern).unwrap_or_else(|e| panic!("{}: {e}", rule.id));
            let branches = branches(&hir);
            for (nth, branch) in branches.iter().enumerate() {
                let word = String::from_utf8_lossy(&longest_text(branch)).into_owned();
                if word.trim().len() >= SHORT_TEXT && witness(branch, &words).is_none() {
                    dead.push(format!(
                        "{}: branch {} of {}: add a trigger word such as {word:?}",
                        rule.id,
                        nth + 1,
                        branches.len()
                    ));
                }
            }
        }
        assert!(
            dead.is_empty(),
            "{} pattern branches hold no trigger word and fire only beside another word:\n{}",
            dead.len(),
            dead.join("\n")
        );
    }

    /// A branch's literal text this long or longer is a trigger word of its own.
    const SHORT_TEXT: usize = 10;

    /// Few built-in rules go ungated (tried on every examined line): each is a branch whose text
    /// is too short to be a trigger word, fired beside another word's line.
    #[test]
    fn trigger_words_gate_nearly_every_rule() {
        let table = Table::build(&[]).expect("builds");
        let ungated: Vec<&str> = table
            .ungated
            .iter()
            .map(|&i| table.rules[i].id.as_str())
            .collect();
        assert!(
            ungated.len() <= 12,
            "{} ungated: {ungated:?}",
            ungated.len()
        );
        let gated: usize = table.gated.iter().map(Vec::len).sum();
        assert!(gated >= table.rules.len() - ungated.len(), "{gated}");
    }

    /// Matching only the rules a line's words gate finds every rule whose pattern matches: over
    /// every example and not-example line of the table, it agrees with matching every rule.
    #[test]
    fn gated_matching_finds_every_rule_that_matches() {
        let table = Table::build(&[]).expect("builds");
        let file = parse_builtin().expect("rules.toml parses");
        let every: Vec<Regex> = file
            .rules
            .iter()
            .map(|r| compile_one(&r.id, &r.pattern).expect("compiles"))
            .collect();
        let mut checked = 0;
        for line in file
            .rules
            .iter()
            .flat_map(|r| r.examples.iter().chain(&r.not_examples))
        {
            let text = crate::classify::line::clean(line.as_bytes()).text;
            let all: Vec<usize> = (0..every.len())
                .filter(|&i| every[i].is_match(&text))
                .collect();
            assert_eq!(table.matching(&text), all, "{line}");
            checked += 1;
        }
        assert!(checked > 500, "{checked}");
    }

    /// A built-in pattern that does not parse names its rule.
    #[test]
    fn a_bad_built_in_pattern_names_its_rule() {
        let err = check_syntax("my-rule", "(unclosed").expect_err("bad syntax");
        assert!(err.to_string().contains("my-rule"), "{err}");
    }

    /// `names-nothing` opens a verdict to the lexical model: only a rule that leaves a log
    /// `unknown` without calling it an infrastructure fault may say it.
    #[test]
    fn only_unknown_rules_that_blame_nothing_name_nothing() {
        let file = parse_builtin().expect("rules.toml parses");
        let open: Vec<&str> = file
            .rules
            .iter()
            .filter(|r| r.names_nothing)
            .map(|r| r.id.as_str())
            .collect();
        assert!(open.contains(&"python-exception"), "{open:?}");
        for rule in file.rules.iter().filter(|r| r.names_nothing) {
            assert_eq!(rule.signature, Signature::Unknown, "{}", rule.id);
            assert!(!rule.spurious && rule.spurious_if.is_none(), "{}", rule.id);
        }
    }

    /// A hang seen once (`<id>-once`: a lesser verdict, only in a log without errors) and seen
    /// again and again (`<id>`) are one message read twice: the twins keep one pattern, so a
    /// wording taught to one is taught to both.
    #[test]
    fn a_hang_seen_once_keeps_its_twins_pattern() {
        let file = parse_builtin().expect("rules.toml parses");
        let by_id: HashMap<&str, &RuleSpec> =
            file.rules.iter().map(|r| (r.id.as_str(), r)).collect();
        let mut twins = 0;
        for rule in &file.rules {
            let Some(base) = rule.id.strip_suffix("-once") else {
                continue;
            };
            let twin = by_id
                .get(base)
                .unwrap_or_else(|| panic!("{}: no rule {base}", rule.id));
            assert_eq!(rule.pattern, twin.pattern, "{} and {base}", rule.id);
            assert_eq!(rule.unless, twin.unless, "{} and {base}", rule.id);
            assert!(
                rule.min_count < twin.min_count,
                "{}: seen once is fewer sightings",
                rule.id
            );
            assert!(
                rule.only_without_errors,
                "{}: seen once decides only without errors",
                rule.id
            );
            assert_eq!(rule.any_level, twin.any_level, "{} and {base}", rule.id);
            twins += 1;
        }
        assert!(twins > 0, "no `-once` rule left to check");
    }

    #[test]
    fn every_signature_has_a_rule() {
        let file = parse_builtin().expect("rules.toml parses");
        let named: HashSet<Signature> = file.rules.iter().map(|r| r.signature).collect();
        for &sig in Signature::ALL {
            assert!(named.contains(&sig), "no rule names {sig}");
        }
    }

    #[test]
    fn user_rules_come_first_and_bad_patterns_are_errors() {
        let user = [UserRule {
            pattern: "Unsupported tile shape config 256256128".to_owned(),
            signature: Signature::NoKernelImage,
            precedence: 0,
            spurious: false,
            explanation: None,
            hint: Some("wait for SM110 cubins".to_owned()),
        }];
        let table = Table::build(&user).expect("builds");
        assert!(table.trigger.is_some());
        assert!(table.rules[0].user);
        let bad = [UserRule {
            pattern: "(unclosed".to_owned(),
            ..user[0].clone()
        }];
        let err = Table::build(&bad).expect_err("bad pattern");
        assert!(err.to_string().contains("matrix-rule-1"), "{err}");
        let anchored = [UserRule {
            pattern: "^Boom$".to_owned(),
            ..user[0].clone()
        }];
        assert!(Table::build(&anchored).expect("builds").trigger.is_none());
    }
}
