//! Good matrix files (`tests/fixtures/matrices/good-*.toml` and the shipped `matrices/`): what
//! `check`, `matrix expand` and `plan` print for them, as snapshots, plus the facts the snapshots
//! are meant to show, asserted directly.

use crate::matrix_errors::run_in_fixtures;
use crate::util::{gpucompat, repo_root};
use serde_json::Value;

/// Runs a command on a good fixture: exit 0, nothing on stderr; returns stdout.
fn ok(args: &[&str]) -> String {
    let (code, stdout, stderr) = run_in_fixtures(args);
    assert_eq!(code, Some(0), "{args:?}: {stderr}");
    assert_eq!(stderr, "", "{args:?}");
    stdout
}

fn snapshot(name: &str, command: &str, text: &str) {
    insta::with_settings!({ description => command, omit_expression => true }, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn every_good_fixture_checks_clean() {
    let dir = repo_root().join("tests/fixtures/matrices");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("read fixtures")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("good-") && name.ends_with(".toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mut args = vec!["check"];
    args.extend(files.iter().map(String::as_str));
    let stdout = ok(&args);
    assert_eq!(stdout.lines().count(), files.len(), "{stdout}");
}

#[test]
fn features_expand_json() {
    let stdout = ok(&["matrix", "expand", "good-features.toml", "--format", "json"]);
    snapshot(
        "good-features.expand.json",
        "gpucompat matrix expand good-features.toml --format json",
        &stdout,
    );
    let cells: Vec<Value> = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(cells.len(), 17);
    for cell in &cells {
        let keys: Vec<&String> = cell.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["id", "values"]);
    }
    // Keys added by include come after the axes, in the order first added.
    let first: Vec<&String> = cells[0]["values"]
        .as_object()
        .expect("values")
        .keys()
        .collect();
    assert_eq!(first, ["flashinfer", "gpu", "model", "tp", "spec"]);
    let mixed = &cells[8]["values"];
    assert_eq!(mixed["gpu"], "sm_86+sm_89");
    assert_eq!(mixed["tp"], 2);
    assert_eq!(mixed["arch_list"], "8.6");
    // The include entry that matches no product cell becomes the last cell.
    assert_eq!(cells[16]["id"], "0.7.0rc1-sm_120-qwen3-30b-a3b");
}

#[test]
fn features_expand_table() {
    let stdout = ok(&["matrix", "expand", "good-features.toml"]);
    snapshot(
        "good-features.expand.table",
        "gpucompat matrix expand good-features.toml",
        &stdout,
    );
}

#[test]
fn features_plan_table() {
    let stdout = ok(&["plan", "good-features.toml", "--format", "table"]);
    snapshot(
        "good-features.plan.table",
        "gpucompat plan good-features.toml --format table",
        &stdout,
    );
    let row: Vec<&str> = stdout
        .lines()
        .find(|line| line.starts_with("0.6.8.post1-sm_86_sm_89-qwen3-30b-a3b "))
        .expect("row of the mixed-arch cell")
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        [
            "0.6.8.post1-sm_86_sm_89-qwen3-30b-a3b",
            "sm_86+sm_89",
            "job",
            "flashinfer-cubin==0.6.8.post1",
            "flashinfer-python==0.6.8.post1",
            "xfail",
            "no_kernel_image",
        ]
    );
    assert!(stdout.ends_with("17 cells (17 need GPUs), 4 distinct pin sets\n"));
}

#[test]
fn features_plan_github() {
    let stdout = ok(&["plan", "good-features.toml", "--format", "github"]);
    let plan: Value = serde_json::from_str(&stdout).expect("JSON");
    let pretty = serde_json::to_string_pretty(&plan).expect("JSON");
    snapshot(
        "good-features.plan.github",
        "gpucompat plan good-features.toml --format github",
        &pretty,
    );
    let include = plan["include"].as_array().expect("include");
    assert_eq!(include.len(), 17);
    let two = &include[2];
    assert_eq!(two["id"], "0.6.3-2xsm_90-qwen3-30b-a3b");
    assert_eq!(two["cell"], two["id"]);
    assert_eq!(
        two["runs-on"],
        serde_json::json!(["self-hosted", "linux", "gpu-sm_90", "gpus-2"])
    );
    let mixed = &include[8];
    assert_eq!(
        mixed["runs-on"],
        serde_json::json!(["self-hosted", "linux", "gpu-sm_86", "gpu-sm_89", "gpus-2"])
    );
    assert_eq!(mixed["gpus"], "sm_86+sm_89");
}

#[test]
fn github_runner_labels_can_be_chosen() {
    let stdout = ok(&[
        "plan",
        "good-features.toml",
        "--format",
        "github",
        "--runner-label",
        "gpu-farm",
    ]);
    let plan: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(
        plan["include"][0]["runs-on"],
        serde_json::json!(["gpu-farm", "gpu-sm_90"])
    );
}

/// The plan as JSON carries everything rendered: commands, environment, pins, GPUs, deadlines.
#[test]
fn features_plan_json_renders_templates() {
    let stdout = ok(&["plan", "good-features.toml", "--format", "json"]);
    let plan: Value = serde_json::from_str(&stdout).expect("JSON");
    let cells = plan["cells"].as_array().expect("cells");
    let mixed = &cells[8];
    assert_eq!(mixed["id"], "0.6.8.post1-sm_86_sm_89-qwen3-30b-a3b");
    assert_eq!(mixed["gpus"], serde_json::json!(["sm_86", "sm_89"]));
    assert_eq!(
        mixed["engine"]["command"],
        "sh smoke.sh --model Qwen/Qwen3-30B-A3B --tp 2 --flashinfer 0.6.8.post1"
    );
    assert_eq!(
        mixed["env"],
        serde_json::json!([["TORCH_CUDA_ARCH_LIST", "8.6"], ["MODEL_FAMILY", "moe"]])
    );
    assert_eq!(
        mixed["pins"],
        serde_json::json!([
            {"name": "flashinfer-cubin", "version": "0.6.8.post1"},
            {"name": "flashinfer-python", "version": "0.6.8.post1"},
        ])
    );
    assert_eq!(mixed["timeout"], "45m");
    assert_eq!(mixed["no_progress"], "10m");
    assert_eq!(mixed["expectation"]["signature"], "no_kernel_image");
    // A cell without `arch_list` does not get the variable at all.
    assert_eq!(
        cells[0]["env"],
        serde_json::json!([["MODEL_FAMILY", "moe"]])
    );
    // `spec = { family = "moe" }` in `when` matches the table partially, so only MoE cells.
    let xfail: Vec<&str> = cells
        .iter()
        .filter(|c| c["expectation"]["signature"] == "illegal_address")
        .map(|c| c["id"].as_str().expect("id"))
        .collect();
    assert_eq!(
        xfail,
        [
            "0.6.11.post1-2xsm_90-qwen3-30b-a3b",
            "0.6.11.post1-sm_86_sm_89-qwen3-30b-a3b"
        ]
    );
}

#[test]
fn nightly_plan_summary() {
    let out = gpucompat()
        .current_dir(repo_root())
        .args(["plan", "matrices/nightly.toml"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.ends_with("192 cells (192 need GPUs), 6 distinct pin sets\n"),
        "{stdout}"
    );
    let check = gpucompat()
        .current_dir(repo_root())
        .args(["check", "matrices/nightly.toml"])
        .output()
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&check.stdout),
        "ok: matrices/nightly.toml: 192 cells, 11 keys, 38 with known failures\n"
    );
    assert_eq!(String::from_utf8_lossy(&check.stderr), "");
}

