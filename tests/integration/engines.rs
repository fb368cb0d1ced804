//! The built-in engine adapters (sglang, vLLM, ktransformers) against stand-in servers that take
//! the real launch flags, print the real log lines and answer the real routes (their wheels are
//! too big for CI; see tests/fixtures/engines/standin.py).

use crate::util::{Sandbox, exits, gpucompat, python, records, records_by_id, repo_root, run_in};
use serde_json::Value;
use std::path::Path;

const MATRIX: &str = r#"
engine = "{engine}"

[matrix]
engine = ["sglang", "vllm", "ktransformers"]
[[matrix.include]]
engine = "sglang"
extra = "--attention-backend flashinfer"
[[matrix.include]]
engine = "vllm"
extra = "--gdn-prefill-backend flashinfer"
[[matrix.include]]
engine = "ktransformers"
extra = "--kt-method FP8 --kt-weight-path /weights/kt"

[server]
model = "Qwen/Qwen3-0.6B"
tp = 2
args = "{extra}"
expect = "(?i)paris"
ready-timeout = "60s"
timeout = "2m"
no-progress = "30s"
"#;

/// `gpucompat run` of `matrix` into `out` with the stand-in engines first on PATH (and their
/// Python package on PYTHONPATH); further options and environment follow.
fn run_stand_ins(sandbox: &Sandbox, out: &Path, matrix: &Path) -> assert_cmd::Command {
    let mut command = run_in(sandbox);
    command
        .args(["--grace", "1s", "--out"])
        .arg(out)
        .arg(matrix)
        .env("PATH", path_with_stand_ins())
        .env(
            "PYTHONPATH",
            repo_root().join("tests/fixtures/engines/pypath"),
        );
    command
}

fn path_with_stand_ins() -> String {
    let bin = repo_root().join("tests/fixtures/engines/bin");
    match std::env::var("PATH") {
        Ok(path) => format!("{}:{path}", bin.display()),
        Err(_) => bin.display().to_string(),
    }
}

/// What the real engines did with a random-weight model on an H100, played by the stand-ins: the
/// adapters ask `/v1/models` for the served name (vLLM refuses any other), send `ignore_eos` and
/// judge the answer by the engine's token count (`check = "tokens"`: the text is noise by design),
/// and wait out SGLang's `/health` failing after "ready to roll".
#[test]
fn random_weight_models_are_judged_by_tokens_under_their_served_name() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file(
        "m.toml",
        r#"
engine = "{engine}"
[matrix]
engine = ["sglang", "vllm"]
[[matrix.include]]
engine = "sglang"
extra = "--attention-backend triton --sampling-backend pytorch --disable-cuda-graph --skip-server-warmup"
[[matrix.include]]
engine = "vllm"
extra = "--served-model-name tiny --enforce-eager --attention-backend TRITON_ATTN"
[server]
model = "/models/tiny-qwen3moe"
args = "{extra}"
check = "tokens"
max-tokens = 8
ready-timeout = "60s"
timeout = "2m"
no-progress = "30s"
"#,
    );
    let out = sandbox.path().join("run");
    exits(
        run_stand_ins(&sandbox, &out, &matrix)
            .env("STANDIN_RANDOM", "1")
            .env("STANDIN_HEALTH_GAP_S", "2"),
        &[0],
    );
    for record in records(&out) {
        let log =
            std::fs::read_to_string(out.join(record["log"].as_str().expect("log"))).expect("log");
        assert_eq!(record["status"], "pass", "{record}\n{log}");
        let served = if record["id"] == "vllm" {
            "tiny"
        } else {
            "/models/tiny-qwen3moe"
        };
        assert!(
            log.contains(&format!("asking for the served model `{served}`")),
            "{log}"
        );
        // Noise, 8 tokens of it: accepted by count.
        assert!(log.contains("(8 tokens"), "{log}");
        assert!(log.contains('\u{fffd}'), "{log}");
        assert!(
            record["metrics"]["time_to_ready_s"].as_f64().unwrap_or(0.0) >= 2.0,
            "ready only once /health answers: {record}"
        );
        if record["id"] == "sglang" {
            assert!(
                log.contains("couldn't get a response from detokenizer"),
                "{log}"
            );
        }
    }
}

