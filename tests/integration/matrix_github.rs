//! GitHub's own documented matrix examples, written as gpucompat matrix files, must expand exactly
//! as GitHub says: same combinations, same order, same keys in the same order.
//!
//! Sources: docs.github.com "Running variations of jobs in a workflow" (formerly "Using a matrix
//! for your jobs"), its reusables in github/docs (`data/reusables/actions/jobs/matrix-*.md`,
//! `multi-dimension-matrix.md`), the older "Using a build matrix" examples, and the examples in
//! the doc comments of GitHub's `MatrixBuilder` (actions/runner, `WorkflowParser`).

use crate::util::{Sandbox, gpucompat};
use serde_json::{Value, json};

/// Expands `matrix` (the body of `[matrix]` and its include/exclude tables) with
/// `matrix expand --format json` and returns the output.
fn expand(matrix: &str) -> Vec<Value> {
    let sandbox = Sandbox::new();
    let file = sandbox.file(
        "matrix.toml",
        &format!("[job]\ncommand = \"true\"\n\n[matrix]\n{matrix}"),
    );
    let out = gpucompat()
        .args(["matrix", "expand", "--format", "json"])
        .arg(&file)
        .output()
        .expect("run gpucompat");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert!(stderr.is_empty(), "unexpected warnings:\n{stderr}");
    serde_json::from_slice(&out.stdout).expect("JSON array")
}

/// The values of each cell as compact JSON, keys in output order (`json!` keeps the order it is
/// written in, so the expected side can be written the same way).
fn values(cells: &[Value]) -> Vec<String> {
    cells
        .iter()
        .map(|cell| cell["values"].to_string())
        .collect()
}

fn expected(cells: &[Value]) -> Vec<String> {
    cells.iter().map(Value::to_string).collect()
}

fn ids(cells: &[Value]) -> Vec<&str> {
    cells
        .iter()
        .map(|cell| cell["id"].as_str().expect("id"))
        .collect()
}

/// "Adding a matrix strategy to your workflow job": the documented job order.
#[test]
fn adding_a_matrix_strategy_order() {
    let cells = expand(
        r#"
version = [10, 12, 14]
os = ["ubuntu-latest", "windows-latest"]
"#,
    );
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"version": 10, "os": "ubuntu-latest"}),
            json!({"version": 10, "os": "windows-latest"}),
            json!({"version": 12, "os": "ubuntu-latest"}),
            json!({"version": 12, "os": "windows-latest"}),
            json!({"version": 14, "os": "ubuntu-latest"}),
            json!({"version": 14, "os": "windows-latest"}),
        ])
    );
    assert_eq!(
        ids(&cells),
        [
            "10-ubuntu-latest",
            "10-windows-latest",
            "12-ubuntu-latest",
            "12-windows-latest",
            "14-ubuntu-latest",
            "14-windows-latest",
        ]
    );
}

/// "Using a single-dimension matrix".
#[test]
fn single_dimension_matrix() {
    let cells = expand("version = [10, 12, 14]\n");
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"version": 10}),
            json!({"version": 12}),
            json!({"version": 14}),
        ])
    );
    assert_eq!(ids(&cells), ["10", "12", "14"]);
}

/// "A variable configuration in a matrix can be an array of objects": 4 jobs, with the tables
/// as written.
#[test]
fn array_of_objects() {
    let cells = expand(
        r#"
os = ["ubuntu-latest", "macos-latest"]
node = [{ version = 14 }, { version = 20, env = "NODE_OPTIONS=--openssl-legacy-provider" }]
"#,
    );
    let legacy = json!({"version": 20, "env": "NODE_OPTIONS=--openssl-legacy-provider"});
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"os": "ubuntu-latest", "node": {"version": 14}}),
            json!({"os": "ubuntu-latest", "node": legacy}),
            json!({"os": "macos-latest", "node": {"version": 14}}),
            json!({"os": "macos-latest", "node": legacy}),
        ])
    );
    let ids = ids(&cells);
    assert_eq!(ids[0], "ubuntu-latest-14");
    assert_eq!(
        ids.iter().collect::<std::collections::HashSet<_>>().len(),
        4
    );
}

