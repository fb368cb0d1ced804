//! GitHub: `gate --github-pr/--sha` and `publish --issues` against a stateful stand-in of the REST
//! API on loopback. The stand-in keeps comments, issues, check runs and statuses, paginates with
//! `Link` headers, answers rate limits and 502s on demand, and checks every request it receives
//! against the operations cut from GitHub's official OpenAPI description
//! (`tests/fixtures/github/openapi-subset.json`): method, path, parameters, body shape. Its
//! answers are that description's examples, so the client reads real shapes.

use crate::util::{Sandbox, gpucompat, repo_root};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A token in GitHub's shape, built at run time (no secret-looking literal in the source).
pub(crate) fn token() -> String {
    format!("ghp_{}", "Zq7".repeat(12))
}

pub(crate) const REPO: &str = "acme/serving";
const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A canned failure answered before the real one.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// 429 with `Retry-After: 1`.
    TooMany,
    /// 403 with `x-ratelimit-remaining: 0` and a reset one second ahead.
    RateLimited,
    /// 502, as when GitHub is down.
    BadGateway,
}

#[derive(Debug, Default)]
pub(crate) struct Inner {
    port: u16,
    next_id: u64,
    /// (issue number, comment).
    comments: Vec<(u64, Value)>,
    issues: Vec<Value>,
    pub(crate) check_runs: Vec<Value>,
    statuses: Vec<Value>,
    /// Check runs answer 403, as for a personal token.
    forbid_check_runs: bool,
    faults: VecDeque<Fault>,
    /// Every fault is repeated forever (an outage).
    down: bool,
    /// (method, path and query, status answered).
    log: Vec<(String, String, u16)>,
    /// Requests that do not fit the API description.
    pub(crate) violations: Vec<String>,
    /// Authorization headers seen (to check the token is sent, and only there).
    auth: Vec<String>,
}

#[derive(Clone)]
pub(crate) struct StandIn {
    inner: Arc<Mutex<Inner>>,
    spec: Arc<Value>,
}

impl StandIn {
    pub(crate) fn start() -> StandIn {
        let text =
            std::fs::read_to_string(repo_root().join("tests/fixtures/github/openapi-subset.json"))
                .expect("the OpenAPI subset");
        let stand_in = StandIn {
            inner: Arc::new(Mutex::new(Inner {
                next_id: 1000,
                ..Inner::default()
            })),
            spec: Arc::new(serde_json::from_str(&text).expect("JSON")),
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let server = stand_in.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                tx.send(listener.local_addr().expect("addr").port())
                    .expect("send port");
                let app = axum::Router::new().fallback(handle).with_state(server);
                axum::serve(listener, app).await.expect("serve");
            });
        });
        let port = rx.recv().expect("the stand-in's port");
        stand_in.inner.lock().expect("stand-in state").port = port;
        stand_in
    }

    pub(crate) fn url(&self) -> String {
        format!(
            "http://127.0.0.1:{}",
            self.inner.lock().expect("stand-in state").port
        )
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().expect("stand-in state"))
    }

    /// Comments on `pr` that carry `marker`.
    pub(crate) fn marked(&self, pr: u64, marker: &str) -> Vec<Value> {
        self.with(|s| {
            s.comments
                .iter()
                .filter(|(n, c)| *n == pr && c["body"].as_str().is_some_and(|b| b.contains(marker)))
                .map(|(_, c)| c.clone())
                .collect()
        })
    }
}

// ---- validation against the description -------------------------------------------------------

fn type_ok(ty: &str, v: &Value) -> bool {
    match ty {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "null" => v.is_null(),
        _ => true,
    }
}

