//! Decode throughput with every field read, as a profiler reads: perfring against
//! the strongest hand-written decoder (`unchecked`), a per-field-checked offset table,
//! linux-perf-event-reader 0.10 (lper), perf-event-data 0.1 (ped), a loop that only
//! walks record headers, and a `u64` scan of the same bytes (the memory-bandwidth
//! ceiling).
//!
//! The stream is synthetic, written with `perfring::records::encode`: 97% samples with
//! IP|TID|TIME|CPU|PERIOD|CALLCHAIN (depth 4..=32 from a fixed-seed xorshift), the rest
//! MMAP2, COMM (half of them with the exec bit), LOST, THROTTLE and UNTHROTTLE, in both
//! `sample_id_all` modes (with it, non-sample records end with a pid/tid, time, cpu
//! trailer). Two sizes: a 512 KiB window (a typical ring) and a 64 MiB stream. The
//! buffer is a `Vec<u64>`, so every decoder reads 8-aligned records, as from the ring.
//!
//! Every decoder reads the same fields: each sample's ip, pid, tid, time, cpu, period
//! and every callchain entry; every MMAP2 field (pid, tid, addr, len, pgoff, maj, min,
//! ino, ino_generation, prot, flags, each file-name byte), COMM's pid, tid, exec bit and
//! each name byte, LOST's id and count, THROTTLE/UNTHROTTLE's time, id and stream_id,
//! and the `sample_id` trailer (pid, tid, time, cpu) of every non-sample record; and
//! each counts the records of each type. They fold them into a [`Fold`] (a
//! multiply-add per field, distinct per field, so a field read from the wrong place or
//! skipped changes the checksum), and before timing each decoder's fold must equal the
//! one the generator computed from the values it wrote.
//!
//! perfring decodes the 512 KiB window with `Record::iter` and the 64 MiB stream with
//! `Record::iter_large`, which hints the bytes ahead into the cache, as their docs
//! say to. The other decoders have no such hints.
//!
//! Every decoder is compiled under the one profile the bench is built with. At the end
//! of a run the bench prints a table of each decoder's time as a ratio to perfring's,
//! all from that run, and the goals of issue 25. Two profiles to compare:
//!
//! - the workspace's release profile, which `cargo bench` inherits: fair LTO
//!   (`lto = "thin"`, `codegen-units = 1`), where every crate's code can be inlined
//!   into the loop that calls it:
//!   `nice cargo bench --bench decode -- --warm-up-time 1 --measurement-time 3`
//! - cargo's default release settings (no cross-crate LTO, 16 codegen units), where
//!   every call into another crate that is not `#[inline]` stays a call:
//!   `nice cargo bench --bench decode --profile stock-release -- --warm-up-time 1 --measurement-time 3`
//!
//! `DECODE_BENCH_WINDOW_ONLY=1` skips the 64 MiB stream, for quick iterations;
//! `DECODE_BENCH_MIN=N` replaces criterion with the fastest of `N` interleaved runs of
//! every decoder, steadier on a loaded machine.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use perfring::records::encode::{self, Ids, SampleFields};
use perfring::records::{
    DecodeError, Layout, Mmap2, Mmap2File, Record, RecordKind, Sample, SampleId, Throttle,
};
use perfring::sys;
use zerocopy::IntoBytes;

#[path = "decode/lper.rs"]
mod lper;
#[path = "decode/ped.rs"]
mod ped;
#[path = "decode/report.rs"]
mod report;
#[path = "decode/table.rs"]
mod table;
#[path = "decode/unchecked.rs"]
mod unchecked;

const SAMPLE_TYPE: u32 = sys::PERF_SAMPLE_IP
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_CPU
    | sys::PERF_SAMPLE_PERIOD
    | sys::PERF_SAMPLE_CALLCHAIN;

