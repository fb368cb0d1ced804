//! Stage two: validate the raw file and build the [`Plan`].
//!
//! Every check here records a [`Diagnostic`] and carries on, so one `gpucompat check` shows all
//! the problems of a file. Per-cell problems (a template that renders to a bad GPU spec, a value
//! that is not a version) are reported once per place in the file, naming the first cell.
//!
//! Large matrices: expansion borrows the file's values, and everything that is the same for many
//! cells (a version's validity, a rule's verdict on a value, a parsed GPU spec) is worked out once
//! per distinct value, so the cost per cell is building its values, id and rendered strings.

use super::expand::{self, Combination, Source};
use super::raw::{self, RawFile, RawMatrix, Sp, Span};
use super::template::{Template, field, value_text};
use super::{gpus, ids};
use crate::diag::{self, Diagnostic};
use crate::digest::sha256_hex;
use crate::matrix::plan::*;
use crate::suggest::did_you_mean;
use crate::record::{ExpectationRef, Values};
use pep440_rs::{Version, VersionSpecifiers};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// Whole-cell deadline when the file sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Idle window when the file sets none.
pub const DEFAULT_NO_PROGRESS: Duration = Duration::from_secs(5 * 60);

/// Placeholders the runner fills, allowed only in server settings.
const RUNTIME_KEYS: &[&str] = &["port", "engine_dir"];

/// A matrix file could not be loaded. Maps to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read matrix file `{path}`")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", diag::render(path, text, diagnostics).trim_end())]
    Invalid {
        path: String,
        text: String,
        diagnostics: Vec<Diagnostic>,
    },
}

impl LoadError {
    /// The full report: rendered diagnostics, or the I/O error with its cause.
    pub fn render(&self) -> String {
        match self {
            LoadError::Invalid { .. } => self.to_string(),
            LoadError::Read { source, .. } => format!("error: {self}: {source}"),
        }
    }
}

/// A loaded plan and the warnings found on the way (already rendered; empty when none).
#[derive(Debug)]
pub struct Loaded {
    pub plan: Plan,
    pub warnings: String,
}

/// Reads, parses and validates a matrix file.
pub fn load(path: &Path) -> Result<Plan, LoadError> {
    load_verbose(path).map(|loaded| loaded.plan)
}

/// Like [`load`], and also returns the warnings.
pub fn load_verbose(path: &Path) -> Result<Loaded, LoadError> {
    let (name, text, dir) = read(path)?;
    from_str(&name, &text, path, &dir)
}

/// The file's name as given, its text, and its folder.
fn read(path: &Path) -> Result<(String, String, PathBuf), LoadError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: name.clone(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|err| not_utf8(&name, &err))?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((name, text, dir))
}

/// A file that is not UTF-8, pointed at its first bad byte (shown as `\u{FFFD}`).
fn not_utf8(name: &str, err: &std::string::FromUtf8Error) -> LoadError {
    let text = String::from_utf8_lossy(err.as_bytes()).into_owned();
    let at = err.utf8_error().valid_up_to();
    LoadError::Invalid {
        path: name.to_owned(),
        diagnostics: vec![
            Diagnostic::error("the matrix file is not valid UTF-8", Some(at..at + '\u{FFFD}'.len_utf8()))
                .label("not UTF-8")
                .help("TOML files are UTF-8; save the file with that encoding"),
        ],
        text,
    }
}

/// Validates matrix text; `path` and `dir` only end up in the plan, `name` in messages.
pub fn from_str(name: &str, text: &str, path: &Path, dir: &Path) -> Result<Loaded, LoadError> {
    from_str_with(name, text, path, dir, Purpose::Run)
}

/// Like [`load_verbose`], for looking at a matrix rather than running it (`matrix expand`,
/// `plan`): a file with nothing to run (no `[job]`, `[server]` or `engine`) is accepted with a
/// warning, and its cells get an empty `job` command. Every other problem is still an error.
pub fn load_for_inspection(path: &Path) -> Result<Loaded, LoadError> {
    let (name, text, dir) = read(path)?;
    from_str_with(&name, &text, path, &dir, Purpose::Inspect)
}

/// What a plan is loaded for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Run,
    Inspect,
}

fn from_str_with(
    name: &str,
    text: &str,
    path: &Path,
    dir: &Path,
    purpose: Purpose,
) -> Result<Loaded, LoadError> {
    let mut problems = Vec::new();
    let plan = build(text, path, dir, purpose, &mut problems);
    diag::sort(&mut problems);
    let has_errors = problems.iter().any(Diagnostic::is_error);
    match plan {
        Some(plan) if !has_errors => Ok(Loaded {
            plan,
            warnings: if problems.is_empty() {
                String::new()
            } else {
                diag::render(name, text, &problems)
            },
        }),
        _ => Err(LoadError::Invalid {
            path: name.to_owned(),
            text: text.to_owned(),
            diagnostics: problems,
        }),
    }
}

