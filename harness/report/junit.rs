//! `junit.xml`: one test case per cell, for CI test reporters (GitHub, GitLab, Jenkins).
//!
//! | status        | JUnit                                   |
//! |---------------|-----------------------------------------|
//! | pass, flaky   | passed (flaky says so in `system-out`)  |
//! | fail          | `<failure type="SIGNATURE" message="ROOT-CAUSE LINE">` + excerpt + reproducer |
//! | xpass         | `<failure type="xpass">`: the expectation is stale |
//! | xfail, skip   | `<skipped>` with the reason / upstream link |
//! | error         | `<error>`: infrastructure, not the cell (excerpt + reproducer) |
//!
//! A CI reporter shows a failure's `message` as its one-line headline and its text when opened,
//! so the message is the log's root-cause line (what a person reads first), and the text is the
//! excerpt around it and the commands that reproduce the cell.
//!
//! One test suite per table (model, engine); the class name is the table's title.

use super::text::{XPASS_NOTE, visible};
use super::view::{CellEntry, ReportContext};
use crate::record::Status;
use std::collections::HashMap;
use std::fmt::Write;

/// Escapes text for XML 1.0, dropping characters XML cannot hold at all.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in visible(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn excerpt_text(cell: &CellEntry) -> String {
    cell.excerpt
        .as_ref()
        .map(|e| {
            e.lines
                .iter()
                .map(|l| match l.number {
                    Some(n) => format!("{n:>6}{} {}", if l.root { ">" } else { " " }, l.text),
                    None => l.text.clone(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Longest root-cause line kept in a `message` attribute (reporters show it on one line).
const MESSAGE_CHARS: usize = 300;

/// The failure's headline: the log's root-cause line, else `failed: SIGNATURE`.
fn root_message(cell: &CellEntry, what: &str) -> String {
    let root = cell
        .excerpt
        .as_ref()
        .and_then(|e| e.lines.iter().find(|l| l.root))
        .map(|l| l.text.trim())
        .filter(|t| !t.is_empty());
    match root {
        Some(line) if line.chars().count() > MESSAGE_CHARS => {
            let cut: String = line.chars().take(MESSAGE_CHARS).collect();
            format!("{cut}…")
        }
        Some(line) => line.to_owned(),
        None => format!("failed: {}", if what.is_empty() { "fail" } else { what }),
    }
}

/// The failure's text: the excerpt (root-cause line marked `>`) and the reproducer.
fn failure_text(cell: &CellEntry) -> String {
    let mut text = String::new();
    let excerpt = excerpt_text(cell);
    if !excerpt.is_empty() {
        let _ = write!(
            text,
            "{} in {}\n{excerpt}\n\n",
            cell.signature.map_or("unknown", |s| s.as_str()),
            cell.phase.map_or("-", |p| p.as_str())
        );
    }
    text.push_str("Reproduce:\n");
    text.push_str(&cell.reproducer.script);
    text
}

fn case(xml: &mut String, cell: &CellEntry, class: &str) {
    let _ = write!(
        xml,
        "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
        escape(class),
        escape(&cell.id),
        cell.duration_s.max(0.0)
    );
    let what = cell.signature.map_or("", |s| s.as_str());
    let body = match cell.status {
        Status::Pass => None,
        Status::Flaky => None,
        Status::Fail => Some(format!(
            "      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
            escape(&root_message(cell, what)),
            escape(if what.is_empty() { "fail" } else { what }),
            escape(&failure_text(cell))
        )),
        Status::Xpass => Some(format!(
            "      <failure message=\"{}\" type=\"xpass\"/>\n",
            escape(&format!("XPASS: {XPASS_NOTE}"))
        )),
        Status::Xfail => Some(format!(
            "      <skipped message=\"{}\"/>\n",
            escape(&format!(
                "xfail {what}: {}{}",
                cell.note.as_deref().unwrap_or("known upstream failure"),
                cell.upstream
                    .as_deref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ))
        )),
        Status::Skip => Some(format!(
            "      <skipped message=\"{}\"/>\n",
            escape(cell.note.as_deref().unwrap_or("skipped"))
        )),
        Status::Error => Some(format!(
            "      <error message=\"{}\" type=\"{}\">{}</error>\n",
            escape(cell.note.as_deref().unwrap_or("infrastructure fault")),
            escape(if what.is_empty() { "error" } else { what }),
            escape(&failure_text(cell))
        )),
    };
    let mut out = String::new();
    if cell.status == Status::Flaky {
        out.push_str("flaky: failed, then passed on a retry\n");
    }
    out.push_str(&cell.reproducer.script);
    xml.push_str(">\n");
    if let Some(body) = body {
        xml.push_str(&body);
    }
    let _ = writeln!(xml, "      <system-out>{}</system-out>", escape(&out));
    xml.push_str("    </testcase>\n");
}

/// Renders `junit.xml`.
pub(crate) fn render(ctx: &ReportContext) -> String {
    let by_id: HashMap<&str, &CellEntry> = ctx.cells.iter().map(|c| (c.id.as_str(), c)).collect();
    let c = &ctx.counts;
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let total_time: f64 = ctx.cells.iter().map(|c| c.duration_s.max(0.0)).sum();
    let _ = writeln!(
        xml,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
        escape(&ctx.title),
        c.total,
        c.fail + c.xpass,
        c.error,
        c.xfail + c.skip,
        total_time
    );
    for table in &ctx.tables {
        let t = &table.counts;
        let cells: Vec<&CellEntry> = table
            .rows
            .iter()
            .flat_map(|r| r.cells.iter().flatten())
            .filter_map(|b| by_id.get(b.id.as_str()).copied())
            .collect();
        let time: f64 = cells.iter().map(|c| c.duration_s.max(0.0)).sum();
        let _ = writeln!(
            xml,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
            escape(&table.title),
            t.total,
            t.fail + t.xpass,
            t.error,
            t.xfail + t.skip,
            time
        );
        for cell in cells {
            case(&mut xml, cell, &table.title);
        }
        xml.push_str("  </testsuite>\n");
    }
    xml.push_str("</testsuites>\n");
    xml
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_and_drops_what_xml_cannot_hold() {
        assert_eq!(
            super::escape("<a href=\"x\">&\u{1b}[0m</a>"),
            r"&lt;a href=&quot;x&quot;&gt;&amp;\u{1b}[0m&lt;/a&gt;"
        );
        assert_eq!(super::escape("\u{202e}\u{ffff}"), "\\u{202e}\u{fffd}");
    }
}
