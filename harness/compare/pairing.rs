//! Which baseline cell a candidate cell is compared with.
//!
//! A cell's id is made from its values, so a version bump on an axis renames every cell it
//! touches: `0.6.8-sm_90` becomes `0.6.11-sm_90`, and pairing by id alone would call the bump
//! "one new cell, one removed" and never a regression. Cells are therefore paired in two steps:
//!
//! 1. by id (the same values on both sides);
//! 2. the cells left over, by their values minus the *moved* keys: a key is moved when a value
//!    of it is gone from the candidate run and another has appeared, and a pair is made only
//!    when its two cells differ in moved keys alone, with the baseline's value one that is gone
//!    and the candidate's one that has appeared, and only one cell on each side fits (never a
//!    guess between several).
//!
//! `--pair-by KEY,...` pairs by those keys' values instead (every cell must be told apart by
//! them); `--pair-by id` keeps step 1 only. Pins that differ between paired cells are listed
//! as moved pins, so a comparison says what moved whichever way the bump was written.

use crate::record::CellRecord;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;

/// How the cells of two runs are paired.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PairBy {
    /// By id, then cells a bump renamed by their values minus the moved keys.
    #[default]
    Auto,
    /// By id only.
    Id,
    /// By the values of these keys.
    Keys(Vec<String>),
}

impl FromStr for PairBy {
    type Err = String;

    fn from_str(text: &str) -> Result<PairBy, String> {
        match text.trim() {
            "auto" => Ok(PairBy::Auto),
            "id" => Ok(PairBy::Id),
            keys => {
                let keys: Vec<String> = keys
                    .split(',')
                    .map(|k| k.trim().to_owned())
                    .filter(|k| !k.is_empty())
                    .collect();
                if keys.is_empty() {
                    return Err("say `auto`, `id`, or the keys to pair by (`model,gpu`)".into());
                }
                Ok(PairBy::Keys(keys))
            }
        }
    }
}

/// A key whose values differ between the runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub key: String,
    /// Values only the baseline has.
    pub base: Vec<String>,
    /// Values only the candidate has.
    pub head: Vec<String>,
}

/// A package pinned at another version in a paired cell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MovedPin {
    pub package: String,
    pub base: Option<String>,
    pub head: Option<String>,
}

/// How two runs were paired, and what moved between them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Pairing {
    /// `auto`, `id` or `keys`.
    pub by: String,
    /// `--pair-by` keys, when given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Keys whose values moved between the runs.
    pub moved: Vec<Moved>,
    /// Packages whose pins differ in paired cells.
    pub pins: Vec<MovedPin>,
    /// Pairs of cells with different ids (renamed by the bump).
    pub renamed: usize,
}

impl Pairing {
    /// One line for people: what moved, or nothing when nothing did.
    pub fn describe(&self) -> Option<String> {
        let mut parts: Vec<String> = self
            .moved
            .iter()
            .map(|m| format!("{} {} -> {}", m.key, m.base.join("/"), m.head.join("/")))
            .collect();
        parts.extend(self.pins.iter().map(|p| {
            format!(
                "{} {} -> {}",
                p.package,
                p.base.as_deref().unwrap_or("(none)"),
                p.head.as_deref().unwrap_or("(none)")
            )
        }));
        if parts.is_empty() {
            return None;
        }
        let renamed = match self.renamed {
            0 => String::new(),
            n => format!(" ({n} cell(s) paired across the rename)"),
        };
        Some(format!("moved: {}{renamed}", parts.join(", ")))
    }
}

/// `--pair-by` keys that do not tell cells apart.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    #[error(
        "`--pair-by {keys}`: {count} cells of the {side} run have the same values for these keys ({first}, {second}); add keys that tell them apart"
    )]
    Ambiguous {
        keys: String,
        side: &'static str,
        count: usize,
        first: String,
        second: String,
    },
}

pub(crate) type Pairs<'a> = Vec<(Option<&'a CellRecord>, Option<&'a CellRecord>)>;

/// Leftover cells with the same unmoved values: (baseline indexes, candidate indexes).
type Groups = HashMap<Vec<(String, String)>, (Vec<usize>, Vec<usize>)>;

