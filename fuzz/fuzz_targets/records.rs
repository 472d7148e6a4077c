//! Any layout plan and any bytes: decoding never panics, every slice it returns lies
//! inside the input, and a decoded sample written back by `records::encode` gives the
//! same bytes wherever the kernel's padding makes that possible.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use perfring::records::encode::{self, SampleFields};
use perfring::records::{Layout, Record, RecordKind, Sample, SampleIdAll, U64s};
use perfring::sys;

#[derive(Arbitrary, Debug)]
struct Input {
    sample_type: u32,
    read_format: u8,
    regs_user: u64,
    regs_intr: u64,
    branch: u8,
    sample_id_all: bool,
    /// Shift the records off 8-byte alignment (a wrapped record in a scratch buffer).
    shift: u8,
    bytes: Vec<u8>,
}

fn within(input: &[u8], s: &[u8]) {
    let (a, b) = (
        input.as_ptr() as usize,
        input.as_ptr() as usize + input.len(),
    );
    let (x, y) = (s.as_ptr() as usize, s.as_ptr() as usize + s.len());
    assert!(
        s.is_empty() || (a <= x && y <= b),
        "slice {x:#x}..{y:#x} outside input {a:#x}..{b:#x}"
    );
}

/// An array of words hands out the same values by `next`, by `fold` (whole words) and
/// by `get`.
fn check_words(a: U64s<'_>) {
    let by_next: Vec<u64> = a.iter().collect();
    let by_fold = a.iter().fold(Vec::new(), |mut v, x| {
        v.push(x);
        v
    });
    assert_eq!(by_next, by_fold);
    assert_eq!(by_next.len(), a.len());
    assert!(by_next
        .iter()
        .enumerate()
        .all(|(i, &x)| a.get(i) == Some(x)));
}

fn check_sample(input: &[u8], record: &[u8], s: &Sample<'_>, layout: &Layout) {
    if let Some(c) = s.callchain() {
        within(input, c.as_bytes());
        assert_eq!(c.iter().count(), c.len());
        check_words(c);
    }
    let mut padded = true;
    if let Some(r) = s.raw() {
        within(input, r);
        padded &= (r.len() + 4) % 8 == 0;
    }
    if let Some(b) = s.branch_stack() {
        within(input, b.entries.as_bytes());
        if let Some(c) = b.counters {
            within(input, c.as_bytes());
        }
    }
    for r in [s.regs_user(), s.regs_intr()].into_iter().flatten() {
        within(input, r.regs.as_bytes());
        check_words(r.regs);
    }
    if let Some(st) = s.stack_user() {
        within(input, st.data);
        padded &= st.data.len() % 8 == 0;
    }
    if let Some(a) = s.aux() {
        within(input, a);
        padded &= a.len() % 8 == 0;
    }
    if let Some(r) = s.read() {
        within(input, r.as_bytes());
        let _ = r.iter().count();
    }
    let _ = s.weight_struct();
    let _ = format!("{s:?}");

    // Write it back: identical up to where the walk ended (later bytes are ignored).
    if padded {
        let mut again = Vec::new();
        let f = SampleFields::from_sample(s);
        encode::sample(&mut again, layout, s.misc().0, &f);
        assert!(again.len() <= record.len());
        assert_eq!(&again[..6], &record[..6]);
        assert_eq!(&again[8..], &record[8..again.len()]);
        let back = Record::parse(&again, layout).expect("re-encoded sample decodes");
        assert_eq!(SampleFields::from_sample(back.as_sample().unwrap()), f);
    }
}

fuzz_target!(|inp: Input| {
    let sample_type = u64::from(inp.sample_type) & (sys::PERF_SAMPLE_MAX as u64 - 1);
    let branch = match inp.branch & 3 {
        0 => 0,
        1 => u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX),
        2 => perfring::records::BRANCH_COUNTERS,
        _ => u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX) | perfring::records::BRANCH_COUNTERS,
    };
    let Ok(layout) = Layout::from_raw(
        sample_type,
        u64::from(inp.read_format & 31),
        inp.regs_user,
        inp.regs_intr,
        branch,
        SampleIdAll::from(inp.sample_id_all),
    ) else {
        return;
    };
    let shift = usize::from(inp.shift % 8);
    let mut buf = vec![0u8; shift];
    buf.extend_from_slice(&inp.bytes);
    let input = &buf[shift..];
    for rec in Record::iter(input, &layout) {
        let Ok(rec) = rec else { break };
        within(input, rec.as_bytes());
        let _ = format!("{rec:?}");
        match rec.kind() {
            RecordKind::Sample(s) => check_sample(input, rec.as_bytes(), s, &layout),
            RecordKind::Mmap(m) => within(input, m.filename),
            RecordKind::Mmap2(m) => {
                within(input, m.filename);
                if let perfring::records::Mmap2File::BuildId(b) = m.file {
                    within(input, b);
                }
            }
            RecordKind::Comm(c) => within(input, c.comm),
            RecordKind::Read(r) => within(input, r.values.as_bytes()),
            RecordKind::Namespaces(n) => within(input, n.links.as_bytes()),
            RecordKind::Ksymbol(k) => within(input, k.name),
            RecordKind::Cgroup(c) => within(input, c.path),
            RecordKind::TextPoke(t) => {
                within(input, t.old_bytes);
                within(input, t.new_bytes);
            }
            RecordKind::Unknown { bytes, .. } => within(input, bytes),
            _ => {}
        }
    }
    // `iter_large` (which hints the stream ahead into the cache) hands out the same
    // records and stops at the same error.
    let key = |r: Result<Record<'_>, perfring::records::DecodeError>| {
        r.map(|r| (r.as_bytes().as_ptr(), r.size()))
            .map_err(|e| (e.kind(), e.field(), e.offset()))
    };
    assert!(Record::iter(input, &layout)
        .map(key)
        .eq(Record::iter_large(input, &layout).map(key)));
});
