//! The one GitHub client: octocrab (rustls, the installed ring provider), pointed at
//! `GITHUB_API_URL`, with a bounded retry for rate limits and server errors.
//!
//! Requests go through octocrab's raw `_get`/`_post`/`_patch`: its typed calls drop the response
//! headers that a backoff needs (`Retry-After`, `x-ratelimit-reset`) and the `Link` header of a
//! page. Answers are still read into octocrab's models. The token lives only inside octocrab
//! (it sets the `Authorization` header); every error text is redacted besides.

use super::GithubError;
use crate::redact::Redactor;
use http::{HeaderMap, StatusCode};
use octocrab::Octocrab;
use serde::de::DeserializeOwned;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How hard to try before giving up on GitHub.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// Attempts per request, the first included.
    pub attempts: u32,
    /// First wait after a server error; doubled each time.
    pub first: Duration,
    /// The longest single wait; a rate limit that resets later than this is not waited for.
    pub max_wait: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            attempts: 4,
            first: Duration::from_millis(500),
            max_wait: Duration::from_secs(60),
        }
    }
}

/// A client for one repository.
#[derive(Debug)]
pub struct Client {
    octo: Octocrab,
    pub(crate) repo: String,
    redactor: Redactor,
    backoff: Backoff,
}

/// An answer: status, headers, body text.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json<T: DeserializeOwned>(&self, what: &str) -> Result<T, GithubError> {
        serde_json::from_str(&self.body)
            .map_err(|e| GithubError::new(what, None, format!("unexpected answer: {e}")))
    }

    /// The `rel="next"` URL of a paginated answer.
    pub fn next_page(&self) -> Option<String> {
        let link = self.headers.get("link")?.to_str().ok()?;
        link.split(',').find_map(|part| {
            let (url, rel) = part.split_once(';')?;
            rel.contains("rel=\"next\"").then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned()
            })
        })
    }
}

impl Client {
    pub fn new(
        api: &str,
        repo: &str,
        token: &str,
        backoff: Backoff,
    ) -> Result<Client, GithubError> {
        crate::http::install_crypto_provider();
        let redactor = Redactor::with_secrets([token]);
        let fail = |e: octocrab::Error| {
            GithubError::new(
                "build the GitHub client",
                None,
                redactor.redact(&e.to_string()).into_owned(),
            )
        };
        let octo = Octocrab::builder()
            .base_uri(api)
            .map_err(fail)?
            .personal_token(token.to_owned())
            .add_header(
                http::HeaderName::from_static("x-github-api-version"),
                "2022-11-28".to_owned(),
            )
            .set_connect_timeout(Some(Duration::from_secs(10)))
            .set_read_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(fail)?;
        Ok(Client {
            octo,
            repo: repo.to_owned(),
            redactor,
            backoff,
        })
    }

    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// `/repos/{owner}/{repo}` + `rest`.
    pub fn repo_path(&self, rest: &str) -> String {
        format!("/repos/{}{rest}", self.repo)
    }

    /// Sends one request, retrying rate limits and server errors within the bound; a final
    /// answer that is not 2xx is an error naming `what`.
    pub async fn send(
        &self,
        what: &str,
        method: http::Method,
        uri: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, GithubError> {
        let mut wait = self.backoff.first;
        let mut attempt = 1;
        loop {
            let answer = self.once(what, &method, uri, body).await;
            let retry_in = match &answer {
                Ok(a) if a.status.is_success() => return answer,
                Ok(a) => self.retry_delay(a, wait),
                // No answer at all (refused, reset, timed out): as a server error.
                Err(_) => Some(wait),
            };
            match retry_in {
                Some(delay)
                    if attempt < self.backoff.attempts && delay <= self.backoff.max_wait =>
                {
                    tracing::info!(
                        what,
                        attempt,
                        delay_ms = delay.as_millis() as u64,
                        "github: retrying"
                    );
                    tokio::time::sleep(delay).await;
                    wait = wait.saturating_mul(2);
                    attempt += 1;
                }
                _ => return Err(self.failure(what, answer)),
            }
        }
    }

    async fn once(
        &self,
        what: &str,
        method: &http::Method,
        uri: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, GithubError> {
        let response = match *method {
            http::Method::GET => self.octo._get(uri).await,
            http::Method::POST => self.octo._post(uri, body).await,
            http::Method::PATCH => self.octo._patch(uri, body).await,
            _ => {
                return Err(GithubError::new(
                    what,
                    None,
                    format!("method {method} is not used"),
                ));
            }
        }
        .map_err(|e| {
            GithubError::new(
                what,
                None,
                self.redactor.redact(&e.to_string()).into_owned(),
            )
        })?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = self.octo.body_to_string(response).await.map_err(|e| {
            GithubError::new(
                what,
                Some(status.as_u16()),
                self.redactor.redact(&e.to_string()).into_owned(),
            )
        })?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    /// How long to wait before another try, or `None` when trying again cannot help.
    fn retry_delay(&self, answer: &Answer, backoff: Duration) -> Option<Duration> {
        let header = |name: &str| {
            answer
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
        };
        let status = answer.status;
        let limited = status == StatusCode::TOO_MANY_REQUESTS
            || (status == StatusCode::FORBIDDEN
                && (header("retry-after").is_some()
                    || header("x-ratelimit-remaining") == Some("0")));
        if limited {
            if let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
                return Some(Duration::from_secs(secs));
            }
            if let Some(reset) = header("x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok()) {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs();
                return Some(Duration::from_secs(reset.saturating_sub(now) + 1));
            }
            return Some(backoff.max(Duration::from_secs(1)));
        }
        status.is_server_error().then_some(backoff)
    }

    fn failure(&self, what: &str, answer: Result<Answer, GithubError>) -> GithubError {
        match answer {
            Err(err) => err,
            Ok(a) => {
                let message = serde_json::from_str::<serde_json::Value>(&a.body)
                    .ok()
                    .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
                    .unwrap_or_else(|| a.body.chars().take(200).collect());
                GithubError::new(
                    what,
                    Some(a.status.as_u16()),
                    self.redactor.redact(&message).into_owned(),
                )
            }
        }
    }
}
