//! One log line as the rules see it: colour, carriage-return redraws, process and rank prefixes,
//! timestamps and log levels stripped, the level kept aside.
//!
//! Cell logs interleave many writers: `(VllmWorker TP0 pid=265) ERROR 05-12 19:01:18 [x.py:470] `,
//! `[rank3]:[E822 16:31:16.13 ProcessGroupNCCL.cpp:632] `, `vllm-1  | `, syslog and GitHub Actions
//! timestamps. Rules match what the writer said, so anchors like `^Killed` mean the message itself.
//! Only lines that passed the trigger prefilter get here, so this favours clarity over speed.

use regex::{Regex, RegexSet};
use regex_automata::{Anchored, Input, meta};
use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

/// Longest prefix of a line that is examined; the rest of a longer line is ignored.
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// Longest line kept in an excerpt, in characters.
const MAX_DISPLAY: usize = 400;

/// The log level a writer gave a line, when its prefix says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Unknown,
    Error,
    Warning,
    Info,
    Debug,
}

impl Level {
    /// Warnings, info and debug lines: rules ignore them unless they say `any-level`.
    pub(crate) fn is_quiet(self) -> bool {
        match self {
            Level::Warning | Level::Info | Level::Debug => true,
            Level::Unknown | Level::Error => false,
        }
    }

    fn from_word(word: &str) -> Level {
        match word.to_ascii_uppercase().as_str() {
            "E" | "F" | "ERROR" | "ERR" | "CRITICAL" | "FATAL" => Level::Error,
            "W" | "WARN" | "WARNING" => Level::Warning,
            "I" | "V" | "N" | "INFO" | "VERBOSE" | "NOTICE" => Level::Info,
            "D" | "T" | "DEBUG" | "TRACE" => Level::Debug,
            _ => Level::Unknown,
        }
    }
}

/// A line ready for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cleaned {
    /// The message, prefixes stripped.
    pub(crate) text: String,
    /// The innermost level a prefix gave.
    pub(crate) level: Level,
}

// The prefixes of what delivered a log rather than wrote it (a CI's or container runtime's clock, a
// relay of a worker's output, a launcher's rank or host, a quote): the text after them is what the
// process printed, as it printed it. Commented where they stand in `PREFIX_PATTERNS`.
const TEAMCITY: &str = r"^\[\d\d:\d\d:\d\d\](?:[iWEF]?:| :)?\s*\[Step \d+/\d+\]\s*";
// The clock a syslog line and `ts` put first (`Jul 25 04:11:56`), spelled once for both: the
// month and day, then the time of day. Macros, as `concat!` takes only literals.
macro_rules! month_day {
    () => {
        r"[A-Z][a-z]{2} [ \d]\d "
    };
}
macro_rules! time_of_day {
    () => {
        r"\d\d:\d\d:\d\d"
    };
}
// The unit has its pid, but for the kernel's and the audit's lines: a line behind a bare clock
// (`Jul 25 04:11:56 Illegal instruction: 4`, see `TIME_OF_DAY`) has two words and a colon too.
const SYSLOG: &str = concat!(
    "^",
    month_day!(),
    time_of_day!(),
    r"\s+[\w.-]+\s+(?:[\w./@-]+\[\d+\]|kernel|audit):\s*"
);
const PROCESS: &str = r"^\((?:[^()]*\b(?:pid|ip)=[^()]*|raylet|gcs_server|autoscaler|dashboard(?:_agent)?|monitor)\)\s*";
const TORCHRUN: &str = r"^\[(?:rank|default)\d+\]:\s*";
const MPIRUN: &str = r"^\[\d+,\d+\]<std(?:out|err)>:\s*";
const ACTIONS_GROUP: &str = r"^##\[(?:group|endgroup)\]\s*";
const COMPOSE: &str = r"^\w[\w.-]*\s+\|\s?";
const CLOUD_LOGGING: &str = r"^\[resource\.labels\.[\w.]+: [^\]]*\]\s*";
const BUILDKIT: &str = r"^#\d+ \d+\.\d+(?: |$)";
const QUOTE: &str = r"^>(?:[ \t]|$)";
const SRUN: &str = r"^\d{1,4}:\s+";
const PDSH: &str =
    r"^(?:\d{1,3}(?:\.\d{1,3}){3}|(?:worker|node|host|gpu|compute)[-_]?\d+|ip(?:-\d{1,3}){4}):\s";
const CRI: &str = r"^std(?:out|err) [FP] ";
const KUBECTL: &str = r"^\[pod/[\w.-]+/[\w.-]+\]\s*";
const INDENT: &str = r"^\s+";
// A CI's time of day before each line: Jenkins' Timestamper (`09:26:31 `), and the `ts` a job
// pipes its output through (`Jul 25 04:11:56 `, PyTorch's CircleCI jobs). After `SYSLOG`, which
// has a host and a unit after the same clock.
const TIME_OF_DAY: &str = concat!("^(?:", month_day!(), ")?", time_of_day!(), r"(?:\.\d+)?\s+");
// A delivery's RFC 3339 clock (GitHub Actions, `kubectl logs --timestamps`, Jenkins' timestamper,
// a container runtime's file): the date and time joined by `T`, and a zone. A logger's own clock
// (`2024-01-01 12:00:00,123`, sglang's `[2025-03-09 00:57:15 TP0]`) is part of what it wrote.
const DELIVERY_CLOCK: &str =
    r"^\[?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\]?\s";

/// What a delivery puts before each line (see above), stripped to find the text a process printed.
const DELIVERY_PATTERNS: &[&str] = &[
    DELIVERY_CLOCK,
    TEAMCITY,
    SYSLOG,
    TIME_OF_DAY,
    PROCESS,
    TORCHRUN,
    MPIRUN,
    ACTIONS_GROUP,
    COMPOSE,
    CLOUD_LOGGING,
    BUILDKIT,
    QUOTE,
    SRUN,
    PDSH,
    CRI,
    KUBECTL,
    INDENT,
];

