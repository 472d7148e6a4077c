//! The ring reader over byte snapshots (`Replay`): a record stream placed at every
//! offset of a data area reads back byte for byte, and malformed heads and sizes give
//! one error each, never a panic.

use perfring::records::encode::{self, Ids, SampleFields};
use perfring::records::{Layout, RecordKind, SampleIdAll};
use perfring::ring::Replay;
use perfring::{sys, ErrorKind};

fn layout() -> Layout {
    let st = (sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_CALLCHAIN) as u64;
    Layout::from_raw(st, 0, 0, 0, 0, SampleIdAll::Yes).unwrap()
}

/// A stream of samples with callchains of several depths, LOST and a COMM.
fn stream(layout: &Layout) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut out = Vec::new();
    let mut spans = Vec::new();
    let ids = Ids {
        pid: 7,
        tid: 8,
        time: 99,
        ..Ids::default()
    };
    for i in 0..6u64 {
        let start = out.len();
        let f = SampleFields {
            ip: 0x1000 + i,
            pid: 7,
            tid: 8,
            time: 100 + i,
            callchain: (0..i * 3).collect(),
            ..SampleFields::default()
        };
        encode::sample(&mut out, layout, 0, &f);
        spans.push((start, out.len()));
    }
    let start = out.len();
    encode::lost(&mut out, layout, 0, 5, 42, &ids);
    spans.push((start, out.len()));
    let start = out.len();
    encode::comm(&mut out, layout, 0, 7, 8, b"perfring", &ids);
    spans.push((start, out.len()));
    (out, spans)
}

#[test]
fn a_stream_placed_at_every_offset_reads_back_byte_for_byte() {
    let layout = layout();
    let (bytes, spans) = stream(&layout);
    let size = bytes.len().next_power_of_two();
    let mut wrapped_somewhere = false;
    for tail in (0..size as u64 * 2).step_by(8) {
        let mut area = vec![0xa5u8; size];
        for (i, b) in bytes.iter().enumerate() {
            area[(tail as usize + i) % size] = *b;
        }
        let mut replay = Replay::new(&area, tail, tail + bytes.len() as u64).unwrap();
        let mut n = 0;
        while let Some(rec) = replay.next() {
            let rec = rec.unwrap();
            let (s, e) = spans[n];
            assert_eq!(rec.bytes(), &bytes[s..e], "record {n} at tail {tail}");
            assert_eq!(
                rec.bytes().as_ptr() as usize % 8,
                0,
                "8-aligned, copied or not"
            );
            wrapped_somewhere |= rec.was_wrapped();
            n += 1;
        }
        assert_eq!(n, spans.len());
        let st = replay.stats();
        assert_eq!((st.samples, st.lost, st.records), (6, 42, 8));
        assert_eq!(replay.position(), tail + bytes.len() as u64);
    }
    assert!(wrapped_somewhere);
}

/// Positions count bytes modulo 2^64 (the kernel's `data_head` does): a stream whose
/// positions pass `u64::MAX` reads back whole, and the reader ends at the wrapped head.
#[test]
fn positions_that_pass_u64_max_read_back() {
    let layout = layout();
    let (bytes, spans) = stream(&layout);
    let size = bytes.len().next_power_of_two();
    let tail = u64::MAX - 15; // 16 bytes before the wrap of the position itself
    let head = tail.wrapping_add(bytes.len() as u64);
    let mut area = vec![0u8; size];
    for (i, b) in bytes.iter().enumerate() {
        area[(tail.wrapping_add(i as u64) % size as u64) as usize] = *b;
    }
    let mut replay = Replay::new(&area, tail, head).unwrap();
    let mut n = 0;
    while let Some(rec) = replay.next() {
        let (s, e) = spans[n];
        assert_eq!(rec.unwrap().bytes(), &bytes[s..e], "record {n}");
        n += 1;
    }
    assert_eq!(n, spans.len());
    assert_eq!(replay.position(), head);
}

#[test]
fn decoding_through_the_reader_gives_the_fields() {
    let layout = layout();
    let (bytes, _) = stream(&layout);
    let size = bytes.len().next_power_of_two();
    let mut area = vec![0u8; size];
    let tail = size as u64 - 16; // the first record wraps
    for (i, b) in bytes.iter().enumerate() {
        area[(tail as usize + i) % size] = *b;
    }
    let mut replay = Replay::new(&area, tail, tail + bytes.len() as u64).unwrap();
    let mut ips = Vec::new();
    while let Some(rec) = replay.next_record(&layout) {
        match rec.unwrap().kind() {
            RecordKind::Sample(s) => ips.push((s.ip().unwrap(), s.callchain().unwrap().len())),
            RecordKind::Comm(c) => assert_eq!(c.comm, b"perfring"),
            _ => {}
        }
    }
    assert_eq!(
        ips,
        (0..6)
            .map(|i| (0x1000 + i, i as usize * 3))
            .collect::<Vec<_>>()
    );
}

fn header(kind: u32, size: u16) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&kind.to_ne_bytes());
    h[6..].copy_from_slice(&size.to_ne_bytes());
    h
}

/// Each malformed case: exactly one `Decode` error, the rest skipped to the head.
fn check_malformed(area: &[u8], tail: u64, head: u64, why: &str) {
    let mut replay = Replay::new(area, tail, head).unwrap();
    let err = match replay.next() {
        Some(Err(e)) => e,
        other => panic!(
            "{why}: expected an error, got {:?}",
            other.map(|r| r.map(|r| r.kind()))
        ),
    };
    assert_eq!(err.kind(), ErrorKind::Decode, "{why}: {err}");
    assert!(err.to_string().contains(why), "{why}: {err}");
    assert!(replay.next().is_none(), "{why}: resynced to the head");
    assert_eq!(replay.position(), head);
}

#[test]
fn malformed_rings_give_one_error_and_resync() {
    let mut area = vec![0u8; 64];
    area[..8].copy_from_slice(&header(9, 0));
    check_malformed(&area, 0, 16, "has size 0");
    area[..8].copy_from_slice(&header(9, 12));
    check_malformed(&area, 0, 16, "has size 12");
    area[..8].copy_from_slice(&header(9, 32));
    check_malformed(&area, 0, 16, "has size 32");
    check_malformed(&area, 64, 8, "is not within one data area");
    check_malformed(&area, 0, 128, "is not within one data area");
    check_malformed(&area, 0, 12, "in 8-byte steps");
    assert!(
        Replay::new(&area[..48], 0, 0).is_err(),
        "not a power of two"
    );
}
