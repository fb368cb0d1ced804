//! `gpucompat gate` and `compare` across a dependency bump: real cell runs on both sides, pairing
//! of cells a bump renamed, confirmation retries, attribution, reuse of a nightly, exit codes.

use crate::util::{Sandbox, gpucompat, run_in};
use serde_json::Value;

/// A matrix whose `fi` axis is the bumped version; the job fails on sm_90 from 0.6.11 on.
fn bump_matrix(version: &str) -> String {
    format!(
        r#"[matrix]
fi = ["0.6.3", "{version}"]
gpu = ["sm_86", "sm_90"]

[job]
command = """case "{{fi}}-{{gpu}}" in 0.6.11-sm_90) echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2; exit 1;; esac"""
timeout = "1m"
"#
    )
}

fn stdout_json(output: &std::process::Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Before pairing, a bump that breaks a cell read as "1 new, 1 removed" and exit 0; now the
/// renamed cells are paired by their other values, the regression is found and the moved axis
/// named.
#[test]
fn compare_pairs_cells_a_version_bump_renamed() {
    let sandbox = Sandbox::new();
    let before = sandbox.file("before/m.toml", &bump_matrix("0.6.8"));
    let after = sandbox.file("after/m.toml", &bump_matrix("0.6.11"));
    for (matrix, out) in [(&before, "runs/before"), (&after, "runs/after")] {
        let status = run_in(&sandbox)
            .arg(matrix)
            .arg("--out")
            .arg(sandbox.path().join(out))
            .output()
            .expect("run");
        assert!(status.status.code().is_some_and(|c| c <= 1), "{status:?}");
    }
    let compare = |extra: &[&str]| {
        gpucompat()
            .current_dir(sandbox.path())
            .args(["compare", "runs/before", "runs/after"])
            .args(extra)
            .output()
            .expect("compare")
    };
    let output = compare(&[]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("0.6.11-sm_90 (was 0.6.8-sm_90)") && l.contains("regressed")),
        "{text}"
    );
    assert!(
        text.contains("moved: fi 0.6.8 -> 0.6.11 (2 cell(s) paired across the rename)"),
        "{text}"
    );
    assert!(
        !text.contains(" new") && !text.contains("removed"),
        "{text}"
    );

    let json = stdout_json(&compare(&["--format", "json"]));
    assert_eq!(json["regressions"], 1);
    assert_eq!(json["pairing"]["moved"][0]["key"], "fi");
    assert_eq!(json["cells"][0]["base_id"], "0.6.8-sm_90");

    // By id, the old answer: nothing paired across the bump, no regression.
    let output = compare(&["--pair-by", "id"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("2 new") && text.contains("2 removed"),
        "{text}"
    );

    // By keys that cannot tell cells apart: a clear error, exit 2.
    let output = compare(&["--pair-by", "fi"]);
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("`--pair-by fi`: 2 cells of the baseline run"),
        "{err}"
    );
}

/// Cells whose verdict depends on the pins they get in `GPUCOMPAT_PINS` (no installs: the matrix
/// has no `[python]`): one that the bump breaks through quack-kernels only, one broken before,
/// one the bump fixes, one that fails once on head and then passes, one that never fails.
const GATE_MATRIX: &str = "[matrix]\ncell = [\"ok\", \"breaks\", \"already\", \"fixed\", \"flaky\"]\n[job]\ncommand = \"sh job.sh {cell}\"\ntimeout = \"1m\"\n";

/// The cells' script (in a file: a log's header echoes the command).
const GATE_JOB: &str = r#"case "$1:$GPUCOMPAT_PINS" in
  breaks:*quack-kernels==0.2.0*) echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2; exit 1;;
  already:*) echo 'RuntimeError: CUDA error: no kernel image is available for execution on the device' >&2; exit 1;;
  fixed:*flashinfer-python==0.6.8*) echo 'torch.OutOfMemoryError: CUDA out of memory.' >&2; exit 1;;
  flaky:*flashinfer-python==0.6.11*) if [ ! -e flaky.once ]; then touch flaky.once; echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2; exit 1; fi;;
esac
"#;

const BASE_PINS: &str = "flashinfer-python==0.6.8,flashinfer-cubin==0.6.8,quack-kernels==0.1.0";
const HEAD_PINS: &str =
    "flashinfer-python==0.6.11\nflashinfer-cubin==0.6.11\nquack-kernels==0.2.0\n";

