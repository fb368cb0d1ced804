//! Probes a bisect uses against the `ceil(log2 n) + 2` bound (`cargo bench --bench bisect`);
//! numbers only, nothing asserted.
//!
//! For 20 and 200 candidate versions, every position of the first bad version is searched with
//! the pure search of `gpucompat::bisect::search`, without noise and with noise: each probe
//! attempt is unknown with probability 0.2 or 0.4 (an infrastructure fault, another failure), one
//! retry allowed. It prints the probes (distinct values) and cell runs (attempts) used: mean,
//! worst, and how often the answer was exact or the search had to stop unresolved.

use gpucompat::bisect::search::{Outcome, Probe, Step, Verdict, VersionSearch, probe_bound};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Write as _;

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn chance(&mut self, p: f64) -> bool {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

fn one(n: usize, first_bad: usize, noise: f64, rng: &mut Rng) -> (usize, u32, Outcome) {
    let mut search = VersionSearch::new(n, 1);
    let mut probed = HashSet::new();
    let mut runs = 0;
    loop {
        match search.next_step() {
            Step::Done(outcome) => return (probed.len(), runs, outcome),
            Step::Probe(Probe { key, .. }) => {
                runs += 1;
                probed.insert(key);
                let verdict = if noise > 0.0 && rng.chance(noise) {
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

fn main() {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>5} {:>6} {:>6} {:>12} {:>10} {:>10} {:>7} {:>10} {:>6}",
        "n",
        "noise",
        "bound",
        "probes mean",
        "probes max",
        "runs mean",
        "exact",
        "unresolved",
        "ends"
    );
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for n in [20usize, 200] {
        for noise in [0.0, 0.2, 0.4] {
            let trials = if noise > 0.0 { 50 } else { 1 };
            let (mut probes, mut worst, mut runs, mut exact, mut unresolved, mut ends, mut total) =
                (0usize, 0usize, 0u32, 0u32, 0u32, 0u32, 0u32);
            for first_bad in 1..n {
                for _ in 0..trials {
                    let (p, r, outcome) = one(n, first_bad, noise, &mut rng);
                    total += 1;
                    probes += p;
                    worst = worst.max(p);
                    runs += r;
                    match outcome {
                        Outcome::Converged {
                            first_bad: found, ..
                        } => {
                            assert_eq!(found, first_bad, "a wrong answer");
                            exact += 1;
                        }
                        Outcome::Unresolved { .. } => unresolved += 1,
                        Outcome::BadEnd(_) | Outcome::GoodEnd(_) => ends += 1,
                    }
                }
            }
            let _ = writeln!(
                out,
                "{n:>5} {noise:>6.1} {:>6} {:>12.2} {worst:>10} {:>10.2} {:>6.1}% {:>9.1}% {:>5.1}%",
                probe_bound(n),
                probes as f64 / f64::from(total),
                f64::from(runs) / f64::from(total),
                100.0 * f64::from(exact) / f64::from(total),
                100.0 * f64::from(unresolved) / f64::from(total),
                100.0 * f64::from(ends) / f64::from(total),
            );
        }
    }
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}
