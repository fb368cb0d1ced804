//! Runs a bisect: each probe is a real cell run through [`run::execute`] (provisioning,
//! watchdog, classifier, teardown) into one bisect folder, and the searches of [`super::search`]
//! and [`super::ddmin`] decide what to run next.
//!
//! Every probe cell is one cell of the bisect folder's `results.jsonl` (its log in `logs/`), with
//! an id of its own: the matrix's id for the probed value, `-attr-<hash>` for a pin set,
//! `-tryN` for a further attempt. Before a probe runs, the records already known are consulted,
//! matched by values and pins (never by id): those of `--runs` folders, then the bisect folder's
//! own. A resumed bisect therefore replays its search over its own records and runs only what
//! is missing. `bisect.json` is rewritten (atomically) after every probe.

use super::index::{self, Candidate, IndexError};
use super::probes::{self, Bump, InputError, MatrixSource, PinSet};
use super::search::{Probe, Step, Verdict, VersionSearch, probe_bound};
use super::summary::{self, BisectFile, Inputs, Kind, RunEntry, State};
use super::{ddmin::DdOutcome, ddmin::Ddmin, search::Outcome, verdict};
use crate::digest::sha256_hex;
use crate::matrix::{Cell, CellId, Plan, template::value_text};
use crate::record::CellRecord;
use crate::run::{self, RunError, RunOptions, folder};
use crate::signature::Signature;
use nix::fcntl::{Flock, FlockArg};
use pep440_rs::Version;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::SystemTime;

/// What to search.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Values of `axis` between `good` and `bad`.
    Version {
        axis: String,
        good: String,
        bad: String,
    },
    /// The bumps from `base` to `head` (requirement files or `name==version` lists).
    Attribution { base: String, head: String },
}

/// A bisect to run.
#[derive(Debug, Clone)]
pub struct Request {
    pub matrix: PathBuf,
    pub mode: Mode,
    pub cell: Option<String>,
    pub signature: Option<Signature>,
    pub retries: u32,
    pub from_index: bool,
    pub index_url: Option<String>,
    pub pre: bool,
    pub find_links: Vec<PathBuf>,
    pub runs_from: Vec<PathBuf>,
    /// The bisect folder; `None` picks `bisects/<cell>-<what>` in the working folder.
    pub out: Option<PathBuf>,
    pub resume: bool,
    /// How probes run (`out`, `resume` and `cells` are set per probe).
    pub run: RunOptions,
}

/// A bisect could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum BisectError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("cannot use the bisect folder `{path}`")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the run of probe cell `{0}` left no record")]
    Lost(String),
}

impl BisectError {
    /// Whether the user can fix it by changing arguments (exit 2) rather than a harness fault.
    pub fn is_input(&self) -> bool {
        match self {
            BisectError::Input(_) => true,
            BisectError::Index(err) => err.is_input(),
            BisectError::Run(err) => err.is_input(),
            BisectError::Io { .. } | BisectError::Lost(_) => false,
        }
    }
}

