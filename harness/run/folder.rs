//! The run folder: what a run keeps, written so that a crash or Ctrl-C never corrupts it.
//!
//! ```text
//! DIR/manifest.json     what ran, where, when, and whether it finished (replaced atomically)
//! DIR/plan.json         the expanded plan
//! DIR/results.jsonl     one record per finished cell, appended and synced as the cell finishes
//! DIR/logs/<cell>.log   each cell's log (`<cell>.attemptN.log` for retries)
//! DIR/.lock             held while a run writes the folder
//! ```
//! `results.jsonl` is append-only: when a cell appears twice (a skipped cell run again on
//! resume), the last record wins. A last line cut short by a crash is dropped on resume; a line
//! that is not a record anywhere else costs that line only (a warning names it).

use crate::record::{CellRecord, Manifest};
use nix::fcntl::{Flock, FlockArg};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

pub const RESULTS: &str = "results.jsonl";
pub const MANIFEST: &str = "manifest.json";
pub const PLAN: &str = "plan.json";
pub const LOGS: &str = "logs";

/// A run folder could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error(
        "run folder `{0}` already holds a run; pass `--resume` to finish it, or choose another `--out`"
    )]
    NotEmpty(String),
    #[error("`--out {0}` is a file; a run folder must be a directory (or not exist yet)")]
    NotADirectory(String),
    #[error(
        "`--out {path}` is not a gpucompat run folder (it holds {found}); a run would overwrite its files, so choose an empty or new folder"
    )]
    NotARunFolder { path: String, found: String },
    #[error("nothing to resume in `{0}`: it has no {MANIFEST}")]
    NothingToResume(String),
    #[error(
        "cannot resume `{path}`: it ran another matrix file (hash {recorded}, now {current}); use a new `--out`"
    )]
    OtherMatrix {
        path: String,
        recorded: String,
        current: String,
    },
    #[error("another gpucompat run is writing `{0}`")]
    Locked(String),
    #[error("`{path}` line {line} is not a cell record")]
    Corrupt {
        path: String,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write run folder `{path}`")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl FolderError {
    /// Whether the user can fix it by changing arguments (exit 2) rather than a harness fault.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            FolderError::NotEmpty(_)
                | FolderError::NotADirectory(_)
                | FolderError::NotARunFolder { .. }
                | FolderError::NothingToResume(_)
                | FolderError::OtherMatrix { .. }
                | FolderError::Locked(_)
        )
    }
}

/// What an opened folder already held: the manifest, the last record per cell id and the lines of
/// `results.jsonl` that are not records.
#[derive(Debug, Default)]
pub struct Previous {
    pub manifest: Option<Manifest>,
    pub records: HashMap<String, CellRecord>,
    pub bad_lines: Vec<BadLine>,
}

/// An open run folder, locked for this run.
#[derive(Debug)]
pub struct RunFolder {
    root: PathBuf,
    results: File,
    _lock: Flock<File>,
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FolderError + '_ {
    move |source| FolderError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl RunFolder {
    /// Opens `root` for a new run, or for finishing one with `resume`. Returns the records a
    /// resumed run already has (last one per cell id).
    pub fn open(
        root: &Path,
        matrix_hash: &str,
        resume: bool,
    ) -> Result<(RunFolder, Previous), FolderError> {
        let shown = root.display().to_string();
        if root.exists() && !root.is_dir() {
            return Err(FolderError::NotADirectory(shown));
        }
        refuse_foreign_folder(root)?;
        fs::create_dir_all(root.join(LOGS)).map_err(io_err(root))?;
        let lock_path = root.join(".lock");
        let lock_file = File::create(&lock_path).map_err(io_err(&lock_path))?;
        let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock)
            .map_err(|_| FolderError::Locked(shown.clone()))?;
        let manifest_path = root.join(MANIFEST);
        let results_path = root.join(RESULTS);
        let mut previous = Previous::default();
        if resume {
            let text = fs::read_to_string(&manifest_path)
                .map_err(|_| FolderError::NothingToResume(shown.clone()))?;
            let manifest: Manifest =
                serde_json::from_str(&text).map_err(|source| FolderError::Corrupt {
                    path: manifest_path.display().to_string(),
                    line: 1,
                    source,
                })?;
            if manifest.matrix_hash != matrix_hash {
                return Err(FolderError::OtherMatrix {
                    path: shown,
                    recorded: short(&manifest.matrix_hash),
                    current: short(matrix_hash),
                });
            }
            let results = read_results_tolerant(&results_path, true)?;
            previous = Previous {
                manifest: Some(manifest),
                records: results.records,
                bad_lines: results.bad_lines,
            };
        } else if manifest_path.exists() || results_path.exists() {
            return Err(FolderError::NotEmpty(shown));
        }
        let results = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&results_path)
            .map_err(io_err(&results_path))?;
        Ok((
            RunFolder {
                root: root.to_path_buf(),
                results,
                _lock: lock,
            },
            previous,
        ))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The log of one attempt: (absolute path, path relative to the run folder).
    pub fn log_path(&self, cell: &str, attempt: u32) -> (PathBuf, String) {
        let relative = log_relative(cell, attempt);
        (self.root.join(&relative), relative)
    }

