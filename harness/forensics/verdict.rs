//! The verdict a hang capture supports, and the evidence that decided it:
//! - every Python process (bar launchers waiting for them) waits in a collective (NCCL, a
//!   `torch.distributed` barrier or store rendezvous): `collective_timeout`;
//! - a compiler of the cell (ninja, nvcc, cicc, ptxas, ...) used CPU during the capture, most
//!   tellingly under a lock others wait for: a slow compile, `timeout`, never `deadlock`;
//! - otherwise the watchdog's verdict stands, with what the capture saw as its evidence.

use super::{HangCapture, LockFile, ProcSnapshot, stacks};
use crate::classify::Verdict;
use crate::signature::Signature;
use serde::{Deserialize, Serialize};

/// Which evidence decided a hang's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DecidedBy {
    /// Every rank's stack waits in a collective.
    CollectiveStacks,
    /// A compiler of the cell is busy (holding the lock the others wait on, where known).
    BusyCompiler,
    /// The watchdog's own verdict (no progress, or the deadline), described by the capture.
    Watchdog,
}

/// A hang's signature and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HangVerdict {
    pub signature: Signature,
    pub decided_by: DecidedBy,
    /// One sentence a maintainer can check against the capture.
    pub evidence: String,
}

/// Process names of compilers a JIT runs (`/proc/<pid>/comm`, at most 15 bytes).
const COMPILERS: &[&str] = &[
    "ninja",
    "nvcc",
    "cicc",
    "ptxas",
    "cudafe++",
    "fatbinary",
    "nvlink",
    "cc1plus",
    "cc1",
    "gcc",
    "g++",
    "c++",
    "clang",
    "clang++",
    "ld",
    "ld.lld",
    "as",
    "make",
    "cmake",
];

/// Whether a frame is in a collective or a distributed rendezvous.
fn collective_frame(label: &str) -> bool {
    let l = label.to_ascii_lowercase();
    l.starts_with("torch.distributed")
        || ["nccl", "c10d", "processgroup", "tcpstore"]
            .iter()
            .any(|w| l.contains(w))
        || [
            "all_reduce",
            "allreduce",
            "all_gather",
            "allgather",
            "reduce_scatter",
            "all_to_all",
            "alltoall",
        ]
        .iter()
        .any(|w| l.contains(w))
}

/// The collective frame of the thread that says where the process is. Only that thread: every
/// rank of an NCCL job has a watchdog thread in `c10d` code, stuck or not.
fn in_collective(p: &ProcSnapshot) -> Option<&str> {
    stacks::telling_thread(&p.stacks)?
        .frames
        .iter()
        .find(|f| collective_frame(&f.label))
        .map(|f| f.label.as_str())
}

/// Whether `ancestor` is `pid`'s parent, grandparent, ... among the captured processes.
fn is_ancestor(procs: &[ProcSnapshot], ancestor: i32, pid: i32) -> bool {
    let mut at = pid;
    for _ in 0..64 {
        let Some(p) = procs.iter().find(|p| p.pid == at) else {
            return false;
        };
        if p.ppid == ancestor {
            return true;
        }
        at = p.ppid;
    }
    false
}

/// Decides a captured hang's signature.
pub fn decide(capture: &HangCapture, watchdog: Verdict) -> HangVerdict {
    collective(capture)
        .or_else(|| busy_compiler(capture))
        .unwrap_or_else(|| by_watchdog(capture, watchdog))
}

fn collective(capture: &HangCapture) -> Option<HangVerdict> {
    let procs = &capture.processes;
    let with_stacks: Vec<&ProcSnapshot> = procs
        .iter()
        .filter(|p| !stacks::top_frames(p).is_empty())
        .collect();
    let waiting: Vec<(&ProcSnapshot, &str)> = with_stacks
        .iter()
        .filter_map(|p| in_collective(p).map(|f| (*p, f)))
        .collect();
    if waiting.is_empty() {
        return None;
    }
    // A launcher that waits for its ranks is not a rank that left the collective.
    let others = with_stacks.iter().filter(|p| {
        !waiting.iter().any(|(w, _)| w.pid == p.pid)
            && !waiting
                .iter()
                .any(|(w, _)| is_ancestor(procs, p.pid, w.pid))
    });
    if others.count() > 0 {
        return None;
    }
    Some(HangVerdict {
        signature: Signature::CollectiveTimeout,
        decided_by: DecidedBy::CollectiveStacks,
        evidence: format!(
            "all {} Python process(es) with a stack wait in a collective (`{}`)",
            waiting.len(),
            waiting[0].1
        ),
    })
}

