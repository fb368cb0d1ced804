//! From attempts to a status: one exhaustive table (docs/results.md, "Statuses").
//!
//! | last attempt | earlier failures | expectation            | status |
//! |--------------|------------------|------------------------|--------|
//! | pass         | none             | none                   | pass   |
//! | pass         | some             | none                   | flaky  |
//! | pass         | any              | some                   | xpass  |
//! | fail, spurious (infrastructure) | any | any             | error  |
//! | fail         | any              | matches the signature  | xfail  |
//! | fail         | any              | none, or another one   | fail   |

use crate::record::{ExpectationRef, Status};
use crate::signature::Signature;

/// How the last attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastAttempt {
    Passed,
    Failed {
        signature: Signature,
        spurious: bool,
    },
}

/// The status of a finished cell, and a reason when the status needs one.
pub(crate) fn decide(
    last: LastAttempt,
    earlier_failures: u32,
    expectation: Option<&ExpectationRef>,
) -> (Status, Option<String>) {
    match (last, expectation) {
        (LastAttempt::Passed, None) if earlier_failures == 0 => (Status::Pass, None),
        (LastAttempt::Passed, None) => (
            Status::Flaky,
            Some(format!(
                "failed {earlier_failures} time{} before passing",
                if earlier_failures == 1 { "" } else { "s" }
            )),
        ),
        (LastAttempt::Passed, Some(expect)) => (
            Status::Xpass,
            Some(format!(
                "expected to fail{}, but passed: the known failure{} may be fixed; drop the `[[expect]]` rule and any workaround or exclusion",
                expect
                    .signature
                    .map(|s| format!(" with {s}"))
                    .unwrap_or_default(),
                expect
                    .link
                    .as_ref()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            )),
        ),
        (
            LastAttempt::Failed {
                spurious: true,
                signature,
            },
            _,
        ) => (
            Status::Error,
            Some(format!(
                "infrastructure fault ({signature}): says nothing about the cell"
            )),
        ),
        (LastAttempt::Failed { signature, .. }, Some(expect)) => match expect.signature {
            None => (Status::Xfail, None),
            Some(expected) if expected == signature => (Status::Xfail, None),
            Some(expected) => (
                Status::Fail,
                Some(format!("expected {expected}, but failed with {signature}")),
            ),
        },
        (LastAttempt::Failed { .. }, None) => (Status::Fail, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(signature: Option<Signature>) -> ExpectationRef {
        ExpectationRef {
            signature,
            link: Some("https://example.invalid/1".to_owned()),
            reason: None,
        }
    }

    #[test]
    fn the_table() {
        use LastAttempt::*;
        let oom = Failed {
            signature: Signature::Oom,
            spurious: false,
        };
        let infra = Failed {
            signature: Signature::DependencyError,
            spurious: true,
        };
        let cases = [
            (Passed, 0, None, Status::Pass),
            (Passed, 1, None, Status::Flaky),
            (Passed, 0, Some(expect(Some(Signature::Oom))), Status::Xpass),
            (Passed, 2, Some(expect(None)), Status::Xpass),
            (infra, 0, None, Status::Error),
            (infra, 0, Some(expect(None)), Status::Error),
            (oom, 0, Some(expect(Some(Signature::Oom))), Status::Xfail),
            (oom, 0, Some(expect(None)), Status::Xfail),
            (
                oom,
                0,
                Some(expect(Some(Signature::IllegalAddress))),
                Status::Fail,
            ),
            (oom, 1, None, Status::Fail),
        ];
        for (last, earlier, expectation, want) in cases {
            let (got, _) = decide(last, earlier, expectation.as_ref());
            assert_eq!(got, want, "{last:?} {earlier} {expectation:?}");
        }
        let (_, reason) = decide(Passed, 0, Some(&expect(Some(Signature::Oom))));
        assert!(reason.is_some_and(|r| r.contains("drop the `[[expect]]` rule")));
    }
}
