//! `gpucompat bisect`: real cell runs as probes, a real PEP 691 index on loopback, real installs
//! for attribution, reuse of recorded runs, resume, and the exit codes.

use crate::util::{Sandbox, exits, gpucompat, python, records, repo_root};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `gpucompat bisect` kept inside the sandbox: its caches there and a host without GPUs.
fn bisect_in(sandbox: &Sandbox) -> assert_cmd::Command {
    let inventory = sandbox.file("no-gpus.toml", "host = \"test-host\"\n");
    let mut command = gpucompat();
    command
        .current_dir(sandbox.path())
        .arg("bisect")
        .arg("--cache-dir")
        .arg(sandbox.path().join("cache"))
        .arg("--inventory")
        .arg(inventory);
    command
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

/// (probe, verdict) of every run, in order.
fn verdicts(file: &Value) -> Vec<(String, String)> {
    file["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            let probe = match &r["value"] {
                Value::String(v) => v.clone(),
                _ => r["bumps"]
                    .as_array()
                    .expect("bumps")
                    .iter()
                    .map(|b| b.as_str().expect("name"))
                    .collect::<Vec<_>>()
                    .join("+"),
            };
            (probe, r["verdict"].as_str().expect("verdict").to_owned())
        })
        .collect()
}

/// A PEP 691 index on loopback serving the `<project>.json` pages of a folder.
struct IndexServer {
    child: Child,
    port: u16,
}

impl IndexServer {
    fn start(pages: &Path) -> IndexServer {
        let mut child = Command::new(python())
            .arg(repo_root().join("tests/fixtures/bisect/index_server.py"))
            .arg(pages)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the index server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the index server says its port");
        let port = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        IndexServer { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/simple", self.port)
    }
}

impl Drop for IndexServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A job that fails by version, with noise: 1.7 always dies of another cause (an OOM: unknown
/// for ever), 1.9 segfaults on its first run only (unknown, then good on the retry).
const NOISY_JOB: &str = r#"
case "$1" in
  1.7) echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1;;
  1.9) if [ ! -e seen-1.9 ]; then : > seen-1.9; echo "Segmentation fault (core dumped)" >&2; exit 139; fi;;
  1.9.post1|1.10|1.11|1.12) echo "RuntimeError: CUDA error: an illegal memory access was encountered" >&2; exit 1;;
esac
echo "no failure in $1"
"#;

