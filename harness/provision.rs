//! Environments: a cell's pins installed once per distinct pin set, reused by every cell that
//! needs the same set.
//!
//! An environment is a virtual environment in `CACHE/envs/<hash>`, where the hash covers the
//! interpreter, the base requirement file's text, the pins and the index settings. It is created
//! with uv when uv is on `PATH` (`GPUCOMPAT_INSTALLER=pip` forces pip), from an index or an
//! offline wheelhouse (`find-links`, `no-index`), optionally over the system's packages (its
//! torch). One installer per environment at a time: the others wait on a lock file. The
//! environment becomes usable only when its `.gpucompat-ready` marker is written, after a
//! successful install; a failed or interrupted install leaves no marker, and the next cell that
//! needs the environment wipes it and starts again. Installers run as cell processes (their own
//! process group, torn down on Ctrl-C, killed by the reaper if the harness dies).

use crate::digest::sha256_hex;
use crate::env::EnvVars;
use crate::exec::process::{self, CellCommand, SharedLog};
use crate::exec::reaper::Reaper;
use crate::matrix::{Cell, Pin, Plan, PythonEnv};
use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Written into an environment after a successful install; its absence means "not usable".
pub const READY_MARKER: &str = ".gpucompat-ready";

/// Everything that decides what an environment holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvSpec {
    /// Interpreter the environment is created from.
    pub python: String,
    /// Base requirement file (absolute) and its text, which the hash covers.
    pub requirements: Option<(PathBuf, String)>,
    pub pins: Vec<Pin>,
    pub index_url: Option<String>,
    /// Wheelhouse folders, absolute.
    pub find_links: Vec<PathBuf>,
    /// `[python] site`: prebuilt site folders and archives, in order.
    pub site: Vec<SiteEntry>,
    pub no_index: bool,
    pub system_site_packages: bool,
    /// Install only what is named, no dependencies (`[python] no-deps`).
    pub no_deps: bool,
}

/// One `[python] site` entry: a folder put on the path as it is, or an archive unpacked (with the
/// environment's other archives, in order, later ones over earlier ones, as an engine bundle's
/// parts are meant to be) into the environment's `gpucompat-site` folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SiteEntry {
    /// Absolute.
    pub path: PathBuf,
    /// sha256 of an archive's bytes, so a rebuilt bundle makes another environment; `None` for
    /// a folder (read where it is, at run time).
    pub digest: Option<String>,
}

impl SiteEntry {
    fn read(path: PathBuf) -> Result<SiteEntry, ProvisionError> {
        let io = |source| ProvisionError::Io {
            path: path.display().to_string(),
            source,
        };
        let meta = fs::metadata(&path).map_err(io)?;
        if meta.is_dir() {
            return Ok(SiteEntry { path, digest: None });
        }
        let digest = crate::digest::sha256_file(&path).map_err(io)?;
        Ok(SiteEntry {
            path,
            digest: Some(digest),
        })
    }

    fn is_archive(&self) -> bool {
        self.digest.is_some()
    }
}

/// Which tool installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Installer {
    Uv,
    Pip,
}

impl Installer {
    /// The installer for `spec`: pip for an environment over the system's packages (uv's resolver
    /// does not count packages inherited from the system, so it would ask the index for torch and
    /// every other dependency the system already has), else [`Installer::detect`].
    pub fn for_spec(spec: &EnvSpec) -> Installer {
        match Installer::asked() {
            Some(installer) => installer,
            None if spec.system_site_packages => Installer::Pip,
            None => Installer::detect(),
        }
    }

    /// What `GPUCOMPAT_INSTALLER=uv|pip` asks for, if it is set.
    fn asked() -> Option<Installer> {
        match crate::env::var(EnvVars::GPUCOMPAT_INSTALLER).as_deref() {
            Some("pip") => Some(Installer::Pip),
            Some("uv") => Some(Installer::Uv),
            _ => None,
        }
    }

