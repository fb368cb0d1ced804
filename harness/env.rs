//! Every environment variable gpucompat reads from its own environment or sets for a cell, named
//! and documented once (as uv's `EnvVars`). The process environment is read here and nowhere else:
//! `clippy.toml` makes `std::env::var`/`var_os` outside this file a lint error, so a new variable
//! cannot slip in without a line here (and a test checks that docs/ names every one).

use std::ffi::OsString;

/// The names. Users meet them in docs/cli.md (what the harness reads) and docs/matrix.md, "What a
/// cell sees" (what it sets).
#[derive(Debug)]
pub struct EnvVars;

impl EnvVars {
    // What the harness reads.

    /// Where environments and JIT caches live when `--cache-dir` is not given.
    pub const GPUCOMPAT_CACHE_DIR: &'static str = "GPUCOMPAT_CACHE_DIR";
    /// `uv` or `pip`: the installer environments are made with (default: uv when on `PATH`).
    pub const GPUCOMPAT_INSTALLER: &'static str = "GPUCOMPAT_INSTALLER";
    /// Budget of the capture taken when the watchdog calls a hang, before teardown (humantime,
    /// default `20s`; `0` turns the capture off).
    pub const GPUCOMPAT_HANG_CAPTURE: &'static str = "GPUCOMPAT_HANG_CAPTURE";
    /// The `py-spy` the hang capture uses (a path), or `off`; default: one on `PATH`, else one
    /// installed into the cache's `tools/` from the matrix's wheelhouse or the index.
    pub const GPUCOMPAT_PY_SPY: &'static str = "GPUCOMPAT_PY_SPY";
    /// A `tracing` filter for the harness's own diagnostics on stderr (off by default).
    pub const GPUCOMPAT_LOG: &'static str = "GPUCOMPAT_LOG";
    /// Set by CI systems: no live progress bar, plain lines instead.
    pub const CI: &'static str = "CI";
    /// The cache folder's parent when `GPUCOMPAT_CACHE_DIR` is unset (`$XDG_CACHE_HOME/gpucompat`).
    pub const XDG_CACHE_HOME: &'static str = "XDG_CACHE_HOME";
    /// Per-user runtime folder: the per-user port-lock folder lives there.
    pub const XDG_RUNTIME_DIR: &'static str = "XDG_RUNTIME_DIR";
    /// Where pip's per-user configuration is looked for (index URL for `bisect --from-index`).
    pub const XDG_CONFIG_HOME: &'static str = "XDG_CONFIG_HOME";
    /// The user's home: default cache (`~/.cache/gpucompat`) and pip configuration.
    pub const HOME: &'static str = "HOME";
    /// Searched for `uv`; extended with an environment's `bin/` for cells that run in one.
    pub const PATH: &'static str = "PATH";
    /// uv's index URL, honoured by `bisect --from-index`.
    pub const UV_INDEX_URL: &'static str = "UV_INDEX_URL";
    /// uv's default index, honoured by `bisect --from-index`.
    pub const UV_DEFAULT_INDEX: &'static str = "UV_DEFAULT_INDEX";
    /// pip's index URL, honoured by `bisect --from-index`.
    pub const PIP_INDEX_URL: &'static str = "PIP_INDEX_URL";
    /// pip's configuration file, honoured by `bisect --from-index`.
    pub const PIP_CONFIG_FILE: &'static str = "PIP_CONFIG_FILE";

    // What the harness sets for a cell (beside `GPUCOMPAT_<KEY>` for each of its values).

