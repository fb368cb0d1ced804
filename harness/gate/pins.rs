//! The two pin sets a gate compares: from `--base`/`--head` (a requirement file or a
//! `name==version` list, read by [`crate::bisect::probes::read_pins`]) or from git revisions
//! (`--base-ref`/`--head-ref`), whose requirement files and `pyproject.toml` are read with
//! `git show REV:./PATH`, so the working tree is never touched.

use crate::bisect::probes::{self, InputError, PinSet};
use crate::exec::probe;
use crate::matrix::Pin;
use std::path::Path;
use std::time::Duration;

/// Files read at a revision when `--pins-file` is not given, in order; those that do not exist
/// at the revision are skipped.
pub const DEFAULT_PIN_FILES: [&str; 2] = ["requirements.txt", "pyproject.toml"];

/// One side's pins and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidePins {
    pub pins: PinSet,
    /// What the user gave: a file, a list, or `REV` (with the files read).
    pub source: String,
    /// The flags that give these pins again (for reproducer commands).
    pub flags: Vec<String>,
}

fn usage(text: impl Into<String>) -> InputError {
    InputError::Usage(text.into())
}

/// `--base PINS` / `--head PINS`.
pub fn given(flag: &str, text_or_path: &str) -> Result<SidePins, InputError> {
    Ok(SidePins {
        pins: probes::read_pins(flag, text_or_path)?,
        source: text_or_path.to_owned(),
        flags: vec![flag.to_owned(), text_or_path.to_owned()],
    })
}

/// `--base-ref REV` / `--head-ref REV`: the exact pins (`==`) of `files` at `rev`, in the git
/// repository of `dir`. Ranges (`>=`) are not pins and are left out; a package pinned in two
/// files must agree.
pub fn at_ref(flag: &str, rev: &str, files: &[String], dir: &Path) -> Result<SidePins, InputError> {
    if rev.starts_with('-') {
        return Err(usage(format!("{flag} {rev}: not a revision")));
    }
    let mut pins: PinSet = Vec::new();
    let mut read = Vec::new();
    for file in files {
        let spec = format!("{rev}:./{}", file.trim_start_matches("./"));
        let dir_text = dir.display().to_string();
        let text = match probe::capture(
            "git",
            &["-C", &dir_text, "show", &spec],
            Duration::from_secs(30),
        ) {
            Ok(text) => text,
            Err(probe::ProbeError::Failed { stderr, .. })
                if stderr.contains("does not exist")
                    || stderr.contains("exists on disk, but not in") =>
            {
                continue;
            }
            Err(err) => return Err(usage(format!("{flag} {rev}: cannot read `{file}`: {err}"))),
        };
        let found = if file.ends_with(".toml") {
            pyproject_pins(&text).map_err(|e| usage(format!("{flag} {rev}: `{file}`: {e}")))?
        } else {
            requirement_pins(&text)
        };
        for pin in found {
            match pins.iter().find(|p| same_name(&p.name, &pin.name)) {
                Some(p) if p.version != pin.version => {
                    return Err(usage(format!(
                        "{flag} {rev}: `{}` is pinned to {} and to {} (in `{file}`)",
                        pin.name, p.version, pin.version
                    )));
                }
                Some(_) => {}
                None => pins.push(pin),
            }
        }
        read.push(file.clone());
    }
    if read.is_empty() {
        return Err(usage(format!(
            "{flag} {rev}: none of {} exists at that revision (say which with `--pins-file`)",
            files.join(", ")
        )));
    }
    if pins.is_empty() {
        return Err(usage(format!(
            "{flag} {rev}: no `name==version` pins in {}",
            read.join(", ")
        )));
    }
    Ok(SidePins {
        pins,
        source: format!("{rev} ({})", read.join(", ")),
        flags: vec![format!("{flag}-ref"), rev.to_owned()],
    })
}

fn same_name(a: &str, b: &str) -> bool {
    crate::bisect::index::normalize(a) == crate::bisect::index::normalize(b)
}

/// `name==version` out of one requirement: extras and environment markers dropped; anything
/// that is not an exact pin is `None`.
fn requirement(line: &str) -> Option<Pin> {
    let line = line.split('#').next()?.split(';').next()?.trim();
    if line.starts_with('-') || line.contains(" @ ") {
        return None;
    }
    let (name, version) = line.split_once("==")?;
    let name = name.split('[').next()?.trim();
    let version = version.split(',').next()?.trim();
    if name.is_empty() || version.parse::<pep440_rs::Version>().is_err() {
        return None;
    }
    Some(Pin {
        name: name.to_owned(),
        version: version.to_owned(),
    })
}

fn requirement_pins(text: &str) -> Vec<Pin> {
    text.lines().filter_map(requirement).collect()
}

/// Exact pins of `[project] dependencies` and every `[project.optional-dependencies]` group.
fn pyproject_pins(text: &str) -> Result<Vec<Pin>, String> {
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
    let project = table.get("project");
    let mut specs: Vec<&str> = Vec::new();
    fn strings(v: Option<&toml::Value>) -> Vec<&str> {
        v.and_then(toml::Value::as_array)
            .map(|a| a.iter().filter_map(toml::Value::as_str).collect())
            .unwrap_or_default()
    }
    specs.extend(strings(project.and_then(|p| p.get("dependencies"))));
    if let Some(groups) = project
        .and_then(|p| p.get("optional-dependencies"))
        .and_then(toml::Value::as_table)
    {
        for group in groups.values() {
            specs.extend(strings(Some(group)));
        }
    }
    Ok(specs.into_iter().filter_map(requirement).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_pins_are_read_and_ranges_left_out() {
        let pins = requirement_pins(
            "# pins\nflashinfer-python==0.6.11  # the bump\ntorch>=2.4\n-r base.txt\nquack-kernels[cu12]==0.2.0 ; python_version >= '3.10'\n",
        );
        let text: Vec<String> = pins.iter().map(ToString::to_string).collect();
        assert_eq!(text, ["flashinfer-python==0.6.11", "quack-kernels==0.2.0"]);
        let pins = pyproject_pins(
            "[project]\nname = \"x\"\ndependencies = [\"flashinfer-cubin==0.6.11\", \"numpy\"]\n[project.optional-dependencies]\ngpu = [\"nvidia-cutlass-dsl==4.2.1\"]\n",
        )
        .unwrap();
        let text: Vec<String> = pins.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            ["flashinfer-cubin==0.6.11", "nvidia-cutlass-dsl==4.2.1"]
        );
        assert!(pyproject_pins("[project\n").is_err());
    }
}