fn gate_in(sandbox: &Sandbox) -> assert_cmd::Command {
    let inventory = sandbox.file("no-gpus.toml", "host = \"test-host\"\n");
    let mut command = gpucompat();
    command
        .current_dir(sandbox.path())
        .env_remove("GITHUB_TOKEN")
        .arg("gate")
        .arg("--cache-dir")
        .arg(sandbox.path().join("cache"))
        .arg("--inventory")
        .arg(inventory);
    command
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_owned())
        .collect()
}

/// The whole verdict: a confirmed regression with its culprit (attribution over the three moved
/// packages), a fix, a failure that was there before (never blamed), a cell that failed once and
/// passed on the retry (flaky, not blocking); exit 1 and one verdict line.
#[test]
fn gate_blocks_only_confirmed_regressions_and_names_the_culprit() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", GATE_MATRIX);
    sandbox.file("job.sh", GATE_JOB);
    sandbox.file("head.txt", HEAD_PINS);
    let output = gate_in(&sandbox)
        .args(["m.toml", "--base", BASE_PINS, "--head", "head.txt"])
        .args(["--out", "g", "--format", "json"])
        .output()
        .expect("gate");
    let json = stdout_json(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{json:#}\n{stderr}");
    assert_eq!(ids(&json["regressions"]), ["breaks"], "{json:#}");
    assert_eq!(ids(&json["fixed"]), ["fixed"]);
    assert_eq!(ids(&json["still_failing"]), ["already"]);
    assert_eq!(ids(&json["flaky"]), ["flaky"]);
    assert_eq!(ids(&json["spurious"]), Vec::<String>::new());
    let regression = &json["regressions"][0];
    assert_eq!(regression["signature"], "illegal_address");
    assert_eq!(regression["confirmed"], true);
    assert_eq!(regression["culprits"], serde_json::json!(["quack-kernels"]));
    assert!(
        regression["excerpt"]
            .as_str()
            .unwrap()
            .contains("illegal memory access")
    );
    assert!(
        regression["reproducer"]
            .as_str()
            .unwrap()
            .ends_with("--head head.txt --cell breaks"),
        "{regression}"
    );
    assert_eq!(json["flaky"][0]["confirmed"], false);
    assert_eq!(json["attribution"][0]["converged"], true);
    assert!(
        stderr.contains("gate: blocked: 1 confirmed regression(s): breaks (illegal_address, culprit quack-kernels)"),
        "{stderr}"
    );
    // Both sides are real run folders; the verdict is on disk.
    let gate_json: Value =
        serde_json::from_str(&std::fs::read_to_string(sandbox.path().join("g/gate.json")).unwrap())
            .unwrap();
    assert_eq!(gate_json["state"], "finished");
    assert_eq!(
        crate::util::records(&sandbox.path().join("g/base")).len(),
        5
    );
    assert_eq!(
        crate::util::records(&sandbox.path().join("g/head")).len(),
        5
    );
    assert_eq!(
        crate::util::records(&sandbox.path().join("g/head-retry")).len(),
        2
    );

    // The same folder again without --resume: refused; with it: the same verdict, nothing rerun.
    let again = gate_in(&sandbox)
        .args([
            "m.toml", "--base", BASE_PINS, "--head", "head.txt", "--out", "g",
        ])
        .output()
        .expect("gate");
    assert_eq!(again.status.code(), Some(2));
    let resumed = gate_in(&sandbox)
        .args([
            "m.toml", "--base", BASE_PINS, "--head", "head.txt", "--out", "g", "--resume",
        ])
        .output()
        .expect("gate");
    assert_eq!(resumed.status.code(), Some(1));
    let text = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("gate: blocked: 1 confirmed"),
        "{text}"
    );
    assert_eq!(
        crate::util::records(&sandbox.path().join("g/head")).len(),
        5
    );
}

