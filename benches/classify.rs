//! Classifier throughput on a large synthetic log (`cargo bench --bench classify`).
//!
//! Writes a log of `GPUCOMPAT_BENCH_MB` megabytes (default 1024) to a temporary file: realistic
//! serving noise (engine metrics, HTTP access lines, NCCL INFO, harmless warnings that the
//! prefilter has to look at), an illegal memory access near the end and a flood of secondary
//! errors after it. Then it times `Classifier::classify_file` a few times and prints MB/s.
//! It prints numbers; it asserts nothing about time.
#![allow(
    clippy::disallowed_methods,
    reason = "benchmarks start processes and read their settings themselves"
)]
#![expect(clippy::print_stdout, reason = "a benchmark's output is its numbers")]

use gpucompat::classify::{Classifier, Evidence};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

/// Noise lines and how often each appears in a realistic log (relative weights).
const NOISE: &[(u32, &str)] = &[
    (
        200,
        "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: {n}.4 tokens/s, Avg generation throughput: {n}.7 tokens/s, Running: {n} reqs, Waiting: 0 reqs, GPU KV cache usage: 23.{n}%, Prefix cache hit rate: 0.0%",
    ),
    (
        300,
        "INFO:     127.0.0.1:{n} - \"POST /v1/completions HTTP/1.1\" 200 OK",
    ),
    (
        100,
        "[2025-12-09 02:28:12 TP0] Prefill batch, #new-seq: 1, #new-token: {n}, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0,",
    ),
    (
        200,
        "[2025-12-09 02:28:12 TP3] Decode batch, #running-req: 32, #token: {n}, token usage: 0.05, cuda graph: True, gen throughput (token/s): 2345.{n}, #queue-req: 0,",
    ),
    (
        30,
        "gpu-node-3:{n}:5678 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    ),
    (
        20,
        "(RayWorkerWrapper pid={n}) INFO 05-28 14:44:28 [custom_all_reduce.py:33] Registering {n} cuda graph addresses",
    ),
    (
        20,
        "Loading safetensors checkpoint shards:  45% Completed | 9/20 [00:05<00:06,  1.{n}it/s]",
    ),
    (
        10,
        "[W1209 02:28:15.281862353 ProcessGroupNCCL.cpp:4561] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives.",
    ),
    (
        10,
        "WARNING 05-28 14:44:28 [config.py:{n}] Casting torch.bfloat16 to torch.float16.",
    ),
    (
        50,
        "DEBUG 05-28 14:44:28 [scheduler.py:{n}] scheduled 32 sequences, 0 preempted, kv blocks free: {n}",
    ),
    (
        10,
        "(VllmWorker TP1 pid={n}) INFO 05-28 14:44:29 [gpu_model_runner.py:1234] Graph capturing finished in 12 secs, took 0.{n} GiB",
    ),
    (
        50,
        "[2025-12-09 02:28:15] INFO:     127.0.0.1:{n} - \"GET /health HTTP/1.1\" 200 OK",
    ),
    // Lines the prefilter lets through and the rules then turn down.
    (
        2,
        "WARNING 05-28 14:44:28 [__init__.py:26] Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'vllm._C'\")",
    ),
    (
        2,
        "gpu-node-3:{n}:5679 [1] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory",
    ),
    (
        10,
        "INFO 05-28 14:44:30 [metrics.py:88] request errors: 0, retries: 0, timeouts: 0",
    ),
];

const ROOT_CAUSE: &[&str] = &[
    "(VllmWorker TP0 pid=265) ERROR 05-12 19:01:18 [multiproc_executor.py:470] RuntimeError: CUDA error: an illegal memory access was encountered",
    "(VllmWorker TP0 pid=265) ERROR 05-12 19:01:18 [multiproc_executor.py:470] CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
];

const SECONDARY: &[&str] = &[
    "[rank3]:[E1209 02:28:15.281862353 ProcessGroupNCCL.cpp:2057] [PG ID 2 PG GUID 3 Rank 3] Process group watchdog thread terminated with exception: NCCL communicator was aborted on rank 3.",
    "(EngineCore_DP0 pid=150) ERROR 05-12 19:01:19 [multiproc_executor.py:284] Worker proc VllmWorker-1 died unexpectedly, shutting down executor.",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
];

/// Which noise lines a log is made of.
#[derive(Clone, Copy)]
enum Mix {
    /// Weighted like a real serving log: mostly metrics and access lines.
    Realistic,
    /// Every template equally often: a quarter of the lines pass the prefilter and a sixth
    /// match a rule at WARNING/INFO level (the slow path, as a worst case).
    WarningHeavy,
}

fn main() -> std::io::Result<()> {
    let megabytes: u64 = std::env::var("GPUCOMPAT_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let dir = tempfile::tempdir()?;
    let realistic = bench(&dir.path().join("realistic.log"), megabytes, Mix::Realistic)?;
    let heavy = bench(
        &dir.path().join("warning-heavy.log"),
        (megabytes / 4).max(1),
        Mix::WarningHeavy,
    )?;
    println!(
        "classify throughput: {realistic:.0} MB/s on a realistic log, {heavy:.0} MB/s on a warning-heavy one (best of 3, {} threads available)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    Ok(())
}

/// Writes a log of about `megabytes` and returns the best throughput of three runs, in MB/s.
fn bench(path: &Path, megabytes: u64, mix: Mix) -> std::io::Result<f64> {
    let target = megabytes * 1_000_000;
    let started = Instant::now();
    let total_weight: u64 = NOISE.iter().map(|(w, _)| u64::from(*w)).sum();
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut written = 0u64;
    let mut lines = 0u64;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut root_line = 0;
    while written < target {
        // xorshift: cheap, deterministic variety.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let template = match mix {
            Mix::WarningHeavy => NOISE[(state % NOISE.len() as u64) as usize].1,
            Mix::Realistic => {
                let mut pick = state % total_weight;
                let mut chosen = NOISE[0].1;
                for (weight, template) in NOISE {
                    if pick < u64::from(*weight) {
                        chosen = template;
                        break;
                    }
                    pick -= u64::from(*weight);
                }
                chosen
            }
        };
        let line = template.replace("{n}", &((state >> 20) % 100_000).to_string());
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
        written += line.len() as u64 + 1;
        lines += 1;
        if root_line == 0 && written >= target / 100 * 97 {
            root_line = lines + 1;
            for line in ROOT_CAUSE.iter().chain(SECONDARY.iter().cycle().take(300)) {
                out.write_all(line.as_bytes())?;
                out.write_all(b"\n")?;
                written += line.len() as u64 + 1;
                lines += 1;
            }
        }
    }
    out.flush()?;
    drop(out);
    let size = std::fs::metadata(path)?.len();
    let name = match mix {
        Mix::Realistic => "realistic",
        Mix::WarningHeavy => "warning-heavy",
    };
    println!(
        "{name}: generated {:.0} MB, {lines} lines, in {:.1} s; root cause on line {root_line}",
        size as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );

    let classifier = Classifier::builtin();
    let mut best = 0f64;
    for run in 1..=3 {
        let cpu_before = cpu_seconds();
        let started = Instant::now();
        let c = classifier.classify_file(path, &Evidence::default())?;
        let secs = started.elapsed().as_secs_f64();
        let mbps = size as f64 / 1e6 / secs;
        best = best.max(mbps);
        // CPU time tells throughput per core even when other work shares the machine.
        let per_cpu = match (cpu_before, cpu_seconds()) {
            (Some(a), Some(b)) if b > a => {
                format!(", {:.0} MB per CPU-second", size as f64 / 1e6 / (b - a))
            }
            _ => String::new(),
        };
        println!(
            "{name} run {run}: {secs:.2} s, {mbps:.0} MB/s{per_cpu} -> {} at line {:?} ({})",
            c.signature,
            c.line,
            c.rule.as_deref().unwrap_or("-")
        );
    }
    std::fs::remove_file(path)?;
    Ok(best)
}

/// User plus system CPU time of this process so far, from /proc (Linux only).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks; 100 per second on Linux.
    Some((utime + stime) / 100.0)
}
