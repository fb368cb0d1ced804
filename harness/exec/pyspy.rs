//! `py-spy`, the sampling profiler the hang capture reads Python stacks with: where it is, its
//! installation into the harness's tool cache when it is nowhere, and one dump of one process.
//!
//! Found, in order: `GPUCOMPAT_PY_SPY` (a path, or `off`), the tool cache
//! (`CACHE/tools/py-spy/bin/py-spy`), `PATH`, and last an install into the tool cache with
//! `python3 -m pip install --target` from the matrix's wheelhouse (`find-links`, `no-index`) or
//! the index. py-spy is a small wheel holding one static binary, so `--target` is all it needs.
//! A failed install is not retried by the same harness process: the next hang says why at once
//! instead of spending its budget on the same failure.
//!
//! py-spy attaches with `ptrace` (process_vm_readv): the harness must be allowed to trace the
//! cell's processes. With Yama's `ptrace_scope` 0 or 1 a process of the same user may be traced
//! by its ancestors (scope 1) or anyone of the user (scope 0); the harness is the cell's
//! ancestor, except for workers that called `setsid` and were re-parented. Scope 2 needs
//! `CAP_SYS_PTRACE`, scope 3 forbids it; in a container, the runtime's seccomp profile must allow
//! `ptrace` (Docker's default allows it on kernels >= 4.8). docs/hang.md says more.

use super::probe::{self, ProbeError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A usable py-spy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PySpy {
    pub path: PathBuf,
    /// `py-spy 0.4.3`, as it says itself.
    pub version: String,
    /// Installed by this call (the capture says so: it cost time).
    pub installed: bool,
}

/// Where a missing py-spy may be installed from.
#[derive(Debug, Clone, Default)]
pub struct Source {
    /// The harness's cache folder; the tool lives in `tools/py-spy` under it.
    pub cache_root: PathBuf,
    /// Wheelhouse folders (absolute), as the matrix's `[python] find-links`.
    pub find_links: Vec<PathBuf>,
    pub no_index: bool,
    pub index_url: Option<String>,
}

/// Failed installs, by tool folder, for the life of this process.
fn failures() -> &'static Mutex<HashMap<PathBuf, String>> {
    static FAILED: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    FAILED.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The tool folder under a cache folder.
pub fn tool_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("tools").join("py-spy")
}

/// A py-spy to use, or why there is none. Installing counts against `deadline`.
pub fn locate(source: &Source, deadline: Instant) -> Result<PySpy, String> {
    let asked = crate::env::var(crate::env::EnvVars::GPUCOMPAT_PY_SPY);
    match asked.as_deref() {
        Some("off") => return Err("turned off (GPUCOMPAT_PY_SPY=off)".to_owned()),
        Some(path) if !path.is_empty() => return checked(Path::new(path), false, deadline),
        _ => {}
    }
    let dir = tool_dir(&source.cache_root);
    let cached = dir.join("bin").join("py-spy");
    if cached.is_file() {
        return checked(&cached, false, deadline);
    }
    if let Some(found) = on_path() {
        return checked(&found, false, deadline);
    }
    if let Some(why) = failures().lock().ok().and_then(|f| f.get(&dir).cloned()) {
        return Err(why);
    }
    let installed = install(source, &dir, deadline).and_then(|()| checked(&cached, true, deadline));
    if let Err(why) = &installed {
        if let Ok(mut failed) = failures().lock() {
            failed.insert(dir, why.clone());
        }
    }
    installed
}

fn on_path() -> Option<PathBuf> {
    let path = crate::env::var_os(crate::env::EnvVars::PATH)?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("py-spy"))
        .find(|p| p.is_file())
}

/// The tool at `path`, if it runs.
fn checked(path: &Path, installed: bool, deadline: Instant) -> Result<PySpy, String> {
    let program = path.display().to_string();
    let left = remaining(deadline).min(Duration::from_secs(5));
    match probe::capture(&program, &["--version"], left) {
        Ok(out) => Ok(PySpy {
            path: path.to_path_buf(),
            version: out.trim().to_owned(),
            installed,
        }),
        Err(err) => Err(format!("{program} does not run: {err}")),
    }
}

/// `python3 -m pip install --target` into a fresh folder, renamed into place when complete (two
/// harnesses installing at once: the second rename fails and the first one's tool is used).
fn install(source: &Source, dir: &Path, deadline: Instant) -> Result<(), String> {
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)
        .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
    let staging = parent.join(format!("py-spy.installing.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let mut args: Vec<String> = [
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--target",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(staging.display().to_string());
    for link in &source.find_links {
        args.push("--find-links".to_owned());
        args.push(link.display().to_string());
    }
    if source.no_index {
        args.push("--no-index".to_owned());
    } else if let Some(url) = &source.index_url {
        args.push("--index-url".to_owned());
        args.push(url.clone());
    }
    args.push("py-spy".to_owned());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = probe::capture("python3", &argv, remaining(deadline));
    let done = match result {
        Ok(_) if staging.join("bin").join("py-spy").is_file() => {
            match std::fs::rename(&staging, dir) {
                Ok(()) => Ok(()),
                Err(_) if dir.join("bin").join("py-spy").is_file() => Ok(()),
                Err(err) => Err(format!("cannot move py-spy into {}: {err}", dir.display())),
            }
        }
        Ok(_) => Err("pip installed py-spy but no bin/py-spy came with it".to_owned()),
        Err(err @ ProbeError::Timeout { .. }) => Err(format!(
            "installing py-spy did not finish within the capture's budget ({err})"
        )),
        // pip's last line says why (`No matching distribution found for py-spy`).
        Err(ProbeError::Failed { status, stderr, .. }) => Err(format!(
            "cannot install py-spy ({status}): {}",
            stderr
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
        )),
        Err(err) => Err(format!("cannot install py-spy: {err}")),
    };
    let _ = std::fs::remove_dir_all(&staging);
    done
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// `py-spy dump --json` of one process, all its threads; with `native`, C/C++ frames too.
pub fn dump(tool: &PySpy, pid: i32, native: bool, limit: Duration) -> Result<String, ProbeError> {
    let program = tool.path.display().to_string();
    let pid = pid.to_string();
    let mut args = vec!["dump", "--json", "--pid", pid.as_str()];
    if native {
        args.push("--native");
    }
    probe::capture(&program, &args, limit)
}
