//! A verdict does not depend on what delivered the log. The same failure reaches users through
//! docker compose, `kubectl logs`, a container runtime's log file, CI systems' timestamps, Ray's
//! worker prefixes, Slurm, torchrun, mpirun, pdsh, journald, or quoted in an issue: each puts its
//! own prefix on every line. Every corpus log of a fixed sample is wrapped in each of them, and
//! each wrapped copy must get the bare log's signature, whether a rule or the lexical model named
//! it (the model once read the prefixes as words: a compose service's name on every line turned
//! eighty wrong-output verdicts into `unknown`).

use crate::util::{classify_jsonl, repo_root};
use std::path::PathBuf;

const REAL: &str = "tests/fixtures/corpus/real";

/// One corpus log in this many is wrapped, chosen by a hash of its id (the sample is fixed by the
/// data, and grows with the corpus).
const ONE_IN: u64 = 32;

/// A delivery's mark on line `n` of a log: what goes before the line and what after it.
struct Wrapper {
    name: &'static str,
    prefix: fn(usize) -> String,
    suffix: &'static str,
}

/// Seconds into a minute, and a fraction, that move with the line (timestamps are never alike).
fn clock(n: usize) -> (usize, usize, usize) {
    (n / 60 % 60, n % 60, n * 7919 % 1_000_000_000)
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "docker compose",
        prefix: |_| "vllm-1  | ".into(),
        suffix: "",
    },
    Wrapper {
        name: "docker compose, coloured",
        prefix: |_| "\u{1b}[36mvllm-1  |\u{1b}[0m ".into(),
        suffix: "",
    },
    Wrapper {
        name: "kubectl logs --timestamps",
        prefix: |n| {
            let (m, s, f) = clock(n);
            format!("2025-03-01T12:{m:02}:{s:02}.{f:09}Z ")
        },
        suffix: "",
    },
    Wrapper {
        name: "a container runtime's log file (CRI)",
        prefix: |n| {
            let (m, s, f) = clock(n);
            format!("2025-03-01T12:{m:02}:{s:02}.{f:09}Z stderr F ")
        },
        suffix: "",
    },
    Wrapper {
        name: "kubectl logs --prefix",
        prefix: |_| "[pod/vllm-0/vllm] ".into(),
        suffix: "",
    },
    Wrapper {
        name: "GitHub Actions",
        prefix: |n| {
            let (_, s, f) = clock(n);
            format!("2025-03-01T12:00:{s:02}.{:07}Z ", f % 10_000_000)
        },
        suffix: "",
    },
    Wrapper {
        name: "Buildkite's timestamp escapes",
        prefix: |n| format!("\u{1b}_bk;t={}\u{7}", 1_711_111_111_111_u64 + n as u64),
        suffix: "",
    },
    Wrapper {
        name: "Jenkins timestamper",
        prefix: |n| {
            let (_, s, f) = clock(n);
            format!("[2025-03-01T12:00:{s:02}.{:03}Z] ", f % 1000)
        },
        suffix: "",
    },
    Wrapper {
        name: "Jenkins timestamper, time of day",
        prefix: |n| {
            let (m, s, _) = clock(n);
            format!("12:{m:02}:{s:02} ")
        },
        suffix: "",
    },
    Wrapper {
        name: "a job piped through ts",
        prefix: |n| {
            let (m, s, _) = clock(n);
            format!("Jul 25 04:{m:02}:{s:02} ")
        },
        suffix: "",
    },
    Wrapper {
        name: "Ray worker",
        prefix: |_| "(RayWorkerWrapper pid=1234, ip=10.0.0.1) ".into(),
        suffix: "",
    },
    Wrapper {
        name: "Ray worker, coloured",
        prefix: |_| "\u{1b}[36m(RayWorkerWrapper pid=1234)\u{1b}[0m ".into(),
        suffix: "",
    },
    Wrapper {
        name: "journald",
        prefix: |_| "Mar 01 12:00:00 gpu-node-3 python3[4242]: ".into(),
        suffix: "",
    },
    Wrapper {
        name: "srun --label",
        prefix: |_| "3: ".into(),
        suffix: "",
    },
    Wrapper {
        name: "torchrun's rank",
        prefix: |_| "[rank3]: ".into(),
        suffix: "",
    },
    Wrapper {
        name: "torchrun --tee",
        prefix: |_| "[default3]:".into(),
        suffix: "",
    },
    Wrapper {
        name: "mpirun --tag-output",
        prefix: |_| "[1,3]<stderr>:".into(),
        suffix: "",
    },
    Wrapper {
        name: "pdsh (DeepSpeed multi-node)",
        prefix: |_| "worker-1: ".into(),
        suffix: "",
    },
    Wrapper {
        name: "docker build (BuildKit)",
        prefix: |n| format!("#12 {}.{} ", 40 + n / 10, n % 10),
        suffix: "",
    },
    Wrapper {
        name: "a Markdown quote",
        prefix: |_| "> ".into(),
        suffix: "",
    },
    Wrapper {
        name: "CRLF line ends",
        prefix: |_| String::new(),
        suffix: "\r",
    },
];

