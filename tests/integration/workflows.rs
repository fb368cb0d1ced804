//! The workflows users copy (`.github/workflows/`): every gpucompat command they run must exist
//! with the flags they give it, and every field of the job matrix they read must be one
//! `plan --format github` prints. (actionlint checks the rest: `scripts/test` runs it.)

use crate::util::{gpucompat, repo_root};
use serde_json::Value;
use std::collections::BTreeSet;

const WORKFLOWS: [&str; 3] = ["nightly.yml", "gate.yml", "gate-comment.yml"];

fn workflow(name: &str) -> String {
    std::fs::read_to_string(repo_root().join(".github/workflows").join(name)).expect("workflow")
}

/// The workflow's shell lines with `\` continuations joined.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    lines
}

/// (subcommand, flags) of each gpucompat invocation: the binary is named as `gpucompat"`,
/// `/gpucompat ` or `$bin"` (a variable holding it).
fn invocations(text: &str) -> Vec<(String, Vec<String>)> {
    let call = regex::Regex::new(r#"(?:gpucompat"?|\$bin"?|\$\{bin\}"?)\s+([a-z]+)\b(.*)"#)
        .expect("regex");
    let flag = regex::Regex::new(r"(?:^|\s)(--[a-z][a-z-]*)").expect("regex");
    logical_lines(text)
        .iter()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| call.captures(line))
        .map(|c| {
            let flags = flag.captures_iter(&c[2]).map(|f| f[1].to_owned()).collect();
            (c[1].to_owned(), flags)
        })
        .collect()
}

#[test]
fn workflows_run_gpucompat_commands_that_exist() {
    let mut seen = BTreeSet::new();
    for name in WORKFLOWS {
        let text = workflow(name);
        let calls = invocations(&text);
        assert!(!calls.is_empty(), "{name} runs no gpucompat command");
        for (sub, flags) in calls {
            let help = gpucompat()
                .args([sub.as_str(), "--help"])
                .output()
                .expect("help");
            assert!(
                help.status.success(),
                "{name}: `gpucompat {sub}` is not a command"
            );
            let help = String::from_utf8_lossy(&help.stdout);
            for flag in flags {
                assert!(
                    help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                    "{name}: `gpucompat {sub}` has no `{flag}`:\n{help}"
                );
            }
            seen.insert(sub);
        }
    }
    // The nightly's whole path and the gate's are there.
    for sub in ["check", "plan", "run", "merge", "report", "publish", "gate"] {
        assert!(seen.contains(sub), "no workflow runs `gpucompat {sub}`");
    }
}

#[test]
fn workflows_read_only_fields_the_job_matrix_has() {
    let out = gpucompat()
        .current_dir(repo_root())
        .args(["plan", "matrices/nightly.toml", "--format", "github"])
        .output()
        .expect("plan");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entries = plan["include"].as_array().expect("include");
    assert!(!entries.is_empty());
    let field = regex::Regex::new(r"matrix\.([a-z][a-z-]*)").expect("regex");
    let nightly = workflow("nightly.yml");
    let used: BTreeSet<&str> = field
        .captures_iter(&nightly)
        .map(|c| c.get(1).expect("field").as_str())
        .collect();
    assert!(
        used.contains("runs-on") && used.contains("args"),
        "{used:?}"
    );
    for entry in entries {
        for key in &used {
            assert!(
                entry.get(*key).is_some(),
                "nightly.yml reads matrix.{key}, which {entry} lacks"
            );
        }
    }
    // The gate's runner labels come from the same output: a JSON list of strings.
    assert!(entries.iter().all(|e| {
        e["runs-on"]
            .as_array()
            .is_some_and(|l| l.iter().all(Value::is_string))
    }));
}

#[test]
fn workflows_never_check_out_pull_request_code_with_a_writing_token() {
    for name in WORKFLOWS {
        let text = workflow(name);
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            !code.contains("pull_request_target"),
            "{name}: pull_request_target runs with secrets next to PR code"
        );
        assert!(
            text.contains("permissions: {}"),
            "{name}: permissions are granted per job, none at the top"
        );
        for line in text
            .lines()
            .filter(|l| l.trim_start().starts_with("- uses:"))
        {
            let pinned = line
                .split('@')
                .nth(1)
                .is_some_and(|r| r.len() >= 40 && r[..40].bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(pinned, "{name}: an action not pinned to a commit: {line}");
        }
    }
    // The job that can write never checks out anything but gpucompat's own source.
    let comment = workflow("gate-comment.yml");
    assert!(comment.contains("pull-requests: write"));
    for checkout in comment.split("actions/checkout@").skip(1) {
        assert!(
            checkout.contains("repository: ${{ env.GPUCOMPAT_REPOSITORY || github.repository }}"),
            "gate-comment.yml checks out something other than gpucompat"
        );
    }
}

fn plan_github(matrix: &str, extra: &[&str]) -> std::process::Output {
    let sandbox = crate::util::Sandbox::new();
    let file = sandbox.file("m.toml", matrix);
    gpucompat()
        .arg("plan")
        .arg(&file)
        .args(["--format", "github"])
        .args(extra)
        .output()
        .expect("plan")
}

const RUNNERS: &str = r#"[matrix]
gpu = ["sm_90", "sm_89+sm_86", "2xsm_90"]

[resources]
gpus = "{gpu}"

[job]
command = "true"

[runners]
labels = ["self-hosted", "gpu-ci"]
arch-label = "cuda-{arch}"
arch = { sm_90 = "h100" }
"#;

fn runs_on(out: &std::process::Output) -> Vec<Vec<String>> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    plan["include"]
        .as_array()
        .expect("include")
        .iter()
        .map(|e| serde_json::from_value(e["runs-on"].clone()).expect("labels"))
        .collect()
}

/// `[runners]` says what the runners are labelled: base labels, a template per arch, and labels
/// for one arch; `--runner-label` still replaces the base.
#[test]
fn workflows_runner_labels_follow_the_matrix() {
    let labels = runs_on(&plan_github(RUNNERS, &[]));
    assert_eq!(
        labels,
        [
            vec!["self-hosted", "gpu-ci", "h100"],
            vec![
                "self-hosted",
                "gpu-ci",
                "cuda-sm_89",
                "cuda-sm_86",
                "gpus-2"
            ],
            vec!["self-hosted", "gpu-ci", "h100", "gpus-2"],
        ]
    );
    let given = runs_on(&plan_github(RUNNERS, &["--runner-label", "lab"]));
    assert_eq!(given[0], ["lab", "h100"]);
    // Without the table: the documented defaults.
    let plain = runs_on(&plan_github(
        &RUNNERS[..RUNNERS.find("[runners]").expect("table")],
        &[],
    ));
    assert_eq!(plain[0], ["self-hosted", "linux", "gpu-sm_90"]);
}

#[test]
fn workflows_runner_labels_that_cannot_work_are_refused_where_written() {
    let bad = RUNNERS
        .replace("\"gpu-ci\"]", "\"gpu ci\"]")
        .replace("cuda-{arch}", "cuda")
        .replace("sm_90 = \"h100\"", "sm_9x = \"h100\"");
    let out = plan_github(&bad, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "`gpu ci` is not a runner label",
        "arch-label `cuda` must name `{arch}`",
        "`sm_9x` in [runners.arch] is not a GPU arch",
        "m.toml:11:",
    ] {
        assert!(stderr.contains(expected), "missing {expected:?}:\n{stderr}");
    }
}
