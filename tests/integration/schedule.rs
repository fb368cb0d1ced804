//! GPU-aware scheduling on a declared mixed inventory: cells get GPUs of the archs they ask for,
//! in the asked order, never two cells on one GPU at a time; `plan --simulate` sizes a fleet.

use crate::util::{Sandbox, exits, gpucompat, records, records_by_id};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

const INVENTORY: &str = r#"
host = "mixed-rig"
[[gpu]]
index = 0
name = "NVIDIA GeForce RTX 4090"
arch = "sm_89"
[[gpu]]
index = 1
name = "NVIDIA GeForce RTX 3090"
arch = "sm_86"
[[gpu]]
index = 2
name = "NVIDIA H100 80GB HBM3"
arch = "sm_90"
memory_mib = 81559
uuid = "GPU-00000000-0000-0000-0000-000000000002"
[[gpu]]
index = 3
name = "NVIDIA H100 80GB HBM3"
arch = "sm_90"
"#;

/// Cells log the GPUs they got and when they held them.
const MATRIX: &str = r#"
[matrix]
gpu = ["sm_90", "2xsm_90", "sm_86+sm_89", "sm_89", "sm_86", "sm_120"]
rep = [1, 2, 3]

[resources]
gpus = "{gpu}"

[job]
command = """
echo "start $(date +%s.%N) $GPUCOMPAT_CELL_ID $CUDA_VISIBLE_DEVICES" >> "$LEDGER"
sleep 0.3
echo "end $(date +%s.%N) $GPUCOMPAT_CELL_ID $CUDA_VISIBLE_DEVICES" >> "$LEDGER"
"""
timeout = "1m"
"#;

/// `gpucompat run` of `matrix` one cell at a time on `inventory`, its JIT caches under `cache`.
fn run_serially(inventory: &Path, out: &Path, cache: &Path, matrix: &Path) -> assert_cmd::Command {
    let mut command = gpucompat();
    command
        .args(["run", "--grace", "1s", "--jobs", "1", "--inventory"])
        .arg(inventory)
        .arg("--out")
        .arg(out)
        .arg("--cache-dir")
        .arg(cache)
        .arg(matrix);
    command
}

#[test]
fn cells_get_their_archs_in_order_and_never_share_a_gpu() {
    let sandbox = Sandbox::new();
    let inventory = sandbox.file("inventory.toml", INVENTORY);
    let matrix = sandbox.file("m.toml", MATRIX);
    let ledger = sandbox.path().join("ledger.txt");
    let out = sandbox.path().join("run");
    exits(
        gpucompat()
            .args(["run", "--grace", "1s", "--jobs", "8", "--inventory"])
            .arg(&inventory)
            .arg("--out")
            .arg(&out)
            .arg(&matrix)
            .env("LEDGER", &ledger),
        &[0],
    );

    let records = records(&out);
    assert_eq!(records.len(), 18);
    let arch_of = |index: u64| match index {
        0 => "sm_89",
        1 => "sm_86",
        _ => "sm_90",
    };
    for record in &records {
        let wanted = record["values"]["gpu"].as_str().expect("gpu");
        if wanted == "sm_120" {
            assert_eq!(record["status"], "skip", "{record}");
            assert!(
                record["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("sm_120"))
            );
            continue;
        }
        assert_eq!(record["status"], "pass", "{record}");
        let got: Vec<&str> = record["runner"]["gpus"]
            .as_array()
            .expect("gpus")
            .iter()
            .map(|g| arch_of(g["index"].as_u64().expect("index")))
            .collect();
        let expected: Vec<&str> = match wanted {
            "2xsm_90" => vec!["sm_90", "sm_90"],
            "sm_86+sm_89" => vec!["sm_86", "sm_89"],
            one => vec![one],
        };
        assert_eq!(got, expected, "{record}");
        assert_eq!(record["runner"]["host"], "mixed-rig");
    }
    // The declared memory and UUID travel with the GPU into the record.
    assert!(records.iter().any(|r| {
        r["runner"]["gpus"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["memory_mib"] == 81559))
    }));

    // From the ledger: per GPU, the intervals of the cells that held it never overlap, and the
    // mixed pair saw CUDA_VISIBLE_DEVICES=1,0 (the sm_86 card first).
    let ledger = std::fs::read_to_string(&ledger).expect("ledger");
    let mut open: HashMap<String, (f64, String)> = HashMap::new();
    let mut intervals: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    for line in ledger.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let (kind, time, id) = (parts[0], parts[1].parse::<f64>().expect("time"), parts[2]);
        let devices = parts.get(3).copied().unwrap_or_default().to_owned();
        if id.starts_with("sm_86_sm_89") {
            assert_eq!(devices, "1,0", "{line}");
        }
        match kind {
            "start" => {
                open.insert(id.to_owned(), (time, devices));
            }
            _ => {
                let (start, devices) = open.remove(id).expect("start before end");
                for device in devices.split(',') {
                    intervals
                        .entry(device.to_owned())
                        .or_default()
                        .push((start, time));
                }
            }
        }
    }
    for (device, mut spans) in intervals {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for pair in spans.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "GPU {device} held by two cells at once: {pair:?}"
            );
        }
    }
}