/// One odd multiplier per field (and per record type), so swapping two fields or
/// skipping one changes the checksum.
mod k {
    pub const IP: u64 = 0x9e37_79b9_7f4a_7c15;
    pub const PID: u64 = 0xbf58_476d_1ce4_e5b9;
    pub const TID: u64 = 0x94d0_49bb_1331_11eb;
    pub const TIME: u64 = 0xd6e8_feb8_6659_fd93;
    pub const CPU: u64 = 0xa076_1d64_78bd_642f;
    pub const PERIOD: u64 = 0xe703_7ed1_a0b4_28db;
    pub const CHAIN: u64 = 0x8ebc_6af0_9c88_c6e3;
    pub const M_PID: u64 = 0x5899_65cc_7537_4cc3;
    pub const M_TID: u64 = 0x1d8e_4e27_c47d_124f;
    pub const M_ADDR: u64 = 0x7263_56a7_3e0f_9b9d;
    pub const M_LEN: u64 = 0x2f7a_4c6d_a1a4_8c1b;
    pub const M_PGOFF: u64 = 0x4f1b_bcdc_bfa5_4003;
    pub const M_MAJ: u64 = 0x6c8e_9cf5_7083_4a95;
    pub const M_MIN: u64 = 0x3c6e_f372_fe94_f82b;
    pub const M_INO: u64 = 0xa54f_f53a_5f1d_36f1;
    pub const M_INO_GEN: u64 = 0x510e_527f_ade6_82d1;
    pub const M_PROT: u64 = 0x9b05_688c_2b3e_6c1f;
    pub const M_FLAGS: u64 = 0x1f83_d9ab_fb41_bd6b;
    pub const M_NAME: u64 = 0x5be0_cd19_137e_2179;
    pub const C_PID: u64 = 0xcbbb_9d5d_c105_9ed9;
    pub const C_TID: u64 = 0x629a_292a_367c_d507;
    pub const C_EXEC: u64 = 0x2545_f491_4f6c_dd1d;
    pub const C_NAME: u64 = 0x9159_015a_3070_dd17;
    pub const L_ID: u64 = 0x152f_ecd8_f70e_5939;
    pub const L_LOST: u64 = 0x6733_2667_ffc0_0b31;
    pub const T_TIME: u64 = 0x8eb4_4a87_6858_1511;
    pub const T_ID: u64 = 0xdb0c_2e0d_64f9_8fa7;
    pub const T_STREAM: u64 = 0x47b5_481d_befa_4fa5;
    pub const U_TIME: u64 = 0xae5f_9156_e7b6_d99b;
    pub const U_ID: u64 = 0xcf6b_b4f3_6b7c_f5a3;
    pub const U_STREAM: u64 = 0x8a26_3f9e_2c4b_1d27;
    pub const S_PID: u64 = 0x3243_f6a8_885a_308d;
    pub const S_TID: u64 = 0x1319_8a2e_0370_7345;
    pub const S_TIME: u64 = 0xa409_3822_299f_31d1;
    pub const S_CPU: u64 = 0x082e_fa98_ec4e_6c89;
}

/// Indices of [`Fold::per_type`].
const T_SAMPLE: usize = 0;
const T_MMAP2: usize = 1;
const T_COMM: usize = 2;
const T_LOST: usize = 3;
const T_THROTTLE: usize = 4;
const T_UNTHROTTLE: usize = 5;

/// What every decoder computes from the fields it reads, and the generator from the
/// values it wrote.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Fold {
    records: u64,
    /// Records of each type: SAMPLE, MMAP2, COMM, LOST, THROTTLE, UNTHROTTLE.
    per_type: [u64; 6],
    chain_entries: u64,
    name_bytes: u64,
    check: u64,
}

impl Fold {
    #[inline(always)]
    fn f(&mut self, k: u64, v: u64) {
        self.check = self.check.wrapping_add(v.wrapping_mul(k));
    }

    /// One more record of type `T_*`.
    #[inline(always)]
    fn count(&mut self, ty: usize) {
        self.per_type[ty] += 1;
    }

    /// A field that is `None` when the layout does not record it.
    #[inline(always)]
    fn opt(&mut self, k: u64, v: Option<u64>) {
        if let Some(v) = v {
            self.f(k, v);
        }
    }

    /// The sum of a callchain's entries (each one read) and their number.
    #[inline(always)]
    fn chain(&mut self, n: usize, sum: u64) {
        self.chain_entries += n as u64;
        self.f(k::CHAIN, sum);
    }

    /// Every byte of a name, and its length.
    #[inline(always)]
    fn bytes(&mut self, k: u64, b: &[u8]) {
        self.name_bytes += b.len() as u64;
        let sum: u64 = b.iter().map(|&c| u64::from(c)).sum();
        self.f(k, sum ^ (b.len() as u64) << 32);
    }

