//! Stage two: validate the raw file and build the [`Plan`].
//!
//! Every check here records a [`Diagnostic`] and carries on, so one `gpucompat check` shows all
//! the problems of a file. Per-cell problems (a template that renders to a bad GPU spec, a value
//! that is not a version) are reported once per place in the file, naming the first cell.

use super::expand::{self, Combination, Source};
use super::raw::{self, RawFile, RawMatrix, Sp, Span, did_you_mean};
use super::template::{Template, value_text};
use super::{gpus, ids};
use crate::diag::{self, Diagnostic};
use crate::matrix::plan::*;
use crate::record::{ExpectationRef, Values};
use pep440_rs::{Version, VersionSpecifiers};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
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
    #[error("matrix file `{path}` is not valid UTF-8")]
    Encoding { path: String },
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
            LoadError::Encoding { .. } => format!("error: {self}"),
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
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
        path: name.clone(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| LoadError::Encoding { path: name.clone() })?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    from_str(&name, &text, path, &dir)
}

/// Validates matrix text; `path` and `dir` only end up in the plan.
pub fn from_str(name: &str, text: &str, path: &Path, dir: &Path) -> Result<Loaded, LoadError> {
    let mut problems = Vec::new();
    let plan = build(text, path, dir, &mut problems);
    let (errors, warnings): (Vec<_>, Vec<_>) = problems.into_iter().partition(Diagnostic::is_error);
    match plan {
        Some(plan) if errors.is_empty() => Ok(Loaded {
            plan,
            warnings: if warnings.is_empty() {
                String::new()
            } else {
                diag::render(name, text, &warnings)
            },
        }),
        _ => {
            let mut diagnostics = errors;
            diagnostics.extend(warnings);
            Err(LoadError::Invalid {
                path: name.to_owned(),
                text: text.to_owned(),
                diagnostics,
            })
        }
    }
}

fn build(text: &str, path: &Path, dir: &Path, problems: &mut Vec<Diagnostic>) -> Option<Plan> {
    let raw = raw::parse(text, problems);
    let matrix = raw.matrix.as_ref()?;
    let mut cx = Checker {
        text,
        problems,
        once: HashSet::new(),
    };
    cx.check_keys(matrix);

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
    let combos = expand::expand(&axes, &plain(&matrix.exclude), &plain(&matrix.include));
    if combos.is_empty() {
        let help = if matrix.exclude.is_empty() {
            "add at least one axis with values, or an `include` entry"
        } else {
            "`exclude` removed every combination; check its entries"
        };
        cx.problems.push(
            Diagnostic::error("the matrix has no cells", Some(matrix.span.clone()))
                .label("expands to nothing")
                .help(help),
        );
        return None;
    }
    cx.check_duplicates(matrix, &combos);

    let values: Vec<Values> = combos.iter().map(Combination::plain).collect();
    // A cell of the product is identified by its axis values alone, so keys that `include` adds
    // (a model path, engine flags) neither lengthen ids nor change them when edited.
    let identities: Vec<Values> = combos
        .iter()
        .zip(&values)
        .map(|(combo, values)| match combo.created_by {
            Some(_) => values.clone(),
            None => values
                .iter()
                .filter(|(key, _)| axes.iter().any(|(axis, _)| axis == *key))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
        .collect();
    let cell_ids = ids::assign(&identities);
    let keys = all_keys(&combos);
    let templates = Templates::collect(&raw);
    for template in &templates.all {
        cx.check_placeholders(template, &keys);
    }
    cx.check_packages(&raw, &keys);
    let expectations = cx.expectations(&raw, &keys);

    let mut cells = Vec::with_capacity(combos.len());
    let mut matched = vec![false; expectations.len()];
    for ((combo, values), id) in combos.iter().zip(values).zip(cell_ids) {
        let cell_cx = CellContext {
            id: &id,
            values: &values,
            combo,
            matrix,
        };
        let Some(mut cell) = cx.cell(&raw, &templates, &cell_cx) else {
            continue;
        };
        if let Some(index) = expectations.iter().position(|rule| rule.matches(&values)) {
            matched[index] = true;
            cell.expectation = Some(expectations[index].reference.clone());
        }
        cells.push(cell);
    }
    // Only meaningful when every cell was built; otherwise "matches nothing" is noise.
    let all_built = cells.len() == combos.len();
    for (rule, matched) in expectations.iter().zip(matched) {
        if all_built && !matched {
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
    });
    Some(Plan {
        path: path.to_path_buf(),
        dir: dir.to_path_buf(),
        file_hash: hex(&Sha256::digest(text.as_bytes())),
        keys,
        cells,
        retry,
        rules,
        python,
    })
}

/// Every key a cell can have: axes first, then keys added by `include`, in order of appearance.
fn all_keys(combos: &[Combination]) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for combo in combos {
        for key in combo.values.keys() {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    keys
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
        self.all.iter().find(|t| std::ptr::eq(t.field, field))
    }
}

/// What one cell is rendered from.
struct CellContext<'c> {
    id: &'c str,
    values: &'c Values,
    combo: &'c Combination,
    matrix: &'c RawMatrix,
}

impl CellContext<'_> {
    fn render(&self, template: &FieldTemplate<'_>) -> String {
        template.parsed.render(|name| {
            if RUNTIME_KEYS.contains(&name) && !self.values.contains_key(name) {
                None
            } else {
                Some(self.values.get(name).cloned())
            }
        })
    }

    /// Where the cell's value for `key` was written in the file.
    fn value_span(&self, key: &str) -> Option<Span> {
        let (_, source) = self.combo.values.get(key)?;
        match *source {
            Source::Axis { axis, value } => Some(self.matrix.axes[axis].1[value].span.clone()),
            Source::Include { entry, key } => {
                Some(self.matrix.include[entry].value[key].1.span.clone())
            }
        }
    }
}

