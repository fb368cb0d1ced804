//! The sticky comment: one per PR and matrix, found by its hidden marker on whatever page of
//! comments it is on, edited in place on every run, created only when no page has it.

use super::GithubError;
use super::client::Client;
use http::Method;
use octocrab::models::issues::Comment;

/// Edits the comment that carries `marker`, or creates it; returns its URL.
pub async fn upsert(
    client: &Client,
    pr: u64,
    marker: &str,
    body: &str,
) -> Result<String, GithubError> {
    let found = find(client, pr, marker).await?;
    let payload = serde_json::json!({ "body": body });
    let comment: Comment = match found {
        Some(id) => {
            let uri = client.repo_path(&format!("/issues/comments/{id}"));
            client
                .send("edit the gate comment", Method::PATCH, &uri, Some(&payload))
                .await?
                .json("edit the gate comment")?
        }
        None => {
            let uri = client.repo_path(&format!("/issues/{pr}/comments"));
            client
                .send(
                    "comment on the pull request",
                    Method::POST,
                    &uri,
                    Some(&payload),
                )
                .await?
                .json("comment on the pull request")?
        }
    };
    Ok(comment.html_url.to_string())
}

/// The id of the first comment that carries `marker`, following every `Link: rel="next"`.
pub async fn find(client: &Client, pr: u64, marker: &str) -> Result<Option<u64>, GithubError> {
    let mut uri = client.repo_path(&format!("/issues/{pr}/comments?per_page=100"));
    // A bound on pages: 100 pages of 100 comments is more than any PR has.
    for _ in 0..100 {
        let answer = client
            .send("list the pull request's comments", Method::GET, &uri, None)
            .await?;
        let comments: Vec<Comment> = answer.json("list the pull request's comments")?;
        if let Some(c) = comments
            .iter()
            .find(|c| c.body.as_deref().is_some_and(|b| b.contains(marker)))
        {
            return Ok(Some(c.id.into_inner()));
        }
        match answer.next_page() {
            Some(next) => uri = next,
            None => return Ok(None),
        }
    }
    Ok(None)
}
