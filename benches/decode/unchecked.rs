//! The strongest hand-written baseline: what a user who knows the stream's one
//! `sample_type` (IP|TID|TIME|CPU|PERIOD|CALLCHAIN) writes for speed, with no crate.
//!
//! The stream is walked as `&[u64]` words (the bench's buffer is a `Vec<u64>`, so it
//! is 8-aligned by construction). Each record's size is validated once: the header's
//! `size` against the stream, then, per type, the record's length against its fixed
//! part (and a sample's `nr` against what is left). After that the fixed fields are
//! read through `#[repr(C)]` zerocopy structs cast from whole words with
//! `transmute_ref!` (size and alignment proven at compile time: no per-field check),
//! and the callchain is a `&[u64]`. It stops at the first malformed record.

use super::{k, Fold};
use perfring::sys;
use zerocopy::{transmute_ref, FromBytes, Immutable, IntoBytes, KnownLayout};

/// `perf_event_header`, as one word.
#[derive(FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Header {
    ty: u32,
    misc: u16,
    size: u16,
}

/// A sample of this `sample_type` up to its callchain's `nr`: 7 words.
#[derive(FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct SampleHead {
    _header: Header,
    ip: u64,
    pid: u32,
    tid: u32,
    time: u64,
    cpu: u32,
    _res: u32,
    period: u64,
    nr: u64,
}

/// `PERF_RECORD_MMAP2` with device and inode, up to the file name: 9 words.
#[derive(FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Mmap2Head {
    _header: Header,
    pid: u32,
    tid: u32,
    addr: u64,
    len: u64,
    pgoff: u64,
    maj: u32,
    min: u32,
    ino: u64,
    ino_generation: u64,
    prot: u32,
    flags: u32,
}

/// `PERF_RECORD_COMM` up to the name: 2 words.
#[derive(FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct CommHead {
    _header: Header,
    pid: u32,
    tid: u32,
}

/// `PERF_RECORD_LOST`: 3 words.
#[derive(FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct LostBody {
    _header: Header,
    id: u64,
    lost: u64,
}

/// `PERF_RECORD_THROTTLE` / `UNTHROTTLE`: 4 words.
#[derive(FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct ThrottleBody {
    _header: Header,
    time: u64,
    id: u64,
    stream_id: u64,
}

/// The `sample_id` trailer of this `sample_type`: pid/tid, time, cpu (3 words).
#[derive(FromBytes, Immutable, KnownLayout)]
#[repr(C)]
struct Trailer {
    pid: u32,
    tid: u32,
    time: u64,
    cpu: u32,
    _res: u32,
}

/// Trailer words: 3 with `sample_id_all`, 0 without.
pub struct Plan {
    trailer: usize,
}

pub fn plan(sample_id_all: bool) -> Plan {
    Plan {
        trailer: if sample_id_all { 3 } else { 0 },
    }
}

fn until_nul(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

#[inline(always)]
fn record(rec: &[u64], h: &Header, p: &Plan, t: &mut Fold) -> Option<()> {
    if h.ty == sys::PERF_RECORD_SAMPLE {
        let (head, ips) = rec.split_first_chunk::<7>()?;
        let s: &SampleHead = transmute_ref!(head);
        let ips = ips.get(..usize::try_from(s.nr).ok()?)?;
        t.count(super::T_SAMPLE);
        t.f(k::IP, s.ip);
        t.f(k::PID, s.pid.into());
        t.f(k::TID, s.tid.into());
        t.f(k::TIME, s.time);
        t.f(k::CPU, s.cpu.into());
        t.f(k::PERIOD, s.period);
        t.chain(ips.len(), ips.iter().fold(0u64, |a, &x| a.wrapping_add(x)));
        return Some(());
    }
    let (body, trailer) = rec.split_at_checked(rec.len().checked_sub(p.trailer)?)?;
    match h.ty {
        sys::PERF_RECORD_MMAP2 => {
            let (m, name) = body.split_first_chunk::<9>()?;
            let m: &Mmap2Head = transmute_ref!(m);
            t.count(super::T_MMAP2);
            t.f(k::M_PID, m.pid.into());
            t.f(k::M_TID, m.tid.into());
            t.f(k::M_ADDR, m.addr);
            t.f(k::M_LEN, m.len);
            t.f(k::M_PGOFF, m.pgoff);
            t.f(k::M_MAJ, m.maj.into());
            t.f(k::M_MIN, m.min.into());
            t.f(k::M_INO, m.ino);
            t.f(k::M_INO_GEN, m.ino_generation);
            t.f(k::M_PROT, m.prot.into());
            t.f(k::M_FLAGS, m.flags.into());
            t.bytes(k::M_NAME, until_nul(name.as_bytes()));
        }
        sys::PERF_RECORD_COMM => {
            let (c, name) = body.split_first_chunk::<2>()?;
            let c: &CommHead = transmute_ref!(c);
            t.count(super::T_COMM);
            t.f(k::C_PID, c.pid.into());
            t.f(k::C_TID, c.tid.into());
            t.f(
                k::C_EXEC,
                u64::from(u32::from(h.misc) & sys::PERF_RECORD_MISC_COMM_EXEC != 0),
            );
            t.bytes(k::C_NAME, until_nul(name.as_bytes()));
        }
        sys::PERF_RECORD_LOST => {
            let l: &LostBody = transmute_ref!(body.first_chunk::<3>()?);
            t.count(super::T_LOST);
            t.f(k::L_ID, l.id);
            t.f(k::L_LOST, l.lost);
        }
        sys::PERF_RECORD_THROTTLE => {
            let th: &ThrottleBody = transmute_ref!(body.first_chunk::<4>()?);
            t.count(super::T_THROTTLE);
            t.f(k::T_TIME, th.time);
            t.f(k::T_ID, th.id);
            t.f(k::T_STREAM, th.stream_id);
        }
        sys::PERF_RECORD_UNTHROTTLE => {
            let th: &ThrottleBody = transmute_ref!(body.first_chunk::<4>()?);
            t.count(super::T_UNTHROTTLE);
            t.f(k::U_TIME, th.time);
            t.f(k::U_ID, th.id);
            t.f(k::U_STREAM, th.stream_id);
        }
        _ => {}
    }
    if let Some(s) = trailer.first_chunk::<3>() {
        let s: &Trailer = transmute_ref!(s);
        t.sid(Some(s.pid), Some(s.tid), Some(s.time), Some(s.cpu));
    }
    Some(())
}

#[inline(never)]
pub fn decode(words: &[u64], p: &Plan) -> Fold {
    let mut t = Fold::default();
    let mut rest = words;
    while let Some(h) = rest.first() {
        let h: &Header = transmute_ref!(h);
        // The record's size, validated once: whole words, at least the header, and
        // inside the stream.
        if !h.size.is_multiple_of(8) || h.size < 8 {
            break;
        }
        let Some((rec, tail)) = rest.split_at_checked(usize::from(h.size / 8)) else {
            break;
        };
        if record(rec, h, p, &mut t).is_none() {
            break;
        }
        t.records += 1;
        rest = tail;
    }
    t
}
