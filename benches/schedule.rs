//! Benchmarks of scheduling and environments (`cargo bench --bench schedule`); numbers only.
//!
//! 1. Planned vs achieved makespan: a matrix of sleeping cells with known durations on a declared
//!    mixed inventory (two sm_90, one sm_89, one sm_86), simulated with `plan --simulate`'s policy
//!    and then run for real by the harness.
//! 2. Environment reuse: the first `provision` of a pin set creates it; the second finds it.

use gpucompat::exec::logsink::{LogLimits, LogSink};
use gpucompat::inventory::Inventory;
use gpucompat::matrix;
use gpucompat::provision::{self, EnvSpec};
use gpucompat::record::GpuInfo;
use gpucompat::run::{self, RunOptions};
use gpucompat::schedule;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MATRIX: &str = r#"
[matrix]
gpu = ["sm_90", "2xsm_90", "sm_86+sm_89", "sm_89", "sm_86"]
rep = [1, 2, 3, 4]
[[matrix.include]]
gpu = "sm_90"
seconds = "0.8"
[[matrix.include]]
gpu = "2xsm_90"
seconds = "1.2"
[[matrix.include]]
gpu = "sm_86+sm_89"
seconds = "0.6"
[[matrix.include]]
gpu = "sm_89"
seconds = "0.4"
[[matrix.include]]
gpu = "sm_86"
seconds = "0.5"
[resources]
gpus = "{gpu}"
[job]
command = "sleep {seconds}"
"#;

fn gpu(index: u32, arch: &str) -> GpuInfo {
    GpuInfo {
        index,
        name: format!("bench-{arch}"),
        arch: arch.to_owned(),
        memory_mib: None,
        uuid: None,
    }
}

fn main() -> ExitCode {
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "benchmark failed: {err}");
            ExitCode::FAILURE
        }
    }
}

fn bench() -> Result<(), String> {
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dir = scratch.path();
    let path = dir.join("bench.toml");
    let loaded = matrix::from_str("bench.toml", MATRIX, &path, dir).map_err(|e| e.render())?;
    let plan = loaded.plan;
    let gpus = vec![
        gpu(0, "sm_90"),
        gpu(1, "sm_90"),
        gpu(2, "sm_89"),
        gpu(3, "sm_86"),
    ];
    let durations: HashMap<String, f64> = plan
        .cells
        .iter()
        .map(|c| {
            let seconds = c.values["seconds"]
                .as_str()
                .unwrap_or("0")
                .parse()
                .unwrap_or(0.0);
            (c.id.to_string(), seconds)
        })
        .collect();
    let jobs = schedule::jobs(&plan, 0..plan.cells.len(), &durations);
    let sim = schedule::simulate(jobs, gpus.clone(), gpus.len(), 1.0);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let options = RunOptions {
        out: dir.join("out"),
        jobs: Some(gpus.len()),
        inventory: Inventory {
            host: "bench".to_owned(),
            gpus,
            source: "bench".to_owned(),
        },
        resume: false,
        retry_errors: true,
        cells: Vec::new(),
        cache_root: dir.join("cache"),
        limits: LogLimits::default(),
        grace: Duration::from_secs(1),
        reaper_exe: None,
        interactive: false,
        slow_after: None,
        quiet: false,
    };
    let cells = plan.cells.len();
    let start = Instant::now();
    let summary = runtime
        .block_on(run::execute(plan, options))
        .map_err(|e| e.to_string())?;
    let achieved = start.elapsed().as_secs_f64();
    let passed = summary
        .records
        .iter()
        .filter(|r| r.status == gpucompat::record::Status::Pass)
        .count();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "planned vs achieved makespan: {cells} sleeping cells on 2x sm_90 + sm_89 + sm_86"
    );
    let _ = writeln!(report, "  lower bound   {:>7.2} s", sim.lower_bound_s);
    let _ = writeln!(
        report,
        "  planned       {:>7.2} s (simulation of the same policy)",
        sim.makespan_s
    );
    let _ = writeln!(
        report,
        "  achieved      {:>7.2} s ({passed}/{cells} passed; {:+.2} s over plan, {:.1} ms per cell)",
        achieved,
        achieved - sim.makespan_s,
        1000.0 * (achieved - sim.makespan_s) / cells as f64
    );

    // Environment reuse: a venv with no pins (no index needed), created, then found again.
    let plan_dir = dir.to_path_buf();
    let spec = EnvSpec {
        python: "python3".to_owned(),
        requirements: None,
        pins: Vec::new(),
        index_url: None,
        find_links: Vec::new(),
        site: Vec::new(),
        no_index: true,
        system_site_packages: false,
        no_deps: false,
    };
    let log_path = dir.join("provision.log");
    let sink = LogSink::create(&log_path, LogLimits::default()).map_err(|e| e.to_string())?;
    let log = Arc::new(Mutex::new(sink));
    let (_tx, mut cancel) = tokio::sync::watch::channel(false);
    let cache = dir.join("env-cache");
    let cx = provision::Context {
        cache_root: &cache,
        cwd: &plan_dir,
        run_token: "bench-token",
        cell_token: "bench-token.cell.1",
        reaper: None,
        grace: Duration::from_secs(1),
    };
    let first = runtime
        .block_on(provision::provision(&spec, &cx, &log, &mut cancel))
        .map_err(|e| e.to_string())?;
    let mut reuse = Vec::new();
    for _ in 0..20 {
        let again = runtime
            .block_on(provision::provision(&spec, &cx, &log, &mut cancel))
            .map_err(|e| e.to_string())?;
        reuse.push(again.seconds);
    }
    reuse.sort_by(f64::total_cmp);
    let _ = writeln!(
        report,
        "environment (venv, {:?} installer):",
        provision::Installer::detect()
    );
    let _ = writeln!(report, "  first install {:>9.3} s", first.seconds);
    let _ = writeln!(
        report,
        "  reuse         {:>9.6} s (median of 20)",
        reuse[reuse.len() / 2]
    );
    let _ = std::io::stdout().lock().write_all(report.as_bytes());
    Ok(())
}
