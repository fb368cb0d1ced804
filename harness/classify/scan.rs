//! One streaming pass over a log: find the lines rules fire on and keep the few that can still
//! become the root cause, each with the lines around it.
//!
//! The log is read in blocks of whole lines; memory does not grow with its size. A block is
//! scanned on its own ([`scan_block`]: the trigger prefilter jumps from candidate line to
//! candidate line, so most lines are only counted, never decoded; candidates are cleaned and
//! matched against every rule at once). Blocks of a large log are scanned by worker threads while
//! the calling thread reads the next ones; the results are applied in log order by one
//! [`Sequencer`], which is where "first" and "near" are decided, so the outcome does not depend on
//! the number of threads. A line longer than a block is examined by its first [`MAX_LINE`] bytes
//! and the rest skipped.

use super::line::{self, Cleaned, MAX_LINE};
use super::rules::{Kind, Table};
use crate::signature::Signature;
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::{self, Read};
use std::sync::{Mutex, mpsc};

/// Bytes read per block; lines longer than this are cut.
const BLOCK: usize = 1 << 20;
/// Most worker threads a scan uses.
const MAX_WORKERS: usize = 8;
/// Blocks read ahead per worker (bounds memory: about this many megabytes per worker).
const IN_FLIGHT_PER_WORKER: usize = 3;
/// Lines of context kept before and after a root-cause line.
const BEFORE: usize = 3;
const AFTER: usize = 5;
/// Lines kept from the end of the log (for verdicts that name no line).
const TAIL: usize = 8;
/// Lines kept as written from the end of the log, for what the process printed last: a
/// generation that loops over whole lines needs more of them than the excerpt shows.
const TAIL_TEXT_LINES: usize = 48;
/// Of each of those last lines, at most this many bytes are kept as written, for what the
/// process printed last (a generation that repeats itself past the excerpt's cut).
const TAIL_TEXT: usize = 4096;
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

/// A hang rule's first sighting, how often it was seen, and the line of its last sighting.
#[derive(Debug, Clone)]
pub(crate) struct HangSeen {
    pub(crate) first: Hit,
    pub(crate) count: u32,
    pub(crate) last: u64,
}

/// What one pass found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// The root-cause candidate among fatal lines.
    pub(crate) strong: Option<Hit>,
    /// The first fatal line, when a more specific one within its reach replaced it (a wrapper).
    pub(crate) wrapped: Option<Hit>,
    /// The first weak line.
    pub(crate) weak: Option<Hit>,
    /// The first weak line of each signature, wrappers left out (evidence such as `Killed` for
    /// a SIGKILL, and the first generic exception before it).
    pub(crate) weak_by_signature: Vec<(Signature, Hit)>,
    /// The first background line (a complaint the process may have survived).
    pub(crate) background: Option<Hit>,
    /// Hang rules seen, in order of first sighting.
    pub(crate) hangs: Vec<HangSeen>,
    /// The last lines of the log.
    pub(crate) tail: Excerpt,
}

/// What one pass gives: the findings the verdict is decided on, and the text of the log's last
/// lines, which the tail checks and the lexical model read.
#[derive(Debug)]
pub(crate) struct Scanned {
    pub(crate) found: Findings,
    /// The last [`TAIL_TEXT_LINES`] lines, uncut up to [`TAIL_TEXT`] bytes each (ANSI colour and
    /// controls removed); they end with the tail's lines.
    pub(crate) tail_text: Vec<String>,
}

/// Streams `reader` once through `table`.
pub(crate) fn scan<R: Read>(table: &Table, reader: R) -> io::Result<Scanned> {
    let mut blocks = Blocks::new(reader);
    let mut sequencer = Sequencer::new(table);
    let Some(first) = blocks.next_block()? else {
        return Ok(sequencer.finish());
    };
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(MAX_WORKERS);
    if blocks.done() || workers < 2 {
        // A small log (one block), or a single core: no threads.
        let mut scratch = table.scratch.take();
        let mut block = Some(first);
        while let Some(b) = block {
            let block_scan = scan_block(table, &b, &mut scratch);
            sequencer.apply(&b, block_scan);
            block = blocks.next_block()?;
        }
        table.scratch.give(scratch);
    } else {
        parallel(table, workers, first, &mut blocks, &mut sequencer)?;
    }
    Ok(sequencer.finish())
}