    /// The `sample_id` trailer of a non-sample record (nothing without `sample_id_all`).
    #[inline(always)]
    fn sid(&mut self, pid: Option<u32>, tid: Option<u32>, time: Option<u64>, cpu: Option<u32>) {
        self.opt(k::S_PID, pid.map(u64::from));
        self.opt(k::S_TID, tid.map(u64::from));
        self.opt(k::S_TIME, time);
        self.opt(k::S_CPU, cpu.map(u64::from));
    }
}

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

const FILENAME: &[u8] = b"/usr/lib/x86_64-linux-gnu/libc.so.6";
const COMM: &[u8] = b"worker-thread";

/// Records in the kernel's format until `target` bytes (whole records only), as `u64`
/// words (so the bytes are 8-aligned), and the fold of every value written.
fn stream(layout: &Layout, target: usize) -> (Vec<u64>, Fold) {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::with_capacity(target + 4096);
    let mut rec = Vec::with_capacity(512);
    let mut truth = Fold::default();
    let mut time = 1_000_000u64;
    loop {
        rec.clear();
        let mut t = Fold::default();
        time += 1000 + rng.next() % 1000;
        let r = rng.next();
        let ids = Ids {
            pid: 4242,
            tid: 4243 + (r % 4) as u32,
            time,
            cpu: (r >> 8) as u32 % 2,
            ..Ids::default()
        };
        if r % 100 < 97 {
            let depth = 4 + (rng.next() % 29) as usize;
            let base = 0x5555_0000_0000 + (rng.next() % 0x10_0000);
            let f = SampleFields {
                ip: base,
                pid: ids.pid,
                tid: ids.tid,
                time,
                cpu: ids.cpu,
                period: 100_003 + r % 7,
                callchain: (0..depth).map(|i| base + 64 * i as u64).collect(),
                ..SampleFields::default()
            };
            encode::sample(&mut rec, layout, sys::PERF_RECORD_MISC_USER as u16, &f);
            t.count(T_SAMPLE);
            t.f(k::IP, f.ip);
            t.f(k::PID, f.pid.into());
            t.f(k::TID, f.tid.into());
            t.f(k::TIME, f.time);
            t.f(k::CPU, f.cpu.into());
            t.f(k::PERIOD, f.period);
            t.chain(
                depth,
                f.callchain.iter().fold(0u64, |a, &x| a.wrapping_add(x)),
            );
        } else {
            // A draw of its own: `r` itself is 97..100 mod 100 here, which would leave
            // only 2, 3 and 4 mod 5 (no MMAP2 or COMM would ever be written).
            let mut misc = 0;
            let kind = match rng.next() % 5 {
                0 => {
                    let m = Mmap2 {
                        pid: 4242,
                        tid: 4242 + (r >> 40) as u32 % 3,
                        addr: 0x7f00_0000_0000 + (r & 0xffff_f000),
                        len: 0x20_0000 + (r & 0xf000),
                        pgoff: (r >> 12) & 0xf000,
                        file: Mmap2File::Inode {
                            maj: 8 + (r >> 50) as u32 % 2,
                            min: 1 + (r >> 52) as u32 % 4,
                            ino: r >> 20,
                            ino_generation: r >> 58,
                        },
                        prot: 5,
                        flags: 2,
                        filename: &FILENAME[..FILENAME.len() - (r >> 33) as usize % 8],
                    };
                    t.count(T_MMAP2);
                    t.f(k::M_PID, m.pid.into());
                    t.f(k::M_TID, m.tid.into());
                    t.f(k::M_ADDR, m.addr);
                    t.f(k::M_LEN, m.len);
                    t.f(k::M_PGOFF, m.pgoff);
                    if let Mmap2File::Inode {
                        maj,
                        min,
                        ino,
                        ino_generation,
                    } = m.file
                    {
                        t.f(k::M_MAJ, maj.into());
                        t.f(k::M_MIN, min.into());
                        t.f(k::M_INO, ino);
                        t.f(k::M_INO_GEN, ino_generation);
                    }
                    t.f(k::M_PROT, m.prot.into());
                    t.f(k::M_FLAGS, m.flags.into());
                    t.bytes(k::M_NAME, m.filename);
                    RecordKind::Mmap2(m)
                }
                1 => {
                    let c = perfring::records::Comm {
                        pid: 4242,
                        tid: ids.tid,
                        comm: &COMM[..COMM.len() - (r >> 33) as usize % 8],
                    };
                    let exec = r & (1 << 20) != 0;
                    if exec {
                        misc = sys::PERF_RECORD_MISC_COMM_EXEC as u16;
                    }
                    t.count(T_COMM);
                    t.f(k::C_PID, c.pid.into());
                    t.f(k::C_TID, c.tid.into());
                    t.f(k::C_EXEC, u64::from(exec));
                    t.bytes(k::C_NAME, c.comm);
                    RecordKind::Comm(c)
                }
                2 => {
                    let l = perfring::records::Lost {
                        id: r >> 48,
                        lost: r % 64,
                    };
                    t.count(T_LOST);
                    t.f(k::L_ID, l.id);
                    t.f(k::L_LOST, l.lost);
                    RecordKind::Lost(l)
                }
                3 => {
                    let th = Throttle {
                        time,
                        id: r >> 48,
                        stream_id: r >> 52,
                    };
                    t.count(T_THROTTLE);
                    t.f(k::T_TIME, th.time);
                    t.f(k::T_ID, th.id);
                    t.f(k::T_STREAM, th.stream_id);
                    RecordKind::Throttle(th)
                }
                _ => {
                    let th = Throttle {
                        time,
                        id: r >> 48,
                        stream_id: r >> 52,
                    };
                    t.count(T_UNTHROTTLE);
                    t.f(k::U_TIME, th.time);
                    t.f(k::U_ID, th.id);
                    t.f(k::U_STREAM, th.stream_id);
                    RecordKind::Unthrottle(th)
                }
            };
            encode::record_kind(&mut rec, layout, misc, &kind, &ids);
            if layout.sample_id_all() {
                t.sid(Some(ids.pid), Some(ids.tid), Some(ids.time), Some(ids.cpu));
            }
        }
        if out.len() + rec.len() > target {
            let words = out
                .chunks_exact(8)
                .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                .collect();
            return (words, truth);
        }
        out.extend_from_slice(&rec);
        truth.records += 1;
        for (a, b) in truth.per_type.iter_mut().zip(t.per_type) {
            *a += b;
        }
        truth.chain_entries += t.chain_entries;
        truth.name_bytes += t.name_bytes;
        truth.check = truth.check.wrapping_add(t.check);
    }
}