#[test]
fn simulate_prints_makespan_utilisation_and_unservable_cells() {
    let sandbox = Sandbox::new();
    let inventory = sandbox.file("inventory.toml", INVENTORY);
    let matrix = sandbox.file("m.toml", MATRIX);
    let expand = gpucompat()
        .args(["matrix", "expand", "--format", "json"])
        .arg(&matrix)
        .output()
        .expect("expand");
    let cells: Vec<Value> = serde_json::from_slice(&expand.stdout).expect("json");
    // Every sm_90 cell takes 100 s, the rest 10 s: the two H100s are the bottleneck.
    let mut csv = String::from("id,duration_s\n");
    for cell in &cells {
        let gpu = cell["values"]["gpu"].as_str().expect("gpu");
        let seconds = if gpu.contains("sm_90") { 100 } else { 10 };
        csv.push_str(&format!("{},{seconds}\n", cell["id"].as_str().expect("id")));
    }
    let durations = sandbox.file("durations.csv", &csv);
    let out = exits(
        gpucompat()
            .args(["plan", "--format", "json", "--simulate"])
            .arg(&durations)
            .arg("--inventory")
            .arg(&inventory)
            .arg(&matrix),
        &[0],
    );
    let sim: Value = serde_json::from_slice(&out.stdout).expect("json");
    // sm_90 pool: 3 one-GPU cells x 100 s + 3 two-GPU cells x 200 GPU-s = 900 GPU-s over 2 GPUs.
    // The pairs need both H100s and three single cells cannot split evenly over two GPUs, so
    // the best schedule takes 300 + 200 s.
    assert_eq!(sim["lower_bound_s"], 450.0, "{sim:#}");
    assert_eq!(sim["makespan_s"], 500.0, "{sim:#}");
    assert_eq!(sim["unservable"].as_array().map(Vec::len), Some(3));
    let h100 = sim["gpus"][2]["utilisation"].as_f64().expect("utilisation");
    assert!(
        (h100 - 1.0).abs() < 1e-9 || (h100 - 0.8).abs() < 1e-9,
        "{sim:#}"
    );

    let table = gpucompat()
        .args(["plan", "--simulate"])
        .arg(&durations)
        .arg("--inventory")
        .arg(&inventory)
        .arg(&matrix)
        .output()
        .expect("simulate");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("makespan     8m 20s"), "{text}");
    assert!(text.contains("need GPUs this inventory lacks"), "{text}");

    let bad = sandbox.file("bad.csv", "cell,when\nx,1\n");
    let out = gpucompat()
        .args(["plan", "--simulate"])
        .arg(&bad)
        .arg("--inventory")
        .arg(&inventory)
        .arg(&matrix)
        .output()
        .expect("simulate");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("duration_s"));
}

