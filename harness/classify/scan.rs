//! One streaming pass over a log: find the lines rules fire on and keep the few that can still
//! become the root cause, each with the lines around it.
//!
//! The log is read in fixed blocks of whole lines; memory does not grow with its size. Within a
//! block the trigger prefilter jumps from candidate line to candidate line, so most lines are only
//! counted, never decoded. A line longer than a block is examined by its first [`MAX_LINE`] bytes
//! and the rest skipped.

use super::line::{self, MAX_LINE};
use super::rules::{Kind, Table};
use crate::signature::Signature;
use std::collections::VecDeque;
use std::io::{self, Read};

/// Bytes read per block; lines longer than this are cut.
const BLOCK: usize = 1 << 20;
/// Lines of context kept before and after a root-cause line.
const BEFORE: usize = 3;
const AFTER: usize = 5;
/// Lines kept from the end of the log (for verdicts that name no line).
const TAIL: usize = 8;
/// When the first fatal line's rule is a wrapper ("NCCL error ... unhandled cuda error", Triton's
/// CompilationError), a later fatal line at most this many lines further replaces it if its rule
/// has a higher precedence: the specific cause the wrapper announces ("Last error: ... illegal
/// memory access", the reason after the kernel source). Other first lines are never replaced.
const WRAPPER_REACH: u64 = 40;
/// A context line (a network error) marks a fatal line spurious when at most this many lines before.
const CONTEXT_REACH: u64 = 50;

/// A line a rule fired on, with its surroundings.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    /// Index of the rule in the table.
    pub(crate) rule: usize,
    /// 1-based line number.
    pub(crate) line: u64,
    /// The cleaned line (what the fingerprint is made from).
    pub(crate) text: String,
    pub(crate) excerpt: Excerpt,
    /// The context rule whose line shortly before this one makes it spurious.
    pub(crate) tainted_by: Option<usize>,
}

/// Lines around a hit, as displayed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Excerpt {
    /// 1-based line number of `lines[0]`.
    pub(crate) start: u64,
    pub(crate) lines: Vec<String>,
    /// Lines still to append as they are read.
    after: usize,
}

/// A hang rule's first sighting and how often it was seen.
#[derive(Debug, Clone)]
pub(crate) struct HangSeen {
    pub(crate) first: Hit,
    pub(crate) count: u32,
}

/// What one pass found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// The root-cause candidate among fatal lines.
    pub(crate) strong: Option<Hit>,
    /// The first weak line.
    pub(crate) weak: Option<Hit>,
    /// The first weak line of each signature (evidence such as `Killed` for a SIGKILL).
    pub(crate) weak_by_signature: Vec<(Signature, Hit)>,
    /// Hang rules seen, in order of first sighting.
    pub(crate) hangs: Vec<HangSeen>,
    /// The last lines of the log.
    pub(crate) tail: Excerpt,
    /// Lines in the log.
    pub(crate) lines: u64,
}

