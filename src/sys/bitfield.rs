//! Storage for the C bitfields in the generated structs (`perf_event_attr`'s flags,
//! `perf_branch_entry`, `perf_mem_data_src`, the mmap page's `cap_*` bits).
//!
//! bindgen normally emits this type itself, but its prelude types never get the
//! zerocopy derives, so build.rs blocklists it and perfring provides it here, written
//! from the calls the generated accessors make: `new`, `get`, `set`, `raw_get`,
//! `raw_set`. Bits are numbered as the C compiler lays them out: from the least
//! significant bit of the first byte on little-endian targets, from the most
//! significant on big-endian ones.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The bytes of one run of adjacent C bitfields; `S` is `[u8; N]`.
///
/// `repr(transparent)`, so it has exactly the layout of its byte array (alignment 1);
/// the generated parent struct carries the alignment as a zero-sized field.
#[repr(transparent)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct __BindgenBitfieldUnit<S> {
    storage: S,
}

impl<S> __BindgenBitfieldUnit<S> {
    /// Wraps the raw bitfield bytes.
    pub const fn new(storage: S) -> Self {
        Self { storage }
    }
}

/// Byte index and mask of bit `index` within the storage.
#[inline]
fn locate(index: usize) -> (usize, u8) {
    let bit = index % 8;
    let shift = if cfg!(target_endian = "big") {
        7 - bit
    } else {
        bit
    };
    (index / 8, 1u8 << shift)
}

impl<S: AsRef<[u8]> + AsMut<[u8]>> __BindgenBitfieldUnit<S> {
    /// Bit `index`, counted in the compiler's bitfield order.
    #[inline]
    pub fn get_bit(&self, index: usize) -> bool {
        let (byte, mask) = locate(index);
        self.storage.as_ref()[byte] & mask != 0
    }

    /// Sets bit `index` to `val`.
    #[inline]
    pub fn set_bit(&mut self, index: usize, val: bool) {
        let (byte, mask) = locate(index);
        let b = &mut self.storage.as_mut()[byte];
        if val {
            *b |= mask;
        } else {
            *b &= !mask;
        }
    }

    /// The `width`-bit field starting at bit `offset`, zero-extended.
    #[inline]
    pub fn get(&self, offset: usize, width: u8) -> u64 {
        debug_assert!(width <= 64);
        (0..usize::from(width)).fold(0u64, |acc, i| {
            if !self.get_bit(offset + i) {
                return acc;
            }
            let at = if cfg!(target_endian = "big") {
                usize::from(width) - 1 - i
            } else {
                i
            };
            acc | 1 << at
        })
    }

    /// Stores the low `width` bits of `val` in the field starting at bit `offset`.
    #[inline]
    pub fn set(&mut self, offset: usize, width: u8, val: u64) {
        debug_assert!(width <= 64);
        for i in 0..usize::from(width) {
            let at = if cfg!(target_endian = "big") {
                usize::from(width) - 1 - i
            } else {
                i
            };
            self.set_bit(offset + i, val >> at & 1 == 1);
        }
    }

    /// [`get`](Self::get) through a raw pointer, for the generated `*_raw` accessors.
    ///
    /// # Safety
    /// `this` must be valid for reads of `Self` and not mutated for the duration.
    #[inline]
    pub unsafe fn raw_get(this: *const Self, offset: usize, width: u8) -> u64 {
        // SAFETY: the caller guarantees `this` is valid for reads and unaliased by
        // writers; `Self` has alignment 1, so any such pointer is aligned.
        let unit = unsafe { &*this };
        unit.get(offset, width)
    }

    /// [`set`](Self::set) through a raw pointer, for the generated `set_*_raw` accessors.
    ///
    /// # Safety
    /// `this` must be valid for reads and writes of `Self` and not otherwise aliased.
    #[inline]
    pub unsafe fn raw_set(this: *mut Self, offset: usize, width: u8, val: u64) {
        // SAFETY: the caller guarantees exclusive, valid access; alignment is 1.
        let unit = unsafe { &mut *this };
        unit.set(offset, width, val);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_do_not_touch_neighbours() {
        let mut u = __BindgenBitfieldUnit::new([0u8; 8]);
        u.set(3, 5, 0b10110);
        u.set(8, 1, 1);
        u.set(40, 20, 0xabcde);
        assert_eq!(u.get(3, 5), 0b10110);
        assert_eq!(u.get(8, 1), 1);
        assert_eq!(u.get(40, 20), 0xabcde);
        assert_eq!(u.get(0, 3), 0);
        u.set(3, 5, 0);
        assert_eq!(u.get(8, 1), 1);
        assert_eq!(u.get(0, 8), 0);
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn bit_order_matches_a_little_endian_c_compiler() {
        // `disabled:1, inherit:1` are bits 0 and 1 of the first byte, as gcc lays them out.
        let mut u = __BindgenBitfieldUnit::new([0u8; 8]);
        u.set(1, 1, 1);
        assert_eq!(u.storage, [2, 0, 0, 0, 0, 0, 0, 0]);
        u.set(4, 8, 0xff);
        assert_eq!(u.storage, [0xf2, 0x0f, 0, 0, 0, 0, 0, 0]);
    }
}
