//! `--help` on the matrix commands, and how they treat bad arguments.

use crate::util::gpucompat;

/// `ARGS` exits 0 and prints help that starts with what the command does and shows its usage.
fn help(args: &[&str], usage: &str) -> String {
    let out = gpucompat()
        .args(args)
        .env("COLUMNS", "100")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{args:?}");
    assert!(
        stdout.contains(&format!("Usage: {usage}")),
        "{args:?}:\n{stdout}"
    );
    stdout
}

#[test]
fn help_on_everything() {
    for flag in ["--help", "-h"] {
        help(&[flag], "gpucompat <COMMAND>");
        help(&["check", flag], "gpucompat check <FILE>...");
        help(&["matrix", flag], "gpucompat matrix <COMMAND>");
        help(
            &["matrix", "expand", flag],
            "gpucompat matrix expand [OPTIONS] <FILE>",
        );
        help(&["plan", flag], "gpucompat plan [OPTIONS] <FILE>");
    }
    help(&["help", "check"], "gpucompat check <FILE>...");
    help(
        &["matrix", "help", "expand"],
        "gpucompat matrix expand [OPTIONS] <FILE>",
    );
}

#[test]
fn help_says_what_matters() {
    let check = help(&["check", "--help"], "gpucompat check <FILE>...");
    for needle in [
        "--> FILE:LINE:COLUMN",
        "Exit codes:",
        "2  at least one file",
    ] {
        assert!(check.contains(needle), "{needle}:\n{check}");
    }
    let expand = help(
        &["matrix", "expand", "--help"],
        "gpucompat matrix expand [OPTIONS] <FILE>",
    );
    for needle in [
        "GitHub Actions",
        "[possible values: json, table]",
        r#"{"id", "values"}"#,
        "[A-Za-z0-9._-]",
    ] {
        assert!(expand.contains(needle), "{needle}:\n{expand}");
    }
    let plan = help(&["plan", "--help"], "gpucompat plan [OPTIONS] <FILE>");
    for needle in [
        "[possible values: table, github, json]",
        "runs-on",
        "--runner-label",
        "fromJSON",
    ] {
        assert!(plan.contains(needle), "{needle}:\n{plan}");
    }
    let run = help(&["run", "--help"], "gpucompat run [OPTIONS] <FILE>");
    for needle in [
        "--executor <EXECUTOR>",
        "--slurm-partition <NAME>",
        "--slurm-constraint-prefix <PREFIX>",
        "--slurm-arg <ARG>",
        "--executor slurm --slurm-partition gpu",
    ] {
        assert!(run.contains(needle), "{needle}:\n{run}");
    }
    assert!(!run.contains("--slurm-task"), "internal flag shown:\n{run}");
}

/// The help of the matrix commands, word for word (`-h`, the short form).
#[test]
fn short_help_snapshots() {
    for (name, args) in [
        ("help-check", &["check", "-h"][..]),
        ("help-matrix-expand", &["matrix", "expand", "-h"][..]),
        ("help-plan", &["plan", "-h"][..]),
        ("help-run", &["run", "-h"][..]),
    ] {
        let out = gpucompat()
            .args(args)
            .env("COLUMNS", "100")
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        insta::with_settings!({ description => format!("gpucompat {}", args.join(" ")), omit_expression => true }, {
            insta::assert_snapshot!(name, text);
        });
    }
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        &["check"][..],
        &["matrix"][..],
        &["matrix", "expand"][..],
        &[
            "matrix",
            "expand",
            "matrices/nightly.toml",
            "--format",
            "yaml",
        ][..],
        &["plan", "matrices/nightly.toml", "--format", "csv"][..],
        &["plan"][..],
    ] {
        let out = gpucompat()
            .current_dir(crate::util::repo_root())
            .args(args)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}");
    }
}
