//! The workflows users copy (`.github/workflows/`): every gpucompat command they run must exist
//! with the flags they give it, every field of the job matrix they read must be one
//! `plan --format github` prints, and their shell steps are run here as written (bash, the same
//! environment variables, the GitHub stand-in for the posting step) to see that the nightly and
//! the gate do what they say. (actionlint checks the rest: `scripts/test` runs it.)

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

/// The `run: |` block of the step named `step` in `workflow`, dedented.
fn step_script(workflow: &str, step: &str) -> String {
    let lines: Vec<&str> = workflow.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.trim() == format!("- name: {step}"))
        .unwrap_or_else(|| panic!("no step `{step}`"));
    let run = (at..lines.len())
        .find(|&i| lines[i].trim() == "run: |")
        .unwrap_or_else(|| panic!("step `{step}` has no `run: |`"));
    let indent = lines[run].len() - lines[run].trim_start().len();
    let body: Vec<&str> = lines[run + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
        .copied()
        .collect();
    let strip = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|l| l.get(strip..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Puts the built gpucompat in `dir`, where a workflow step expects it (the build job's
/// `target/release`, or the downloaded artifact under `RUNNER_TEMP/bin`).
fn place_binary(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).expect("binary folder");
    std::fs::copy(
        assert_cmd::cargo::cargo_bin!("gpucompat"),
        dir.join("gpucompat"),
    )
    .expect("copy the binary");
}

/// Runs a step's script with bash in `dir`, as the runner would (`bash -e`), with `env`.
fn run_step(
    script: &str,
    dir: &std::path::Path,
    env: &[(&'static str, String)],
) -> std::process::Output {
    let mut command = assert_cmd::Command::new("bash");
    command
        .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("GPUCOMPAT_CACHE_DIR", dir.join("cache"));
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("bash")
}

const MINI: &str = r#"name = "mini-nightly"
[matrix]
case = ["ok", "bad", "also-ok"]
[job]
command = "sh job.sh {case}"
timeout = "1m"
"#;
const MINI_JOB: &str = "[ \"$1\" = bad ] && { echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2; exit 1; }\necho fine\n";

/// nightly.yml's own shell steps, run as written on this machine: the plan step's matrix, each
/// job's cells step into a shard (a failing cell is data, the step passes; a broken matrix fails
/// it), the shards merged into tonight's run beside earlier nights (the oldest beyond
/// KEEP_NIGHTS pruned), and the many-nights report of them.
#[test]
fn workflows_nightly_steps_run_as_written() {
    let nightly = workflow("nightly.yml");
    let sandbox = crate::util::Sandbox::new();
    let root = sandbox.path();
    place_binary(&root.join("runner-temp/bin"));
    let runner_temp = root.join("runner-temp").display().to_string();

    // build: the plan step, with the binary where the build step leaves it.
    let checkout = root.join("checkout");
    place_binary(&checkout.join(".gpucompat-src/target/release"));
    std::fs::write(checkout.join("mini.toml"), MINI).expect("matrix");
    std::fs::write(checkout.join("job.sh"), MINI_JOB).expect("job");
    let output_file = root.join("github-output");
    let env = |extra: &[(&'static str, String)]| -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("MATRIX", "mini.toml".to_owned()),
            ("RUNNER_TEMP", runner_temp.clone()),
            ("GITHUB_OUTPUT", output_file.display().to_string()),
            ("KEEP_NIGHTS", "2".to_owned()),
        ];
        env.extend(extra.iter().cloned());
        env
    };
    let plan = run_step(
        &step_script(&nightly, "plan the jobs"),
        &checkout,
        &env(&[]),
    );
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let outputs = std::fs::read_to_string(&output_file).expect("GITHUB_OUTPUT");
    let matrix: Value = serde_json::from_str(
        outputs
            .lines()
            .find_map(|l| l.strip_prefix("matrix="))
            .expect("matrix output"),
    )
    .expect("JSON");
    let entries = matrix["include"].as_array().expect("include");
    assert_eq!(entries.len(), 3);

    // cells: each job in a checkout of its own; its shard is what download-artifact brings back.
    let publish = root.join("publish");
    for entry in entries {
        let id = entry["id"].as_str().expect("id");
        let job = root.join(format!("job-{id}"));
        std::fs::create_dir_all(&job).expect("job dir");
        std::fs::write(job.join("mini.toml"), MINI).expect("matrix");
        std::fs::write(job.join("job.sh"), MINI_JOB).expect("job");
        let args = entry["args"].as_str().expect("args").to_owned();
        let ran = run_step(
            &step_script(&nightly, "run the cells"),
            &job,
            &env(&[("CELL_ARGS", args)]),
        );
        assert!(
            ran.status.success(),
            "{id}: a failing cell must not fail the job:\n{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        crate::util::copy_dir(
            &job.join("shard"),
            &publish.join(format!("shards/shard-{id}")),
        );
    }
    // A harness error does fail the job.
    let broken = root.join("job-broken");
    std::fs::create_dir_all(&broken).expect("dir");
    std::fs::write(broken.join("mini.toml"), "[matrix]\n").expect("matrix");
    let failed = run_step(
        &step_script(&nightly, "run the cells"),
        &broken,
        &env(&[("CELL_ARGS", "--cell ok".to_owned())]),
    );
    assert_eq!(failed.status.code(), Some(2), "bad input fails the job");

    // publish: two earlier nights restored, tonight merged, the oldest pruned, the report.
    for old in ["2000-01-01T00-00-00Z", "2000-01-02T00-00-00Z"] {
        let shards: Vec<_> = std::fs::read_dir(publish.join("shards"))
            .expect("shards")
            .map(|e| e.expect("entry").path())
            .collect();
        gpucompat()
            .arg("merge")
            .args(&shards)
            .arg("--out")
            .arg(publish.join("history/runs").join(old))
            .assert()
            .success();
    }
    let merged = run_step(
        &step_script(&nightly, "merge tonight's shards"),
        &publish,
        &env(&[]),
    );
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
    let mut nights: Vec<String> = std::fs::read_dir(publish.join("history/runs"))
        .expect("history")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    nights.sort();
    assert_eq!(nights.len(), 2, "KEEP_NIGHTS=2: {nights:?}");
    assert_eq!(nights[0], "2000-01-02T00-00-00Z", "the oldest night left");
    let tonight = publish.join("history/runs").join(&nights[1]);
    let records = crate::util::records(&tonight);
    assert_eq!(records.len(), 3);
    let bad = records.iter().find(|r| r["id"] == "bad").expect("bad");
    assert_eq!(bad["signature"], "illegal_address");
    let outputs = std::fs::read_to_string(&output_file).expect("GITHUB_OUTPUT");
    assert!(
        outputs.contains(&format!("night=history/runs/{}", nights[1])),
        "{outputs}"
    );

    let report = run_step(&step_script(&nightly, "report"), &publish, &env(&[]));
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let index = std::fs::read_to_string(publish.join("site/index.html")).expect("the site");
    assert!(index.contains("nightly: mini.toml"), "the title");
    assert!(
        index.contains("<table class=\"nights\">"),
        "the nights grid"
    );
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = assert_cmd::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// gate.yml's GPU job and gate-comment.yml's post, run as written: the gate reads both
/// commits' pins with git, a confirmed regression does not fail the job, the folder says where
/// to post, and the posting job (a read-only checkout of gpucompat only) puts the sticky comment
/// and the check run on the PR through the GitHub stand-in; a pr.txt/sha.txt that does not match
/// the gate run is refused before GitHub is asked.
#[test]
fn workflows_gate_steps_run_as_written() {
    use crate::github::{JOB, MATRIX, REPO, StandIn, token};
    let (gate_yml, comment_yml) = (workflow("gate.yml"), workflow("gate-comment.yml"));
    let sandbox = crate::util::Sandbox::new();
    let root = sandbox.path();
    place_binary(&root.join("runner-temp/bin"));
    let runner_temp = root.join("runner-temp").display().to_string();

    // The PR: a base commit and a head commit that bumps the pin.
    let checkout = root.join("checkout");
    std::fs::create_dir_all(checkout.join("matrices")).expect("dirs");
    std::fs::write(checkout.join("matrices/gate.toml"), MATRIX).expect("matrix");
    std::fs::write(checkout.join("matrices/job.sh"), JOB).expect("job");
    std::fs::write(checkout.join("requirements.txt"), "lib==1\n").expect("pins");
    git(&checkout, &["init", "-q"]);
    git(&checkout, &["add", "."]);
    git(&checkout, &["commit", "-qm", "base"]);
    let base = git(&checkout, &["rev-parse", "HEAD"]);
    std::fs::write(checkout.join("requirements.txt"), "lib==2\n").expect("pins");
    git(&checkout, &["commit", "-qam", "bump lib"]);
    let head = git(&checkout, &["rev-parse", "HEAD"]);

    let env = vec![
        ("MATRIX", "matrices/gate.toml".to_owned()),
        ("PIN_FILES", "requirements.txt".to_owned()),
        ("RUNNER_TEMP", runner_temp),
        ("BASE_SHA", base),
        ("HEAD_SHA", head.clone()),
        ("PR", "7".to_owned()),
        ("LEAK_GH", String::new()),
        ("LEAK_HF", String::new()),
    ];
    // The build job's labels for the GPU job (GitHub's runners have jq; this machine may not).
    let has_jq = assert_cmd::Command::new("jq")
        .arg("--version")
        .output()
        .is_ok();
    if has_jq {
        place_binary(&checkout.join(".gpucompat-src/target/release"));
        let output_file = root.join("github-output");
        let mut with_output = env.clone();
        with_output.push(("GITHUB_OUTPUT", output_file.display().to_string()));
        let labels = run_step(
            &step_script(&gate_yml, "the runner's labels"),
            &checkout,
            &with_output,
        );
        assert!(
            labels.status.success(),
            "{}",
            String::from_utf8_lossy(&labels.stderr)
        );
        let outputs = std::fs::read_to_string(&output_file).expect("GITHUB_OUTPUT");
        assert!(
            outputs.contains(r#"runner=["linux","self-hosted"]"#),
            "{outputs}"
        );
    } else {
        eprintln!("jq is missing: the runner-labels step is not run here");
    }
    let ran = run_step(&step_script(&gate_yml, "gate"), &checkout, &env);
    assert!(
        ran.status.success(),
        "a confirmed regression is a verdict, not a broken job:\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let verdict: Value = serde_json::from_str(
        &std::fs::read_to_string(checkout.join("gate/gate.json")).expect("gate.json"),
    )
    .expect("JSON");
    assert_eq!(verdict["regressions"][0]["id"], "bad", "{verdict}");
    let said = run_step(
        &step_script(&gate_yml, "what to post where"),
        &checkout,
        &env,
    );
    assert!(said.status.success());

    // gate-comment.yml: the gate folder as download-artifact brings it, gpucompat as built.
    let post = root.join("post");
    crate::util::copy_dir(&checkout.join("gate"), &post.join("gate"));
    place_binary(&post.join(".gpucompat-src/target/release"));
    let stand_in = StandIn::start();
    let post_env = |run_sha: &str| {
        vec![
            ("GITHUB_TOKEN", token()),
            ("GITHUB_API_URL", stand_in.url()),
            ("GITHUB_REPOSITORY", REPO.to_owned()),
            ("RUN_SHA", run_sha.to_owned()),
            ("REPORT_URL", "https://ci.example/runs/1".to_owned()),
        ]
    };
    let script = step_script(&comment_yml, "post the verdict");
    let other = "f".repeat(40);
    let refused = run_step(&script, &post, &post_env(&other));
    assert_eq!(
        refused.status.code(),
        Some(2),
        "a sha that is not the run's"
    );
    stand_in.with(|s| assert!(s.check_runs.is_empty(), "GitHub was asked"));

    let posted = run_step(&script, &post, &post_env(&head));
    assert!(
        posted.status.success(),
        "{}",
        String::from_utf8_lossy(&posted.stderr)
    );
    let marked = stand_in.marked(7, "<!-- gpucompat-gate: matrices/gate.toml -->");
    assert_eq!(marked.len(), 1, "one sticky comment");
    let body = marked[0]["body"].as_str().expect("body");
    assert!(body.contains("1 confirmed regression"), "{body}");
    stand_in.with(|s| {
        assert_eq!(s.check_runs.len(), 1);
        assert_eq!(s.check_runs[0]["head_sha"], head.as_str());
        assert_eq!(s.check_runs[0]["conclusion"], "failure");
        assert!(s.violations.is_empty(), "{:#?}", s.violations);
    });
}