/// A block sent to a worker, and what comes back.
type Job = (u64, Vec<u8>);
type Done = (u64, Vec<u8>, BlockScan);

/// Reads blocks on this thread, scans them on `workers` threads, applies them here in log order.
/// At most a few blocks per worker are in flight, so memory stays bounded.
fn parallel<R: Read>(
    table: &Table,
    workers: usize,
    first: Vec<u8>,
    blocks: &mut Blocks<R>,
    sequencer: &mut Sequencer<'_>,
) -> io::Result<()> {
    let limit = (workers * IN_FLIGHT_PER_WORKER) as u64;
    let (work_tx, work_rx) = mpsc::sync_channel::<Job>(workers * IN_FLIGHT_PER_WORKER);
    let work_rx = Mutex::new(work_rx);
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let done_tx = done_tx.clone();
            let work_rx = &work_rx;
            scope.spawn(move || {
                let mut scratch = table.scratch.take();
                loop {
                    // Holding the lock while waiting is fine: its holder takes the next job.
                    let job = match work_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => break,
                    };
                    let Ok((n, block)) = job else { break };
                    let block_scan = scan_block(table, &block, &mut scratch);
                    if done_tx.send((n, block, block_scan)).is_err() {
                        break;
                    }
                }
                table.scratch.give(scratch);
            });
        }
        drop(done_tx);
        // Dropping `work_tx` on every way out (errors included) lets the workers finish.
        let work_tx = work_tx;
        let stopped = || io::Error::other("a classifier worker thread stopped");
        let mut ready: BTreeMap<u64, (Vec<u8>, BlockScan)> = BTreeMap::new();
        let mut next = 0u64;
        let mut sent = 0u64;
        let mut apply = |done: Done, next: &mut u64| {
            let (n, bytes, block_scan) = done;
            ready.insert(n, (bytes, block_scan));
            while let Some((bytes, block_scan)) = ready.remove(next) {
                sequencer.apply(&bytes, block_scan);
                *next += 1;
            }
        };
        let mut block = Some(first);
        while let Some(b) = block.take() {
            work_tx.send((sent, b)).map_err(|_| stopped())?;
            sent += 1;
            // Apply what is finished; wait while too much is in flight.
            loop {
                let done = if sent - next >= limit {
                    Some(done_rx.recv().map_err(|_| stopped())?)
                } else {
                    done_rx.try_recv().ok()
                };
                match done {
                    Some(done) => apply(done, &mut next),
                    None => break,
                }
            }
            block = blocks.next_block()?;
        }
        drop(work_tx);
        while next < sent {
            let done = done_rx.recv().map_err(|_| stopped())?;
            apply(done, &mut next);
        }
        Ok(())
    })
}

/// Splits a reader into blocks of whole lines, each ending with a newline. A line longer than a
/// block becomes a block of its first [`MAX_LINE`] bytes; the rest of it is skipped.
struct Blocks<R> {
    reader: R,
    /// Bytes read after the last complete line.
    carry: Vec<u8>,
    eof: bool,
    /// Inside a line longer than a block whose start was already given out.
    skipping: bool,
}

impl<R: Read> Blocks<R> {
    fn new(reader: R) -> Self {
        Blocks {
            reader,
            carry: Vec::new(),
            eof: false,
            skipping: false,
        }
    }

    /// Whether everything has been given out.
    fn done(&self) -> bool {
        self.eof && self.carry.is_empty()
    }