fn build(
    text: &str,
    path: &Path,
    dir: &Path,
    purpose: Purpose,
    problems: &mut Vec<Diagnostic>,
) -> Option<Plan> {
    let raw = raw::parse(text, problems)?;
    let matrix = raw.matrix.as_ref()?;
    let mut cx = Checker {
        text,
        problems,
        once: HashSet::new(),
        per_place: HashMap::new(),
        purpose,
    };
    cx.check_keys(matrix);
    // Checks that need no cells come first, so they are reported even when expansion fails.
    cx.check_env_names(&raw);
    cx.check_package_names(&raw);

    let axes: Vec<expand::Axis> = matrix
        .axes
        .iter()
        .map(|(name, values)| {
            (
                name.value.clone(),
                values.iter().map(|v| v.value.clone()).collect(),
            )
        })
        .collect();
    let plain = |entries: &[Sp<raw::RawCombo>]| -> Vec<expand::Entry> {
        entries
            .iter()
            .map(|entry| {
                entry
                    .value
                    .iter()
                    .map(|(k, v)| (k.value.clone(), v.value.clone()))
                    .collect()
            })
            .collect()
    };
    let exclude = plain(&matrix.exclude);
    let include = plain(&matrix.include);
    let removes = exclude_counts(&axes, &exclude);
    cx.check_excludes(matrix, &removes);
    let combos = match expand::expand(&axes, &exclude, &include) {
        Ok(combos) => combos,
        Err(too_large) => {
            cx.problems.push(
                Diagnostic::error(too_large.to_string(), Some(matrix.span.clone()))
                    .label("too many combinations")
                    .help("split the matrix into several files, or use fewer values per axis"),
            );
            return None;
        }
    };
    if combos.is_empty() {
        if matrix.incomplete {
            // Some of the matrix was left out as invalid; that is the problem to fix first.
            return None;
        }
        let mut diag = Diagnostic::error("the matrix has no cells", Some(matrix.span.clone()))
            .label("expands to nothing");
        diag = if matrix.exclude.is_empty() {
            diag.help("add at least one axis with values, or an `include` entry")
        } else {
            let total = expand::product_size(&axes).unwrap_or(0);
            for (entry, removed) in matrix.exclude.iter().zip(&removes) {
                diag = diag.secondary(
                    entry.span.clone(),
                    format!("excludes {} of {total}", removed.min(&total)),
                );
            }
            diag.help("`exclude` removed every combination; check its entries")
        };
        cx.problems.push(diag);
        return None;
    }
    if !matrix.incomplete {
        cx.check_duplicates(matrix, &combos);
    }

    // A cell is identified by its axis values alone, so keys that `include` adds (a model path,
    // engine flags) neither lengthen ids nor change them when edited, and a cell an include entry
    // created keeps its id if its values later join the axes. Only a cell with no axis value at
    // all (a matrix of includes only) is identified by all its values.
    let axis_position = |key: &str| axes.iter().position(|(name, _)| name == key);
    // One flat list of identifying values, cut per cell, rather than a list per cell.
    let mut flat: Vec<(&str, &Value)> = Vec::with_capacity(combos.len() * axes.len());
    let mut ends: Vec<usize> = Vec::with_capacity(combos.len());
    for combo in &combos {
        match combo.created_by {
            None => flat.extend(combo.values[..axes.len()].iter().map(|(k, v, _)| (*k, *v))),
            Some(_) => {
                let mut parts: Vec<(usize, &str, &Value)> = combo
                    .values
                    .iter()
                    .filter_map(|(k, v, _)| Some((axis_position(k)?, *k, *v)))
                    .collect();
                parts.sort_by_key(|(position, _, _)| *position);
                if parts.is_empty() {
                    flat.extend(combo.values.iter().map(|(k, v, _)| (*k, *v)));
                } else {
                    flat.extend(parts.into_iter().map(|(_, k, v)| (k, v)));
                }
            }
        }
        ends.push(flat.len());
    }
    let identities: Vec<&[(&str, &Value)]> = ends
        .iter()
        .scan(0, |start, &end| {
            let cell = &flat[*start..end];
            *start = end;
            Some(cell)
        })
        .collect();
    let cell_ids = ids::assign_parts(&identities);
    drop(identities);
    drop(flat);

    let keys = all_keys(&combos);
    let templates = Templates::collect(&raw);
    for template in &templates.all {
        cx.check_placeholders(template, &keys, &combos);
    }
    cx.check_package_keys(&raw, &keys);
    let expectations = cx.expectations(&raw, &keys);

    let mut cells = Vec::with_capacity(combos.len());
    let mut matched = vec![false; expectations.len()];
    let mut memo = Memo::default();
    for (combo, id) in combos.iter().zip(cell_ids) {
        let cell_cx = CellContext {
            id: &id,
            combo,
            matrix,
        };
        let Some(mut cell) = cx.cell(&raw, &templates, &cell_cx, &mut memo) else {
            continue;
        };
        cell.id = CellId(id);
        let rule = expectations
            .iter()
            .enumerate()
            .position(|(index, rule)| rule.matches(index, combo, &mut memo.verdicts));
        if let Some(index) = rule {
            matched[index] = true;
            cell.expectation = Some(expectations[index].reference.clone());
        }
        cells.push(cell);
    }
    cx.finish();
    // Only meaningful when every cell was built; otherwise "matches nothing" is noise.
    let all_built = cells.len() == combos.len();
    for (rule, matched) in expectations.iter().zip(matched) {
        if all_built && !matched && !rule.broken && !matrix.incomplete {
            cx.problems.push(
                Diagnostic::warning(
                    "this `[[expect]]` rule matches no cell",
                    Some(rule.span.clone()),
                )
                .label("matches nothing")
                .help("check the values in `when` against the matrix (`gpucompat matrix expand`)"),
            );
        }
    }

    let retry = raw
        .retry
        .as_ref()
        .map_or_else(RetryPolicy::default, |r| RetryPolicy {
            count: r.count.as_ref().map_or(0, |c| c.value),
            on: r.on.iter().map(|s| s.value).collect(),
        });
    let rules = raw
        .rules
        .iter()
        .map(|r| UserRule {
            pattern: r.pattern.value.clone(),
            signature: r.signature.value,
            precedence: r.precedence,
            spurious: r.spurious,
            explanation: r.explanation.clone(),
            hint: r.hint.clone(),
        })
        .collect();
    let python = raw.python.as_ref().map(|p| PythonEnv {
        python: p.python.as_ref().map(|s| s.value.clone()),
        requirements: p.requirements.as_ref().map(|s| PathBuf::from(&s.value)),
        index_url: p.index_url.as_ref().map(|s| s.value.clone()),
        find_links: p
            .find_links
            .iter()
            .map(|s| PathBuf::from(&s.value))
            .collect(),
        no_index: p.no_index.as_ref().is_some_and(|b| b.value),
        system_site_packages: p.system_site_packages.as_ref().is_some_and(|b| b.value),
        no_deps: p.no_deps.as_ref().is_some_and(|b| b.value),
    });
    Some(Plan {
        path: path.to_path_buf(),
        dir: dir.to_path_buf(),
        file_hash: sha256_hex(text.as_bytes(), 32),
        name: raw.name.clone(),
        description: raw.description.clone(),
        replay: raw.replay,
        keys,
        cells,
        retry,
        rules,
        python,
    })
}

/// Every key a cell can have: axes first, then keys added by `include`, in order of appearance.
fn all_keys(combos: &[Combination<'_>]) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut keys = Vec::new();
    for combo in combos {
        for key in combo.keys() {
            if seen.insert(key) {
                keys.push(key.to_owned());
            }
        }
    }
    keys
}

/// For each exclude entry, how many combinations of the product it matches on its own.
fn exclude_counts(axes: &[expand::Axis], exclude: &[expand::Entry]) -> Vec<u128> {
    exclude
        .iter()
        .map(|entry| {
            let mut count: u128 = 1;
            for (axis_name, values) in axes {
                let constraints: Vec<&Value> = entry
                    .iter()
                    .filter(|(key, _)| key == axis_name)
                    .map(|(_, value)| value)
                    .collect();
                let accepted = values
                    .iter()
                    .filter(|value| {
                        constraints
                            .iter()
                            .all(|filter| expand::filter_matches(filter, Some(value)))
                    })
                    .count();
                count = count.saturating_mul(accepted as u128);
            }
            let missing_keys_match = entry
                .iter()
                .filter(|(key, _)| !axes.iter().any(|(name, _)| name == key))
                .all(|(_, filter)| expand::filter_matches(filter, None));
            if axes.is_empty() || !missing_keys_match {
                0
            } else {
                count
            }
        })
        .collect()
}

/// Where a template may use the runner's placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Cell,
    Server,
}

