//! A cell's result in a baseline run against a candidate run: one exhaustive rule table.
//!
//! As crater's `compare()`, every (baseline, candidate) pair of outcomes maps to one
//! [`Comparison`] in a single `match` with no catch-all arm, so adding a status forces a decision
//! here. The rules, in the order they are tried:
//!
//! | baseline                 | candidate                | comparison                |
//! |--------------------------|--------------------------|---------------------------|
//! | absent                   | any                      | `new`                     |
//! | any                      | absent                   | `removed`                 |
//! | error / spurious         | any                      | `spurious`                |
//! | any                      | error / spurious         | `spurious`                |
//! | skip                     | any                      | `skipped`                 |
//! | any                      | skip                     | `skipped`                 |
//! | pass, flaky, xpass       | fail                     | `regressed`               |
//! | pass, flaky, xpass       | xfail                    | `newly_expected`          |
//! | pass, xpass, fail, xfail | flaky                    | `newly_flaky`             |
//! | flaky                    | flaky                    | `still_flaky`             |
//! | fail, xfail              | pass, xpass              | `fixed`                   |
//! | fail, xfail (signature S)| fail, xfail (signature S)| `still_failing_same`      |
//! | fail, xfail              | fail, xfail (another)    | `still_failing_different` |
//! | pass, flaky, xpass       | pass, xpass              | `passing`                 |
//!
//! Only `regressed` makes `gpucompat compare` exit 1: an infrastructure fault is never a
//! regression (it says nothing about the cell), and a known upstream failure (`xfail`) is not one
//! either; both are still listed.

use crate::record::{CellRecord, Status, Values};
use crate::signature::Signature;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

mod pairing;

use pairing::pair;
pub use pairing::{Moved, MovedPin, PairBy, PairError, Pairing};

/// What happened to one cell between a baseline run and a candidate run.
///
/// Declared from the most to the least urgent; `Ord` follows that order, so sorting puts
/// regressions first.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Comparison {
    /// Passed in the baseline, fails in the candidate with no expectation covering it.
    Regressed,
    /// Failed in both, but the root cause changed.
    StillFailingDifferent,
    /// Passed only on a retry in the candidate, and did not in the baseline.
    NewlyFlaky,
    /// Failed in the baseline, passes cleanly in the candidate.
    Fixed,
    /// Passed in the baseline, fails in the candidate as an `[[expect]]` rule says it would.
    NewlyExpected,
    /// Failed in both with the same root cause (`xfail` to `xfail`: the known failure).
    StillFailingSame,
    /// Flaky in both.
    StillFlaky,
    /// One side is an infrastructure fault: nothing can be said about the cell.
    Spurious,
    /// Only the candidate has the cell.
    New,
    /// Only the baseline has the cell.
    Removed,
    /// Skipped on one side: nothing to compare.
    Skipped,
    /// Passed in both.
    Passing,
}

impl Comparison {
    /// Every comparison, in declaration (urgency) order.
    pub const ALL: &'static [Comparison] = <Comparison as strum::VariantArray>::VARIANTS;

    /// The stable snake_case name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Words for people: what the comparison means.
    pub fn describe(self) -> &'static str {
        match self {
            Comparison::Regressed => "regressed: passed before, fails now",
            Comparison::StillFailingDifferent => "still failing, with another root cause",
            Comparison::NewlyFlaky => "newly flaky: passed only on a retry",
            Comparison::Fixed => "fixed: failed before, passes now",
            Comparison::NewlyExpected => {
                "fails again as a known upstream failure (an expectation covers it)"
            }
            Comparison::StillFailingSame => "still failing, same root cause",
            Comparison::StillFlaky => "still flaky",
            Comparison::Spurious => "infrastructure fault on one side: says nothing about the cell",
            Comparison::New => "new cell",
            Comparison::Removed => "cell no longer in the run",
            Comparison::Skipped => "skipped on one side",
            Comparison::Passing => "passing",
        }
    }

    /// Whether this comparison makes `gpucompat compare` (and a gate) fail.
    pub fn is_regression(self) -> bool {
        match self {
            Comparison::Regressed => true,
            Comparison::StillFailingDifferent
            | Comparison::NewlyFlaky
            | Comparison::Fixed
            | Comparison::NewlyExpected
            | Comparison::StillFailingSame
            | Comparison::StillFlaky
            | Comparison::Spurious
            | Comparison::New
            | Comparison::Removed
            | Comparison::Skipped
            | Comparison::Passing => false,
        }
    }
}

/// A record reduced to what comparison looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Pass,
    Flaky,
    Xpass,
    Fail(Option<Signature>),
    Xfail(Option<Signature>),
    Skip,
    /// `error`, or any record marked spurious: an infrastructure fault.
    Spurious,
}

