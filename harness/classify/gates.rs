//! Which trigger words gate each rule. A rule can fire on a cleaned line only if the line holds
//! one of the words every text of its pattern holds (`rules.toml` keeps one in every branch; the
//! tests check it). So a line is matched against the rules its words gate, each with its own
//! small automaton, instead of against one automaton of every rule at once: the states of that
//! one (every rule's progress in a single state) are built afresh on almost every byte of a log
//! of varied lines, and a few hundred kilobytes of real failure output took seconds. A rule's own
//! automaton meets few states and keeps them from one line to the next.

use regex_syntax::hir::{Hir, HirKind};
use std::collections::BTreeSet;

/// A branch's own text this short is no gate: too many lines hold it.
const MIN_GATE: usize = 3;

/// The words that gate a table's rules, and which of them gate each rule.
pub(crate) struct Gates {
    /// The trigger words (lowercase), then the texts of branches no trigger word gates.
    pub(crate) words: Vec<Vec<u8>>,
    /// For each pattern, the indices of `words` that gate it: every text it matches holds one of
    /// them. `None` where some branch holds none (the rule is tried on every examined line).
    pub(crate) rules: Vec<Option<BTreeSet<usize>>>,
}

/// The gates of `patterns` (`None`: a pattern not to gate). A branch that holds no trigger word
/// (its text too short to be one, `\bENOSPC\b`) is gated by the longest text it always holds.
pub(crate) fn gates(patterns: &[Option<&str>], triggers: &[String]) -> Gates {
    let mut words: Vec<Vec<u8>> = triggers
        .iter()
        .map(|w| w.to_ascii_lowercase().into_bytes())
        .collect();
    let parsed: Vec<Option<Hir>> = patterns
        .iter()
        .map(|p| p.and_then(|p| parse_ascii(p).ok()))
        .collect();
    for hir in parsed.iter().flatten() {
        for branch in branches(hir) {
            if witness(branch, &words).is_none() {
                let text = longest_text(branch);
                if text.len() >= MIN_GATE && !words.contains(&text) {
                    words.push(text);
                }
            }
        }
    }
    let rules = parsed
        .iter()
        .map(|hir| hir.as_ref().and_then(|hir| witness(hir, &words)))
        .collect();
    Gates { words, rules }
}

/// The top-level alternatives of a pattern. The parser factors a look-around every branch starts
/// or ends with out of the alternation (`\\bA\\b|\\bB` is parsed as `\\b(?:A\\b|B)`): those
/// alternatives are the branches still, the look-arounds holding no text.
pub(crate) fn branches(hir: &Hir) -> &[Hir] {
    match hir.kind() {
        HirKind::Alternation(subs) => subs,
        HirKind::Concat(parts) => {
            let mut alternations = parts.iter().filter_map(|part| match part.kind() {
                HirKind::Alternation(subs) => Some(subs.as_slice()),
                _ => None,
            });
            let only_looks = parts
                .iter()
                .all(|part| matches!(part.kind(), HirKind::Look(_) | HirKind::Alternation(_)));
            match (alternations.next(), alternations.next()) {
                (Some(subs), None) if only_looks => subs,
                _ => std::slice::from_ref(hir),
            }
        }
        _ => std::slice::from_ref(hir),
    }
}

/// The longest text a branch always matches in one piece.
pub(crate) fn longest_text(hir: &Hir) -> Vec<u8> {
    let subs = match hir.kind() {
        HirKind::Concat(subs) => subs.as_slice(),
        HirKind::Capture(cap) => return longest_text(&cap.sub),
        _ => std::slice::from_ref(hir),
    };
    let (mut best, mut run) = (Vec::new(), Vec::new());
    for sub in subs {
        match texts(sub).as_deref() {
            Some([one]) => run.extend_from_slice(one),
            _ => {
                if run.len() > best.len() {
                    best = std::mem::take(&mut run);
                }
                run.clear();
            }
        }
    }
    if run.len() > best.len() {
        best = run;
    }
    best
}

/// `pattern` parsed byte by byte, with ASCII semantics (`\w`, case folding): what a trigger word
/// (ASCII, any case) can be found in.
pub(crate) fn parse_ascii(pattern: &str) -> Result<Hir, Box<regex_syntax::Error>> {
    regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .build()
        .parse(pattern)
        .map_err(Box::new)
}

