//! The one place a plan's cells become scheduler jobs, and the expected durations that come
//! from an earlier run or a CSV (for `plan --simulate`).

use super::Job;
use crate::matrix::{Plan, gpus};
use crate::run::folder;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Cells with the same group share an environment and a JIT cache: the pins, the base
/// requirement file and the GPU archs.
pub(crate) fn environment_group(plan: &Plan, index: usize) -> String {
    let cell = &plan.cells[index];
    format!(
        "{}|{}|{}",
        cell.pins_text(),
        cell.requirements
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        gpus::format(&cell.gpus)
    )
}

/// Jobs for the plan's cells at `indices`, with their expected seconds where `durations` (by
/// cell id) knows them.
pub fn jobs(
    plan: &Plan,
    indices: impl IntoIterator<Item = usize>,
    durations: &HashMap<String, f64>,
) -> Vec<Job> {
    indices
        .into_iter()
        .map(|index| {
            let cell = &plan.cells[index];
            Job {
                index,
                gpus: cell.gpus.clone(),
                group: environment_group(plan, index),
                duration: durations.get(cell.id.as_str()).copied(),
            }
        })
        .collect()
}

/// The cells at `indices` in batches that each run on one machine, one after another: one batch
/// per cell when there are at most `max`, else cells of one [`environment_group`] (one
/// environment, one JIT cache, the same GPUs) share batches, each group given batches in
/// proportion to its cells and at least one. More groups than `max` give one batch per group.
pub(crate) fn batches(plan: &Plan, indices: &[usize], max: usize) -> Vec<Vec<usize>> {
    let max = max.max(1);
    if indices.len() <= max {
        return indices.iter().map(|&i| vec![i]).collect();
    }
    let mut groups: indexmap::IndexMap<String, Vec<usize>> = indexmap::IndexMap::new();
    for &index in indices {
        groups
            .entry(environment_group(plan, index))
            .or_default()
            .push(index);
    }
    let total = indices.len();
    let mut shares: Vec<usize> = groups
        .values()
        .map(|cells| (cells.len() * max / total).max(1))
        .collect();
    // Rounding up to one batch per group may overshoot: take from the biggest shares.
    while shares.iter().sum::<usize>() > max {
        match (0..shares.len())
            .filter(|&i| shares[i] > 1)
            .max_by_key(|&i| shares[i])
        {
            Some(big) => shares[big] -= 1,
            None => break,
        }
    }
    groups
        .values()
        .zip(shares)
        .flat_map(|(cells, share)| {
            cells
                .chunks(cells.len().div_ceil(share))
                .map(<[usize]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Expected durations could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DurationsError {
    #[error(transparent)]
    Results(#[from] folder::FolderError),
    #[error("cannot read durations `{}`", path.display())]
    Csv {
        path: PathBuf,
        #[source]
        source: csv::Error,
    },
    #[error(
        "`{}` needs a header with `id` and `duration_s` columns (found: {found})",
        path.display()
    )]
    Header { path: PathBuf, found: String },
    #[error(
        "`{}` line {line}: `{text}` is not a number of seconds (0 to one year)",
        path.display()
    )]
    Seconds {
        path: PathBuf,
        line: usize,
        text: String,
    },
}

/// Expected seconds per cell id: a CSV with `id` and `duration_s` columns, a `results.jsonl`,
/// or a run folder (its `results.jsonl`).
pub fn read_durations(path: &Path) -> Result<HashMap<String, f64>, DurationsError> {
    let results = if path.is_dir() {
        Some(path.join(folder::RESULTS))
    } else if path.extension().is_some_and(|e| e == "jsonl") {
        Some(path.to_path_buf())
    } else {
        None
    };
    match results {
        Some(results) => Ok(folder::read_results(&results, false)?
            .into_iter()
            .filter(|(_, r)| r.attempts > 0)
            .map(|(id, r)| (id, r.duration_s))
            .collect()),
        None => read_csv(path),
    }
}

fn read_csv(path: &Path) -> Result<HashMap<String, f64>, DurationsError> {
    let csv_err = |source| DurationsError::Csv {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = csv::Reader::from_path(path).map_err(csv_err)?;
    let headers = reader.headers().map_err(csv_err)?.clone();
    let column = |names: &[&str]| headers.iter().position(|h| names.contains(&h.trim()));
    let (Some(id_col), Some(seconds_col)) = (
        column(&["id", "cell"]),
        column(&["duration_s", "seconds", "duration"]),
    ) else {
        return Err(DurationsError::Header {
            path: path.to_path_buf(),
            found: headers.iter().collect::<Vec<_>>().join(", "),
        });
    };
    let mut durations = HashMap::new();
    for (line, row) in reader.records().enumerate() {
        let row = row.map_err(csv_err)?;
        let id = row.get(id_col).unwrap_or_default().trim().to_owned();
        let text = row.get(seconds_col).unwrap_or_default().trim();
        let seconds: f64 = text
            .parse()
            .ok()
            // Up to a year: anything longer is a typo (milliseconds for seconds), not a cell.
            .filter(|s: &f64| s.is_finite() && (0.0..=31_536_000.0).contains(s))
            .ok_or_else(|| DurationsError::Seconds {
                path: path.to_path_buf(),
                line: line + 2,
                text: text.to_owned(),
            })?;
        durations.insert(id, seconds);
    }
    Ok(durations)
}
