//! Expansion benchmark: a matrix file of about 100,000 cells, loaded whole (parse, expand,
//! validate, render every template) and expanded alone. Prints median and best times; asserts
//! nothing about time (run it with `cargo bench --bench expand`).
//!
//! The file has ten axes (five of two values, five of five: 100,000 combinations), an `exclude`
//! entry, `include` entries that add keys to many cells and one that adds a new cell, templates in
//! `[resources]`, `[job]` and `[env]` (with a `{key.field}`), `[packages]` pins and `[[expect]]`
//! rules with PEP 440 ranges: every stage of the loader has work to do. Last, 300 cells with
//! 1,000 and 3,000 include entries that each add a key to every cell (linear, not quadratic).

#![expect(clippy::print_stdout, reason = "a benchmark prints its numbers")]

use gpucompat::matrix::{self, expand};
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

const ITERATIONS: usize = 7;

fn main() {
    let text = matrix_text();
    let loaded = matrix::from_str("bench.toml", &text, Path::new("bench.toml"), Path::new("."))
        .unwrap_or_else(|err| panic!("benchmark matrix is invalid:\n{}", err.render()));
    let cells = loaded.plan.cells.len();
    let with_expectation = loaded
        .plan
        .cells
        .iter()
        .filter(|c| c.expectation.is_some())
        .count();
    println!(
        "matrix: {} bytes, {cells} cells ({with_expectation} with a known failure)",
        text.len()
    );

    let load = time(|| {
        let loaded = matrix::from_str("bench.toml", &text, Path::new("bench.toml"), Path::new("."));
        black_box(loaded.map(|l| l.plan.cells.len()).unwrap_or(0))
    });
    report(
        "matrix::from_str (parse + expand + validate + render), plan dropped",
        &load,
        cells,
    );
    // The same without freeing the plan: what a command waits for before it can print.
    let load_only =
        time(|| matrix::from_str("bench.toml", &text, Path::new("bench.toml"), Path::new(".")));
    report("matrix::from_str, plan not freed", &load_only, cells);

    let (axes, exclude, include) = plain_matrix();
    let expanded = time(|| {
        black_box(
            expand::expand(&axes, &exclude, &include)
                .map(|c| c.len())
                .unwrap_or(0),
        )
    });
    report("expand::expand alone", &expanded, cells);

    // Machine-written matrices list specific combinations: 10,000 include entries that each name
    // every axis (one cell each) on top of the same product.
    let specific: Vec<expand::Entry> = (0..10_000)
        .map(|i| {
            let mut entry: expand::Entry = axes
                .iter()
                .enumerate()
                .map(|(a, (name, values))| {
                    (name.clone(), values[(i / (a + 1)) % values.len()].clone())
                })
                .collect();
            entry.push(("note".to_owned(), serde_json::Value::from(i)));
            entry
        })
        .collect();
    let with_specific = time(|| {
        black_box(
            expand::expand(&axes, &exclude, &specific)
                .map(|c| c.len())
                .unwrap_or(0),
        )
    });
    report(
        "expand::expand with 10,000 one-cell include entries",
        &with_specific,
        cells,
    );

    // Many include entries that each add a key to every cell: `check` must stay linear in what
    // they add (it once compared each added key with every key added before it).
    for entries in [1_000, 3_000] {
        let text = wide_includes_text(entries);
        let loaded = time(|| {
            let loaded =
                matrix::from_str("wide.toml", &text, Path::new("wide.toml"), Path::new("."));
            black_box(loaded.map(|l| l.plan.cells.len()).unwrap_or(0))
        });
        report(
            &format!(
                "matrix::from_str, 300 cells and {entries} include entries adding a key to each"
            ),
            &loaded,
            300,
        );
    }
}

/// 300 cells (30 x 10) and `entries` include entries, each adding its own key to every cell.
fn wide_includes_text(entries: usize) -> String {
    let mut text = String::from("[job]\ncommand = \"echo {a} {b}\"\n\n[matrix]\n");
    let a: Vec<String> = (0..30).map(|i| format!("\"a{i}\"")).collect();
    let b: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    text.push_str(&format!(
        "a = [{}]\nb = [{}]\ninclude = [\n",
        a.join(", "),
        b.join(", ")
    ));
    for i in 0..entries {
        text.push_str(&format!("  {{ k{i} = \"v{i}\" }},\n"));
    }
    text.push_str("]\n");
    text
}

/// Wall and CPU time of one run.
#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    cpu: Option<Duration>,
}

/// Runs `f` once to warm up, then `ITERATIONS` times; returns the samples sorted by wall time.
/// What `f` returns is dropped after its time is taken.
fn time<T>(mut f: impl FnMut() -> T) -> Vec<Sample> {
    black_box(f());
    let mut samples: Vec<Sample> = (0..ITERATIONS)
        .map(|_| {
            let cpu = cpu_time();
            let start = Instant::now();
            let out = black_box(f());
            let wall = start.elapsed();
            let cpu = cpu
                .zip(cpu_time())
                .map(|(before, after)| after.saturating_sub(before));
            // What `f` returns is freed outside the measurement.
            drop(out);
            Sample { wall, cpu }
        })
        .collect();
    samples.sort_by_key(|s| s.wall);
    samples
}

/// User plus system time of this process so far (Linux; `None` elsewhere). On a shared machine
/// wall time includes waiting for a core; CPU time does not.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split(' ').collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // USER_HZ, 100 on every Linux this runs on.
    Some(Duration::from_millis(ticks * 10))
}

