//! Decode throughput with every field read, as a profiler reads: perfring against
//! linux-perf-event-reader 0.10, perf-event-data 0.1, a minimal hand-written
//! offset-table decoder, a loop that only walks record headers, and a `u64` scan of
//! the same bytes (the memory-bandwidth ceiling).
//!
//! The stream is synthetic, written with `perfring::records::encode`: 97% samples with
//! IP|TID|TIME|CPU|PERIOD|CALLCHAIN (depth 4..=32 from a fixed-seed xorshift), the rest
//! MMAP2, COMM, LOST, THROTTLE and UNTHROTTLE, in both `sample_id_all` modes (with it,
//! non-sample records end with a pid/tid, time, cpu trailer). Two sizes: a 512 KiB
//! window (a typical ring) and a 64 MiB stream.
//!
//! Every decoder reads the same fields: each sample's ip, pid, tid, time, cpu, period
//! and every callchain entry; every MMAP2 field (pid, tid, addr, len, pgoff, maj, min,
//! ino, ino_generation, prot, flags, each file-name byte), COMM's pid, tid and each
//! name byte, LOST's id and count, THROTTLE/UNTHROTTLE's time, id and stream_id, and
//! the `sample_id` trailer (pid, tid, time, cpu) of every non-sample record. They fold
//! them into a [`Fold`] (a multiply-add per field, distinct per field, so a field read
//! from the wrong place or skipped changes the checksum), and before timing each
//! decoder's fold must equal the one the generator computed from the values it wrote.
//! linux-perf-event-reader does not expose THROTTLE's `stream_id`; its decoder reads
//! that word from the record's body itself.
//!
//! perfring decodes the 512 KiB window with `Record::iter` and the 64 MiB stream with
//! `Record::iter_large`, which hints the bytes ahead into the cache, as their docs
//! say to.
//!
//! The bench prints each decoder's time as a ratio to perfring's at the end of a run
//! (all from the same run), and the goals of issue 12. For the two goals that compare
//! with the other crates it also prints their ratio to the `u64` scan: the most
//! `X/perfring` can be, since no decoder that reads every byte is faster than the
//! scan of those bytes.
//!
//! Run: `nice cargo bench --bench decode -- --warm-up-time 1 --measurement-time 3`
//! (`DECODE_BENCH_WINDOW_ONLY=1` skips the 64 MiB stream, for quick iterations;
//! `DECODE_BENCH_MIN=N` replaces criterion with the fastest of `N` interleaved runs of
//! the fast decoders, steadier on a loaded machine.)

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use perfring::records::encode::{self, Ids, SampleFields};
use perfring::records::{
    DecodeError, Layout, Mmap2, Mmap2File, Record, RecordKind, Sample, SampleId, Throttle,
};
use perfring::sys;

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

/// What every decoder computes from the fields it reads, and the generator from the
/// values it wrote.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Fold {
    records: u64,
    chain_entries: u64,
    name_bytes: u64,
    check: u64,
}

impl Fold {
    #[inline(always)]
    fn f(&mut self, k: u64, v: u64) {
        self.check = self.check.wrapping_add(v.wrapping_mul(k));
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

/// Records in the kernel's format until `target` bytes (whole records only), and the
/// fold of every value written.
fn stream(layout: &Layout, target: usize) -> (Vec<u8>, Fold) {
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
                    t.f(k::C_PID, c.pid.into());
                    t.f(k::C_TID, c.tid.into());
                    t.bytes(k::C_NAME, c.comm);
                    RecordKind::Comm(c)
                }
                2 => {
                    let l = perfring::records::Lost {
                        id: r >> 48,
                        lost: r % 64,
                    };
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
                    t.f(k::U_TIME, th.time);
                    t.f(k::U_ID, th.id);
                    t.f(k::U_STREAM, th.stream_id);
                    RecordKind::Unthrottle(th)
                }
            };
            encode::record_kind(&mut rec, layout, 0, &kind, &ids);
            if layout.sample_id_all() {
                t.sid(Some(ids.pid), Some(ids.tid), Some(ids.time), Some(ids.cpu));
            }
        }
        if out.len() + rec.len() > target {
            return (out, truth);
        }
        out.extend_from_slice(&rec);
        truth.records += 1;
        truth.chain_entries += t.chain_entries;
        truth.name_bytes += t.name_bytes;
        truth.check = truth.check.wrapping_add(t.check);
    }
}

