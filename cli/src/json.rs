//! The CLI's JSON values: `serde_json`'s [`Value`](serde_json::Value) (with
//! `preserve_order`, so objects keep the order their keys were given in), and the few
//! constructors the output code uses. Lines are written with `to_string()`: compact.

use serde_json::{Map, Value};

/// A JSON value.
pub type Json = Value;

/// An object from `(key, value)` pairs, in order.
pub fn object<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
    Value::Object(
        pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect::<Map<_, _>>(),
    )
}

/// A string value.
pub fn str(s: impl Into<String>) -> Json {
    Value::String(s.into())
}

/// `value`, or `null` for `None`.
pub fn opt<T>(value: Option<T>, f: impl FnOnce(T) -> Json) -> Json {
    value.map_or(Value::Null, f)
}

/// A number with a fraction, written as an integer when it has none (`7`, not `7.0`,
/// as the CLI always wrote it); NaN and infinities (not JSON) are `null`.
pub fn float(x: f64) -> Json {
    const EXACT: f64 = (1u64 << 53) as f64;
    if x.is_finite() && x.fract() == 0.0 && x.abs() < EXACT {
        Value::from(x as i64)
    } else {
        Value::from(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> String {
        str(text).to_string()
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
        let v = object([
            ("z", Json::from(u64::MAX)),
            ("a", Json::from(-1i64)),
            ("n", Json::Null),
            ("b", Json::Bool(false)),
            ("list", Json::Array(vec![Json::Bool(true), str("x")])),
            ("empty", object(Vec::<(String, Json)>::new())),
        ]);
        assert_eq!(
            v.to_string(),
            r#"{"z":18446744073709551615,"a":-1,"n":null,"b":false,"list":[true,"x"],"empty":{}}"#
        );
        assert_eq!(float(1.5).to_string(), "1.5");
        assert_eq!(float(7.0).to_string(), "7");
        assert_eq!(float(-2.0).to_string(), "-2");
        assert_eq!(float(1e300).to_string(), "1e+300");
        assert_eq!(float(f64::NAN).to_string(), "null");
        assert_eq!(float(f64::INFINITY).to_string(), "null");
        assert_eq!(opt(None::<u64>, Json::from), Json::Null);
        assert_eq!(opt(Some(3u64), Json::from), Json::from(3u64));
    }
}
