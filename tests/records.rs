//! The records decoder: byte fixtures written word by word from `perf_event.h`, then
//! round trips through `records::encode` for random layouts, and truncation.

use perfring::records::encode::{self, Ids, ReadData, SampleFields};
use perfring::records::{
    Comm, DecodeErrorKind, Layout, Mmap2, Mmap2File, ReadValue, Record, RecordKind, SampleIdAll,
    Task, Throttle, BRANCH_COUNTERS, FORMAT_LOST,
};
use perfring::sys;
use proptest::prelude::*;

/// A record from native-endian words; the first is the header, whose size is filled in.
fn words(record_type: u32, misc: u16, body: &[u64]) -> Vec<u8> {
    let size = 8 * (body.len() + 1) as u64;
    let mut out = Vec::new();
    out.extend_from_slice(
        &(u64::from(record_type) | u64::from(misc) << 32 | size << 48).to_ne_bytes(),
    );
    for w in body {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out
}

/// Two u32s as the kernel lays them out in one u64 word.
fn pair(lo: u32, hi: u32) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&lo.to_ne_bytes());
    b[4..].copy_from_slice(&hi.to_ne_bytes());
    u64::from_ne_bytes(b)
}

/// Bytes as native-endian words (zero-padded).
fn text(s: &[u8]) -> Vec<u64> {
    s.chunks(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_ne_bytes(b)
        })
        .collect()
}

/// Decodes `bytes` and compares the Debug rendering of its kind and sample_id.
fn check(layout: &Layout, bytes: &[u8], expected: &str) {
    let rec = Record::parse(bytes, layout).unwrap_or_else(|e| panic!("decode failed: {e}"));
    assert_eq!(rec.size(), bytes.len());
    let got = format!("{:?} {:?}", rec.kind(), rec.sample_id());
    assert_eq!(got, expected);
}

fn st(bits: u32) -> u64 {
    u64::from(bits)
}

#[test]
fn sample_every_fixed_field_and_group_read() {
    let layout = Layout::from_raw(
        st(sys::PERF_SAMPLE_IDENTIFIER
            | sys::PERF_SAMPLE_IP
            | sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_TIME
            | sys::PERF_SAMPLE_ADDR
            | sys::PERF_SAMPLE_ID
            | sys::PERF_SAMPLE_STREAM_ID
            | sys::PERF_SAMPLE_CPU
            | sys::PERF_SAMPLE_PERIOD
            | sys::PERF_SAMPLE_READ
            | sys::PERF_SAMPLE_CALLCHAIN),
        u64::from(
            sys::PERF_FORMAT_GROUP | sys::PERF_FORMAT_ID | sys::PERF_FORMAT_TOTAL_TIME_ENABLED,
        ) | FORMAT_LOST,
        0,
        0,
        0,
        SampleIdAll::No,
    )
    .unwrap();
    let misc = (sys::PERF_RECORD_MISC_USER | sys::PERF_RECORD_MISC_EXACT_IP) as u16;
    let bytes = words(
        sys::PERF_RECORD_SAMPLE,
        misc,
        &[
            77,           // identifier
            0x40_1000,    // ip
            pair(10, 11), // pid, tid
            123_456,      // time
            0xdead,       // addr
            77,           // id
            78,           // stream_id
            pair(3, 0),   // cpu, res
            4000,         // period
            2,            // read: nr
            999,          // time_enabled
            5,
            77,
            0, // value, id, lost
            6,
            79,
            1, // value, id, lost
            3, // callchain nr
            sys::PERF_CONTEXT_USER,
            0x40_1000,
            0x40_2000,
        ],
    );
    check(
        &layout,
        &bytes,
        "Sample(Sample { misc: Misc(16386), identifier: 77, ip: 4198400, pid: 10, tid: 11, \
         time: 123456, addr: 57005, id: 77, stream_id: 78, cpu: 3, period: 4000, \
         read: ReadValues { time_enabled: Some(999), time_running: None, values: \
         [ReadValue { value: 5, id: Some(77), lost: Some(0) }, ReadValue { value: 6, id: \
         Some(79), lost: Some(1) }] }, callchain: [18446744073709551104, 4198400, 4202496] }) \
         SampleId { pid: Some(10), tid: Some(11), time: Some(123456), id: Some(77), \
         stream_id: Some(78), cpu: Some(3), identifier: Some(77) }",
    );
    let rec = Record::parse(&bytes, &layout).unwrap();
    assert!(rec.misc().exact_ip());
    assert_eq!(rec.misc().cpumode(), perfring::records::CpuMode::User);
    let s = rec.as_sample().unwrap();
    // Read in place from an aligned buffer, the callchain borrows as &[u64].
    if (bytes.as_ptr() as usize).is_multiple_of(8) {
        assert_eq!(s.callchain().unwrap().as_slice().unwrap().len(), 3);
    }
}

