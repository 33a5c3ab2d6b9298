//! Sort keys as text: a SQL `ORDER BY` list (the `corank` binary's `--by`).
//!
//! ```text
//! order_by := item ("," item)*
//! item     := column [ASC | DESC] [NULLS FIRST | NULLS LAST]
//! column   := bare name (any characters but whitespace, ',' and '"')
//!           | "double-quoted name" ("" inside quotes is one ")
//! ```
//!
//! Keywords are case-insensitive. Defaults are SQL's: `ASC`; `NULLS LAST` for `ASC` and
//! `NULLS FIRST` for `DESC` (PostgreSQL's rule, which DataFusion follows). Column names are
//! matched exactly as written, quoted or not (Parquet column names keep their case).

use crate::error::{Error, Result, Setting};
use crate::sort_key::SortKey;
use arrow::compute::SortOptions;

/// Parses `"k DESC NULLS LAST, j"` into sort keys.
///
/// ```
/// use corank::parquet::parse_order_by;
/// use corank::SortKey;
///
/// let keys = parse_order_by("ts, \"user id\" DESC NULLS LAST")?;
/// assert_eq!(keys, [SortKey::asc("ts"), SortKey::desc("user id").nulls_first(false)]);
/// assert!(parse_order_by("ts SIDEWAYS").is_err());
/// # Ok::<(), corank::Error>(())
/// ```
pub fn parse_order_by(text: &str) -> Result<Vec<SortKey>> {
    let tokens = tokenize(text)?;
    let mut keys = Vec::new();
    for item in tokens.split(|t| matches!(t, Token::Comma)) {
        keys.push(parse_item(item, text)?);
    }
    if keys.is_empty() {
        return Err(usage(text, "no sort column"));
    }
    Ok(keys)
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// A bare word: a keyword or a column name.
    Word(String),
    /// A double-quoted column name.
    Quoted(String),
    Comma,
}

fn usage(text: &str, what: &str) -> Error {
    Error::InvalidSetting { setting: Setting::SortKey, detail: format!("\"{text}\": {what} (expected e.g. \"k DESC NULLS LAST, j\")") }
}

fn tokenize(text: &str) -> Result<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == ',' {
            chars.next();
            tokens.push(Token::Comma);
        } else if c == '"' {
            chars.next();
            let mut name = String::new();
            loop {
                match chars.next() {
                    None => return Err(usage(text, "unterminated quoted name")),
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    Some('"') => break,
                    Some(ch) => name.push(ch),
                }
            }
            tokens.push(Token::Quoted(name));
        } else {
            let mut word = String::new();
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() || ch == ',' || ch == '"' {
                    break;
                }
                word.push(ch);
                chars.next();
            }
            tokens.push(Token::Word(word));
        }
    }
    Ok(tokens)
}

fn is_keyword(t: &Token, keyword: &str) -> bool {
    matches!(t, Token::Word(w) if w.eq_ignore_ascii_case(keyword))
}

fn parse_item(item: &[Token], text: &str) -> Result<SortKey> {
    let (column, rest) = match item.split_first() {
        None => return Err(usage(text, "empty sort item")),
        Some((Token::Quoted(name), rest)) => (name.clone(), rest),
        Some((Token::Word(w), rest)) => (w.clone(), rest),
        Some((Token::Comma, _)) => unreachable!("items are split at commas"),
    };
    let mut rest = rest;
    let mut descending = false;
    if let Some(t) = rest.first() {
        if is_keyword(t, "ASC") || is_keyword(t, "DESC") {
            descending = is_keyword(t, "DESC");
            rest = &rest[1..];
        }
    }
    let mut nulls_first = descending;
    match rest {
        [] => {}
        [n, fl] if is_keyword(n, "NULLS") && (is_keyword(fl, "FIRST") || is_keyword(fl, "LAST")) => nulls_first = is_keyword(fl, "FIRST"),
        _ => {
            let extra: Vec<String> = rest
                .iter()
                .map(|t| match t {
                    Token::Word(w) => w.clone(),
                    Token::Quoted(q) => format!("\"{q}\""),
                    Token::Comma => ",".into(),
                })
                .collect();
            return Err(usage(text, &format!("unexpected '{}' after column '{column}'", extra.join(" "))));
        }
    }
    Ok(SortKey::new(column, SortOptions { descending, nulls_first }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(descending: bool, nulls_first: bool) -> SortOptions {
        SortOptions { descending, nulls_first }
    }

    #[test]
    fn sql_defaults_and_explicit_options() {
        let keys = parse_order_by("k DESC NULLS LAST, j, \"Mixed Case\" desc, x asc nulls first").unwrap();
        let got: Vec<(String, SortOptions)> = keys.into_iter().map(|k| (k.column, k.options)).collect();
        assert_eq!(
            got,
            vec![
                ("k".into(), opts(true, false)),
                ("j".into(), opts(false, false)),
                ("Mixed Case".into(), opts(true, true)),
                ("x".into(), opts(false, true)),
            ]
        );
        assert_eq!(parse_order_by("\"a\"\"b\"").unwrap()[0].column, "a\"b");
    }

    #[test]
    fn bad_syntax_is_an_error() {
        for bad in ["", " , ", "k,", "k DESC NULLS", "k NULLS MIDDLE", "k DESC ASC", "\"k", "k j"] {
            let e = parse_order_by(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidSetting { setting: Setting::SortKey, .. }), "{bad}: {e}");
        }
    }
}