/// A template string of the file and where it may be used.
struct FieldTemplate<'a> {
    field: &'a Sp<String>,
    what: &'static str,
    scope: Scope,
    parsed: Template,
}

/// Every templated string of the file, parsed once.
struct Templates<'a> {
    all: Vec<FieldTemplate<'a>>,
}

impl<'a> Templates<'a> {
    fn collect(raw: &'a RawFile) -> Self {
        let mut all = Vec::new();
        let mut add = |field: &'a Option<Sp<String>>, what: &'static str, scope: Scope| {
            if let Some(field) = field {
                all.push(FieldTemplate {
                    field,
                    what,
                    scope,
                    parsed: Template::parse(&field.value),
                });
            }
        };
        add(&raw.gpus, "gpus", Scope::Cell);
        add(&raw.engine, "engine", Scope::Cell);
        if let Some(job) = &raw.job {
            add(&job.command, "command", Scope::Cell);
            add(&job.common.cache, "cache", Scope::Cell);
        }
        if let Some(s) = &raw.server {
            add(&s.command, "command", Scope::Server);
            add(&s.model, "model", Scope::Cell);
            add(&s.tp, "tp", Scope::Cell);
            add(&s.workers, "workers", Scope::Cell);
            add(&s.args, "args", Scope::Server);
            add(&s.health, "health", Scope::Cell);
            add(&s.endpoint, "endpoint", Scope::Cell);
            add(&s.prompt, "prompt", Scope::Cell);
            add(&s.expect, "expect", Scope::Cell);
            add(&s.ready_line, "ready-line", Scope::Cell);
            add(&s.common.cache, "cache", Scope::Cell);
        }
        if let Some(python) = &raw.python {
            add(&python.requirements, "requirements", Scope::Cell);
        }
        let mut templates = Templates { all };
        for (_, value) in &raw.env {
            templates.all.push(FieldTemplate {
                field: value,
                what: "env",
                scope: Scope::Cell,
                parsed: Template::parse(&value.value),
            });
        }
        templates
    }

    fn get(&self, field: &Option<Sp<String>>) -> Option<&FieldTemplate<'a>> {
        let field = field.as_ref()?;
        self.find(field)
    }

    fn find(&self, field: &Sp<String>) -> Option<&FieldTemplate<'a>> {
        self.all.iter().find(|t| std::ptr::eq(t.field, field))
    }
}

/// What one cell is rendered from.
struct CellContext<'c, 'm> {
    id: &'c str,
    combo: &'c Combination<'m>,
    matrix: &'c RawMatrix,
}

impl CellContext<'_, '_> {
    fn render(&self, template: &FieldTemplate<'_>) -> String {
        if let Some(text) = template.parsed.literal() {
            return text.to_owned();
        }
        let mut out = String::with_capacity(template.parsed.size_hint());
        self.render_into(template, &mut out);
        out
    }

    fn render_into(&self, template: &FieldTemplate<'_>, out: &mut String) {
        template.parsed.render_into(out, |name| {
            let value = self.combo.get(name);
            if value.is_none() && RUNTIME_KEYS.contains(&name) {
                None
            } else {
                Some(value)
            }
        });
    }

    /// Where the cell's value for `key` was written in the file.
    fn value_span(&self, key: &str) -> Option<Span> {
        source_span(self.matrix, self.combo.source(key)?)
    }
}

fn source_span(matrix: &RawMatrix, source: Source) -> Option<Span> {
    match source {
        Source::Axis { axis, value } => Some(matrix.axes.get(axis)?.1.get(value)?.span.clone()),
        Source::Include { entry, key } => {
            Some(matrix.include.get(entry)?.value.get(key)?.1.span.clone())
        }
    }
}

/// Work done once per distinct value instead of once per cell.
#[derive(Default)]
struct Memo {
    /// `[packages]` pins: the version a value pins, or `None` when it is not one.
    versions: HashMap<Source, Option<String>>,
    /// `[resources] gpus` as rendered, parsed.
    gpus: HashMap<String, Result<Vec<String>, gpus::GpuSpecError>>,
    /// `(rule, condition, value)`: whether a version range of a rule matches a value.
    verdicts: HashMap<(usize, usize, Option<Source>), bool>,
    /// Scratch space for rendering.
    buffer: String,
    /// An empty map for each sequence of keys (by where the key names live), cloned for each cell
    /// with those keys: cheaper than hashing every key of every cell again.
    shapes: HashMap<Vec<usize>, Values>,
    /// Scratch space for a cell's shape.
    shape: Vec<usize>,
}

impl Memo {
    /// The cell's values as an owned map, keys in order.
    fn values(&mut self, combo: &Combination<'_>) -> Values {
        self.shape.clear();
        self.shape
            .extend(combo.values.iter().map(|(key, _, _)| key.as_ptr() as usize));
        if !self.shapes.contains_key(self.shape.as_slice()) {
            let empty = combo
                .values
                .iter()
                .map(|(key, _, _)| ((*key).to_owned(), Value::Null))
                .collect();
            self.shapes.insert(self.shape.clone(), empty);
        }
        let mut values = self.shapes[self.shape.as_slice()].clone();
        for ((_, slot), (_, value, _)) in values.iter_mut().zip(&combo.values) {
            *slot = (*value).clone();
        }
        values
    }
}

/// A compiled `[[expect]]` rule.
struct ExpectRule {
    span: Span,
    /// A condition of it was reported as invalid (and left out), so "matches no cell" would be
    /// a consequence, not news.
    broken: bool,
    conditions: Vec<(String, Vec<Matcher>)>,
    reference: ExpectationRef,
}

impl ExpectRule {
    fn matches(
        &self,
        index: usize,
        combo: &Combination<'_>,
        verdicts: &mut HashMap<(usize, usize, Option<Source>), bool>,
    ) -> bool {
        self.conditions
            .iter()
            .enumerate()
            .all(|(condition, (key, matchers))| {
                let value = combo.get(key);
                let check = || matchers.iter().any(|m| m.matches(value));
                if matchers.iter().any(|m| matches!(m, Matcher::Versions(_))) {
                    *verdicts
                        .entry((index, condition, combo.source(key)))
                        .or_insert_with(check)
                } else {
                    check()
                }
            })
    }
}

enum Matcher {
    /// Equal as `include`/`exclude` compare: GitHub's `==`, tables field by field.
    Equals(Value),
    /// `"<=0.6.8.post1"`, `">=0.6.3,<0.6.11"`: PEP 440 comparison of the cell's value.
    Versions(VersionSpecifiers),
}

