//! The cells to run as Slurm array tasks: which cells each task runs, and the arrays that ask
//! Slurm for the same node shape (features, GPU count, time limit), since every task of one
//! array gets the same resources.

use crate::matrix::{Cell, Engine, Plan, SlurmSettings, gpus};
use std::time::Duration;

/// Added to a task's cells' timeouts when the matrix names no `time-margin`: installing an
/// environment and starting up are outside a cell's timeout.
pub const DEFAULT_TIME_MARGIN: Duration = Duration::from_secs(10 * 60);

/// Slurm's own default `MaxArraySize` is 1001 (tasks 0 to 1000).
pub const DEFAULT_MAX_TASKS: usize = 1000;

/// One array task: the plan indices of its cells, run one after another on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub cells: Vec<usize>,
}

/// One `sbatch --array`: tasks that ask for the same resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    /// `--constraint`: the node features of the tasks' GPU archs, `&`-joined; `None` for cells
    /// that need no GPU.
    pub constraint: Option<String>,
    /// `--gres=gpu:N`; 0 asks for none.
    pub gpus: usize,
    /// `--time`, in whole minutes (Slurm's unit).
    pub minutes: u64,
    pub tasks: Vec<Task>,
}

/// How the node features and time limits are named: the matrix's `[slurm]` with the command
/// line's overrides applied.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    pub settings: SlurmSettings,
}

impl Shape {
    /// The node feature that marks GPUs of `arch` (a device pin such as `sm_90@1` asks for its
    /// arch): the matrix's `features` entry, else the prefix and the arch.
    pub fn feature(&self, arch: &str) -> String {
        let arch = gpus::split_device(arch).0;
        match self.settings.features.iter().find(|(a, _)| a == arch) {
            Some((_, feature)) => feature.clone(),
            None => format!(
                "{}{arch}",
                self.settings.constraint_prefix.as_deref().unwrap_or("")
            ),
        }
    }

    /// `--constraint` for a cell: each distinct feature its GPUs need, all on one node.
    pub fn constraint(&self, cell: &Cell) -> Option<String> {
        let mut features: Vec<String> = Vec::new();
        for arch in &cell.gpus {
            let feature = self.feature(arch);
            if !features.contains(&feature) {
                features.push(feature);
            }
        }
        (!features.is_empty()).then(|| features.join("&"))
    }

    /// A task's time limit: the matrix's fixed `time-limit`, else every attempt of every cell
    /// at its timeout (a server's relaunches included) plus the margin, in whole minutes (at
    /// least one).
    pub fn minutes(&self, plan: &Plan, cells: &[usize]) -> u64 {
        let total = match self.settings.time_limit {
            Some(limit) => limit,
            None => {
                let attempts = plan.retry.count.saturating_add(1);
                let cells: Duration = cells
                    .iter()
                    .map(|&i| {
                        let cell = &plan.cells[i];
                        let relaunches = match cell.engine {
                            Engine::Server(_) => crate::run::cell::RELAUNCHES,
                            Engine::Job { .. } => 0,
                        };
                        cell.timeout
                            .saturating_mul(attempts.saturating_add(relaunches))
                    })
                    .fold(Duration::ZERO, Duration::saturating_add);
                cells.saturating_add(self.settings.time_margin.unwrap_or(DEFAULT_TIME_MARGIN))
            }
        };
        total.as_secs().div_ceil(60).max(1)
    }

