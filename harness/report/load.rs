//! Reading run folders: manifest, plan and the last record of every cell.
//!
//! Several folders (nightlies) are ordered by their manifest's `started_at`, oldest first; the
//! newest is "tonight". A folder only needs `results.jsonl` or `manifest.json`: a run that crashed
//! before writing its plan, or ran no cell yet, still loads. `plan.json` is read leniently (it is
//! only used for reproducer commands); a folder whose plan cannot be read gets a warning.

use super::error::ReportError;
use crate::matrix::template::value_text;
use crate::record::{CellRecord, Manifest};
use crate::run::folder::{MANIFEST, PLAN, RESULTS, read_results, read_results_tolerant};
use indexmap::IndexMap;
use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One run folder, read.
#[derive(Debug, Clone)]
pub(crate) struct LoadedRun {
    /// The folder as given.
    pub dir: PathBuf,
    /// Short name for people: the folder's name.
    pub name: String,
    pub manifest: Option<Manifest>,
    pub plan: Option<PlanInfo>,
    /// The last record of every cell: in plan order, then by id for cells the plan lacks.
    pub records: Vec<CellRecord>,
    /// Problems that did not stop the load (an unreadable `plan.json`).
    pub warnings: Vec<String>,
    /// In a replay, each replayed cell's own duration (its record shows the recording's).
    pub replay_durations: HashMap<String, f64>,
}

impl LoadedRun {
    pub(crate) fn started_at(&self) -> Option<&str> {
        self.manifest.as_ref().map(|m| m.started_at.as_str())
    }

    /// The record of a cell, by id.
    pub(crate) fn index(&self) -> HashMap<&str, &CellRecord> {
        self.records.iter().map(|r| (r.id.as_str(), r)).collect()
    }
}

/// What the reports need from `plan.json`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanInfo {
    /// The matrix file as given to `gpucompat run`.
    pub matrix: Option<String>,
    /// Folder the cells' commands ran in.
    pub dir: Option<String>,
    /// Every key a cell can have, axes first.
    pub keys: Vec<String>,
    /// Cells by id, in plan order.
    pub cells: IndexMap<String, PlanCell>,
}

/// What the reports need from one cell of `plan.json`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PlanCell {
    /// `job` or the server engine's name (`server`, `sglang`, `vllm`, ...).
    pub engine: String,
    /// The job's command, or the server's launch command (may hold `{port}`).
    pub command: Option<String>,
    /// Extra server arguments appended to the command.
    pub args: Option<String>,
    /// The matrix's `[env]` rendered for the cell, in order.
    pub env: Vec<(String, String)>,
}

/// Reads run folders, oldest first (by manifest `started_at`; folders without a manifest first,
/// in the order given).
pub(crate) fn load_runs(dirs: &[PathBuf], strict: bool) -> Result<Vec<LoadedRun>, ReportError> {
    if dirs.is_empty() {
        return Err(ReportError::NoRuns);
    }
    let mut runs = dirs
        .iter()
        .map(|d| load_run_with(d, strict))
        .collect::<Result<Vec<_>, _>>()?;
    // Stable: equal keys keep the order given.
    runs.sort_by_cached_key(|run| {
        let text = run.started_at().unwrap_or_default().to_owned();
        (humantime::parse_rfc3339_weak(&text).ok(), text)
    });
    Ok(runs)
}

/// Whether `dir` looks like a run folder (it has results or a manifest).
pub(crate) fn is_run_folder(dir: &Path) -> bool {
    dir.join(RESULTS).is_file() || dir.join(MANIFEST).is_file()
}

