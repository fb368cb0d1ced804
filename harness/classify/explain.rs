//! Why a verdict: which evidence decided it and what the evidence was. The rule that fired and
//! where, what the deciding line itself names (the exception type, the CUDA or NCCL error), the
//! exit status and the watchdog's view. This explains a signature; it never changes one.

use crate::record::Exit;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::sync::LazyLock;

/// Which evidence decided a signature (`decided_by` in `gpucompat classify` and in records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum DecidedBy {
    /// The first fatal line of the log (a line after a wrapper line may replace it).
    FatalLine,
    /// The harness watchdog's verdict: no progress, or the deadline.
    Watchdog,
    /// Hang lines of the log: a stall repeated, a stack dump with no error line.
    HangLines,
    /// How the process ended: SIGSEGV, SIGBUS, SIGILL, or SIGKILL with an OOM sign in the log.
    ExitSignal,
    /// A weak line (a generic exception, a reported death, a bare `Killed`): nothing fatal.
    WeakLine,
    /// The lexical model: no rule named the log, and its words read as one signature's with the
    /// probability the model requires.
    LexicalModel,
    /// The hang capture taken before teardown (every stack in a collective, a busy compiler).
    HangCapture,
    /// The server's answer to a request that failed, where the log named nothing.
    ServerAnswer,
    /// The cell's environment could not be installed.
    Install,
    /// The cell's answer failed its check (`expect`, NaN, empty).
    AnswerCheck,
    /// The harness could not run the cell (infrastructure).
    Harness,
}

impl DecidedBy {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a piece of evidence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ClueKind {
    /// A rule of the table fired on a line (`value` is the rule id).
    Rule,
    /// The exception type the deciding line names.
    Exception,
    /// The CUDA (or cuBLAS/cuDNN) error the deciding line names, with its number where known.
    CudaError,
    /// The NCCL result the deciding line names.
    NcclError,
    /// A wrapper line (NCCL's "unhandled cuda error", a compile error) whose cause followed.
    Wrapped,
    /// A reported death (Ray's worker-died advice, a launcher's ChildFailedError) that gave way
    /// to a later line naming why.
    DeathReport,
    /// A hang rule and how often it was seen.
    HangLines,
    /// How the process ended.
    Exit,
    /// The harness watchdog's verdict.
    Watchdog,
    /// A line before the failure that makes it an infrastructure fault (a network error).
    Infrastructure,
    /// The lexical model's reading: the signature, its probability and the heaviest words.
    LexicalModel,
    /// Evidence the harness itself saw (the hang capture, a server answer, a failed install or
    /// answer check).
    Harness,
}

/// One piece of evidence. `kind` is a [`ClueKind`] name; kept as text so records written by a
/// later version (with kinds this one does not know) still read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clue {
    pub kind: String,
    pub value: String,
    /// 1-based line of the log the evidence is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

impl Clue {
    pub fn new(kind: ClueKind, value: impl Into<String>, line: Option<u64>) -> Clue {
        Clue {
            kind: <&str>::from(kind).to_owned(),
            value: value.into(),
            line,
        }
    }
}

impl std::fmt::Display for Clue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind.replace('_', " "), self.value)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        Ok(())
    }
}

/// A leading exception type (`torch.OutOfMemoryError`, `RuntimeError`), or the C++ exception a
/// `terminate called after throwing an instance of '...'` line names.
static EXCEPTION: LazyLock<Regex> = LazyLock::new(|| {
    #[expect(clippy::expect_used, reason = "a constant pattern, checked by the tests")]
    Regex::new(
        r"^((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault))(?::|\s*$)|throwing an instance of '([^']+)'",
    )
    .expect("exception pattern")
});

