//! Stage two: validate the raw file and build the [`Plan`], in named steps (see [`build`]): the
//! checks live in `validate`, per-cell rendering in `render`.
//!
//! Every check records a [`Diagnostic`] and carries on, so one `gpucompat check` shows all
//! the problems of a file. Per-cell problems (a template that renders to a bad GPU spec, a value
//! that is not a version) are reported once per place in the file, naming the first cell.
//!
//! Large matrices: expansion borrows the file's values, and everything that is the same for many
//! cells (a version's validity, a rule's verdict on a value, a parsed GPU spec) is worked out once
//! per distinct value, so the cost per cell is building its values, id and rendered strings.

use super::expand::{self, Combination};
use super::ids;
use super::raw::{self, RawFile, RawMatrix, Sp};
use super::render::{CellContext, Memo, Templates};
use super::validate::{Checker, ExpectRule, exclude_counts};
use crate::diag::{self, Diagnostic};
use crate::digest::sha256_hex;
use crate::matrix::plan::*;
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Whole-cell deadline when the file sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Idle window when the file sets none.
pub const DEFAULT_NO_PROGRESS: Duration = Duration::from_secs(5 * 60);

/// Placeholders the runner fills, allowed only in server settings.
pub(super) const RUNTIME_KEYS: &[&str] = &["port", "engine_dir"];

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
            Diagnostic::error(
                "the matrix file is not valid UTF-8",
                Some(at..at + '\u{FFFD}'.len_utf8()),
            )
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
pub(super) enum Purpose {
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

/// Parses, validates and renders: the stages, each a step below.
fn build(
    text: &str,
    path: &Path,
    dir: &Path,
    purpose: Purpose,
    problems: &mut Vec<Diagnostic>,
) -> Option<Plan> {
    let raw = raw::parse(text, problems)?;
    let matrix = raw.matrix.as_ref()?;
    let mut cx = Checker::new(text, problems, purpose);
    cx.check_keys(matrix);
    // Checks that need no cells come first, so they are reported even when expansion fails.
    cx.check_env_names(&raw);
    cx.check_package_names(&raw);
    cx.check_runners(&raw);

    let (axes, exclude, include) = plain(matrix);
    let combos = expand_checked(&mut cx, matrix, &axes, &exclude, &include)?;
    let cell_ids = ids::assign_parts(&identities(&axes, &combos).cells());

    let keys = all_keys(&combos);
    let templates = Templates::collect(&raw);
    for template in &templates.all {
        cx.check_placeholders(template, &keys, &combos);
    }
    cx.check_package_keys(&raw, &keys);
    let expectations = cx.expectations(&raw, &keys);
    let cells = render_cells(&mut cx, &raw, &templates, &combos, cell_ids, &expectations);
    Some(Plan {
        path: path.to_path_buf(),
        dir: dir.to_path_buf(),
        file_hash: sha256_hex(text.as_bytes(), 32),
        name: raw.name.clone(),
        description: raw.description.clone(),
        replay: raw.replay,
        keys,
        cells: cells?,
        retry: retry_policy(&raw),
        rules: user_rules(&raw),
        python: python_env(&raw),
        runners: runners(&raw),
        slurm: slurm_settings(&raw),
    })
}

/// `[runners]` without spans; labels the file does not set keep their defaults.
fn runners(raw: &RawFile) -> Runners {
    let Some(r) = &raw.runners else {
        return Runners::default();
    };
    let strings = |list: &[Sp<String>]| list.iter().map(|s| s.value.clone()).collect();
    Runners {
        labels: r.labels.as_deref().map(strings),
        arch_label: r.arch_label.as_ref().map(|s| s.value.clone()),
        arch: r
            .arch
            .iter()
            .map(|(arch, labels)| (arch.value.clone(), strings(labels)))
            .collect(),
    }
}

/// The matrix without its spans, as [`expand`] takes it.
fn plain(matrix: &RawMatrix) -> (Vec<expand::Axis>, Vec<expand::Entry>, Vec<expand::Entry>) {
    let axes = matrix
        .axes
        .iter()
        .map(|(name, values)| {
            (
                name.value.clone(),
                values.iter().map(|v| v.value.clone()).collect(),
            )
        })
        .collect();
    let entries = |entries: &[Sp<raw::RawCombo>]| -> Vec<expand::Entry> {
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
    (axes, entries(&matrix.exclude), entries(&matrix.include))
}

/// Expands the matrix, reporting a product that is too large, a matrix with no cells, exclude
/// entries that match nothing and duplicate cells.
fn expand_checked<'m>(
    cx: &mut Checker<'_, '_>,
    matrix: &RawMatrix,
    axes: &'m [expand::Axis],
    exclude: &'m [expand::Entry],
    include: &'m [expand::Entry],
) -> Option<Vec<Combination<'m>>> {
    let removes = exclude_counts(axes, exclude);
    cx.check_excludes(matrix, &removes);
    let combos = match expand::expand(axes, exclude, include) {
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
        if !matrix.incomplete {
            // Otherwise some of the matrix was left out as invalid: that is the problem to fix.
            cx.problems.push(no_cells(matrix, axes, &removes));
        }
        return None;
    }
    if !matrix.incomplete {
        cx.check_duplicates(matrix, &combos);
    }
    Some(combos)
}

