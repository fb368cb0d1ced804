//! Classifier throughput on a large synthetic log (`cargo bench --bench classify`).
//!
//! Writes logs of `GPUCOMPAT_BENCH_MB` megabytes (default 256) to a temporary folder: realistic
//! serving noise (engine metrics, HTTP access lines, NCCL INFO), the warning-heavy log of a TP=8
//! vLLM engine (its NCCL INFO and vLLM/c10d warning lines, full size), and a worst case where
//! every noise template is equally frequent (a quarter of the size); each with an illegal memory
//! access near the end and a flood of secondary errors after it. It times
//! `Classifier::classify_file` and `grep -E` on the same file and prints, for each log, MB/s of
//! wall time and per CPU-second for both, and the ratios: classify's time over grep's, in wall
//! time (classify's scan uses several threads, grep one) and in CPU time (what a shared machine's
//! load does not blur). It prints numbers; it asserts nothing about time.
//! `GPUCOMPAT_BENCH_ONLY=<mix>` runs one of `realistic`, `tp8-warnings`, `warning-heavy`,
//! `healthy-logs` (the project's real healthy logs, over and over).
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

/// What a tensor-parallel (TP=8) vLLM engine prints at startup and while serving: NCCL INFO
/// chatter from eight ranks, vLLM and c10d warnings. Many of these lines carry words the failure
/// rules look for ("not supported", "hang", "Failed to import", "No such file", "timeout"), so a
/// plain word prefilter lets them all through: the case the literal prefilter is for.
const TP8_WARNINGS: &[(u32, &str)] = &[
    (
        30,
        "gpu-node-3:{n}:5678 [{r}] NCCL INFO Channel 07/24 : {r}[{r}] -> 6[6] via P2P/CUMEM/read",
    ),
    (
        10,
        "gpu-node-3:{n}:5678 [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    ),
    (
        10,
        "gpu-node-3:{n}:5679 [{r}] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: No such file or directory : when loading libnccl-net.so",
    ),
    (
        5,
        "gpu-node-3:{n}:5678 [{r}] NCCL INFO comm 0x55d5c0a1 rank {r} nranks 8 cudaDev {r} nvmlDev {r} busId 4b000 commId 0x7f3a{n} - Init COMPLETE",
    ),
    (
        8,
        "(VllmWorker TP{r} pid={n}) WARNING 05-28 14:44:28 [custom_all_reduce.py:136] Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.",
    ),
    (
        8,
        "(VllmWorker TP{r} pid={n}) WARNING 05-28 14:44:29 [fused_moe.py:668] Using default MoE config. Performance might be sub-optimal! Config file not found at /vllm/model_executor/layers/fused_moe/configs/E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json",
    ),
    (
        8,
        "[rank{r}]:[W528 14:44:28.281862353 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank {r}] using GPU {r} to perform barrier as devices used by this process are currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect.",
    ),
    (
        6,
        "(VllmWorker TP{r} pid={n}) WARNING 05-28 14:44:28 [__init__.py:26] Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'vllm._C'\")",
    ),
    (
        6,
        "[W528 14:44:30.{n} ProcessGroupNCCL.cpp:4561] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no effect for point-to-point collectives.",
    ),
    (
        6,
        "(VllmWorker TP{r} pid={n}) WARNING 05-28 14:44:31 [utils.py:160] The model class Qwen3MoeForCausalLM has not defined `packed_modules_mapping`, this may lead to incorrect mapping of quantized or ignored modules",
    ),
    (
        6,
        "(VllmWorker TP{r} pid={n}) INFO 05-28 14:44:32 [gpu_model_runner.py:1234] Model loading took 15.2{n} GiB and 30.1 seconds",
    ),
    (
        5,
        "(VllmWorker TP{r} pid={n}) INFO 05-28 14:44:35 [backends.py:459] Dynamo bytecode transform time: 5.37 s",
    ),
    (
        5,
        "INFO 05-28 14:44:30 [metrics.py:88] request errors: 0, retries: 0, timeouts: 0",
    ),
    (
        5,
        "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: {n}.4 tokens/s, Avg generation throughput: {n}.7 tokens/s, Running: 8 reqs, Waiting: 0 reqs, GPU KV cache usage: 23.{n}%, Prefix cache hit rate: 0.0%",
    ),
    (
        4,
        "(VllmWorker TP{r} pid={n}) WARNING 05-28 14:44:36 [config.py:3785] `torch.compile` is turned on, but the model does not support it. Please open an issue on GitHub if you want it to be supported.",
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
    /// A TP=8 engine's NCCL INFO and vLLM/c10d warning lines (`TP8_WARNINGS`).
    Tp8Warnings,
    /// Every template equally often: a quarter of the lines pass the word prefilter and a sixth
    /// match a rule at WARNING/INFO level (the slow path, as a worst case).
    WarningHeavy,
    /// The project's real healthy logs (`tests/fixtures/healthy`) end to end, over and over: the
    /// variety of real lines, which once overflowed the prefilter's lazy-DFA cache and sent every
    /// line through the slow NFA (a 134 MB log took over ten minutes).
    HealthyLogs,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::Realistic => "realistic",
            Mix::Tp8Warnings => "tp8-warnings",
            Mix::WarningHeavy => "warning-heavy",
            Mix::HealthyLogs => "healthy-logs",
        }
    }
}

