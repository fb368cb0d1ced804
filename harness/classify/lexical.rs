//! The lexical model: a last, weighed reading of a log no rule could name.
//!
//! Rules name a failure from one line they know. A fresh log often has no such line, yet its
//! words still say what kind of failure it is (a loss scale halving to nothing, a cuDNN handle
//! that could not be made, a worker killed while its pool grew). The model is a linear classifier
//! (TF-IDF weights of the words of the log's last lines, multinomial logistic regression) trained
//! by `scripts/train-lexical-model` on the corpus's tuned split, never on its held-out split. It
//! is consulted only where the rules leave the log `unknown` without having named it outside the
//! taxonomy on purpose (an infrastructure fault, a device-side assert), and it names a signature
//! only when its probability reaches the threshold the training chose by cross-validation: a
//! wrong name costs more than `unknown`. The harness's own evidence (the server's answer, a failed
//! answer check) outranks it.
//!
//! Words are runs of ASCII letters and `_` of three or more, lower-cased, read from each line as
//! the rules see it (the prefixes of whatever delivered the log stripped); a hex literal is the
//! word `hexnum`; digits and every other character separate words. The same function reads the
//! words for training (`gpucompat classify --lexical-words`) and for a verdict, so the two cannot
//! drift apart.

use super::line::{self, Level};
use crate::signature::Signature;
use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

/// The trained model, written by `scripts/train-lexical-model`.
const MODEL: &str = include_str!("lexical.model");

/// How many of a guess's heaviest words its evidence names.
const SHOWN_WORDS: usize = 5;

/// A word is this long at least: shorter runs are mostly hex digits and unit suffixes.
const MIN_WORD: usize = 3;

/// The words of a log's last lines and how often each occurs.
pub(crate) type Words = BTreeMap<String, u32>;

/// Counts the words of `lines`. The harness's own notes (`[gpucompat] ...`) say what it saw, not
/// what the cell printed: they are left out as the rules leave them out.
///
/// Each line is read as the rules read it, its writer's prefixes stripped (a compose service's
/// name, a Ray worker's pid, a timestamp, a rank): what delivered a log is not what it says, and a
/// prefix on every line would otherwise outweigh the words that say what failed. The level a
/// prefix gave is kept as its one word (`error`, `warning`, `info`, `debug`).
pub(crate) fn words<S: AsRef<str>>(lines: &[S]) -> Words {
    let mut out = Words::new();
    let notes = crate::exec::logsink::NOTE_PREFIX;
    for line in lines.iter().filter(|l| !l.as_ref().starts_with(notes)) {
        let cleaned = line::clean(line.as_ref().as_bytes());
        let level = level_word(cleaned.level).map(str::to_owned);
        for word in split_words(&cleaned.text).into_iter().chain(level) {
            *out.entry(word).or_insert(0) += 1;
        }
    }
    out
}

/// The word a line's level counts as, the word the prefix itself mostly spells.
fn level_word(level: Level) -> Option<&'static str> {
    match level {
        Level::Unknown => None,
        Level::Error => Some("error"),
        Level::Warning => Some("warning"),
        Level::Info => Some("info"),
        Level::Debug => Some("debug"),
    }
}

fn split_words(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'0'
            && bytes.get(i + 1) == Some(&b'x')
            && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
        {
            i += 2;
            while bytes.get(i).is_some_and(u8::is_ascii_hexdigit) {
                i += 1;
            }
            out.push("hexnum".to_owned());
        } else if is_word_byte(b) {
            let start = i;
            while bytes.get(i).copied().is_some_and(is_word_byte) {
                i += 1;
            }
            if i - start >= MIN_WORD {
                out.push(line[start..i].to_ascii_lowercase());
            }
        } else {
            i += 1;
        }
    }
    out
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

/// What the model makes of a log's words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Guess {
    pub(crate) signature: Signature,
    /// The model's probability for `signature`.
    pub(crate) probability: f64,
    /// The words that weighed most for `signature`, heaviest first, with their weight.
    pub(crate) words: Vec<(String, f64)>,
}