#[test]
fn sglang_vllm_and_ktransformers_launch_get_ready_and_answer() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file("m.toml", MATRIX);
    let out = sandbox.path().join("run");
    exits(&mut run_stand_ins(&sandbox, &out, &matrix), &[0]);
    let records = records_by_id(&out);
    let log = |id: &str| {
        std::fs::read_to_string(out.join(records[id]["log"].as_str().expect("log"))).expect("log")
    };
    for id in ["sglang", "vllm", "ktransformers"] {
        let record = &records[id];
        assert_eq!(record["status"], "pass", "{record}\n{}", log(id));
        assert!(
            record["metrics"]["time_to_ready_s"].as_f64().is_some(),
            "{record}"
        );
        assert!(record["metrics"]["ttft_s"].as_f64().is_some(), "{record}");
        assert!(
            record["metrics"]["tokens_per_s"].as_f64().is_some(),
            "{record}"
        );
    }
    // The command lines users type, with the cell's tensor parallelism and extra flags.
    let sglang = log("sglang");
    assert!(
        sglang.contains("command: python3 -m sglang.launch_server --model-path Qwen/Qwen3-0.6B --host 127.0.0.1 --port ")
            && sglang.contains(" --tp-size 2 --attention-backend flashinfer"),
        "{sglang}"
    );
    let vllm = log("vllm");
    assert!(
        vllm.contains("command: python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-0.6B --host 127.0.0.1 --port ")
            && vllm.contains(" --tensor-parallel-size 2 --gdn-prefill-backend flashinfer"),
        "{vllm}"
    );
    let kt = log("ktransformers");
    assert!(
        kt.contains("--kt-method FP8 --kt-weight-path /weights/kt"),
        "{kt}"
    );
    // The stand-ins print the engines' real throughput lines; the answer is the real route's.
    assert!(
        sglang.contains("gen throughput (token/s): 86.67"),
        "{sglang}"
    );
    assert!(
        vllm.contains("Avg generation throughput: 41.5 tokens/s"),
        "{vllm}"
    );
    assert!(kt.contains("answer (") && kt.contains("Paris"), "{kt}");
}

#[test]
fn a_builtin_engine_without_a_model_is_bad_input() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file(
        "m.toml",
        "engine = \"vllm\"\n[matrix]\nfi = [\"0.6.3\"]\n[server]\nexpect = \"x\"\n",
    );
    for command in ["check", "run"] {
        let mut cmd = gpucompat();
        cmd.arg(command).arg(&matrix);
        if command == "run" {
            cmd.arg("--out").arg(sandbox.path().join("run"));
        }
        let out = cmd.output().expect("runs");
        assert_eq!(out.status.code(), Some(2), "{command}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("engine `vllm` needs `model`"), "{stderr}");
        assert!(stderr.contains("m.toml:"), "{stderr}");
    }
    assert!(!sandbox.path().join("run").exists(), "nothing ran");
}

#[test]
fn an_empty_command_is_bad_input_not_a_pass() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file(
        "m.toml",
        "[matrix]\ncase = [\"a\", \"b\"]\n[[matrix.include]]\ncase = \"a\"\ncmd = \"true\"\n[job]\ncommand = \"{cmd}\"\n",
    );
    let out = gpucompat()
        .arg("check")
        .arg(&matrix)
        .output()
        .expect("check");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the command of cell `b` is empty"),
        "{stderr}"
    );
}

/// A server that fails the request says why in its answer: an HTTP 500 body, or an error event in
/// the stream. The cell is named by what the server said (the log has nothing).
#[test]
fn a_servers_own_error_answer_names_the_failure() {
    for (fail, signature) in [("http500", "illegal_address"), ("stream-error", "oom")] {
        let sandbox = Sandbox::new();
        let matrix = sandbox.file(
            "m.toml",
            "engine = \"sglang\"\n[matrix]\nfi = [\"0.6.3\"]\n[server]\nmodel = \"m\"\nready-timeout = \"60s\"\nno-progress = \"30s\"\n",
        );
        let out = sandbox.path().join("run");
        let run = run_stand_ins(&sandbox, &out, &matrix)
            .env("STANDIN_FAIL", fail)
            .output()
            .expect("run");
        assert_eq!(run.status.code(), Some(1), "{fail}");
        let record: Value = serde_json::from_str(
            std::fs::read_to_string(out.join("results.jsonl"))
                .expect("results")
                .lines()
                .next()
                .expect("record"),
        )
        .expect("json");
        assert_eq!(record["signature"], signature, "{fail}: {record}");
        assert_eq!(record["phase"], "infer", "{fail}: {record}");
        assert!(record["excerpt"].as_str().is_some(), "{record}");
    }
}

