//! Property tests of the matrix parser and expansion (a fuzz target in spirit, run on every test
//! run with a modest number of cases):
//!
//! - `matrix::from_str` never panics, on arbitrary bytes or on near-TOML built from the pieces
//!   matrix files are made of, and every error it returns renders;
//! - `expand::expand` never panics and obeys GitHub's rules, checked against a naive
//!   re-implementation: original combinations are the filtered product in order, none matches an
//!   exclude entry, each include entry either extends originals or adds exactly one combination;
//! - ids are unique, use only `[A-Za-z0-9._-]`, and a cell keeps its id when an axis gains a value
//!   or an include entry adds keys.

use gpucompat::matrix::{self, expand, ids};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::path::Path;

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Failures print their minimal input; no regression files in the source tree.
        failure_persistence: Some(Box::new(FileFailurePersistence::Off)),
        ..Config::default()
    }
}

fn load(text: &str) -> Result<matrix::Loaded, matrix::LoadError> {
    matrix::from_str("prop.toml", text, Path::new("prop.toml"), Path::new("."))
}

/// Loads `text`; whatever happens must not panic, errors must render, plans must have valid,
/// unique ids.
fn load_anything(text: &str) {
    match load(text) {
        Ok(loaded) => {
            let mut seen = HashSet::new();
            for cell in &loaded.plan.cells {
                assert!(ids::is_valid(cell.id.as_str()), "{}", cell.id);
                assert!(
                    seen.insert(cell.id.as_str().to_ascii_lowercase()),
                    "{}",
                    cell.id
                );
            }
        }
        Err(err) => {
            let text = err.render();
            assert!(text.contains("error"), "{text}");
        }
    }
}

const HEADERS: &[&str] = &[
    "[matrix]",
    "[[matrix.include]]",
    "[[matrix.exclude]]",
    "[matrix.include]",
    "[job]",
    "[server]",
    "[resources]",
    "[env]",
    "[packages]",
    "[python]",
    "[retry]",
    "[[expect]]",
    "[[rules]]",
    "[expect]",
    "[matrix",
    "[[matrix.include]",
];

const KEYS: &[&str] = &[
    "a",
    "b",
    "gpu",
    "GPU",
    "flashinfer",
    "include",
    "exclude",
    "command",
    "comand",
    "timeout",
    "no-progress",
    "gpus",
    "when",
    "signature",
    "link",
    "reason",
    "tp",
    "workers",
    "engine",
    "count",
    "on",
    "\"quoted key\"",
    "x.y",
    "cache",
    "model",
    "args",
    "spec",
    "port",
    "pattern",
    "requirements",
    "find-links",
    "ready-line",
    "expect",
    "name",
    "A_B",
];

const VALUES: &[&str] = &[
    "\"sm_90\"",
    "\"2xsm_90\"",
    "\"sm_86+sm_89\"",
    "\"99xsm_90\"",
    "\"sm_86+\"",
    "\"{a}\"",
    "\"{a.b}\"",
    "\"{gpu}\"",
    "\"{port}\"",
    "\"{{a}}\"",
    "\"${X:-{a}}\"",
    "\"{ a; }\"",
    "[\"x\", \"y\"]",
    "[\"X\", \"x\", \"x\"]",
    "[1, 2, \"2\"]",
    "[]",
    "[{ a = 1 }, { a = 1, b = 2 }]",
    "[[1]]",
    "{ a = \"x\" }",
    "{ gpu = [\"sm_90\", \"sm_110\"], flashinfer = \"<=0.6.8\" }",
    "{}",
    "1",
    "-1",
    "0x10",
    "99999999999999999999",
    "3.10",
    "nan",
    "true",
    "false",
    "1979-05-27",
    "\"30m\"",
    "\"0s\"",
    "\"1h 30m\"",
    "\"<=0.6.8.post1\"",
    "\">=banana\"",
    "\"https://github.com/x/y/issues/1\"",
    "\"unsupported_config\"",
    "[\"collective_timeout\", \"nope\"]",
    "\"job\"",
    "\"server\"",
    "\"vllm\"",
    "\"(unclosed\"",
    "\"é\\u00e9\"",
    "\"\"",
    "'lit'",
    "\"\"\"multi\nline {a}\"\"\"",
    "\"cold\"",
];

/// One line of a near-TOML file.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(HEADERS).prop_map(str::to_owned),
        6 => (prop::sample::select(KEYS), prop::sample::select(VALUES))
            .prop_map(|(k, v)| format!("{k} = {v}")),
        1 => "[ -~]{0,20}",
        1 => Just(String::new()),
    ]
}

