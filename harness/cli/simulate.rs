//! `gpucompat plan FILE --simulate DURATIONS --inventory FILE`: the makespan and GPU utilisation a
//! fleet would get for a matrix, by a discrete simulation of the run's own scheduling policy
//! (no waiting), for sizing a nightly.

use crate::errors::CliError;
use crate::inventory;
use crate::matrix::{Plan, gpus};
use crate::run::{environment_group, folder};
use crate::schedule::{self, Job};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// What the simulation needs besides the plan.
#[derive(Debug)]
pub(crate) struct SimulateArgs<'a> {
    pub durations: &'a Path,
    pub inventory: Option<&'a Path>,
    pub jobs: Option<usize>,
    pub default: Option<Duration>,
    pub json: bool,
}

/// Expected seconds per cell id: a CSV with `id` and `duration_s` columns, a `results.jsonl`,
/// or a run folder (its `results.jsonl`).
fn read_durations(path: &Path) -> Result<HashMap<String, f64>, CliError> {
    let results = if path.is_dir() {
        Some(path.join(folder::RESULTS))
    } else if path.extension().is_some_and(|e| e == "jsonl") {
        Some(path.to_path_buf())
    } else {
        None
    };
    if let Some(results) = results {
        let records = folder::read_results(&results, false).map_err(CliError::input)?;
        return Ok(records
            .into_iter()
            .filter(|(_, r)| r.attempts > 0)
            .map(|(id, r)| (id, r.duration_s))
            .collect());
    }
    let mut reader = csv::Reader::from_path(path).map_err(|e| {
        CliError::input(anyhow::anyhow!(
            "cannot read durations `{}`: {e}",
            path.display()
        ))
    })?;
    let headers = reader
        .headers()
        .map_err(|e| CliError::input(anyhow::anyhow!("`{}`: {e}", path.display())))?
        .clone();
    let column = |names: &[&str]| headers.iter().position(|h| names.contains(&h.trim()));
    let (Some(id_col), Some(seconds_col)) = (
        column(&["id", "cell"]),
        column(&["duration_s", "seconds", "duration"]),
    ) else {
        return Err(CliError::input(anyhow::anyhow!(
            "`{}` needs a header with `id` and `duration_s` columns (found: {})",
            path.display(),
            headers.iter().collect::<Vec<_>>().join(", ")
        )));
    };
    let mut durations = HashMap::new();
    for (line, row) in reader.records().enumerate() {
        let row = row.map_err(|e| CliError::input(anyhow::anyhow!("`{}`: {e}", path.display())))?;
        let id = row.get(id_col).unwrap_or_default().trim().to_owned();
        let text = row.get(seconds_col).unwrap_or_default().trim();
        let seconds: f64 = text
            .parse()
            .ok()
            // Up to a year: anything longer is a typo (milliseconds for seconds), not a cell.
            .filter(|s: &f64| s.is_finite() && (0.0..=31_536_000.0).contains(s))
            .ok_or_else(|| {
                CliError::input(anyhow::anyhow!(
                    "`{}` line {}: `{text}` is not a number of seconds (0 to one year)",
                    path.display(),
                    line + 2
                ))
            })?;
        durations.insert(id, seconds);
    }
    Ok(durations)
}

fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

pub(crate) fn run(plan: &Plan, args: &SimulateArgs<'_>) -> Result<String, CliError> {
    let inventory = match args.inventory {
        Some(path) => inventory::load(path).map_err(CliError::input)?,
        None => inventory::detect(),
    };
    let durations = read_durations(args.durations)?;
    let slots = crate::run::slots::Slots::new(inventory.gpus.clone());
    let mut known: Vec<f64> = plan
        .cells
        .iter()
        .filter(|c| slots.can_serve(&c.gpus))
        .filter_map(|c| durations.get(c.id.as_str()).copied())
        .collect();
    let known_count = known.len();
    let default_s = args
        .default
        .map(|d| d.as_secs_f64())
        .or_else(|| median(&mut known))
        .unwrap_or(60.0);
    let jobs: Vec<Job> = (0..plan.cells.len())
        .map(|index| {
            let cell = &plan.cells[index];
            Job {
                index,
                gpus: cell.gpus.clone(),
                group: environment_group(plan, index),
                duration: durations.get(cell.id.as_str()).copied(),
            }
        })
        .collect();
    let limit = args
        .jobs
        .unwrap_or_else(|| inventory.gpus.len().max(1))
        .max(1);
    let mut sim = schedule::simulate(jobs, inventory.gpus.clone(), limit, default_s);
    sim.unservable.sort_unstable();
    if args.json {
        let value = serde_json::json!({
            "makespan_s": sim.makespan_s,
            "lower_bound_s": sim.lower_bound_s,
            "efficiency": if sim.makespan_s > 0.0 { sim.lower_bound_s / sim.makespan_s } else { 1.0 },
            "cells": plan.cells.len(),
            "durations_known": known_count,
            "default_duration_s": default_s,
            "jobs": limit,
            "gpus": sim.utilisation.iter().map(|(g, u)| serde_json::json!({
                "index": g.index, "name": g.name, "arch": g.arch, "utilisation": u,
            })).collect::<Vec<_>>(),
            "unservable": sim.unservable.iter().map(|&i| plan.cells[i].id.as_str()).collect::<Vec<_>>(),
        });
        return Ok(format!("{value:#}\n"));
    }
    let hms =
        |s: f64| humantime::format_duration(Duration::from_secs(s.round() as u64)).to_string();
    let mut text = format!(
        "simulated {} cells on {} GPUs of {} ({} at a time); {known_count} durations known, others {}\n\n",
        plan.cells.len() - sim.unservable.len(),
        inventory.gpus.len(),
        inventory.source,
        limit,
        hms(default_s),
    );
    text.push_str(&format!(
        "makespan     {}\nlower bound  {} (longest cell, or the busiest arch pool's GPU-seconds over its GPUs)\nefficiency   {:.0}%\n\n",
        hms(sim.makespan_s),
        hms(sim.lower_bound_s),
        if sim.makespan_s > 0.0 { 100.0 * sim.lower_bound_s / sim.makespan_s } else { 100.0 }
    ));
    let rows: Vec<Vec<String>> = sim
        .utilisation
        .iter()
        .map(|(g, u)| {
            vec![
                g.index.to_string(),
                g.arch.clone(),
                g.name.clone(),
                format!("{:.0}%", u * 100.0),
            ]
        })
        .collect();
    text.push_str(&super::table::render(
        &["gpu", "arch", "name", "busy"],
        &rows,
    ));
    if !sim.unservable.is_empty() {
        text.push_str(&format!(
            "\n{} cells need GPUs this inventory lacks (they would be skipped): {}\n",
            sim.unservable.len(),
            sim.unservable
                .iter()
                .take(10)
                .map(|&i| format!(
                    "{} ({})",
                    plan.cells[i].id,
                    gpus::format(&plan.cells[i].gpus)
                ))
                .collect::<Vec<_>>()
                .join(", ")
                + &match sim.unservable.len() {
                    n if n > 10 => format!(" and {} more", n - 10),
                    _ => String::new(),
                }
        ));
    }
    Ok(text)
}
