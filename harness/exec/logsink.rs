//! A cell's log file, bounded: the first `head` bytes go to disk as they come, then only the last
//! `tail` bytes are kept (in memory) and written after a marker when the cell ends. A cell that
//! prints gigabytes costs at most `head + tail` of disk and `tail` of memory.
//!
//! Output is written in whole lines so stdout and stderr of several processes interleave by line,
//! never mid-line. Lines longer than [`MAX_LINE`] are split. The harness's own notes start with
//! [`NOTE_PREFIX`] so readers (and the classifier) can tell them from the cell's output. Notes are
//! never dropped, and they keep their place among the output lines: once the head is full they
//! wait in the tail with the output around them.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Longest line kept whole; longer output is cut into pieces of this size.
pub const MAX_LINE: usize = 64 * 1024;
/// Start of every line the harness writes into a cell's log.
pub const NOTE_PREFIX: &str = "[gpucompat]";

/// How much of a cell's output is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLimits {
    pub head: u64,
    pub tail: usize,
}

impl LogLimits {
    /// Splits a total budget: three quarters head, one quarter tail.
    pub fn from_total(total: u64) -> Self {
        let tail = usize::try_from(total / 4).unwrap_or(usize::MAX);
        LogLimits {
            head: total - total / 4,
            tail,
        }
    }
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits::from_total(64 * 1024 * 1024)
    }
}

/// Called with every line of the cell's output (without the newline).
pub type LineHook = Box<dyn FnMut(&[u8]) + Send>;

/// The log of one cell attempt.
pub struct LogSink {
    out: BufWriter<File>,
    limits: LogLimits,
    written: u64,
    /// The head is full: output (and notes, to keep their order) goes to the tail.
    spilled: bool,
    /// Kept lines after the head; `true` marks a note of the harness, which is never dropped.
    tail: VecDeque<(Vec<u8>, bool)>,
    /// Bytes of output in `tail` (notes not counted).
    tail_bytes: usize,
    /// Notes that fell into the dropped middle: written right after the marker.
    dropped_notes: Vec<Vec<u8>>,
    omitted_bytes: u64,
    omitted_lines: u64,
    /// The first write that failed (a full disk, say): kept so that [`LogSink::finish`] reports
    /// it. The log is then incomplete and must not be read as the cell's output.
    failed: Option<io::Error>,
    /// Bytes the cell has printed; the watchdog reads it as a sign of progress.
    output: Arc<AtomicU64>,
    hooks: Vec<LineHook>,
}

impl std::fmt::Debug for LogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSink")
            .field("written", &self.written)
            .field("omitted_bytes", &self.omitted_bytes)
            .finish_non_exhaustive()
    }
}

impl LogSink {
    pub fn create(path: &Path, limits: LogLimits) -> io::Result<Self> {
        Ok(LogSink {
            out: BufWriter::new(File::create(path)?),
            limits,
            written: 0,
            spilled: false,
            tail: VecDeque::new(),
            tail_bytes: 0,
            dropped_notes: Vec::new(),
            omitted_bytes: 0,
            omitted_lines: 0,
            failed: None,
            output: Arc::new(AtomicU64::new(0)),
            hooks: Vec::new(),
        })
    }

