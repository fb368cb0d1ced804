//! The GPUs of this host: declared in an inventory file (`--inventory FILE`) or detected with
//! `nvidia-smi`. Each GPU has an arch name (`sm_90`) that cells' `[resources] gpus` ask for.
//!
//! ```toml
//! host = "rig-3"              # optional; defaults to this machine's hostname
//! [[gpu]]
//! index = 0
//! name = "NVIDIA GeForce RTX 3090"
//! arch = "sm_86"
//! ```

use crate::exec::probe;
use crate::matrix::gpus;
use crate::record::GpuInfo;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// The GPUs a run may use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    pub host: String,
    pub gpus: Vec<GpuInfo>,
    /// Where the list came from, for messages (`nvidia-smi`, a file path, `none`).
    pub source: String,
}

/// An inventory file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot read inventory `{path}`")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid inventory `{path}`: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInventory {
    host: Option<String>,
    #[serde(default)]
    gpu: Vec<RawGpu>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    index: u32,
    name: String,
    arch: String,
    memory_mib: Option<u64>,
    uuid: Option<String>,
}

/// Reads and validates an inventory file.
pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InventoryError::Read {
        path: shown.clone(),
        source,
    })?;
    let invalid = |message: String| InventoryError::Invalid {
        path: shown.clone(),
        message,
    };
    let raw: RawInventory = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let mut seen = Vec::new();
    for gpu in &raw.gpu {
        if !gpus::is_arch(&gpu.arch) {
            return Err(invalid(format!(
                "GPU {}: `{}` is not an arch (expected e.g. `sm_90`)",
                gpu.index, gpu.arch
            )));
        }
        if seen.contains(&gpu.index) {
            return Err(invalid(format!("GPU index {} is listed twice", gpu.index)));
        }
        seen.push(gpu.index);
    }
    Ok(Inventory {
        host: raw.host.unwrap_or_else(hostname),
        gpus: raw
            .gpu
            .into_iter()
            .map(|g| GpuInfo {
                index: g.index,
                name: g.name,
                arch: g.arch,
                memory_mib: g.memory_mib,
                uuid: g.uuid,
            })
            .collect(),
        source: shown,
    })
}

/// Asks `nvidia-smi`; a host without it (or without GPUs) has an empty inventory.
pub fn detect() -> Inventory {
    let query = probe::capture(
        "nvidia-smi",
        &[
            "--query-gpu=index,name,compute_cap,memory.total,uuid",
            "--format=csv,noheader,nounits",
        ],
        Duration::from_secs(30),
    );
    match query {
        Ok(text) => Inventory {
            host: hostname(),
            gpus: parse_nvidia_smi(&text),
            source: "nvidia-smi".to_owned(),
        },
        Err(_) => Inventory {
            host: hostname(),
            gpus: Vec::new(),
            source: "none (nvidia-smi not available)".to_owned(),
        },
    }
}

/// The GPUs of `inventory` that a Slurm task was given: those `CUDA_VISIBLE_DEVICES` names (as
/// Slurm sets it for `--gres=gpu`), by index or UUID, in its order. Where the node shows only the
/// allocated GPUs (device cgroups renumber them), the whole inventory is the allocation. Without
/// the variable, nothing is known and the inventory is kept.
pub fn allocated(inventory: Inventory, visible: Option<&str>) -> Inventory {
    let Some(visible) = visible else {
        return inventory;
    };
    let entries: Vec<&str> = visible
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    let picked: Vec<GpuInfo> = entries
        .iter()
        .filter_map(|entry| {
            inventory.gpus.iter().find(|g| {
                entry.parse::<u32>().is_ok_and(|i| i == g.index)
                    || g.uuid.as_deref() == Some(*entry)
            })
        })
        .cloned()
        .collect();
    let gpus = if picked.is_empty() && inventory.gpus.len() == entries.len() {
        inventory.gpus
    } else {
        picked
    };
    Inventory {
        host: inventory.host,
        gpus,
        source: format!(
            "{} (Slurm allocation: CUDA_VISIBLE_DEVICES={visible})",
            inventory.source
        ),
    }
}

/// Parses `index, name, compute_cap, memory.total, uuid` CSV lines (memory in MiB, as
/// `--format=csv,noheader,nounits` prints it; the last two may be missing or `[N/A]`).
pub fn parse_nvidia_smi(text: &str) -> Vec<GpuInfo> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(',').map(str::trim);
            let index = fields.next()?.parse().ok()?;
            let name = fields.next()?.to_owned();
            let arch = arch_of_capability(fields.next()?)?;
            let memory_mib = fields
                .next()
                .and_then(|m| m.trim_end_matches("MiB").trim().parse().ok());
            let uuid = fields
                .next()
                .filter(|u| u.starts_with("GPU-") || u.starts_with("MIG-"))
                .map(str::to_owned);
            Some(GpuInfo {
                index,
                name,
                arch,
                memory_mib,
                uuid,
            })
        })
        .collect()
}

