//! The offset-table decoder: what a user would write instead of a crate, for this one
//! `sample_type`. The offsets are worked out once into a small table; each field is one
//! bounds-checked load (`b.get(o..o + 8)?`); it stops at the first malformed record.

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
        t.count(super::T_SAMPLE);
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
            t.count(super::T_MMAP2);
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
            t.count(super::T_COMM);
            t.f(k::C_PID, u32_at(b, 8)?.into());
            t.f(k::C_TID, u32_at(b, 12)?.into());
            let misc = u32::from(u16::from_ne_bytes(r.get(4..6)?.try_into().ok()?));
            t.f(
                k::C_EXEC,
                u64::from(misc & sys::PERF_RECORD_MISC_COMM_EXEC != 0),
            );
            t.bytes(k::C_NAME, until_nul(b.get(16..)?));
        }
        sys::PERF_RECORD_LOST => {
            t.count(super::T_LOST);
            t.f(k::L_ID, u64_at(b, 8)?);
            t.f(k::L_LOST, u64_at(b, 16)?);
        }
        sys::PERF_RECORD_THROTTLE => {
            t.count(super::T_THROTTLE);
            t.f(k::T_TIME, u64_at(b, 8)?);
            t.f(k::T_ID, u64_at(b, 16)?);
            t.f(k::T_STREAM, u64_at(b, 24)?);
        }
        sys::PERF_RECORD_UNTHROTTLE => {
            t.count(super::T_UNTHROTTLE);
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

#[inline(never)]
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
