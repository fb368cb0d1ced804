//! Short synchronous commands whose output the harness reads (`nvidia-smi`), each with a deadline
//! so a wedged driver cannot stall the harness.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why a probe gave no output.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("`{program}` could not be started")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{program}` did not finish within {seconds}s")]
    Timeout { program: String, seconds: u64 },
    #[error("`{program}` failed ({status}): {stderr}")]
    Failed {
        program: String,
        status: String,
        stderr: String,
    },
}

/// Runs `program args` and returns its stdout, or why not.
pub fn capture(program: &str, args: &[&str], deadline: Duration) -> Result<String, ProbeError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ProbeError::Spawn {
            program: program.to_owned(),
            source,
        })?;
    // Outputs of these probes are small; read them on threads so a full pipe never blocks.
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr.as_mut() {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProbeError::Timeout {
                    program: program.to_owned(),
                    seconds: deadline.as_secs(),
                });
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        Err(ProbeError::Failed {
            program: program.to_owned(),
            status: status.to_string(),
            stderr: stderr.trim().chars().take(500).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_reports_failures() {
        let out = capture("sh", &["-c", "echo hello"], Duration::from_secs(5)).expect("runs");
        assert_eq!(out, "hello\n");
        let err = capture(
            "sh",
            &["-c", "echo bad >&2; exit 3"],
            Duration::from_secs(5),
        );
        assert!(matches!(err, Err(ProbeError::Failed { ref stderr, .. }) if stderr == "bad"));
        let err = capture("no-such-program-gpucompat", &[], Duration::from_secs(5));
        assert!(matches!(err, Err(ProbeError::Spawn { .. })));
        let err = capture("sleep", &["5"], Duration::from_millis(100));
        assert!(matches!(err, Err(ProbeError::Timeout { .. })));
    }
}
