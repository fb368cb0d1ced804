//! Temporary classifier with the final API; replaced by the full rule table.

use crate::record::Exit;
use crate::signature::Signature;
use serde::Serialize;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Deadlock,
    Timeout,
}

#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub exit: Option<Exit>,
    pub watchdog: Option<Verdict>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Classification {
    pub signature: Signature,
    pub fingerprint: Option<String>,
    pub line: Option<u64>,
    pub excerpt: Option<String>,
    pub spurious: bool,
    pub explanation: Option<String>,
    pub hint: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("bad rule")]
pub struct ClassifyError;

#[derive(Debug)]
pub struct Classifier {
    rules: Vec<(regex::Regex, Signature, bool)>,
}

impl Classifier {
    pub fn builtin() -> Classifier {
        let rules = [
            ("illegal memory access", Signature::IllegalAddress, false),
            (
                "no kernel image is available",
                Signature::NoKernelImage,
                false,
            ),
            ("out of memory", Signature::Oom, false),
            (
                "Could not find a version|Failed to fetch|Connection refused",
                Signature::DependencyError,
                true,
            ),
            (
                "ModuleNotFoundError|ImportError",
                Signature::DependencyError,
                false,
            ),
            ("Segmentation fault", Signature::Segfault, false),
            (
                "timed out waiting for completion flag",
                Signature::CollectiveTimeout,
                false,
            ),
        ];
        Classifier {
            rules: rules
                .iter()
                .filter_map(|(p, s, sp)| regex::Regex::new(p).ok().map(|r| (r, *s, *sp)))
                .collect(),
        }
    }

    pub fn with_rules(_user: &[crate::matrix::UserRule]) -> Result<Classifier, ClassifyError> {
        Ok(Self::builtin())
    }

    pub fn classify_reader<R: Read>(
        &self,
        reader: R,
        evidence: &Evidence,
    ) -> std::io::Result<Classification> {
        let mut found = None;
        for (n, line) in BufReader::new(reader).split(b'\n').enumerate() {
            let line = line?;
            let text = String::from_utf8_lossy(&line);
            if let Some((_, sig, spurious)) = self.rules.iter().find(|(r, _, _)| r.is_match(&text))
            {
                found = Some((n as u64 + 1, *sig, *spurious, text.to_string()));
                break;
            }
        }
        let (signature, line, spurious, text) = match found {
            Some((n, s, sp, t)) => (s, Some(n), sp, Some(t)),
            None => match (evidence.watchdog, evidence.exit) {
                (Some(Verdict::Deadlock), _) => (Signature::Deadlock, None, false, None),
                (Some(Verdict::Timeout), _) => (Signature::Timeout, None, false, None),
                (
                    None,
                    Some(Exit {
                        signal: Some(11), ..
                    }),
                ) => (Signature::Segfault, None, false, None),
                _ => (Signature::Unknown, None, false, None),
            },
        };
        Ok(Classification {
            signature,
            fingerprint: text.clone(),
            line,
            excerpt: text,
            spurious,
            explanation: None,
            hint: None,
        })
    }

    pub fn classify_file(
        &self,
        path: &Path,
        evidence: &Evidence,
    ) -> std::io::Result<Classification> {
        self.classify_reader(std::fs::File::open(path)?, evidence)
    }
}
