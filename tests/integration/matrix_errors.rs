//! Hand-made bad matrix files (`tests/fixtures/matrices/bad-*.toml`): `gpucompat check` exits 2
//! and prints every problem with `--> FILE:LINE:COLUMN` and a caret. The full message text is a
//! snapshot (`tests/integration/snapshots/`); bless changes with
//! `INSTA_UPDATE=always cargo nextest run`, review them with `git diff`.
//!
//! Commands run inside the fixture folder with a relative path, so the file name in the output is
//! the same on every machine.

use crate::util::{gpucompat, repo_root};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures/matrices")
}

/// Runs `gpucompat ARGS` in the fixture folder; returns (exit code, stdout, stderr).
pub(crate) fn run_in_fixtures(args: &[&str]) -> (Option<i32>, String, String) {
    let out = gpucompat()
        .current_dir(fixtures())
        .args(args)
        .output()
        .expect("run gpucompat");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `check FILE` fails with exit 2, names the file, and its output matches the snapshot.
fn check_bad(file: &str) {
    let (code, stdout, stderr) = run_in_fixtures(&["check", file]);
    assert_eq!(code, Some(2), "stderr:\n{stderr}");
    assert_eq!(stdout, "", "nothing on stdout for an invalid file");
    assert!(stderr.contains(&format!("--> {file}")), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with("error: 1 of 1 matrix file is invalid"),
        "{stderr}"
    );
    // The other commands refuse the file the same way.
    for command in [
        &["matrix", "expand", file, "--format", "json"][..],
        &["plan", file, "--format", "github"][..],
    ] {
        let (code, stdout, again) = run_in_fixtures(command);
        assert_eq!(code, Some(2), "{command:?}: {again}");
        assert_eq!(stdout, "", "{command:?}");
        assert!(
            again.contains(&format!("--> {file}")),
            "{command:?}: {again}"
        );
    }
    let name = file.trim_end_matches(".toml");
    insta::with_settings!({
        description => format!("gpucompat check {file}"),
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, stderr);
    });
}

macro_rules! bad_fixtures {
    ($($test:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $test() {
                check_bad($file);
            }
        )*

        /// Every `bad-*.toml` fixture has a test above.
        const BAD_FIXTURES: &[&str] = &[$($file),*];
    };
}

bad_fixtures! {
    toml_syntax_error => "bad-syntax.toml",
    unknown_keys_with_did_you_mean => "bad-unknown-keys.toml",
    wrong_types => "bad-types.toml",
    unknown_placeholders => "bad-placeholder.toml",
    exclude_key_not_an_axis => "bad-exclude-key.toml",
    malformed_gpu_spec_values => "bad-gpu-spec.toml",
    malformed_gpu_spec_template => "bad-gpu-template.toml",
    empty_after_exclusion => "bad-empty-after-exclude.toml",
    duplicate_cells => "bad-duplicate-cells.toml",
    bad_durations => "bad-duration.toml",
    bad_expect_rules => "bad-expect.toml",
    bad_packages => "bad-packages.toml",
    too_many_combinations => "bad-too-large.toml",
    no_matrix => "bad-no-matrix.toml",
    bad_key_names => "bad-keys.toml",
    many_problems_at_once => "bad-many.toml",
}

#[test]
fn every_bad_fixture_is_tested() {
    let mut found: Vec<String> = std::fs::read_dir(fixtures())
        .expect("read fixtures")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("bad-") && name.ends_with(".toml"))
        .collect();
    found.sort();
    let mut listed: Vec<String> = BAD_FIXTURES.iter().map(|s| (*s).to_owned()).collect();
    listed.sort();
    assert_eq!(found, listed);
}

/// The one file with several problems reports each of them, in file order.
#[test]
fn several_problems_are_reported_in_file_order() {
    let (_, _, stderr) = run_in_fixtures(&["check", "bad-many.toml"]);
    let locations: Vec<(usize, usize)> = stderr
        .lines()
        .filter_map(|line| line.trim().strip_prefix("--> bad-many.toml:"))
        .map(|at| {
            let (line, column) = at.split_once(':').expect("line:column");
            (line.parse().expect("line"), column.parse().expect("column"))
        })
        .collect();
    assert_eq!(
        locations,
        [(6, 26), (10, 1), (16, 37), (18, 15), (20, 1), (24, 13)]
    );
    assert!(
        stderr.contains("error: bad-many.toml: 6 problems found"),
        "{stderr}"
    );
}

/// Several files at once: each is checked, the good ones summarised on stdout.
#[test]
fn check_several_files() {
    let (code, stdout, stderr) = run_in_fixtures(&[
        "check",
        "good-features.toml",
        "bad-syntax.toml",
        "bad-gpu-spec.toml",
    ]);
    assert_eq!(code, Some(2));
    assert_eq!(
        stdout,
        "ok: good-features.toml: 17 cells, 6 keys, 4 with known failures\n"
    );
    assert!(stderr.contains("--> bad-syntax.toml:8:11"), "{stderr}");
    assert!(stderr.contains("--> bad-gpu-spec.toml:3:17"), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with("error: 2 of 3 matrix files are invalid"),
        "{stderr}"
    );
}

#[test]
fn missing_and_non_utf8_files_exit_2() {
    let (code, _, stderr) = run_in_fixtures(&["check", "no-such-file.toml"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("cannot read matrix file `no-such-file.toml`"),
        "{stderr}"
    );
    let sandbox = crate::util::Sandbox::new();
    let file = sandbox.path().join("latin1.toml");
    std::fs::write(&file, b"[matrix]\nos = [\"caf\xe9\"]\n").expect("write");
    let out = gpucompat().arg("check").arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not valid UTF-8"));
}
