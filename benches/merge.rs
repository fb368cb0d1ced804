//! Merges 200 shard run folders of one 5,000-cell matrix (25 records each, with their logs;
//! written here, nothing is run) into one run folder, and prints how long it took. Nothing asserts
//! time; the target is seconds.
//!
//! `cargo bench --bench merge`

use gpucompat::record::{Manifest, RunState};
use serde_json::json;
use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

const SHARDS: usize = 200;
const PER_SHARD: usize = 25;

fn write_shard(dir: &Path, shard: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("logs"))?;
    let manifest = Manifest {
        format_version: 1,
        harness_version: "0.1.0".into(),
        matrix: "matrices/nightly.toml".into(),
        matrix_hash: "ab".repeat(32),
        host: format!("gpu-{:03}", shard % 40),
        started_at: "2026-11-23T02:00:00Z".into(),
        finished_at: Some("2026-11-23T03:00:00Z".into()),
        state: RunState::Finished,
        cells: SHARDS * PER_SHARD,
        replay: false,
        resumes: 0,
        inventory: "nvidia-smi".into(),
        shards: Vec::new(),
    };
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string(&manifest).map_err(std::io::Error::other)?,
    )?;
    let mut lines = String::new();
    for i in 0..PER_SHARD {
        let id = format!("cell-{shard:03}-{i:02}");
        let log = format!("logs/{id}.log");
        std::fs::write(dir.join(&log), format!("cell {id}\n").repeat(200))?;
        let record = json!({
            "id": id, "values": {"shard": shard, "i": i}, "pins": [], "status": "pass",
            "signature": null, "phase": "teardown", "duration_s": 30.0 + i as f64, "attempts": 1,
            "log": log, "started_at": format!("2026-11-23T02:{:02}:{:02}Z", i, shard % 60),
        });
        lines.push_str(&record.to_string());
        lines.push('\n');
    }
    std::fs::write(dir.join("results.jsonl"), lines)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = tempfile::tempdir()?;
    let shards: Vec<_> = (0..SHARDS)
        .map(|s| root.path().join(format!("shard-{s:03}")))
        .collect();
    for (index, dir) in shards.iter().enumerate() {
        write_shard(dir, index)?;
    }
    let start = Instant::now();
    let merged = gpucompat::merge::merge(&shards, &root.path().join("merged"))?;
    writeln!(
        std::io::stdout().lock(),
        "merge: {} shards, {} records (with logs) into one run folder in {:.2} s",
        merged.shards,
        merged.records,
        start.elapsed().as_secs_f64()
    )?;
    Ok(())
}
