//! `gpucompat merge`: shard run folders (one per GitHub job, Slurm task or host) joined into one
//! run folder of the same format, so that report, compare, bisect and gate read it unchanged.
//!
//! Every shard must be a run of the same matrix file (its hash in each manifest). Records are
//! taken with their logs and hang captures; a cell recorded by two shards is a conflict, reported,
//! and the record that finished later is kept (to the second; on a tie, the shard named later). The merged manifest names each shard and its host.
//! Nothing is written until every shard has been read.

use crate::record::{CellRecord, Manifest, RunState, Shard};
use crate::run::folder;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Why shards could not be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("`{0}` is not a run folder (no manifest.json)")]
    NotARunFolder(String),
    #[error("`{path}`: {message}")]
    Unreadable { path: String, message: String },
    #[error("{0}: only shards of one matrix file can be merged")]
    OtherMatrix(String),
    #[error("`{0}` already exists and is not empty: merge into a new folder")]
    OutNotEmpty(String),
    #[error("no shard folders given")]
    NoShards,
    #[error("cannot write `{path}`")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl MergeError {
    /// Bad input (exit 2) rather than a harness fault (exit 3).
    pub fn is_input(&self) -> bool {
        !matches!(self, MergeError::Write { .. })
    }
}

/// A cell two shards recorded: which record was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub cell: String,
    pub kept: String,
    pub dropped: String,
}

/// What a merge did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    pub shards: usize,
    pub records: usize,
    pub hosts: Vec<String>,
    pub conflicts: Vec<Conflict>,
}

/// One shard as read (also the Slurm executor's view of an array task's run folder).
pub(crate) struct Read {
    pub(crate) folder: PathBuf,
    pub(crate) manifest: Manifest,
    /// Its last record per cell, by id.
    pub(crate) records: Vec<CellRecord>,
}

fn unreadable(path: &Path, message: impl ToString) -> MergeError {
    MergeError::Unreadable {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

pub(crate) fn read_shard(folder: &Path) -> Result<Read, MergeError> {
    let manifest_path = folder.join("manifest.json");
    let text = match fs::read_to_string(&manifest_path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            return Err(MergeError::NotARunFolder(folder.display().to_string()));
        }
        Err(err) => return Err(unreadable(&manifest_path, err)),
    };
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|err| unreadable(&manifest_path, err))?;
    let results = folder.join("results.jsonl");
    let mut records: Vec<CellRecord> = folder::read_results(&results, false)
        .map_err(|err| unreadable(&results, err))?
        .into_values()
        .collect();
    records.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(Read {
        folder: folder.to_path_buf(),
        manifest,
        records,
    })
}

/// When a record's cell finished: its start plus its duration (records without a start sort first).
pub(crate) fn finished(record: &CellRecord) -> SystemTime {
    let start = record
        .started_at
        .as_deref()
        .and_then(|t| {
            humantime::parse_rfc3339(t)
                .or_else(|_| humantime::parse_rfc3339_weak(t))
                .ok()
        })
        .unwrap_or(SystemTime::UNIX_EPOCH);
    start + Duration::from_secs_f64(record.duration_s.max(0.0))
}

/// [`finished`] to the second, the resolution of a record's start time.
fn finished_s(record: &CellRecord) -> u64 {
    finished(record)
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Reads every shard, checks they are runs of one matrix, and writes the merged run into `out`.
pub fn merge(shards: &[PathBuf], out: &Path) -> Result<Merged, MergeError> {
    if shards.is_empty() {
        return Err(MergeError::NoShards);
    }
    let read: Vec<Read> = shards
        .iter()
        .map(|s| read_shard(s))
        .collect::<Result<_, _>>()?;
    check_one_matrix(&read)?;
    check_out(out)?;
    // The kept record per cell and the shard it came from.
    let mut kept: BTreeMap<String, (usize, CellRecord)> = BTreeMap::new();
    let mut conflicts = Vec::new();
    for (index, shard) in read.iter().enumerate() {
        for record in &shard.records {
            match kept.get(&record.id) {
                Some((earlier, other)) => {
                    // Start times are to the second: on a tie, the shard named later wins.
                    let newer = finished_s(record) >= finished_s(other);
                    let (keep, drop) = if newer {
                        (index, *earlier)
                    } else {
                        (*earlier, index)
                    };
                    conflicts.push(Conflict {
                        cell: record.id.clone(),
                        kept: read[keep].folder.display().to_string(),
                        dropped: read[drop].folder.display().to_string(),
                    });
                    if newer {
                        kept.insert(record.id.clone(), (index, record.clone()));
                    }
                }
                None => {
                    kept.insert(record.id.clone(), (index, record.clone()));
                }
            }
        }
    }
    write(out, &read, &kept)?;
    let mut hosts: Vec<String> = read.iter().map(|r| r.manifest.host.clone()).collect();
    hosts.dedup();
    Ok(Merged {
        shards: read.len(),
        records: kept.len(),
        hosts,
        conflicts,
    })
}

fn check_one_matrix(read: &[Read]) -> Result<(), MergeError> {
    let first = &read[0];
    for shard in &read[1..] {
        if shard.manifest.matrix_hash != first.manifest.matrix_hash {
            let hash = |m: &Manifest| m.matrix_hash.chars().take(12).collect::<String>();
            return Err(MergeError::OtherMatrix(format!(
                "`{}` is a run of `{}` (hash {}), not of `{}` (hash {}) like `{}`",
                shard.folder.display(),
                shard.manifest.matrix,
                hash(&shard.manifest),
                first.manifest.matrix,
                hash(&first.manifest),
                first.folder.display()
            )));
        }
    }
    Ok(())
}

fn check_out(out: &Path) -> Result<(), MergeError> {
    match fs::read_dir(out) {
        Ok(entries) => match entries.count() {
            0 => Ok(()),
            _ => Err(MergeError::OutNotEmpty(out.display().to_string())),
        },
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(unreadable(out, err)),
    }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> MergeError + '_ {
    move |source| MergeError::Write {
        path: path.display().to_string(),
        source,
    }
}

/// The files a record names (its log, its hang capture, its earlier attempts' logs), relative to
/// its run folder.
fn files_of(shard: &Path, record: &CellRecord) -> Vec<String> {
    let mut files = vec![record.log.clone()];
    if let Some(hang) = &record.hang {
        files.push(hang.capture.clone());
    }
    let attempts = format!("{}.attempt", record.id);
    if let Ok(entries) = fs::read_dir(shard.join("logs")) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&attempts) {
                files.push(format!("logs/{name}"));
            }
        }
    }
    files.retain(|f| !f.is_empty() && !f.contains(".."));
    files
}