fn report(what: &str, samples: &[Sample], cells: usize) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = samples[samples.len() / 2];
    let mut cpu: Vec<Duration> = samples.iter().filter_map(|s| s.cpu).collect();
    cpu.sort();
    let cpu = cpu
        .get(cpu.len() / 2)
        .map_or(String::new(), |c| format!(" (cpu {:.0} ms)", ms(*c)));
    println!(
        "{what}: median {:.1} ms{cpu}, best {:.1} ms, worst {:.1} ms over {} runs ({:.2} us/cell)",
        ms(median.wall),
        ms(samples[0].wall),
        ms(samples[samples.len() - 1].wall),
        samples.len(),
        ms(median.wall) * 1000.0 / cells.max(1) as f64,
    );
}

/// Axis name and values, as written in the file.
fn axes() -> Vec<(&'static str, Vec<String>)> {
    let five = |prefix: &str| (0..5).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>();
    vec![
        (
            "flashinfer",
            ["0.6.3", "0.6.8.post1", "0.6.11.post1", "0.7.0", "0.7.1"]
                .map(str::to_owned)
                .to_vec(),
        ),
        ("triton", ["3.5.1", "3.6.0"].map(str::to_owned).to_vec()),
        (
            "gpu",
            ["sm_86", "sm_90", "2xsm_90", "sm_86+sm_89", "sm_120"]
                .map(str::to_owned)
                .to_vec(),
        ),
        ("model", five("model-")),
        ("engine", ["sglang", "vllm"].map(str::to_owned).to_vec()),
        ("dtype", five("dt")),
        ("batch", (1..=5).map(|i| (i * 8).to_string()).collect()),
        ("graphs", ["on", "off"].map(str::to_owned).to_vec()),
        ("kv", ["fp8", "bf16"].map(str::to_owned).to_vec()),
        ("seed", ["a", "b"].map(str::to_owned).to_vec()),
    ]
}

fn matrix_text() -> String {
    let mut text = String::from("name = \"bench\"\n\n[matrix]\n");
    for (name, values) in axes() {
        let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        text.push_str(&format!("{name} = [{}]\n", quoted.join(", ")));
    }
    text.push_str(
        r#"
[[matrix.exclude]]
flashinfer = "0.6.3"
gpu = "sm_120"

[[matrix.include]]
tp = 1
[[matrix.include]]
gpu = "2xsm_90"
tp = 2
[[matrix.include]]
gpu = "sm_86+sm_89"
tp = 2
arch_list = "8.6"
[[matrix.include]]
model = "model-0"
spec = { name = "Qwen/Qwen3-30B-A3B", family = "moe" }
[[matrix.include]]
model = "model-1"
spec = { name = "Qwen/Qwen3-Next-80B-A3B-Instruct", family = "hybrid-gdn" }
[[matrix.include]]
flashinfer = "0.8.0"
triton = "3.6.0"
gpu = "sm_90"

[resources]
gpus = "{gpu}"

[env]
TORCH_CUDA_ARCH_LIST = "{arch_list}"
MODEL_FAMILY = "{spec.family}"

[packages]
flashinfer = ["flashinfer-python", "flashinfer-cubin"]
triton = "triton"

[job]
command = "sh smoke.sh {flashinfer} {triton} {model} {spec.name} --tp {tp} --dtype {dtype} --batch {batch}"
timeout = "30m"
no-progress = "5m"

[[expect]]
when = { gpu = "sm_120", flashinfer = "<=0.6.8.post1" }
signature = "unsupported_config"
link = "https://github.com/flashinfer-ai/flashinfer/issues/3134"
reason = "no cubins"

[[expect]]
when = { gpu = ["2xsm_90", "sm_86+sm_89"], engine = "vllm", flashinfer = ">=0.6.11,<0.7" }
signature = "illegal_address"
link = "https://github.com/sgl-project/sglang/pull/25310"
reason = "Triton mxfp4 MoE"
"#,
    );
    text
}

/// The same matrix as plain values, for `expand::expand` alone.
fn plain_matrix() -> (Vec<expand::Axis>, Vec<expand::Entry>, Vec<expand::Entry>) {
    use serde_json::{Value, json};
    let axes = axes()
        .into_iter()
        .map(|(name, values)| {
            (
                name.to_owned(),
                values.into_iter().map(Value::String).collect(),
            )
        })
        .collect();
    let entry = |pairs: &[(&str, Value)]| -> expand::Entry {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    };
    let exclude = vec![entry(&[
        ("flashinfer", json!("0.6.3")),
        ("gpu", json!("sm_120")),
    ])];
    let include = vec![
        entry(&[("tp", json!(1))]),
        entry(&[("gpu", json!("2xsm_90")), ("tp", json!(2))]),
        entry(&[
            ("gpu", json!("sm_86+sm_89")),
            ("tp", json!(2)),
            ("arch_list", json!("8.6")),
        ]),
        entry(&[
            ("model", json!("model-0")),
            (
                "spec",
                json!({"name": "Qwen/Qwen3-30B-A3B", "family": "moe"}),
            ),
        ]),
        entry(&[
            ("model", json!("model-1")),
            (
                "spec",
                json!({"name": "Qwen/Qwen3-Next-80B-A3B-Instruct", "family": "hybrid-gdn"}),
            ),
        ]),
        entry(&[
            ("flashinfer", json!("0.8.0")),
            ("triton", json!("3.6.0")),
            ("gpu", json!("sm_90")),
        ]),
    ];
    (axes, exclude, include)
}
