//! The README's main command: `gpucompat run matrices/demo.toml` replays every run folder the
//! project recorded on real GPUs (reports/) through the whole pipeline, labelled as a replay, and
//! must reach the recorded verdicts by itself.

use crate::util::{Sandbox, records, repo_root, run_in};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `RUN/CELL` -> the recorded (status, signature), from the last record of each cell.
fn recorded_verdicts() -> BTreeMap<String, (String, Value)> {
    let reports = repo_root().join("reports");
    let mut verdicts = BTreeMap::new();
    for entry in std::fs::read_dir(&reports).expect("read reports/") {
        let dir = entry.expect("entry").path();
        let results = dir.join("results.jsonl");
        if !results.is_file() {
            continue;
        }
        let run = dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 name");
        let text = std::fs::read_to_string(&results).expect("read results");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let record: Value = serde_json::from_str(line).expect("a record");
            let id = record["id"].as_str().expect("id");
            verdicts.insert(
                format!("{run}/{id}"),
                (
                    record["status"].as_str().expect("status").to_owned(),
                    record["signature"].clone(),
                ),
            );
        }
    }
    verdicts
}

/// Runs a one-axis replay matrix (`recorded = [RECORDED]`, relative to `root`) into `out`.
fn replay(sandbox: &Sandbox, root: &Path, recorded: &str, out: &Path) -> std::process::Output {
    let matrix = sandbox.file(
        "replay.toml",
        &format!(
            "replay = true\n[matrix]\nrecorded = [\"{recorded}\"]\n[job]\ncommand = \"sh {} {}/{{recorded}}\"\ntimeout = \"20s\"\nno-progress = \"10s\"\n",
            repo_root().join("matrices/demo/replay.sh").display(),
            root.display()
        ),
    );
    run_in(sandbox)
        .arg(&matrix)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run")
}

#[test]
fn the_demo_replays_every_recorded_gpu_run_to_its_recorded_verdict() {
    let recorded = recorded_verdicts();
    assert!(
        recorded.len() >= 48,
        "reports/ should hold the recorded GPU runs, found {} cells",
        recorded.len()
    );
    let sandbox = Sandbox::new();
    let out = sandbox.path().join("demo");
    let run = run_in(&sandbox)
        .current_dir(repo_root())
        .args(["matrices/demo.toml", "--out"])
        .arg(&out)
        .args(["--jobs", "4"])
        .output()
        .expect("run the demo");
    let stderr = String::from_utf8_lossy(&run.stderr);
    // The replay exits as a live run of the recordings would: 1 when one of them failed
    // unexpectedly (the recorded H100 runs hold such findings), 0 otherwise.
    let unexpected = recorded
        .values()
        .any(|(status, _)| matches!(status.as_str(), "fail" | "xpass" | "error"));
    assert_eq!(
        run.status.code(),
        Some(i32::from(unexpected)),
        "demo exit: {stderr}"
    );
    assert!(
        stderr.contains("replaying recorded runs"),
        "the run says it is a replay: {stderr}"
    );

    let replayed: BTreeMap<String, (String, Value)> = records(&out)
        .into_iter()
        .map(|r| {
            (
                r["values"]["recorded"]
                    .as_str()
                    .expect("recorded")
                    .to_owned(),
                (
                    r["status"].as_str().expect("status").to_owned(),
                    r["signature"].clone(),
                ),
            )
        })
        .collect();
    // Each recorded cell is in the demo (a new run folder under reports/ must be added to it)...
    let missing: BTreeSet<&String> = recorded
        .keys()
        .filter(|k| !replayed.contains_key(*k))
        .collect();
    assert!(missing.is_empty(), "not replayed by demo.toml: {missing:?}");
    // ...and the pipeline, reading only the replayed log and exit, reaches the recorded verdict.
    // A recording the classifier of its day could not name (`unknown`) may be named now: the
    // classifier learns from what the GPU runs found. Its status must still be the recorded one.
    for (cell, verdict) in &recorded {
        let learned = verdict.1 == "unknown" && replayed[cell].0 == verdict.0;
        assert!(
            learned || &replayed[cell] == verdict,
            "{cell}: replay {:?} differs from the recording {verdict:?}",
            replayed[cell]
        );
    }
    // The replayed logs are the recorded ones (not the harness's old notes), under a header.
    let log =
        std::fs::read_to_string(out.join("logs/gpu-smoke-h100_native-illegal.log")).expect("log");
    assert!(
        log.contains("replay of ../reports/gpu-smoke-h100 cell native-illegal"),
        "{log}"
    );
    assert!(
        log.contains("an illegal memory access was encountered"),
        "{log}"
    );
    assert_eq!(
        log.matches("[gpucompat] command:").count(),
        1,
        "only the replaying run's own notes: {log}"
    );

    // Labelled a replay in the manifest and in both human-facing reports.
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["replay"], Value::Bool(true));
    let md = std::fs::read_to_string(out.join("compat.md")).expect("compat.md");
    assert!(md.contains("**Replay:**"), "{md}");
    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    assert!(
        html.contains("class=\"replay\""),
        "the dashboard carries the replay banner"
    );
}

