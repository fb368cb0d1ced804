//! Cell filter expressions: `--filter 'flashinfer=0.6.8.post1 & gpu=sm_90*'`.
//!
//! ```text
//! expr    := or
//! or      := and ("|" and)*
//! and     := unary ("&" unary)*
//! unary   := "!" unary | "(" expr ")" | KEY ("=" | "!=") VALUE
//! KEY     := letters, digits, `_`, `-`, `.`
//! VALUE   := a word (up to blank, `&`, `|`, `(`, `)`) or a quoted string ('...' or "...");
//!            `*` in it matches any run of characters
//! ```
//!
//! `&` binds tighter than `|`, as in every language with both. Keys are checked against the
//! matrix's keys (with a did-you-mean): a typo is an error, never a filter that silently matches
//! nothing. Every error carries the byte range of the bad token, so it is shown with a caret
//! under it ([`FilterError::render`]). Pure: no I/O.

use crate::record::Values;
use std::fmt;
use std::ops::Range;

/// A parsed filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// `KEY=PATTERN` (`equal`) or `KEY!=PATTERN`.
    Compare {
        key: String,
        pattern: String,
        equal: bool,
    },
    Not(Box<Filter>),
    And(Box<Filter>, Box<Filter>),
    Or(Box<Filter>, Box<Filter>),
}

/// A filter that could not be parsed or names an unknown key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// The filter as given.
    pub source: String,
    /// Byte range of the bad token in `source` (empty at the end: something is missing).
    pub span: Range<usize>,
    pub message: String,
    pub help: Option<String>,
}

impl FilterError {
    /// `error: ...`, the filter, a caret line under the bad token, and the help.
    pub fn render(&self) -> String {
        let before = self.source.get(..self.span.start).unwrap_or_default();
        let bad = self.source.get(self.span.clone()).unwrap_or_default();
        let pad = before.chars().count();
        let width = bad.chars().count().max(1);
        let mut text = format!(
            "error: {}\n  --> --filter:1:{}\n   |\n   | {}\n   | {}{}",
            self.message,
            pad + 1,
            self.source,
            " ".repeat(pad),
            "^".repeat(width)
        );
        if let Some(help) = &self.help {
            text.push_str(&format!("\n   = help: {help}"));
        }
        text
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl std::error::Error for FilterError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    And,
    Or,
    Not,
    Open,
    Close,
    Eq,
    NotEq,
    Word(String),
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::And => "`&`".to_owned(),
            Tok::Or => "`|`".to_owned(),
            Tok::Not => "`!`".to_owned(),
            Tok::Open => "`(`".to_owned(),
            Tok::Close => "`)`".to_owned(),
            Tok::Eq => "`=`".to_owned(),
            Tok::NotEq => "`!=`".to_owned(),
            Tok::Word(w) => format!("`{w}`"),
        }
    }
}

/// Characters that end a bare word.
fn ends_word(c: char) -> bool {
    c.is_whitespace() || matches!(c, '&' | '|' | '(' | ')' | '=' | '\'' | '"')
}

