//! Which axes become rows, columns and separate tables, and in what order their values go.
//!
//! Defaults for the nightly matrix: rows are the first version-like axis (every value a PEP 440
//! version, e.g. `flashinfer`), columns the first GPU-like axis (`sm_90`, `2xsm_90`,
//! `sm_86+sm_89`), else the first two axes. The other keys split the cells into one table per
//! combination (model, engine), except keys that other keys already determine (what `include`
//! adds, such as a `workaround` that only the mixed-arch column has): those stay cell details.

use super::error::ReportError;
use crate::matrix::gpus;
use crate::matrix::template::value_text;
use crate::record::CellRecord;
use pep440_rs::Version;
use serde::Serialize;
use std::collections::HashMap;
use std::str::FromStr;

/// What the values of an axis look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AxisKind {
    /// PEP 440 versions, ordered as versions.
    Version,
    /// GPU specs (`sm_90`, `2xsm_90`, `sm_86+sm_89`), in the order the matrix gives.
    Gpu,
    /// Anything else, in the order the matrix gives.
    Other,
}

/// One key of the cells with its values in display order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Axis {
    pub name: String,
    pub kind: AxisKind,
    pub values: Vec<String>,
}

/// How the cells are laid out into tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Layout {
    pub rows: Option<String>,
    pub cols: Option<String>,
    /// Keys that split the cells into separate tables.
    pub groups: Vec<String>,
    /// Keys determined by the others (shown on cell pages, not as tables).
    pub details: Vec<String>,
    /// A key whose values hold the cells of different matrices (a replay of several recorded
    /// runs): each of its values gets rows, columns and tables of its own ([`split_key`]), and
    /// `rows`, `cols` and `groups` above are empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<String>,
}

/// A record's value of `key` as text; absent keys read as empty, as in templates.
pub(crate) fn value_of(record: &CellRecord, key: &str) -> String {
    record.values.get(key).map(value_text).unwrap_or_default()
}

fn is_version(text: &str) -> bool {
    Version::from_str(text).is_ok()
}

fn classify(values: &[String]) -> AxisKind {
    let present: Vec<&String> = values.iter().filter(|v| !v.is_empty()).collect();
    if present.is_empty() {
        return AxisKind::Other;
    }
    // A dot keeps integer axes (tp = 1, 2, 4) from passing as versions.
    if present.iter().all(|v| is_version(v)) && present.iter().any(|v| v.contains('.')) {
        return AxisKind::Version;
    }
    if present
        .iter()
        .all(|v| gpus::parse(v).is_ok_and(|g| !g.is_empty()))
    {
        return AxisKind::Gpu;
    }
    AxisKind::Other
}

/// The axes of `records` (plan keys first, in their order, then keys only records have), each
/// with its values in display order.
pub(crate) fn axes(records: &[&CellRecord], plan_keys: &[String]) -> Vec<Axis> {
    let mut names: Vec<String> = Vec::new();
    let mut known: HashMap<String, usize> = HashMap::new();
    for key in plan_keys {
        if !known.contains_key(key) {
            known.insert(key.clone(), names.len());
            names.push(key.clone());
        }
    }
    for record in records {
        for key in record.values.keys() {
            if !known.contains_key(key) {
                known.insert(key.clone(), names.len());
                names.push(key.clone());
            }
        }
    }
    let mut values: Vec<Vec<String>> = vec![Vec::new(); names.len()];
    let mut seen: Vec<std::collections::HashSet<String>> =
        vec![std::collections::HashSet::new(); names.len()];
    for record in records {
        for (i, name) in names.iter().enumerate() {
            let v = value_of(record, name);
            if seen[i].insert(v.clone()) {
                values[i].push(v);
            }
        }
    }
    names
        .into_iter()
        .zip(values)
        // Keys no record has (a plan key of cells that never ran) are not axes of the report.
        .filter(|(name, _)| records.iter().any(|r| r.values.contains_key(name)))
        .map(|(name, mut values)| {
            let kind = classify(&values);
            if kind == AxisKind::Version {
                // Empty values last; versions in PEP 440 order.
                values.sort_by_cached_key(|v| (v.is_empty(), Version::from_str(v).ok()));
            }
            Axis { name, kind, values }
        })
        .collect()
}

