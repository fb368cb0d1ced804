//! `classify` on real and hand-made failure logs: root cause per case, output contract, exit codes.

use crate::util::{Sandbox, classify_jsonl, gpucompat, repo_root};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

fn str_field<'a>(v: &'a serde_json::Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// Per-signature tally, printed as a small table.
#[derive(Default)]
struct Tally(BTreeMap<String, (u32, u32)>);

impl Tally {
    fn add(&mut self, label: &str, ok: bool) {
        let entry = self.0.entry(label.to_owned()).or_default();
        entry.0 += u32::from(ok);
        entry.1 += 1;
    }

    #[expect(
        clippy::print_stdout,
        reason = "the per-signature accuracy is this test's report"
    )]
    fn print(&self, title: &str) {
        let (ok, all) = self
            .0
            .values()
            .fold((0, 0), |(a, b), (ok, n)| (a + ok, b + n));
        println!("{title}: {ok}/{all} correct");
        for (label, (ok, n)) in &self.0 {
            println!(
                "  {label:<20} {ok}/{n} ({:.0}%)",
                f64::from(*ok) * 100.0 / f64::from(*n)
            );
        }
    }
}

/// The 34 labelled real logs of the development corpus: every root cause named right. `deadlock`
/// cases may answer `timeout` (a hang seen from the log alone); `other` must answer `unknown`.
#[test]
fn development_corpus_root_causes() {
    let dir = repo_root().join("tests/fixtures/corpus");
    let mut labels = csv::Reader::from_path(dir.join("labels.csv")).expect("labels.csv");
    let mut cases: Vec<(String, String)> = labels
        .records()
        .map(|r| {
            let r = r.expect("record");
            (r[0].to_owned(), r[1].to_owned())
        })
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 34);
    let files: Vec<PathBuf> = cases
        .iter()
        .map(|(id, _)| PathBuf::from(format!("tests/fixtures/corpus/{id}.log")))
        .collect();
    let results = classify_jsonl(&files, &[]);
    assert_eq!(results.len(), cases.len(), "one object per file");
    let mut tally = Tally::default();
    let mut wrong = Vec::new();
    for ((id, label), result) in cases.iter().zip(&results) {
        assert_eq!(
            str_field(result, "path"),
            format!("tests/fixtures/corpus/{id}.log")
        );
        let got = str_field(result, "signature");
        let ok = got == label
            || (label == "deadlock" && got == "timeout")
            || (label == "other" && got == "unknown");
        tally.add(label, ok);
        if !ok {
            wrong.push(format!("{id}: labelled {label}, classified {got}"));
        }
        if got != "unknown" || result["line"].is_u64() {
            assert!(result["line"].is_u64(), "{id}: a named cause has a line");
            assert!(result["fingerprint"].is_string(), "{id}: and a fingerprint");
            assert!(result["excerpt"].is_string(), "{id}: and an excerpt");
        }
    }
    tally.print("development corpus");
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
}

/// Hand-made logs in `tests/fixtures/logs` (see `expected.csv`): signature, root-cause line and
/// whether it is an infrastructure fault.
#[test]
fn fixture_logs_root_causes() {
    let dir = repo_root().join("tests/fixtures/logs");
    let mut expected = csv::Reader::from_path(dir.join("expected.csv")).expect("expected.csv");
    let cases: Vec<(String, String, String, String)> = expected
        .records()
        .map(|r| {
            let r = r.expect("record");
            (
                r[0].to_owned(),
                r[1].to_owned(),
                r[2].to_owned(),
                r[3].to_owned(),
            )
        })
        .collect();
    assert!(cases.len() >= 25, "{} fixtures", cases.len());
    let listed: std::collections::HashSet<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    for entry in std::fs::read_dir(&dir).expect("read fixtures") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".log") {
            assert!(
                listed.contains(name.as_str()),
                "{name} is missing from expected.csv"
            );
        }
    }
    let files: Vec<PathBuf> = cases
        .iter()
        .map(|c| PathBuf::from("tests/fixtures/logs").join(&c.0))
        .collect();
    let results = classify_jsonl(&files, &[]);
    let mut tally = Tally::default();
    let mut wrong = Vec::new();
    for ((file, signature, line, spurious), result) in cases.iter().zip(&results) {
        let got_line = result["line"]
            .as_u64()
            .map(|n| n.to_string())
            .unwrap_or_default();
        let got_spurious = result["spurious"].as_bool().unwrap_or(false).to_string();
        let got = str_field(result, "signature");
        let ok = got == signature && got_line == *line && got_spurious == *spurious;
        tally.add(signature, ok);
        if !ok {
            wrong.push(format!(
                "{file}: want {signature} line {line:?} spurious {spurious}, got {got} line {got_line:?} spurious {got_spurious} (rule {})",
                str_field(result, "rule")
            ));
        }
    }
    tally.print("fixture logs");
    assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
}