/// A near-TOML file, maybe with one character inserted or removed somewhere.
fn near_toml() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(line(), 0..30),
        any::<Option<(prop::sample::Index, char)>>(),
        any::<Option<prop::sample::Index>>(),
    )
        .prop_map(|(lines, insert, remove)| {
            let mut text = lines.join("\n");
            if let Some((at, c)) = insert {
                let at = floor_boundary(&text, at.index(text.len() + 1));
                text.insert(at, c);
            }
            if let Some(at) = remove {
                if !text.is_empty() {
                    let at = floor_boundary(&text, at.index(text.len()));
                    text.remove(at);
                }
            }
            text
        })
}

/// A file of well-formed sections (a header, then distinct keys), so that most inputs get past
/// the TOML parser into validation and expansion.
fn sectioned() -> impl Strategy<Value = String> {
    let section = (
        prop::sample::select(&HEADERS[..13]),
        prop::collection::vec(
            (prop::sample::select(KEYS), prop::sample::select(VALUES)),
            0..6,
        ),
    );
    prop::collection::vec(section, 0..8).prop_map(|sections| {
        let mut text = String::new();
        let mut seen_tables = HashSet::new();
        for (header, pairs) in sections {
            // A plain `[table]` may appear once.
            if !header.starts_with("[[") && !seen_tables.insert(header) {
                continue;
            }
            text.push_str(header);
            text.push('\n');
            let mut keys = HashSet::new();
            for (key, value) in pairs {
                if keys.insert(key) && !key.contains('.') {
                    text.push_str(&format!("{key} = {value}\n"));
                }
            }
        }
        text
    })
}

