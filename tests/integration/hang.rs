//! Hang forensics (docs/hang.md): real processes stuck in known places, and what the capture
//! taken between the watchdog's verdict and teardown says about them: frames, `wchan`, locks,
//! grouping, the verdict and its evidence, `hang.json`, the log, the cell page, and the time the
//! capture adds.
//!
//! py-spy comes from `GPUCOMPAT_PY_SPY`, `target/test-tools/py-spy` (where `scripts/test` puts
//! it) or `PATH`.

use crate::run::Scene;
use crate::util::{python, repo_root};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;

/// The py-spy the tests hand the harness.
fn py_spy() -> String {
    #[allow(
        clippy::disallowed_methods,
        reason = "tests read their own environment"
    )]
    if let Ok(path) = std::env::var("GPUCOMPAT_PY_SPY") {
        return path;
    }
    let tools = repo_root().join("target/test-tools/py-spy/bin/py-spy");
    if tools.is_file() {
        return tools.display().to_string();
    }
    #[allow(
        clippy::disallowed_methods,
        reason = "tests read their own environment"
    )]
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("py-spy"))
            .find(|p| p.is_file())
    });
    on_path
        .map(|p| p.display().to_string())
        .expect("py-spy is needed: scripts/test installs it into target/test-tools/py-spy")
}

fn fixture(name: &str) -> String {
    format!(
        "'{}'",
        repo_root().join("tests/fixtures/hang").join(name).display()
    )
}

/// A one-cell job matrix running `command` under the given deadline and idle window.
fn scene(command: &str, timeout: &str, no_progress: &str) -> Scene {
    Scene::new(&format!(
        "[matrix]\ncase = [\"hang\"]\n[job]\ncommand = \"{}\"\ntimeout = \"{timeout}\"\nno-progress = \"{no_progress}\"\n",
        command.replace('\\', "\\\\").replace('"', "\\\"")
    ))
}

/// What a run left: the record, `hang.json`, the log, and how long the harness ran.
struct Hung {
    record: Value,
    capture: Value,
    log: String,
    seconds: f64,
}

fn run(scene: &Scene, env: &[(&str, &str)]) -> Hung {
    let spy = py_spy();
    let mut all = vec![("GPUCOMPAT_PY_SPY", spy.as_str())];
    all.extend_from_slice(env);
    let start = Instant::now();
    let out = scene.run_with_env(&[], &all);
    let seconds = start.elapsed().as_secs_f64();
    let record = scene.record("hang");
    let log = std::fs::read_to_string(scene.out().join("logs/hang.log")).expect("log");
    let capture = std::fs::read(scene.out().join("logs/hang.hang.json"))
        .map(|bytes| serde_json::from_slice(&bytes).expect("hang.json is JSON"))
        .unwrap_or(Value::Null);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{log}",
        String::from_utf8_lossy(&out.stderr)
    );
    Hung {
        record,
        capture,
        log,
        seconds,
    }
}

fn procs(capture: &Value) -> &Vec<Value> {
    capture["processes"].as_array().expect("processes")
}

/// The process whose command line contains `what`.
fn process<'a>(capture: &'a Value, what: &str) -> &'a Value {
    procs(capture)
        .iter()
        .filter(|p| p["python"] == true || p["comm"] == "ninja")
        .find(|p| p["cmdline"].as_str().is_some_and(|c| c.contains(what)))
        .unwrap_or_else(|| panic!("no process running {what}: {capture:#}"))
}

