//! The cells a bisect runs: the chosen cell with one axis value replaced, or with a pin set.
//!
//! A probe for axis value `V` is rendered by the matrix loader itself, so `{axis}` templates,
//! `[packages]` pins, `include` keys and expectations all see `V`: the matrix text is read as
//! TOML, `V` is appended to the axis's values, and the result is loaded like any matrix file.
//! Nothing else in the file changes, so the probe is the cell a user would get by adding `V` to
//! the axis. The plan keeps the original file's hash: the bisect folder belongs to that file.
//!
//! An attribution probe is the chosen cell with its pins replaced (the base set with some bumps
//! applied), named `<cell>-attr-<hash of the pin set>` so pin sets never share a record.

use super::index::normalize;
use crate::digest::sha256_hex;
use crate::matrix::{self, Cell, CellId, Pin, Plan, template::value_text};
use std::path::Path;

/// A bisect could not be set up from its input.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{0}")]
    Matrix(String),
    #[error("{0}")]
    Usage(String),
}

fn usage(text: impl Into<String>) -> InputError {
    InputError::Usage(text.into())
}

/// The matrix as TOML, for adding values to an axis.
#[derive(Debug, Clone)]
pub struct MatrixSource {
    pub path: std::path::PathBuf,
    text: String,
    table: toml::Table,
    pub plan: Plan,
}

