//! The root-cause taxonomy: one name per class of failure (docs/signatures.md).
//!
//! A signature names the *first fatal* failure of a cell. It is shared by the classifier (which
//! produces it), the run records (which store it), expectations (which match on it) and reports.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Root-cause class of a failed cell. `Unknown` is an honest answer, never a fallback guess.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signature {
    IllegalAddress,
    MisalignedAddress,
    IllegalInstruction,
    NoKernelImage,
    UnsupportedConfig,
    JitCompileError,
    Oom,
    NcclError,
    CollectiveTimeout,
    LaunchFailure,
    DependencyError,
    Segfault,
    Deadlock,
    Timeout,
    WrongOutput,
    Unknown,
}

impl Signature {
    /// Every signature, in the order docs/signatures.md lists them.
    pub const ALL: [Signature; 16] = [
        Signature::IllegalAddress,
        Signature::MisalignedAddress,
        Signature::IllegalInstruction,
        Signature::NoKernelImage,
        Signature::UnsupportedConfig,
        Signature::JitCompileError,
        Signature::Oom,
        Signature::NcclError,
        Signature::CollectiveTimeout,
        Signature::LaunchFailure,
        Signature::DependencyError,
        Signature::Segfault,
        Signature::Deadlock,
        Signature::Timeout,
        Signature::WrongOutput,
        Signature::Unknown,
    ];

    /// The stable snake_case name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Signature::IllegalAddress => "illegal_address",
            Signature::MisalignedAddress => "misaligned_address",
            Signature::IllegalInstruction => "illegal_instruction",
            Signature::NoKernelImage => "no_kernel_image",
            Signature::UnsupportedConfig => "unsupported_config",
            Signature::JitCompileError => "jit_compile_error",
            Signature::Oom => "oom",
            Signature::NcclError => "nccl_error",
            Signature::CollectiveTimeout => "collective_timeout",
            Signature::LaunchFailure => "launch_failure",
            Signature::DependencyError => "dependency_error",
            Signature::Segfault => "segfault",
            Signature::Deadlock => "deadlock",
            Signature::Timeout => "timeout",
            Signature::WrongOutput => "wrong_output",
            Signature::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of the signature names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signature `{0}` (expected one of: {names})", names = Signature::ALL.map(Signature::as_str).join(", "))]
pub struct UnknownSignature(pub String);

impl FromStr for Signature {
    type Err = UnknownSignature;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Signature::ALL
            .into_iter()
            .find(|sig| sig.as_str() == s)
            .ok_or_else(|| UnknownSignature(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_json() {
        for sig in Signature::ALL {
            assert_eq!(sig.as_str().parse::<Signature>(), Ok(sig));
            let json = serde_json::to_string(&sig).expect("serialize");
            assert_eq!(json, format!("\"{}\"", sig.as_str()));
        }
        assert!("illegal-address".parse::<Signature>().is_err());
    }
}
