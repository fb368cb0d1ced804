//! `check`, `matrix expand` and `plan` on shipped and hand-made matrix files.

use crate::util::{gpucompat, repo_root};

#[test]
fn shipped_matrices_check_clean() {
    let dir = repo_root().join("matrices");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("read matrices/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let out = gpucompat().arg("check").args(&files).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // One summary line per file, in the order given.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let checked: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("ok: ")?.split(':').next())
        .collect();
    let given: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    assert_eq!(checked, given, "{stdout}");
}

#[test]
fn bad_file_exits_2_with_location() {
    let sandbox = crate::util::Sandbox::new();
    let file = sandbox.file(
        "bad.toml",
        "[matrix]\nfi = [\"0.6.3\"]\n[job]\ncomand = \"true\"\n",
    );
    let out = gpucompat().arg("check").arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.toml:4:1"), "{stderr}");
    assert!(stderr.contains("did you mean `command`?"), "{stderr}");
    // An invalid file gets no summary line, and the count of invalid files ends the report.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("ok:"), "{stdout}");
    assert_eq!(
        stderr.trim_end().lines().last(),
        Some("error: 1 of 1 matrix file is invalid"),
        "{stderr}"
    );
}