/// Prefixes stripped from the start of a line, tried in order until none applies. Capture group 1,
/// when present, is a log level.
const PREFIX_PATTERNS: &[&str] = &[
    // Ray's C++ logger: `[2024-07-25 10:46:00,050 E 24036 24036] logging.cc:440: `.
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+ ([EWIFD]) \d+ \d+\]\s*(?:[\w.-]+:\d+:\s*)?",
    // ISO timestamps, bare or bracketed with sglang's `TP0`/`DP1 TP3` suffixes, GitHub Actions'.
    // The suffixes only inside the brackets: a CI's clock before a glog line (`...Z I0322 18:38:41
    // x.py:895] `) leaves the glog prefix, and its level, to the next pattern.
    r"^\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?:(?:\s+[A-Z]{1,4}\d+)+\])?\]?:?\s*",
    // TeamCity's build log: the time of day and the build step (`[10:08:19] [Step 1/1] ` as the
    // web view shows it; a downloaded log marks every line, `[10:08:19] :\t [Step 1/1] ` for plain
    // output, `W:` for stderr, `i:` for TeamCity's own messages). The mark stays no level: TeamCity
    // marks a traceback on stderr `W:`.
    TEAMCITY,
    // `2023/10/26 12:12:06 ` (Go, glog-style collectors).
    r"^\d{4}/\d\d/\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\s+",
    // syslog/journald: `Oct 04 13:19:39 host unit[394]: `.
    SYSLOG,
    TIME_OF_DAY,
    // TensorRT-LLM: `[02/05/2026-06:58:48] `, `[TRT-LLM] [E] `, `[TensorRT-LLM][ERROR] `.
    r"^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\]\s*",
    r"^\[TRT-LLM\]\s*(?:\[RANK \d+\]\s*)?\[([EWIVD])\]\s*",
    // TensorRT's Python logger: `[TRT] [W] `.
    r"^\[TRT\]\s*\[([EWIVF])\]\s*",
    r"^\[TensorRT-LLM\]\[(ERROR|WARNING|INFO|DEBUG|VERBOSE|TRACE)\]\s*",
    r"^\[TensorRT-LLM\]\s*",
    // Ray and vLLM/sglang process prefixes: `(RayWorkerWrapper pid=4009, ip=10.0.0.1) `,
    // `(EngineCore_DP0 pid=150) `, `(VllmWorker rank=0 pid=265) `, `(raylet) `.
    PROCESS,
    // torchrun: `[rank3]:`, `[default0]:`; mpirun: `[1,0]<stderr>:`.
    TORCHRUN,
    MPIRUN,
    // vLLM: `ERROR 02-21 06:30:25 core.py:291] `, `INFO 05-28 14:44:28 [shm_broadcast.py:681] `.
    r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]*\]|[\w./-]+:\d+\])\s?",
    // glog / c10: `[E822 16:31:16.131931664 ProcessGroupNCCL.cpp:632] `, `W1209 02:28:15.28 12 x.cc:1] `.
    // absl's (current XLA, JAX, TensorFlow) puts epoch seconds where glog puts the time of day:
    // `W0000 00:00:1748720220.035048  27 x.cc:1] `.
    r"^\[?([EWIFD])\d{3,4}\s+\d\d:\d\d:\d+(?:\.\d+)?(?:\s+\d+)?\s+[\w./-]+:\d+\]\s*",
    r"^\[([EWIFD]) [\w.-]+:\d+\]\s*",
    // TensorFlow-style: `W tensorflow/stream_executor/dso_loader.cc:64] `.
    r"^([EWIF]) [\w./-]+:\d+\]\s*",
    // NCCL: `host:1234:5678 [0] NCCL INFO `, `host:1:2 [1] init.cc:204 NCCL WARN `. NCCL's WARN is
    // its error channel (`NCCL_DEBUG=WARN` prints failures only), so it is not a quiet level.
    r"^[\w.-]+:\d+:\d+ \[\d+\] (?:[\w./-]+:\d+ )?NCCL (?:(INFO|TRACE)|WARN|ERROR)\s*",
    r"^NCCL (?:(INFO)|WARN)\s+",
    // GitHub Actions annotations, dmesg.
    r"^##\[(error|warning|notice|debug)\]\s*",
    ACTIONS_GROUP,
    r"^\[\s*\d+\.\d+\]\s*",
    // Python logging formats: `name 3118895 ERROR    `, `name - ERROR - `, loguru `| ERROR | stderr | `.
    r"^[\w.]+\s+\d+\s+(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+",
    r"^(?:-\s+)?[\w.]+ - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - ",
    r"^-\s+(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+-\s+",
    // Hydra's default (NeMo, Lightning apps), after its timestamp: `[torch.distributed][INFO] - `.
    r"^\[[\w.]+\]\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] - ",
    r"^\|?\s*(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*\|\s*(?:[\w.:-]+\s*\|\s*)?",
    // pytest's short summary restates a test's exception after its id: `FAILED tests/x.py::test_y[bf16]
    // - TimeoutError: ...`, `ERROR tests/x.py - ModuleNotFoundError: ...`.
    r"^(?:FAILED|(ERROR)) [^\s\[]+(?:\[[^\]]*\])? - ",
    // `ERROR: `, `WARNING:root:`, `INFO:     ` (pip, logging.basicConfig, uvicorn).
    r"^(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b(?::[\w.]*:|:|\])?\s*",
    // pytest's failure lines: `E       AssertionError: ...`.
    r"^(E)\s{2,}",
    r"^(Warning):\s*",
    // docker compose: `vllm-1  | `.
    COMPOSE,
    // Google Cloud Logging's text export names the container after the entry's own severity and
    // time (`INFO 2025-11-19T20:16:36.09Z [resource.labels.containerName: vllm] `, GKE): the
    // severity is the collector's, the level the engine wrote follows.
    CLOUD_LOGGING,
    // Docker BuildKit's plain progress (`docker build --progress=plain`, what CI logs keep): the
    // step and the seconds since it began, `#10 1380.2 `. A gdb frame (`#1  0x7f.. in`) has no
    // decimal seconds.
    BUILDKIT,
    // rich console boxes: `│ ERROR 09-27 ... │`.
    r"^[│┃║]\s*",
    // A markdown quote, as issue threads paste logs (`> Traceback ...`); not Python's `>>>`.
    QUOTE,
    // srun --label: `0: `.
    SRUN,
    // pdsh, which DeepSpeed's multi-node launcher runs, names each line's host as the hostfile
    // does: an address (`10.0.87.143: `), a numbered node (`worker-1: `, `node2: `), an EC2 name
    // (`ip-10-0-87-143: `). A name of any other shape is left alone: `RuntimeError: ` has the same
    // shape as a host's name.
    PDSH,
    // What a container runtime writes to the node's log files (`/var/log/pods`, CRI): after the
    // timestamp, the stream and whether the line is full or partial, `stderr F `.
    CRI,
    // `kubectl logs --prefix`: `[pod/vllm-0/vllm] `.
    KUBECTL,
    INDENT,
];

/// The prefixes compiled: a set that says which apply (one pass), and each one for its length and
/// level. `None` only if a pattern failed to compile, which a unit test rules out.
struct Prefixes {
    set: RegexSet,
    each: Vec<Regex>,
}

static PREFIXES: LazyLock<Option<Prefixes>> = LazyLock::new(|| {
    Some(Prefixes {
        set: RegexSet::new(PREFIX_PATTERNS).ok()?,
        each: PREFIX_PATTERNS
            .iter()
            .map(|p| Regex::new(p))
            .collect::<Result<_, _>>()
            .ok()?,
    })
});

/// `DELIVERY_PATTERNS` compiled; `None` only if one failed to compile, which a unit test rules out.
static DELIVERY: LazyLock<Option<Vec<Regex>>> = LazyLock::new(|| {
    DELIVERY_PATTERNS
        .iter()
        .map(|p| Regex::new(p))
        .collect::<Result<_, _>>()
        .ok()
});

/// A visible line without what delivered it (see `DELIVERY_PATTERNS`): the text the process
/// printed, its own prefixes (a logger's level and clock) kept.
pub(crate) fn delivered(text: &str) -> &str {
    let Some(patterns) = DELIVERY.as_ref() else {
        return text;
    };
    let mut rest = text;
    for _ in 0..16 {
        let Some(end) = patterns
            .iter()
            .find_map(|re| re.find(rest).map(|m| m.end()).filter(|&end| end > 0))
        else {
            break;
        };
        rest = &rest[end..];
    }
    rest
}

/// Python's `warnings` module: `/path/x.py:209: UserWarning: ...`.
static PY_WARNING: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\S+:\d+: [A-Z]\w*Warning:|^[A-Z]\w*Warning: ").ok());