/// The subset of JSON Schema the cut operations use: type (one or several), nullable, enum,
/// required, properties, additionalProperties, items, maxLength, oneOf/anyOf/allOf.
fn validate(schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    if v.is_null() && schema["nullable"] == true {
        return;
    }
    match &schema["type"] {
        Value::String(t) if !type_ok(t, v) => errors.push(format!("{at}: not a {t}: {v}")),
        Value::Array(ts) if !ts.iter().any(|t| t.as_str().is_some_and(|t| type_ok(t, v))) => {
            errors.push(format!("{at}: none of {ts:?}: {v}"));
        }
        _ => {}
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(v) {
            errors.push(format!("{at}: {v} not in {options:?}"));
        }
    }
    if let (Some(max), Some(s)) = (schema["maxLength"].as_u64(), v.as_str()) {
        if s.chars().count() as u64 > max {
            errors.push(format!("{at}: longer than {max}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for name in schema["required"].as_array().into_iter().flatten() {
            if let Some(name) = name.as_str() {
                if !obj.contains_key(name) {
                    errors.push(format!("{at}: required `{name}` missing"));
                }
            }
        }
        let props = schema["properties"].as_object();
        for (k, value) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => validate(s, value, &format!("{at}.{k}"), errors),
                None if schema["additionalProperties"] == false => {
                    errors.push(format!("{at}: unknown property `{k}`"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            validate(items, item, &format!("{at}[{i}]"), errors);
        }
    }
    for all in schema["allOf"].as_array().into_iter().flatten() {
        validate(all, v, at, errors);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(options) = schema[key].as_array() {
            let fits = options.iter().filter(|o| {
                let mut e = Vec::new();
                validate(o, v, at, &mut e);
                e.is_empty()
            });
            let n = fits.count();
            if n == 0 || (key == "oneOf" && n > 1) {
                errors.push(format!("{at}: {n} of the {key} options fit"));
            }
        }
    }
}

/// The operation a request is for, with its path parameters; violations noted.
fn operation<'s>(
    spec: &'s Value,
    method: &Method,
    path: &str,
) -> Option<(&'s Value, Vec<(String, String)>)> {
    spec["operations"].as_array()?.iter().find_map(|op| {
        if op["method"] != method.as_str() {
            return None;
        }
        let template: Vec<&str> = op["path"].as_str()?.split('/').collect();
        let parts: Vec<&str> = path.split('/').collect();
        if template.len() != parts.len() {
            return None;
        }
        let mut params = Vec::new();
        for (t, p) in template.iter().zip(&parts) {
            if let Some(name) = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
                if p.is_empty() {
                    return None;
                }
                params.push((name.to_owned(), (*p).to_owned()));
            } else if t != p {
                return None;
            }
        }
        Some((op, params))
    })
}

fn check(spec: &Value, method: &Method, uri: &Uri, body: &[u8]) -> Result<String, Vec<String>> {
    let path = uri.path();
    let Some((op, params)) = operation(spec, method, path) else {
        return Err(vec![format!(
            "{method} {path}: no such operation in the description"
        )]);
    };
    let mut errors = Vec::new();
    let query: Vec<(String, String)> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| p.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    for p in op["parameters"].as_array().into_iter().flatten() {
        let name = p["name"].as_str().unwrap_or("");
        let value = match p["in"].as_str() {
            Some("path") => params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()),
            Some("query") => query
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone()),
            _ => continue,
        };
        match value {
            None if p["required"] == true => errors.push(format!("parameter `{name}` missing")),
            Some(v) => {
                let as_json = match p["schema"]["type"].as_str() {
                    Some("integer") => v
                        .parse::<i64>()
                        .map(Value::from)
                        .unwrap_or(Value::String(v)),
                    _ => Value::String(v),
                };
                validate(&p["schema"], &as_json, name, &mut errors);
            }
            None => {}
        }
    }
    for (k, _) in &query {
        if !op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == k.as_str())
        {
            errors.push(format!("unknown query parameter `{k}`"));
        }
    }
    match (&op["requestBody"], body.is_empty()) {
        (Value::Null, true) => {}
        (Value::Null, false) => errors.push("a body where none is expected".into()),
        (rb, true) if rb["required"] == true => errors.push("required body missing".into()),
        (rb, _) => match serde_json::from_slice::<Value>(body) {
            Ok(v) => validate(&rb["schema"], &v, "body", &mut errors),
            Err(e) => errors.push(format!("body is not JSON: {e}")),
        },
    }
    if errors.is_empty() {
        Ok(op["operationId"].as_str().unwrap_or("").to_owned())
    } else {
        Err(errors
            .into_iter()
            .map(|e| format!("{method} {path}: {e}"))
            .collect())
    }
}