/// `engine = "flashinfer-probe"` needs no command: the harness writes the probe it was built with
/// into the cache folder and launches it with the cell's workers and kernels. On a machine
/// without torch the probe's workers fail to import it, which is the cell's finding.
#[test]
fn the_builtin_probe_engine_launches_the_shipped_probe() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file(
        "m.toml",
        r#"engine = "flashinfer-probe"
[matrix]
workers = [2]
[server]
workers = "{workers}"
args = "--kernels core,triton"
ready-timeout = "60s"
timeout = "2m"
[python]
python = "python3"
"#,
    );
    // An environment with the machine's python but not its packages: no torch, whatever the host.
    let out = sandbox.path().join("run");
    let cache = sandbox.path().join("cache");
    exits(
        gpucompat()
            .arg("run")
            .arg(&matrix)
            .arg("--out")
            .arg(&out)
            .arg("--cache-dir")
            .arg(&cache),
        &[1],
    );
    let record = &records(&out)[0];
    assert_eq!(record["signature"], "dependency_error", "{record}");
    let log = std::fs::read_to_string(out.join("logs/2.log")).expect("log");
    assert!(
        log.contains("--port") && log.contains("--workers 2 --kernels core,triton"),
        "the built-in command with the cell's workers and kernels: {log}"
    );
    assert!(log.contains("No module named 'torch'"), "{log}");
    // A worker failed, and the probe said so (stopping any other still running) rather than
    // waiting on it.
    assert!(
        log.contains("of 2 workers failed their kernel checks"),
        "{log}"
    );
    let probes: Vec<_> = std::fs::read_dir(cache.join("engines"))
        .expect("engines folder")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(probes.len(), 1, "{probes:?}");
    let shipped = std::fs::read_to_string(&probes[0]).expect("probe");
    assert_eq!(
        shipped,
        std::fs::read_to_string(repo_root().join("engines/flashinfer_probe.py")).expect("source"),
        "the probe written out is the one in the repository"
    );
}

/// The probe's own process and serving logic, run for real with only its GPU work stood in
/// (tests/fixtures/engines/probe_cpu.py): workers that pass, a streamed answer with a time to
/// first token; an answer whose logprobs are NaN; workers that die without reporting; a stuck
/// worker the watchdog calls a deadlock.
#[test]
fn the_probe_serves_streams_and_fails_fast_or_hangs_as_its_workers_do() {
    let stand_in = repo_root().join("tests/fixtures/engines/probe_cpu.py");
    let matrix = |case: &str, args: &str| {
        format!(
            r#"engine = "flashinfer-probe"
[matrix]
case = ["{case}"]
[server]
command = "$PYTHON {stand_in} --port {{port}} --workers 2 {args}"
expect = "Paris is the capital"
max-tokens = 4
ready-timeout = "60s"
timeout = "60s"
no-progress = "3s"
"#,
            stand_in = stand_in.display()
        )
    };
    let run = |case: &str, args: &str, fake: &str| {
        let sandbox = Sandbox::new();
        let file = sandbox.file("m.toml", &matrix(case, args));
        let out = sandbox.path().join("run");
        let status = gpucompat()
            .arg("run")
            .arg(&file)
            .arg("--out")
            .arg(&out)
            .arg("--cache-dir")
            .arg(sandbox.path().join("cache"))
            .args(["--grace", "1s"])
            .env("PROBE_FAKE", fake)
            .env("PYTHON", python())
            .output()
            .expect("run")
            .status;
        let record = records(&out).swap_remove(0);
        let log = std::fs::read_to_string(out.join(format!("logs/{case}.log"))).expect("log");
        (status.code(), record, log, sandbox)
    };

    let (code, record, log, _keep) = run("ok", "--kernels moe", "ok");
    assert_eq!(code, Some(0), "{record}\n{log}");
    assert_eq!(record["status"], "pass");
    assert!(log.contains("stand-in checks of moe_routing: ok"), "{log}");
    assert!(log.contains("all 2 worker(s) passed moe_routing"), "{log}");
    assert!(
        log.contains("model loaded in"),
        "loaded before ready: {log}"
    );
    assert!(log.contains("4 tokens streamed"), "{log}");
    let ttft = record["metrics"]["ttft_s"]
        .as_f64()
        .expect("a streamed answer has a TTFT");
    assert!(ttft >= 0.0, "{record}");
    assert!(record["metrics"]["jit_s"].is_number(), "{record}");

    // FlashInfer's sampling gave NaN: the text reads fine, the logprobs the probe returns do not.
    let (code, record, log, _keep) = run("nan", "", "nan");
    assert_eq!(code, Some(1), "{record}\n{log}");
    assert_eq!(record["signature"], "wrong_output", "{record}");
    let said = record["reason"].as_str().unwrap_or_default();
    assert!(said.contains("token_logprobs[0] is NaN"), "{record}");

    let (code, record, log, _keep) = run("crash", "", "crash");
    assert_eq!(code, Some(1), "{record}");
    assert_eq!(record["status"], "fail");
    assert_eq!(record["phase"], "ready", "{record}");
    assert!(
        log.contains("before reporting"),
        "dead workers are noticed: {log}"
    );

    let (code, record, log, _keep) = run("stall", "--stall-rank 1", "ok");
    assert_eq!(code, Some(1), "{record}");
    assert_eq!(record["signature"], "deadlock", "{record}\n{log}");
    assert!(
        log.contains("waiting forever after its checks (injected hang"),
        "{log}"
    );
}