impl Guess {
    /// The guess as evidence: `wrong_output p=0.81: nan, loss, scale`.
    pub(crate) fn describe(&self) -> String {
        let words: Vec<&str> = self.words.iter().map(|(w, _)| w.as_str()).collect();
        format!(
            "{} p={:.2}: {}",
            self.signature,
            self.probability,
            words.join(", ")
        )
    }
}

/// One word of the vocabulary: its inverse document frequency and its weight for each class
/// (only the weights the training kept).
#[derive(Debug)]
struct Term {
    idf: f64,
    weights: Vec<(usize, f64)>,
}

/// The model as read from its file.
#[derive(Debug)]
pub(crate) struct Model {
    classes: Vec<Signature>,
    intercept: Vec<f64>,
    terms: HashMap<String, Term>,
    /// The probability a guess must reach to name a signature.
    pub(crate) threshold: f64,
    /// Reference probabilities the training computed (`check` lines): the tests recompute them.
    pub(crate) checks: Vec<Check>,
}

/// A log of the corpus and the probability the training gave its most likely class.
#[derive(Debug)]
pub(crate) struct Check {
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
    pub(crate) log: String,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
    pub(crate) signature: Signature,
    #[cfg_attr(not(test), expect(dead_code, reason = "read by the tests"))]
    pub(crate) probability: f64,
}

/// The built-in model. It is data compiled into the binary and checked by the tests below, so a
/// parse failure is a build defect: the model is then left out (every log stays with its rules'
/// verdict) rather than failing classification.
pub(crate) static BUILTIN: LazyLock<Option<Arc<Model>>> =
    LazyLock::new(|| Model::parse(MODEL).ok().map(Arc::new));

impl Model {
    /// Reads a model file. Errors say which line and what is wrong.
    pub(crate) fn parse(text: &str) -> Result<Model, String> {
        let mut model = Model {
            classes: Vec::new(),
            intercept: Vec::new(),
            terms: HashMap::new(),
            threshold: f64::NAN,
            checks: Vec::new(),
        };
        for (n, line) in text.lines().enumerate() {
            model
                .read_line(line)
                .map_err(|what| format!("lexical model, line {}: {what}", n + 1))?;
        }
        if model.classes.is_empty() || model.intercept.len() != model.classes.len() {
            return Err(
                "lexical model: no `classes` line, or an `intercept` of another length".to_owned(),
            );
        }
        if !(model.threshold > 0.0 && model.threshold < 1.0) {
            return Err("lexical model: no `threshold` line between 0 and 1".to_owned());
        }
        Ok(model)
    }

    fn read_line(&mut self, line: &str) -> Result<(), String> {
        let mut fields = line.split_ascii_whitespace();
        match fields.next() {
            None => Ok(()),
            Some(c) if c.starts_with('#') => Ok(()),
            Some("classes") if !self.classes.is_empty() => {
                Err("a second `classes` line".to_owned())
            }
            Some("intercept") if !self.intercept.is_empty() => {
                Err("a second `intercept` line".to_owned())
            }
            Some("term") if self.intercept.len() != self.classes.len() => {
                Err("a `term` line before `classes` and `intercept`".to_owned())
            }
            Some("classes") => {
                self.classes = fields
                    .map(|s| Signature::from_str(s).map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?;
                Ok(())
            }
            Some("threshold") => {
                self.threshold = number(fields.next())?;
                Ok(())
            }
            Some("intercept") => {
                self.intercept = fields.map(|f| number(Some(f))).collect::<Result<_, _>>()?;
                Ok(())
            }
            Some("check") => {
                let log = fields
                    .next()
                    .ok_or("a `check` line without its log")?
                    .to_owned();
                let signature = fields
                    .next()
                    .map(Signature::from_str)
                    .transpose()
                    .map_err(|e| e.to_string())?
                    .ok_or("a `check` line without its signature")?;
                let probability = number(fields.next())?;
                self.checks.push(Check {
                    log,
                    signature,
                    probability,
                });
                Ok(())
            }
            Some("term") => self.read_term(fields),
            Some(other) => Err(format!("unknown line kind `{other}`")),
        }
    }

    /// `term WORD IDF CLASS:WEIGHT ...`
    fn read_term<'a>(&mut self, mut fields: impl Iterator<Item = &'a str>) -> Result<(), String> {
        let word = fields.next().ok_or("a `term` line without its word")?;
        let idf = number(fields.next())?;
        let weights = fields
            .map(|f| {
                let (class, weight) = f
                    .split_once(':')
                    .ok_or_else(|| format!("`{f}` is not CLASS:WEIGHT"))?;
                let class: usize = class
                    .parse()
                    .map_err(|_| format!("`{class}` is not a class index"))?;
                if class >= self.classes.len() {
                    return Err(format!("class index {class} is out of range"));
                }
                Ok((class, number(Some(weight))?))
            })
            .collect::<Result<_, String>>()?;
        self.terms.insert(word.to_owned(), Term { idf, weights });
        Ok(())
    }

