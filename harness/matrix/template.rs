//! `{key}` placeholders in matrix-file strings.
//!
//! `{key}` is replaced by the cell's value for `key`; `{key.field}` reaches into a table value;
//! `{{` and `}}` are literal braces. Shell syntax is left alone: `${VAR}` and anything in braces
//! that is not a plain key name (`{ a; b; }`, `awk '{print $1}'`) stays as written, so commands
//! need no escaping. A few names (`{port}`, `{engine_dir}`) are filled by the runner later.

use serde_json::Value;
use std::ops::Range;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Key {
        name: String,
        path: Vec<String>,
        /// Byte range of `{...}` in the template text.
        at: Range<usize>,
    },
}

/// A placeholder found in a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder<'a> {
    pub name: &'a str,
    /// Fields reached into (`{model.name}` has `["name"]`).
    pub path: &'a [String],
    /// Byte range of `{...}` in the template text.
    pub at: Range<usize>,
}

impl Template {
    /// Parses a template; never fails (anything that is not a placeholder is text).
    pub fn parse(text: &str) -> Template {
        let bytes = text.as_bytes();
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut i = 0;
        while i < text.len() {
            let rest = &text[i..];
            if rest.starts_with("{{") || rest.starts_with("}}") {
                literal.push(rest.as_bytes()[0] as char);
                i += 2;
                continue;
            }
            if rest.starts_with("${") {
                // Shell parameter expansion: copy through its closing brace untouched.
                let end = rest.find('}').map_or(text.len(), |j| i + j + 1);
                literal.push_str(&text[i..end]);
                i = end;
                continue;
            }
            if bytes[i] == b'{' {
                if let Some(len) = rest[1..].find('}') {
                    let inner = &rest[1..1 + len];
                    if is_key_path(inner) {
                        if !literal.is_empty() {
                            pieces.push(Piece::Text(std::mem::take(&mut literal)));
                        }
                        let mut parts = inner.split('.').map(str::to_owned);
                        let name = parts.next().unwrap_or_default();
                        pieces.push(Piece::Key {
                            name,
                            path: parts.collect(),
                            at: i..i + len + 2,
                        });
                        i += len + 2;
                        continue;
                    }
                }
            }
            let ch = rest.chars().next().unwrap_or_default();
            literal.push(ch);
            i += ch.len_utf8();
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Template { pieces }
    }

    /// The placeholders, in order.
    pub fn placeholders(&self) -> impl Iterator<Item = Placeholder<'_>> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Key { name, path, at } => Some(Placeholder {
                name,
                path,
                at: at.clone(),
            }),
            Piece::Text(_) => None,
        })
    }

    /// The text, when the template has no placeholders (it renders the same for every cell).
    pub fn literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [] => Some(""),
            [Piece::Text(text)] => Some(text),
            _ => None,
        }
    }

    /// Renders with `lookup`; a name it does not know (`None`) is left as `{name}` for a later
    /// stage. A key that a cell lacks (`Some(None)`) renders as an empty string, as on GitHub, and
    /// so does a field that its value lacks.
    pub fn render<'v>(&self, lookup: impl Fn(&str) -> Option<Option<&'v Value>>) -> String {
        let mut out = String::with_capacity(self.size_hint());
        self.render_into(&mut out, lookup);
        out
    }

    /// A guess at the rendered length, so rendering rarely grows its string: the text, plus a
    /// short value per placeholder.
    pub fn size_hint(&self) -> usize {
        self.pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.len(),
                Piece::Key { .. } => 24,
            })
            .sum()
    }

    /// [`Template::render`], appending to `out`.
    pub fn render_into<'v>(
        &self,
        out: &mut String,
        lookup: impl Fn(&str) -> Option<Option<&'v Value>>,
    ) {
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Key { name, path, .. } => match lookup(name) {
                    None => {
                        out.push('{');
                        out.push_str(name);
                        for part in path {
                            out.push('.');
                            out.push_str(part);
                        }
                        out.push('}');
                    }
                    Some(value) => {
                        let value = value.and_then(|value| {
                            path.iter()
                                .try_fold(value, |value, part| field(value, part))
                        });
                        if let Some(value) = value {
                            push_value_text(out, value);
                        }
                    }
                },
            }
        }
    }
}

/// `value.part`: a table's field, or an array's element by index.
pub fn field<'v>(value: &'v Value, part: &str) -> Option<&'v Value> {
    match value {
        Value::Object(map) => map.get(part),
        Value::Array(items) => items.get(part.parse::<usize>().ok()?),
        _ => None,
    }
}

fn push_value_text(out: &mut String, value: &Value) {
    match value {
        Value::String(s) => out.push_str(s),
        Value::Null => {}
        other => out.push_str(&other.to_string()),
    }
}

/// How a value reads in a command or environment variable.
pub fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn is_key_path(inner: &str) -> bool {
    !inner.is_empty()
        && inner.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(text: &str) -> String {
        let values = json!({"fi": "0.6.3", "model": {"name": "qwen", "tp": 2}, "flag": true});
        Template::parse(text).render(|name| match name {
            "port" => None,
            "missing" => Some(None),
            other => Some(values.get(other)),
        })
    }

    #[test]
    fn substitutes_keys_fields_and_escapes() {
        assert_eq!(render("sh smoke.sh {fi}"), "sh smoke.sh 0.6.3");
        assert_eq!(
            render("--tp {model.tp} --m {model.name}"),
            "--tp 2 --m qwen"
        );
        assert_eq!(render("{flag}/{missing}/"), "true//");
        assert_eq!(render("{{fi}}"), "{fi}");
        assert_eq!(render("serve --port {port}"), "serve --port {port}");
        assert_eq!(render("{model}"), r#"{"name":"qwen","tp":2}"#);
        assert_eq!(render("[{model.nope}][{fi.x}][{missing.x}]"), "[][][]");
    }

    #[test]
    fn leaves_shell_syntax_alone() {
        assert_eq!(render("${PY:-python3} x.py"), "${PY:-python3} x.py");
        assert_eq!(render("awk '{print $1}'"), "awk '{print $1}'");
        assert_eq!(render("{ a; b; } {"), "{ a; b; } {");
        assert_eq!(render("é{fi}ü"), "é0.6.3ü");
    }

    #[test]
    fn reports_placeholder_positions() {
        let t = Template::parse("a {fi} b {model.tp}");
        let found: Vec<_> = t.placeholders().map(|p| (p.name, p.at)).collect();
        assert_eq!(found, vec![("fi", 2..6), ("model", 9..19)]);
        assert_eq!(
            t.placeholders().nth(1).map(|p| p.path.to_vec()),
            Some(vec!["tp".to_owned()])
        );
        assert_eq!(Template::parse("plain {{x}}").literal(), Some("plain {x}"));
        assert_eq!(t.literal(), None);
    }
}
