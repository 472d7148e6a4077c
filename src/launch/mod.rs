//! Starting a command stopped, so counters can be attached before it runs a single
//! instruction of its own (`perf stat -- cmd`, `perf record -- cmd`).
//!
//! The child is forked and waits on a pipe; the caller opens counters on its pid with
//! [`Builder::enable_on_exec`](crate::Builder::enable_on_exec) and then calls
//! [`Stopped::start`], which lets it `exec`. Counting starts at the `exec`, so the
//! fork/exec plumbing itself is not measured.
//!
//! # Address-space layout
//! [`Command::no_aslr`] sets `ADDR_NO_RANDOMIZE` in the child's personality before the
//! `exec`, as `setarch -R` does, so a position-independent executable is loaded at the
//! kernel's fixed `ELF_ET_DYN_BASE` and its symbols' runtime addresses are known before
//! it runs: what a breakpoint attached before `exec` needs. See
//! [`symbols::NO_ASLR_PIE_BASE`](crate::symbols::NO_ASLR_PIE_BASE).
//!
//! # Safety
//! Between `fork` and `exec` the child only makes async-signal-safe calls (`read`,
//! `write`, `dup2`, `sigprocmask`, `signal`, `personality`, `execv`, `_exit`) on data prepared before the fork,
//! as POSIX requires of a multithreaded parent.
//!
//! - [`Command`] → [`Stopped`] (`command.rs`): fork, wait on a pipe, `exec` when told.
//! - [`Child`], [`ExitStatus`] and [`Usage`] (`child.rs`): the started command, reaped by
//!   `wait4` (its status and CPU times).
//! - [`wait_for_exit`] (`wait.rs`): any process's end through a pidfd, or Ctrl-C.
//!
//! Acting on processes a tool did not start (signals, stopping) is
//! [`process`](crate::process)'s; reading `/proc` is [`proc`](crate::proc)'s.
#![allow(unsafe_code)]

mod child;
mod command;
mod wait;

pub use child::{Child, ExitStatus, Usage};
pub use command::{find_program, Command, Stopped};
pub use wait::{wait_for_exit, Waited};