    /// The most likely class of a log with these words, and its probability. `None` when no word
    /// of the log is in the vocabulary: the model knows nothing of it (scikit-learn would answer
    /// the intercepts' softmax, whose largest probability is far below any threshold).
    pub(crate) fn guess(&self, words: &Words) -> Option<Guess> {
        // TF-IDF with a logarithmic term frequency, normalised to unit length.
        let weighted: Vec<(&str, &Term, f64)> = words
            .iter()
            .filter_map(|(word, &count)| {
                let term = self.terms.get(word)?;
                Some((
                    word.as_str(),
                    term,
                    (1.0 + f64::from(count).ln()) * term.idf,
                ))
            })
            .collect();
        let norm = weighted.iter().map(|(_, _, x)| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            return None;
        }
        let mut scores = self.intercept.clone();
        for (_, term, x) in &weighted {
            for &(class, weight) in &term.weights {
                scores[class] += x / norm * weight;
            }
        }
        let best = (0..scores.len()).max_by(|&a, &b| scores[a].total_cmp(&scores[b]))?;
        let top = scores[best];
        let total: f64 = scores.iter().map(|s| (s - top).exp()).sum();
        let mut heaviest: Vec<(String, f64)> = weighted
            .iter()
            .filter_map(|(word, term, x)| {
                let weight = term.weights.iter().find(|(c, _)| *c == best)?.1 * x / norm;
                (weight > 0.0).then(|| ((*word).to_owned(), weight))
            })
            .collect();
        heaviest.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        heaviest.truncate(SHOWN_WORDS);
        Some(Guess {
            signature: self.classes[best],
            probability: 1.0 / total,
            words: heaviest,
        })
    }
}

