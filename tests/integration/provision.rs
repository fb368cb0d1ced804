//! Environments: pins installed from a local wheelhouse of tiny wheels the tests build, once per
//! pin set, reused, locked, and failures named.

use crate::util::{Sandbox, exits, gpucompat, records, repo_root};
use std::path::Path;

/// Builds wheels `tinylib` 1.0 and 2.0 and `tinyapp` 1.0 (which needs tinylib) into `dir`.
fn wheelhouse(dir: &Path) {
    let script = repo_root().join("tests/fixtures/wheels/make_wheel.py");
    for args in [
        vec!["tinylib", "1.0"],
        vec!["tinylib", "2.0"],
        vec!["tinyapp", "1.0", "tinylib>=1.0"],
    ] {
        let status = std::process::Command::new("python3")
            .arg(&script)
            .arg(dir)
            .args(&args)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("python3 runs");
        assert!(status.success(), "make_wheel {args:?}");
    }
}

const MATRIX: &str = r#"
[matrix]
tinylib = ["1.0", "2.0"]
rep = [1, 2]

[packages]
tinylib = "tinylib"

[python]
requirements = "base.txt"
find-links = ["wheels"]
no-index = true

[job]
# The cell's interpreter is the environment's: the pinned version must be the one imported.
command = "python -c 'import sys, tinylib, tinyapp; assert tinylib.__version__ == \"{tinylib}\", tinylib.__version__; print(sys.prefix)'"
timeout = "2m"
"#;

#[test]
fn installs_each_pin_set_once_and_reuses_it_with_pip() {
    installs_each_pin_set_once_and_reuses_it("pip");
}

/// uv is what the harness picks when it is on `PATH`; CI installs it (`pip install uv`).
#[test]
fn installs_each_pin_set_once_and_reuses_it_with_uv() {
    let found = std::process::Command::new("uv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "uv is not on PATH: install it (`python3 -m pip install uv`) to test the uv installer"
    );
    installs_each_pin_set_once_and_reuses_it("uv");
}

fn installs_each_pin_set_once_and_reuses_it(installer: &str) {
    let sandbox = Sandbox::new();
    wheelhouse(&sandbox.path().join("wheels"));
    // The base set asks for tinylib 1.0 itself: the cell's pin must win where it says 2.0.
    sandbox.file(
        "base.txt",
        "# base requirement set\ntinyapp==1.0\ntinylib==1.0\n",
    );
    let matrix = sandbox.file("m.toml", MATRIX);
    let cache = sandbox.path().join("cache");
    let out = sandbox.path().join("run1");
    exits(
        gpucompat()
            .args(["run", "--jobs", "2", "--grace", "1s", "--out"])
            .arg(&out)
            .arg("--cache-dir")
            .arg(&cache)
            .arg(&matrix)
            .env("GPUCOMPAT_INSTALLER", installer),
        &[0],
    );
    let recs = records(&out);
    assert_eq!(recs.len(), 4);
    assert!(recs.iter().all(|r| r["status"] == "pass"), "{recs:?}");
    // Two pin sets, two environments, each complete.
    let envs: Vec<_> = std::fs::read_dir(cache.join("envs"))
        .expect("envs")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(envs.len(), 2, "{envs:?}");
    assert!(
        envs.iter()
            .all(|e| e.path().join(".gpucompat-ready").exists())
    );
    // Every cell says how it got its environment; exactly one install per pin set.
    let mut installs = 0;
    for rec in &recs {
        let log =
            std::fs::read_to_string(out.join(rec["log"].as_str().expect("log"))).expect("log");
        if log.contains(": installing with") {
            assert!(
                log.to_lowercase()
                    .contains(&format!("installing with {installer}")),
                "{log}"
            );
            installs += 1;
        } else {
            assert!(
                log.contains(": reused") || log.contains("installed by another cell"),
                "{log}"
            );
        }
        assert!(rec["metrics"]["provision_s"].as_f64().is_some(), "{rec}");
    }
    assert_eq!(installs, 2);

    // A second run of the same pins reuses the environments.
    let out2 = sandbox.path().join("run2");
    let run = gpucompat()
        .args(["run", "--grace", "1s", "--out"])
        .arg(&out2)
        .arg("--cache-dir")
        .arg(&cache)
        .arg(&matrix)
        .output()
        .expect("run");
    assert_eq!(run.status.code(), Some(0));
    for rec in records(&out2) {
        let seconds = rec["metrics"]["provision_s"].as_f64().expect("provision_s");
        assert!(seconds < 1.0, "reuse took {seconds}s: {rec}");
        assert_eq!(rec["status"], "pass");
    }
}