    fn next_block(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if self.done() {
                return Ok(None);
            }
            // One spare byte for the newline a final unterminated line gets.
            let mut buf = Vec::with_capacity(BLOCK + 1);
            buf.append(&mut self.carry);
            let carried = buf.len();
            buf.resize(BLOCK, 0);
            let len = self.fill(&mut buf, carried)?;
            buf.truncate(len);
            if self.skipping {
                match memchr::memchr(b'\n', &buf) {
                    Some(i) => {
                        buf.drain(..=i);
                        self.skipping = false;
                    }
                    None => buf.clear(),
                }
                if !self.eof {
                    self.carry = buf;
                    continue;
                }
            }
            if self.eof && buf.last().is_some_and(|&b| b != b'\n') {
                buf.push(b'\n');
            }
            if buf.is_empty() {
                return Ok(None);
            }
            return Ok(Some(match memchr::memrchr(b'\n', &buf) {
                Some(last) => {
                    self.carry = buf.split_off(last + 1);
                    buf
                }
                None => {
                    // A line longer than a block: give out its start, skip the rest.
                    buf.truncate(MAX_LINE);
                    buf.push(b'\n');
                    self.skipping = true;
                    buf
                }
            }));
        }
    }

    /// Reads into `buf[len..BLOCK]` until it is full or the input ends; returns the new length.
    fn fill(&mut self, buf: &mut [u8], mut len: usize) -> io::Result<usize> {
        while len < BLOCK && !self.eof {
            match self.reader.read(&mut buf[len..BLOCK]) {
                Ok(0) => self.eof = true,
                Ok(n) => len += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(len)
    }
}

/// Messages of quiet lines remembered as firing no rule, at most this many (then forgotten all
/// at once), each at most [`SILENT_MAX_LEN`] bytes: about a megabyte per worker.
const SILENT_ENTRIES: usize = 4096;
const SILENT_MAX_LEN: usize = 256;

/// Caches kept from one scan to the next, a few for each worker thread: the quiet-prefix
/// search's lazy DFA and the messages known to fire nothing. Kept, the next log finds them built.
/// Bounded: at most [`MAX_WORKERS`] kept.
#[derive(Debug, Default)]
pub(crate) struct ScratchPool(Mutex<Vec<Scratch>>);

impl ScratchPool {
    /// Caches grown by an earlier scan, or fresh ones.
    fn take(&self) -> Scratch {
        let kept = self.0.lock().ok().and_then(|mut pool| pool.pop());
        kept.unwrap_or_else(Scratch::new)
    }

    /// How many caches are kept now.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.0.lock().map_or(0, |pool| pool.len())
    }

    /// Keeps `scratch` for the next scan, unless enough are kept already.
    fn give(&self, scratch: Scratch) {
        if let Ok(mut pool) = self.0.lock() {
            if pool.len() < MAX_WORKERS {
                pool.push(scratch);
            }
        }
    }
}

/// One thread's caches for the raw-line prefilter, kept from block to block.
#[derive(Debug)]
struct Scratch {
    quiet: line::QuietCache,
    /// The search cache of the table's quiet-line set, made when a quiet line first needs it.
    quiet_set: Option<regex_automata::hybrid::dfa::Cache>,
    /// Messages (what follows a quiet prefix) known to fire no rule: examined and matched
    /// nothing, or turned down by the quiet-line automaton. What fires on one depends on the
    /// message's bytes alone, and a warning-heavy log repeats its messages (every rank prints
    /// every warning), so most are looked up rather than searched, cleaned and matched.
    silent: Silent,
    /// Plain lines with no quiet prefix known to fire no rule, whole: a log prints many of its
    /// lines again and again (progress, the same notice on every rank, a restarted engine).
    silent_lines: Silent,
}

/// A set of texts known to fire no rule. Hashed with `foldhash`: a lookup stands in for a search
/// of the text, so it must cost less than one, and the default hasher (SipHash) costs about as
/// much. The texts are a log's own lines, not keys an attacker picks to collide: a bad log makes a
/// slow scan at worst, and the set is bounded ([`SILENT_ENTRIES`]).
type Silent = HashSet<Box<[u8]>, foldhash::fast::RandomState>;

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            quiet: line::QuietCache::new(),
            quiet_set: None,
            silent: Silent::default(),
            silent_lines: Silent::default(),
        }
    }

    /// Whether some `any-level` rule may fire on a quiet line's message: its relaxed pattern
    /// matches it (all of them searched as one set, with this worker's cache).
    fn may_fire_quiet(&mut self, table: &Table, message: &[u8]) -> bool {
        let Some(set) = table.raw_quiet() else {
            return true;
        };
        let cache = self.quiet_set.get_or_insert_with(|| set.cache());
        set.is_match(cache, message)
    }

    /// Remembers a quiet line's message that fired no rule.
    fn remember_silent(&mut self, message: &[u8]) {
        remember(&mut self.silent, message);
    }

    /// Remembers a plain line with no quiet prefix that fired no rule.
    fn remember_silent_line(&mut self, line: &[u8]) {
        remember(&mut self.silent_lines, line);
    }
}

/// Adds `text` to a bounded set of texts that fire nothing.
fn remember(set: &mut Silent, text: &[u8]) {
    if text.len() <= SILENT_MAX_LEN {
        if set.len() >= SILENT_ENTRIES {
            set.clear();
        }
        set.insert(text.into());
    }
}

