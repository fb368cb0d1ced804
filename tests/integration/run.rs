//! `gpucompat run` with real processes, not mocks: job cells that pass, fail with CUDA errors,
//! hang, busy-loop, compile silently, flood their output or leave children behind; server cells
//! (a small stand-in OpenAI-style server) that answer, answer wrongly, never become ready, crash
//! or hang. Then what must hold around them: the environment a command sees, the watchdog's
//! verdicts and how soon they come, teardown leaving nothing alive, bounded logs, Ctrl-C and
//! `--resume`, a harness killed with SIGKILL, and bad input.
//!
//! Fixtures: `tests/fixtures/run/job.sh` (job modes) and `tests/fixtures/run/fake_server.py`.
//! Every wait is a poll with a deadline; timing bounds are generous (a loaded CI machine must
//! pass).

use crate::util::{Sandbox, gpucompat, python, repo_root};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Teardown grace for every run here: fixtures that ignore SIGTERM cost this much each.
const GRACE: &str = "300ms";

/// An `[env]` line that marks every process of a scene's cells, for [`Scene::marked_alive`]
/// (`@SANDBOX@` becomes the sandbox path).
pub(crate) const MARKER_ENV: &str = "TEST_SANDBOX = \"@SANDBOX@\"";

/// An absolute fixture path, single-quoted for `sh`.
pub(crate) fn fixture(name: &str) -> String {
    let path = repo_root().join("tests/fixtures/run").join(name);
    format!("'{}'", path.display())
}

/// `sh job.sh ...` as a matrix command.
pub(crate) fn job_sh() -> String {
    format!("sh {}", fixture("job.sh"))
}

/// `python3 fake_server.py` as a matrix command (`$PYTHON`: see [`python`]).
pub(crate) fn server_py() -> String {
    format!("$PYTHON {}", fixture("fake_server.py"))
}

/// A sandbox holding a matrix file and an inventory, and the run folder `out/` once it ran.
pub(crate) struct Scene {
    sandbox: Sandbox,
    matrix: PathBuf,
    inventory: PathBuf,
}

impl Scene {
    /// `matrix` may use `@SANDBOX@`, replaced by the sandbox path. The inventory has no GPUs.
    pub(crate) fn new(matrix: &str) -> Scene {
        Scene::with_inventory(matrix, "host = \"test-host\"\n")
    }

    pub(crate) fn with_inventory(matrix: &str, inventory: &str) -> Scene {
        let sandbox = Sandbox::new();
        let text = matrix.replace("@SANDBOX@", &sandbox.path().display().to_string());
        let matrix = sandbox.file("matrix.toml", &text);
        let inventory = sandbox.file("inventory.toml", inventory);
        Scene {
            sandbox,
            matrix,
            inventory,
        }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.sandbox.path().join(name)
    }

    pub(crate) fn out(&self) -> PathBuf {
        self.path("out")
    }

    /// `run MATRIX --out out --inventory INV --grace GRACE --cache-dir cache EXTRA...`
    pub(crate) fn args(&self, extra: &[&str]) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "run".into(),
            self.matrix.clone().into(),
            "--out".into(),
            self.out().into(),
            "--inventory".into(),
            self.inventory.clone().into(),
            "--grace".into(),
            GRACE.into(),
            "--cache-dir".into(),
            self.path("cache").into(),
        ];
        args.extend(extra.iter().map(OsString::from));
        args
    }

    /// Runs to the end and returns what the harness printed and its exit status.
    pub(crate) fn run(&self, extra: &[&str]) -> Output {
        self.run_with_env(extra, &[])
    }

    /// [`Scene::run`] with variables set for the harness (no proxy exceptions inherited).
    pub(crate) fn run_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Output {
        gpucompat()
            .args(self.args(extra))
            .env("CI", "true")
            .env("PYTHON", python())
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .envs(env.iter().copied())
            .timeout(Duration::from_secs(90))
            .output()
            .expect("run gpucompat")
    }

    /// Starts the harness in the background (to signal it).
    pub(crate) fn spawn(&self, extra: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_gpucompat"))
            .args(self.args(extra))
            .env("CI", "true")
            .env("PYTHON", python())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gpucompat")
    }

    /// Every line of `results.jsonl`, parsed (a line that does not parse fails the test).
    pub(crate) fn records(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.out().join("results.jsonl")).unwrap_or_default();
        text.lines()
            .map(|line| serde_json::from_str(line).expect("results.jsonl line is JSON"))
            .collect()
    }

    /// The one record of cell `id`.
    pub(crate) fn record(&self, id: &str) -> Value {
        let matching: Vec<Value> = self
            .records()
            .into_iter()
            .filter(|r| r["id"] == id)
            .collect();
        assert_eq!(matching.len(), 1, "records of {id}: {matching:#?}");
        matching.into_iter().next().expect("one record")
    }

    /// The log a record points at.
    pub(crate) fn log(&self, record: &Value) -> String {
        let relative = record["log"].as_str().expect("log path");
        let bytes = std::fs::read(self.out().join(relative)).expect("read cell log");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub(crate) fn manifest(&self) -> Value {
        let text =
            std::fs::read_to_string(self.out().join("manifest.json")).expect("read manifest");
        serde_json::from_str(&text).expect("manifest is JSON")
    }

    /// Pids the fixtures wrote into `name`.
    pub(crate) fn pids(&self, name: &str) -> Vec<i32> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Live processes that carry this sandbox's marker in their environment.
    pub(crate) fn marked_alive(&self) -> Vec<i32> {
        let marker = format!("TEST_SANDBOX={}", self.sandbox.path().display());
        let mut alive = Vec::new();
        for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if has_marker(pid, &marker) && is_running(pid) {
                alive.push(pid);
            }
        }
        alive
    }

    /// Asserts that the processes listed in `pids_file` and every marked process are gone.
    pub(crate) fn assert_nothing_left(&self, pids_file: &str, expect_at_least: usize) {
        let pids = self.pids(pids_file);
        assert!(
            pids.len() >= expect_at_least,
            "fixtures recorded {} pids, expected at least {expect_at_least}",
            pids.len()
        );
        let marker = format!("TEST_SANDBOX={}", self.sandbox.path().display());
        let left: Vec<String> = pids
            .iter()
            .filter(|&&pid| is_running(pid) && has_marker(pid, &marker))
            .map(|&pid| describe(pid))
            .collect();
        assert!(left.is_empty(), "cell processes outlived the run: {left:?}");
        let marked = self.marked_alive();
        assert!(
            marked.is_empty(),
            "processes with the sandbox marker outlived the run: {:?}",
            marked.iter().map(|&p| describe(p)).collect::<Vec<_>>()
        );
    }
}