/// Warnings print with their place in the file, but the file is valid: exit 0 and a summary.
#[test]
fn warnings_do_not_fail_the_check() {
    let (code, stdout, stderr) = run_in_fixtures(&["check", "warn-harmless.toml"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "ok: warn-harmless.toml: 4 cells, 2 keys\n");
    assert_eq!(stderr.matches("warning:").count(), 4, "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    snapshot(
        "warn-harmless.check",
        "gpucompat check warn-harmless.toml",
        &stderr,
    );
    // The commands that look at the matrix print the same warnings and carry on.
    let (code, stdout, again) = run_in_fixtures(&["matrix", "expand", "warn-harmless.toml"]);
    assert_eq!(code, Some(0));
    assert_eq!(again, stderr);
    assert!(stdout.ends_with("4 cells\n"), "{stdout}");
}

/// More cells than `--max-jobs`: cells with the same runner labels and pins share a job, every cell
/// is in exactly one job, and `args` runs exactly its cells. A 20 x 20 matrix fits GitHub's 256.
#[test]
fn github_jobs_group_cells_under_the_job_limit() {
    let stdout = ok(&[
        "plan",
        "good-features.toml",
        "--format",
        "github",
        "--max-jobs",
        "5",
    ]);
    let plan: Value = serde_json::from_str(&stdout).expect("JSON");
    let include = plan["include"].as_array().expect("include");
    assert!(include.len() <= 5, "{}", include.len());
    let mut cells: Vec<&str> = Vec::new();
    for job in include {
        let ids: Vec<&str> = job["cells"]
            .as_array()
            .expect("cells")
            .iter()
            .map(|c| c.as_str().expect("id"))
            .collect();
        let args: Vec<String> = ids.iter().map(|id| format!("--cell {id}")).collect();
        assert_eq!(job["args"], args.join(" "), "{job}");
        cells.extend(ids);
    }
    let mut unique = cells.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!((cells.len(), unique.len()), (17, 17));

    let sandbox = crate::util::Sandbox::new();
    let axis: Vec<String> = (1..=20).map(|n| n.to_string()).collect();
    let big = sandbox.file(
        "big.toml",
        &format!(
            "[matrix]\na = [{0}]\nb = [{0}]\n[resources]\ngpus = \"sm_90\"\n[job]\ncommand = \"true\"\n",
            axis.join(", ")
        ),
    );
    let out = crate::util::gpucompat()
        .args(["plan", "--format", "github"])
        .arg(&big)
        .output()
        .expect("plan");
    assert_eq!(out.status.code(), Some(0));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let include = plan["include"].as_array().expect("include");
    assert!(include.len() <= 256, "{}", include.len());
    let total: usize = include
        .iter()
        .map(|j| j["cells"].as_array().map_or(0, Vec::len))
        .sum();
    assert_eq!(total, 400);
}
