//! Input: a sysfs format spec, a newline, then up to 8 little-endian value bytes and
//! 24 bytes of initial config words. `Format::parse` never panics; a parsed format
//! prints back to itself, and a value encoded through its bit ranges decodes back
//! without touching the bits outside them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfring::event::Format;

fn u64_at(bytes: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (j, x) in bytes.iter().skip(i * 8).take(8).enumerate() {
        b[j] = *x;
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let (spec, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(spec) = std::str::from_utf8(spec) else {
        return;
    };
    let Ok(format) = Format::parse(spec) else {
        return;
    };
    assert_eq!(
        Format::parse(&format.to_string()).as_ref().ok(),
        Some(&format)
    );
    assert!((1..=64).contains(&format.bits()));

    let value = u64_at(rest, 0);
    let before = [u64_at(rest, 1), u64_at(rest, 2), u64_at(rest, 3)];
    let mut words = before;
    match format.encode(value, &mut words) {
        Ok(()) => {
            assert!(value <= format.max_value());
            assert_eq!(format.decode(&words), value);
            // Encoding zero clears exactly the term's bits: the rest is untouched.
            let mut cleared = before;
            format.encode(0, &mut cleared).unwrap();
            let mut again = cleared;
            format.encode(value, &mut again).unwrap();
            assert_eq!(again, words);
            let w = format.word().index();
            for i in 0..3 {
                if i != w {
                    assert_eq!(words[i], before[i]);
                }
            }
            let mut full = cleared;
            format.encode(format.max_value(), &mut full).unwrap();
            let mask = full[w] ^ cleared[w];
            assert_eq!(mask.count_ones(), format.bits());
            assert_eq!(words[w] & !mask, before[w] & !mask);
        }
        Err(_) => assert!(value > format.max_value()),
    }
});
