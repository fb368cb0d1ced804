//! What a replayed cell's recording measured, read back from the replay's log.
//!
//! A replay (`replay = true`, `matrices/demo/replay.sh`) prints the recording's metrics as
//! `GPUCOMPAT_METRIC` lines, which the run stores in the record like any cell's, and one
//! `GPUCOMPAT_RECORDED duration_s=137.246 phase=infer jit_cache_hit=true provision_s=0.0` line
//! with what only a harness measures. A report of a replay shows those in place of the replay's
//! own (0.05 s in `launch` with a fresh JIT cache), since the GPU results it shows are the
//! recording's; the replay's own duration stays on the cell page.

use super::logs;
use super::text;
use crate::record::{CellRecord, Phase};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The replay prints its line before the recorded log: it is within the first lines.
const HEAD_BYTES: u64 = 64 * 1024;
const MARKER: &str = "GPUCOMPAT_RECORDED ";

/// The recording's facts, as the replay printed them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Recorded {
    pub duration_s: Option<f64>,
    pub phase: Option<Phase>,
    pub jit_cache_hit: Option<bool>,
    pub provision_s: Option<f64>,
}

/// Parses `duration_s=137.246 phase=infer jit_cache_hit=true`; unknown or malformed fields are
/// left out (a recording without a phase, an older replay script).
pub(crate) fn parse(line: &str) -> Option<Recorded> {
    let rest = line.trim_end().strip_prefix(MARKER)?;
    let mut recorded = Recorded::default();
    let number = |v: &str| v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
    for field in rest.split_whitespace() {
        let Some((name, value)) = field.split_once('=') else {
            continue;
        };
        match name {
            "duration_s" => recorded.duration_s = number(value),
            "phase" => recorded.phase = value.parse().ok(),
            "jit_cache_hit" => recorded.jit_cache_hit = value.parse().ok(),
            "provision_s" => recorded.provision_s = number(value),
            _ => {}
        }
    }
    Some(recorded)
}

/// The `GPUCOMPAT_RECORDED` line of a cell's log in `run_dir`, if it has one.
fn read(run_dir: &Path, record: &CellRecord) -> Option<Recorded> {
    let relative = text::inside(&record.log)?;
    let path = logs::locate(run_dir, &relative).ok()??;
    let file = logs::open(&path).ok()?;
    let mut lines = BufReader::new(file.take(HEAD_BYTES)).split(b'\n');
    lines.find_map(|line| parse(&String::from_utf8_lossy(&line.ok()?)))
}

/// Shows each replayed cell of `records` with its recording's duration, phase, JIT cache hit and
/// provision time; returns the replay's own durations by cell id.
pub(crate) fn apply(run_dir: &Path, records: &mut [CellRecord]) -> Vec<(String, f64)> {
    let mut own = Vec::new();
    for record in records.iter_mut() {
        let Some(recorded) = read(run_dir, record) else {
            continue;
        };
        if let Some(duration) = recorded.duration_s {
            own.push((record.id.clone(), record.duration_s));
            record.duration_s = duration;
        }
        if recorded.phase.is_some() {
            record.phase = recorded.phase;
        }
        record.metrics.jit_cache_hit = recorded.jit_cache_hit.or(record.metrics.jit_cache_hit);
        record.metrics.provision_s = recorded.provision_s.or(record.metrics.provision_s);
    }
    own
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_recorded_line_and_leaves_out_what_it_cannot_read() {
        let line = "GPUCOMPAT_RECORDED duration_s=137.246 phase=infer jit_cache_hit=true provision_s=0.0\n";
        assert_eq!(
            parse(line),
            Some(Recorded {
                duration_s: Some(137.246),
                phase: Some(Phase::Infer),
                jit_cache_hit: Some(true),
                provision_s: Some(0.0),
            })
        );
        // A recording that ended before any phase, and garbage, read as unknown.
        assert_eq!(
            parse("GPUCOMPAT_RECORDED duration_s=-1 phase= jit_cache_hit=maybe x"),
            Some(Recorded::default())
        );
        assert_eq!(parse("GPUCOMPAT_METRIC jit_s=1"), None);
    }
}
