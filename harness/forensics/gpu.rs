//! `nvidia-smi` at a hang: each of the cell's GPUs (utilisation, memory) and the processes on
//! them, the cell's marked.

use crate::exec::probe;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One GPU's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    pub index: u32,
    pub uuid: String,
    pub utilization_pct: Option<f64>,
    pub memory_used_mib: Option<f64>,
}

/// A process using one of the cell's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: i32,
    pub gpu_uuid: String,
    pub memory_used_mib: Option<f64>,
    /// One of the cell's processes (a pid from another pid namespace is not).
    pub of_cell: bool,
}

/// What `nvidia-smi` said, or why nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuCapture {
    pub gpus: Vec<GpuState>,
    pub processes: Vec<GpuProcess>,
    pub note: Option<String>,
}

impl GpuCapture {
    pub fn not_asked() -> GpuCapture {
        GpuCapture {
            note: Some("the cell has no GPUs".to_owned()),
            ..GpuCapture::default()
        }
    }
}

fn number(text: &str) -> Option<f64> {
    text.trim().parse().ok()
}

/// Queries `nvidia-smi` for `gpus` (indices) and the compute processes on them.
pub fn capture(gpus: &[u32], cell_pids: &[i32], limit: Duration) -> GpuCapture {
    let ids = gpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let query = probe::capture(
        "nvidia-smi",
        &[
            "--query-gpu=index,uuid,utilization.gpu,memory.used",
            "--format=csv,noheader,nounits",
            "-i",
            &ids,
        ],
        limit,
    );
    let text = match query {
        Ok(text) => text,
        Err(err) => {
            return GpuCapture {
                note: Some(format!("no GPU state: {err}")),
                ..GpuCapture::default()
            };
        }
    };
    let states = parse_gpus(&text);
    let apps = probe::capture(
        "nvidia-smi",
        &[
            "--query-compute-apps=pid,gpu_uuid,used_memory",
            "--format=csv,noheader,nounits",
        ],
        limit,
    );
    let (processes, note) = match apps {
        Ok(text) => (parse_apps(&text, &states, cell_pids), None),
        Err(err) => (Vec::new(), Some(format!("no GPU processes: {err}"))),
    };
    GpuCapture {
        gpus: states,
        processes,
        note,
    }
}

fn parse_gpus(text: &str) -> Vec<GpuState> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            Some(GpuState {
                index: f.first()?.parse().ok()?,
                uuid: (*f.get(1)?).to_owned(),
                utilization_pct: f.get(2).and_then(|v| number(v)),
                memory_used_mib: f.get(3).and_then(|v| number(v)),
            })
        })
        .collect()
}

fn parse_apps(text: &str, gpus: &[GpuState], cell_pids: &[i32]) -> Vec<GpuProcess> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            let pid: i32 = f.first()?.parse().ok()?;
            let uuid = (*f.get(1)?).to_owned();
            gpus.iter().any(|g| g.uuid == uuid).then(|| GpuProcess {
                pid,
                gpu_uuid: uuid,
                memory_used_mib: f.get(2).and_then(|v| number(v)),
                of_cell: cell_pids.contains(&pid),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_gpus_and_keeps_processes_on_the_cells_gpus() {
        let gpus = parse_gpus("0, GPU-aaa, 0, 1234\n1, GPU-bbb, [N/A], 5\n");
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].utilization_pct, Some(0.0));
        assert_eq!(gpus[1].utilization_pct, None);
        let apps = parse_apps("42, GPU-aaa, 900\n43, GPU-zzz, 10\n", &gpus[..1], &[42]);
        assert_eq!(apps.len(), 1);
        assert!(apps[0].of_cell);
        assert_eq!(apps[0].memory_used_mib, Some(900.0));
    }

    #[test]
    fn a_host_without_nvidia_smi_says_so() {
        let c = capture(&[0], &[], Duration::from_secs(5));
        if c.gpus.is_empty() {
            assert!(c.note.is_some_and(|n| n.starts_with("no GPU state")));
        }
    }
}