/// Reads one run folder. `strict`: a line of `results.jsonl` that is not a record is an error;
/// otherwise it is a warning (file and line) and every other record is kept.
pub(crate) fn load_run_with(dir: &Path, strict: bool) -> Result<LoadedRun, ReportError> {
    let shown = dir.display().to_string();
    let results_path = dir.join(RESULTS);
    let manifest_path = dir.join(MANIFEST);
    if !is_run_folder(dir) {
        return Err(ReportError::NotARunFolder(shown));
    }
    let manifest = match fs::read_to_string(&manifest_path) {
        Ok(text) => Some(serde_json::from_str::<Manifest>(&text).map_err(|source| {
            ReportError::Manifest {
                path: manifest_path.display().to_string(),
                source,
            }
        })?),
        Err(err) if err.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(ReportError::Folder {
                path: shown,
                source: crate::run::folder::FolderError::Io {
                    path: manifest_path.display().to_string(),
                    source,
                },
            });
        }
    };
    let mut warnings = Vec::new();
    let plan = match fs::read(dir.join(PLAN)) {
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(value) => Some(plan_info(&value)),
            Err(err) => {
                warnings.push(format!(
                    "{shown}: {PLAN} is not JSON ({err}); reproducers lack the engine command"
                ));
                None
            }
        },
        Err(_) => None,
    };
    let folder_err = |source| ReportError::Folder {
        path: shown.clone(),
        source,
    };
    let by_id = if strict {
        read_results(&results_path, false).map_err(folder_err)?
    } else {
        let results = read_results_tolerant(&results_path, false).map_err(folder_err)?;
        if results.records.is_empty() && !results.bad_lines.is_empty() {
            // Not one line could be read: this is no run folder's results, whatever its name.
            read_results(&results_path, false).map_err(folder_err)?;
        }
        warnings.extend(results.bad_lines.iter().map(|bad| bad.to_string()));
        results.records
    };
    let mut records = order_records(by_id, plan.as_ref());
    records.iter_mut().for_each(redact_record);
    let replay_durations = if manifest.as_ref().is_some_and(|m| m.replay) {
        super::replayed::apply(dir, &mut records)
            .into_iter()
            .collect()
    } else {
        HashMap::new()
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty() && n != "." && n != "..")
        .unwrap_or(shown);
    Ok(LoadedRun {
        dir: dir.to_path_buf(),
        name,
        manifest,
        plan,
        records,
        warnings,
        replay_durations,
    })
}

/// Masks tokens a cell printed in the record's text taken from its log (fingerprint, excerpt) or
/// about it (reason), so no report, table or posted comment built from records carries one.
fn redact_record(record: &mut CellRecord) {
    for text in [
        &mut record.fingerprint,
        &mut record.excerpt,
        &mut record.reason,
    ]
    .into_iter()
    .flatten()
    {
        if let std::borrow::Cow::Owned(masked) = crate::redact::redact(text) {
            *text = masked;
        }
    }
}

/// Plan order first (the order the matrix file gives), then by id.
fn order_records(
    mut by_id: HashMap<String, CellRecord>,
    plan: Option<&PlanInfo>,
) -> Vec<CellRecord> {
    let mut records = Vec::with_capacity(by_id.len());
    if let Some(plan) = plan {
        for id in plan.cells.keys() {
            if let Some(record) = by_id.remove(id) {
                records.push(record);
            }
        }
    }
    let mut rest: Vec<CellRecord> = by_id.into_values().collect();
    rest.sort_by(|a, b| a.id.cmp(&b.id));
    records.extend(rest);
    records
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The parts of a serialized `Plan` the reports use; anything missing is left out.
fn plan_info(value: &Value) -> PlanInfo {
    let keys = value
        .get("keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(|k| text(Some(k))).collect())
        .unwrap_or_default();
    let mut cells = IndexMap::new();
    for cell in value
        .get("cells")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let Some(id) = text(cell.get("id")) else {
            continue;
        };
        let engine = cell.get("engine");
        // `type` names the engine (`job` or `server`); plans written before it used `kind`.
        let engine_kind =
            text(engine.and_then(|e| e.get("type").or_else(|| e.get("kind")))).unwrap_or_default();
        let env = cell
            .get("env")
            .and_then(Value::as_array)
            .map(|pairs| {
                pairs
                    .iter()
                    .filter_map(|pair| match pair.as_array().map(Vec::as_slice) {
                        Some([k, v]) => Some((text(Some(k))?, value_text(v))),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        cells.insert(
            id,
            PlanCell {
                engine: engine_kind,
                command: text(engine.and_then(|e| e.get("command"))),
                args: text(engine.and_then(|e| e.get("args"))),
                env,
            },
        );
    }
    PlanInfo {
        matrix: text(value.get("path")),
        dir: text(value.get("dir")),
        keys,
        cells,
    }
}