fn usage(text: impl Into<String>) -> BisectError {
    BisectError::Input(InputError::Usage(text.into()))
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> BisectError + '_ {
    move |source| BisectError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// How a bisect ended: its file (also in the folder) and whether it was interrupted.
#[derive(Debug)]
pub struct Ended {
    pub file: BisectFile,
    pub folder: PathBuf,
    pub interrupted: bool,
}

/// What the search runs over, once set up.
enum Search {
    Version {
        axis: String,
        /// (value, probe cell), oldest first.
        candidates: Vec<(String, Cell)>,
    },
    Attribution {
        chosen: Box<Cell>,
        base: PinSet,
        head: PinSet,
        bumps: Vec<Bump>,
    },
}

/// Runs the bisect; `on_run` hears of every probe attempt as it is judged.
pub async fn bisect(
    request: Request,
    on_run: &mut dyn FnMut(&RunEntry),
) -> Result<Ended, BisectError> {
    let source = MatrixSource::load(&request.matrix)?;
    let (search, plan, chosen_id, candidates_from, notes) = prepare(&request, &source).await?;
    let out = absolute(request.out.clone().unwrap_or_else(|| {
        PathBuf::from("bisects").join(default_folder_name(&request, &chosen_id))
    }));
    let inputs = Inputs {
        axis: match &request.mode {
            Mode::Version { axis, .. } => Some(axis.clone()),
            Mode::Attribution { .. } => None,
        },
        good: match &request.mode {
            Mode::Version { good, .. } => Some(good.clone()),
            Mode::Attribution { .. } => None,
        },
        bad: match &request.mode {
            Mode::Version { bad, .. } => Some(bad.clone()),
            Mode::Attribution { .. } => None,
        },
        base: match &search {
            Search::Attribution { base, .. } => base.iter().map(ToString::to_string).collect(),
            Search::Version { .. } => Vec::new(),
        },
        head: match &search {
            Search::Attribution { head, .. } => head.iter().map(ToString::to_string).collect(),
            Search::Version { .. } => Vec::new(),
        },
        signature: request.signature,
        retries: request.retries,
        candidates_from,
        runs_from: Vec::new(),
    };
    let (lock, previous) = open_folder(&out, request.resume)?;
    let mut runs_from: Vec<PathBuf> = previous
        .as_ref()
        .map(|p| p.inputs.runs_from.iter().map(PathBuf::from).collect())
        .unwrap_or_default();
    if let Some(previous) = &previous {
        check_same(previous, &inputs, &chosen_id)?;
    }
    for dir in &request.runs_from {
        let dir = absolute(dir.clone());
        if !runs_from.contains(&dir) && dir != out {
            runs_from.push(dir);
        }
    }
    let file = BisectFile {
        format_version: summary::FORMAT_VERSION,
        kind: match search {
            Search::Version { .. } => Kind::Version,
            Search::Attribution { .. } => Kind::Attribution,
        },
        state: State::Running,
        matrix: request.matrix.display().to_string(),
        matrix_hash: plan.file_hash.clone(),
        values: plan
            .cells
            .iter()
            .find(|c| c.id.as_str() == chosen_id)
            .map(|c| c.values.clone())
            .unwrap_or_default(),
        cell: chosen_id,
        inputs: Inputs {
            runs_from: runs_from.iter().map(|d| d.display().to_string()).collect(),
            ..inputs
        },
        candidates: match &search {
            Search::Version { candidates, .. } => {
                candidates.iter().map(|(v, _)| v.clone()).collect()
            }
            Search::Attribution { .. } => Vec::new(),
        },
        bumps: match &search {
            Search::Attribution { bumps, .. } => bumps.clone(),
            Search::Version { .. } => Vec::new(),
        },
        signature: request.signature,
        first_bad: None,
        last_good: None,
        culprits: None,
        converged: false,
        reason: (!notes.is_empty()).then(|| notes.join("; ")),
        probes: 0,
        bound: match &search {
            Search::Version { candidates, .. } => Some(probe_bound(candidates.len())),
            Search::Attribution { .. } => None,
        },
        runs: Vec::new(),
        started_at: previous.map_or_else(now, |p| p.started_at),
        finished_at: None,
    };
    let memo = Memo::load(&runs_from, &out)?;
    let mut driver = Driver {
        plan,
        registered: Vec::new(),
        memo,
        out: out.clone(),
        run: request.run.clone(),
        target: request.signature,
        file,
        _lock: lock,
    };
    driver.write()?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(io_err(&out))?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(io_err(&out))?;
    let mut stop = || {
        // A signal that came between probes (while none was running) is still pending here.
        let pending = |s: &mut tokio::signal::unix::Signal| {
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            matches!(s.poll_recv(&mut cx), std::task::Poll::Ready(Some(())))
        };
        pending(&mut interrupt) || pending(&mut terminate)
    };
    let finished = match search {
        Search::Version { axis, candidates } => {
            driver
                .version(&axis, &candidates, request.retries, on_run, &mut stop)
                .await?
        }
        Search::Attribution {
            chosen,
            base,
            head,
            bumps,
        } => {
            driver
                .attribution(
                    &chosen,
                    &base,
                    &head,
                    &bumps,
                    request.retries,
                    on_run,
                    &mut stop,
                )
                .await?
        }
    };
    driver.file.state = if finished {
        State::Finished
    } else {
        State::Interrupted
    };
    driver.file.finished_at = Some(now());
    driver.write()?;
    Ok(Ended {
        file: driver.file,
        folder: out,
        interrupted: !finished,
    })
}

fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

fn default_folder_name(request: &Request, cell: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    match &request.mode {
        Mode::Version { axis, good, bad } => clean(&format!("{cell}-{axis}-{good}-{bad}")),
        Mode::Attribution { base, head } => format!(
            "{}-attr-{}",
            clean(cell),
            sha256_hex(format!("{base}\n{head}").as_bytes(), 4)
        ),
    }
}

type Prepared = (Search, Plan, String, String, Vec<String>);

/// Sets up the search: the chosen cell, the candidates or bumps, the probe cells.
async fn prepare(request: &Request, source: &MatrixSource) -> Result<Prepared, BisectError> {
    let axes = source.axes();
    match &request.mode {
        Mode::Version { axis, good, bad } => {
            let chosen =
                probes::choose_version_cell(&source.plan, &axes, axis, request.cell.as_deref())?
                    .clone();
            let parse = |flag: &str, text: &str| {
                Version::from_str(text)
                    .map(|version| Candidate {
                        text: text.to_owned(),
                        version,
                    })
                    .map_err(|e| usage(format!("`{flag} {text}` is not a PEP 440 version: {e}")))
            };
            let good = parse("--good", good)?;
            let bad = parse("--bad", bad)?;
            if good.version >= bad.version {
                return Err(usage(format!(
                    "`--good {}` must be older than `--bad {}` (versions are ordered by PEP 440)",
                    good.text, bad.text
                )));
            }
            let (all, from) = if request.from_index {
                index_candidates(request, source, axis, &good, &bad).await?
            } else {
                (axis_candidates(source, axis)?, "matrix".to_owned())
            };
            let pre = request.pre || !request.from_index;
            let chosen_values = index::between(all, &good, &bad, pre);
            let texts: Vec<String> = chosen_values.iter().map(|c| c.text.clone()).collect();
            let mut plan = source.with_values(axis, &texts)?;
            adjust_python(&mut plan, request);
            let mut candidates = Vec::new();
            let mut notes = Vec::new();
            for value in texts {
                match probes::version_cell(&plan, &axes, &chosen, axis, &value) {
                    Some(cell) => candidates.push((value, cell)),
                    None if value == good.text || value == bad.text => {
                        return Err(usage(format!(
                            "`{axis} = {value}` is excluded by the matrix for cell `{}`",
                            chosen.id
                        )));
                    }
                    None => notes.push(format!("{value} is excluded by the matrix")),
                }
            }
            // The cell the bisect explains is the failing one: the bad end's.
            let chosen_id = candidates
                .last()
                .map_or_else(|| chosen.id.to_string(), |(_, cell)| cell.id.to_string());
            Ok((
                Search::Version {
                    axis: axis.clone(),
                    candidates,
                },
                plan,
                chosen_id,
                from,
                notes,
            ))
        }
        Mode::Attribution { base, head } => {
            let chosen = probes::choose_cell(&source.plan, request.cell.as_deref())?.clone();
            let base = probes::read_pins("--base", base)?;
            let head = probes::read_pins("--head", head)?;
            let bumps = probes::bumps(&base, &head);
            if bumps.is_empty() {
                return Err(usage(
                    "`--base` and `--head` pin the same versions: nothing to attribute",
                ));
            }
            let mut plan = source.plan.clone();
            adjust_python(&mut plan, request);
            let chosen_id = chosen.id.to_string();
            Ok((
                Search::Attribution {
                    chosen: Box::new(chosen),
                    base,
                    head,
                    bumps,
                },
                plan,
                chosen_id,
                "base and head pins".to_owned(),
                Vec::new(),
            ))
        }
    }
}

/// `--find-links` folders and an explicit `--index-url` reach the probes' installs too.
fn adjust_python(plan: &mut Plan, request: &Request) {
    if let Some(python) = &mut plan.python {
        for dir in &request.find_links {
            python.find_links.push(absolute(dir.clone()));
        }
        if python.index_url.is_none() {
            python.index_url.clone_from(&request.index_url);
        }
    }
}

/// The axis's values in the matrix, each a PEP 440 version.
fn axis_candidates(source: &MatrixSource, axis: &str) -> Result<Vec<Candidate>, BisectError> {
    let mut out: Vec<Candidate> = Vec::new();
    for cell in &source.plan.cells {
        let Some(text) = cell.values.get(axis).map(value_text) else {
            continue;
        };
        let version = Version::from_str(&text).map_err(|e| {
            usage(format!(
                "value `{text}` of axis `{axis}` is not a PEP 440 version ({e}); a bisect orders values as versions"
            ))
        })?;
        if !out.iter().any(|c| c.version == version) {
            out.push(Candidate { text, version });
        }
    }
    Ok(out)
}

/// The package's versions on the index and in the wheel folders.
async fn index_candidates(
    request: &Request,
    source: &MatrixSource,
    axis: &str,
    good: &Candidate,
    bad: &Candidate,
) -> Result<(Vec<Candidate>, String), BisectError> {
    let Some(package) = source.packages_of(axis).into_iter().next() else {
        return Err(usage(format!(
            "`--from-index` needs `[packages]` to name the package `{axis}` pins (e.g. `{axis} = \"flashinfer-python\"`)"
        )));
    };
    let python = source.plan.python.as_ref();
    let url = index::resolve(
        request.index_url.as_deref(),
        python.and_then(|p| p.index_url.as_deref()),
    );
    let mut folders: Vec<PathBuf> = request.find_links.clone();
    if let Some(python) = python {
        folders.extend(python.find_links.iter().map(|p| source.plan.dir.join(p)));
    }
    let offline = python.is_some_and(|p| p.no_index);
    let mut all = Vec::new();
    let mut from = Vec::new();
    if !offline {
        let client = index::client()?;
        all = index::index_versions(&client, &url.url, &package).await?;
        from.push(format!("{} ({})", url.url, url.from));
    }
    for dir in &folders {
        for candidate in index::find_links_versions(dir, &package)? {
            if !all
                .iter()
                .any(|c: &Candidate| c.version == candidate.version)
            {
                all.push(candidate);
            }
        }
        from.push(format!("--find-links {}", dir.display()));
    }
    for (flag, end) in [("--good", good), ("--bad", bad)] {
        if !all.iter().any(|c| c.version == end.version) {
            return Err(usage(format!(
                "`{flag} {}`: {package} has no such version (not yanked) on {}",
                end.text,
                from.join(" or ")
            )));
        }
    }
    Ok((all, format!("{package} on {}", from.join(" and "))))
}

/// Opens (creates) the bisect folder and locks it; returns the previous `bisect.json` on resume.
fn open_folder(
    out: &Path,
    resume: bool,
) -> Result<(Flock<std::fs::File>, Option<BisectFile>), BisectError> {
    if out.exists() && !out.is_dir() {
        return Err(usage(format!(
            "`--out {}` is a file; a bisect folder must be a directory",
            out.display()
        )));
    }
    std::fs::create_dir_all(out.join(folder::LOGS)).map_err(io_err(out))?;
    let lock_path = out.join(".bisect.lock");
    let lock_file = std::fs::File::create(&lock_path).map_err(io_err(&lock_path))?;
    let lock = Flock::lock(lock_file, FlockArg::LockExclusiveNonblock)
        .map_err(|_| usage(format!("another bisect is writing `{}`", out.display())))?;
    let path = out.join(summary::FILE);
    let previous = match std::fs::read(&path) {
        Ok(bytes) => Some(
            serde_json::from_slice::<BisectFile>(&bytes)
                .map_err(|e| usage(format!("`{}` is not a bisect file: {e}", path.display())))?,
        ),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => return Err(io_err(&path)(err)),
    };
    match (&previous, resume) {
        (Some(previous), false) => Err(usage(format!(
            "`{}` already holds a bisect ({}); pass `--resume` to continue it and reuse its probes, or choose another `--out`",
            out.display(),
            previous.answer()
        ))),
        (None, true) => Err(usage(format!(
            "nothing to resume in `{}`: it has no {}",
            out.display(),
            summary::FILE
        ))),
        (None, false) if out.join(folder::MANIFEST).exists() => Err(usage(format!(
            "`{}` already holds a run; choose another `--out` for the bisect",
            out.display()
        ))),
        _ => Ok((lock, previous)),
    }
}

/// A resumed bisect must search what it searched before.
fn check_same(previous: &BisectFile, now: &Inputs, cell: &str) -> Result<(), BisectError> {
    let was = &previous.inputs;
    let same = previous.cell == cell
        && was.axis == now.axis
        && was.good == now.good
        && was.bad == now.bad
        && was.base == now.base
        && was.head == now.head
        && was.signature == now.signature;
    if same {
        Ok(())
    } else {
        Err(usage(format!(
            "the bisect in this folder searched {} for cell `{}`; this command asks {} for cell `{cell}`: use another `--out`",
            describe(was),
            previous.cell,
            describe(now)
        )))
    }
}

fn describe(inputs: &Inputs) -> String {
    match (&inputs.axis, &inputs.good, &inputs.bad) {
        (Some(axis), Some(good), Some(bad)) => format!("`{axis}` from {good} to {bad}"),
        _ => format!(
            "the bump from [{}] to [{}]",
            inputs.base.join(" "),
            inputs.head.join(" ")
        ),
    }
}

/// Records known before a probe runs, by (values, pins).
#[derive(Debug, Default)]
struct Memo {
    /// Reused records first (in `--runs` order), then the bisect folder's own by attempt.
    known: HashMap<String, Vec<Known>>,
}

#[derive(Debug, Clone)]
struct Known {
    record: CellRecord,
    /// The run folder it came from; `None` for the bisect folder itself.
    from: Option<PathBuf>,
}

/// The identity of a probe: its values and pins, whatever its id.
fn identity(values: &crate::record::Values, pins: &[String]) -> String {
    let sorted: BTreeMap<&String, &serde_json::Value> = values.iter().collect();
    let mut pins = pins.to_vec();
    pins.sort();
    format!(
        "{}|{}",
        serde_json::to_string(&sorted).unwrap_or_default(),
        pins.join(" ")
    )
}

fn cell_identity(cell: &Cell) -> String {
    let pins: Vec<String> = cell.pins.iter().map(ToString::to_string).collect();
    identity(&cell.values, &pins)
}

/// `<id>-tryN` -> N; any other id is a first attempt.
fn try_number(id: &str) -> u32 {
    id.rsplit_once("-try")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(1)
}

impl Memo {
    fn load(runs_from: &[PathBuf], out: &Path) -> Result<Memo, BisectError> {
        let mut memo = Memo::default();
        for dir in runs_from {
            let mut records: Vec<CellRecord> = read(dir)?.into_values().collect();
            records.sort_by(|a, b| (&a.started_at, &a.id).cmp(&(&b.started_at, &b.id)));
            for record in records {
                memo.add(record, Some(dir.clone()));
            }
        }
        let mut own: Vec<CellRecord> = read(out)?.into_values().collect();
        own.sort_by_key(|r| (try_number(&r.id), r.id.clone()));
        for record in own {
            memo.add(record, None);
        }
        Ok(memo)
    }

    fn add(&mut self, record: CellRecord, from: Option<PathBuf>) {
        let key = identity(&record.values, &record.pins);
        self.known
            .entry(key)
            .or_default()
            .push(Known { record, from });
    }

    fn get(&self, key: &str, attempt: u32) -> Option<&Known> {
        self.known.get(key)?.get(attempt.checked_sub(1)? as usize)
    }

    fn own_count(&self, key: &str) -> u32 {
        self.known.get(key).map_or(0, |list| {
            u32::try_from(list.iter().filter(|k| k.from.is_none()).count()).unwrap_or(u32::MAX)
        })
    }
}

fn read(dir: &Path) -> Result<HashMap<String, CellRecord>, BisectError> {
    let path = dir.join(folder::RESULTS);
    if !dir.is_dir() {
        return Err(usage(format!(
            "`--runs {}`: no such run folder",
            dir.display()
        )));
    }
    folder::read_results(&path, false)
        .map_err(|e| usage(format!("`--runs {}`: {e}", dir.display())))
}

struct Driver {
    /// The plan probes run from; its cells are replaced by the probe cells run so far.
    plan: Plan,
    registered: Vec<Cell>,
    memo: Memo,
    out: PathBuf,
    run: RunOptions,
    target: Option<Signature>,
    file: BisectFile,
    _lock: Flock<std::fs::File>,
}

/// What a probe attempt was: the label for the report.
struct Label {
    value: Option<String>,
    bumps: Option<Vec<String>>,
}

impl Driver {
    fn write(&self) -> Result<(), BisectError> {
        let path = self.out.join(summary::FILE);
        let tmp = self.out.join(format!(".{}.tmp", summary::FILE));
        let mut text = serde_json::to_vec_pretty(&self.file).unwrap_or_default();
        text.push(b'\n');
        (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(&text)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        })()
        .map_err(io_err(&path))
    }

    fn register(&mut self, cell: Cell) {
        if !self.registered.iter().any(|c| c.id == cell.id) {
            self.registered.push(cell);
        }
    }

    /// One attempt at a probe: a known record, or a real run. `None` when interrupted.
    async fn attempt(
        &mut self,
        cell: &Cell,
        attempt: u32,
        label: Label,
    ) -> Result<Option<RunEntry>, BisectError> {
        let key = cell_identity(cell);
        let (record, from) = match self.memo.get(&key, attempt).cloned() {
            Some(known) => {
                if known.from.is_none() {
                    let mut again = cell.clone();
                    again.id = CellId(known.record.id.clone());
                    self.register(again);
                }
                (known.record, known.from)
            }
            None => match self.run_probe(cell, &key).await? {
                Some(record) => (record, None),
                None => return Ok(None),
            },
        };
        let judged = verdict::judge(&record, self.target);
        if judged.verdict == Verdict::Bad && self.target.is_none() {
            self.target = Some(record.signature.unwrap_or(Signature::Unknown));
            self.file.signature = self.target;
        }
        let log = match &from {
            Some(dir) => self.copy_log(dir, &record),
            None => record.log.clone(),
        };
        Ok(Some(RunEntry {
            value: label.value,
            bumps: label.bumps,
            pins: record.pins.clone(),
            cell: record.id.clone(),
            attempt,
            verdict: judged.verdict,
            status: record.status,
            signature: record.signature,
            phase: record.phase,
            log,
            reason: judged.why,
            flaky: judged.flaky,
            reused_from: from.map(|d| d.display().to_string()),
            duration_s: record.duration_s,
        }))
    }

    /// Runs a probe cell into the bisect folder through the regular runner.
    async fn run_probe(
        &mut self,
        cell: &Cell,
        key: &str,
    ) -> Result<Option<CellRecord>, BisectError> {
        let id = probes::attempt_id(cell.id.as_str(), self.memo.own_count(key) + 1);
        let mut probe = cell.clone();
        probe.id = CellId(id.clone());
        self.register(probe);
        let mut plan = self.plan.clone();
        plan.cells = self.registered.clone();
        let options = RunOptions {
            out: self.out.clone(),
            resume: self.out.join(folder::MANIFEST).exists(),
            cells: vec![id.clone()],
            jobs: Some(1),
            ..self.run.clone()
        };
        let summary = run::execute(plan, options).await?;
        if summary.interrupted.is_some() {
            return Ok(None);
        }
        let record = summary
            .records
            .into_iter()
            .find(|r| r.id == id)
            .ok_or(BisectError::Lost(id))?;
        self.memo.add(record.clone(), None);
        Ok(Some(record))
    }

    /// A reused record's log, copied into the bisect folder so the folder stands alone.
    fn copy_log(&self, dir: &Path, record: &CellRecord) -> String {
        let name = Path::new(&record.log).file_name().map_or_else(
            || format!("{}.log", record.id),
            |n| n.to_string_lossy().into_owned(),
        );
        let relative = format!(
            "{}/reused-{}-{name}",
            folder::LOGS,
            sha256_hex(dir.display().to_string().as_bytes(), 4)
        );
        match std::fs::copy(dir.join(&record.log), self.out.join(&relative)) {
            Ok(_) => relative,
            Err(_) => dir.join(&record.log).display().to_string(),
        }
    }

    fn took(
        &mut self,
        entry: RunEntry,
        on_run: &mut dyn FnMut(&RunEntry),
    ) -> Result<(), BisectError> {
        on_run(&entry);
        self.file.runs.push(entry);
        let distinct: HashSet<String> = self
            .file
            .runs
            .iter()
            .map(|r| r.value.clone().unwrap_or_else(|| r.pins.join(" ")))
            .collect();
        self.file.probes = distinct.len();
        self.write()
    }

    /// The last reason a probe of `what` gave, for "why not converged".
    fn last_reason(&self, what: impl Fn(&RunEntry) -> bool) -> String {
        self.file
            .runs
            .iter()
            .rev()
            .find(|r| what(r))
            .and_then(|r| r.reason.clone())
            .unwrap_or_else(|| "no reason recorded".to_owned())
    }

    async fn version(
        &mut self,
        axis: &str,
        candidates: &[(String, Cell)],
        retries: u32,
        on_run: &mut dyn FnMut(&RunEntry),
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<bool, BisectError> {
        let mut search = VersionSearch::new(candidates.len(), retries);
        let outcome = loop {
            match search.next_step() {
                Step::Done(outcome) => break outcome,
                Step::Probe(Probe { key, attempt }) => {
                    if stop() {
                        return Ok(false);
                    }
                    let (value, cell) = &candidates[key];
                    let label = Label {
                        value: Some(value.clone()),
                        bumps: None,
                    };
                    let Some(entry) = self.attempt(cell, attempt, label).await? else {
                        return Ok(false);
                    };
                    search.record(key, entry.verdict);
                    self.took(entry, on_run)?;
                }
            }
        };
        let value = |i: usize| candidates[i].0.clone();
        let attempts = retries + 1;
        let (good, bad) = (value(0), value(candidates.len() - 1));
        let file = &mut self.file;
        file.first_bad = Some(None);
        file.last_good = Some(None);
        match outcome {
            Outcome::Converged {
                last_good,
                first_bad,
            } => {
                file.converged = true;
                file.first_bad = Some(Some(value(first_bad)));
                file.last_good = Some(Some(value(last_good)));
                file.reason = None;
            }
            Outcome::BadEnd(Verdict::Good) => {
                file.reason = Some(format!(
                    "the bad end `{axis} = {bad}` passed: nothing to bisect (fixed, or intermittent?)"
                ));
            }
            Outcome::BadEnd(_) => {
                let why = self.last_reason(|r| r.value.as_deref() == Some(bad.as_str()));
                self.file.reason = Some(format!(
                    "the bad end `{axis} = {bad}` could not be judged in {attempts} attempt(s): {why}"
                ));
            }
            Outcome::GoodEnd(Verdict::Bad) => {
                file.reason = Some(format!(
                    "the good end `{axis} = {good}` fails with the target too: the change is older than {good}"
                ));
            }
            Outcome::GoodEnd(_) => {
                let why = self.last_reason(|r| r.value.as_deref() == Some(good.as_str()));
                self.file.reason = Some(format!(
                    "the good end `{axis} = {good}` could not be judged in {attempts} attempt(s): {why}"
                ));
            }
            Outcome::Unresolved {
                last_good,
                first_bad,
            } => {
                let unknown: Vec<String> = (last_good + 1..first_bad)
                    .map(|i| {
                        let v = value(i);
                        let why = self.last_reason(|r| r.value.as_deref() == Some(v.as_str()));
                        format!("{v} ({why})")
                    })
                    .collect();
                let file = &mut self.file;
                file.first_bad = Some(Some(value(first_bad)));
                file.last_good = Some(Some(value(last_good)));
                file.reason = Some(format!(
                    "the values between {} and {} stayed unknown after {attempts} attempt(s): {}; the change is in ({}, {}]",
                    value(last_good),
                    value(first_bad),
                    unknown.join(", "),
                    value(last_good),
                    value(first_bad)
                ));
            }
        }
        Ok(true)
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one call site; the pieces of one attribution"
    )]
    async fn attribution(
        &mut self,
        chosen: &Cell,
        base: &PinSet,
        head: &PinSet,
        bumps: &[Bump],
        retries: u32,
        on_run: &mut dyn FnMut(&RunEntry),
        stop: &mut dyn FnMut() -> bool,
    ) -> Result<bool, BisectError> {
        let mut dd = Ddmin::new(bumps.len(), retries);
        let names = |set: &[usize]| -> Vec<String> {
            set.iter().map(|&i| bumps[i].package.clone()).collect()
        };
        let outcome = loop {
            match dd.next_step() {
                Step::Done(outcome) => break outcome,
                Step::Probe(Probe { key, attempt }) => {
                    if stop() {
                        return Ok(false);
                    }
                    let pins = probes::attribution_pins(chosen, base, head, bumps, &key);
                    let cell = probes::attribution_cell(chosen, pins);
                    let label = Label {
                        value: None,
                        bumps: Some(names(&key)),
                    };
                    let Some(entry) = self.attempt(&cell, attempt, label).await? else {
                        return Ok(false);
                    };
                    dd.record(&key, entry.verdict);
                    self.took(entry, on_run)?;
                }
            }
        };
        let attempts = retries + 1;
        match outcome {
            DdOutcome::Found { culprits, minimal } => {
                self.file.culprits = Some(names(&culprits));
                self.file.converged = minimal;
                self.file.reason = (!minimal).then(|| {
                    let untested: Vec<String> = culprits
                        .iter()
                        .filter(|removed| {
                            let rest: Vec<usize> =
                                culprits.iter().copied().filter(|b| b != *removed).collect();
                            dd.verdict(&rest) != Some(Verdict::Good)
                        })
                        .map(|&i| bumps[i].package.clone())
                        .collect();
                    format!(
                        "{} reproduce the failure together, but the set without {} could not be judged (unknown after {attempts} attempt(s)): it may not be the smallest",
                        names(&culprits).join(" + "),
                        untested.join(" or without ")
                    )
                });
            }
            DdOutcome::BadEnd(Verdict::Good) => {
                self.file.culprits = Some(Vec::new());
                self.file.reason = Some("the head pins pass: nothing to attribute".to_owned());
            }
            DdOutcome::BadEnd(_) => {
                let why =
                    self.last_reason(|r| r.bumps.as_ref().is_some_and(|b| b.len() == bumps.len()));
                self.file.culprits = Some(Vec::new());
                self.file.reason = Some(format!(
                    "the head pins could not be judged in {attempts} attempt(s): {why}"
                ));
            }
            DdOutcome::GoodEnd(verdict) => {
                let why = self.last_reason(|r| r.bumps.as_ref().is_some_and(Vec::is_empty));
                self.file.culprits = Some(Vec::new());
                self.file.reason = Some(match verdict {
                    Verdict::Bad => {
                        "the base pins fail with the target too: the bump is not the cause"
                            .to_owned()
                    }
                    _ => {
                        format!("the base pins could not be judged in {attempts} attempt(s): {why}")
                    }
                });
            }
        }
        Ok(true)
    }
}