/// The floor: read each header's size and skip.
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
fn mem_scan(data: &[u8]) -> u64 {
    data.chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()))
        .fold(0u64, |a, x| a.wrapping_add(x))
}

/// perfring's record iterator and the per-field accessors (`Option`s), as in its docs:
/// `Record::iter` for a stream in cache (the window), `Record::iter_large` for one
/// read from memory (the 64 MiB stream).
fn perfring(data: &[u8], layout: &Layout) -> Fold {
    if data.len() > 4 << 20 {
        perfring_large(data, layout)
    } else {
        perfring_with(Record::iter(data, layout))
    }
}

/// The same loop over `Record::iter_large`, in a function of its own so that each
/// loop is compiled (and its registers allocated) alone.
#[inline(never)]
fn perfring_large(data: &[u8], layout: &Layout) -> Fold {
    perfring_with(Record::iter_large(data, layout))
}

/// The record loop: every field of every record.
#[inline(always)]
fn perfring_with<'a>(records: impl Iterator<Item = Result<Record<'a>, DecodeError>>) -> Fold {
    let sample = |t: &mut Fold, s: &Sample<'_>| {
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
        let sid = match rec.kind() {
            RecordKind::Sample(s) => {
                sample(&mut t, s);
                continue;
            }
            RecordKind::Mmap2(m) => {
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
                rec.sample_id()
            }
            RecordKind::Comm(c) => {
                t.f(k::C_PID, c.pid.into());
                t.f(k::C_TID, c.tid.into());
                t.bytes(k::C_NAME, c.comm);
                rec.sample_id()
            }
            RecordKind::Lost(l) => {
                t.f(k::L_ID, l.id);
                t.f(k::L_LOST, l.lost);
                rec.sample_id()
            }
            RecordKind::Throttle(th) => {
                t.f(k::T_TIME, th.time);
                t.f(k::T_ID, th.id);
                t.f(k::T_STREAM, th.stream_id);
                rec.sample_id()
            }
            RecordKind::Unthrottle(th) => {
                t.f(k::U_TIME, th.time);
                t.f(k::U_ID, th.id);
                t.f(k::U_STREAM, th.stream_id);
                rec.sample_id()
            }
            _ => rec.sample_id(),
        };
        fold_sid(&mut t, &sid);
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

/// A minimal hand-written decoder for this one `sample_type`: the offsets worked out
/// once into a small table, each field one bounds-checked load, no error types beyond
/// stopping at the first malformed record. What a user would write instead of a crate.
mod table {
    use super::{k, Fold};
    use perfring::sys;

    pub struct Plan {
        ip: usize,
        tid: usize,
        time: usize,
        cpu: usize,
        period: usize,
        chain: usize,
        /// Trailer size and its fields' offsets from the trailer's start.
        trailer: usize,
        t_tid: usize,
        t_time: usize,
        t_cpu: usize,
    }

    /// Offsets for IP|TID|TIME|CPU|PERIOD|CALLCHAIN (checked by the caller).
    pub fn plan(sample_type: u64, sample_id_all: bool) -> Plan {
        let has = |b: u32| sample_type & u64::from(b) != 0;
        assert!(
            !has(sys::PERF_SAMPLE_IDENTIFIER | sys::PERF_SAMPLE_ADDR | sys::PERF_SAMPLE_ID)
                && !has(sys::PERF_SAMPLE_STREAM_ID | sys::PERF_SAMPLE_READ)
        );
        Plan {
            ip: 8,
            tid: 16,
            time: 24,
            cpu: 32,
            period: 40,
            chain: 48,
            trailer: if sample_id_all { 24 } else { 0 },
            t_tid: 0,
            t_time: 8,
            t_cpu: 16,
        }
    }

    #[inline(always)]
    fn u64_at(b: &[u8], o: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(b.get(o..o + 8)?.try_into().ok()?))
    }

    #[inline(always)]
    fn u32_at(b: &[u8], o: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
    }

    fn until_nul(b: &[u8]) -> &[u8] {
        b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
    }

    #[inline(always)]
    fn record(r: &[u8], ty: u32, p: &Plan, t: &mut Fold) -> Option<()> {
        if ty == sys::PERF_RECORD_SAMPLE {
            t.f(k::IP, u64_at(r, p.ip)?);
            t.f(k::PID, u32_at(r, p.tid)?.into());
            t.f(k::TID, u32_at(r, p.tid + 4)?.into());
            t.f(k::TIME, u64_at(r, p.time)?);
            t.f(k::CPU, u32_at(r, p.cpu)?.into());
            t.f(k::PERIOD, u64_at(r, p.period)?);
            let nr = usize::try_from(u64_at(r, p.chain)?).ok()?;
            let ips = r.get(p.chain + 8..)?.get(..nr.checked_mul(8)?)?;
            let sum = ips
                .chunks_exact(8)
                .map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()))
                .fold(0u64, |a, x| a.wrapping_add(x));
            t.chain(nr, sum);
            return Some(());
        }
        let body_end = r.len().checked_sub(p.trailer)?;
        let b = r.get(..body_end)?;
        match ty {
            sys::PERF_RECORD_MMAP2 => {
                t.f(k::M_PID, u32_at(b, 8)?.into());
                t.f(k::M_TID, u32_at(b, 12)?.into());
                t.f(k::M_ADDR, u64_at(b, 16)?);
                t.f(k::M_LEN, u64_at(b, 24)?);
                t.f(k::M_PGOFF, u64_at(b, 32)?);
                t.f(k::M_MAJ, u32_at(b, 40)?.into());
                t.f(k::M_MIN, u32_at(b, 44)?.into());
                t.f(k::M_INO, u64_at(b, 48)?);
                t.f(k::M_INO_GEN, u64_at(b, 56)?);
                t.f(k::M_PROT, u32_at(b, 64)?.into());
                t.f(k::M_FLAGS, u32_at(b, 68)?.into());
                t.bytes(k::M_NAME, until_nul(b.get(72..)?));
            }
            sys::PERF_RECORD_COMM => {
                t.f(k::C_PID, u32_at(b, 8)?.into());
                t.f(k::C_TID, u32_at(b, 12)?.into());
                t.bytes(k::C_NAME, until_nul(b.get(16..)?));
            }
            sys::PERF_RECORD_LOST => {
                t.f(k::L_ID, u64_at(b, 8)?);
                t.f(k::L_LOST, u64_at(b, 16)?);
            }
            sys::PERF_RECORD_THROTTLE => {
                t.f(k::T_TIME, u64_at(b, 8)?);
                t.f(k::T_ID, u64_at(b, 16)?);
                t.f(k::T_STREAM, u64_at(b, 24)?);
            }
            sys::PERF_RECORD_UNTHROTTLE => {
                t.f(k::U_TIME, u64_at(b, 8)?);
                t.f(k::U_ID, u64_at(b, 16)?);
                t.f(k::U_STREAM, u64_at(b, 24)?);
            }
            _ => {}
        }
        if p.trailer != 0 {
            let s = &r[body_end..];
            t.sid(
                Some(u32_at(s, p.t_tid)?),
                Some(u32_at(s, p.t_tid + 4)?),
                Some(u64_at(s, p.t_time)?),
                Some(u32_at(s, p.t_cpu)?),
            );
        }
        Some(())
    }

    pub fn decode(data: &[u8], p: &Plan) -> Fold {
        let mut t = Fold::default();
        let mut rest = data;
        while let Some(h) = rest.first_chunk::<8>() {
            let ty = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
            let size = usize::from(u16::from_ne_bytes([h[6], h[7]]));
            let Some((r, tail)) = rest.split_at_checked(size).filter(|_| size >= 8) else {
                break;
            };
            if record(r, ty, p, &mut t).is_none() {
                break;
            }
            t.records += 1;
            rest = tail;
        }
        t
    }
}

