//! perfring: arm a Linux perf_event counter, get told when it overflows, and read the
//! kernel's sample records in place from the mmap ring.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod counter;
pub mod error;
pub mod event;
pub mod notify;
pub mod ring;
pub mod sys;

pub use counter::{Builder, Count, Counter, Group, GroupCounts, ReadFormat, SampleType, Target};
pub use error::{Error, ErrorKind, Result};
pub use event::Event;
pub use notify::{
    Accounting, Budget, Notification, NotifyKind, Poller, Sigtrap, ThreadSignal, Token,
};
