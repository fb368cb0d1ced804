//! Hardening: what a run must never do to the files around it, to its results, or to the signals
//! and exit codes scripts rely on. Real processes and real signals, as in `run.rs`, whose scene
//! helpers these tests share.

use crate::run::{MARKER_ENV, Scene, finish, is_running, job_sh, text, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// Two passing job cells, `alpha` and `beta`, that count their runs in `<case>.count`.
fn counting_scene() -> Scene {
    Scene::new(&format!(
        r#"
[matrix]
case = ["alpha", "beta"]
[job]
command = "{job} count {{case}}.count"
"#,
        job = job_sh()
    ))
}

fn runs_of(scene: &Scene, name: &str) -> usize {
    std::fs::read_to_string(scene.path(name))
        .unwrap_or_default()
        .lines()
        .count()
}

// ---------------------------------------------------------------------------------------------
// `--out` into a folder that is not a run folder

#[test]
fn run_out_into_a_folder_of_other_files_exits_2_and_touches_nothing() {
    let scene = counting_scene();
    let out = scene.out();
    std::fs::create_dir_all(&out).expect("out");
    std::fs::write(out.join("index.html"), "my own page").expect("write");
    std::fs::write(out.join("notes.txt"), "keep me").expect("write");
    let ran = scene.run(&[]);
    assert_eq!(ran.status.code(), Some(2), "{}", text(&ran.stderr));
    let stderr = text(&ran.stderr);
    assert!(stderr.contains("not a gpucompat run folder"), "{stderr}");
    assert!(stderr.contains(&out.display().to_string()), "{stderr}");
    assert!(stderr.contains("`index.html`"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(out.join("index.html")).expect("read"),
        "my own page"
    );
    let mut names: Vec<_> = std::fs::read_dir(&out)
        .expect("read out")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["index.html", "notes.txt"], "nothing was added");
    assert_eq!(runs_of(&scene, "alpha.count"), 0, "no cell ran");
}

#[test]
fn run_out_into_an_empty_folder_or_a_run_folder_is_accepted() {
    let scene = counting_scene();
    std::fs::create_dir_all(scene.out()).expect("out");
    let ran = scene.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    // The run folder now holds the report too; it is still a run folder to resume.
    assert!(scene.out().join("index.html").exists());
    let ran = scene.run(&["--resume"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
}

// ---------------------------------------------------------------------------------------------
// A run that tested nothing

#[test]
fn a_run_where_every_cell_was_skipped_exits_4() {
    let scene = Scene::new(
        r#"
[matrix]
case = ["a", "b"]
[resources]
gpus = "sm_90"
[job]
command = "true"
"#,
    );
    let ran = scene.run(&[]);
    assert_eq!(ran.status.code(), Some(4), "{}", text(&ran.stderr));
    let records = scene.records();
    assert_eq!(records.len(), 2);
    assert!(
        records.iter().all(|r| r["status"] == "skip"),
        "{records:#?}"
    );
}

#[test]
fn a_run_where_some_cells_ran_and_others_were_skipped_exits_0() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["cpu", "gpu"]
[[matrix.include]]
case = "gpu"
gpu = "sm_90"
[resources]
gpus = "{{gpu}}"
[job]
command = "{job} pass"
"#,
        job = job_sh()
    ));
    let ran = scene.run(&[]);
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}\n{}",
        text(&ran.stdout),
        text(&ran.stderr)
    );
    assert_eq!(scene.record("gpu")["status"], "skip");
    assert_eq!(scene.record("cpu")["status"], "pass");
}

#[test]
fn help_documents_exit_code_4() {
    let out = crate::util::gpucompat()
        .arg("--help")
        .output()
        .expect("help");
    let help = text(&out.stdout);
    assert!(
        help.lines()
            .any(|l| l.trim_start().starts_with("4 ") && l.contains("skipped")),
        "{help}"
    );
}

// ---------------------------------------------------------------------------------------------
// `--resume` and spurious errors