impl Matcher {
    /// `value` is `None` when the cell lacks the key.
    fn matches(&self, value: Option<&Value>) -> bool {
        match self {
            // A cell without the key is not covered (GitHub's `==` would read it as null).
            Matcher::Equals(expected) => {
                value.is_some_and(|value| expand::filter_matches(expected, Some(value)))
            }
            Matcher::Versions(specifiers) => value.is_some_and(|value| {
                Version::from_str(&value_text(value)).is_ok_and(|v| specifiers.contains(&v))
            }),
        }
    }
}

struct Checker<'t, 'p> {
    text: &'t str,
    problems: &'p mut Vec<Diagnostic>,
    /// (span, message) pairs already reported, so a per-cell problem shows once.
    once: HashSet<(usize, usize, String)>,
    /// Per place: how many different problems, and the index of the last one shown.
    per_place: HashMap<(usize, usize), (usize, usize)>,
    purpose: Purpose,
}

/// The most different problems shown at one place in the file.
const MAX_PER_PLACE: usize = 3;

impl Checker<'_, '_> {
    /// Reports a problem unless the same one was reported at the same place; at most
    /// [`MAX_PER_PLACE`] different ones per place (a template that renders badly for a thousand
    /// values is one problem to fix, not a thousand), the rest counted by [`Checker::finish`].
    fn push_once(&mut self, diag: Diagnostic) {
        let span = diag.span.clone().unwrap_or(0..0);
        if !self
            .once
            .insert((span.start, span.end, diag.message.clone()))
        {
            return;
        }
        if diag.span.is_some() {
            let (count, last) = self.per_place.entry((span.start, span.end)).or_default();
            *count += 1;
            if *count > MAX_PER_PLACE {
                return;
            }
            *last = self.problems.len();
        }
        self.problems.push(diag);
    }

    /// Notes, on the last problem shown at each place, how many more were left out.
    fn finish(&mut self) {
        for (count, last) in self.per_place.values() {
            if *count > MAX_PER_PLACE {
                if let Some(diag) = self.problems.get_mut(*last) {
                    let more = count - MAX_PER_PLACE;
                    diag.label = format!(
                        "{} (and {more} more problem{} here)",
                        diag.label,
                        if more == 1 { "" } else { "s" }
                    );
                }
            }
        }
        self.per_place.clear();
    }

    fn check_keys(&mut self, matrix: &RawMatrix) {
        let axis_names: Vec<&str> = matrix.axes.iter().map(|(n, _)| n.value.as_str()).collect();
        for ((name, values), &written) in matrix.axes.iter().zip(&matrix.written) {
            self.check_key_name(name);
            if written == 0 {
                self.problems.push(
                    Diagnostic::error(
                        format!("axis `{}` has no values", name.value),
                        Some(name.span.clone()),
                    )
                    .label("empty axis")
                    .help("an empty axis makes the product empty; give it values or remove it"),
                );
            }
            for (i, value) in values.iter().enumerate() {
                let earlier = values[..i]
                    .iter()
                    .find(|earlier| earlier.value == value.value)
                    .or_else(|| {
                        values[..i].iter().find(|earlier| {
                            expand::filter_matches(&earlier.value, Some(&value.value))
                                && expand::filter_matches(&value.value, Some(&earlier.value))
                        })
                    });
                let Some(earlier) = earlier else {
                    continue;
                };
                if earlier.value == value.value {
                    self.problems.push(
                        Diagnostic::error(
                            format!("duplicate value {} in axis `{}`", value.value, name.value),
                            Some(value.span.clone()),
                        )
                        .label("already listed")
                        .secondary(earlier.span.clone(), "first listed here"),
                    );
                } else {
                    self.problems.push(
                        Diagnostic::warning(
                            format!(
                                "values {} and {} of axis `{}` count as equal in `include` and `exclude`",
                                earlier.value, value.value, name.value
                            ),
                            Some(value.span.clone()),
                        )
                        .label("equal to an earlier value")
                        .secondary(earlier.span.clone(), "this one")
                        .help("GitHub compares strings ignoring case, and numbers with numeric strings; an entry naming one names both"),
                    );
                }
            }
        }
        let include_keys: Vec<&str> = matrix
            .include
            .iter()
            .flat_map(|entry| entry.value.iter().map(|(k, _)| k.value.as_str()))
            .collect();
        for entry in &matrix.exclude {
            for (key, _) in &entry.value {
                if axis_names.contains(&key.value.as_str()) {
                    continue;
                }
                let mut diag = Diagnostic::error(
                    format!("exclude key `{}` is not an axis", key.value),
                    Some(key.span.clone()),
                )
                .label(if axis_names.is_empty() {
                    "the matrix has no axes".to_owned()
                } else {
                    format!("axes are: {}", axis_names.join(", "))
                });
                if let Some(near) = did_you_mean(&key.value, &axis_names) {
                    diag = diag.help(format!("did you mean `{near}`?"));
                } else if include_keys.contains(&key.value.as_str()) {
                    diag = diag.help(format!(
                        "`{}` is added by `include`, which runs after `exclude`; exclude by the axes of those cells instead",
                        key.value
                    ));
                }
                self.problems.push(diag);
            }
        }
        for entry in &matrix.include {
            for (key, _) in &entry.value {
                self.check_key_name(key);
            }
        }
        // `GPUCOMPAT_<KEY>` upper-cases keys, and GitHub reads keys without case: keys that differ
        // only in case would be one variable and one key.
        let mut spelled: HashMap<String, &Sp<String>> = HashMap::new();
        let all_keys = matrix.axes.iter().map(|(name, _)| name).chain(
            matrix
                .include
                .iter()
                .flat_map(|entry| entry.value.iter().map(|(k, _)| k)),
        );
        for key in all_keys {
            match spelled.get(&key.value.to_ascii_lowercase()) {
                Some(first) if first.value != key.value => {
                    self.push_once(
                        Diagnostic::error(
                            format!(
                                "keys `{}` and `{}` differ only in case",
                                first.value, key.value
                            ),
                            Some(key.span.clone()),
                        )
                        .label("same key as an earlier one, ignoring case")
                        .secondary(first.span.clone(), "first spelled here")
                        .help(format!(
                            "both would set `GPUCOMPAT_{}`; spell them the same, or rename one",
                            key.value.to_ascii_uppercase()
                        )),
                    );
                }
                Some(_) => {}
                None => {
                    spelled.insert(key.value.to_ascii_lowercase(), key);
                }
            }
        }
    }