    /// uv when it is on `PATH`, pip otherwise; `GPUCOMPAT_INSTALLER=uv|pip` decides when set.
    pub fn detect() -> Installer {
        if let Some(installer) = Installer::asked() {
            return installer;
        }
        let on_path = crate::env::var_os(EnvVars::PATH)
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("uv").is_file()));
        if on_path {
            Installer::Uv
        } else {
            Installer::Pip
        }
    }
}

/// A ready environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Provisioned {
    pub dir: PathBuf,
    /// The environment's interpreter.
    pub python: PathBuf,
    /// Whether it was already installed (no work done).
    pub reused: bool,
    /// Seconds spent, waiting for the lock included.
    pub seconds: f64,
}

/// Why an environment could not be provided.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("cannot read the base requirement file `{path}`")]
    Requirements {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare `{path}`")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The install command failed; its output is in the cell's log.
    #[error("`{step}` failed ({status})")]
    Install { step: String, status: String },
    #[error("interrupted while provisioning")]
    Interrupted,
}

impl EnvSpec {
    /// The environment a cell needs, or `None` when the plan installs nothing.
    pub fn for_cell(plan: &Plan, cell: &Cell) -> Result<Option<EnvSpec>, ProvisionError> {
        let Some(python) = &plan.python else {
            return Ok(None);
        };
        let requirements = match &cell.requirements {
            Some(path) => {
                let path = plan.dir.join(path);
                let text =
                    fs::read_to_string(&path).map_err(|source| ProvisionError::Requirements {
                        path: path.display().to_string(),
                        source,
                    })?;
                Some((absolute(&path), text))
            }
            None => None,
        };
        let mut spec = EnvSpec::new(plan, python, requirements, &cell.pins);
        spec.site = cell
            .site
            .iter()
            .map(|p| SiteEntry::read(absolute(&plan.dir.join(p))))
            .collect::<Result<_, _>>()?;
        Ok(Some(spec))
    }

    fn new(
        plan: &Plan,
        python: &PythonEnv,
        requirements: Option<(PathBuf, String)>,
        pins: &[Pin],
    ) -> EnvSpec {
        EnvSpec {
            python: python
                .python
                .clone()
                .unwrap_or_else(|| "python3".to_owned()),
            requirements,
            pins: pins.to_vec(),
            index_url: python.index_url.clone(),
            find_links: python
                .find_links
                .iter()
                .map(|p| absolute(&plan.dir.join(p)))
                .collect(),
            site: Vec::new(),
            no_index: python.no_index,
            system_site_packages: python.system_site_packages,
            no_deps: python.no_deps,
        }
    }

