//! Cell ids through the CLI: stable when the matrix grows, unique, and safe as file names.
//!
//! What is *not* stable, by design: adding a new axis. Every cell then has one more value, so
//! every cell is a new cell with a new id (`0.6.3-sm_90` becomes `0.6.3-sm_90-sglang`); results
//! recorded under the old ids stay with the old matrix. This is also what GitHub does: its job
//! names are made from the same values. `new_axis_gives_new_ids` pins that down.

use crate::util::{Sandbox, exits, gpucompat};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// `matrix expand --format json` of `matrix` (the body of `[matrix]`): id by values.
fn ids(matrix: &str) -> Vec<(String, Value)> {
    let sandbox = Sandbox::new();
    let file = sandbox.file(
        "m.toml",
        &format!("[job]\ncommand = \"true\"\n[matrix]\n{matrix}"),
    );
    let out = exits(
        gpucompat()
            .args(["matrix", "expand", "--format", "json"])
            .arg(&file),
        &[0],
    );
    let cells: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    cells
        .into_iter()
        .map(|cell| {
            (
                cell["id"].as_str().expect("id").to_owned(),
                cell["values"].clone(),
            )
        })
        .collect()
}

/// Id of the cell whose values include all of `wanted`.
fn id_of<'a>(cells: &'a [(String, Value)], wanted: &Value) -> &'a str {
    let wanted = wanted.as_object().expect("object");
    cells
        .iter()
        .find(|(_, values)| wanted.iter().all(|(k, v)| values.get(k) == Some(v)))
        .map(|(id, _)| id.as_str())
        .unwrap_or_else(|| panic!("no cell with {wanted:?}"))
}

const BASE: &str = r#"
flashinfer = ["0.6.3", "0.6.8.post1"]
gpu = ["sm_90", "sm_86+sm_89"]
engine = ["sglang", "vllm"]
"#;

