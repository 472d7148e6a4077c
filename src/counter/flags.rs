//! Typed `sample_type` and `read_format` masks.

use std::ops::{BitOr, BitOrAssign};

use crate::sys;

macro_rules! mask_type {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $flag:ident = $value:expr,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u64);

        impl $name {
            $($(#[$fdoc])* pub const $flag: $name = $name($value as u64);)*

            /// No flags.
            pub const fn empty() -> Self {
                $name(0)
            }
            /// The raw kernel mask.
            pub const fn bits(self) -> u64 {
                self.0
            }
            /// From a raw kernel mask (unknown bits are kept).
            pub const fn from_bits(bits: u64) -> Self {
                $name(bits)
            }
            /// Whether every flag of `other` is set (`empty()` is always contained).
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// The flag named `name` (`"IP"`, `"ip"`, `"total_time_enabled"`): the kernel's
            /// name without its `PERF_SAMPLE_`/`PERF_FORMAT_` prefix, in any case.
            pub fn from_name(name: &str) -> Option<Self> {
                $(if name.eq_ignore_ascii_case(stringify!($flag)) { return Some(Self::$flag); })*
                None
            }
            /// The names of all flags, in bit order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($flag)),*];
            /// The names of the set flags, kernel-style, for display.
            pub fn names(self) -> Vec<&'static str> {
                let mut v = Vec::new();
                $(if self.0 & ($value as u64) != 0 { v.push(stringify!($flag)); })*
                v
            }
        }

        impl BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                $name(self.0 | rhs.0)
            }
        }

        impl BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({:#x}: {})", stringify!($name), self.0, self.names().join("|"))
            }
        }
    };
}

mask_type! {
    /// What each `PERF_RECORD_SAMPLE` carries (`perf_event_attr.sample_type`).
    #[doc(alias = "sample_type")]
    SampleType {
        /// Instruction pointer.
        IP = sys::PERF_SAMPLE_IP,
        /// Process and thread id.
        TID = sys::PERF_SAMPLE_TID,
        /// Timestamp (perf clock).
        TIME = sys::PERF_SAMPLE_TIME,
        /// Data address (for memory events and breakpoints).
        ADDR = sys::PERF_SAMPLE_ADDR,
        /// Counter values per `read_format`.
        READ = sys::PERF_SAMPLE_READ,
        /// Call chain.
        CALLCHAIN = sys::PERF_SAMPLE_CALLCHAIN,
        /// Event id (of the group leader for group members).
        ID = sys::PERF_SAMPLE_ID,
        /// CPU number.
        CPU = sys::PERF_SAMPLE_CPU,
        /// The current period.
        ///
        /// Beware: on software and breakpoint events with a fixed period (not `-F`), the
        /// kernel then samples *every* event, each with period 1 (`perf_swevent_event`).
        PERIOD = sys::PERF_SAMPLE_PERIOD,
        /// The id of the event itself, even in a group.
        STREAM_ID = sys::PERF_SAMPLE_STREAM_ID,
        /// Raw tracepoint / PMU data.
        RAW = sys::PERF_SAMPLE_RAW,
        /// Last-branch records.
        BRANCH_STACK = sys::PERF_SAMPLE_BRANCH_STACK,
        /// User registers per `sample_regs_user`.
        REGS_USER = sys::PERF_SAMPLE_REGS_USER,
        /// A copy of the user stack.
        STACK_USER = sys::PERF_SAMPLE_STACK_USER,
        /// Hardware cost weight.
        WEIGHT = sys::PERF_SAMPLE_WEIGHT,
        /// Memory data source.
        DATA_SRC = sys::PERF_SAMPLE_DATA_SRC,
        /// The id at a fixed place (first) in every record.
        IDENTIFIER = sys::PERF_SAMPLE_IDENTIFIER,
        /// Transaction flags.
        TRANSACTION = sys::PERF_SAMPLE_TRANSACTION,
        /// Registers at the interrupt per `sample_regs_intr`.
        REGS_INTR = sys::PERF_SAMPLE_REGS_INTR,
        /// Physical data address.
        PHYS_ADDR = sys::PERF_SAMPLE_PHYS_ADDR,
        /// AUX area snapshot.
        AUX = sys::PERF_SAMPLE_AUX,
        /// cgroup id.
        CGROUP = sys::PERF_SAMPLE_CGROUP,
        /// Data page size.
        DATA_PAGE_SIZE = sys::PERF_SAMPLE_DATA_PAGE_SIZE,
        /// Code page size.
        CODE_PAGE_SIZE = sys::PERF_SAMPLE_CODE_PAGE_SIZE,
        /// Structured weight.
        WEIGHT_STRUCT = sys::PERF_SAMPLE_WEIGHT_STRUCT,
    }
}

mask_type! {
    /// What `read(2)` and `SampleType::READ` return (`perf_event_attr.read_format`).
    #[doc(alias = "read_format")]
    ReadFormat {
        /// Time the event was enabled.
        TOTAL_TIME_ENABLED = sys::PERF_FORMAT_TOTAL_TIME_ENABLED,
        /// Time the event was on the PMU.
        TOTAL_TIME_RUNNING = sys::PERF_FORMAT_TOTAL_TIME_RUNNING,
        /// The event id.
        ID = sys::PERF_FORMAT_ID,
        /// Read the whole group through the leader.
        GROUP = sys::PERF_FORMAT_GROUP,
        /// Lost sample count (Linux 6.0).
        LOST = sys::PERF_FORMAT_LOST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_the_kernel_bits() {
        assert_eq!((SampleType::IP | SampleType::TID).bits(), 0b11);
        assert_eq!(SampleType::IDENTIFIER.bits(), 1 << 16);
        assert!((ReadFormat::GROUP | ReadFormat::ID).contains(ReadFormat::ID));
        assert!(!ReadFormat::ID.contains(ReadFormat::GROUP));
        assert_eq!(
            format!("{:?}", ReadFormat::ID | ReadFormat::LOST),
            "ReadFormat(0x14: ID|LOST)"
        );
        assert_eq!(SampleType::from_name("tid"), Some(SampleType::TID));
        assert_eq!(
            ReadFormat::from_name("Total_Time_Running"),
            Some(ReadFormat::TOTAL_TIME_RUNNING)
        );
        assert_eq!(SampleType::from_name("nope"), None);
        assert_eq!(ReadFormat::NAMES.len(), 5);
    }
}