    /// Appends one record as one line, then syncs it to disk.
    pub fn append(&mut self, record: &CellRecord) -> Result<(), FolderError> {
        let path = self.root.join(RESULTS);
        let mut line = serde_json::to_vec(record).map_err(|e| FolderError::Io {
            path: path.display().to_string(),
            source: io::Error::other(e),
        })?;
        line.push(b'\n');
        self.results
            .write_all(&line)
            .and_then(|()| self.results.sync_data())
            .map_err(io_err(&path))
    }

    /// Replaces `name` atomically (write a temporary file, sync, rename).
    pub fn write_atomic(&self, name: &str, contents: &[u8]) -> Result<(), FolderError> {
        let path = self.root.join(name);
        let tmp = self.root.join(format!(".{name}.tmp"));
        (|| {
            let mut file = File::create(&tmp)?;
            file.write_all(contents)?;
            file.sync_all()?;
            fs::rename(&tmp, &path)
        })()
        .map_err(io_err(&path))
    }

    pub fn write_manifest(&self, manifest: &Manifest) -> Result<(), FolderError> {
        let mut text = serde_json::to_vec_pretty(manifest).map_err(|e| FolderError::Io {
            path: MANIFEST.to_owned(),
            source: io::Error::other(e),
        })?;
        text.push(b'\n');
        self.write_atomic(MANIFEST, &text)
    }
}

/// Names a run writes into its folder (the report's included) or leaves there while it writes,
/// and those of the commands that run cells into a run folder of their own (a bisect's summary
/// and lock), which are run folders too.
const RUN_FOLDER_NAMES: &[&str] = &[
    RESULTS,
    MANIFEST,
    PLAN,
    LOGS,
    ".lock",
    "bisect.json",
    ".bisect.lock",
    // `--executor slurm`: the batch scripts, the tasks' shard folders and their Slurm output.
    "slurm",
];

/// Refuses an existing folder that is neither empty nor a run folder: a run writes `index.html`,
/// `compat.md`, `junit.xml`, ... into it, and would overwrite whatever a user kept there. A run
/// folder is one with a manifest, or one holding only what a run creates before its manifest (a
/// run that died at once).
fn refuse_foreign_folder(root: &Path) -> Result<(), FolderError> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(io_err(root)(source)),
    };
    let mut foreign: Vec<String> = Vec::new();
    for entry in entries {
        let name = entry.map_err(io_err(root))?.file_name();
        let name = name.to_string_lossy();
        if name == MANIFEST {
            return Ok(());
        }
        // `write_atomic`'s temporary files, `.NAME.tmp`, are a run's too.
        let temporary = name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .is_some_and(|n| RUN_FOLDER_NAMES.contains(&n));
        if !RUN_FOLDER_NAMES.contains(&name.as_ref()) && !temporary {
            foreign.push(name.into_owned());
        }
    }
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    let more = foreign.len().saturating_sub(3);
    let mut found = foreign
        .iter()
        .take(3)
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        found.push_str(&format!(" and {more} more"));
    }
    Err(FolderError::NotARunFolder {
        path: root.display().to_string(),
        found,
    })
}

/// Empties an existing run folder so that a new run can start in it (`gpucompat run --force`).
/// Only a gpucompat run folder is emptied, while holding its lock (a run writing it is refused):
/// a folder holding anything else is refused as a new run would refuse it. A missing folder is
/// fine (nothing to replace).
pub fn clear(root: &Path) -> Result<(), FolderError> {
    let shown = root.display().to_string();
    if !root.exists() {
        return Ok(());
    }
    if !root.is_dir() {
        return Err(FolderError::NotADirectory(shown));
    }
    refuse_foreign_folder(root)?;
    let lock_path = root.join(".lock");
    let lock_file = File::create(&lock_path).map_err(io_err(&lock_path))?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock)
        .map_err(|_| FolderError::Locked(shown))?;
    for entry in fs::read_dir(root).map_err(io_err(root))? {
        let entry = entry.map_err(io_err(root))?;
        if entry.file_name() == ".lock" {
            continue;
        }
        let path = entry.path();
        // `file_type` does not follow links: a link is removed, never what it points to.
        let removed = if entry.file_type().map_err(io_err(&path))?.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_err(&path))?;
    }
    Ok(())
}