fn example(spec: &Value, operation_id: &str) -> Value {
    spec["operations"]
        .as_array()
        .and_then(|ops| ops.iter().find(|o| o["operationId"] == operation_id))
        .map(|o| o["example"].clone())
        .unwrap_or(Value::Null)
}

// ---- the stand-in's routes --------------------------------------------------------------------

fn page_params(uri: &Uri) -> (usize, usize) {
    let get = |name: &str| {
        uri.query()
            .unwrap_or("")
            .split('&')
            .find_map(|p| p.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse::<usize>().ok())
    };
    (
        get("page").unwrap_or(1).max(1),
        get("per_page").unwrap_or(30).clamp(1, 100),
    )
}

/// One page of `items`, with GitHub's `Link` header when more follow.
fn paginate(port: u16, uri: &Uri, items: Vec<Value>) -> Response {
    let (page, per_page) = page_params(uri);
    let start = (page - 1) * per_page;
    let slice: Vec<Value> = items.iter().skip(start).take(per_page).cloned().collect();
    let mut response = axum::Json(Value::Array(slice)).into_response();
    if start + per_page < items.len() {
        let query: Vec<String> = uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("page="))
            .map(str::to_owned)
            .chain([format!("page={}", page + 1)])
            .collect();
        let link = format!(
            "<http://127.0.0.1:{port}{}?{}>; rel=\"next\"",
            uri.path(),
            query.join("&")
        );
        response
            .headers_mut()
            .insert("link", link.parse().expect("header"));
    }
    response
}

async fn handle(
    State(s): State<StandIn>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let checked = check(&s.spec, &method, &uri, &body);
    let mut inner = s.inner.lock().expect("stand-in state");
    inner.auth.push(auth);
    let record = |inner: &mut Inner, status: u16| {
        inner
            .log
            .push((method.to_string(), uri.to_string(), status));
    };
    let operation_id = match checked {
        Ok(id) => id,
        Err(errors) => {
            inner.violations.extend(errors);
            record(&mut inner, 422);
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                axum::Json(json!({"message": "Validation Failed"})),
            )
                .into_response();
        }
    };
    let fault = if inner.down {
        inner.faults.front().copied()
    } else {
        inner.faults.pop_front()
    };
    if let Some(fault) = fault {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("stand-in")
            .as_secs();
        let (status, extra): (u16, Vec<(&str, String)>) = match fault {
            Fault::TooMany => (429, vec![("retry-after", "1".into())]),
            Fault::RateLimited => (
                403,
                vec![
                    ("x-ratelimit-remaining", "0".into()),
                    ("x-ratelimit-reset", (now + 1).to_string()),
                ],
            ),
            Fault::BadGateway => (502, Vec::new()),
        };
        record(&mut inner, status);
        let mut response = (
            StatusCode::from_u16(status).expect("status"),
            axum::Json(json!({"message": "API rate limit exceeded or server error"})),
        )
            .into_response();
        for (k, v) in extra {
            response.headers_mut().insert(k, v.parse().expect("header"));
        }
        return response;
    }
    let port = inner.port;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let segments: Vec<String> = uri.path().split('/').map(str::to_owned).collect();
    let html = |what: &str| format!("https://github.com/{REPO}/{what}");
    let (status, response) = match operation_id.as_str() {
        "issues/list-comments" => {
            let pr: u64 = segments[5].parse().unwrap_or(0);
            let items: Vec<Value> = inner
                .comments
                .iter()
                .filter(|(n, _)| *n == pr)
                .map(|(_, c)| c.clone())
                .collect();
            record(&mut inner, 200);
            return paginate(port, &uri, items);
        }
        "issues/create-comment" => {
            let number: u64 = segments[5].parse().unwrap_or(0);
            inner.next_id += 1;
            let mut c = example(&s.spec, &operation_id);
            c["id"] = json!(inner.next_id);
            c["body"] = body["body"].clone();
            c["html_url"] = json!(html(&format!(
                "pull/{number}#issuecomment-{}",
                inner.next_id
            )));
            inner.comments.push((number, c.clone()));
            (201, c)
        }
        "issues/update-comment" => {
            let id: u64 = segments[6].parse().unwrap_or(0);
            match inner.comments.iter_mut().find(|(_, c)| c["id"] == id) {
                Some((_, c)) => {
                    c["body"] = body["body"].clone();
                    (200, c.clone())
                }
                None => (404, json!({"message": "Not Found"})),
            }
        }
        "checks/create" if inner.forbid_check_runs => (
            403,
            json!({"message": "Resource not accessible by personal access token"}),
        ),
        "checks/create" => {
            let mut run = example(&s.spec, &operation_id);
            run["head_sha"] = body["head_sha"].clone();
            run["conclusion"] = body["conclusion"].clone();
            inner.check_runs.push(body.clone());
            (201, run)
        }
        "repos/create-commit-status" => {
            inner.statuses.push(body.clone());
            let mut st = example(&s.spec, &operation_id);
            st["state"] = body["state"].clone();
            (201, st)
        }
        "issues/list-for-repo" => {
            let items = inner.issues.clone();
            record(&mut inner, 200);
            return paginate(port, &uri, items);
        }
        "issues/create" => {
            let number = inner.issues.len() as u64 + 1;
            let mut issue = example(&s.spec, &operation_id);
            issue["number"] = json!(number);
            issue["id"] = json!(5000 + number);
            issue["title"] = body["title"].clone();
            issue["body"] = body["body"].clone();
            issue["html_url"] = json!(html(&format!("issues/{number}")));
            issue
                .as_object_mut()
                .expect("an object")
                .remove("pull_request");
            inner.issues.push(issue.clone());
            (201, issue)
        }
        other => (
            500,
            json!({"message": format!("the stand-in has no route for {other}")}),
        ),
    };
    record(&mut inner, status);
    (
        StatusCode::from_u16(status).expect("status"),
        axum::Json(response),
    )
        .into_response()
}

