//! Validation: every check of a matrix file that reports a problem with its place, collected
//! by [`Checker`] so one `gpucompat check` shows them all. Per-cell checks live in `render`.

use super::expand::{self, Combination, Source};
use super::load::{Purpose, RUNTIME_KEYS};
use super::raw::{RawFile, RawMatrix, Sp, Span};
use super::render::{FieldTemplate, Scope};
use super::template::{field, value_text};
use crate::diag::Diagnostic;
use crate::record::ExpectationRef;
use crate::suggest::did_you_mean;
use pep440_rs::{Version, VersionSpecifiers};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::str::FromStr;

/// For each exclude entry, how many combinations of the product it matches on its own.
pub(super) fn exclude_counts(axes: &[expand::Axis], exclude: &[expand::Entry]) -> Vec<u128> {
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

/// A compiled `[[expect]]` rule.
pub(super) struct ExpectRule {
    pub(super) span: Span,
    /// A condition of it was reported as invalid (and left out), so "matches no cell" would be
    /// a consequence, not news.
    pub(super) broken: bool,
    pub(super) conditions: Vec<(String, Vec<Matcher>)>,
    pub(super) reference: ExpectationRef,
}

impl ExpectRule {
    pub(super) fn matches(
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

pub(super) enum Matcher {
    /// Equal as `include`/`exclude` compare: GitHub's `==`, tables field by field.
    Equals(Value),
    /// `"<=0.6.8.post1"`, `">=0.6.3,<0.6.11"`: PEP 440 comparison of the cell's value.
    Versions(VersionSpecifiers),
}

impl Matcher {
    /// `value` is `None` when the cell lacks the key.
    pub(super) fn matches(&self, value: Option<&Value>) -> bool {
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

pub(super) struct Checker<'t, 'p> {
    pub(super) text: &'t str,
    pub(super) problems: &'p mut Vec<Diagnostic>,
    /// (span, message) pairs already reported, so a per-cell problem shows once.
    pub(super) once: HashSet<(usize, usize, String)>,
    /// Per place: how many different problems, and the index of the last one shown.
    pub(super) per_place: HashMap<(usize, usize), (usize, usize)>,
    pub(super) purpose: Purpose,
}

impl<'t, 'p> Checker<'t, 'p> {
    pub(super) fn new(text: &'t str, problems: &'p mut Vec<Diagnostic>, purpose: Purpose) -> Self {
        Checker {
            text,
            problems,
            once: HashSet::new(),
            per_place: HashMap::new(),
            purpose,
        }
    }
}

/// The most different problems shown at one place in the file.
pub(super) const MAX_PER_PLACE: usize = 3;

impl Checker<'_, '_> {
    /// Reports a problem unless the same one was reported at the same place; at most
    /// [`MAX_PER_PLACE`] different ones per place (a template that renders badly for a thousand
    /// values is one problem to fix, not a thousand), the rest counted by [`Checker::finish`].
    pub(super) fn push_once(&mut self, diag: Diagnostic) {
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
    pub(super) fn finish(&mut self) {
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

    pub(super) fn check_keys(&mut self, matrix: &RawMatrix) {
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

    pub(super) fn check_key_name(&mut self, name: &Sp<String>) {
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
    pub(super) fn check_excludes(&mut self, matrix: &RawMatrix, removes: &[u128]) {
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
    pub(super) fn check_duplicates(&mut self, matrix: &RawMatrix, combos: &[Combination<'_>]) {
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

    pub(super) fn check_placeholders(
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
    pub(super) fn check_field_path(
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

    pub(super) fn check_package_keys(&mut self, raw: &RawFile, keys: &[String]) {
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

    pub(super) fn check_package_names(&mut self, raw: &RawFile) {
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

    /// `[runners]`: labels a runner can carry (no spaces or commas, which GitHub's label lists
    /// split on), arch keys that are archs, and an `arch-label` template with only `{arch}`.
    pub(super) fn check_runners(&mut self, raw: &RawFile) {
        let Some(runners) = &raw.runners else {
            return;
        };
        let mut labels: Vec<&Sp<String>> = runners.labels.iter().flatten().collect();
        labels.extend(runners.arch.iter().flat_map(|(_, l)| l));
        for label in labels {
            let bad = label.value.is_empty()
                || label.value.chars().any(|c| c.is_whitespace() || c == ',');
            if bad {
                self.problems.push(
                    Diagnostic::error(
                        format!("`{}` is not a runner label", label.value),
                        Some(label.span.clone()),
                    )
                    .label("a label is a non-empty word without spaces or commas"),
                );
            }
        }
        for (arch, _) in &runners.arch {
            if !crate::matrix::gpus::is_arch(&arch.value) {
                self.problems.push(
                    Diagnostic::error(
                        format!("`{}` in [runners.arch] is not a GPU arch", arch.value),
                        Some(arch.span.clone()),
                    )
                    .label("expected an arch such as `sm_90`"),
                );
            }
        }
        if let Some(template) = &runners.arch_label {
            let rest = template.value.replace("{arch}", "");
            if !template.value.contains("{arch}") || rest.contains(['{', '}', ' ', ',']) {
                self.problems.push(
                    Diagnostic::error(
                        format!(
                            "arch-label `{}` must name `{{arch}}` and nothing else",
                            template.value
                        ),
                        Some(template.span.clone()),
                    )
                    .label("e.g. `gpu-{arch}` gives `gpu-sm_90`"),
                );
            }
        }
    }

    pub(super) fn check_env_names(&mut self, raw: &RawFile) {
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

    pub(super) fn expectations(&mut self, raw: &RawFile, keys: &[String]) -> Vec<ExpectRule> {
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
}

/// What a PEP 440 parse error says, and which part of the text it points at. Its text is
/// "Failed to parse version: WHAT:", then the text, then carets under the part.
pub(super) fn version_error(text: &str) -> (String, Option<std::ops::Range<usize>>) {
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
pub(super) fn inner_span(text: &str, field: &Sp<String>, at: std::ops::Range<usize>) -> Span {
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