    /// The cell's id.
    pub const GPUCOMPAT_CELL_ID: &'static str = "GPUCOMPAT_CELL_ID";
    /// The cell's pins, `name==version` separated by spaces.
    pub const GPUCOMPAT_PINS: &'static str = "GPUCOMPAT_PINS";
    /// 1 for the first attempt, 2 for the first retry, ...
    pub const GPUCOMPAT_ATTEMPT: &'static str = "GPUCOMPAT_ATTEMPT";
    /// The loopback port leased to a server cell (also `{port}`).
    pub const GPUCOMPAT_PORT: &'static str = "GPUCOMPAT_PORT";
    /// The shipped probe engine's path, for probe-engine cells.
    pub const GPUCOMPAT_PROBE: &'static str = "GPUCOMPAT_PROBE";
    /// The interpreter of the cell's environment, when it has one.
    pub const GPUCOMPAT_PYTHON: &'static str = "GPUCOMPAT_PYTHON";
    /// The cell's JIT cache folder (per pin set, GPU archs and arch-list variables).
    pub const GPUCOMPAT_JIT_CACHE: &'static str = "GPUCOMPAT_JIT_CACHE";
    /// The run's token: the reaper finds a run's processes by it.
    pub const GPUCOMPAT_RUN_TOKEN: &'static str = "GPUCOMPAT_RUN_TOKEN";
    /// The cell attempt's token: teardown finds processes that left the group by it.
    pub const GPUCOMPAT_CELL_TOKEN: &'static str = "GPUCOMPAT_CELL_TOKEN";
    /// The cell's environment folder, when it has one.
    pub const VIRTUAL_ENV: &'static str = "VIRTUAL_ENV";
    /// The cell's GPUs, in the order it asked for them.
    pub const CUDA_VISIBLE_DEVICES: &'static str = "CUDA_VISIBLE_DEVICES";
    /// `PCI_BUS_ID`, so that `CUDA_VISIBLE_DEVICES` means what `nvidia-smi` says.
    pub const CUDA_DEVICE_ORDER: &'static str = "CUDA_DEVICE_ORDER";
    /// FlashInfer's JIT cache, inside the cell's JIT cache folder.
    pub const FLASHINFER_WORKSPACE_BASE: &'static str = "FLASHINFER_WORKSPACE_BASE";
    /// Triton's cache, inside the cell's JIT cache folder.
    pub const TRITON_CACHE_DIR: &'static str = "TRITON_CACHE_DIR";
    /// TorchInductor's cache, inside the cell's JIT cache folder.
    pub const TORCHINDUCTOR_CACHE_DIR: &'static str = "TORCHINDUCTOR_CACHE_DIR";
    /// vLLM's cache (its torch.compile artifacts, FlashInfer autotune configs), inside the cell's
    /// JIT cache folder: left at `~/.cache/vllm`, one cell's compiles would warm another's.
    pub const VLLM_CACHE_ROOT: &'static str = "VLLM_CACHE_ROOT";
    /// The CUDA driver's cache of PTX JIT-compiled to this GPU's SASS, inside the cell's JIT
    /// cache folder: kernels built for another arch are then compiled per cache, as they are
    /// on a fresh runner.
    pub const CUDA_CACHE_PATH: &'static str = "CUDA_CACHE_PATH";

    // Arch-list variables: part of the JIT cache key, from the matrix's `[env]` or the harness's.

    /// PyTorch extensions' target archs.
    pub const TORCH_CUDA_ARCH_LIST: &'static str = "TORCH_CUDA_ARCH_LIST";
    /// FlashInfer's JIT target archs.
    pub const FLASHINFER_CUDA_ARCH_LIST: &'static str = "FLASHINFER_CUDA_ARCH_LIST";
    /// CMake's target archs.
    pub const CUDAARCHS: &'static str = "CUDAARCHS";
    /// Other builders' target archs.
    pub const CUDA_ARCH_LIST: &'static str = "CUDA_ARCH_LIST";

    /// GitHub's REST API for `gate --github-pr`/`--sha` and `publish` (default api.github.com).
    pub const GITHUB_API_URL: &'static str = "GITHUB_API_URL";
    /// `owner/name` of the repository posted to.
    pub const GITHUB_REPOSITORY: &'static str = "GITHUB_REPOSITORY";
    /// The token GitHub requests carry (never printed).
    pub const GITHUB_TOKEN: &'static str = "GITHUB_TOKEN";
    /// The commit a gate's check run is on, when `--sha` is not given.
    pub const GITHUB_SHA: &'static str = "GITHUB_SHA";
    /// With `GITHUB_RUN_ID`: the Actions run linked as the full report.
    pub const GITHUB_SERVER_URL: &'static str = "GITHUB_SERVER_URL";
    /// The Actions run's id.
    pub const GITHUB_RUN_ID: &'static str = "GITHUB_RUN_ID";

