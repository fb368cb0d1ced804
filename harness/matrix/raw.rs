//! Stage one: a mirror of the matrix file with a byte span on everything a user can get wrong.
//!
//! The file is parsed with toml's recoverable parser (every syntax error, a span on every key and
//! value) and its tree walked here instead of deserialized whole, so that *every* problem (syntax,
//! unknown keys, wrong types, bad durations) is collected with its span in one pass; serde over the
//! whole file stops at the first error. Leaves are still converted by the library (an integer in
//! any base goes through toml's own deserializer), so nothing of TOML is re-implemented here.

use crate::diag::Diagnostic;
use crate::signature::Signature;
use crate::suggest::did_you_mean;
use serde::Deserialize as _;
use serde::de::IntoDeserializer as _;
use std::ops::Range;
use std::time::Duration;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

pub(crate) type Span = Range<usize>;

/// A value and where it came from in the file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sp<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

impl<T> Sp<T> {
    fn new(value: T, span: Span) -> Self {
        Sp { value, span }
    }
}

/// Values a matrix axis, include or exclude entry can hold.
pub(crate) type Value = serde_json::Value;

/// `key = value` pairs of an include or exclude entry, in file order.
pub(crate) type RawCombo = Vec<(Sp<String>, Sp<Value>)>;

#[derive(Debug, Default)]
pub(crate) struct RawFile {
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    /// `replay = true`: the cells replay recorded runs (labelled so in the run and its report).
    pub(crate) replay: bool,
    pub(crate) matrix: Option<RawMatrix>,
    pub(crate) gpus: Option<Sp<String>>,
    pub(crate) env: Vec<(Sp<String>, Sp<String>)>,
    pub(crate) packages: Vec<(Sp<String>, Vec<Sp<String>>)>,
    pub(crate) python: Option<RawPython>,
    pub(crate) engine: Option<Sp<String>>,
    pub(crate) job: Option<RawJob>,
    pub(crate) server: Option<RawServer>,
    pub(crate) retry: Option<RawRetry>,
    pub(crate) expect: Vec<RawExpect>,
    pub(crate) rules: Vec<RawRule>,
    pub(crate) runners: Option<RawRunners>,
    pub(crate) slurm: Option<RawSlurm>,
}

/// `[runners]`: the `runs-on` labels `plan --format github` gives the cells' jobs.
#[derive(Debug, Default)]
pub(crate) struct RawRunners {
    /// Labels every job starts with (replaces `self-hosted`, `linux`).
    pub(crate) labels: Option<Vec<Sp<String>>>,
    /// The label of an arch without its own entry in `arch`, `{arch}` filled (`gpu-{arch}`).
    pub(crate) arch_label: Option<Sp<String>>,
    /// Labels for one arch, instead of `arch_label`'s.
    pub(crate) arch: Vec<(Sp<String>, Vec<Sp<String>>)>,
}

/// `[slurm]`: how `gpucompat run --executor slurm` asks Slurm for each task's node.
#[derive(Debug, Default)]
pub(crate) struct RawSlurm {
    pub(crate) partition: Option<Sp<String>>,
    pub(crate) constraint_prefix: Option<Sp<String>>,
    /// Arch -> the node feature that marks it (`sm_90 = "h100"`), in file order.
    pub(crate) features: Vec<(Sp<String>, Sp<String>)>,
    pub(crate) args: Vec<Sp<String>>,
    pub(crate) time_limit: Option<Sp<Duration>>,
    pub(crate) time_margin: Option<Sp<Duration>>,
}

#[derive(Debug, Default)]
pub(crate) struct RawMatrix {
    pub(crate) span: Span,
    pub(crate) axes: Vec<(Sp<String>, Vec<Sp<Value>>)>,
    /// How many values each axis has as written (some may have been left out as invalid).
    pub(crate) written: Vec<usize>,
    pub(crate) include: Vec<Sp<RawCombo>>,
    pub(crate) exclude: Vec<Sp<RawCombo>>,
    /// Something in `[matrix]` was invalid and left out (already reported): what it expands to
    /// is not what the user wrote, so conclusions about the expansion are left unsaid.
    pub(crate) incomplete: bool,
}

/// Settings every engine shares.
#[derive(Debug, Default)]
pub(crate) struct RawCommon {
    pub(crate) timeout: Option<Sp<Duration>>,
    pub(crate) no_progress: Option<Sp<Duration>>,
    pub(crate) cache: Option<Sp<String>>,
}

#[derive(Debug, Default)]
pub(crate) struct RawJob {
    pub(crate) span: Span,
    pub(crate) command: Option<Sp<String>>,
    /// `command` is written, maybe with a wrong type or misspelled (already reported then).
    pub(crate) command_written: bool,
    pub(crate) common: RawCommon,
}

#[derive(Debug, Default)]
pub(crate) struct RawServer {
    pub(crate) span: Span,
    pub(crate) command: Option<Sp<String>>,
    /// As [`RawJob::command_written`].
    pub(crate) command_written: bool,
    pub(crate) model: Option<Sp<String>>,
    /// Integer or template; checked per cell once rendered.
    pub(crate) tp: Option<Sp<String>>,
    pub(crate) workers: Option<Sp<String>>,
    pub(crate) args: Option<Sp<String>>,
    pub(crate) health: Option<Sp<String>>,
    pub(crate) ready_line: Option<Sp<String>>,
    pub(crate) ready_timeout: Option<Sp<Duration>>,
    pub(crate) endpoint: Option<Sp<String>>,
    pub(crate) prompt: Option<Sp<String>>,
    pub(crate) max_tokens: Option<Sp<u32>>,
    pub(crate) expect: Option<Sp<String>>,
    pub(crate) check: Option<Sp<String>>,
    pub(crate) common: RawCommon,
}

#[derive(Debug, Default)]
pub(crate) struct RawPython {
    pub(crate) python: Option<Sp<String>>,
    pub(crate) requirements: Option<Sp<String>>,
    pub(crate) index_url: Option<Sp<String>>,
    pub(crate) find_links: Vec<Sp<String>>,
    pub(crate) site: Vec<Sp<String>>,
    pub(crate) no_index: Option<Sp<bool>>,
    pub(crate) system_site_packages: Option<Sp<bool>>,
    pub(crate) no_deps: Option<Sp<bool>>,
}

