//! GitHub Actions' matrix rules, exactly as GitHub's own workflow parser applies them
//! (`MatrixBuilder` in actions/runner's `WorkflowParser`):
//!
//! 1. The cross product of the axes, in file order: the first axis varies slowest, the last
//!    fastest. No axes means no product (a matrix of only `include` entries has exactly those).
//! 2. `exclude` runs first and matches partially: a combination is dropped when every key of some
//!    exclude entry has an equal value in it.
//! 3. Each `include` entry is split into its *filter* (the keys that are axes) and its *extras*
//!    (every other key). It is applied to every original combination (one from the product, after
//!    exclusion) that its filter matches: its extras are added, overwriting values that earlier
//!    include entries added (original values are never overwritten, since axis keys are only ever
//!    compared). An entry that matches no original combination becomes a new combination of its
//!    own, appended in include order, with its axis keys first and then its other keys, each in
//!    the entry's order. New combinations are never extended by later entries.
//! 4. Keys of a combination: the axes in file order, then the keys that includes added, in the
//!    order they were first added.
//!
//! "Equal" is GitHub's `==` on each leaf of the filter value: a table in a filter matches any
//! table that has at least its keys with equal values (partial, at every level); strings compare
//! case-insensitively; a string and a number compare as numbers (`"12"` equals `12`); booleans
//! compare as 1 and 0 against numbers. [`filter_matches`] is that comparison.
//!
//! Pure: no I/O, no spans. Each value remembers where it came from so the loader can point at it.
//! Combinations borrow their keys and values from the axes and entries they were built from, so
//! expanding a large matrix allocates one small vector per combination and nothing else.

use serde_json::{Map, Value};
use std::collections::hash_map::Entry as Slot;
use std::collections::{HashMap, HashSet};

/// The most combinations a matrix may expand to: five times the 100,000 cells the benchmark
/// loads in a fraction of a second, far beyond what any GPU fleet runs in a night (GitHub's own
/// limit is 256 jobs), and small enough that a plan stays within a few GiB of memory (a cell takes
/// about 5 KiB while loading). A typo that multiplies an axis is a clear error, not an
/// out-of-memory kill.
pub const MAX_CELLS: usize = 500_000;

/// Where a value of a combination came from in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Value `value` of axis `axis`.
    Axis { axis: usize, value: usize },
    /// Key `key` of include entry `entry`.
    Include { entry: usize, key: usize },
}

/// One combination: keys and values in key order, each with its source.
#[derive(Debug, Clone, PartialEq)]
pub struct Combination<'m> {
    /// The axes first (file order), then keys added by `include`, in the order first added.
    pub values: Vec<(&'m str, &'m Value, Source)>,
    /// The include entry that created this combination, when it is not from the product.
    pub created_by: Option<usize>,
}

impl<'m> Combination<'m> {
    /// The value of `key`, if the combination has it.
    pub fn get(&self, key: &str) -> Option<&'m Value> {
        self.find(key).map(|i| self.values[i].1)
    }

    /// Where the value of `key` came from, if the combination has it.
    pub fn source(&self, key: &str) -> Option<Source> {
        self.find(key).map(|i| self.values[i].2)
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &'m str> + '_ {
        self.values.iter().map(|(key, _, _)| *key)
    }

    /// The values alone, in key order, as owned JSON.
    pub fn plain(&self) -> Map<String, Value> {
        let mut map = Map::with_capacity(self.values.len());
        for (key, value, _) in &self.values {
            map.insert((*key).to_owned(), (*value).clone());
        }
        map
    }

    fn find(&self, key: &str) -> Option<usize> {
        self.values.iter().position(|(k, _, _)| *k == key)
    }

    /// Sets `key` (keeping its position when present, else appending).
    fn set(&mut self, from: usize, key: &'m str, value: &'m Value, source: Source) {
        match self.values[from..].iter().position(|(k, _, _)| *k == key) {
            Some(i) => self.values[from + i] = (key, value, source),
            None => self.values.push((key, value, source)),
        }
    }
}