/// A finished run of `counting_scene` whose `beta` record is turned into what an infrastructure
/// fault leaves: a spurious `error` (as `full disk under the log` in `run.rs` produces for real).
fn run_with_a_spurious_error() -> Scene {
    let scene = counting_scene();
    let ran = scene.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let results = scene.out().join("results.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&results)
        .expect("results")
        .lines()
        .map(|line| {
            let mut record: serde_json::Value = serde_json::from_str(line).expect("json");
            if record["id"] == "beta" {
                record["status"] = "error".into();
                record["spurious"] = true.into();
                record["reason"] = "cannot write the log: no space left on device".into();
            }
            record.to_string()
        })
        .collect();
    std::fs::write(&results, lines.join("\n") + "\n").expect("write");
    scene
}

#[test]
fn resume_runs_spurious_errors_again_by_default() {
    let scene = run_with_a_spurious_error();
    let ran = scene.run(&["--resume"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(runs_of(&scene, "alpha.count"), 1, "a pass is kept");
    assert_eq!(
        runs_of(&scene, "beta.count"),
        2,
        "the spurious error ran again"
    );
    let last = scene
        .records()
        .into_iter()
        .rfind(|r| r["id"] == "beta")
        .expect("beta");
    assert_eq!(last["status"], "pass");
}

#[test]
fn resume_with_no_retry_errors_keeps_spurious_errors() {
    let scene = run_with_a_spurious_error();
    let ran = scene.run(&["--resume", "--no-retry-errors"]);
    assert_eq!(ran.status.code(), Some(1), "{}", text(&ran.stderr));
    assert_eq!(runs_of(&scene, "beta.count"), 1, "the error was kept");
}

// ---------------------------------------------------------------------------------------------
// `results.jsonl` after a crash, or with a damaged line

/// `counting_scene` with only `alpha` run, its record's newline cut off as a crash between the
/// record's bytes and its newline would leave it.
fn run_without_the_last_newline() -> Scene {
    let scene = counting_scene();
    let ran = scene.run(&["--cell", "alpha"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let results = scene.out().join("results.jsonl");
    let bytes = std::fs::read(&results).expect("results");
    assert_eq!(bytes.last(), Some(&b'\n'));
    std::fs::write(&results, &bytes[..bytes.len() - 1]).expect("write");
    scene
}

#[test]
fn resume_keeps_a_complete_last_record_without_its_newline() {
    let scene = run_without_the_last_newline();
    let ran = scene.run(&["--resume"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(runs_of(&scene, "alpha.count"), 1, "alpha's record was kept");
    assert_eq!(runs_of(&scene, "beta.count"), 1);
    // Every line parses: beta's record was not glued onto alpha's.
    let ids: Vec<String> = scene
        .records()
        .iter()
        .map(|r| r["id"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(ids, ["alpha", "beta"]);
}

#[test]
fn report_keeps_a_complete_last_record_without_its_newline() {
    let scene = run_without_the_last_newline();
    let report = scene.path("report");
    let out = crate::util::gpucompat()
        .arg("report")
        .arg(scene.out())
        .arg("--out")
        .arg(&report)
        .output()
        .expect("report");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let csv = std::fs::read_to_string(report.join("compat.csv")).expect("compat.csv");
    assert!(csv.contains("alpha"), "{csv}");
}

#[test]
fn resume_warns_about_a_corrupt_middle_line_and_keeps_every_other_record() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["a", "b", "c"]
[job]
command = "{job} count {{case}}.count"
"#,
        job = job_sh()
    ));
    let ran = scene.run(&["--cell", "a", "--cell", "b", "--cell", "c"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let results = scene.out().join("results.jsonl");
    let text_now = std::fs::read_to_string(&results).expect("results");
    let mut lines: Vec<&str> = text_now.lines().collect();
    assert_eq!(lines.len(), 3);
    let damaged = lines[1].replace(r#""status""#, r#""stat"#);
    let b = serde_json::from_str::<serde_json::Value>(lines[1]).expect("json")["id"].clone();
    lines[1] = &damaged;
    std::fs::write(&results, lines.join("\n") + "\n").expect("write");

    let ran = scene.run(&["--resume"]);
    let stderr = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: {}:2: not a cell record",
            results.display()
        )),
        "{stderr}"
    );
    // The two good records were kept; only the damaged line's cell ran again.
    let b = b.as_str().expect("id");
    for case in ["a", "b", "c"] {
        let expected = if case == b { 2 } else { 1 };
        assert_eq!(
            runs_of(&scene, &format!("{case}.count")),
            expected,
            "{case}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A second Ctrl-C

#[test]
fn a_second_sigint_during_teardown_kills_at_once() {
    let scene = Scene::new(&format!(
        r#"
[matrix]
case = ["stubborn"]
[env]
{marker}
[job]
# Ignores SIGTERM, and so does the `sleep` it starts (an ignored signal stays ignored).
command = "trap '' TERM; echo $$ >> pids.txt; sleep 1000"
no-progress = "300s"
timeout = "300s"
"#,
        marker = MARKER_ENV,
    ));
    // A grace far longer than the test allows: only a kill at the second signal ends it in time.
    let args: Vec<_> = scene
        .args(&[])
        .into_iter()
        .map(|a| if a == "300ms" { "60s".into() } else { a })
        .collect();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_gpucompat"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn gpucompat");
    let pid = Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    wait_until("the stubborn cell", Duration::from_secs(20), || {
        !scene.pids("pids.txt").is_empty()
    });
    kill(pid, Signal::SIGINT).expect("first SIGINT");
    let log = scene.out().join("logs/stubborn.log");
    wait_until("teardown to begin", Duration::from_secs(20), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("interrupted by the user"))
    });
    let second = Instant::now();
    kill(pid, Signal::SIGINT).expect("second SIGINT");
    let out = finish(child, Duration::from_secs(10));
    let took = second.elapsed();
    eprintln!("exited {took:?} after the second SIGINT");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("again: killing"), "{stderr}");
    assert_eq!(scene.manifest()["state"], "interrupted");
    let pids = scene.pids("pids.txt");
    assert!(pids.iter().all(|&p| !is_running(p)), "{pids:?}");
    assert!(
        scene.marked_alive().is_empty(),
        "cell processes outlived the run"
    );
}

// ---------------------------------------------------------------------------------------------
// A daemon that leaves the group and clears its environment

/// Whether this host lets the harness make a cgroup per cell (cgroup v2 mounted, and a child of
/// the test's own cgroup can be made), and why not.
fn cgroups_usable() -> Result<(), String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let dir = gpucompat::exec::cgroup::own_cgroup_dir(&mounts, &own)?;
    let probe = dir.join(format!("gpucompat-test-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).map_err(|e| format!("cannot make {}: {e}", probe.display()))?;
    let kill = probe.join("cgroup.kill").exists();
    let _ = std::fs::remove_dir(&probe);
    if kill {
        Ok(())
    } else {
        Err("no cgroup.kill".to_owned())
    }
}

/// A job that starts `setsid env -i ...` (new session, empty environment: neither the group nor
/// the token finds it) and exits at once.
fn daemon_scene() -> Scene {
    Scene::new(
        r#"
[matrix]
case = ["daemon"]
[job]
command = "setsid env -i sh -c 'echo $$ > daemon.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 & while [ ! -s daemon.pid ]; do sleep 0.05; done"
"#,
    )
}

#[test]
fn a_daemon_that_clears_its_environment_is_killed_by_the_cells_cgroup() {
    if let Err(why) = cgroups_usable() {
        eprintln!("skipped: this host gives the harness no cgroup per cell ({why})");
        return;
    }
    let scene = daemon_scene();
    let ran = scene.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let daemon = scene.pids("daemon.pid");
    assert_eq!(daemon.len(), 1, "the daemon wrote its pid");
    let record = scene.record("daemon");
    let alive = is_running(daemon[0]);
    if alive {
        let _ = kill(Pid::from_raw(daemon[0]), Signal::SIGKILL);
    }
    assert!(!alive, "the daemon outlived the run");
    assert!(record["leaked"].as_u64().unwrap_or(0) >= 1, "{record:#}");
    let log = scene.log(&record);
    assert!(log.contains("found by the cell's cgroup"), "{log}");
    assert!(!log.contains("escape detection limited"), "{log}");
}

#[test]
fn a_cell_log_says_when_escape_detection_is_limited() {
    let scene = daemon_scene();
    let ran = scene.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let log = scene.log(&scene.record("daemon"));
    let daemon = scene.pids("daemon.pid");
    if daemon.first().is_some_and(|&p| is_running(p)) {
        let _ = kill(Pid::from_raw(daemon[0]), Signal::SIGKILL);
    }
    match cgroups_usable() {
        Ok(()) => assert!(!log.contains("escape detection limited"), "{log}"),
        Err(_) => assert!(log.contains("escape detection limited"), "{log}"),
    }
}