/// Real matrix files with a few edits: a value replaced, a line dropped or repeated, a line
/// added, a character inserted.
fn mutated_seed() -> impl Strategy<Value = String> {
    const SEEDS: &[&str] = &[
        include_str!("../fixtures/matrices/good-features.toml"),
        include_str!("../../matrices/nightly.toml"),
        include_str!("../fixtures/matrices/bad-many.toml"),
    ];
    #[derive(Debug, Clone)]
    enum Edit {
        Value(prop::sample::Index, &'static str),
        Drop(prop::sample::Index),
        Repeat(prop::sample::Index),
        Add(prop::sample::Index, String),
        Char(prop::sample::Index, char),
    }
    let edit = prop_oneof![
        4 => (any::<prop::sample::Index>(), prop::sample::select(VALUES)).prop_map(|(i, v)| Edit::Value(i, v)),
        2 => any::<prop::sample::Index>().prop_map(Edit::Drop),
        1 => any::<prop::sample::Index>().prop_map(Edit::Repeat),
        2 => (any::<prop::sample::Index>(), line()).prop_map(|(i, l)| Edit::Add(i, l)),
        1 => (any::<prop::sample::Index>(), any::<char>()).prop_map(|(i, c)| Edit::Char(i, c)),
    ];
    (
        prop::sample::select(SEEDS),
        prop::collection::vec(edit, 1..4),
    )
        .prop_map(|(seed, edits)| {
            let mut lines: Vec<String> = seed.lines().map(str::to_owned).collect();
            for edit in edits {
                if lines.is_empty() {
                    break;
                }
                match edit {
                    Edit::Value(i, value) => {
                        let at = i.index(lines.len());
                        let line = &mut lines[at];
                        if let Some((key, _)) = line.split_once(" = ") {
                            *line = format!("{key} = {value}");
                        }
                    }
                    Edit::Drop(i) => {
                        lines.remove(i.index(lines.len()));
                    }
                    Edit::Repeat(i) => {
                        let at = i.index(lines.len());
                        lines.insert(at, lines[at].clone());
                    }
                    Edit::Add(i, line) => lines.insert(i.index(lines.len() + 1), line),
                    Edit::Char(i, c) => {
                        let at = i.index(lines.len());
                        let line = &mut lines[at];
                        let at = floor_boundary(line, line.len() / 2);
                        line.insert(at, c);
                    }
                }
            }
            lines.join("\n")
        })
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A small value of the kinds matrix files hold (plus strings that collide once sanitized or
/// compared loosely).
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        prop::sample::select(&["a", "b", "A", "1", "x+y", "x_y", "", "-", ".", "0.6.3"][..])
            .prop_map(|s| json!(s)),
        (0i64..3).prop_map(|n| json!(n)),
        any::<bool>().prop_map(|b| json!(b)),
    ];
    leaf.prop_recursive(2, 6, 3, |inner| {
        prop::collection::vec((prop::sample::select(&["k", "l", "K"][..]), inner), 0..3).prop_map(
            |fields| {
                Value::Object(
                    fields
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            },
        )
    })
}

fn entry(keys: &'static [&'static str]) -> impl Strategy<Value = expand::Entry> {
    prop::collection::vec((prop::sample::select(keys), value()), 0..4).prop_map(|pairs| {
        let mut entry: expand::Entry = Vec::new();
        for (key, value) in pairs {
            // TOML tables have unique keys.
            if !entry.iter().any(|(k, _)| k == key) {
                entry.push((key.to_owned(), value));
            }
        }
        entry
    })
}

type Matrix = (Vec<expand::Axis>, Vec<expand::Entry>, Vec<expand::Entry>);

fn small_matrix() -> impl Strategy<Value = Matrix> {
    let axes = prop::collection::vec(prop::collection::vec(value(), 0..4), 0..4).prop_map(|axes| {
        axes.into_iter()
            .enumerate()
            .map(|(i, values)| (["a", "b", "c", "d"][i].to_owned(), values))
            .collect::<Vec<_>>()
    });
    (
        axes,
        prop::collection::vec(entry(&["a", "b", "c", "d", "z"]), 0..3),
        prop::collection::vec(entry(&["a", "b", "c", "d", "e", "f"]), 0..4),
    )
}

/// Does `entry` (as an exclude, or the axis part of an include) match axis values `combo`?
fn entry_matches(axes: &[expand::Axis], combo: &[&Value], entry: &expand::Entry) -> bool {
    entry.iter().all(|(key, filter)| {
        let value = axes
            .iter()
            .position(|(name, _)| name == key)
            .map(|i| combo[i]);
        expand::filter_matches(filter, value)
    })
}

/// The cross product, first axis slowest, written the obvious way.
fn naive_product(axes: &[expand::Axis]) -> Vec<Vec<&Value>> {
    if axes.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Vec<&Value>> = vec![Vec::new()];
    for (_, values) in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut next = prefix.clone();
                    next.push(v);
                    next
                })
            })
            .collect();
    }
    out
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn from_str_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        load_anything(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn from_str_never_panics_on_near_toml(text in near_toml()) {
        load_anything(&text);
    }

    #[test]
    fn from_str_never_panics_on_sectioned_toml(text in sectioned()) {
        load_anything(&text);
    }

    #[test]
    fn expansion_follows_githubs_rules((axes, exclude, include) in small_matrix()) {
        let combos = expand::expand(&axes, &exclude, &include).expect("small matrices expand");
        let is_axis = |key: &str| axes.iter().any(|(name, _)| name == key);

        // Originals: the product, minus what any exclude entry matches, in product order, with
        // the axes first and their values untouched.
        let expected: Vec<Vec<&Value>> = naive_product(&axes)
            .into_iter()
            .filter(|combo| !exclude.iter().any(|e| entry_matches(&axes, combo, e)))
            .collect();
        let originals: Vec<&expand::Combination<'_>> =
            combos.iter().filter(|c| c.created_by.is_none()).collect();
        prop_assert_eq!(originals.len(), expected.len());
        for (combo, values) in originals.iter().zip(&expected) {
            let axis_values: Vec<&Value> =
                combo.values[..axes.len()].iter().map(|(_, v, _)| *v).collect();
            prop_assert_eq!(&axis_values, values);
            let keys: Vec<&str> = combo.keys().take(axes.len()).collect();
            let names: Vec<&str> = axes.iter().map(|(n, _)| n.as_str()).collect();
            prop_assert_eq!(keys, names);
            // No surviving original matches an exclude entry.
            prop_assert!(!exclude.iter().any(|e| entry_matches(&axes, values, e)));
        }
        // Originals come first; created combinations after, one per unmatched include entry,
        // in include order.
        let first_created = combos.iter().position(|c| c.created_by.is_some()).unwrap_or(combos.len());
        prop_assert!(combos[first_created..].iter().all(|c| c.created_by.is_some()));
        let unmatched: Vec<usize> = include
            .iter()
            .enumerate()
            .filter(|(_, entry)| {
                let filter: expand::Entry =
                    entry.iter().filter(|(k, _)| is_axis(k)).cloned().collect();
                !expected.iter().any(|combo| entry_matches(&axes, combo, &filter))
            })
            .map(|(i, _)| i)
            .collect();
        let created: Vec<usize> = combos.iter().filter_map(|c| c.created_by).collect();
        prop_assert_eq!(&created, &unmatched);
        // A created combination holds exactly its entry's values.
        for combo in combos.iter().filter(|c| c.created_by.is_some()) {
            let entry = &include[combo.created_by.unwrap_or_default()];
            prop_assert_eq!(combo.values.len(), entry.len());
            for (key, value) in entry {
                prop_assert_eq!(combo.get(key), Some(value));
            }
        }
        // Each original holds, for every non-axis key, the value of the last include entry that
        // matched it and set that key, and no other keys.
        for (combo, values) in originals.iter().zip(&expected) {
            let mut set_by_includes: Vec<&str> = include
                .iter()
                .filter(|entry| {
                    let filter: expand::Entry =
                        entry.iter().filter(|(k, _)| is_axis(k)).cloned().collect();
                    entry_matches(&axes, values, &filter)
                })
                .flat_map(|entry| entry.iter().map(|(k, _)| k.as_str()).filter(|k| !is_axis(k)))
                .collect();
            set_by_includes.sort_unstable();
            set_by_includes.dedup();
            let mut extra_keys: Vec<&str> = combo.keys().skip(axes.len()).collect();
            extra_keys.sort_unstable();
            prop_assert_eq!(extra_keys, set_by_includes);
            for (key, value, _) in &combo.values[axes.len()..] {
                let last = include
                    .iter()
                    .filter(|entry| {
                        let filter: expand::Entry =
                            entry.iter().filter(|(k, _)| is_axis(k)).cloned().collect();
                        entry_matches(&axes, values, &filter)
                    })
                    .filter_map(|entry| entry.iter().find(|(k, _)| k == key))
                    .next_back()
                    .map(|(_, v)| v);
                prop_assert_eq!(last, Some(*value));
            }
        }
        // Ids over all combinations are unique and valid.
        let plain: Vec<Map<String, Value>> = combos.iter().map(|c| c.plain()).collect();
        let assigned = ids::assign(&plain);
        let unique: HashSet<String> = assigned.iter().map(|id| id.to_ascii_lowercase()).collect();
        prop_assert_eq!(unique.len(), assigned.len());
        prop_assert!(assigned.iter().all(|id| ids::is_valid(id)));
    }
}