// ---- the tests --------------------------------------------------------------------------------

/// A one-cell-per-outcome matrix: `bad` fails on head and prints tokens into its log. (Cell
/// scripts live in files: the log's header echoes a command, and only its first line carries
/// the harness's prefix.)
pub(crate) const MATRIX: &str = "[matrix]\ncell = [\"good\", \"bad\"]\n\n[job]\ncommand = \"sh job.sh {cell}\"\ntimeout = \"1m\"\n";

pub(crate) const JOB: &str = r#"case "$1:$GPUCOMPAT_PINS" in
  bad:*lib==2*)
    echo "auth: Authorization: Bearer $LEAK_GH" >&2
    echo "HF_TOKEN=$LEAK_HF" >&2
    echo "RuntimeError: CUDA error: an illegal memory access was encountered $LEAK_GH" >&2
    exit 1;;
esac
"#;

fn hf_token() -> String {
    format!("hf_{}", "Xy9".repeat(12))
}

fn gate_cmd(sandbox: &Sandbox, stand_in: &StandIn, head: &str, out: &str) -> assert_cmd::Command {
    let inventory = sandbox.file("no-gpus.toml", "host = \"test-host\"\n");
    let mut command = gpucompat();
    command
        .current_dir(sandbox.path())
        .env("GITHUB_API_URL", stand_in.url())
        .env("GITHUB_REPOSITORY", REPO)
        .env("GITHUB_TOKEN", token())
        .env("GITHUB_SHA", SHA)
        .env("LEAK_GH", format!("ghs_{}", "Qw3".repeat(12)))
        .env("LEAK_HF", hf_token())
        .env_remove("GITHUB_RUN_ID")
        .args([
            "gate", "m.toml", "--base", "lib==1", "--head", head, "--out", out,
        ])
        .arg("--cache-dir")
        .arg(sandbox.path().join("cache"))
        .arg("--inventory")
        .arg(inventory);
    command
}

fn no_token_in(texts: &[&str]) {
    for text in texts {
        assert!(!text.contains(&token()), "the token leaked:\n{text}");
    }
}

