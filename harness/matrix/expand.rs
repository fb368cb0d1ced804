//! GitHub Actions' matrix rules, exactly:
//!
//! 1. The cross product of the axes (first axis varies slowest), in file order.
//! 2. `exclude` runs first and matches partially: a combination is dropped when every key of an
//!    exclude entry has the same value in it.
//! 3. Each `include` entry is added to every *original* combination (one from the product) whose
//!    original values it does not overwrite; keys added by earlier includes may be overwritten.
//!    An entry that fits no original combination becomes a new combination of its own, appended in
//!    include order. New combinations are never extended by later includes.
//!
//! Pure: no I/O, no spans. Each value remembers where it came from so the loader can point at it.

use indexmap::IndexMap;
use serde_json::Value;

/// Where a value of a combination came from in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Value `value` of axis `axis`.
    Axis { axis: usize, value: usize },
    /// Key `key` of include entry `entry`.
    Include { entry: usize, key: usize },
}

/// One combination: values in key order, each with its source.
#[derive(Debug, Clone, PartialEq)]
pub struct Combination {
    pub values: IndexMap<String, (Value, Source)>,
    /// The include entry that created this combination, when it is not from the product.
    pub created_by: Option<usize>,
}

impl Combination {
    /// The values alone, in key order.
    pub fn plain(&self) -> serde_json::Map<String, Value> {
        self.values
            .iter()
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect()
    }
}

/// An axis: its name and values.
pub type Axis = (String, Vec<Value>);
/// An include or exclude entry: keys and values in file order.
pub type Entry = Vec<(String, Value)>;

/// Expands a matrix. Validation (exclude keys must be axes, no empty entries) is the caller's job;
/// given anything, this returns an answer and never panics.
pub fn expand(axes: &[Axis], exclude: &[Entry], include: &[Entry]) -> Vec<Combination> {
    let mut combos = product(axes);
    combos.retain(|combo| {
        !exclude.iter().any(|entry| {
            entry
                .iter()
                .all(|(key, value)| combo.values.get(key).is_some_and(|(v, _)| v == value))
        })
    });
    let originals = combos.len();
    let is_axis = |key: &str| axes.iter().any(|(name, _)| name == key);
    for (entry_index, entry) in include.iter().enumerate() {
        let mut matched = false;
        for combo in &mut combos[..originals] {
            // Only original (axis) values are protected; values added by includes are not.
            let fits = entry.iter().all(|(key, value)| {
                !is_axis(key) || combo.values.get(key).is_none_or(|(v, _)| v == value)
            });
            if fits {
                matched = true;
                for (key_index, (key, value)) in entry.iter().enumerate() {
                    if is_axis(key) {
                        // Equal to the original value (that is what fits means): keep its source.
                        continue;
                    }
                    let source = Source::Include {
                        entry: entry_index,
                        key: key_index,
                    };
                    combo.values.insert(key.clone(), (value.clone(), source));
                }
            }
        }
        if !matched {
            let values = entry
                .iter()
                .enumerate()
                .map(|(key_index, (key, value))| {
                    let source = Source::Include {
                        entry: entry_index,
                        key: key_index,
                    };
                    (key.clone(), (value.clone(), source))
                })
                .collect();
            combos.push(Combination {
                values,
                created_by: Some(entry_index),
            });
        }
    }
    combos
}

