//! What a cell's command sees: its environment (docs/matrix.md, "What a cell sees"), its JIT cache folder and
//! the environment the plan asked to install for it.

use super::{AttemptCx, Facts, Halt, Trouble, error_chain, round3};
use crate::digest::sha256_hex;
use crate::env::EnvVars;
use crate::exec::process;
use crate::matrix::template::value_text;
use crate::matrix::{CacheMode, Cell};
use crate::provision::{self, EnvSpec, ProvisionError, Provisioned};
use crate::record::{GpuInfo, Phase};
use std::path::{Path, PathBuf};

/// The environment a cell's command gets over the harness's own (docs/matrix.md, "What a cell sees").
pub(super) fn cell_env(
    cell: &Cell,
    gpus: &[GpuInfo],
    attempt: u32,
    jit_dir: &Path,
    venv: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = vec![
        (EnvVars::GPUCOMPAT_CELL_ID.to_owned(), cell.id.to_string()),
        (EnvVars::GPUCOMPAT_PINS.to_owned(), cell.pins_text()),
        (EnvVars::GPUCOMPAT_ATTEMPT.to_owned(), attempt.to_string()),
        (
            EnvVars::CUDA_VISIBLE_DEVICES.to_owned(),
            gpus.iter()
                .map(|g| g.index.to_string())
                .collect::<Vec<_>>()
                .join(","),
        ),
        // GPUs in the order the cell asked for them, as the driver will number them.
        (
            EnvVars::CUDA_DEVICE_ORDER.to_owned(),
            "PCI_BUS_ID".to_owned(),
        ),
    ];
    for (key, value) in &cell.values {
        env.push((crate::env::value_var(key), value_text(value)));
    }
    let jit = |sub: &str| jit_dir.join(sub).display().to_string();
    env.push((
        EnvVars::GPUCOMPAT_JIT_CACHE.to_owned(),
        jit_dir.display().to_string(),
    ));
    env.push((
        EnvVars::FLASHINFER_WORKSPACE_BASE.to_owned(),
        jit("flashinfer"),
    ));
    env.push((EnvVars::TRITON_CACHE_DIR.to_owned(), jit("triton")));
    env.push((EnvVars::TORCHINDUCTOR_CACHE_DIR.to_owned(), jit("inductor")));
    env.push((EnvVars::VLLM_CACHE_ROOT.to_owned(), jit("vllm")));
    env.push((EnvVars::CUDA_CACHE_PATH.to_owned(), jit("cuda")));
    env.extend(venv.iter().cloned());
    // The matrix file's `[env]` comes last: it may override anything above on purpose.
    env.extend(cell.env.iter().cloned());
    env
}

/// Variables that choose which GPU archs a JIT compiles for (torch extensions, FlashInfer,
/// Triton-free CUDA builds): part of a warm cache's key.
const JIT_TARGET_VARS: &[&str] = &[
    EnvVars::TORCH_CUDA_ARCH_LIST,
    EnvVars::FLASHINFER_CUDA_ARCH_LIST,
    EnvVars::CUDAARCHS,
    EnvVars::CUDA_ARCH_LIST,
];