#[test]
fn sample_variable_fields_in_man_page_order() {
    let layout = Layout::from_raw(
        st(sys::PERF_SAMPLE_IP
            | sys::PERF_SAMPLE_RAW
            | sys::PERF_SAMPLE_BRANCH_STACK
            | sys::PERF_SAMPLE_REGS_USER
            | sys::PERF_SAMPLE_STACK_USER
            | sys::PERF_SAMPLE_WEIGHT_STRUCT
            | sys::PERF_SAMPLE_DATA_SRC
            | sys::PERF_SAMPLE_TRANSACTION
            | sys::PERF_SAMPLE_REGS_INTR
            | sys::PERF_SAMPLE_PHYS_ADDR
            | sys::PERF_SAMPLE_CGROUP
            | sys::PERF_SAMPLE_DATA_PAGE_SIZE
            | sys::PERF_SAMPLE_CODE_PAGE_SIZE
            | sys::PERF_SAMPLE_AUX),
        0,
        0b1010, // two user registers: 1 and 3
        0b1,    // one interrupt register
        u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX) | BRANCH_COUNTERS,
        SampleIdAll::No,
    )
    .unwrap();
    let mut raw = [0u8; 12];
    raw[..4].copy_from_slice(&[1, 2, 3, 4]);
    let mut body = vec![
        0x1000, // ip
        pair(12, u32::from_ne_bytes([1, 2, 3, 4])),
    ]; // raw: size 12, data[0..4]
    body.extend(text(&raw[4..])); // raw: data[4..12]
    body.extend([
        1,   // bnr
        42,  // hw_idx
        0xa, // from
        0xb, // to
        0x1, // flags (mispred)
        7,   // counter
        2,   // regs_user abi = 64
        100, // r1
        300, // r3
        16,  // stack size
        0x11,
        0x22,                 // stack data
        12,                   // dyn_size
        pair(5, 0x0003_0002), // weight struct: var1_dw 5, var2_w 2, var3_w 3
        0x55,                 // data_src
        0x66,                 // transaction
        0,                    // regs_intr abi NONE: no registers
        0x77,                 // phys_addr
        0x88,                 // cgroup
        4096,                 // data_page_size
        2 << 20,              // code_page_size
        8,                    // aux size
        0x99,                 // aux data
    ]);
    let bytes = words(sys::PERF_RECORD_SAMPLE, 0, &body);
    let rec = Record::parse(&bytes, &layout).unwrap();
    let s = rec.as_sample().unwrap();
    assert_eq!(s.ip(), Some(0x1000));
    assert_eq!(s.raw().unwrap(), &[1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0][..]);
    let b = s.branch_stack().unwrap();
    assert_eq!(b.hw_idx, Some(42));
    let e = b.entries.get(0).unwrap();
    assert_eq!((e.from, e.to, e.mispred()), (0xa, 0xb, 1));
    assert_eq!(b.counters.unwrap().iter().collect::<Vec<_>>(), [7]);
    let r = s.regs_user().unwrap();
    assert_eq!(
        (r.abi, r.get(1), r.get(3), r.get(2)),
        (2, Some(100), Some(300), None)
    );
    let st = s.stack_user().unwrap();
    assert_eq!(
        (st.data.len(), st.dyn_size, st.used().len()),
        (16, Some(12), 12)
    );
    assert_eq!(s.weight(), Some(pair(5, 0x0003_0002)));
    // SAFETY-free union read: the struct view, via zerocopy.
    let w = s.weight_struct().unwrap();
    let parts: [u32; 2] = zerocopy::transmute!(w);
    assert_eq!(parts, [5, 0x0003_0002]);
    assert_eq!(s.data_src(), Some(0x55));
    assert_eq!(s.transaction(), Some(0x66));
    let ri = s.regs_intr().unwrap();
    assert_eq!((ri.abi, ri.regs.len()), (0, 0));
    assert_eq!(s.phys_addr(), Some(0x77));
    assert_eq!(s.cgroup(), Some(0x88));
    assert_eq!(s.data_page_size(), Some(4096));
    assert_eq!(s.code_page_size(), Some(2 << 20));
    assert_eq!(s.aux().unwrap(), 0x99u64.to_ne_bytes());
    assert_eq!(s.period(), None);
}

