//! Candidate versions of a package from a package index and from wheel folders.
//!
//! The index is read through the standard JSON simple API (PEP 691: `GET {index}/{name}/` with
//! `Accept: application/vnd.pypi.simple.v1+json`), the API pip and uv speak. A version is a
//! candidate when it has at least one file that is not yanked (PEP 592: `yanked` is `true` or a
//! reason). Core-metadata fields are read under both their names (`core-metadata`, PEP 714, and
//! the older `dist-info-metadata`, PEP 658) so an index of either age parses; the bisect itself
//! needs only file names. Pre-releases (and dev releases) are candidates only when asked for.
//!
//! Which index: `--index-url`, else the matrix's `[python] index-url`, else `UV_INDEX_URL` /
//! `UV_DEFAULT_INDEX`, else `PIP_INDEX_URL`, else pip's configuration files (`PIP_CONFIG_FILE`,
//! then the user's `pip.conf`, `index-url` in `[global]` or `[install]`), else PyPI.
//! `--find-links DIR` adds the wheels and sdists of a folder (nightly builds).

use crate::env::EnvVars;
use pep440_rs::Version;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// The JSON simple API's media type (PEP 691).
pub const SIMPLE_JSON: &str = "application/vnd.pypi.simple.v1+json";
/// PyPI, when nothing says otherwise.
pub const PYPI: &str = "https://pypi.org/simple";

/// A candidate version: as published (`0.6.8.post1`) and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub text: String,
    pub version: Version,
}

/// The index to read, and what chose it (said in the summary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexUrl {
    pub url: String,
    pub from: String,
}

/// Candidates could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot reach the package index at `{url}`")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the package index has no project `{name}` (`{url}` answered {status})")]
    NoProject {
        name: String,
        url: String,
        status: u16,
    },
    #[error("`{url}` answered {status}")]
    Status { url: String, status: u16 },
    #[error(
        "`{url}` did not answer with the JSON simple API (content type `{content_type}`); gpucompat reads PEP 691 indexes"
    )]
    NotJson { url: String, content_type: String },
    #[error("`{url}` is not a PEP 691 project page")]
    Malformed {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("`{url}` speaks simple API {version}; gpucompat reads major version 1")]
    ApiVersion { url: String, version: String },
    #[error("cannot read the wheel folder `{path}`")]
    FindLinks {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set up HTTPS")]
    Tls(#[source] reqwest::Error),
}

impl IndexError {
    /// Whether the user can fix it by changing arguments (exit 2) rather than a fault (exit 3).
    pub fn is_input(&self) -> bool {
        match self {
            IndexError::NoProject { .. }
            | IndexError::NotJson { .. }
            | IndexError::ApiVersion { .. }
            | IndexError::FindLinks { .. } => true,
            IndexError::Unreachable { .. }
            | IndexError::Status { .. }
            | IndexError::Malformed { .. }
            | IndexError::Tls(_) => false,
        }
    }
}

/// PEP 503 normalisation: lowercase, runs of `-`, `_`, `.` as one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut dash = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            dash = true;
        } else {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Picks the index URL (see the module docs for the order).
pub fn resolve(flag: Option<&str>, matrix: Option<&str>) -> IndexUrl {
    let pick = |url: &str, from: &str| IndexUrl {
        url: url.trim().trim_end_matches('/').to_owned(),
        from: from.to_owned(),
    };
    if let Some(url) = flag {
        return pick(url, "--index-url");
    }
    if let Some(url) = matrix {
        return pick(url, "[python] index-url");
    }
    for var in [
        EnvVars::UV_INDEX_URL,
        EnvVars::UV_DEFAULT_INDEX,
        EnvVars::PIP_INDEX_URL,
    ] {
        if let Some(url) = crate::env::var(var).filter(|u| !u.trim().is_empty()) {
            return pick(&url, var);
        }
    }
    if let Some((url, file)) = pip_config_index() {
        return pick(&url, &file);
    }
    pick(PYPI, "default")
}

/// `index-url` from pip's configuration files; the last file that sets it wins, as in pip.
fn pip_config_index() -> Option<(String, String)> {
    let mut files: Vec<PathBuf> = vec![PathBuf::from("/etc/pip.conf")];
    if let Some(home) = crate::env::var_os(EnvVars::HOME) {
        let home = PathBuf::from(home);
        files.push(home.join(".pip/pip.conf"));
        let config = crate::env::var_os(EnvVars::XDG_CONFIG_HOME)
            .map_or_else(|| home.join(".config"), PathBuf::from);
        files.push(config.join("pip/pip.conf"));
    }
    if let Some(venv) = crate::env::var_os(EnvVars::VIRTUAL_ENV) {
        files.push(PathBuf::from(venv).join("pip.conf"));
    }
    if let Some(file) = crate::env::var_os(EnvVars::PIP_CONFIG_FILE) {
        files.push(PathBuf::from(file));
    }
    files.iter().rev().find_map(|file| {
        let text = std::fs::read_to_string(file).ok()?;
        ini_index_url(&text).map(|url| (url, file.display().to_string()))
    })
}

/// `index-url` (or `index_url`) in the `[global]` or `[install]` section of a pip.conf.
fn ini_index_url(text: &str) -> Option<String> {
    let mut section = String::new();
    let mut found = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_ascii_lowercase();
        } else if let Some((key, value)) = line.split_once(['=', ':']) {
            let key = key.trim().replace('_', "-");
            if key == "index-url" && matches!(section.as_str(), "global" | "install") {
                found = Some(value.trim().to_owned());
            }
        }
    }
    found
}

