//! The ring reader over any data area, head and tail: it never panics, every record it
//! hands out is a whole record (`header.size` bytes, 8-aligned, inside the published
//! span), and every published byte is either handed out or counted as skipped.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use perfring::records::{Layout, Record, SampleIdAll};
use perfring::ring::Replay;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Data area of 8 << (log2 % 10) bytes: 8 B .. 4 KiB.
    log2: u8,
    tail: u64,
    /// head = tail + delta (wrapping), so both sane and absurd spans occur.
    delta: u64,
    sample_type: u32,
    bytes: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let size = 8usize << (input.log2 % 10);
    let mut area = vec![0u8; size];
    for (a, b) in area.iter_mut().zip(&input.bytes) {
        *a = *b;
    }
    let head = input.tail.wrapping_add(input.delta);
    let layout = Layout::from_raw(u64::from(input.sample_type), 0, 0, 0, 0, SampleIdAll::Yes).ok();
    let mut replay = Replay::new(&area, input.tail, head).expect("power of two");
    let mut handed_out = 0u64;
    loop {
        let Some(rec) = replay.next() else { break };
        let Ok(rec) = rec else { continue };
        let b = rec.bytes();
        let size_field = u16::from_ne_bytes([b[6], b[7]]) as usize;
        assert_eq!(b.len(), size_field, "a record is exactly header.size bytes");
        assert!(b.len() >= 8 && b.len() % 8 == 0 && b.len() <= size);
        assert_eq!(b.as_ptr() as usize % 8, 0);
        handed_out += b.len() as u64;
        if let Some(layout) = &layout {
            let _ = Record::parse(b, layout); // decoding never panics either
        }
    }
    let st = replay.stats();
    let span = head.wrapping_sub(input.tail);
    assert_eq!(
        handed_out + st.skipped_bytes,
        span,
        "every published byte is accounted for"
    );
    assert_eq!(replay.position(), head);
});
