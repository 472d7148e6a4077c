#![doc = include_str!("../README.md")]
#![deny(
    unsafe_code,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod counter;
pub mod doctor;
pub mod error;
pub mod event;
pub mod inject;
pub mod launch;
pub mod notify;
pub mod output;
pub mod records;
pub mod ring;
pub mod sampler;
pub mod symbolize;
pub mod symbols;
pub mod sys;
pub mod trigger;
pub mod unwind;

pub use counter::{Builder, Count, Counter, Group, GroupCounts, ReadFormat, SampleType, Scope};
pub use error::{Error, ErrorKind, Result};
pub use event::Event;
pub use notify::{
    Accounting, Budget, Notification, NotifyKind, Poller, Signal, Sigtrap, ThreadSignal, Token,
};