fn trailer_layout() -> Layout {
    // Trailer: pid/tid, time, cpu, identifier.
    Layout::from_raw(
        st(sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_TIME
            | sys::PERF_SAMPLE_CPU
            | sys::PERF_SAMPLE_IDENTIFIER
            | sys::PERF_SAMPLE_CALLCHAIN),
        0,
        0,
        0,
        0,
        SampleIdAll::Yes,
    )
    .unwrap()
}

const TRAILER: [u64; 4] = [0x0000_0002_0000_0001, 555, 6, 0xabc];
const TRAILER_DEBUG: &str = "SampleId { pid: Some(1), tid: Some(2), time: Some(555), id: None, \
                             stream_id: None, cpu: Some(6), identifier: Some(2748) }";

fn with_trailer(mut body: Vec<u64>) -> Vec<u64> {
    body.extend(TRAILER);
    body
}

#[test]
fn mmap2_build_id_and_trailer_after_variable_name() {
    assert_eq!(TRAILER[0], pair(1, 2));
    let layout = trailer_layout();
    let mut body = vec![pair(10, 11), 0x40_0000, 0x1000, 0];
    // build_id_size 3, reserved, build id [20] (+ 4 bytes of the union's padding)
    let mut u = [0u8; 24];
    u[0] = 3;
    u[4..7].copy_from_slice(&[0xde, 0xad, 0xbe]);
    body.extend(text(&u));
    body.push(pair(5, 2)); // prot, flags
    body.extend(text(b"/usr/lib/libc.so.6\0"));
    let bytes = words(
        sys::PERF_RECORD_MMAP2,
        sys::PERF_RECORD_MISC_MMAP_BUILD_ID as u16,
        &with_trailer(body),
    );
    check(
        &layout,
        &bytes,
        &format!(
            "Mmap2(Mmap2 {{ pid: 10, tid: 11, addr: 4194304, len: 4096, pgoff: 0, file: \
             BuildId([222, 173, 190]), prot: 5, flags: 2, filename: {:?} }}) {TRAILER_DEBUG}",
            b"/usr/lib/libc.so.6"
        ),
    );
    let rec = Record::parse(&bytes, &layout).unwrap();
    let RecordKind::Mmap2(m) = rec.kind() else {
        panic!()
    };
    assert_eq!(
        *m,
        Mmap2 {
            pid: 10,
            tid: 11,
            addr: 0x40_0000,
            len: 0x1000,
            pgoff: 0,
            file: Mmap2File::BuildId(&[0xde, 0xad, 0xbe]),
            prot: 5,
            flags: 2,
            filename: b"/usr/lib/libc.so.6",
        }
    );
}