/// The marker comment sits on page 2 of 151 comments: it is found there and edited, never
/// duplicated, on every run; the check run is created; tokens from the cell's log are redacted
/// in what is posted; every request fits GitHub's description.
#[test]
fn github_sticky_comment_is_found_on_any_page_and_edited() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", MATRIX);
    sandbox.file("job.sh", JOB);
    let stand_in = StandIn::start();
    let marker = "<!-- gpucompat-gate: m.toml -->";
    stand_in.with(|s| {
        for i in 0..151u64 {
            let mut c = example(&stand_in.spec, "issues/create-comment");
            c["id"] = json!(i + 1);
            c["body"] = json!(if i == 130 {
                format!("{marker}\nold verdict")
            } else {
                format!("review comment {i}")
            });
            s.comments.push((7, c));
        }
    });
    for round in 0..2 {
        let output = gate_cmd(&sandbox, &stand_in, "lib==2", &format!("g{round}"))
            .args(["--github-pr", "7"])
            .output()
            .expect("gate");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
        no_token_in(&[&stdout, &stderr]);
        let marked = stand_in.marked(7, marker);
        assert_eq!(marked.len(), 1, "one sticky comment, round {round}");
        assert_eq!(marked[0]["id"], 131, "the existing comment was edited");
        let body = marked[0]["body"].as_str().unwrap();
        assert!(
            body.contains("gpucompat gate: 1 confirmed regression"),
            "{body}"
        );
        assert!(body.contains("| bad | `illegal_address` |"), "{body}");
        assert!(body.contains("gpucompat gate m.toml --base"), "{body}");
        assert!(
            body.contains("ghs_[REDACTED]") && body.contains("hf_[REDACTED]"),
            "{body}"
        );
        assert!(!body.contains(&hf_token()), "{body}");
        let gate_json =
            std::fs::read_to_string(sandbox.path().join(format!("g{round}/gate.json"))).unwrap();
        no_token_in(&[&gate_json]);
        assert!(
            !gate_json.contains(&hf_token()),
            "the report holds a token:\n{gate_json}"
        );
        assert!(gate_json.contains("\"state\": \"posted\""), "{gate_json}");
    }
    stand_in.with(|s| {
        assert_eq!(s.comments.len(), 151, "nothing created");
        let pages = s
            .log
            .iter()
            .filter(|(m, p, _)| m == "GET" && p.contains("/issues/7/comments"))
            .count();
        assert_eq!(pages, 4, "two pages per run: {:?}", s.log);
        assert_eq!(s.check_runs.len(), 2);
        assert_eq!(s.check_runs[0]["conclusion"], "failure");
        assert_eq!(s.check_runs[0]["head_sha"], SHA);
        assert!(s.violations.is_empty(), "{:#?}", s.violations);
        assert!(
            s.auth.iter().all(|a| a == &format!("Bearer {}", token())),
            "{:?}",
            s.auth.first()
        );
    });
}

/// Rate limits (429 with Retry-After, 403 with an exhausted x-ratelimit) are waited out; a
/// token that cannot create check runs gets a commit status instead; a new PR gets one comment.
#[test]
fn github_rate_limits_are_waited_out_and_statuses_stand_in_for_checks() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", MATRIX);
    sandbox.file("job.sh", JOB);
    let stand_in = StandIn::start();
    stand_in.with(|s| {
        s.forbid_check_runs = true;
        s.faults.extend([Fault::TooMany, Fault::RateLimited]);
    });
    let output = gate_cmd(&sandbox, &stand_in, "lib==1.1", "g")
        .args(["--github-pr", "9"])
        .output()
        .expect("gate");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("gate: passed"), "{stdout}");
    stand_in.with(|s| {
        let statuses: Vec<u16> = s.log.iter().map(|(_, _, st)| *st).collect();
        assert_eq!(&statuses[..2], &[429, 403], "{:?}", s.log);
        assert_eq!(s.comments.len(), 1);
        assert_eq!(s.statuses.len(), 1);
        assert_eq!(s.statuses[0]["state"], "success");
        assert_eq!(s.statuses[0]["context"], "gpucompat gate");
        assert!(s.violations.is_empty(), "{:#?}", s.violations);
    });
    let gate_json = std::fs::read_to_string(sandbox.path().join("g/gate.json")).unwrap();
    assert!(
        gate_json.contains("\"check\": \"commit status\""),
        "{gate_json}"
    );
}