impl MatrixSource {
    pub fn load(path: &Path) -> Result<MatrixSource, InputError> {
        let plan = matrix::load(path).map_err(|e| InputError::Matrix(e.render()))?;
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("cannot read `{}`: {e}", path.display())))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e| InputError::Matrix(format!("{}: {e}", path.display())))?;
        Ok(MatrixSource {
            path: path.to_path_buf(),
            text,
            table,
            plan,
        })
    }

    /// The axes of `[matrix]`, in file order.
    pub fn axes(&self) -> Vec<String> {
        self.matrix_table()
            .map(|m| {
                m.iter()
                    .filter(|(k, v)| v.is_array() && *k != "include" && *k != "exclude")
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn matrix_table(&self) -> Option<&toml::Table> {
        self.table.get("matrix").and_then(toml::Value::as_table)
    }

    /// The packages `[packages]` pins from `axis`, in file order.
    pub fn packages_of(&self, axis: &str) -> Vec<String> {
        match self.table.get("packages").and_then(|p| p.get(axis)) {
            Some(toml::Value::String(name)) => vec![name.clone()],
            Some(toml::Value::Array(names)) => names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The plan with `values` added to `axis` (each once), under the original file's hash.
    pub fn with_values(&self, axis: &str, values: &[String]) -> Result<Plan, InputError> {
        let mut table = self.table.clone();
        let Some(list) = table
            .get_mut("matrix")
            .and_then(|m| m.get_mut(axis))
            .and_then(toml::Value::as_array_mut)
        else {
            return Err(usage(format!("`{axis}` is not an axis of the matrix")));
        };
        for value in values {
            if !list.iter().any(|v| toml_text(v) == *value) {
                list.push(toml::Value::String(value.clone()));
            }
        }
        let text = toml::to_string(&table)
            .map_err(|e| InputError::Matrix(format!("cannot rewrite the matrix: {e}")))?;
        let name = self.path.display().to_string();
        let mut plan = matrix::from_str(&name, &text, &self.plan.path, &self.plan.dir)
            .map_err(|e| InputError::Matrix(e.render()))?
            .plan;
        plan.file_hash = self.plan.file_hash.clone();
        debug_assert_eq!(plan.file_hash, sha256_hex(self.text.as_bytes(), 32));
        Ok(plan)
    }
}

fn toml_text(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The text of a cell's value for `key`.
pub fn value_of(cell: &Cell, key: &str) -> Option<String> {
    cell.values.get(key).map(value_text)
}

/// The cell a version bisect explains: `--cell`, or the one combination of the other axes.
pub fn choose_version_cell<'p>(
    plan: &'p Plan,
    axes: &[String],
    axis: &str,
    wanted: Option<&str>,
) -> Result<&'p Cell, InputError> {
    if !axes.iter().any(|a| a == axis) {
        return Err(usage(format!(
            "`--axis {axis}`: the matrix has no such axis (axes: {})",
            axes.join(", ")
        )));
    }
    if let Some(id) = wanted {
        let cell = find_cell(plan, id)?;
        if !cell.values.contains_key(axis) {
            return Err(usage(format!("cell `{id}` has no value for `{axis}`")));
        }
        return Ok(cell);
    }
    let with_axis: Vec<&Cell> = plan
        .cells
        .iter()
        .filter(|c| c.values.contains_key(axis))
        .collect();
    let others = |c: &Cell| -> Vec<Option<String>> {
        axes.iter()
            .filter(|a| *a != axis)
            .map(|a| value_of(c, a))
            .collect()
    };
    let mut groups: Vec<(Vec<Option<String>>, &Cell)> = Vec::new();
    for cell in with_axis {
        let key = others(cell);
        if !groups.iter().any(|(k, _)| *k == key) {
            groups.push((key, cell));
        }
    }
    match groups.as_slice() {
        [(_, cell)] => Ok(cell),
        [] => Err(usage(format!(
            "no cell of the matrix has a value for `{axis}`"
        ))),
        many => Err(usage(format!(
            "{} combinations of the other axes have `{axis}`; choose the cell to bisect with `--cell`, e.g. {}",
            many.len(),
            many.iter()
                .take(4)
                .map(|(_, c)| format!("`{}`", c.id))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The cell an attribution explains: `--cell`, or the matrix's only cell.
pub fn choose_cell<'p>(plan: &'p Plan, wanted: Option<&str>) -> Result<&'p Cell, InputError> {
    match (wanted, plan.cells.as_slice()) {
        (Some(id), _) => find_cell(plan, id),
        (None, [cell]) => Ok(cell),
        (None, cells) => Err(usage(format!(
            "the matrix has {} cells; choose one with `--cell`, e.g. `{}`",
            cells.len(),
            cells.first().map_or("", |c| c.id.as_str())
        ))),
    }
}

fn find_cell<'p>(plan: &'p Plan, id: &str) -> Result<&'p Cell, InputError> {
    plan.cells
        .iter()
        .find(|c| c.id.as_str() == id)
        .ok_or_else(|| {
            let ids: Vec<&str> = plan.cells.iter().map(|c| c.id.as_str()).collect();
            let near = crate::suggest::did_you_mean(id, &ids);
            usage(match near {
                Some(c) => format!("`--cell {id}`: no such cell; did you mean `{c}`?"),
                None => format!(
                    "`--cell {id}`: no such cell; `gpucompat matrix expand FILE` lists the ids"
                ),
            })
        })
}

/// The probe cell for `value`: the cell of `plan` (loaded with the value added) whose axis
/// values are the chosen cell's, with `axis` = `value`. `None` when the matrix excludes it.
pub fn version_cell(
    plan: &Plan,
    axes: &[String],
    chosen: &Cell,
    axis: &str,
    value: &str,
) -> Option<Cell> {
    plan.cells
        .iter()
        .find(|c| {
            axes.iter().all(|a| {
                if a == axis {
                    value_of(c, a).as_deref() == Some(value)
                } else {
                    value_of(c, a) == value_of(chosen, a)
                }
            })
        })
        .cloned()
}

/// A pin set: `name==version` per package, in the order given.
pub type PinSet = Vec<Pin>;

/// Reads `--base`/`--head`: a requirement file of `name==version` lines, or such a list
/// (comma- or space-separated) on the command line.
pub fn read_pins(flag: &str, text_or_path: &str) -> Result<PinSet, InputError> {
    let path = Path::new(text_or_path);
    let (source, text) = if path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| usage(format!("{flag}: cannot read `{text_or_path}`: {e}")))?;
        (text_or_path.to_owned(), text)
    } else {
        (flag.to_owned(), text_or_path.replace(',', "\n"))
    };
    let mut pins: PinSet = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        for item in line.split_whitespace() {
            let place = format!("{source}:{}", number + 1);
            let Some((name, version)) = item.split_once("==") else {
                return Err(usage(format!(
                    "{place}: `{item}` is not `name==version` (attribution needs exact pins)"
                )));
            };
            let (name, version) = (name.trim(), version.trim());
            if name.is_empty() || version.parse::<pep440_rs::Version>().is_err() {
                return Err(usage(format!(
                    "{place}: `{item}` is not `name==version` with a PEP 440 version"
                )));
            }
            if pins.iter().any(|p| normalize(&p.name) == normalize(name)) {
                return Err(usage(format!("{place}: `{name}` is pinned twice")));
            }
            pins.push(Pin {
                name: name.to_owned(),
                version: version.to_owned(),
            });
        }
    }
    if pins.is_empty() {
        return Err(usage(format!("{flag}: no pins in `{text_or_path}`")));
    }
    Ok(pins)
}

/// One package a bump moves: its base and head versions (`None`: not in that set).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Bump {
    pub package: String,
    pub base: Option<String>,
    pub head: Option<String>,
}

