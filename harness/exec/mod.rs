//! The only module that starts processes.
//!
//! - [`process`]: a cell's command in its own process group, output drained concurrently into a
//!   bounded log, teardown as TERM to the group, a grace period, KILL, then a check that nothing
//!   of the cell is left.
//! - [`cgroup`]: a cgroup per cell where the host allows it, so a process that leaves the group
//!   and clears its environment is still found and killed; elsewhere, why detection is limited.
//! - [`procfs`]: finds a cell's processes (by process group and by the token every cell process
//!   carries in its environment, which survives `setsid`) and reads their CPU time.
//! - [`listeners`]: who listens on a loopback port (the cell, another cell, a process outside the
//!   cell, or nobody this host can see), so a server cell is never judged by another cell's answers.
//! - [`logsink`]: the bounded log file (head and tail kept, the middle dropped with a marker).
//! - [`reaper`]: a guardian process that kills every cell process if the harness dies, even by
//!   SIGKILL, when the pipe it listens on closes.
//! - [`probe`]: short synchronous commands whose output is captured (`nvidia-smi`).
//! - [`slurm`]: Slurm's client commands (`sbatch`, `squeue`, `sacct`, `scancel`) through `duct`.
//! - [`pyspy`]: py-spy for hang captures (found, or installed into the tool cache) and its dumps.
#![allow(
    clippy::disallowed_methods,
    reason = "exec is the one module that starts processes"
)]

pub mod cgroup;
pub mod listeners;
pub mod logsink;
pub mod probe;
pub mod process;
pub mod procfs;
pub mod pyspy;
pub mod reaper;
pub mod slurm;
