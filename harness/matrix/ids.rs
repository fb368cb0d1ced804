//! Cell ids: readable, stable, unique, and safe in file names and on command lines.
//!
//! An id is the cell's identifying values joined by `-` in key order (`0.6.3-sm_86_sm_89-sglang`):
//! its axis values, or all its values for a cell that an `include` entry created. Adding a value
//! to one axis leaves every existing cell's id unchanged. Characters outside
//! `[A-Za-z0-9._-]` become `_`; a boolean reads as its key (`workaround` / `no-workaround`); a key
//! the cell lacks adds nothing. Cells whose readable ids collide get a short hash of their values.

use crate::record::Values;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// Ids longer than this are cut and given a hash, so they stay usable as file names.
const MAX_LEN: usize = 100;

/// Ids for every cell, in order; unique as long as the values are.
pub fn assign(cells: &[Values]) -> Vec<String> {
    let mut ids: Vec<String> = cells.iter().map(readable).collect();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for id in &ids {
        *seen.entry(id.as_str()).or_default() += 1;
    }
    let collides: Vec<bool> = ids.iter().map(|id| seen[id.as_str()] > 1).collect();
    for ((id, values), collide) in ids.iter_mut().zip(cells).zip(collides) {
        if collide {
            *id = format!("{id}-{}", short_hash(values));
        }
    }
    ids
}

/// The readable part of an id.
pub fn readable(values: &Values) -> String {
    let mut parts = Vec::new();
    for (key, value) in values {
        let part = match value {
            Value::Null => continue,
            Value::String(s) if s.is_empty() => continue,
            Value::Bool(true) => sanitize(key),
            Value::Bool(false) => format!("no-{}", sanitize(key)),
            Value::Object(map) => map
                .values()
                .map(|v| sanitize(&crate::matrix::template::value_text(v)))
                .collect::<Vec<_>>()
                .join("_"),
            other => sanitize(&crate::matrix::template::value_text(other)),
        };
        parts.push(part);
    }
    let id = parts.join("-");
    if id.is_empty() {
        return "cell".to_owned();
    }
    if id.len() > MAX_LEN {
        let mut cut = MAX_LEN - 9;
        while !id.is_char_boundary(cut) {
            cut -= 1;
        }
        return format!("{}-{}", &id[..cut], short_hash(values));
    }
    id
}

/// Whether `id` only uses the characters ids may use.
pub fn is_valid(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// First 8 hex digits of the sha256 of the values as canonical JSON (keys sorted).
fn short_hash(values: &Values) -> String {
    let sorted: std::collections::BTreeMap<_, _> = values.iter().collect();
    let canonical = serde_json::to_string(&sorted).unwrap_or_default();
    let digest = Sha256::digest(canonical.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(v: Value) -> Values {
        match v {
            Value::Object(map) => map,
            _ => Values::new(),
        }
    }

    #[test]
    fn readable_and_safe() {
        let id = readable(&values(
            json!({"fi": "0.6.8.post1", "gpu": "sm_86+sm_89", "wa": true, "cold": false, "tp": 2}),
        ));
        assert_eq!(id, "0.6.8.post1-sm_86_sm_89-wa-no-cold-2");
        assert!(is_valid(&id));
    }

    #[test]
    fn ids_survive_new_axis_values() {
        let a = values(json!({"fi": "0.6.3", "gpu": "sm_90"}));
        let before = assign(std::slice::from_ref(&a));
        let after = assign(&[a, values(json!({"fi": "0.6.11.post1", "gpu": "sm_90"}))]);
        assert_eq!(before[0], after[0]);
    }

    #[test]
    fn collisions_get_distinct_hashes() {
        let ids = assign(&[values(json!({"a": "x+y"})), values(json!({"a": "x_y"}))]);
        assert_ne!(ids[0], ids[1]);
        assert!(ids.iter().all(|id| id.starts_with("x_y-") && is_valid(id)));
    }

    #[test]
    fn long_ids_are_cut_with_a_hash() {
        let id = readable(&values(json!({"a": "x".repeat(300)})));
        assert!(id.len() <= MAX_LEN && is_valid(&id), "{id}");
    }
}
