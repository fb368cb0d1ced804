//! The batch script of one array and the `sbatch` arguments that ask for its tasks' nodes.
//!
//! Every task runs the same gpucompat binary, `gpucompat run FILE --cell ID... --out SHARD`, into
//! a shard folder of the run (`slurm/tasks/JOB_TASK`), so its records are the ones a local run
//! writes. A task Slurm requeues (after a preemption or a lost node) starts over in a shard of
//! its own (`JOB_TASK.restartN`), which the collection prefers.

use super::tasks::Array;
use crate::matrix::Plan;
use crate::provision::shell_quote;
use std::path::Path;

/// Where a run folder keeps what the Slurm executor writes.
pub const SLURM_DIR: &str = "slurm";
/// Shard run folders of the array tasks, `JOB_TASK` each.
pub const TASKS_DIR: &str = "tasks";
/// Slurm's output of each task (`JOB_TASK.out`: the task's gpucompat, stdout and stderr).
pub const OUTPUT_DIR: &str = "output";

/// What every task's `gpucompat run` is given.
#[derive(Debug, Clone)]
pub struct TaskCommand<'a> {
    /// The gpucompat binary (the one submitting, on a filesystem the nodes share).
    pub exe: &'a Path,
    /// The matrix file, absolute.
    pub matrix: &'a Path,
    /// The run folder, absolute.
    pub out: &'a Path,
    /// Options passed on (`--cache-dir`, `--log-limit`, `--inventory`, ...).
    pub args: &'a [String],
}

/// The batch script of `array`: a `case` from the task's index to its cells, then `exec` of
/// the task's `gpucompat run`, so Slurm's signals (time limit, scancel) reach it directly.
pub fn batch_script(plan: &Plan, array: &Array, command: &TaskCommand<'_>) -> String {
    let mut text = String::from(
        "#!/bin/bash\n\
         # Written by `gpucompat run --executor slurm`: each array task runs its cells with the\n\
         # same gpucompat into a shard run folder, collected into the run folder at the end.\n\
         set -u\n\
         case \"${SLURM_ARRAY_TASK_ID:-}\" in\n",
    );
    for (index, task) in array.tasks.iter().enumerate() {
        let cells: Vec<String> = task
            .cells
            .iter()
            .map(|&i| format!("--cell {}", shell_quote(plan.cells[i].id.as_str())))
            .collect();
        text.push_str(&format!("  {index}) cells=({}) ;;\n", cells.join(" ")));
    }
    let slurm = command.out.join(SLURM_DIR);
    text.push_str(&format!(
        "  *) echo \"gpucompat: array task ${{SLURM_ARRAY_TASK_ID:-?}} has no cells\" >&2; exit 2 ;;\n\
         esac\n\
         shard={}/\"${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}\"\n\
         # A task Slurm requeued (preempted, its node lost) starts over in a shard of its own: the\n\
         # cells the first try recorded as failing may have died of Slurm's signal.\n\
         if [ \"${{SLURM_RESTART_COUNT:-0}}\" != 0 ]; then shard=\"$shard.restart$SLURM_RESTART_COUNT\"; fi\n\
         exec {} run {} \"${{cells[@]}}\" --out \"$shard\" --jobs 1 --slurm-task{}\n",
        shell_quote(&slurm.join(TASKS_DIR).display().to_string()),
        shell_quote(&command.exe.display().to_string()),
        shell_quote(&command.matrix.display().to_string()),
        command
            .args
            .iter()
            .map(|a| format!(" {}", shell_quote(a)))
            .collect::<String>(),
    ));
    text
}

/// `sbatch` arguments for `array` (before the matrix's and the command line's extra ones, which
/// may override them).
pub fn sbatch_args(
    array: &Array,
    partition: Option<&str>,
    name: &str,
    out: &Path,
    extra: &[String],
) -> Vec<String> {
    let mut args = vec![
        format!("--array=0-{}", array.tasks.len().saturating_sub(1)),
        format!("--job-name={name}"),
        format!("--time={}", array.minutes),
        "--ntasks=1".to_owned(),
        format!(
            "--output={}",
            out.join(SLURM_DIR)
                .join(OUTPUT_DIR)
                .join("%A_%a.out")
                .display()
        ),
        // A requeued task's output follows its first try's.
        "--open-mode=append".to_owned(),
    ];
    if let Some(partition) = partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(constraint) = &array.constraint {
        args.push(format!("--constraint={constraint}"));
    }
    if array.gpus > 0 {
        args.push(format!("--gres=gpu:{}", array.gpus));
    }
    args.extend(extra.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::tasks::Task;

    #[test]
    fn a_script_maps_each_task_to_its_cells_and_runs_gpucompat() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("m.toml");
        std::fs::write(
            &path,
            "[matrix]\nn = [\"a b\", \"c\"]\n[job]\ncommand = \"true\"\n",
        )
        .expect("write");
        let plan = crate::matrix::load(&path).expect("valid");
        let array = Array {
            constraint: Some("sm_90".into()),
            gpus: 1,
            minutes: 11,
            tasks: vec![Task { cells: vec![0] }, Task { cells: vec![1, 0] }],
        };
        let command = TaskCommand {
            exe: Path::new("/opt/bin/gpucompat"),
            matrix: &path,
            out: Path::new("/shared/runs/x"),
            args: &["--cache-dir".into(), "/shared/cache dir".into()],
        };
        let script = batch_script(&plan, &array, &command);
        let ids: Vec<&str> = plan.cells.iter().map(|c| c.id.as_str()).collect();
        assert!(
            script.contains(&format!("  0) cells=(--cell {}) ;;", shell_quote(ids[0]))),
            "{script}"
        );
        assert!(
            script.contains(&format!(
                "  1) cells=(--cell {} --cell {}) ;;",
                shell_quote(ids[1]),
                shell_quote(ids[0])
            )),
            "{script}"
        );
        assert!(script.contains("exec /opt/bin/gpucompat run "), "{script}");
        assert!(
            script.contains("--slurm-task --cache-dir '/shared/cache dir'\n"),
            "{script}"
        );
        let args = sbatch_args(
            &array,
            Some("gpu"),
            "gpucompat-x",
            command.out,
            &["--qos=low".into()],
        );
        assert_eq!(args[0], "--array=0-1");
        assert!(args.contains(&"--time=11".to_owned()));
        assert!(args.contains(&"--constraint=sm_90".to_owned()));
        assert!(args.contains(&"--gres=gpu:1".to_owned()));
        assert!(args.contains(&"--partition=gpu".to_owned()));
        assert_eq!(args.last().map(String::as_str), Some("--qos=low"));
        assert!(args.contains(&"--output=/shared/runs/x/slurm/output/%A_%a.out".to_owned()));
    }
}
