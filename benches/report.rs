//! Renders a report of 30 nightly runs of a 500-cell matrix (5 FlashInfer versions x 5 GPU
//! archs x 4 models x 5 backends; records and small logs written here, nothing is run) and
//! prints how long it took. Nothing asserts time; the target is a few seconds at most.
//!
//! `cargo bench --bench report`

use gpucompat::record::{CellRecord, GpuInfo, Manifest, Metrics, Phase, RunState, Runner, Status};
use gpucompat::report::{ReportOptions, render};
use gpucompat::signature::Signature;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

const RUNS: usize = 30;
const VERSIONS: [&str; 5] = ["0.6.3", "0.6.5", "0.6.8.post1", "0.6.10", "0.6.11.post1"];
const GPUS: [&str; 5] = ["sm_86", "sm_89", "sm_90", "2xsm_90", "sm_86+sm_89"];
const MODELS: [&str; 4] = [
    "qwen3-30b-a3b",
    "qwen3-next-80b-a3b",
    "llama-3.1-8b",
    "deepseek-v2-lite",
];
const BACKENDS: [&str; 5] = ["flashinfer", "triton", "fa3", "torch_native", "trtllm"];

/// A small deterministic hash, so every run differs a little from the one before.
fn mix(a: u64, b: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ b.wrapping_add(0x632b_e59b_d9b4_e019);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 29)
}

fn write_run(dir: &Path, night: usize) {
    std::fs::create_dir_all(dir.join("logs")).expect("mkdir");
    let started = format!("2026-10-{:02}T02:00:00Z", night + 1);
    let manifest = Manifest {
        format_version: 1,
        harness_version: "0.1.0".into(),
        matrix: "matrices/nightly.toml".into(),
        matrix_hash: "00".repeat(32),
        host: "gpu-a".into(),
        started_at: started,
        finished_at: None,
        state: RunState::Finished,
        cells: 500,
        replay: false,
        resumes: 0,
        inventory: "nvidia-smi".into(),
        shards: Vec::new(),
    };
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&manifest).expect("json"),
    )
    .expect("write manifest");
    let mut results = Vec::new();
    let mut plan_cells = Vec::new();
    let mut n = 0u64;
    for fi in VERSIONS {
        for gpu in GPUS {
            for model in MODELS {
                for backend in BACKENDS {
                    n += 1;
                    let id = format!("{fi}-{}-{model}-{backend}", gpu.replace('+', "_"));
                    let roll = mix(n, night as u64 / 3) % 100;
                    let (status, signature) = match roll {
                        0..=69 => (Status::Pass, None),
                        70..=79 => (Status::Fail, Some(Signature::IllegalAddress)),
                        80..=84 => (Status::Xfail, Some(Signature::NoKernelImage)),
                        85..=87 => (Status::Flaky, Some(Signature::CollectiveTimeout)),
                        88..=89 => (Status::Xpass, None),
                        90..=94 => (Status::Skip, None),
                        95..=97 => (Status::Fail, Some(Signature::Deadlock)),
                        _ => (Status::Error, Some(Signature::DependencyError)),
                    };
                    let mut values = serde_json::Map::new();
                    values.insert("flashinfer".into(), json!(fi));
                    values.insert("gpu".into(), json!(gpu));
                    values.insert("model".into(), json!(model));
                    values.insert("backend".into(), json!(backend));
                    let log = format!("logs/{id}.log");
                    let failing = signature.is_some();
                    let mut text = String::new();
                    for line in 0..40 {
                        text.push_str(&format!("[{line:04}] loading shard {line} of {model}\n"));
                    }
                    if failing {
                        text.push_str(
                            "RuntimeError: CUDA error: an illegal memory access was encountered\n",
                        );
                    }
                    std::fs::write(dir.join(&log), text).expect("write log");
                    let speed = 1.0 + (mix(n, 7) % 40) as f64 / 100.0;
                    results.push(CellRecord {
                        id: id.clone(),
                        values: values.clone(),
                        pins: vec![format!("flashinfer-python=={fi}")],
                        status,
                        signature,
                        phase: Some(if failing {
                            Phase::Ready
                        } else {
                            Phase::Teardown
                        }),
                        duration_s: 90.0 * speed,
                        attempts: 1,
                        log,
                        metrics: Metrics {
                            time_to_ready_s: Some(60.0 * speed),
                            jit_s: Some(45.0 * speed),
                            ttft_s: Some(0.05 * speed),
                            tpot_s: Some(0.01 * speed),
                            tokens_per_s: (!failing).then_some(100.0 / speed),
                            jit_cache_hit: Some(false),
                            provision_s: Some(2.0),
                        },
                        runner: Runner {
                            host: "gpu-a".into(),
                            gpus: vec![GpuInfo {
                                index: 0,
                                name: "NVIDIA H100 80GB HBM3".into(),
                                arch: "sm_90".into(),
                                memory_mib: None,
                                uuid: None,
                            }],
                        },
                        fingerprint: failing.then(|| format!("fp-{}-{}", roll % 7, night / 10)),
                        line: failing.then_some(41),
                        excerpt: None,
                        decided_by: None,
                        evidence: Vec::new(),
                        exit: None,
                        spurious: status == Status::Error,
                        reason: None,
                        expectation: None,
                        started_at: None,
                        leaked: 0,
                        hang: None,
                        format_version: 1,
                    });
                    plan_cells.push(json!({"id": id, "values": values, "env": [],
                        "engine": {"kind": "job", "command": format!("sh smoke.sh {fi} {model} {backend}")}}));
                }
            }
        }
    }
    let mut lines = Vec::new();
    for record in &results {
        lines.extend(serde_json::to_vec(record).expect("json"));
        lines.push(b'\n');
    }
    std::fs::write(dir.join("results.jsonl"), lines).expect("write results");
    let plan = json!({"path": "matrices/nightly.toml", "dir": "matrices",
        "keys": ["flashinfer", "gpu", "model", "backend"], "cells": plan_cells});
    std::fs::write(
        dir.join("plan.json"),
        serde_json::to_vec(&plan).expect("json"),
    )
    .expect("write plan");
}

fn main() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let runs: Vec<PathBuf> = (0..RUNS)
        .map(|night| {
            let dir = scratch.path().join(format!("night-{night:02}"));
            write_run(&dir, night);
            dir
        })
        .collect();
    let mut out = std::io::stdout().lock();
    for round in 1..=3 {
        let target = scratch.path().join(format!("report-{round}"));
        let start = Instant::now();
        let summary = render(&runs, &target, &ReportOptions::default()).expect("render");
        let seconds = start.elapsed().as_secs_f64();
        let _ = writeln!(
            out,
            "report of {} runs x {} cells: {seconds:.3} s ({} cell pages, {} plots, {} logs copied)",
            summary.runs,
            summary.counts.total,
            summary.cell_pages,
            summary.plots,
            summary.logs_copied
        );
    }
    let one = scratch.path().join("report-one");
    let start = Instant::now();
    render(&runs[RUNS - 1..], &one, &ReportOptions::default()).expect("render");
    let _ = writeln!(
        out,
        "report of 1 run x 500 cells (what `run` renders at its end): {:.3} s",
        start.elapsed().as_secs_f64()
    );
}