/// The cross product; no axes gives no combinations (as on GitHub, where a matrix of only
/// `include` entries has exactly those entries).
fn product(axes: &[Axis]) -> Vec<Combination> {
    if axes.is_empty() || axes.iter().any(|(_, values)| values.is_empty()) {
        return Vec::new();
    }
    let total: usize = axes
        .iter()
        .map(|(_, values)| values.len())
        .fold(1usize, usize::saturating_mul);
    let mut out = Vec::with_capacity(total.min(1 << 20));
    let mut index = vec![0usize; axes.len()];
    loop {
        let values = axes
            .iter()
            .zip(&index)
            .enumerate()
            .map(|(axis, ((name, values), &value))| {
                (
                    name.clone(),
                    (values[value].clone(), Source::Axis { axis, value }),
                )
            })
            .collect();
        out.push(Combination {
            values,
            created_by: None,
        });
        // Odometer: the last axis varies fastest.
        let mut position = axes.len();
        loop {
            if position == 0 {
                return out;
            }
            position -= 1;
            index[position] += 1;
            if index[position] < axes[position].1.len() {
                break;
            }
            index[position] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn axis(name: &str, values: &[Value]) -> Axis {
        (name.to_owned(), values.to_vec())
    }

    fn entry(pairs: &[(&str, Value)]) -> Entry {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn plain(combos: &[Combination]) -> Vec<Value> {
        combos.iter().map(|c| Value::Object(c.plain())).collect()
    }

    /// GitHub docs, "Expanding or adding matrix configurations".
    #[test]
    fn github_include_example() {
        let axes = [
            axis("fruit", &[json!("apple"), json!("pear")]),
            axis("animal", &[json!("cat"), json!("dog")]),
        ];
        let include = [
            entry(&[("color", json!("green"))]),
            entry(&[("color", json!("pink")), ("animal", json!("cat"))]),
            entry(&[("fruit", json!("apple")), ("shape", json!("circle"))]),
            entry(&[("fruit", json!("banana"))]),
            entry(&[("fruit", json!("banana")), ("animal", json!("cat"))]),
        ];
        let got = plain(&expand(&axes, &[], &include));
        assert_eq!(
            got,
            vec![
                json!({"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"}),
                json!({"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"}),
                json!({"fruit": "pear", "animal": "cat", "color": "pink"}),
                json!({"fruit": "pear", "animal": "dog", "color": "green"}),
                json!({"fruit": "banana"}),
                json!({"fruit": "banana", "animal": "cat"}),
            ]
        );
    }

    /// GitHub docs, "Example: Adding configurations".
    #[test]
    fn github_adding_configurations_example() {
        let axes = [
            axis("os", &[json!("windows-latest"), json!("ubuntu-latest")]),
            axis("node", &[json!(14), json!(16)]),
        ];
        let include = [entry(&[
            ("os", json!("windows-latest")),
            ("node", json!(16)),
            ("npm", json!(6)),
        ])];
        let got = plain(&expand(&axes, &[], &include));
        assert_eq!(
            got,
            vec![
                json!({"os": "windows-latest", "node": 14}),
                json!({"os": "windows-latest", "node": 16, "npm": 6}),
                json!({"os": "ubuntu-latest", "node": 14}),
                json!({"os": "ubuntu-latest", "node": 16}),
            ]
        );
    }

    /// GitHub docs, "Example: Excluding matrix configurations": partial matches, 12 - 3 = 9.
    #[test]
    fn github_exclude_example() {
        let axes = [
            axis("os", &[json!("macos-latest"), json!("windows-latest")]),
            axis("version", &[json!(12), json!(14), json!(16)]),
            axis("environment", &[json!("staging"), json!("production")]),
        ];
        let exclude = [
            entry(&[
                ("os", json!("macos-latest")),
                ("version", json!(12)),
                ("environment", json!("production")),
            ]),
            entry(&[("os", json!("windows-latest")), ("version", json!(16))]),
        ];
        let got = plain(&expand(&axes, &exclude, &[]));
        assert_eq!(got.len(), 9);
        assert!(
            !got.contains(
                &json!({"os": "macos-latest", "version": 12, "environment": "production"})
            )
        );
        assert!(
            got.contains(&json!({"os": "macos-latest", "version": 12, "environment": "staging"}))
        );
        assert!(
            !got.iter()
                .any(|c| c["os"] == "windows-latest" && c["version"] == 16)
        );
    }

    /// GitHub docs, "Example: Expanding configurations": an include that only adds a key.
    #[test]
    fn github_expanding_configurations_example() {
        let axes = [
            axis(
                "os",
                &[
                    json!("windows-latest"),
                    json!("ubuntu-latest"),
                    json!("macos-latest"),
                ],
            ),
            axis("node", &[json!(14), json!(16), json!(18)]),
        ];
        let include = [entry(&[("node", json!(16)), ("npm", json!(6))])];
        let got = plain(&expand(&axes, &[], &include));
        assert_eq!(got.len(), 9);
        for combo in &got {
            assert_eq!(combo.get("npm").is_some(), combo["node"] == 16, "{combo}");
        }
    }

    /// GitHub docs: a matrix of only `include` entries has exactly those entries.
    #[test]
    fn include_only_matrix() {
        let include = [
            entry(&[
                ("site", json!("production")),
                ("datacenter", json!("site-a")),
            ]),
            entry(&[("site", json!("staging")), ("datacenter", json!("site-b"))]),
        ];
        let got = plain(&expand(&[], &[], &include));
        assert_eq!(
            got,
            vec![
                json!({"site": "production", "datacenter": "site-a"}),
                json!({"site": "staging", "datacenter": "site-b"}),
            ]
        );
    }

    /// Includes run after excludes, so an include can add back an excluded combination.
    #[test]
    fn include_adds_back_an_excluded_combination() {
        let axes = [
            axis("os", &[json!("linux"), json!("mac")]),
            axis("arch", &[json!("x64"), json!("arm")]),
        ];
        let exclude = [entry(&[("os", json!("mac")), ("arch", json!("x64"))])];
        let include = [entry(&[("os", json!("mac")), ("arch", json!("x64"))])];
        let got = expand(&axes, &exclude, &include);
        assert_eq!(got.len(), 4);
        assert_eq!(got[3].created_by, Some(0));
        assert_eq!(
            Value::Object(got[3].plain()),
            json!({"os": "mac", "arch": "x64"})
        );
    }

    #[test]
    fn sources_point_at_axis_and_include_values() {
        let axes = [axis("a", &[json!(1), json!(2)])];
        let include = [entry(&[("a", json!(2)), ("b", json!("x"))])];
        let got = expand(&axes, &[], &include);
        assert_eq!(got[1].values["a"].1, Source::Axis { axis: 0, value: 1 });
        assert_eq!(got[1].values["b"].1, Source::Include { entry: 0, key: 1 });
    }
}
