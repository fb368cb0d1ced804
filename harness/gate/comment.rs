//! The verdict as one sticky PR comment: regressions first (signature, excerpt, reproducer,
//! culprit), fixed cells, known failures collapsed, and a link to the full report.
//!
//! GitHub refuses a comment over 65,536 characters, so the body is built against a budget:
//! sections are added in order of importance and, once the budget is spent, the rest is
//! summarised in one line that points at the full report. Everything from cell logs is
//! redacted and escaped.

use super::summary::{GateCell, GateFile};
use crate::redact::Redactor;
use std::fmt::Write as _;

/// GitHub's limit on a comment body, in characters.
pub const GITHUB_LIMIT: usize = 65_536;
/// What the body may use; the rest is headroom for the summary lines.
const BUDGET: usize = 60_000;
/// Excerpts are cut to this many characters.
const EXCERPT_CHARS: usize = 1_500;

/// The hidden marker that finds the comment again: one per matrix file.
pub fn marker(matrix: &str) -> String {
    format!("<!-- gpucompat-gate: {} -->", escape_comment(matrix))
}

fn escape_comment(text: &str) -> String {
    text.replace("--", "-\u{2010}").replace('>', "&gt;")
}

/// Text for a Markdown table cell or a line: no markup, no HTML, one line.
fn md(text: &str) -> String {
    crate::report::visible(text)
        .chars()
        .map(|c| match c {
            '|' | '<' | '>' | '`' | '[' | ']' | '*' | '_' | '\\' | '#' | '@' => format!("\\{c}"),
            c if c.is_control() => " ".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

/// A fenced block whose fence is longer than any run of backticks inside it.
fn fenced(lang: &str, text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}{lang}\n{}\n{fence}\n", text.trim_end())
}

fn excerpt(text: &str) -> String {
    let text = crate::report::visible(text);
    if text.chars().count() <= EXCERPT_CHARS {
        return text.into_owned();
    }
    let cut: String = text.chars().take(EXCERPT_CHARS).collect();
    format!("{cut}\n[... cut; the full log is in the report]")
}

fn outcome(cell: &GateCell) -> String {
    let side = |o: &Option<crate::compare::Outcome>| {
        o.as_ref()
            .map_or_else(|| "—".to_owned(), ToString::to_string)
    };
    format!("{} → {}", side(&cell.base), side(&cell.head))
}

fn signature(cell: &GateCell) -> String {
    cell.signature.map_or("—".to_owned(), |s| format!("`{s}`"))
}

/// Renders the comment body. `report_url` is the full report (the Actions run), when known.
pub fn render(file: &GateFile, report_url: Option<&str>, redactor: &Redactor) -> String {
    let mut body = Body::new(redactor);
    body.raw(&marker(&file.matrix));
    body.raw("\n");
    let head = if file.blocks() {
        format!(
            "## ❌ gpucompat gate: {} confirmed regression(s)\n\n",
            file.regressions.len()
        )
    } else {
        "## ✅ gpucompat gate: no confirmed regression\n\n".to_owned()
    };
    body.raw(&head);
    body.line(&format!(
        "{} regressed, {} fixed, {} still failing (already broken before this change), {} flaky, {} spurious (infrastructure).",
        file.regressions.len(),
        file.fixed.len(),
        file.still_failing.len(),
        file.flaky.len(),
        file.spurious.len()
    ));
    if !file.bumps.is_empty() {
        let moved: Vec<String> = file
            .bumps
            .iter()
            .map(|b| {
                format!(
                    "`{} {} → {}`",
                    md(&b.package),
                    md(b.base.as_deref().unwrap_or("(none)")),
                    md(b.head.as_deref().unwrap_or("(none)"))
                )
            })
            .collect();
        body.line(&format!("Moved: {}.", moved.join(", ")));
    }
    body.regressions(&file.regressions);
    body.list("Fixed", &file.fixed, false);
    body.list(
        "Still failing (not caused by this change)",
        &file.still_failing,
        true,
    );
    body.list("Flaky (not blocking)", &file.flaky, true);
    body.list(
        "Spurious: infrastructure faults (never blocking)",
        &file.spurious,
        true,
    );
    body.list("Known upstream failures (expected)", &file.expected, true);
    body.finish(report_url)
}

struct Body<'r> {
    text: String,
    /// Rows left out for the budget, by section.
    left_out: Vec<(String, usize)>,
    redactor: &'r Redactor,
}

impl<'r> Body<'r> {
    fn new(redactor: &'r Redactor) -> Body<'r> {
        Body {
            text: String::with_capacity(8 * 1024),
            left_out: Vec::new(),
            redactor,
        }
    }

    fn raw(&mut self, text: &str) {
        self.text.push_str(text);
    }

    fn line(&mut self, text: &str) {
        self.text.push_str(&self.redactor.redact(text));
        self.text.push_str("\n\n");
    }

    fn fits(&self, more: &str) -> bool {
        self.text.chars().count() + more.chars().count() <= BUDGET
    }

    /// Adds `piece` if it fits; says whether it did.
    fn try_add(&mut self, piece: &str) -> bool {
        let piece = self.redactor.redact(piece);
        if self.fits(&piece) {
            self.text.push_str(&piece);
            true
        } else {
            false
        }
    }

    fn regressions(&mut self, cells: &[GateCell]) {
        if cells.is_empty() {
            return;
        }
        let mut table = String::from(
            "### Regressions\n\n| cell | signature | base → head | culprit |\n|---|---|---|---|\n",
        );
        let mut shown = 0;
        for cell in cells {
            let culprit =
                cell.culprits
                    .as_ref()
                    .filter(|c| !c.is_empty())
                    .map_or("—".to_owned(), |c| {
                        c.iter()
                            .map(|p| format!("**{}**", md(p)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    });
            let row = format!(
                "| {} | {} | {} | {culprit} |\n",
                md(&cell.id),
                signature(cell),
                md(&outcome(cell))
            );
            if !self.fits(&format!("{table}{row}")) {
                break;
            }
            table.push_str(&row);
            shown += 1;
        }
        table.push('\n');
        self.try_add(&table);
        // Details (excerpt and reproducer) for as many as fit.
        let mut detailed = 0;
        for cell in cells.iter().take(shown) {
            let mut details = format!(
                "<details><summary>{}: excerpt and reproducer</summary>\n\n",
                md(&cell.id)
            );
            if let Some(text) = &cell.excerpt {
                details.push_str(&fenced("text", &excerpt(text)));
                details.push('\n');
            }
            details.push_str(&fenced("sh", &cell.reproducer));
            if let Some(note) = &cell.note {
                let _ = writeln!(details, "\n{}", md(note));
            }
            details.push_str("\n</details>\n\n");
            if !self.try_add(&details) {
                break;
            }
            detailed += 1;
        }
        if shown < cells.len() {
            self.left_out
                .push(("regressions".into(), cells.len() - shown));
        } else if detailed < shown {
            self.left_out
                .push(("regression details".into(), shown - detailed));
        }
    }

    fn list(&mut self, title: &str, cells: &[GateCell], collapsed: bool) {
        if cells.is_empty() {
            return;
        }
        let mut section = if collapsed {
            format!(
                "<details><summary>{title} ({})</summary>\n\n| cell | signature | base → head |\n|---|---|---|\n",
                cells.len()
            )
        } else {
            format!(
                "### {title} ({})\n\n| cell | signature | base → head |\n|---|---|---|\n",
                cells.len()
            )
        };
        let close = if collapsed { "\n</details>\n\n" } else { "\n" };
        let mut shown = 0;
        for cell in cells {
            let row = format!(
                "| {} | {} | {} |\n",
                md(&cell.id),
                signature(cell),
                md(&outcome(cell))
            );
            if !self.fits(&format!("{section}{row}{close}")) {
                break;
            }
            section.push_str(&row);
            shown += 1;
        }
        if shown == 0 {
            self.left_out.push((title.to_lowercase(), cells.len()));
            return;
        }
        section.push_str(close);
        self.try_add(&section);
        if shown < cells.len() {
            self.left_out
                .push((title.to_lowercase(), cells.len() - shown));
        }
    }

    fn finish(mut self, report_url: Option<&str>) -> String {
        if !self.left_out.is_empty() {
            let parts: Vec<String> = self
                .left_out
                .iter()
                .map(|(what, n)| format!("{n} more {what}"))
                .collect();
            let _ = write!(
                self.text,
                "**Not shown here** (GitHub's comment limit): {}. ",
                parts.join(", ")
            );
            self.text.push_str(if report_url.is_some() {
                "The full report has every cell.\n\n"
            } else {
                "`gate.json` in the gate folder has every cell.\n\n"
            });
        }
        if let Some(url) = report_url {
            let _ = writeln!(self.text, "[Full report]({})", url.replace(')', "%29"));
        }
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outlast_backticks_and_markup_is_escaped() {
        let block = fenced("text", "a ``` b ```` c");
        assert!(block.starts_with("`````text\n"), "{block}");
        assert_eq!(md("a|b<script>"), "a\\|b\\<script\\>");
        assert_eq!(
            marker("m--x>.toml"),
            "<!-- gpucompat-gate: m-\u{2010}x&gt;.toml -->"
        );
    }
}
