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