    fn check_key_name(&mut self, name: &Sp<String>) {
        let ok = !name.value.is_empty()
            && name
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            self.push_once(
                Diagnostic::error(
                    format!("invalid key name `{}`", name.value),
                    Some(name.span.clone()),
                )
                .label("keys use only letters, digits, `_` and `-`")
                .help("keys become `{key}` placeholders and `GPUCOMPAT_<KEY>` variables"),
            );
        } else if RUNTIME_KEYS.contains(&name.value.as_str()) {
            self.push_once(
                Diagnostic::error(
                    format!("`{}` is reserved", name.value),
                    Some(name.span.clone()),
                )
                .label("filled in by the runner")
                .help("rename this key"),
            );
        }
    }

    /// Warns about exclude entries that match no combination (a typo in a value, usually).
    fn check_excludes(&mut self, matrix: &RawMatrix, removes: &[u128]) {
        if matrix.incomplete {
            return;
        }
        let axis_names: Vec<&str> = matrix.axes.iter().map(|(n, _)| n.value.as_str()).collect();
        for (entry, &removed) in matrix.exclude.iter().zip(removes) {
            let all_axes = entry
                .value
                .iter()
                .all(|(key, _)| axis_names.contains(&key.value.as_str()));
            let empty_axis = matrix.axes.iter().any(|(_, values)| values.is_empty());
            if removed == 0 && all_axes && !empty_axis && !entry.value.is_empty() {
                let mut diag = Diagnostic::warning(
                    "this `exclude` entry matches no combination",
                    Some(entry.span.clone()),
                )
                .label("excludes nothing");
                // Point at the first value that no axis value equals.
                for (key, value) in &entry.value {
                    let Some((_, values)) = matrix.axes.iter().find(|(n, _)| n.value == key.value)
                    else {
                        continue;
                    };
                    if !values
                        .iter()
                        .any(|v| expand::filter_matches(&value.value, Some(&v.value)))
                    {
                        diag = diag.secondary(
                            value.span.clone(),
                            format!("no value of axis `{}` is {}", key.value, value.value),
                        );
                        break;
                    }
                }
                self.problems.push(diag);
            }
        }
    }

    /// Cells an include entry created that another one already created. (Cells of the product
    /// repeat only when an axis repeats a value, which `check_keys` reports.)
    fn check_duplicates(&mut self, matrix: &RawMatrix, combos: &[Combination<'_>]) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for combo in combos {
            let Some(entry) = combo.created_by else {
                continue;
            };
            let plain = combo.plain();
            let sorted: std::collections::BTreeMap<_, _> = plain.iter().collect();
            let canonical = serde_json::to_string(&sorted).unwrap_or_default();
            let Some(span) = matrix.include.get(entry).map(|e| e.span.clone()) else {
                continue;
            };
            match seen.get(&canonical) {
                Some(&first) => {
                    let mut diag = Diagnostic::error(
                        format!("duplicate cell {}", Value::Object(plain)),
                        Some(span),
                    )
                    .label("this `include` entry repeats an earlier one")
                    .help("each combination may appear once; remove the repeated entry");
                    if let Some(first) = matrix.include.get(first) {
                        diag = diag.secondary(first.span.clone(), "first created here");
                    }
                    self.push_once(diag);
                }
                None => {
                    seen.insert(canonical, entry);
                }
            }
        }
    }

    fn check_placeholders(
        &mut self,
        template: &FieldTemplate<'_>,
        keys: &[String],
        combos: &[Combination<'_>],
    ) {
        // GitHub's own syntax would reach the shell as a "bad substitution".
        let text = &template.field.value;
        let mut from = 0;
        while let Some(start) = text[from..].find("${{").map(|i| from + i) {
            let Some(len) = text[start..].find("}}") else {
                break;
            };
            let end = start + len + 2;
            let inner = text[start + 3..end - 2].trim();
            if let Some(key) = inner.strip_prefix("matrix.") {
                let span = inner_span(self.text, template.field, start..end);
                self.push_once(
                    Diagnostic::error(
                        format!("`${{{{ {inner} }}}}` is GitHub Actions syntax"),
                        Some(span),
                    )
                    .label("not expanded in matrix files")
                    .help(format!("write `{{{key}}}`")),
                );
            }
            from = end;
        }
        for placeholder in template.parsed.placeholders() {
            let name = placeholder.name;
            let span = inner_span(self.text, template.field, placeholder.at.clone());
            if keys.iter().any(|k| k == name) {
                if !placeholder.path.is_empty() {
                    self.check_field_path(name, placeholder.path, span, combos);
                }
                continue;
            }
            if RUNTIME_KEYS.contains(&name) {
                if template.scope == Scope::Cell {
                    self.push_once(
                        Diagnostic::error(
                            format!("`{{{name}}}` is not available in `{}`", template.what),
                            Some(span),
                        )
                        .label("filled in by the runner for server commands only")
                        .help("use it in `[server] command` or `[server] args`"),
                    );
                }
                continue;
            }
            let names: Vec<&str> = keys.iter().map(String::as_str).collect();
            let mut diag = Diagnostic::error(format!("no cell has a key `{name}`"), Some(span))
                .label(format!("keys are: {}", names.join(", ")));
            if let Some(near) = did_you_mean(name, &names) {
                diag = diag.help(format!("did you mean `{{{near}}}`?"));
            }
            self.push_once(diag);
        }
    }

    /// `{key.field}`: some cell's value for `key` must have that field, or the placeholder is a
    /// typo that would render empty everywhere.
    fn check_field_path(
        &mut self,
        name: &str,
        path: &[String],
        span: Span,
        combos: &[Combination<'_>],
    ) {
        fn reach<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
            path.iter()
                .try_fold(value, |value, part| field(value, part))
        }
        let Some((last, parent)) = path.split_last() else {
            return;
        };
        if combos
            .iter()
            .filter_map(|c| c.get(name))
            .any(|value| reach(value, path).is_some())
        {
            return;
        }
        // Name the fields that the deepest reachable level does have.
        let mut fields: BTreeSet<&str> = BTreeSet::new();
        for value in combos.iter().filter_map(|c| c.get(name)) {
            if let Some(Value::Object(map)) = reach(value, parent) {
                fields.extend(map.keys().map(String::as_str));
            }
            if fields.len() > 50 {
                break;
            }
        }
        let full = format!("{name}.{}", path.join("."));
        let mut diag = Diagnostic::error(format!("no cell has a field `{full}`"), Some(span));
        if fields.is_empty() {
            let what = if parent.is_empty() {
                format!("`{name}`")
            } else {
                format!("`{name}.{}`", parent.join("."))
            };
            diag = diag
                .label(format!("no value of {what} is a table"))
                .help(format!("`{{key.field}}` reaches into table values; write `{{{name}}}` for the value itself"));
        } else {
            let candidates: Vec<&str> = fields.into_iter().collect();
            diag = diag.label(format!("fields are: {}", candidates.join(", ")));
            if let Some(near) = did_you_mean(last, &candidates) {
                let mut fixed: Vec<&str> = vec![name];
                fixed.extend(parent.iter().map(String::as_str));
                fixed.push(near);
                diag = diag.help(format!("did you mean `{{{}}}`?", fixed.join(".")));
            }
        }
        self.push_once(diag);
    }

    fn check_package_keys(&mut self, raw: &RawFile, keys: &[String]) {
        for (key, _) in &raw.packages {
            if !keys.contains(&key.value) {
                let candidates: Vec<&str> = keys.iter().map(String::as_str).collect();
                let mut diag = Diagnostic::error(
                    format!("`[packages]` names `{}`, which no cell has", key.value),
                    Some(key.span.clone()),
                )
                .label(format!("keys are: {}", candidates.join(", ")));
                if let Some(near) = did_you_mean(&key.value, &candidates) {
                    diag = diag.help(format!("did you mean `{near}`?"));
                }
                self.problems.push(diag);
            }
        }
    }

    fn check_package_names(&mut self, raw: &RawFile) {
        for (_, names) in &raw.packages {
            for name in names {
                let ok = !name.value.is_empty()
                    && name
                        .value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
                if !ok {
                    self.problems.push(
                        Diagnostic::error(
                            format!("`{}` is not a package name", name.value),
                            Some(name.span.clone()),
                        )
                        .label("expected a PyPI name such as `flashinfer-python`"),
                    );
                }
            }
        }
    }

    fn check_env_names(&mut self, raw: &RawFile) {
        for (name, _) in &raw.env {
            let valid = name
                .value
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name
                    .value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                self.problems.push(
                    Diagnostic::error(
                        format!("`{}` is not an environment variable name", name.value),
                        Some(name.span.clone()),
                    )
                    .label("use letters, digits and `_`, not starting with a digit"),
                );
            }
        }
    }

    fn expectations(&mut self, raw: &RawFile, keys: &[String]) -> Vec<ExpectRule> {
        let mut rules = Vec::new();
        for expect in &raw.expect {
            let mut conditions = Vec::new();
            let reported = self.problems.len();
            for (key, values) in &expect.when {
                if !keys.contains(&key.value) {
                    let names: Vec<&str> = keys.iter().map(String::as_str).collect();
                    let mut diag = Diagnostic::error(
                        format!("`when` names `{}`, which no cell has", key.value),
                        Some(key.span.clone()),
                    )
                    .label(format!("keys are: {}", names.join(", ")));
                    if let Some(near) = did_you_mean(&key.value, &names) {
                        diag = diag.help(format!("did you mean `{near}`?"));
                    }
                    self.problems.push(diag);
                    continue;
                }
                let mut matchers = Vec::new();
                for value in values {
                    match &value.value {
                        Value::String(s)
                            if s.trim_start().starts_with(['<', '>', '=', '!', '~']) =>
                        {
                            match VersionSpecifiers::from_str(s) {
                                Ok(spec) => matchers.push(Matcher::Versions(spec)),
                                Err(err) => {
                                    let (label, at) = version_error(&err.to_string());
                                    let span = match at {
                                        Some(at) => inner_span(
                                            self.text,
                                            &Sp {
                                                value: s.clone(),
                                                span: value.span.clone(),
                                            },
                                            at,
                                        ),
                                        None => value.span.clone(),
                                    };
                                    self.problems.push(
                                        Diagnostic::error(format!("invalid version range \"{s}\""), Some(span))
                                            .label(label)
                                            .help("write PEP 440 specifiers, e.g. \"<=0.6.8.post1\" or \">=0.6.3,<0.6.11\""),
                                    );
                                }
                            }
                        }
                        other => matchers.push(Matcher::Equals(other.clone())),
                    }
                }
                conditions.push((key.value.clone(), matchers));
            }
            rules.push(ExpectRule {
                span: expect.span.clone(),
                broken: self.problems.len() > reported,
                conditions,
                reference: ExpectationRef {
                    signature: expect.signature.as_ref().map(|s| s.value),
                    link: expect.link.as_ref().map(|s| s.value.clone()),
                    reason: expect.reason.as_ref().map(|s| s.value.clone()),
                },
            });
        }
        rules
    }

    /// Builds one cell, reporting what is wrong with it.
    fn cell(
        &mut self,
        raw: &RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_, '_>,
        memo: &mut Memo,
    ) -> Option<Cell> {
        let mut ok = true;
        let gpus = match templates.get(&raw.gpus) {
            None => Vec::new(),
            Some(t) => {
                let mut spec = std::mem::take(&mut memo.buffer);
                spec.clear();
                cx.render_into(t, &mut spec);
                if !memo.gpus.contains_key(spec.as_str()) {
                    memo.gpus.insert(spec.clone(), gpus::parse(&spec));
                }
                let parsed = &memo.gpus[spec.as_str()];
                memo.buffer = spec;
                match parsed {
                    Ok(gpus) => gpus.clone(),
                    Err(err) => {
                        ok = false;
                        let err = err.to_string();
                        self.bad_gpu_spec(t, cx, err);
                        Vec::new()
                    }
                }
            }
        };

        let mut pins = Vec::with_capacity(raw.packages.iter().map(|(_, names)| names.len()).sum());
        for (key, names) in &raw.packages {
            let Some(value) = cx.combo.get(&key.value) else {
                continue;
            };
            let version = match cx.combo.source(&key.value) {
                Some(source) => match memo.versions.get(&source) {
                    Some(version) => version.clone(),
                    None => {
                        let version = self.pin_version(key, value, cx);
                        memo.versions.insert(source, version.clone());
                        version
                    }
                },
                None => self.pin_version(key, value, cx),
            };
            match version {
                Some(version) if version.is_empty() => {}
                Some(version) => {
                    for name in names {
                        pins.push(Pin {
                            name: name.value.clone(),
                            version: version.clone(),
                        });
                    }
                }
                None => ok = false,
            }
        }
        pins.sort();

        let mut env = Vec::with_capacity(raw.env.len());
        for (name, value) in &raw.env {
            let rendered = templates
                .find(value)
                .map_or_else(|| value.value.clone(), |t| cx.render(t));
            if !rendered.is_empty() {
                env.push((name.value.clone(), rendered));
            }
        }

        let (engine, common) = self.engine(raw, templates, cx)?;
        let timeout = common
            .and_then(|c| c.timeout.as_ref())
            .map_or(DEFAULT_TIMEOUT, |t| t.value);
        let no_progress = common
            .and_then(|c| c.no_progress.as_ref())
            .map_or(DEFAULT_NO_PROGRESS, |t| t.value);
        if let Some(np) = common.and_then(|c| c.no_progress.as_ref()) {
            if np.value >= timeout {
                self.push_once(
                    Diagnostic::warning(
                        "`no-progress` is not shorter than `timeout`",
                        Some(np.span.clone()),
                    )
                    .label("a hang will be called a timeout, never a deadlock"),
                );
            }
        }
        let cache = match common
            .and_then(|c| c.cache.as_ref())
            .and_then(|f| templates.find(f))
        {
            None => CacheMode::Warm,
            Some(t) => match cx.render(t).as_str() {
                "" | "warm" => CacheMode::Warm,
                "cold" => CacheMode::Cold,
                other => {
                    ok = false;
                    self.push_once(
                        Diagnostic::error(
                            format!("`cache` must be \"warm\" or \"cold\", found \"{other}\""),
                            Some(t.field.span.clone()),
                        )
                        .label(format!("unknown cache mode (cell `{}`)", cx.id)),
                    );
                    CacheMode::Warm
                }
            },
        };
        let requirements = raw
            .python
            .as_ref()
            .and_then(|p| templates.get(&p.requirements))
            .map(|t| PathBuf::from(cx.render(t)))
            .filter(|p| !p.as_os_str().is_empty());
        ok.then(|| Cell {
            // The caller moves the id in.
            id: CellId(String::new()),
            values: memo.values(cx.combo),
            gpus,
            pins,
            env,
            engine,
            timeout,
            no_progress,
            cache,
            requirements,
            expectation: None,
        })
    }

    /// The version a `[packages]` key's value pins (`Some("")` for no pin), or `None` after
    /// reporting why it is not a version.
    fn pin_version(
        &mut self,
        key: &Sp<String>,
        value: &Value,
        cx: &CellContext<'_, '_>,
    ) -> Option<String> {
        let version = match value {
            Value::String(s) if s.is_empty() => return Some(String::new()),
            Value::String(_) | Value::Number(_) => value_text(value),
            _ => {
                self.push_once(
                    Diagnostic::error(
                        format!(
                            "`{}` is a package version, so its values must be strings",
                            key.value
                        ),
                        cx.value_span(&key.value),
                    )
                    .label("not a version")
                    .secondary(key.span.clone(), "pinned by `[packages]` here"),
                );
                return None;
            }
        };
        if Version::from_str(&version).is_err() {
            self.push_once(
                Diagnostic::error(
                    format!("`{version}` is not a PEP 440 version"),
                    cx.value_span(&key.value),
                )
                .label("not a version")
                .secondary(key.span.clone(), "pinned by `[packages]` here")
                .help("write a version such as \"0.6.8.post1\""),
            );
            return None;
        }
        Some(version)
    }

    /// `[resources] gpus` rendered to something that is not a GPU spec. When the template is one
    /// placeholder, the culprit is the value it came from: point there.
    fn bad_gpu_spec(&mut self, t: &FieldTemplate<'_>, cx: &CellContext<'_, '_>, err: String) {
        let template_span = inner_span(self.text, t.field, 0..t.field.value.len());
        let mut placeholders = t.parsed.placeholders();
        let single = match (placeholders.next(), placeholders.next()) {
            (Some(p), None) if p.at == (0..t.field.value.len()) && p.path.is_empty() => {
                Some(p.name)
            }
            _ => None,
        };
        let diag = match single.and_then(|key| cx.value_span(key)) {
            Some(value_span) => Diagnostic::error("malformed GPU spec", Some(value_span))
                .label(err)
                .secondary(template_span, "used as `[resources] gpus` here")
                .help("a GPU spec is an arch (`sm_90`), a count of one (`2xsm_90`), or several joined by `+` (`sm_86+sm_89`)"),
            None => Diagnostic::error(
                format!("`[resources] gpus` renders to a malformed GPU spec: {err}"),
                Some(template_span),
            )
            .label(format!("in cell `{}`", cx.id))
            .help("a GPU spec is an arch (`sm_90`), a count of one (`2xsm_90`), or several joined by `+` (`sm_86+sm_89`)"),
        };
        self.push_once(diag);
    }

    /// Chooses the cell's engine and renders its settings.
    fn engine<'r>(
        &mut self,
        raw: &'r RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_, '_>,
    ) -> Option<(Engine, Option<&'r raw::RawCommon>)> {
        let name = match templates.get(&raw.engine) {
            Some(t) => cx.render(t),
            None => match (&raw.job, &raw.server) {
                (Some(_), None) => "job".to_owned(),
                (None, Some(_)) => "server".to_owned(),
                (Some(_), Some(_)) => {
                    self.push_once(
                        Diagnostic::error("both `[job]` and `[server]` are set, but no `engine` says which to use", None)
                            .help("add `engine = \"job\"` or `engine = \"server\"` (or `engine = \"{engine}\"` with an axis)"),
                    );
                    return None;
                }
                (None, None) => {
                    let message = "nothing to run: the file has no `[job]`, `[server]` or `engine`";
                    let help = "add `[job]` with `command = \"...\"` (exit 0 = pass)";
                    if self.purpose == Purpose::Inspect {
                        self.push_once(Diagnostic::warning(message, None).help(help));
                        let command = String::new();
                        return Some((Engine::Job { command }, None));
                    }
                    self.push_once(Diagnostic::error(message, None).help(help));
                    return None;
                }
            },
        };
        if name == "job" {
            let Some(job) = &raw.job else {
                self.push_once(
                    Diagnostic::error(
                        "engine `job` needs a `[job]` table",
                        raw.engine.as_ref().map(|e| e.span.clone()),
                    )
                    .label(format!("cell `{}` uses engine `job`", cx.id))
                    .help("add `[job]` with `command = \"...\"` (exit 0 = pass)"),
                );
                return None;
            };
            let Some(command) = templates.get(&job.command) else {
                if job.command_written {
                    // Wrong type or misspelled: reported where it is written.
                    return None;
                }
                self.push_once(
                    Diagnostic::error("`[job]` needs `command`", Some(job.span.clone()))
                        .label("no command")
                        .help("add `command = \"sh smoke.sh {flashinfer}\"` (run with `sh -c`; exit 0 = pass)"),
                );
                return None;
            };
            let rendered = cx.render(command);
            if rendered.trim().is_empty() && self.purpose != Purpose::Inspect {
                // An empty command would exit 0: a typo in an `include` must not turn a cell green.
                self.push_once(
                    Diagnostic::error(
                        format!("the command of cell `{}` is empty", cx.id),
                        Some(command.field.span.clone()),
                    )
                    .label("renders to nothing for this cell")
                    .help("every cell needs a command to run; check the keys this template uses (`gpucompat matrix expand` shows each cell's values)"),
                );
                return None;
            }
            return Some((Engine::Job { command: rendered }, Some(&job.common)));
        }
        let Some(kind) = ServerKind::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| *k)
        else {
            let mut names: Vec<&str> = ServerKind::NAMES.iter().map(|(n, _)| *n).collect();
            names.insert(0, "job");
            let mut diag = Diagnostic::error(
                format!("unknown engine `{name}`"),
                raw.engine.as_ref().map(|e| e.span.clone()),
            )
            .label(format!("engines: {} (cell `{}`)", names.join(", "), cx.id));
            if let Some(near) = did_you_mean(&name, &names) {
                diag = diag.help(format!("did you mean `{near}`?"));
            }
            self.push_once(diag);
            return None;
        };
        let server = raw.server.as_ref();
        let render = |field: Option<&Option<Sp<String>>>| -> Option<String> {
            let t = templates.get(field?)?;
            Some(cx.render(t)).filter(|s| !s.is_empty())
        };
        if kind == ServerKind::Generic && server.and_then(|s| s.command.as_ref()).is_none() {
            if server.is_some_and(|s| s.command_written) {
                return None;
            }
            self.push_once(
                Diagnostic::error("engine `server` needs `[server] command`", server.map(|s| s.span.clone()))
                    .label("no command")
                    .help("add `command = \"python3 serve.py --port {port}\"`, or name a built-in engine (sglang, vllm, ktransformers, flashinfer-probe)"),
            );
            return None;
        }
        let mut number = |field: Option<&Option<Sp<String>>>, what: &str| -> Option<u32> {
            let text = render(field)?;
            match text.trim().parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    let span = field.and_then(|f| f.as_ref()).map(|f| f.span.clone());
                    self.push_once(
                        Diagnostic::error(
                            format!("`{what}` must be a positive whole number, found \"{text}\""),
                            span,
                        )
                        .label(format!("not a number (cell `{}`)", cx.id)),
                    );
                    None
                }
            }
        };
        let tp = number(server.map(|s| &s.tp), "tp");
        let workers = number(server.map(|s| &s.workers), "workers");
        let spec = ServerSpec {
            kind,
            command: render(server.map(|s| &s.command)),
            model: render(server.map(|s| &s.model)),
            tp,
            args: render(server.map(|s| &s.args)),
            health: render(server.map(|s| &s.health)),
            ready_line: render(server.map(|s| &s.ready_line)),
            ready_timeout: server
                .and_then(|s| s.ready_timeout.as_ref())
                .map(|d| d.value),
            endpoint: render(server.map(|s| &s.endpoint)),
            prompt: render(server.map(|s| &s.prompt)),
            max_tokens: server.and_then(|s| s.max_tokens.as_ref()).map(|n| n.value),
            expect: render(server.map(|s| &s.expect)),
            workers,
        };
        for (field, text) in [
            (server.and_then(|s| s.ready_line.as_ref()), &spec.ready_line),
            (server.and_then(|s| s.expect.as_ref()), &spec.expect),
        ] {
            if let (Some(field), Some(text)) = (field, text) {
                if let Err(err) = regex::Regex::new(text) {
                    self.push_once(
                        Diagnostic::error("invalid regex", Some(field.span.clone()))
                            .label(raw::last_line(&err.to_string())),
                    );
                    return None;
                }
            }
        }
        // What the runner would do with these settings must work for every cell: an engine that
        // cannot be launched is bad input now, not an infrastructure error at run time.
        if let Err(err) = crate::engines::resolve(&spec) {
            let inspect = self.purpose == Purpose::Inspect;
            let new = if inspect {
                Diagnostic::warning
            } else {
                Diagnostic::error
            };
            self.push_once(
                new(
                    format!("cell `{}` cannot be launched: {err}", cx.id),
                    server
                        .map(|s| s.span.clone())
                        .or_else(|| raw.engine.as_ref().map(|e| e.span.clone())),
                )
                .label("engine settings")
                .help("built-in engines need `[server] model`; any other server needs `[server] command`"),
            );
            if !inspect {
                return None;
            }
        }
        Some((Engine::Server(Box::new(spec)), server.map(|s| &s.common)))
    }
}

