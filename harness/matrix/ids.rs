//! Cell ids: readable, stable, unique, and safe in file names and on command lines.
//!
//! An id is the cell's identifying values joined by `-` in axis order (`0.6.3-sm_86_sm_89-sglang`).
//! The identifying values of a cell are its axis values, so keys that `include` adds (a model
//! path, engine flags) neither lengthen ids nor change them when edited. That holds for a cell an
//! `include` entry created too (its values for the axes it names), so it keeps its id if its
//! values later join the axes; only in a matrix without axes is a cell identified by all its
//! values. (The loader picks the identifying values; this module spells them.)
//!
//! Spelling: characters outside `[A-Za-z0-9._-]` become `_`; a boolean reads as its key
//! (`workaround` / `no-workaround`); a table reads as its values joined by `_`; an empty string or
//! a key the cell lacks adds nothing; an id that would start with `.` or `-` (a hidden file, an
//! option) gets a leading `_`. Ids longer than 100 characters are cut and end in a hash.
//!
//! Stability: an id depends only on the cell's own identifying values, so adding a value to an
//! axis, adding an axis value's neighbours, or adding keys with `include` never changes the id of
//! an existing cell. The one exception is a collision: when two cells would read the same
//! (ignoring case, since file systems may), the cell spelled exactly by its values keeps the
//! readable id and the others get `-` and 8 hex digits of a hash of their values; when no single
//! cell is spelled exactly, all of them get the hash. So `sm_86+sm_89` reads `sm_86_sm_89` until a
//! value `sm_86_sm_89` appears next to it. Adding a new *axis* gives every cell a new value and so
//! a new id: the old cells no longer exist (a run folder keyed by the old ids reads as a new
//! matrix), which is also what GitHub does with its job names.

use crate::digest::sha256_hex;
use crate::record::Values;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

/// Ids longer than this are cut and given a hash, so they stay usable as file names.
const MAX_LEN: usize = 100;

/// Ids for every cell, in order; unique even when two cells have the same values.
pub fn assign(cells: &[Values]) -> Vec<String> {
    let parts: Vec<Vec<(&str, &Value)>> = cells
        .iter()
        .map(|values| values.iter().map(|(k, v)| (k.as_str(), v)).collect())
        .collect();
    let parts: Vec<&[(&str, &Value)]> = parts.iter().map(Vec::as_slice).collect();
    assign_parts(&parts)
}

/// [`assign`] over borrowed `(key, value)` pairs, in key order.
pub fn assign_parts(cells: &[&[(&str, &Value)]]) -> Vec<String> {
    let (mut ids, exact): (Vec<String>, Vec<bool>) = cells.iter().map(|cell| spell(cell)).unzip();
    // Collisions ignore case: a case-insensitive file system would put both in one folder.
    let mut first: HashMap<Cow<'_, str>, usize> = HashMap::with_capacity(ids.len());
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for (index, id) in ids.iter().enumerate() {
        match first.entry(folded(id)) {
            Entry::Vacant(slot) => {
                slot.insert(index);
            }
            Entry::Occupied(slot) => groups
                .entry(*slot.get())
                .or_insert_with(|| vec![*slot.get()])
                .push(index),
        }
    }
    drop(first);
    let mut collided: Vec<usize> = Vec::new();
    for members in groups.into_values() {
        let mut exactly_spelled = members.iter().copied().filter(|&i| exact[i]);
        let keeps = match (exactly_spelled.next(), exactly_spelled.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        };
        collided.extend(members.into_iter().filter(|&i| Some(i) != keeps));
    }
    if collided.is_empty() {
        return ids;
    }
    for &i in &collided {
        ids[i] = format!("{}-{}", ids[i], short_hash(cells[i]));
    }
    // Cells with the same values (a duplicate the loader reports) still get distinct ids.
    let mut seen: HashSet<String> = ids.iter().map(|id| folded(id).into_owned()).collect();
    if seen.len() == ids.len() {
        return ids;
    }
    seen.clear();
    for id in &mut ids {
        if seen.insert(folded(id).into_owned()) {
            continue;
        }
        let mut n = 2;
        loop {
            let candidate = format!("{id}-{n}");
            if seen.insert(folded(&candidate).into_owned()) {
                *id = candidate;
                break;
            }
            n += 1;
        }
    }
    ids
}

/// The id lower-cased, borrowed when it already is.
fn folded(id: &str) -> Cow<'_, str> {
    if id.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(id.to_ascii_lowercase())
    } else {
        Cow::Borrowed(id)
    }
}

/// The id of one cell on its own (before any collision is resolved).
pub fn readable(values: &Values) -> String {
    let parts: Vec<(&str, &Value)> = values.iter().map(|(k, v)| (k.as_str(), v)).collect();
    spell(&parts).0
}