/// What a worker found in one block: the lines some rule fires on, in order.
#[derive(Debug, Default)]
struct BlockScan {
    examined: Vec<Examined>,
    /// Lines in the block.
    lines: u64,
}

/// A line at least one rule fires on (level and `unless` already applied).
#[derive(Debug)]
struct Examined {
    /// Byte range of the line in its block (without the newline).
    start: usize,
    end: usize,
    /// Lines before it in the block.
    index: u64,
    cleaned: Cleaned,
    /// Rules that fire, in table order.
    rules: Vec<usize>,
}

/// Finds the lines of a block (whole lines, ending with a newline) that rules fire on. Pure: it
/// depends on nothing but the block, so blocks can be scanned in any order on any thread.
fn scan_block(table: &Table, block: &[u8], scratch: &mut Scratch) -> BlockScan {
    // Most blocks are printable ASCII throughout: then no line needs the per-line check.
    let block_plain = all_plain(block);
    let mut examined = Vec::new();
    let mut pos = 0;
    let mut index = 0u64;
    while pos < block.len() {
        let start = match &table.trigger {
            None => pos,
            // The end of the earliest match is enough to find its line (no reverse search for
            // the start); a line holds a trigger word whole.
            Some(trigger) => match trigger.next_end(block, pos) {
                Some(end) => {
                    let end = end.min(block.len()).saturating_sub(1).max(pos);
                    pos + memchr::memrchr(b'\n', &block[pos..end]).map_or(0, |i| i + 1)
                }
                None => break,
            },
        };
        index += count_lines(&block[pos..start]);
        let end = start + newline(&block[start..]);
        if let Some((cleaned, rules)) = examine(table, &block[start..end], block_plain, scratch) {
            examined.push(Examined {
                start,
                end,
                index,
                cleaned,
                rules,
            });
        }
        index += 1;
        pos = end + 1;
    }
    BlockScan {
        examined,
        lines: count_lines(block),
    }
}

/// What the raw line says before it is cleaned (the second prefilter).
enum Raw {
    /// No rule can fire on it.
    Nothing,
    /// A plain line with a quiet prefix (WARNING/INFO/DEBUG) that ends here: only `any-level`
    /// rules can fire, on what follows.
    Quiet(usize),
    /// Clean it and match the rules its words gate; `true`: a plain line, whose result depends
    /// on its bytes alone (remembered where nothing fires).
    Examine(bool),
}

/// Decides what it can of a raw line without cleaning it. Only plain lines are decided: their
/// cleaned text is a piece of the raw line, so a rule that none of the raw line's words gate, or
/// whose relaxed pattern does not match the raw line, cannot fire on the cleaned one. A line
/// whose prefix surely makes it quiet can only fire `any-level` rules, and its cleaned text is a
/// piece of what follows that prefix, so only that part is looked at.
fn raw_prefilter(table: &Table, raw: &[u8], block_plain: bool, scratch: &mut Scratch) -> Raw {
    let plain = if block_plain {
        line::is_plain_ascii(raw)
    } else {
        line::is_plain(raw)
    };
    if !plain {
        return Raw::Examine(false);
    }
    match line::quiet_prefix(raw, &mut scratch.quiet) {
        Some(end) => {
            let message = &raw[end..];
            if scratch.silent.contains(message) {
                Raw::Nothing
            } else if scratch.may_fire_quiet(table, message) {
                Raw::Quiet(end)
            } else {
                // Looked up next time: every rank prints the same warnings again and again.
                scratch.remember_silent(message);
                Raw::Nothing
            }
        }
        None if scratch.silent_lines.contains(raw) => Raw::Nothing,
        None if table.may_fire(raw) => Raw::Examine(true),
        None => {
            scratch.remember_silent_line(raw);
            Raw::Nothing
        }
    }
}

