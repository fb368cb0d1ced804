//! GitHub: the gate's sticky PR comment and check run, and the nightly's issues.
//!
//! - [`client`]: the octocrab client, the bounded retry for rate limits and 5xx.
//! - [`sticky`]: the one comment per PR and matrix, found again by its hidden marker on any
//!   page of comments, and edited.
//! - [`checks`]: a check run on the commit, or a commit status where the token cannot create one.
//! - [`issues`]: one issue per new failure fingerprint of a run; a comment when it recurs.
//!
//! Settings come from the environment as on Actions: `GITHUB_API_URL` (default
//! `https://api.github.com`; a GitHub Enterprise `https://HOST/api/v3` works the same),
//! `GITHUB_REPOSITORY` (`owner/name`), `GITHUB_TOKEN`, `GITHUB_SHA`. The token is never printed:
//! errors and posted text go through [`crate::redact`], which knows it.

pub mod checks;
pub mod client;
pub mod issues;
pub mod sticky;

use crate::env::EnvVars;
use crate::gate::GateFile;
use crate::gate::summary::Posted;
use client::{Backoff, Client};

/// A GitHub request that failed, after its retries. Never holds the token.
#[derive(Debug, Clone, thiserror::Error)]
#[error("GitHub: cannot {what}{}: {message}", status.map_or(String::new(), |s| format!(" (HTTP {s})")))]
pub struct GithubError {
    pub what: String,
    pub status: Option<u16>,
    pub message: String,
}

impl GithubError {
    pub fn new(what: &str, status: Option<u16>, message: String) -> GithubError {
        GithubError {
            what: what.to_owned(),
            status,
            message,
        }
    }
}

/// Where to post, from the environment and the flags.
#[derive(Debug, Clone)]
pub struct Target {
    pub api: String,
    pub repo: String,
    token: String,
    pub pr: Option<u64>,
    pub sha: Option<String>,
    pub backoff: Backoff,
}

fn env(name: &str) -> Option<String> {
    crate::env::var(name).filter(|v| !v.trim().is_empty())
}

impl Target {
    /// Reads `GITHUB_*`; `sha` defaults to `GITHUB_SHA`.
    pub fn from_env(pr: Option<u64>, sha: Option<String>) -> Result<Target, GithubError> {
        let missing = |name: &str| {
            GithubError::new(
                "post to GitHub",
                None,
                format!("`{name}` is not set (it is on GitHub Actions; set it elsewhere)"),
            )
        };
        let api =
            env(EnvVars::GITHUB_API_URL).unwrap_or_else(|| "https://api.github.com".to_owned());
        if !(api.starts_with("https://") || api.starts_with("http://")) {
            return Err(GithubError::new(
                "post to GitHub",
                None,
                format!("`GITHUB_API_URL` is not an http(s) URL: `{api}`"),
            ));
        }
        let repo = env(EnvVars::GITHUB_REPOSITORY).ok_or_else(|| missing("GITHUB_REPOSITORY"))?;
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        match repo.split_once('/') {
            Some((owner, name)) if valid(owner) && valid(name) => {}
            _ => {
                return Err(GithubError::new(
                    "post to GitHub",
                    None,
                    format!("`GITHUB_REPOSITORY` is not `owner/name`: `{repo}`"),
                ));
            }
        }
        let token = env(EnvVars::GITHUB_TOKEN).ok_or_else(|| missing("GITHUB_TOKEN"))?;
        let sha = sha.or_else(|| env(EnvVars::GITHUB_SHA));
        if let Some(sha) = &sha {
            if sha.len() < 7 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(GithubError::new(
                    "post to GitHub",
                    None,
                    format!("`--sha {sha}` is not a commit hash"),
                ));
            }
        }
        Ok(Target {
            api: api.trim_end_matches('/').to_owned(),
            repo,
            token,
            pr,
            sha,
            backoff: Backoff::default(),
        })
    }

    pub fn client(&self) -> Result<Client, GithubError> {
        Client::new(&self.api, &self.repo, &self.token, self.backoff)
    }
}

/// This Actions run's page, when running on Actions.
pub fn actions_run_url() -> Option<String> {
    let server = env(EnvVars::GITHUB_SERVER_URL)?;
    let repo = env(EnvVars::GITHUB_REPOSITORY)?;
    let run = env(EnvVars::GITHUB_RUN_ID)?;
    Some(format!(
        "{}/{repo}/actions/runs/{run}",
        server.trim_end_matches('/')
    ))
}

/// Posts a gate's verdict: the sticky comment (with `--github-pr`) and the check (with a sha).
/// Never fails: what could not be posted is said in the result, and the verdict stands.
pub async fn post_gate(target: &Target, file: &GateFile, report_url: Option<&str>) -> Posted {
    let mut posted = Posted {
        state: "posted".to_owned(),
        comment_url: None,
        check: None,
        reason: None,
    };
    let client = match target.client() {
        Ok(client) => client,
        Err(err) => {
            posted.state = "failed".into();
            posted.reason = Some(err.to_string());
            return posted;
        }
    };
    let mut failures = Vec::new();
    if let Some(pr) = target.pr {
        let body = crate::gate::comment::render(file, report_url, client.redactor());
        let marker = crate::gate::comment::marker(&file.matrix);
        match sticky::upsert(&client, pr, &marker, &body).await {
            Ok(url) => posted.comment_url = Some(url),
            Err(err) => failures.push(err.to_string()),
        }
    }
    if let Some(sha) = &target.sha {
        match checks::report(&client, sha, file, report_url).await {
            Ok(kind) => posted.check = Some(kind),
            Err(err) => failures.push(err.to_string()),
        }
    }
    if !failures.is_empty() {
        posted.state = "failed".into();
        posted.reason = Some(client.redactor().redact(&failures.join("; ")).into_owned());
    }
    posted
}
