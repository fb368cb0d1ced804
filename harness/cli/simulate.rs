//! `gpucompat plan FILE --simulate DURATIONS --inventory FILE`: the makespan and GPU utilisation a
//! fleet would get for a matrix, by a discrete simulation of the run's own scheduling policy
//! (no waiting), for sizing a nightly.

use crate::errors::CliError;
use crate::inventory;
use crate::matrix::{Plan, gpus};
use crate::schedule::{self, slots::Slots};
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
    let durations = schedule::read_durations(args.durations).map_err(CliError::input)?;
    let slots = Slots::new(inventory.gpus.clone());
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
    let jobs = schedule::jobs(plan, 0..plan.cells.len(), &durations);
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