mod lper {
    use super::{k, Fold};
    use linux_perf_event_reader::{
        Endianness, EventRecord, Mmap2FileId, PerfEventAttr, RawData, RawEventRecord,
        RecordParseInfo, RecordType,
    };

    pub fn info(attr: &perfring::sys::perf_event_attr) -> RecordParseInfo {
        let bytes = zerocopy::IntoBytes::as_bytes(attr);
        let (attr, _) = PerfEventAttr::parse::<_, byteorder::NativeEndian>(bytes).expect("attr");
        RecordParseInfo::new(&attr, Endianness::NATIVE)
    }

    /// THROTTLE's `stream_id`, which the crate's `ThrottleRecord` leaves out.
    fn stream_id(body: RawData<'_>) -> u64 {
        let mut w = body;
        w.skip(16).expect("throttle body");
        w.read_u64::<byteorder::NativeEndian>()
            .expect("throttle.stream_id")
    }

    pub fn decode(data: &[u8], info: RecordParseInfo) -> Fold {
        let mut t = Fold::default();
        super::each_record(data, |ty, misc, rec| {
            let body = RawData::from(&rec[8..]);
            let raw = RawEventRecord::new(RecordType(ty), misc, body, info);
            let parsed = raw.parse().expect("lper parses");
            t.records += 1;
            match parsed {
                EventRecord::Sample(s) => {
                    t.opt(k::IP, s.ip);
                    t.opt(k::PID, s.pid.map(|v| u64::from(v as u32)));
                    t.opt(k::TID, s.tid.map(|v| u64::from(v as u32)));
                    t.opt(k::TIME, s.timestamp);
                    t.opt(k::CPU, s.cpu.map(u64::from));
                    t.opt(k::PERIOD, s.period);
                    if let Some(chain) = s.callchain {
                        let n = chain.len();
                        let sum = (0..n)
                            .map(|i| chain.get(i).expect("callchain entry"))
                            .fold(0u64, |a, x| a.wrapping_add(x));
                        t.chain(n, sum);
                    }
                    return;
                }
                EventRecord::Mmap2(m) => {
                    t.f(k::M_PID, u64::from(m.pid as u32));
                    t.f(k::M_TID, u64::from(m.tid as u32));
                    t.f(k::M_ADDR, m.address);
                    t.f(k::M_LEN, m.length);
                    t.f(k::M_PGOFF, m.page_offset);
                    if let Mmap2FileId::InodeAndVersion(i) = &m.file_id {
                        t.f(k::M_MAJ, i.major.into());
                        t.f(k::M_MIN, i.minor.into());
                        t.f(k::M_INO, i.inode);
                        t.f(k::M_INO_GEN, i.inode_generation);
                    }
                    t.f(k::M_PROT, m.protection.into());
                    t.f(k::M_FLAGS, m.flags.into());
                    t.bytes(k::M_NAME, &m.path.as_slice());
                }
                EventRecord::Comm(c) => {
                    t.f(k::C_PID, u64::from(c.pid as u32));
                    t.f(k::C_TID, u64::from(c.tid as u32));
                    t.bytes(k::C_NAME, &c.name.as_slice());
                }
                EventRecord::Lost(l) => {
                    t.f(k::L_ID, l.id);
                    t.f(k::L_LOST, l.count);
                }
                EventRecord::Throttle(th) => {
                    t.f(k::T_TIME, th.timestamp);
                    t.f(k::T_ID, th.id);
                    t.f(k::T_STREAM, stream_id(body));
                }
                EventRecord::Unthrottle(th) => {
                    t.f(k::U_TIME, th.timestamp);
                    t.f(k::U_ID, th.id);
                    t.f(k::U_STREAM, stream_id(body));
                }
                _ => {}
            }
            let c = raw.common_data().expect("lper sample_id");
            t.sid(
                c.pid.map(|v| v as u32),
                c.tid.map(|v| v as u32),
                c.timestamp,
                c.cpu,
            );
        });
        t
    }
}

