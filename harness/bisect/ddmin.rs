//! Attribution, pure: the smallest set of bumps that reproduces a failure (delta debugging).
//!
//! Zeller and Hildebrandt's `ddmin` over the bumps `0..m` (each bump moves one package from its
//! base version to its head version). A test applies a subset of bumps over the base pin set.
//! The empty set is the base, which must be good; the full set is the head, which must be bad;
//! both are checked first. Then `ddmin` splits the current failing set into `n` parts and tests
//! each part, then each complement; a failing one becomes the new current set; when nothing
//! fails at `n` parts it doubles `n`, until every single bump has been tried alone and removed
//! alone. Two bumps that only fail together stay together: removing either passes.
//!
//! Tri-state: an `Unknown` test (a pin set that cannot be installed together, an
//! infrastructure fault, another failure) is retried, then counts as "does not reproduce" for
//! the reduction, exactly as a pass would, but it is never taken as proof: the result is
//! called minimal only when removing each of its bumps was seen to pass.
//!
//! Like [`super::search`], a state machine: [`Ddmin::next_step`] says which subset to test,
//! [`Ddmin::record`] takes the verdict.

use super::search::{Probe, Slot, Step, Verdict};
use std::collections::BTreeMap;

/// How an attribution ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DdOutcome {
    /// The bumps (indices, ascending) that reproduce the failure together. `minimal` when
    /// removing any one of them was seen to pass (not merely unknown).
    Found { culprits: Vec<usize>, minimal: bool },
    /// The base (no bumps) is not good.
    GoodEnd(Verdict),
    /// The head (all bumps) does not fail with the target.
    BadEnd(Verdict),
}

#[derive(Debug, Clone)]
enum Phase {
    Ends,
    /// The current failing set, the number of parts, and the position in this round's tests.
    Reduce {
        current: Vec<usize>,
        parts: usize,
        at: usize,
    },
}

/// Delta debugging over `m` bumps.
#[derive(Debug, Clone)]
pub struct Ddmin {
    bumps: usize,
    retries: u32,
    tests: BTreeMap<Vec<usize>, Slot>,
    phase: Phase,
}

impl Ddmin {
    /// An attribution over `bumps >= 1` bumps; `retries` extra attempts for an unknown test.
    pub fn new(bumps: usize, retries: u32) -> Ddmin {
        assert!(bumps >= 1, "nothing to attribute");
        Ddmin {
            bumps,
            retries,
            tests: BTreeMap::new(),
            phase: Phase::Ends,
        }
    }

    /// The settled verdict of a subset, if it was tested.
    pub fn verdict(&self, set: &[usize]) -> Option<Verdict> {
        self.tests.get(set).and_then(|s| s.verdict)
    }

    fn settled(&self, set: &[usize]) -> Result<Verdict, Probe<Vec<usize>>> {
        let slot = self.tests.get(set).copied().unwrap_or_default();
        slot.verdict.ok_or_else(|| Probe {
            key: set.to_vec(),
            attempt: slot.attempts + 1,
        })
    }