/// Whether a process exists and is not a zombie.
pub(crate) fn is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .unwrap_or("X");
    !matches!(state, "Z" | "X")
}

/// Whether a process's environment holds `marker` (so a reused pid is not mistaken for ours).
fn has_marker(pid: i32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|b| *b == 0).any(|e| e == marker.as_bytes()))
        .unwrap_or(false)
}

fn describe(pid: i32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    format!(
        "{pid}: {}",
        String::from_utf8_lossy(&cmd).replace('\0', " ").trim()
    )
}

/// Polls `done` every 20 ms until it holds; fails the test after `limit`.
pub(crate) fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a spawned harness to exit (killing it after `limit`) and returns its output.
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait for gpucompat").is_some() {
            return child.wait_with_output().expect("collect output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "gpucompat did not exit within {limit:?}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

/// A time the fixtures wrote with Python's `time.time()`.
fn stamp(path: &Path) -> f64 {
    std::fs::read_to_string(path)
        .expect("read stamp")
        .trim()
        .parse()
        .expect("stamp is a number")
}

pub(crate) fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

fn str_of<'a>(record: &'a Value, key: &str) -> &'a str {
    record[key].as_str().unwrap_or("")
}

fn f64_of(value: &Value) -> f64 {
    value
        .as_f64()
        .unwrap_or_else(|| panic!("not a number: {value}"))
}

/// The last record of every cell, by id.
fn by_id(records: &[Value]) -> BTreeMap<String, Value> {
    records
        .iter()
        .map(|r| (str_of(r, "id").to_owned(), r.clone()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Statuses and the exit code

#[test]
fn statuses_signatures_and_exit_code() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["pass", "fail", "xfail", "xpass", "flaky", "segv"]
[[matrix.include]]
case = "pass"
mode = "pass"
[[matrix.include]]
case = "fail"
mode = "no-kernel-image"
[[matrix.include]]
case = "xfail"
mode = "illegal-address"
[[matrix.include]]
case = "xpass"
mode = "pass"
[[matrix.include]]
case = "flaky"
mode = "flaky flaky.marker"
[[matrix.include]]
case = "segv"
mode = "segv"
[[matrix.include]]
case = "skip"
gpu = "sm_90"
mode = "pass"

[resources]
gpus = "{{gpu}}"

[job]
# `exec`: the job script is the cell's main process, so a death by signal is seen as one.
command = "exec {job} {{mode}}"
timeout = "30s"
no-progress = "10s"

[retry]
count = 1
on = ["collective_timeout"]

[[expect]]
when = {{ case = "xfail" }}
signature = "illegal_address"
link = "https://example.invalid/issues/1"

[[expect]]
when = {{ case = "xpass" }}
signature = "no_kernel_image"
link = "https://example.invalid/issues/2"
"#,
        job = job_sh()
    ));
    let out = scene.run(&["--jobs", "4"]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");

    let records = scene.records();
    assert_eq!(records.len(), 7, "{records:#?}");
    let by_id = by_id(&records);
    let status = |id: &str| str_of(&by_id[id], "status").to_owned();

    assert_eq!(status("pass"), "pass");
    assert!(by_id["pass"]["signature"].is_null());
    assert_eq!(by_id["pass"]["exit"]["code"], 0);

    let fail = &by_id["fail"];
    assert_eq!(status("fail"), "fail");
    assert_eq!(fail["signature"], "no_kernel_image");
    assert_eq!(fail["phase"], "launch");
    assert_eq!(fail["exit"]["code"], 1);
    assert_eq!(fail["attempts"], 1, "no_kernel_image is not retried");
    assert!(scene.log(fail).contains("no kernel image is available"));

    assert_eq!(status("xfail"), "xfail");
    assert_eq!(by_id["xfail"]["signature"], "illegal_address");
    assert_eq!(status("xpass"), "xpass");
    assert!(
        str_of(&by_id["xpass"], "reason").contains("issues/2"),
        "{:#?}",
        by_id["xpass"]
    );

    let flaky = &by_id["flaky"];
    assert_eq!(status("flaky"), "flaky");
    assert_eq!(flaky["attempts"], 2);
    assert_eq!(flaky["log"], "logs/flaky.attempt2.log");
    // What flaked stays in the record: the first failure's signature and where its log is.
    assert_eq!(flaky["signature"], "collective_timeout", "{flaky:#?}");
    assert!(
        str_of(flaky, "reason").contains("logs/flaky.log"),
        "{flaky:#?}"
    );
    let first = std::fs::read_to_string(scene.out().join("logs/flaky.log")).expect("attempt 1");
    assert!(
        first.contains("timed out waiting for completion flag"),
        "{first}"
    );

    let segv = &by_id["segv"];
    assert_eq!(status("segv"), "fail");
    assert_eq!(segv["signature"], "segfault");
    assert_eq!(segv["exit"]["signal"], 11, "{segv:#?}");

    // A cell an `include` entry created is named by its values for the axes it names.
    let skip = &by_id["skip"];
    assert_eq!(skip["status"], "skip");
    assert!(str_of(skip, "reason").contains("sm_90"), "{skip:#?}");

    // The summary names what did not pass; CI gets plain lines, one per event.
    for id in ["fail", "xfail", "xpass", "flaky", "segv", "skip"] {
        assert!(stdout.contains(id), "summary lacks {id}:\n{stdout}");
    }
    assert!(stderr.contains("    PASS ["), "{stderr}");
    assert!(stderr.contains("    FAIL ["), "{stderr}");
    let manifest = scene.manifest();
    assert_eq!(manifest["state"], "finished");
    assert_eq!(manifest["cells"], 7);
    assert_eq!(manifest["host"], "test-host");
    let plan: Value = serde_json::from_str(
        &std::fs::read_to_string(scene.out().join("plan.json")).expect("plan.json"),
    )
    .expect("plan.json is JSON");
    assert_eq!(plan["cells"].as_array().map(Vec::len), Some(7));
    let logs = std::fs::read_dir(scene.out().join("logs"))
        .expect("logs/")
        .count();
    assert_eq!(logs, 8, "one log per attempt, the skipped cell's included");
}

#[test]
fn expected_failures_only_exit_0() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["pass", "known"]
[[matrix.include]]
case = "pass"
mode = "pass"
[[matrix.include]]
case = "known"
mode = "no-kernel-image"
[job]
command = "{job} {{mode}}"
[[expect]]
when = {{ case = "known" }}
signature = "no_kernel_image"
"#,
        job = job_sh()
    ));
    let out = scene.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(scene.record("known")["status"], "xfail");
}