/// Whether `id` only uses the characters ids may use.
pub fn is_valid(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The readable id, and whether it spells the values exactly (nothing replaced, dropped or cut),
/// which decides who keeps the readable id when two cells collide.
fn spell(values: &[(&str, &Value)]) -> (String, bool) {
    let mut id = String::with_capacity(64);
    let mut exact = true;
    let separate = |id: &mut String| {
        if !id.is_empty() {
            id.push('-');
        }
    };
    for (key, value) in values {
        match value {
            Value::Null => exact = false,
            Value::String(s) if s.is_empty() => exact = false,
            Value::String(s) => {
                separate(&mut id);
                exact &= push_sanitized(&mut id, s);
            }
            Value::Bool(b) => {
                separate(&mut id);
                if !*b {
                    id.push_str("no-");
                }
                exact &= push_sanitized(&mut id, key);
            }
            Value::Number(n) => {
                separate(&mut id);
                id.push_str(&n.to_string());
            }
            Value::Object(_) | Value::Array(_) => {
                exact = false;
                let mut texts = Vec::new();
                leaves(value, &mut texts);
                if !texts.is_empty() {
                    separate(&mut id);
                    for (i, text) in texts.iter().enumerate() {
                        if i > 0 {
                            id.push('_');
                        }
                        push_sanitized(&mut id, text);
                    }
                }
            }
        }
    }
    if id.is_empty() {
        return ("cell".to_owned(), false);
    }
    if id.starts_with(['.', '-']) {
        id.insert(0, '_');
        exact = false;
    }
    if id.len() > MAX_LEN {
        let mut cut = MAX_LEN - 9;
        while !id.is_char_boundary(cut) {
            cut -= 1;
        }
        id.truncate(cut);
        id.push('-');
        id.push_str(&short_hash(values));
        return (id, false);
    }
    (id, exact)
}

/// The scalar texts of a table or array, depth first.
fn leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
        Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
        Value::Null => {}
        Value::String(s) if s.is_empty() => {}
        other => out.push(crate::matrix::template::value_text(other)),
    }
}

/// Appends `text` with every character ids may not use replaced by `_`; whether none was.
fn push_sanitized(id: &mut String, text: &str) -> bool {
    let mut clean = true;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            id.push(c);
        } else {
            clean = false;
            id.push('_');
        }
    }
    clean
}

/// First 8 hex digits of the sha256 of the values as canonical JSON (keys sorted).
fn short_hash(values: &[(&str, &Value)]) -> String {
    let sorted: std::collections::BTreeMap<&str, &Value> = values.iter().copied().collect();
    let canonical = serde_json::to_string(&sorted).unwrap_or_default();
    sha256_hex(canonical.as_bytes(), 4)
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
        let ids = assign(&[values(json!({"a": "x+y"})), values(json!({"a": "x y"}))]);
        assert_ne!(ids[0], ids[1]);
        assert!(ids.iter().all(|id| id.starts_with("x_y-") && is_valid(id)));
    }

    /// The cell spelled exactly by its values keeps its id when a colliding value appears.
    #[test]
    fn the_exact_spelling_keeps_its_id_on_a_collision() {
        let exact = values(json!({"gpu": "sm_86_sm_89"}));
        let before = assign(std::slice::from_ref(&exact));
        let after = assign(&[exact, values(json!({"gpu": "sm_86+sm_89"}))]);
        assert_eq!(before[0], "sm_86_sm_89");
        assert_eq!(after[0], "sm_86_sm_89");
        assert!(after[1].starts_with("sm_86_sm_89-") && after[1].len() == 20);
    }

    /// Case-insensitive file systems would put `Linux` and `linux` in one folder.
    #[test]
    fn ids_differing_only_in_case_collide() {
        let ids = assign(&[
            values(json!({"os": "Linux"})),
            values(json!({"os": "linux"})),
        ]);
        assert_ne!(ids[0].to_lowercase(), ids[1].to_lowercase());
    }

    #[test]
    fn identical_values_still_get_unique_ids() {
        let a = values(json!({"a": "x"}));
        let ids = assign(&[a.clone(), a.clone(), a]);
        assert_eq!(ids.len(), 3);
        assert_eq!(
            ids.iter().collect::<std::collections::HashSet<_>>().len(),
            3
        );
        assert!(ids.iter().all(|id| is_valid(id)));
    }

    #[test]
    fn hidden_and_option_like_ids_get_a_prefix() {
        assert_eq!(readable(&values(json!({"a": ".."}))), "_..");
        assert_eq!(readable(&values(json!({"a": -1}))), "_-1");
        assert_eq!(readable(&values(json!({"a": ""}))), "cell");
        assert_eq!(
            readable(&values(json!({"m": {"n": "q/w", "t": 2}}))),
            "q_w_2"
        );
    }

    #[test]
    fn long_ids_are_cut_with_a_hash() {
        let id = readable(&values(json!({"a": "x".repeat(300)})));
        assert!(id.len() <= MAX_LEN && is_valid(&id), "{id}");
        let wide = readable(&values(json!({"a": "é".repeat(300)})));
        assert!(wide.len() <= MAX_LEN && is_valid(&wide), "{wide}");
    }
}
