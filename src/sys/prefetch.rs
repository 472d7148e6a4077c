//! A software prefetch hint over a slice: the one unsafe helper the record decoder
//! uses, kept here so that `records` stays free of `unsafe`.

/// Hints that `bytes[offset..]` will be read soon: asks the CPU to start bringing that
/// cache line in (into every cache level), without waiting for it.
///
/// A hint only: it changes no value, cannot fault and reads nothing the program can
/// observe. An `offset` at or past the end of `bytes` hints nothing. On targets
/// without a prefetch instruction exposed by `core::arch` it does nothing.
///
/// Why the decoder wants it: a record stream is walked by a dependent chain of loads
/// (each header's `size` gives the next record's address), and the hardware
/// prefetchers stop at 4 KiB page boundaries, so on a stream larger than the caches
/// each new page starts with a full DRAM miss on the critical path. A hint a few KiB
/// ahead of the walk starts those misses early.
#[inline(always)]
pub fn prefetch_read(bytes: &[u8], offset: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // Only inside the slice: a hint outside it cannot fault either, but it may be
        // for an unmapped page and cost a page walk for nothing.
        let Some(byte) = bytes.get(offset) else {
            return;
        };
        let p = std::ptr::from_ref(byte).cast::<i8>();
        // SAFETY: `prefetcht0` (SSE, part of the x86_64 baseline) is an architectural
        // no-op: it never faults, on any address, and it writes nothing; the pointer
        // (here inside `bytes`, a live borrow) is passed as an address, never
        // dereferenced by Rust.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (bytes, offset);
    }
}

#[cfg(test)]
mod tests {
    use super::prefetch_read;

    #[test]
    fn prefetch_in_and_past_the_slice_changes_nothing() {
        let bytes = [7u8; 64];
        prefetch_read(&bytes, 0);
        prefetch_read(&bytes, 63);
        prefetch_read(&bytes, 4096);
        prefetch_read(&bytes, usize::MAX);
        prefetch_read(&[], 0);
        assert_eq!(bytes, [7u8; 64]);
    }
}