/// The JSON shape of a few results, field order included (the contract's fields come first).
#[test]
fn jsonl_output_snapshots() {
    let files = [
        "tests/fixtures/corpus/059.log",
        "tests/fixtures/logs/torchrun_interleaved_misaligned.log",
        "tests/fixtures/logs/pip_index_unreachable.log",
        "tests/fixtures/logs/passing_run_scary_warnings.log",
    ]
    .map(PathBuf::from);
    let out = gpucompat()
        .current_dir(repo_root())
        .arg("classify")
        .args(&files)
        .args(["--format", "jsonl"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let first = stdout.lines().next().expect("a line");
    assert!(
        first.starts_with(r#"{"path":"tests/fixtures/corpus/059.log","signature":"illegal_address","fingerprint":"#),
        "{first}"
    );
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("classify_jsonl", stdout);
    });
}

#[test]
fn text_output_marks_the_root_cause_line() {
    let out = gpucompat()
        .current_dir(repo_root())
        .args(["classify", "tests/fixtures/corpus/062.log"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("classify_text", text);
    });
}

#[test]
fn missing_or_unreadable_inputs_exit_2_naming_the_path() {
    let sandbox = Sandbox::new();
    let good = sandbox.file("cell.log", "RuntimeError: CUDA error: misaligned address\n");
    let missing = sandbox.path().join("no-such.log");
    let out = gpucompat()
        .arg("classify")
        .arg(&good)
        .arg(&missing)
        .arg(sandbox.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "nothing printed for bad input");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such.log"), "{stderr}");
    assert!(stderr.contains("is a directory"), "{stderr}");
    // A bad flag value is bad input too.
    let out = gpucompat()
        .arg("classify")
        .arg(&good)
        .args(["--signal", "NOPE"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn evidence_flags_decide_when_the_log_is_silent() {
    let sandbox = Sandbox::new();
    let quiet = sandbox.file(
        "quiet.log",
        "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 12.4 tokens/s\n",
    );
    let killed = sandbox.file("killed.log", "Loading shards: 50%\nKilled\n");
    let run = |file: &Path, flags: &[&str]| {
        let results = classify_jsonl(&[file.to_path_buf()], flags);
        (
            str_field(&results[0], "signature").to_owned(),
            results[0]["line"].as_u64(),
        )
    };
    assert_eq!(run(&quiet, &[]), ("unknown".to_owned(), None));
    assert_eq!(
        run(&quiet, &["--exit-code", "139"]),
        ("segfault".to_owned(), None)
    );
    assert_eq!(
        run(&quiet, &["--signal", "SIGSEGV"]),
        ("segfault".to_owned(), None)
    );
    assert_eq!(
        run(&quiet, &["--signal", "KILL"]),
        ("unknown".to_owned(), None)
    );
    assert_eq!(
        run(&killed, &["--signal", "9"]),
        ("oom".to_owned(), Some(2))
    );
    assert_eq!(
        run(&killed, &["--exit-code", "137"]),
        ("oom".to_owned(), Some(2))
    );
    assert_eq!(
        run(&killed, &["--signal", "9", "--watchdog", "deadlock"]),
        ("deadlock".to_owned(), None)
    );
    assert_eq!(
        run(&quiet, &["--watchdog", "timeout"]),
        ("timeout".to_owned(), None)
    );
    let ima = sandbox.file(
        "ima.log",
        "RuntimeError: CUDA error: an illegal memory access was encountered\n(hang)\n",
    );
    assert_eq!(
        run(&ima, &["--watchdog", "deadlock"]),
        ("illegal_address".to_owned(), Some(1))
    );
}

/// The evidence of a verdict: `(kind, value, line)` triples.
fn clues(v: &serde_json::Value) -> Vec<(String, String, Option<u64>)> {
    v["evidence"]
        .as_array()
        .expect("evidence is a list")
        .iter()
        .map(|c| {
            (
                str_field(c, "kind").to_owned(),
                str_field(c, "value").to_owned(),
                c["line"].as_u64(),
            )
        })
        .collect()
}

fn clue(kind: &str, value: &str, line: Option<u64>) -> (String, String, Option<u64>) {
    (kind.to_owned(), value.to_owned(), line)
}

#[test]
fn every_verdict_says_which_evidence_decided_it() {
    let sandbox = Sandbox::new();
    let quiet = sandbox.file(
        "quiet.log",
        "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 12.4 tokens/s\n",
    );
    let killed = sandbox.file("killed.log", "Loading shards: 50%\nKilled\n");
    let ima = sandbox.file(
        "ima.log",
        "INFO start\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
    );
    let wrapped = sandbox.file(
        "wrapped.log",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n\
         ncclUnhandledCudaError: Call to CUDA function failed.\n\
         Last error:\n\
         Cuda failure 'an illegal memory access was encountered'\n",
    );
    let run = |file: &Path, flags: &[&str]| classify_jsonl(&[file.to_path_buf()], flags).remove(0);

    // The first fatal line: its rule and line, and what the line itself names.
    let v = run(&ima, &[]);
    assert_eq!(str_field(&v, "decided_by"), "fatal_line");
    assert_eq!(
        clues(&v),
        [
            clue("rule", "cuda-illegal-address", Some(2)),
            clue("exception", "RuntimeError", Some(2)),
            clue("cuda_error", "cudaErrorIllegalAddress (700)", Some(2)),
        ]
    );
    // The watchdog's view is evidence even where the log decided.
    let v = run(&ima, &["--watchdog", "deadlock"]);
    assert_eq!(str_field(&v, "decided_by"), "fatal_line");
    assert!(clues(&v).contains(&clue("watchdog", "deadlock", None)));
    // A wrapper line gives way to the cause it announced, and says so.
    let v = run(&wrapped, &[]);
    assert_eq!(str_field(&v, "signature"), "illegal_address");
    assert_eq!(
        clues(&v),
        [
            clue("rule", "cuda-illegal-address", Some(4)),
            clue("cuda_error", "cudaErrorIllegalAddress (700)", Some(4)),
            clue("wrapped", "nccl-error", Some(1)),
        ]
    );
    // SIGKILL with the OOM killer's mark in the log: the exit decided, with the mark as evidence.
    let v = run(&killed, &["--exit-code", "137"]);
    assert_eq!(str_field(&v, "decided_by"), "exit_signal");
    assert_eq!(
        clues(&v),
        [
            clue("rule", "killed", Some(2)),
            clue("exit", "code 137 (SIGKILL)", None)
        ]
    );
    // A bare Killed and nothing else: a weak line.
    assert_eq!(str_field(&run(&killed, &[]), "decided_by"), "weak_line");
    // A silent log: the exit status or the watchdog, or nothing at all.
    let v = run(&quiet, &["--exit-code", "139"]);
    assert_eq!(
        (str_field(&v, "decided_by"), clues(&v)),
        (
            "exit_signal",
            vec![clue("exit", "code 139 (SIGSEGV)", None)]
        )
    );
    let v = run(&quiet, &["--watchdog", "timeout"]);
    assert_eq!(
        (str_field(&v, "decided_by"), clues(&v)),
        ("watchdog", vec![clue("watchdog", "timeout", None)])
    );
    let v = run(&quiet, &[]);
    assert!(v["decided_by"].is_null(), "{v}");
    assert!(clues(&v).is_empty());

    // The text report says the same with --explain, and only then.
    let text = |flags: &[&str]| {
        let out = gpucompat()
            .arg("classify")
            .arg(&wrapped)
            .args(flags)
            .output()
            .expect("run");
        assert!(out.status.success());
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let explained = text(&["--explain"]);
    for want in [
        "  decided by: fatal line\n",
        "  evidence: rule cuda-illegal-address (line 4)\n",
        "  evidence: cuda error cudaErrorIllegalAddress (700) (line 4)\n",
        "  evidence: wrapped nccl-error (line 1)\n",
    ] {
        assert!(explained.contains(want), "{want:?} in:\n{explained}");
    }
    assert!(!text(&[]).contains("decided by"));
}

#[test]
fn matrix_rules_are_tried_first() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file(
        "m.toml",
        r#"[matrix]
fi = ["0.6.8.post1"]

[job]
command = "true"

[[rules]]
pattern = 'Unsupported tile shape config \d+ for MoE gemm'
signature = "no_kernel_image"
explanation = "SM110 reuses the SM100 MoE cubins"
hint = "wait for FlashInfer to ship SM110 cubins"
"#,
    );
    let log = sandbox.file(
        "cell.log",
        "RuntimeError: Unsupported tile shape config 256256128 for MoE gemm\n",
    );
    let with = classify_jsonl(
        std::slice::from_ref(&log),
        &["--matrix", &matrix.to_string_lossy()],
    );
    assert_eq!(str_field(&with[0], "signature"), "no_kernel_image");
    assert_eq!(str_field(&with[0], "rule"), "matrix-rule-1");
    assert_eq!(
        str_field(&with[0], "hint"),
        "wait for FlashInfer to ship SM110 cubins"
    );
    let without = classify_jsonl(&[log], &[]);
    assert_eq!(str_field(&without[0], "signature"), "unsupported_config");
    // A broken matrix file is bad input.
    let bad = sandbox.file("bad.toml", "[matrix]\nfi = [\"1\"]\n[job]\ncommand = \"true\"\n[[rules]]\npattern = \"(\"\nsignature = \"oom\"\n");
    let out = gpucompat()
        .args(["classify", "--matrix"])
        .arg(&bad)
        .arg(sandbox.path().join("cell.log"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn reads_standard_input() {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin!("gpucompat"))
        .args(["classify", "-", "--format", "jsonl"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        // 20 MB of noise, then the root cause: streamed through a pipe.
        let noise = "[2025-12-09 02:28:12 TP0] Decode batch, #running-req: 32, #token: 8192, token usage: 0.05, cuda graph: True\n";
        for _ in 0..200_000 {
            stdin.write_all(noise.as_bytes()).expect("write");
        }
        stdin
            .write_all(b"[2025-12-09 02:28:13 TP0] Watchdog timeout (self.watchdog_timeout=300)\n")
            .expect("write");
    }
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["path"], "-");
    assert_eq!(v["signature"], "deadlock");
    assert_eq!(v["line"], 200_001);
}