/// "Expanding or adding matrix configurations": the fruit/animal/color/shape example, exactly.
#[test]
fn include_fruit_animal_color_shape() {
    let cells = expand(
        r#"
fruit = ["apple", "pear"]
animal = ["cat", "dog"]
[[matrix.include]]
color = "green"
[[matrix.include]]
color = "pink"
animal = "cat"
[[matrix.include]]
fruit = "apple"
shape = "circle"
[[matrix.include]]
fruit = "banana"
[[matrix.include]]
fruit = "banana"
animal = "cat"
"#,
    );
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"}),
            json!({"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"}),
            json!({"fruit": "pear", "animal": "cat", "color": "pink"}),
            json!({"fruit": "pear", "animal": "dog", "color": "green"}),
            json!({"fruit": "banana"}),
            json!({"fruit": "banana", "animal": "cat"}),
        ])
    );
    // Cells of the product are named by their axis values; added keys do not change that.
    assert_eq!(
        ids(&cells),
        [
            "apple-cat",
            "apple-dog",
            "pear-cat",
            "pear-dog",
            "banana",
            "banana-cat"
        ]
    );
}

/// "Example: Expanding configurations": an extra variable for one existing job.
#[test]
fn include_expands_one_configuration() {
    let cells = expand(
        r#"
os = ["windows-latest", "ubuntu-latest"]
node = [12, 14, 16]
[[matrix.include]]
os = "windows-latest"
node = 16
npm = 6
"#,
    );
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"os": "windows-latest", "node": 12}),
            json!({"os": "windows-latest", "node": 14}),
            json!({"os": "windows-latest", "node": 16, "npm": 6}),
            json!({"os": "ubuntu-latest", "node": 12}),
            json!({"os": "ubuntu-latest", "node": 14}),
            json!({"os": "ubuntu-latest", "node": 16}),
        ])
    );
    assert_eq!(ids(&cells)[2], "windows-latest-16");
}

/// "Example: Adding configurations": 9 jobs plus one new `{windows-latest, 17}` job, last.
#[test]
fn include_adds_a_configuration() {
    let cells = expand(
        r#"
os = ["macos-latest", "windows-latest", "ubuntu-latest"]
version = [12, 14, 16]
[[matrix.include]]
os = "windows-latest"
version = 17
"#,
    );
    assert_eq!(cells.len(), 10);
    assert_eq!(
        values(&cells[9..]),
        expected(&[json!({"os": "windows-latest", "version": 17})])
    );
    assert_eq!(ids(&cells)[9], "windows-latest-17");
    assert_eq!(
        values(&cells[..3]),
        expected(&[
            json!({"os": "macos-latest", "version": 12}),
            json!({"os": "macos-latest", "version": 14}),
            json!({"os": "macos-latest", "version": 16}),
        ])
    );
}

/// "If you don't specify any matrix variables, all configurations under include will run."
#[test]
fn include_only_matrix() {
    let cells = expand(
        r#"
[[matrix.include]]
site = "production"
datacenter = "site-a"
[[matrix.include]]
site = "staging"
datacenter = "site-b"
"#,
    );
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"site": "production", "datacenter": "site-a"}),
            json!({"site": "staging", "datacenter": "site-b"}),
        ])
    );
    assert_eq!(ids(&cells), ["production-site-a", "staging-site-b"]);
}

/// "All include combinations are processed after exclude. This allows you to use include to
/// add back combinations that were previously excluded." The added-back cell comes last.
#[test]
fn include_adds_back_excluded_combinations() {
    let cells = expand(
        r#"
os = ["macos-latest", "windows-latest", "ubuntu-18.04"]
node = [8, 10, 12, 14]
[[matrix.exclude]]
os = "macos-latest"
node = 8
[[matrix.include]]
os = "macos-latest"
node = 8
experimental = true
"#,
    );
    assert_eq!(cells.len(), 12);
    assert_eq!(
        values(&cells[..1]),
        expected(&[json!({"os": "macos-latest", "node": 10})])
    );
    assert_eq!(
        values(&cells[11..]),
        expected(&[json!({"os": "macos-latest", "node": 8, "experimental": true})])
    );
}

