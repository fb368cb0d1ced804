//! `gpucompat publish RUN --issues`: one issue per new failure fingerprint of a run, a comment on
//! the existing issue when it recurs; nothing is ever closed (a fix is a person's call).
//!
//! An issue is found again by a hidden marker with the fingerprint's key in its body, over
//! every page of the repository's issues with the `gpucompat` label, open or closed.

use super::GithubError;
use super::client::Client;
use crate::digest::sha256_hex;
use crate::record::{CellRecord, Status};
use http::Method;
use octocrab::models::issues::{Comment, Issue};
use serde::Serialize;
use std::collections::BTreeMap;

pub const LABEL: &str = "gpucompat";

/// One failure of a run: a fingerprint and the cells that show it.
#[derive(Debug, Clone)]
pub struct Failure<'r> {
    pub key: String,
    pub records: Vec<&'r CellRecord>,
}

/// What publishing did for one failure.
#[derive(Debug, Clone, Serialize)]
pub struct Published {
    pub key: String,
    /// `opened`, `commented` or `already_recorded`.
    pub action: String,
    pub issue: u64,
    pub url: String,
    pub cells: Vec<String>,
}

/// The hidden marker of a fingerprint's issue.
pub fn marker(key: &str) -> String {
    format!("<!-- gpucompat-fingerprint: {key} -->")
}

/// A run's real failures (not spurious, not expected), grouped by signature and fingerprint.
pub fn failures(records: &[CellRecord]) -> Vec<Failure<'_>> {
    let mut groups: BTreeMap<String, Vec<&CellRecord>> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.status == Status::Fail && !r.spurious)
    {
        let text = format!(
            "{}\n{}",
            r.signature.map_or("unknown", |s| s.as_str()),
            r.fingerprint.as_deref().unwrap_or(&r.id)
        );
        groups
            .entry(sha256_hex(text.as_bytes(), 6))
            .or_default()
            .push(r);
    }
    groups
        .into_iter()
        .map(|(key, records)| Failure { key, records })
        .collect()
}

/// Opens or comments for each failure of `run` (named `run_name` in the texts).
pub async fn publish(
    client: &Client,
    run_name: &str,
    run_url: Option<&str>,
    failures: &[Failure<'_>],
) -> Result<Vec<Published>, GithubError> {
    let known = existing(client).await?;
    let mut out = Vec::new();
    for failure in failures {
        let run_marker = format!("<!-- gpucompat-run: {} -->", escape(run_name));
        let cells: Vec<String> = failure.records.iter().map(|r| r.id.clone()).collect();
        let text = describe(client, failure, run_name, run_url);
        match known.get(&failure.key) {
            Some(issue)
                if issue
                    .body
                    .as_deref()
                    .is_some_and(|b| b.contains(&run_marker)) =>
            {
                out.push(Published {
                    key: failure.key.clone(),
                    action: "already_recorded".into(),
                    issue: issue.number,
                    url: issue.html_url.to_string(),
                    cells,
                });
            }
            Some(issue) => {
                let uri = client.repo_path(&format!("/issues/{}/comments", issue.number));
                let body = serde_json::json!({ "body": format!("{run_marker}\nSeen again in run `{}`.\n\n{text}", md(run_name)) });
                let comment: Comment = client
                    .send(
                        "comment on a failure's issue",
                        Method::POST,
                        &uri,
                        Some(&body),
                    )
                    .await?
                    .json("comment on a failure's issue")?;
                out.push(Published {
                    key: failure.key.clone(),
                    action: "commented".into(),
                    issue: issue.number,
                    url: comment.html_url.to_string(),
                    cells,
                });
            }
            None => {
                let first = failure.records[0];
                let title = format!(
                    "gpucompat: {} in {}{}",
                    first.signature.map_or("unknown", |s| s.as_str()),
                    first.id,
                    match failure.records.len() {
                        1 => String::new(),
                        n => format!(" and {} more cell(s)", n - 1),
                    }
                );
                let body = serde_json::json!({
                    "title": client.redactor().redact(&title),
                    "body": format!("{}\n{run_marker}\nFirst seen in run `{}`.\n\n{text}", marker(&failure.key), md(run_name)),
                    "labels": [LABEL],
                });
                let uri = client.repo_path("/issues");
                let issue: Issue = client
                    .send("open an issue", Method::POST, &uri, Some(&body))
                    .await?
                    .json("open an issue")?;
                out.push(Published {
                    key: failure.key.clone(),
                    action: "opened".into(),
                    issue: issue.number,
                    url: issue.html_url.to_string(),
                    cells,
                });
            }
        }
    }
    Ok(out)
}

fn escape(text: &str) -> String {
    text.replace("--", "-\u{2010}").replace('>', "&gt;")
}

fn md(text: &str) -> String {
    crate::report::visible(text).replace('`', "'")
}

/// The failure's cells, signature, fingerprint and excerpt, redacted.
fn describe(
    client: &Client,
    failure: &Failure<'_>,
    run_name: &str,
    run_url: Option<&str>,
) -> String {
    let first = failure.records[0];
    let mut text = format!(
        "Signature: `{}`\n\nFingerprint: `{}`\n\nCells:\n",
        first.signature.map_or("unknown", |s| s.as_str()),
        md(first.fingerprint.as_deref().unwrap_or("-"))
    );
    for r in failure.records.iter().take(50) {
        text.push_str(&format!("- `{}` ({})\n", md(&r.id), md(&r.pins.join(" "))));
    }
    if failure.records.len() > 50 {
        text.push_str(&format!("- and {} more\n", failure.records.len() - 50));
    }
    if let Some(excerpt) = &first.excerpt {
        let excerpt: String = crate::report::visible(excerpt).chars().take(3000).collect();
        let fence = "`".repeat(
            excerpt
                .split(|c| c != '`')
                .map(str::len)
                .max()
                .unwrap_or(0)
                .max(2)
                + 1,
        );
        text.push_str(&format!("\n{fence}text\n{}\n{fence}\n", excerpt.trim_end()));
    }
    if let Some(url) = run_url {
        text.push_str(&format!("\nRun: {url} ({})\n", md(run_name)));
    }
    client.redactor().redact(&text).into_owned()
}

/// Every issue with the label, by the fingerprint key in its marker.
async fn existing(client: &Client) -> Result<BTreeMap<String, Issue>, GithubError> {
    let mut out = BTreeMap::new();
    let mut uri = client.repo_path(&format!("/issues?state=all&labels={LABEL}&per_page=100"));
    for _ in 0..100 {
        let answer = client
            .send("list the repository's issues", Method::GET, &uri, None)
            .await?;
        let issues: Vec<Issue> = answer.json("list the repository's issues")?;
        for issue in issues.into_iter().filter(|i| i.pull_request.is_none()) {
            let key = issue
                .body
                .as_deref()
                .and_then(|b| b.split("<!-- gpucompat-fingerprint: ").nth(1))
                .and_then(|rest| rest.split(" -->").next())
                .map(str::to_owned);
            if let Some(key) = key {
                out.entry(key).or_insert(issue);
            }
        }
        match answer.next_page() {
            Some(next) => uri = next,
            None => break,
        }
    }
    Ok(out)
}
