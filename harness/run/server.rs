//! Talking to a cell's server over loopback HTTP: readiness, one OpenAI-style completion, and
//! the checks its answer must pass.

use regex::Regex;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::{Instant, sleep};

/// The client every cell's requests go through. Cells' servers are on loopback: the client never
/// goes through a proxy (`HTTP_PROXY` and the like are for the cells' downloads). There is no
/// fallback client: one built without `no_proxy` would send loopback traffic to a proxy.
pub(crate) fn client() -> Result<reqwest::Client, reqwest::Error> {
    crate::http::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .build()
}

/// Longest pause between health checks. The time to ready the record reports is when a check
/// first succeeds, so it can be late by this much; checks are cheap for a server.
const HEALTH_POLL_MAX: Duration = Duration::from_millis(200);

/// Polls `GET path` until it answers 2xx. Never returns otherwise: the caller's `select!` bounds it
/// with the ready deadline, the watchdog and the server's exit.
pub(crate) async fn wait_healthy(client: &reqwest::Client, port: u16, path: &str) {
    let url = format!("http://127.0.0.1:{port}{path}");
    let mut delay = Duration::from_millis(50);
    loop {
        let answer = client
            .get(&url)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if answer.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        sleep(delay).await;
        delay = (delay * 2).min(HEALTH_POLL_MAX);
    }
}

/// What the completion request asks.
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    pub port: u16,
    pub endpoint: &'a str,
    pub model: Option<&'a str>,
    pub prompt: &'a str,
    pub max_tokens: u32,
    /// Ask the engine to go on past its end-of-text token (vLLM's and SGLang's `ignore_eos`).
    pub ignore_eos: bool,
}

/// The answer and how fast it came.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Answer {
    pub text: String,
    pub ttft_s: Option<f64>,
    pub total_s: f64,
    pub completion_tokens: Option<u64>,
}

impl Answer {
    /// Seconds per output token after the first, and tokens per second of the whole answer.
    pub(crate) fn rates(&self) -> (Option<f64>, Option<f64>) {
        let Some(tokens) = self.completion_tokens.filter(|t| *t > 0) else {
            return (None, None);
        };
        let tokens_per_s = (self.total_s > 0.0).then(|| tokens as f64 / self.total_s);
        let tpot = match (self.ttft_s, tokens) {
            (Some(ttft), t) if t > 1 => Some((self.total_s - ttft).max(0.0) / (t - 1) as f64),
            _ => None,
        };
        (tpot, tokens_per_s)
    }
}

/// Why the request failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("request to {url} failed")]
    Send {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url} answered something that is not a completion: {detail}")]
    Shape { url: String, detail: String },
    /// The server answered with an error object (mid-stream or instead of a completion).
    #[error("{url} reported an error: {message}")]
    Engine { url: String, message: String },
}

/// Sends one completion request, streaming when the server streams, and reads the answer.
pub(crate) async fn complete(
    client: &reqwest::Client,
    req: &Request<'_>,
) -> Result<Answer, RequestError> {
    let url = format!("http://127.0.0.1:{}{}", req.port, req.endpoint);
    let chat = req.endpoint.contains("chat");
    let mut body = json!({
        "model": req.model.unwrap_or("default"),
        "max_tokens": req.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if req.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    if chat {
        body["messages"] = json!([{"role": "user", "content": req.prompt}]);
    } else {
        body["prompt"] = json!(req.prompt);
    }
    let start = Instant::now();
    let send_err = |source| RequestError::Send {
        url: url.clone(),
        source,
    };
    let mut response = client
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(send_err)?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(RequestError::Status {
            url,
            status: status.as_u16(),
            body: body.chars().take(500).collect(),
        });
    }
    let streaming = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    let mut answer = Answer::default();
    if streaming {
        let mut pending = Vec::new();
        let mut chunks = 0u64;
        let mut done = false;
        while !done {
            let Some(bytes) = response.chunk().await.map_err(send_err)? else {
                break;
            };
            pending.extend_from_slice(&bytes);
            while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=pos).collect();
                let line = String::from_utf8_lossy(&line);
                let Some(data) = line.trim().strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim();
                if data == "[DONE]" {
                    done = true;
                    break;
                }
                let event: Value = serde_json::from_str(data).map_err(|e| RequestError::Shape {
                    url: url.clone(),
                    detail: format!("bad stream event `{data}`: {e}"),
                })?;
                if let Some(message) = error_message(&event) {
                    return Err(RequestError::Engine { url, message });
                }
                if let Some(piece) = choice_text(&event) {
                    if !piece.is_empty() {
                        if answer.ttft_s.is_none() {
                            answer.ttft_s = Some(start.elapsed().as_secs_f64());
                        }
                        chunks += 1;
                        answer.text.push_str(piece);
                    }
                }
                if let Some(tokens) = usage_tokens(&event) {
                    answer.completion_tokens = Some(tokens);
                }
            }
        }
        if answer.completion_tokens.is_none() && chunks > 0 {
            answer.completion_tokens = Some(chunks);
        }
    } else {
        let text = response.text().await.map_err(send_err)?;
        let value: Value = serde_json::from_str(&text).map_err(|e| RequestError::Shape {
            url: url.clone(),
            detail: format!("{e}: {}", text.chars().take(200).collect::<String>()),
        })?;
        if let Some(message) = error_message(&value) {
            return Err(RequestError::Engine { url, message });
        }
        answer.text = choice_text(&value)
            .ok_or_else(|| RequestError::Shape {
                url: url.clone(),
                detail: format!(
                    "no `choices[0].text`: {}",
                    text.chars().take(200).collect::<String>()
                ),
            })?
            .to_owned();
        answer.completion_tokens = usage_tokens(&value);
    }
    answer.total_s = start.elapsed().as_secs_f64();
    Ok(answer)
}