/// FNV-1a, 64 bits, as the corpus test's folds use it.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The sampled corpus logs, in id order.
fn sample() -> Vec<PathBuf> {
    let dir = repo_root().join(REAL);
    let mut ids: Vec<(u64, String)> = std::fs::read_dir(&dir)
        .expect("corpus folder")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let id = name.strip_suffix(".log")?.to_owned();
            let number = id.strip_prefix('r')?.parse().ok()?;
            (fnv1a(&id) % ONE_IN == 0).then_some((number, id))
        })
        .collect();
    ids.sort();
    ids.into_iter()
        .map(|(_, id)| dir.join(format!("{id}.log")))
        .collect()
}

/// `raw` with every line marked by `wrapper` (a last line without a newline too).
fn wrap(raw: &[u8], wrapper: &Wrapper) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() * 2);
    let body = raw.strip_suffix(b"\n").unwrap_or(raw);
    for (n, line) in body.split(|&b| b == b'\n').enumerate() {
        out.extend_from_slice((wrapper.prefix)(n).as_bytes());
        out.extend_from_slice(line);
        out.extend_from_slice(wrapper.suffix.as_bytes());
        out.push(b'\n');
    }
    out
}

fn signatures(files: &[PathBuf]) -> Vec<String> {
    classify_jsonl(files, &[])
        .iter()
        .map(|v| v["signature"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_wrapped_log_keeps_its_verdict() {
    let logs = sample();
    assert!(logs.len() > 100, "a sample of {} logs", logs.len());
    let bare = signatures(&logs);
    let dir = tempfile::tempdir().expect("temp dir");
    // One folder per wrapper, every wrapped copy classified by one run per core.
    let mut wrapped = Vec::new();
    for (w, wrapper) in WRAPPERS.iter().enumerate() {
        let folder = dir.path().join(w.to_string());
        std::fs::create_dir(&folder).expect("wrapper folder");
        for log in &logs {
            let raw = std::fs::read(log).expect("corpus log");
            let to = folder.join(log.file_name().expect("log name"));
            std::fs::write(&to, wrap(&raw, wrapper)).expect("wrapped log");
            wrapped.push(to);
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunks: Vec<&[PathBuf]> = wrapped.chunks(wrapped.len().div_ceil(cores)).collect();
    let got: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = chunks
            .iter()
            .map(|chunk| scope.spawn(move || signatures(chunk)))
            .collect();
        runs.into_iter()
            .flat_map(|run| run.join().expect("classify thread"))
            .collect()
    });
    assert_eq!(got.len(), wrapped.len(), "one verdict per wrapped log");
    let mut changed = Vec::new();
    for (w, wrapper) in WRAPPERS.iter().enumerate() {
        let theirs = &got[w * logs.len()..(w + 1) * logs.len()];
        for ((log, before), after) in logs.iter().zip(&bare).zip(theirs) {
            if before != after {
                let name = log.file_name().unwrap_or_default().to_string_lossy();
                changed.push(format!("{name} in {}: {before} -> {after}", wrapper.name));
            }
        }
    }
    println!(
        "{} logs x {} wrappers: {} verdicts changed",
        logs.len(),
        WRAPPERS.len(),
        changed.len()
    );
    assert!(
        changed.is_empty(),
        "verdicts that depend on the log's wrapper:\n{}",
        changed.join("\n")
    );
}

#[test]
fn wrapping_marks_every_line_and_keeps_the_rest() {
    let quote = WRAPPERS
        .iter()
        .find(|w| w.name == "a Markdown quote")
        .expect("quote wrapper");
    assert_eq!(wrap(b"a\nb\n", quote), b"> a\n> b\n");
    assert_eq!(wrap(b"a\n\nb", quote), b"> a\n> \n> b\n");
    let crlf = WRAPPERS
        .iter()
        .find(|w| w.name == "CRLF line ends")
        .expect("CRLF wrapper");
    assert_eq!(wrap(b"a\nb\n", crlf), b"a\r\nb\r\n");
}