/// `"9.0"` -> `sm_90`, `"12.0"` -> `sm_120`, `"8.6"` -> `sm_86`.
pub fn arch_of_capability(capability: &str) -> Option<String> {
    let (major, minor) = capability.trim().split_once('.')?;
    let major: u32 = major.parse().ok()?;
    let minor: u32 = minor.parse().ok()?;
    Some(format!("sm_{major}{minor}"))
}

/// Whether a GPU of arch `have` serves a cell asking for `want`: the same arch, where `sm_90a`
/// (arch-specific features) needs an sm_90 card and `sm_100f` (family) any sm_10x card.
pub fn serves(have: &str, want: &str) -> bool {
    let base = |arch: &str| arch.trim_end_matches(['a', 'f']).to_owned();
    if let Some(family) = want.strip_suffix('f') {
        let digits = family.trim_start_matches("sm_");
        let have_digits = base(have);
        let have_digits = have_digits.trim_start_matches("sm_");
        return digits.len() == have_digits.len()
            && digits.get(..digits.len() - 1) == have_digits.get(..have_digits.len() - 1);
    }
    base(have) == base(want)
}

/// This machine's hostname.
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_to_arch() {
        assert_eq!(arch_of_capability("8.6").as_deref(), Some("sm_86"));
        assert_eq!(arch_of_capability("9.0").as_deref(), Some("sm_90"));
        assert_eq!(arch_of_capability("12.0").as_deref(), Some("sm_120"));
        assert_eq!(arch_of_capability("11.0").as_deref(), Some("sm_110"));
        assert_eq!(arch_of_capability("x"), None);
    }

    #[test]
    fn parses_nvidia_smi_csv() {
        let gpus = parse_nvidia_smi(
            "0, NVIDIA H100 80GB HBM3, 9.0, 81559, GPU-5e1d2f7a-0000-1111-2222-333344445555\n\
             1, NVIDIA GeForce RTX 3090, 8.6, 24576, [N/A]\n\
             2, NVIDIA Jetson Thor, 11.0\n",
        );
        assert_eq!(gpus.len(), 3);
        assert_eq!(gpus[1].arch, "sm_86");
        assert_eq!(gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpus[0].memory_mib, Some(81559));
        assert_eq!(
            gpus[0].uuid.as_deref(),
            Some("GPU-5e1d2f7a-0000-1111-2222-333344445555")
        );
        assert_eq!(gpus[1].uuid, None);
        assert_eq!(gpus[2].arch, "sm_110");
        assert_eq!(gpus[2].memory_mib, None);
    }

    #[test]
    fn a_slurm_allocation_narrows_the_inventory() {
        let gpu = |index, uuid: &str| GpuInfo {
            index,
            name: "H100".into(),
            arch: "sm_90".into(),
            memory_mib: None,
            uuid: Some(uuid.into()),
        };
        let all = Inventory {
            host: "node1".into(),
            gpus: vec![gpu(0, "GPU-a"), gpu(1, "GPU-b"), gpu(2, "GPU-c")],
            source: "nvidia-smi".into(),
        };
        let indices = |inv: &Inventory| inv.gpus.iter().map(|g| g.index).collect::<Vec<_>>();
        assert_eq!(indices(&allocated(all.clone(), Some("2,0"))), [2, 0]);
        assert_eq!(indices(&allocated(all.clone(), Some("GPU-b"))), [1]);
        assert_eq!(indices(&allocated(all.clone(), None)), [0, 1, 2]);
        assert!(allocated(all.clone(), Some("")).gpus.is_empty());
        let one = Inventory {
            gpus: vec![gpu(0, "GPU-c")],
            ..all
        };
        // A device cgroup shows only the allocated card, as index 0, while Slurm names it 2.
        assert_eq!(indices(&allocated(one, Some("2"))), [0]);
    }

    #[test]
    fn arch_matching() {
        assert!(serves("sm_90", "sm_90"));
        assert!(serves("sm_90", "sm_90a"));
        assert!(!serves("sm_89", "sm_90"));
        assert!(serves("sm_103", "sm_100f"));
        assert!(serves("sm_100", "sm_100a"));
        assert!(serves("sm_121", "sm_120f"));
        assert!(!serves("sm_110", "sm_100f"));
        assert!(!serves("sm_120", "sm_100f"));
        assert!(!serves("sm_86", "sm_89"));
    }
}