/// CUDA, cuBLAS, cuDNN, HIP and NCCL result names written out.
static NAMED: LazyLock<Regex> = LazyLock::new(|| {
    #[expect(clippy::expect_used, reason = "a constant pattern, checked by the tests")]
    Regex::new(
        r"\b(cudaError[A-Z]\w*|CUDA_ERROR_[A-Z_]+|CUBLAS_STATUS_[A-Z_]+|CUDNN_STATUS_[A-Z_]+|hipError[A-Z]\w*)\b|\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError))\b",
    )
    .expect("named error pattern")
});

/// The CUDA runtime's messages (`cudaGetErrorString`) and the error each one is, with its number
/// (`cudaError_t` in `driver_types.h`): a line often carries only the message.
const CUDA_MESSAGES: &[(&str, &str, u32)] = &[
    (
        "an illegal memory access was encountered",
        "cudaErrorIllegalAddress",
        700,
    ),
    ("misaligned address", "cudaErrorMisalignedAddress", 716),
    (
        "an illegal instruction was encountered",
        "cudaErrorIllegalInstruction",
        715,
    ),
    (
        "no kernel image is available for execution on the device",
        "cudaErrorNoKernelImageForDevice",
        209,
    ),
    (
        "invalid device function",
        "cudaErrorInvalidDeviceFunction",
        98,
    ),
    ("unspecified launch failure", "cudaErrorLaunchFailure", 719),
    (
        "too many resources requested for launch",
        "cudaErrorLaunchOutOfResources",
        701,
    ),
    (
        "the launch timed out and was terminated",
        "cudaErrorLaunchTimeout",
        702,
    ),
    ("device-side assert triggered", "cudaErrorAssert", 710),
    (
        "the provided ptx was compiled with an unsupported toolchain",
        "cudaErrorUnsupportedPtxVersion",
        222,
    ),
    (
        "device kernel image is invalid",
        "cudaErrorInvalidKernelImage",
        200,
    ),
    ("operation not supported", "cudaErrorNotSupported", 801),
];

/// NCCL's messages (`ncclGetErrorString`) and the result each one is.
const NCCL_MESSAGES: &[(&str, &str)] = &[
    ("unhandled cuda error", "ncclUnhandledCudaError"),
    ("unhandled system error", "ncclSystemError"),
    ("internal check failed", "ncclInternalError"),
    ("invalid usage", "ncclInvalidUsage"),
    (
        "remote process exited or there was a network error",
        "ncclRemoteError",
    ),
];

/// What a deciding line names itself: its exception type, its CUDA and NCCL errors.
pub(crate) fn line_clues(text: &str, line: u64) -> Vec<Clue> {
    let mut clues = Vec::new();
    if let Some(c) = EXCEPTION.captures(text) {
        if let Some(name) = c.get(1).or_else(|| c.get(2)) {
            clues.push(Clue::new(ClueKind::Exception, name.as_str(), Some(line)));
        }
    }
    let lower = text.to_ascii_lowercase();
    let mut cuda: Option<String> = None;
    let mut nccl: Option<String> = None;
    for c in NAMED.captures_iter(text) {
        if let Some(name) = c.get(1) {
            cuda.get_or_insert_with(|| name.as_str().to_owned());
        }
        if let Some(name) = c.get(2) {
            nccl.get_or_insert_with(|| name.as_str().to_owned());
        }
    }
    if cuda.is_none() {
        cuda = CUDA_MESSAGES
            .iter()
            .find(|(message, _, _)| lower.contains(message))
            .map(|(_, name, code)| format!("{name} ({code})"))
            .or_else(|| cuda_out_of_memory(&lower));
    }
    if nccl.is_none() && lower.contains("nccl") {
        nccl = NCCL_MESSAGES
            .iter()
            .find(|(message, _)| lower.contains(message))
            .map(|(_, name)| (*name).to_owned());
    }
    if let Some(name) = cuda {
        clues.push(Clue::new(ClueKind::CudaError, name, Some(line)));
    }
    if let Some(name) = nccl {
        clues.push(Clue::new(ClueKind::NcclError, name, Some(line)));
    }
    clues
}