mod ped {
    use super::{k, Fold};
    use perf_event_data::endian::Native;
    use perf_event_data::parse::{ParseConfig, Parser};
    use perf_event_data::{Comm, Lost, Mmap2, RecordMetadata, Sample, Throttle, Visitor};

    pub fn config(st: u64, sample_id_all: bool) -> ParseConfig<Native> {
        let mut attr = perf_event_open_sys::bindings::perf_event_attr::default();
        attr.sample_type = st;
        attr.set_sample_id_all(sample_id_all.into());
        ParseConfig::from(attr)
    }

    /// The crate's visitor: the only way to get a non-sample record's `sample_id`
    /// (its `Record` enum drops it), and it skips `Record`'s boxed sample.
    struct Reader<'t>(&'t mut Fold);

    impl Reader<'_> {
        fn sid(self, m: &RecordMetadata) {
            let s = m.sample_id();
            self.0.sid(s.pid(), s.tid(), s.time(), s.cpu());
        }
    }

    impl<'a> Visitor<'a> for Reader<'_> {
        type Output = ();

        fn visit_unimplemented(self, m: RecordMetadata) {
            self.sid(&m);
        }

        fn visit_sample(self, s: Sample<'a>, _: RecordMetadata) {
            let t = self.0;
            t.opt(k::IP, s.ip());
            t.opt(k::PID, s.pid().map(u64::from));
            t.opt(k::TID, s.tid().map(u64::from));
            t.opt(k::TIME, s.time());
            t.opt(k::CPU, s.cpu().map(u64::from));
            t.opt(k::PERIOD, s.period());
            if let Some(chain) = s.callchain() {
                t.chain(
                    chain.len(),
                    chain.iter().fold(0u64, |a, &x| a.wrapping_add(x)),
                );
            }
        }

        fn visit_mmap2(self, m: Mmap2<'a>, md: RecordMetadata) {
            let t = &mut *self.0;
            t.f(k::M_PID, m.pid.into());
            t.f(k::M_TID, m.tid.into());
            t.f(k::M_ADDR, m.addr);
            t.f(k::M_LEN, m.len);
            t.f(k::M_PGOFF, m.pgoff);
            t.opt(k::M_MAJ, m.maj().map(u64::from));
            t.opt(k::M_MIN, m.min().map(u64::from));
            t.opt(k::M_INO, m.ino());
            t.opt(k::M_INO_GEN, m.ino_generation());
            t.f(k::M_PROT, m.prot.into());
            t.f(k::M_FLAGS, m.flags.into());
            t.bytes(k::M_NAME, &m.filename);
            self.sid(&md);
        }

        fn visit_comm(self, c: Comm<'a>, md: RecordMetadata) {
            let t = &mut *self.0;
            t.f(k::C_PID, c.pid.into());
            t.f(k::C_TID, c.tid.into());
            t.bytes(k::C_NAME, &c.comm);
            self.sid(&md);
        }

        fn visit_lost(self, l: Lost, md: RecordMetadata) {
            self.0.f(k::L_ID, l.id);
            self.0.f(k::L_LOST, l.lost);
            self.sid(&md);
        }

        fn visit_throttle(self, th: Throttle, md: RecordMetadata) {
            self.0.f(k::T_TIME, th.time);
            self.0.f(k::T_ID, th.id);
            self.0.f(k::T_STREAM, th.stream_id);
            self.sid(&md);
        }

        fn visit_unthrottle(self, th: Throttle, md: RecordMetadata) {
            self.0.f(k::U_TIME, th.time);
            self.0.f(k::U_ID, th.id);
            self.0.f(k::U_STREAM, th.stream_id);
            self.sid(&md);
        }
    }

    pub fn decode(data: &[u8], config: &ParseConfig<Native>) -> Fold {
        let mut t = Fold::default();
        super::each_record(data, |_, _, rec| {
            let mut parser = Parser::new(rec, config.clone());
            parser
                .parse_record(Reader(&mut t))
                .expect("perf-event-data parses");
            t.records += 1;
        });
        t
    }
}