    /// Counter of bytes the cell printed (see [`LogSink::received`]).
    pub fn output_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.output)
    }

    pub fn add_hook(&mut self, hook: LineHook) {
        self.hooks.push(hook);
    }

    /// A note of the harness's own (`[gpucompat] ...`); never dropped. A note of several lines (a
    /// multi-line command) is prefixed on every line, so the classifier never reads the harness's
    /// words, such as a script that names a failure, as the cell's.
    pub fn note(&mut self, text: &str) {
        for line in text.split('\n') {
            self.note_line(line.strip_suffix('\r').unwrap_or(line));
        }
    }

    fn note_line(&mut self, text: &str) {
        let line = format!("{NOTE_PREFIX} {text}");
        if self.spilled {
            // Written after the output that came before it, not ahead of the kept tail.
            self.tail.push_back((line.into_bytes(), true));
            return;
        }
        // Notes are few and small: they may overshoot the head limit, they never go missing.
        let written = self
            .out
            .write_all(line.as_bytes())
            .and_then(|()| self.out.write_all(b"\n"))
            .and_then(|()| self.out.flush());
        self.keep_error(written);
        self.written += line.len() as u64 + 1;
    }

    /// `bytes` of output arrived from the cell, whole lines or not. Counted as they arrive: a
    /// progress bar that redraws one line with `\r` and never ends it is output all the same.
    pub fn received(&self, bytes: usize) {
        self.output.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A line of the cell's output, without its newline.
    pub fn line(&mut self, line: &[u8]) {
        for hook in &mut self.hooks {
            hook(line);
        }
        let size = line.len() as u64 + 1;
        if !self.spilled && self.written + size <= self.limits.head {
            let written = self
                .out
                .write_all(line)
                .and_then(|()| self.out.write_all(b"\n"));
            self.keep_error(written);
            self.written += size;
            return;
        }
        self.spilled = true;
        self.tail.push_back((line.to_vec(), false));
        self.tail_bytes += line.len() + 1;
        while self.tail_bytes > self.limits.tail {
            let Some((old, is_note)) = self.tail.pop_front() else {
                break;
            };
            if is_note {
                self.dropped_notes.push(old);
                continue;
            }
            self.tail_bytes -= old.len() + 1;
            self.omitted_bytes += old.len() as u64 + 1;
            self.omitted_lines += 1;
        }
    }

    /// Flushes what is buffered so a reader sees it (called after each chunk of output).
    pub fn flush(&mut self) {
        let flushed = self.out.flush();
        self.keep_error(flushed);
    }

    /// Remembers the first failed write; writing goes on (a later write may succeed, and the
    /// cell must not be stopped by its log), but the log is known to be incomplete.
    fn keep_error(&mut self, result: io::Result<()>) {
        if let (Err(err), None) = (result, &self.failed) {
            self.failed = Some(err);
        }
    }

    /// Writes the kept tail (after a marker if anything was dropped) and closes the file. An
    /// earlier write that failed is reported here: the log on disk is not the whole story.
    pub fn finish(mut self) -> io::Result<()> {
        self.close()
    }

    /// [`LogSink::finish`] through a shared handle (an output drain that outlived teardown may
    /// still hold one).
    pub fn close(&mut self) -> io::Result<()> {
        let written = self.write_tail();
        match self.failed.take() {
            Some(err) => Err(err),
            None => written,
        }
    }

    fn write_tail(&mut self) -> io::Result<()> {
        if self.omitted_bytes > 0 {
            let marker = format!(
                "{NOTE_PREFIX} log limit reached: {} lines ({} bytes) omitted here; the last {} bytes follow\n",
                self.omitted_lines, self.omitted_bytes, self.tail_bytes
            );
            self.omitted_bytes = 0;
            self.out.write_all(marker.as_bytes())?;
        }
        let notes = std::mem::take(&mut self.dropped_notes);
        let tail = std::mem::take(&mut self.tail)
            .into_iter()
            .map(|(line, _)| line);
        for line in notes.into_iter().chain(tail) {
            self.out.write_all(&line)?;
            self.out.write_all(b"\n")?;
        }
        self.out.flush()?;
        self.out.get_ref().sync_data()
    }
}

/// Cuts a byte stream into lines of at most [`MAX_LINE`] bytes.
#[derive(Debug, Default)]
pub struct LineSplitter {
    pending: Vec<u8>,
}

impl LineSplitter {
    /// Feeds a chunk; calls `emit` with each complete line (without `\n`, `\r` trimmed).
    pub fn feed(&mut self, mut chunk: &[u8], mut emit: impl FnMut(&[u8])) {
        while let Some(pos) = chunk.iter().position(|b| *b == b'\n') {
            let (line, rest) = chunk.split_at(pos);
            if self.pending.is_empty() {
                emit_capped(line, &mut emit);
            } else {
                self.pending.extend_from_slice(line);
                emit_capped(&std::mem::take(&mut self.pending), &mut emit);
            }
            chunk = &rest[1..];
        }
        self.pending.extend_from_slice(chunk);
        while self.pending.len() >= MAX_LINE {
            let rest = self.pending.split_off(MAX_LINE);
            emit(&self.pending);
            self.pending = rest;
        }
    }