/// Copies the files a record of `shard` names into the run folder `out` (its `logs/` made).
pub(crate) fn copy_files(shard: &Path, record: &CellRecord, out: &Path) -> Result<(), MergeError> {
    for file in files_of(shard, record) {
        let from = shard.join(&file);
        let to = out.join(&file);
        if from.is_file() {
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent).map_err(write_err(parent))?;
            }
            fs::copy(&from, &to).map_err(write_err(&to))?;
        }
    }
    Ok(())
}

fn write(
    out: &Path,
    read: &[Read],
    kept: &BTreeMap<String, (usize, CellRecord)>,
) -> Result<(), MergeError> {
    fs::create_dir_all(out.join("logs")).map_err(write_err(out))?;
    let mut records: Vec<&(usize, CellRecord)> = kept.values().collect();
    records.sort_by_key(|(_, r)| finished(r));
    let mut lines = String::new();
    let mut taken = vec![0usize; read.len()];
    for (index, record) in records {
        taken[*index] += 1;
        copy_files(&read[*index].folder, record, out)?;
        lines.push_str(&serde_json::to_string(record).unwrap_or_default());
        lines.push('\n');
    }
    let results = out.join("results.jsonl");
    let mut file = fs::File::create(&results).map_err(write_err(&results))?;
    file.write_all(lines.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(write_err(&results))?;
    // The plan of the first shard that has one: every shard ran the same matrix file.
    if let Some(plan) = read
        .iter()
        .map(|r| r.folder.join("plan.json"))
        .find(|p| p.is_file())
    {
        let to = out.join("plan.json");
        fs::copy(&plan, &to).map_err(write_err(&to))?;
    }
    let manifest = merged_manifest(read, &taken);
    let path = out.join("manifest.json");
    let text = serde_json::to_string_pretty(&manifest).unwrap_or_default();
    fs::write(&path, text).map_err(write_err(&path))
}

fn merged_manifest(read: &[Read], taken: &[usize]) -> Manifest {
    let first = &read[0].manifest;
    let started_at = read
        .iter()
        .map(|r| r.manifest.started_at.clone())
        .min()
        .unwrap_or_default();
    let all_finished = read.iter().all(|r| r.manifest.state == RunState::Finished);
    let finished_at = if all_finished {
        read.iter()
            .filter_map(|r| r.manifest.finished_at.clone())
            .max()
    } else {
        None
    };
    let mut hosts: Vec<&str> = read.iter().map(|r| r.manifest.host.as_str()).collect();
    hosts.dedup();
    Manifest {
        format_version: first.format_version,
        harness_version: first.harness_version.clone(),
        matrix: first.matrix.clone(),
        matrix_hash: first.matrix_hash.clone(),
        host: hosts.join(", "),
        started_at,
        finished_at,
        state: if all_finished {
            RunState::Finished
        } else {
            RunState::Interrupted
        },
        cells: read.iter().map(|r| r.manifest.cells).max().unwrap_or(0),
        replay: first.replay,
        resumes: 0,
        inventory: "merged".to_owned(),
        shards: read
            .iter()
            .zip(taken)
            .map(|(r, records)| shard_entry(r, *records))
            .collect(),
    }
}

/// A shard as the merged manifest names it, with the number of records taken from it.
pub(crate) fn shard_entry(read: &Read, records: usize) -> Shard {
    Shard {
        folder: read.folder.display().to_string(),
        host: read.manifest.host.clone(),
        started_at: read.manifest.started_at.clone(),
        finished_at: read.manifest.finished_at.clone(),
        state: read.manifest.state,
        records,
    }
}
