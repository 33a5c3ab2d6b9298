//! A small JSON writer for `--json` (the summary and the dry-run plan): values built in
//! order, written on one line, strings escaped as RFC 8259 requires.

use std::fmt::Write;

/// A JSON value. Objects keep their keys in the order given.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// An integer, written exactly.
    Int(i128),
    /// A number; not finite (NaN, infinities) is written as `null`.
    Num(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// An empty object, to fill with [`Json::field`].
    pub fn object() -> Self {
        Json::Object(Vec::new())
    }

    /// Adds `key: value` to an object (anything else is left as it is).
    pub fn field(mut self, key: &str, value: impl Into<Json>) -> Self {
        if let Json::Object(fields) = &mut self {
            fields.push((key.to_string(), value.into()));
        }
        self
    }

    /// The value as one line of JSON.
    pub fn to_line(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(i) => {
                let _ = write!(out, "{i}");
            }
            // Rust writes the shortest text that reads back as the same f64, without an
            // exponent: valid JSON (`1`, `0.25`, `0.0000001`).
            Json::Num(x) if x.is_finite() => {
                let _ = write!(out, "{x}");
            }
            Json::Num(_) => out.push_str("null"),
            Json::Str(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(key, out);
                    out.push(':');
                    value.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// `s` as a JSON string: `"` and `\` escaped, control characters as `\n`, `\t`, ... or
/// `\u00XX`; everything else (any Unicode) as it is.
fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl From<bool> for Json {
    fn from(b: bool) -> Self {
        Json::Bool(b)
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Json {
            fn from(i: $t) -> Self {
                Json::Int(i as i128)
            }
        }
    )*};
}
from_int!(u8, u16, u32, u64, usize, i32, i64);

impl From<f64> for Json {
    fn from(x: f64) -> Self {
        Json::Num(x)
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Self {
        Json::Str(s.to_string())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Self {
        Json::Str(s)
    }
}

/// A path as a string (not UTF-8: its bytes decoded lossily, U+FFFD for what is not).
impl From<&std::path::Path> for Json {
    fn from(p: &std::path::Path) -> Self {
        Json::Str(p.to_string_lossy().into_owned())
    }
}

impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Self {
        v.map_or(Json::Null, Into::into)
    }
}

impl<T: Into<Json>> From<Vec<T>> for Json {
    fn from(v: Vec<T>) -> Self {
        Json::Array(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let s = "a\"b\\c\nd\re\tf\u{08}g\u{0c}h\u{01}i\u{1f}j\u{7f}k/é😀";
        let line = Json::from(s).to_line();
        assert_eq!(line, r#""a\"b\\c\nd\re\tf\bg\fh\u0001i\u001fj\u007fk/é😀""#);
        // Every character from U+0000 to U+00FF round-trips through a real parser.
        let all: String = (0u32..=0xff).filter_map(char::from_u32).collect();
        let parsed: serde_json::Value = serde_json::from_str(&Json::from(all.as_str()).to_line()).unwrap();
        assert_eq!(parsed.as_str(), Some(all.as_str()));
    }

    #[test]
    fn values_nest_in_order() {
        let v = Json::object()
            .field("rows", 10_000_000usize)
            .field("s", 1.25)
            .field("nan", f64::NAN)
            .field("none", None::<u64>)
            .field("ok", true)
            .field("list", vec![1u64, 2])
            .field("nested", Json::object().field("k\"", "v"));
        assert_eq!(v.to_line(), r#"{"rows":10000000,"s":1.25,"nan":null,"none":null,"ok":true,"list":[1,2],"nested":{"k\"":"v"}}"#);
        let parsed: serde_json::Value = serde_json::from_str(&v.to_line()).unwrap();
        assert_eq!(parsed["nested"]["k\""], "v");
        assert_eq!(Json::from(u64::MAX).to_line(), "18446744073709551615");
        assert_eq!(Json::from(1e-7).to_line(), "0.0000001");
        assert_eq!(Json::from(3.0).to_line(), "3");
    }
}
