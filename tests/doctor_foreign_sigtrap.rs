//! The `sigtrap` and `signal` doctor probes inside a program that has its own
//! handlers: a foreign `SIGTRAP` handler installed before perfring's keeps getting
//! every non-`TRAP_PERF` SIGTRAP, and the program's own perfring registrations keep
//! working. Process-wide state, so its own test binary with a single test.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use perfring::event::Access;
use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Sigtrap, ThreadSignal, Token};
use perfring::{Counter, Event};

static FOREIGN_TRAPS: AtomicU64 = AtomicU64::new(0);

extern "C" fn foreign_trap(_: libc::c_int) {
    FOREIGN_TRAPS.fetch_add(1, SeqCst);
}

#[inline(never)]
fn host_hot(x: u64) -> u64 {
    black_box(x).wrapping_mul(0x2545_f491) ^ 7
}

fn host_breakpoint() -> perfring::Builder {
    Counter::builder_for(Event::breakpoint(
        Access::Execute,
        host_hot as fn(u64) -> u64 as usize as u64,
        8,
    ))
    .exclude_kernel(true)
    .exclude_hv(true)
    .period(1)
}

fn call_host(n: u64) {
    for i in 0..n {
        black_box(host_hot(black_box(i)));
    }
}

#[test]
fn probes_leave_a_host_programs_handlers_and_registrations_working() {
    // The host: a debugger-like SIGTRAP handler first, then perfring's on top of it,
    // and one sigtrap counter and one signal counter of its own.
    // SAFETY: a trivial async-signal-safe handler (one atomic add).
    unsafe {
        libc::signal(
            libc::SIGTRAP,
            foreign_trap as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    let trap = Sigtrap::install().unwrap();
    let sig = ThreadSignal::builder().install().unwrap();
    // sig_data 1 / token 1: what a host would plausibly pick.
    let host_trap = trap
        .attach(
            host_breakpoint().sigtrap(1).open().unwrap(),
            TrapHandler::Count,
        )
        .unwrap();
    let host_sig = sig
        .attach(
            host_breakpoint().wakeup_events(1).open().unwrap(),
            Token(1),
            Handler::Count,
        )
        .unwrap();

    for _ in 0..2 {
        for name in ["sigtrap", "signal"] {
            let c = perfring::doctor::run_check(name).unwrap();
            assert!(c.ok, "{name}: {}", c.detail);
        }
    }

    // The foreign handler still gets SIGTRAPs that are not TRAP_PERF.
    let before = FOREIGN_TRAPS.load(SeqCst);
    // SAFETY: raising a signal whose handler is installed.
    unsafe { libc::raise(libc::SIGTRAP) };
    assert_eq!(FOREIGN_TRAPS.load(SeqCst), before + 1);

    // The host's own registrations still count, exactly.
    host_trap.counter().enable().unwrap();
    host_sig.counter().enable().unwrap();
    call_host(10);
    host_trap.counter().disable().unwrap();
    host_sig.counter().disable().unwrap();
    assert_eq!(host_trap.notifications(), 10);
    assert_eq!(host_sig.notifications(), 10);
    // The probes' TRAP_PERFs never reached the foreign handler.
    assert_eq!(FOREIGN_TRAPS.load(SeqCst), before + 1);
}
