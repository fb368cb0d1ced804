//! What `gpucompat run` costs by itself, measured through the library with real processes.
//!
//! (a) Harness overhead per cell: N cells whose command is `true`, at one and two cells at a
//!     time, against the bare cost of starting `sh -c true` and collecting its output; then at
//!     one at a time again with 1000 more (idle) processes on the host, since finding a cell's
//!     processes means looking through /proc.
//! (b) Hang to verdict: cells that hang idle (and cells that hang right after a second of CPU
//!     work) under no-progress windows of 1 s, 2 s and 5 s; the time from the start of the hang
//!     to the end of the cell, minus the window.
//!
//! `cargo bench --bench run` (the per-cell progress lines go to stderr; `2>/dev/null` hides them).
//! It prints numbers and asserts nothing about time.
#![allow(
    clippy::disallowed_methods,
    reason = "benchmarks start processes and read their settings themselves"
)]

use gpucompat::exec::logsink::LogLimits;
use gpucompat::inventory::Inventory;
use gpucompat::matrix::{self, Plan};
use gpucompat::run::{self, RunOptions, RunSummary};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CELLS: usize = 200;
const REPEATS: usize = 3;
/// Idle processes started for the "busy host" row.
const CROWD: usize = 1000;

/// Idle processes that make the host look like a busy CI machine; killed when dropped.
struct Crowd(Vec<std::process::Child>);

impl Crowd {
    fn start(n: usize) -> Fallible<Crowd> {
        let mut crowd = Crowd(Vec::with_capacity(n));
        for _ in 0..n {
            crowd.0.push(
                Command::new("sleep")
                    .arg("600")
                    .stdin(std::process::Stdio::null())
                    .spawn()?,
            );
        }
        Ok(crowd)
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

fn main() -> ExitCode {
    match bench() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "bench failed: {err}");
            ExitCode::FAILURE
        }
    }
}

type Fallible<T> = Result<T, Box<dyn std::error::Error>>;