/// The JIT cache folder of a cell: shared per (pin set, GPU archs) when warm, fresh when cold.
pub(super) fn jit_dir(
    shared: &super::Shared,
    cell: &Cell,
    gpus: &[GpuInfo],
    attempt: u32,
) -> PathBuf {
    match cell.cache {
        CacheMode::Cold => shared
            .root
            .join("cache")
            .join(format!("{}.attempt{attempt}", cell.id)),
        CacheMode::Warm => {
            // The set of archs, not the list: a JIT builds per arch, so a one-GPU cell and a
            // two-GPU cell of the same arch and pins share kernels (on two H200s, keying by the
            // list made single-GPU cells after a `2xsm_90` one compile their kernels again, 118 s).
            let archs: std::collections::BTreeSet<&str> =
                gpus.iter().map(|g| g.arch.as_str()).collect();
            let archs: Vec<&str> = archs.into_iter().collect();
            let archs = if archs.is_empty() {
                "cpu".to_owned()
            } else {
                archs.join("+")
            };
            // What a JIT compiles for is also chosen by the arch-list variables: kernels built
            // for `8.6` must never be found by a cell that builds for the GPU (or the reverse).
            // The value the cell will see: the matrix's `[env]` (last one wins), else the
            // harness's own environment, which the cell inherits.
            let targets: Vec<String> = JIT_TARGET_VARS
                .iter()
                .filter_map(|name| {
                    let value = cell
                        .env
                        .iter()
                        .rev()
                        .find(|(key, _)| key == name)
                        .map(|(_, value)| value.clone())
                        .or_else(|| crate::env::var(name))?;
                    Some(format!("{name}={value}"))
                })
                .collect();
            let hash = sha256_hex(
                format!("{}\n{archs}\n{}", cell.pins_text(), targets.join("\n")).as_bytes(),
                6,
            );
            shared
                .cache_root
                .join("jit")
                .join(format!("{}-{hash}", archs.replace('+', "_")))
        }
    }
}

/// Installs (or finds) the cell's environment when the plan asks for one, and returns the
/// variables that put it first: `VIRTUAL_ENV`, `PATH`, `GPUCOMPAT_PYTHON`.
pub(super) async fn provision_env(
    cx: &mut AttemptCx<'_>,
    facts: &mut Facts,
) -> Result<Vec<(String, String)>, Halt> {
    let spec = match EnvSpec::for_cell(&cx.shared.plan, cx.cell) {
        Ok(Some(spec)) => spec,
        Ok(None) => return Ok(Vec::new()),
        Err(err) => {
            facts.phase = Phase::Provision;
            return Err(Trouble::Infra(error_chain(&err)).into());
        }
    };
    facts.phase = Phase::Provision;
    cx.show_phase(Phase::Provision);
    let shared = cx.shared;
    let cell_token = cx.cell_token();
    let pcx = provision::Context {
        cache_root: &shared.cache_root,
        cwd: &shared.plan.dir,
        run_token: &shared.run_token,
        cell_token: &cell_token,
        reaper: shared.reaper.as_ref(),
        grace: shared.grace,
    };
    let env = match provision::provision(&spec, &pcx, &cx.log, &mut cx.cancel).await {
        Ok(env) => env,
        Err(ProvisionError::Interrupted) => return Err(Halt::Interrupted),
        Err(err @ ProvisionError::Install { .. }) => {
            process::lock(&cx.log).note(&format!("environment: {err}"));
            return Err(Trouble::Provision(err.to_string()).into());
        }
        Err(err) => return Err(Trouble::Infra(error_chain(&err)).into()),
    };
    facts.metrics.provision_s = Some(round3(env.seconds));
    facts.phase = Phase::Launch;
    Ok(venv_vars(&env))
}

/// The variables that put an installed environment first.
fn venv_vars(env: &Provisioned) -> Vec<(String, String)> {
    let bin = env.dir.join("bin");
    let path = match crate::env::var_os(EnvVars::PATH) {
        Some(old) => format!("{}:{}", bin.display(), old.to_string_lossy()),
        None => bin.display().to_string(),
    };
    vec![
        (
            EnvVars::VIRTUAL_ENV.to_owned(),
            env.dir.display().to_string(),
        ),
        (EnvVars::PATH.to_owned(), path),
        (
            EnvVars::GPUCOMPAT_PYTHON.to_owned(),
            env.python.display().to_string(),
        ),
    ]
}

/// How many files a JIT cache folder holds (links not followed; a missing folder holds none).
/// Counted before and after a cell: a cell that added files compiled something, so its cache
/// was not (wholly) warm. Stops counting at [`CACHE_COUNT_LIMIT`], which no real cache reaches.
pub(super) fn cache_files(path: &Path) -> u64 {
    let mut count = 0u64;
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => folders.push(entry.path()),
                Ok(t) if t.is_file() => count += 1,
                _ => {}
            }
            if count >= CACHE_COUNT_LIMIT {
                return count;
            }
        }
    }
    count
}

const CACHE_COUNT_LIMIT: u64 = 10_000_000;
