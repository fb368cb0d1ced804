//! Short content hashes for names: cache folders, environments, file stems, ids, tokens.

use sha2::{Digest, Sha256};

/// The first `bytes` bytes of the sha256 of `data`, as lowercase hex (two digits a byte; 32
/// bytes is the whole hash).
pub fn sha256_hex(data: &[u8], bytes: usize) -> String {
    Sha256::digest(data)[..bytes]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The whole sha256 of a file's bytes, as lowercase hex, read in pieces (engine bundles are tens
/// of megabytes).
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_of_the_known_hash() {
        // sha256("abc") = ba7816bf8f01cfea...
        assert_eq!(sha256_hex(b"abc", 4), "ba7816bf");
        assert_eq!(sha256_hex(b"abc", 32).len(), 64);
    }
}
