//! `gpucompat merge`: shards of one matrix, each a real `gpucompat run` of some of its cells,
//! joined into one run folder that report and compare read like any run.

use crate::util::{Sandbox, exits, gpucompat, records, run_in};
use std::path::{Path, PathBuf};

const MATRIX: &str = r#"
name = "sharded"
[matrix]
n = [1, 2, 3, 4]
[job]
command = "echo cell {n}; if [ {n} = 3 ]; then echo 'RuntimeError: CUDA error: an illegal memory access was encountered'; exit 1; fi"
timeout = "1m"
"#;

fn shard(sandbox: &Sandbox, matrix: &Path, name: &str, filter: &str) -> PathBuf {
    let out = sandbox.path().join(name);
    exits(
        run_in(sandbox)
            .args(["--filter", filter, "--out"])
            .arg(&out)
            .arg(matrix),
        &[0, 1],
    );
    out
}

#[test]
fn merge_joins_shards_into_one_run_that_report_and_compare_read() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file("m.toml", MATRIX);
    let a = shard(&sandbox, &matrix, "a", "n=1 | n=2");
    let b = shard(&sandbox, &matrix, "b", "n=3 | n=4");
    // Cell 4 again, later: a conflict, and this later record is kept.
    let c = shard(&sandbox, &matrix, "c", "n=4");
    let merged = sandbox.path().join("merged");
    let out = exits(
        gpucompat()
            .arg("merge")
            .args([&a, &b, &c])
            .arg("--out")
            .arg(&merged),
        &[0],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cell `4` is in two shards") && stderr.contains(&c.display().to_string()),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("3 shard(s)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let merged_records = records(&merged);
    let mut ids: Vec<&str> = merged_records
        .iter()
        .map(|r| r["id"].as_str().expect("id"))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["1", "2", "3", "4"]);
    let kept = merged_records.iter().find(|r| r["id"] == "4").expect("4");
    let from_c = &records(&c)[0];
    assert_eq!(kept["started_at"], from_c["started_at"], "the later record");
    // Every record's log came with it.
    for record in &merged_records {
        let log = merged.join(record["log"].as_str().expect("log"));
        let text = std::fs::read_to_string(&log).expect("log copied");
        assert!(
            text.contains(&format!("cell {}", record["id"].as_str().unwrap_or(""))),
            "{text}"
        );
    }
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(merged.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["shards"].as_array().map(Vec::len), Some(3));
    assert_eq!(manifest["host"], "test-host");
    assert_eq!(manifest["state"], "finished");
    assert_eq!(manifest["shards"][2]["records"], 1);
    assert!(merged.join("plan.json").is_file());

    // The merged folder is a run: a report of all four cells, and a comparison against a shard.
    exits(
        gpucompat()
            .arg("report")
            .arg(&merged)
            .arg("--out")
            .arg(sandbox.path().join("report")),
        &[0, 1],
    );
    let md = std::fs::read_to_string(sandbox.path().join("report/compat.md")).expect("md");
    assert!(md.contains("illegal_address"), "{md}");
    assert!(md.contains("3 ✓ pass"), "{md}");
    let compare = gpucompat()
        .arg("compare")
        .arg(&a)
        .arg(&merged)
        .output()
        .expect("compare");
    assert_eq!(
        compare.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&compare.stdout)
    );
}

#[test]
fn merge_refuses_shards_of_other_matrices_and_a_used_out_folder() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file("m.toml", MATRIX);
    let other = sandbox.file(
        "other.toml",
        &MATRIX.replace("n = [1, 2, 3, 4]", "n = [1, 2]"),
    );
    let a = shard(&sandbox, &matrix, "a", "n=1");
    let b = shard(&sandbox, &other, "b", "n=2");
    let out = gpucompat()
        .arg("merge")
        .args([&a, &b])
        .arg("--out")
        .arg(sandbox.path().join("merged"))
        .output()
        .expect("merge");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("only shards of one matrix file"),
        "{stderr}"
    );
    assert!(!sandbox.path().join("merged").exists(), "nothing written");

    let out = gpucompat()
        .arg("merge")
        .arg(&a)
        .arg("--out")
        .arg(&a)
        .output()
        .expect("merge");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty"));

    let out = gpucompat()
        .arg("merge")
        .arg(sandbox.path())
        .arg("--out")
        .arg(sandbox.path().join("m2"))
        .output()
        .expect("merge");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a run folder"));
}
