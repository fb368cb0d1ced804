//! Python stacks: `py-spy dump --json` read into frames, each frame named as `module:function`
//! (`filelock._api:BaseFileLock.acquire`), the thread that says where a process is stuck, and the
//! place processes are grouped by.

use super::{Frame, Group, ProcSnapshot, ThreadStack};
use serde::Deserialize;

/// How many frames from the top name a place (grouping, the record's `hang.frames`).
pub const TOP_FRAMES: usize = 3;

#[derive(Deserialize)]
struct DumpThread {
    #[serde(default)]
    thread_name: Option<String>,
    #[serde(default)]
    os_thread_id: Option<i64>,
    #[serde(default)]
    active: Option<bool>,
    #[serde(default)]
    frames: Vec<DumpFrame>,
}

#[derive(Deserialize)]
struct DumpFrame {
    name: String,
    #[serde(default)]
    filename: String,
    #[serde(default)]
    short_filename: Option<String>,
    #[serde(default)]
    line: i64,
    /// Set (to the shared object) for native frames only.
    #[serde(default)]
    module: Option<String>,
}

/// The threads of a `py-spy dump --json` output.
pub fn parse_dump(json: &str) -> Result<Vec<ThreadStack>, serde_json::Error> {
    let threads: Vec<DumpThread> = serde_json::from_str(json)?;
    Ok(threads
        .into_iter()
        .map(|t| ThreadStack {
            thread: t.thread_name,
            tid: t.os_thread_id,
            active: t.active,
            frames: t
                .frames
                .into_iter()
                // Bare addresses say nothing a reader can use.
                .filter(|f| !f.name.starts_with("0x"))
                .map(|f| {
                    let native = f.module.is_some();
                    Frame {
                        label: if native {
                            f.name.clone()
                        } else {
                            format!("{}:{}", module_of(&f.filename), f.name)
                        },
                        file: f.short_filename.unwrap_or_else(|| f.filename.clone()),
                        line: u32::try_from(f.line).unwrap_or(0),
                        native,
                    }
                })
                .collect(),
        })
        .collect())
}

/// The dotted module a Python file is (`.../site-packages/filelock/_api.py` -> `filelock._api`,
/// `.../lib/python3.12/threading.py` -> `threading`, a script -> its stem).
pub fn module_of(path: &str) -> String {
    let rel = ["/site-packages/", "/dist-packages/"]
        .iter()
        .find_map(|m| path.rsplit_once(m).map(|(_, r)| r))
        .or_else(|| stdlib_relative(path))
        .unwrap_or_else(|| path.rsplit('/').next().unwrap_or(path));
    let rel = rel.strip_suffix(".py").unwrap_or(rel);
    let dotted = rel.replace('/', ".");
    dotted
        .strip_suffix(".__init__")
        .map(str::to_owned)
        .unwrap_or(dotted)
}

/// The part after `lib/pythonX.Y/` of a standard-library path.
fn stdlib_relative(path: &str) -> Option<&str> {
    let at = path.find("/lib/python")?;
    let rest = &path[at + "/lib/python".len()..];
    rest.split_once('/').map(|(_, r)| r)
}

/// Python frames (no native ones) of a thread, top first.
fn python_frames(t: &ThreadStack) -> impl Iterator<Item = &Frame> {
    t.frames.iter().filter(|f| !f.native)
}

/// Whether a thread only waits for other threads (`Thread.join` at the top of its Python
/// frames): the main thread of a program whose real work, and real hang, is elsewhere.
fn only_joins(t: &ThreadStack) -> bool {
    python_frames(t).take(3).any(|f| {
        f.label.starts_with("threading:")
            && (f.label.ends_with("join") || f.label.ends_with("_shutdown"))
    })
}

/// The thread that says where a process is: the main thread, unless it only joins others, then
/// the first other thread with Python frames.
pub fn telling_thread(stacks: &[ThreadStack]) -> Option<&ThreadStack> {
    let with_frames: Vec<&ThreadStack> = stacks
        .iter()
        .filter(|t| python_frames(t).next().is_some())
        .collect();
    let main = with_frames
        .iter()
        .find(|t| t.thread.as_deref() == Some("MainThread"))
        .copied();
    match main {
        Some(m) if !only_joins(m) => Some(m),
        _ => with_frames
            .iter()
            .find(|t| !only_joins(t))
            .copied()
            .or(main)
            .or_else(|| stacks.first()),
    }
}

/// The top frames of a process's telling thread (Python frames; native ones when it has none).
pub fn top_frames(p: &ProcSnapshot) -> Vec<String> {
    let Some(thread) = telling_thread(&p.stacks) else {
        return Vec::new();
    };
    let python: Vec<String> = python_frames(thread)
        .take(TOP_FRAMES)
        .map(|f| f.label.clone())
        .collect();
    if python.is_empty() {
        thread
            .frames
            .iter()
            .take(TOP_FRAMES)
            .map(|f| f.label.clone())
            .collect()
    } else {
        python
    }
}

/// What a process without a stack is doing, for grouping: its name and where the kernel has it.
fn place_without_stack(p: &ProcSnapshot) -> String {
    let doing = if p.busy {
        "busy".to_owned()
    } else {
        match &p.wchan {
            Some(w) => format!("waiting in {w}"),
            None => format!("state {}", p.state),
        }
    };
    format!("`{}` ({doing})", p.comm)
}

