//! `gpucompat run --executor slurm` against a real single-node Slurm cluster (Debian's
//! slurm-wlm, munge, slurmdbd over MariaDB for `sacct`) that the test starts in a temporary
//! folder on free loopback ports and stops when it ends. The node has four fake GPUs (character
//! devices named in `gres.conf`) and the feature `sm_90`; the tasks' gpucompat sees them through
//! an inventory file, as the local run tests do. No part of Slurm is mocked.
//!
//! Without Slurm on the machine, the cluster tests say they are skipped (`scripts/test` installs
//! it where it runs as root with apt-get); with `CI` set they fail instead, so CI never passes
//! by skipping them. Every wait is a poll on real state with a deadline.

use crate::util::{Sandbox, exits, gpucompat, records};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The daemons a cluster needs, in start order.
const DAEMONS: &[&str] = &["munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd"];

/// A single-node Slurm cluster in a temporary folder, stopped (every daemon by its pid) on drop.
struct Cluster {
    dir: Sandbox,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

/// Whether Slurm's daemons and clients are installed; says so when they are not.
#[allow(clippy::print_stderr, reason = "a skipped test says why on stderr")]
fn slurm_installed() -> bool {
    let missing: Vec<&str> = DAEMONS
        .iter()
        .chain(&[
            "mariadb-install-db",
            "sacctmgr",
            "sbatch",
            "squeue",
            "sacct",
            "scancel",
            "scontrol",
        ])
        .copied()
        .filter(|p| which(p).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let message = format!(
        "Slurm tests skipped: Slurm is missing ({}); install slurm-wlm slurmdbd mariadb-server munge (scripts/test does, as root with apt-get)",
        missing.join(", ")
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{message}; CI must run them"
    );
    eprintln!("{message}");
    false
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// `N` different loopback ports nothing listens on now. Each is held until all are picked: a port
/// let go at once could be handed out again for the next one, and two daemons would share it.
fn free_ports<const N: usize>() -> [u16; N] {
    let held: [TcpListener; N] =
        std::array::from_fn(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"));
    held.map(|l| l.local_addr().expect("a bound port").port())
}

/// Polls `ready` until it holds or `within` passes.
fn wait_until(within: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Cluster {
    fn start() -> Cluster {
        let dir = Sandbox::new();
        let root = dir.path().to_path_buf();
        for sub in ["munge", "log", "dev", "state", "spool", "mysql"] {
            std::fs::create_dir_all(root.join(sub)).expect("mkdir");
        }
        std::fs::set_permissions(
            root.join("munge"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        let host = nix::unistd::gethostname()
            .expect("hostname")
            .into_string()
            .expect("utf-8 hostname");
        let ports = free_ports::<4>();
        let [ctld, slurmd, dbd, mysql] = ports;
        let munge = root.join("munge/munge.sock");
        for n in 0..4 {
            let dev = root.join(format!("dev/nvidia{n}"));
            nix::sys::stat::mknod(
                &dev,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(195, n),
            )
            .expect("mknod a fake GPU device (the Slurm tests run as root)");
        }
        let r = root.display();
        std::fs::write(
            root.join("gres.conf"),
            format!("NodeName=node1 Name=gpu File={r}/dev/nvidia[0-3]\n"),
        )
        .expect("gres.conf");
        let conf = root.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=gct{ctld}\nSlurmctldHost={host}(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n\
                 SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
                 AuthType=auth/munge\nAuthInfo=socket={munge}\nCredType=cred/munge\n\
                 StateSaveLocation={r}/state\nSlurmdSpoolDir={r}/spool\n\
                 SlurmctldPidFile={r}/slurmctld.pid\nSlurmdPidFile={r}/slurmd.pid\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nSlurmdParameters=config_overrides\n\
                 ReturnToService=2\nGresTypes=gpu\nDefMemPerCPU=100\nMailProg=/bin/true\n\
                 KillWait=2\n\
                 AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\n\
                 AccountingStoragePort={dbd}\nAccountingStoragePass={munge}\nJobAcctGatherType=jobacct_gather/none\n\
                 NodeName=node1 NodeHostname={host} NodeAddr=127.0.0.1 CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=2000 Feature=sm_90,h100 Gres=gpu:4\n\
                 PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                munge = munge.display()
            ),
        )
        .expect("slurm.conf");
        let dbd_conf = root.join("slurmdbd.conf");
        std::fs::write(
            &dbd_conf,
            format!(
                "AuthType=auth/munge\nAuthInfo=socket={munge}\nDbdAddr=127.0.0.1\nDbdHost=localhost\n\
                 DbdPort={dbd}\nSlurmUser=root\nPidFile={r}/slurmdbd.pid\n\
                 StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\nStoragePort={mysql}\n\
                 StorageUser=root\nStorageLoc=slurm_acct\n",
                munge = munge.display()
            ),
        )
        .expect("slurmdbd.conf");
        std::fs::set_permissions(
            &dbd_conf,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("chmod");
        let mut cluster = Cluster {
            dir,
            conf,
            daemons: Vec::new(),
        };
        cluster.bring_up(&host, mysql, dbd);
        cluster
    }

    fn bring_up(&mut self, host: &str, mysql: u16, dbd: u16) {
        let root = self.dir.path().to_path_buf();
        let key = root.join("munge/munge.key");
        self.ok(Command::new("mungekey").arg("-c").arg("-k").arg(&key));
        self.daemon(
            "munged",
            Command::new(which("munged").expect("munged"))
                .arg("-F")
                .arg("--force")
                .arg(format!("--key-file={}", key.display()))
                .arg(format!(
                    "--socket={}",
                    root.join("munge/munge.sock").display()
                ))
                .arg(format!(
                    "--pid-file={}",
                    root.join("munge/munged.pid").display()
                ))
                .arg(format!(
                    "--log-file={}",
                    root.join("log/munged.log").display()
                ))
                .arg(format!(
                    "--seed-file={}",
                    root.join("munge/munge.seed").display()
                )),
        );
        let socket = root.join("munge/munge.sock");
        self.expect(
            wait_until(Duration::from_secs(10), || socket.exists()),
            "munged's socket",
        );
        self.ok(Command::new("mariadb-install-db")
            .arg("--user=root")
            .arg(format!("--datadir={}", root.join("mysql").display()))
            .arg("--auth-root-authentication-method=normal"));
        self.daemon(
            "mariadbd",
            Command::new(which("mariadbd").expect("mariadbd"))
                .arg("--no-defaults")
                .arg("--user=root")
                .arg(format!("--datadir={}", root.join("mysql").display()))
                .arg(format!("--socket={}", root.join("mysql.sock").display()))
                .arg(format!("--port={mysql}"))
                .arg("--bind-address=127.0.0.1")
                .arg("--skip-grant-tables")
                .arg("--skip-log-bin"),
        );
        self.expect(
            listening(mysql, Duration::from_secs(30)),
            "MariaDB listening",
        );
        self.daemon(
            "slurmdbd",
            Command::new(which("slurmdbd").expect("slurmdbd")).arg("-D"),
        );
        self.expect(
            listening(dbd, Duration::from_secs(60)),
            "slurmdbd listening",
        );
        let cluster = std::fs::read_to_string(&self.conf)
            .ok()
            .and_then(|c| {
                c.lines()
                    .next()
                    .map(|l| l.trim_start_matches("ClusterName=").to_owned())
            })
            .expect("cluster name");
        self.ok(self
            .client("sacctmgr")
            .args(["-i", "add", "cluster", &cluster]));
        self.daemon(
            "slurmctld",
            Command::new(which("slurmctld").expect("slurmctld")).args(["-D", "-i"]),
        );
        self.daemon(
            "slurmd",
            Command::new(which("slurmd").expect("slurmd")).args(["-D", "-N", "node1"]),
        );
        let idle = wait_until(Duration::from_secs(60), || {
            self.client("sinfo")
                .args(["-h", "-o", "%T"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
        });
        self.expect(idle, &format!("node1 idle (host {host})"));
    }

    /// A Slurm client command for this cluster.
    fn client(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    fn daemon(&mut self, name: &'static str, command: &mut Command) {
        let log =
            std::fs::File::create(self.dir.path().join(format!("log/{name}.out"))).expect("log");
        let child = command
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.daemons.push((name, child));
    }

    fn ok(&self, command: &mut Command) {
        exits(command.env("SLURM_CONF", &self.conf), &[0]);
    }

    /// Fails with every daemon's log when `held` is false.
    fn expect(&self, held: bool, what: &str) {
        if held {
            return;
        }
        let mut logs = String::new();
        for name in DAEMONS {
            let path = self.dir.path().join(format!("log/{name}.out"));
            if let Ok(text) = std::fs::read_to_string(&path) {
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                logs.push_str(&format!(
                    "--- {name}\n{}\n",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
        }
        panic!("the test cluster never got to: {what}\n{logs}");
    }

    /// `gpucompat run FILE --executor slurm` for this cluster, its tasks seeing the node's fake
    /// GPUs through `inventory`.
    fn run(&self, matrix: &Path, out: &Path, inventory: &Path, extra: &[&str]) -> Command {
        let mut command = Command::new(assert_cmd::cargo::cargo_bin!("gpucompat"));
        command
            .env("SLURM_CONF", &self.conf)
            .arg("run")
            .arg(matrix)
            .args([
                "--executor",
                "slurm",
                "--slurm-poll",
                "1s",
                "--grace",
                "300ms",
            ])
            .arg("--out")
            .arg(out)
            .arg("--inventory")
            .arg(inventory)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(extra);
        command
    }

    /// `sacct`'s time limit of every task of `job`, as `JOB_TASK|HH:MM:SS` lines.
    fn time_limits(&self, job: u64) -> String {
        let out = self
            .client("sacct")
            .args([
                "-j",
                &job.to_string(),
                "-X",
                "-n",
                "-P",
                "--format=JobID,Timelimit",
            ])
            .output()
            .expect("sacct");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn listening(port: u16, within: Duration) -> bool {
    wait_until(within, || TcpStream::connect(("127.0.0.1", port)).is_ok())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Newest first, each by its own pid: TERM, a few seconds, then KILL.
        for (_, child) in self.daemons.iter_mut().rev() {
            let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
            let _ = kill(pid, Signal::SIGTERM);
            let ended = wait_until(Duration::from_secs(5), || {
                child.try_wait().is_ok_and(|s| s.is_some())
            });
            if !ended {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Cell modes: `pass`, `fail` (a CUDA error), `gate` (passes once `release` exists beside the
/// matrix), and any other, which notes its array task
/// (`JOB_TASK`: the task's own `SLURM_JOB_ID` may be the whole array's) in `<mode>.job` beside
/// the matrix and sleeps until Slurm ends it.
const CELL: &str = r#"#!/bin/sh
dir=$(dirname "$0")
case "$1" in
  pass) echo "cell pass on GPU $CUDA_VISIBLE_DEVICES, Slurm gave $SLURM_JOB_GPUS" ;;
  fail) echo 'RuntimeError: CUDA error: an illegal memory access was encountered'; exit 1 ;;
  gate) echo "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" > "$dir/gate.job"
        while [ ! -e "$dir/release" ]; do sleep 0.1; done
        echo released ;;
  *) task="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
     echo "holding in Slurm task $task"
     echo "$task" > "$dir/$1.job.tmp" && mv "$dir/$1.job.tmp" "$dir/$1.job"
     exec sleep 600 ;;
esac
"#;

const MATRIX: &str = r#"
name = "slurm-e2e"
[matrix]
mode = ["pass", "fail", "timeout", "cancel"]
[resources]
gpus = "sm_90"
[job]
command = "sh @DIR@/cell.sh {mode}"
timeout = "4m"
"#;

const INVENTORY: &str = r#"
[[gpu]]
index = 0
name = "Fake H100"
arch = "sm_90"
[[gpu]]
index = 1
name = "Fake H100"
arch = "sm_90"
[[gpu]]
index = 2
name = "Fake H100"
arch = "sm_90"
[[gpu]]
index = 3
name = "Fake H100"
arch = "sm_90"
"#;

/// The Slurm job id a holding cell wrote, once it runs.
fn held_job(dir: &Path, mode: &str) -> String {
    let path = dir.join(format!("{mode}.job"));
    assert!(
        wait_until(Duration::from_secs(60), || path.exists()),
        "the `{mode}` cell never started"
    );
    std::fs::read_to_string(&path)
        .expect("job id")
        .trim()
        .to_owned()
}

fn wait_output(child: Child, within: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(within) {
        Ok(out) => out.expect("gpucompat ran"),
        Err(_) => {
            let _ = kill(
                Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
                Signal::SIGKILL,
            );
            panic!("gpucompat run --executor slurm did not end within {within:?}");
        }
    }
}

fn by_id(records: &[Value], id: &str) -> Value {
    records
        .iter()
        .find(|r| r["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no record of `{id}` in {records:?}"))
}

#[test]
fn slurm_executor_runs_cells_as_array_tasks_and_names_what_slurm_ended() {
    if !slurm_installed() {
        return;
    }
    let cluster = Cluster::start();
    let sandbox = Sandbox::new();
    let dir = sandbox.path();
    sandbox.file("cell.sh", CELL);
    let matrix = sandbox.file(
        "m.toml",
        &MATRIX.replace("@DIR@", &dir.display().to_string()),
    );
    let inventory = sandbox.file("inventory.toml", INVENTORY);
    let out = dir.join("run");
    let child = cluster
        .run(&matrix, &out, &inventory, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpucompat");
    // Slurm counts time limits in minutes and checks them every 30 s: the `timeout` cell's
    // running task gets a limit already passed, so the next check ends it with TIMEOUT.
    let timeout_job = held_job(dir, "timeout");
    cluster.ok(cluster.client("scontrol").args([
        "update",
        &format!("JobId={timeout_job}"),
        "TimeLimit=0",
    ]));
    let cancel_job = held_job(dir, "cancel");
    cluster.ok(cluster.client("scancel").arg(&cancel_job));
    let output = wait_output(child, Duration::from_secs(120));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("submitted Slurm job"), "{stderr}");
    assert!(
        stderr.contains("TIMEOUT on node1: timeout"),
        "each task's state is said: {stderr}"
    );

    let all = records(&out);
    assert_eq!(all.len(), 4, "{all:?}");
    let host = nix::unistd::gethostname()
        .expect("hostname")
        .into_string()
        .expect("utf-8");
    let pass = by_id(&all, "pass");
    assert_eq!(pass["status"], "pass");
    assert_eq!(pass["runner"]["host"], host.as_str());
    // The cell ran on the one GPU Slurm gave its task.
    let gpus = pass["runner"]["gpus"].as_array().expect("gpus");
    assert_eq!(gpus.len(), 1, "{pass}");
    let log = std::fs::read_to_string(out.join(pass["log"].as_str().expect("log"))).expect("log");
    let index = gpus[0]["index"].as_u64().expect("index");
    assert!(
        log.contains(&format!("cell pass on GPU {index}, Slurm gave {index}")),
        "{log}"
    );

    let fail = by_id(&all, "fail");
    assert_eq!(
        fail["status"], "fail",
        "a cell's own failure keeps its verdict: {fail}"
    );
    assert_eq!(fail["signature"], "illegal_address");
    assert_eq!(fail["spurious"], false);

    for (mode, state) in [("timeout", "TIMEOUT"), ("cancel", "CANCELLED")] {
        let record = by_id(&all, mode);
        assert_eq!(record["status"], "error", "{record}");
        assert_eq!(record["spurious"], true, "{record}");
        let reason = record["reason"].as_str().expect("reason");
        assert!(
            reason.starts_with(&format!("Slurm {state}: task ")),
            "{reason}"
        );
        let log =
            std::fs::read_to_string(out.join(record["log"].as_str().expect("log"))).expect("log");
        assert!(
            log.contains("holding in Slurm task"),
            "the cell's own output is kept: {log}"
        );
        assert!(log.contains(&format!("[gpucompat] Slurm {state}")), "{log}");
    }

    // One run folder: the tasks' shards in its manifest, each task's time limit from the
    // matrix (a 4-minute timeout and the 10-minute margin).
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["state"], "finished");
    assert_eq!(
        manifest["shards"].as_array().map(Vec::len),
        Some(4),
        "{manifest}"
    );
    let jobs: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("slurm/jobs-1.json")).expect("jobs"),
    )
    .expect("json");
    let job = jobs[0]["job"].as_u64().expect("job id");
    let limits = cluster.time_limits(job);
    assert_eq!(limits.lines().count(), 4, "{limits}");
    // (The `timeout` task's limit was lowered by hand above.)
    assert!(
        limits
            .lines()
            .filter(|l| !l.starts_with(&format!("{timeout_job}|")))
            .all(|l| l.ends_with("|00:14:00")),
        "{limits}"
    );

    exits(
        gpucompat()
            .arg("report")
            .arg(&out)
            .arg("--out")
            .arg(dir.join("report")),
        &[0, 1],
    );
    let md = std::fs::read_to_string(dir.join("report/compat.md")).expect("compat.md");
    assert!(md.contains("illegal_address"), "{md}");

    // A resume that keeps the infrastructure errors has nothing to submit: the same records.
    exits(
        &mut cluster.run(
            &matrix,
            &out,
            &inventory,
            &["--resume", "--no-retry-errors"],
        ),
        &[1],
    );
    assert_eq!(records(&out).len(), 4);

    // A node shape the cluster does not have: sbatch refuses it, exit 2 with Slurm's own reason,
    // and the run folder is left empty for the next try.
    let bad = sandbox.file(
        "bad.toml",
        "[matrix]\nn = [1]\n[resources]\ngpus = \"sm_100\"\n[job]\ncommand = \"true\"\n",
    );
    let refused_out = dir.join("refused");
    let refused = exits(&mut cluster.run(&bad, &refused_out, &inventory, &[]), &[2]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("sbatch refused array 1 (constraint sm_100, gres gpu:1")
            && stderr.contains("Invalid feature specification"),
        "{stderr}"
    );
    assert!(!refused_out.join("manifest.json").exists());

    // The submitting process dies while a task runs; the task finishes on its own, and a resume
    // keeps its record instead of running the cell again.
    let gated = sandbox.file(
        "gated.toml",
        &MATRIX
            .replace("\"pass\", \"fail\", \"timeout\", \"cancel\"", "\"gate\"")
            .replace("@DIR@", &dir.display().to_string()),
    );
    let gated_out = dir.join("gated");
    let mut child = cluster
        .run(&gated, &gated_out, &inventory, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gpucompat");
    held_job(dir, "gate");
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    std::fs::write(dir.join("release"), "").expect("release");
    let shard_results = || {
        std::fs::read_dir(gated_out.join("slurm/tasks"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                std::fs::read_to_string(e.path().join("results.jsonl"))
                    .is_ok_and(|t| t.contains("\"pass\""))
            })
    };
    assert!(
        wait_until(Duration::from_secs(60), shard_results),
        "the gated task never recorded"
    );
    let resumed = exits(
        &mut cluster.run(&gated, &gated_out, &inventory, &["--resume"]),
        &[0],
    );
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        !stderr.contains("submitted Slurm job"),
        "nothing to run again: {stderr}"
    );
    let gated_records = records(&gated_out);
    assert_eq!(gated_records.len(), 1);
    assert_eq!(gated_records[0]["status"], "pass");
    let log = std::fs::read_to_string(gated_out.join("logs/gate.log")).expect("log");
    assert!(log.contains("released"), "{log}");

    // Ctrl-C while a task runs: the jobs are cancelled, the cell keeps no record (a resume
    // runs it), and the run says it was interrupted.
    let out = dir.join("interrupted");
    let _ = std::fs::remove_file(dir.join("timeout.job"));
    let child = cluster
        .run(&matrix, &out, &inventory, &["--cell", "timeout"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpucompat");
    let job = held_job(dir, "timeout");
    kill(
        Pid::from_raw(i32::try_from(child.id()).expect("pid")),
        Signal::SIGINT,
    )
    .expect("SIGINT");
    let output = wait_output(child, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("cancelling Slurm job"), "{stderr}");
    assert!(
        records(&out).is_empty(),
        "an interrupted cell has no record"
    );
    let state = cluster
        .client("sacct")
        .args(["-j", &job, "-X", "-n", "-P", "--format=State"])
        .output()
        .expect("sacct");
    assert!(
        String::from_utf8_lossy(&state.stdout).starts_with("CANCELLED"),
        "{state:?}"
    );
}

#[test]
fn slurm_executor_without_sbatch_is_a_clear_input_error() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file("m.toml", "[matrix]\nn = [1]\n[job]\ncommand = \"true\"\n");
    let out = exits(
        gpucompat()
            .env("PATH", sandbox.path())
            .arg("run")
            .arg(&matrix)
            .args(["--executor", "slurm", "--out"])
            .arg(sandbox.path().join("run")),
        &[2],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`sbatch` is not on PATH"), "{stderr}");
    // Slurm flags without the Slurm executor are a mistake, said before anything runs.
    let out = exits(
        gpucompat()
            .arg("run")
            .arg(&matrix)
            .args(["--slurm-partition", "gpu", "--out"])
            .arg(sandbox.path().join("run2")),
        &[2],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`--slurm-partition` needs `--executor slurm`"),
        "{stderr}"
    );
    assert!(!sandbox.path().join("run2").exists());
}