/// Creates a new run folder under `parent` named for the time `now` (UTC, to the second, with `-`
/// for `:` so that every file system takes it: `2026-11-23T19-04-05Z`); a run that starts in the
/// same second as another gets a suffix (`...Z-2`). Returns the created folder.
pub fn create_timestamped(
    parent: &Path,
    now: std::time::SystemTime,
) -> Result<PathBuf, FolderError> {
    fs::create_dir_all(parent).map_err(io_err(parent))?;
    let stamp = humantime::format_rfc3339_seconds(now)
        .to_string()
        .replace(':', "-");
    for n in 1u32..=1000 {
        let name = if n == 1 {
            stamp.clone()
        } else {
            format!("{stamp}-{n}")
        };
        let path = parent.join(name);
        // `create_dir` (not `_all`) fails when the folder exists: two runs never share one.
        match fs::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(io_err(&path)(source)),
        }
    }
    Err(io_err(parent)(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("1000 runs already started at {stamp}"),
    )))
}

/// Where the log of a cell attempt lives, relative to the run folder.
pub fn log_relative(cell: &str, attempt: u32) -> String {
    if attempt <= 1 {
        format!("{LOGS}/{cell}.log")
    } else {
        format!("{LOGS}/{cell}.attempt{attempt}.log")
    }
}

fn short(hash: &str) -> String {
    hash.chars().take(12).collect()
}

/// A line of `results.jsonl` that is not a cell record, where and why.
#[derive(Debug)]
pub struct BadLine {
    /// `results.jsonl` as given.
    pub path: String,
    /// 1-based.
    pub line: usize,
    pub what: serde_json::Error,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: not a cell record ({}); the line is ignored, every other record is kept",
            self.path, self.line, self.what
        )
    }
}

/// What `results.jsonl` holds: the last record per cell id, and the lines that are not records.
#[derive(Debug, Default)]
pub struct Results {
    pub records: HashMap<String, CellRecord>,
    pub bad_lines: Vec<BadLine>,
}

/// Reads `results.jsonl` strictly: the last record per cell id, and a line that is not a record is
/// an error (a cut last line is not: see [`read_results_tolerant`]).
pub fn read_results(path: &Path, repair: bool) -> Result<HashMap<String, CellRecord>, FolderError> {
    let results = read_results_tolerant(path, repair)?;
    match results.bad_lines.into_iter().next() {
        None => Ok(results.records),
        Some(bad) => Err(FolderError::Corrupt {
            path: bad.path,
            line: bad.line,
            source: bad.what,
        }),
    }
}

/// Reads `results.jsonl`: the last record per cell id, and every line that is not one (one bad
/// line costs that line, never the folder). The last line is special: a crash can cut it short,
/// so when it does not parse it is dropped silently, and when it parses but lacks its newline it
/// is a record like any other. With `repair` (a resume, which appends next), a cut last line is
/// removed from the file and a complete one gets its newline, so the next record starts a line.
pub fn read_results_tolerant(path: &Path, repair: bool) -> Result<Results, FolderError> {
    let mut results = Results::default();
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(results),
        Err(source) => return Err(io_err(path)(source)),
    };
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    for (number, line) in bytes[..complete].split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<CellRecord>(line) {
            Ok(record) => {
                results.records.insert(record.id.clone(), record);
            }
            Err(err) => results.bad_lines.push(BadLine {
                path: path.display().to_string(),
                line: number + 1,
                what: err,
            }),
        }
    }
    let tail = &bytes[complete..];
    if tail.iter().all(u8::is_ascii_whitespace) {
        return Ok(results);
    }
    let kept = match serde_json::from_slice::<CellRecord>(tail) {
        Ok(record) => {
            results.records.insert(record.id.clone(), record);
            true
        }
        Err(_) => false,
    };
    if repair {
        let mut file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io_err(path))?;
        if kept {
            // A complete record whose newline the crash took: the next record starts a line.
            file.seek(io::SeekFrom::End(0))
                .and_then(|_| file.write_all(b"\n"))
                .and_then(|()| file.sync_data())
                .map_err(io_err(path))?;
        } else {
            // The tail after the last newline is a record the crash cut short.
            file.set_len(complete as u64).map_err(io_err(path))?;
        }
    }
    Ok(results)
}