/// The floor: read each header's size and skip.
#[inline(never)]
fn header_walk(data: &[u8]) -> Fold {
    let mut t = Fold::default();
    let mut rest = data;
    while let Some(h) = rest.first_chunk::<8>() {
        let size = usize::from(u16::from_ne_bytes([h[6], h[7]]));
        if size < 8 {
            break;
        }
        t.records += 1;
        rest = rest.get(size..).unwrap_or_default();
    }
    t
}

/// The bandwidth ceiling: add up every `u64` of the stream.
#[inline(never)]
fn mem_scan(words: &[u64]) -> u64 {
    words.iter().fold(0u64, |a, &x| a.wrapping_add(x))
}

/// perfring's record iterator and the per-field accessors (`Option`s), as in its docs:
/// `Record::iter` for a stream in cache (the window), `Record::iter_large` for one
/// read from memory (the 64 MiB stream).
fn perfring(data: &[u8], layout: &Layout) -> Fold {
    if data.len() > 4 << 20 {
        perfring_large(data, layout)
    } else {
        perfring_window(data, layout)
    }
}

/// The loop over `Record::iter`. Each loop is a function of its own, so that it is
/// compiled (and its registers allocated) alone, and profiles name it.
#[inline(never)]
fn perfring_window(data: &[u8], layout: &Layout) -> Fold {
    perfring_with(Record::iter(data, layout))
}

/// The loop over `Record::iter_large`.
#[inline(never)]
fn perfring_large(data: &[u8], layout: &Layout) -> Fold {
    perfring_with(Record::iter_large(data, layout))
}