/// What `grep -E` is timed with on the same file: the words one would search a log for failures.
const GREP_PATTERN: &str = "Error|error|ERROR|Traceback|FAILED|Failed|fatal|Killed|timed out";

fn main() -> std::io::Result<()> {
    let megabytes: u64 = std::env::var("GPUCOMPAT_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    // `GPUCOMPAT_BENCH_ONLY=tp8-warnings` runs one mix (for profiling).
    let only = std::env::var("GPUCOMPAT_BENCH_ONLY").ok();
    let dir = tempfile::tempdir()?;
    let mut summary = Vec::new();
    for (mix, mb) in [
        (Mix::Realistic, megabytes),
        (Mix::Tp8Warnings, megabytes),
        (Mix::WarningHeavy, (megabytes / 4).max(1)),
        (Mix::HealthyLogs, (megabytes / 4).max(1)),
    ] {
        if only.as_deref().is_some_and(|o| o != mix.name()) {
            continue;
        }
        let path = dir.path().join(format!("{}.log", mix.name()));
        let size = generate(&path, mb, mix)?;
        let (ours, first) = best_of_three(mix.name(), &path, size)?;
        let grep = grep_rates(&path, size);
        let ratio = grep.map_or(String::from("grep not available"), |g| {
            let cpu = match (ours.per_cpu, g.per_cpu) {
                (Some(o), Some(g)) => format!(", {:.1}x grep's CPU time", g / o),
                _ => String::new(),
            };
            format!(
                "grep -E {:.0} MB/s; classify takes {:.1}x grep's time{cpu}",
                g.wall,
                g.wall / ours.wall
            )
        });
        let per_cpu = ours
            .per_cpu
            .map_or(String::new(), |c| format!(", {c:.0} MB per CPU-second"));
        let cold = grep.map_or(String::new(), |g| {
            format!(", {:.1}x grep's time", g.wall / first.wall)
        });
        summary.push(format!(
            "{}: {:.0} MB/s{per_cpu} ({ratio}); first run {:.0} MB/s{cold}",
            mix.name(),
            ours.wall,
            first.wall
        ));
        std::fs::remove_file(&path)?;
    }
    println!(
        "classify throughput, best of 3, {} threads available:",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for line in summary {
        println!("  {line}");
    }
    Ok(())
}

/// The weighted line templates a mix is generated from; `None` for the mix written from the
/// healthy fixtures (`generate_healthy`).
fn templates(mix: Mix) -> Option<&'static [(u32, &'static str)]> {
    match mix {
        Mix::Realistic | Mix::WarningHeavy => Some(NOISE),
        Mix::Tp8Warnings => Some(TP8_WARNINGS),
        Mix::HealthyLogs => None,
    }
}

/// Writes the healthy fixture logs over and over to about `megabytes`, the root cause near the end;
/// returns its size.
fn generate_healthy(path: &Path, megabytes: u64) -> std::io::Result<u64> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/healthy");
    let mut logs: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    let mut corpus = Vec::new();
    for log in &logs {
        corpus.extend_from_slice(&std::fs::read(log)?);
        if !corpus.ends_with(b"\n") {
            corpus.push(b'\n');
        }
    }
    let target = megabytes * 1_000_000;
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut written = 0u64;
    let mut root_written = false;
    while written < target {
        out.write_all(&corpus)?;
        written += corpus.len() as u64;
        if !root_written && written >= target / 100 * 97 {
            root_written = true;
            written += write_root_cause(&mut out)?.0;
        }
    }
    out.flush()?;
    println!(
        "healthy-logs: {} healthy logs repeated to {} MB",
        logs.len(),
        written / 1_000_000
    );
    Ok(written)
}

/// Writes the root cause and the flood of secondary errors after it; returns bytes and lines.
fn write_root_cause(out: &mut impl Write) -> std::io::Result<(u64, u64)> {
    let (mut bytes, mut lines) = (0, 0);
    for line in ROOT_CAUSE.iter().chain(SECONDARY.iter().cycle().take(300)) {
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
        bytes += line.len() as u64 + 1;
        lines += 1;
    }
    Ok((bytes, lines))
}