/// An axis: its name and values.
pub type Axis = (String, Vec<Value>);
/// An include or exclude entry: keys and values in file order.
pub type Entry = Vec<(String, Value)>;

/// The product of the axes is larger than [`MAX_CELLS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// Size of the product; `None` when it does not even fit in 128 bits.
    pub combinations: Option<u128>,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limit = thousands(MAX_CELLS as u128);
        match self.combinations {
            Some(n) => write!(
                f,
                "the matrix has {} combinations, more than the limit of {limit}",
                thousands(n)
            ),
            None => write!(
                f,
                "the matrix has more than 2^128 combinations; the limit is {limit}"
            ),
        }
    }
}

impl std::error::Error for TooLarge {}

/// `4096000000` as `4,096,000,000`.
fn thousands(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Size of the cross product of `axes` (0 without axes); `None` when it overflows 128 bits.
pub fn product_size(axes: &[Axis]) -> Option<u128> {
    if axes.is_empty() {
        return Some(0);
    }
    axes.iter().try_fold(1u128, |acc, (_, values)| {
        acc.checked_mul(values.len() as u128)
    })
}

/// Expands a matrix. Validation (exclude keys must be axes, no empty entries) is the caller's job;
/// given anything, this returns an answer and never panics. The only refusal is a product larger
/// than [`MAX_CELLS`], checked before anything is allocated.
pub fn expand<'m>(
    axes: &'m [Axis],
    exclude: &'m [Entry],
    include: &'m [Entry],
) -> Result<Vec<Combination<'m>>, TooLarge> {
    let total = match product_size(axes) {
        Some(n) if n <= MAX_CELLS as u128 => n as usize,
        combinations => return Err(TooLarge { combinations }),
    };
    let excludes: Vec<Filter> = exclude
        .iter()
        .map(|entry| Filter::compile(axes, entry.iter().map(|(k, v)| (k.as_str(), v)), true))
        .collect();
    let includes: Vec<Include<'m>> = include
        .iter()
        .map(|entry| Include::compile(axes, entry))
        .collect();
    // Room for the keys includes add, so adding them never reallocates.
    let extra_keys: HashSet<&str> = includes
        .iter()
        .flat_map(|include| include.extras.iter().map(|(_, key, _)| *key))
        .collect();
    let width = axes.len() + extra_keys.len();

    // Position in the product = sum of value index times stride (the last axis has stride 1).
    let mut strides = vec![1usize; axes.len()];
    for axis in (0..axes.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1].saturating_mul(axes[axis + 1].1.len());
    }
    // Each entry visits only the positions its filter matches, so a long list of specific
    // entries costs what they match, not their number times the size of the product.
    let mut excluded = vec![false; total];
    for filter in &excludes {
        filter.for_each_match(axes, &strides, total, |at| excluded[at] = true);
    }

    let mut combos = Vec::with_capacity(total);
    // For each position of the product, its original combination (`NONE` when excluded).
    const NONE: usize = usize::MAX;
    let mut original_at: Vec<usize> = Vec::with_capacity(total);
    if total > 0 {
        let mut index = vec![0usize; axes.len()];
        for &excluded in &excluded {
            if excluded {
                original_at.push(NONE);
            } else {
                original_at.push(combos.len());
                let mut values = Vec::with_capacity(width);
                for (axis, ((name, axis_values), &value)) in axes.iter().zip(&index).enumerate() {
                    values.push((
                        name.as_str(),
                        &axis_values[value],
                        Source::Axis { axis, value },
                    ));
                }
                combos.push(Combination {
                    values,
                    created_by: None,
                });
            }
            advance(&mut index, |axis| axes[axis].1.len());
        }
    }

    // Where an original combination holds a key that includes added: (combination, key) to its
    // position. Looking a key up here instead of along the combination keeps many includes that
    // each add a key to many cells linear in what they add.
    let mut added: HashMap<(usize, &str), usize> = HashMap::new();
    for (entry_index, include) in includes.iter().enumerate() {
        let mut matched = false;
        include.filter.for_each_match(axes, &strides, total, |at| {
            let Some(&original) = original_at.get(at).filter(|&&o| o != NONE) else {
                return;
            };
            matched = true;
            let combo = &mut combos[original];
            for &(key_index, key, value) in &include.extras {
                let source = Source::Include {
                    entry: entry_index,
                    key: key_index,
                };
                match added.entry((original, key)) {
                    Slot::Occupied(slot) => combo.values[*slot.get()] = (key, value, source),
                    Slot::Vacant(slot) => {
                        slot.insert(combo.values.len());
                        combo.values.push((key, value, source));
                    }
                }
            }
        });
        if !matched {
            let mut combo = Combination {
                values: Vec::with_capacity(include.entry.len()),
                created_by: Some(entry_index),
            };
            let (axis_keys, other_keys): (Vec<_>, Vec<_>) = include
                .entry
                .iter()
                .enumerate()
                .partition(|(_, (key, _))| axis_of(axes, key).is_some());
            for (key_index, (key, value)) in axis_keys.into_iter().chain(other_keys) {
                let source = Source::Include {
                    entry: entry_index,
                    key: key_index,
                };
                combo.set(0, key, value, source);
            }
            combos.push(combo);
        }
    }
    Ok(combos)
}