/// The frame labels of a process's thread named `thread` (any thread when `None`), top first.
fn frames(p: &Value, thread: Option<&str>) -> Vec<String> {
    p["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .filter(|t| thread.is_none_or(|name| t["thread"] == name))
        .flat_map(|t| t["frames"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f["label"].as_str().map(str::to_owned))
        .collect()
}

fn pid(p: &Value) -> i64 {
    p["pid"].as_i64().expect("pid")
}

#[test]
fn hang_threads_deadlocked_on_two_locks_are_named_by_their_frames() {
    let scene = scene(
        &format!("{} {}", python(), fixture("locks.py")),
        "60s",
        "1s",
    );
    let hung = run(&scene, &[]);
    assert_eq!(hung.record["signature"], "deadlock");
    let py = process(&hung.capture, "locks.py");
    assert_eq!(py["stack_source"], "py-spy --native", "{py:#}");
    let first = frames(py, Some("first"));
    let second = frames(py, Some("second"));
    assert!(
        first.contains(&"locks:take_a_then_b".to_owned()),
        "{first:?}"
    );
    assert!(
        second.contains(&"locks:take_b_then_a".to_owned()),
        "{second:?}"
    );
    assert!(
        py["wchan"].as_str().is_some_and(|w| w.contains("futex")),
        "a thread blocked on a lock sleeps on a futex: {py:#}"
    );
    assert_eq!(py["threads"], 3);
    // The record: where, by which evidence, and the fingerprint of this hang.
    let hang = &hung.record["hang"];
    assert_eq!(hang["capture"], "logs/hang.hang.json");
    assert_eq!(hang["decided_by"], "watchdog");
    assert_eq!(hang["frames"][0], "locks:take_b_then_a");
    assert!(
        hung.record["fingerprint"]
            .as_str()
            .is_some_and(|f| f.starts_with("deadlock in locks:take_b_then_a <- ")),
        "{}",
        hung.record["fingerprint"]
    );
    assert!(
        hang["evidence"]
            .as_str()
            .is_some_and(|e| e.contains("no process of the cell used CPU during the capture")),
        "{hang:#}"
    );
    // The log's section, in the harness's own lines (never read as the cell's failure).
    assert!(
        hung.log.contains("[gpucompat] hang capture: 2 process(es)"),
        "{}",
        hung.log
    );
    assert!(
        hung.log
            .contains("[gpucompat]       locks:take_a_then_b (locks.py:"),
        "{}",
        hung.log
    );
    // The classifier never reads the section as the cell's failure: the log alone names nothing.
    let classified = crate::util::gpucompat()
        .args(["classify", "--format", "jsonl"])
        .arg(scene.out().join("logs/hang.log"))
        .output()
        .expect("classify");
    let classified: Value = serde_json::from_slice(&classified.stdout).expect("jsonl");
    assert_eq!(classified["signature"], "unknown", "{classified}");
    // The cell page shows the grouped table.
    let page = std::fs::read_to_string(scene.out().join("cells/hang.html")).expect("cell page");
    assert!(page.contains("Hang: where the processes were"), "{page}");
    assert!(page.contains("<code>locks:take_b_then_a</code>"), "{page}");
    // What the capture added to the verdict, printed for the record (the issue asks for it).
    let took = hung.capture["took_s"].as_f64().expect("took_s");
    println!(
        "hang capture took {took:.3}s (2 processes, 1 Python, py-spy --native); whole run {:.2}s",
        hung.seconds
    );
    assert!(took < 20.0 && hung.capture["complete"] == true);
}

#[test]
fn hang_child_blocked_on_a_pipe_is_seen_in_the_kernel_and_in_its_frames() {
    let scene = scene(&format!("{} {}", python(), fixture("pipe.py")), "60s", "1s");
    let hung = run(&scene, &[]);
    assert_eq!(hung.record["signature"], "deadlock");
    let reader = process(&hung.capture, "pipe_reader.py");
    assert!(
        reader["wchan"].as_str().is_some_and(|w| w.contains("pipe")),
        "the reader sleeps reading a pipe: {reader:#}"
    );
    assert!(frames(reader, None).contains(&"pipe_reader:read_request".to_owned()));
    let parent = process(&hung.capture, "pipe.py");
    assert!(frames(parent, None).contains(&"pipe:wait_for_reader".to_owned()));
    assert_eq!(
        reader["ppid"].as_i64(),
        Some(pid(parent)),
        "the parent is recorded"
    );
    // Two different hangs are two different failures.
    assert!(
        hung.record["fingerprint"]
            .as_str()
            .is_some_and(|f| f.contains("pipe")),
        "{}",
        hung.record["fingerprint"]
    );
}

#[test]
fn hang_flock_waiter_names_the_lock_and_its_idle_holder() {
    let scene = scene(
        &format!("{} {} idle", python(), fixture("flock.py")),
        "60s",
        "1s",
    );
    let hung = run(&scene, &[]);
    assert_eq!(hung.record["signature"], "deadlock");
    let holder = process(&hung.capture, "flock.py idle");
    let waiter = process(&hung.capture, "flock_waiter.py");
    assert!(frames(waiter, None).contains(&"flock_waiter:wait_for_lock".to_owned()));
    assert!(
        waiter["wchan"]
            .as_str()
            .is_some_and(|w| w.contains("lock") || w.contains("flock")),
        "blocked in flock: {waiter:#}"
    );
    let locks = hung.capture["locks"].as_array().expect("locks");
    let lock = locks
        .iter()
        .find(|l| {
            l["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/cache.lock"))
        })
        .unwrap_or_else(|| panic!("cache.lock not found: {locks:?}"));
    assert_eq!(lock["holder"].as_i64(), Some(pid(holder)));
    assert_eq!(lock["kind"], "FLOCK");
    assert_eq!(lock["waiters"][0].as_i64(), Some(pid(waiter)));
    let evidence = hung.record["hang"]["evidence"].as_str().expect("evidence");
    assert!(
        evidence.contains("1 process(es) wait on `")
            && evidence.contains(&format!("held by pid {} (idle", pid(holder))),
        "{evidence}"
    );
}

#[test]
fn hang_lock_held_by_a_busy_compiler_is_a_slow_compile_not_a_deadlock() {
    let scene = scene(
        &format!("{} {} compile", python(), fixture("flock.py")),
        "3s",
        "60s",
    );
    let hung = run(&scene, &[]);
    assert_eq!(hung.capture["trigger"], "deadline");
    assert_eq!(hung.record["signature"], "timeout");
    assert_eq!(hung.record["hang"]["decided_by"], "busy_compiler");
    let ninja = procs(&hung.capture)
        .iter()
        .find(|p| p["comm"] == "ninja")
        .expect("the compiler was captured");
    assert_eq!(ninja["busy"], true, "{ninja:#}");
    let holder = process(&hung.capture, "flock.py compile");
    let evidence = hung.record["hang"]["evidence"].as_str().expect("evidence");
    assert!(
        evidence.contains(&format!("held by pid {}, whose `ninja`", pid(holder))),
        "{evidence}"
    );
    // The groups: one waiter, one holder, one busy compiler, the shell.
    let places: Vec<&str> = hung.capture["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["place"].as_str())
        .collect();
    assert!(places.contains(&"`ninja` (busy)"), "{places:?}");
}

#[test]
fn hang_busy_loop_at_the_deadline_is_a_timeout_with_its_frame() {
    let scene = scene(&format!("{} {}", python(), fixture("busy.py")), "2s", "60s");
    let hung = run(&scene, &[]);
    assert_eq!(hung.record["signature"], "timeout");
    let busy = process(&hung.capture, "busy.py");
    assert_eq!(busy["busy"], true);
    assert_eq!(busy["state"], "R", "{busy:#}");
    assert_eq!(hung.record["hang"]["frames"][0], "busy:spin");
    assert!(
        hung.record["hang"]["evidence"]
            .as_str()
            .is_some_and(|e| e.contains("busy during the capture")),
        "{}",
        hung.record["hang"]
    );
}

#[test]
fn hang_without_py_spy_asks_faulthandler_only_where_it_is_registered() {
    let scene = scene(
        &format!(
            "{py} {} & {py} {}; wait",
            fixture("faulthandler_wait.py"),
            fixture("locks.py"),
            py = python()
        ),
        "60s",
        "1s",
    );
    let hung = run(&scene, &[("GPUCOMPAT_PY_SPY", "off")]);
    assert!(
        hung.capture["stacks_by"]
            .as_str()
            .is_some_and(|s| s.starts_with("py-spy unavailable: turned off")),
        "{}",
        hung.capture["stacks_by"]
    );
    let registered = process(&hung.capture, "faulthandler_wait.py");
    assert_eq!(registered["catches_sigusr1"], true);
    assert!(
        registered["stack_source"]
            .as_str()
            .is_some_and(|s| s.starts_with("faulthandler"))
    );
    let other = process(&hung.capture, "locks.py");
    assert!(
        other["stack_note"]
            .as_str()
            .is_some_and(|s| s.contains("registered no SIGUSR1 handler"))
    );
    // faulthandler wrote the stacks into the cell's output; the other process was not signalled
    // (SIGUSR1 would have killed it) and its threads are still named in no dump.
    assert!(
        hung.log.contains("in wait_forever"),
        "faulthandler's dump is in the log:\n{}",
        hung.log
    );
    assert!(hung.record["signature"] == "deadlock");
}

#[test]
fn hang_capture_never_holds_teardown_past_its_budget() {
    // A py-spy that answers `--version` and then never finishes a dump.
    let scene = scene(
        &format!("{} {}", python(), fixture("locks.py")),
        "60s",
        "1s",
    );
    let slow = scene.path("slow-py-spy");
    std::fs::write(
        &slow,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'py-spy 0.0.0 (slow)'; exit 0; fi\nexec sleep 60\n",
    )
    .expect("write");
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let slow = slow.display().to_string();
    let hung = run(
        &scene,
        &[
            ("GPUCOMPAT_PY_SPY", slow.as_str()),
            ("GPUCOMPAT_HANG_CAPTURE", "2s"),
        ],
    );
    assert_eq!(hung.record["signature"], "deadlock");
    let took = hung.capture["took_s"].as_f64().expect("took_s");
    assert!(took <= 2.0, "the capture took {took}s of a 2s budget");
    let py = process(&hung.capture, "locks.py");
    assert!(
        py["stack_note"]
            .as_str()
            .is_some_and(|n| n.contains("did not finish") || n.contains("no budget left")),
        "{py:#}"
    );
    // The whole cell: launch, 1 s of idle window, at most the 2 s budget, teardown.
    let duration = hung.record["duration_s"].as_f64().expect("duration");
    assert!(duration < 1.0 + 2.0 + 3.0, "{duration}s");
}

#[test]
fn hang_py_spy_is_installed_into_the_tool_cache_from_the_wheelhouse() {
    let wheels = wheelhouse();
    let scene = Scene::new(&format!(
        "[matrix]\ncase = [\"hang\"]\n[job]\ncommand = \"{} {}\"\ntimeout = \"60s\"\nno-progress = \"1s\"\n\
         [python]\nfind-links = [\"{}\"]\nno-index = true\nsystem-site-packages = true\n",
        python(),
        fixture("locks.py").replace('\'', ""),
        wheels.display()
    ));
    // No py-spy on PATH and none named: only the wheelhouse has one.
    let bin = PathBuf::from(python());
    let path = format!(
        "{}:/usr/bin:/bin",
        bin.parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    let path = path.as_str();
    let hung = run(
        &scene,
        &[
            ("GPUCOMPAT_PY_SPY", ""),
            ("PATH", path),
            ("GPUCOMPAT_INSTALLER", "pip"),
        ],
    );
    assert!(
        hung.capture["stacks_by"]
            .as_str()
            .is_some_and(|s| s.contains("installed into the tool cache")),
        "{}\n{}",
        hung.capture["stacks_by"],
        hung.log
    );
    assert!(scene.path("cache/tools/py-spy/bin/py-spy").is_file());
    assert!(
        frames(process(&hung.capture, "locks.py"), Some("first"))
            .contains(&"locks:take_a_then_b".to_owned())
    );
}

/// A folder with py-spy's wheel (`scripts/test` downloads it; fetched here when missing).
fn wheelhouse() -> PathBuf {
    let dir = repo_root().join("target/test-tools/wheels");
    let has = |d: &PathBuf| {
        std::fs::read_dir(d).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("py_spy-"))
        })
    };
    if !has(&dir) {
        #[allow(clippy::disallowed_methods, reason = "test setup")]
        let status = std::process::Command::new(python())
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
            ])
            .arg(&dir)
            .arg("py-spy")
            .status()
            .expect("pip download");
        assert!(status.success() && has(&dir), "cannot fetch py-spy's wheel");
    }
    dir
}

