//! Small text rules every output format shares: status words and symbols, safe file names,
//! log-line cleaning, invisible characters, which links may become links.
//!
//! Everything read from a run folder is data, possibly hostile: ids, values, log lines and links
//! pass through here before any format sees them.

use crate::classify::strip_ansi;
use crate::digest::sha256_hex;
use crate::record::Status;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

/// Symbol and word of a status: color never carries meaning alone.
pub(crate) fn symbol(status: Status) -> &'static str {
    match status {
        Status::Pass => "✓",
        Status::Flaky => "~",
        Status::Fail => "✗",
        Status::Xfail => "⊘",
        Status::Xpass => "!",
        Status::Skip => "–",
        Status::Error => "⚠",
    }
}

/// The word shown with the symbol; `XPASS` is loud on purpose.
pub(crate) fn word(status: Status) -> &'static str {
    match status {
        Status::Pass => "pass",
        Status::Flaky => "flaky",
        Status::Fail => "fail",
        Status::Xfail => "xfail",
        Status::Xpass => "XPASS",
        Status::Skip => "skip",
        Status::Error => "error",
    }
}

/// What the legend says about each status.
pub(crate) fn meaning(status: Status) -> &'static str {
    match status {
        Status::Pass => "launched, answered, validated",
        Status::Flaky => "failed, then passed on a retry",
        Status::Fail => "failed; the root-cause signature is shown",
        Status::Xfail => "known upstream failure; links to the upstream issue",
        Status::Xpass => "expected to fail but passed: the workaround or exclusion can be removed",
        Status::Skip => "not run (no GPU for it, or filtered out)",
        Status::Error => "infrastructure fault: says nothing about the cell, never a regression",
    }
}

/// Every status in display order.
pub(crate) const STATUSES: [Status; 7] = [
    Status::Pass,
    Status::Fail,
    Status::Flaky,
    Status::Xfail,
    Status::Xpass,
    Status::Skip,
    Status::Error,
];

/// The note an xpass cell carries everywhere it is shown.
pub(crate) const XPASS_NOTE: &str =
    "expected to fail, but passed: the workaround or exclusion can be removed";

/// A file name for a cell id. Ids made by the harness use only `[A-Za-z0-9._-]` and are kept as
/// they are; anything else (a hand-edited record) is replaced, with a hash so names stay unique.
pub(crate) fn file_stem(id: &str) -> String {
    let plain = !id.is_empty()
        && id.len() <= 160
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if plain {
        return id.to_owned();
    }
    let mut stem: String = id
        .chars()
        .take(80)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem_trimmed = stem.trim_start_matches('.').to_owned();
    stem = stem_trimmed;
    let hex = sha256_hex(id.as_bytes(), 6);
    format!("{stem}-{hex}")
}

/// Whether `c` is invisible or changes how the text around it shows: C0 and C1 controls (tab
/// and newline aside), bidirectional embeddings, overrides and isolates (`U+202E` makes
/// `exe.txt` read `txt.exe`), zero-width and other format characters, line separators.
pub(crate) fn is_invisible(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

/// Text with every invisible character (see [`is_invisible`]) shown as its code point,
/// `\u{202e}`, so a reader sees it is there and it acts on nothing. The one function every
/// output (HTML, Markdown, CSV, JUnit, the terminal) shows run-folder text through; the notation
/// holds no character any of them treats specially.
pub(crate) fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_invisible) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_invisible(c) {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A log line made fit for display: ANSI escape sequences removed, line breaks dropped, other
/// invisible characters shown (see [`visible`]); tabs kept.
pub(crate) fn clean_line(line: &str) -> Cow<'_, str> {
    let mut line = strip_ansi(line);
    if line.contains(['\r', '\n']) {
        line = Cow::Owned(line.replace(['\r', '\n'], ""));
    }
    match visible(&line) {
        Cow::Borrowed(_) => line,
        Cow::Owned(shown) => Cow::Owned(shown),
    }
}

