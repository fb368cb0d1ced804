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
    the_demo_report_reads_like_the_recordings(&out);
}

/// Each replayed cell carries its recording's own values (demo.toml's `include`), so the demo's
/// report lays them out as the recordings are laid out.
#[test]
fn the_demo_gives_each_replayed_cell_its_recorded_values() {
    let expand = crate::util::gpucompat()
        .current_dir(repo_root())
        .args(["matrix", "expand", "matrices/demo.toml", "--format", "json"])
        .output()
        .expect("expand");
    assert!(
        expand.status.success(),
        "{}",
        String::from_utf8_lossy(&expand.stderr)
    );
    let cells: Value = serde_json::from_slice(&expand.stdout).expect("json");
    let cells = cells.as_array().expect("cells");
    let reports = repo_root().join("reports");
    for cell in cells {
        let values = &cell["values"];
        let recorded = values["recorded"].as_str().expect("recorded");
        let (run, id) = recorded.split_once('/').expect("RUN/CELL");
        let results =
            std::fs::read_to_string(reports.join(run).join("results.jsonl")).expect("results");
        let record: Value = results
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .rfind(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{recorded}: no record"));
        let mut expected = record["values"].as_object().expect("values").clone();
        expected.insert("recorded".to_owned(), Value::from(recorded));
        expected.insert("run".to_owned(), Value::from(run));
        assert_eq!(
            values.as_object().expect("values"),
            &expected,
            "{recorded}: demo.toml's include must give the recorded values"
        );
    }
}

/// The demo's report: one set of version x arch grids per recorded run, the recording's
/// timings (not the replay's), and timing plots that compare cold with warm JIT caches.
fn the_demo_report_reads_like_the_recordings(out: &Path) {
    let context: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("compat.json")).expect("compat.json"),
    )
    .expect("json");
    assert_eq!(context["layout"]["split"], "run", "{}", context["layout"]);
    let tables = context["tables"].as_array().expect("tables");
    let triton = tables
        .iter()
        .find(|t| t["title"] == "run = flashinfer-kernels-h100 · kernels = triton · workers = 1")
        .unwrap_or_else(|| panic!("a grid per kernel set and workers: {tables:#?}"));
    assert_eq!(triton["corner"], "flashinfer ↓ arch_list →");
    assert_eq!(triton["columns"], serde_json::json!(["native", "8.6"]));
    let rows: Vec<&str> = triton["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["label"].as_str().expect("label"))
        .collect();
    assert_eq!(rows, ["0.6.3", "0.6.8.post1", "0.6.11.post1"]);
    let smoke = tables
        .iter()
        .find(|t| t["title"] == "run = gpu-smoke-h100")
        .expect("the smoke run's grid");
    assert_eq!(smoke["corner"], "arch ↓ mode →");
    // No table is the one-column list of every cell.
    assert!(
        tables
            .iter()
            .all(|t| t["rows"].as_array().expect("rows").len() <= 3)
    );

    // The recording's 137 s in `infer` with a warm cache, not the replay's fraction of a second.
    let cell = context["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .find(|c| c["id"] == "flashinfer-kernels-h100_0.6.3-8.6-triton-1")
        .expect("the cell");
    assert_eq!(cell["duration_s"], 137.246, "{cell}");
    assert_eq!(cell["phase"], "infer", "{cell}");
    assert_eq!(cell["metrics"]["jit_cache_hit"], true, "{cell}");
    assert_eq!(cell["metrics"]["jit_s"], 9.03, "{cell}");
    assert!(cell["replay_duration_s"].as_f64().expect("own duration") < 10.0);
    let page =
        std::fs::read_to_string(out.join(cell["page"].as_str().expect("page"))).expect("cell page");
    assert!(page.contains("(recorded; the replay took"), "{page}");

    // Timing plots per recorded run; JIT times compare cold with warm caches per kernel set.
    let plots = context["plots"].as_array().expect("plots");
    let jit = plots
        .iter()
        .find(|p| {
            p["title"]
                .as_str()
                .is_some_and(|t| t.starts_with("flashinfer-kernels-h100: JIT compile time"))
        })
        .unwrap_or_else(|| panic!("{plots:#?}"));
    let series: Vec<&str> = jit["chart"]["series"]
        .as_array()
        .expect("series")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(series, ["cold cache", "warm cache"]);
    for plot in plots.iter().filter(|p| p["chart"]["kind"] == "bars") {
        let groups = plot["chart"]["groups"].as_array().expect("groups");
        assert!(groups.len() <= 8, "{}", plot["title"]);
        // Labels that do not fit side by side stand upright; past 28 characters they are cut.
        assert!(
            groups
                .iter()
                .all(|g| g.as_str().expect("group").chars().count() <= 28),
            "labels that fit: {}",
            plot["chart"]
        );
    }
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
