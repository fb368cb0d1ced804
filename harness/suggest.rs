//! "Did you mean ...?": the one place that decides whether a word is a likely typo of another.
//!
//! Jaro-Winkler similarity (from `strsim`) rewards a shared prefix, which is how keys, engine
//! names and cell ids are usually mistyped (`comand`, `flashinfr`). One threshold for every
//! caller, so a suggestion in one message is never missing from another for the same pair.

/// How similar a candidate must be to count as a likely typo (1.0 is identical).
const THRESHOLD: f64 = 0.8;

/// The candidate closest to `word`, when it is close enough to be what was meant. Of equally
/// close candidates, the last one listed.
pub(crate) fn did_you_mean<'a, S: AsRef<str>>(word: &str, candidates: &'a [S]) -> Option<&'a str> {
    let mut best: Option<(f64, &str)> = None;
    for candidate in candidates {
        let candidate = candidate.as_ref();
        let score = strsim::jaro_winkler(word, candidate);
        if score > THRESHOLD && best.is_none_or(|(top, _)| score >= top) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn suggests_the_closest_likely_typo() {
        assert_eq!(
            did_you_mean("comand", &["command", "timeout"]),
            Some("command")
        );
        assert_eq!(
            did_you_mean("flashinfr", &["flashinfer", "flash"]),
            Some("flashinfer")
        );
    }

    #[test]
    fn suggests_nothing_for_an_unrelated_word() {
        assert_eq!(did_you_mean("xyz", &["command", "timeout"]), None);
        assert_eq!(did_you_mean("command", &[] as &[&str]), None);
    }

    #[test]
    fn takes_owned_candidates() {
        let keys = vec!["gpu".to_owned(), "model".to_owned()];
        assert_eq!(did_you_mean("modle", &keys), Some("model"));
    }

    #[test]
    fn the_last_of_equally_close_candidates_wins() {
        assert_eq!(did_you_mean("abc", &["abcx", "abcy"]), Some("abcy"));
    }
}