/// Streams `reader` once through `table`.
pub(crate) fn scan<R: Read>(table: &Table, mut reader: R) -> io::Result<Findings> {
    let mut scanner = Scanner::new(table);
    // One spare byte for the newline a final unterminated line gets.
    let mut buf = vec![0u8; BLOCK + 1];
    let mut len = 0;
    let mut eof = false;
    // Inside a line longer than a block: its start was examined, the rest is dropped.
    let mut skipping = false;
    loop {
        while len < BLOCK && !eof {
            match reader.read(&mut buf[len..BLOCK]) {
                Ok(0) => eof = true,
                Ok(n) => len += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        if skipping {
            match buf[..len].iter().position(|&b| b == b'\n') {
                Some(i) => {
                    buf.copy_within(i + 1..len, 0);
                    len -= i + 1;
                    skipping = false;
                }
                None => len = 0,
            }
            if !eof {
                continue;
            }
        }
        if eof && len > 0 && buf[len - 1] != b'\n' {
            buf[len] = b'\n';
            len += 1;
        }
        match buf[..len].iter().rposition(|&b| b == b'\n') {
            Some(last) => {
                scanner.block(&buf[..=last]);
                buf.copy_within(last + 1..len, 0);
                len -= last + 1;
            }
            None if len >= BLOCK => {
                scanner.fragment(&buf[..len]);
                len = 0;
                skipping = true;
            }
            None => {}
        }
        if eof && len == 0 {
            break;
        }
    }
    Ok(scanner.finish())
}

struct Scanner<'t> {
    table: &'t Table,
    found: Findings,
    /// Lines consumed so far; the line being looked at is `line` once counted.
    line: u64,
    /// Line of the first fatal hit and how many lines further a later one may replace it.
    first_strong: Option<(u64, u64)>,
    /// Lines still to read line by line to complete excerpts.
    dense: usize,
    /// Last line seen of each context tag.
    context: Vec<(String, u64, usize)>,
    /// The last lines before the current block, displayed.
    recent: VecDeque<String>,
}

impl<'t> Scanner<'t> {
    fn new(table: &'t Table) -> Self {
        Scanner {
            table,
            found: Findings::default(),
            line: 0,
            first_strong: None,
            dense: 0,
            context: Vec::new(),
            recent: VecDeque::with_capacity(TAIL + 1),
        }
    }

    /// A block of whole lines, ending with a newline.
    fn block(&mut self, block: &[u8]) {
        let mut pos = 0;
        while pos < block.len() {
            if self.dense > 0 {
                let end = pos + newline(&block[pos..]);
                self.line += 1;
                let raw = &block[pos..end];
                self.feed(raw);
                if self.table.triggers(&raw[..raw.len().min(MAX_LINE)]) {
                    self.examine(raw, block, pos);
                }
                pos = end + 1;
                continue;
            }
            let start = match &self.table.trigger {
                None => pos,
                // The end of the earliest match is enough to find its line (no reverse search
                // for the start); a line holds a trigger word whole.
                Some(trigger) => match trigger.shortest_match_at(block, pos) {
                    Some(end) => {
                        let end = end.min(block.len()).saturating_sub(1).max(pos);
                        pos + block[pos..end]
                            .iter()
                            .rposition(|&b| b == b'\n')
                            .map_or(0, |i| i + 1)
                    }
                    None => {
                        self.line += count_lines(&block[pos..]);
                        break;
                    }
                },
            };
            self.line += count_lines(&block[pos..start]);
            let end = start + newline(&block[start..]);
            self.line += 1;
            self.examine(&block[start..end], block, start);
            pos = end + 1;
        }
        self.remember_tail(block);
    }

    /// The first [`BLOCK`] bytes of a line longer than that.
    fn fragment(&mut self, raw: &[u8]) {
        self.line += 1;
        self.feed(raw);
        if self.table.triggers(&raw[..raw.len().min(MAX_LINE)]) {
            self.examine(raw, &[], 0);
        }
        self.push_recent(line::display(raw));
    }

    /// Appends a line to the excerpts still waiting for lines after their hit.
    fn feed(&mut self, raw: &[u8]) {
        if self.dense == 0 {
            return;
        }
        self.dense -= 1;
        let shown = line::display(raw);
        let found = &mut self.found;
        let hits = found
            .strong
            .iter_mut()
            .chain(found.weak.iter_mut())
            .chain(found.weak_by_signature.iter_mut().map(|(_, h)| h))
            .chain(found.hangs.iter_mut().map(|h| &mut h.first));
        for hit in hits {
            if hit.excerpt.after > 0 {
                hit.excerpt.after -= 1;
                hit.excerpt.lines.push(shown.clone());
            }
        }
    }

    /// Runs the rules on one line (at `start` in `block`, which holds the lines before it).
    fn examine(&mut self, raw: &[u8], block: &[u8], start: usize) {
        let cleaned = line::clean(&raw[..raw.len().min(MAX_LINE)]);
        if cleaned.text.is_empty() || line::is_code(&cleaned.text) {
            return;
        }
        let matched = self.table.set.matches(&cleaned.text);
        if !matched.matched_any() {
            return;
        }
        let table = self.table;
        let mut strong: Option<usize> = None;
        let mut weak: Option<usize> = None;
        let mut new_hangs = Vec::new();
        for index in matched.iter() {
            let rule = &table.rules[index];
            if cleaned.level.is_quiet() && !rule.any_level {
                continue;
            }
            if rule
                .unless
                .as_ref()
                .is_some_and(|u| u.is_match(&cleaned.text))
            {
                continue;
            }
            match rule.kind {
                Kind::Fatal => {
                    if strong.is_none_or(|s| table.rank(index) > table.rank(s)) {
                        strong = Some(index);
                    }
                }
                Kind::Weak => {
                    if weak.is_none_or(|w| table.rank(index) > table.rank(w)) {
                        weak = Some(index);
                    }
                }
                Kind::Hang => match self.found.hangs.iter_mut().find(|h| h.first.rule == index) {
                    Some(seen) => seen.count = seen.count.saturating_add(1),
                    None => new_hangs.push(index),
                },
                Kind::Context => {
                    if let Some(tag) = &rule.tag {
                        match self.context.iter_mut().find(|(t, _, _)| t == tag) {
                            Some(seen) => {
                                seen.1 = self.line;
                                seen.2 = index;
                            }
                            None => self.context.push((tag.clone(), self.line, index)),
                        }
                    }
                }
            }
        }

        let strong = strong.filter(|&index| match (&self.found.strong, self.first_strong) {
            (Some(current), Some((first, reach))) => {
                self.line <= first + reach
                    && table.precedence(index) > table.precedence(current.rule)
            }
            _ => true,
        });
        let weak_first = weak.filter(|_| self.found.weak.is_none());
        let weak_new_signature = weak.filter(|&index| {
            let sig = table.rules[index].signature;
            !self.found.weak_by_signature.iter().any(|(s, _)| *s == sig)
        });
        if strong.is_none()
            && weak_first.is_none()
            && weak_new_signature.is_none()
            && new_hangs.is_empty()
        {
            return;
        }

        let line_no = self.line;
        let mut lines = self.before(block, start);
        let excerpt = Excerpt {
            start: line_no - lines.len() as u64,
            lines: {
                lines.push(line::display(raw));
                lines
            },
            after: AFTER,
        };
        let hit = |rule: usize| Hit {
            rule,
            line: line_no,
            text: cleaned.text.clone(),
            excerpt: excerpt.clone(),
            tainted_by: None,
        };

        if let Some(index) = strong {
            let mut h = hit(index);
            if let Some(tag) = &table.rules[index].spurious_if {
                h.tainted_by = self
                    .context
                    .iter()
                    .find(|(t, seen, _)| t == tag && line_no.saturating_sub(*seen) <= CONTEXT_REACH)
                    .map(|(_, _, rule)| *rule);
            }
            if self.first_strong.is_none() {
                let reach = if table.rules[index].wrapper {
                    WRAPPER_REACH
                } else {
                    0
                };
                self.first_strong = Some((line_no, reach));
            }
            self.found.strong = Some(h);
        }
        if let Some(index) = weak_first {
            self.found.weak = Some(hit(index));
        }
        if let Some(index) = weak_new_signature {
            self.found
                .weak_by_signature
                .push((table.rules[index].signature, hit(index)));
        }
        for index in new_hangs {
            self.found.hangs.push(HangSeen {
                first: hit(index),
                count: 1,
            });
        }
        self.dense = AFTER;
    }

    /// Up to [`BEFORE`] displayed lines before the line at `start` of `block`.
    fn before(&self, block: &[u8], start: usize) -> Vec<String> {
        let mut lines = Vec::with_capacity(BEFORE);
        let mut end = start;
        while lines.len() < BEFORE && end > 0 {
            // `end` is just past a newline: the line before ends at `end - 1`.
            let line_end = end - 1;
            let line_start = block[..line_end]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            lines.push(line::display(&block[line_start..line_end]));
            end = line_start;
        }
        let missing = BEFORE - lines.len();
        lines.extend(self.recent.iter().rev().take(missing).cloned());
        lines.reverse();
        lines
    }

    /// Keeps the last lines of a finished block for the next block's excerpts and the tail.
    fn remember_tail(&mut self, block: &[u8]) {
        let mut tail = Vec::with_capacity(TAIL);
        let mut end = block.len();
        while tail.len() < TAIL && end > 0 {
            let line_end = end - 1;
            let line_start = block[..line_end]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            tail.push(line::display(&block[line_start..line_end]));
            end = line_start;
        }
        for shown in tail.into_iter().rev() {
            self.push_recent(shown);
        }
    }

    fn push_recent(&mut self, shown: String) {
        if self.recent.len() == TAIL {
            self.recent.pop_front();
        }
        self.recent.push_back(shown);
    }

    fn finish(mut self) -> Findings {
        let lines: Vec<String> = self.recent.into_iter().collect();
        self.found.tail = Excerpt {
            start: (self.line + 1).saturating_sub(lines.len() as u64),
            lines,
            after: 0,
        };
        self.found.lines = self.line;
        self.found
    }
}

/// Offset of the first newline in `bytes` (its length when there is none).
fn newline(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(bytes.len())
}

/// Newlines in `bytes`.
fn count_lines(bytes: &[u8]) -> u64 {
    // Byte lanes that cannot overflow within a chunk: the compiler turns this into wide vector
    // compares and adds (several GB/s, against about 1.4 for a plain filter-count).
    const LANES: usize = 64;
    let mut total = 0u64;
    for chunk in bytes.chunks(255 * LANES) {
        let mut lanes = [0u8; LANES];
        let mut blocks = chunk.chunks_exact(LANES);
        for block in &mut blocks {
            for (lane, &b) in lanes.iter_mut().zip(block) {
                *lane += u8::from(b == b'\n');
            }
        }
        total += lanes.iter().map(|&l| u64::from(l)).sum::<u64>();
        total += blocks.remainder().iter().filter(|&&b| b == b'\n').count() as u64;
    }
    total
}