/// The rules that fire on one raw line, after its prefixes are stripped. The harness's own notes
/// in a cell's log (`[gpucompat] ...`) describe what it saw; they are never the cell's failure.
fn examine(
    table: &Table,
    raw: &[u8],
    block_plain: bool,
    scratch: &mut Scratch,
) -> Option<(Cleaned, Vec<usize>)> {
    if raw.starts_with(crate::exec::logsink::NOTE_PREFIX.as_bytes()) {
        return None;
    }
    let decided = raw_prefilter(table, raw, block_plain, scratch);
    let found = match decided {
        Raw::Nothing => return None,
        Raw::Quiet(_) | Raw::Examine(_) => matched_rules(table, raw),
    };
    if found.is_none() {
        match decided {
            Raw::Quiet(end) => scratch.remember_silent(&raw[end..]),
            Raw::Examine(true) => scratch.remember_silent_line(raw),
            _ => {}
        }
    }
    found
}

/// The rules that fire on a raw line once it is cleaned (level and `unless` applied).
fn matched_rules(table: &Table, raw: &[u8]) -> Option<(Cleaned, Vec<usize>)> {
    // A long line of carriage-return redraws (a progress bar) shows only its last redraw on a
    // terminal, and that is where a crash lands: look there, not at the line's head.
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let visible = match raw.iter().rposition(|b| *b == b'\r') {
        Some(at) if raw.len() > MAX_LINE => &raw[at + 1..],
        _ => raw,
    };
    let cleaned = line::clean(&visible[..visible.len().min(MAX_LINE)]);
    if cleaned.text.is_empty() {
        return None;
    }
    // Source lines a traceback quotes are not messages; only rules made for them look at them.
    let code = line::is_code(&cleaned.text);
    if code && !table.any_code {
        return None;
    }
    let matched = table.matching(&cleaned.text);
    if matched.is_empty() {
        return None;
    }
    let rules: Vec<usize> = matched
        .into_iter()
        .filter(|&index| {
            let rule = &table.rules[index];
            (!code || rule.code)
                && (rule.any_level || !cleaned.level.is_quiet())
                && !rule
                    .unless
                    .as_ref()
                    .is_some_and(|u| u.is_match(&cleaned.text))
        })
        .collect();
    (!rules.is_empty()).then_some((cleaned, rules))
}

/// Applies block results in log order: decides which lines stay candidates, builds excerpts.
struct Sequencer<'t> {
    table: &'t Table,
    found: Findings,
    /// Lines in the blocks applied so far.
    line: u64,
    /// Line of the first fatal hit and how many lines further a later one may replace it.
    first_strong: Option<(u64, u64)>,
    /// Lines still to append to excerpts waiting for what follows their hit.
    dense: usize,
    /// Last line seen of each context tag, and the rule that saw it.
    context: Vec<(String, u64, usize)>,
    /// The last line a survived complaint's traceback may reach, and the complaint's signature
    /// (a background rule's `covers`).
    covered: Option<(u64, usize)>,
    /// The last lines before the current block, displayed and as written.
    recent: VecDeque<(String, String)>,
}

impl<'t> Sequencer<'t> {
    fn new(table: &'t Table) -> Self {
        Sequencer {
            table,
            found: Findings::default(),
            line: 0,
            first_strong: None,
            dense: 0,
            context: Vec::new(),
            covered: None,
            recent: VecDeque::with_capacity(TAIL_TEXT_LINES + 1),
        }
    }

    /// Applies the next block of the log and what its scan found.
    fn apply(&mut self, block: &[u8], block_scan: BlockScan) {
        let base = self.line;
        // Start of the first line not yet handed to the excerpts.
        let mut pos = 0;
        for e in block_scan.examined {
            self.feed_until(block, &mut pos, e.start);
            if pos == e.start {
                // The hit line itself follows earlier hits too.
                self.feed(&block[e.start..e.end]);
            }
            let line_no = base + e.index + 1;
            self.offer(e.cleaned, &e.rules, line_no, block, e.start, e.end);
            pos = e.end + 1;
        }
        self.feed_until(block, &mut pos, block.len());
        self.line = base + block_scan.lines;
        self.remember_tail(block);
    }