// ---------------------------------------------------------------------------------------------
// The environment a command sees

#[test]
fn environment_contract_with_a_mixed_inventory() {
    let scene = Scene::with_inventory(
        &format!(
            r#"
[matrix]
flashinfer = ["0.6.3"]
gpu = ["sm_86+sm_89", "sm_89", "sm_90", "sm_89@0+sm_86@1", "sm_86@0"]
[resources]
gpus = "{{gpu}}"
[packages]
flashinfer = "flashinfer-python"
[env]
TEST_EXTRA = "fi-{{flashinfer}}"
[job]
command = "{job} env"
"#,
            job = job_sh()
        ),
        r#"
host = "mixed-rig"
[[gpu]]
index = 0
name = "NVIDIA GeForce RTX 4090"
arch = "sm_89"
[[gpu]]
index = 1
name = "NVIDIA GeForce RTX 3090"
arch = "sm_86"
"#,
    );
    let out = scene.run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let records = scene.records();
    assert_eq!(records.len(), 5);
    let of_gpu = |gpu: &str| {
        records
            .iter()
            .find(|r| r["values"]["gpu"] == gpu)
            .unwrap_or_else(|| panic!("no record for {gpu}"))
            .clone()
    };
    let env_of = |record: &Value| -> BTreeMap<String, String> {
        scene
            .log(record)
            .lines()
            .filter(|l| !l.starts_with("[gpucompat]"))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    let sandbox = scene
        .sandbox
        .path()
        .canonicalize()
        .expect("canonical sandbox");

    let pair = of_gpu("sm_86+sm_89");
    assert_eq!(pair["status"], "pass");
    let env = env_of(&pair);
    assert_eq!(env["GPUCOMPAT_CELL_ID"], str_of(&pair, "id"));
    assert_eq!(env["GPUCOMPAT_FLASHINFER"], "0.6.3");
    assert_eq!(env["GPUCOMPAT_GPU"], "sm_86+sm_89");
    assert_eq!(env["GPUCOMPAT_PINS"], "flashinfer-python==0.6.3");
    // The sm_86 card (index 1) first, as the cell asked.
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "1,0");
    assert_eq!(env["TEST_EXTRA"], "fi-0.6.3");
    assert_eq!(
        Path::new(&env["PWD"]),
        sandbox,
        "cwd is the matrix file's folder"
    );
    let cache = scene.path("cache").display().to_string();
    for key in [
        "FLASHINFER_WORKSPACE_BASE",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "VLLM_CACHE_ROOT",
        "CUDA_CACHE_PATH",
    ] {
        assert!(
            env[key].starts_with(&cache),
            "{key}={} is not under {cache}",
            env[key]
        );
    }
    let gpus: Vec<(u64, &str)> = pair["runner"]["gpus"]
        .as_array()
        .expect("runner.gpus")
        .iter()
        .map(|g| {
            (
                g["index"].as_u64().unwrap_or(99),
                g["arch"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(gpus, [(1, "sm_86"), (0, "sm_89")]);
    assert_eq!(pair["runner"]["host"], "mixed-rig");

    let single = of_gpu("sm_89");
    assert_eq!(env_of(&single)["CUDA_VISIBLE_DEVICES"], "0");

    let missing = of_gpu("sm_90");
    assert_eq!(missing["status"], "skip");

    // Device pins: the cell gets exactly those GPUs, in the order written; a pin on a GPU of
    // another arch can never be served.
    let pinned = of_gpu("sm_89@0+sm_86@1");
    assert_eq!(pinned["status"], "pass", "{pinned}");
    assert_eq!(env_of(&pinned)["CUDA_VISIBLE_DEVICES"], "0,1");
    let wrong = of_gpu("sm_86@0");
    assert_eq!(wrong["status"], "skip", "{wrong}");
}

// ---------------------------------------------------------------------------------------------
// One-cell scenarios: the watchdog (deadlock, timeout, silent compile), server readiness,
// teardown, and the harness's own faults. One table, one driver.

/// One single-cell scenario: a matrix file, then what the run and the cell's record must say.
struct Case {
    name: &'static str,
    /// The matrix file: `@JOB@` (job.sh), `@SERVER@` (fake_server.py), `@MARKER@` (see
    /// [`MARKER_ENV`]) and `@SANDBOX@` are filled in. Exactly one cell.
    matrix: &'static str,
    /// Variables set for the harness.
    env: &'static [(&'static str, &'static str)],
    exit: i32,
    status: &'static str,
    signature: Option<&'static str>,
    phase: &'static str,
    /// Text the cell's log must hold.
    log_has: &'static [&'static str],
    /// Anything else (timings, processes left behind).
    more: fn(&Ran),
}

/// What a case's run left.
struct Ran {
    scene: Scene,
    record: Value,
    /// When the harness had exited (seconds since the epoch).
    ended: f64,
}

const NOTHING_MORE: fn(&Ran) = |_| {};

/// Whether `record`'s verdict came after the window had passed since `stamp` (when the cell
/// went idle) and before the deadline: the order of events, not how fast the harness was.
fn verdict_after_the_window(ran: &Ran, stamp_file: &str, window_s: f64, timeout_s: f64) {
    let idle_at = stamp(&ran.scene.path(stamp_file));
    assert!(
        ran.ended - idle_at >= window_s,
        "verdict {:.2}s after the cell went idle; the window is {window_s}s",
        ran.ended - idle_at
    );
    let duration = f64_of(&ran.record["duration_s"]);
    assert!(duration < timeout_s, "{duration}s: the deadline came first");
}

const CASES: &[Case] = &[
    Case {
        name: "idle_hang_is_a_deadlock_after_the_window",
        matrix: r#"
[matrix]
case = ["watched"]
[job]
command = "@JOB@ hang hang.stamp"
timeout = "60s"
no-progress = "2s"
"#,
        env: &[],
        exit: 1,
        status: "fail",
        signature: Some("deadlock"),
        phase: "launch",
        log_has: &["watchdog"],
        more: |ran| verdict_after_the_window(ran, "hang.stamp", 2.0, 60.0),
    },
    Case {
        name: "busy_loop_past_the_deadline_is_a_timeout",
        matrix: r#"
[matrix]
case = ["watched"]
[job]
command = "@JOB@ busy"
timeout = "2500ms"
no-progress = "2s"
"#,
        env: &[],
        exit: 1,
        status: "fail",
        signature: Some("timeout"),
        phase: "launch",
        log_has: &["deadline"],
        more: |ran| {
            let duration = f64_of(&ran.record["duration_s"]);
            assert!(
                duration >= 2.4,
                "ended after {duration}s, before its deadline"
            );
        },
    },
    Case {
        name: "silent_compile_longer_than_the_window_is_progress",
        matrix: r#"
[matrix]
case = ["watched"]
[job]
command = "@JOB@ compile 3"
timeout = "60s"
no-progress = "2s"
"#,
        env: &[],
        exit: 0,
        status: "pass",
        signature: None,
        phase: "teardown",
        log_has: &[],
        more: |ran| assert!(f64_of(&ran.record["duration_s"]) >= 3.0),
    },
    Case {
        // A download's progress bar redraws one line with `\r` for 3 s, sleeping in between: no
        // CPU, no newline, but output all the same.
        name: "progress_bar_without_newlines_is_progress",
        matrix: r#"
[matrix]
case = ["watched"]
[job]
command = "@JOB@ progress-bar 3"
timeout = "60s"
no-progress = "2s"
"#,
        env: &[],
        exit: 0,
        status: "pass",
        signature: None,
        phase: "teardown",
        log_has: &[],
        more: NOTHING_MORE,
    },
    Case {
        name: "compile_then_idle_is_a_deadlock",
        matrix: r#"
[matrix]
case = ["watched"]
[job]
command = "@JOB@ compile-hang 3 idle.stamp"
timeout = "60s"
no-progress = "2s"
"#,
        env: &[],
        exit: 1,
        status: "fail",
        signature: Some("deadlock"),
        phase: "launch",
        log_has: &["watchdog"],
        more: |ran| {
            verdict_after_the_window(ran, "idle.stamp", 2.0, 60.0);
            assert!(f64_of(&ran.record["duration_s"]) >= 3.0);
        },
    },
    Case {
        name: "server_compiling_past_its_ready_timeout_is_a_timeout_in_ready",
        matrix: r#"
[matrix]
engine = ["jit"]
[server]
command = "@SERVER@ compile --port {port} --seconds 60"
ready-timeout = "2s"
timeout = "30s"
no-progress = "1s"
"#,
        env: &[],
        exit: 1,
        status: "fail",
        signature: Some("timeout"),
        phase: "ready",
        log_has: &["deadline"],
        more: |ran| {
            let duration = f64_of(&ran.record["duration_s"]);
            assert!((2.0..30.0).contains(&duration), "{duration}");
        },
    },
    Case {
        name: "ready_line_readiness_and_stubborn_workers_are_killed",
        matrix: r#"
[matrix]
engine = ["fake"]
[env]
@MARKER@
[server]
# No health route at all: only the log line says the server is ready.
command = """@SERVER@ ok --port {port} --no-health --ready-delay 0.3 \
    --workers 2 --ignore-term --escape --pids pids.txt"""
ready-line = "fired up and ready to roll"
expect = "(?i)paris"
no-progress = "5s"
timeout = "30s"
"#,
        env: &[],
        exit: 0,
        status: "pass",
        signature: None,
        phase: "teardown",
        log_has: &["ignored SIGTERM"],
        more: |ran| {
            assert!(f64_of(&ran.record["metrics"]["time_to_ready_s"]) >= 0.3);
            ran.scene.assert_nothing_left("pids.txt", 4);
        },
    },
    Case {
        // Another process binds the leased port before the server does (as an engine's own
        // internal ports can): the server dies on "address already in use", an infrastructure
        // fault a new launch avoids. The harness launches again on a new port at once, and the
        // cell passes: not flaky, and the first attempt's log is kept.
        name: "a_port_taken_before_the_server_binds_it_is_relaunched",
        matrix: r#"
[matrix]
engine = ["fake"]
[server]
command = """if [ "$GPUCOMPAT_ATTEMPT" = 1 ]; then
  $PYTHON -c 'import socket, sys, time; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); open("taken", "w").close(); time.sleep(60)' {port} &
  for _ in $(seq 200); do [ -e taken ] && break; sleep 0.05; done
fi
exec @SERVER@ ok --port {port}"""
expect = "(?i)paris"
no-progress = "5s"
timeout = "30s"
"#,
        env: &[],
        exit: 0,
        status: "pass",
        signature: None,
        phase: "teardown",
        log_has: &[],
        more: |ran| {
            assert_eq!(ran.record["attempts"], 2, "{:#?}", ran.record);
            assert_eq!(ran.record["log"], "logs/fake.attempt2.log");
            let reason = str_of(&ran.record, "reason");
            assert!(
                reason.contains("launched again 1 time(s)") && reason.contains("logs/fake.log"),
                "{reason}"
            );
            let first = ran.scene.path("out/logs/fake.log");
            let first =
                std::fs::read_to_string(&first).unwrap_or_else(|e| panic!("{first:?}: {e}"));
            assert!(first.contains("Address already in use"), "{first}");
        },
    },
    Case {
        // The port is taken before every launch: after two relaunches the cell is an
        // infrastructure error whose reason says which fault it was, never a verdict.
        name: "a_port_taken_at_every_launch_is_an_error_that_says_which_fault",
        matrix: r#"
[matrix]
engine = ["fake"]
[server]
command = """$PYTHON -c 'import socket, sys, time; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); open(sys.argv[2], "w").close(); time.sleep(60)' {port} taken-$GPUCOMPAT_ATTEMPT &
for _ in $(seq 200); do [ -e taken-$GPUCOMPAT_ATTEMPT ] && break; sleep 0.05; done
exec @SERVER@ ok --port {port}"""
no-progress = "5s"
timeout = "30s"
"#,
        env: &[],
        exit: 1,
        status: "error",
        signature: Some("unknown"),
        phase: "ready",
        log_has: &["Address already in use"],
        more: |ran| {
            assert_eq!(ran.record["attempts"], 3, "{:#?}", ran.record);
            assert_eq!(ran.record["spurious"], true, "{:#?}", ran.record);
            let reason = str_of(&ran.record, "reason");
            assert!(reason.contains("held by another process"), "{reason}");
        },
    },
    Case {
        // An engine that says a port was taken and moved on, then answers wrong: the answer is
        // the verdict. Neither the line nor the failed answer launches it again.
        name: "a_port_line_before_a_wrong_answer_is_no_relaunch",
        matrix: r#"
[matrix]
engine = ["fake"]
[server]
command = """echo "[2026-11-26 01:34:48] Port 30042 is already in use, trying port 30043"
echo "[2026-11-26 01:34:49] port 30043 is in use. Waiting for 2 seconds for it to be available"
exec @SERVER@ wrong --port {port}"""
expect = "(?i)paris"
no-progress = "5s"
timeout = "30s"
"#,
        env: &[],
        exit: 1,
        status: "fail",
        signature: Some("wrong_output"),
        phase: "validate",
        log_has: &["trying port"],
        more: |ran| {
            assert_eq!(ran.record["attempts"], 1, "{:#?}", ran.record);
            assert_eq!(ran.record["spurious"], false, "{:#?}", ran.record);
        },
    },
    Case {
        // A complaint the server survived (NumPy 2 importing a module built for NumPy 1.x, as
        // torch does at import), then a wrong answer: the answer is the verdict, not the line.
        name: "a_survived_complaint_before_a_wrong_answer_is_wrong_output",
        matrix: r#"
[matrix]
engine = ["fake"]
[server]
command = """echo "A module that was compiled using NumPy 1.x cannot be run in"
echo "NumPy 2.0.0 as it may crash. To support both 1.x and 2.x"
exec @SERVER@ wrong --port {port}"""
expect = "(?i)paris"
no-progress = "5s"
timeout = "30s"
"#,
        env: &[],
        exit: 1,
        status: "fail",
        signature: Some("wrong_output"),
        phase: "validate",
        log_has: &["compiled using NumPy 1.x"],
        more: |ran| {
            assert_eq!(
                ran.record["decided_by"], "answer_check",
                "{:#?}",
                ran.record
            );
            assert!(ran.record["rule"].is_null(), "{:#?}", ran.record);
        },
    },
    Case {
        // A server that prints nothing: ready after 2.5 s of silence, then 2.5 s of silence
        // before it answers. Neither phase is idle for the 4 s window; only the two together
        // would be. The server turning ready is progress the harness saw itself.
        name: "silence_before_ready_does_not_count_against_the_request",
        matrix: r#"
[matrix]
engine = ["quiet"]
[server]
command = "@SERVER@ ok --port {port} --quiet --ready-delay 2.5 --answer-delay 2.5"
expect = "(?i)paris"
no-progress = "4s"
timeout = "30s"
"#,
        env: &[],
        exit: 0,
        status: "pass",
        signature: None,
        phase: "teardown",
        log_has: &[],
        more: NOTHING_MORE,
    },
    Case {
        // The cell's server is on loopback: the harness's requests never go through the proxy
        // the environment names for the cells' downloads (a dead one here).
        name: "loopback_requests_never_go_through_a_proxy",
        matrix: r#"
[matrix]
engine = ["proxied"]
[server]
command = "@SERVER@ ok --port {port}"
expect = "(?i)paris"
no-progress = "5s"
timeout = "30s"
"#,
        env: &[
            ("HTTP_PROXY", "http://127.0.0.1:9"),
            ("http_proxy", "http://127.0.0.1:9"),
            ("ALL_PROXY", "http://127.0.0.1:9"),
            ("all_proxy", "http://127.0.0.1:9"),
        ],
        exit: 0,
        status: "pass",
        signature: None,
        phase: "teardown",
        log_has: &["ready after"],
        more: NOTHING_MORE,
    },
    Case {
        name: "job_child_outliving_its_main_process_is_killed_and_counted",
        matrix: r#"
[matrix]
case = ["orphan"]
[env]
@MARKER@
[job]
command = "@JOB@ orphan pids.txt"
"#,
        env: &[],
        exit: 0,
        status: "pass",
        signature: None,
        phase: "teardown",
        log_has: &["still running after its main process exited"],
        more: |ran| {
            let leaked = ran.record["leaked"].as_u64().unwrap_or(0);
            assert!(leaked >= 1, "{:#?}", ran.record);
            ran.scene.assert_nothing_left("pids.txt", 1);
        },
    },
];

/// Runs one case and checks it; panics name the case.
fn check_case(case: &Case) {
    let matrix = case
        .matrix
        .replace("@JOB@", &job_sh())
        .replace("@SERVER@", &server_py())
        .replace("@MARKER@", MARKER_ENV);
    let scene = Scene::new(&matrix);
    let out = scene.run_with_env(&[], case.env);
    let ended = now_s();
    let records = scene.records();
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = records.into_iter().next().expect("one record");
    let log = scene.log(&record);
    let context = format!(
        "{record:#}\n--- log ---\n{log}\n--- stderr ---\n{}",
        text(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(case.exit), "exit code\n{context}");
    assert_eq!(record["status"], case.status, "status\n{context}");
    match case.signature {
        Some(signature) => assert_eq!(record["signature"], signature, "signature\n{context}"),
        None => assert!(record["signature"].is_null(), "signature\n{context}"),
    }
    assert_eq!(record["phase"], case.phase, "phase\n{context}");
    for want in case.log_has {
        assert!(log.contains(want), "log lacks {want:?}\n{context}");
    }
    (case.more)(&Ran {
        scene,
        record,
        ended,
    });
}

/// Every case, a few at a time (each starts real processes; a 2-core machine is shared), each on
/// a thread named for it so a failure says which; then one verdict naming every failed case.
#[test]
fn one_cell_scenarios() {
    let mut failed = Vec::new();
    for batch in CASES.chunks(3) {
        let handles: Vec<_> = batch
            .iter()
            .map(|case| {
                std::thread::Builder::new()
                    .name(case.name.to_owned())
                    .spawn(move || check_case(case))
                    .expect("spawn a case")
            })
            .collect();
        for (case, handle) in batch.iter().zip(handles) {
            if handle.join().is_err() {
                failed.push(case.name);
            }
        }
    }
    assert!(
        failed.is_empty(),
        "failed cases (their panics are above): {failed:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Server cells

#[test]
fn server_cells_pass_fail_and_leave_nothing_behind() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
mode = ["ok", "ok-json", "wrong", "never-ready", "crash-before-ready", "crash-in-request",
        "hang-in-request", "compile", "multi-worker"]
[[matrix.include]]
mode = "compile"
extra = "--seconds 4"
[[matrix.include]]
mode = "multi-worker"
extra = "--seconds 4 --workers 3"

[env]
{marker}

[server]
# Every server forks workers that ignore SIGTERM and one that leaves the process group.
command = "{server} {{mode}} --port {{port}} --workers 2 --ignore-term --escape --pids pids.txt"
args = "{{extra}}"
prompt = "The capital of France is"
max-tokens = 16
expect = "(?i)paris"
ready-timeout = "20s"
timeout = "30s"
# A ready server is silent and idle until the harness's health check gets its 200: on a loaded
# 2-core machine that can take most of a second, so the window leaves room for it. The compiles
# above outlast it, to show that busy is progress.
no-progress = "3s"
"#,
        marker = MARKER_ENV,
        server = server_py()
    ));
    let out = scene.run(&["--jobs", "9"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let records = by_id(&scene.records());
    assert_eq!(records.len(), 9, "{records:#?}");
    let expect = |id: &str, status: &str, signature: Option<&str>, phase: &str| {
        let r = &records[id];
        let log = scene.log(r);
        assert_eq!(r["status"], status, "{id}: {r:#?}\n{log}");
        match signature {
            Some(s) => assert_eq!(r["signature"], s, "{id}: {r:#?}\n{log}"),
            None => assert!(r["signature"].is_null(), "{id}: {r:#?}"),
        }
        assert_eq!(r["phase"], phase, "{id}: {r:#?}\n{log}");
        r.clone()
    };

    let ok = expect("ok", "pass", None, "teardown");
    let m = &ok["metrics"];
    for key in ["time_to_ready_s", "ttft_s", "tokens_per_s", "tpot_s"] {
        assert!(f64_of(&m[key]) > 0.0, "ok: {key} missing: {m:#?}");
    }
    assert!(f64_of(&m["ttft_s"]) <= f64_of(&ok["duration_s"]));
    // A line from before readiness: the server's own output is in the cell's log. (Not the ready
    // line: the server prints it a moment after its health route turns 200, which the harness can
    // beat to teardown.)
    assert!(
        scene
            .log(&ok)
            .contains("Uvicorn running on http://127.0.0.1:")
    );

    let json = expect("ok-json", "pass", None, "teardown");
    assert!(f64_of(&json["metrics"]["time_to_ready_s"]) > 0.0);
    assert!(f64_of(&json["metrics"]["tokens_per_s"]) > 0.0, "{json:#?}");

    let wrong = expect("wrong", "fail", Some("wrong_output"), "validate");
    assert!(scene.log(&wrong).contains("!!!!"));

    expect("never-ready", "fail", Some("deadlock"), "ready");

    let crash = expect(
        "crash-before-ready",
        "fail",
        Some("illegal_address"),
        "ready",
    );
    assert_eq!(crash["exit"]["code"], 1, "{crash:#?}");

    let segv = expect("crash-in-request", "fail", Some("segfault"), "infer");
    assert!(
        !segv["exit"].is_null(),
        "the exit of a crashed server is kept: {segv:#?}"
    );

    expect("hang-in-request", "fail", Some("deadlock"), "infer");

    let compile = expect("compile", "pass", None, "teardown");
    assert!(
        f64_of(&compile["metrics"]["time_to_ready_s"]) >= 4.0,
        "{compile:#?}"
    );

    // Worker 0 compiles for 4 s while the others wait: progress. Then everyone waits: a hang.
    let multi = expect("multi-worker", "fail", Some("deadlock"), "ready");
    assert!(f64_of(&multi["duration_s"]) >= 4.0, "{multi:#?}");
    assert!(scene.log(&multi).contains("Waiting for rank 0"));

    // Mains, SIGTERM-ignoring workers and the setsid escapees of all nine servers are gone.
    scene.assert_nothing_left("pids.txt", 9);
}

/// A cell whose port is answered by another process: `token` is the cell token the squatter
/// carries (another gpucompat cell's), if any. The squatter starts before the cell and grabs the
/// cell's port first; it answers health checks and completions like a healthy engine.
fn squatted_run(token: Option<&str>) -> (Scene, Value, u32, Output) {
    let scene = Scene::new(
        r#"
[matrix]
engine = ["squatted"]
[server]
command = "echo {port} > '@SANDBOX@/want-port'; exec sleep 30"
ready-timeout = "20s"
timeout = "30s"
no-progress = "20s"
"#,
    );
    let mut squatter = Command::new(python());
    squatter
        .arg(repo_root().join("tests/fixtures/run/port_squatter.py"))
        .arg(scene.path("want-port"))
        .stdout(Stdio::null());
    if let Some(token) = token {
        squatter.env("GPUCOMPAT_CELL_TOKEN", token);
    }
    let mut squatter = squatter.spawn().expect("start the squatter");
    let out = scene.run(&[]);
    let _ = squatter.kill();
    let _ = squatter.wait();
    let record = scene.record("squatted");
    (scene, record, squatter.id(), out)
}

/// A port answered by another gpucompat cell's process must never pass the cell: the harness
/// says whose port it is, as its own error, at once.
#[test]
fn a_port_answered_by_another_cell_is_a_harness_error_not_the_cells_verdict() {
    let (scene, record, squatter, out) = squatted_run(Some("another-run.some-cell.1"));
    assert_eq!(record["status"], "error", "{record:#?}");
    assert_eq!(record["spurious"], true, "{record:#?}");
    assert_eq!(record["phase"], "ready", "{record:#?}");
    let reason = str_of(&record, "reason");
    assert!(
        reason.contains(&format!("held by pid {squatter}"))
            && reason.contains("another gpucompat cell's process"),
        "{reason}"
    );
    assert!(f64_of(&record["duration_s"]) < 15.0, "{record:#?}");
    assert!(scene.log(&record).contains("not by this cell's server"));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

/// A listener outside the cell may be the cell's own port forwarder (a container runtime's, an
/// ssh tunnel's, often older than the cell): it is trusted, and the log says whose port it was.
#[test]
fn a_port_answered_by_an_outside_process_is_trusted_and_noted() {
    let (scene, record, squatter, _) = squatted_run(None);
    assert_eq!(record["status"], "pass", "{record:#?}");
    let log = scene.log(&record);
    assert!(
        log.contains(&format!("is held by pid {squatter}"))
            && log.contains("a process outside the cell that was running before the cell started"),
        "{log}"
    );
}

// ---------------------------------------------------------------------------------------------
// The harness's own faults: never a cell's verdict, never swallowed

/// A cell whose log cannot be written (here: its log is `/dev/full`, every write fails with
/// ENOSPC) gets a spurious `error` that says so; the real failure in its output is not turned
/// into a verdict read from an empty log.
#[test]
fn a_full_disk_under_the_log_is_a_spurious_error_not_the_cells_verdict() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["first", "crash"]
[[matrix.include]]
case = "first"
mode = "pass"
[[matrix.include]]
case = "crash"
mode = "no-kernel-image"
[job]
command = "{job} {{mode}}"
"#,
        job = job_sh()
    ));
    let out = scene.run(&["--cell", "first"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::os::unix::fs::symlink("/dev/full", scene.out().join("logs/crash.log"))
        .expect("link the log to /dev/full");
    let out = scene.run(&["--resume"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let record = scene.record("crash");
    assert_eq!(record["status"], "error", "{record:#?}");
    assert_eq!(record["spurious"], true, "{record:#?}");
    assert!(record["signature"] != "no_kernel_image", "{record:#?}");
    let reason = str_of(&record, "reason");
    assert!(
        reason.contains("disk full while writing the log"),
        "{reason}"
    );
}

/// `[[rules]]` that each compile but not together (two capture groups of one name, which the
/// classifier's combined prefilter cannot hold) stop the run before it starts: exit 2, no run
/// folder, never a run classified without the user's rules.
#[test]
fn rules_that_do_not_compile_together_exit_2_before_anything_runs() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["a"]
[job]
command = "{job} pass"
[[rules]]
pattern = "(?P<what>first)"
signature = "oom"
[[rules]]
pattern = "(?P<what>second)"
signature = "oom"
"#,
        job = job_sh()
    ));
    let out = scene.run(&[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("[[rules]]"), "{stderr}");
    assert!(!scene.out().exists(), "a run folder was made");
}

// ---------------------------------------------------------------------------------------------
// Bounded logs

#[test]
fn fifty_megabytes_of_output_keep_head_and_tail_within_the_limit() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["flood"]
[job]
command = "{job} flood 50000000"
"#,
        job = job_sh()
    ));
    let out = scene.run(&["--log-limit", "1MiB"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let record = scene.record("flood");
    assert_eq!(record["status"], "pass");
    let path = scene.out().join(str_of(&record, "log"));
    let size = std::fs::metadata(&path).expect("log").len();
    assert!(size <= (1 << 20) + 8 * 1024, "log is {size} bytes");
    assert!(size >= 1 << 19, "log is only {size} bytes");
    let log = scene.log(&record);
    let head = log.find("HEAD-MARKER").expect("head kept");
    let marker = log.find("log limit reached").expect("gap marker");
    let tail = log.rfind("TAIL-MARKER").expect("tail kept");
    assert!(
        head < marker && marker < tail,
        "order: {head} {marker} {tail}"
    );
    assert!(head < 1024, "the head starts the log");
}

// ---------------------------------------------------------------------------------------------
// Interruption, resume, crashes of the harness

#[test]
fn ctrl_c_keeps_finished_cells_and_resume_runs_the_rest() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["fast", "slow"]
[[matrix.include]]
case = "fast"
mode = "count fast.count"
[[matrix.include]]
case = "slow"
mode = "once slow.marker slow.count"
[env]
{marker}
[job]
command = "{job} {{mode}}"
"#,
        marker = MARKER_ENV,
        job = job_sh()
    ));
    let child = scene.spawn(&["--jobs", "2"]);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    wait_until(
        "the fast cell's record and the slow cell hanging",
        Duration::from_secs(20),
        || scene.path("slow.marker").exists() && scene.records().len() == 1,
    );
    // A second harness cannot write the folder while the first one runs.
    let second = scene.run(&["--resume"]);
    assert_eq!(second.status.code(), Some(2));
    assert!(
        text(&second.stderr).contains("another gpucompat run"),
        "{}",
        text(&second.stderr)
    );
    kill(pid, Signal::SIGINT).expect("send SIGINT");
    let out = finish(child, Duration::from_secs(20));
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(130),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("interrupted"), "{stdout}");
    assert!(stdout.contains("--resume"), "{stdout}");
    assert_eq!(scene.manifest()["state"], "interrupted");
    let records = scene.records();
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["id"], "fast");
    assert!(
        scene.marked_alive().is_empty(),
        "Ctrl-C left cell processes"
    );

    let out = scene.run(&["--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let records = by_id(&scene.records());
    assert_eq!(records.len(), 2);
    assert_eq!(records["slow"]["status"], "pass");
    let runs = |name: &str| {
        std::fs::read_to_string(scene.path(name))
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(runs("fast.count"), 1, "the finished cell ran again");
    assert_eq!(runs("slow.count"), 2);
    let manifest = scene.manifest();
    assert_eq!(manifest["state"], "finished");
    assert_eq!(manifest["resumes"], 1);
}

#[test]
fn sigterm_tears_down_a_server_and_its_stubborn_workers() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
engine = ["stuck"]
[env]
{marker}
[server]
command = "{server} never-ready --port {{port}} --workers 2 --ignore-term --escape --pids pids.txt"
no-progress = "30s"
timeout = "60s"
"#,
        marker = MARKER_ENV,
        server = server_py()
    ));
    let child = scene.spawn(&[]);
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    wait_until(
        "the server and its workers",
        Duration::from_secs(20),
        || scene.pids("pids.txt").len() >= 4,
    );
    kill(pid, Signal::SIGTERM).expect("send SIGTERM");
    let out = finish(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(
        scene.records().is_empty(),
        "an interrupted cell has no record"
    );
    assert_eq!(scene.manifest()["state"], "interrupted");
    scene.assert_nothing_left("pids.txt", 4);
}