/// "Handling failures": `experimental = [false]` plus one experimental version, four jobs.
#[test]
fn handling_failures_example() {
    let cells = expand(
        r#"
version = [6, 7, 8]
experimental = [false]
[[matrix.include]]
version = 9
experimental = true
"#,
    );
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"version": 6, "experimental": false}),
            json!({"version": 7, "experimental": false}),
            json!({"version": 8, "experimental": false}),
            json!({"version": 9, "experimental": true}),
        ])
    );
    assert_eq!(
        ids(&cells),
        [
            "6-no-experimental",
            "7-no-experimental",
            "8-no-experimental",
            "9-experimental"
        ]
    );
}

/// `MatrixBuilder` examples 2 and 3: an exclude filter, and an include that adds a value to one
/// existing vector.
#[test]
fn matrix_builder_examples() {
    let excluded = expand(
        r#"
arch = ["x64", "x86"]
os = ["linux", "windows"]
[[matrix.exclude]]
arch = "x86"
os = "linux"
"#,
    );
    assert_eq!(
        values(&excluded),
        expected(&[
            json!({"arch": "x64", "os": "linux"}),
            json!({"arch": "x64", "os": "windows"}),
            json!({"arch": "x86", "os": "windows"}),
        ])
    );
    let included = expand(
        r#"
arch = ["x64", "x86"]
os = ["linux", "windows"]
[[matrix.include]]
arch = "x64"
os = "linux"
publish = true
"#,
    );
    assert_eq!(
        values(&included),
        expected(&[
            json!({"arch": "x64", "os": "linux", "publish": true}),
            json!({"arch": "x64", "os": "windows"}),
            json!({"arch": "x86", "os": "linux"}),
            json!({"arch": "x86", "os": "windows"}),
        ])
    );
}

/// Include entries with table values match tables partially (GitHub compares leaf by leaf), so
/// naming one field of a table value adds keys to every cell whose table has that field.
#[test]
fn include_with_table_values_matches_partially() {
    let cells = expand(
        r#"
os = ["ubuntu-latest", "macos-latest"]
node = [{ version = 14 }, { version = 20, env = "NODE_OPTIONS=--openssl-legacy-provider" }]
[[matrix.include]]
node = { version = 20 }
npm = 10
[[matrix.exclude]]
os = "macos-latest"
node = { version = 14 }
"#,
    );
    let legacy = json!({"version": 20, "env": "NODE_OPTIONS=--openssl-legacy-provider"});
    assert_eq!(
        values(&cells),
        expected(&[
            json!({"os": "ubuntu-latest", "node": {"version": 14}}),
            json!({"os": "ubuntu-latest", "node": legacy, "npm": 10}),
            json!({"os": "macos-latest", "node": legacy, "npm": 10}),
        ])
    );
}

