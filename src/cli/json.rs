//! A tiny JSON writer: the CLI's wire format, and nothing else.
//!
//! Values are built as a [`Json`] tree and written compactly in one go; object keys
//! keep their insertion order. Strings are escaped per RFC 8259: `"` and `\`, the
//! control characters below U+0020 (short forms where JSON has them, `\u00XX`
//! otherwise); everything else, non-ASCII included, is written as UTF-8.

use std::fmt::Write;

/// A JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Uint(u64),
    Int(i64),
    /// A number with a fraction; NaN and infinities (not JSON) are written as `null`.
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    /// An object from `(key, value)` pairs, in order.
    pub fn object<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Object(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// A string value.
    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// `value`, or `null` for `None`.
    pub fn opt<T>(value: Option<T>, f: impl FnOnce(T) -> Json) -> Json {
        value.map_or(Json::Null, f)
    }

    /// The compact text of this value.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write_to(&mut out);
        out
    }

    fn write_to(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Uint(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Float(x) if x.is_finite() => {
                let _ = write!(out, "{x}");
            }
            Json::Float(_) => out.push_str("null"),
            Json::Str(s) => write_string(out, s),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_to(out);
                }
                out.push(']');
            }
            Json::Object(pairs) => {
                out.push('{');
                for (i, (key, value)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(out, key);
                    out.push(':');
                    value.write_to(out);
                }
                out.push('}');
            }
        }
    }
}

/// Writes `s` as a quoted, escaped JSON string.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> String {
        Json::str(text).render()
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(s("plain"), r#""plain""#);
        assert_eq!(s(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(s("l1\nl2\r\t"), r#""l1\nl2\r\t""#);
        assert_eq!(s("\u{8}\u{c}"), r#""\b\f""#);
        assert_eq!(s("\u{0}\u{1f}"), r#""\u0000\u001f""#);
        // DEL and non-ASCII need no escaping; `/` is left alone.
        assert_eq!(s("\u{7f}é→😀/"), "\"\u{7f}é→😀/\"");
    }

    #[test]
    fn values_render_compactly_in_order() {
        let v = Json::object([
            ("z", Json::Uint(u64::MAX)),
            ("a", Json::Int(-1)),
            ("n", Json::Null),
            ("b", Json::Bool(false)),
            ("list", Json::Array(vec![Json::Bool(true), Json::str("x")])),
            ("empty", Json::object(Vec::<(String, Json)>::new())),
        ]);
        assert_eq!(
            v.render(),
            r#"{"z":18446744073709551615,"a":-1,"n":null,"b":false,"list":[true,"x"],"empty":{}}"#
        );
        assert_eq!(Json::Float(1.5).render(), "1.5");
        assert_eq!(Json::Float(7.0).render(), "7");
        assert_eq!(Json::Float(f64::NAN).render(), "null");
        assert_eq!(Json::opt(None::<u64>, Json::Uint), Json::Null);
        assert_eq!(Json::opt(Some(3u64), Json::Uint), Json::Uint(3));
    }
}
