//! The `[resources] gpus` grammar: what GPUs a cell needs, in `CUDA_VISIBLE_DEVICES` order.
//!
//! ```text
//! spec  := "" | term ("+" term)*        "sm_86+sm_89": two GPUs, the sm_86 one first
//! term  := [count "x"] arch             "2xsm_90": two sm_90 GPUs
//! arch  := "sm_" digits ["a" | "f"]     "sm_90a", "sm_100f", "sm_120"
//! ```

/// Why a GPU spec could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuSpecError {
    #[error("`{term}` is not a GPU arch (expected e.g. `sm_90`, `2xsm_90`, `sm_86+sm_89`)")]
    BadArch { term: String },
    #[error("`{term}`: a GPU count must be a whole number from 1 to 64")]
    BadCount { term: String },
    #[error("empty term in `{spec}` (a `+` with nothing on one side)")]
    EmptyTerm { spec: String },
}

/// Upper bound on GPUs per cell, far above any single host, to catch typos like `80xsm_90`.
const MAX_COUNT: usize = 64;

/// Parses a spec into one arch per GPU, in order. An empty spec needs no GPU.
pub fn parse(spec: &str) -> Result<Vec<String>, GpuSpecError> {
    let spec = spec.trim();
    if spec.is_empty() || spec == "none" {
        return Ok(Vec::new());
    }
    let mut gpus = Vec::new();
    for term in spec.split('+') {
        let term = term.trim();
        if term.is_empty() {
            return Err(GpuSpecError::EmptyTerm {
                spec: spec.to_owned(),
            });
        }
        let (count, arch) = match term.split_once('x') {
            Some((count, arch))
                if !count.is_empty() && count.bytes().all(|b| b.is_ascii_digit()) =>
            {
                let count: usize = count.parse().map_err(|_| GpuSpecError::BadCount {
                    term: term.to_owned(),
                })?;
                if count == 0 || count > MAX_COUNT {
                    return Err(GpuSpecError::BadCount {
                        term: term.to_owned(),
                    });
                }
                (count, arch)
            }
            _ => (1, term),
        };
        if !is_arch(arch) {
            return Err(GpuSpecError::BadArch {
                term: term.to_owned(),
            });
        }
        gpus.extend(std::iter::repeat_n(arch.to_owned(), count));
    }
    Ok(gpus)
}

/// `sm_` + 2 or 3 digits + optional `a` (arch-specific) or `f` (family) suffix.
pub fn is_arch(text: &str) -> bool {
    let Some(rest) = text.strip_prefix("sm_") else {
        return false;
    };
    let digits = rest.trim_end_matches(['a', 'f']);
    (2..=3).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && rest.len() - digits.len() <= 1
}

/// Formats a GPU list back into the spec grammar (`["sm_90", "sm_90"]` -> `2xsm_90`).
pub fn format(gpus: &[String]) -> String {
    let mut terms: Vec<(usize, &str)> = Vec::new();
    for gpu in gpus {
        match terms.last_mut() {
            Some((count, arch)) if *arch == gpu.as_str() => *count += 1,
            _ => terms.push((1, gpu)),
        }
    }
    terms
        .iter()
        .map(|(count, arch)| match count {
            1 => (*arch).to_owned(),
            n => format!("{n}x{arch}"),
        })
        .collect::<Vec<_>>()
        .join("+")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_forms() {
        assert_eq!(parse("sm_90").unwrap_or_default(), ["sm_90"]);
        assert_eq!(parse("2xsm_90").unwrap_or_default(), ["sm_90", "sm_90"]);
        assert_eq!(parse("sm_86+sm_89").unwrap_or_default(), ["sm_86", "sm_89"]);
        assert_eq!(
            parse("sm_89 + sm_86").unwrap_or_default(),
            ["sm_89", "sm_86"]
        );
        assert_eq!(
            parse("sm_100a+2xsm_120").unwrap_or_default(),
            ["sm_100a", "sm_120", "sm_120"]
        );
        assert_eq!(parse("").unwrap_or_default(), Vec::<String>::new());
    }

    #[test]
    fn rejects_malformed_specs() {
        for bad in [
            "sm90", "sm_9", "sm_90x", "0xsm_90", "99xsm_90", "sm_86+", "gpu", "sm_90af", "xsm_90",
        ] {
            assert!(parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn formats_back() {
        for spec in ["sm_90", "2xsm_90", "sm_86+sm_89", "sm_90+2xsm_120"] {
            let gpus = parse(spec).unwrap_or_default();
            assert_eq!(format(&gpus), spec);
        }
    }
}