#[derive(Debug, Deserialize)]
struct ProjectPage {
    meta: Meta,
    files: Vec<FileEntry>,
}

#[derive(Debug, Deserialize)]
struct Meta {
    #[serde(rename = "api-version")]
    api_version: String,
}

#[derive(Debug, Deserialize)]
struct FileEntry {
    filename: String,
    /// `false`, `true` or a reason (PEP 592); absent means not yanked.
    #[serde(default)]
    yanked: serde_json::Value,
    /// PEP 714's name for the core metadata; PEP 658's older name below. Read so both parse.
    #[serde(default, rename = "core-metadata")]
    _core_metadata: Option<serde_json::Value>,
    #[serde(default, rename = "dist-info-metadata")]
    _dist_info_metadata: Option<serde_json::Value>,
}

impl FileEntry {
    fn yanked(&self) -> bool {
        match &self.yanked {
            serde_json::Value::Bool(b) => *b,
            serde_json::Value::String(_) => true,
            _ => false,
        }
    }
}

/// An HTTPS-capable client (rustls with ring; the system's roots).
pub fn client() -> Result<reqwest::Client, IndexError> {
    crate::http::builder()
        .connect_timeout(Duration::from_secs(15))
        .timeout(Duration::from_secs(120))
        .user_agent(concat!("gpucompat/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(IndexError::Tls)
}

/// Every version of `name` on the index that has a file not yanked.
pub async fn index_versions(
    client: &reqwest::Client,
    index: &str,
    name: &str,
) -> Result<Vec<Candidate>, IndexError> {
    let url = format!("{}/{}/", index.trim_end_matches('/'), normalize(name));
    let unreachable = |source| IndexError::Unreachable {
        url: url.clone(),
        source,
    };
    let response = client
        .get(&url)
        .header(reqwest::header::ACCEPT, SIMPLE_JSON)
        .send()
        .await
        .map_err(unreachable)?;
    let status = response.status().as_u16();
    if status == 404 {
        return Err(IndexError::NoProject {
            name: name.to_owned(),
            url,
            status,
        });
    }
    if !response.status().is_success() {
        return Err(IndexError::Status { url, status });
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if !content_type.starts_with(SIMPLE_JSON) && !content_type.starts_with("application/json") {
        return Err(IndexError::NotJson { url, content_type });
    }
    let body = response.bytes().await.map_err(unreachable)?;
    parse_page(&url, &body, name)
}

fn parse_page(url: &str, body: &[u8], name: &str) -> Result<Vec<Candidate>, IndexError> {
    let page: ProjectPage =
        serde_json::from_slice(body).map_err(|source| IndexError::Malformed {
            url: url.to_owned(),
            source,
        })?;
    if !page.meta.api_version.starts_with("1.") && page.meta.api_version != "1" {
        return Err(IndexError::ApiVersion {
            url: url.to_owned(),
            version: page.meta.api_version,
        });
    }
    let files = page
        .files
        .iter()
        .filter(|f| !f.yanked())
        .map(|f| f.filename.as_str());
    Ok(versions_of_files(files, name))
}

/// Versions of `name` among the wheels and sdists in `dir`.
pub fn find_links_versions(dir: &Path, name: &str) -> Result<Vec<Candidate>, IndexError> {
    let entries = std::fs::read_dir(dir).map_err(|source| IndexError::FindLinks {
        path: dir.display().to_string(),
        source,
    })?;
    let names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    Ok(versions_of_files(names.iter().map(String::as_str), name))
}

/// Distinct versions named by distribution file names of `name`, in the order first seen.
fn versions_of_files<'a>(files: impl Iterator<Item = &'a str>, name: &str) -> Vec<Candidate> {
    let wanted = normalize(name);
    let mut out: Vec<Candidate> = Vec::new();
    for file in files {
        let Some((project, version)) = split_filename(file) else {
            continue;
        };
        if normalize(project) != wanted {
            continue;
        }
        let Ok(parsed) = Version::from_str(version) else {
            continue;
        };
        if !out.iter().any(|c| c.version == parsed) {
            out.push(Candidate {
                text: version.to_owned(),
                version: parsed,
            });
        }
    }
    out
}

/// (project, version) of a wheel (`name-version(-build)?-py-abi-plat.whl`) or an sdist
/// (`name-version.tar.gz` / `.zip`).
fn split_filename(file: &str) -> Option<(&str, &str)> {
    if let Some(stem) = file.strip_suffix(".whl") {
        let mut parts = stem.split('-');
        let project = parts.next()?;
        let version = parts.next()?;
        return (stem.split('-').count() >= 5).then_some((project, version));
    }
    let stem = file
        .strip_suffix(".tar.gz")
        .or_else(|| file.strip_suffix(".zip"))?;
    stem.rsplit_once('-')
}

/// Keeps the candidates between `good` and `bad` (both included), pre-releases only when
/// `pre` (the ends themselves always), sorted by version.
pub fn between(
    mut all: Vec<Candidate>,
    good: &Candidate,
    bad: &Candidate,
    pre: bool,
) -> Vec<Candidate> {
    for end in [good, bad] {
        if !all.iter().any(|c| c.version == end.version) {
            all.push(end.clone());
        }
    }
    all.retain(|c| {
        let is_end = c.version == good.version || c.version == bad.version;
        is_end
            || (c.version > good.version
                && c.version < bad.version
                && (pre || !c.version.any_prerelease()))
    });
    all.sort_by(|a, b| a.version.cmp(&b.version));
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(text: &str) -> Candidate {
        Candidate {
            text: text.to_owned(),
            version: Version::from_str(text).expect("version"),
        }
    }

    #[test]
    fn pep440_order_not_string_order() {
        let all = [
            "0.7.0",
            "0.6.10",
            "0.7.0rc1",
            "0.6.8.post1",
            "0.6.8",
            "0.6.9",
        ]
        .map(cand)
        .to_vec();
        let texts = |v: Vec<Candidate>| v.into_iter().map(|c| c.text).collect::<Vec<_>>();
        assert_eq!(
            texts(between(all.clone(), &cand("0.6.8"), &cand("0.7.0"), true)),
            [
                "0.6.8",
                "0.6.8.post1",
                "0.6.9",
                "0.6.10",
                "0.7.0rc1",
                "0.7.0"
            ]
        );
        assert_eq!(
            texts(between(all, &cand("0.6.8"), &cand("0.7.0"), false)),
            ["0.6.8", "0.6.8.post1", "0.6.9", "0.6.10", "0.7.0"]
        );
    }

    #[test]
    fn yanked_files_and_other_projects_are_skipped() {
        let page = br#"{"meta": {"api-version": "1.1"}, "name": "tiny-lib", "files": [
            {"filename": "tiny_lib-1.0-py3-none-any.whl", "url": "a", "hashes": {}},
            {"filename": "tiny_lib-1.1-py3-none-any.whl", "url": "b", "hashes": {}, "yanked": "broken"},
            {"filename": "tiny_lib-1.2.tar.gz", "url": "c", "hashes": {}, "yanked": false, "core-metadata": {"sha256": "00"}},
            {"filename": "tiny-lib-1.3.tar.gz", "url": "d", "hashes": {}, "dist-info-metadata": true},
            {"filename": "tiny_lib_extra-9.0-py3-none-any.whl", "url": "e", "hashes": {}}
        ]}"#;
        let versions: Vec<String> = parse_page("u", page, "Tiny.Lib")
            .expect("parses")
            .into_iter()
            .map(|c| c.text)
            .collect();
        assert_eq!(versions, ["1.0", "1.2", "1.3"]);
    }

    #[test]
    fn pip_conf_index() {
        let text = "[global]\ntimeout = 60\nindex-url = https://example.test/simple\n[install]\nno-deps = 1\n";
        assert_eq!(
            ini_index_url(text).as_deref(),
            Some("https://example.test/simple")
        );
        assert_eq!(ini_index_url("[freeze]\nindex-url = x\n"), None);
        assert_eq!(normalize("Flashinfer_Python"), "flashinfer-python");
    }
}