#[derive(Debug, Default)]
pub(crate) struct RawRetry {
    pub(crate) count: Option<Sp<u32>>,
    pub(crate) on: Vec<Sp<Signature>>,
}

#[derive(Debug)]
pub(crate) struct RawExpect {
    pub(crate) span: Span,
    /// Key, and one value or a list of values (any of them matches).
    pub(crate) when: Vec<(Sp<String>, Vec<Sp<Value>>)>,
    pub(crate) signature: Option<Sp<Signature>>,
    pub(crate) link: Option<Sp<String>>,
    pub(crate) reason: Option<Sp<String>>,
}

#[derive(Debug)]
pub(crate) struct RawRule {
    pub(crate) pattern: Sp<String>,
    pub(crate) signature: Sp<Signature>,
    pub(crate) precedence: i32,
    pub(crate) spurious: bool,
    pub(crate) explanation: Option<String>,
    pub(crate) hint: Option<String>,
}

/// The longest duration a file may set (`timeout`, `no-progress`, `ready-timeout`): longer is a
/// typo, and far longer would overflow the runner's clock arithmetic mid-run.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "replay",
    "matrix",
    "resources",
    "env",
    "packages",
    "python",
    "engine",
    "job",
    "server",
    "retry",
    "expect",
    "rules",
    "runners",
    "slurm",
];
const SLURM_KEYS: &[&str] = &[
    "partition",
    "constraint-prefix",
    "features",
    "args",
    "time-limit",
    "time-margin",
];
const COMMON_KEYS: &[&str] = &["timeout", "no-progress", "cache"];
const JOB_KEYS: &[&str] = &["command", "timeout", "no-progress", "cache"];
const SERVER_KEYS: &[&str] = &[
    "command",
    "model",
    "tp",
    "workers",
    "args",
    "health",
    "ready-line",
    "ready-timeout",
    "endpoint",
    "prompt",
    "max-tokens",
    "expect",
    "check",
    "timeout",
    "no-progress",
    "cache",
];
const PYTHON_KEYS: &[&str] = &[
    "python",
    "requirements",
    "index-url",
    "find-links",
    "site",
    "no-index",
    "system-site-packages",
    "no-deps",
];

/// Parses `source` into a [`RawFile`], pushing every problem found onto `problems`.
///
/// A file with TOML syntax errors gets no [`RawFile`]: what the parser recovered is not reliable
/// enough to check the matrix against (an unclosed bracket swallows the lines after it). Its
/// syntax errors are reported, the first of each line, together with the problems the walk finds
/// on other lines (unknown keys, wrong types), so a user still sees everything that is certainly
/// wrong, and nothing that only follows from the syntax error.
pub(crate) fn parse(source: &str, problems: &mut Vec<Diagnostic>) -> Option<RawFile> {
    let (root, errors) = DeTable::parse_recoverable(source);
    let mut syntax: Vec<Diagnostic> = errors
        .iter()
        .map(|err| {
            let message = err.message().trim();
            let span = err.span().or_else(|| locate(source, message));
            Diagnostic::error(format!("invalid TOML: {message}"), span).label("here")
        })
        .collect();
    let mut found = Vec::new();
    let mut walker = Walker {
        problems: &mut found,
    };
    let file = walker.file(root.get_ref());
    if syntax.is_empty() {
        problems.append(&mut found);
        return Some(file);
    }
    let line = |diag: &Diagnostic| diag.span.as_ref().map(|span| line_of(source, span.start));
    syntax.sort_by_key(|d| d.span.as_ref().map_or(0, |s| s.start));
    let mut bad_lines: Vec<usize> = Vec::new();
    for diag in syntax {
        let at = line(&diag).unwrap_or(0);
        if !bad_lines.contains(&at) {
            bad_lines.push(at);
            problems.push(diag);
        }
    }
    problems.extend(
        found
            .into_iter()
            .filter(|diag| line(diag).is_some_and(|at| !bad_lines.contains(&at))),
    );
    None
}

/// The line of a syntax error the parser reports without a place (a dotted key past its
/// recursion limit): the first line whose prefix of the file gets that error, found by bisection
/// (errors on a line never depend on the lines after it).
fn locate(source: &str, message: &str) -> Option<Span> {
    let ends: Vec<usize> = source
        .match_indices('\n')
        .map(|(at, _)| at + 1)
        .chain((!source.ends_with('\n')).then_some(source.len()))
        .collect();
    let fails = |lines: usize| {
        let prefix = &source[..ends[lines - 1]];
        DeTable::parse_recoverable(prefix)
            .1
            .iter()
            .any(|err| err.span().is_none() && err.message().trim() == message)
    };
    // Smallest number of lines whose text fails.
    let lines: Vec<usize> = (1..=ends.len()).collect();
    let count = *lines.get(lines.partition_point(|&n| !fails(n)))?;
    let start = if count == 1 { 0 } else { ends[count - 2] };
    let line = source[start..ends[count - 1]].trim_end();
    let indent = line.len() - line.trim_start().len();
    Some(start + indent..start + line.len())
}

/// 0-based line of a byte offset.
fn line_of(source: &str, offset: usize) -> usize {
    source
        .as_bytes()
        .iter()
        .take(offset)
        .filter(|&&b| b == b'\n')
        .count()
}

struct Walker<'p> {
    problems: &'p mut Vec<Diagnostic>,
}

type Item<'i> = Spanned<DeValue<'i>>;