fn side(record: &CellRecord) -> Side {
    if record.spurious {
        return Side::Spurious;
    }
    match record.status {
        Status::Pass => Side::Pass,
        Status::Flaky => Side::Flaky,
        Status::Xpass => Side::Xpass,
        Status::Fail => Side::Fail(record.signature),
        Status::Xfail => Side::Xfail(record.signature),
        Status::Skip => Side::Skip,
        Status::Error => Side::Spurious,
    }
}

/// Compares one cell's baseline record with its candidate record (either may be absent).
/// `None` only when both are absent.
pub(crate) fn compare(base: Option<&CellRecord>, head: Option<&CellRecord>) -> Option<Comparison> {
    use Side::{Fail, Flaky, Pass, Skip, Spurious, Xfail, Xpass};
    let pair = (base.map(side), head.map(side));
    let comparison = match pair {
        // No cell on either side: nothing to say.
        (None, None) => return None,
        // Only the candidate has it: added to the matrix, or run for the first time.
        (None, Some(_)) => Comparison::New,
        // Only the baseline has it: dropped from the matrix, filtered out, or interrupted.
        (Some(_), None) => Comparison::Removed,
        // An infrastructure fault on either side says nothing about the cell: never a
        // regression, never a fix (crater's `Spurious*`).
        (Some(Spurious), Some(_)) | (Some(_), Some(Spurious)) => Comparison::Spurious,
        // A skipped side (no GPU for it, filtered) has nothing to compare.
        (Some(Skip), Some(_)) | (Some(_), Some(Skip)) => Comparison::Skipped,
        // Passing before, failing now, and no expectation covers it: the regression.
        (Some(Pass | Flaky | Xpass), Some(Fail(_))) => Comparison::Regressed,
        // Passing before, failing now as an `[[expect]]` rule says: a known upstream failure
        // (someone marked it), listed but not a regression.
        (Some(Pass | Flaky | Xpass), Some(Xfail(_))) => Comparison::NewlyExpected,
        // Passed only on a retry now, and did not before (whether it passed or failed then).
        (Some(Pass | Xpass | Fail(_) | Xfail(_)), Some(Flaky)) => Comparison::NewlyFlaky,
        (Some(Flaky), Some(Flaky)) => Comparison::StillFlaky,
        // Failing before, passing cleanly now; xfail -> xpass is a fix too (drop the expectation).
        (Some(Fail(_) | Xfail(_)), Some(Pass | Xpass)) => Comparison::Fixed,
        // Still failing with the same root cause; xfail -> xfail is the known failure, still there.
        (Some(Fail(before) | Xfail(before)), Some(Fail(now) | Xfail(now))) if before == now => {
            Comparison::StillFailingSame
        }
        // Still failing, but the root cause moved: worth a look, not a regression.
        (Some(Fail(_) | Xfail(_)), Some(Fail(_) | Xfail(_))) => Comparison::StillFailingDifferent,
        // Passing on both sides (flaky -> pass included: it settled).
        (Some(Pass | Flaky | Xpass), Some(Pass | Xpass)) => Comparison::Passing,
    };
    Some(comparison)
}

/// A cell's outcome on one side of a comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    pub signature: Option<Signature>,
    pub spurious: bool,
}

impl Outcome {
    pub fn of(record: &CellRecord) -> Outcome {
        Outcome {
            status: record.status,
            signature: record.signature,
            spurious: record.spurious,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.status.as_str())?;
        if let Some(sig) = self.signature {
            write!(f, " {sig}")?;
        }
        if self.spurious && self.status != Status::Error {
            f.write_str(" (spurious)")?;
        }
        Ok(())
    }
}

/// One cell of a run comparison.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CellComparison {
    /// The candidate's id (the baseline's when only the baseline has the cell).
    pub id: String,
    /// The baseline's id, when the cells were paired across a bump that renamed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_id: Option<String>,
    pub values: Values,
    pub comparison: Comparison,
    pub base: Option<Outcome>,
    pub head: Option<Outcome>,
}

/// Every cell of two runs, compared.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunComparison {
    /// How many cells got each comparison (only those that occur), most urgent first.
    pub counts: BTreeMap<Comparison, usize>,
    /// How the cells were paired, and what moved between the runs.
    pub pairing: Pairing,
    /// Every cell, most urgent first, then by id.
    pub cells: Vec<CellComparison>,
}

impl RunComparison {
    pub(crate) fn regressions(&self) -> usize {
        self.cells
            .iter()
            .filter(|c| c.comparison.is_regression())
            .count()
    }
}

