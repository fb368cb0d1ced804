//! Every error the CUDA runtime, the driver and the CUDA math libraries can report, named as the
//! taxonomy says (`tests/fixtures/cuda-errors/`): each in the wordings real logs carry it, from
//! PyTorch's `CUDA error: <message>`, CUDA's samples (`code=N(cudaErrorX)`), a driver call
//! (`CUDA_ERROR_X`) and a library wrapper. Errors that name no cause (`invalid argument`) must stay
//! `unknown`; host and driver faults must be marked spurious.

use crate::util::{Sandbox, gpucompat};
use std::path::PathBuf;

const DIR: &str = "tests/fixtures/cuda-errors";

/// One log to classify, with the verdict the catalogue gives it.
struct Case {
    what: String,
    text: String,
    signature: String,
    spurious: bool,
}

fn runtime_cases() -> Vec<Case> {
    let path = crate::util::repo_root().join(DIR).join("runtime.csv");
    let mut reader = csv::Reader::from_path(path).expect("runtime.csv");
    let mut cases = Vec::new();
    for row in reader.records() {
        let row = row.expect("row");
        let (code, runtime, driver, message) = (&row[0], &row[1], &row[2], &row[3]);
        let expect = |what: String, text: String| Case {
            what,
            text,
            signature: row[4].to_owned(),
            spurious: &row[5] == "true",
        };
        cases.push(expect(
            format!("{runtime} as PyTorch says it"),
            format!(
                "Traceback (most recent call last):\n  File \"serve.py\", line 9, in <module>\n    torch.cuda.synchronize()\nRuntimeError: CUDA error: {message}\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
            ),
        ));
        cases.push(expect(
            format!("{runtime} as CUDA's samples say it"),
            format!(
                "CUDA error at kernels.cu:64 code={code}({runtime}) \"cudaDeviceSynchronize()\"\n"
            ),
        ));
        if !driver.is_empty() {
            cases.push(expect(
                format!("{driver} from a driver call"),
                format!("RuntimeError: cuLaunchKernel failed with {driver}\n"),
            ));
        }
    }
    cases
}

fn library_cases() -> Vec<Case> {
    let path = crate::util::repo_root().join(DIR).join("libraries.csv");
    let mut reader = csv::Reader::from_path(path).expect("libraries.csv");
    reader
        .records()
        .map(|row| {
            let row = row.expect("row");
            Case {
                what: row[0].to_owned(),
                text: format!(
                    "terminate called after throwing an instance of 'std::runtime_error'\n  what():  math.cu:88: {} in the library call\nAborted (core dumped)\n",
                    &row[0]
                ),
                signature: row[1].to_owned(),
                spurious: false,
            }
        })
        .collect()
}

#[test]
fn every_cuda_error_is_named_as_the_taxonomy_says() {
    let cases: Vec<Case> = runtime_cases().into_iter().chain(library_cases()).collect();
    assert!(cases.len() > 90, "the catalogue lost rows: {}", cases.len());
    let sandbox = Sandbox::new();
    let files: Vec<PathBuf> = cases
        .iter()
        .enumerate()
        .map(|(i, case)| sandbox.file(&format!("{i}.log"), &case.text))
        .collect();
    let out = gpucompat()
        .arg("classify")
        .args(&files)
        .args(["--format", "jsonl"])
        .output()
        .expect("run gpucompat");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let results: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("json"))
        .collect();
    assert_eq!(results.len(), cases.len(), "one result per log");
    let wrong: Vec<String> = cases
        .iter()
        .zip(&files)
        .zip(&results)
        .filter_map(|((case, file), v)| {
            assert_eq!(
                v["path"].as_str(),
                file.to_str(),
                "results in the order of the files"
            );
            let got = v["signature"].as_str().unwrap_or("");
            let spurious = v["spurious"].as_bool().unwrap_or(false);
            (got != case.signature || spurious != case.spurious).then(|| {
                format!(
                    "{}: named {got} (spurious {spurious}), the catalogue says {} (spurious {})",
                    case.what, case.signature, case.spurious
                )
            })
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