/// `pattern` with every look-around (anchors, word boundaries) replaced by the empty match, every
/// bounded repetition left unbounded and no capture groups, parsed byte by byte with ASCII
/// semantics: it matches everywhere the original does, and in more places, so a plain raw line it
/// does not match cannot hold a cleaned line the original matches. Checked on the raw line before
/// the line is cleaned: most lines whose words gate a rule are dropped there.
pub(crate) fn relaxed(pattern: &str) -> Result<String, Box<regex_syntax::Error>> {
    fn strip(hir: Hir) -> Hir {
        match hir.into_kind() {
            HirKind::Look(_) => Hir::empty(),
            HirKind::Repetition(mut rep) => {
                rep.sub = Box::new(strip(*rep.sub));
                if rep.max.is_some_and(|max| max > rep.min) {
                    rep.max = None;
                }
                Hir::repetition(rep)
            }
            HirKind::Capture(cap) => strip(*cap.sub),
            HirKind::Concat(subs) => Hir::concat(subs.into_iter().map(strip).collect()),
            HirKind::Alternation(subs) => Hir::alternation(subs.into_iter().map(strip).collect()),
            HirKind::Empty => Hir::empty(),
            HirKind::Literal(lit) => Hir::literal(lit.0),
            HirKind::Class(class) => Hir::class(class),
        }
    }
    let hir = parse_ascii(pattern)?;
    Ok(strip(hir).to_string())
}

/// Words of `words` such that every text `hir` matches holds one of them, or `None`.
pub(crate) fn witness(hir: &Hir, words: &[Vec<u8>]) -> Option<BTreeSet<usize>> {
    if let Some(texts) = texts(hir) {
        return held(&texts, words);
    }
    match hir.kind() {
        HirKind::Capture(cap) => witness(&cap.sub, words),
        HirKind::Repetition(rep) if rep.min >= 1 => witness(&rep.sub, words),
        HirKind::Alternation(subs) => subs.iter().try_fold(BTreeSet::new(), |mut all, sub| {
            all.extend(witness(sub, words)?);
            Some(all)
        }),
        HirKind::Concat(subs) => {
            // Runs of pieces with few texts each: a word may span several (`not (?:close|equal)`).
            let mut run = vec![Vec::new()];
            for sub in subs {
                let own = texts(sub);
                if let Some(next) = own.as_ref().and_then(|t| product(&run, t)) {
                    run = next;
                    continue;
                }
                if let Some(found) = held(&run, words).or_else(|| witness(sub, words)) {
                    return Some(found);
                }
                run = own.unwrap_or_else(|| vec![Vec::new()]);
            }
            held(&run, words)
        }
        _ => None,
    }
}

/// The words that `texts` hold, if every one of them holds one.
fn held(texts: &[Vec<u8>], words: &[Vec<u8>]) -> Option<BTreeSet<usize>> {
    let mut found = BTreeSet::new();
    for text in texts {
        let mut any = false;
        for (i, word) in words.iter().enumerate() {
            if contains(text, word) {
                found.insert(i);
                any = true;
            }
        }
        if !any {
            return None;
        }
    }
    Some(found)
}

fn contains(text: &[u8], word: &[u8]) -> bool {
    !word.is_empty() && text.windows(word.len()).any(|window| window == word)
}