fn bench() -> Fallible<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scratch = tempfile::tempdir()?;
    let mut out = String::new();

    // (a) overhead per cell.
    let bare = bare_cost(CELLS)?;
    out.push_str(&format!(
        "harness overhead per cell ({CELLS} cells of `true`; best of {REPEATS})\n"
    ));
    out.push_str(&format!(
        "  {:<34} {:>10} {:>12}\n",
        "", "ms/cell", "overhead ms"
    ));
    out.push_str(&format!(
        "  {:<34} {:>10.2} {:>12}\n",
        "bare `sh -c true` (serial)",
        ms(bare),
        "-"
    ));
    let values: Vec<String> = (0..CELLS).map(|i| i.to_string()).collect();
    let text = format!(
        "[matrix]\ni = [{}]\n[job]\ncommand = \"true\"\n",
        values.join(", ")
    );
    for (jobs, crowd) in [(1, 0), (2, 0), (1, CROWD)] {
        let _crowd = Crowd::start(crowd)?;
        let mut best = Duration::MAX;
        for round in 0..REPEATS {
            let dir = scratch
                .path()
                .join(format!("overhead-j{jobs}-c{crowd}-{round}"));
            std::fs::create_dir_all(&dir)?;
            let plan = plan(&dir, &text)?;
            let start = Instant::now();
            let summary = runtime.block_on(run::execute(plan, options(&dir, jobs)))?;
            let took = start.elapsed();
            check_all(&summary, CELLS, "pass")?;
            best = best.min(took / CELLS as u32);
        }
        // With two at a time, wall time per cell is what a run pays; the overhead column
        // compares it with the serial bare cost.
        let label = if crowd > 0 {
            format!("gpucompat run --jobs {jobs}, +{crowd} procs")
        } else {
            format!("gpucompat run --jobs {jobs}")
        };
        out.push_str(&format!(
            "  {:<34} {:>10.2} {:>12.2}\n",
            label,
            ms(best),
            ms(best) - ms(bare)
        ));
    }

    // (b) hang to deadlock verdict.
    out.push_str(&format!(
        "\nhang to deadlock verdict ({REPEATS} cells each, run together; \
         seconds after the window)\n"
    ));
    out.push_str(&format!(
        "  {:<10} {:<22} {:>8} {:>8} {:>8}\n",
        "window", "hang", "min", "median", "max"
    ));
    for window in [1u64, 2, 5] {
        for (label, before) in [("idle from the start", 0.0), ("after 1 s of CPU", 1.0)] {
            let lags = hang_lags(&runtime, scratch.path(), window, before)?;
            out.push_str(&format!(
                "  {:<10} {:<22} {:>8.3} {:>8.3} {:>8.3}\n",
                format!("{window} s"),
                label,
                lags[0],
                lags[lags.len() / 2],
                lags[lags.len() - 1]
            ));
        }
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Mean time to start `sh -c true` and collect its (empty) output, serially.
fn bare_cost(n: usize) -> Fallible<Duration> {
    let mut best = Duration::MAX;
    for _ in 0..REPEATS {
        let start = Instant::now();
        for _ in 0..n {
            let status = Command::new("sh").args(["-c", "true"]).output()?.status;
            if !status.success() {
                return Err("sh -c true failed".into());
            }
        }
        best = best.min(start.elapsed() / n as u32);
    }
    Ok(best)
}

fn plan(dir: &Path, text: &str) -> Fallible<Plan> {
    let path = dir.join("bench.toml");
    std::fs::write(&path, text)?;
    let loaded = matrix::from_str("bench.toml", text, &path, dir).map_err(|e| e.render())?;
    Ok(loaded.plan)
}

fn options(dir: &Path, jobs: usize) -> RunOptions {
    RunOptions {
        out: dir.join("out"),
        jobs: Some(jobs),
        inventory: Inventory {
            host: "bench".to_owned(),
            gpus: Vec::new(),
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
    }
}

fn check_all(summary: &RunSummary, cells: usize, status: &str) -> Fallible<()> {
    if summary.records.len() != cells {
        return Err(format!("{} records, expected {cells}", summary.records.len()).into());
    }
    if let Some(bad) = summary
        .records
        .iter()
        .find(|r| r.status.as_str() != status && r.signature.is_none_or(|s| s.as_str() != status))
    {
        return Err(format!("cell {} ended {} ({:?})", bad.id, bad.status, bad.signature).into());
    }
    Ok(())
}

/// Runs `REPEATS` cells that hang (after `busy_s` of CPU work) under a `window` s no-progress
/// window; returns, sorted, how long after `hang start + window` each cell's run ended.
fn hang_lags(
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
    window: u64,
    busy_s: f64,
) -> Fallible<Vec<f64>> {
    let dir = scratch.join(format!("hang-{window}-{busy_s}"));
    std::fs::create_dir_all(&dir)?;
    let burn = if busy_s > 0.0 {
        format!(
            "end=$(($(date +%s%N) + {})); while [ $(date +%s%N) -lt $end ]; do :; done; ",
            (busy_s * 1e9) as u64
        )
    } else {
        String::new()
    };
    let reps: Vec<String> = (0..REPEATS).map(|r| r.to_string()).collect();
    let text = format!(
        "[matrix]\nrep = [{reps}]\n[job]\n\
         command = \"{burn}date +%s.%N > hang-{{rep}}.stamp; exec sleep 600\"\n\
         timeout = \"60s\"\nno-progress = \"{window}s\"\n",
        reps = reps.join(", ")
    );
    let plan = plan(&dir, &text)?;
    // All cells hang together; each cell's end is its start plus its duration.
    let started = now_s();
    let summary = runtime.block_on(run::execute(plan, options(&dir, REPEATS)))?;
    check_all(&summary, REPEATS, "deadlock")?;
    let mut lags = Vec::new();
    for record in &summary.records {
        let rep = record
            .values
            .get("rep")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let hang_start: f64 = std::fs::read_to_string(stamp(&dir, &rep))?.trim().parse()?;
        // `duration_s` runs from the cell's start; the cells started at `started` (within a
        // few milliseconds, which this number includes).
        let ended = started + record.duration_s;
        lags.push(ended - hang_start - window as f64);
    }
    lags.sort_by(f64::total_cmp);
    Ok(lags)
}

fn stamp(dir: &Path, rep: &str) -> PathBuf {
    dir.join(format!("hang-{rep}.stamp"))
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
