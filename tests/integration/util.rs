//! Shared test helpers: the built binary and scratch folders with files in them.

use assert_cmd::Command;
use assert_cmd::assert::OutputAssertExt;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The `gpucompat` binary built for this test run.
pub(crate) fn gpucompat() -> Command {
    assert_cmd::cargo::cargo_bin_cmd!("gpucompat")
}

/// Runs `command` and asserts that it exited with one of `codes`; where it did not, the failure
/// shows the command line, its exit and both its outputs. Returns the output for further checks.
pub(crate) fn exits(command: impl OutputAssertExt, codes: &'static [i32]) -> Output {
    command.assert().code(codes).get_output().clone()
}

/// `gpucompat run` kept inside `sandbox`: its JIT caches under the sandbox (not the user's cache,
/// which parallel tests would share) and an inventory without GPUs (not the host's, whatever it
/// has). Options and the matrix follow.
pub(crate) fn run_in(sandbox: &Sandbox) -> Command {
    let inventory = sandbox.file("no-gpus.toml", "host = \"test-host\"\n");
    let mut command = gpucompat();
    command
        .arg("run")
        .arg("--cache-dir")
        .arg(sandbox.path().join("cache"))
        .arg("--inventory")
        .arg(inventory);
    command
}

/// A temporary folder that files can be written into; removed when dropped.
pub(crate) struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    pub(crate) fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().expect("create temp dir"),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `text` to `name` (parents created) and returns its full path.
    pub(crate) fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create parent");
        }
        std::fs::write(&path, text).expect("write file");
        path
    }
}

/// The repository root (where `Cargo.toml` is).
pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every record of a run folder's `results.jsonl`, in order (a line that does not parse, or a
/// missing file, fails the test).
pub(crate) fn records(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("results.jsonl"))
        .expect("results.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("results.jsonl line is JSON"))
        .collect()
}

/// The records of a run folder's `results.jsonl` by cell id.
pub(crate) fn records_by_id(run: &Path) -> HashMap<String, Value> {
    records(run)
        .into_iter()
        .map(|r| (r["id"].as_str().expect("record has an id").to_owned(), r))
        .collect()
}

/// The interpreter `python3` from PATH resolves to, passed to cells as `$PYTHON`: a version
/// manager's shim (pyenv) costs a dozen processes and file reads per start, which on a crowded
/// machine can stall a server's start longer than the tests' one-second windows.
pub(crate) fn python() -> &'static str {
    static PYTHON: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .expect("python3 on PATH");
        let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if path.is_empty() || path.contains(char::is_whitespace) {
            "python3".to_owned()
        } else {
            path
        }
    })
}

/// Copies the folder `from` into `to`, recursively (a run folder, a shard as an artifact).
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create folder");
    for entry in std::fs::read_dir(from).expect("read folder") {
        let entry = entry.expect("folder entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// Runs `classify --format jsonl` on `files` (from the repository root) and parses each line.
pub(crate) fn classify_jsonl(files: &[PathBuf], extra: &[&str]) -> Vec<Value> {
    let out = gpucompat()
        .current_dir(repo_root())
        .arg("classify")
        .args(files)
        .args(["--format", "jsonl"])
        .args(extra)
        .output()
        .expect("run gpucompat");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8 output");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}