#[test]
fn bisect_from_an_index_orders_by_pep440_and_never_lets_unknowns_decide() {
    let sandbox = Sandbox::new();
    // The index: 1.0 .. 1.12, 1.5 yanked, 1.8rc1 a pre-release; 1.9.post1 only in a wheel folder.
    let mut files = Vec::new();
    for minor in 0..=12 {
        let mut file = json!({"filename": format!("tinylib-1.{minor}-py3-none-any.whl"),
                              "url": "x", "hashes": {}});
        if minor == 5 {
            file["yanked"] = json!("broken build");
        }
        files.push(file);
    }
    files.push(json!({"filename": "tinylib-1.8rc1.tar.gz", "url": "x", "hashes": {}}));
    let page = json!({"meta": {"api-version": "1.1"}, "name": "tinylib", "files": files});
    sandbox.file("index/tinylib.json", &page.to_string());
    sandbox.file("nightly/tinylib-1.9.post1-py3-none-any.whl", "");
    sandbox.file("job.sh", NOISY_JOB);
    sandbox.file(
        "m.toml",
        r#"
[matrix]
tinylib = ["1.0", "1.12"]
[packages]
tinylib = "tinylib"
[job]
command = "sh job.sh {tinylib}"
timeout = "1m"
"#,
    );
    let index = IndexServer::start(&sandbox.path().join("index"));
    let output = bisect_in(&sandbox)
        .args([
            "m.toml", "--axis", "tinylib", "--good", "1.0", "--bad", "1.12",
        ])
        .args(["--from-index", "--index-url", &index.url()])
        .args(["--find-links", "nightly", "--out", "b", "--format", "json"])
        .output()
        .expect("runs");
    let file = stdout_json(&output);
    assert_eq!(output.status.code(), Some(0), "{file:#}");
    assert_eq!(
        file["candidates"],
        json!([
            "1.0",
            "1.1",
            "1.2",
            "1.3",
            "1.4",
            "1.6",
            "1.7",
            "1.8",
            "1.9",
            "1.9.post1",
            "1.10",
            "1.11",
            "1.12"
        ]),
        "yanked 1.5 and pre-release 1.8rc1 left out, the wheel folder's 1.9.post1 in, PEP 440 order"
    );
    let want: Vec<(String, String)> = [
        ("1.12", "bad"),
        ("1.0", "good"),
        ("1.7", "unknown"),
        ("1.7", "unknown"),
        ("1.6", "good"),
        ("1.9", "unknown"),
        ("1.9", "good"),
        ("1.10", "bad"),
        ("1.9.post1", "bad"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(verdicts(&file), want);
    assert_eq!(file["first_bad"], "1.9.post1");
    assert_eq!(file["last_good"], "1.9");
    assert_eq!(file["signature"], "illegal_address");
    assert_eq!(file["converged"], true);
    assert_eq!(file["probes"], 7);
    // Every run is a record of the bisect folder, under an id of its own, with its log.
    let folder = sandbox.path().join("b");
    let ids: Vec<String> = records(&folder)
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ids.len(), 9);
    assert!(ids.contains(&"1.7-try2".to_owned()), "{ids:?}");
    for run in file["runs"].as_array().expect("runs") {
        assert!(folder.join(run["log"].as_str().expect("log")).is_file());
    }
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(folder.join("bisect.json")).expect("bisect.json"))
            .expect("JSON");
    assert_eq!(on_disk["state"], "finished");
    assert_eq!(on_disk["runs"], file["runs"]);
}

/// Builds the attribution's wheelhouse: a bump of three packages where flashinfer-python 0.6.11
/// fails only together with quack-kernels 0.2.0, and flashinfer-cubin 0.6.11 cannot be installed
/// with quack-kernels 0.1.0 (they need different cubin-runtime versions).
fn attribution_wheels(dir: &Path) {
    let script = repo_root().join("tests/fixtures/wheels/make_wheel.py");
    let wheels: [&[&str]; 8] = [
        &["flashinfer-python", "0.6.8"],
        &["flashinfer-python", "0.6.11"],
        &["flashinfer-cubin", "0.6.8", "cubin-runtime"],
        &["flashinfer-cubin", "0.6.11", "cubin-runtime==2"],
        &["quack-kernels", "0.1.0", "cubin-runtime==1"],
        &["quack-kernels", "0.2.0", "cubin-runtime"],
        &["cubin-runtime", "1"],
        &["cubin-runtime", "2"],
    ];
    for args in wheels {
        let status = Command::new(python())
            .arg(&script)
            .arg(dir)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .expect("python runs");
        assert!(status.success(), "make_wheel {args:?}");
    }
}