/// `choices[0].text`, `.delta.content` or `.message.content`.
fn choice_text(value: &Value) -> Option<&str> {
    let choice = value.get("choices")?.get(0)?;
    choice
        .get("text")
        .or_else(|| choice.get("delta").and_then(|d| d.get("content")))
        .or_else(|| choice.get("message").and_then(|m| m.get("content")))
        .and_then(Value::as_str)
}

/// `{"error": {"message": ...}}` or `{"error": "..."}`, as OpenAI-style servers report failures.
fn error_message(value: &Value) -> Option<String> {
    let error = value.get("error")?;
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())?;
    Some(message.chars().take(2000).collect())
}

fn usage_tokens(value: &Value) -> Option<u64> {
    value.get("usage")?.get("completion_tokens")?.as_u64()
}

/// The first model id `GET /v1/models` lists (OpenAI's list shape), or `None` when the server
/// does not answer that route: real engines refuse any other name (vLLM: HTTP 404 "The model
/// ... does not exist").
pub(crate) async fn served_model(client: &reqwest::Client, port: u16) -> Option<String> {
    let url = format!("http://127.0.0.1:{port}/v1/models");
    let response = client.get(&url).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let value: Value = response.json().await.ok()?;
    value
        .get("data")?
        .get(0)?
        .get("id")?
        .as_str()
        .map(str::to_owned)
}

/// Checks a random-weight model's answer: the engine's own count says it generated exactly the
/// tokens asked for (what it says is noise by design). `Err` says why.
pub(crate) fn validate_tokens(answer: &Answer, max_tokens: u32) -> Result<(), String> {
    match answer.completion_tokens {
        Some(n) if n == u64::from(max_tokens) => Ok(()),
        Some(0) => Err("the engine generated no tokens".to_owned()),
        Some(n) => Err(format!(
            "the engine generated {n} tokens, not the {max_tokens} asked for with ignore_eos"
        )),
        None => Err("the engine did not report how many tokens it generated (usage)".to_owned()),
    }
}

/// Checks an answer: not empty, not garbage, and matching `expect` when given. `Err` says why.
pub(crate) fn validate(text: &str, expect: Option<&Regex>) -> Result<(), String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("the answer is empty".to_owned());
    }
    if trimmed.contains('\u{fffd}') {
        return Err(format!(
            "the answer holds invalid bytes: {}",
            shown(trimmed)
        ));
    }
    if trimmed
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
    {
        return Err(format!(
            "the answer holds control characters: {}",
            shown(trimmed)
        ));
    }
    if trimmed
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .any(|w| w.eq_ignore_ascii_case("nan"))
        && trimmed.split_whitespace().all(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .eq_ignore_ascii_case("nan")
        })
    {
        return Err(format!("the answer is NaN: {}", shown(trimmed)));
    }
    let chars: Vec<char> = trimmed.chars().filter(|c| !c.is_whitespace()).collect();
    if chars.len() >= 8 {
        let first = chars[0];
        let same = chars.iter().filter(|c| **c == first).count();
        if same * 10 >= chars.len() * 9 {
            return Err(format!(
                "the answer is one character repeated (a broken kernel's typical output): {}",
                shown(trimmed)
            ));
        }
    }
    if let Some(expect) = expect {
        if !expect.is_match(text) {
            return Err(format!(
                "the answer does not match `{}`: {}",
                expect.as_str(),
                shown(trimmed)
            ));
        }
    }
    Ok(())
}

fn shown(text: &str) -> String {
    let cut: String = text.chars().take(120).collect();
    format!("{cut:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_checks_count_what_the_engine_reports() {
        let answer = |n: Option<u64>| Answer {
            text: "\u{fffd}=\u{fffd}".to_owned(),
            completion_tokens: n,
            ..Answer::default()
        };
        assert!(validate_tokens(&answer(Some(16)), 16).is_ok());
        assert!(validate_tokens(&answer(Some(3)), 16).is_err());
        assert!(validate_tokens(&answer(Some(0)), 16).is_err());
        assert!(validate_tokens(&answer(None), 16).is_err());
    }

    #[test]
    fn validation_rules() {
        let paris = Regex::new("(?i)paris").ok();
        assert!(validate(" Paris, of course.", paris.as_ref()).is_ok());
        assert!(validate("   ", None).is_err());
        assert!(validate("!!!!!!!!!!!!", None).is_err());
        assert!(validate("nan nan NaN", None).is_err());
        assert!(validate("The value is NaN here", None).is_ok());
        assert!(validate("ab\u{fffd}cd", None).is_err());
        assert!(validate("a\u{1}b", None).is_err());
        assert!(validate("London", paris.as_ref()).is_err());
        assert!(validate("aaaaaaab", None).is_ok());
    }

    #[test]
    fn rates_from_tokens_and_times() {
        let answer = Answer {
            text: "x".into(),
            ttft_s: Some(0.5),
            total_s: 1.5,
            completion_tokens: Some(11),
        };
        let (tpot, tps) = answer.rates();
        assert!((tpot.unwrap_or_default() - 0.1).abs() < 1e-9);
        assert!((tps.unwrap_or_default() - 11.0 / 1.5).abs() < 1e-9);
        assert_eq!(Answer::default().rates(), (None, None));
    }
}