/// GitHub down (502 on every request): the verdict is printed, written, and the exit code is
/// the gate's, green or red; the failure is said without the token.
#[test]
fn github_outage_never_changes_the_verdict() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", MATRIX);
    sandbox.file("job.sh", JOB);
    let stand_in = StandIn::start();
    stand_in.with(|s| {
        s.down = true;
        s.faults.push_back(Fault::BadGateway);
    });
    for (head, code, verdict) in [
        ("lib==1.1", 0, "gate: passed"),
        ("lib==2", 1, "gate: blocked"),
    ] {
        let out = format!("g-{head}");
        let output = gate_cmd(&sandbox, &stand_in, head, &out)
            .args(["--github-pr", "3", "--format", "json"])
            .output()
            .expect("gate");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stderr}");
        assert!(stderr.contains(verdict), "{stderr}");
        assert!(
            stderr.contains("github: the verdict was not posted"),
            "{stderr}"
        );
        assert!(stderr.contains("HTTP 502"), "{stderr}");
        let json: Value = serde_json::from_str(&stdout).expect("the verdict as JSON");
        assert_eq!(json["github"]["state"], "failed");
        let gate_json =
            std::fs::read_to_string(sandbox.path().join(&out).join("gate.json")).unwrap();
        assert!(gate_json.contains("\"state\": \"failed\""));
        no_token_in(&[&stdout, &stderr, &gate_json]);
    }
    // Each request was tried a bounded number of times.
    stand_in.with(|s| {
        assert!(s.log.iter().all(|(_, _, st)| *st == 502));
        assert_eq!(
            s.log.len(),
            2 * 2 * 4,
            "2 gates x (comments + check) x 4 attempts: {:?}",
            s.log
        );
    });
}

/// A nightly's failures: one issue per fingerprint, a comment when one recurs in a later run,
/// nothing twice for the same run, nothing closed.
#[test]
fn github_publish_opens_one_issue_per_fingerprint_and_comments_on_recurrence() {
    let sandbox = Sandbox::new();
    sandbox.file(
        "m.toml",
        "[matrix]\ncell = [\"a\", \"b\", \"c\", \"ok\"]\n[job]\ncommand = \"sh job.sh {cell}\"\ntimeout = \"1m\"\n",
    );
    sandbox.file(
        "job.sh",
        "case $1 in\n  a|b) echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2; exit 1;;\n  c) echo 'torch.OutOfMemoryError: CUDA out of memory.' >&2; exit 1;;\nesac\n",
    );
    let stand_in = StandIn::start();
    let publish = |run: &str| {
        gpucompat()
            .current_dir(sandbox.path())
            .env("GITHUB_API_URL", stand_in.url())
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_TOKEN", token())
            .env_remove("GITHUB_RUN_ID")
            .args(["publish", run, "--issues"])
            .output()
            .expect("publish")
    };
    for run in ["n1", "n2"] {
        let output = crate::util::run_in(&sandbox)
            .current_dir(sandbox.path())
            .args(["m.toml", "--out", run])
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(1));
    }
    let first = publish("n1");
    let text = String::from_utf8_lossy(&first.stdout);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        text.contains("2 failure fingerprint(s): 2 opened"),
        "{text}"
    );
    let again = publish("n1");
    assert!(String::from_utf8_lossy(&again.stdout).contains("2 already recorded"));
    let recur = publish("n2");
    let text = String::from_utf8_lossy(&recur.stdout);
    assert!(text.contains("2 commented"), "{text}");
    stand_in.with(|s| {
        assert_eq!(s.issues.len(), 2);
        let titles: Vec<&str> = s
            .issues
            .iter()
            .filter_map(|i| i["title"].as_str())
            .collect();
        assert!(
            titles.contains(&"gpucompat: illegal_address in a and 1 more cell(s)"),
            "{titles:?}"
        );
        assert_eq!(s.comments.len(), 2);
        assert!(
            s.log.iter().all(|(m, _, _)| m != "PATCH"),
            "nothing edited or closed"
        );
        assert!(s.violations.is_empty(), "{:#?}", s.violations);
    });
}