/// Median time of a criterion benchmark, from the estimate it saved in this run
/// (written after `since`; a filtered-out benchmark's old estimate is not used).
fn median_ns(group: &str, function: &str, since: std::time::SystemTime) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::PathBuf::from("target"),
        std::path::PathBuf::from,
    );
    let path = dir
        .join("criterion")
        .join(group.replace('/', "_"))
        .join(function)
        .join("new/estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["median"]["point_estimate"].as_f64()
}

/// `DECODE_BENCH_MIN=N`: instead of criterion, run every decoder in turn `N` times
/// (`N / 100`, at least 10, on the 64 MiB stream) and print each one's fastest run and
/// its ratio to perfring's. On a loaded machine the minimum of interleaved runs is
/// steadier than a mean or median.
fn min_of(group: &str, n: usize, fns: &[(&str, &dyn Fn())]) {
    let mut best = vec![Duration::MAX; fns.len()];
    for _ in 0..n {
        for (b, (_, f)) in best.iter_mut().zip(fns) {
            let t = std::time::Instant::now();
            f();
            *b = (*b).min(t.elapsed());
        }
    }
    let p = fns
        .iter()
        .position(|(name, _)| *name == "perfring")
        .map_or(1.0, |i| best[i].as_secs_f64());
    for (b, (name, _)) in best.iter().zip(fns) {
        eprintln!(
            "  {group}/{name}: min {:.1} us, {:.2}x perfring",
            b.as_secs_f64() * 1e6,
            b.as_secs_f64() / p
        );
    }
    let t = |f: &str| {
        fns.iter()
            .position(|(name, _)| *name == f)
            .map_or(f64::NAN, |i| best[i].as_secs_f64())
    };
    eprintln!(
        "  {group}: lper/perfring {:.2} (goal >= 5), ped/perfring {:.2} (>= 15), \
         offset_table/perfring {:.2} (>= 1.0), perfring/header_walk {:.2} (<= 2 on 512 KiB), \
         mem_scan/perfring {:.2} (bandwidth share, >= 0.70 on 64 MiB); \
         bounds: lper/mem_scan {:.2}, ped/mem_scan {:.2}",
        t("linux-perf-event-reader") / p,
        t("perf-event-data") / p,
        t("offset_table") / p,
        p / t("header_walk"),
        t("mem_scan") / p,
        t("linux-perf-event-reader") / t("mem_scan"),
        t("perf-event-data") / t("mem_scan"),
    );
}