/// Steps an odometer of indices (the last one fastest) where index `i` counts to `len(i)`;
/// `false` once it has gone all the way round.
fn advance(index: &mut [usize], len: impl Fn(usize) -> usize) -> bool {
    for position in (0..index.len()).rev() {
        index[position] += 1;
        if index[position] < len(position) {
            return true;
        }
        index[position] = 0;
    }
    false
}

/// Whether `value` (the combination's value, `None` when it lacks the key) matches `filter`, the
/// value an include or exclude entry gives for that key, by GitHub's rules: a table or array in the
/// filter matches leaf by leaf (so partially), each leaf with GitHub's loose `==`.
pub fn filter_matches(filter: &Value, value: Option<&Value>) -> bool {
    match filter {
        Value::Object(fields) => fields
            .iter()
            .all(|(key, filter)| filter_matches(filter, value.and_then(|v| member(v, key)))),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .all(|(i, filter)| filter_matches(filter, value.and_then(|v| v.as_array()?.get(i)))),
        leaf => loose_eq(value.unwrap_or(&Value::Null), leaf),
    }
}

/// `value[key]` as GitHub's expressions index an object: the exact key, else one that differs
/// only in case.
fn member<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    let map = value.as_object()?;
    map.get(key).or_else(|| {
        map.iter()
            .find(|(k, _)| eq_ignore_case(k, key))
            .map(|(_, v)| v)
    })
}

fn axis_of(axes: &[Axis], key: &str) -> Option<usize> {
    axes.iter().position(|(name, _)| name == key)
}

/// An include or exclude entry compiled against the axes: for each axis it constrains, which of
/// the axis's values it accepts. Original combinations only ever hold axis values, so the entry
/// matches exactly the positions of the product built from accepted values.
struct Filter {
    /// `None`: a key that no combination can satisfy (the entry never matches).
    constraints: Option<Vec<(usize, Vec<bool>)>>,
}