/// JIT caches are per (pin set, set of GPU archs): the second cell of a pair finds the first one's
/// kernels, a cell of other archs or pins gets its own folder, and `cache = "cold"` always starts
/// empty. Cells report their JIT time with a `GPUCOMPAT_METRIC` line.
#[test]
fn jit_caches_are_per_pins_and_archs_and_cells_report_jit_time() {
    let sandbox = Sandbox::new();
    let inventory = sandbox.file("inventory.toml", INVENTORY);
    let matrix = sandbox.file(
        "m.toml",
        r#"
[matrix]
fi = ["0.6.3", "0.6.8.post1"]
gpu = ["sm_90", "sm_89"]
rep = [1, 2]
[[matrix.include]]
fi = "0.6.3"
gpu = "sm_89"
cache = "cold"
[[matrix.include]]
fi = "0.6.8.post1"
gpu = "sm_90"
rep = 3
arch_list = "8.6"
[[matrix.include]]
fi = "0.6.8.post1"
gpu = "2xsm_90"
rep = 4
[packages]
fi = "flashinfer-python"
[env]
TORCH_CUDA_ARCH_LIST = "{arch_list}"
[resources]
gpus = "{gpu}"
[job]
command = """
test -d "$TRITON_CACHE_DIR" || mkdir -p "$TRITON_CACHE_DIR"
echo "$GPUCOMPAT_CELL_ID" >> "$TRITON_CACHE_DIR/kernels.txt"
echo "GPUCOMPAT_METRIC jit_s=2.5"
echo "$TRITON_CACHE_DIR" > "$OUT_DIR/$GPUCOMPAT_CELL_ID.cache"
"""
cache = "{cache}"
"#,
    );
    let out = sandbox.path().join("run");
    let cache = sandbox.path().join("cache");
    exits(
        run_serially(&inventory, &out, &cache, &matrix).env("OUT_DIR", sandbox.path()),
        &[0],
    );
    let records = records_by_id(&out);
    let folder = |id: &str| {
        std::fs::read_to_string(sandbox.path().join(format!("{id}.cache")))
            .expect("cache folder")
            .trim()
            .to_owned()
    };
    let hit = |id: &str| records[id]["metrics"]["jit_cache_hit"].as_bool();
    // Same pins and archs: one folder; the second cell finds the first one's kernels.
    // Two GPUs of the same arch build the same kernels as one: the same folder too. Whichever of
    // the three ran first missed; the other two found its kernels.
    let sharing = [
        "0.6.8.post1-sm_90-1",
        "0.6.8.post1-sm_90-2",
        "0.6.8.post1-2xsm_90-4",
    ];
    for id in sharing {
        assert_eq!(folder(id), folder(sharing[0]), "{id}");
    }
    let misses = sharing.iter().filter(|id| hit(id) == Some(false)).count();
    let hits = sharing.iter().filter(|id| hit(id) == Some(true)).count();
    assert_eq!((misses, hits), (1, 2), "{records:?}");
    // Other archs or other pins: other folders.
    assert_ne!(folder("0.6.8.post1-sm_90-1"), folder("0.6.8.post1-sm_89-1"));
    assert_ne!(folder("0.6.8.post1-sm_90-1"), folder("0.6.3-sm_90-1"));
    // Same pins and GPU, but kernels built for another arch list: never the same folder.
    assert_ne!(folder("0.6.8.post1-sm_90-1"), folder("0.6.8.post1-sm_90-3"));
    assert_eq!(hit("0.6.8.post1-sm_90-3"), Some(false));
    // Cold cells start empty every time and leave nothing behind for others.
    assert_eq!(hit("0.6.3-sm_89-1"), Some(false));
    assert_eq!(hit("0.6.3-sm_89-2"), Some(false));
    assert_ne!(folder("0.6.3-sm_89-1"), folder("0.6.3-sm_89-2"));
    for record in records.values() {
        assert_eq!(record["metrics"]["jit_s"], 2.5, "{record}");
    }
    // An arch list the cell inherits from the harness's environment counts as much as one its
    // matrix sets: the same cell, run again under TORCH_CUDA_ARCH_LIST=8.6, gets another folder.
    let native = folder("0.6.8.post1-sm_90-1");
    let rerun = gpucompat()
        .args([
            "run",
            "--grace",
            "1s",
            "--cell",
            "0.6.8.post1-sm_90-1",
            "--inventory",
        ])
        .arg(&inventory)
        .arg("--out")
        .arg(sandbox.path().join("rerun"))
        .arg("--cache-dir")
        .arg(&cache)
        .arg(&matrix)
        .env("OUT_DIR", sandbox.path())
        .env("TORCH_CUDA_ARCH_LIST", "8.6")
        .output()
        .expect("rerun");
    assert_eq!(rerun.status.code(), Some(0));
    assert_ne!(folder("0.6.8.post1-sm_90-1"), native);
}

/// A warm cache is one the cell compiled nothing into: a cell that finds kernels in its JIT cache
/// but builds a new one (another shape, another kernel) is a miss, its start a (partly) cold one.
#[test]
fn a_cell_that_compiles_into_a_filled_cache_is_a_miss() {
    let sandbox = Sandbox::new();
    let inventory = sandbox.file("inventory.toml", INVENTORY);
    let matrix = sandbox.file(
        "m.toml",
        r#"
[matrix]
step = ["build-a", "build-b", "load-a-b", "load-a"]
[resources]
gpus = "sm_90"
[job]
command = """
mkdir -p "$TRITON_CACHE_DIR"
case "$GPUCOMPAT_STEP" in
  build-a) echo a > "$TRITON_CACHE_DIR/a.cubin" ;;
  build-b) echo b > "$TRITON_CACHE_DIR/b.cubin" ;;
  load-*) cat "$TRITON_CACHE_DIR/a.cubin" ;;
esac
"""
"#,
    );
    let out = sandbox.path().join("run");
    exits(
        &mut run_serially(&inventory, &out, &sandbox.path().join("cache"), &matrix),
        &[0],
    );
    let hits: HashMap<String, Option<bool>> = records_by_id(&out)
        .into_iter()
        .map(|(id, r)| (id, r["metrics"]["jit_cache_hit"].as_bool()))
        .collect();
    // One GPU and `--jobs 1`: the cells run in matrix order, sharing one cache.
    assert_eq!(hits["build-a"], Some(false), "an empty cache: {hits:?}");
    assert_eq!(
        hits["build-b"],
        Some(false),
        "a filled cache, a new kernel: {hits:?}"
    );
    assert_eq!(hits["load-a-b"], Some(true), "{hits:?}");
    assert_eq!(hits["load-a"], Some(true), "{hits:?}");
}