/// Every text `hir` can match, lowercase, where they are few.
pub(crate) fn texts(hir: &Hir) -> Option<Vec<Vec<u8>>> {
    match hir.kind() {
        HirKind::Literal(lit) => Some(vec![lit.0.to_ascii_lowercase()]),
        HirKind::Class(regex_syntax::hir::Class::Bytes(class)) => {
            let mut bytes: Vec<u8> = class
                .ranges()
                .iter()
                .flat_map(|r| r.start()..=r.end())
                .map(|b| b.to_ascii_lowercase())
                .collect();
            bytes.sort_unstable();
            bytes.dedup();
            (bytes.len() <= 4).then(|| bytes.into_iter().map(|b| vec![b]).collect())
        }
        HirKind::Empty | HirKind::Look(_) => Some(vec![Vec::new()]),
        HirKind::Capture(cap) => texts(&cap.sub),
        HirKind::Alternation(subs) => {
            let mut all = Vec::new();
            for sub in subs {
                all.extend(texts(sub)?);
            }
            (all.len() <= 64).then_some(all)
        }
        HirKind::Concat(subs) => subs
            .iter()
            .try_fold(vec![Vec::new()], |run, sub| product(&run, &texts(sub)?)),
        HirKind::Repetition(rep) if rep.max.is_some_and(|max| max <= 2) => {
            let one = texts(&rep.sub)?;
            let mut all = Vec::new();
            let mut power = vec![Vec::new()];
            for count in 0..=rep.max.unwrap_or(0) {
                if count >= rep.min {
                    all.extend(power.iter().cloned());
                }
                power = product(&power, &one)?;
            }
            (all.len() <= 64).then_some(all)
        }
        _ => None,
    }
}

/// Each of `heads` followed by each of `tails`, while they are few.
pub(crate) fn product(heads: &[Vec<u8>], tails: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    (heads.len() * tails.len() <= 256).then(|| {
        heads
            .iter()
            .flat_map(|h| tails.iter().map(move |t| [h.as_slice(), t].concat()))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::{branches, gates, longest_text, parse_ascii, relaxed};

    /// The raw prefilter's form of a pattern: looser everywhere, never stricter.
    #[test]
    fn relaxed_patterns_drop_bounds_groups_and_anchors() {
        let relaxed = relaxed(r"^error(?:: )?(\w+).{0,3}memory\b").expect("relaxes");
        assert!(!relaxed.contains('{'), "{relaxed}");
        let re = regex::bytes::Regex::new(&relaxed).expect("compiles");
        assert_eq!(re.captures_len(), 1, "only the whole match: {relaxed}");
        assert!(re.is_match(b"x: error: cuda out of memory"));
        assert!(re.is_match(b"error: cuda ran on and on and out of memoryless"));
        assert!(!re.is_match(b"memory error"));
    }

    fn gated(pattern: &str, triggers: &[&str]) -> Option<Vec<String>> {
        let triggers: Vec<String> = triggers.iter().map(|w| (*w).to_owned()).collect();
        let found = gates(&[Some(pattern)], &triggers);
        found.rules[0].as_ref().map(|set| {
            set.iter()
                .map(|&i| String::from_utf8_lossy(&found.words[i]).into_owned())
                .collect()
        })
    }

    #[test]
    fn each_branch_names_the_words_it_needs() {
        let words = ["out of memory", "killed", "oom"];
        assert_eq!(
            gated(r"(?i)\bcuda out of memory|^Killed\s*$", &words),
            Some(vec!["out of memory".to_owned(), "killed".to_owned()])
        );
        // A branch with no trigger word is gated by its own longest text.
        assert_eq!(
            gated(r"(?i)out of memory|\bENOSPC\b", &words),
            Some(vec!["out of memory".to_owned(), "enospc".to_owned()])
        );
        // A word the branch may leave out gates nothing (its required text does), and a text
        // too short is no gate.
        assert_eq!(
            gated(r"(?:killed)?\d+ bytes", &words),
            Some(vec![" bytes".to_owned()])
        );
        assert_eq!(gated(r"(?:killed)?\d+", &words), None);
        assert_eq!(gated(r"oom|\bab\b", &words), None);
    }

    /// The parser factors a look-around every branch starts with out of the alternation; the
    /// branches are still the alternatives, each with its own text.
    #[test]
    fn a_factored_look_around_leaves_the_branches_apart() {
        let hir = parse_ascii(r"\bReleasing expired blocks\b|\bForce freed\b.*\bthreshold\b")
            .expect("parses");
        let texts: Vec<String> = branches(&hir)
            .iter()
            .map(|branch| String::from_utf8_lossy(&longest_text(branch)).into_owned())
            .collect();
        assert_eq!(texts, ["releasing expired blocks", "force freed"]);
        let plain = parse_ascii(r"out of memory|killed").expect("parses");
        assert_eq!(branches(&plain).len(), 2);
        let one = parse_ascii(r"\bkilled\b").expect("parses");
        assert_eq!(branches(&one).len(), 1);
    }
}
