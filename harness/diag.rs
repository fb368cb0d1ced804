//! Problems found in an input file, rendered the way cargo renders them:
//!
//! ```text
//! error: unknown key `comand` in `[job]`
//!   --> matrices/nightly.toml:12:1
//!    |
//! 12 | comand = "sh smoke.sh"
//!    | ^^^^^^ expected one of `command`, `timeout`, `no-progress`, `cache`
//!    |
//!    = help: did you mean `command`?
//! ```
//!
//! Validation collects every problem first and renders them together, so a user fixes a file in
//! one pass instead of one error per try.

use annotate_snippets::renderer::DecorStyle;
use annotate_snippets::{AnnotationKind, Level, Origin, Renderer, Snippet};
use std::ops::Range;

/// How bad a problem is: errors make the file unusable, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem at one place in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub message: String,
    /// Byte range in the source; `None` for problems of the file as a whole.
    pub span: Option<Range<usize>>,
    /// Text shown next to the caret.
    pub label: String,
    pub help: Option<String>,
    /// Other places that explain the problem (where a value came from, an earlier duplicate),
    /// each underlined with `-` and its own label. Only shown when `span` is set.
    pub secondary: Vec<(Range<usize>, String)>,
}

impl Diagnostic {
    pub fn error(message: impl Into<String>, span: Option<Range<usize>>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span,
            label: String::new(),
            help: None,
            secondary: Vec::new(),
        }
    }

    pub fn warning(message: impl Into<String>, span: Option<Range<usize>>) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(message, span)
        }
    }

    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds another place to point at, with its own label.
    #[must_use]
    pub fn secondary(mut self, span: Range<usize>, label: impl Into<String>) -> Self {
        self.secondary.push((span, label.into()));
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Orders diagnostics as a reader meets them: errors before warnings, each by position in the
/// file, problems of the whole file last. Stable, so problems at one place keep their order.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by_key(|d| {
        (
            !d.is_error(),
            d.span.as_ref().map_or(usize::MAX, |span| span.start),
        )
    });
}

/// Renders diagnostics against the file they are about, plain text, one blank line between them.
pub fn render(path: &str, source: &str, diagnostics: &[Diagnostic]) -> String {
    let renderer = Renderer::plain().decor_style(DecorStyle::Ascii);
    let mut out = String::new();
    for diag in diagnostics {
        let level = match diag.severity {
            Severity::Error => Level::ERROR,
            Severity::Warning => Level::WARNING,
        };
        let title = level.primary_title(&diag.message);
        let mut group = match diag.span.clone() {
            Some(span) => {
                let mut annotations = vec![
                    AnnotationKind::Primary
                        .span(clamp(source, span))
                        .label(non_empty(&diag.label)),
                ];
                annotations.extend(diag.secondary.iter().map(|(span, label)| {
                    AnnotationKind::Context
                        .span(clamp(source, span.clone()))
                        .label(non_empty(label))
                }));
                title.element(
                    Snippet::source(source)
                        .path(path)
                        .fold(true)
                        .annotations(annotations),
                )
            }
            // A problem of the whole file: name the file, show no line.
            None => title.element(Origin::path(path)),
        };
        if let Some(help) = &diag.help {
            group = group.element(Level::HELP.message(help));
        }
        out.push_str(&renderer.render(&[group]));
        out.push_str("\n\n");
    }
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    if errors > 0 {
        out.push_str(&format!(
            "error: {path}: {errors} problem{} found",
            if errors == 1 { "" } else { "s" }
        ));
        out.push('\n');
    }
    out
}

fn non_empty(label: &str) -> Option<&str> {
    (!label.is_empty()).then_some(label)
}

/// Keeps a span inside the source and on character boundaries, so rendering never panics.
fn clamp(source: &str, span: Range<usize>) -> Range<usize> {
    let mut start = span.start.min(source.len());
    let mut end = span.end.clamp(start, source.len());
    while !source.is_char_boundary(start) {
        start -= 1;
    }
    while !source.is_char_boundary(end) {
        end += 1;
    }
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_path_line_column_and_caret() {
        let src = "[job]\ncomand = \"x\"\n";
        let text = render(
            "m.toml",
            src,
            &[Diagnostic::error("unknown key `comand`", Some(6..12))
                .label("here")
                .help("did you mean `command`?")],
        );
        assert!(text.contains("--> m.toml:2:1"), "{text}");
        assert!(text.contains("^^^^^^ here"), "{text}");
        assert!(text.contains("help: did you mean `command`?"), "{text}");
        assert!(text.contains("1 problem found"), "{text}");
    }

    #[test]
    fn out_of_range_and_mid_character_spans_do_not_panic() {
        let src = "é = 1\n";
        let _ = render("m.toml", src, &[Diagnostic::error("x", Some(1..100))]);
        let _ = render("m.toml", "", &[Diagnostic::error("x", Some(5..9))]);
        let _ = render(
            "m.toml",
            src,
            &[
                Diagnostic::error("x", Some(std::ops::Range { start: 9, end: 3 }))
                    .secondary(1..2, "y"),
            ],
        );
    }

    #[test]
    fn secondary_places_and_whole_file_problems() {
        let src = "[matrix]\na = [1, 1]\n";
        let text = render(
            "m.toml",
            src,
            &[
                Diagnostic::error("duplicate value", Some(17..18))
                    .label("again")
                    .secondary(14..15, "first here"),
                Diagnostic::error("nothing to run", None).help("add `[job]`"),
            ],
        );
        assert!(text.contains("first here"), "{text}");
        assert!(text.contains("again"), "{text}");
        assert!(
            text.contains("error: nothing to run\n--> m.toml\n"),
            "{text}"
        );
        assert!(text.contains("2 problems found"), "{text}");
    }

    #[test]
    fn sorts_errors_first_then_by_position() {
        let mut diags = vec![
            Diagnostic::warning("w", Some(0..1)),
            Diagnostic::error("file", None),
            Diagnostic::error("late", Some(9..10)),
            Diagnostic::error("early", Some(2..3)),
        ];
        sort(&mut diags);
        let order: Vec<_> = diags.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(order, ["early", "late", "file", "w"]);
    }
}
