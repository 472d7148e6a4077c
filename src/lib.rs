#![cfg_attr(feature = "profile", doc = include_str!("../README.md"))]
#![cfg_attr(
    not(feature = "profile"),
    doc = "perfring's core (built without the `profile` feature): counters, rings, zero-copy \
           records, notifiers (poll driver, thread signals, sigtrap, budgets), the sampler \
           and triggers. See the README for the whole crate."
)]
#![deny(
    unsafe_code,
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks
)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod console;
pub mod counter;
pub mod doctor;
#[cfg(feature = "profile")]
pub mod elf;
pub mod error;
pub mod event;
pub mod inject;
pub mod launch;
pub mod notify;
#[cfg(feature = "profile")]
pub mod offcpu;
#[cfg(feature = "profile")]
pub mod output;
#[cfg(feature = "profile")]
pub mod pipeline;
pub mod privilege;
pub mod proc;
pub mod process;
#[cfg(feature = "profile")]
pub mod profiler;
#[cfg(feature = "push")]
pub mod push;
pub mod records;
#[cfg(feature = "profile")]
pub mod report;
#[cfg(feature = "profile")]
pub mod resolve;
pub mod ring;
pub mod sampler;
#[cfg(feature = "profile")]
pub mod space;
pub mod stat;
pub mod stream;
#[cfg(feature = "profile")]
pub mod symbolize;
#[cfg(feature = "profile")]
pub mod synth;
pub mod sys;
pub mod trigger;
#[cfg(feature = "profile")]
pub mod unwind;

pub use counter::{Builder, Count, Counter, Group, GroupCounts, ReadFormat, SampleType, Scope};
pub use error::{Error, ErrorKind, Result};
pub use event::Event;
pub use notify::{
    Accounting, Budget, Notification, NotifyKind, Poller, Signal, Sigtrap, ThreadSignal, Token,
};