/// Processes grouped by where they are: the same top frames (Python), or the same name and
/// kernel wait (others). Largest group first; within a size, Python stacks first.
pub fn group(procs: &[ProcSnapshot]) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for p in procs {
        let frames = top_frames(p);
        let place = if frames.is_empty() {
            place_without_stack(p)
        } else {
            let busy = if p.busy { " (busy)" } else { "" };
            format!(
                "{}{busy}",
                frames
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(" <- ")
            )
        };
        match groups.iter_mut().find(|g| g.place == place) {
            Some(g) => g.pids.push(p.pid),
            None => groups.push(Group {
                place,
                python: !frames.is_empty(),
                frames,
                pids: vec![p.pid],
            }),
        }
    }
    // A process waiting for its own child is less telling than the child: among groups of one
    // size, those with a process whose children were not captured (a leaf) come first.
    // multiprocessing's own helpers (resource tracker, fork server) wait by design: last.
    let parents: Vec<i32> = procs.iter().map(|p| p.ppid).collect();
    let leafy = |g: &Group| g.pids.iter().any(|pid| !parents.contains(pid));
    groups.sort_by(|a, b| {
        b.pids
            .len()
            .cmp(&a.pids.len())
            .then(b.python.cmp(&a.python))
            .then(helper(a).cmp(&helper(b)))
            .then(leafy(b).cmp(&leafy(a)))
    });
    groups
}

/// A group of multiprocessing's helper processes.
fn helper(g: &Group) -> bool {
    g.frames.iter().any(|f| {
        f.starts_with("multiprocessing.resource_tracker")
            || f.starts_with("multiprocessing.forkserver")
            || f.starts_with("multiprocessing.semaphore_tracker")
    })
}

/// "7 processes in `a` <- `b`" for a group.
pub fn describe(g: &Group) -> String {
    let n = g.pids.len();
    let noun = if n == 1 { "process" } else { "processes" };
    if g.python {
        format!("{n} {noun} in {}", g.place)
    } else {
        format!("{n} {noun} {}", g.place)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_from_paths() {
        assert_eq!(
            module_of("/venv/lib/python3.12/site-packages/filelock/_api.py"),
            "filelock._api"
        );
        assert_eq!(
            module_of("/usr/lib/python3/dist-packages/flashinfer/jit/__init__.py"),
            "flashinfer.jit"
        );
        assert_eq!(module_of("/usr/lib/python3.11/threading.py"), "threading");
        assert_eq!(module_of("/tmp/x/deadlock.py"), "deadlock");
    }

    #[test]
    fn reads_a_dump_and_picks_the_thread_that_is_stuck() {
        let json = r#"[
          {"thread_name": "MainThread", "os_thread_id": 1, "active": false, "frames": [
            {"name": "Thread._wait_for_tstate_lock", "filename": "/usr/lib/python3.11/threading.py", "line": 1139},
            {"name": "Thread.join", "filename": "/usr/lib/python3.11/threading.py", "line": 1119},
            {"name": "<module>", "filename": "/t/dl.py", "line": 12}]},
          {"thread_name": "first", "os_thread_id": 2, "frames": [
            {"name": "0x7f00", "filename": "libc.so.6", "module": "/lib/libc.so.6", "line": 0},
            {"name": "PyThread_acquire_lock_timed", "filename": "libpython3.11.so", "module": "/lib/libpython3.11.so", "line": 0},
            {"name": "t1", "filename": "/t/dl.py", "short_filename": "dl.py", "line": 6},
            {"name": "Thread.run", "filename": "/usr/lib/python3.11/threading.py", "line": 982}]}
        ]"#;
        let stacks = parse_dump(json).expect("parses");
        assert_eq!(stacks[1].frames.len(), 3, "the bare address is dropped");
        assert!(stacks[1].frames[0].native);
        let thread = telling_thread(&stacks).expect("a thread");
        assert_eq!(thread.thread.as_deref(), Some("first"));
        let p = ProcSnapshot {
            stacks,
            ..ProcSnapshot::bare(1)
        };
        assert_eq!(top_frames(&p), vec!["dl:t1", "threading:Thread.run"]);
    }

    #[test]
    fn groups_processes_that_share_a_place() {
        let waiting = |pid| ProcSnapshot {
            stacks: vec![ThreadStack {
                thread: Some("MainThread".to_owned()),
                tid: None,
                active: None,
                frames: vec![Frame {
                    label: "filelock._api:BaseFileLock.acquire".to_owned(),
                    file: "_api.py".to_owned(),
                    line: 1,
                    native: false,
                }],
            }],
            ..ProcSnapshot::bare(pid)
        };
        let ninja = ProcSnapshot {
            comm: "ninja".to_owned(),
            busy: true,
            ..ProcSnapshot::bare(9)
        };
        let tracker = ProcSnapshot {
            stacks: vec![ThreadStack {
                thread: Some("MainThread".to_owned()),
                tid: None,
                active: None,
                frames: vec![Frame {
                    label: "multiprocessing.resource_tracker:main".to_owned(),
                    file: "resource_tracker.py".to_owned(),
                    line: 1,
                    native: false,
                }],
            }],
            ..ProcSnapshot::bare(4)
        };
        let mut stuck = waiting(5);
        stuck.stacks[0].frames[0].label = "threading:Event.wait".to_owned();
        // Equal sizes: the helper goes after the process that is really stuck.
        let ones = group(&[tracker.clone(), stuck]);
        assert_eq!(ones[0].frames, vec!["threading:Event.wait"]);
        let groups = group(&[waiting(1), ninja, waiting(2), waiting(3)]);
        assert_eq!(groups.len(), 2);
        assert_eq!(
            describe(&groups[0]),
            "3 processes in `filelock._api:BaseFileLock.acquire`"
        );
        assert_eq!(describe(&groups[1]), "1 process `ninja` (busy)");
    }
}
