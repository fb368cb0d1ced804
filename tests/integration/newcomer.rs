//! A newcomer's first hour (issue 17): the main command can be run again and again (a new run
//! folder per run), `--force` replaces a run on purpose and nothing else, every subcommand's help
//! says its exit codes, ... Each test drives the real CLI.

use crate::util::{Sandbox, gpucompat, repo_root};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A one-cell matrix named `first` whose cell passes at once.
fn small_matrix(sandbox: &Sandbox) -> PathBuf {
    let job = repo_root().join("tests/fixtures/run/job.sh");
    sandbox.file(
        "first.toml",
        &format!(
            "name = \"first\"\n[matrix]\ncase = [\"a\"]\n[job]\ncommand = \"sh '{}' pass\"\ntimeout = \"30s\"\n",
            job.display()
        ),
    )
}

/// `gpucompat run ARGS...` in `dir`, without GPUs, caches in the sandbox.
fn run_here(sandbox: &Sandbox, dir: &Path, args: &[&str]) -> std::process::Output {
    let inventory = sandbox.file("no-gpus.toml", "host = \"test-host\"\n");
    gpucompat()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .arg("--inventory")
        .arg(inventory)
        .arg("--cache-dir")
        .arg(sandbox.path().join("cache"))
        .env("CI", "true")
        .timeout(Duration::from_secs(90))
        .output()
        .expect("run gpucompat")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn run_folders(parent: &Path) -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(parent)
        .map(|entries| entries.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    folders.sort();
    folders
}

#[test]
fn newcomer_the_main_command_runs_again_into_a_new_folder_each_time() {
    let sandbox = Sandbox::new();
    let matrix = small_matrix(&sandbox);
    let matrix = matrix.to_str().expect("utf-8 path");
    for _ in 0..3 {
        let output = run_here(&sandbox, sandbox.path(), &[matrix]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "run again: {}",
            text(&output.stderr)
        );
        assert!(
            text(&output.stdout).contains("run folder: runs/first/"),
            "says where the run went: {}",
            text(&output.stdout)
        );
    }
    // Three runs in (likely) the same second: three folders, the later ones with a suffix.
    let folders = run_folders(&sandbox.path().join("runs/first"));
    assert_eq!(folders.len(), 3, "{folders:?}");
    let stamp = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ(-\d+)?$").expect("regex");
    for folder in &folders {
        let name = folder.file_name().expect("name").to_string_lossy();
        assert!(stamp.is_match(&name), "folder name {name}");
        assert!(folder.join("results.jsonl").is_file(), "{folder:?}");
        assert!(folder.join("index.html").is_file(), "{folder:?}");
    }
    // The history reads as a series of runs.
    let mut report = gpucompat();
    report.current_dir(sandbox.path()).arg("report");
    for folder in &folders {
        report.arg(folder);
    }
    let site = sandbox.path().join("site");
    report.arg("--out").arg(&site).assert().success();
    assert!(site.join("index.html").is_file());
}

#[test]
fn newcomer_force_replaces_a_run_folder_and_never_a_folder_of_other_files() {
    let sandbox = Sandbox::new();
    let matrix = small_matrix(&sandbox);
    let matrix = matrix.to_str().expect("utf-8 path");
    let out = sandbox.path().join("out");
    let out_arg = out.to_str().expect("utf-8 path");
    let first = run_here(&sandbox, sandbox.path(), &[matrix, "--out", out_arg]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    // Without --force, `--out` keeps refusing a folder that holds a run, as it always did.
    let again = run_here(&sandbox, sandbox.path(), &[matrix, "--out", out_arg]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again.stderr).contains("already holds a run"));
    // A leftover of the first run disappears with --force; the new run is complete.
    std::fs::write(out.join("logs/stale.log"), "old").expect("write");
    let forced = run_here(
        &sandbox,
        sandbox.path(),
        &[matrix, "--out", out_arg, "--force"],
    );
    assert_eq!(forced.status.code(), Some(0), "{}", text(&forced.stderr));
    assert!(!out.join("logs/stale.log").exists(), "replaced, not merged");
    let results = std::fs::read_to_string(out.join("results.jsonl")).expect("results");
    assert_eq!(results.lines().count(), 1, "one run's records: {results}");
    // A folder of someone's files is never emptied, --force or not.
    let mine = sandbox.path().join("mine");
    std::fs::create_dir(&mine).expect("mkdir");
    std::fs::write(mine.join("thesis.tex"), "precious").expect("write");
    let refused = run_here(
        &sandbox,
        sandbox.path(),
        &[matrix, "--out", mine.to_str().expect("utf-8"), "--force"],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("not a gpucompat run folder"));
    assert_eq!(
        std::fs::read_to_string(mine.join("thesis.tex")).expect("kept"),
        "precious"
    );
    // --resume names the folder it finishes.
    let resume = run_here(&sandbox, sandbox.path(), &[matrix, "--resume"]);
    assert_eq!(resume.status.code(), Some(2));
}

/// The subcommands `gpucompat --help` lists (with `matrix`'s own), so that a new one without
/// examples and exit codes fails this test.
fn subcommands() -> Vec<Vec<String>> {
    let help = gpucompat().arg("--help").assert().success();
    let help = text(&help.get_output().stdout);
    let listed = help
        .split("Commands:")
        .nth(1)
        .expect("a Commands: section")
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        // A name is indented by two spaces; a wrapped description by more.
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .filter(|name| name != "help")
        .collect::<Vec<_>>();
    assert!(listed.len() >= 8, "{listed:?}");
    listed
        .into_iter()
        .map(|name| {
            if name == "matrix" {
                vec![name, "expand".to_owned()]
            } else {
                vec![name]
            }
        })
        .collect()
}

#[test]
fn newcomer_every_subcommand_help_has_examples_and_exit_codes() {
    for command in subcommands() {
        let output = gpucompat().args(&command).arg("--help").assert().success();
        let help = text(&output.get_output().stdout);
        let name = command.join(" ");
        assert!(
            help.contains("Examples:"),
            "`{name} --help` has no examples"
        );
        assert!(
            help.contains(&format!("gpucompat {name} ")),
            "`{name} --help` shows no example of itself"
        );
        let codes = help
            .split("Exit codes:")
            .nth(1)
            .unwrap_or_else(|| panic!("`{name} --help` has no exit codes"));
        for code in ["0", "2"] {
            assert!(
                codes
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                "`{name} --help` does not say exit code {code}:\n{codes}"
            );
        }
    }
}

#[test]
fn newcomer_run_help_says_every_exit_code_run_can_return() {
    let output = gpucompat().args(["run", "--help"]).assert().success();
    let help = text(&output.get_output().stdout);
    let codes = help.split("Exit codes:").nth(1).expect("exit codes");
    for code in ["0", "1", "2", "3", "4", "130"] {
        assert!(
            codes
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "run --help lacks {code}"
        );
    }
}

/// A matrix of job cells, `case` -> `job.sh` arguments, with an `[[expect]]` for `xfail`.
fn job_matrix(sandbox: &Sandbox, cases: &[(&str, &str)]) -> PathBuf {
    let job = repo_root().join("tests/fixtures/run/job.sh");
    let mut text = format!(
        "name = \"jobs\"\n[matrix]\ncase = [{}]\n",
        cases
            .iter()
            .map(|(c, _)| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (case, args) in cases {
        text.push_str(&format!(
            "[[matrix.include]]\ncase = \"{case}\"\nargs = \"{args}\"\n"
        ));
    }
    text.push_str(&format!(
        "[job]\ncommand = \"exec sh '{}' {{args}}\"\ntimeout = \"60s\"\nno-progress = \"6s\"\n\n[[expect]]\nwhen = {{ case = \"xfail\" }}\nsignature = \"illegal_address\"\nlink = \"https://example.invalid/issues/1\"\n",
        job.display()
    ));
    sandbox.file("jobs.toml", &text)
}

#[test]
fn newcomer_a_long_cell_says_slow_with_its_phase_and_what_the_watchdog_sees() {
    let sandbox = Sandbox::new();
    let stamp = sandbox.path().join("hang.stamp");
    let stamp = stamp.to_str().expect("utf-8");
    let matrix = job_matrix(
        &sandbox,
        &[
            ("compiling", "compile 4"),
            ("hanging", &format!("hang {stamp}")),
        ],
    );
    let out = sandbox.path().join("out");
    let output = run_here(
        &sandbox,
        sandbox.path(),
        &[
            matrix.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
            "--slow-after",
            "2s",
            "--jobs",
            "2",
            "--grace",
            "300ms",
        ],
    );
    let stderr = text(&output.stderr);
    let slow = |cell: &str| -> Vec<String> {
        stderr
            .lines()
            .filter(|l| l.trim_start().starts_with("SLOW") && l.contains(&format!("] {cell} in ")))
            .map(str::to_owned)
            .collect()
    };
    // The silent compile: busy, seen by its CPU time; the idle wait: no CPU.
    let compiling = slow("compiling");
    assert!(
        !compiling.is_empty(),
        "no SLOW line for the compile:\n{stderr}"
    );
    assert!(
        compiling[0].contains("in launch: output") && compiling[0].contains("CPU busy"),
        "{compiling:?}"
    );
    let hanging = slow("hanging");
    assert!(
        hanging.iter().any(|l| l.contains("CPU idle")),
        "no idle SLOW line for the hang:\n{stderr}"
    );
    // At intervals: `[    2s]`, `[    4s]`, ... never the same second twice for a cell.
    let seconds: Vec<u64> = hanging
        .iter()
        .filter_map(|l| l.split('[').nth(1)?.split('s').next()?.trim().parse().ok())
        .collect();
    assert!(seconds.windows(2).all(|w| w[1] >= w[0] + 2), "{seconds:?}");
    assert!(seconds.first().is_some_and(|&s| s >= 2), "{seconds:?}");
}

#[test]
fn newcomer_the_summary_lists_unexpected_results_first_and_ends_with_the_time() {
    let sandbox = Sandbox::new();
    let matrix = job_matrix(
        &sandbox,
        &[
            ("ok", "pass"),
            ("xfail", "illegal-address"),
            ("broken", "no-kernel-image"),
            ("ok2", "pass"),
        ],
    );
    let output = run_here(&sandbox, sandbox.path(), &[matrix.to_str().expect("utf-8")]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    // The table holds only what needs a person; the expected results are one line of counts.
    let fail = lines
        .iter()
        .position(|l| l.starts_with("FAIL"))
        .expect("FAIL row");
    assert!(lines[fail].contains("broken") && lines[fail].contains("no_kernel_image"));
    assert!(
        !lines
            .iter()
            .any(|l| l.starts_with("PASS") || l.starts_with("XFAIL")),
        "expected cells are counted, not listed:\n{stdout}"
    );
    let expected = lines
        .iter()
        .position(|l| l.starts_with("as expected: 2 pass, 1 xfail"))
        .expect("expected counts");
    assert!(fail < expected, "{stdout}");
    let report = lines
        .iter()
        .position(|l| l.starts_with("report: runs/jobs/"));
    assert!(report.is_some_and(|r| r > expected), "{stdout}");
    let last = lines.last().expect("a last line");
    let summary =
        regex::Regex::new(r"^\s*Summary \[\s*\d+\.\ds\] 4 cells: 1 fail, 2 pass, 1 xfail$")
            .expect("regex");
    assert!(summary.is_match(last), "last line: {last}");
}

/// One `<testcase>` of a JUnit file as an XML parser reads it.
#[derive(Debug, Default)]
struct JunitCase {
    name: String,
    /// (element, message, type, text) of a failure, error or skipped child.
    outcome: Option<(String, String, String, String)>,
}

/// Parses `junit.xml` with a real XML parser and checks the JUnit structure CI reporters (and
/// `junitparser`) expect: `testsuites` > `testsuite` > `testcase`, counts that add up.
fn parse_junit(xml: &str) -> Vec<JunitCase> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<String> = Vec::new();
    let mut cases: Vec<JunitCase> = Vec::new();
    let mut declared_tests: Option<usize> = None;
    let attr = |e: &quick_xml::events::BytesStart<'_>, key: &str| -> String {
        e.try_get_attribute(key)
            .expect("well-formed attribute")
            .map(|a| {
                a.normalized_value(quick_xml::XmlVersion::Explicit1_0)
                    .expect("escaped attribute")
                    .into_owned()
            })
            .unwrap_or_default()
    };
    loop {
        let event = reader.read_event().expect("junit.xml is well-formed XML");
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                let parent = stack.last().map(String::as_str);
                match name.as_str() {
                    "testsuites" => {
                        assert_eq!(parent, None);
                        declared_tests = attr(e, "tests").parse().ok();
                    }
                    "testsuite" => assert_eq!(parent, Some("testsuites")),
                    "testcase" => {
                        assert_eq!(parent, Some("testsuite"));
                        cases.push(JunitCase {
                            name: attr(e, "name"),
                            ..JunitCase::default()
                        });
                    }
                    "failure" | "error" | "skipped" | "system-out" => {
                        assert_eq!(parent, Some("testcase"), "<{name}> outside a testcase");
                        if name != "system-out" {
                            let case = cases.last_mut().expect("a testcase");
                            assert!(case.outcome.is_none(), "two outcomes in {}", case.name);
                            case.outcome = Some((
                                name.clone(),
                                attr(e, "message"),
                                attr(e, "type"),
                                String::new(),
                            ));
                        }
                    }
                    other => panic!("unexpected element <{other}>"),
                }
                if matches!(event, Event::Start(_)) {
                    stack.push(name);
                }
            }
            Event::Text(t) => {
                if matches!(stack.last().map(String::as_str), Some("failure" | "error")) {
                    let text = t.decode().expect("utf-8").into_owned();
                    let text = quick_xml::escape::unescape(&text)
                        .expect("escaped text")
                        .into_owned();
                    if let Some(outcome) = cases.last_mut().and_then(|c| c.outcome.as_mut()) {
                        outcome.3.push_str(&text);
                    }
                }
            }
            Event::GeneralRef(r) => {
                if matches!(stack.last().map(String::as_str), Some("failure" | "error")) {
                    let name = String::from_utf8_lossy(&r).into_owned();
                    let text = quick_xml::escape::unescape(&format!("&{name};"))
                        .expect("a known entity")
                        .into_owned();
                    if let Some(outcome) = cases.last_mut().and_then(|c| c.outcome.as_mut()) {
                        outcome.3.push_str(&text);
                    }
                }
            }
            Event::End(_) => {
                stack.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    assert_eq!(
        declared_tests,
        Some(cases.len()),
        "testsuites tests= counts every case"
    );
    cases
}

#[test]
fn newcomer_junit_failures_carry_the_root_cause_line_excerpt_and_reproducer() {
    let sandbox = Sandbox::new();
    let matrix = job_matrix(
        &sandbox,
        &[
            ("ok", "pass"),
            ("xfail", "illegal-address"),
            ("broken", "no-kernel-image"),
        ],
    );
    let out = sandbox.path().join("out");
    let output = run_here(
        &sandbox,
        sandbox.path(),
        &[
            matrix.to_str().expect("utf-8"),
            "--out",
            out.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let xml = std::fs::read_to_string(out.join("junit.xml")).expect("junit.xml");
    let cases = parse_junit(&xml);
    assert_eq!(cases.len(), 3);
    let broken = cases
        .iter()
        .find(|c| c.name == "broken")
        .expect("the failing cell");
    let (element, message, kind, body) = broken.outcome.clone().expect("an outcome");
    assert_eq!(
        (element.as_str(), kind.as_str()),
        ("failure", "no_kernel_image")
    );
    // The headline is the log's root-cause line, not the signature again.
    assert_eq!(
        message,
        "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    );
    // The text: the excerpt around it, the root line marked, then how to reproduce the cell.
    assert!(body.contains("no_kernel_image in launch"), "{body}");
    assert!(
        body.lines()
            .any(|l| l.contains("> RuntimeError: CUDA error: no kernel image")),
        "{body}"
    );
    let repro = body.find("Reproduce:").expect("a reproducer");
    assert!(body[repro..].contains("gpucompat run"), "{body}");
    assert!(body[repro..].contains("--cell broken"), "{body}");
    let xfail = cases.iter().find(|c| c.name == "xfail").expect("xfail");
    assert_eq!(
        xfail.outcome.as_ref().map(|o| o.0.as_str()),
        Some("skipped")
    );
    // Where junitparser is installed, it reads the file too (never installed by the suite).
    let python = crate::util::python();
    let has_junitparser = std::process::Command::new(python)
        .args(["-c", "import junitparser"])
        .output()
        .is_ok_and(|o| o.status.success());
    if has_junitparser {
        let check = std::process::Command::new(python)
            .args([
                "-c",
                "import sys, junitparser\nx = junitparser.JUnitXml.fromfile(sys.argv[1])\ncases = [c for s in x for c in s]\nassert len(cases) == 3, cases\nf = [c for c in cases if c.name == 'broken'][0].result[0]\nassert 'no kernel image' in f.message, f.message\nassert 'Reproduce:' in f.text, f.text",
            ])
            .arg(out.join("junit.xml"))
            .output()
            .expect("run python");
        assert!(check.status.success(), "{}", text(&check.stderr));
    }
}

#[test]
fn newcomer_filter_selects_cells_by_value_in_run_plan_report_and_bisect() {
    let sandbox = Sandbox::new();
    let matrix = job_matrix(
        &sandbox,
        &[
            ("alpha", "pass"),
            ("beta", "pass"),
            ("bravo", "pass"),
            ("gamma", "pass"),
        ],
    );
    let matrix = matrix.to_str().expect("utf-8");
    // plan: the selected cells only.
    let plan = gpucompat()
        .args([
            "plan",
            matrix,
            "--format",
            "json",
            "--filter",
            "case=b* | case=gamma",
        ])
        .assert()
        .success();
    let plan: serde_json::Value =
        serde_json::from_slice(&plan.get_output().stdout).expect("plan json");
    let ids: Vec<&str> = plan["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["beta", "bravo", "gamma"]);
    // run: only those run.
    let out = sandbox.path().join("out");
    let out_arg = out.to_str().expect("utf-8");
    let run = run_here(
        &sandbox,
        sandbox.path(),
        &[
            matrix,
            "--out",
            out_arg,
            "--filter",
            "case=b* & !(case=bravo)",
        ],
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let results = std::fs::read_to_string(out.join("results.jsonl")).expect("results");
    let ran: Vec<String> = results
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("record")["id"].to_string())
        .collect();
    assert_eq!(ran, ["\"beta\""]);
    // report: the filter narrows what a report shows.
    let all = sandbox.path().join("all");
    let full = run_here(
        &sandbox,
        sandbox.path(),
        &[matrix, "--out", all.to_str().expect("utf-8")],
    );
    assert_eq!(full.status.code(), Some(0));
    let site = sandbox.path().join("site");
    gpucompat()
        .arg("report")
        .arg(&all)
        .arg("--out")
        .arg(&site)
        .args(["--filter", "case!=a*"])
        .assert()
        .success();
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(site.join("compat.json")).expect("compat.json"),
    )
    .expect("json");
    let shown = json.to_string();
    assert!(
        shown.contains("\"gamma\"") && !shown.contains("\"alpha\""),
        "{shown}"
    );

    // A typo in a key: its place, a caret under it, a did-you-mean, exit 2, nothing run.
    for command in [
        vec!["plan", matrix],
        vec!["run", matrix],
        vec![
            "bisect", matrix, "--axis", "case", "--good", "alpha", "--bad", "beta",
        ],
    ] {
        let output = gpucompat()
            .current_dir(sandbox.path())
            .args(&command)
            .args(["--filter", "cas=beta"])
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{command:?}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains("unknown key `cas`")
                && stderr.contains("| cas=beta\n   | ^^^\n")
                && stderr.contains("did you mean `case`?"),
            "{command:?}: {stderr}"
        );
    }
    let report = gpucompat()
        .arg("report")
        .arg(&all)
        .arg("--out")
        .arg(sandbox.path().join("site2"))
        .args(["--filter", "case=beta &"])
        .output()
        .expect("report");
    assert_eq!(report.status.code(), Some(2));
    assert!(
        text(&report.stderr).contains("| case=beta &\n   |            ^"),
        "{}",
        text(&report.stderr)
    );
    // A filter that selects nothing is said, not run as an empty run.
    let none = run_here(
        &sandbox,
        sandbox.path(),
        &[matrix, "--filter", "case=delta"],
    );
    assert_eq!(none.status.code(), Some(2));
    assert!(text(&none.stderr).contains("selects none of the 4 cells"));
    assert!(
        !sandbox.path().join("runs").exists(),
        "no empty run folder left"
    );
    // A bisect needs one cell: a filter that selects several different ones is refused.
    let bisect = gpucompat()
        .current_dir(sandbox.path())
        .args([
            "bisect", matrix, "--base", "a==1", "--head", "a==2", "--filter", "case=b*",
        ])
        .output()
        .expect("bisect");
    assert_eq!(bisect.status.code(), Some(2), "{}", text(&bisect.stderr));
    assert!(text(&bisect.stderr).contains("selects 2 different cells (beta, bravo)"));
}