/// "The matrix has no cells", with what each exclude entry removed.
fn no_cells(matrix: &RawMatrix, axes: &[expand::Axis], removes: &[u128]) -> Diagnostic {
    let diag = Diagnostic::error("the matrix has no cells", Some(matrix.span.clone()))
        .label("expands to nothing");
    if matrix.exclude.is_empty() {
        return diag.help("add at least one axis with values, or an `include` entry");
    }
    let total = expand::product_size(axes).unwrap_or(0);
    matrix
        .exclude
        .iter()
        .zip(removes)
        .fold(diag, |diag, (entry, removed)| {
            diag.secondary(
                entry.span.clone(),
                format!("excludes {} of {total}", removed.min(&total)),
            )
        })
        .help("`exclude` removed every combination; check its entries")
}

/// The values that identify each cell, in one flat list cut per cell.
///
/// A cell is identified by its axis values alone, so keys that `include` adds (a model path,
/// engine flags) neither lengthen ids nor change them when edited, and a cell an include entry
/// created keeps its id if its values later join the axes. Only a cell with no axis value at
/// all (a matrix of includes only) is identified by all its values.
struct Identities<'m> {
    flat: Vec<(&'m str, &'m Value)>,
    ends: Vec<usize>,
}

impl<'m> Identities<'m> {
    fn cells(&self) -> Vec<&[(&'m str, &'m Value)]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let cell = &self.flat[start..end];
                start = end;
                cell
            })
            .collect()
    }
}

fn identities<'m>(axes: &[expand::Axis], combos: &[Combination<'m>]) -> Identities<'m> {
    let axis_position = |key: &str| axes.iter().position(|(name, _)| name == key);
    let mut flat: Vec<(&str, &Value)> = Vec::with_capacity(combos.len() * axes.len());
    let mut ends: Vec<usize> = Vec::with_capacity(combos.len());
    for combo in combos {
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
    Identities { flat, ends }
}

/// Renders every cell and gives it its id and known failure; warns about `[[expect]]` rules
/// that match no cell. `None` when a cell could not be built (already reported).
fn render_cells(
    cx: &mut Checker<'_, '_>,
    raw: &RawFile,
    templates: &Templates<'_>,
    combos: &[Combination<'_>],
    cell_ids: Vec<String>,
    expectations: &[ExpectRule],
) -> Option<Vec<Cell>> {
    let matrix = raw.matrix.as_ref()?;
    let mut cells = Vec::with_capacity(combos.len());
    let mut matched = vec![false; expectations.len()];
    let mut memo = Memo::default();
    for (combo, id) in combos.iter().zip(cell_ids) {
        let cell_cx = CellContext {
            id: &id,
            combo,
            matrix,
        };
        let Some(mut cell) = cx.cell(raw, templates, &cell_cx, &mut memo) else {
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
    Some(cells)
}

fn retry_policy(raw: &RawFile) -> RetryPolicy {
    raw.retry
        .as_ref()
        .map_or_else(RetryPolicy::default, |r| RetryPolicy {
            count: r.count.as_ref().map_or(0, |c| c.value),
            on: r.on.iter().map(|s| s.value).collect(),
        })
}

fn slurm_settings(raw: &RawFile) -> SlurmSettings {
    let Some(slurm) = &raw.slurm else {
        return SlurmSettings::default();
    };
    let text = |s: &Option<Sp<String>>| s.as_ref().map(|s| s.value.clone());
    SlurmSettings {
        partition: text(&slurm.partition),
        constraint_prefix: text(&slurm.constraint_prefix),
        features: slurm
            .features
            .iter()
            .map(|(arch, feature)| (arch.value.clone(), feature.value.clone()))
            .collect(),
        args: slurm.args.iter().map(|a| a.value.clone()).collect(),
        time_limit: slurm.time_limit.as_ref().map(|d| d.value),
        time_margin: slurm.time_margin.as_ref().map(|d| d.value),
    }
}

fn user_rules(raw: &RawFile) -> Vec<UserRule> {
    raw.rules
        .iter()
        .map(|r| UserRule {
            pattern: r.pattern.value.clone(),
            signature: r.signature.value,
            precedence: r.precedence,
            spurious: r.spurious,
            explanation: r.explanation.clone(),
            hint: r.hint.clone(),
        })
        .collect()
}

fn python_env(raw: &RawFile) -> Option<PythonEnv> {
    raw.python.as_ref().map(|p| PythonEnv {
        python: p.python.as_ref().map(|s| s.value.clone()),
        requirements: p.requirements.as_ref().map(|s| PathBuf::from(&s.value)),
        index_url: p.index_url.as_ref().map(|s| s.value.clone()),
        find_links: p
            .find_links
            .iter()
            .map(|s| PathBuf::from(&s.value))
            .collect(),
        site: p.site.iter().map(|s| PathBuf::from(&s.value)).collect(),
        no_index: p.no_index.as_ref().is_some_and(|b| b.value),
        system_site_packages: p.system_site_packages.as_ref().is_some_and(|b| b.value),
        no_deps: p.no_deps.as_ref().is_some_and(|b| b.value),
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