    /// Hands lines from `*pos` up to `limit` to the excerpts still waiting for lines, as long as
    /// some wait; then jumps to `limit`.
    fn feed_until(&mut self, block: &[u8], pos: &mut usize, limit: usize) {
        while self.dense > 0 && *pos < limit {
            let end = *pos + newline(&block[*pos..limit]);
            self.feed(&block[*pos..end]);
            *pos = end + 1;
        }
        if self.dense == 0 {
            *pos = limit;
        }
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

    /// Decides what a line the rules fire on changes: the fatal candidate, the first weak line,
    /// hang sightings, context for later lines.
    fn offer(
        &mut self,
        cleaned: Cleaned,
        rules: &[usize],
        line_no: u64,
        block: &[u8],
        start: usize,
        end: usize,
    ) {
        let table = self.table;
        let mut strong: Option<usize> = None;
        let mut weak: Option<usize> = None;
        let mut background: Option<usize> = None;
        let mut new_hangs = Vec::new();
        for &index in rules {
            let rule = &table.rules[index];
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
                Kind::Background => {
                    if background.is_none_or(|b| table.rank(index) > table.rank(b)) {
                        background = Some(index);
                    }
                }
                Kind::Hang => match self.found.hangs.iter_mut().find(|h| h.first.rule == index) {
                    Some(seen) => {
                        seen.count = seen.count.saturating_add(1);
                        seen.last = line_no;
                    }
                    None => new_hangs.push(index),
                },
                Kind::Context => {
                    if let Some(tag) = &rule.tag {
                        match self.context.iter_mut().find(|(t, _, _)| t == tag) {
                            Some(seen) => {
                                seen.1 = line_no;
                                seen.2 = index;
                            }
                            None => self.context.push((tag.clone(), line_no, index)),
                        }
                    }
                }
            }
        }

        // The traceback a library logged with a complaint it survived (bitsandbytes' `OSError:
        // ... cannot open shared object file` after "Could not load bitsandbytes native
        // library") is the complaint again, not a failure: its exception line (a failure of the
        // complaint's kind, or the rule's `covers-exception`) is absorbed, and the traceback
        // ends there. Another exception in the window is a failure of its own.
        let absorbed = self.covered.is_some_and(|(until, by)| {
            let by = &table.rules[by];
            line_no <= until
                && (strong.is_some_and(|s| table.rules[s].signature == by.covers_signature)
                    || (strong.is_none()
                        && weak.is_some()
                        && by
                            .covers_exception
                            .as_deref()
                            .is_some_and(|e| cleaned.text.starts_with(e))))
        });
        let (strong, weak) = if absorbed {
            self.covered = None;
            (None, None)
        } else {
            (strong, weak)
        };
        if let Some(b) = background.filter(|&b| table.rules[b].covers > 0) {
            self.covered = Some((line_no + u64::from(table.rules[b].covers), b));
        }
        let strong = strong.filter(|&index| match (&self.found.strong, self.first_strong) {
            (Some(current), Some((first, reach))) => {
                line_no <= first + reach && table.precedence(index) > table.precedence(current.rule)
            }
            _ => true,
        });
        // A line a background rule explains better than any weak rule (bitsandbytes' RuntimeError
        // about its own binary) is background only: its generic exception is no weak line.
        let (weak, background) = match (weak, background) {
            (Some(w), Some(b)) if table.rank(b) > table.rank(w) => (None, Some(b)),
            (Some(w), Some(_)) => (Some(w), None),
            other => other,
        };
        let background_first = background.filter(|_| self.found.background.is_none());
        let weak_first = weak.filter(|_| self.found.weak.is_none());
        // Wrappers (a reported death) are not evidence of a cause: the first line of each
        // signature that is not one (the first generic exception, the first `Killed`).
        let weak_new_signature = weak.filter(|&index| {
            let sig = table.rules[index].signature;
            !table.rules[index].wrapper
                && !self.found.weak_by_signature.iter().any(|(s, _)| *s == sig)
        });
        if strong.is_none()
            && weak_first.is_none()
            && weak_new_signature.is_none()
            && background_first.is_none()
            && new_hangs.is_empty()
        {
            return;
        }

        let mut lines = self.before(block, start);
        let excerpt = Excerpt {
            start: line_no - lines.len() as u64,
            lines: {
                lines.push(line::display(&block[start..end]));
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
            // A later line replacing the first one means the first was a wrapper: keep it as
            // evidence of what was unwrapped.
            if let Some(replaced) = self.found.strong.replace(h) {
                self.found.wrapped.get_or_insert(replaced);
            }
        }
        if let Some(index) = weak_first {
            self.found.weak = Some(hit(index));
        }
        if let Some(index) = background_first {
            self.found.background = Some(hit(index));
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
                last: line_no,
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
            let line_start = memchr::memrchr(b'\n', &block[..line_end]).map_or(0, |i| i + 1);
            lines.push(line::display(&block[line_start..line_end]));
            end = line_start;
        }
        let missing = BEFORE - lines.len();
        lines.extend(
            self.recent
                .iter()
                .rev()
                .take(missing)
                .map(|(shown, _)| shown.clone()),
        );
        lines.reverse();
        lines
    }

    /// Keeps the last lines of a finished block for the next block's excerpts and the tail.
    fn remember_tail(&mut self, block: &[u8]) {
        let mut tail = Vec::with_capacity(TAIL_TEXT_LINES);
        let mut end = block.len();
        while tail.len() < TAIL_TEXT_LINES && end > 0 {
            let line_end = end - 1;
            let line_start = memchr::memrchr(b'\n', &block[..line_end]).map_or(0, |i| i + 1);
            let raw = &block[line_start..line_end];
            tail.push((
                line::display(raw),
                line::visible(&raw[..raw.len().min(TAIL_TEXT)]),
            ));
            end = line_start;
        }
        for shown in tail.into_iter().rev() {
            if self.recent.len() == TAIL_TEXT_LINES {
                self.recent.pop_front();
            }
            self.recent.push_back(shown);
        }
    }

    fn finish(mut self) -> Scanned {
        let (mut lines, tail_text): (Vec<String>, Vec<String>) = self.recent.into_iter().unzip();
        lines.drain(..lines.len().saturating_sub(TAIL));
        self.found.tail = Excerpt {
            start: (self.line + 1).saturating_sub(lines.len() as u64),
            lines,
            after: 0,
        };
        Scanned {
            found: self.found,
            tail_text,
        }
    }
}

/// Offset of the first newline in `bytes` (its length when there is none).
fn newline(bytes: &[u8]) -> usize {
    memchr::memchr(b'\n', bytes).unwrap_or(bytes.len())
}

/// Whether every byte is printable ASCII, a tab or a newline. Each chunk is folded without an
/// early exit, which the compiler turns into wide vector compares (a plain `all` goes byte by
/// byte, and cost a tenth of a warning-heavy scan).
fn all_plain(bytes: &[u8]) -> bool {
    bytes.chunks(4096).all(|chunk| {
        let odd = chunk.iter().fold(0u8, |odd, &b| {
            odd | u8::from(!(b == b'\n' || b == b'\t' || (b' '..=b'~').contains(&b)))
        });
        odd == 0
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn first_fatal(table: &Table, log: &str) -> Option<(String, u64)> {
        let scanned = scan(table, log.as_bytes()).expect("scan");
        let hit = scanned.found.strong?;
        Some((table.rules[hit.rule].id.clone(), hit.line))
    }

    /// A small log scans on the calling thread with one cache, given back afterwards: the next
    /// log takes the same one (its lazy DFA already built), and no scan leaves a second behind.
    #[test]
    fn search_caches_live_from_one_log_to_the_next() {
        let table = Table::build(&[]).expect("builds");
        assert_eq!(table.scratch.kept(), 0);
        let oom = "INFO starting\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
        let nccl = "INFO warming up\nncclInternalError: Internal check failed.\n";
        let first = first_fatal(&table, oom);
        assert_eq!(table.scratch.kept(), 1);
        for _ in 0..3 {
            assert_eq!(first_fatal(&table, oom), first);
            assert_eq!(first_fatal(&table, nccl).map(|(_, line)| line), Some(2));
            assert_eq!(table.scratch.kept(), 1);
        }
        assert_eq!(first, Some(("cuda-oom".to_owned(), 2)));
    }

    /// Kept caches never change a verdict: lines met in many earlier logs, and many lines the
    /// caches never met, are judged as a fresh table judges them.
    #[test]
    fn kept_caches_judge_as_fresh_ones_do() {
        let warm = Table::build(&[]).expect("builds");
        let lines: Vec<String> = (0..400)
            .map(|i| {
                format!(
                    "ERROR worker {i}: step {} failed with code {}\n",
                    i * 7,
                    i % 13
                )
            })
            .collect();
        for line in &lines {
            let _ = first_fatal(&warm, line);
        }
        let cold = Table::build(&[]).expect("builds");
        let log = "ERROR worker 3: loading\nRuntimeError: CUDA error: an illegal memory access was encountered\n";
        assert_eq!(first_fatal(&warm, log), first_fatal(&cold, log));
        assert!(first_fatal(&warm, log).is_some());
    }
}