/// A compiled `[[expect]]` rule.
struct ExpectRule {
    span: Span,
    conditions: Vec<(String, Vec<Matcher>)>,
    reference: ExpectationRef,
}

impl ExpectRule {
    fn matches(&self, values: &Values) -> bool {
        self.conditions.iter().all(|(key, matchers)| {
            let value = values.get(key).unwrap_or(&Value::Null);
            matchers.iter().any(|m| m.matches(value))
        })
    }
}

enum Matcher {
    Equals(Value),
    /// `"<=0.6.8.post1"`, `">=0.6.3,<0.6.11"`: PEP 440 comparison of the cell's value.
    Versions(VersionSpecifiers),
}

impl Matcher {
    fn matches(&self, value: &Value) -> bool {
        match self {
            Matcher::Equals(expected) => expected == value,
            Matcher::Versions(specifiers) => {
                let text = value_text(value);
                Version::from_str(&text).is_ok_and(|v| specifiers.contains(&v))
            }
        }
    }
}

struct Checker<'t, 'p> {
    text: &'t str,
    problems: &'p mut Vec<Diagnostic>,
    /// (span, message) pairs already reported, so a per-cell problem shows once.
    once: HashSet<(usize, usize, String)>,
}

impl Checker<'_, '_> {
    fn push_once(&mut self, diag: Diagnostic) {
        let span = diag.span.clone().unwrap_or(0..0);
        if self
            .once
            .insert((span.start, span.end, diag.message.clone()))
        {
            self.problems.push(diag);
        }
    }

