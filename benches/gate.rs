//! Gate benchmarks (print numbers, assert nothing about time):
//!
//! 1. Overhead: `gate` over N cells (base + head, pairing, gate.json) against the same cells run
//!    twice by `run::execute`, the work a gate cannot avoid. Should be noise.
//! 2. The PR comment for 500 cells (regressions, fixes, known failures): its size stays under
//!    GitHub's 65,536-character limit (checked), and how long rendering takes.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use gpucompat::bisect::probes::Bump;
use gpucompat::compare::{Comparison, Outcome, Pairing};
use gpucompat::exec::logsink::LogLimits;
use gpucompat::gate::comment;
use gpucompat::gate::summary::{GateCell, GateFile, SideInfo, State};
use gpucompat::gate::{self, pins};
use gpucompat::inventory::Inventory;
use gpucompat::record::Status;
use gpucompat::redact::Redactor;
use gpucompat::run::{self, RunOptions};
use gpucompat::signature::Signature;
use std::path::Path;
use std::time::{Duration, Instant};

fn options(dir: &Path) -> RunOptions {
    RunOptions {
        out: dir.join("out"),
        jobs: Some(4),
        inventory: Inventory {
            host: "bench".to_owned(),
            gpus: Vec::new(),
            source: "bench".to_owned(),
        },
        resume: false,
        retry_errors: true,
        cells: Vec::new(),
        cache_root: dir.join("cache"),
        limits: LogLimits::default(),
        grace: Duration::from_secs(1),
        reaper_exe: None,
        interactive: false,
        quiet: true,
        slow_after: None,
    }
}

fn overhead(cells: usize) {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<String> = (0..cells).map(|i| format!("\"c{i}\"")).collect();
    let matrix = dir.path().join("m.toml");
    std::fs::write(
        &matrix,
        format!(
            "[matrix]\ncell = [{}]\n[job]\ncommand = \"true\"\ntimeout = \"1m\"\n",
            values.join(", ")
        ),
    )
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let plan = gpucompat::matrix::load(&matrix).unwrap();
    let started = Instant::now();
    for side in ["a", "b"] {
        let mut o = options(dir.path());
        o.out = dir.path().join(side);
        runtime.block_on(run::execute(plan.clone(), o)).unwrap();
    }
    let runs = started.elapsed();
    let request = gate::Request {
        matrix: matrix.clone(),
        base: pins::given("--base", "lib==1").unwrap(),
        head: pins::given("--head", "lib==2").unwrap(),
        cells: Vec::new(),
        baseline_run: None,
        pair_by: Default::default(),
        out: dir.path().join("gate"),
        resume: false,
        attribute: true,
        run: options(dir.path()),
    };
    let started = Instant::now();
    runtime.block_on(gate::gate(request, &mut |_| {})).unwrap();
    let gated = started.elapsed();
    println!(
        "overhead, {cells} cells: two runs {:.2} s, gate {:.2} s ({:+.1}%)",
        runs.as_secs_f64(),
        gated.as_secs_f64(),
        (gated.as_secs_f64() / runs.as_secs_f64() - 1.0) * 100.0
    );
}

fn cell(i: usize, comparison: Comparison) -> GateCell {
    let mut values = serde_json::Map::new();
    values.insert("flashinfer".into(), "0.6.11".into());
    values.insert("gpu".into(), format!("sm_{}", 80 + i % 40).into());
    GateCell {
        id: format!("0.6.11-sm_{}-model-{i}", 80 + i % 40),
        base_id: None,
        values,
        comparison,
        base: Some(Outcome {
            status: Status::Pass,
            signature: None,
            spurious: false,
        }),
        head: Some(Outcome {
            status: Status::Fail,
            signature: Some(Signature::IllegalAddress),
            spurious: false,
        }),
        signature: Some(Signature::IllegalAddress),
        excerpt: Some(
            "RuntimeError: CUDA error: an illegal memory access was encountered\n".repeat(12),
        ),
        log: Some(format!("head/logs/{i}.log")),
        reproducer: format!(
            "gpucompat gate matrices/nightly.toml --base base.txt --head head.txt --cell 0.6.11-sm_{}-model-{i}",
            80 + i % 40
        ),
        confirmed: Some(true),
        retry: None,
        culprits: Some(vec!["flashinfer-cubin".into()]),
        note: None,
    }
}

fn comment_500() {
    let regressions: Vec<GateCell> = (0..200).map(|i| cell(i, Comparison::Regressed)).collect();
    let fixed: Vec<GateCell> = (200..300).map(|i| cell(i, Comparison::Fixed)).collect();
    let still: Vec<GateCell> = (300..500)
        .map(|i| cell(i, Comparison::StillFailingSame))
        .collect();
    let file = GateFile {
        format_version: 1,
        state: State::Finished,
        harness_version: "bench".into(),
        matrix: "matrices/nightly.toml".into(),
        matrix_hash: String::new(),
        base: SideInfo {
            source: "base.txt".into(),
            pins: Vec::new(),
        },
        head: SideInfo {
            source: "head.txt".into(),
            pins: Vec::new(),
        },
        bumps: vec![Bump {
            package: "flashinfer-cubin".into(),
            base: Some("0.6.8".into()),
            head: Some("0.6.11".into()),
        }],
        pairing: Pairing::default(),
        baseline_run: None,
        reused: 0,
        regressions,
        fixed,
        still_failing: still,
        flaky: Vec::new(),
        spurious: Vec::new(),
        expected: Vec::new(),
        counts: Default::default(),
        attribution: Vec::new(),
        verdict: String::new(),
        github: None,
        notes: Vec::new(),
        started_at: String::new(),
        finished_at: None,
    };
    let redactor = Redactor::with_secrets(["bench-token-value"]);
    let started = Instant::now();
    let rounds = 20;
    let mut body = String::new();
    for _ in 0..rounds {
        body = comment::render(&file, Some("https://example.invalid/run/1"), &redactor);
    }
    let each = started.elapsed() / rounds;
    let chars = body.chars().count();
    assert!(chars < comment::GITHUB_LIMIT, "{chars} characters");
    println!(
        "comment, 500 cells (200 regressions): {chars} characters (limit {}), {:.1} ms to render",
        comment::GITHUB_LIMIT,
        each.as_secs_f64() * 1000.0
    );
}

fn main() {
    comment_500();
    overhead(40);
}
