//! The hang section of a cell page: where the processes were when the watchdog called the hang
//! (the attempt's `hang.json`, next to its log), grouped by shared stack, with the evidence that
//! decided the verdict and the locks they waited on.

use crate::forensics::{HangCapture, verdict};
use maud::{Markup, html};
use std::path::Path;

/// The capture next to a cell's log, if there is one (a regular file that parses; a link is
/// never followed).
pub(crate) fn load(log: &Path) -> Option<HangCapture> {
    let path = crate::forensics::hang_path_for(log);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    serde_json::from_slice(&std::fs::read(&path).ok()?).ok()
}

/// The section: a table of groups (how many, where, which pids), then the verdict and locks.
pub(crate) fn section(c: &HangCapture) -> Markup {
    html! {
        section #hang {
            h2 { "Hang: where the processes were" }
            p.meta {
                (c.processes.len()) " process(es) captured in " (format!("{:.2}", c.took_s)) " s before teardown; stacks: " (c.stacks_by)
            }
            @if let Some(v) = &c.verdict {
                p { "Verdict " code { (v.signature.as_str()) } ", decided by " (<&str>::from(v.decided_by)) ": " (v.evidence) }
            }
            table {
                thead { tr { th { "processes" } th { "where (top frames, top first)" } th { "pids" } } }
                tbody {
                    @for g in &c.groups {
                        tr {
                            td { (g.pids.len()) }
                            td {
                                @if g.python {
                                    @for (i, f) in g.frames.iter().enumerate() { @if i > 0 { " ← " } code { (f) } }
                                    @if g.place.ends_with("(busy)") { " (busy)" }
                                } @else { (g.place.replace('`', "")) }
                            }
                            td { (g.pids.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")) }
                        }
                    }
                }
            }
            @if !c.locks.is_empty() {
                ul {
                    @for l in &c.locks {
                        li {
                            "lock " code { (l.path) } ": "
                            @match l.holder { Some(h) => { "held by pid " (h) }, None => "held by nobody" }
                            @let waiting = verdict::waiters(c, l);
                            @if !waiting.is_empty() { "; waiting: " (waiting.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")) }
                        }
                    }
                }
            }
        }
    }
}