/// Compares two runs' records cell by cell, matched by id (the nightly report's changes).
pub(crate) fn compare_runs<'a>(
    base: impl IntoIterator<Item = &'a CellRecord>,
    head: impl IntoIterator<Item = &'a CellRecord>,
) -> RunComparison {
    let base: Vec<&CellRecord> = base.into_iter().collect();
    let head: Vec<&CellRecord> = head.into_iter().collect();
    match pair(&base, &head, &PairBy::Id) {
        Ok((pairs, pairing)) => build(pairs, pairing),
        // Pairing by id cannot be ambiguous.
        Err(_) => build(Vec::new(), Pairing::default()),
    }
}

/// Compares two runs' records cell by cell, paired as `pair_by` says (module `pairing`).
pub(crate) fn compare_runs_by<'a>(
    base: impl IntoIterator<Item = &'a CellRecord>,
    head: impl IntoIterator<Item = &'a CellRecord>,
    pair_by: &PairBy,
) -> Result<RunComparison, PairError> {
    let base: Vec<&CellRecord> = base.into_iter().collect();
    let head: Vec<&CellRecord> = head.into_iter().collect();
    let (pairs, pairing) = pair(&base, &head, pair_by)?;
    Ok(build(pairs, pairing))
}

fn build(pairs: pairing::Pairs<'_>, pairing: Pairing) -> RunComparison {
    let mut cells = Vec::with_capacity(pairs.len());
    for (b, h) in pairs {
        let Some(comparison) = compare(b, h) else {
            continue;
        };
        let Some(record) = h.or(b) else {
            continue;
        };
        cells.push(CellComparison {
            id: record.id.clone(),
            base_id: b.filter(|b| b.id != record.id).map(|b| b.id.clone()),
            values: record.values.clone(),
            comparison,
            base: b.map(Outcome::of),
            head: h.map(Outcome::of),
        });
    }
    cells.sort_by(|a, b| (a.comparison, &a.id).cmp(&(b.comparison, &b.id)));
    let mut counts = BTreeMap::new();
    for cell in &cells {
        *counts.entry(cell.comparison).or_insert(0) += 1;
    }
    RunComparison {
        counts,
        pairing,
        cells,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Metrics, Runner};
    use Comparison as C;
    use Signature as S;

    fn rec(status: Status, signature: Option<Signature>, spurious: bool) -> CellRecord {
        CellRecord {
            id: "cell".into(),
            values: Values::new(),
            pins: Vec::new(),
            status,
            signature,
            phase: None,
            duration_s: 1.0,
            attempts: 1,
            log: "logs/cell.log".into(),
            metrics: Metrics::default(),
            runner: Runner::default(),
            fingerprint: None,
            line: None,
            excerpt: None,
            decided_by: None,
            evidence: Vec::new(),
            exit: None,
            spurious,
            reason: None,
            expectation: None,
            started_at: None,
            leaked: 0,
            hang: None,
            format_version: 1,
        }
    }

    fn pass() -> CellRecord {
        rec(Status::Pass, None, false)
    }
    fn flaky() -> CellRecord {
        rec(Status::Flaky, Some(S::CollectiveTimeout), false)
    }
    fn xpass() -> CellRecord {
        rec(Status::Xpass, None, false)
    }
    fn fail(sig: Signature) -> CellRecord {
        rec(Status::Fail, Some(sig), false)
    }
    fn xfail(sig: Signature) -> CellRecord {
        rec(Status::Xfail, Some(sig), false)
    }
    fn skip() -> CellRecord {
        rec(Status::Skip, None, false)
    }
    fn error() -> CellRecord {
        rec(Status::Error, Some(S::DependencyError), true)
    }

    /// One row per rule of the table in the module docs, in its order.
    #[test]
    fn every_rule_of_the_table() {
        let ia = S::IllegalAddress;
        let nk = S::NoKernelImage;
        let cases: Vec<(Option<CellRecord>, Option<CellRecord>, Option<Comparison>)> = vec![
            (None, None, None),
            // absent -> any: new
            (None, Some(pass()), Some(C::New)),
            (None, Some(fail(ia)), Some(C::New)),
            // any -> absent: removed
            (Some(fail(ia)), None, Some(C::Removed)),
            (Some(pass()), None, Some(C::Removed)),
            // spurious on either side, whatever the other: never a regression
            (Some(error()), Some(fail(ia)), Some(C::Spurious)),
            (Some(pass()), Some(error()), Some(C::Spurious)),
            (Some(error()), Some(error()), Some(C::Spurious)),
            (
                Some(pass()),
                Some(rec(Status::Fail, Some(S::Unknown), true)),
                Some(C::Spurious),
            ),
            (Some(skip()), Some(error()), Some(C::Spurious)),
            // skipped on either side
            (Some(skip()), Some(fail(ia)), Some(C::Skipped)),
            (Some(pass()), Some(skip()), Some(C::Skipped)),
            (Some(skip()), Some(skip()), Some(C::Skipped)),
            // regressed
            (Some(pass()), Some(fail(ia)), Some(C::Regressed)),
            (Some(flaky()), Some(fail(ia)), Some(C::Regressed)),
            (Some(xpass()), Some(fail(nk)), Some(C::Regressed)),
            // newly expected
            (Some(pass()), Some(xfail(nk)), Some(C::NewlyExpected)),
            (Some(flaky()), Some(xfail(nk)), Some(C::NewlyExpected)),
            (Some(xpass()), Some(xfail(nk)), Some(C::NewlyExpected)),
            // newly flaky
            (Some(pass()), Some(flaky()), Some(C::NewlyFlaky)),
            (Some(xpass()), Some(flaky()), Some(C::NewlyFlaky)),
            (Some(fail(ia)), Some(flaky()), Some(C::NewlyFlaky)),
            (Some(xfail(nk)), Some(flaky()), Some(C::NewlyFlaky)),
            // still flaky
            (Some(flaky()), Some(flaky()), Some(C::StillFlaky)),
            // fixed
            (Some(fail(ia)), Some(pass()), Some(C::Fixed)),
            (Some(fail(ia)), Some(xpass()), Some(C::Fixed)),
            (Some(xfail(nk)), Some(pass()), Some(C::Fixed)),
            (Some(xfail(nk)), Some(xpass()), Some(C::Fixed)),
            // still failing, same signature (xfail -> xfail: the known failure)
            (Some(fail(ia)), Some(fail(ia)), Some(C::StillFailingSame)),
            (Some(xfail(nk)), Some(xfail(nk)), Some(C::StillFailingSame)),
            (Some(fail(nk)), Some(xfail(nk)), Some(C::StillFailingSame)),
            (Some(xfail(nk)), Some(fail(nk)), Some(C::StillFailingSame)),
            // still failing, another signature
            (
                Some(fail(ia)),
                Some(fail(nk)),
                Some(C::StillFailingDifferent),
            ),
            (
                Some(xfail(nk)),
                Some(fail(ia)),
                Some(C::StillFailingDifferent),
            ),
            (
                Some(xfail(nk)),
                Some(xfail(ia)),
                Some(C::StillFailingDifferent),
            ),
            // passing
            (Some(pass()), Some(pass()), Some(C::Passing)),
            (Some(flaky()), Some(pass()), Some(C::Passing)),
            (Some(xpass()), Some(xpass()), Some(C::Passing)),
            (Some(pass()), Some(xpass()), Some(C::Passing)),
        ];
        let mut seen = std::collections::HashSet::new();
        for (base, head, expected) in &cases {
            let got = compare(base.as_ref(), head.as_ref());
            assert_eq!(
                got,
                *expected,
                "{:?} -> {:?}",
                base.as_ref().map(|r| (r.status, r.signature)),
                head.as_ref().map(|r| (r.status, r.signature))
            );
            if let Some(c) = got {
                seen.insert(c);
            }
        }
        for &c in Comparison::ALL {
            assert!(seen.contains(&c), "no case covers `{c}`");
        }
    }

    /// Every pair of statuses gets an answer, and only `regressed` is a regression; nothing with
    /// an infrastructure fault on either side ever is.
    #[test]
    fn spurious_is_never_a_regression_and_every_pair_is_decided() {
        let all = [
            pass(),
            flaky(),
            xpass(),
            fail(S::Oom),
            xfail(S::Oom),
            skip(),
            error(),
            rec(Status::Fail, Some(S::Timeout), true),
        ];
        for b in &all {
            for h in &all {
                let c = compare(Some(b), Some(h)).expect("decided");
                if b.spurious || h.spurious {
                    assert_eq!(c, C::Spurious);
                }
                assert_eq!(c.is_regression(), c == C::Regressed);
            }
        }
    }

    #[test]
    fn runs_are_matched_by_id_and_sorted_by_urgency() {
        let mut a = pass();
        a.id = "a".into();
        let mut b = fail(S::Oom);
        b.id = "b".into();
        let mut a2 = fail(S::IllegalAddress);
        a2.id = "a".into();
        let mut c = pass();
        c.id = "c".into();
        let result = compare_runs([&a, &b], [&a2, &c]);
        let got: Vec<_> = result
            .cells
            .iter()
            .map(|c| (c.id.as_str(), c.comparison))
            .collect();
        assert_eq!(
            got,
            vec![("a", C::Regressed), ("c", C::New), ("b", C::Removed)]
        );
        assert_eq!(result.regressions(), 1);
        assert_eq!(result.counts.get(&C::New), Some(&1));
        let names: Vec<_> = C::ALL.iter().map(|c| c.as_str()).collect();
        let mut sorted = C::ALL.to_vec();
        sorted.sort();
        assert_eq!(
            sorted,
            C::ALL.to_vec(),
            "ALL is in urgency order: {names:?}"
        );
    }
}