    /// The next subset to test, or how the attribution ended. Advances past tests already
    /// settled (a subset met twice is tested once).
    pub fn next_step(&mut self) -> Step<Vec<usize>, DdOutcome> {
        loop {
            match &mut self.phase {
                Phase::Ends => {
                    let all: Vec<usize> = (0..self.bumps).collect();
                    match self.settled(&all) {
                        Err(probe) => return Step::Probe(probe),
                        Ok(Verdict::Bad) => {}
                        Ok(other) => return Step::Done(DdOutcome::BadEnd(other)),
                    }
                    match self.settled(&[]) {
                        Err(probe) => return Step::Probe(probe),
                        Ok(Verdict::Good) => {}
                        Ok(other) => return Step::Done(DdOutcome::GoodEnd(other)),
                    }
                    self.phase = Phase::Reduce {
                        current: all,
                        parts: 2,
                        at: 0,
                    };
                }
                Phase::Reduce { current, parts, at } => {
                    if current.len() == 1 {
                        return Step::Done(self.finish());
                    }
                    let round = tests_of(current, *parts);
                    let Some(test) = round.get(*at).cloned() else {
                        if *parts < current.len() {
                            *parts = (*parts * 2).min(current.len());
                            *at = 0;
                            continue;
                        }
                        return Step::Done(self.finish());
                    };
                    let subsets = *parts;
                    let position = *at;
                    match self.settled(&test) {
                        Err(probe) => return Step::Probe(probe),
                        Ok(Verdict::Bad) => {
                            // A failing part: reduce to it at two parts; a failing complement:
                            // reduce to it with one part fewer (ddmin's two cases).
                            let next_parts = if position < subsets {
                                2
                            } else {
                                (subsets - 1).max(2)
                            };
                            self.phase = Phase::Reduce {
                                current: test,
                                parts: next_parts,
                                at: 0,
                            };
                        }
                        Ok(Verdict::Good | Verdict::Unknown) => {
                            if let Phase::Reduce { at, .. } = &mut self.phase {
                                *at += 1;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The result from the current set: minimal when each one-bump removal was seen good.
    fn finish(&self) -> DdOutcome {
        let current = match &self.phase {
            Phase::Reduce { current, .. } => current.clone(),
            Phase::Ends => (0..self.bumps).collect(),
        };
        let minimal = current.iter().all(|removed| {
            let rest: Vec<usize> = current.iter().copied().filter(|b| b != removed).collect();
            self.verdict(&rest) == Some(Verdict::Good)
        });
        DdOutcome::Found {
            culprits: current,
            minimal,
        }
    }

    /// Takes the verdict of one attempt at `set`.
    pub fn record(&mut self, set: &[usize], verdict: Verdict) {
        let slot = self.tests.entry(set.to_vec()).or_default();
        slot.take(verdict, self.retries);
    }
}

/// One round of ddmin at `parts` parts: each part, then (with more than two parts) each
/// complement. Parts are contiguous and differ in size by at most one.
fn tests_of(current: &[usize], parts: usize) -> Vec<Vec<usize>> {
    let len = current.len();
    let mut chunks = Vec::with_capacity(parts);
    let mut start = 0;
    for i in 0..parts {
        let end = start + (len - start) / (parts - i);
        chunks.push(current[start..end].to_vec());
        start = end;
    }
    let mut round = chunks.clone();
    if parts > 2 {
        for chunk in &chunks {
            round.push(
                current
                    .iter()
                    .copied()
                    .filter(|b| !chunk.contains(b))
                    .collect(),
            );
        }
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs ddmin where a set fails iff it holds every bump of some group in `groups`, with
    /// `noisy(set, attempt)` turning that attempt into `Unknown`. Returns the outcome and tests.
    fn drive(
        bumps: usize,
        groups: &[Vec<usize>],
        retries: u32,
        noisy: impl Fn(&[usize], u32) -> bool,
    ) -> (DdOutcome, u32) {
        let mut dd = Ddmin::new(bumps, retries);
        let mut runs = 0;
        loop {
            match dd.next_step() {
                Step::Done(outcome) => return (outcome, runs),
                Step::Probe(Probe { key, attempt }) => {
                    runs += 1;
                    assert!(runs < 10_000, "ddmin does not end");
                    let fails = groups.iter().any(|g| g.iter().all(|b| key.contains(b)));
                    let verdict = match (noisy(&key, attempt), fails) {
                        (true, _) => Verdict::Unknown,
                        (false, true) => Verdict::Bad,
                        (false, false) => Verdict::Good,
                    };
                    dd.record(&key, verdict);
                }
            }
        }
    }

    #[test]
    fn one_culprit_among_four() {
        let (outcome, runs) = drive(4, &[vec![2]], 1, |_, _| false);
        assert_eq!(
            outcome,
            DdOutcome::Found {
                culprits: vec![2],
                minimal: true
            }
        );
        assert!(runs <= 8, "{runs} tests");
    }

    #[test]
    fn two_bumps_that_fail_only_together() {
        let (outcome, _) = drive(4, &[vec![0, 3]], 1, |_, _| false);
        assert_eq!(
            outcome,
            DdOutcome::Found {
                culprits: vec![0, 3],
                minimal: true
            }
        );
    }

    #[test]
    fn a_set_that_cannot_be_installed_is_never_proof() {
        // Bumps 0 and 1 only fail together, and bump 1 alone cannot be installed (unknown).
        let (outcome, _) = drive(2, &[vec![0, 1]], 1, |set, _| set == [1]);
        assert_eq!(
            outcome,
            DdOutcome::Found {
                culprits: vec![0, 1],
                minimal: false
            }
        );
    }

    #[test]
    fn ends_are_checked() {
        assert_eq!(
            drive(3, &[], 1, |_, _| false).0,
            DdOutcome::BadEnd(Verdict::Good)
        );
        assert_eq!(
            drive(3, &[vec![]], 1, |_, _| false).0,
            DdOutcome::GoodEnd(Verdict::Bad)
        );
    }

    fn group_strategy() -> impl Strategy<Value = (usize, Vec<Vec<usize>>)> {
        (1usize..9).prop_flat_map(|m| {
            let group = proptest::collection::btree_set(0..m, 1..=m.min(3))
                .prop_map(|s| s.into_iter().collect::<Vec<_>>());
            (Just(m), proptest::collection::vec(group, 1..3))
        })
    }

    /// A minimal group: no other group is a proper subset of it.
    fn is_minimal_group(found: &[usize], groups: &[Vec<usize>]) -> bool {
        groups.iter().any(|g| g == found)
            && !groups
                .iter()
                .any(|g| g.len() < found.len() && g.iter().all(|b| found.contains(b)))
    }

    proptest! {
        /// Any monotone failure (fails iff it holds a whole group), any noise that leaves one
        /// truthful attempt: ddmin names one minimal group exactly, and says it is minimal.
        #[test]
        fn finds_a_minimal_group(
            (m, groups) in group_strategy(),
            seed in any::<u64>(),
            retries in 1u32..3,
        ) {
            let noisy = |set: &[usize], attempt: u32| {
                let h = set.iter().fold(seed, |h, b| h.rotate_left(5) ^ (*b as u64 + 1));
                attempt <= retries && h.rotate_left(attempt) & 1 == 1
            };
            let (outcome, _) = drive(m, &groups, retries, noisy);
            match outcome {
                DdOutcome::Found { culprits, minimal } => {
                    prop_assert!(minimal);
                    prop_assert!(is_minimal_group(&culprits, &groups), "{:?} of {:?}", culprits, groups);
                }
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
