//! From a cell's record to a probe's verdict: good, bad (the target failure) or unknown.
//!
//! One table, so the rules are in one place:
//!
//! | record | verdict |
//! |---|---|
//! | `pass`, `xpass` | good |
//! | `error` (infrastructure), `skip`, any spurious failure | unknown |
//! | failed while provisioning (the pin set cannot be installed) | unknown, never good |
//! | `fail`/`xfail` with the target signature (or any, while no target is known yet) | bad |
//! | `fail`/`xfail` with another signature | unknown |
//! | `flaky` (failed, then passed on the cell's own retry) with the target | bad, reported as flaky |
//! | `flaky` with another signature | good (the passing attempt had no target failure) |

use super::search::Verdict;
use crate::record::{CellRecord, Phase, Status};
use crate::signature::Signature;

/// A record judged against the target signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub verdict: Verdict,
    /// Why an unknown is unknown, or what a flake was.
    pub why: Option<String>,
    /// The cell failed with the target, then passed on a retry.
    pub flaky: bool,
}

impl Judged {
    fn new(verdict: Verdict, why: Option<String>) -> Judged {
        Judged {
            verdict,
            why,
            flaky: false,
        }
    }
}

/// Judges `record`; `target` is `None` while the bisected signature is not known yet (the bad
/// end's first failure names it).
pub fn judge(record: &CellRecord, target: Option<Signature>) -> Judged {
    let signature = record.signature.unwrap_or(Signature::Unknown);
    let detail = record.reason.as_deref().unwrap_or("no reason given");
    match record.status {
        Status::Pass | Status::Xpass => Judged::new(Verdict::Good, None),
        Status::Skip => Judged::new(Verdict::Unknown, Some(format!("not run: {detail}"))),
        Status::Error => Judged::new(
            Verdict::Unknown,
            Some(format!("infrastructure fault: {detail}")),
        ),
        Status::Fail | Status::Xfail | Status::Flaky if record.spurious => Judged::new(
            Verdict::Unknown,
            Some(format!("infrastructure fault ({signature}): {detail}")),
        ),
        Status::Fail | Status::Xfail if record.phase == Some(Phase::Provision) => Judged::new(
            Verdict::Unknown,
            Some(format!("the pin set could not be installed ({signature})")),
        ),
        Status::Fail | Status::Xfail => match target {
            Some(target) if target != signature => Judged::new(
                Verdict::Unknown,
                Some(format!("failed with {signature}, not {target}")),
            ),
            _ => Judged::new(Verdict::Bad, None),
        },
        Status::Flaky => match target {
            Some(target) if target != signature => Judged::new(
                Verdict::Good,
                Some(format!("failed once with {signature}, then passed")),
            ),
            _ => Judged {
                verdict: Verdict::Bad,
                why: Some(format!(
                    "flaky: failed with {signature}, then passed on a retry (counted bad: the failure occurs here)"
                )),
                flaky: true,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: Status, signature: Option<Signature>, phase: Phase) -> CellRecord {
        serde_json::from_value(serde_json::json!({
            "id": "c", "values": {}, "pins": [], "status": status,
            "signature": signature, "phase": phase, "duration_s": 1.0, "attempts": 1,
            "log": "logs/c.log", "reason": "r"
        }))
        .expect("a record")
    }

    #[test]
    fn the_table() {
        use Signature::*;
        let t = Some(IllegalAddress);
        let cases = [
            (Status::Pass, None, Phase::Validate, t, Verdict::Good),
            (
                Status::Error,
                Some(Unknown),
                Phase::Launch,
                t,
                Verdict::Unknown,
            ),
            (Status::Skip, None, Phase::Launch, t, Verdict::Unknown),
            (
                Status::Fail,
                Some(IllegalAddress),
                Phase::Ready,
                t,
                Verdict::Bad,
            ),
            (Status::Fail, Some(Oom), Phase::Ready, t, Verdict::Unknown),
            (Status::Fail, Some(Oom), Phase::Ready, None, Verdict::Bad),
            (
                Status::Fail,
                Some(DependencyError),
                Phase::Provision,
                None,
                Verdict::Unknown,
            ),
            (
                Status::Xfail,
                Some(IllegalAddress),
                Phase::Ready,
                t,
                Verdict::Bad,
            ),
            (
                Status::Flaky,
                Some(IllegalAddress),
                Phase::Ready,
                t,
                Verdict::Bad,
            ),
            (Status::Flaky, Some(Oom), Phase::Ready, t, Verdict::Good),
        ];
        for (status, signature, phase, target, want) in cases {
            let got = judge(&record(status, signature, phase), target).verdict;
            assert_eq!(
                got, want,
                "{status} {signature:?} {phase} target {target:?}"
            );
        }
        let mut spurious = record(Status::Fail, Some(IllegalAddress), Phase::Ready);
        spurious.spurious = true;
        assert_eq!(judge(&spurious, t).verdict, Verdict::Unknown);
        assert!(
            judge(
                &record(Status::Flaky, Some(IllegalAddress), Phase::Ready),
                t
            )
            .flaky
        );
    }
}
