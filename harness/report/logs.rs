//! A cell's log as the report shows it: the lines around the root cause, and a bounded copy of
//! the whole log for its page. Logs are data: lines are cleaned here and escaped by each format.
//!
//! A run folder may come from anywhere (a CI artifact, a colleague's upload), so a log is only
//! read when it is a regular file inside the folder reached without a symbolic link: a planted
//! `logs/2.log -> /etc/passwd` would otherwise be published with the report.

use super::text::clean_line;
use crate::record::{CellRecord, Status};
use serde::Serialize;
use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Lines shown before the root-cause line.
const BEFORE: u64 = 12;
/// Lines shown after it.
const AFTER: u64 = 6;
/// Lines of the tail shown when the root cause has no line number.
const TAIL: usize = 20;
/// Longest line kept in an excerpt, in bytes; the rest is cut.
const LINE_MAX: usize = 2000;
/// Most of a log embedded in a cell page (head and tail halves); the copy under `logs/` is whole.
pub(crate) const PAGE_MAX: u64 = 256 * 1024;

/// The lines of a log around the root cause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Excerpt {
    /// Where the lines come from: `log` (around the root-cause line), `record` (the classifier's
    /// excerpt), `tail` (the end of the log: no root-cause line is known).
    pub source: &'static str,
    pub lines: Vec<ExcerptLine>,
}

/// One line of an excerpt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExcerptLine {
    /// 1-based line number in the log, when known.
    pub number: Option<u64>,
    pub text: String,
    /// The root-cause line.
    pub root: bool,
}

/// The log at `relative` (already known not to climb out) in `run_dir`: `Ok(None)` when there is
/// none; `Err` says why it is refused: a symbolic link on the way, something other than a regular
/// file, or a path that resolves outside the run folder.
pub(crate) fn locate(run_dir: &Path, relative: &Path) -> Result<Option<PathBuf>, String> {
    let mut path = run_dir.to_path_buf();
    let mut walked = PathBuf::new();
    for part in relative.components() {
        path.push(part);
        walked.push(part);
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(_) => return Ok(None),
        };
        if meta.file_type().is_symlink() {
            return Err(format!("`{}` is a symbolic link", walked.display()));
        }
    }
    if !fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
        return Err(format!("`{}` is not a regular file", walked.display()));
    }
    match (run_dir.canonicalize(), path.canonicalize()) {
        (Ok(root), Ok(real)) if real.starts_with(&root) => Ok(Some(path)),
        _ => Err(format!(
            "`{}` resolves outside the run folder",
            walked.display()
        )),
    }
}

/// Opens a log for reading without following a symbolic link (one swapped in after [`locate`]
/// looked is refused by the system).
pub(crate) fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
}

/// Copies a log into the report, reading it as [`open`] does, with tokens the cell printed
/// (GitHub, Hugging Face, bearer headers) masked: a published site never carries one. Lines with
/// nothing to mask are copied byte for byte.
pub(crate) fn copy(from: &Path, to: &Path) -> io::Result<u64> {
    let mut source = io::BufReader::new(open(from)?);
    let mut dest = io::BufWriter::new(File::create(to)?);
    let mut line = Vec::new();
    let mut written = 0u64;
    loop {
        line.clear();
        if source.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let text = String::from_utf8_lossy(&line);
        match crate::redact::redact(&text) {
            std::borrow::Cow::Owned(masked) => {
                dest.write_all(masked.as_bytes())?;
                written += masked.len() as u64;
            }
            std::borrow::Cow::Borrowed(_) => {
                dest.write_all(&line)?;
                written += line.len() as u64;
            }
        }
    }
    dest.flush()?;
    Ok(written)
}

fn failing(status: Status) -> bool {
    match status {
        Status::Fail | Status::Xfail | Status::Error | Status::Flaky => true,
        Status::Pass | Status::Xpass | Status::Skip => false,
    }
}

fn line_text(bytes: &[u8]) -> String {
    let end = bytes.len().min(LINE_MAX);
    let text = String::from_utf8_lossy(&bytes[..end]);
    let text = text.trim_end_matches(['\n', '\r']);
    // Tokens a cell printed (GitHub, Hugging Face, bearer headers) never reach a report.
    let mut out = crate::redact::redact(&clean_line(text)).into_owned();
    if bytes.len() > LINE_MAX {
        out.push_str(" …");
    }
    out
}

/// The excerpt of a record: around `line` in the log when both are there, else the record's own
/// excerpt, else (for a failure) the log's last lines. `None` for a clean pass.
pub(crate) fn excerpt(record: &CellRecord, log: Option<&Path>) -> Option<Excerpt> {
    if let (Some(line), Some(path)) = (record.line, log) {
        match around(path, line) {
            Ok(lines) if !lines.is_empty() => {
                return Some(Excerpt {
                    source: "log",
                    lines,
                });
            }
            _ => {}
        }
    }
    if let Some(text) = record.excerpt.as_deref().filter(|t| !t.trim().is_empty()) {
        return Some(Excerpt {
            source: "record",
            lines: text
                .lines()
                .map(|l| ExcerptLine {
                    number: None,
                    text: line_text(l.as_bytes()),
                    root: false,
                })
                .collect(),
        });
    }
    let path = log.filter(|_| failing(record.status))?;
    match tail(path) {
        Ok(lines) if !lines.is_empty() => Some(Excerpt {
            source: "tail",
            lines,
        }),
        _ => None,
    }
}

fn around(path: &Path, line: u64) -> io::Result<Vec<ExcerptLine>> {
    let first = line.saturating_sub(BEFORE).max(1);
    let last = line.saturating_add(AFTER);
    let mut reader = BufReader::new(open(path)?);
    let mut buf = Vec::new();
    let mut lines = Vec::new();
    let mut number = 0u64;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        number += 1;
        if number >= first {
            lines.push(ExcerptLine {
                number: Some(number),
                text: line_text(&buf),
                root: number == line,
            });
        }
        if number >= last {
            break;
        }
    }
    Ok(lines)
}

fn tail(path: &Path) -> io::Result<Vec<ExcerptLine>> {
    let mut reader = BufReader::new(open(path)?);
    let mut buf = Vec::new();
    let mut ring: VecDeque<ExcerptLine> = VecDeque::with_capacity(TAIL + 1);
    let mut number = 0u64;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        number += 1;
        if ring.len() == TAIL {
            ring.pop_front();
        }
        ring.push_back(ExcerptLine {
            number: Some(number),
            text: line_text(&buf),
            root: false,
        });
    }
    Ok(ring.into())
}

/// A log for a cell page: whole when at most [`PAGE_MAX`] bytes, else its head and tail with a
/// note of what was left out. Lines are cleaned; escaping is the page's job.
pub(crate) fn page_text(path: &Path) -> io::Result<String> {
    let mut file = open(path)?;
    let size = file.metadata()?.len();
    let raw = if size <= PAGE_MAX {
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.read_to_end(&mut bytes)?;
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        let half = PAGE_MAX / 2;
        let mut head = vec![0u8; usize::try_from(half).unwrap_or(0)];
        file.read_exact(&mut head)?;
        file.seek(SeekFrom::End(-i64::try_from(half).unwrap_or(0)))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail)?;
        format!(
            "{}\n… {} bytes left out here; the full log is linked above …\n{}",
            String::from_utf8_lossy(&head),
            size - 2 * half,
            String::from_utf8_lossy(&tail)
        )
    };
    let mut out = String::with_capacity(raw.len());
    for line in raw.lines() {
        out.push_str(&crate::redact::redact(&clean_line(line)));
        out.push('\n');
    }
    Ok(out)
}