/// The split the gate workflow uses: the GPU job runs the gate with no token at all, and a
/// later job posts its folder with `publish --pr`. The comment and check run are the ones
/// `gate --github-pr` would post, gate.json records the result, and an unfinished or missing
/// gate folder is refused before GitHub is asked.
#[test]
fn github_publish_posts_a_gate_folder_the_gpu_job_wrote() {
    let sandbox = Sandbox::new();
    sandbox.file("m.toml", MATRIX);
    sandbox.file("job.sh", JOB);
    let stand_in = StandIn::start();
    let ran = gate_cmd(&sandbox, &stand_in, "lib==2", "g")
        .env_remove("GITHUB_TOKEN")
        .output()
        .expect("gate");
    assert_eq!(ran.status.code(), Some(1), "a confirmed regression");
    stand_in.with(|s| assert!(s.log.is_empty(), "the gate asked GitHub: {:?}", s.log));

    let publish = |folder: &str| {
        gpucompat()
            .current_dir(sandbox.path())
            .env("GITHUB_API_URL", stand_in.url())
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_TOKEN", token())
            .env_remove("GITHUB_SHA")
            .env_remove("GITHUB_RUN_ID")
            .args(["publish", folder, "--pr", "7", "--sha", SHA])
            .args(["--report-url", "https://ci.example/run/1"])
            .output()
            .expect("publish")
    };
    let posted = publish("g");
    let stdout = String::from_utf8_lossy(&posted.stdout);
    let stderr = String::from_utf8_lossy(&posted.stderr);
    assert_eq!(posted.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("posted: http"), "{stdout}");
    no_token_in(&[&stdout, &stderr]);
    let marked = stand_in.marked(7, "<!-- gpucompat-gate: m.toml -->");
    assert_eq!(marked.len(), 1);
    let body = marked[0]["body"].as_str().expect("body");
    assert!(
        body.contains("gpucompat gate: 1 confirmed regression"),
        "{body}"
    );
    assert!(body.contains("https://ci.example/run/1"), "{body}");
    assert!(body.contains("ghs_[REDACTED]"), "{body}");
    let gate_json = std::fs::read_to_string(sandbox.path().join("g/gate.json")).expect("gate.json");
    let gate: Value = serde_json::from_str(&gate_json).expect("JSON");
    assert_eq!(gate["github"]["state"], "posted", "{gate_json}");
    assert_eq!(
        gate["regressions"][0]["id"], "bad",
        "the verdict is kept whole"
    );

    // Posting again edits the one comment.
    assert_eq!(publish("g").status.code(), Some(0));
    assert_eq!(
        stand_in.marked(7, "<!-- gpucompat-gate: m.toml -->").len(),
        1
    );
    stand_in.with(|s| {
        assert_eq!(s.check_runs.len(), 2);
        assert_eq!(s.check_runs[0]["conclusion"], "failure");
        assert_eq!(s.check_runs[0]["head_sha"], SHA);
        assert!(s.violations.is_empty(), "{:#?}", s.violations);
    });

    // Not a gate folder: bad input, and GitHub is not asked.
    let asked = stand_in.with(|s| s.log.len());
    let missing = publish("nowhere");
    assert_eq!(missing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("nowhere/gate.json"), "{stderr}");
    let unfinished = sandbox.file(
        "u/gate.json",
        &gate_json.replace("\"state\": \"finished\"", "\"state\": \"running\""),
    );
    assert!(unfinished.exists());
    let running = publish("u");
    assert_eq!(running.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&running.stderr).contains("did not finish"),
        "{}",
        String::from_utf8_lossy(&running.stderr)
    );
    stand_in.with(|s| assert_eq!(s.log.len(), asked, "GitHub was asked"));
}
