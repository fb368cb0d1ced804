//! Secrets out of text before it is written to a report or posted: tokens that cell logs print
//! (GitHub `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_`, Hugging Face `hf_`, `Authorization`
//! and bearer headers) and the exact secrets the harness itself holds (the GitHub token, whatever
//! its shape).
//!
//! A redacted token keeps its prefix (`ghp_[REDACTED]`), so a reader still sees what kind of
//! secret leaked and can rotate it. The patterns are anchored on word boundaries so identifiers
//! such as `hf_config` are left alone.

use regex::Regex;
use std::borrow::Cow;
use std::sync::LazyLock;

/// What replaces a secret.
pub const MASK: &str = "[REDACTED]";

/// (pattern, how many leading bytes of the match to keep).
static PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        // GitHub: personal (classic), OAuth, user-to-server, server-to-server, refresh tokens.
        r"\b(gh[pousr]_)[A-Za-z0-9]{20,}",
        // GitHub fine-grained personal access tokens.
        r"\b(github_pat_)[A-Za-z0-9_]{20,}",
        // Hugging Face user access tokens.
        r"\b(hf_)[A-Za-z0-9]{20,}",
        // `Authorization: <scheme> <credentials>` (any scheme), as curl -v or a client prints it.
        r"(?i)(authorization['\x22]?\s*[:=]\s*['\x22]?[A-Za-z]+\s+)[^\s'\x22,;]+",
        // A bare bearer credential.
        r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}",
    ]
    .iter()
    .filter_map(|p| Regex::new(p).ok())
    .collect()
});

/// Redacts known token shapes and the given exact secrets.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Exact secrets (the GitHub token); empty ones and very short ones are ignored, since
    /// masking every `a` in a text protects nothing.
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor that also masks each of `secrets` wherever it appears.
    pub fn with_secrets<I, S>(secrets: I) -> Redactor
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .map(Into::into)
            .filter(|s| s.trim().len() >= 8)
            .collect();
        // Longest first, so a secret that contains another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { secrets }
    }

    /// `text` with every secret masked; borrowed when there was nothing to mask.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), MASK));
            }
        }
        for pattern in PATTERNS.iter() {
            if pattern.is_match(&out) {
                let replaced = pattern.replace_all(&out, |caps: &regex::Captures<'_>| {
                    format!("{}{MASK}", caps.get(1).map_or("", |m| m.as_str()))
                });
                out = Cow::Owned(replaced.into_owned());
            }
        }
        out
    }
}

/// `text` with the known token shapes masked.
pub fn redact(text: &str) -> Cow<'_, str> {
    static PLAIN: LazyLock<Redactor> = LazyLock::new(Redactor::default);
    PLAIN.redact(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Built at run time so the source holds no string a secret scanner would flag.
    fn token(prefix: &str, n: usize) -> String {
        format!("{prefix}{}", "aB3".repeat(n).get(..n).unwrap_or_default())
    }

    #[test]
    fn every_token_shape_is_masked_and_keeps_its_prefix() {
        let cases = [
            (token("ghp_", 36), "ghp_[REDACTED]"),
            (token("gho_", 36), "gho_[REDACTED]"),
            (token("ghs_", 36), "ghs_[REDACTED]"),
            (token("ghu_", 36), "ghu_[REDACTED]"),
            (token("ghr_", 36), "ghr_[REDACTED]"),
            (token("github_pat_", 82), "github_pat_[REDACTED]"),
            (token("hf_", 34), "hf_[REDACTED]"),
        ];
        for (secret, expected) in cases {
            let line = format!("login with {secret} failed");
            let got = redact(&line);
            assert_eq!(got, format!("login with {expected} failed"), "{secret}");
        }
    }

    #[test]
    fn headers_and_bearer_credentials_are_masked() {
        let opaque = token("", 40);
        for (line, expected) in [
            (
                format!("> Authorization: token {opaque}\r"),
                "> Authorization: token [REDACTED]\r".to_owned(),
            ),
            (
                format!("-H 'authorization: Bearer {opaque}' https://x"),
                "-H 'authorization: Bearer [REDACTED]' https://x".to_owned(),
            ),
            (
                format!("{{\"headers\": {{\"Authorization\": \"Basic {opaque}\"}}}}"),
                "{\"headers\": {\"Authorization\": \"Basic [REDACTED]\"}}".to_owned(),
            ),
            (
                format!("using bearer {opaque}"),
                "using bearer [REDACTED]".to_owned(),
            ),
        ] {
            assert_eq!(redact(&line), expected);
        }
    }

    #[test]
    fn exact_secrets_of_any_shape_are_masked() {
        let secret = "s3cr3t-value-of-no-known-shape";
        let r = Redactor::with_secrets([secret, "", "short"]);
        assert_eq!(
            r.redact(&format!("a {secret} b {secret}")),
            "a [REDACTED] b [REDACTED]"
        );
        assert_eq!(r.redact("short stays"), "short stays");
    }

    #[test]
    fn ordinary_text_is_untouched_and_borrowed() {
        for text in [
            "hf_config.json not found",
            "ghp_short",
            "the bearer of bad news",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ] {
            assert!(matches!(redact(text), Cow::Borrowed(_)), "{text}");
        }
    }
}