/// The record loop: every field of every record.
#[inline(always)]
fn perfring_with<'a>(records: impl Iterator<Item = Result<Record<'a>, DecodeError>>) -> Fold {
    let sample = |t: &mut Fold, s: &Sample<'_>| {
        t.count(T_SAMPLE);
        t.opt(k::IP, s.ip());
        t.opt(k::PID, s.pid().map(u64::from));
        t.opt(k::TID, s.tid().map(u64::from));
        t.opt(k::TIME, s.time());
        t.opt(k::CPU, s.cpu().map(u64::from));
        t.opt(k::PERIOD, s.period());
        if let Some(chain) = s.callchain() {
            t.chain(
                chain.len(),
                chain.iter().fold(0u64, |a, x| a.wrapping_add(x)),
            );
        }
    };
    let mut t = Fold::default();
    for rec in records {
        let rec = rec.expect("valid stream");
        t.records += 1;
        match rec.kind() {
            RecordKind::Sample(s) => {
                sample(&mut t, s);
                continue;
            }
            RecordKind::Mmap2(m) => {
                t.count(T_MMAP2);
                t.f(k::M_PID, m.pid.into());
                t.f(k::M_TID, m.tid.into());
                t.f(k::M_ADDR, m.addr);
                t.f(k::M_LEN, m.len);
                t.f(k::M_PGOFF, m.pgoff);
                if let Mmap2File::Inode {
                    maj,
                    min,
                    ino,
                    ino_generation,
                } = m.file
                {
                    t.f(k::M_MAJ, maj.into());
                    t.f(k::M_MIN, min.into());
                    t.f(k::M_INO, ino);
                    t.f(k::M_INO_GEN, ino_generation);
                }
                t.f(k::M_PROT, m.prot.into());
                t.f(k::M_FLAGS, m.flags.into());
                t.bytes(k::M_NAME, m.filename);
            }
            RecordKind::Comm(c) => {
                t.count(T_COMM);
                t.f(k::C_PID, c.pid.into());
                t.f(k::C_TID, c.tid.into());
                t.f(k::C_EXEC, u64::from(rec.misc().comm_exec()));
                t.bytes(k::C_NAME, c.comm);
            }
            RecordKind::Lost(l) => {
                t.count(T_LOST);
                t.f(k::L_ID, l.id);
                t.f(k::L_LOST, l.lost);
            }
            RecordKind::Throttle(th) => {
                t.count(T_THROTTLE);
                t.f(k::T_TIME, th.time);
                t.f(k::T_ID, th.id);
                t.f(k::T_STREAM, th.stream_id);
            }
            RecordKind::Unthrottle(th) => {
                t.count(T_UNTHROTTLE);
                t.f(k::U_TIME, th.time);
                t.f(k::U_ID, th.id);
                t.f(k::U_STREAM, th.stream_id);
            }
            _ => {}
        }
        fold_sid(&mut t, &rec.sample_id());
    }
    t
}

#[inline(always)]
fn fold_sid(t: &mut Fold, sid: &SampleId<'_>) {
    t.sid(sid.pid(), sid.tid(), sid.time(), sid.cpu());
}

/// Splits a stream into (type, misc, whole record) for the comparison crates.
fn each_record(data: &[u8], mut f: impl FnMut(u32, u16, &[u8])) {
    let mut rest = data;
    while let Some(h) = rest.first_chunk::<8>() {
        let ty = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        let size = usize::from(u16::from_ne_bytes([h[6], h[7]]));
        let (rec, tail) = rest.split_at(size);
        f(ty, misc, rec);
        rest = tail;
    }
}

