//! The version search, pure: which value to probe next, and what the probes so far prove.
//!
//! Candidates are indices `0..n` in version order; `0` is the good end, `n - 1` the bad end.
//! The search is a state machine ([`VersionSearch::next_step`] says what to probe,
//! [`VersionSearch::record`] takes the verdict) so the async driver and the property tests drive
//! the same code, and nothing here knows about processes or files.
//!
//! Rules, in the order they apply:
//! - The ends are checked first, the bad end before the good end (the bad end's failure names the
//!   signature being bisected): a bisect between ends that are not what they were said to be
//!   proves nothing, so it stops and says which end is wrong.
//! - A probe is tri-state. `Unknown` (an infrastructure fault, an install conflict, another
//!   failure) is asked again up to `retries` times; after that the value is stepped around: the
//!   untested value nearest the middle is probed instead. `Unknown` never moves a bound.
//! - Without unknowns this is a binary search over the `n - 1` gaps between the ends:
//!   `2 + ceil(log2(n - 1))` probes at most, within the `ceil(log2 n) + 2` the issue asks.

use serde::{Deserialize, Serialize};

/// What one probe says about a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The target failure is absent.
    Good,
    /// The target failure happened.
    Bad,
    /// Nothing can be concluded (infrastructure fault, install conflict, another failure).
    Unknown,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Bad => "bad",
            Verdict::Unknown => "unknown",
        }
    }
}

/// One probe to run: the thing to test and which attempt at it this is (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe<K> {
    pub key: K,
    pub attempt: u32,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<K, O> {
    Probe(Probe<K>),
    Done(O),
}

/// How a version search ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `first_bad == last_good + 1`: both seen, the change is between them.
    Converged { last_good: usize, first_bad: usize },
    /// The bad end did not fail with the target (its final verdict: good or unknown).
    BadEnd(Verdict),
    /// The good end is not good (its final verdict: bad or unknown).
    GoodEnd(Verdict),
    /// Every value strictly between `last_good` and `first_bad` stayed unknown after its retries:
    /// the change is somewhere in `last_good + 1 ..= first_bad`.
    Unresolved { last_good: usize, first_bad: usize },
}

/// Attempts made at one key and, once settled, its final verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) attempts: u32,
    /// `Some` once settled: good or bad, or unknown after every retry.
    pub(crate) verdict: Option<Verdict>,
}

impl Slot {
    /// Takes one attempt's verdict; returns the settled verdict, if this attempt settled it.
    pub(crate) fn take(&mut self, verdict: Verdict, retries: u32) -> Option<Verdict> {
        self.attempts += 1;
        let settled = match verdict {
            Verdict::Good | Verdict::Bad => true,
            Verdict::Unknown => self.attempts > retries,
        };
        if settled {
            self.verdict = Some(verdict);
        }
        self.verdict
    }

    fn pending(&self) -> bool {
        self.verdict.is_none() && self.attempts > 0
    }
}

/// A tri-state bisection over `n` ordered values.
#[derive(Debug, Clone)]
pub struct VersionSearch {
    retries: u32,
    slots: Vec<Slot>,
    /// Greatest index known good and least index known bad, once the ends are checked.
    lo: usize,
    hi: usize,
}