#[test]
fn bisect_attribution_finds_two_bumps_that_fail_only_together() {
    let sandbox = Sandbox::new();
    attribution_wheels(&sandbox.path().join("wheels"));
    sandbox.file(
        "m.toml",
        r#"
[matrix]
case = ["bump"]
[python]
find-links = ["wheels"]
no-index = true
[job]
# The installed versions decide, so the pins must really have been installed.
command = """python -c "import sys, flashinfer_python as f, quack_kernels as q
sys.exit('RuntimeError: CUDA error: an illegal memory access was encountered' if (f.__version__, q.__version__) == ('0.6.11', '0.2.0') else 0)" """
timeout = "2m"
"#,
    );
    sandbox.file(
        "head.txt",
        "# the bump\nflashinfer-python==0.6.11\nflashinfer-cubin==0.6.11\nquack-kernels==0.2.0\n",
    );
    let output = bisect_in(&sandbox)
        .args([
            "m.toml", "--head", "head.txt", "--out", "attr", "--format", "json",
        ])
        .args([
            "--base",
            "flashinfer-python==0.6.8,flashinfer-cubin==0.6.8,quack-kernels==0.1.0",
        ])
        .output()
        .expect("runs");
    let file = stdout_json(&output);
    assert_eq!(output.status.code(), Some(0), "{file:#}");
    assert_eq!(
        file["culprits"],
        json!(["flashinfer-python", "quack-kernels"])
    );
    assert_eq!(file["converged"], true);
    assert_eq!(file["signature"], "illegal_address");
    // The set that cannot be installed is unknown (never good), and did not decide anything.
    let cubin_alone = file["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|r| r["bumps"] == json!(["flashinfer-cubin"]))
        .expect("flashinfer-cubin alone was tried");
    assert_eq!(cubin_alone["verdict"], "unknown");
    assert_eq!(cubin_alone["phase"], "provision");
    let pins: Vec<Vec<String>> = records(&sandbox.path().join("attr"))
        .iter()
        .map(|r| serde_json::from_value(r["pins"].clone()).expect("pins"))
        .collect();
    assert!(pins.contains(&vec![
        "flashinfer-cubin==0.6.8".to_owned(),
        "flashinfer-python==0.6.11".to_owned(),
        "quack-kernels==0.2.0".to_owned()
    ]));
}

const COUNTING_MATRIX: &str = r#"
[matrix]
v = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"]
[job]
command = """echo {v} >> runs.log; case {v} in 1.[5-8]) echo 'CUDA error: an illegal memory access was encountered' >&2; exit 1;; esac"""
timeout = "1m"
"#;

fn job_runs(sandbox: &Sandbox) -> usize {
    std::fs::read_to_string(sandbox.path().join("runs.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn bisect_reuses_recorded_runs_and_resumes_without_running_them_again() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", COUNTING_MATRIX);
    // Last night's run recorded three of the values.
    crate::util::run_in(&sandbox)
        .current_dir(sandbox.path())
        .args([
            "m.toml", "--out", "night", "--cell", "1.0", "--cell", "1.8", "--cell", "1.4",
        ])
        .assert()
        .code(1);
    assert_eq!(job_runs(&sandbox), 3);
    let args = [
        "m.toml", "--axis", "v", "--good", "1.0", "--bad", "1.8", "--out", "b",
    ];
    let output = bisect_in(&sandbox)
        .args(args)
        .args(["--runs", "night", "--format", "json"])
        .output()
        .expect("runs");
    let file = stdout_json(&output);
    assert_eq!(output.status.code(), Some(0), "{file:#}");
    assert_eq!(file["first_bad"], "1.5");
    assert_eq!(file["last_good"], "1.4");
    assert_eq!(
        job_runs(&sandbox),
        5,
        "1.8, 1.0 and 1.4 were reused; 1.6 and 1.5 ran"
    );
    let reused: Vec<&str> = file["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["reused_from"].is_string())
        .map(|r| r["value"].as_str().expect("value"))
        .collect();
    assert_eq!(reused, ["1.8", "1.0", "1.4"]);
    for run in file["runs"].as_array().expect("runs") {
        let log = sandbox
            .path()
            .join("b")
            .join(run["log"].as_str().expect("log"));
        assert!(log.is_file(), "{log:?}");
    }

    // An interrupted bisect: the last probe's record never made it to disk.
    let results = sandbox.path().join("b/results.jsonl");
    let text = std::fs::read_to_string(&results).expect("results");
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&results, format!("{}\n", kept[..kept.len() - 1].join("\n"))).expect("write");
    // Without `--resume` the folder is refused; with it only the missing probe runs.
    let refused = bisect_in(&sandbox).args(args).output().expect("runs");
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--resume"));
    let output = bisect_in(&sandbox)
        .args(args)
        .args(["--resume", "--format", "json"])
        .output()
        .expect("runs");
    let resumed = stdout_json(&output);
    assert_eq!(output.status.code(), Some(0), "{resumed:#}");
    assert_eq!(job_runs(&sandbox), 6, "only 1.5 ran again");
    assert_eq!(resumed["first_bad"], "1.5");
    assert_eq!(verdicts(&resumed), verdicts(&file));
}

#[test]
fn bisect_exit_codes_for_bad_input_and_ends_that_are_not_what_they_say() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", COUNTING_MATRIX);
    for (args, needle) in [
        (
            vec!["--axis", "v", "--good", "1.8", "--bad", "1.0"],
            "older than",
        ),
        (
            vec!["--axis", "w", "--good", "1.0", "--bad", "1.8"],
            "no such axis",
        ),
        (
            vec!["--cell", "1.0", "--base", "a==1", "--head", "a==1"],
            "nothing to attribute",
        ),
        (
            vec!["--cell", "1.0", "--base", "a>=1", "--head", "a==2"],
            "name==version",
        ),
    ] {
        let output = bisect_in(&sandbox)
            .arg("m.toml")
            .args(&args)
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    // The "bad" end passes: not converged, exit 1, and the summary says why.
    let output = bisect_in(&sandbox)
        .args([
            "m.toml", "--axis", "v", "--good", "1.0", "--bad", "1.4", "--out", "x",
        ])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("not converged: the bad end `v = 1.4` passed"),
        "{stdout}"
    );
}

/// Two variants over nine versions; variant `a` fails from 1.5 on.
const VARIANT_MATRIX: &str = r#"
[matrix]
v = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"]
variant = ["a", "b"]
[job]
command = """case {variant}-{v} in a-1.[5-8]) echo 'CUDA error: an illegal memory access was encountered' >&2; exit 1;; esac; echo ok"""
timeout = "1m"
"#;

/// The whole loop: a real bisect, then a run of the matrix, then `report` over both. The
/// bisect's note sits in the failing cells of its variant only, the cell page lists its probes
/// with their logs copied into the report, compat.json carries it, and the bisect's own probe
/// records are never counted as cells of the run.
#[test]
fn report_shows_a_bisect_beside_the_cells_it_explains() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", VARIANT_MATRIX);
    let output = exits(
        bisect_in(&sandbox)
            .args(["m.toml", "--axis", "v", "--good", "1.0", "--bad", "1.8"])
            .args(["--cell", "1.8-a", "--out", "bisects/a"]),
        &[0],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The run under the bisect is quiet: one `[bisect]` line per probe and nothing else.
    assert!(stderr.lines().count() >= 4, "{stderr}");
    for line in stderr.lines() {
        assert!(
            line.starts_with("[bisect] "),
            "a run's line leaked: {line:?}"
        );
    }
    let file: Value = serde_json::from_slice(
        &std::fs::read(sandbox.path().join("bisects/a/bisect.json")).expect("bisect.json"),
    )
    .expect("JSON");
    assert_eq!(file["first_bad"], "1.5");
    assert_eq!(file["values"], json!({"v": "1.8", "variant": "a"}));
    let probes = file["probes"].as_u64().expect("probes");
    let runs = file["runs"].as_array().expect("runs").len();
    // A second bisect whose bad end passes: it explains no failing cell.
    let output = bisect_in(&sandbox)
        .args(["m.toml", "--axis", "v", "--good", "1.0", "--bad", "1.3"])
        .args(["--cell", "1.3-b", "--out", "bisects/b"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));

    crate::util::run_in(&sandbox)
        .current_dir(sandbox.path())
        .args(["m.toml", "--out", "night"])
        .assert()
        .code(1);
    // The folder of bisects is named among the run folders.
    let output = gpucompat()
        .current_dir(sandbox.path())
        .args(["report", "night", "bisects", "--out", "site"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("(1 run, tonight `night`)"), "{stdout}");
    assert!(stdout.contains("18 cell pages"), "{stdout}");
    assert!(
        stdout.contains("2 bisects shown, explaining 4 cells"),
        "{stdout}"
    );
    assert!(
        stderr.contains("explains no failing cell of tonight's run"),
        "{stderr}"
    );

    let site = sandbox.path().join("site");
    let note = format!("first bad 1.5 (bisected, {probes} probes)");
    let compat: Value =
        serde_json::from_slice(&std::fs::read(site.join("compat.json")).expect("compat.json"))
            .expect("JSON");
    assert_eq!(compat["counts"]["total"], 18, "probes are not cells");
    let explained: Vec<&str> = compat["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter(|c| c["bisect"].is_object())
        .map(|c| c["id"].as_str().expect("id"))
        .collect();
    assert_eq!(explained, ["1.5-a", "1.6-a", "1.7-a", "1.8-a"]);
    let cell = compat["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .find(|c| c["id"] == "1.8-a")
        .expect("1.8-a");
    let bisect = &cell["bisect"];
    assert_eq!(bisect["kind"], "version");
    assert_eq!(bisect["first_bad"], "1.5");
    assert_eq!(bisect["last_good"], "1.4");
    assert_eq!(bisect["converged"], true);
    assert_eq!(bisect["probes"], probes);
    assert_eq!(bisect["signature"], "illegal_address");
    assert_eq!(bisect["note"], note.as_str());
    assert!(
        bisect["source"]
            .as_str()
            .expect("source")
            .ends_with("bisects/a")
    );
    let view = &compat["bisects"][bisect["bisect"].as_u64().expect("index") as usize];
    assert_eq!(view["runs"].as_array().expect("runs").len(), runs);
    assert_eq!(compat["bisects"][1]["cells"], json!([]));
    assert!(
        compat["bisects"][1]["answer"]
            .as_str()
            .expect("answer")
            .starts_with("not converged: the bad end `v = 1.3` passed")
    );

    // The table: the note beside each explained cell, and nowhere else.
    let md = std::fs::read_to_string(site.join("compat.md")).expect("compat.md");
    let escaped = note.replace('(', r"\(").replace(')', r"\)");
    assert_eq!(md.matches(&escaped).count(), 4, "{md}");
    let index = std::fs::read_to_string(site.join("index.html")).expect("index.html");
    assert_eq!(index.matches(note.as_str()).count(), 4);
    assert!(index.contains(r#"href="cells/1.8-a.html#bisect""#));

    // The cell page lists every probe, each linking its log copied into the report.
    let page = std::fs::read_to_string(site.join("cells/1.8-a.html")).expect("page");
    assert!(page.contains(r#"<section id="bisect">"#));
    assert!(page.contains("first bad: 1.5 (last good: 1.4)"), "{page}");
    for (i, run) in file["runs"].as_array().expect("runs").iter().enumerate() {
        let value = run["value"].as_str().expect("value");
        assert!(page.contains(&format!("<code>{value}</code>")), "{value}");
        let log = format!(
            "bisects/a/{}-{}.log",
            i + 1,
            run["cell"].as_str().expect("cell")
        );
        assert!(page.contains(&format!(r#"href="../{log}""#)), "{log}");
        assert_eq!(
            std::fs::read(site.join(&log)).expect("copied log"),
            std::fs::read(
                sandbox
                    .path()
                    .join("bisects/a")
                    .join(run["log"].as_str().expect("log"))
            )
            .expect("probe log"),
        );
    }
    let passing = std::fs::read_to_string(site.join("cells/1.8-b.html")).expect("page");
    assert!(!passing.contains("id=\"bisect\""));

    // `--bisect` names one; a folder that is not a bisect is refused; bisects alone are refused.
    let output = gpucompat()
        .current_dir(sandbox.path())
        .args(["report", "night", "--bisect", "bisects/a", "--out", "site2"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("1 bisect shown, explaining 4 cells"));
    for (args, needle) in [
        (
            vec!["report", "night", "--bisect", "night", "--out", "x"],
            "is not a bisect folder",
        ),
        (
            vec!["report", "bisects/a", "--out", "x"],
            "only bisect folders were given",
        ),
    ] {
        let output = gpucompat()
            .current_dir(sandbox.path())
            .args(&args)
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