#[test]
fn ids_survive_new_values_on_any_axis() {
    let before = ids(BASE);
    for grown in [
        BASE.replace(r#""0.6.8.post1"]"#, r#""0.6.8.post1", "0.6.11.post1"]"#),
        BASE.replace(r#"["sm_90","#, r#"["sm_120", "sm_90","#),
        BASE.replace(r#""vllm"]"#, r#""vllm", "ktransformers"]"#),
    ] {
        let after = ids(&grown);
        assert!(after.len() > before.len());
        for (id, values) in &before {
            assert_eq!(id_of(&after, values), id, "{grown}");
        }
    }
}

#[test]
fn ids_survive_include_adding_keys_and_exclude_removing_neighbours() {
    let before = ids(BASE);
    let after = ids(&format!(
        r#"{BASE}
[[matrix.include]]
tp = 1
[[matrix.include]]
gpu = "sm_86+sm_89"
tp = 2
workaround = true
[[matrix.exclude]]
flashinfer = "0.6.3"
engine = "vllm"
"#
    ));
    for (id, values) in &after {
        let axes: serde_json::Map<String, Value> = values
            .as_object()
            .expect("object")
            .iter()
            .filter(|(k, _)| ["flashinfer", "gpu", "engine"].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(id_of(&before, &Value::Object(axes)), id);
    }
    assert_eq!(
        id_of(
            &after,
            &serde_json::json!({"flashinfer": "0.6.8.post1", "gpu": "sm_86+sm_89", "engine": "sglang"})
        ),
        "0.6.8.post1-sm_86_sm_89-sglang"
    );
}

/// A cell an include entry created is named by its axis values, so it keeps its id when those
/// values join the axes and it becomes a cell of the product.
#[test]
fn created_cell_keeps_its_id_when_its_values_join_the_axes() {
    let created = ids(&format!(
        "{BASE}\n[[matrix.include]]\nflashinfer = \"0.7.0\"\ngpu = \"sm_90\"\nengine = \"sglang\"\nnote = \"preview\"\n"
    ));
    let grown = ids(&format!(
        "{}\n[[matrix.include]]\nflashinfer = \"0.7.0\"\ngpu = \"sm_90\"\nengine = \"sglang\"\nnote = \"preview\"\n",
        BASE.replace(r#""0.6.8.post1"]"#, r#""0.6.8.post1", "0.7.0"]"#)
    ));
    let wanted = serde_json::json!({"flashinfer": "0.7.0", "gpu": "sm_90", "engine": "sglang"});
    assert_eq!(id_of(&created, &wanted), "0.7.0-sm_90-sglang");
    assert_eq!(id_of(&grown, &wanted), "0.7.0-sm_90-sglang");
}

#[test]
fn new_axis_gives_new_ids() {
    let before = ids("flashinfer = [\"0.6.3\"]\ngpu = [\"sm_90\"]\n");
    let after = ids("flashinfer = [\"0.6.3\"]\ngpu = [\"sm_90\"]\nengine = [\"sglang\"]\n");
    assert_eq!(before[0].0, "0.6.3-sm_90");
    assert_eq!(after[0].0, "0.6.3-sm_90-sglang");
}

/// Values that read the same once made file-name safe: the value spelled exactly keeps the
/// readable id, the other gets a hash; adding the colliding value does not rename the first.
#[test]
fn collisions_keep_the_exact_spelling() {
    let before = ids("gpu = [\"sm_86_sm_89\"]\n");
    let after = ids("gpu = [\"sm_86_sm_89\", \"sm_86+sm_89\"]\n");
    assert_eq!(before[0].0, "sm_86_sm_89");
    assert_eq!(after[0].0, "sm_86_sm_89");
    assert!(after[1].0.starts_with("sm_86_sm_89-"), "{}", after[1].0);
    assert_ne!(after[0].0, after[1].0);
}

/// Ids are unique even ignoring case, use only `[A-Za-z0-9._-]`, never start with `.` or `-`, and
/// work as file names: one file per id gives one file per cell.
#[test]
fn ids_are_unique_and_file_name_safe() {
    let cells = ids(r#"
os = ["Linux", "linux", "mac os", "mac/os", "..", "-rf", "ü"]
flag = [true, false]
model = [{ name = "q/w", tp = 2 }, { name = "q w", tp = 2 }]
[[matrix.include]]
os = "win"
flag = true
model = { name = "q/w", tp = 2 }
"#);
    assert_eq!(cells.len(), 7 * 2 * 2 + 1);
    let sandbox = Sandbox::new();
    let mut seen = HashSet::new();
    for (id, _) in &cells {
        assert!(!id.is_empty() && id.len() <= 100, "{id}");
        assert!(
            id.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
            "{id}"
        );
        assert!(!id.starts_with(['.', '-']), "{id}");
        assert!(seen.insert(id.to_ascii_lowercase()), "duplicate {id}");
        std::fs::write(sandbox.path().join(id), id).expect("id is a file name");
    }
    let files = std::fs::read_dir(sandbox.path()).expect("read").count();
    assert_eq!(files, cells.len());
    let by_id: HashMap<&str, &Value> = cells.iter().map(|(id, v)| (id.as_str(), v)).collect();
    assert_eq!(by_id["win-flag-q_w_2"]["os"], "win");
    // `mac os` and `mac/os` both read `mac_os` (and the two tables both `q_w_2`): hashed apart.
    let mac: Vec<&str> = cells
        .iter()
        .filter(|(id, _)| id.starts_with("mac_os-flag-q_w_2-"))
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(mac.len(), 4, "{mac:?}");
    assert!(
        cells
            .iter()
            .filter(|(_, v)| v["os"] == "..")
            .all(|(id, _)| id.starts_with("_..-"))
    );
}

/// Long values are cut, and the cut ids stay distinct.
#[test]
fn long_ids_are_cut_and_stay_unique() {
    let long = "x".repeat(150);
    let cells = ids(&format!("a = [\"{long}1\", \"{long}2\"]\n"));
    assert_eq!(cells.len(), 2);
    assert_ne!(cells[0].0, cells[1].0);
    assert!(cells.iter().all(|(id, _)| id.len() <= 100));
}