#[test]
fn mmap2_inode_comm_fork_throttle_switch_unknown() {
    let layout = trailer_layout();
    let mut body = vec![pair(1, 1), 0x1000, 0x2000, 0x30];
    body.extend([pair(8, 1), 1234, 1]); // maj, min, ino, ino_generation
    body.push(pair(1, 2)); // prot, flags
    body.extend(text(b"a\0"));
    let bytes = words(sys::PERF_RECORD_MMAP2, 0, &with_trailer(body));
    let rec = Record::parse(&bytes, &layout).unwrap();
    let RecordKind::Mmap2(m) = rec.kind() else {
        panic!()
    };
    assert_eq!(
        m.file,
        Mmap2File::Inode {
            maj: 8,
            min: 1,
            ino: 1234,
            ino_generation: 1
        }
    );
    assert_eq!(m.filename, b"a");

    let mut body = vec![pair(3, 4)];
    body.extend(text(b"bash\0"));
    let bytes = words(
        sys::PERF_RECORD_COMM,
        sys::PERF_RECORD_MISC_COMM_EXEC as u16,
        &with_trailer(body),
    );
    check(
        &layout,
        &bytes,
        &format!("Comm(Comm {{ pid: 3, tid: 4, comm: [98, 97, 115, 104] }}) {TRAILER_DEBUG}"),
    );
    assert!(Record::parse(&bytes, &layout).unwrap().misc().comm_exec());

    let bytes = words(
        sys::PERF_RECORD_FORK,
        0,
        &with_trailer(vec![pair(5, 6), pair(7, 8), 99]),
    );
    check(
        &layout,
        &bytes,
        &format!("Fork(Task {{ pid: 5, ppid: 6, tid: 7, ptid: 8, time: 99 }}) {TRAILER_DEBUG}"),
    );

    let bytes = words(sys::PERF_RECORD_THROTTLE, 0, &with_trailer(vec![1, 2, 3]));
    check(
        &layout,
        &bytes,
        &format!("Throttle(Throttle {{ time: 1, id: 2, stream_id: 3 }}) {TRAILER_DEBUG}"),
    );

    let bytes = words(
        sys::PERF_RECORD_SWITCH,
        sys::PERF_RECORD_MISC_SWITCH_OUT as u16,
        &with_trailer(vec![]),
    );
    check(&layout, &bytes, &format!("Switch {TRAILER_DEBUG}"));
    assert!(Record::parse(&bytes, &layout).unwrap().misc().switch_out());

    let bytes = words(40, 3, &[1, 2]);
    let rec = Record::parse(&bytes, &layout).unwrap();
    match rec.kind() {
        RecordKind::Unknown {
            record_type,
            misc,
            bytes: b,
        } => assert_eq!((*record_type, *misc, b.len()), (40, 3, 16)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_name_field_offset_and_sizes() {
    let layout = trailer_layout();
    let err = |bytes: &[u8]| Record::parse(bytes, &layout).unwrap_err();

    let e = err(&[0; 5]);
    assert_eq!(
        (e.kind(), e.field(), e.needed(), e.available()),
        (DecodeErrorKind::Truncated, "header", 8, 5)
    );

    let mut bytes = words(sys::PERF_RECORD_LOST, 0, &with_trailer(vec![1, 2]));
    bytes[6] = 17; // size 17
    assert_eq!(err(&bytes).kind(), DecodeErrorKind::Unaligned);

    let bytes = words(sys::PERF_RECORD_LOST, 0, &with_trailer(vec![1, 2]));
    assert_eq!(
        err(&bytes[..bytes.len() - 8]).kind(),
        DecodeErrorKind::ShortSlice
    );

    // A LOST record too short for its trailer plus body.
    let bytes = words(sys::PERF_RECORD_LOST, 0, &with_trailer(vec![1]));
    let e = err(&bytes);
    assert_eq!(
        (e.field(), e.offset(), e.needed(), e.available()),
        ("lost.lost", 16, 8, 0)
    );

    // Absurd callchain length.
    let bytes = words(
        sys::PERF_RECORD_SAMPLE,
        0,
        &[pair(1, 2), 3, 6, 9, u64::MAX / 2, 1],
    );
    let e = err(&bytes);
    assert_eq!((e.field(), e.offset()), ("callchain.ips", 48));

    let e: perfring::Error = e.into();
    assert_eq!(e.kind(), perfring::ErrorKind::Decode);
    assert!(e.to_string().contains("offset 48"), "{e}");

    assert_eq!(
        Layout::from_raw(1 << 40, 0, 0, 0, 0, SampleIdAll::No)
            .unwrap_err()
            .kind(),
        DecodeErrorKind::UnknownFormat
    );
}

#[test]
fn header_sizes_below_8_or_not_multiples_of_8_are_refused() {
    let layout = trailer_layout();
    let lost = words(sys::PERF_RECORD_LOST, 0, &with_trailer(vec![1, 2]));
    for size in [0u16, 1, 4, 7, 9, 15, 17, 65535] {
        let mut bytes = lost.clone();
        bytes[6..8].copy_from_slice(&size.to_ne_bytes());
        let e = Record::parse(&bytes, &layout).unwrap_err();
        let want = if size < 8 {
            DecodeErrorKind::Truncated
        } else {
            DecodeErrorKind::Unaligned
        };
        assert_eq!((e.kind(), e.field()), (want, "header.size"), "size {size}");
    }
    // The smallest valid size: a bare header (SWITCH without a trailer).
    let bare = Layout::from_raw(0, 0, 0, 0, 0, SampleIdAll::No).unwrap();
    let switch = words(sys::PERF_RECORD_SWITCH, 0, &[]);
    assert_eq!(Record::parse(&switch, &bare).unwrap().size(), 8);
}

/// `iter_large` hints ahead into the cache as it goes; it must hand out the same
/// records as `iter`, stop at the same error, and hint nothing past the end.
#[test]
fn iter_large_gives_what_iter_gives() {
    let layout = trailer_layout();
    let ids = Ids {
        pid: 5,
        tid: 6,
        time: 7,
        cpu: 1,
        ..Default::default()
    };
    let mut stream = Vec::new();
    for i in 0..3000u64 {
        if i % 7 == 3 {
            let kind = RecordKind::Lost(perfring::records::Lost { id: i, lost: i % 5 });
            encode::record_kind(&mut stream, &layout, 0, &kind, &ids);
        } else {
            let f = SampleFields {
                ip: 0x4000 + i,
                pid: 5,
                tid: 6 + (i % 3) as u32,
                time: i,
                callchain: (0..i % 9).map(|d| 0x5000 + d).collect(),
                ..Default::default()
            };
            encode::sample(&mut stream, &layout, 0, &f);
        }
    }
    assert!(stream.len() > 64 << 10, "longer than the hints' reach");
    let collect =
        |it: &mut dyn Iterator<Item = Result<Record<'_>, perfring::records::DecodeError>>| {
            it.map(|r| r.map(|r| (r.as_bytes().as_ptr(), r.size(), r.record_type())))
                .collect::<Vec<_>>()
        };
    let whole = collect(&mut Record::iter(&stream, &layout));
    assert_eq!(whole.len(), 3000);
    assert_eq!(collect(&mut Record::iter_large(&stream, &layout)), whole);

    // Cut in the middle of the last record: both stop at the same error.
    let cut = &stream[..stream.len() - 4];
    let a = collect(&mut Record::iter(cut, &layout));
    let b = collect(&mut Record::iter_large(cut, &layout));
    assert_eq!(a.len(), 3000);
    assert_eq!(a, b);
    assert!(b.last().unwrap().is_err());
}

#[test]
fn layout_from_attr() {
    let mut attr: sys::perf_event_attr = zerocopy::FromZeros::new_zeroed();
    attr.sample_type = st(sys::PERF_SAMPLE_IP | sys::PERF_SAMPLE_TIME);
    attr.set_sample_id_all(1);
    let layout = Layout::new(&attr).unwrap();
    assert_eq!(layout.sample_id_size(), 8);
    assert_eq!(layout.fixed_sample_size(), 24);
}

#[test]
fn unaligned_copy_decodes_the_same() {
    let layout = trailer_layout();
    let mut out = Vec::new();
    let f = SampleFields {
        pid: 1,
        tid: 2,
        time: 3,
        cpu: 4,
        identifier: 5,
        callchain: vec![7, 8, 9],
        ..Default::default()
    };
    encode::sample(&mut out, &layout, 0, &f);
    let mut shifted = vec![0u8; 1];
    shifted.extend_from_slice(&out);
    let rec = Record::parse(&shifted[1..], &layout).unwrap();
    let chain = rec.as_sample().unwrap().callchain().unwrap();
    assert_eq!(chain.iter().collect::<Vec<_>>(), [7, 8, 9]);
    assert_eq!(chain.as_slice(), None);
}

/// An array's iterator hands out the same elements by `next`, by `fold` (which reads
/// 8-byte elements as whole words) and by `get`, aligned or not, also after part of it
/// was taken by `next`; `size_hint` counts what is left.
#[test]
fn array_iterators_agree() {
    use perfring::records::{Array, U64s};
    let values: Vec<u64> = (1..=13u64).map(|i| i * 0x0101_0101_0101).collect();
    let mut bytes = vec![0u8];
    for v in &values {
        bytes.extend_from_slice(&v.to_ne_bytes());
    }
    for shift in [0, 1] {
        let raw = if shift == 0 {
            &bytes[1..]
        } else {
            &bytes[..bytes.len() - 1]
        };
        let words = U64s::from_bytes(raw).unwrap();
        let want: Vec<u64> = if shift == 0 {
            values.clone()
        } else {
            raw.chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
                .collect()
        };
        for taken in [0, 1, 5, 13] {
            let mut it = words.iter();
            let mut by_next = Vec::new();
            for _ in 0..taken {
                by_next.push(it.next().unwrap());
            }
            assert_eq!(it.size_hint(), (13 - taken, Some(13 - taken)));
            let by_fold = it.fold(by_next.clone(), |mut v, x| {
                v.push(x);
                v
            });
            assert_eq!(by_fold, want, "shift {shift}, {taken} taken by next");
        }
        let by_get: Vec<u64> = (0..words.len()).map(|i| words.get(i).unwrap()).collect();
        assert_eq!(by_get, want);
        assert_eq!(words.get(13), None);
        assert_eq!(words.iter().count(), 13);
    }
    // 24-byte elements (branch entries) go through the generic loop.
    let entries: Vec<u8> = (0..72u8).collect();
    let branches: Array<'_, sys::perf_branch_entry> = Array::from_bytes(&entries).unwrap();
    let from: Vec<u64> = branches.iter().fold(Vec::new(), |mut v, b| {
        v.push(b.from);
        v
    });
    let by_next: Vec<u64> = branches.iter().map(|b| b.from).collect();
    assert_eq!(from, by_next);
    assert_eq!(from.len(), 3);
    assert_eq!(
        from[1],
        u64::from_ne_bytes([24, 25, 26, 27, 28, 29, 30, 31])
    );
}

// ---- Round trips through the encoder --------------------------------------------

/// Known sample_type bits, weighted towards the common ones.
fn arb_layout() -> impl Strategy<Value = Layout> {
    (
        0u64..(1 << 25),
        0u64..32,
        any::<u64>(),
        any::<u64>(),
        prop::sample::select(vec![
            0,
            u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX),
            BRANCH_COUNTERS,
            u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX) | BRANCH_COUNTERS,
        ]),
        any::<bool>(),
    )
        .prop_map(|(st, rf, ru, ri, bst, all)| {
            // Keep register blocks small: at most 8 registers each.
            Layout::from_raw(
                st,
                rf,
                ru & 0x8421_0842_1084_2108,
                ri & 0xff,
                bst,
                SampleIdAll::from(all),
            )
            .unwrap()
        })
}