/// A bump that breaks nothing passes (exit 0); a nightly's records stand for the base side when
/// harness, values and pins match, so base cells are not run again.
#[test]
fn gate_passes_a_harmless_bump_and_reuses_a_matching_nightly() {
    let sandbox = Sandbox::new();
    sandbox.file(
        "m.toml",
        "[matrix]\ncell = [\"a\", \"b\"]\n[packages]\n[job]\ncommand = \"echo $GPUCOMPAT_PINS >> ran.log\"\ntimeout = \"1m\"\n",
    );
    // The nightly ran with the base pins: gate it against itself first, keep its base folder.
    let first = gate_in(&sandbox)
        .args([
            "m.toml",
            "--base",
            "torch==2.4.0",
            "--head",
            "torch==2.5.0",
            "--out",
            "g1",
        ])
        .output()
        .expect("gate");
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(
        text.contains("gate: passed: no confirmed regression"),
        "{text}"
    );
    let ran = |s: &Sandbox| std::fs::read_to_string(s.path().join("ran.log")).unwrap_or_default();
    assert_eq!(
        ran(&sandbox)
            .lines()
            .filter(|l| l.contains("2.4.0"))
            .count(),
        2
    );
    let second = gate_in(&sandbox)
        .args([
            "m.toml",
            "--base",
            "torch==2.4.0",
            "--head",
            "torch==2.6.0",
            "--out",
            "g2",
        ])
        .args(["--baseline-run", "g1/base", "--format", "json"])
        .output()
        .expect("gate");
    assert_eq!(second.status.code(), Some(0));
    let json = stdout_json(&second);
    assert_eq!(json["reused"], 2, "{json:#}");
    assert_eq!(
        ran(&sandbox)
            .lines()
            .filter(|l| l.contains("2.4.0"))
            .count(),
        2,
        "base cells were not run again"
    );
}

/// A token a cell prints never reaches a report: excerpts are redacted in every output.
#[test]
fn report_outputs_redact_tokens_from_cell_logs() {
    let sandbox = Sandbox::new();
    let secret = format!("hf_{}", "Kp4".repeat(12));
    sandbox.file(
        "m.toml",
        "[matrix]\ncell = [\"a\"]\n[job]\ncommand = \"sh job.sh\"\ntimeout = \"1m\"\n",
    );
    sandbox.file(
        "job.sh",
        &format!("echo 'login {secret}' >&2\necho 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2\nexit 1\n"),
    );
    let run = run_in(&sandbox)
        .current_dir(sandbox.path())
        .args(["m.toml", "--out", "r"])
        .output()
        .expect("run");
    assert_eq!(run.status.code(), Some(1));
    let mut shown = 0;
    for name in [
        "compat.md",
        "compat.csv",
        "compat.json",
        "junit.xml",
        "index.html",
    ] {
        let text = std::fs::read_to_string(sandbox.path().join("r").join(name)).expect(name);
        assert!(!text.contains(&secret), "{name} holds the token");
        shown += usize::from(text.contains("hf_[REDACTED]"));
    }
    assert!(
        shown >= 2,
        "the excerpt line is shown, redacted, in the dashboard and the JSON"
    );
}

/// A published site (a report into its own folder, logs copied in) carries no token a cell
/// printed, not in a fingerprint taken from the root-cause line, not in the copied log.
#[test]
fn a_published_site_carries_no_token_from_fingerprints_or_copied_logs() {
    let sandbox = Sandbox::new();
    let secret = format!("ghp_{}", "Zq7".repeat(12));
    sandbox.file(
        "m.toml",
        "[matrix]\ncell = [\"a\"]\n[job]\ncommand = \"sh job.sh\"\ntimeout = \"1m\"\n",
    );
    sandbox.file(
        "job.sh",
        &format!("echo 'RuntimeError: CUDA error: an illegal memory access was encountered (token {secret})' >&2\nexit 1\n"),
    );
    let run = run_in(&sandbox)
        .current_dir(sandbox.path())
        .args(["m.toml", "--out", "r"])
        .output()
        .expect("run");
    assert_eq!(run.status.code(), Some(1));
    let site = sandbox.path().join("site");
    let report = crate::util::gpucompat()
        .arg("report")
        .arg(sandbox.path().join("r"))
        .arg("--out")
        .arg(&site)
        .output()
        .expect("report");
    assert_eq!(report.status.code(), Some(0));
    let mut files = vec![site.clone()];
    let mut read = 0;
    let mut masked = 0;
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(
                std::fs::read_dir(&path)
                    .expect("dir")
                    .map(|e| e.expect("entry").path()),
            );
            continue;
        }
        let bytes = std::fs::read(&path).expect("file");
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(&secret),
            "{} holds the token",
            path.display()
        );
        read += 1;
        masked += usize::from(text.contains("ghp_[REDACTED]"));
    }
    let log = std::fs::read_to_string(site.join("logs").join("a.log")).expect("copied log");
    assert!(log.contains("ghp_[REDACTED]"), "{log}");
    assert!(read >= 6 && masked >= 3, "{read} files, {masked} masked");
}
