//! A copy-paste reproducer for one cell: its pins, the environment it ran with (GPUs in the order
//! it had them), the engine command, and the `gpucompat run --cell` line that does all of it.
//!
//! Built from the record (values, pins, runner GPUs) and the run's `plan.json` (the command and
//! `[env]`). Every word is shell-quoted; values are data, never code.

use super::load::{LoadedRun, PlanCell};
use super::text::file_stem;
use crate::matrix::PORT_PLACEHOLDER;
use crate::matrix::template::value_text;
use crate::provision::shell_quote;
use crate::record::CellRecord;
use serde::Serialize;

/// Port a reproduced server listens on.
const PORT: &str = "30000";

/// Commands that reproduce a cell; `script` is all of them, ready to paste.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reproducer {
    /// Installs the cell's pins (absent when it has none).
    pub install: Option<String>,
    /// Runs the engine command with the cell's environment; absent when the plan does not say
    /// the command (a built-in engine's default, or no `plan.json`).
    pub command: Option<String>,
    /// Re-runs the cell through the harness (absent when the matrix file is not known).
    pub rerun: Option<String>,
    pub script: String,
}

/// The environment the cell's command saw, except per-run paths (JIT cache folders).
fn environment(
    record: &CellRecord,
    plan: Option<&PlanCell>,
    server: bool,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    if !record.runner.gpus.is_empty() {
        let order: Vec<String> = record
            .runner
            .gpus
            .iter()
            .map(|g| g.index.to_string())
            .collect();
        env.push(("CUDA_VISIBLE_DEVICES".into(), order.join(",")));
        env.push(("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()));
    }
    env.push(("GPUCOMPAT_CELL_ID".into(), record.id.clone()));
    if !record.pins.is_empty() {
        env.push(("GPUCOMPAT_PINS".into(), record.pins.join(" ")));
    }
    for (key, value) in &record.values {
        env.push((
            format!("GPUCOMPAT_{}", key.to_ascii_uppercase().replace('-', "_")),
            value_text(value),
        ));
    }
    if server {
        env.push(("GPUCOMPAT_PORT".into(), PORT.into()));
    }
    // The matrix's `[env]` comes last and wins, as in the run.
    if let Some(plan) = plan {
        for (key, value) in &plan.env {
            env.retain(|(k, _)| k != key);
            env.push((key.clone(), value.clone()));
        }
    }
    env
}

/// The reproducer of `record` from `run`.
pub(crate) fn reproducer(record: &CellRecord, run: &LoadedRun) -> Reproducer {
    let plan = run.plan.as_ref();
    let cell = plan.and_then(|p| p.cells.get(&record.id));
    let install = (!record.pins.is_empty()).then(|| {
        let pins: Vec<_> = record.pins.iter().map(|p| shell_quote(p)).collect();
        format!("python -m pip install {}", pins.join(" "))
    });
    let command = cell.and_then(|cell| {
        let server = cell.engine != "job";
        let mut text = cell.command.clone()?;
        if let Some(args) = cell.args.as_deref().filter(|a| !a.trim().is_empty()) {
            text.push(' ');
            text.push_str(args);
        }
        let text = text.replace(PORT_PLACEHOLDER, PORT);
        let mut lines = Vec::new();
        let cd = plan
            .and_then(|p| p.dir.as_deref())
            .filter(|d| !d.is_empty())
            .map(|d| format!("cd {} && ", shell_quote(d)))
            .unwrap_or_default();
        lines.push(format!("{cd}env \\"));
        for (key, value) in environment(record, Some(cell), server) {
            lines.push(format!("  {} \\", shell_quote(&format!("{key}={value}"))));
        }
        lines.push(format!("  sh -c {}", shell_quote(&text)));
        Some(lines.join("\n"))
    });
    let matrix = run
        .manifest
        .as_ref()
        .map(|m| m.matrix.clone())
        .or_else(|| plan.and_then(|p| p.matrix.clone()))
        .filter(|m| !m.is_empty());
    let rerun = matrix.map(|matrix| {
        format!(
            "gpucompat run {} --cell {} --out {}",
            shell_quote(&matrix),
            shell_quote(&record.id),
            shell_quote(&format!("runs/repro-{}", file_stem(&record.id)))
        )
    });
    let mut script = Vec::new();
    if let Some(install) = &install {
        script.push(format!("# the cell's pins\n{install}"));
    }
    match &command {
        Some(command) => script.push(format!(
            "# the engine command, with the cell's environment and GPU order\n{command}"
        )),
        None => {
            if let Some(engine) = cell.map(|c| c.engine.as_str()).filter(|e| !e.is_empty()) {
                script.push(format!(
                    "# engine `{}` uses its built-in command: re-run through the harness",
                    super::text::one_line(engine)
                ));
            }
        }
    }
    if let Some(rerun) = &rerun {
        script.push(format!("# or let the harness do all of it\n{rerun}"));
    }
    Reproducer {
        install,
        command,
        rerun,
        script: script.join("\n\n"),
    }
}