fn arb_fields(layout: Layout) -> impl Strategy<Value = (Layout, SampleFields)> {
    let nu = layout.sample_regs_user().count_ones() as usize;
    let ni = layout.sample_regs_intr().count_ones() as usize;
    let group = layout.read_format() & u64::from(sys::PERF_FORMAT_GROUP) != 0;
    let rf = layout.read_format();
    let nvals = if group { 0..5usize } else { 1..2usize };
    (
        (any::<[u64; 8]>(), any::<[u32; 4]>(), any::<[u64; 12]>()),
        prop::collection::vec(any::<u64>(), 0..33),
        prop::collection::vec(any::<u8>(), 0..40),
        prop::collection::vec(any::<[u64; 3]>(), 0..4),
        (0u64..3, prop::collection::vec(any::<u64>(), nu..=nu)),
        (0u64..3, prop::collection::vec(any::<u64>(), ni..=ni)),
        prop::collection::vec(any::<u8>(), 0..3)
            .prop_map(|v| v.into_iter().map(|b| b as usize * 8).collect::<Vec<_>>()),
        prop::collection::vec(any::<(u64, u64, u64)>(), nvals),
    )
        .prop_map(
            move |((nums, ints, more), callchain, raw, branches, ru, ri, sizes, vals)| {
                let stack_len = sizes.first().copied().unwrap_or(0);
                let aux_len = sizes.get(1).copied().unwrap_or(0);
                let read = ReadData {
                    time_enabled: more[0],
                    time_running: more[1],
                    values: vals
                        .iter()
                        .map(|&(value, id, lost)| ReadValue {
                            value,
                            id: (rf & u64::from(sys::PERF_FORMAT_ID) != 0).then_some(id),
                            lost: (rf & FORMAT_LOST != 0).then_some(lost),
                        })
                        .collect(),
                };
                let f = SampleFields {
                    identifier: nums[0],
                    ip: nums[1],
                    pid: ints[0],
                    tid: ints[1],
                    time: nums[2],
                    addr: nums[3],
                    id: nums[4],
                    stream_id: nums[5],
                    cpu: ints[2],
                    res: ints[3],
                    period: nums[6],
                    read,
                    callchain,
                    raw,
                    branch_hw_idx: nums[7],
                    branch_counters: branches.iter().map(|b| b[0] ^ 1).collect(),
                    branches,
                    regs_user_abi: ru.0,
                    regs_user: if ru.0 == 0 { vec![] } else { ru.1 },
                    stack_user: vec![0x5a; stack_len],
                    stack_user_dyn_size: if stack_len == 0 { 0 } else { more[2] },
                    weight: more[3],
                    data_src: more[4],
                    transaction: more[5],
                    regs_intr_abi: ri.0,
                    regs_intr: if ri.0 == 0 { vec![] } else { ri.1 },
                    phys_addr: more[6],
                    cgroup: more[7],
                    data_page_size: more[8],
                    code_page_size: more[9],
                    aux: vec![0xa5; aux_len],
                };
                (layout, normalize(&layout, f))
            },
        )
}