/// The text of a value (strings unquoted).
pub(crate) fn value_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Pairs the records of two runs.
pub(crate) fn pair<'a>(
    base: &[&'a CellRecord],
    head: &[&'a CellRecord],
    by: &PairBy,
) -> Result<(Pairs<'a>, Pairing), PairError> {
    let moved = moved_keys(base, head);
    let (pairs, by_name, keys) = match by {
        PairBy::Keys(keys) => (by_keys(base, head, keys)?, "keys", keys.clone()),
        PairBy::Id => (by_id(base, head, None), "id", Vec::new()),
        PairBy::Auto => (by_id(base, head, Some(&moved)), "auto", Vec::new()),
    };
    let renamed = pairs
        .iter()
        .filter(|(b, h)| matches!((b, h), (Some(b), Some(h)) if b.id != h.id))
        .count();
    let pins = moved_pins(&pairs);
    Ok((
        pairs,
        Pairing {
            by: by_name.to_owned(),
            keys,
            moved,
            pins,
            renamed,
        },
    ))
}

/// Keys with a value gone from the candidate and another new in it, in key order.
fn moved_keys(base: &[&CellRecord], head: &[&CellRecord]) -> Vec<Moved> {
    let values = |records: &[&CellRecord]| {
        let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in records {
            for (k, v) in &r.values {
                map.entry(k.clone()).or_default().insert(value_text(v));
            }
        }
        map
    };
    let (b, h) = (values(base), values(head));
    let mut moved = Vec::new();
    for (key, base_values) in &b {
        let Some(head_values) = h.get(key) else {
            continue;
        };
        let gone: Vec<String> = base_values.difference(head_values).cloned().collect();
        let came: Vec<String> = head_values.difference(base_values).cloned().collect();
        if !gone.is_empty() && !came.is_empty() {
            moved.push(Moved {
                key: key.clone(),
                base: gone,
                head: came,
            });
        }
    }
    moved
}

/// By id; then, with `moved`, the leftovers by their values minus the moved keys.
fn by_id<'a>(
    base: &[&'a CellRecord],
    head: &[&'a CellRecord],
    moved: Option<&[Moved]>,
) -> Pairs<'a> {
    let head_ids: HashMap<&str, &CellRecord> = head.iter().map(|r| (r.id.as_str(), *r)).collect();
    let base_ids: HashMap<&str, &CellRecord> = base.iter().map(|r| (r.id.as_str(), *r)).collect();
    let mut pairs: Pairs<'a> = Vec::new();
    let mut base_left = Vec::new();
    for b in base {
        match head_ids.get(b.id.as_str()) {
            Some(h) => pairs.push((Some(*b), Some(*h))),
            None => base_left.push(*b),
        }
    }
    let mut head_left: Vec<&CellRecord> = head
        .iter()
        .filter(|h| !base_ids.contains_key(h.id.as_str()))
        .copied()
        .collect();
    if let Some(moved) = moved.filter(|m| !m.is_empty()) {
        let renamed = |r: &CellRecord, side: fn(&Moved) -> &Vec<String>| {
            moved.iter().any(|m| {
                r.values
                    .get(&m.key)
                    .is_some_and(|v| side(m).contains(&value_text(v)))
            })
        };
        let rest = |r: &CellRecord| -> Vec<(String, String)> {
            r.values
                .iter()
                .filter(|(k, _)| !moved.iter().any(|m| &m.key == *k))
                .map(|(k, v)| (k.clone(), value_text(v)))
                .collect()
        };
        let mut groups: Groups = HashMap::new();
        for (i, b) in base_left.iter().enumerate() {
            if renamed(b, |m| &m.base) {
                groups.entry(rest(b)).or_default().0.push(i);
            }
        }
        for (i, h) in head_left.iter().enumerate() {
            if renamed(h, |m| &m.head) {
                groups.entry(rest(h)).or_default().1.push(i);
            }
        }
        let mut taken_base = vec![false; base_left.len()];
        let mut taken_head = vec![false; head_left.len()];
        for (b, h) in groups.values() {
            if let ([b], [h]) = (b.as_slice(), h.as_slice()) {
                pairs.push((Some(base_left[*b]), Some(head_left[*h])));
                taken_base[*b] = true;
                taken_head[*h] = true;
            }
        }
        base_left = base_left
            .into_iter()
            .zip(taken_base)
            .filter_map(|(r, taken)| (!taken).then_some(r))
            .collect();
        head_left = head_left
            .into_iter()
            .zip(taken_head)
            .filter_map(|(r, taken)| (!taken).then_some(r))
            .collect();
    }
    pairs.extend(base_left.into_iter().map(|b| (Some(b), None)));
    pairs.extend(head_left.into_iter().map(|h| (None, Some(h))));
    pairs
}

/// By the values of `keys`; every cell must be alone with its values on its side.
fn by_keys<'a>(
    base: &[&'a CellRecord],
    head: &[&'a CellRecord],
    keys: &[String],
) -> Result<Pairs<'a>, PairError> {
    let key_of = |r: &CellRecord| -> Vec<Option<String>> {
        keys.iter()
            .map(|k| r.values.get(k).map(value_text))
            .collect()
    };
    let index = |records: &[&'a CellRecord],
                 side: &'static str|
     -> Result<BTreeMap<Vec<Option<String>>, &'a CellRecord>, PairError> {
        let mut map: BTreeMap<Vec<Option<String>>, &'a CellRecord> = BTreeMap::new();
        for r in records {
            if let Some(other) = map.insert(key_of(r), *r) {
                return Err(PairError::Ambiguous {
                    keys: keys.join(","),
                    side,
                    count: records.iter().filter(|x| key_of(x) == key_of(r)).count(),
                    first: other.id.clone(),
                    second: r.id.clone(),
                });
            }
        }
        Ok(map)
    };
    let b = index(base, "baseline")?;
    let mut h = index(head, "candidate")?;
    let mut pairs: Pairs<'a> = Vec::new();
    for (key, record) in b {
        pairs.push((Some(record), h.remove(&key)));
    }
    pairs.extend(h.into_values().map(|r| (None, Some(r))));
    Ok(pairs)
}

/// Packages pinned differently in paired cells, each (package, base, head) once.
fn moved_pins(pairs: &Pairs<'_>) -> Vec<MovedPin> {
    let split = |pin: &str| -> (String, String) {
        match pin.split_once("==") {
            Some((n, v)) => (
                n.trim().to_ascii_lowercase().replace('_', "-"),
                v.trim().to_owned(),
            ),
            None => (pin.trim().to_ascii_lowercase(), String::new()),
        }
    };
    let mut out: BTreeSet<MovedPin> = BTreeSet::new();
    for (b, h) in pairs {
        let (Some(b), Some(h)) = (b, h) else {
            continue;
        };
        let bp: BTreeMap<String, String> = b.pins.iter().map(|p| split(p)).collect();
        let hp: BTreeMap<String, String> = h.pins.iter().map(|p| split(p)).collect();
        let names: BTreeSet<&String> = bp.keys().chain(hp.keys()).collect();
        for name in names {
            let (bv, hv) = (bp.get(name), hp.get(name));
            if bv != hv {
                out.insert(MovedPin {
                    package: name.clone(),
                    base: bv.cloned(),
                    head: hv.cloned(),
                });
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Metrics, Runner, Status};
    use serde_json::json;

    fn rec(fi: &str, gpu: &str, pins: &[&str]) -> CellRecord {
        let mut values = crate::record::Values::new();
        values.insert("flashinfer".into(), json!(fi));
        values.insert("gpu".into(), json!(gpu));
        CellRecord {
            id: format!("{fi}-{gpu}"),
            values,
            pins: pins.iter().map(|p| (*p).to_owned()).collect(),
            status: Status::Pass,
            signature: None,
            phase: None,
            duration_s: 1.0,
            attempts: 1,
            log: String::new(),
            metrics: Metrics::default(),
            runner: Runner::default(),
            fingerprint: None,
            line: None,
            excerpt: None,
            decided_by: None,
            evidence: Vec::new(),
            exit: None,
            spurious: false,
            reason: None,
            expectation: None,
            started_at: None,
            leaked: 0,
            hang: None,
            format_version: 1,
        }
    }

    fn ids(pairs: &Pairs<'_>) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = pairs
            .iter()
            .map(|(b, h)| {
                (
                    b.map_or("-".into(), |r| r.id.clone()),
                    h.map_or("-".into(), |r| r.id.clone()),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// The bump renames the cells; auto pairs them by the values that did not move and says
    /// which axis moved; by id they stay apart.
    #[test]
    fn a_bumped_axis_pairs_renamed_cells() {
        let base = [
            rec("0.6.8", "sm_90", &["flashinfer-python==0.6.8"]),
            rec("0.6.8", "sm_86", &["flashinfer-python==0.6.8"]),
            rec("0.6.3", "sm_90", &["flashinfer-python==0.6.3"]),
        ];
        let head = [
            rec("0.6.11", "sm_90", &["flashinfer-python==0.6.11"]),
            rec("0.6.11", "sm_86", &["flashinfer-python==0.6.11"]),
            rec("0.6.3", "sm_90", &["flashinfer-python==0.6.3"]),
        ];
        let (b, h): (Vec<_>, Vec<_>) = (base.iter().collect(), head.iter().collect());
        let (pairs, pairing) = pair(&b, &h, &PairBy::Auto).unwrap();
        assert_eq!(
            ids(&pairs),
            [
                ("0.6.3-sm_90".into(), "0.6.3-sm_90".into()),
                ("0.6.8-sm_86".into(), "0.6.11-sm_86".into()),
                ("0.6.8-sm_90".into(), "0.6.11-sm_90".into()),
            ]
        );
        assert_eq!(pairing.renamed, 2);
        assert_eq!(pairing.moved.len(), 1);
        assert_eq!(pairing.moved[0].key, "flashinfer");
        assert_eq!(pairing.moved[0].base, ["0.6.8"]);
        assert_eq!(pairing.moved[0].head, ["0.6.11"]);
        assert_eq!(
            pairing.pins,
            [MovedPin {
                package: "flashinfer-python".into(),
                base: Some("0.6.8".into()),
                head: Some("0.6.11".into())
            }]
        );
        let line = pairing.describe().unwrap();
        assert!(line.contains("flashinfer 0.6.8 -> 0.6.11"), "{line}");

        let (pairs, _) = pair(&b, &h, &PairBy::Id).unwrap();
        assert_eq!(pairs.len(), 5, "by id: 1 pair, 2 removed, 2 new");
    }

    /// A cell dropped from the matrix while another value of the same axis stays is not paired
    /// with a cell that merely differs: no value appeared, so nothing moved.
    #[test]
    fn a_removed_cell_is_not_paired_with_a_stranger() {
        let base = [rec("0.6.8", "sm_90", &[]), rec("0.6.3", "sm_90", &[])];
        let head = [rec("0.6.3", "sm_90", &[]), rec("0.6.3", "sm_86", &[])];
        let (b, h): (Vec<_>, Vec<_>) = (base.iter().collect(), head.iter().collect());
        let (pairs, pairing) = pair(&b, &h, &PairBy::Auto).unwrap();
        assert_eq!(pairs.len(), 3);
        assert_eq!(pairing.renamed, 0);
        assert!(pairing.describe().is_none());
    }

    /// Two candidates for one baseline cell: never a guess.
    #[test]
    fn ambiguous_leftovers_stay_apart_and_pair_by_keys_says_why() {
        let base = [rec("0.6.8", "sm_90", &[])];
        let mut other = rec("0.6.12", "sm_90", &[]);
        other.id = "other".into();
        let head = [rec("0.6.11", "sm_90", &[]), other];
        let (b, h): (Vec<_>, Vec<_>) = (base.iter().collect(), head.iter().collect());
        let (pairs, _) = pair(&b, &h, &PairBy::Auto).unwrap();
        assert_eq!(pairs.len(), 3);
        let err = pair(&b, &h, &"gpu".parse().unwrap()).unwrap_err();
        assert!(
            err.to_string().contains("2 cells of the candidate run"),
            "{err}"
        );
        let (pairs, pairing) = pair(&b[..], &h[..1], &"gpu".parse().unwrap()).unwrap();
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairing.by, "keys");
    }
}