fn bench(c: &mut Criterion) {
    let start = std::time::SystemTime::now();
    let mut report = Vec::new();
    for sample_id_all in [true, false] {
        let mut attr: sys::perf_event_attr = zerocopy::FromZeros::new_zeroed();
        attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
        attr.sample_type = SAMPLE_TYPE.into();
        attr.set_sample_id_all(sample_id_all.into());
        let layout = Layout::new(&attr).unwrap();
        let info = lper::info(&attr);
        let config = ped::config(SAMPLE_TYPE.into(), sample_id_all);
        let plan = table::plan(SAMPLE_TYPE.into(), sample_id_all);
        let mode = if sample_id_all { "sid" } else { "nosid" };

        for (name, size) in [("window_512KiB", 512 << 10), ("stream_64MiB", 64 << 20)] {
            if size > 1 << 20 && std::env::var_os("DECODE_BENCH_WINDOW_ONLY").is_some() {
                continue;
            }
            let (data, want) = stream(&layout, size);
            // Every decoder against the generator's ground truth, before any timing.
            assert_eq!(header_walk(&data).records, want.records);
            assert_eq!(perfring(&data, &layout), want, "perfring disagrees");
            assert_eq!(table::decode(&data, &plan), want, "offset table disagrees");
            assert_eq!(lper::decode(&data, info), want, "lper disagrees");
            assert_eq!(ped::decode(&data, &config), want, "ped disagrees");
            assert!(want.records > 1000 && want.chain_entries > 4 * want.records / 2);
            assert!(want.name_bytes > 0, "the stream has MMAP2 and COMM records");
            eprintln!(
                "decode/{name}/{mode}: {} records, {} bytes, {} callchain entries, \
                 {} name bytes (every decoder equals the generator's fold)",
                want.records,
                data.len(),
                want.chain_entries,
                want.name_bytes
            );

            let group = format!("decode_{mode}/{name}");
            if let Some(n) = std::env::var("DECODE_BENCH_MIN")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
            {
                // The 64 MiB stream takes ~0.5 s a round with the slow decoders.
                let n = if size > 1 << 20 {
                    n.div_ceil(100).max(10)
                } else {
                    n
                };
                min_of(
                    &group,
                    n,
                    &[
                        ("mem_scan", &|| {
                            black_box(mem_scan(black_box(&data)));
                        }),
                        ("header_walk", &|| {
                            black_box(header_walk(black_box(&data)));
                        }),
                        ("perfring", &|| {
                            black_box(perfring(black_box(&data), black_box(&layout)));
                        }),
                        ("offset_table", &|| {
                            black_box(table::decode(black_box(&data), black_box(&plan)));
                        }),
                        ("linux-perf-event-reader", &|| {
                            black_box(lper::decode(black_box(&data), info));
                        }),
                        ("perf-event-data", &|| {
                            black_box(ped::decode(black_box(&data), &config));
                        }),
                    ],
                );
                continue;
            }
            let mut g = c.benchmark_group(&group);
            g.throughput(Throughput::Bytes(data.len() as u64));
            if size > 1 << 20 {
                g.sample_size(10)
                    .sampling_mode(SamplingMode::Flat)
                    .warm_up_time(Duration::from_millis(500));
            }
            g.bench_function("mem_scan", |b| b.iter(|| mem_scan(black_box(&data))));
            g.bench_function("header_walk", |b| b.iter(|| header_walk(black_box(&data))));
            g.bench_function("perfring", |b| {
                b.iter(|| perfring(black_box(&data), black_box(&layout)))
            });
            g.bench_function("offset_table", |b| {
                b.iter(|| table::decode(black_box(&data), black_box(&plan)))
            });
            g.bench_function("linux-perf-event-reader", |b| {
                b.iter(|| lper::decode(black_box(&data), info))
            });
            g.bench_function("perf-event-data", |b| {
                b.iter(|| ped::decode(black_box(&data), &config))
            });
            g.finish();
            report.push(group);
        }
    }

    // The goals of issue 12, from this run's estimates.
    eprintln!("\nratios (time of X / time of perfring; perfring's share of mem_scan bandwidth):");
    for group in report {
        let t = |f: &str| median_ns(&group, f, start);
        let Some(p) = t("perfring") else { continue };
        let r = |f: &str| t(f).map_or("-".into(), |x| format!("{:.2}", x / p));
        let bound = |f: &str| match (t(f), t("mem_scan")) {
            (Some(x), Some(m)) => format!("{:.2}", x / m),
            _ => "-".into(),
        };
        eprintln!(
            "  {group}: lper/perfring {} (goal >= 5), ped/perfring {} (>= 15), \
             offset_table/perfring {} (>= 1.0), perfring/header_walk {:.2} (<= 2 on 512 KiB), \
             mem_scan/perfring {} (bandwidth share, >= 0.70 on 64 MiB); \
             bounds: lper/mem_scan {}, ped/mem_scan {}",
            r("linux-perf-event-reader"),
            r("perf-event-data"),
            r("offset_table"),
            t("header_walk").map_or(f64::NAN, |h| p / h),
            r("mem_scan"),
            bound("linux-perf-event-reader"),
            bound("perf-event-data"),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