    /// Emits what is left after the stream ended.
    pub fn finish(&mut self, mut emit: impl FnMut(&[u8])) {
        if !self.pending.is_empty() {
            emit_capped(&std::mem::take(&mut self.pending), &mut emit);
        }
    }
}

fn emit_capped(line: &[u8], emit: &mut impl FnMut(&[u8])) {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        emit(line);
    }
    for piece in line.chunks(MAX_LINE) {
        emit(piece);
    }
}

/// Whether a log write failed because the disk (or the quota) is full.
pub fn is_disk_full(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_reported_by_finish_even_when_only_output_failed() {
        // `/dev/full` takes the open and fails every write with ENOSPC.
        let mut sink =
            LogSink::create(Path::new("/dev/full"), LogLimits::default()).expect("open /dev/full");
        sink.line(b"some output");
        sink.flush();
        let err = sink.finish().expect_err("writes to /dev/full fail");
        assert!(is_disk_full(&err), "{err:?}");
    }

    #[test]
    fn splits_lines_across_chunks_and_caps_length() {
        let mut lines = Vec::new();
        let mut splitter = LineSplitter::default();
        splitter.feed(b"ab", |l| lines.push(l.to_vec()));
        splitter.feed(b"c\r\nd\n\nlast", |l| lines.push(l.to_vec()));
        splitter.finish(|l| lines.push(l.to_vec()));
        assert_eq!(lines, [&b"abc"[..], b"d", b"", b"last"]);

        let mut long = Vec::new();
        let mut splitter = LineSplitter::default();
        splitter.feed(&vec![b'x'; MAX_LINE * 2 + 10], |l| long.push(l.len()));
        splitter.finish(|l| long.push(l.len()));
        assert_eq!(long, [MAX_LINE, MAX_LINE, 10]);
    }

    #[test]
    fn every_line_of_a_note_carries_the_prefix() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cell.log");
        let mut sink = LogSink::create(&path, LogLimits::default()).expect("create");
        sink.note("command: set -e\necho 'an illegal memory access was encountered'\r\nexit 1");
        sink.line(b"cell output");
        sink.finish().expect("finish");
        let text = std::fs::read_to_string(&path).expect("log");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[..3].iter().all(|l| l.starts_with(NOTE_PREFIX)),
            "{text}"
        );
        assert_eq!(lines[3], "cell output");
    }

    #[test]
    fn keeps_head_and_tail_and_marks_the_gap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cell.log");
        let mut sink = LogSink::create(&path, LogLimits { head: 30, tail: 20 }).expect("create");
        let counter = sink.output_counter();
        for i in 0..100 {
            sink.line(format!("line {i:03}").as_bytes());
        }
        sink.received(7);
        sink.finish().expect("finish");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with("line 000\nline 001\nline 002\n"), "{text}");
        assert!(text.contains("log limit reached"), "{text}");
        assert!(text.ends_with("line 098\nline 099\n"), "{text}");
        assert!(text.len() < 200, "{}", text.len());
        assert_eq!(
            counter.load(Ordering::Relaxed),
            7,
            "only bytes received count"
        );
    }

    #[test]
    fn notes_keep_their_place_after_the_head_is_full() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("cell.log");
        let mut sink = LogSink::create(&path, LogLimits { head: 30, tail: 20 }).expect("create");
        sink.note("started");
        for i in 0..50 {
            sink.line(format!("line {i:03}").as_bytes());
        }
        sink.note("in the middle");
        for i in 50..100 {
            sink.line(format!("line {i:03}").as_bytes());
        }
        sink.note("watchdog: calling it a hang");
        sink.line(b"last");
        sink.finish().expect("finish");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with("[gpucompat] started\nline 000\n"),
            "{text}"
        );
        let marker = text.find("log limit reached").expect("marker");
        let middle = text
            .find("[gpucompat] in the middle")
            .expect("middle note kept");
        assert!(marker < middle, "{text}");
        assert!(
            text.ends_with("line 099\n[gpucompat] watchdog: calling it a hang\nlast\n"),
            "{text}"
        );
    }
}
