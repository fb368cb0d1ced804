//! The capture as the cell's log shows it: a few `[gpucompat]` lines (the classifier ignores
//! them) a maintainer reads before anything else.

use super::{HangCapture, stacks};
use std::fmt::Write as _;

/// Frames shown per thread in the log.
const LOG_FRAMES: usize = 10;
/// Threads shown per process in the log (those with Python frames first); `hang.json` has all.
const LOG_THREADS: usize = 4;

/// The log section (without the `[gpucompat]` prefix, which the log's note adds to each line).
pub fn log_section(c: &HangCapture, file: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "hang capture: {} process(es) in {:.2}s of a {:.0}s budget; stacks: {}; written to {file}",
        c.processes.len(),
        c.took_s,
        c.budget_s,
        c.stacks_by
    );
    for g in &c.groups {
        let pids = g
            .pids
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(s, "  {} (pid {pids})", stacks::describe(g));
    }
    for l in &c.locks {
        let waiting = super::verdict::waiters(c, l);
        let _ = writeln!(
            s,
            "  lock {}: {}; waiting: {}",
            l.path,
            l.holder
                .map_or("held by nobody".to_owned(), |h| format!("held by pid {h}")),
            if waiting.is_empty() {
                "none".to_owned()
            } else {
                format!("{waiting:?}")
            }
        );
    }
    if let Some(note) = &c.gpu.note {
        let _ = writeln!(s, "  GPU: {note}");
    }
    for g in &c.gpu.gpus {
        let _ = writeln!(
            s,
            "  GPU {}: utilisation {}%, memory {} MiB",
            g.index,
            g.utilization_pct.map_or("?".to_owned(), |v| v.to_string()),
            g.memory_used_mib.map_or("?".to_owned(), |v| v.to_string())
        );
    }
    if let Some(v) = &c.verdict {
        let _ = writeln!(
            s,
            "  verdict: {} ({}): {}",
            v.signature,
            <&str>::from(v.decided_by),
            v.evidence
        );
    }
    for note in &c.notes {
        let _ = writeln!(s, "  note: {note}");
    }
    for p in &c.processes {
        let _ = writeln!(
            s,
            "  pid {} (parent {}) {} state {}{} cpu {:.2}s (+{:.2}s during the capture) threads {}: {}",
            p.pid,
            p.ppid,
            p.comm,
            p.state,
            p.wchan
                .as_ref()
                .map_or(String::new(), |w| format!(" wchan {w}")),
            p.cpu_s,
            p.cpu_during_capture_s,
            p.threads,
            p.cmdline.chars().take(200).collect::<String>()
        );
        if let Some(note) = &p.stack_note {
            let _ = writeln!(s, "    (no stack: {note})");
        }
        let mut shown: Vec<&super::ThreadStack> = p.stacks.iter().collect();
        // Threads with Python frames say the most; a torch process has dozens of idle others.
        shown.sort_by_key(|t| t.frames.iter().all(|f| f.native));
        if shown.len() > LOG_THREADS {
            let _ = writeln!(
                s,
                "    ({} threads; the first {LOG_THREADS} with Python frames shown, all in the capture file)",
                shown.len()
            );
            shown.truncate(LOG_THREADS);
        }
        for t in shown {
            let _ = writeln!(
                s,
                "    thread {}{}",
                t.thread.as_deref().unwrap_or("?"),
                t.tid.map_or(String::new(), |id| format!(" ({id})"))
            );
            for f in t.frames.iter().take(LOG_FRAMES) {
                if f.native {
                    let _ = writeln!(s, "      {} [native]", f.label);
                } else {
                    let _ = writeln!(s, "      {} ({}:{})", f.label, f.file, f.line);
                }
            }
            if t.frames.len() > LOG_FRAMES {
                let _ = writeln!(s, "      ... {} more", t.frames.len() - LOG_FRAMES);
            }
        }
    }
    s.trim_end().to_owned()
}