/// pytest's report of a test that did not fail: `SKIPPED [1] tests/x.py:12: <reason>` and
/// `XFAIL tests/x.py::test - <reason>` (the short summary), `tests/x.py::test[bf16] SKIPPED
/// (<reason>)`, `PASSED`, `XFAIL`, `XPASS` (verbose), and the verbose `FAILED` / `ERROR` of a
/// test, which names only the test (its id may hold any words: `test_x[CUDA out of memory]`;
/// the short summary restates the exception). A skip reason ("requires H100 GPUs", "No
/// valid grouped GEMM tactic for this problem size") is the refusal a test expected, not the
/// run's failure: the line is quiet, as an info line is. pytest writes these words in capitals
/// only; "passed" in a sentence is no status.
static PYTEST_STATUS: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^(?:SKIPPED|XFAIL|XPASS|PASSED)\b|^\S*\.py::\S*.*?\s(?:SKIPPED|XFAIL|XPASS|PASSED|FAILED|ERROR)\b|^(?:FAILED|ERROR) [^\s\[]+(?:\[[^\]]*\])?\s*$",
    )
    .ok()
});

/// Ray's deduplication suffix (`[repeated 2x across cluster]`), the right border of a rich
/// console box, and the backticks that close a Markdown code span or fence on the log's last line
/// as it was pasted into a report (`Illegal instruction\``).
static SUFFIX: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\s*(?:\[repeated \d+x across cluster\]|[│┃║]|`+)\s*$").ok());

/// SGR sequences whose escape byte got lost on the way (`[36m(RayWorkerWrapper ...`), or was
/// pasted in caret notation (`^[[1;36m`), or lost its bracket too at the start of a line
/// (`1;36m(VllmWorker ...`).
static ANSI_RESIDUE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?:\^\[)?\[\d{1,3}(?:;\d{1,3})*m").ok());
static LEADING_RESIDUE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^((?:\d{1,3};)*\d{1,3}m)[(\[]").ok());

/// Prefix chains that surely leave a line quiet, each the exact sequence of `PREFIX_PATTERNS`
/// entries that `clean` would strip first (with the level restricted to the quiet ones): vLLM's
/// `(Proc pid=..) INFO mm-dd hh:mm:ss [file:line] `, NCCL's `host:pid:tid [n] NCCL INFO `, c10d's
/// glog `[rankN]:[W1209 hh:mm:ss.us file:line] `. The unit tests hold each to `clean`'s verdict.
const SURELY_QUIET: &str = concat!(
    r"^(?:",
    r"(?:\((?:[^()]*\b(?:pid|ip)=[^()]*|raylet|gcs_server|autoscaler|dashboard(?:_agent)?|monitor)\)\s*)?",
    r"(?:DEBUG|INFO|WARNING)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]*\]|[\w./-]+:\d+\])\s?",
    r"|[A-Za-z_][\w.-]*:\d+:\d+ \[\d+\] (?:[\w./-]+:\d+ )?NCCL (?:INFO|TRACE)\s*",
    r"|(?:\[(?:rank|default)\d+\]:\s*)?\[?[WID]\d{3,4}\s+\d\d:\d\d:\d\d(?:\.\d+)?(?:\s+\d+)?\s+[\w./-]+:\d+\]\s*",
    r")"
);

/// `SURELY_QUIET` and the prefix patterns as one-thread searchers: the scan's workers search
/// them on many lines each, with caches of their own ([`QuietCache`]).
struct QuietProbe {
    quiet: meta::Regex,
    prefixes: meta::Regex,
}

static QUIET_PROBE: LazyLock<Option<QuietProbe>> = LazyLock::new(|| {
    // Byte-oriented like `regex::bytes`; the lines probed are printable ASCII.
    let syntax = regex_automata::util::syntax::Config::new().utf8(false);
    Some(QuietProbe {
        quiet: meta::Builder::new()
            .syntax(syntax)
            .build(SURELY_QUIET)
            .ok()?,
        prefixes: meta::Builder::new()
            .syntax(syntax)
            .build_many(PREFIX_PATTERNS)
            .ok()?,
    })
});

/// One thread's search caches for [`surely_quiet`].
pub(crate) struct QuietCache {
    quiet: Option<meta::Cache>,
    prefixes: Option<meta::Cache>,
}

impl QuietCache {
    pub(crate) fn new() -> QuietCache {
        let probe = QUIET_PROBE.as_ref();
        QuietCache {
            quiet: probe.map(|p| p.quiet.create_cache()),
            prefixes: probe.map(|p| p.prefixes.create_cache()),
        }
    }
}

impl fmt::Debug for QuietCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("QuietCache")
    }
}

/// Whether a raw line reads the same once decoded: printable ASCII and tabs only, no colour
/// escapes or their residue. For such a line the cleaned text is a piece of the raw line.
pub(crate) fn is_plain(raw: &[u8]) -> bool {
    raw.iter()
        .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b))
        && is_plain_ascii(raw)
}

/// `is_plain` for a line already known to hold printable ASCII and tabs only.
pub(crate) fn is_plain_ascii(raw: &[u8]) -> bool {
    if raw.len() > MAX_LINE {
        return false;
    }
    // SGR residue (`[36m`, `1;36m(` at the start) is removed by `clean`; such lines are not plain.
    let residue_at = |from: usize| {
        let digits = raw[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b';')
            .count();
        digits > 0 && raw.get(from + digits) == Some(&b'm')
    };
    let bracket_residue = memchr::memchr_iter(b'[', raw)
        .any(|i| raw.get(i + 1).is_some_and(u8::is_ascii_digit) && residue_at(i + 1));
    let leading_residue = raw.first().is_some_and(u8::is_ascii_digit) && residue_at(0);
    !(bracket_residue || leading_residue)
}

/// Where the message of a plain line starts when `clean` would surely give it a quiet level: its
/// prefix chain is one of `SURELY_QUIET`'s and nothing after it is another prefix (which could
/// carry another level). `clean` strips exactly that chain, so the cleaned text is a piece of the
/// line after the returned offset. `None` when not surely quiet.
pub(crate) fn quiet_prefix(raw: &[u8], cache: &mut QuietCache) -> Option<usize> {
    let (Some(probe), Some(quiet_cache), Some(prefix_cache)) = (
        QUIET_PROBE.as_ref(),
        cache.quiet.as_mut(),
        cache.prefixes.as_mut(),
    ) else {
        return None;
    };
    let anchored = |hay| Input::new(hay).anchored(Anchored::Yes);
    let end = probe.quiet.search_with(quiet_cache, &anchored(raw))?.end();
    let rest = &raw[end..];
    let another = std::str::from_utf8(rest).is_err()
        || probe
            .prefixes
            .search_half_with(prefix_cache, &anchored(rest).earliest(true))
            .is_some();
    (!another).then_some(end)
}

/// Whether `clean` would surely give this plain line a quiet level ([`quiet_prefix`]).
#[cfg(test)]
pub(crate) fn surely_quiet(raw: &[u8], cache: &mut QuietCache) -> bool {
    quiet_prefix(raw, cache).is_some()
}

/// A structured log record on one line, as `tracing`'s JSON output writes it (TGI's
/// `--json-output`: `{"timestamp":...,"level":"INFO","fields":{"message":"..."},...}`): its
/// message and its level, the escapes undone.
fn json_record(text: &str) -> Option<(String, Level)> {
    let trimmed = text.trim();
    if !(trimmed.starts_with('{') && trimmed.ends_with('}') && trimmed.contains("\"level\"")) {
        return None;
    }
    let record: serde_json::Value = serde_json::from_str(trimmed).ok()?;
    let level = Level::from_word(record.get("level")?.as_str()?);
    let message = record
        .get("message")
        .or_else(|| record.get("fields")?.get("message"))?
        .as_str()?;
    Some((message.to_owned(), level))
}

/// A line pasted as Markdown inline code (`` `TimeoutError: ... for 300 seconds` ``, or its first
/// line only, where the span goes on to the next): the span's text. A backtick that closes inside
/// the line quotes a name (xFormers' `` `cutlassF` is not supported because: ``) and stays. A
/// paste often keeps spaces after the closing backtick; they do not hide it.
fn inline_code(text: &str) -> Option<&str> {
    let inner = text.strip_prefix('`')?.trim_end();
    let inner = inner.strip_suffix('`').unwrap_or(inner);
    (!inner.starts_with('`') && !inner.contains('`')).then_some(inner)
}

/// A tqdm progress bar that the next write ran into: tqdm redraws its bar with a carriage return
/// and no newline, so a message printed while it runs (or a paste that lost the `\r`) starts on
/// the bar's line, after its `[elapsed<remaining, rate]` (`Capturing CUDA graph shapes:   0%|
/// | 0/35 [00:00<?, ?it/s]ERROR 05-12 ...`, `  0%|    | 0/4 [00:00<?, ?it/s]C:\...\attn.py:17:26:
/// error: ...`), after several redraws of it too, and after vLLM's own format (`Loading
/// safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.20s/it]`). The bar is
/// what delivered the message, not part of it.
static GLUED_BAR: LazyLock<Option<Regex>> = LazyLock::new(|| {
    const BAR: &str = r"(?:[^|]{0,120}?:\s*)?\s*\d{1,3}%(?:\|[^|]{0,400}\|| Completed \|)\s*[^\s\[|]{1,24} \[[\d:?]+<[\d:?]+,\s*[^,\]\[]{1,24}\]";
    Regex::new(&format!(r"^(?:{BAR}\s*)*{BAR}")).ok()
});

/// `text` without a progress bar it starts with, when a message follows the bar with no space
/// between them (see [`GLUED_BAR`]); whether one was stripped. A bar alone is left, and so is one
/// with a postfix (`[00:05<00:01, 3.9it/s, loss=nan]`): what its postfix says is the bar's own
/// news.
fn without_glued_bar(text: &mut String) -> bool {
    // Every bar holds a percentage and its `[elapsed<remaining`: most lines hold neither.
    if !text.contains('%') || !text.contains('<') {
        return false;
    }
    let Some(end) = GLUED_BAR
        .as_ref()
        .and_then(|re| re.find(text))
        .map(|m| m.end())
    else {
        return false;
    };
    let glued = text[end..].starts_with(|c: char| !c.is_whitespace());
    if glued {
        text.drain(..end);
    }
    glued
}

/// Prepares a raw line (without its newline) for the rules.
pub(crate) fn clean(raw: &[u8]) -> Cleaned {
    let mut text = visible(raw);
    without_glued_bar(&mut text);
    if let Some(inner) = inline_code(&text) {
        text = inner.to_owned();
    }
    let mut level = Level::Unknown;
    if let Some((message, record_level)) = json_record(&text) {
        text = message;
        level = record_level;
    }
    strip_prefixes(&mut text, &mut level);
    // A bar behind a delivery prefix (`vllm-1  | Capturing CUDA graph shapes: ...]ERROR ...`).
    if without_glued_bar(&mut text) {
        strip_prefixes(&mut text, &mut level);
    }
    // A code span behind a delivery prefix: a report quoting a log line in backticks, then quoted
    // with `> ` or relayed by a wrapper of its own.
    if let Some(inner) = inline_code(&text) {
        text = inner.to_owned();
        strip_prefixes(&mut text, &mut level);
    }
    if level == Level::Unknown && PY_WARNING.as_ref().is_some_and(|re| re.is_match(&text)) {
        level = Level::Warning;
    }
    if level == Level::Unknown && PYTEST_STATUS.as_ref().is_some_and(|re| re.is_match(&text)) {
        level = Level::Info;
    }
    if let Some(re) = SUFFIX.as_ref() {
        if let Some(m) = re.find(&text) {
            text.truncate(m.start());
        }
    }
    let trimmed = text.trim_end().len();
    text.truncate(trimmed);
    Cleaned { text, level }
}

/// Strips the prefixes of `PREFIX_PATTERNS` from the start of `text`, one at a time, keeping in
/// `level` the innermost level a prefix gave.
fn strip_prefixes(text: &mut String, level: &mut Level) {
    let Some(prefixes) = PREFIXES.as_ref() else {
        return;
    };
    for _ in 0..16 {
        // The first pattern in list order that applies (the set says which, in one pass).
        let Some(index) = prefixes.set.matches(text).iter().next() else {
            break;
        };
        let re = &prefixes.each[index];
        let end = if re.captures_len() > 1 {
            let Some(caps) = re.captures(text) else {
                break;
            };
            if let Some(word) = caps.get(1) {
                let found = Level::from_word(word.as_str());
                if found != Level::Unknown {
                    *level = found;
                }
            }
            caps.get(0).map_or(0, |m| m.end())
        } else {
            re.find(text).map_or(0, |m| m.end())
        };
        if end == 0 {
            break;
        }
        text.drain(..end);
    }
}

/// Whether a cleaned line is source code quoted by a traceback (`File "..."`, `raise X(...)`,
/// `^^^^` markers) or by pytest (a `pytest.raises(...)` context names the error the test
/// expects): the exception line below it is the one that counts. A traceback pasted with its
/// newlines lost runs its frames, its code and its exception line into one line that starts
/// like a frame or a `raise` (`File "...", line 1906, in broadcast ... DistBackendError: NCCL
/// error in: ...`): that line holds the exception too, and is read as text. An exception name
/// inside the code's own string literal (`raise RuntimeError(f"RuntimeError: {e}") from e`, a
/// wrapper re-raising what it caught) is still code: the pasted exception line stands outside
/// any quotes, after a space or a module path.
pub(crate) fn is_code(text: &str) -> bool {
    ((text.starts_with("File \"") || text.starts_with("raise ")) && !holds_exception_line(text))
        || is_notebook_code(text)
        || text.contains("pytest.raises(")
        || text.starts_with("assert ")
        || text.chars().all(|c| matches!(c, '^' | '~' | ' '))
}

/// Whether a line is source code an IPython or Jupyter traceback quotes: the failing line behind
/// an arrow and its line number (`--> 170     return self.do_bench(...)`, older IPython's
/// `---->`), and the lines around it behind their numbers alone (`    171 except (OutOfResources,
/// PTXASError) as e:`), a multi-line raise's message strings among them. Those name the errors a
/// handler catches or a raise site, not what happened. A context line is taken for code only where
/// a statement keyword, a comment, a string or a closing bracket follows its number: a log's own
/// line may start with a count.
fn is_notebook_code(text: &str) -> bool {
    static NOTEBOOK_CODE: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(
            r#"^(?:-+>\s*\d+\s|\d+\s+(?:#|[rbfuRBFU]{0,2}["']|[)\]}]|@|(?:except|raise|assert|try|if|elif|else|finally|with|return|yield|await|async|def|class|import|from|for|while|del|pass|lambda)\b))"#,
        )
        .ok()
    });
    NOTEBOOK_CODE
        .as_ref()
        .is_some_and(|re| re.is_match(text.trim_start()) && !holds_exception_line(text))
}

/// Whether a line that starts like quoted code goes on past it into an exception line (`...
/// DistBackendError: NCCL error`): an exception name after a space or a `.`, outside any
/// string literal.
fn holds_exception_line(text: &str) -> bool {
    static EXCEPTION: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"\b[A-Z]\w*(?:Error|Exception): ").ok());
    let outside_quotes = |start: usize| {
        let before = &text[..start];
        before.ends_with([' ', '.']) && !in_string_literal(before)
    };
    EXCEPTION
        .as_ref()
        .is_some_and(|re| re.find_iter(text).any(|m| outside_quotes(m.start())))
}

/// Whether Python code cut off here is inside a string literal: a quote opens one that only the
/// same quote closes (`"can't"` is closed), and a backslash escapes the next character.
fn in_string_literal(code: &str) -> bool {
    let mut open: Option<char> = None;
    let mut chars = code.chars();
    while let Some(c) = chars.next() {
        match (open, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => open = None,
            (None, '"' | '\'') => open = Some(c),
            _ => {}
        }
    }
    open.is_some()
}

/// A raw line as an excerpt shows it: valid UTF-8, no colour or control characters, capped.
pub(crate) fn display(raw: &[u8]) -> String {
    let raw = &raw[..raw.len().min(MAX_LINE)];
    let mut text = visible(raw);
    text.truncate(text.trim_end().len());
    if let Some((cut, _)) = text.char_indices().nth(MAX_DISPLAY) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// `text` without its ANSI escape sequences: CSI (`ESC [` parameters, then a final byte in
/// `@`..`~`), the string sequences OSC, APC, DCS, PM and SOS (`ESC ]`, `ESC _`, `ESC P`, `ESC ^`,
/// `ESC X`, each up to BEL or `ESC \`: a terminal hyperlink, Buildkite's per-line timestamp
/// `ESC _bk;t=1711111111111 BEL`), and any other escape with the character after it. Every other
/// character is left for the caller to judge (the classifier turns controls into spaces; a report
/// shows them). The one ANSI stripper of the harness.
pub(crate) fn strip_ansi(text: &str) -> Cow<'_, str> {
    if !text.contains('\u{1b}') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            Some(']' | '_' | 'P' | '^' | 'X') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' {
                        break;
                    }
                    if c == '\u{1b}' {
                        chars.next_if_eq(&'\\');
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Cow::Owned(out)
}

/// Lossy UTF-8 without the line ending, the last carriage-return redraw only (progress bars),
/// ANSI escapes and their residue removed, other control characters turned into spaces.
pub(crate) fn visible(raw: &[u8]) -> String {
    let decoded = String::from_utf8_lossy(raw);
    let mut line = decoded.trim_end_matches(['\n', '\r']);
    if let Some(last) = line.rsplit('\r').find(|segment| !segment.trim().is_empty()) {
        line = last;
    }
    let stripped = strip_ansi(line);
    let mut out = String::with_capacity(stripped.len());
    // Chinese, Japanese and Korean prose puts no space around the English it quotes
    // (`执行vllm就出现Illegal instruction`): a letter of those scripts is a word character, so no
    // word boundary separates it from the message. A space where the scripts meet gives the rules
    // their boundary back. An ASCII line has no such letter to look for.
    let spaced = !stripped.is_ascii();
    let mut previous = ' ';
    for c in stripped.chars() {
        if spaced
            && is_cjk(previous) != is_cjk(c)
            && (previous.is_ascii_alphanumeric() || c.is_ascii_alphanumeric())
        {
            out.push(' ');
        }
        previous = c;
        match c {
            '\t' => out.push('\t'),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    if out.contains('[') {
        if let Some(re) = ANSI_RESIDUE.as_ref() {
            if let Cow::Owned(replaced) = re.replace_all(&out, "") {
                out = replaced;
            }
        }
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        let residue = LEADING_RESIDUE
            .as_ref()
            .and_then(|re| re.captures(&out))
            .and_then(|caps| caps.get(1))
            .map_or(0, |m| m.end());
        out.drain(..residue);
    }
    out
}

/// A letter of a script written without spaces between words: Han, kana, Hangul.
fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{3040}'..='\u{30FF}'
            | '\u{3400}'..='\u{4DBF}'
            | '\u{4E00}'..='\u{9FFF}'
            | '\u{AC00}'..='\u{D7AF}'
            | '\u{F900}'..='\u{FAFF}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(raw: &str) -> String {
        clean(raw.as_bytes()).text
    }

    #[test]
    fn every_prefix_pattern_compiles() {
        let prefixes = PREFIXES.as_ref().expect("prefix patterns compile");
        assert_eq!(prefixes.each.len(), PREFIX_PATTERNS.len());
        assert!(
            DELIVERY.is_some()
                && PY_WARNING.is_some()
                && SUFFIX.is_some()
                && ANSI_RESIDUE.is_some()
                && LEADING_RESIDUE.is_some()
                && GLUED_BAR.is_some()
        );
    }

    #[test]
    fn strips_a_progress_bar_a_message_ran_into() {
        let cases = [
            (
                "Capturing CUDA graph shapes:   0%|          | 0/35 [00:00<?, ?it/s]ERROR 05-12 19:01:18 [model_runner.py:1] RuntimeError: boom",
                "RuntimeError: boom",
                Level::Error,
            ),
            (
                "  0%|                    | 0/4 [00:00<?, ?it/s]C:\\sage\\attn.py:17:26: error: 'tt.load' op operation destroyed",
                "C:\\sage\\attn.py:17:26: error: 'tt.load' op operation destroyed",
                Level::Unknown,
            ),
            (
                "Iteration:  31%|███▏      | 491/1559 [04:35<07:28,  2.38it/s]WARNING 05-12 19:01:18 [x.py:1] slow",
                "slow",
                Level::Warning,
            ),
            (
                "  0%|  | 0/35 [00:00<?, ?it/s] 10%|█  | 1/10 [00:01<00:09,  1.00it/s]ValueError: x",
                "ValueError: x",
                Level::Unknown,
            ),
            (
                "vllm-1  | Capturing CUDA graph shapes:   0%|   | 0/35 [00:00<?, ?it/s]ERROR 05-12 19:01:18 [x.py:1] boom",
                "boom",
                Level::Error,
            ),
            (
                "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.20s/it]ValueError: x",
                "ValueError: x",
                Level::Unknown,
            ),
        ];
        for (raw, message, level) in cases {
            let cleaned = clean(raw.as_bytes());
            assert_eq!(
                (cleaned.text.as_str(), cleaned.level),
                (message, level),
                "{raw}"
            );
        }
        // A bar alone, or its postfix, stays what the bar says.
        for raw in [
            " 45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, loss=nan]",
            "Training steps:  10%|██▌   | 2/20 [04:11<36:54, 123.04s/it, loss=nan, lr=4e-7]12/24/2024 16:51:49 - DEBUG - logged",
            "Epoch 3: 100%|██████████| 20/20 [00:05<00:00, 3.9it/s] loss: nan",
        ] {
            assert_eq!(text(raw), raw.trim(), "{raw}");
        }
    }

    #[test]
    fn strips_process_rank_and_level_prefixes() {
        let cases = [
            (
                "(VllmWorker rank=0 pid=265) ERROR 05-12 19:01:18 [multiproc_executor.py:470] RuntimeError: boom",
                "RuntimeError: boom",
                Level::Error,
            ),
            (
                "[rank0]:[E822 16:31:16.131931664 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught",
                "[Rank 0] Watchdog caught",
                Level::Error,
            ),
            (
                "[10:08:19] [Step 1/1] /paddle/paddle/fluid/operators/nccl_op_test.cu.cc:237: Failure",
                "/paddle/paddle/fluid/operators/nccl_op_test.cu.cc:237: Failure",
                Level::Unknown,
            ),
            (
                "[15:22:45]W:\t [Step 1/2] RuntimeError: x",
                "RuntimeError: x",
                Level::Unknown,
            ),
            (
                "[12:36:23] :\t [Step 1/1] RuntimeError: CUDA error: an illegal memory access was encountered",
                "RuntimeError: CUDA error: an illegal memory access was encountered",
                Level::Unknown,
            ),
            (
                "INFO 2025-11-19T20:16:36.096638074Z [resource.labels.containerName: vllm] (EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] torch.OutOfMemoryError: CUDA out of memory.",
                "torch.OutOfMemoryError: CUDA out of memory.",
                Level::Error,
            ),
            (
                "#10 1380.2 /deps/flashinfer/vec_dtypes.cuh(56): error: more than one instance",
                "/deps/flashinfer/vec_dtypes.cuh(56): error: more than one instance",
                Level::Unknown,
            ),
            (
                "#1  0x000071f4d42ab393 in __pthread_kill_internal (signo=11)",
                "#1  0x000071f4d42ab393 in __pthread_kill_internal (signo=11)",
                Level::Unknown,
            ),
            (
                "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: x",
                "ValueError: x",
                Level::Error,
            ),
            (
                "09:26:31 SKIPPED [1] distributed/shuffle/tests/test_shuffle.py:134: could not import 'dask_cudf'",
                "SKIPPED [1] distributed/shuffle/tests/test_shuffle.py:134: could not import 'dask_cudf'",
                Level::Info,
            ),
            (
                "Jul 25 04:11:56 C++ exception with description \"CUDA error: x\"",
                "C++ exception with description \"CUDA error: x\"",
                Level::Unknown,
            ),
            ("Jul  5 04:11:56 ERROR: x", "x", Level::Error),
            (
                "Jul 25 04:11:56 Illegal instruction: 4",
                "Illegal instruction: 4",
                Level::Unknown,
            ),
            (
                "Feb 24 11:16:32 adl systemd[1]: ollama.service: Failed with result 'oom-kill'.",
                "ollama.service: Failed with result 'oom-kill'.",
                Level::Unknown,
            ),
            (
                "\u{1b}[36m(RayWorkerWrapper pid=4009, ip=10.0.0.2)\u{1b}[0m [rank1]:[W ProcessGroupNCCL.cpp:563] careful",
                "careful",
                Level::Warning,
            ),
            (
                "[36m(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:563] bad",
                "bad",
                Level::Error,
            ),
            (
                "Oct 04 15:02:41 llm sd-webui-forge-start[394]: RuntimeError: CUDA error",
                "RuntimeError: CUDA error",
                Level::Unknown,
            ),
            (
                "2026-02-13T15:56:24.8388014Z AssertionError: Tensor-likes are not close!",
                "AssertionError: Tensor-likes are not close!",
                Level::Unknown,
            ),
            (
                "2025-03-01T12:00:02.0000062Z I0322 18:38:41.512128 140431339419456 xla_bridge.py:895] Unable to initialize backend 'rocm'",
                "Unable to initialize backend 'rocm'",
                Level::Info,
            ),
            (
                "[2025-03-09 00:57:15 DP0 TP4] Watchdog timeout (self.watchdog_timeout=300)",
                "Watchdog timeout (self.watchdog_timeout=300)",
                Level::Unknown,
            ),
            (
                "[02/05/2026-06:58:48] [TRT-LLM] [E] Encountered an error",
                "Encountered an error",
                Level::Error,
            ),
            (
                "[2024-07-25 10:46:00,050 E 24036 24036] logging.cc:440: *** SIGSEGV received",
                "*** SIGSEGV received",
                Level::Error,
            ),
            (
                "2024-04-27 10:13:05 | ERROR | stderr | Traceback (most recent call last):",
                "Traceback (most recent call last):",
                Level::Error,
            ),
            (
                "gpu-node-3:1234:5678 [0] NCCL INFO NET/Plugin: Plugin load returned 2",
                "NET/Plugin: Plugin load returned 2",
                Level::Info,
            ),
            (
                "E       AssertionError: Tensor-likes are not close!",
                "AssertionError: Tensor-likes are not close!",
                Level::Error,
            ),
            (
                "(SGLangEngine pid=23902) subprocess.CalledProcessError: x [repeated 2x across cluster]",
                "subprocess.CalledProcessError: x",
                Level::Unknown,
            ),
            ("WARNING:root:careful", "careful", Level::Warning),
            (
                "Illegal instruction`",
                "Illegal instruction",
                Level::Unknown,
            ),
            (
                "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB```",
                "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
                Level::Unknown,
            ),
            (
                "^[[1;36m(VllmWorker rank=0 pid=13543)^[[0;0m ERROR 08-12 08:45:18 [x.py:1] boom",
                "boom",
                Level::Error,
            ),
            (
                "1;36m(VllmWorker rank=5 pid=33503) ERROR 03-06 06:49:30 [multiproc_executor.py:375] boom",
                "boom",
                Level::Error,
            ),
            (
                "│ ERROR 09-27 06:46:46 engine.py:157]     RuntimeError: boom      │",
                "RuntimeError: boom",
                Level::Error,
            ),
            (
                "2025-03-21 17:08:31,569 - finetrainers - ERROR - Error during training",
                "Error during training",
                Level::Error,
            ),
            (
                "2023/10/26 12:12:06 E0628 19:13:22.730840  3624 net_dag.cc:195] bad",
                "bad",
                Level::Error,
            ),
            (
                "E0303 11:40:42.533000 713 site-packages/torch/_inductor/runtime/triton_heuristics.py:533] subprocess.CalledProcessError: x",
                "subprocess.CalledProcessError: x",
                Level::Error,
            ),
            (
                "      ModuleNotFoundError: No module named 'x'",
                "ModuleNotFoundError: No module named 'x'",
                Level::Unknown,
            ),
            (
                "0: [rank0]: RuntimeError: y",
                "RuntimeError: y",
                Level::Unknown,
            ),
            (
                "10.0.87.143: 10.0.87.143: RuntimeError: y",
                "RuntimeError: y",
                Level::Unknown,
            ),
            (
                "worker-1: [rank9]: torch.OutOfMemoryError: y",
                "torch.OutOfMemoryError: y",
                Level::Unknown,
            ),
            ("RuntimeError: y", "RuntimeError: y", Level::Unknown),
            (
                "> `RuntimeError: CUDA error: an illegal memory access was encountered`",
                "RuntimeError: CUDA error: an illegal memory access was encountered",
                Level::Unknown,
            ),
            (
                "vllm-1  | `ERROR 02-21 06:30:25 [core.py:291] ValueError: x`",
                "ValueError: x",
                Level::Error,
            ),
            (
                "2025-03-01T12:00:00.123456789Z stderr F ERROR 03-01 12:00:00 [core.py:1] boom",
                "boom",
                Level::Error,
            ),
            (
                "[pod/vllm-0/vllm] (EngineCore_DP0 pid=270) ValueError: x",
                "ValueError: x",
                Level::Unknown,
            ),
            (
                "\u{1b}_bk;t=1711111111111\u{7}ERROR: No matching distribution found for vllm==9",
                "No matching distribution found for vllm==9",
                Level::Error,
            ),
        ];
        for (raw, want, level) in cases {
            let got = clean(raw.as_bytes());
            assert_eq!(got.text, want, "{raw}");
            assert_eq!(got.level, level, "{raw}");
        }
    }

    #[test]
    fn delivered_strips_what_carried_a_line_and_keeps_what_wrote_it() {
        let cases = [
            ("vllm-1  | Wait, I'll output it.", "Wait, I'll output it."),
            (
                "2025-03-01T12:00:00.1234567Z worker-1: [rank3]: Wait",
                "Wait",
            ),
            ("> (RayWorkerWrapper pid=1, ip=10.0.0.1) Wait", "Wait"),
            (
                "2024-01-01 12:00:00,123 - vllm - INFO - Wait",
                "2024-01-01 12:00:00,123 - vllm - INFO - Wait",
            ),
            (
                "[2025-03-09 00:57:15 TP0] Decode batch",
                "[2025-03-09 00:57:15 TP0] Decode batch",
            ),
            ("RuntimeError: y", "RuntimeError: y"),
        ];
        for (line, want) in cases {
            assert_eq!(delivered(line), want, "{line}");
        }
    }

    /// The fast quiet verdict never disagrees with `clean`: every line it calls quiet, `clean`
    /// calls quiet too (the prefilter may drop only what the rules would drop).
    #[test]
    fn surely_quiet_agrees_with_clean() {
        let quiet = [
            "(VllmWorker TP3 pid=12345) WARNING 05-28 14:44:28 [custom_all_reduce.py:136] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs.",
            "INFO 05-28 14:44:30 [metrics.py:88] request errors: 0, retries: 0, timeouts: 0",
            "DEBUG 05-28 14:44:28 scheduler.py:12] scheduled 32 sequences",
            "gpu-node-3:12345:5679 [3] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file",
            "gpu-node-3:1:2 [1] init.cc:204 NCCL INFO comm 0x1 rank 1 nranks 8 - Init COMPLETE",
            "[rank3]:[W528 14:44:28.281862353 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 3] using GPU 3 to perform barrier",
            "W1209 02:28:15.28 12 x.cc:1] careful",
        ];
        let not_surely = [
            "(VllmWorker TP0 pid=265) ERROR 05-12 19:01:18 [multiproc_executor.py:470] RuntimeError: boom",
            "INFO 05-28 14:44:30 [x.py:1] ERROR: boom",
            "INFO 05-28 14:44:30 [x.py:1] [rank0]:[E822 16:31:16.13 ProcessGroupNCCL.cpp:632] boom",
            "gpu-node-3:1:2 [1] init.cc:204 NCCL WARN Cuda failure 'out of memory'",
            "[rank3]:[E528 14:44:28.281862353 ProcessGroupNCCL.cpp:4561] boom",
            "1234-56-78T12:34:56 [3] NCCL INFO x",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ];
        let mut cache = QuietCache::new();
        for line in quiet {
            assert!(is_plain(line.as_bytes()), "{line}");
            let end = quiet_prefix(line.as_bytes(), &mut cache).expect(line);
            let cleaned = clean(line.as_bytes());
            assert!(cleaned.level.is_quiet(), "{line}");
            assert!(line[end..].contains(&cleaned.text), "{line}");
        }
        for line in not_surely {
            assert!(!surely_quiet(line.as_bytes(), &mut cache), "{line}");
        }
        // And on every line of the real corpora: quiet by the fast verdict means quiet by `clean`.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
        let mut checked = 0;
        for dir in [root.clone(), root.join("real"), root.join("gpu")] {
            for entry in std::fs::read_dir(&dir).expect("corpus folder") {
                let path = entry.expect("entry").path();
                if path.extension().is_none_or(|e| e != "log") {
                    continue;
                }
                let bytes = std::fs::read(&path).expect("log");
                for raw in bytes.split(|&b| b == b'\n') {
                    if !is_plain(raw) {
                        continue;
                    }
                    if let Some(end) = quiet_prefix(raw, &mut cache) {
                        checked += 1;
                        let cleaned = clean(raw);
                        let shown = String::from_utf8_lossy(raw);
                        assert!(cleaned.level.is_quiet(), "{}: {shown}", path.display());
                        // The message is what follows the prefix: the scan searches only there.
                        let rest = std::str::from_utf8(&raw[end..]).expect("plain");
                        assert!(
                            rest.contains(&cleaned.text),
                            "{}: {shown}: {:?} not in {rest:?}",
                            path.display(),
                            cleaned.text
                        );
                    }
                }
            }
        }
        assert!(checked > 20, "{checked} corpus lines checked");
    }

    #[test]
    fn plain_lines_have_no_escapes_or_residue() {
        assert!(is_plain(b"INFO 05-28 [x.py:1] ok [3] done"));
        assert!(!is_plain(b"\x1b[31mred"));
        assert!(!is_plain(b"[36m(RayWorkerWrapper pid=1) x"));
        assert!(!is_plain(b"1;36m(VllmWorker rank=5 pid=1) x"));
        assert!(!is_plain(b"a\rb"));
        assert!(!is_plain("caf\u{e9}".as_bytes()));
    }

    #[test]
    fn absl_lines_carry_their_level() {
        let got = clean(b"W0000 00:00:1748720220.035048   27 cuda_dnn.cc:8310] Unable to register cuDNN factory");
        assert_eq!(got.level, Level::Warning);
        assert_eq!(got.text, "Unable to register cuDNN factory");
        let got = clean(b"E0000 00:00:1743713172.513857  698835 pjrt_stream_executor_client.cc:3072] Execution of replica 0 failed");
        assert_eq!(got.level, Level::Error);
    }

    #[test]
    fn python_warnings_are_quiet() {
        let got = clean(b"/x/torch/cuda/__init__.py:209: UserWarning: sm_120 is not compatible");
        assert_eq!(got.level, Level::Warning);
    }

    #[test]
    fn pytest_summary_lines_give_the_exception_its_line() {
        let got = clean(b"FAILED tests/gpu/test_engine.py::test_gen[tp2_pp1] - TimeoutError: Server at localhost:49687 did not come online within 200 seconds");
        assert_eq!(
            got.text,
            "TimeoutError: Server at localhost:49687 did not come online within 200 seconds"
        );
        let got = clean(b"FAILED tests/test_errors.py::test_classify[CUDA out of memory] - AssertionError: assert 'oom' == 'unknown'");
        assert_eq!(got.text, "AssertionError: assert 'oom' == 'unknown'");
        let verbose =
            clean(b"tests/test_errors.py::test_classify[CUDA out of memory] FAILED [ 50%]");
        assert_eq!(verbose.level, Level::Info);
        let bare = clean(b"FAILED tests/test_errors.py::test_classify[CUDA out of memory]");
        assert_eq!(bare.level, Level::Info);
        let got =
            clean(b"ERROR tests/test_moe.py - ModuleNotFoundError: No module named 'flashinfer'");
        assert_eq!(
            (got.text.as_str(), got.level),
            (
                "ModuleNotFoundError: No module named 'flashinfer'",
                Level::Error
            )
        );
    }

    #[test]
    fn json_records_give_their_message_and_level() {
        let got = clean(br#"{"timestamp":"2023-06-02T14:12:35.001957Z","level":"INFO","fields":{"message":"GPU does not support FP8, using Marlin FP8 kernel"},"target":"text_generation_launcher"}"#);
        assert_eq!(
            (got.text.as_str(), got.level),
            (
                "GPU does not support FP8, using Marlin FP8 kernel",
                Level::Info
            )
        );
        let got = clean(br#"{"timestamp":"2025-08-29T14:40:17Z","level":"ERROR","message":"RuntimeError: CUDA error: an illegal memory access was encountered","target":"text_generation_router"}"#);
        assert_eq!(
            (got.text.as_str(), got.level),
            (
                "RuntimeError: CUDA error: an illegal memory access was encountered",
                Level::Error
            )
        );
        // A printed dict or a JSON answer is no log record.
        let answer = r#"{"choices": [{"message": {"content": "Paris"}}]}"#;
        assert_eq!(text(answer), answer);
    }

    #[test]
    fn markdown_quotes_are_stripped_but_not_python_prompts() {
        assert_eq!(
            text("> Traceback for thread 155620 (ray::RayWorkerW) [] (most recent call last):"),
            "Traceback for thread 155620 (ray::RayWorkerW) [] (most recent call last):"
        );
        assert_eq!(text(">>> import torch"), ">>> import torch");
    }

    #[test]
    fn a_line_pasted_as_inline_code_is_read_as_its_span() {
        assert_eq!(
            text("`TimeoutError: Failed to get register_center_actor for 300 seconds`"),
            "TimeoutError: Failed to get register_center_actor for 300 seconds"
        );
        // Spaces after the closing backtick, and a span that goes on to the next line.
        assert_eq!(
            text("`ValueError: Your setup doesn't support bf16/gpu.`  "),
            "ValueError: Your setup doesn't support bf16/gpu."
        );
        assert_eq!(text("`RuntimeError: boom"), "RuntimeError: boom");
        // A backtick that closes inside the line quotes a name; a fence is no span.
        assert_eq!(
            text("`cutlassF` is not supported because:"),
            "`cutlassF` is not supported because:"
        );
        assert_eq!(
            text(
                "`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`."
            ),
            "`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`."
        );
        assert_eq!(text("```python"), "```python");
    }

    #[test]
    fn cjk_prose_is_spaced_from_the_english_it_quotes() {
        assert_eq!(
            text("执行vllm就出现Illegal instruction (core dumped),原因"),
            "执行 vllm 就出现 Illegal instruction (core dumped),原因"
        );
        assert_eq!(text("答：北京是中国的首都。"), "答：北京是中国的首都。");
        assert_eq!(text("RuntimeError: 显存不足"), "RuntimeError: 显存不足");
    }

    #[test]
    fn pytest_statuses_of_tests_that_did_not_fail_are_quiet() {
        for line in [
            "SKIPPED [1] tests/gpu/test_fp8.py:12: h100 test (requires H100 GPUs)",
            "09:26:31 SKIPPED [1] distributed/shuffle/tests/test_shuffle.py:134: could not import 'dask_cudf': No module named 'dask_cudf'",
            "tests/kernels/test_xqa.py::test_xqa[512-bf16] SKIPPED (Invalid head_dim: 512) [ 10%]",
            "tests/quant/test_fp8.py::test_fp8_gemm[bf16] XFAIL (Device compute capability 9.x required)",
            "XFAIL tests/test_moe.py::test_sm120 - unsupported on this arch",
            "tests/test_ok.py::test_add PASSED",
        ] {
            assert_eq!(clean(line.as_bytes()).level, Level::Info, "{line}");
        }
        for line in [
            "FAILED tests/test_moe.py::test_moe - RuntimeError: CUDA error: an illegal memory access was encountered",
            "ERROR tests/test_moe.py - ModuleNotFoundError: No module named 'flashinfer'",
            "RuntimeError: cuDNN error: if you passed in a non-contiguous input, call .contiguous()",
        ] {
            assert_ne!(clean(line.as_bytes()).level, Level::Info, "{line}");
        }
        assert!(is_code(&text(
            "    with pytest.raises(ValueError, match=\"Invalid head_dim: 512\"):"
        )));
    }

    #[test]
    fn keeps_the_last_carriage_return_redraw_and_drops_control_bytes() {
        assert_eq!(text("50%|#####\r100%|##########\rKilled\r\n"), "Killed");
        assert_eq!(text("a\u{0}b\u{7}c"), "a b c");
        assert_eq!(
            display(b"\xff\xfeok\x1b[31m red\x1b[0m"),
            "\u{fffd}\u{fffd}ok red"
        );
    }

    #[test]
    fn display_caps_long_lines() {
        let long = "x".repeat(10_000);
        let shown = display(long.as_bytes());
        assert_eq!(shown.chars().count(), MAX_DISPLAY + 1);
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn traceback_code_lines_are_not_messages() {
        assert!(is_code(
            "raise ValueError(\"No available memory for the cache blocks. \""
        ));
        assert!(is_code("File \"/x.py\", line 1, in f"));
        assert!(is_code("raise RuntimeError(f\"NCCL error: {error_str}\")"));
        // An exception name inside the raise's own message is the code's, not a pasted line.
        assert!(is_code("raise RuntimeError(f\"RuntimeError: {e}\") from e"));
        assert!(is_code("raise MemoryError(f'MemoryError: {e}.')"));
        assert!(is_code(
            "raise ValueError(f\"Invalid dtype. TypeError: {err} (device {device})\")"
        ));
        // An apostrophe inside a double-quoted message does not open a string.
        assert!(!is_code(
            "raise ValueError(\"can't load weights\") ValueError: can't load weights"
        ));
        // A traceback whose newlines were lost holds its exception line.
        assert!(!is_code(
            "File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py\", line 1906, in broadcast 10: work = default_pg.broadcast([tensor], opts) 10: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled system error"
        ));
        assert!(!is_code(
            "raise RuntimeError(f\"NCCL error: {error_str}\") ERROR 11-04 18:02:56 [multiproc_executor.py:597] RuntimeError: NCCL error: unhandled cuda error"
        ));
        // IPython's and Jupyter's quoted source: the arrow's line, and context lines that open
        // with a statement; a log line that opens with a count is no code.
        assert!(is_code(
            "171 except (OutOfResources, CompileTimeAssertionFailure, PTXASError) as e:"
        ));
        assert!(is_code(
            "--> 216         raise RuntimeError(\"CUDA Error: %s\" % cuGetErrorString(error))"
        ));
        assert!(is_code("---> 19     raise ImportError(f'Failed to load')"));
        assert!(is_code(
            "38         \"CUDA error: no kernel image is available for execution on the device. \""
        ));
        assert!(is_code(
            "86 # A \"CUDA out of memory\" here means the batch is too large"
        ));
        assert!(!is_code(
            "3 errors detected in the compilation of \"kernel.cu\"."
        ));
        assert!(is_code("^^^^^^^^"));
        assert!(!is_code("ValueError: No available memory"));
    }
}
