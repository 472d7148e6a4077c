//! `perfring_overflow`: what a signal-context callback is told about one overflow.
//!
//! Shared by the C API (`libperfring`) and the injector (`libperfring_inject`, whose
//! `hook:` functions receive the same struct), so both hand C the one layout that
//! `include/perfring.h` declares.

/// `perfring_overflow.kind`: an overflow (`POLL_IN`, or a `TRAP_PERF` SIGTRAP).
pub const PERFRING_OVERFLOW: u32 = 0;
/// `perfring_overflow.kind`: a `REFRESH` budget ran out (`POLL_HUP`); the counter is
/// disabled until re-armed.
pub const PERFRING_HUP: u32 = 1;

/// One overflow, as handed to a `perfring_overflow_fn` **in signal context**.
///
/// Fields that the notification mode does not know are 0 (`fd` is -1 for sigtrap).
/// The struct lives on the handler's stack: copy what you need, do not keep the pointer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct perfring_overflow {
    /// The token given at attach (thread signal), or the counter's `sig_data` (sigtrap).
    pub token: u64,
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// `si_addr`: for a breakpoint counter via sigtrap, the watched address.
    pub addr: u64,
    /// The interrupted stack pointer (sigtrap and thread signal), for a frame-pointer walk.
    pub sp: u64,
    /// The interrupted frame pointer (`rbp`/`x29`; sigtrap and thread signal).
    pub fp: u64,
    /// `CLOCK_MONOTONIC` nanoseconds when the handler ran.
    pub time_ns: u64,
    /// The thread that was interrupted (the overflowing thread, for sigtrap).
    pub tid: u32,
    /// The counter's fd (`si_fd`; -1 for sigtrap, which carries none).
    pub fd: i32,
    /// `PERFRING_OVERFLOW` or `PERFRING_HUP`.
    pub kind: u32,
    /// `si_perf_type` (sigtrap): the counter's `attr.type`.
    pub perf_type: u32,
    /// `si_perf_flags` (sigtrap): `TRAP_PERF_FLAG_ASYNC` if SIGTRAP was blocked.
    pub flags: u32,
}