/// "out of memory" is the CUDA error only where a CUDA call reported it (`CUDA error: out of
/// memory`, NCCL's `Cuda failure 'out of memory'`); PyTorch's allocator says "CUDA out of memory"
/// about its own pool.
fn cuda_out_of_memory(lower: &str) -> Option<String> {
    let reported = ["cuda error: out of memory", "cuda failure 'out of memory'"]
        .iter()
        .any(|m| lower.contains(m))
        || lower.contains("cuda failure 2 'out of memory'");
    reported.then(|| "cudaErrorMemoryAllocation (2)".to_owned())
}

/// How a process ended, as evidence: `signal 9 (SIGKILL)`, `code 139 (SIGSEGV)`, `code 1`.
pub(crate) fn exit_clue(exit: &Exit) -> Option<Clue> {
    let name = |signal: i32| match signal {
        4 => " (SIGILL)",
        6 => " (SIGABRT)",
        7 => " (SIGBUS)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        15 => " (SIGTERM)",
        _ => "",
    };
    let value = match (exit.signal, exit.code) {
        (Some(signal), _) => format!("signal {signal}{}", name(signal)),
        (None, Some(code)) if (129..160).contains(&code) => {
            format!("code {code}{}", name(code - 128))
        }
        (None, Some(code)) if (-64..0).contains(&code) => {
            format!("code {code}{}", name(-code))
        }
        (None, Some(0)) | (None, None) => return None,
        (None, Some(code)) => format!("code {code}"),
    };
    Some(Clue::new(ClueKind::Exit, value, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(clues: &[Clue]) -> Vec<(&str, &str)> {
        clues
            .iter()
            .map(|c| (c.kind.as_str(), c.value.as_str()))
            .collect()
    }

    #[test]
    fn a_line_names_its_exception_and_errors() {
        let clues = line_clues(
            "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
            7,
        );
        assert_eq!(
            kinds(&clues),
            [
                ("exception", "torch.AcceleratorError"),
                ("cuda_error", "cudaErrorIllegalAddress (700)")
            ]
        );
        assert!(clues.iter().all(|c| c.line == Some(7)));
        let clues = line_clues(
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
            1,
        );
        assert_eq!(
            kinds(&clues),
            [
                ("exception", "torch.distributed.DistBackendError"),
                ("nccl_error", "ncclUnhandledCudaError")
            ]
        );
        let clues = line_clues(
            "terminate called after throwing an instance of 'c10::CUDAError'",
            1,
        );
        assert_eq!(kinds(&clues), [("exception", "c10::CUDAError")]);
        // Written-out names win over messages; NCCL's Cuda failure names the CUDA error.
        let clues = line_clues("enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'", 3);
        assert_eq!(
            kinds(&clues),
            [("cuda_error", "cudaErrorMemoryAllocation (2)")]
        );
        let clues = line_clues(
            "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm`",
            1,
        );
        assert_eq!(
            kinds(&clues),
            [
                ("exception", "RuntimeError"),
                ("cuda_error", "CUBLAS_STATUS_EXECUTION_FAILED")
            ]
        );
        // PyTorch's allocator OOM is not a CUDA error; a plain message names nothing.
        let clues = line_clues(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            1,
        );
        assert_eq!(kinds(&clues), [("exception", "torch.OutOfMemoryError")]);
        assert!(line_clues("Segmentation fault (core dumped)", 1).is_empty());
    }

    #[test]
    fn exits_read_as_signals_where_they_are() {
        let text = |code, signal| exit_clue(&Exit { code, signal }).map(|c| c.value);
        assert_eq!(text(Some(137), None).as_deref(), Some("code 137 (SIGKILL)"));
        assert_eq!(text(None, Some(11)).as_deref(), Some("signal 11 (SIGSEGV)"));
        assert_eq!(text(Some(-7), None).as_deref(), Some("code -7 (SIGBUS)"));
        assert_eq!(text(Some(1), None).as_deref(), Some("code 1"));
        assert_eq!(text(Some(0), None), None);
        assert_eq!(text(None, None), None);
    }
}
