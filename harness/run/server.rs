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
    /// Where the answer carried a NaN or an infinity (in its logprobs or other values), when it
    /// did: `choices[0].logprobs.token_logprobs[2] is NaN`.
    pub non_finite: Option<String>,
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
                let (event, non_finite) = parse_json(data).map_err(|e| RequestError::Shape {
                    url: url.clone(),
                    detail: format!("bad stream event `{data}`: {e}"),
                })?;
                if answer.non_finite.is_none() {
                    answer.non_finite = non_finite;
                }
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
        let (value, non_finite) = parse_json(&text).map_err(|e| RequestError::Shape {
            url: url.clone(),
            detail: format!("{e}: {}", text.chars().take(200).collect::<String>()),
        })?;
        answer.non_finite = non_finite;
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

/// Parses an answer's JSON (a body or one stream event). Python's `json`, which most engines'
/// servers use, writes NaN and the infinities as bare `NaN`, `Infinity` and `-Infinity` (C++
/// servers `nan` and `inf`), which are not JSON: such values are read as null, and the place of
/// the first one is returned with the value.
fn parse_json(text: &str) -> Result<(Value, Option<String>), serde_json::Error> {
    let err = match serde_json::from_str(text) {
        Ok(value) => return Ok((value, None)),
        Err(err) => err,
    };
    let Some(marked) = mark_non_finite(text) else {
        return Err(err);
    };
    let mut value: Value = serde_json::from_str(&marked).map_err(|_| err)?;
    let place = take_marks(&mut value, &mut String::new());
    Ok((value, place))
}

/// Starts the string a non-finite number is turned into while parsing (a NUL cannot be in text).
const NON_FINITE_MARK: &str = "\u{0}non-finite:";

/// Non-finite literals as servers write them, longest first.
const NON_FINITE: &[&str] = &[
    "-Infinity",
    "+Infinity",
    "Infinity",
    "-infinity",
    "infinity",
    "-NaN",
    "NaN",
    "-nan",
    "nan",
    "-inf",
    "+inf",
    "inf",
];