/// `DECODE_BENCH_MIN=N`: instead of criterion, run every decoder in turn `N` times
/// (`N / 100`, at least 10, on the 64 MiB stream) and keep each one's fastest run. On
/// a loaded machine the minimum of interleaved runs is steadier than a median.
fn min_of(n: usize, fns: &[(&'static str, &dyn Fn())]) -> Vec<(&'static str, f64)> {
    let mut best = vec![Duration::MAX; fns.len()];
    for _ in 0..n {
        for (b, (_, f)) in best.iter_mut().zip(fns) {
            let t = std::time::Instant::now();
            f();
            *b = (*b).min(t.elapsed());
        }
    }
    fns.iter()
        .zip(best)
        .map(|((name, _), b)| (*name, b.as_secs_f64()))
        .collect()
}

fn bench(c: &mut Criterion) {
    let start = std::time::SystemTime::now();
    let min_runs = std::env::var("DECODE_BENCH_MIN")
        .ok()
        .and_then(|v| v.parse::<usize>().ok());
    let mut columns = Vec::new();
    let mut groups = Vec::new();
    for (name, size) in [("window_512KiB", 512 << 10), ("stream_64MiB", 64 << 20)] {
        if size > 1 << 20 && std::env::var_os("DECODE_BENCH_WINDOW_ONLY").is_some() {
            continue;
        }
        for sample_id_all in [true, false] {
            let mut attr: sys::perf_event_attr = zerocopy::FromZeros::new_zeroed();
            attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
            attr.sample_type = SAMPLE_TYPE.into();
            attr.set_sample_id_all(sample_id_all.into());
            let layout = Layout::new(&attr).unwrap();
            let info = lper::info(&attr);
            let config = ped::config(SAMPLE_TYPE.into(), sample_id_all);
            let plan = table::plan(SAMPLE_TYPE.into(), sample_id_all);
            let uplan = unchecked::plan(sample_id_all);
            let mode = if sample_id_all { "sid" } else { "nosid" };

            let (words, want) = stream(&layout, size);
            let data = words.as_bytes();
            // Every decoder against the generator's ground truth, before any timing.
            assert_eq!(header_walk(data).records, want.records);
            assert_eq!(perfring(data, &layout), want, "perfring disagrees");
            assert_eq!(
                unchecked::decode(&words, &uplan),
                want,
                "unchecked disagrees"
            );
            assert_eq!(table::decode(data, &plan), want, "offset table disagrees");
            assert_eq!(lper::decode(data, info), want, "lper disagrees");
            assert_eq!(ped::decode(data, &config), want, "ped disagrees");
            assert!(want.records > 1000 && want.chain_entries > 4 * want.records / 2);
            assert!(
                want.per_type.iter().all(|&n| n > 0),
                "the stream has every record type: {:?}",
                want.per_type
            );
            eprintln!(
                "decode/{name}/{mode}: {} records ({:?} by type), {} bytes, {} callchain \
                 entries, {} name bytes (every decoder equals the generator's fold)",
                want.records,
                want.per_type,
                data.len(),
                want.chain_entries,
                want.name_bytes
            );

            let label = format!("{}/{mode}", if size > 1 << 20 { "64MiB" } else { "window" });
            let group = format!("decode_{mode}/{name}");
            let fns: [(&'static str, &dyn Fn()); 7] = [
                ("perfring", &|| {
                    black_box(perfring(black_box(data), black_box(&layout)));
                }),
                ("unchecked", &|| {
                    black_box(unchecked::decode(black_box(&words), black_box(&uplan)));
                }),
                ("offset_table", &|| {
                    black_box(table::decode(black_box(data), black_box(&plan)));
                }),
                ("linux-perf-event-reader", &|| {
                    black_box(lper::decode(black_box(data), info));
                }),
                ("perf-event-data", &|| {
                    black_box(ped::decode(black_box(data), &config));
                }),
                ("header_walk", &|| {
                    black_box(header_walk(black_box(data)));
                }),
                ("mem_scan", &|| {
                    black_box(mem_scan(black_box(&words)));
                }),
            ];
            debug_assert!(fns.iter().map(|(n, _)| *n).eq(report::DECODERS));
            if let Some(n) = min_runs {
                // The 64 MiB stream takes ~0.5 s a round with the slow decoders.
                let n = if size > 1 << 20 {
                    n.div_ceil(100).max(10)
                } else {
                    n
                };
                columns.push(report::Column {
                    label,
                    window: size <= 1 << 20,
                    secs: min_of(n, &fns),
                });
                continue;
            }
            let mut g = c.benchmark_group(&group);
            g.throughput(Throughput::Bytes(data.len() as u64));
            if size > 1 << 20 {
                g.sample_size(10)
                    .sampling_mode(SamplingMode::Flat)
                    .warm_up_time(Duration::from_millis(500));
            }
            for (name, f) in &fns {
                g.bench_function(*name, |b| b.iter(f));
            }
            g.finish();
            groups.push((group, label, size <= 1 << 20));
        }
    }
    if min_runs.is_some() {
        report::print("fastest of interleaved runs (DECODE_BENCH_MIN)", &columns);
        return;
    }
    for (group, label, window) in groups {
        let secs = report::DECODERS
            .iter()
            .filter_map(|&name| Some((name, report::median_secs(&group, name, start)?)))
            .collect();
        columns.push(report::Column {
            label,
            window,
            secs,
        });
    }
    report::print("criterion medians", &columns);
}

criterion_group!(benches, bench);
criterion_main!(benches);