/// A matrix file with `axes` (name, values) and include entries `extras` (axis value to match,
/// key, value), every value a plain lowercase word, so no two cells can spell the same id.
fn matrix_file(axes: &[(String, Vec<String>)], extras: &[(usize, usize, String)]) -> String {
    let mut text = String::from("[job]\ncommand = \"true\"\n\n[matrix]\n");
    for (name, values) in axes {
        let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
        text.push_str(&format!("{name} = [{}]\n", quoted.join(", ")));
    }
    for (i, (axis, value, extra)) in extras.iter().enumerate() {
        let (name, values) = &axes[axis % axes.len()];
        let matched = &values[value % values.len()];
        text.push_str(&format!(
            "[[matrix.include]]\n{name} = \"{matched}\"\nextra{i} = \"{extra}\"\n"
        ));
    }
    text
}

fn ids_by_values(text: &str) -> Vec<(String, String)> {
    let plan = load(text)
        .unwrap_or_else(|e| panic!("{}\n{text}", e.render()))
        .plan;
    plan.cells
        .iter()
        .map(|cell| {
            let axis_values: Map<String, Value> = cell
                .values
                .iter()
                .filter(|(k, _)| !k.starts_with("extra"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (Value::Object(axis_values).to_string(), cell.id.to_string())
        })
        .collect()
}

fn word() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9.]{0,5}"
}

fn axes() -> impl Strategy<Value = Vec<(String, Vec<String>)>> {
    prop::collection::vec(prop::collection::hash_set(word(), 1..4), 1..4).prop_map(|axes| {
        axes.into_iter()
            .enumerate()
            .map(|(i, values)| {
                let mut values: Vec<String> = values.into_iter().collect();
                values.sort();
                (format!("axis{i}"), values)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(config(64))]

    /// Real files are larger (the nightly matrix has 192 cells): fewer cases.
    #[test]
    fn from_str_never_panics_on_edited_matrices(text in mutated_seed()) {
        load_anything(&text);
    }

    /// A cell keeps its id when another value joins an axis, and when include entries add keys.
    #[test]
    fn ids_are_stable(
        axes in axes(),
        grow in any::<prop::sample::Index>(),
        new_value in word(),
        extras in prop::collection::vec((0usize..4, 0usize..4, word()), 0..3),
    ) {
        let before = ids_by_values(&matrix_file(&axes, &[]));

        let mut grown = axes.clone();
        let axis = grow.index(grown.len());
        prop_assume!(!grown[axis].1.contains(&new_value));
        grown[axis].1.push(new_value);
        let after_growth = ids_by_values(&matrix_file(&grown, &[]));
        for (values, id) in &before {
            let now = after_growth.iter().find(|(v, _)| v == values).map(|(_, id)| id);
            prop_assert_eq!(now, Some(id), "{}", values);
        }

        let with_extras = ids_by_values(&matrix_file(&axes, &extras));
        prop_assert_eq!(&with_extras, &before);
    }
}
