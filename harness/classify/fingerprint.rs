//! Fingerprints: the root-cause line with everything that varies between nights and hosts taken out.
//!
//! Addresses, numbers, ranks, pids, timestamps, IPs, UUIDs and directories become placeholders;
//! exception, kernel and function names stay. The same failure on another host or night gets the
//! same fingerprint, so a dashboard can count it once; two different kernels failing with the same
//! signature keep different fingerprints.

use regex::{Captures, Regex};
use std::sync::LazyLock;

/// Longest fingerprint, in characters.
const MAX_LEN: usize = 200;

struct Normaliser {
    url: Regex,
    uuid: Regex,
    timestamp: Regex,
    date: Regex,
    time: Regex,
    path: Regex,
    ip: Regex,
    hex: Regex,
    long_hex: Regex,
    numbered_name: Regex,
    number: Regex,
    size: Regex,
    space: Regex,
}

static NORMALISER: LazyLock<Option<Normaliser>> = LazyLock::new(|| {
    Some(Normaliser {
        url: Regex::new(r#"\b[a-z][a-z0-9+.-]*://([^/\s'"<>)\]`]+)[^\s'"<>)\]`]*"#).ok()?,
        uuid: Regex::new(
            r"(?i)\b(?:GPU-|MIG-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
        )
        .ok()?,
        timestamp: Regex::new(
            r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?",
        )
        .ok()?,
        date: Regex::new(r"\b\d{1,4}[/-]\d{1,2}[/-]\d{2,4}(?:-\d\d:\d\d:\d\d)?\b").ok()?,
        time: Regex::new(r"\b\d{1,2}:\d\d:\d\d(?:[.,]\d+)?\b").ok()?,
        path: Regex::new(
            r"(?:[A-Za-z]:|~|\.{1,2})?(?:[\\/][\w.@+=,~-]*)+[\\/][\w.@+=,~-]+|[\w.@+~-]+(?:[\\/][\w.@+=,~-]+){2,}",
        )
        .ok()?,
        ip: Regex::new(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b").ok()?,
        hex: Regex::new(r"\b0[xX][0-9a-fA-F]+\b").ok()?,
        long_hex: Regex::new(r"\b[0-9a-fA-F]{12,}\b").ok()?,
        numbered_name: Regex::new(r"(?i)\b(rank|tp|dp|pp|ep|cp|gpu|cuda|device|worker|node|cpu)(\d+)\b|(?i)(_)(rank|tp|dp|pp|ep|cp)(\d+)\b")
            .ok()?,
        // No boundary after the digits: `5.6s` and `80GB` lose their numbers whole.
        number: Regex::new(r"\b\d+(?:\.\d+)*(?:[eE][-+]?\d+)?").ok()?,
        size: Regex::new(r"<n> ?(?:[KMGTP]i?B|bytes?)\b").ok()?,
        space: Regex::new(r"\s+").ok()?,
    })
});

/// Normalises a failure line (already stripped of its log prefixes) into a fingerprint.
pub fn fingerprint(line: &str) -> String {
    let Some(n) = NORMALISER.as_ref() else {
        return line.trim().to_owned();
    };
    let text = n.url.replace_all(line, "<url:$1>");
    let text = n.uuid.replace_all(&text, "<uuid>");
    let text = n.timestamp.replace_all(&text, "<time>");
    let text = n.date.replace_all(&text, "<time>");
    let text = n.time.replace_all(&text, "<time>");
    let text = n.ip.replace_all(&text, "<ip>");
    let text = n
        .path
        .replace_all(&text, |caps: &Captures<'_>| short_path(&caps[0]));
    let text = n.hex.replace_all(&text, "<hex>");
    let text = n.long_hex.replace_all(&text, |caps: &Captures<'_>| {
        let s = &caps[0];
        if s.bytes().any(|b| b.is_ascii_digit()) && s.bytes().any(|b| b.is_ascii_alphabetic()) {
            "<hex>".to_owned()
        } else {
            s.to_owned()
        }
    });
    let text = n
        .numbered_name
        .replace_all(&text, |caps: &Captures<'_>| match caps.get(1) {
            Some(name) => format!("{}<n>", name.as_str()),
            None => format!("_{}<n>", caps.get(4).map_or("", |m| m.as_str())),
        });
    let text = n.number.replace_all(&text, "<n>");
    let text = n.size.replace_all(&text, "<size>");
    let text = n.space.replace_all(&text, " ");
    let text = text.trim();
    match text.char_indices().nth(MAX_LEN) {
        Some((cut, _)) => text[..cut].to_owned(),
        None => text.to_owned(),
    }
}

/// A path without the directories that differ between hosts (`/home/alice/.venv/...`): its file
/// name, plus the parent folder when that folder names a kernel (`batch_prefill_with_kv_cache_...`,
/// as JIT caches file them), since that tells two failing kernels apart.
fn short_path(path: &str) -> String {
    let parts: Vec<&str> = path
        .split(['/', '\\'])
        .filter(|p| !p.is_empty() && *p != "." && *p != "..")
        .collect();
    let Some((&base, dirs)) = parts.split_last() else {
        return "<path>".to_owned();
    };
    let base = if is_temp_name(base) { "<tmp>" } else { base };
    match dirs.last() {
        Some(parent) if is_kernel_name(parent) => format!("<path>/{parent}/{base}"),
        _ => format!("<path>/{base}"),
    }
}

/// Random temporary names (`tmpab12cd34`, `ccXyZ123.s`) change every run.
fn is_temp_name(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or(name);
    (stem.starts_with("tmp") || stem.starts_with("cc"))
        && stem.len() >= 7
        && stem.bytes().any(|b| b.is_ascii_digit())
}

/// Folder names made of at least four `_`-separated words, like the JIT caches' per-kernel folders.
fn is_kernel_name(name: &str) -> bool {
    name.split('_').filter(|w| !w.is_empty()).count() >= 4
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normaliser_compiles() {
        assert!(NORMALISER.is_some());
    }

    #[test]
    fn same_failure_on_other_hosts_and_nights_has_one_fingerprint() {
        let groups: [&[&str]; 6] = [
            &[
                "[PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
                "[PG ID 0 PG GUID 0 Rank 3] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
            ],
            &[
                "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCTensorCopy.cu line=84 error=74 : misaligned address",
                "THCudaCheck FAIL file=/opt/build/pytorch/aten/src/THC/THCTensorCopy.cu line=91 error=74 : misaligned address",
            ],
            &[
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.06 GiB is free. Process 4242 has 78.02 GiB memory in use.",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 3 has a total capacity of 79.10 GiB of which 311.00 MiB is free. Process 977 has 78.80 GiB memory in use.",
            ],
            &[
                "ImportError: /home/alice/.venv/lib/python3.12/site-packages/flashinfer/_kernels.so: undefined symbol: _ZN3c104cuda9SetDeviceEa",
                "ImportError: /opt/conda/envs/ci/lib/python3.10/site-packages/flashinfer/_kernels.so: undefined symbol: _ZN3c104cuda9SetDeviceEa",
            ],
            &[
                "RuntimeError: Rank 0 timed out waiting for completion flag from rank 1 at 2025-06-01T02:03:04Z (host 10.0.0.12, pid 3312, ptr 0x7f3a2c000000)",
                "RuntimeError: Rank 2 timed out waiting for completion flag from rank 3 at 2025-07-11T22:13:54Z (host 10.0.1.7, pid 88, ptr 0x7ffe00001000)",
            ],
            &[
                "error: Request failed after 3 retries in 5.6s",
                "error: Request failed after 5 retries in 12.25s",
            ],
        ];
        for group in groups {
            let first = fingerprint(group[0]);
            for line in &group[1..] {
                assert_eq!(fingerprint(line), first, "{line}");
            }
        }
    }

    #[test]
    fn different_kernels_and_functions_stay_apart() {
        let pairs = [
            (
                "subprocess.CalledProcessError: Command '['ninja', '-v', '-C', '/root/.cache/flashinfer/80/cached_ops', '-f', '/root/.cache/flashinfer/80/cached_ops/batch_prefill_with_kv_cache_dtype_q_bf16_head_dim_qk_128/build.ninja']' returned non-zero exit status 1.",
                "subprocess.CalledProcessError: Command '['ninja', '-v', '-C', '/root/.cache/flashinfer/80/cached_ops', '-f', '/root/.cache/flashinfer/80/cached_ops/batch_decode_with_kv_cache_dtype_q_bf16_head_dim_qk_128/build.ninja']' returned non-zero exit status 1.",
            ),
            (
                "RuntimeError: Error building extension 'flashinfer_sampling'",
                "RuntimeError: Error building extension 'flashinfer_norm'",
            ),
            (
                "Fatal error: CUDA_ERROR_ILLEGAL_ADDRESS while launching fused_moe_kernel",
                "Fatal error: CUDA_ERROR_ILLEGAL_ADDRESS while launching matmul_ogs_kernel",
            ),
            (
                "RuntimeError: Unsupported head_dim: sm_90",
                "RuntimeError: Unsupported head_dim: sm_100",
            ),
        ];
        for (a, b) in pairs {
            assert_ne!(fingerprint(a), fingerprint(b), "{a}");
        }
    }

    #[test]
    fn placeholders_replace_what_varies() {
        assert_eq!(
            fingerprint(
                "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=158046, OpType=GATHER, Timeout(ms)=600000) ran for 600027 milliseconds before timing out."
            ),
            "[Rank <n>] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=<n>, OpType=GATHER, Timeout(ms)=<n>) ran for <n> milliseconds before timing out."
        );
        assert_eq!(
            fingerprint(
                "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled cuda error, NCCL version 2.20.5"
            ),
            "torch.distributed.DistBackendError: NCCL error in: <path>/NCCLUtils.hpp:<n>, unhandled cuda error, NCCL version <n>"
        );
        assert_eq!(
            fingerprint(
                "Worker proc VllmWorker-0 died on rank3 GPU-7bd40898-4568-2101-74b6-457316d58d11 at 0xdeadbeef"
            ),
            "Worker proc VllmWorker-<n> died on rank<n> <uuid> at <hex>"
        );
        assert_eq!(
            fingerprint("error: Failed to fetch: `https://pypi.org/simple/flashinfer-python/`"),
            "error: Failed to fetch: `<url:pypi.org>`"
        );
        assert_eq!(
            fingerprint("fatal error: error writing to /tmp/ccAbc123.s: No space left on device"),
            "fatal error: error writing to <path>/<tmp>: No space left on device"
        );
        // Names with digits stay: they identify kernels, dtypes and archs.
        assert_eq!(
            fingerprint(
                "ValueError(\"type fp8e4nv not supported in this architecture for sm_89\")"
            ),
            "ValueError(\"type fp8e4nv not supported in this architecture for sm_89\")"
        );
    }

    #[test]
    fn long_lines_are_capped() {
        let line = "x".repeat(1_000);
        assert_eq!(fingerprint(&line).chars().count(), MAX_LEN);
    }
}