    /// A stable name for the environment: 16 hex digits of the sha256 of its spec.
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_vec(self).unwrap_or_default();
        sha256_hex(&canonical, 8)
    }

    /// The shell commands that create the environment in `dir`. The cell's pins go *over* the
    /// base requirement set: where the base (or what it pulls in) asks for another version of a
    /// pinned package, the pin wins, as the version under test must. uv does this with an
    /// override file; pip installs the base first, then the pins.
    pub fn steps(&self, installer: Installer, dir: &Path) -> Vec<String> {
        let q = |p: &Path| shell_quote(&p.display().to_string());
        let mut source = Vec::new();
        if let Some(url) = &self.index_url {
            source.push(format!("--index-url {}", shell_quote(url)));
        }
        for link in &self.find_links {
            source.push(format!("--find-links {}", q(link)));
        }
        if self.no_index {
            source.push("--no-index".to_owned());
        }
        if self.no_deps {
            source.push("--no-deps".to_owned());
        }
        let source = source.join(" ");
        let base = self
            .requirements
            .as_ref()
            .map(|(path, _)| format!("-r {}", q(path)));
        let pins: Vec<String> = self
            .pins
            .iter()
            .map(|p| shell_quote(&p.to_string()))
            .collect();
        let site = if self.system_site_packages {
            " --system-site-packages"
        } else {
            ""
        };
        let python = q(&dir.join("bin").join("python"));
        let join = |parts: &[&str]| {
            parts
                .iter()
                .filter(|p| !p.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut steps = Vec::new();
        // A virtual environment made from an interpreter that is itself in one (a machine's torch
        // often lives in a venv) sees only the base interpreter's packages, not its parent's:
        // a `.pth` file adds the creating interpreter's site-packages after the environment's own,
        // so the machine's torch is there and the cell's pins still come first.
        let inherit = self.system_site_packages.then(|| {
            format!(
                "{} -c 'import site; print(*site.getsitepackages(), sep=chr(10))' > \"$({python} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/_gpucompat_system.pth\"",
                shell_quote(&self.python)
            )
        });
        let bundles = self.site_steps(dir, &python);
        match installer {
            Installer::Uv => {
                steps.push(format!(
                    "uv venv --quiet --python {}{site} {}",
                    shell_quote(&self.python),
                    q(dir)
                ));
                steps.extend(inherit.clone());
                steps.extend(bundles.iter().cloned());
                if base.is_some() || !pins.is_empty() {
                    let overrides = dir.join("gpucompat-pins.txt");
                    let mut install = format!("uv pip install --python {python}");
                    if !pins.is_empty() {
                        steps.push(format!(
                            "printf '%s\\n' {} > {}",
                            pins.join(" "),
                            q(&overrides)
                        ));
                        install = format!("{install} --override {}", q(&overrides));
                    }
                    steps.push(join(&[
                        &install,
                        &source,
                        base.as_deref().unwrap_or_default(),
                        &pins.join(" "),
                    ]));
                }
            }
            Installer::Pip => {
                steps.push(format!(
                    "{} -m venv{site} {}",
                    shell_quote(&self.python),
                    q(dir)
                ));
                steps.extend(inherit);
                steps.extend(bundles);
                let pip = format!("{python} -m pip install --disable-pip-version-check --no-input");
                if let Some(base) = &base {
                    steps.push(join(&[&pip, &source, base]));
                }
                if !pins.is_empty() {
                    steps.push(join(&[&pip, &source, &pins.join(" ")]));
                }
            }
        }
        steps
    }
}

impl EnvSpec {
    /// The steps that put `[python] site` on the environment's path: archives unpacked in order
    /// into `DIR/gpucompat-site`, then one `.pth` file naming the folders with `site.addsitedir`
    /// (which also reads the `.pth` files inside them). Python reads a site folder's `.pth` files
    /// in name order and appends what they name after the folder itself: the environment's own
    /// packages (the cell's pins) come first, then these (`_gpucompat_bundles.pth`), then the
    /// system's (`_gpucompat_system.pth`), so a bundle's newer dependencies win over the
    /// machine's and the pinned FlashInfer wins over the bundle's.
    fn site_steps(&self, dir: &Path, python: &str) -> Vec<String> {
        if self.site.is_empty() {
            return Vec::new();
        }
        let unpacked = dir.join("gpucompat-site");
        let q = |p: &Path| shell_quote(&p.display().to_string());
        let mut steps = Vec::new();
        let mut folders: Vec<&Path> = Vec::new();
        for entry in &self.site {
            if entry.is_archive() {
                if !folders.contains(&unpacked.as_path()) {
                    steps.push(format!("mkdir -p {}", q(&unpacked)));
                    folders.push(&unpacked);
                }
                steps.push(format!("tar -xf {} -C {}", q(&entry.path), q(&unpacked)));
            } else {
                folders.push(&entry.path);
            }
        }
        let lines: Vec<String> = folders
            .iter()
            .map(|folder| {
                let literal =
                    serde_json::to_string(&folder.display().to_string()).unwrap_or_default();
                shell_quote(&format!("import site; site.addsitedir({literal})"))
            })
            .collect();
        steps.push(format!(
            "printf '%s\\n' {} > \"$({python} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/_gpucompat_bundles.pth\"",
            lines.join(" ")
        ));
        steps
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Quotes a word for POSIX `sh`: left alone when it is only characters no shell treats
/// specially (and does not start with `=`, which zsh expands), else in single quotes, inside
/// which `sh` reads every character literally; a `'` becomes `'\''`. The one shell quoter of the
/// harness: install steps, engine commands and the report's reproducers all use it.
pub fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && !text.starts_with('=')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// What provisioning needs from the run.
#[derive(Debug)]
pub struct Context<'a> {
    pub cache_root: &'a Path,
    pub cwd: &'a Path,
    pub run_token: &'a str,
    pub cell_token: &'a str,
    pub reaper: Option<&'a Reaper>,
    pub grace: Duration,
}

/// Provides the environment, installing it if no cell did before. Progress and installer
/// output go to the cell's log.
pub async fn provision(
    spec: &EnvSpec,
    cx: &Context<'_>,
    log: &SharedLog,
    cancel: &mut watch::Receiver<bool>,
) -> Result<Provisioned, ProvisionError> {
    let clock = Instant::now();
    // Install commands run in the matrix file's folder: give them absolute paths.
    let envs = absolute(&cx.cache_root.join("envs"));
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| ProvisionError::Io { path, source }
    };
    fs::create_dir_all(&envs).map_err(io(&envs))?;
    let hash = spec.hash();
    let dir = envs.join(&hash);
    let python = dir.join("bin").join("python");
    let done = |reused| Provisioned {
        dir: dir.clone(),
        python: python.clone(),
        reused,
        seconds: clock.elapsed().as_secs_f64(),
    };
    if dir.join(READY_MARKER).exists() {
        process::lock(log).note(&format!("environment {hash}: reused ({})", dir.display()));
        return Ok(done(true));
    }
    let lock_path = envs.join(format!("{hash}.lock"));
    let mut announced = false;
    let _lock = loop {
        let file = File::create(&lock_path).map_err(io(&lock_path))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => break lock,
            Err(_) => {
                if !announced {
                    process::lock(log).note(&format!(
                        "environment {hash}: another cell is installing it; waiting"
                    ));
                    announced = true;
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = cancel.wait_for(|c| *c) => return Err(ProvisionError::Interrupted),
                }
            }
        }
    };
    if dir.join(READY_MARKER).exists() {
        process::lock(log).note(&format!(
            "environment {hash}: installed by another cell while this one waited"
        ));
        return Ok(done(true));
    }
    if dir.exists() {
        process::lock(log).note(&format!(
            "environment {hash}: removing an incomplete earlier install"
        ));
        fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    let installer = Installer::for_spec(spec);
    process::lock(log).note(&format!(
        "environment {hash}: installing with {installer:?} into {}",
        dir.display()
    ));
    for step in spec.steps(installer, &dir) {
        run_step(&step, cx, log, cancel).await?;
    }
    let spec_text = serde_json::to_vec_pretty(spec).unwrap_or_default();
    let marker = dir.join(READY_MARKER);
    fs::write(dir.join("gpucompat-env.json"), spec_text)
        .and_then(|()| fs::write(&marker, b"ok\n"))
        .map_err(io(&marker))?;
    process::lock(log).note(&format!(
        "environment {hash}: ready after {:.1}s",
        clock.elapsed().as_secs_f64()
    ));
    Ok(done(false))
}

async fn run_step(
    step: &str,
    cx: &Context<'_>,
    log: &SharedLog,
    cancel: &mut watch::Receiver<bool>,
) -> Result<(), ProvisionError> {
    process::lock(log).note(&format!("install: {step}"));
    let command = CellCommand {
        script: step.to_owned(),
        cwd: cx.cwd.to_path_buf(),
        env: vec![
            ("UV_PYTHON_DOWNLOADS".to_owned(), "never".to_owned()),
            ("PIP_NO_INPUT".to_owned(), "1".to_owned()),
        ],
        run_token: cx.run_token.to_owned(),
        cell_token: format!("{}.install", cx.cell_token),
    };
    let mut running = process::spawn(&command, log).map_err(|source| ProvisionError::Io {
        path: "sh".to_owned(),
        source,
    })?;
    if let Some(reaper) = cx.reaper {
        reaper.register(running.pgid());
    }
    let outcome = tokio::select! {
        status = running.wait() => Some(status),
        _ = cancel.wait_for(|c| *c) => None,
    };
    running.teardown(cx.grace).await;
    if let Some(reaper) = cx.reaper {
        reaper.unregister(running.pgid());
    }
    match outcome {
        None => Err(ProvisionError::Interrupted),
        Some(Ok(status)) if status.success() => Ok(()),
        Some(Ok(status)) => Err(ProvisionError::Install {
            step: step
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            status: status.to_string(),
        }),
        Some(Err(source)) => Err(ProvisionError::Io {
            path: "sh".to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EnvSpec {
        EnvSpec {
            python: "python3".to_owned(),
            requirements: None,
            pins: vec![Pin {
                name: "flashinfer-python".to_owned(),
                version: "0.6.3".to_owned(),
            }],
            index_url: None,
            find_links: vec![PathBuf::from("/w h/wheels")],
            site: Vec::new(),
            no_index: true,
            system_site_packages: true,
            no_deps: false,
        }
    }

    #[test]
    fn hash_follows_the_spec() {
        let a = spec();
        let mut b = spec();
        assert_eq!(a.hash(), b.hash());
        b.pins[0].version = "0.6.8.post1".to_owned();
        assert_ne!(a.hash(), b.hash());
        assert_eq!(a.hash().len(), 16);
    }

    #[test]
    fn install_steps_put_the_pins_over_the_base_set() {
        let dir = Path::new("/cache/envs/abc");
        let mut with_base = spec();
        with_base.requirements = Some((PathBuf::from("/m/base.txt"), "torch\n".to_owned()));
        let pip = with_base.steps(Installer::Pip, dir);
        assert_eq!(
            pip[0],
            "python3 -m venv --system-site-packages /cache/envs/abc"
        );
        // The link to the creating interpreter's packages (see `steps`).
        assert!(pip[1].ends_with("/_gpucompat_system.pth\""), "{}", pip[1]);
        let pip = &pip[1..];
        assert_eq!(
            pip[1],
            "/cache/envs/abc/bin/python -m pip install --disable-pip-version-check --no-input --find-links '/w h/wheels' --no-index -r /m/base.txt"
        );
        assert_eq!(
            pip[2],
            "/cache/envs/abc/bin/python -m pip install --disable-pip-version-check --no-input --find-links '/w h/wheels' --no-index flashinfer-python==0.6.3"
        );
        let uv = with_base.steps(Installer::Uv, dir);
        assert!(uv[0].starts_with("uv venv --quiet --python python3 --system-site-packages"));
        let uv = &uv[1..];
        assert_eq!(
            uv[1],
            "printf '%s\\n' flashinfer-python==0.6.3 > /cache/envs/abc/gpucompat-pins.txt"
        );
        assert_eq!(
            uv[2],
            "uv pip install --python /cache/envs/abc/bin/python --override /cache/envs/abc/gpucompat-pins.txt --find-links '/w h/wheels' --no-index -r /m/base.txt flashinfer-python==0.6.3"
        );
        // No base: the pins alone, in one step (after the venv and its link to the system).
        assert_eq!(spec().steps(Installer::Pip, dir).len(), 3);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a==1.0"), "a==1.0");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("=ls"), "'=ls'");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("!x^{a,b}~"), "'!x^{a,b}~'");
    }
}