fn number(field: Option<&str>) -> Result<f64, String> {
    let field = field.ok_or("a number is missing")?;
    field
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("`{field}` is not a finite number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_lowercased_letter_runs_and_hex_literals() {
        let counted = words(&[
            "RuntimeError: CUDA error: an illegal memory access at 0x7f3aBEEF (sm_90a)",
            "NaN NaN loss=nan",
        ]);
        let expected: Words = [
            ("access", 1),
            ("cuda", 1),
            ("error", 1),
            ("hexnum", 1),
            ("illegal", 1),
            ("loss", 1),
            ("memory", 1),
            ("nan", 3),
            ("runtimeerror", 1),
            ("sm_", 1),
        ]
        .into_iter()
        .map(|(w, n)| (w.to_owned(), n))
        .collect();
        assert_eq!(counted, expected);
    }

    #[test]
    fn digits_and_other_scripts_separate_words_and_short_runs_are_dropped() {
        let counted = words(&["显存不足out of memory12GiB ok 0x 0xg"]);
        let got: Vec<&str> = counted.keys().map(String::as_str).collect();
        assert_eq!(got, ["gib", "memory", "out"]);
    }

    #[test]
    fn what_delivered_a_line_adds_no_words() {
        let bare = words(&[
            "ERROR 02-21 06:30:25 [core.py:291] RuntimeError: CUDA out of memory",
            "Generated text: '!!!!!!!!'",
        ]);
        for wrapped in [
            [
                "vllm-1  | ERROR 02-21 06:30:25 [core.py:291] RuntimeError: CUDA out of memory",
                "vllm-1  | Generated text: '!!!!!!!!'",
            ],
            [
                "(RayWorkerWrapper pid=1234, ip=10.0.0.1) ERROR 02-21 06:30:25 [core.py:291] RuntimeError: CUDA out of memory",
                "(RayWorkerWrapper pid=1234, ip=10.0.0.1) Generated text: '!!!!!!!!'",
            ],
            [
                "2025-03-01T12:00:00.123456789Z ERROR 02-21 06:30:25 [core.py:291] RuntimeError: CUDA out of memory",
                "2025-03-01T12:00:01.123456789Z Generated text: '!!!!!!!!'",
            ],
        ] {
            assert_eq!(words(&wrapped), bare, "{wrapped:?}");
        }
        let got: Vec<&str> = bare.keys().map(String::as_str).collect();
        assert_eq!(
            got,
            [
                "cuda",
                "error",
                "generated",
                "memory",
                "out",
                "runtimeerror",
                "text"
            ]
        );
    }

    const TINY: &str = "\
# a model of two words
classes oom wrong_output unknown
threshold 0.5
intercept 0 0 0.5
term memory 1.5 0:2 2:-1
term nan 2.0 1:3
";

    #[test]
    fn a_guess_is_the_softmax_of_the_weighted_words() {
        let model = Model::parse(TINY).unwrap();
        let guess = model.guess(&words(&["out of memory"])).unwrap();
        // x = 1.5 normalised to 1: scores 2, 0, 0.5 - 1.
        let expected = 1.0 / (1.0 + (-2.0f64).exp() + (-2.5f64).exp());
        assert_eq!(guess.signature, Signature::Oom);
        assert!((guess.probability - expected).abs() < 1e-12);
        assert_eq!(guess.words, vec![("memory".to_owned(), 2.0)]);
        assert_eq!(guess.describe(), format!("oom p={expected:.2}: memory"));
        assert_eq!(model.guess(&words(&["nothing known here"])), None);
    }

    #[test]
    fn a_bad_model_file_is_refused_with_its_line() {
        let bad = TINY.replace("term nan 2.0 1:3", "term nan 2.0 7:3");
        assert_eq!(
            Model::parse(&bad).unwrap_err(),
            "lexical model, line 6: class index 7 is out of range"
        );
        let bad = TINY.replace("threshold 0.5", "threshold high");
        assert!(Model::parse(&bad).unwrap_err().contains("line 3"));
        assert!(Model::parse("classes oom\n").is_err());
        // A second `classes` line would leave the terms' class indices pointing anywhere.
        let bad = format!("{TINY}classes oom\n");
        assert_eq!(
            Model::parse(&bad).unwrap_err(),
            "lexical model, line 7: a second `classes` line"
        );
        let bad = TINY.replace("threshold 0.5\n", "");
        assert!(Model::parse(&bad).unwrap_err().contains("threshold"));
        let bad = TINY.replace("intercept 0 0 0.5\n", "");
        assert!(Model::parse(&bad).unwrap_err().contains("before `classes`"));
    }

    #[test]
    fn the_built_in_model_reads() {
        let model = BUILTIN.as_ref().expect("lexical.model parses");
        assert!(model.threshold > 0.0 && model.threshold < 1.0);
        assert!(model.terms.len() > 1000, "{} words", model.terms.len());
        assert!(model.checks.len() >= 10);
    }
}