#[test]
fn a_live_run_is_not_labelled_a_replay() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file("m.toml", "[matrix]\nx = [1]\n[job]\ncommand = \"true\"\n");
    let out = sandbox.path().join("run");
    run_in(&sandbox)
        .arg(&matrix)
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["replay"], Value::Bool(false));
    let md = std::fs::read_to_string(out.join("compat.md")).expect("compat.md");
    assert!(!md.contains("Replay"), "{md}");
}

#[test]
fn replaying_a_cell_that_was_never_recorded_fails_loudly() {
    let sandbox = Sandbox::new();
    let out = sandbox.path().join("run");
    let output = replay(
        &sandbox,
        &repo_root().join("reports"),
        "gpu-smoke-h100/no-such-cell",
        &out,
    );
    assert_eq!(output.status.code(), Some(1));
    let log =
        std::fs::read_to_string(out.join("logs/gpu-smoke-h100_no-such-cell.log")).expect("log");
    assert!(
        log.contains("replay: no record of cell 'no-such-cell'"),
        "{log}"
    );
}

/// The replay reads a record's own verdict (not the `signature` of its expectation, written after
/// it) and replays every byte of the log, NUL bytes and invalid UTF-8 included.
#[test]
fn a_replay_reads_the_records_own_verdict_and_every_byte_of_its_log() {
    let sandbox = Sandbox::new();
    let run = sandbox.path().join("recorded");
    std::fs::create_dir_all(run.join("logs")).expect("logs");
    let mut log = b"[gpucompat] cell c attempt 1\nwarming up \x00\xff\xfe\n".to_vec();
    log.extend_from_slice(
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    );
    std::fs::write(run.join("logs/c.log"), &log).expect("log");
    let record = serde_json::json!({
        "id": "c", "values": {"x": "c"}, "pins": ["a==1"], "status": "fail", "signature": "oom",
        "phase": "launch", "duration_s": 1.0, "attempts": 1, "log": "logs/c.log",
        "metrics": {}, "runner": {"host": "h", "gpus": []}, "exit": {"code": 1},
        "spurious": false,
        "expectation": {"signature": "deadlock", "reason": "a different expectation"},
        "started_at": "2026-11-22T00:00:00Z", "format_version": 1
    });
    std::fs::write(run.join("results.jsonl"), format!("{record}\n")).expect("results");
    let out = sandbox.path().join("run");
    let output = replay(&sandbox, sandbox.path(), "recorded/c", &out);
    assert_eq!(output.status.code(), Some(1));
    let replayed = &records(&out)[0];
    assert_eq!(replayed["status"], "fail", "{replayed}");
    assert_eq!(replayed["signature"], "oom", "{replayed}");
    assert!(
        replayed["duration_s"].as_f64().expect("duration") < 5.0,
        "exited as recorded, not hung: {replayed}"
    );
    let text = std::fs::read(out.join("logs/recorded_c.log")).expect("log");
    assert!(
        text.windows(5)
            .any(|w| w == b"\x00\xff\xfe\n".as_slice() || w == b"up \x00\xff"),
        "the raw bytes are replayed"
    );
}
