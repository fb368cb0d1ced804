//! `compat.md`: the tables as GitHub-flavoured Markdown, for a README or a job summary.
//!
//! Text from run folders is escaped so that it can neither break a table (`|`, line breaks) nor
//! become markup (`<script>`, `[link](...)`, emphasis).

use super::text::{self, STATUSES};
use super::view::{CellBadge, ReportContext};
use crate::compare::Comparison;
use std::fmt::Write;

/// Escapes free text for a Markdown table cell.
pub(crate) fn escape(text: &str) -> String {
    let chars: Vec<char> = text::visible(text).chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, c) in chars.iter().enumerate() {
        match c {
            '\\' | '`' | '*' | '[' | ']' | '<' | '>' | '|' | '#' | '!' | '~' | '{' | '}' | '('
            | ')' | '&' | '$' => {
                out.push('\\');
                out.push(*c);
            }
            // Intraword underscores (`sm_90`) are not emphasis in GFM; keep them readable.
            '_' => {
                let word = |j: Option<usize>| {
                    j.and_then(|j| chars.get(j))
                        .is_some_and(|c| c.is_alphanumeric())
                };
                if word(i.checked_sub(1)) && word(Some(i + 1)) {
                    out.push('_');
                } else {
                    out.push_str("\\_");
                }
            }
            c if c.is_control() => out.push(' '),
            c => out.push(*c),
        }
    }
    out
}

/// A link target safe inside `(...)`.
fn url(link: &str) -> String {
    link.replace('(', "%28")
        .replace(')', "%29")
        .replace(' ', "%20")
}

fn badge(b: &CellBadge) -> String {
    let mut text = format!("{} {}", b.symbol, escape(&b.label));
    if let Some(link) = &b.link {
        let _ = write!(text, " [upstream]({})", url(link));
    }
    if b.status == crate::record::Status::Xpass {
        text.push_str(": remove the workaround or exclusion");
    }
    if b.change == Some(Comparison::Regressed) {
        text.push_str(" **(regressed)**");
    } else if b.change == Some(Comparison::Fixed) {
        text.push_str(" (fixed)");
    }
    if let Some(note) = &b.bisect {
        let _ = write!(text, "<br>↳ *{}*", escape(note));
    }
    text
}

/// Renders `compat.md`.
pub(crate) fn render(ctx: &ReportContext) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", escape(&ctx.title));
    if let Some(run) = ctx.runs.last() {
        let mut line = format!("Run `{}`", run.name.replace('`', "'"));
        if let Some(started) = &run.started_at {
            let _ = write!(line, ", started {}", escape(started));
        }
        if let Some(host) = &run.host {
            let _ = write!(line, " on {}", escape(host));
        }
        let _ = writeln!(md, "{line}: **{}**.\n", ctx.counts.summary());
        if run.replay {
            let _ = writeln!(md, "> **Replay:** {}\n", super::html::REPLAY_NOTE);
        }
    }
    if !ctx.constant.is_empty() {
        let all: Vec<String> = ctx
            .constant
            .iter()
            .map(|c| format!("{} = {}", escape(&c.axis), escape(&c.value)))
            .collect();
        let _ = writeln!(md, "Every cell: {}.\n", all.join(", "));
    }
    let legend: Vec<String> = STATUSES
        .iter()
        .map(|s| format!("{} {}", text::symbol(*s), text::word(*s)))
        .collect();
    let _ = writeln!(
        md,
        "Legend: {}. A failing cell shows its root-cause signature; xfail links the upstream \
         issue; XPASS means the workaround or exclusion can be removed.\n",
        legend.join(" · ")
    );
    if let Some(changes) = &ctx.changes {
        let parts: Vec<String> = changes
            .counts
            .iter()
            .filter(|(c, _)| **c != Comparison::Passing)
            .map(|(c, n)| format!("{n} {}", c.as_str().replace('_', " ")))
            .collect();
        if !parts.is_empty() {
            let _ = writeln!(
                md,
                "Since `{}`: {}.\n",
                changes.base.replace('`', "'"),
                parts.join(", ")
            );
        }
    }
    for table in &ctx.tables {
        if ctx.tables.len() > 1 || !table.group.is_empty() {
            let _ = writeln!(md, "## {}\n", escape(&table.title));
        }
        let mut header = vec![escape(&table.corner)];
        header.extend(table.columns.iter().map(|c| escape(c)));
        let _ = writeln!(md, "| {} |", header.join(" | "));
        let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
        for row in &table.rows {
            let mut cells = vec![format!("**{}**", escape(&row.label))];
            for slot in &row.cells {
                cells.push(if slot.is_empty() {
                    "—".to_owned()
                } else {
                    slot.iter().map(badge).collect::<Vec<_>>().join("<br>")
                });
            }
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
        md.push('\n');
    }
    if !ctx.new_fingerprints.is_empty() {
        let _ = writeln!(md, "## New failure fingerprints tonight\n");
        for fp in &ctx.new_fingerprints {
            let ids: Vec<String> = fp.cells.iter().map(|c| escape(&c.id)).collect();
            let _ = writeln!(
                md,
                "- {}: {} ({})",
                fp.signature.map_or("unknown", |s| s.as_str()),
                escape(&fp.fingerprint),
                ids.join(", ")
            );
        }
        md.push('\n');
    }
    if !ctx.bisects.is_empty() {
        let _ = writeln!(md, "## Bisects\n");
        for b in &ctx.bisects {
            let cells: Vec<String> = b.cells.iter().map(|c| escape(&c.id)).collect();
            let _ = writeln!(
                md,
                "- `{}`: {} (explains {})",
                b.name.replace('`', "'"),
                escape(&b.answer),
                if cells.is_empty() {
                    "no failing cell tonight".to_owned()
                } else {
                    cells.join(", ")
                }
            );
        }
        md.push('\n');
    }
    if !ctx.not_run.is_empty() {
        let _ = writeln!(
            md,
            "{} cell(s) of the plan have no result (interrupted or not run yet).\n",
            ctx.not_run.len()
        );
    }
    text::visible(&md).into_owned()
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_markup_and_table_breaks() {
        assert_eq!(escape("a|b"), r"a\|b");
        assert_eq!(
            escape("<script>alert(1)</script>"),
            r"\<script\>alert\(1\)\</script\>"
        );
        assert_eq!(escape("sm_90"), "sm_90");
        assert_eq!(escape("_x_"), r"\_x\_");
        assert_eq!(escape("a\nb"), "a b");
        assert_eq!(escape("&amp;"), r"\&amp;");
        assert_eq!(escape("a\u{202e}b"), r"a\\u\{202e\}b");
    }
}
