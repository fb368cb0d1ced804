//! The root-cause taxonomy: one name per class of failure (docs/signatures.md).
//!
//! A signature names the *first fatal* failure of a cell. It is shared by the classifier (which
//! produces it), the run records (which store it), expectations (which match on it) and reports.

use serde::{Deserialize, Serialize};
use strum::VariantArray;

/// Root-cause class of a failed cell. `Unknown` is an honest answer, never a fallback guess.
///
/// The names (`illegal_address`, ...) are the stable text used in files and on the command line;
/// `strum` derives the text, the parser and the list of every signature from the variants, in the
/// order docs/signatures.md lists them.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(
    serialize_all = "snake_case",
    parse_err_ty = UnknownSignature,
    parse_err_fn = UnknownSignature::new
)]
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
    pub const ALL: &'static [Signature] = <Signature as VariantArray>::VARIANTS;

    /// The stable snake_case name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Every name, in order, joined for a message.
    pub fn names() -> String {
        Self::ALL
            .iter()
            .map(|sig| sig.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The text was not one of the signature names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown signature `{0}` (expected one of: {names})", names = Signature::names())]
pub struct UnknownSignature(pub String);

impl UnknownSignature {
    fn new(text: &str) -> Self {
        UnknownSignature(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_text_and_json() {
        assert_eq!(Signature::ALL.len(), 16);
        for &sig in Signature::ALL {
            assert_eq!(sig.as_str().parse::<Signature>(), Ok(sig));
            let json = serde_json::to_string(&sig).expect("serialize");
            assert_eq!(json, format!("\"{}\"", sig.as_str()));
        }
        assert!("illegal-address".parse::<Signature>().is_err());
    }
}