    /// Every variable the harness reads from its own environment.
    pub const READ: &'static [&'static str] = &[
        Self::GPUCOMPAT_CACHE_DIR,
        Self::GPUCOMPAT_INSTALLER,
        Self::GPUCOMPAT_LOG,
        Self::GPUCOMPAT_HANG_CAPTURE,
        Self::GPUCOMPAT_PY_SPY,
        Self::CI,
        Self::XDG_CACHE_HOME,
        Self::XDG_RUNTIME_DIR,
        Self::XDG_CONFIG_HOME,
        Self::HOME,
        Self::PATH,
        Self::UV_INDEX_URL,
        Self::UV_DEFAULT_INDEX,
        Self::PIP_INDEX_URL,
        Self::PIP_CONFIG_FILE,
        Self::TORCH_CUDA_ARCH_LIST,
        Self::FLASHINFER_CUDA_ARCH_LIST,
        Self::CUDAARCHS,
        Self::CUDA_ARCH_LIST,
        Self::VIRTUAL_ENV,
        Self::GITHUB_API_URL,
        Self::GITHUB_REPOSITORY,
        Self::GITHUB_TOKEN,
        Self::GITHUB_SHA,
        Self::GITHUB_SERVER_URL,
        Self::GITHUB_RUN_ID,
    ];

    /// Every variable the harness sets for a cell.
    pub const SET_FOR_CELLS: &'static [&'static str] = &[
        Self::GPUCOMPAT_CELL_ID,
        Self::GPUCOMPAT_PINS,
        Self::GPUCOMPAT_ATTEMPT,
        Self::GPUCOMPAT_PORT,
        Self::GPUCOMPAT_PROBE,
        Self::GPUCOMPAT_PYTHON,
        Self::GPUCOMPAT_JIT_CACHE,
        Self::GPUCOMPAT_RUN_TOKEN,
        Self::GPUCOMPAT_CELL_TOKEN,
        Self::VIRTUAL_ENV,
        Self::PATH,
        Self::CUDA_VISIBLE_DEVICES,
        Self::CUDA_DEVICE_ORDER,
        Self::FLASHINFER_WORKSPACE_BASE,
        Self::TRITON_CACHE_DIR,
        Self::TORCHINDUCTOR_CACHE_DIR,
        Self::VLLM_CACHE_ROOT,
        Self::CUDA_CACHE_PATH,
    ];
}

/// `GPUCOMPAT_<KEY>`: the variable that carries a cell's value of `key` (upper-cased, `-` as `_`).
pub fn value_var(key: &str) -> String {
    format!("GPUCOMPAT_{}", key.to_ascii_uppercase().replace('-', "_"))
}

/// The harness's own value of `name`, if set and valid Unicode.
#[allow(
    clippy::disallowed_methods,
    reason = "the one place that reads the environment"
)]
pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The harness's own value of `name`, if set.
#[allow(
    clippy::disallowed_methods,
    reason = "the one place that reads the environment"
)]
pub fn var_os(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("docs")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn the_docs_name_every_variable() {
        let docs = [doc("cli.md"), doc("matrix.md")].concat();
        let missing: Vec<&str> = EnvVars::READ
            .iter()
            .chain(EnvVars::SET_FOR_CELLS)
            .copied()
            .filter(|name| !docs.contains(&format!("`{name}`")))
            .collect();
        assert!(missing.is_empty(), "docs/ never names {missing:?}");
    }

    #[test]
    fn value_variables_are_upper_case_with_underscores() {
        assert_eq!(value_var("flashinfer"), "GPUCOMPAT_FLASHINFER");
        assert_eq!(value_var("max-tokens"), "GPUCOMPAT_MAX_TOKENS");
    }
}