    fn check_keys(&mut self, matrix: &RawMatrix) {
        let axis_names: Vec<&str> = matrix.axes.iter().map(|(n, _)| n.value.as_str()).collect();
        for (name, values) in &matrix.axes {
            self.check_key_name(name);
            if values.is_empty() {
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
                if values[..i]
                    .iter()
                    .any(|earlier| earlier.value == value.value)
                {
                    self.problems.push(
                        Diagnostic::error(
                            format!("duplicate value {} in axis `{}`", value.value, name.value),
                            Some(value.span.clone()),
                        )
                        .label("already listed"),
                    );
                }
            }
        }
        for entry in &matrix.exclude {
            for (key, _) in &entry.value {
                if !axis_names.contains(&key.value.as_str()) {
                    let mut diag = Diagnostic::error(
                        format!("exclude key `{}` is not an axis", key.value),
                        Some(key.span.clone()),
                    )
                    .label(format!("axes are: {}", axis_names.join(", ")));
                    if let Some(near) = did_you_mean(&key.value, &axis_names) {
                        diag = diag.help(format!("did you mean `{near}`?"));
                    }
                    self.problems.push(diag);
                }
            }
        }
        for entry in &matrix.include {
            for (key, _) in &entry.value {
                self.check_key_name(key);
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

    fn check_duplicates(&mut self, matrix: &RawMatrix, combos: &[Combination]) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (index, combo) in combos.iter().enumerate() {
            let canonical = canonical(&combo.plain());
            if let Some(&first) = seen.get(&canonical) {
                let span = combo.created_by.map_or(matrix.span.clone(), |entry| {
                    matrix.include[entry].span.clone()
                });
                self.push_once(
                    Diagnostic::error(
                        format!("duplicate cell {}", Value::Object(combo.plain())),
                        Some(span),
                    )
                    .label(format!("same values as cell #{}", first + 1))
                    .help("each combination may appear once; remove the repeated entry"),
                );
            } else {
                seen.insert(canonical, index);
            }
        }
    }

    fn check_placeholders(&mut self, template: &FieldTemplate<'_>, keys: &[String]) {
        for placeholder in template.parsed.placeholders() {
            let name = placeholder.name;
            if keys.iter().any(|k| k == name) {
                continue;
            }
            let span = inner_span(self.text, template.field, placeholder.at.clone());
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

    fn check_packages(&mut self, raw: &RawFile, keys: &[String]) {
        for (key, names) in &raw.packages {
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

    fn expectations(&mut self, raw: &RawFile, keys: &[String]) -> Vec<ExpectRule> {
        let mut rules = Vec::new();
        for expect in &raw.expect {
            let mut conditions = Vec::new();
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
                        Value::String(s) if s.starts_with(['<', '>', '=', '!', '~']) => {
                            match VersionSpecifiers::from_str(s) {
                                Ok(spec) => matchers.push(Matcher::Versions(spec)),
                                Err(err) => self.problems.push(
                                    Diagnostic::error("invalid version range", Some(value.span.clone()))
                                        .label(err.to_string().lines().next().unwrap_or_default().to_owned())
                                        .help("write PEP 440 specifiers, e.g. \"<=0.6.8.post1\" or \">=0.6.3,<0.6.11\""),
                                ),
                            }
                        }
                        other => matchers.push(Matcher::Equals(other.clone())),
                    }
                }
                conditions.push((key.value.clone(), matchers));
            }
            rules.push(ExpectRule {
                span: expect.span.clone(),
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
        cx: &CellContext<'_>,
    ) -> Option<Cell> {
        let mut ok = true;
        let gpus = match templates.get(&raw.gpus) {
            None => Vec::new(),
            Some(t) => {
                let spec = cx.render(t);
                match gpus::parse(&spec) {
                    Ok(gpus) => gpus,
                    Err(err) => {
                        ok = false;
                        let span = inner_span(self.text, t.field, 0..t.field.value.len());
                        self.push_once(
                            Diagnostic::error(
                                format!("malformed GPU spec in cell `{}`", cx.id),
                                Some(span),
                            )
                            .label(err.to_string()),
                        );
                        Vec::new()
                    }
                }
            }
        };

        let mut pins = Vec::new();
        for (key, names) in &raw.packages {
            let Some(value) = cx.values.get(&key.value) else {
                continue;
            };
            let version = match value {
                Value::String(s) if s.is_empty() => continue,
                Value::String(_) | Value::Number(_) => value_text(value),
                _ => {
                    ok = false;
                    self.push_once(
                        Diagnostic::error(
                            format!(
                                "`{}` is a package version, so its values must be strings",
                                key.value
                            ),
                            cx.value_span(&key.value),
                        )
                        .label("not a version"),
                    );
                    continue;
                }
            };
            if Version::from_str(&version).is_err() {
                ok = false;
                self.push_once(
                    Diagnostic::error(
                        format!(
                            "`{version}` is not a PEP 440 version (pinned by `[packages]` `{}`)",
                            key.value
                        ),
                        cx.value_span(&key.value),
                    )
                    .label("not a version")
                    .help("write a version such as \"0.6.8.post1\""),
                );
                continue;
            }
            for name in names {
                pins.push(Pin {
                    name: name.value.clone(),
                    version: version.clone(),
                });
            }
        }
        pins.sort();

        let mut env = Vec::new();
        for (name, value) in &raw.env {
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
                ok = false;
                self.push_once(
                    Diagnostic::error(
                        format!("`{}` is not an environment variable name", name.value),
                        Some(name.span.clone()),
                    )
                    .label("use letters, digits and `_`, not starting with a digit"),
                );
                continue;
            }
            let rendered = templates
                .all
                .iter()
                .find(|t| std::ptr::eq(t.field, value))
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
        let cache_field = common.and_then(|c| c.cache.as_ref());
        let cache = match cache_field
            .and_then(|f| templates.all.iter().find(|t| std::ptr::eq(t.field, f)))
        {
            None => CacheMode::Warm,
            Some(t) => match cx.render(t).as_str() {
                "" | "warm" => CacheMode::Warm,
                "cold" => CacheMode::Cold,
                other => {
                    ok = false;
                    self.push_once(
                        Diagnostic::error(format!("`cache` must be \"warm\" or \"cold\", found \"{other}\" in cell `{}`", cx.id), Some(t.field.span.clone()))
                            .label("unknown cache mode"),
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
            id: CellId(cx.id.to_owned()),
            values: cx.values.clone(),
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

    /// Chooses the cell's engine and renders its settings.
    fn engine<'r>(
        &mut self,
        raw: &'r RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_>,
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
                    self.push_once(
                        Diagnostic::error(
                            "nothing to run: the file has no `[job]`, `[server]` or `engine`",
                            None,
                        )
                        .help("add `[job]` with `command = \"...\"` (exit 0 = pass)"),
                    );
                    return None;
                }
            },
        };
        if name == "job" {
            let Some(job) = &raw.job else {
                self.push_once(
                    Diagnostic::error(
                        format!(
                            "cell `{}` uses engine `job`, but there is no `[job]`",
                            cx.id
                        ),
                        raw.engine.as_ref().map(|e| e.span.clone()),
                    )
                    .label("needs `[job] command`"),
                );
                return None;
            };
            let Some(command) = templates.get(&job.command) else {
                self.push_once(
                    Diagnostic::error("`[job]` needs `command`", Some(job.span.clone()))
                        .label("no command")
                        .help("add `command = \"sh smoke.sh {flashinfer}\"` (run with `sh -c`; exit 0 = pass)"),
                );
                return None;
            };
            return Some((
                Engine::Job {
                    command: cx.render(command),
                },
                Some(&job.common),
            ));
        }
        let Some(kind) = ServerKind::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| *k)
        else {
            let mut names: Vec<&str> = ServerKind::NAMES.iter().map(|(n, _)| *n).collect();
            names.insert(0, "job");
            let mut diag = Diagnostic::error(
                format!("unknown engine `{name}` in cell `{}`", cx.id),
                raw.engine.as_ref().map(|e| e.span.clone()),
            )
            .label(format!("engines: {}", names.join(", ")));
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
                        Diagnostic::error(format!("`{what}` must be a positive whole number, found \"{text}\" in cell `{}`", cx.id), span)
                            .label("not a number"),
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
                        Diagnostic::error("invalid regex", Some(field.span.clone())).label(
                            err.to_string()
                                .lines()
                                .last()
                                .unwrap_or_default()
                                .trim()
                                .to_owned(),
                        ),
                    );
                    return None;
                }
            }
        }
        Some((Engine::Server(Box::new(spec)), server.map(|s| &s.common)))
    }
}

/// Canonical text of a cell's values (keys sorted), for duplicate detection.
fn canonical(values: &Values) -> String {
    let sorted: std::collections::BTreeMap<_, _> = values.iter().collect();
    serde_json::to_string(&sorted).unwrap_or_default()
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
