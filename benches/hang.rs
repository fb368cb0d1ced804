//! The time a hang capture adds between the watchdog's verdict and teardown
//! (`cargo bench --bench hang`); numbers only, nothing asserted.
//!
//! For 1, 4, 8 and 16 idle Python workers under one launcher (a process group, as a cell's), it
//! takes the capture the harness takes (`/proc`, locks, `py-spy dump --native` of every Python
//! process, two CPU samples) and prints how long it took. py-spy comes from
//! `target/test-tools/py-spy` (scripts/test puts it there), `GPUCOMPAT_PY_SPY` or `PATH`; without
//! one the capture says so and the numbers are those of the rest.
#![allow(
    clippy::disallowed_methods,
    clippy::print_stdout,
    reason = "a bench starts its own processes and prints its numbers"
)]

use gpucompat::exec::procfs::Selector;
use gpucompat::exec::pyspy::Source;
use gpucompat::forensics::{self, Request, Trigger};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const LAUNCHER: &str = "import subprocess, sys, threading\n\
n = int(sys.argv[1])\n\
code = 'import threading; threading.Event().wait()'\n\
workers = [subprocess.Popen([sys.executable, '-c', code]) for _ in range(n)]\n\
threading.Event().wait()\n";

fn launch(n: usize) -> Child {
    Command::new("python3")
        .args(["-c", LAUNCHER, &n.to_string()])
        .process_group(0)
        .spawn()
        .expect("python3")
}

fn main() {
    let cache = tempfile::tempdir().expect("temp dir");
    // The tool cache is looked at first: link the test tools' py-spy there when it exists.
    let tools = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-tools/py-spy/bin/py-spy");
    if tools.is_file() {
        let bin = gpucompat::exec::pyspy::tool_dir(cache.path()).join("bin");
        std::fs::create_dir_all(&bin).expect("tool dir");
        std::os::unix::fs::symlink(&tools, bin.join("py-spy")).expect("link py-spy");
    }
    println!("workers  processes  python  capture_s  stacks");
    for n in [1, 4, 8, 16] {
        let mut launcher = launch(n);
        let pgid = i32::try_from(launcher.id()).expect("pid");
        let selector = Selector {
            pgid: Some(pgid),
            env_marker: None,
            started_since: None,
        };
        // Until every worker exists, then a moment for their interpreters to load.
        let until = Instant::now() + Duration::from_secs(30);
        while gpucompat::exec::procfs::find_alive(&selector).len() < n + 1 && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(1500));
        let request = Request {
            selector,
            trigger: Trigger::NoProgress,
            budget: forensics::DEFAULT_BUDGET,
            gpus: Vec::new(),
            tools: Source {
                cache_root: cache.path().to_path_buf(),
                ..Source::default()
            },
        };
        let capture = forensics::capture(&request);
        let with_stacks = capture
            .processes
            .iter()
            .filter(|p| !p.stacks.is_empty())
            .count();
        println!(
            "{n:>7}  {:>9}  {:>6}  {:>9.3}  {}",
            capture.processes.len(),
            with_stacks,
            capture.took_s,
            capture.stacks_by
        );
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = launcher.wait();
    }
}