/// Documented examples whose whole expansion is given: each row is a test that expands the
/// matrix and compares every cell's values, in order, keys in order.
macro_rules! expands_to {
    ($($(#[doc = $doc:literal])* $name:ident: $matrix:expr => [$($cell:expr),* $(,)?],)*) => {
        $(
            $(#[doc = $doc])*
            #[test]
            fn $name() {
                let cells = expand($matrix);
                assert_eq!(values(&cells), expected(&[$($cell),*]));
            }
        )*
    };
}

expands_to! {
    /// "Using a multi-dimension matrix".
    multi_dimension_matrix: r#"
os = ["ubuntu-22.04", "ubuntu-20.04"]
version = [10, 12, 14]
"# => [
                json!({"os": "ubuntu-22.04", "version": 10}),
                json!({"os": "ubuntu-22.04", "version": 12}),
                json!({"os": "ubuntu-22.04", "version": 14}),
                json!({"os": "ubuntu-20.04", "version": 10}),
                json!({"os": "ubuntu-20.04", "version": 12}),
                json!({"os": "ubuntu-20.04", "version": 14}),
    ],

    /// "Excluding matrix configurations": 12 configurations minus one full and two partial matches.
    exclude_partial_matches: r#"
os = ["macos-latest", "windows-latest"]
version = [12, 14, 16]
environment = ["staging", "production"]
[[matrix.exclude]]
os = "macos-latest"
version = 12
environment = "production"
[[matrix.exclude]]
os = "windows-latest"
version = 16
"# => [
                json!({"os": "macos-latest", "version": 12, "environment": "staging"}),
                json!({"os": "macos-latest", "version": 14, "environment": "staging"}),
                json!({"os": "macos-latest", "version": 14, "environment": "production"}),
                json!({"os": "macos-latest", "version": 16, "environment": "staging"}),
                json!({"os": "macos-latest", "version": 16, "environment": "production"}),
                json!({"os": "windows-latest", "version": 12, "environment": "staging"}),
                json!({"os": "windows-latest", "version": 12, "environment": "production"}),
                json!({"os": "windows-latest", "version": 14, "environment": "staging"}),
                json!({"os": "windows-latest", "version": 14, "environment": "production"}),
    ],

    /// The "example closer to reality": five perl versions on ubuntu and two on macos, seven jobs.
    perl_versions_example: r#"
os = ["ubuntu-latest"]
perl = ["5.16", "5.20", "5.26", "5.30", "latest"]
[[matrix.include]]
os = "macos-latest"
perl = "5.26"
[[matrix.include]]
os = "macos-latest"
perl = "latest"
"# => [
                json!({"os": "ubuntu-latest", "perl": "5.16"}),
                json!({"os": "ubuntu-latest", "perl": "5.20"}),
                json!({"os": "ubuntu-latest", "perl": "5.26"}),
                json!({"os": "ubuntu-latest", "perl": "5.30"}),
                json!({"os": "ubuntu-latest", "perl": "latest"}),
                json!({"os": "macos-latest", "perl": "5.26"}),
                json!({"os": "macos-latest", "perl": "latest"}),
    ],

    /// Older docs, "Including new combinations": an unmatched include is one extra job, with its
    /// axis keys first (GitHub's parser writes the axis keys of an entry before its other keys).
    include_new_combination_key_order: r#"
node = [14]
os = ["macos-latest", "windows-latest", "ubuntu-18.04"]
[[matrix.include]]
experimental = true
node = 15
os = "ubuntu-18.04"
"# => [
                json!({"node": 14, "os": "macos-latest"}),
                json!({"node": 14, "os": "windows-latest"}),
                json!({"node": 14, "os": "ubuntu-18.04"}),
                json!({"node": 15, "os": "ubuntu-18.04", "experimental": true}),
    ],

    /// Original values are never overwritten; values added by earlier includes are, and keep their
    /// place among the keys.
    include_overwrites_only_added_values: r#"
os = ["linux", "mac"]
[[matrix.include]]
runner = "generic"
label = "a"
[[matrix.include]]
os = "mac"
runner = "apple-silicon"
[[matrix.include]]
os = "windows"
runner = "windows-2022"
"# => [
                json!({"os": "linux", "runner": "generic", "label": "a"}),
                json!({"os": "mac", "runner": "apple-silicon", "label": "a"}),
                json!({"os": "windows", "runner": "windows-2022"}),
    ],

    /// GitHub compares values with its expression `==`: strings ignore case, and a number equals
    /// the same number written as a string.
    values_compare_like_github_expressions: r#"
os = ["Ubuntu-Latest", "windows-latest"]
node = [16, 18]
[[matrix.exclude]]
os = "ubuntu-latest"
node = "16"
[[matrix.include]]
os = "WINDOWS-LATEST"
node = 18
npm = 9
"# => [
                json!({"os": "Ubuntu-Latest", "node": 18}),
                json!({"os": "windows-latest", "node": 16}),
                json!({"os": "windows-latest", "node": 18, "npm": 9}),
    ],
}
