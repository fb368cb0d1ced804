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
    gpucompat().arg("check").args(&files).assert().success();
}