fn busy_compiler(capture: &HangCapture) -> Option<HangVerdict> {
    let procs = &capture.processes;
    let compiler = procs
        .iter()
        .find(|p| p.busy && COMPILERS.contains(&p.comm.as_str()))?;
    let held = capture.locks.iter().find(|l| {
        l.holder
            .is_some_and(|h| h == compiler.pid || is_ancestor(procs, h, compiler.pid))
    });
    let evidence = match held {
        Some(lock) => format!(
            "{} process(es) wait on `{}` held by pid {}, whose `{}` (pid {}) used {:.2}s of CPU during the capture: a slow compile, not a deadlock",
            waiters(capture, lock).len(),
            lock.path,
            lock.holder.unwrap_or_default(),
            compiler.comm,
            compiler.pid,
            compiler.cpu_during_capture_s
        ),
        None => format!(
            "`{}` (pid {}) used {:.2}s of CPU during the capture: a compile still running, not a deadlock",
            compiler.comm, compiler.pid, compiler.cpu_during_capture_s
        ),
    };
    Some(HangVerdict {
        signature: Signature::Timeout,
        decided_by: DecidedBy::BusyCompiler,
        evidence,
    })
}

/// The processes waiting for a lock: the kernel's waiters, the others that have its file open,
/// and processes whose stack is in Python's `filelock` (which polls with non-blocking tries and
/// closes the file between them, so its waiters are neither blocked nor holding the file).
pub fn waiters(capture: &HangCapture, lock: &LockFile) -> Vec<i32> {
    let mut pids = lock.waiters.clone();
    let polling = capture.processes.iter().filter(|p| {
        stacks::top_frames(p)
            .iter()
            .any(|f| f.starts_with("filelock."))
    });
    for p in lock.openers.iter().copied().chain(polling.map(|p| p.pid)) {
        if Some(p) != lock.holder && !pids.contains(&p) {
            pids.push(p);
        }
    }
    pids
}