#[test]
fn hang_eight_workers_on_one_jit_lock_are_one_group_and_a_slow_compile() {
    let scene = scene(
        &format!("{} {} 8", python(), fixture("jit_lock.py")),
        "4s",
        "60s",
    );
    let hung = run(&scene, &[]);
    assert_eq!(hung.record["signature"], "timeout");
    assert_eq!(hung.record["hang"]["decided_by"], "busy_compiler");
    let groups = hung.capture["groups"].as_array().expect("groups");
    let waiting = &groups[0];
    assert_eq!(
        waiting["pids"].as_array().map(Vec::len),
        Some(7),
        "{groups:#?}"
    );
    assert_eq!(waiting["frames"][0], "jit_lock:acquire");
    assert_eq!(waiting["frames"][1], "jit_lock:build");
    assert_eq!(
        hung.record["hang"]["summary"],
        "7 processes in `jit_lock:acquire` <- `jit_lock:build` <- `jit_lock:<module>`"
    );
    let evidence = hung.record["hang"]["evidence"].as_str().expect("evidence");
    assert!(
        evidence.starts_with("7 process(es) wait on `"),
        "{evidence}"
    );
    assert!(evidence.contains("kernel.lock"), "{evidence}");
    let took = hung.capture["took_s"].as_f64().expect("took_s");
    println!(
        "hang capture took {took:.3}s ({} processes, 9 Python, py-spy --native)",
        procs(&hung.capture).len()
    );
}

#[test]
fn hang_after_a_fatal_error_keeps_the_logs_root_cause_and_says_so() {
    let scene = scene(
        &format!(
            "echo 'RuntimeError: CUDA error: an illegal memory access was encountered'; exec {} {}",
            python(),
            fixture("locks.py")
        ),
        "60s",
        "1s",
    );
    let hung = run(&scene, &[]);
    assert_eq!(hung.record["signature"], "illegal_address");
    let hang = &hung.record["hang"];
    assert_eq!(hang["decided_by"], "log", "{hang:#}");
    assert_eq!(hang["frames"][0], "locks:take_b_then_a");
    assert!(
        !hung.record["fingerprint"]
            .as_str()
            .unwrap_or_default()
            .starts_with("deadlock in"),
        "{}",
        hung.record["fingerprint"]
    );
}