#[test]
fn unresolvable_pins_are_a_dependency_error_and_leave_no_environment() {
    let sandbox = Sandbox::new();
    wheelhouse(&sandbox.path().join("wheels"));
    sandbox.file("base.txt", "tinyapp==1.0\n");
    let matrix = sandbox.file(
        "m.toml",
        &MATRIX.replace(r#"tinylib = ["1.0", "2.0"]"#, r#"tinylib = ["3.0"]"#),
    );
    let cache = sandbox.path().join("cache");
    let out = sandbox.path().join("run");
    let run = gpucompat()
        .args(["run", "--grace", "1s", "--out"])
        .arg(&out)
        .arg("--cache-dir")
        .arg(&cache)
        .arg(&matrix)
        .env("GPUCOMPAT_INSTALLER", "pip")
        .output()
        .expect("run");
    assert_eq!(run.status.code(), Some(1));
    for rec in records(&out) {
        assert_eq!(rec["status"], "fail", "{rec}");
        assert_eq!(rec["signature"], "dependency_error", "{rec}");
        assert_eq!(rec["phase"], "provision", "{rec}");
        assert_eq!(rec["spurious"], false, "{rec}");
    }
    let ready = std::fs::read_dir(cache.join("envs"))
        .expect("envs")
        .filter_map(|e| e.ok())
        .any(|e| e.path().join(".gpucompat-ready").exists());
    assert!(
        !ready,
        "a failed install must not leave a usable environment"
    );
}

#[test]
fn an_unreachable_index_is_an_infrastructure_error_with_pip() {
    an_unreachable_index_is_an_infrastructure_error("pip");
}

#[test]
fn an_unreachable_index_is_an_infrastructure_error_with_uv() {
    an_unreachable_index_is_an_infrastructure_error("uv");
}

fn an_unreachable_index_is_an_infrastructure_error(installer: &str) {
    let sandbox = Sandbox::new();
    sandbox.file("base.txt", "tinyapp==1.0\n");
    // Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    let matrix = sandbox.file(
        "m.toml",
        &MATRIX
            .replace(
                r#"find-links = ["wheels"]"#,
                r#"index-url = "http://127.0.0.1:9/simple""#,
            )
            .replace("no-index = true\n", "")
            .replace("rep = [1, 2]", "rep = [1]")
            .replace(r#"tinylib = ["1.0", "2.0"]"#, r#"tinylib = ["1.0"]"#),
    );
    let out = sandbox.path().join("run");
    let run = gpucompat()
        .args(["run", "--grace", "1s", "--out"])
        .arg(&out)
        .arg("--cache-dir")
        .arg(sandbox.path().join("cache"))
        .arg(&matrix)
        .env("GPUCOMPAT_INSTALLER", installer)
        .env("UV_HTTP_RETRIES", "0")
        .env("PIP_RETRIES", "1")
        .env("PIP_TIMEOUT", "2")
        .env("PIP_FIND_LINKS", "")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .output()
        .expect("run");
    let recs = records(&out);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["status"], "error", "{}", recs[0]);
    assert_eq!(recs[0]["spurious"], true, "{}", recs[0]);
    assert_eq!(recs[0]["phase"], "provision", "{}", recs[0]);
    assert_eq!(run.status.code(), Some(1));
}

