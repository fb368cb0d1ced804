//! The `[resources] gpus` grammar: what GPUs a cell needs, in `CUDA_VISIBLE_DEVICES` order.
//!
//! ```text
//! spec  := "" | term ("+" term)*        "sm_86+sm_89": two GPUs, the sm_86 one first
//! term  := [count "x"] arch | arch "@" index
//!                                        "2xsm_90": two sm_90 GPUs
//!                                        "sm_90@1+sm_90@0": GPU 1 then GPU 0 of the host
//! arch  := "sm_" digits ["a" | "f"]     "sm_90a", "sm_100f", "sm_120"
//! ```
//!
//! A device pin (`@index`, the host's `nvidia-smi` index) is for what only a given device or
//! order shows: placement checks, a suspect card, a PCIe/NVLink pair. It stays in the parsed
//! entry (`"sm_90@1"`); `split_device` takes it apart where GPUs are chosen.

/// Why a GPU spec could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuSpecError {
    #[error("`{term}` is not a GPU arch (expected e.g. `sm_90`, `2xsm_90`, `sm_86+sm_89`)")]
    BadArch { term: String },
    #[error("`{term}`: a GPU count must be a whole number from 1 to 64")]
    BadCount { term: String },
    #[error("empty term in `{spec}` (a `+` with nothing on one side)")]
    EmptyTerm { spec: String },
    #[error(
        "`{term}`: a device pin is `arch@index` with one GPU and a whole-number index (e.g. `sm_90@1`)"
    )]
    BadDevice { term: String },
    #[error("`{spec}` names device {index} twice")]
    SameDevice { spec: String, index: u32 },
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
        let (bare, device) = split_pin(arch, term)?;
        if !is_arch(bare) {
            return Err(GpuSpecError::BadArch {
                term: term.to_owned(),
            });
        }
        if let Some(index) = device {
            if count != 1 {
                return Err(GpuSpecError::BadDevice {
                    term: term.to_owned(),
                });
            }
            if gpus
                .iter()
                .any(|g: &String| split_device(g).1 == Some(index))
            {
                return Err(GpuSpecError::SameDevice {
                    spec: spec.to_owned(),
                    index,
                });
            }
        }
        gpus.extend(std::iter::repeat_n(arch.to_owned(), count));
    }
    Ok(gpus)
}

/// `sm_90@1` -> (`sm_90`, Some(1)); a malformed pin is an error of `term`.
fn split_pin<'a>(arch: &'a str, term: &str) -> Result<(&'a str, Option<u32>), GpuSpecError> {
    let Some((bare, index)) = arch.split_once('@') else {
        return Ok((arch, None));
    };
    let bad = || GpuSpecError::BadDevice {
        term: term.to_owned(),
    };
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let index = index.parse().map_err(|_| bad())?;
    Ok((bare, Some(index)))
}

/// One parsed entry's arch and device pin: `sm_90@1` -> (`sm_90`, Some(1)), `sm_90` -> (`sm_90`, None).
pub fn split_device(entry: &str) -> (&str, Option<u32>) {
    match entry.split_once('@') {
        Some((arch, index)) => (arch, index.parse().ok()),
        None => (entry, None),
    }
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
        assert_eq!(
            parse("sm_90@1+sm_90@0").unwrap_or_default(),
            ["sm_90@1", "sm_90@0"]
        );
        assert_eq!(split_device("sm_90@1"), ("sm_90", Some(1)));
        assert_eq!(split_device("sm_90"), ("sm_90", None));
    }

    #[test]
    fn rejects_malformed_device_pins() {
        for bad in [
            "sm_90@",
            "sm_90@x",
            "2xsm_90@1",
            "sm_90@1+sm_90@1",
            "sm90@1",
            "sm_90@-1",
        ] {
            assert!(parse(bad).is_err(), "{bad} should be rejected");
        }
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
        for spec in [
            "sm_90",
            "2xsm_90",
            "sm_86+sm_89",
            "sm_90+2xsm_120",
            "sm_90@1+sm_90@0",
        ] {
            let gpus = parse(spec).unwrap_or_default();
            assert_eq!(format(&gpus), spec);
        }
    }
}
