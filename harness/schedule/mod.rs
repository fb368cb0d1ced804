//! Which cell runs next, on which GPUs: one policy for live runs and for `plan --simulate`.
//!
//! Order: cells needing more GPUs first (they are the hardest to place, and a stream of
//! single-GPU cells must not push them to the end); then cells that share an environment and GPU
//! archs (so a JIT cache) are kept together, the groups with the most work first; inside a group,
//! the longest first where durations are known (longest-processing-time packing keeps the
//! makespan near its lower bound). Placement: the first cell in that order whose GPUs are free starts; a
//! cell that cannot start reserves the free GPUs it could use, so a stream of single-GPU cells
//! cannot starve a multi-GPU one.
//!
//! - `slots`: which GPUs are free and which a cell gets.
//! - `plan_jobs`: the one place a plan's cells become jobs (with the durations of an earlier run).

mod plan_jobs;
pub(crate) mod slots;

use crate::record::GpuInfo;
pub(crate) use plan_jobs::batches;
pub use plan_jobs::{DurationsError, jobs, read_durations};
use slots::Slots;
use std::collections::{BTreeMap, HashMap};

/// One schedulable unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Index of the cell in the plan.
    pub index: usize,
    /// GPU archs, in the order asked.
    pub gpus: Vec<String>,
    /// Cells with the same group share an environment and JIT cache.
    pub group: String,
    /// Expected seconds, where known.
    pub duration: Option<f64>,
}

/// The order cells are offered to the GPUs.
pub fn order(jobs: &[Job]) -> Vec<usize> {
    let mut work: HashMap<&str, f64> = HashMap::new();
    let mut first_seen: HashMap<&str, usize> = HashMap::new();
    for (position, job) in jobs.iter().enumerate() {
        *work.entry(&job.group).or_default() +=
            job.duration.unwrap_or(1.0) * job.gpus.len().max(1) as f64;
        first_seen.entry(&job.group).or_insert(position);
    }
    let mut positions: Vec<usize> = (0..jobs.len()).collect();
    positions.sort_by(|&a, &b| {
        let (ja, jb) = (&jobs[a], &jobs[b]);
        let group = |j: &Job| (work[j.group.as_str()], first_seen[j.group.as_str()]);
        let (wa, fa) = group(ja);
        let (wb, fb) = group(jb);
        jb.gpus
            .len()
            .cmp(&ja.gpus.len())
            .then(wb.total_cmp(&wa))
            .then(fa.cmp(&fb))
            .then(
                jb.duration
                    .unwrap_or(0.0)
                    .total_cmp(&ja.duration.unwrap_or(0.0)),
            )
            .then(a.cmp(&b))
    });
    positions
}

/// Live scheduling state.
#[derive(Debug)]
pub struct Scheduler {
    jobs: Vec<Job>,
    slots: Slots,
    /// Positions in `jobs`, in offer order.
    pending: Vec<usize>,
}

impl Scheduler {
    /// Returns the scheduler and the positions of jobs this host can never serve.
    pub fn new(jobs: Vec<Job>, gpus: Vec<GpuInfo>) -> (Scheduler, Vec<usize>) {
        let slots = Slots::new(gpus);
        let (pending, never): (Vec<usize>, Vec<usize>) = order(&jobs)
            .into_iter()
            .partition(|&p| slots.can_serve(&jobs[p].gpus));
        (
            Scheduler {
                jobs,
                slots,
                pending,
            },
            never,
        )
    }

    pub fn job(&self, position: usize) -> &Job {
        &self.jobs[position]
    }

