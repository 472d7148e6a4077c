//! Self-monitoring reads: a counter's value from user space with `rdpmc`, without a
//! system call, through the control page's seqlock (perf_event.h, "user-space reading").

use std::mem::offset_of;
use std::sync::atomic::{fence, AtomicU32, Ordering};

use super::Ring;
use crate::sys;
use crate::{Error, ErrorKind, Result};

/// A counter value read from user space by [`Ring::read_self`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfCount {
    /// `offset + rdpmc(index - 1)`, the same value `read(2)` would return.
    pub value: u64,
    /// Nanoseconds enabled, advanced to now with the TSC when `cap_user_time` is set.
    pub time_enabled: u64,
    /// Nanoseconds running, likewise.
    pub time_running: u64,
}

/// Sign-extends a `width`-bit PMC value, as perf_event.h prescribes for `pmc_width`.
pub(crate) fn sign_extend(pmc: u64, width: u16) -> u64 {
    if width == 0 || width >= 64 {
        return pmc;
    }
    let shift = 64 - u32::from(width);
    (((pmc << shift) as i64) >> shift) as u64
}

/// Converts TSC cycles to nanoseconds with the page's `time_shift`/`time_mult`/`time_offset`
/// (perf_event.h: `quot = cyc >> shift; rem = cyc & ((1 << shift) - 1); ...`).
pub(crate) fn tsc_delta(cyc: u64, shift: u16, mult: u32, offset: u64) -> u64 {
    let shift = u32::from(shift).min(63);
    let quot = cyc >> shift;
    let rem = cyc & ((1u64 << shift) - 1);
    offset
        .wrapping_add(quot.wrapping_mul(u64::from(mult)))
        .wrapping_add(rem.wrapping_mul(u64::from(mult)) >> shift)
}

#[cfg(target_arch = "x86_64")]
fn rdpmc(counter: u32) -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: rdpmc only reads a performance counter; the kernel has enabled it for
    // user space (cap_user_rdpmc, checked by the caller) and `counter` is the index it
    // published (index - 1), so it does not fault.
    unsafe {
        std::arch::asm!("rdpmc", in("ecx") counter, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags));
    }
    u64::from(hi) << 32 | u64::from(lo)
}

#[cfg(target_arch = "x86_64")]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no preconditions in user space on Linux (TSC is not disabled).
    unsafe { std::arch::x86_64::_rdtsc() }
}

impl Ring {
    fn lock_word(&self) -> &AtomicU32 {
        // SAFETY: `lock` is a 4-aligned u32 at a fixed offset inside the control page,
        // which lives as long as the mapping; the kernel updates it with barriers, so
        // reading it as an atomic is sound.
        unsafe {
            AtomicU32::from_ptr(
                self.map
                    .as_mut_ptr()
                    .add(offset_of!(sys::perf_event_mmap_page, lock))
                    .cast(),
            )
        }
    }

    /// Reads the counter from user space with `rdpmc` (x86_64), retrying while the
    /// kernel updates the page (`lock` seqcount).
    ///
    /// # Errors
    /// [`ErrorKind::Unsupported`] when the page says `cap_user_rdpmc = 0` (software,
    /// breakpoint and tracepoint events; or `/sys/bus/event_source/devices/cpu/rdpmc`
    /// is 0) or the counter is not on the PMU right now (`index = 0`).
    pub fn read_self(&self) -> Result<SelfCount> {
        let unsupported = |why: &str| {
            Error::new(ErrorKind::Unsupported, format!("rdpmc read of {}", self.event), why.to_string())
                .with_fix("use Counter::read(); rdpmc needs a hardware counter on the PMU and /sys/bus/event_source/devices/cpu/rdpmc = 1")
        };
        if !cfg!(target_arch = "x86_64") {
            return Err(unsupported("rdpmc reads are implemented for x86_64 only"));
        }
        loop {
            // ATOMICS: Acquire on the seqcount orders the field reads below after it,
            // pairing with the kernel's barrier after it bumps `lock` (perf_event.h).
            let seq = self.lock_word().load(Ordering::Acquire);
            let page = self.control();
            // SAFETY: both members of this union are 8 bytes of plain data (the zerocopy
            // derives prove every bit pattern valid), so reading the bitfield view is sound.
            let caps = unsafe { page.__bindgen_anon_1.__bindgen_anon_1 };
            if caps.cap_user_rdpmc() == 0 {
                return Err(unsupported(
                    "cap_user_rdpmc is 0 for this event: no hardware counter backs it",
                ));
            }
            if page.index == 0 {
                return Err(unsupported("the counter is not on the PMU now (index 0): it is disabled or multiplexed out"));
            }
            #[cfg(target_arch = "x86_64")]
            let (pmc, cyc) = (rdpmc(page.index - 1), rdtsc());
            #[cfg(not(target_arch = "x86_64"))]
            let (pmc, cyc) = (0u64, 0u64);
            let value = (page.offset as u64).wrapping_add(sign_extend(pmc, page.pmc_width));
            let (mut enabled, mut running) = (page.time_enabled, page.time_running);
            if caps.cap_user_time() != 0 && enabled != running {
                let cyc = if caps.cap_user_time_short() != 0 {
                    page.time_cycles
                        .wrapping_add(cyc.wrapping_sub(page.time_cycles) & page.time_mask)
                } else {
                    cyc
                };
                let delta = tsc_delta(cyc, page.time_shift, page.time_mult, page.time_offset);
                enabled = enabled.wrapping_add(delta);
                running = running.wrapping_add(delta);
            }
            // ATOMICS: the fence keeps the reads above before the re-check of `lock`;
            // an unchanged seqcount means no kernel update overlapped them.
            fence(Ordering::Acquire);
            if self.lock_word().load(Ordering::Relaxed) == seq {
                return Ok(SelfCount {
                    value,
                    time_enabled: enabled,
                    time_running: running,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmc_values_are_sign_extended_from_their_width() {
        assert_eq!(sign_extend(0x7fff_ffff_ffff, 48), 0x7fff_ffff_ffff);
        assert_eq!(sign_extend(0xffff_ffff_ffff, 48), u64::MAX);
        assert_eq!(sign_extend(0x8000_0000_0000, 48) as i64, -(1i64 << 47));
        assert_eq!(sign_extend(5, 0), 5);
    }

    #[test]
    fn tsc_conversion_matches_the_headers_formula() {
        // 3 GHz TSC: mult/2^shift = 1/3 ns per cycle.
        let (shift, mult) = (31u16, (1u64 << 31) / 3);
        let ns = tsc_delta(3_000_000_000, shift, mult as u32, 0);
        assert!((999_999_000..=1_000_000_000).contains(&ns), "{ns}");
        assert_eq!(tsc_delta(0, shift, mult as u32, 42), 42);
    }
}