/// Writes a log of about `megabytes` with the root cause near the end; returns its size.
fn generate(path: &Path, megabytes: u64, mix: Mix) -> std::io::Result<u64> {
    let Some(table) = templates(mix) else {
        return generate_healthy(path, megabytes);
    };
    let target = megabytes * 1_000_000;
    let started = Instant::now();
    let total_weight: u64 = table.iter().map(|(w, _)| u64::from(*w)).sum();
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
            Mix::WarningHeavy => table[(state % table.len() as u64) as usize].1,
            _ => {
                let mut pick = state % total_weight;
                let mut chosen = table[0].1;
                for (weight, template) in table {
                    if pick < u64::from(*weight) {
                        chosen = template;
                        break;
                    }
                    pick -= u64::from(*weight);
                }
                chosen
            }
        };
        let line = template
            .replace("{n}", &((state >> 20) % 100_000).to_string())
            .replace("{r}", &((state >> 40) % 8).to_string());
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
        written += line.len() as u64 + 1;
        lines += 1;
        if root_line == 0 && written >= target / 100 * 97 {
            root_line = lines + 1;
            let (bytes, count) = write_root_cause(&mut out)?;
            written += bytes;
            lines += count;
        }
    }
    out.flush()?;
    drop(out);
    let size = std::fs::metadata(path)?.len();
    println!(
        "{}: generated {:.0} MB, {lines} lines, in {:.1} s; root cause on line {root_line}",
        mix.name(),
        size as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    Ok(size)
}

/// Throughput: megabytes per second of wall time, and per second of CPU time (which tells the
/// speed per core when other work shares the machine, or when several threads share the work).
#[derive(Clone, Copy)]
struct Rate {
    wall: f64,
    per_cpu: Option<f64>,
}

/// The best throughput of three classifier runs, and the first run's. The classifier keeps its
/// lazy DFAs' states from one log to the next (as `run` does over its cells), so runs 2 and 3
/// meet states run 1 built: run 1 is the figure for a log of text not met before.
fn best_of_three(name: &str, path: &Path, size: u64) -> std::io::Result<(Rate, Rate)> {
    let classifier = Classifier::builtin();
    let mut best = Rate {
        wall: 0.0,
        per_cpu: None,
    };
    let mut first = best;
    for run in 1..=3 {
        let cpu_before = cpu_seconds(Whose::Own);
        let started = Instant::now();
        let c = classifier.classify_file(path, &Evidence::default())?;
        let secs = started.elapsed().as_secs_f64();
        let mbps = size as f64 / 1e6 / secs;
        let per_cpu = per_cpu(size, cpu_before, cpu_seconds(Whose::Own));
        if run == 1 {
            first = Rate {
                wall: mbps,
                per_cpu,
            };
        }
        best.wall = best.wall.max(mbps);
        best.per_cpu = larger(best.per_cpu, per_cpu);
        let shown = per_cpu.map_or(String::new(), |c| format!(", {c:.0} MB per CPU-second"));
        println!(
            "{name} run {run}: {secs:.2} s, {mbps:.0} MB/s{shown} -> {} at line {:?} ({})",
            c.signature,
            c.line,
            c.rule.as_deref().unwrap_or("-")
        );
    }
    Ok((best, first))
}

/// The best of three `grep -E -c` runs over the same file (`None` without grep). The file is in
/// the page cache by now, as it is for the classifier.
fn grep_rates(path: &Path, size: u64) -> Option<Rate> {
    let mut best = None::<Rate>;
    for _ in 0..3 {
        let cpu_before = cpu_seconds(Whose::Children);
        let started = Instant::now();
        let out = std::process::Command::new("grep")
            .args(["-E", "-c", GREP_PATTERN])
            .arg(path)
            .output()
            .ok()?;
        let secs = started.elapsed().as_secs_f64();
        // grep exits 1 when nothing matched; anything else is a failure to run.
        if !matches!(out.status.code(), Some(0 | 1)) {
            return None;
        }
        let rate = Rate {
            wall: size as f64 / 1e6 / secs,
            per_cpu: per_cpu(size, cpu_before, cpu_seconds(Whose::Children)),
        };
        best = Some(best.map_or(rate, |b| Rate {
            wall: b.wall.max(rate.wall),
            per_cpu: larger(b.per_cpu, rate.per_cpu),
        }));
    }
    best
}

fn larger(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// Megabytes per CPU-second between two readings (`None` when the clock did not tick).
fn per_cpu(size: u64, before: Option<f64>, after: Option<f64>) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if b > a => Some(size as f64 / 1e6 / (b - a)),
        _ => None,
    }
}

/// This process's CPU time, or that of its waited-for children (grep).
#[derive(Clone, Copy)]
enum Whose {
    Own,
    Children,
}

/// User plus system CPU time so far, from /proc (Linux only).
fn cpu_seconds(whose: Whose) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime, then cutime and cstime of the children waited for.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let first = match whose {
        Whose::Own => 11,
        Whose::Children => 13,
    };
    let utime: f64 = fields.get(first)?.parse().ok()?;
    let stime: f64 = fields.get(first + 1)?.parse().ok()?;
    // Clock ticks; 100 per second on Linux.
    Some((utime + stime) / 100.0)
}
