//! Slurm's client commands (`sbatch`, `squeue`, `sacct`, `scancel`): short commands whose output
//! is captured, run through `duct` with a deadline each, so a slow controller cannot stall the
//! harness. What their output means is `crate::slurm`'s business; this file only runs them.

use std::io::ErrorKind;
use std::path::Path;
use std::time::Duration;

/// How long one client command may take: the controller answers in well under a second when
/// healthy; a minute covers a busy one.
const DEADLINE: Duration = Duration::from_secs(60);

/// A Slurm command could not give its answer.
#[derive(Debug, thiserror::Error)]
pub enum SlurmCommandError {
    #[error(
        "`{program}` is not on PATH: `--executor slurm` needs Slurm's client commands (sbatch, squeue, sacct, scancel) on the submitting host"
    )]
    Missing { program: String },
    #[error("`{program}` could not be started")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{program}` did not answer within {}s", DEADLINE.as_secs())]
    Timeout { program: String },
    #[error("`{program}` failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: String,
        /// Its error output, trimmed: Slurm says there why it refused (a partition, a feature).
        stderr: String,
    },
}

/// Runs `program args` (in `dir` when given) and returns its standard output.
fn capture(
    program: &str,
    args: &[String],
    dir: Option<&Path>,
) -> Result<String, SlurmCommandError> {
    let mut expression = duct::cmd(program, args)
        // Times as seconds since the epoch: Slurm prints local time without a zone otherwise.
        .env("SLURM_TIME_FORMAT", "%s")
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked();
    if let Some(dir) = dir {
        expression = expression.dir(dir);
    }
    let handle = expression.start().map_err(|source| {
        if source.kind() == ErrorKind::NotFound {
            SlurmCommandError::Missing {
                program: program.to_owned(),
            }
        } else {
            SlurmCommandError::Spawn {
                program: program.to_owned(),
                source,
            }
        }
    })?;
    let spawn_err = |source| SlurmCommandError::Spawn {
        program: program.to_owned(),
        source,
    };
    let Some(output) = handle.wait_timeout(DEADLINE).map_err(spawn_err)? else {
        let _ = handle.kill();
        return Err(SlurmCommandError::Timeout {
            program: program.to_owned(),
        });
    };
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(SlurmCommandError::Failed {
            program: program.to_owned(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr)
                .trim()
                .chars()
                .take(1000)
                .collect(),
        })
    }
}

/// `sbatch --version`: whether Slurm's client commands are here at all.
pub fn sbatch_version() -> Result<String, SlurmCommandError> {
    capture("sbatch", &["--version".to_owned()], None)
}

/// `sbatch --parsable ARGS SCRIPT`, from `dir`: its output (`JOBID` or `JOBID;CLUSTER`).
pub fn sbatch(args: &[String], script: &Path, dir: &Path) -> Result<String, SlurmCommandError> {
    let mut all = vec!["--parsable".to_owned()];
    all.extend(args.iter().cloned());
    all.push(script.display().to_string());
    capture("sbatch", &all, Some(dir))
}

/// `squeue` over the given jobs, every task on its own line, finished ones included while the
/// controller still holds them: `JOBID_TASK|STATE|REASON|NODELIST` lines.
pub fn squeue(jobs: &[String]) -> Result<String, SlurmCommandError> {
    let args = [
        format!("--jobs={}", jobs.join(",")),
        "--array".to_owned(),
        "--states=all".to_owned(),
        "--noheader".to_owned(),
        "--format=%i|%T|%r|%N".to_owned(),
    ];
    capture("squeue", &args, None)
}

/// `sacct` over the given jobs, one line per task allocation (`-X`):
/// `JobID|State|ExitCode|NodeList|Start|End|Elapsed`, times in seconds since the epoch.
pub fn sacct(jobs: &[String]) -> Result<String, SlurmCommandError> {
    let args = [
        format!("--jobs={}", jobs.join(",")),
        "--allocations".to_owned(),
        "--parsable2".to_owned(),
        "--noheader".to_owned(),
        "--format=JobID,State,ExitCode,NodeList,Start,End,Elapsed".to_owned(),
    ];
    capture("sacct", &args, None)
}

/// `scancel JOB...`: every task of the given jobs.
pub fn scancel(jobs: &[String]) -> Result<(), SlurmCommandError> {
    capture("scancel", jobs, None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_programs_and_failures_are_told_apart() {
        let err = capture("no-such-slurm-command-gpucompat", &[], None);
        assert!(
            matches!(err, Err(SlurmCommandError::Missing { .. })),
            "{err:?}"
        );
        let err = capture(
            "sh",
            &["-c".into(), "echo refused >&2; exit 1".into()],
            None,
        );
        assert!(
            matches!(err, Err(SlurmCommandError::Failed { ref stderr, .. }) if stderr == "refused"),
            "{err:?}"
        );
        let out = capture("sh", &["-c".into(), "echo '12;c1'".into()], None).expect("runs");
        assert_eq!(out, "12;c1\n");
    }
}
