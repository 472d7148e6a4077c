//! [`Window`]: the data area's geometry, whose invariants the reader relies on.

mod def {
    /// The data area of a ring: `size` bytes, a power of two, starting `offset` bytes
    /// into the mapping, which is `map_len` bytes long.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct Window {
        // INVARIANTS: `size` is a power of two and a multiple of 8, at least 8;
        // `offset + size <= map_len`; `offset` is a multiple of 8.
        offset: usize,
        size: usize,
    }

    impl Window {
        /// Checks the invariants; `None` if the kernel's numbers break them.
        pub(crate) fn new(offset: u64, size: u64, map_len: usize) -> Option<Window> {
            let offset = usize::try_from(offset).ok()?;
            let size = usize::try_from(size).ok()?;
            let fits = offset.checked_add(size).is_some_and(|end| end <= map_len);
            // INVARIANTS: each one is checked here and nowhere else builds a Window.
            (size.is_power_of_two() && size >= 8 && offset % 8 == 0 && fits)
                .then_some(Window { offset, size })
        }

        /// Byte offset of the data area in the mapping.
        pub(crate) fn offset(self) -> usize {
            self.offset
        }

        /// Size of the data area in bytes (a power of two).
        pub(crate) fn size(self) -> usize {
            self.size
        }
    }
}

pub(crate) use def::Window;

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn rejects_what_would_break_the_reader() {
        assert!(Window::new(4096, 8192, 4096 + 8192).is_some());
        assert!(
            Window::new(4096, 8192, 4096 + 8191).is_none(),
            "past the mapping"
        );
        assert!(
            Window::new(4096, 6000, 1 << 20).is_none(),
            "not a power of two"
        );
        assert!(Window::new(4, 8192, 1 << 20).is_none(), "misaligned");
        assert!(Window::new(u64::MAX, 8192, 1 << 20).is_none(), "overflow");
    }
}