#[test]
fn an_unknown_answer_check_is_bad_input() {
    let sandbox = Sandbox::new();
    let matrix = sandbox.file(
        "m.toml",
        "engine = \"vllm\"\n[matrix]\nfi = [\"0.6.3\"]\n[server]\nmodel = \"m\"\ncheck = \"words\"\n",
    );
    let out = gpucompat()
        .arg("check")
        .arg(&matrix)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`check` in [server] must be \"text\" or \"tokens\", found \"words\""),
        "{stderr}"
    );
}

/// Wrong answers that come without any error, from a real loopback server (the stand-in) through
/// `gpucompat run`: nothing generated, one token over and over, replacement characters, NaN
/// logprobs behind a fine text. Under `check = "text"` each is `wrong_output` with a reason that
/// says what was wrong; under `check = "tokens"` (random-weight models, whose text is noise) only
/// a wrong token count is, and a repeating or unreadable text passes.
#[test]
fn wrong_answers_without_an_error_are_wrong_output() {
    // Under `tokens` the stand-in plays a random-weight model: noise, `max-tokens` of it.
    let run = |check: &str| {
        let sandbox = Sandbox::new();
        let random = if check == "tokens" { "1" } else { "0" };
        let matrix = sandbox.file(
            "m.toml",
            &format!(
                r#"engine = "sglang"
[matrix]
answer = ["empty", "repeat", "replacement", "nan", "fine"]
[server]
model = "m"
check = "{check}"
max-tokens = 12
ready-timeout = "60s"
timeout = "2m"
no-progress = "30s"
[env]
STANDIN_ANSWER = "{{answer}}"
STANDIN_RANDOM = "{random}"
"#
            ),
        );
        let out = sandbox.path().join("run");
        let run = run_stand_ins(&sandbox, &out, &matrix)
            .output()
            .expect("run");
        (run.status.code(), records_by_id(&out), sandbox)
    };

    let (code, records, _keep) = run("text");
    assert_eq!(code, Some(1), "{records:?}");
    for (answer, reason) in [
        ("empty", "the answer is empty"),
        ("repeat", "the answer repeats itself"),
        ("replacement", "the answer holds invalid bytes"),
        ("nan", "choices[0].logprobs.token_logprobs[0] is NaN"),
    ] {
        let record = &records[answer];
        assert_eq!(record["status"], "fail", "{answer}: {record}");
        assert_eq!(record["signature"], "wrong_output", "{answer}: {record}");
        assert_eq!(record["phase"], "validate", "{answer}: {record}");
        let said = record["reason"].as_str().unwrap_or_default();
        assert!(said.contains(reason), "{answer}: {record}");
    }
    assert_eq!(records["fine"]["status"], "pass", "{}", records["fine"]);

    let (_, records, _keep) = run("tokens");
    for answer in ["repeat", "replacement", "fine"] {
        let record = &records[answer];
        assert_eq!(record["status"], "pass", "{answer}: {record}");
    }
    let record = &records["empty"];
    assert_eq!(record["signature"], "wrong_output", "{record}");
    let said = record["reason"].as_str().unwrap_or_default();
    assert!(said.contains("generated no tokens"), "{record}");
    // Noise is expected of random weights; a NaN is not.
    let record = &records["nan"];
    assert_eq!(record["signature"], "wrong_output", "{record}");
    let said = record["reason"].as_str().unwrap_or_default();
    assert!(said.contains("token_logprobs[0] is NaN"), "{record}");
}