/// The packages whose pins differ between base and head, in head order then base-only ones.
pub fn bumps(base: &PinSet, head: &PinSet) -> Vec<Bump> {
    let find = |set: &PinSet, name: &str| {
        set.iter()
            .find(|p| normalize(&p.name) == normalize(name))
            .map(|p| p.version.clone())
    };
    let mut out = Vec::new();
    for pin in head {
        let base_version = find(base, &pin.name);
        if base_version.as_deref() != Some(pin.version.as_str()) {
            out.push(Bump {
                package: pin.name.clone(),
                base: base_version,
                head: Some(pin.version.clone()),
            });
        }
    }
    for pin in base {
        if find(head, &pin.name).is_none() {
            out.push(Bump {
                package: pin.name.clone(),
                base: Some(pin.version.clone()),
                head: None,
            });
        }
    }
    out
}

/// The chosen cell's pins with the base set over them and the bumps in `applied` on top,
/// sorted by package name as a cell's pins are.
pub fn attribution_pins(
    cell: &Cell,
    base: &PinSet,
    head: &PinSet,
    bumps: &[Bump],
    applied: &[usize],
) -> Vec<Pin> {
    let named = |name: &str| {
        base.iter()
            .chain(head)
            .any(|p| normalize(&p.name) == normalize(name))
    };
    let mut pins: Vec<Pin> = cell
        .pins
        .iter()
        .filter(|p| !named(&p.name))
        .cloned()
        .collect();
    for pin in base {
        let bump = bumps
            .iter()
            .position(|b| normalize(&b.package) == normalize(&pin.name));
        match bump {
            Some(i) if applied.contains(&i) => {}
            _ => pins.push(pin.clone()),
        }
    }
    for &i in applied {
        if let (Some(bump), Some(version)) =
            (bumps.get(i), bumps.get(i).and_then(|b| b.head.clone()))
        {
            pins.push(Pin {
                name: bump.package.clone(),
                version,
            });
        }
    }
    pins.sort();
    pins
}

/// The attribution probe cell for a pin set.
pub fn attribution_cell(cell: &Cell, pins: Vec<Pin>) -> Cell {
    let text = pins
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let mut probe = cell.clone();
    probe.id = CellId(format!(
        "{}-attr-{}",
        cell.id,
        sha256_hex(text.as_bytes(), 4)
    ));
    probe.pins = pins;
    probe
}

/// The id of a further attempt at a probe cell: `<id>-try<N>` (the first keeps the id).
pub fn attempt_id(id: &str, attempt_in_folder: u32) -> String {
    if attempt_in_folder <= 1 {
        id.to_owned()
    } else {
        format!("{id}-try{attempt_in_folder}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins(text: &str) -> PinSet {
        read_pins("--base", text).expect("pins")
    }

    #[test]
    fn pin_lists_and_bumps() {
        let base = pins("flashinfer-python==0.6.8, flashinfer-cubin==0.6.8 quack-kernels==0.1.0");
        let head = pins(
            "flashinfer-python==0.6.11,flashinfer-cubin==0.6.11,quack-kernels==0.1.0,nvidia-cutlass-dsl==4.2",
        );
        let moved: Vec<String> = bumps(&base, &head).into_iter().map(|b| b.package).collect();
        assert_eq!(
            moved,
            [
                "flashinfer-python",
                "flashinfer-cubin",
                "nvidia-cutlass-dsl"
            ]
        );
        assert!(read_pins("--head", "torch>=2").is_err());
        assert!(read_pins("--head", "a==1 a==2").is_err());
    }
}