    pub fn gpu(&self, slot: usize) -> &GpuInfo {
        self.slots.gpu(slot)
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Starts what can start while fewer than `limit` run: (position, GPU slots) pairs.
    pub fn start(&mut self, running: usize, limit: usize) -> Vec<(usize, Vec<usize>)> {
        let mut started = Vec::new();
        let mut reserved = vec![false; self.slots.len()];
        let mut i = 0;
        while i < self.pending.len() && running + started.len() < limit {
            let position = self.pending[i];
            let want = &self.jobs[position].gpus;
            match self.slots.take(want, &reserved) {
                Some(taken) => {
                    self.pending.remove(i);
                    started.push((position, taken));
                }
                None => {
                    self.slots.reserve(want, &mut reserved);
                    i += 1;
                }
            }
        }
        started
    }

    pub fn release(&mut self, taken: &[usize]) {
        self.slots.release(taken);
    }
}

/// What a fleet would achieve with the policy above.
#[derive(Debug, Clone, PartialEq)]
pub struct Simulation {
    pub makespan_s: f64,
    /// No schedule can beat this: the longest cell, or the busiest arch pool's GPU-seconds
    /// spread over its GPUs.
    pub lower_bound_s: f64,
    /// Busy share of each GPU over the makespan, by inventory index.
    pub utilisation: Vec<(GpuInfo, f64)>,
    /// Positions of jobs no GPU of the inventory can serve.
    pub unservable: Vec<usize>,
    /// (position, start, end, GPU slots) of every job, in start order.
    pub timeline: Vec<(usize, f64, f64, Vec<usize>)>,
}

/// A discrete-event run of the schedule (no waiting). Jobs without a duration take `default_s`.
pub fn simulate(jobs: Vec<Job>, gpus: Vec<GpuInfo>, limit: usize, default_s: f64) -> Simulation {
    let duration = |job: &Job| job.duration.unwrap_or(default_s).max(0.0);
    let lower_bound_s = lower_bound(&jobs, &gpus, default_s);
    let (mut scheduler, unservable) = Scheduler::new(jobs, gpus.clone());
    let mut now = 0.0f64;
    // Running jobs by end time (BTreeMap keyed by ordered bits of the end time, then position).
    let mut running: BTreeMap<(u64, usize), Vec<usize>> = BTreeMap::new();
    let mut timeline = Vec::new();
    let mut busy = vec![0.0f64; gpus.len()];
    loop {
        for (position, taken) in scheduler.start(running.len(), limit.max(1)) {
            let end = now + duration(scheduler.job(position));
            for &slot in &taken {
                busy[slot] += end - now;
            }
            timeline.push((position, now, end, taken.clone()));
            running.insert((end.to_bits(), position), taken);
        }
        let Some(((end, _), taken)) = running.pop_first() else {
            break;
        };
        now = f64::from_bits(end);
        scheduler.release(&taken);
    }
    let utilisation = gpus
        .into_iter()
        .zip(busy)
        .map(|(gpu, busy)| (gpu, if now > 0.0 { busy / now } else { 0.0 }))
        .collect();
    Simulation {
        makespan_s: now,
        lower_bound_s,
        utilisation,
        unservable,
        timeline,
    }
}

/// The longest job, or per arch the GPU-seconds asked of that arch over its GPUs.
fn lower_bound(jobs: &[Job], gpus: &[GpuInfo], default_s: f64) -> f64 {
    let slots = Slots::new(gpus.to_vec());
    let mut demand: HashMap<&str, f64> = HashMap::new();
    let mut longest = 0.0f64;
    for job in jobs.iter().filter(|j| slots.can_serve(&j.gpus)) {
        let d = job.duration.unwrap_or(default_s);
        longest = longest.max(d);
        for arch in &job.gpus {
            // Charge the pool of the GPUs that serve this arch (exact arch names in practice).
            let pool = gpus
                .iter()
                .find(|g| {
                    crate::inventory::serves(&g.arch, crate::matrix::gpus::split_device(arch).0)
                })
                .map_or(arch.as_str(), |g| g.arch.as_str());
            *demand.entry(pool).or_default() += d;
        }
    }
    let pools = demand.into_iter().map(|(arch, seconds)| {
        let count = gpus.iter().filter(|g| g.arch == arch).count().max(1);
        seconds / count as f64
    });
    pools.fold(longest, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, arch: &str) -> GpuInfo {
        GpuInfo {
            index,
            name: format!("gpu{index}"),
            arch: arch.to_owned(),
            memory_mib: None,
            uuid: None,
        }
    }

    fn job(index: usize, gpus: &[&str], group: &str, duration: f64) -> Job {
        Job {
            index,
            gpus: gpus.iter().map(|g| (*g).to_owned()).collect(),
            group: group.to_owned(),
            duration: Some(duration),
        }
    }

    #[test]
    fn multi_gpu_first_then_groups_biggest_first_then_longest() {
        let jobs = [
            job(0, &["sm_90"], "a", 1.0),
            job(1, &["sm_90"], "b", 5.0),
            job(2, &["sm_90"], "a", 3.0),
            job(3, &["sm_90", "sm_90"], "c", 1.0),
            job(4, &["sm_90"], "b", 0.5),
        ];
        // The 2-GPU cell first; then group b (5.5 GPU-seconds) before group a (4), longest first.
        assert_eq!(order(&jobs), [3, 1, 4, 2, 0]);
    }

    #[test]
    fn two_gpu_cell_is_not_starved_by_single_gpu_cells() {
        let mut jobs: Vec<Job> = (0..6).map(|i| job(i, &["sm_90"], "a", 10.0)).collect();
        jobs.push(job(6, &["sm_90", "sm_90"], "small", 1.0));
        let sim = simulate(jobs, vec![gpu(0, "sm_90"), gpu(1, "sm_90")], 8, 1.0);
        let start_of_pair = sim
            .timeline
            .iter()
            .find(|(p, ..)| *p == 6)
            .map(|(_, start, ..)| *start);
        // However small its group, the pair is placed first instead of after every single.
        assert_eq!(start_of_pair, Some(0.0));
        assert!((sim.makespan_s - 31.0).abs() < 1e-9, "{}", sim.makespan_s);
        assert!((sim.lower_bound_s - 31.0).abs() < 1e-9);
    }

    #[test]
    fn mixed_inventory_makespan_and_bound() {
        let gpus = vec![gpu(0, "sm_89"), gpu(1, "sm_86"), gpu(2, "sm_90")];
        let jobs = vec![
            job(0, &["sm_90"], "x", 4.0),
            job(1, &["sm_90"], "x", 4.0),
            job(2, &["sm_86", "sm_89"], "y", 3.0),
            job(3, &["sm_89"], "z", 2.0),
            job(4, &["sm_120"], "z", 2.0),
        ];
        let sim = simulate(jobs, gpus, 3, 1.0);
        assert_eq!(sim.unservable, [4]);
        assert!((sim.lower_bound_s - 8.0).abs() < 1e-9);
        assert!((sim.makespan_s - 8.0).abs() < 1e-9);
        let sm90 = sim.utilisation.iter().find(|(g, _)| g.arch == "sm_90");
        assert!(sm90.is_some_and(|(_, u)| (*u - 1.0).abs() < 1e-9));
    }

    #[test]
    fn respects_the_jobs_limit() {
        let jobs: Vec<Job> = (0..4).map(|i| job(i, &[], "cpu", 1.0)).collect();
        let sim = simulate(jobs, Vec::new(), 2, 1.0);
        assert!((sim.makespan_s - 2.0).abs() < 1e-9);
    }
}