/// A single line of free text (a value, a reason): line breaks and tabs become spaces, other
/// invisible characters are shown (see [`visible`]).
pub(crate) fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\t') {
                ' '
            } else {
                c
            }
        })
        .collect();
    visible(&flat).into_owned()
}

/// `link` when it may become a clickable link: `http://` or `https://`, no spaces or control
/// characters. Anything else (`javascript:`, relative paths) is shown as text only.
pub(crate) fn http_link(link: &str) -> Option<&str> {
    let lower = link.get(..8).unwrap_or(link).to_ascii_lowercase();
    let scheme_ok = lower.starts_with("https://") || lower.starts_with("http://");
    let chars_ok = link
        .chars()
        .all(|c| !c.is_whitespace() && !c.is_control() && !matches!(c, '<' | '>' | '"' | '\''));
    (scheme_ok && chars_ok && link.len() > 8).then_some(link)
}

/// A record's log path when it stays inside the run folder (relative, no `..`); `None` for an
/// absolute path or one that climbs out, which a report never reads.
pub(crate) fn inside(relative: &str) -> Option<PathBuf> {
    let path = Path::new(relative);
    if relative.is_empty()
        || !path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return None;
    }
    Some(path.to_path_buf())
}

/// Seconds for people: `0.42 s`, `12.3 s`, `172 s`, `1 h 03 min`.
pub(crate) fn seconds(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_owned();
    }
    if value < 1.0 {
        format!("{value:.3} s")
    } else if value < 100.0 {
        format!("{value:.1} s")
    } else if value < 3600.0 {
        format!("{value:.0} s")
    } else {
        let minutes = (value / 60.0).round() as u64;
        format!("{} h {:02} min", minutes / 60, minutes % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_keep_plain_ids_and_hash_others() {
        assert_eq!(file_stem("0.6.3-sm_90-qwen"), "0.6.3-sm_90-qwen");
        let odd = file_stem("<script>alert(1)</script>");
        assert!(odd.starts_with("_script_alert_1___script_-"), "{odd}");
        assert_ne!(file_stem("a/b"), file_stem("a_b"));
        assert!(!file_stem("..").starts_with('.'));
        assert!(!file_stem("../../etc/passwd").contains('/'));
    }

    #[test]
    fn log_lines_lose_escapes_and_controls() {
        assert_eq!(
            clean_line("\u{1b}[31merror\u{1b}[0m: x\u{7}\r"),
            r"error: x\u{7}"
        );
        assert_eq!(clean_line("plain\ttext"), "plain\ttext");
        assert_eq!(
            clean_line("\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\ ok"),
            "link ok"
        );
    }

    #[test]
    fn invisible_characters_are_shown_not_obeyed() {
        assert_eq!(visible("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(visible("a\u{202e}txt.exe"), r"a\u{202e}txt.exe");
        assert_eq!(
            visible("\u{200b}\u{2066}\u{2069}\u{85}\u{0}\r"),
            r"\u{200b}\u{2066}\u{2069}\u{85}\u{0}\u{d}"
        );
        assert_eq!(one_line("a\nb\u{202e}c"), r"a b\u{202e}c");
    }

    #[test]
    fn only_http_links_are_links() {
        assert!(http_link("https://github.com/x/y/issues/1").is_some());
        assert!(http_link("javascript:alert(1)").is_none());
        assert!(http_link("https://x\" onmouseover=\"alert(1)").is_none());
        assert!(http_link("HTTPS://example.org/a").is_some());
        assert!(http_link("//example.org").is_none());
    }

    #[test]
    fn log_paths_stay_inside() {
        assert!(inside("logs/a.log").is_some());
        assert!(inside("../secret").is_none());
        assert!(inside("/etc/passwd").is_none());
        assert!(inside("logs/../../x").is_none());
    }
}