fn by_watchdog(capture: &HangCapture, watchdog: Verdict) -> HangVerdict {
    let procs = &capture.processes;
    let busy: Vec<String> = procs
        .iter()
        .filter(|p| p.busy)
        .map(|p| format!("`{}` (pid {})", p.comm, p.pid))
        .collect();
    let lock = capture
        .locks
        .iter()
        .find(|l| l.holder.is_some() && !waiters(capture, l).is_empty());
    let mut parts = Vec::new();
    if let Some(g) = capture.groups.first() {
        parts.push(stacks::describe(g));
    }
    if let Some(l) = lock {
        let holder = l.holder.unwrap_or_default();
        let state = match procs.iter().find(|p| p.pid == holder) {
            Some(p) if p.busy => "busy".to_owned(),
            Some(p) => format!("idle, `{}`", p.comm),
            None => "not a process of the cell".to_owned(),
        };
        parts.push(format!(
            "{} process(es) wait on `{}` held by pid {holder} ({state})",
            waiters(capture, l).len(),
            l.path
        ));
    }
    if busy.is_empty() {
        if !procs.is_empty() {
            parts.push("no process of the cell used CPU during the capture".to_owned());
        }
    } else {
        parts.push(format!("busy during the capture: {}", busy.join(", ")));
    }
    if procs.is_empty() {
        parts.push("no process of the cell was left to capture".to_owned());
    }
    let what = match watchdog {
        Verdict::Deadlock => "no progress for the watchdog's window",
        Verdict::Timeout => "the deadline passed",
    };
    HangVerdict {
        signature: watchdog.signature(),
        decided_by: DecidedBy::Watchdog,
        evidence: format!("{what}; {}", parts.join("; ")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Frame, ThreadStack};
    use super::*;

    fn with_frame(pid: i32, ppid: i32, label: &str) -> ProcSnapshot {
        ProcSnapshot {
            ppid,
            stacks: vec![ThreadStack {
                thread: Some("MainThread".to_owned()),
                tid: None,
                active: None,
                frames: vec![Frame {
                    label: label.to_owned(),
                    file: String::new(),
                    line: 0,
                    native: false,
                }],
            }],
            ..ProcSnapshot::bare(pid)
        }
    }

    fn capture(processes: Vec<ProcSnapshot>, locks: Vec<LockFile>) -> HangCapture {
        let mut c = HangCapture::empty(super::super::Trigger::NoProgress);
        c.groups = stacks::group(&processes);
        c.processes = processes;
        c.locks = locks;
        c
    }

    #[test]
    fn ranks_all_in_a_collective_are_a_collective_timeout() {
        let ar = "torch.distributed.distributed_c10d:all_reduce";
        let c = capture(
            vec![
                with_frame(10, 1, "launcher:main"),
                with_frame(11, 10, ar),
                with_frame(12, 10, ar),
            ],
            vec![],
        );
        let v = decide(&c, Verdict::Deadlock);
        assert_eq!(v.signature, Signature::CollectiveTimeout);
        assert_eq!(v.decided_by, DecidedBy::CollectiveStacks);
        assert!(v.evidence.contains("all 2 Python"), "{}", v.evidence);
        // One rank elsewhere: not every rank is in the collective, the watchdog's verdict stands.
        let c = capture(
            vec![with_frame(11, 1, ar), with_frame(12, 1, "model:forward")],
            vec![],
        );
        assert_eq!(decide(&c, Verdict::Deadlock).signature, Signature::Deadlock);
        // Every NCCL rank has a watchdog thread in c10d code: it does not make a hang collective.
        let mut rank = with_frame(11, 1, "model:forward");
        rank.stacks.push(ThreadStack {
            thread: Some("pt_nccl_watchdg".to_owned()),
            tid: None,
            active: None,
            frames: vec![Frame {
                label: "c10d::ProcessGroupNCCL::Watchdog::run".to_owned(),
                file: String::new(),
                line: 0,
                native: true,
            }],
        });
        let c = capture(vec![rank], vec![]);
        assert_eq!(decide(&c, Verdict::Deadlock).signature, Signature::Deadlock);
    }

    #[test]
    fn a_lock_held_by_a_busy_compiler_is_a_slow_compile() {
        let mut ninja = ProcSnapshot::bare(20);
        ninja.comm = "ninja".to_owned();
        ninja.ppid = 11;
        ninja.busy = true;
        ninja.cpu_during_capture_s = 0.4;
        let lock = LockFile {
            path: "/cache/sampling.lock".to_owned(),
            kind: Some("FLOCK".to_owned()),
            mode: Some("WRITE".to_owned()),
            holder: Some(11),
            waiters: vec![],
            // Python's filelock closes the file between tries: only the holder has it open, the
            // waiters are known by their frames.
            openers: vec![11],
        };
        let procs = vec![
            with_frame(11, 1, "flashinfer.jit.cpp_ext:run_ninja"),
            with_frame(12, 1, "filelock._api:BaseFileLock.acquire"),
            with_frame(13, 1, "filelock._api:BaseFileLock.acquire"),
            ninja.clone(),
        ];
        let v = decide(
            &capture(procs.clone(), vec![lock.clone()]),
            Verdict::Deadlock,
        );
        assert_eq!(
            (v.signature, v.decided_by),
            (Signature::Timeout, DecidedBy::BusyCompiler)
        );
        assert!(
            v.evidence
                .contains("2 process(es) wait on `/cache/sampling.lock` held by pid 11"),
            "{}",
            v.evidence
        );
        // The same compiler idle: nothing moves, the deadlock stands, and the lock is named.
        let mut idle = procs;
        idle[3].busy = false;
        let v = decide(&capture(idle, vec![lock]), Verdict::Deadlock);
        assert_eq!(
            (v.signature, v.decided_by),
            (Signature::Deadlock, DecidedBy::Watchdog)
        );
        assert!(
            v.evidence.contains("held by pid 11 (idle"),
            "{}",
            v.evidence
        );
    }
}