impl Filter {
    /// `missing_keys`: whether keys that are not axes take part (as a missing value, which is
    /// what GitHub compares them with); for includes they are extras instead.
    fn compile<'e>(
        axes: &[Axis],
        entry: impl Iterator<Item = (&'e str, &'e Value)>,
        missing_keys: bool,
    ) -> Filter {
        let mut constraints: Vec<(usize, Vec<bool>)> = Vec::new();
        for (key, filter) in entry {
            match axis_of(axes, key) {
                Some(axis) => {
                    let accepted = axes[axis]
                        .1
                        .iter()
                        .map(|value| filter_matches(filter, Some(value)));
                    match constraints.iter_mut().find(|(a, _)| *a == axis) {
                        Some((_, existing)) => {
                            for (slot, ok) in existing.iter_mut().zip(accepted) {
                                *slot &= ok;
                            }
                        }
                        None => constraints.push((axis, accepted.collect())),
                    }
                }
                None if missing_keys && !filter_matches(filter, None) => {
                    return Filter { constraints: None };
                }
                None => {}
            }
        }
        Filter {
            constraints: Some(constraints),
        }
    }

    /// Calls `f` with every position of the product (of `total` positions) that matches.
    fn for_each_match(
        &self,
        axes: &[Axis],
        strides: &[usize],
        total: usize,
        mut f: impl FnMut(usize),
    ) {
        let Some(constraints) = &self.constraints else {
            return;
        };
        if total == 0 {
            return;
        }
        // The value indices accepted on each axis (all of them where the entry says nothing).
        let choices: Vec<Vec<usize>> = axes
            .iter()
            .enumerate()
            .map(|(axis, (_, values))| {
                match constraints
                    .iter()
                    .find(|(constrained, _)| *constrained == axis)
                {
                    Some((_, accepted)) => (0..values.len())
                        .filter(|&v| accepted.get(v).copied().unwrap_or(false))
                        .collect(),
                    None => (0..values.len()).collect(),
                }
            })
            .collect();
        if choices.iter().any(Vec::is_empty) {
            return;
        }
        let mut pick = vec![0usize; axes.len()];
        loop {
            let at: usize = pick
                .iter()
                .zip(&choices)
                .zip(strides)
                .map(|((&p, choice), stride)| choice[p] * stride)
                .sum();
            f(at);
            if !advance(&mut pick, |axis| choices[axis].len()) {
                return;
            }
        }
    }
}

/// An include entry: its filter (axis keys) and extras (other keys, with their index).
struct Include<'m> {
    entry: &'m Entry,
    filter: Filter,
    extras: Vec<(usize, &'m str, &'m Value)>,
}

impl<'m> Include<'m> {
    fn compile(axes: &[Axis], entry: &'m Entry) -> Include<'m> {
        let filter = Filter::compile(axes, entry.iter().map(|(k, v)| (k.as_str(), v)), false);
        let extras = entry
            .iter()
            .enumerate()
            .filter(|(_, (key, _))| axis_of(axes, key).is_none())
            .map(|(i, (key, value))| (i, key.as_str(), value))
            .collect();
        Include {
            entry,
            filter,
            extras,
        }
    }
}

/// A scalar as GitHub's expressions see it.
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Null,
    Bool(bool),
    Number(f64),
    Str(&'a str),
    /// A table or array: equal to nothing but itself, and never itself here.
    Compound,
}

fn scalar(value: &Value) -> Scalar<'_> {
    match value {
        Value::Null => Scalar::Null,
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Number(n) => Scalar::Number(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Scalar::Str(s),
        Value::Array(_) | Value::Object(_) => Scalar::Compound,
    }
}

/// GitHub's `==`: JavaScript's abstract equality, except that strings compare ignoring case and
/// tables are never coerced.
fn loose_eq(left: &Value, right: &Value) -> bool {
    let (mut left, mut right) = (scalar(left), scalar(right));
    // Each step turns one side into a number, so this ends within three rounds.
    for _ in 0..4 {
        match (left, right) {
            (Scalar::Null, Scalar::Null) => return true,
            (Scalar::Bool(a), Scalar::Bool(b)) => return a == b,
            (Scalar::Number(a), Scalar::Number(b)) => return a == b,
            (Scalar::Str(a), Scalar::Str(b)) => return eq_ignore_case(a, b),
            (Scalar::Number(_), Scalar::Str(s)) => right = Scalar::Number(parse_number(s)),
            (Scalar::Str(s), Scalar::Number(_)) => left = Scalar::Number(parse_number(s)),
            (Scalar::Bool(_) | Scalar::Null, _) => left = Scalar::Number(to_number(left)),
            (_, Scalar::Bool(_) | Scalar::Null) => right = Scalar::Number(to_number(right)),
            _ => return false,
        }
    }
    false
}

fn to_number(value: Scalar<'_>) -> f64 {
    match value {
        Scalar::Null => 0.0,
        Scalar::Bool(b) => f64::from(u8::from(b)),
        Scalar::Number(n) => n,
        Scalar::Str(s) => parse_number(s),
        Scalar::Compound => f64::NAN,
    }
}

/// A string as a number, as GitHub's expressions read it (JavaScript's `Number()`): surrounding
/// white space ignored, empty is 0, decimal with sign, point and exponent, `0x` hex and `0o` octal
/// of 32 bits, `Infinity`; anything else is NaN (equal to nothing).
fn parse_number(text: &str) -> f64 {
    let text = text.trim();
    if text.is_empty() {
        return 0.0;
    }
    if is_decimal(text) {
        return text.parse().unwrap_or(f64::NAN);
    }
    let radix = |digits: &str, radix: u32| {
        u32::from_str_radix(digits, radix)
            // Two's complement, as .NET reads a 32-bit hex or octal literal.
            .map(|n| f64::from(n as i32))
            .unwrap_or(f64::NAN)
    };
    if let Some(hex) = text.strip_prefix("0x") {
        if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return radix(hex, 16);
        }
    }
    if let Some(octal) = text.strip_prefix("0o") {
        if !octal.is_empty() && octal.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return radix(octal, 8);
        }
    }
    match text {
        "Infinity" => f64::INFINITY,
        "-Infinity" => f64::NEG_INFINITY,
        _ => f64::NAN,
    }
}

