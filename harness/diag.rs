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
use annotate_snippets::{AnnotationKind, Level, Renderer, Snippet};
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
}

impl Diagnostic {
    pub fn error(message: impl Into<String>, span: Option<Range<usize>>) -> Self {
        Diagnostic {
            severity: Severity::Error,
            message: message.into(),
            span,
            label: String::new(),
            help: None,
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

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
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
        let span = diag.span.clone().map(|span| clamp(source, span));
        let mut group = level.primary_title(&diag.message).element(match span {
            Some(span) => Snippet::source(source)
                .path(path)
                .fold(true)
                .annotation(AnnotationKind::Primary.span(span).label(&diag.label)),
            // A problem of the whole file: point at its first line so the path still shows.
            None => Snippet::source(source).path(path).fold(true),
        });
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
    }
}