/// `text` with every non-finite literal outside strings replaced by a marked string; `None` when
/// there is none.
fn mark_non_finite(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 32);
    let mut found = false;
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if let Some(word) = NON_FINITE.iter().find(|w| {
            rest.starts_with(**w)
                && !rest[w.len()..].starts_with(|n: char| n.is_ascii_alphanumeric())
                && !out.ends_with(|p: char| p.is_ascii_alphanumeric())
        }) {
            found = true;
            out.push_str(&serde_json::to_string(&format!("{NON_FINITE_MARK}{word}")).ok()?);
            rest = &rest[word.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    found.then_some(out)
}

/// Turns the marked strings of `value` back into nulls; returns where the first one was.
fn take_marks(value: &mut Value, path: &mut String) -> Option<String> {
    let mut first = None;
    match value {
        Value::String(text) => {
            if let Some(word) = text.strip_prefix(NON_FINITE_MARK) {
                first = Some(format!("{} is {word}", path.trim_start_matches('.')));
                *value = Value::Null;
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                let found = take_marks(item, path);
                first = first.or(found);
                path.truncate(len);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields.iter_mut() {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                let found = take_marks(item, path);
                first = first.or(found);
                path.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    first
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
    // Random weights make noisy text, never a NaN: a value that is not finite is a numeric fault
    // (a kernel's), whatever the text.
    finite(answer)?;
    match answer.completion_tokens {
        Some(n) if n == u64::from(max_tokens) => Ok(()),
        Some(0) => Err("the engine generated no tokens".to_owned()),
        Some(n) => Err(format!(
            "the engine generated {n} tokens, not the {max_tokens} asked for with ignore_eos"
        )),
        None => Err("the engine did not report how many tokens it generated (usage)".to_owned()),
    }
}

/// Both checks: no NaN or infinity anywhere in what the server returned.
fn finite(answer: &Answer) -> Result<(), String> {
    match &answer.non_finite {
        Some(place) => Err(format!(
            "the answer carries a value that is not finite: {place}"
        )),
        None => Ok(()),
    }
}

/// How `check = "text"` judges an answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TextCheck<'a> {
    /// The regex the text must match.
    pub expect: Option<&'a Regex>,
    /// Whether degenerate repetition is wrong: not for a random-weight toy model, whose text
    /// repeats itself by design.
    pub repetition: bool,
}

/// Checks an answer: not empty, no NaN or infinity in what the server returned, not garbage, not
/// a degenerate repetition, and matching `expect` when given. `Err` says why.
pub(crate) fn validate(answer: &Answer, check: &TextCheck<'_>) -> Result<(), String> {
    let trimmed = answer.text.trim();
    if trimmed.is_empty() {
        return Err("the answer is empty".to_owned());
    }
    finite(answer)?;
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
        if !chars.iter().any(|c| c.is_alphanumeric()) {
            return Err(format!(
                "the answer is garbage, symbols without a letter or digit: {}",
                shown(trimmed)
            ));
        }
    }
    if check.repetition {
        if let Some(what) = repetition(trimmed) {
            return Err(format!(
                "the answer repeats itself (a degenerate generation): {what}: {}",
                shown(trimmed)
            ));
        }
    }
    if let Some(expect) = check.expect {
        if !expect.is_match(&answer.text) {
            return Err(format!(
                "the answer does not match `{}`: {}",
                expect.as_str(),
                shown(trimmed)
            ));
        }
    }
    Ok(())
}

/// Fewest words (or, for text without spaces, characters) judged for repetition: a short answer
/// may repeat a word honestly ("Paris, Paris").
const REPEAT_MIN_WORDS: usize = 8;
const REPEAT_MIN_CHARS: usize = 16;
/// Longest repeating unit judged, in words (characters for text without spaces). Healthy small
/// models under greedy decoding do loop over whole sentences; broken kernels emit one token, or a
/// few, over and over.
const REPEAT_MAX_WORDS: usize = 4;
const REPEAT_MAX_CHARS: usize = 8;

/// Degenerate repetition: one word making up three quarters of the text, or a unit of up to
/// four words (eight characters in text without spaces) that repeats over nine tenths of it.
/// Says what repeats.
fn repetition(text: &str) -> Option<String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() >= REPEAT_MIN_WORDS {
        let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for word in &words {
            *counts.entry(word).or_default() += 1;
        }
        if let Some((word, n)) = counts.into_iter().max_by_key(|(_, n)| *n) {
            if n * 4 >= words.len() * 3 {
                return Some(format!("{word:?} is {n} of its {} words", words.len()));
            }
        }
        return periodic(&words, REPEAT_MAX_WORDS)
            .map(|unit| format!("{:?} over and over", unit.join(" ")));
    }
    let chars: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    if chars.len() >= REPEAT_MIN_CHARS {
        return periodic(&chars, REPEAT_MAX_CHARS)
            .map(|unit| format!("{:?} over and over", unit.iter().collect::<String>()));
    }
    None
}

/// The shortest unit of at most `max` items that `items` repeats, seen at least three times and
/// agreeing with the item one unit back at nine tenths of the places.
fn periodic<T: PartialEq>(items: &[T], max: usize) -> Option<&[T]> {
    (1..=max)
        .filter(|&period| items.len() >= 3 * period)
        .find(|&period| {
            let same = (period..items.len())
                .filter(|&i| items[i] == items[i - period])
                .count();
            same * 10 >= (items.len() - period) * 9
        })
        .map(|period| &items[..period])
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
        let nan = Answer {
            non_finite: Some("choices[0].logprobs.token_logprobs[3] is NaN".to_owned()),
            ..answer(Some(16))
        };
        let err = validate_tokens(&nan, 16).expect_err("a NaN under tokens");
        assert!(err.contains("token_logprobs[3] is NaN"), "{err}");
    }

    fn text(text: &str, expect: Option<&Regex>) -> Result<(), String> {
        let answer = Answer {
            text: text.to_owned(),
            ..Answer::default()
        };
        validate(
            &answer,
            &TextCheck {
                expect,
                repetition: true,
            },
        )
    }

    #[test]
    fn validation_rules() {
        let paris = Regex::new("(?i)paris").ok();
        assert!(text(" Paris, of course.", paris.as_ref()).is_ok());
        assert!(text("   ", None).is_err());
        assert!(text("!!!!!!!!!!!!", None).is_err());
        assert!(text("nan nan NaN", None).is_err());
        assert!(text("The value is NaN here", None).is_ok());
        assert!(text("ab\u{fffd}cd", None).is_err());
        assert!(text("a\u{1}b", None).is_err());
        assert!(text("London", paris.as_ref()).is_err());
        assert!(text("aaaaaaab", None).is_ok());
    }

    #[test]
    fn degenerate_repetition_is_wrong_and_ordinary_text_is_not() {
        let wrong = [
            " the the the the the the the the the the the the",
            " Paris, Paris, Paris, Paris, Paris, Paris, Paris, Paris",
            " of the of the of the of the of the of the",
            " a b c d a b c d a b c d a b c d",
            "的的的的的的的的的的的的的的的的的的",
            "abcabcabcabcabcabcabcabc",
            " city city city city city city city city city old city city",
        ];
        for answer in wrong {
            let err = text(answer, None).expect_err(answer);
            assert!(
                err.starts_with("the answer repeats itself")
                    || err.starts_with("the answer is one character repeated"),
                "{err}"
            );
        }
        let fine = [
            " Paris, of course.",
            " Paris. Paris is the capital of France. Paris is the capital of France.",
            " Paris is the capital and most populous city of France, with an estimated population",
            "1, 2, 3, 4, 5, 6, 7, 8, 9, 10",
            " - a\n - b\n - c\n - d\n - e",
            " Paris, Paris",
            "巴黎是法国的首都，也是法国最大的城市。",
        ];
        for answer in fine {
            assert!(
                text(answer, None).is_ok(),
                "{answer}: {:?}",
                text(answer, None)
            );
        }
        // A random-weight toy model's text may loop; it is not judged for that.
        let answer = Answer {
            text: "a bridges old on city city city city city city city city".to_owned(),
            ..Answer::default()
        };
        let toy = TextCheck {
            expect: None,
            repetition: false,
        };
        assert!(validate(&answer, &toy).is_ok());
    }

    #[test]
    fn garbage_without_letters_is_wrong() {
        let err = text("?!.,;:-=+*&^%$#", None).expect_err("garbage");
        assert!(err.starts_with("the answer is garbage"), "{err}");
        assert!(text("\u{fffd}\u{fffd}\u{fffd}", None).is_err());
        assert!(text("42!", None).is_ok());
    }

    #[test]
    fn nan_and_infinity_in_the_json_are_found_and_named() {
        let (value, place) = parse_json(
            r#"{"choices":[{"text":" Paris NaN","logprobs":{"tokens":[" Paris"],"token_logprobs":[NaN]}}]}"#,
        )
        .expect("parses");
        assert_eq!(
            place.as_deref(),
            Some("choices[0].logprobs.token_logprobs[0] is NaN")
        );
        assert_eq!(choice_text(&value), Some(" Paris NaN"), "strings are kept");
        let (_, place) =
            parse_json(r#"{"a":[1,-Infinity],"b":"Infinity, \"NaN\"","c":inf}"#).expect("parses");
        assert_eq!(place.as_deref(), Some("a[1] is -Infinity"));
        let (_, place) =
            parse_json(r#"{"choices":[],"usage":{"completion_tokens":3}}"#).expect("plain JSON");
        assert_eq!(place, None);
        assert!(parse_json("{\"a\": Nonsense}").is_err());
        assert!(parse_json("{\"a\": nanny}").is_err());
        let answer = Answer {
            text: " Paris".to_owned(),
            non_finite: Some("choices[0].logprobs.token_logprobs[0] is NaN".to_owned()),
            ..Answer::default()
        };
        let err = text_check(&answer).expect_err("NaN");
        assert!(
            err.contains("not finite") && err.contains("token_logprobs[0] is NaN"),
            "{err}"
        );
    }

    fn text_check(answer: &Answer) -> Result<(), String> {
        validate(
            answer,
            &TextCheck {
                expect: None,
                repetition: true,
            },
        )
    }

    #[test]
    fn rates_from_tokens_and_times() {
        let answer = Answer {
            text: "x".into(),
            ttft_s: Some(0.5),
            total_s: 1.5,
            completion_tokens: Some(11),
            non_finite: None,
        };
        let (tpot, tps) = answer.rates();
        assert!((tpot.unwrap_or_default() - 0.1).abs() < 1e-9);
        assert!((tps.unwrap_or_default() - 11.0 / 1.5).abs() < 1e-9);
        assert_eq!(Answer::default().rates(), (None, None));
    }
}