#[test]
fn resume_repairs_a_record_cut_short_by_a_crash() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["a", "b"]
[job]
command = "{job} count {{case}}.count"
"#,
        job = job_sh()
    ));
    let out = scene.run(&["--cell", "a"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // A crash in the middle of writing b's record leaves half a line.
    let results = scene.out().join("results.jsonl");
    let mut bytes = std::fs::read(&results).expect("results");
    bytes.extend_from_slice(br#"{"id":"b","values":{"case":"b"},"pins":[],"sta"#);
    std::fs::write(&results, bytes).expect("write");

    let out = scene.run(&["--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let records = scene.records();
    let ids: Vec<&str> = records.iter().map(|r| str_of(r, "id")).collect();
    assert_eq!(ids, ["a", "b"]);
    let count = |name: &str| {
        std::fs::read_to_string(scene.path(name))
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!(count("a.count"), 1);
    assert_eq!(count("b.count"), 1);
}

#[test]
fn harness_killed_by_sigkill_leaves_no_cell_process() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["sleeper"]
[env]
{marker}
[job]
command = "{job} sleeper pids.txt"
"#,
        marker = MARKER_ENV,
        job = job_sh()
    ));
    let mut child = scene.spawn(&[]);
    wait_until("the sleeper's pid", Duration::from_secs(20), || {
        !scene.pids("pids.txt").is_empty()
    });
    let sleeper = scene.pids("pids.txt")[0];
    assert!(is_running(sleeper));
    child.kill().expect("SIGKILL the harness");
    let _ = child.wait();
    let killed = Instant::now();
    wait_until(
        "the reaper to kill the sleeper",
        Duration::from_secs(5),
        || !is_running(sleeper) && scene.marked_alive().is_empty(),
    );
    eprintln!("sleeper gone {:?} after the harness", killed.elapsed());

    // The folder survived: the run is marked as still running, and `--resume` finishes it.
    assert_eq!(scene.manifest()["state"], "running");
    assert!(scene.records().is_empty());
    let out = scene.run(&["--resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(scene.record("sleeper")["status"], "pass");
    assert_eq!(scene.manifest()["state"], "finished");
}

#[test]
fn harness_killed_by_sigkill_leaves_no_server_worker() {
    // Workers ignore SIGTERM and one left the process group: the reaper finds them by the run's
    // token and kills them after its grace second.
    let scene = Scene::new(&format!(
        r#"
[matrix]
engine = ["stuck"]
[env]
{marker}
[server]
command = "{server} never-ready --port {{port}} --workers 2 --ignore-term --escape --pids pids.txt"
no-progress = "60s"
timeout = "120s"
"#,
        marker = MARKER_ENV,
        server = server_py()
    ));
    let mut child = scene.spawn(&[]);
    wait_until(
        "the server and its workers",
        Duration::from_secs(20),
        || scene.pids("pids.txt").len() >= 4,
    );
    child.kill().expect("SIGKILL the harness");
    let _ = child.wait();
    let pids = scene.pids("pids.txt");
    wait_until(
        "the reaper to kill every worker",
        Duration::from_secs(6),
        || pids.iter().all(|&pid| !is_running(pid)) && scene.marked_alive().is_empty(),
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit 2, nothing run

fn passing_scene() -> Scene {
    Scene::new(&format!(
        r#"
[matrix]
case = ["alpha", "beta"]
[job]
command = "{job} pass"
"#,
        job = job_sh()
    ))
}

#[test]
fn unknown_cell_exits_2_with_a_suggestion() {
    let scene = passing_scene();
    let out = scene.run(&["--cell", "alpah"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("did you mean `alpha`?"), "{stderr}");
    assert!(scene.records().is_empty());
}

#[test]
fn existing_run_folder_without_resume_exits_2() {
    let scene = passing_scene();
    assert_eq!(scene.run(&[]).status.code(), Some(0));
    let out = scene.run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--resume"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        scene.records().len(),
        2,
        "the first run's records are untouched"
    );
}

#[test]
fn bad_inventory_exits_2() {
    let scene = Scene::with_inventory(
        &format!(
            r#"
[matrix]
case = ["alpha"]
[job]
command = "{job} pass"
"#,
            job = job_sh()
        ),
        "[[gpu]]\nindex = 0\nname = \"RTX 3090\"\narch = \"ampere\"\n",
    );
    let out = scene.run(&[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ampere"), "{stderr}");
    assert!(!scene.out().join("results.jsonl").exists());
}

#[test]
fn resume_without_a_run_exits_2() {
    let scene = passing_scene();
    let out = scene.run(&["--resume"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nothing to resume"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn resume_with_another_matrix_exits_2() {
    let scene = passing_scene();
    assert_eq!(scene.run(&[]).status.code(), Some(0));
    let text_now = std::fs::read_to_string(&scene.matrix).expect("matrix");
    std::fs::write(&scene.matrix, text_now.replace("\"beta\"", "\"gamma\"")).expect("write");
    let out = scene.run(&["--resume"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("another matrix"),
        "{}",
        text(&out.stderr)
    );
}