/// What a PEP 440 parse error says, and which part of the text it points at. Its text is
/// "Failed to parse version: WHAT:", then the text, then carets under the part.
fn version_error(text: &str) -> (String, Option<std::ops::Range<usize>>) {
    let mut lines = text.lines();
    let what = lines
        .next()
        .unwrap_or_default()
        .trim_start_matches("Failed to parse version: ")
        .trim_end_matches(':')
        .to_owned();
    let line = lines.next().unwrap_or_default();
    let carets = lines.next().unwrap_or_default();
    let start = carets.len() - carets.trim_start().len();
    let end = carets.trim_end().len();
    let at = (line.is_ascii() && start < end && end <= line.len()).then_some(start..end);
    (what, at)
}

/// The span of `at` (a range in a string's value) in the file, when the string is written plainly
/// (no escapes, one line); otherwise the whole string.
fn inner_span(text: &str, field: &Sp<String>, at: std::ops::Range<usize>) -> Span {
    let span = field.span.clone();
    let Some(written) = text.get(span.clone()) else {
        return span;
    };
    let quote_len = if written.starts_with("\"\"\"") || written.starts_with("'''") {
        3
    } else if written.starts_with('"') || written.starts_with('\'') {
        1
    } else {
        return span;
    };
    match written.get(quote_len..written.len().saturating_sub(quote_len)) {
        Some(inner) if inner == field.value => {
            let start = span.start + quote_len;
            start + at.start..start + at.end
        }
        _ => span,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_utf8_is_located_at_its_first_bad_byte() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("m.toml");
        std::fs::write(&path, b"[matrix]\nn = [\"a\xff\"]\n").expect("write");
        let err = load(&path).expect_err("not UTF-8");
        let LoadError::Invalid { diagnostics, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(diagnostics.len(), 1);
        assert_eq!(diagnostics[0].span, Some(16..19));
        let rendered = err.render();
        assert!(rendered.contains("m.toml:2:8"), "{rendered}");
        assert!(rendered.contains("not valid UTF-8"), "{rendered}");
    }

    #[test]
    fn integers_in_every_base_reach_the_cells() {
        let text = "engine = \"job\"\n[matrix]\nn = [0x1234, 0o17, 0b101, -1_000]\n\
                    [job]\ncommand = \"echo {n}\"\n[server]\nmax-tokens = 0x10\n";
        let loaded = from_str("m.toml", text, Path::new("m.toml"), Path::new("."))
            .unwrap_or_else(|err| panic!("{}", err.render()));
        let commands: Vec<String> = loaded
            .plan
            .cells
            .iter()
            .map(|cell| match &cell.engine {
                Engine::Job { command } => command.clone(),
                Engine::Server(_) => panic!("a job"),
            })
            .collect();
        assert_eq!(commands, ["echo 4660", "echo 15", "echo 5", "echo -1000"]);
    }
}