impl VersionSearch {
    /// A search over `n >= 2` values; `retries` extra attempts for an unknown probe.
    pub fn new(n: usize, retries: u32) -> VersionSearch {
        assert!(n >= 2, "a bisect needs two ends");
        VersionSearch {
            retries,
            slots: vec![Slot::default(); n],
            lo: 0,
            hi: n - 1,
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The settled verdict of a value, if any.
    pub fn verdict(&self, index: usize) -> Option<Verdict> {
        self.slots[index].verdict
    }

    /// The next probe, or how the search ended.
    pub fn next_step(&self) -> Step<usize, Outcome> {
        let n = self.slots.len();
        match self.end(n - 1) {
            Err(probe) => return Step::Probe(probe),
            Ok(Verdict::Bad) => {}
            Ok(other) => return Step::Done(Outcome::BadEnd(other)),
        }
        match self.end(0) {
            Err(probe) => return Step::Probe(probe),
            Ok(Verdict::Good) => {}
            Ok(other) => return Step::Done(Outcome::GoodEnd(other)),
        }
        let (lo, hi) = (self.lo, self.hi);
        if hi - lo == 1 {
            return Step::Done(Outcome::Converged {
                last_good: lo,
                first_bad: hi,
            });
        }
        // An unknown value with retries left is asked again before anything else.
        if let Some(index) = (lo + 1..hi).find(|&i| self.slots[i].pending()) {
            return Step::Probe(self.probe(index));
        }
        let mid = lo + (hi - lo) / 2;
        let nearest = (lo + 1..hi)
            .filter(|&i| self.slots[i].verdict.is_none())
            .min_by_key(|&i| (i.abs_diff(mid), i));
        match nearest {
            Some(index) => Step::Probe(self.probe(index)),
            None => Step::Done(Outcome::Unresolved {
                last_good: lo,
                first_bad: hi,
            }),
        }
    }

    /// An end's settled verdict, or the probe that settles it.
    fn end(&self, index: usize) -> Result<Verdict, Probe<usize>> {
        self.slots[index].verdict.ok_or_else(|| self.probe(index))
    }

    fn probe(&self, index: usize) -> Probe<usize> {
        Probe {
            key: index,
            attempt: self.slots[index].attempts + 1,
        }
    }

    /// Takes the verdict of one attempt at `index`.
    pub fn record(&mut self, index: usize, verdict: Verdict) {
        let n = self.slots.len();
        let settled = self.slots[index].take(verdict, self.retries);
        // The ends set the first bounds; a value between them moves one bound inwards. A
        // verdict outside the bounds (a caller probing out of turn) moves nothing.
        let inside = index == 0 || index == n - 1 || (self.lo < index && index < self.hi);
        match settled {
            Some(Verdict::Good) if inside && index < self.hi => self.lo = index,
            Some(Verdict::Bad) if inside && index > self.lo => self.hi = index,
            _ => {}
        }
    }
}

/// The most probes a noiseless search over `n` values needs with its two end checks:
/// `ceil(log2 n) + 2`.
pub fn probe_bound(n: usize) -> u32 {
    let n = n.max(1);
    usize::BITS - (n - 1).leading_zeros() + 2
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Runs a search against a truth (`first_bad`) and a noise pattern: `noisy(index, attempt)`
    /// turns that attempt's answer into `Unknown`. Returns the outcome and the attempts made.
    fn drive(
        n: usize,
        first_bad: usize,
        retries: u32,
        noisy: impl Fn(usize, u32) -> bool,
    ) -> (Outcome, u32) {
        let mut search = VersionSearch::new(n, retries);
        let mut runs = 0;
        loop {
            match search.next_step() {
                Step::Done(outcome) => return (outcome, runs),
                Step::Probe(Probe { key, attempt }) => {
                    runs += 1;
                    assert!(runs < 10_000, "the search does not end");
                    let verdict = if noisy(key, attempt) {
                        Verdict::Unknown
                    } else if key >= first_bad {
                        Verdict::Bad
                    } else {
                        Verdict::Good
                    };
                    search.record(key, verdict);
                }
            }
        }
    }

    #[test]
    fn bound_is_ceil_log2_plus_two() {
        assert_eq!(probe_bound(2), 3);
        assert_eq!(probe_bound(16), 6);
        assert_eq!(probe_bound(17), 7);
        assert_eq!(probe_bound(20), 7);
        assert_eq!(probe_bound(200), 10);
    }

    #[test]
    fn ends_are_checked_first_bad_end_before_good_end() {
        let search = VersionSearch::new(10, 1);
        assert_eq!(
            search.next_step(),
            Step::Probe(Probe { key: 9, attempt: 1 })
        );
        let mut search = search;
        search.record(9, Verdict::Bad);
        assert_eq!(
            search.next_step(),
            Step::Probe(Probe { key: 0, attempt: 1 })
        );
    }

    #[test]
    fn a_good_bad_end_stops_the_search() {
        let (outcome, runs) = drive(10, 10, 1, |_, _| false);
        assert_eq!(outcome, Outcome::BadEnd(Verdict::Good));
        assert_eq!(runs, 1);
        let (outcome, _) = drive(10, 0, 1, |_, _| false);
        assert_eq!(outcome, Outcome::GoodEnd(Verdict::Bad));
    }

    #[test]
    fn an_always_unknown_middle_is_unresolved_never_decided() {
        let (outcome, _) = drive(5, 3, 1, |i, _| i == 2);
        // 0 good, 4 bad, 3 bad, 1 good, 2 unknown twice: the change is in 2..=3.
        assert_eq!(
            outcome,
            Outcome::Unresolved {
                last_good: 1,
                first_bad: 3
            }
        );
    }

    proptest! {
        /// Any monotone predicate, no noise: the exact answer, within the bound.
        #[test]
        fn exact_and_within_the_bound(n in 2usize..400, cut in 0.0f64..1.0) {
            let first_bad = 1 + ((n - 1) as f64 * cut) as usize;
            let first_bad = first_bad.min(n - 1);
            let (outcome, runs) = drive(n, first_bad, 1, |_, _| false);
            prop_assert_eq!(outcome, Outcome::Converged { last_good: first_bad - 1, first_bad });
            prop_assert!(runs <= probe_bound(n), "{} runs for n = {}", runs, n);
        }

        /// Any noise that leaves every value one truthful attempt among its `retries + 1`: the
        /// exact answer still.
        #[test]
        fn exact_under_noise_that_leaves_one_good_retry(
            n in 2usize..300,
            cut in 0.0f64..1.0,
            retries in 1u32..4,
            seed in any::<u64>(),
        ) {
            let first_bad = (1 + ((n - 1) as f64 * cut) as usize).min(n - 1);
            // Per value, the one attempt guaranteed truthful; the others are noisy by the seed.
            let truthful = |i: usize| (seed.rotate_left(i as u32 % 64) as u32 ^ i as u32) % (retries + 1) + 1;
            let noisy = |i: usize, attempt: u32| {
                attempt != truthful(i) && (seed >> ((i + attempt as usize) % 61)) & 1 == 1
            };
            let (outcome, _) = drive(n, first_bad, retries, noisy);
            prop_assert_eq!(outcome, Outcome::Converged { last_good: first_bad - 1, first_bad });
        }

        /// Any noise at all (values may stay unknown for good): never a wrong answer. Either
        /// the exact answer, an honest "unresolved" range that holds it, or an end reported.
        #[test]
        fn never_wrong_under_any_noise(
            n in 2usize..200,
            cut in 0.0f64..1.0,
            retries in 0u32..3,
            dead in proptest::collection::vec(any::<bool>(), 200),
            flicker in any::<u64>(),
        ) {
            let first_bad = (1 + ((n - 1) as f64 * cut) as usize).min(n - 1);
            let noisy = |i: usize, attempt: u32| {
                dead[i] || (flicker >> ((i * 7 + attempt as usize) % 63)) & 1 == 1
            };
            match drive(n, first_bad, retries, noisy).0 {
                Outcome::Converged { last_good, first_bad: found } => {
                    prop_assert_eq!(found, first_bad);
                    prop_assert_eq!(last_good, first_bad - 1);
                }
                Outcome::Unresolved { last_good, first_bad: found } => {
                    prop_assert!(last_good < first_bad && first_bad <= found);
                    prop_assert!(found - last_good > 1);
                }
                Outcome::BadEnd(v) => prop_assert_eq!(v, Verdict::Unknown),
                Outcome::GoodEnd(v) => prop_assert_eq!(v, Verdict::Unknown),
            }
        }
    }
}
