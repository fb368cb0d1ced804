//! The verdict on the commit: a check run, or a commit status where the token cannot create
//! check runs (only GitHub Apps and Actions' own token can; a personal token gets 403).

use super::GithubError;
use super::client::Client;
use crate::gate::GateFile;
use http::Method;
use octocrab::models::checks::CheckRun;

pub const NAME: &str = "gpucompat gate";

/// Reports the verdict on `sha`; returns `check run` or `commit status`.
pub async fn report(
    client: &Client,
    sha: &str,
    file: &GateFile,
    report_url: Option<&str>,
) -> Result<String, GithubError> {
    let conclusion = if file.blocks() { "failure" } else { "success" };
    let verdict = client.redactor().redact(&file.verdict_line()).into_owned();
    let summary = crate::gate::comment::render(file, report_url, client.redactor());
    let mut run = serde_json::json!({
        "name": NAME,
        "head_sha": sha,
        "status": "completed",
        "conclusion": conclusion,
        "output": { "title": cut(&verdict, 200), "summary": summary },
    });
    if let Some(url) = report_url {
        run["details_url"] = serde_json::Value::String(url.to_owned());
    }
    let uri = client.repo_path("/check-runs");
    match client
        .send("create a check run", Method::POST, &uri, Some(&run))
        .await
    {
        Ok(answer) => {
            let _: CheckRun = answer.json("create a check run")?;
            Ok("check run".to_owned())
        }
        Err(err) if matches!(err.status, Some(403 | 404)) => {
            let mut status = serde_json::json!({
                "state": conclusion,
                "description": cut(&verdict, 140),
                "context": NAME,
            });
            if let Some(url) = report_url {
                status["target_url"] = serde_json::Value::String(url.to_owned());
            }
            let uri = client.repo_path(&format!("/statuses/{sha}"));
            client
                .send("set a commit status", Method::POST, &uri, Some(&status))
                .await?;
            Ok("commit status".to_owned())
        }
        Err(err) => Err(err),
    }
}

/// At most `n` characters (GitHub's limits on titles and descriptions).
fn cut(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(n - 1).collect();
    out.push('…');
    out
}