    /// The arrays for the cells at `indices`: tasks from [`crate::schedule::batches`] (one per
    /// cell up to `max_tasks`), then one array per distinct (constraint, GPU count, minutes), in
    /// plan order.
    pub fn arrays(&self, plan: &Plan, indices: &[usize], max_tasks: usize) -> Vec<Array> {
        let mut arrays: Vec<Array> = Vec::new();
        for cells in crate::schedule::batches(plan, indices, max_tasks) {
            let first = &plan.cells[cells[0]];
            let constraint = self.constraint(first);
            let gpus = first.gpus.len();
            let minutes = self.minutes(plan, &cells);
            let task = Task { cells };
            match arrays
                .iter_mut()
                .find(|a| a.constraint == constraint && a.gpus == gpus && a.minutes == minutes)
            {
                Some(array) => array.tasks.push(task),
                None => arrays.push(Array {
                    constraint,
                    gpus,
                    minutes,
                    tasks: vec![task],
                }),
            }
        }
        arrays
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Plan {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.toml");
        std::fs::write(&path, text).expect("write");
        crate::matrix::load(&path).expect("valid matrix")
    }

    const MATRIX: &str = r#"
[matrix]
gpu = ["sm_90", "sm_89", "sm_86+sm_89"]
v = ["1", "2"]
[resources]
gpus = "{gpu}"
[packages]
v = "pkg"
[job]
command = "true"
timeout = "90s"
[retry]
count = 1
"#;

    #[test]
    fn arrays_by_node_shape_with_limits_from_the_timeouts() {
        let plan = plan(MATRIX);
        let shape = Shape::default();
        let all: Vec<usize> = (0..plan.cells.len()).collect();
        let arrays = shape.arrays(&plan, &all, 1000);
        let summary: Vec<(Option<&str>, usize, u64, usize)> = arrays
            .iter()
            .map(|a| (a.constraint.as_deref(), a.gpus, a.minutes, a.tasks.len()))
            .collect();
        // Two attempts of 90 s and ten minutes of margin: 13 minutes.
        assert_eq!(
            summary,
            [
                (Some("sm_90"), 1, 13, 2),
                (Some("sm_89"), 1, 13, 2),
                (Some("sm_86&sm_89"), 2, 13, 2)
            ]
        );
    }

    #[test]
    fn the_slurm_table_is_read_and_checked_where_written() {
        let plan = plan(&format!(
            "{MATRIX}[slurm]\npartition = \"gpu\"\nconstraint-prefix = \"gpu_\"\nfeatures = {{ sm_89 = \"l40s\" }}\nargs = [\"--qos=low\"]\ntime-margin = \"2m\"\n"
        ));
        assert_eq!(plan.slurm.partition.as_deref(), Some("gpu"));
        assert_eq!(
            plan.slurm.features,
            [("sm_89".to_owned(), "l40s".to_owned())]
        );
        assert_eq!(plan.slurm.args, ["--qos=low"]);
        let shape = Shape {
            settings: plan.slurm.clone(),
        };
        // Two attempts of 90 s, then the two-minute margin.
        assert_eq!(shape.minutes(&plan, &[0]), 5);
        assert_eq!(
            shape.constraint(&plan.cells[4]).as_deref(),
            Some("gpu_sm_86&l40s")
        );

        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            "[matrix]\nn = [1]\n[job]\ncommand = \"true\"\n[slurm]\nfeatures = { h100 = \"x\" }\ntime-limit = \"soon\"\nqueue = \"gpu\"\n",
        )
        .expect("write");
        let err = crate::matrix::load(&path).expect_err("invalid").to_string();
        for needle in [
            "`h100` in [slurm] features is not a GPU arch",
            "time-limit in [slurm] is not a duration",
            "unknown key `queue` in [slurm]",
            "bad.toml:6:",
        ] {
            assert!(err.contains(needle), "{needle}: {err}");
        }
    }

    #[test]
    fn a_servers_time_limit_covers_its_relaunches() {
        let plan = plan(
            "[matrix]\nn = [1]\n[server]\ncommand = \"serve --port {port}\"\ntimeout = \"90s\"\n[slurm]\ntime-margin = \"30s\"\n",
        );
        let shape = Shape {
            settings: plan.slurm.clone(),
        };
        // One attempt and two relaunches of 90 s, then the margin: 300 s.
        assert_eq!(shape.minutes(&plan, &[0]), 5);
    }

    #[test]
    fn features_prefix_and_fixed_limits_from_the_settings() {
        let plan = plan(MATRIX);
        let shape = Shape {
            settings: SlurmSettings {
                constraint_prefix: Some("gpu_".into()),
                features: vec![("sm_89".into(), "l40s".into())],
                time_limit: Some(Duration::from_secs(61)),
                ..SlurmSettings::default()
            },
        };
        assert_eq!(shape.feature("sm_90@1"), "gpu_sm_90");
        assert_eq!(
            shape.constraint(&plan.cells[4]).as_deref(),
            Some("gpu_sm_86&l40s")
        );
        assert_eq!(shape.minutes(&plan, &[0, 1, 2]), 2);
    }

    #[test]
    fn past_the_task_limit_cells_of_one_environment_share_tasks() {
        let plan = plan(
            "[matrix]\nn = [1, 2, 3]\nv = [\"1\", \"2\"]\n[packages]\nv = \"pkg\"\n[job]\ncommand = \"true\"\ntimeout = \"1m\"\n",
        );
        let all: Vec<usize> = (0..plan.cells.len()).collect();
        let arrays = Shape::default().arrays(&plan, &all, 2);
        let pins = |task: &Task| -> Vec<String> {
            task.cells
                .iter()
                .map(|&i| plan.cells[i].pins_text())
                .collect()
        };
        assert_eq!(arrays.len(), 1, "tasks alike share one array");
        assert_eq!(arrays[0].tasks.len(), 2);
        // Three cells of a minute each, then the ten-minute margin.
        assert_eq!(arrays[0].minutes, 13);
        for task in &arrays[0].tasks {
            assert_eq!(task.cells.len(), 3);
            assert!(
                pins(task).iter().all(|p| *p == pins(task)[0]),
                "one environment per task"
            );
        }
        // Fewer cells than the limit: one task each, all alike, so one array.
        let arrays = Shape::default().arrays(&plan, &all, 1000);
        assert_eq!(arrays.len(), 1);
        assert_eq!(arrays[0].tasks.len(), 6);
        assert_eq!(arrays[0].minutes, 11);
    }
}
