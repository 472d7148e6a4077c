//! `perfring explain`: prints the library's field-by-field view of the
//! `perf_event_attr` (`perfring::counter::explain`), as text or JSON.

use std::fmt::Write;

use perfring::counter::explain::{Field, FieldValue as Value};

use crate::json::{self, Json};

/// `name value` lines; the attr fields are indented under a `perf_event_open` line.
pub fn text(fields: &[Field]) -> String {
    let get = |name: &str| {
        fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| show(&f.value))
    };
    let mut out = format!(
        "perf_event_open(&attr, pid={}, cpu={}, group_fd={}, flags={})\n",
        get("pid").unwrap_or_default(),
        get("cpu").unwrap_or_default(),
        get("group_fd").unwrap_or_default(),
        get("flags").unwrap_or_default(),
    );
    for f in fields {
        if matches!(f.name, "pid" | "cpu" | "group_fd" | "flags") {
            continue;
        }
        let _ = writeln!(out, "  {:<24} {}", f.name, show(&f.value));
    }
    out
}

fn show(v: &Value) -> String {
    match v {
        Value::Dec(n) => n.to_string(),
        Value::Signed(n) => n.to_string(),
        Value::Hex(n) => format!("{n:#x}"),
        Value::Named(n, name) => format!("{n} ({name})"),
        Value::Flags(0, _) => "0".into(),
        Value::Flags(n, names) if names.is_empty() => format!("{n:#x}"),
        Value::Flags(_, names) => names.join("|"),
    }
}

/// One object keyed by field name: numbers as numbers; named values and masks also
/// get a `<field>_name` / `<field>_names` key.
pub fn json(fields: &[Field]) -> Json {
    let mut pairs: Vec<(String, Json)> = Vec::new();
    for f in fields {
        match &f.value {
            Value::Dec(n) | Value::Hex(n) => pairs.push((f.name.into(), Json::from(*n))),
            Value::Signed(n) => pairs.push((f.name.into(), Json::from(*n))),
            Value::Named(n, name) => {
                pairs.push((f.name.into(), Json::from(*n)));
                pairs.push((format!("{}_name", f.name), json::str(name.clone())));
            }
            Value::Flags(n, names) => {
                pairs.push((f.name.into(), Json::from(*n)));
                pairs.push((
                    format!("{}_names", f.name),
                    Json::Array(names.iter().cloned().map(Json::String).collect()),
                ));
            }
        }
    }
    Json::Object(pairs.into_iter().collect())
}