impl Walker<'_> {
    fn file(&mut self, root: &DeTable<'_>) -> RawFile {
        self.unknown_keys(root, "the top level", TOP_KEYS);
        let mut file = RawFile::default();
        for (key, item) in root {
            match key.get_ref().as_ref() {
                "name" => file.name = self.string(item, "name").map(|s| s.value),
                "description" => {
                    file.description = self.string(item, "description").map(|s| s.value);
                }
                "replay" => {
                    file.replay = self.boolean(item, "replay").is_some_and(|b| b.value);
                }
                "matrix" => file.matrix = self.matrix(item),
                "resources" => {
                    if let Some(table) = self.table(item, "[resources]") {
                        self.unknown_keys(table, "[resources]", &["gpus"]);
                        file.gpus = table
                            .get("gpus")
                            .and_then(|v| self.string(v, "gpus in [resources]"));
                    }
                }
                "env" => {
                    if let Some(table) = self.table(item, "[env]") {
                        for (name, value) in table {
                            let name_sp = Sp::new(name.get_ref().to_string(), name.span());
                            if let Some(value) =
                                self.string(value, &format!("{} in [env]", name.get_ref()))
                            {
                                file.env.push((name_sp, value));
                            }
                        }
                    }
                }
                "packages" => {
                    if let Some(table) = self.table(item, "[packages]") {
                        for (axis, value) in table {
                            let what = format!("{} in [packages]", axis.get_ref());
                            let names = self.string_list(value, &what);
                            if matches!(value.get_ref(), DeValue::Array(items) if items.is_empty())
                            {
                                self.problems.push(
                                    Diagnostic::error(format!("{what} is an empty list"), Some(value.span()))
                                        .label("pins no package")
                                        .help("name the packages this key's values are versions of, e.g. `flashinfer = [\"flashinfer-python\", \"flashinfer-cubin\"]`"),
                                );
                            }
                            file.packages
                                .push((Sp::new(axis.get_ref().to_string(), axis.span()), names));
                        }
                    }
                }
                "python" => file.python = self.python(item),
                "engine" => file.engine = self.string(item, "engine"),
                "job" => file.job = self.job(item),
                "server" => file.server = self.server(item),
                "retry" => file.retry = self.retry(item),
                "expect" => file.expect = self.expects(item),
                "rules" => file.rules = self.rules(item),
                "runners" => file.runners = self.runners(item),
                "slurm" => file.slurm = self.slurm(item),
                _ => {}
            }
        }
        if !root.contains_key("matrix") {
            self.problems.push(
                Diagnostic::error("missing `[matrix]` table", None)
                    .help("a matrix file needs a `[matrix]` table with at least one axis, e.g. `flashinfer = [\"0.6.3\", \"0.6.8.post1\"]`"),
            );
        }
        file
    }

    fn matrix(&mut self, item: &Item<'_>) -> Option<RawMatrix> {
        let table = self.table(item, "[matrix]")?;
        let reported = self.problems.len();
        let mut matrix = RawMatrix {
            span: item.span(),
            ..RawMatrix::default()
        };
        for (key, value) in table {
            let name = key.get_ref().as_ref();
            match name {
                "include" | "exclude" => {
                    let entries = self.combos(value, name);
                    if name == "include" {
                        matrix.include = entries;
                    } else {
                        matrix.exclude = entries;
                    }
                }
                _ => {
                    let DeValue::Array(values) = value.get_ref() else {
                        self.problems.push(
                            Diagnostic::error(
                                format!("axis `{name}` must be an array of values"),
                                Some(value.span()),
                            )
                            .label(format!("found {}", value.get_ref().type_str()))
                            .help(format!(
                                "write `{name} = [{}]`",
                                source_like(value.get_ref())
                            )),
                        );
                        continue;
                    };
                    let what = format!("axis `{name}`");
                    matrix.written.push(values.len());
                    let values = values
                        .iter()
                        .filter_map(|v| self.matrix_value(v, &what))
                        .collect();
                    matrix
                        .axes
                        .push((Sp::new(name.to_owned(), key.span()), values));
                }
            }
        }
        matrix.incomplete = self.problems.len() > reported;
        Some(matrix)
    }

    /// `include`/`exclude`: an array of tables.
    fn combos(&mut self, item: &Item<'_>, what: &str) -> Vec<Sp<RawCombo>> {
        let DeValue::Array(entries) = item.get_ref() else {
            self.type_error(item, &format!("`{what}` in [matrix]"), "an array of tables");
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in entries.iter() {
            let Some(table) = self.table(entry, &format!("an entry of `{what}`")) else {
                continue;
            };
            if table.is_empty() {
                self.problems.push(
                    Diagnostic::error(format!("empty `{what}` entry"), Some(entry.span()))
                        .label("this entry has no keys"),
                );
                continue;
            }
            let mut combo = Vec::new();
            for (key, value) in table {
                let desc = format!("`{}` in a `{what}` entry", key.get_ref());
                if let Some(value) = self.matrix_value(value, &desc) {
                    combo.push((Sp::new(key.get_ref().to_string(), key.span()), value));
                }
            }
            out.push(Sp::new(combo, entry.span()));
        }
        out
    }

    /// A matrix value: string, integer, boolean or table of those.
    fn matrix_value(&mut self, item: &Item<'_>, what: &str) -> Option<Sp<Value>> {
        let value = match item.get_ref() {
            DeValue::String(s) => Value::String(self.text(s, item.span(), what)?.value),
            DeValue::Integer(_) => Value::from(self.integer(item)?),
            DeValue::Boolean(b) => Value::Bool(*b),
            DeValue::Table(table) => {
                // Check every field, so each bad one is reported.
                let mut map = Some(serde_json::Map::new());
                for (key, value) in table {
                    if self.text(key.get_ref(), key.span(), what).is_none() {
                        map = None;
                    }
                    match self.matrix_value(value, what) {
                        Some(inner) => {
                            if let Some(map) = &mut map {
                                map.insert(key.get_ref().to_string(), inner.value);
                            }
                        }
                        None => map = None,
                    }
                }
                Value::Object(map?)
            }
            DeValue::Float(f) => {
                self.problems.push(
                    Diagnostic::error(
                        format!("{what}: floats are not allowed as matrix values"),
                        Some(item.span()),
                    )
                    .label("a float")
                    .help(format!(
                        "quote it: \"{}\" (as a float, 3.10 would read as 3.1)",
                        f.as_str()
                    )),
                );
                return None;
            }
            other => {
                self.problems.push(
                    Diagnostic::error(
                        format!(
                            "{what}: a value must be a string, integer, boolean or table, found {}",
                            other.type_str()
                        ),
                        Some(item.span()),
                    )
                    .label(format!("found {}", other.type_str())),
                );
                return None;
            }
        };
        Some(Sp::new(value, item.span()))
    }

    /// An integer as the TOML library reads it: every base (`0x`, `0o`, `0b`), underscores, a
    /// sign. Only a value beyond 64 bits is refused (the one way the conversion can fail).
    fn integer(&mut self, item: &Item<'_>) -> Option<i64> {
        let n = i64::deserialize(item.clone().into_deserializer());
        if n.is_err() {
            self.problems.push(
                Diagnostic::error("integer out of range", Some(item.span())).label(
                    "expected a whole number from -9223372036854775808 to 9223372036854775807",
                ),
            );
        }
        n.ok()
    }

    fn common(&mut self, table: &DeTable<'_>, section: &str) -> RawCommon {
        RawCommon {
            timeout: table
                .get("timeout")
                .and_then(|v| self.duration(v, &format!("timeout in {section}"))),
            no_progress: table
                .get("no-progress")
                .and_then(|v| self.duration(v, &format!("no-progress in {section}"))),
            cache: table
                .get("cache")
                .and_then(|v| self.string(v, &format!("cache in {section}"))),
        }
    }

    fn job(&mut self, item: &Item<'_>) -> Option<RawJob> {
        let table = self.table(item, "[job]")?;
        self.unknown_keys(table, "[job]", JOB_KEYS);
        Some(RawJob {
            span: item.span(),
            command: table
                .get("command")
                .and_then(|v| self.string(v, "command in [job]")),
            command_written: command_written(table),
            common: self.common(table, "[job]"),
        })
    }

    fn server(&mut self, item: &Item<'_>) -> Option<RawServer> {
        let table = self.table(item, "[server]")?;
        self.unknown_keys(table, "[server]", SERVER_KEYS);
        let mut s = |key: &str| {
            table
                .get(key)
                .and_then(|v| self.string(v, &format!("{key} in [server]")))
        };
        let mut server = RawServer {
            span: item.span(),
            command_written: command_written(table),
            command: s("command"),
            model: s("model"),
            args: s("args"),
            health: s("health"),
            ready_line: s("ready-line"),
            endpoint: s("endpoint"),
            prompt: s("prompt"),
            expect: s("expect"),
            check: s("check"),
            ..RawServer::default()
        };
        server.tp = table
            .get("tp")
            .and_then(|v| self.int_or_template(v, "tp in [server]"));
        server.workers = table
            .get("workers")
            .and_then(|v| self.int_or_template(v, "workers in [server]"));
        server.ready_timeout = table
            .get("ready-timeout")
            .and_then(|v| self.duration(v, "ready-timeout in [server]"));
        server.max_tokens = table
            .get("max-tokens")
            .and_then(|v| self.count(v, "max-tokens in [server]"));
        server.common = self.common(table, "[server]");
        Some(server)
    }

    fn python(&mut self, item: &Item<'_>) -> Option<RawPython> {
        let table = self.table(item, "[python]")?;
        self.unknown_keys(table, "[python]", PYTHON_KEYS);
        let mut s = |key: &str| {
            table
                .get(key)
                .and_then(|v| self.string(v, &format!("{key} in [python]")))
        };
        let mut python = RawPython {
            python: s("python"),
            requirements: s("requirements"),
            index_url: s("index-url"),
            ..RawPython::default()
        };
        python.find_links = table
            .get("find-links")
            .map(|v| self.string_list(v, "find-links in [python]"))
            .unwrap_or_default();
        python.site = table
            .get("site")
            .map(|v| self.string_list(v, "site in [python]"))
            .unwrap_or_default();
        python.no_index = table
            .get("no-index")
            .and_then(|v| self.boolean(v, "no-index in [python]"));
        python.system_site_packages = table
            .get("system-site-packages")
            .and_then(|v| self.boolean(v, "system-site-packages in [python]"));
        python.no_deps = table
            .get("no-deps")
            .and_then(|v| self.boolean(v, "no-deps in [python]"));
        Some(python)
    }

    fn runners(&mut self, item: &Item<'_>) -> Option<RawRunners> {
        let table = self.table(item, "[runners]")?;
        self.unknown_keys(table, "[runners]", &["labels", "arch-label", "arch"]);
        let mut runners = RawRunners {
            labels: table
                .get("labels")
                .map(|v| self.string_list(v, "labels in [runners]")),
            arch_label: table
                .get("arch-label")
                .and_then(|v| self.string(v, "arch-label in [runners]")),
            arch: Vec::new(),
        };
        if let Some(arch) = table.get("arch")
            && let Some(arch) = self.table(arch, "[runners.arch]")
        {
            for (name, value) in arch {
                let what = format!("{} in [runners.arch]", name.get_ref());
                let labels = self.string_list(value, &what);
                runners
                    .arch
                    .push((Sp::new(name.get_ref().to_string(), name.span()), labels));
            }
        }
        Some(runners)
    }

    fn slurm(&mut self, item: &Item<'_>) -> Option<RawSlurm> {
        let table = self.table(item, "[slurm]")?;
        self.unknown_keys(table, "[slurm]", SLURM_KEYS);
        let mut s = |key: &str| {
            table
                .get(key)
                .and_then(|v| self.string(v, &format!("{key} in [slurm]")))
        };
        let mut slurm = RawSlurm {
            partition: s("partition"),
            constraint_prefix: s("constraint-prefix"),
            ..RawSlurm::default()
        };
        slurm.args = table
            .get("args")
            .map(|v| self.string_list(v, "args in [slurm]"))
            .unwrap_or_default();
        slurm.time_limit = table
            .get("time-limit")
            .and_then(|v| self.duration(v, "time-limit in [slurm]"));
        slurm.time_margin = table
            .get("time-margin")
            .and_then(|v| self.duration(v, "time-margin in [slurm]"));
        if let Some(features) = table
            .get("features")
            .and_then(|v| self.table(v, "features in [slurm]"))
        {
            for (arch, feature) in features {
                let what = format!("{} in [slurm] features", arch.get_ref());
                if !crate::matrix::gpus::is_arch(arch.get_ref()) {
                    self.problems.push(
                        Diagnostic::error(
                            format!("`{}` in [slurm] features is not a GPU arch", arch.get_ref()),
                            Some(arch.span()),
                        )
                        .label("expected an arch such as `sm_90`")
                        .help("map each arch of `[resources] gpus` to the node feature that marks it, e.g. `sm_90 = \"h100\"`"),
                    );
                    continue;
                }
                if let Some(feature) = self.string(feature, &what) {
                    slurm
                        .features
                        .push((Sp::new(arch.get_ref().to_string(), arch.span()), feature));
                }
            }
        }
        Some(slurm)
    }

    fn retry(&mut self, item: &Item<'_>) -> Option<RawRetry> {
        let table = self.table(item, "[retry]")?;
        self.unknown_keys(table, "[retry]", &["count", "on"]);
        let count = table
            .get("count")
            .and_then(|v| self.count(v, "count in [retry]"));
        let on = table
            .get("on")
            .map(|v| self.string_list(v, "on in [retry]"))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|name| self.signature_name(name))
            .collect();
        Some(RawRetry { count, on })
    }

    fn expects(&mut self, item: &Item<'_>) -> Vec<RawExpect> {
        let mut out = Vec::new();
        for entry in self.array_of_tables(item, "[[expect]]") {
            let Some(table) = entry.get_ref().as_table() else {
                continue;
            };
            self.unknown_keys(
                table,
                "[[expect]]",
                &["when", "signature", "link", "reason"],
            );
            let mut when = Vec::new();
            match table.get("when") {
                None => self.problems.push(
                    Diagnostic::error("`[[expect]]` needs `when`", Some(entry.span()))
                        .label("this rule says nothing about which cells it covers")
                        .help("add e.g. `when = { gpu = \"sm_110\", flashinfer = \"<=0.6.8.post1\" }`"),
                ),
                Some(value) => {
                    if let Some(conditions) = self.table(value, "`when` in [[expect]]") {
                        if conditions.is_empty() {
                            self.problems.push(
                                Diagnostic::error("`when` is empty", Some(value.span()))
                                    .label("this would mark every cell as a known failure")
                                    .help("name the cells: `when = { gpu = \"sm_110\" }`"),
                            );
                        }
                        for (key, cond) in conditions {
                            let what = format!("`{}` in `when`", key.get_ref());
                            let values = match cond.get_ref() {
                                DeValue::Array(items) if items.is_empty() => {
                                    self.problems.push(
                                        Diagnostic::error(
                                            format!("{what} is an empty list"),
                                            Some(cond.span()),
                                        )
                                        .label("matches no value")
                                        .help("list the values this rule covers, or remove the key"),
                                    );
                                    Vec::new()
                                }
                                DeValue::Array(items) => items
                                    .iter()
                                    .filter_map(|v| self.matrix_value(v, &what))
                                    .collect(),
                                _ => self.matrix_value(cond, &what).into_iter().collect(),
                            };
                            when.push((Sp::new(key.get_ref().to_string(), key.span()), values));
                        }
                    }
                }
            }
            let signature = table
                .get("signature")
                .and_then(|v| self.string(v, "signature in [[expect]]"))
                .and_then(|name| self.signature_name(name));
            let link = table
                .get("link")
                .and_then(|v| self.string(v, "link in [[expect]]"));
            if let Some(link) = &link {
                let url = link.value.trim();
                let rest = url
                    .strip_prefix("https://")
                    .or_else(|| url.strip_prefix("http://"));
                if rest.is_none_or(|rest| rest.is_empty() || rest.contains(char::is_whitespace)) {
                    self.problems.push(
                        Diagnostic::error("`link` is not a URL", Some(link.span.clone()))
                            .label("expected an http(s) address")
                            .help("link the upstream issue, e.g. \"https://github.com/flashinfer-ai/flashinfer/issues/3134\""),
                    );
                }
            }
            let reason = table
                .get("reason")
                .and_then(|v| self.string(v, "reason in [[expect]]"));
            out.push(RawExpect {
                span: entry.span(),
                when,
                signature,
                link,
                reason,
            });
        }
        out
    }

    fn rules(&mut self, item: &Item<'_>) -> Vec<RawRule> {
        let mut out = Vec::new();
        for entry in self.array_of_tables(item, "[[rules]]") {
            let Some(table) = entry.get_ref().as_table() else {
                continue;
            };
            self.unknown_keys(
                table,
                "[[rules]]",
                &[
                    "pattern",
                    "signature",
                    "precedence",
                    "spurious",
                    "explanation",
                    "hint",
                ],
            );
            let pattern = self.required_string(table, "pattern", "[[rules]]", entry.span());
            let signature = self
                .required_string(table, "signature", "[[rules]]", entry.span())
                .and_then(|name| self.signature_name(name));
            let precedence = table.get("precedence").and_then(|v| match v.get_ref() {
                DeValue::Integer(_) => {
                    let n = self.integer(v)?;
                    let fits = i32::try_from(n).ok();
                    if fits.is_none() {
                        self.problems.push(
                            Diagnostic::error(
                                format!("precedence in [[rules]]: {n} is out of range"),
                                Some(v.span()),
                            )
                            .label("expected a whole number from -2147483648 to 2147483647"),
                        );
                    }
                    fits
                }
                _ => {
                    self.type_error(v, "precedence in [[rules]]", "an integer");
                    None
                }
            });
            let spurious = table
                .get("spurious")
                .and_then(|v| self.boolean(v, "spurious in [[rules]]"));
            let explanation = table
                .get("explanation")
                .and_then(|v| self.string(v, "explanation in [[rules]]"));
            let hint = table
                .get("hint")
                .and_then(|v| self.string(v, "hint in [[rules]]"));
            if let (Some(pattern), Some(signature)) = (pattern, signature) {
                if let Err(err) = regex::Regex::new(&pattern.value) {
                    self.problems.push(
                        Diagnostic::error("invalid regex in `pattern`", Some(pattern.span.clone()))
                            .label(last_line(&err.to_string())),
                    );
                }
                out.push(RawRule {
                    pattern,
                    signature,
                    precedence: precedence.unwrap_or(0),
                    spurious: spurious.is_some_and(|s| s.value),
                    explanation: explanation.map(|s| s.value),
                    hint: hint.map(|s| s.value),
                });
            }
        }
        out
    }

    // ---- typed accessors: each reports its own problem and returns None ----

    fn table<'a, 'i>(&mut self, item: &'a Item<'i>, what: &str) -> Option<&'a DeTable<'i>> {
        match item.get_ref() {
            DeValue::Table(table) => Some(table),
            _ => {
                self.type_error(item, what, "a table");
                None
            }
        }
    }

    fn array_of_tables<'a, 'i>(&mut self, item: &'a Item<'i>, what: &str) -> Vec<&'a Item<'i>> {
        match item.get_ref() {
            DeValue::Array(items) => items
                .iter()
                .filter(|entry| {
                    let ok = entry.get_ref().is_table();
                    if !ok {
                        self.type_error(entry, &format!("an entry of {what}"), "a table");
                    }
                    ok
                })
                .collect(),
            _ => {
                self.type_error(item, what, "an array of tables");
                Vec::new()
            }
        }
    }

    fn string(&mut self, item: &Item<'_>, what: &str) -> Option<Sp<String>> {
        match item.get_ref() {
            DeValue::String(s) => self.text(s, item.span(), what),
            _ => {
                self.type_error(item, what, "a string");
                None
            }
        }
    }

    fn required_string(
        &mut self,
        table: &DeTable<'_>,
        key: &str,
        section: &str,
        span: Span,
    ) -> Option<Sp<String>> {
        match table.get(key) {
            Some(value) => self.string(value, &format!("{key} in {section}")),
            None => {
                self.problems.push(
                    Diagnostic::error(format!("{section} needs `{key}`"), Some(span))
                        .label(format!("`{key}` missing")),
                );
                None
            }
        }
    }

    /// A string, or an array of strings.
    fn string_list(&mut self, item: &Item<'_>, what: &str) -> Vec<Sp<String>> {
        match item.get_ref() {
            DeValue::String(s) => self.text(s, item.span(), what).into_iter().collect(),
            DeValue::Array(items) => items
                .iter()
                .filter_map(|entry| self.string(entry, what))
                .collect(),
            _ => {
                self.type_error(item, what, "a string or an array of strings");
                Vec::new()
            }
        }
    }

    /// A string of the file. Strings become commands, arguments, environment variables and
    /// cell values, none of which can hold a NUL: refused here, not when a cell runs.
    fn text(&mut self, text: &str, span: Span, what: &str) -> Option<Sp<String>> {
        if text.contains('\0') {
            self.problems.push(
                Diagnostic::error(format!("{what} contains a NUL character"), Some(span))
                    .label("a process cannot be given NUL in a command, argument or variable")
                    .help("remove the `\\u0000` escape"),
            );
            return None;
        }
        Some(Sp::new(text.to_owned(), span))
    }

    fn boolean(&mut self, item: &Item<'_>, what: &str) -> Option<Sp<bool>> {
        match item.get_ref() {
            DeValue::Boolean(b) => Some(Sp::new(*b, item.span())),
            _ => {
                self.type_error(item, what, "a boolean");
                None
            }
        }
    }

    /// A non-negative integer that fits in u32.
    fn count(&mut self, item: &Item<'_>, what: &str) -> Option<Sp<u32>> {
        match item.get_ref() {
            DeValue::Integer(_) => {
                let n = self.integer(item)?;
                match u32::try_from(n) {
                    Ok(n) => Some(Sp::new(n, item.span())),
                    Err(_) => {
                        self.problems.push(
                            Diagnostic::error(
                                format!("{what}: {n} is out of range"),
                                Some(item.span()),
                            )
                            .label("expected a whole number from 0 to 4294967295"),
                        );
                        None
                    }
                }
            }
            _ => {
                self.type_error(item, what, "an integer");
                None
            }
        }
    }

    /// An integer, or a template string that renders to one per cell (`tp = "{tp}"`).
    fn int_or_template(&mut self, item: &Item<'_>, what: &str) -> Option<Sp<String>> {
        match item.get_ref() {
            DeValue::String(s) => self.text(s, item.span(), what),
            DeValue::Integer(_) => self
                .count(item, what)
                .map(|n| Sp::new(n.value.to_string(), n.span)),
            _ => {
                self.type_error(item, what, "an integer or a template string");
                None
            }
        }
    }

    fn duration(&mut self, item: &Item<'_>, what: &str) -> Option<Sp<Duration>> {
        let text = self.string(item, what)?;
        match humantime::parse_duration(&text.value) {
            Ok(d) if d.is_zero() => {
                self.problems.push(
                    Diagnostic::error(format!("{what} must be longer than zero"), Some(text.span))
                        .label("zero"),
                );
                None
            }
            Ok(d) if d > MAX_DURATION => {
                self.problems.push(
                    Diagnostic::error(format!("{what} is longer than 30 days"), Some(text.span))
                        .label("at most 30 days")
                        .help("a deadline this long is a typo; write e.g. \"90m\" or \"12h\""),
                );
                None
            }
            Ok(d) => Some(Sp::new(d, text.span)),
            Err(err) => {
                let label = match err {
                    humantime::DurationError::NumberExpected(_) => {
                        "a duration starts with a number".to_owned()
                    }
                    other => other.to_string(),
                };
                self.problems.push(
                    Diagnostic::error(format!("{what} is not a duration"), Some(text.span))
                        .label(label)
                        .help("write a duration such as \"90s\", \"5m\" or \"1h 30m\""),
                );
                None
            }
        }
    }

    fn signature_name(&mut self, name: Sp<String>) -> Option<Sp<Signature>> {
        match name.value.parse::<Signature>() {
            Ok(sig) => Some(Sp::new(sig, name.span)),
            Err(_) => {
                let names: Vec<&str> = Signature::ALL.iter().map(|s| s.as_str()).collect();
                let mut diag = Diagnostic::error(
                    format!("unknown signature `{}`", name.value),
                    Some(name.span),
                )
                .label("not a signature");
                diag = match did_you_mean(&name.value, &names) {
                    Some(near) => diag.help(format!("did you mean `{near}`?")),
                    None => diag.help(format!("signatures: {}", names.join(", "))),
                };
                self.problems.push(diag);
                None
            }
        }
    }

    fn type_error(&mut self, item: &Item<'_>, what: &str, expected: &str) {
        self.problems.push(
            Diagnostic::error(
                format!(
                    "{what} must be {expected}, found {}",
                    item.get_ref().type_str()
                ),
                Some(item.span()),
            )
            .label(format!("expected {expected}")),
        );
    }

    fn unknown_keys(&mut self, table: &DeTable<'_>, section: &str, known: &[&str]) {
        for key in table.keys() {
            let name = key.get_ref().as_ref();
            if known.contains(&name) {
                continue;
            }
            let mut diag = Diagnostic::error(
                format!("unknown key `{name}` in {section}"),
                Some(key.span()),
            )
            .label(format!(
                "expected one of {}",
                known
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if let Some(near) = did_you_mean(name, known) {
                diag = diag.help(format!("did you mean `{near}`?"));
            } else if section == "the top level" && COMMON_KEYS.contains(&name) {
                diag = diag.help(format!("`{name}` belongs in `[job]` or `[server]`"));
            } else if section != "the top level" && TOP_KEYS.contains(&name) {
                diag = diag.help(format!(
                    "keys after a `[table]` header belong to that table: move `{name}` above the first header"
                ));
            }
            self.problems.push(diag);
        }
    }
}

/// Whether a table has `command`, or a key that is a likely typo of it.
fn command_written(table: &DeTable<'_>) -> bool {
    table
        .keys()
        .any(|key| did_you_mean(key.get_ref(), &["command"]).is_some())
}

/// The last line of a multi-line error (regex errors end with the one that says what is wrong).
pub(crate) fn last_line(text: &str) -> String {
    text.lines().last().unwrap_or_default().trim().to_owned()
}

/// How a scalar looks in TOML, for help texts.
fn source_like(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(s) => format!("\"{s}\""),
        DeValue::Integer(i) => i.as_str().to_owned(),
        DeValue::Float(f) => f.as_str().to_owned(),
        DeValue::Boolean(b) => b.to_string(),
        _ => "...".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    //! Every form a TOML value can take, and what the matrix front end makes of it. The contract:
    //! matrix values are strings, integers, booleans or tables of those; every other form (floats,
    //! dates and times, arrays inside an axis) is refused with an error located at the value.

    use super::*;
    use serde_json::json;

    fn parsed(source: &str) -> (Option<RawFile>, Vec<Diagnostic>) {
        let mut problems = Vec::new();
        let file = parse(source, &mut problems);
        (file, problems)
    }

    /// The values of axis `n = [...]` written as `values`, and the problems found.
    fn axis(values: &str) -> (Vec<Value>, Vec<Diagnostic>) {
        let (file, problems) = parsed(&format!("[matrix]\nn = [{values}]\n"));
        let matrix = file.and_then(|f| f.matrix).expect("a [matrix] table");
        let values = matrix.axes[0].1.iter().map(|v| v.value.clone()).collect();
        (values, problems)
    }

    /// The text of the file a diagnostic points at.
    fn pointed<'s>(source: &'s str, diag: &Diagnostic) -> &'s str {
        &source[diag.span.clone().expect("a located problem")]
    }

    #[test]
    fn integers_in_every_base() {
        let (values, problems) =
            axis("0x1234, 0xff, 0xDEAD_beef, 0o17, 0o7_7, 0b101, 0b1_0, 1_000, -5, +7, 0, -0, +0");
        assert!(problems.is_empty(), "{problems:?}");
        let expected = [
            0x1234,
            0xff,
            0xdead_beef,
            0o17,
            0o77,
            0b101,
            0b10,
            1000,
            -5,
            7,
            0,
            0,
            0,
        ];
        assert_eq!(values, expected.map(|n: i64| json!(n)));
    }

    #[test]
    fn integers_at_the_64_bit_limits() {
        let (values, problems) =
            axis("9223372036854775807, -9223372036854775808, 0x7FFF_FFFF_FFFF_FFFF");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(values, [json!(i64::MAX), json!(i64::MIN), json!(i64::MAX)]);
    }

    #[test]
    fn an_integer_beyond_64_bits_is_refused_where_written() {
        let source = "[matrix]\nn = [1, 9223372036854775808, 0xFFFF_FFFF_FFFF_FFFF]\n";
        let (_, problems) = parsed(source);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].message, "integer out of range");
        assert_eq!(pointed(source, &problems[0]), "9223372036854775808");
        assert_eq!(pointed(source, &problems[1]), "0xFFFF_FFFF_FFFF_FFFF");
    }

    #[test]
    fn counts_and_integer_settings_in_any_base() {
        let source = "[matrix]\nn = [1]\n[server]\nmax-tokens = 0x10\ntp = 0b10\nworkers = 0o3\n\
                      [retry]\ncount = 1_0\n[[rules]]\npattern = \"x\"\nsignature = \"oom\"\n\
                      precedence = -16\n";
        let (file, problems) = parsed(source);
        assert!(problems.is_empty(), "{problems:?}");
        let file = file.expect("valid");
        let server = file.server.expect("[server]");
        assert_eq!(server.max_tokens.map(|n| n.value), Some(16));
        assert_eq!(server.tp.map(|n| n.value), Some("2".to_owned()));
        assert_eq!(server.workers.map(|n| n.value), Some("3".to_owned()));
        assert_eq!(file.retry.and_then(|r| r.count).map(|n| n.value), Some(10));
        assert_eq!(file.rules[0].precedence, -16);
    }

    #[test]
    fn a_negative_count_is_refused_where_written() {
        let source = "[matrix]\nn = [1]\n[server]\nmax-tokens = -1_6\n";
        let (_, problems) = parsed(source);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            problems[0].message,
            "max-tokens in [server]: -16 is out of range"
        );
        assert_eq!(pointed(source, &problems[0]), "-1_6");
    }

    #[test]
    fn a_signed_hex_octal_or_binary_integer_is_a_located_syntax_error() {
        for (i, written) in ["-0x10", "+0o7", "-0b1"].into_iter().enumerate() {
            let source = format!("[matrix]\nn = [{written}]\n");
            let (file, problems) = parsed(&source);
            assert!(file.is_none(), "{i}");
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(
                problems[0]
                    .message
                    .contains("integers with a radix cannot be signed"),
                "{problems:?}"
            );
            assert_eq!(problems[0].span.as_ref().map(|s| s.start), Some(14));
        }
    }

    #[test]
    fn floats_of_every_form_are_refused_where_written() {
        let floats = [
            "3.10", "-2.5", "1e3", "6.02E+23", "1.5e-3", "inf", "+inf", "-inf", "nan", "+nan",
            "-nan", "1_000.5",
        ];
        let source = format!("[matrix]\nn = [\"ok\", {}]\n", floats.join(", "));
        let (file, problems) = parsed(&source);
        assert_eq!(problems.len(), floats.len(), "{problems:?}");
        for (diag, float) in problems.iter().zip(floats) {
            assert_eq!(
                diag.message,
                "axis `n`: floats are not allowed as matrix values"
            );
            assert_eq!(pointed(&source, diag), float);
        }
        let matrix = file.and_then(|f| f.matrix).expect("[matrix]");
        assert_eq!(matrix.axes[0].1.len(), 1, "only the string is kept");
        assert!(matrix.incomplete);
    }

    #[test]
    fn dates_and_times_are_refused_where_written() {
        let dates = [
            "1979-05-27T07:32:00Z",
            "1979-05-27T00:32:00.999999-07:00",
            "1979-05-27 07:32:00",
            "1979-05-27T07:32:00",
            "1979-05-27",
            "07:32:00",
        ];
        let source = format!("[matrix]\nn = [{}]\n", dates.join(", "));
        let (_, problems) = parsed(&source);
        assert_eq!(problems.len(), dates.len(), "{problems:?}");
        for (diag, date) in problems.iter().zip(dates) {
            assert_eq!(
                diag.message,
                "axis `n`: a value must be a string, integer, boolean or table, found datetime"
            );
            assert_eq!(pointed(&source, diag), date);
        }
    }

    #[test]
    fn strings_of_every_form() {
        let (values, problems) = axis(
            r#""basic \u00e9 \t", 'literal \n', """multi
line""", '''raw
lines'''"#,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            values,
            [
                json!("basic é \t"),
                json!("literal \\n"),
                json!("multi\nline"),
                json!("raw\nlines")
            ]
        );
    }

    #[test]
    fn booleans_and_inline_tables_are_values() {
        let (values, problems) =
            axis(r#"true, false, { name = "llama", tp = 0x2, opts = { fp8 = true } }"#);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            values,
            [
                json!(true),
                json!(false),
                json!({ "name": "llama", "tp": 2, "opts": { "fp8": true } })
            ]
        );
    }

    #[test]
    fn a_bad_field_of_a_table_value_is_refused_where_written() {
        let source = "[matrix]\nn = [{ a = 1, b = 2.5, c = { d = 1979-05-27 } }]\n";
        let (_, problems) = parsed(source);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(pointed(source, &problems[0]), "2.5");
        assert_eq!(pointed(source, &problems[1]), "1979-05-27");
    }

    #[test]
    fn nested_arrays_are_refused_where_written() {
        let source = "[matrix]\nn = [1, [2, 3], [[4]], []]\n";
        let (_, problems) = parsed(source);
        assert_eq!(problems.len(), 3, "{problems:?}");
        for (diag, text) in problems.iter().zip(["[2, 3]", "[[4]]", "[]"]) {
            assert_eq!(
                diag.message,
                "axis `n`: a value must be a string, integer, boolean or table, found array"
            );
            assert_eq!(pointed(source, diag), text);
        }
    }

    #[test]
    fn include_as_an_array_of_tables_or_inline() {
        let headers = "[matrix]\nn = [1]\n[[matrix.include]]\nn = 0x1\nextra = \"a\"\n\
                       [[matrix.include]]\nn = 2\n";
        let inline = "[matrix]\nn = [1]\ninclude = [{ n = 0x1, extra = \"a\" }, { n = 2 }]\n";
        for source in [headers, inline] {
            let (file, problems) = parsed(source);
            assert!(problems.is_empty(), "{problems:?}");
            let include = file.and_then(|f| f.matrix).expect("[matrix]").include;
            let plain: Vec<Vec<(String, Value)>> = include
                .iter()
                .map(|e| {
                    e.value
                        .iter()
                        .map(|(k, v)| (k.value.clone(), v.value.clone()))
                        .collect()
                })
                .collect();
            assert_eq!(
                plain,
                [
                    vec![("n".to_owned(), json!(1)), ("extra".to_owned(), json!("a"))],
                    vec![("n".to_owned(), json!(2))]
                ]
            );
        }
    }

    #[test]
    fn an_include_entry_that_is_not_a_table_is_refused_where_written() {
        let source = "[matrix]\nn = [1]\ninclude = [{ n = 1 }, 3, [\"x\"]]\n";
        let (_, problems) = parsed(source);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(pointed(source, &problems[0]), "3");
        assert_eq!(pointed(source, &problems[1]), "[\"x\"]");
    }

    #[test]
    fn durations_longer_than_30_days_are_refused_where_written() {
        for key in ["timeout", "no-progress", "ready-timeout"] {
            let source = format!("[matrix]\nn = [1]\n[server]\n{key} = \"500000000000y\"\n");
            let (_, problems) = parsed(&source);
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert_eq!(
                problems[0].message,
                format!("{key} in [server] is longer than 30 days")
            );
            assert_eq!(pointed(&source, &problems[0]), "\"500000000000y\"");
        }
        let source = "[matrix]\nn = [1]\n[job]\ncommand = \"x\"\ntimeout = \"30days\"\n";
        let (_, problems) = parsed(source);
        assert!(
            problems.is_empty(),
            "exactly 30 days is allowed: {problems:?}"
        );
    }

    #[test]
    fn a_nul_in_any_string_is_refused_where_written() {
        let source = "[matrix]\nn = [\"a\\u0000\", { k = \"\\u0000\" }]\n[env]\nX = \"a\\u0000b\"\n\
                      [job]\ncommand = \"x\\u0000\"\n";
        let (_, problems) = parsed(source);
        let located: Vec<(&str, &str)> = problems
            .iter()
            .map(|d| (d.message.as_str(), pointed(source, d)))
            .collect();
        assert_eq!(
            located,
            [
                ("axis `n` contains a NUL character", "\"a\\u0000\""),
                ("axis `n` contains a NUL character", "\"\\u0000\""),
                ("X in [env] contains a NUL character", "\"a\\u0000b\""),
                ("command in [job] contains a NUL character", "\"x\\u0000\""),
            ]
        );
    }

    #[test]
    fn syntax_errors_without_a_place_are_located() {
        let key = vec!["a"; 90].join(".");
        let source = format!("[matrix]\nn = [1]\n  {key} = 1\n[job]\n");
        let (file, problems) = parsed(&source);
        assert!(file.is_none());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].message, "invalid TOML: recursion limit");
        assert_eq!(pointed(&source, &problems[0]), format!("{key} = 1"));
    }

    #[test]
    fn nesting_too_deep_is_located() {
        let source = format!("[matrix]\nn = {}{}\n", "[".repeat(100), "]".repeat(100));
        let (file, problems) = parsed(&source);
        assert!(file.is_none());
        assert!(
            problems
                .iter()
                .all(|d| d.span.as_ref().is_some_and(|s| s.start > 9)),
            "{problems:?}"
        );
    }
}