#[test]
fn an_interrupted_install_is_redone_not_used() {
    let sandbox = Sandbox::new();
    wheelhouse(&sandbox.path().join("wheels"));
    sandbox.file("base.txt", "tinyapp==1.0\n");
    let matrix = sandbox.file(
        "m.toml",
        &MATRIX
            .replace("rep = [1, 2]", "rep = [1]")
            .replace(r#"tinylib = ["1.0", "2.0"]"#, r#"tinylib = ["1.0"]"#),
    );
    let cache = sandbox.path().join("cache");
    let out = sandbox.path().join("run1");
    let ok = gpucompat()
        .args(["run", "--grace", "1s", "--out"])
        .arg(&out)
        .arg("--cache-dir")
        .arg(&cache)
        .arg(&matrix)
        .env("GPUCOMPAT_INSTALLER", "pip")
        .output()
        .expect("run");
    assert_eq!(ok.status.code(), Some(0));
    // Make the environment look like an install that died half way: no marker, a broken package.
    let env = std::fs::read_dir(cache.join("envs"))
        .expect("envs")
        .filter_map(|e| e.ok())
        .find(|e| e.path().is_dir())
        .expect("an environment")
        .path();
    std::fs::remove_file(env.join(".gpucompat-ready")).expect("remove marker");
    let out2 = sandbox.path().join("run2");
    let again = gpucompat()
        .args(["run", "--grace", "1s", "--out"])
        .arg(&out2)
        .arg("--cache-dir")
        .arg(&cache)
        .arg(&matrix)
        .env("GPUCOMPAT_INSTALLER", "pip")
        .output()
        .expect("run");
    assert_eq!(again.status.code(), Some(0));
    let rec = &records(&out2)[0];
    let log = std::fs::read_to_string(out2.join(rec["log"].as_str().expect("log"))).expect("log");
    assert!(
        log.contains("removing an incomplete earlier install"),
        "{log}"
    );
    assert!(env.join(".gpucompat-ready").exists());
}

/// Writes `files` (name, text) into a `.tar.xz` at `path`, with the machine's python3's tarfile.
fn tar_xz(path: &Path, files: &[(&str, &str)]) {
    let staged = path.with_extension("d");
    for (name, text) in files {
        let file = staged.join(name);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, text).expect("write");
    }
    let status = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, tarfile, os; t = tarfile.open(sys.argv[1], 'w:xz'); \
             [t.add(os.path.join(sys.argv[2], n), arcname=n) for n in os.listdir(sys.argv[2])]; t.close()",
        ])
        .arg(path)
        .arg(&staged)
        .status()
        .expect("python3 runs");
    assert!(status.success());
    std::fs::remove_dir_all(&staged).expect("clean");
}

/// `[python] site`: an engine bundle's archives are unpacked in order (a later archive's file
/// over an earlier one's) into the environment and put on its path with a prebuilt folder, after
/// the environment's own packages (the pinned tinylib wins over the bundle's copy); a rebuilt
/// archive makes another environment.
#[test]
fn site_bundles_reach_the_cell_under_its_pins() {
    let sandbox = Sandbox::new();
    wheelhouse(&sandbox.path().join("wheels"));
    tar_xz(
        &sandbox.path().join("engine-a.tar.xz"),
        &[
            ("tinylib/__init__.py", "__version__ = 'bundle'\n"),
            ("engine_mod.py", "WHO = 'a'\n"),
            ("override_me.py", "V = 'a'\n"),
        ],
    );
    tar_xz(
        &sandbox.path().join("engine-b.tar.xz"),
        &[("override_me.py", "V = 'b'\n")],
    );
    sandbox.file("prebuilt/prebuilt_mod.py", "P = 1\n");
    let matrix = sandbox.file(
        "m.toml",
        r#"
[matrix]
tinylib = ["2.0"]
[packages]
tinylib = "tinylib"
[python]
find-links = ["wheels"]
no-index = true
site = ["engine-a.tar.xz", "engine-b.tar.xz", "prebuilt"]
[job]
command = "python -c 'import tinylib, engine_mod, override_me, prebuilt_mod; print(tinylib.__version__, engine_mod.WHO, override_me.V, prebuilt_mod.P)'"
timeout = "2m"
"#,
    );
    let cache = sandbox.path().join("cache");
    let run = |out: &str| {
        let out = sandbox.path().join(out);
        let status = gpucompat()
            .args(["run", "--grace", "1s", "--out"])
            .arg(&out)
            .arg("--cache-dir")
            .arg(&cache)
            .arg(&matrix)
            .env("GPUCOMPAT_INSTALLER", "pip")
            .output()
            .expect("run");
        let record = records(&out).swap_remove(0);
        let log =
            std::fs::read_to_string(out.join(record["log"].as_str().expect("log"))).expect("log");
        (status.status.code(), record, log)
    };
    let (code, record, log) = run("run1");
    assert_eq!(code, Some(0), "{record}\n{log}");
    assert!(log.contains("\n2.0 a b 1\n"), "{log}");

    // A rebuilt bundle is another environment, never the old one reused.
    tar_xz(
        &sandbox.path().join("engine-b.tar.xz"),
        &[("override_me.py", "V = 'c'\n")],
    );
    let (code, record, log) = run("run2");
    assert_eq!(code, Some(0), "{record}\n{log}");
    assert!(log.contains("\n2.0 a c 1\n"), "{log}");
    let envs = std::fs::read_dir(cache.join("envs"))
        .expect("envs")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .count();
    assert_eq!(envs, 2);
}