fn lex(source: &str) -> Result<Vec<(Tok, Range<usize>)>, FilterError> {
    let err = |span: Range<usize>, message: String| FilterError {
        source: source.to_owned(),
        span,
        message,
        help: None,
    };
    let mut tokens = Vec::new();
    let mut chars = source.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        let single = |tok: Tok| (tok, start..start + c.len_utf8());
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '&' => {
                chars.next();
                // `&&` reads as `&`, as a shell user would write it.
                if chars.peek().is_some_and(|&(_, n)| n == '&') {
                    chars.next();
                    tokens.push((Tok::And, start..start + 2));
                } else {
                    tokens.push(single(Tok::And));
                }
            }
            '|' => {
                chars.next();
                if chars.peek().is_some_and(|&(_, n)| n == '|') {
                    chars.next();
                    tokens.push((Tok::Or, start..start + 2));
                } else {
                    tokens.push(single(Tok::Or));
                }
            }
            '(' => {
                chars.next();
                tokens.push(single(Tok::Open));
            }
            ')' => {
                chars.next();
                tokens.push(single(Tok::Close));
            }
            '=' => {
                chars.next();
                // `==` reads as `=`.
                if chars.peek().is_some_and(|&(_, n)| n == '=') {
                    chars.next();
                    tokens.push((Tok::Eq, start..start + 2));
                } else {
                    tokens.push(single(Tok::Eq));
                }
            }
            '!' => {
                chars.next();
                if chars.peek().is_some_and(|&(_, n)| n == '=') {
                    chars.next();
                    tokens.push((Tok::NotEq, start..start + 2));
                } else {
                    tokens.push(single(Tok::Not));
                }
            }
            '\'' | '"' => {
                chars.next();
                let mut word = String::new();
                let mut end = None;
                for (i, n) in chars.by_ref() {
                    if n == c {
                        end = Some(i + 1);
                        break;
                    }
                    word.push(n);
                }
                let Some(end) = end else {
                    return Err(err(start..source.len(), "unclosed quote".to_owned()));
                };
                tokens.push((Tok::Word(word), start..end));
            }
            _ => {
                let mut end = start;
                let mut word = String::new();
                while let Some(&(i, n)) = chars.peek() {
                    // `!` ends a word only as the start of `!=`.
                    if ends_word(n) || (n == '!' && source[i..].starts_with("!=")) {
                        break;
                    }
                    word.push(n);
                    end = i + n.len_utf8();
                    chars.next();
                }
                tokens.push((Tok::Word(word), start..end));
            }
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    source: &'a str,
    tokens: Vec<(Tok, Range<usize>)>,
    at: usize,
    keys: &'a [String],
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.at).map(|(t, _)| t)
    }

    fn span(&self) -> Range<usize> {
        self.tokens
            .get(self.at)
            .map_or(self.source.len()..self.source.len(), |(_, s)| s.clone())
    }

    fn error(&self, span: Range<usize>, message: String, help: Option<String>) -> FilterError {
        FilterError {
            source: self.source.to_owned(),
            span,
            message,
            help,
        }
    }

    /// "expected X, found Y" at the current token.
    fn expected(&self, what: &str) -> FilterError {
        let found = self
            .peek()
            .map_or_else(|| "the end of the filter".to_owned(), Tok::describe);
        self.error(self.span(), format!("expected {what}, found {found}"), None)
    }

    fn or(&mut self) -> Result<Filter, FilterError> {
        let mut left = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.at += 1;
            left = Filter::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Filter, FilterError> {
        let mut left = self.unary()?;
        while self.peek() == Some(&Tok::And) {
            self.at += 1;
            left = Filter::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Filter, FilterError> {
        match self.peek() {
            Some(Tok::Not) => {
                self.at += 1;
                Ok(Filter::Not(Box::new(self.unary()?)))
            }
            Some(Tok::Open) => {
                let open = self.span();
                self.at += 1;
                let inner = self.or()?;
                if self.peek() != Some(&Tok::Close) {
                    let mut err = self.expected("`)`");
                    err.help = Some(format!(
                        "the `(` at column {} is not closed",
                        self.source[..open.start].chars().count() + 1
                    ));
                    return Err(err);
                }
                self.at += 1;
                Ok(inner)
            }
            Some(Tok::Word(_)) => self.compare(),
            _ => Err(self.expected("`KEY=VALUE`, `!` or `(`")),
        }
    }

    fn compare(&mut self) -> Result<Filter, FilterError> {
        let key_span = self.span();
        let Some(Tok::Word(key)) = self.peek().cloned() else {
            return Err(self.expected("a key"));
        };
        self.at += 1;
        let equal = match self.peek() {
            Some(Tok::Eq) => true,
            Some(Tok::NotEq) => false,
            _ => {
                let mut err = self.expected("`=` or `!=` after the key");
                err.help = Some(format!(
                    "write `{key}=VALUE` (`*` matches any run of characters)"
                ));
                return Err(err);
            }
        };
        self.at += 1;
        let Some(Tok::Word(pattern)) = self.peek().cloned() else {
            return Err(self.expected("a value"));
        };
        self.at += 1;
        if !self.keys.contains(&key) {
            let help = match crate::suggest::did_you_mean(&key, self.keys) {
                Some(near) => format!("did you mean `{near}`?"),
                None => format!("the matrix's keys: {}", self.keys.join(", ")),
            };
            return Err(self.error(
                key_span,
                format!("unknown key `{key}` in the filter"),
                Some(help),
            ));
        }
        Ok(Filter::Compare {
            key,
            pattern,
            equal,
        })
    }
}

impl Filter {
    /// Parses `source`; `keys` are the keys a cell of the matrix can have.
    pub fn parse(source: &str, keys: &[String]) -> Result<Filter, FilterError> {
        let tokens = lex(source)?;
        let mut parser = Parser {
            source,
            tokens,
            at: 0,
            keys,
        };
        let filter = parser.or()?;
        if parser.peek().is_some() {
            let found = parser.peek().map(Tok::describe).unwrap_or_default();
            let help = matches!(parser.peek(), Some(Tok::Word(_)))
                .then(|| "join conditions with `&` (and) or `|` (or)".to_owned());
            return Err(parser.error(
                parser.span(),
                format!("unexpected {found} after a complete filter"),
                help,
            ));
        }
        Ok(filter)
    }

    /// Whether a cell with `values` is selected. A key the cell lacks has the empty value.
    pub fn matches(&self, values: &Values) -> bool {
        match self {
            Filter::Compare {
                key,
                pattern,
                equal,
            } => {
                let value = match values.get(key) {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(serde_json::Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                glob(pattern, &value) == *equal
            }
            Filter::Not(inner) => !inner.matches(values),
            Filter::And(a, b) => a.matches(values) && b.matches(values),
            Filter::Or(a, b) => a.matches(values) || b.matches(values),
        }
    }
}

/// Whether `text` matches `pattern`, where `*` is any run of characters (none included) and
/// every other character is itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn keys() -> Vec<String> {
        ["flashinfer", "gpu", "kernels"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    }

    fn values(pairs: &[(&str, &str)]) -> Values {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::String((*v).to_owned())))
            .collect()
    }

    fn parse(source: &str) -> Result<Filter, FilterError> {
        Filter::parse(source, &keys())
    }

    #[test]
    fn selects_by_value_with_globs_and_operators() {
        let cell = values(&[
            ("flashinfer", "0.6.8.post1"),
            ("gpu", "sm_90"),
            ("kernels", "moe"),
        ]);
        let yes = [
            "flashinfer=0.6.8.post1 & gpu=sm_90*",
            "flashinfer=0.6.8* && gpu==sm_90",
            "gpu=sm_86 | kernels=moe",
            "!(gpu=sm_86)",
            "! gpu = sm_86",
            "gpu!=sm_86 & (kernels=core | kernels=moe)",
            "flashinfer='0.6.8.post1'",
            "flashinfer=*post*",
            "flashinfer=*",
        ];
        for source in yes {
            assert!(parse(source).expect(source).matches(&cell), "{source}");
        }
        let no = [
            "gpu=sm_86",
            "flashinfer=0.6.8",
            "gpu!=sm_9*",
            "gpu=sm_86 | kernels=core & flashinfer=0.6.8.post1",
            "!(flashinfer=0.6.8.post1)",
        ];
        for source in no {
            assert!(!parse(source).expect(source).matches(&cell), "{source}");
        }
    }

    #[test]
    fn and_binds_tighter_than_or() {
        assert_eq!(
            parse("gpu=a | gpu=b & kernels=c").expect("parse"),
            Filter::Or(
                Box::new(Filter::Compare {
                    key: "gpu".into(),
                    pattern: "a".into(),
                    equal: true
                }),
                Box::new(Filter::And(
                    Box::new(Filter::Compare {
                        key: "gpu".into(),
                        pattern: "b".into(),
                        equal: true
                    }),
                    Box::new(Filter::Compare {
                        key: "kernels".into(),
                        pattern: "c".into(),
                        equal: true
                    }),
                ))
            )
        );
    }

    #[test]
    fn a_missing_key_is_the_empty_value() {
        let cell = values(&[("gpu", "sm_90")]);
        assert!(parse("kernels=''").expect("parse").matches(&cell));
        assert!(parse("kernels!=moe").expect("parse").matches(&cell));
    }

    /// The caret line of a rendered error: where the `^`s are.
    fn caret(err: &FilterError) -> (usize, usize) {
        let rendered = err.render();
        let line = rendered
            .lines()
            .find(|l| {
                l.trim_start_matches(" ")
                    .trim_start_matches('|')
                    .contains('^')
            })
            .expect("a caret line");
        let body = &line[5..];
        let start = body.find('^').expect("caret");
        (start, body.trim_end().len() - start)
    }

    #[test]
    fn errors_say_where_and_what() {
        let err = parse("flashinfer=0.6.8 & gpuu=sm_90").expect_err("unknown key");
        assert_eq!(err.message, "unknown key `gpuu` in the filter");
        assert_eq!(err.help.as_deref(), Some("did you mean `gpu`?"));
        assert_eq!(caret(&err), (19, 4));
        let err = parse("xyzzy=1").expect_err("unknown key");
        assert_eq!(
            err.help.as_deref(),
            Some("the matrix's keys: flashinfer, gpu, kernels")
        );

        let err = parse("gpu=sm_90 &").expect_err("dangling");
        assert!(
            err.message.contains("found the end of the filter"),
            "{}",
            err.message
        );
        assert_eq!(caret(&err), (11, 1));

        let err = parse("(gpu=sm_90 | gpu=sm_86").expect_err("unclosed");
        assert!(err.message.starts_with("expected `)`"), "{}", err.message);
        assert_eq!(
            err.help.as_deref(),
            Some("the `(` at column 1 is not closed")
        );

        let err = parse("gpu sm_90").expect_err("no operator");
        assert_eq!(
            err.message,
            "expected `=` or `!=` after the key, found `sm_90`"
        );
        assert_eq!(caret(&err), (4, 5));

        let err = parse("gpu=sm_90 kernels=moe").expect_err("no joiner");
        assert!(err.help.as_deref().is_some_and(|h| h.contains('&')));
        assert_eq!(caret(&err), (10, 7));

        let err = parse("gpu='sm_90").expect_err("quote");
        assert_eq!(err.message, "unclosed quote");
        assert_eq!(caret(&err), (4, 6));

        assert!(parse("").is_err());
        assert!(parse("gpu=").is_err());
        assert!(parse(")").is_err());
    }

    #[test]
    fn globs() {
        assert!(glob("sm_9*", "sm_90"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(glob("a*a", "aa"));
        assert!(!glob("a*a", "a"));
        assert!(!glob("sm_9*", "sm_86"));
        assert!(glob("0.6.8.post1", "0.6.8.post1"));
        assert!(!glob("0.6.8", "0.6.8.post1"));
    }

    /// Filters built from the grammar, rendered as text.
    fn arb_filter() -> impl Strategy<Value = Filter> {
        let leaf = (
            prop::sample::select(keys()),
            "[a-z0-9_.*]{1,6}",
            any::<bool>(),
        )
            .prop_map(|(key, pattern, equal)| Filter::Compare {
                key,
                pattern,
                equal,
            });
        leaf.prop_recursive(4, 24, 2, |inner| {
            prop_oneof![
                inner.clone().prop_map(|f| Filter::Not(Box::new(f))),
                (inner.clone(), inner.clone())
                    .prop_map(|(a, b)| Filter::And(Box::new(a), Box::new(b))),
                (inner.clone(), inner).prop_map(|(a, b)| Filter::Or(Box::new(a), Box::new(b))),
            ]
        })
    }

    fn show(filter: &Filter) -> String {
        match filter {
            Filter::Compare {
                key,
                pattern,
                equal,
            } => format!("{key}{}{pattern}", if *equal { "=" } else { "!=" }),
            Filter::Not(inner) => format!("!({})", show(inner)),
            Filter::And(a, b) => format!("({} & {})", show(a), show(b)),
            Filter::Or(a, b) => format!("({} | {})", show(a), show(b)),
        }
    }

    proptest! {
        #[test]
        fn printed_filters_parse_back_to_themselves(filter in arb_filter()) {
            prop_assert_eq!(parse(&show(&filter)).expect("parse"), filter);
        }

        #[test]
        fn not_is_the_complement(
            filter in arb_filter(),
            gpu in "[a-z0-9_.]{0,6}",
            kernels in "[a-z0-9_.]{0,6}",
        ) {
            let cell = values(&[("gpu", &gpu), ("kernels", &kernels)]);
            let negated = parse(&format!("!({})", show(&filter))).expect("parse");
            prop_assert_eq!(negated.matches(&cell), !filter.matches(&cell));
        }

        #[test]
        fn any_text_is_a_filter_or_a_located_error(source in "[a-z=!&|() '*_.]{0,24}") {
            if let Err(err) = parse(&source) {
                prop_assert!(err.span.start <= source.len() && err.span.end <= source.len());
                prop_assert!(source.is_char_boundary(err.span.start));
                prop_assert!(err.render().contains('^'));
            }
        }

        #[test]
        fn a_star_matches_what_it_stands_for(prefix in "[a-z]{0,4}", middle in "[a-z.]{0,4}", suffix in "[a-z]{0,4}") {
            let text = format!("{prefix}{middle}{suffix}");
            let pattern = format!("{prefix}*{suffix}");
            prop_assert!(glob(&pattern, &text));
        }
    }
}
