//! The pprof messages of `proto/profile.proto` (package `perftools.profiles`), as
//! `prost` derive structs.
//!
//! Written with `prost`'s derive rather than generated at build time, so the build
//! needs neither `protoc` nor a `.proto` compiler crate; every field's number and wire
//! type follows `proto/profile.proto` exactly, and the tests below check each
//! field's encoded tag against the numbers in that file. The `Breakdown`/`LabelSet`
//! extensions (fields 15 and 16 of `Profile`, 4 of `Sample`) are not written: readers
//! treat absent fields as empty.

#![allow(missing_docs)] // The field docs are in proto/profile.proto.

/// `message Profile`: the whole profile; `string_table[0]` is always `""`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `message ValueType`: a sample value's type and unit (string-table indices).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `message Sample`: a stack (leaf first), its values and labels.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `message Label`: a key with a string or a number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `message Mapping`: an address range mapped from a file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `message Location`: an address, its mapping and the functions at it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `message Line`: a function (and line) at a location.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `message Function`: a function's names and source file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The field numbers of `proto/profile.proto`, by message and field name.
    fn proto_fields() -> BTreeMap<(String, String), u32> {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/proto/profile.proto"))
                .unwrap();
        let mut m = BTreeMap::new();
        let mut message = String::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap().trim();
            if let Some(rest) = code.strip_prefix("message ") {
                message = rest.trim_end_matches('{').trim().to_string();
            } else if let Some((decl, num)) = code.strip_suffix(';').and_then(|c| c.split_once('='))
            {
                let name = decl.split_whitespace().last().unwrap().to_string();
                if let (false, Ok(n)) = (message.is_empty(), num.trim().parse()) {
                    m.insert((message.clone(), name), n);
                }
            }
        }
        m
    }

    /// The field number of the one field set in `msg`'s encoding.
    fn tag_of(msg: &impl prost::Message) -> u32 {
        let bytes = msg.encode_to_vec();
        let mut key = 0u64;
        for (i, b) in bytes.iter().enumerate() {
            key |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        (key >> 3) as u32
    }

    #[test]
    fn prost_messages_follow_the_field_numbers_of_profile_proto() {
        let spec = proto_fields();
        let mut checked = 0;
        let mut check = |message: &str, field: &str, msg: &dyn Fn() -> u32| {
            let want = spec
                .get(&(message.to_string(), field.to_string()))
                .unwrap_or_else(|| panic!("{message}.{field} is not in profile.proto"));
            assert_eq!(msg(), *want, "{message}.{field}");
            checked += 1;
        };
        macro_rules! field {
            ($msg:ident, $field:ident, $value:expr) => {
                check(stringify!($msg), stringify!($field), &|| {
                    tag_of(&$msg {
                        $field: $value,
                        ..Default::default()
                    })
                })
            };
        }
        let vt = ValueType { r#type: 1, unit: 1 };
        field!(Profile, sample_type, vec![vt]);
        field!(Profile, sample, vec![Sample::default()]);
        field!(Profile, mapping, vec![Mapping::default()]);
        field!(Profile, location, vec![Location::default()]);
        field!(Profile, function, vec![Function::default()]);
        field!(Profile, string_table, vec![String::new()]);
        field!(Profile, drop_frames, 1);
        field!(Profile, keep_frames, 1);
        field!(Profile, time_nanos, 1);
        field!(Profile, duration_nanos, 1);
        field!(Profile, period_type, Some(vt));
        field!(Profile, period, 1);
        field!(Profile, comment, vec![1]);
        field!(Profile, default_sample_type, 1);
        check("ValueType", "type", &|| {
            tag_of(&ValueType { r#type: 1, unit: 0 })
        });
        field!(ValueType, unit, 1);
        field!(Sample, location_id, vec![1]);
        field!(Sample, value, vec![1]);
        field!(Sample, label, vec![Label::default()]);
        field!(Label, key, 1);
        field!(Label, str, 1);
        field!(Label, num, 1);
        field!(Label, num_unit, 1);
        field!(Mapping, id, 1);
        field!(Mapping, memory_start, 1);
        field!(Mapping, memory_limit, 1);
        field!(Mapping, file_offset, 1);
        field!(Mapping, filename, 1);
        field!(Mapping, build_id, 1);
        field!(Mapping, has_functions, true);
        field!(Mapping, has_filenames, true);
        field!(Mapping, has_line_numbers, true);
        field!(Mapping, has_inline_frames, true);
        field!(Location, id, 1);
        field!(Location, mapping_id, 1);
        field!(Location, address, 1);
        field!(Location, line, vec![Line::default()]);
        field!(Location, is_folded, true);
        field!(Line, function_id, 1);
        field!(Line, line, 1);
        field!(Function, id, 1);
        field!(Function, name, 1);
        field!(Function, system_name, 1);
        field!(Function, filename, 1);
        field!(Function, start_line, 1);
        // Every field of the messages perfring writes (the .proto's Breakdown and
        // LabelSet extensions, 3 + 2 + 2 fields, are not written).
        let written = spec
            .keys()
            .filter(|(m, f)| {
                !matches!(m.as_str(), "Breakdown" | "LabelSet")
                    && !matches!(f.as_str(), "tick_unit" | "label_set" | "breakdown")
            })
            .count();
        assert_eq!(checked, written);
    }
}