/// `[+-]? (digits [. digits?] | . digits) ([eE] [+-]? digits)?`
fn is_decimal(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = usize::from(matches!(bytes.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    let mut mantissa = digits(&mut i);
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        mantissa += digits(&mut i);
    }
    if mantissa == 0 {
        return false;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == bytes.len()
}

/// Ordinal comparison ignoring case, one character at a time (as .NET's `OrdinalIgnoreCase`).
fn eq_ignore_case(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    let upper = |c: char| {
        let mut upper = c.to_uppercase();
        match (upper.next(), upper.next()) {
            (Some(u), None) => u,
            _ => c,
        }
    };
    a.chars().map(upper).eq(b.chars().map(upper))
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

    fn run(axes: &[Axis], exclude: &[Entry], include: &[Entry]) -> Vec<Value> {
        expand(axes, exclude, include)
            .unwrap()
            .iter()
            .map(|c| Value::Object(c.plain()))
            .collect()
    }

    /// Keys in order, so that tests see key order (`json!` objects compare without it).
    fn key_order(axes: &[Axis], exclude: &[Entry], include: &[Entry]) -> Vec<Vec<String>> {
        expand(axes, exclude, include)
            .unwrap()
            .iter()
            .map(|c| c.keys().map(str::to_owned).collect())
            .collect()
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
        assert_eq!(
            run(&axes, &[], &include),
            vec![
                json!({"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"}),
                json!({"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"}),
                json!({"fruit": "pear", "animal": "cat", "color": "pink"}),
                json!({"fruit": "pear", "animal": "dog", "color": "green"}),
                json!({"fruit": "banana"}),
                json!({"fruit": "banana", "animal": "cat"}),
            ]
        );
        assert_eq!(
            key_order(&axes, &[], &include)[0],
            ["fruit", "animal", "color", "shape"]
        );
    }

    /// GitHub docs, "Example: Expanding configurations" (`include` adds a key to one cell).
    #[test]
    fn github_adding_configurations_example() {
        let axes = [
            axis("os", &[json!("windows-latest"), json!("ubuntu-latest")]),
            axis("node", &[json!(12), json!(14), json!(16)]),
        ];
        let include = [entry(&[
            ("os", json!("windows-latest")),
            ("node", json!(16)),
            ("npm", json!(6)),
        ])];
        assert_eq!(
            run(&axes, &[], &include),
            vec![
                json!({"os": "windows-latest", "node": 12}),
                json!({"os": "windows-latest", "node": 14}),
                json!({"os": "windows-latest", "node": 16, "npm": 6}),
                json!({"os": "ubuntu-latest", "node": 12}),
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
        let got = run(&axes, &exclude, &[]);
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
        assert_eq!(
            run(&[], &[], &include),
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
        let got = expand(&axes, &exclude, &include).unwrap();
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
        let got = expand(&axes, &[], &include).unwrap();
        assert_eq!(got[1].source("a"), Some(Source::Axis { axis: 0, value: 1 }));
        assert_eq!(
            got[1].source("b"),
            Some(Source::Include { entry: 0, key: 1 })
        );
        assert_eq!(got[1].get("b"), Some(&json!("x")));
        assert_eq!(got[0].get("b"), None);
    }

    /// GitHub's parser puts an unmatched entry's axis keys first, then its other keys.
    #[test]
    fn new_combinations_put_axis_keys_first() {
        let axes = [axis("os", &[json!("linux")]), axis("arch", &[json!("x64")])];
        let include = [entry(&[
            ("experimental", json!(true)),
            ("arch", json!("arm")),
            ("os", json!("mac")),
        ])];
        assert_eq!(
            key_order(&axes, &[], &include)[1],
            ["arch", "os", "experimental"]
        );
    }

    /// An extra that an earlier include added keeps its place when a later one overwrites it.
    #[test]
    fn overwritten_extras_keep_their_position() {
        let axes = [axis("a", &[json!(1), json!(2)])];
        let include = [
            entry(&[("x", json!("first")), ("y", json!(0))]),
            entry(&[("a", json!(2)), ("x", json!("second"))]),
        ];
        let got = expand(&axes, &[], &include).unwrap();
        assert_eq!(got[1].keys().collect::<Vec<_>>(), ["a", "x", "y"]);
        assert_eq!(got[1].get("x"), Some(&json!("second")));
        assert_eq!(got[0].get("x"), Some(&json!("first")));
    }

    /// Table values match leaf by leaf: an entry naming some fields of a table matches every
    /// table with those fields (GitHub docs, "array of objects" axes).
    #[test]
    fn table_values_match_partially() {
        let axes = [
            axis("os", &[json!("ubuntu-latest"), json!("macos-latest")]),
            axis(
                "node",
                &[
                    json!({"version": 14}),
                    json!({"version": 20, "env": "NODE_OPTIONS=--openssl-legacy-provider"}),
                ],
            ),
        ];
        let include = [entry(&[
            ("node", json!({"version": 20})),
            ("npm", json!(10)),
        ])];
        let exclude = [entry(&[
            ("os", json!("macos-latest")),
            ("node", json!({"version": 14})),
        ])];
        let got = run(&axes, &exclude, &include);
        assert_eq!(
            got,
            vec![
                json!({"os": "ubuntu-latest", "node": {"version": 14}}),
                json!({"os": "ubuntu-latest", "node": {"version": 20, "env": "NODE_OPTIONS=--openssl-legacy-provider"}, "npm": 10}),
                json!({"os": "macos-latest", "node": {"version": 20, "env": "NODE_OPTIONS=--openssl-legacy-provider"}, "npm": 10}),
            ]
        );
    }

    /// GitHub compares with its expression `==`: case-insensitive strings, numbers and numeric
    /// strings alike.
    #[test]
    fn values_compare_as_github_expressions_do() {
        let axes = [
            axis("os", &[json!("Linux"), json!("mac")]),
            axis("version", &[json!(12), json!(14)]),
        ];
        let exclude = [entry(&[("os", json!("linux")), ("version", json!("12"))])];
        let include = [entry(&[("os", json!("MAC")), ("note", json!("x"))])];
        assert_eq!(
            run(&axes, &exclude, &include),
            vec![
                json!({"os": "Linux", "version": 14}),
                json!({"os": "mac", "version": 12, "note": "x"}),
                json!({"os": "mac", "version": 14, "note": "x"}),
            ]
        );
    }

    #[test]
    fn loose_equality_follows_github() {
        let eq = |a: Value, b: Value| loose_eq(&a, &b);
        assert!(eq(json!("abc"), json!("ABC")));
        assert!(eq(json!("ß"), json!("ß")));
        assert!(eq(json!(12), json!("12")));
        assert!(eq(json!(12), json!(" 1.2e1 ")));
        assert!(eq(json!(16), json!("0x10")));
        assert!(eq(json!(8), json!("0o10")));
        assert!(eq(json!(true), json!(1)));
        assert!(eq(json!(false), json!("")));
        assert!(eq(json!(null), json!(false)));
        assert!(eq(json!(null), json!(null)));
        assert!(!eq(json!("0.6.3"), json!("0.6.30")));
        assert!(!eq(json!(true), json!("true")));
        assert!(!eq(json!("abc"), json!(0)));
        assert!(eq(json!("NaN"), json!("nan")));
        assert!(!eq(json!({"a": 1}), json!({"a": 1})));
        assert!(eq(json!(-1), json!("0xffffffff")));
        assert!(!eq(json!(1), json!("inf")));
        assert!(!eq(json!(1), json!("1_000")));
    }

    #[test]
    fn the_limit_is_inclusive() {
        let thousand: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
        let at = |n: usize| {
            let other: Vec<Value> = (0..n).map(|i| json!(i)).collect();
            [axis("a", &thousand), axis("b", &other)]
        };
        assert_eq!(
            expand(&at(MAX_CELLS / 1000), &[], &[]).map(|c| c.len()),
            Ok(MAX_CELLS)
        );
        assert!(expand(&at(MAX_CELLS / 1000 + 1), &[], &[]).is_err());
    }

    #[test]
    fn products_too_large_are_refused_before_allocating() {
        let big: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
        let axes: Vec<Axis> = (0..3).map(|i| axis(&format!("a{i}"), &big)).collect();
        assert_eq!(product_size(&axes), Some(1_000_000_000));
        let err = expand(&axes, &[], &[]).unwrap_err();
        assert_eq!(err.combinations, Some(1_000_000_000));
        assert_eq!(
            err.to_string(),
            "the matrix has 1,000,000,000 combinations, more than the limit of 500,000"
        );
        let huge: Vec<Axis> = (0..20).map(|i| axis(&format!("a{i}"), &big)).collect();
        assert_eq!(product_size(&huge), None);
        assert!(expand(&huge, &[], &[]).is_err());
    }

    /// An empty axis makes the product empty, however large the other axes are.
    #[test]
    fn an_empty_axis_next_to_huge_ones() {
        let big: Vec<Value> = (0..100_000).map(|i| json!(i)).collect();
        let mut axes: Vec<Axis> = vec![axis("empty", &[])];
        axes.extend((0..5).map(|i| axis(&format!("a{i}"), &big)));
        let include = [entry(&[("a0", json!(1)), ("x", json!(1))])];
        let got = expand(&axes, &[], &include).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].created_by, Some(0));
    }

    #[test]
    fn empty_axes_and_odd_entries_do_not_panic() {
        let axes = [axis("a", &[]), axis("b", &[json!(1)])];
        let include = [entry(&[]), entry(&[("a", json!(1)), ("a", json!(2))])];
        let exclude = [entry(&[]), entry(&[("zzz", json!(false))])];
        let got = expand(&axes, &exclude, &include).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].get("a"), Some(&json!(2)));
    }

    /// An exclude key that is not an axis compares against a missing value, as in GitHub.
    #[test]
    fn exclude_key_missing_from_combinations() {
        let axes = [axis("a", &[json!(1), json!(2)])];
        let never = [entry(&[("a", json!(1)), ("b", json!("x"))])];
        assert_eq!(run(&axes, &never, &[]).len(), 2);
        let always = [entry(&[("a", json!(1)), ("b", json!(false))])];
        assert_eq!(run(&axes, &always, &[]), vec![json!({"a": 2})]);
    }
}