fn check(axes: &[Axis], flag: &'static str, wanted: &str) -> Result<String, ReportError> {
    if axes.iter().any(|a| a.name == wanted) {
        Ok(wanted.to_owned())
    } else {
        Err(ReportError::UnknownAxis {
            flag,
            axis: wanted.to_owned(),
            known: if axes.is_empty() {
                "no axes".to_owned()
            } else {
                axes.iter()
                    .map(|a| a.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        })
    }
}

/// Picks rows, columns and grouping keys.
pub(crate) fn choose(
    axes: &[Axis],
    records: &[&CellRecord],
    rows: Option<&str>,
    cols: Option<&str>,
) -> Result<Layout, ReportError> {
    let rows = rows.map(|r| check(axes, "rows", r)).transpose()?;
    let cols = cols.map(|c| check(axes, "cols", c)).transpose()?;
    if let (Some(r), Some(c)) = (&rows, &cols) {
        if r == c {
            return Err(ReportError::SameAxis(r.clone()));
        }
    }
    let taken = |name: &str, other: &Option<String>| other.as_deref() == Some(name);
    let varying = |a: &&Axis| a.values.len() > 1;
    let rows = rows.or_else(|| {
        axes.iter()
            .find(|a| a.kind == AxisKind::Version && !taken(&a.name, &cols))
            .map(|a| a.name.clone())
    });
    let cols = cols.or_else(|| {
        axes.iter()
            .find(|a| a.kind == AxisKind::Gpu && !taken(&a.name, &rows))
            .map(|a| a.name.clone())
    });
    // Fallbacks: rows take the first axis with more than one value (else the first axis);
    // columns the first other such axis that rows do not already determine (an `include` key
    // such as a log path that follows the row would only make a diagonal), else none.
    let rows = rows.or_else(|| {
        let free = |a: &&Axis| !taken(&a.name, &cols);
        axes.iter()
            .filter(free)
            .find(varying)
            .or_else(|| axes.iter().find(free))
            .map(|a| a.name.clone())
    });
    let cols = cols.or_else(|| {
        axes.iter()
            .filter(|a| !taken(&a.name, &rows))
            .filter(varying)
            .find(|a| match &rows {
                Some(r) => !determined(records, &a.name, &[r.as_str()]),
                None => true,
            })
            .map(|a| a.name.clone())
    });
    let rest: Vec<&Axis> = axes
        .iter()
        .filter(|a| !taken(&a.name, &rows) && !taken(&a.name, &cols))
        .collect();
    // From the last key back: a key determined by all the others is a detail, not a table.
    let mut groups: Vec<&str> = rest.iter().map(|a| a.name.as_str()).collect();
    let mut details = Vec::new();
    for axis in rest.iter().rev() {
        let others: Vec<&str> = rows
            .iter()
            .chain(cols.iter())
            .map(String::as_str)
            .chain(groups.iter().copied().filter(|g| *g != axis.name))
            .collect();
        if determined(records, &axis.name, &others) {
            groups.retain(|g| *g != axis.name);
            details.push(axis.name.clone());
        }
    }
    details.reverse();
    Ok(Layout {
        rows,
        cols,
        groups: groups.into_iter().map(str::to_owned).collect(),
        details,
        split: None,
    })
}

/// The key that splits `records` into the cells of different matrices, if one does: the first
/// axis (in order) such that another key, one the remaining keys do not determine (an axis of
/// its own, not a key `include` derives from others), varies within one of its groups and is
/// absent from every cell of another group. A replay of several recorded runs has one (the
/// recorded run: `kernels` varies within one recording and no cell of another has it); a
/// matrix, whose cells share its axes, has none. Keys with a different value in every cell
/// ([`id_like`]) determine everything and are left out of the question.
pub(crate) fn split_key(axes: &[Axis], records: &[&CellRecord]) -> Option<String> {
    let ids = id_like(axes, records);
    let axes: Vec<&Axis> = axes.iter().filter(|a| !ids.contains(&a.name)).collect();
    let free: Vec<&Axis> = axes
        .iter()
        .copied()
        .filter(|j| {
            let others: Vec<&str> = axes
                .iter()
                .filter(|a| a.name != j.name)
                .map(|a| a.name.as_str())
                .collect();
            j.values.len() > 1 && !determined(records, &j.name, &others)
        })
        .collect();
    axes.iter()
        .filter(|a| a.values.len() > 1)
        .find(|k| splits(k, &free, records))
        .map(|k| k.name.clone())
}

fn splits(key: &Axis, axes: &[&Axis], records: &[&CellRecord]) -> bool {
    let mut groups: HashMap<String, Vec<&CellRecord>> = HashMap::new();
    for record in records {
        groups
            .entry(value_of(record, &key.name))
            .or_default()
            .push(record);
    }
    axes.iter().filter(|j| j.name != key.name).any(|j| {
        let varies = groups.values().any(|members| {
            let mut seen = std::collections::HashSet::new();
            members
                .iter()
                .map(|r| value_of(r, &j.name))
                .filter(|v| !v.is_empty())
                .any(|v| seen.insert(v) && seen.len() > 1)
        });
        let absent = groups
            .values()
            .any(|members| members.iter().all(|r| !r.values.contains_key(&j.name)));
        varies && absent
    })
}

/// Keys with a different value in every one of several cells (a recorded cell's `RUN/CELL`)
/// while another key varies: as rows they would make a one-column list of every cell, so within
/// one matrix of a split they are cell details.
pub(crate) fn id_like(axes: &[Axis], records: &[&CellRecord]) -> Vec<String> {
    if records.len() < 2 {
        return Vec::new();
    }
    let is_id = |a: &Axis| {
        let values: std::collections::HashSet<String> =
            records.iter().map(|r| value_of(r, &a.name)).collect();
        values.len() == records.len()
    };
    let ids: Vec<&Axis> = axes.iter().filter(|a| is_id(a)).collect();
    let others_vary = axes
        .iter()
        .any(|a| a.values.len() > 1 && !ids.iter().any(|i| i.name == a.name));
    if others_vary {
        ids.into_iter().map(|a| a.name.clone()).collect()
    } else if ids.len() >= 2 {
        // Every varying key is different in every cell (two cells of a recording that differ in
        // one value: the `RUN/CELL` key and that value): the later keys are the values to lay
        // out, the first (in axis order, where a replay puts its `RUN/CELL` key) the id.
        vec![ids[0].name.clone()]
    } else {
        Vec::new()
    }
}

/// Whether the value of `key` is a function of the values of `others` over `records`.
fn determined(records: &[&CellRecord], key: &str, others: &[&str]) -> bool {
    let mut seen: HashMap<Vec<String>, String> = HashMap::with_capacity(records.len());
    for record in records {
        let context: Vec<String> = others.iter().map(|k| value_of(record, k)).collect();
        let value = value_of(record, key);
        match seen.get(&context) {
            Some(existing) if *existing != value => return false,
            Some(_) => {}
            None => {
                seen.insert(context, value);
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Status;

    fn record(id: &str, values: serde_json::Value) -> CellRecord {
        serde_json::from_value(serde_json::json!({
            "id": id, "values": values, "pins": [], "status": Status::Pass, "signature": null,
            "phase": null, "duration_s": 1.0, "attempts": 1, "log": ""
        }))
        .expect("record")
    }

    fn split_of(records: &[CellRecord]) -> Option<String> {
        let refs: Vec<&CellRecord> = records.iter().collect();
        split_key(&axes(&refs, &[]), &refs)
    }

    /// Two recorded runs replayed together: `run` holds two matrices (each with its own axes);
    /// `recorded`, different in every cell, splits nothing.
    #[test]
    fn a_replay_of_two_recorded_runs_splits_by_run() {
        let mut records = Vec::new();
        for v in ["0.6.3", "0.6.11"] {
            for k in ["moe", "core"] {
                let recorded = format!("kernels/{v}-{k}");
                records.push(record(
                    &recorded,
                    serde_json::json!({"recorded": recorded, "run": "kernels", "flashinfer": v, "kernels": k}),
                ));
            }
        }
        for (arch, mode) in [("native", "ok"), ("8.6", "ok"), ("native", "hang")] {
            let recorded = format!("smoke/{arch}-{mode}");
            records.push(record(
                &recorded,
                serde_json::json!({"recorded": recorded, "run": "smoke", "arch": arch, "mode": mode}),
            ));
        }
        assert_eq!(split_of(&records).as_deref(), Some("run"));
    }

    /// One matrix whose `include` adds a key to some cells (`cc` follows `arch`, and the hang
    /// cells lack it) is not split: `cc` is derived, not an axis of its own.
    #[test]
    fn a_key_that_include_adds_to_some_cells_splits_nothing() {
        let mut records = Vec::new();
        for (arch, mode, cc) in [
            ("native", "ok", Some("90")),
            ("8.6", "ok", Some("86")),
            ("native", "bad", Some("90")),
            ("8.6", "bad", Some("86")),
            ("native", "hang", None),
        ] {
            let mut values = serde_json::json!({"arch": arch, "mode": mode});
            if let Some(cc) = cc {
                values["cc"] = serde_json::Value::from(cc);
            }
            records.push(record(&format!("{arch}-{mode}"), values));
        }
        assert_eq!(split_of(&records), None);
        // Nor is a plain product matrix.
        let product: Vec<CellRecord> = ["a", "b"]
            .iter()
            .flat_map(|x| {
                ["1", "2"].map(|y| record(&format!("{x}{y}"), serde_json::json!({"x": x, "y": y})))
            })
            .collect();
        assert_eq!(split_of(&product), None);
    }
}