/// What a decode of `f` written with `layout` gives back: unrecorded fields zeroed,
/// padding made explicit.
fn normalize(layout: &Layout, mut f: SampleFields) -> SampleFields {
    let st = layout.sample_type();
    let has = |b: u32| st & u64::from(b) != 0;
    macro_rules! zero_unless {
        ($bit:expr => $($field:ident),*) => {
            if !has($bit) { $(f.$field = Default::default();)* }
        };
    }
    zero_unless!(sys::PERF_SAMPLE_IDENTIFIER => identifier);
    zero_unless!(sys::PERF_SAMPLE_IP => ip);
    zero_unless!(sys::PERF_SAMPLE_TID => pid, tid);
    zero_unless!(sys::PERF_SAMPLE_TIME => time);
    zero_unless!(sys::PERF_SAMPLE_ADDR => addr);
    zero_unless!(sys::PERF_SAMPLE_ID => id);
    zero_unless!(sys::PERF_SAMPLE_STREAM_ID => stream_id);
    zero_unless!(sys::PERF_SAMPLE_CPU => cpu, res);
    zero_unless!(sys::PERF_SAMPLE_PERIOD => period);
    zero_unless!(sys::PERF_SAMPLE_READ => read);
    zero_unless!(sys::PERF_SAMPLE_CALLCHAIN => callchain);
    zero_unless!(sys::PERF_SAMPLE_RAW => raw);
    zero_unless!(sys::PERF_SAMPLE_BRANCH_STACK => branches, branch_hw_idx, branch_counters);
    zero_unless!(sys::PERF_SAMPLE_REGS_USER => regs_user_abi, regs_user);
    zero_unless!(sys::PERF_SAMPLE_STACK_USER => stack_user, stack_user_dyn_size);
    if st & sys::PERF_SAMPLE_WEIGHT_TYPE == 0 {
        f.weight = 0;
    }
    zero_unless!(sys::PERF_SAMPLE_DATA_SRC => data_src);
    zero_unless!(sys::PERF_SAMPLE_TRANSACTION => transaction);
    zero_unless!(sys::PERF_SAMPLE_REGS_INTR => regs_intr_abi, regs_intr);
    zero_unless!(sys::PERF_SAMPLE_PHYS_ADDR => phys_addr);
    zero_unless!(sys::PERF_SAMPLE_CGROUP => cgroup);
    zero_unless!(sys::PERF_SAMPLE_DATA_PAGE_SIZE => data_page_size);
    zero_unless!(sys::PERF_SAMPLE_CODE_PAGE_SIZE => code_page_size);
    zero_unless!(sys::PERF_SAMPLE_AUX => aux);
    let rf = layout.read_format();
    if rf & u64::from(sys::PERF_FORMAT_TOTAL_TIME_ENABLED) == 0 {
        f.read.time_enabled = 0;
    }
    if rf & u64::from(sys::PERF_FORMAT_TOTAL_TIME_RUNNING) == 0 {
        f.read.time_running = 0;
    }
    if layout.branch_sample_type() & u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX) == 0 {
        f.branch_hw_idx = 0;
    }
    if layout.branch_sample_type() & BRANCH_COUNTERS == 0 {
        f.branch_counters.clear();
    }
    while !(f.raw.len() + 4).is_multiple_of(8) && has(sys::PERF_SAMPLE_RAW) {
        f.raw.push(0);
    }
    f
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn sample_round_trips((layout, f) in arb_layout().prop_flat_map(arb_fields)) {
        let mut out = Vec::new();
        encode::sample(&mut out, &layout, 2, &f);
        let rec = Record::parse(&out, &layout).unwrap();
        prop_assert_eq!(rec.size(), out.len());
        let s = rec.as_sample().unwrap();
        prop_assert_eq!(SampleFields::from_sample(s), f);
        // And the walk agrees with the encoder about every byte.
        let mut again = Vec::new();
        encode::sample(&mut again, &layout, 2, &SampleFields::from_sample(s));
        prop_assert_eq!(again, out);
    }

    #[test]
    fn truncated_samples_are_errors((layout, f) in arb_layout().prop_flat_map(arb_fields), cut in 1usize..64) {
        let mut out = Vec::new();
        encode::sample(&mut out, &layout, 0, &f);
        let cut = cut.min(out.len());
        // Cut the slice: shorter than header.size.
        prop_assert!(Record::parse(&out[..out.len() - cut], &layout).is_err());
        // Cut the record and fix up its size: a sample has no slack, so some field
        // runs past the end (unless the cut leaves a sample with no fields at all).
        let new_len = (out.len() - cut) / 8 * 8;
        if new_len >= 8 && new_len < out.len() {
            let mut short = out[..new_len].to_vec();
            short[6..8].copy_from_slice(&(new_len as u16).to_ne_bytes());
            prop_assert!(Record::parse(&short, &layout).is_err());
        }
    }

    #[test]
    fn record_mixes_round_trip(layout in arb_layout(), picks in prop::collection::vec((0u8..12, any::<u64>()), 1..40)) {
        let mut stream = Vec::new();
        let mut starts = Vec::new();
        for &(pick, v) in &picks {
            starts.push(stream.len());
            let ids = Ids { pid: v as u32, tid: (v >> 32) as u32, time: v, id: !v, stream_id: v ^ 1, cpu: 3, res: 0, identifier: v.rotate_left(7) };
            let name = &b"/some/file/name.so"[..(v % 19) as usize];
            let kind = match pick {
                0 => RecordKind::Comm(Comm { pid: 1, tid: 2, comm: name }),
                1 => RecordKind::Mmap2(Mmap2 { pid: 1, tid: 2, addr: v, len: 4096, pgoff: 0, file: Mmap2File::Inode { maj: 1, min: 2, ino: v, ino_generation: 0 }, prot: 5, flags: 2, filename: name }),
                2 => RecordKind::Mmap2(Mmap2 { pid: 1, tid: 2, addr: v, len: 4096, pgoff: 0, file: Mmap2File::BuildId(&name[..name.len().min(20)]), prot: 5, flags: 2, filename: name }),
                3 => RecordKind::Fork(Task { pid: 1, ppid: 2, tid: 3, ptid: 4, time: v }),
                4 => RecordKind::Throttle(Throttle { time: v, id: 1, stream_id: 2 }),
                5 => RecordKind::Unthrottle(Throttle { time: v, id: 1, stream_id: 2 }),
                6 => RecordKind::Lost(perfring::records::Lost { id: 1, lost: v }),
                7 => RecordKind::Switch,
                8 => RecordKind::Cgroup(perfring::records::Cgroup { id: v, path: name }),
                9 => RecordKind::TextPoke(perfring::records::TextPoke { addr: v, old_bytes: name, new_bytes: &name[..name.len() / 2] }),
                10 => RecordKind::Ksymbol(perfring::records::Ksymbol { addr: v, len: 10, ksym_type: 1, flags: 0, name }),
                _ => {
                    let f = SampleFields { ip: v, callchain: vec![v; (v % 8) as usize], ..Default::default() };
                    encode::sample(&mut stream, &layout, 0, &f);
                    continue;
                }
            };
            encode::record_kind(&mut stream, &layout, 0, &kind, &ids);
        }
        let records: Vec<_> = Record::iter(&stream, &layout).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(records.len(), picks.len());
        for (i, rec) in records.iter().enumerate() {
            let original = &stream[starts[i]..starts[i] + rec.size()];
            let mut again = Vec::new();
            match rec.kind() {
                RecordKind::Sample(s) => encode::sample(&mut again, &layout, 0, &SampleFields::from_sample(s)),
                kind => {
                    let id = rec.sample_id();
                    let ids = Ids {
                        pid: id.pid().unwrap_or(0), tid: id.tid().unwrap_or(0), time: id.time().unwrap_or(0),
                        id: id.id().unwrap_or(0), stream_id: id.stream_id().unwrap_or(0),
                        cpu: id.cpu().unwrap_or(0), res: id.cpu_res().unwrap_or(0), identifier: id.identifier().unwrap_or(0),
                    };
                    encode::record_kind(&mut again, &layout, 0, kind, &ids);
                }
            }
            prop_assert_eq!(&again[..], original);
            // Any truncation of the slice is an error; a smaller header.size never panics.
            for cut in 1..original.len() {
                prop_assert!(Record::parse(&original[..cut], &layout).is_err());
                if cut % 8 == 0 {
                    let mut short = original[..cut].to_vec();
                    short[6..8].copy_from_slice(&(cut as u16).to_ne_bytes());
                    let _ = Record::parse(&short, &layout).map(|r| format!("{r:?}"));
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(layout in arb_layout(), bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        for rec in Record::iter(&bytes, &layout).flatten() {
            let _ = format!("{rec:?}");
        }
    }
}

/// The fuzz seeds (`fuzz/make_seeds.py`) are valid streams: the header the fuzz target
/// decodes with `arbitrary` (little-endian fields), then records that all decode.
#[test]
fn fuzz_seeds_decode() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/records");
    for name in ["seed-common", "seed-other", "seed-rich"] {
        let data = std::fs::read(format!("{dir}/{name}")).unwrap();
        let le64 = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
        let st = u64::from(u32::from_le_bytes(data[0..4].try_into().unwrap()));
        let branch = match data[21] & 3 {
            0 => 0,
            1 => u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX),
            2 => BRANCH_COUNTERS,
            _ => u64::from(sys::PERF_SAMPLE_BRANCH_HW_INDEX) | BRANCH_COUNTERS,
        };
        let layout = Layout::from_raw(
            st,
            u64::from(data[4] & 31),
            le64(5),
            le64(13),
            branch,
            SampleIdAll::from(data[22] & 1 == 1),
        )
        .unwrap();
        let records: Vec<_> = Record::iter(&data[24..], &layout)
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(records.len() >= 2 || name == "seed-rich", "{name}");
        for r in &records {
            assert!(
                !matches!(r.kind(), RecordKind::Unknown { record_type, .. } if *record_type != 99),
                "{name}: {r:?}"
            );
        }
    }
}
