//! Per-notification cost of each notify mode, against the same thing written with raw
//! libc calls, on an execute breakpoint with period 1 (one overflow per call).
//!
//! Each group: `perfring` and `raw`; one iteration = one call of the breakpointed
//! function = one overflow = one notification handled.
#![deny(clippy::undocumented_unsafe_blocks)]
#![allow(unsafe_code, missing_docs, clippy::undocumented_unsafe_blocks)]

use std::hint::black_box;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use perfring::notify::signal::Handler;
use perfring::notify::sigtrap::TrapHandler;
use perfring::notify::{Poller, Sigtrap, ThreadSignal, Token};
use perfring::ring::{Ring, RingSize};
use perfring::{sys, Counter, Event, SampleType};

#[inline(never)]
#[no_mangle]
pub extern "C" fn perfring_bench_target(x: u64) -> u64 {
    black_box(x).wrapping_mul(2654435761)
}

fn addr() -> u64 {
    perfring_bench_target as *const () as u64
}

fn hit() {
    black_box(perfring_bench_target(black_box(1)));
}

/// Raw `perf_event_open` of an execute breakpoint with period 1.
fn raw_open(sigtrap: bool) -> OwnedFd {
    // SAFETY: perf_event_attr is plain integers (zerocopy FromZeros): all-zero is valid.
    let mut attr: sys::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
    attr.type_ = sys::PERF_TYPE_BREAKPOINT;
    attr.bp_type = sys::HW_BREAKPOINT_X;
    attr.__bindgen_anon_3.bp_addr = addr();
    attr.__bindgen_anon_4.bp_len = 8;
    attr.__bindgen_anon_1.sample_period = 1;
    attr.sample_type = u64::from(sys::PERF_SAMPLE_IP);
    attr.__bindgen_anon_2.wakeup_events = 1;
    attr.set_disabled(1);
    if sigtrap {
        attr.set_sigtrap(1);
        attr.set_remove_on_exec(1);
        attr.sig_data = 0x5157;
    }
    // SAFETY: `attr` is a valid, initialised attr of `attr.size` bytes living across the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const _,
            0,
            -1,
            -1,
            libc::c_ulong::from(sys::PERF_FLAG_FD_CLOEXEC),
        )
    };
    assert!(
        fd >= 0,
        "perf_event_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a non-negative perf_event_open return is a new fd owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

fn ioctl(fd: &OwnedFd, req: u64) {
    // SAFETY: the perf ioctls used here take an integer argument; the fd is open.
    assert_eq!(unsafe { libc::ioctl(fd.as_raw_fd(), req as _, 0) }, 0);
}

fn poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("poll");
    g.bench_function("perfring", |b| {
        let counter = Counter::builder_for(Event::breakpoint(
            perfring::event::Access::Execute,
            addr(),
            8,
        ))
        .period(1)
        .sample(SampleType::IP)
        .wakeup_events(1)
        .open()
        .unwrap();
        let ring = Ring::map(&counter, RingSize::Pages(8)).unwrap();
        let mut poller = Poller::new().unwrap();
        poller.register(Token(1), counter, ring).unwrap();
        poller.counter(Token(1)).unwrap().enable().unwrap();
        let mut events = Vec::with_capacity(4);
        b.iter(|| {
            hit();
            poller
                .poll_and_drain(&mut events, Some(Duration::ZERO), |_, r| {
                    black_box(r.kind());
                })
                .unwrap()
        });
    });
    g.bench_function("raw", |b| {
        let fd = raw_open(false);
        let page = 4096usize;
        let len = page * 9;
        // SAFETY: maps 1 + 8 pages of an open perf fd; the result is checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let ctl = map as *mut sys::perf_event_mmap_page;
        // SAFETY: the mapping starts with the control page; data_head/data_tail are
        // 8-aligned u64s the kernel accesses atomically, valid until munmap below.
        let head = unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*ctl).data_head)) };
        // SAFETY: as for data_head.
        let tail = unsafe { AtomicU64::from_ptr(std::ptr::addr_of_mut!((*ctl).data_tail)) };
        // SAFETY: epoll_create1 takes only flags.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 1,
        };
        // SAFETY: `ep` and the perf fd are open; `ev` is a valid epoll_event.
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
        ioctl(&fd, sys::ioctl::ENABLE);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: the data area starts one page into the 9-page mapping.
        let data = unsafe { (map as *const u8).add(page) };
        b.iter(|| {
            hit();
            // SAFETY: `out` has room for the 4 events epoll_wait may write.
            let n = unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 4, 0) };
            let mut records = 0u64;
            if n > 0 {
                let h = head.load(Ordering::Acquire);
                let mut t = tail.load(Ordering::Relaxed);
                while t < h {
                    let at = (t as usize) & (8 * page - 1);
                    // SAFETY: `at` is an 8-aligned offset inside the 8-page data area and the
                    // header there is published (before `h`); headers never wrap.
                    let size = unsafe { (data.add(at + 6) as *const u16).read() };
                    // SAFETY: as above.
                    black_box(unsafe { (data.add(at) as *const u32).read() });
                    t += u64::from(size);
                    records += 1;
                }
                tail.store(t, Ordering::Release);
            }
            records
        });
        ioctl(&fd, sys::ioctl::DISABLE);
        // SAFETY: `ep` is ours and closed once.
        unsafe { libc::close(ep) };
        // SAFETY: `map`/`len` are the mapping made above; nothing uses it afterwards.
        unsafe { libc::munmap(map, len) };
    });
    g.finish();
}

static RAW_HITS: AtomicU64 = AtomicU64::new(0);

extern "C" fn raw_handler(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    RAW_HITS.fetch_add(1, Ordering::Relaxed);
}

fn raw_sigaction(signo: i32) {
    // SAFETY: an all-zero sigaction is valid (SIG_DFL, empty mask, no flags).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = raw_handler as *const () as usize;
    act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: `sa_mask` is a valid sigset_t to clear.
    unsafe { libc::sigemptyset(&mut act.sa_mask) };
    // SAFETY: `act` is a valid sigaction whose handler is async-signal-safe (one atomic).
    unsafe { libc::sigaction(signo, &act, std::ptr::null_mut()) };
}

fn restore_default(signo: i32) {
    // SAFETY: restoring the default action has no memory-safety preconditions.
    unsafe { libc::signal(signo, libc::SIG_DFL) };
}

fn thread_signal(c: &mut Criterion) {
    let mut g = c.benchmark_group("thread_signal");
    // Raw first, on its own signal, so perfring's install sees a free signal.
    g.bench_function("raw", |b| {
        let signo = libc::SIGRTMAX() - 3;
        raw_sigaction(signo);
        let fd = raw_open(false);
        let owner = sys::f_owner_ex {
            type_: sys::F_OWNER_TID as i32,
            // SAFETY: gettid has no preconditions.
            pid: unsafe { libc::gettid() },
        };
        // SAFETY: fcntl on an open fd; F_SETOWN_EX reads the f_owner_ex living across it.
        unsafe {
            libc::fcntl(fd.as_raw_fd(), sys::F_SETSIG as i32, signo);
            libc::fcntl(fd.as_raw_fd(), sys::F_SETOWN_EX as i32, &owner);
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_ASYNC);
        }
        ioctl(&fd, sys::ioctl::ENABLE);
        b.iter(hit);
        ioctl(&fd, sys::ioctl::DISABLE);
        drop(fd);
        restore_default(signo);
    });
    g.bench_function("perfring", |b| {
        let sig = ThreadSignal::builder().install().unwrap();
        let counter = Counter::builder_for(Event::breakpoint(
            perfring::event::Access::Execute,
            addr(),
            8,
        ))
        .period(1)
        .sample(SampleType::IP)
        .wakeup_events(1)
        .open()
        .unwrap();
        let sc = sig.attach(counter, Token(1), Handler::Count).unwrap();
        sc.counter().enable().unwrap();
        b.iter(hit);
        sc.counter().disable().unwrap();
    });
    g.finish();
}

fn sigtrap(c: &mut Criterion) {
    let mut g = c.benchmark_group("sigtrap");
    // Raw first: perfring's SIGTRAP handler stays installed once installed.
    g.bench_function("raw", |b| {
        raw_sigaction(libc::SIGTRAP);
        let fd = raw_open(true);
        ioctl(&fd, sys::ioctl::ENABLE);
        b.iter(hit);
        ioctl(&fd, sys::ioctl::DISABLE);
        drop(fd);
        restore_default(libc::SIGTRAP);
    });
    g.bench_function("perfring", |b| {
        let trap = Sigtrap::install().unwrap();
        let counter = Counter::builder_for(Event::breakpoint(
            perfring::event::Access::Execute,
            addr(),
            8,
        ))
        .period(1)
        .sigtrap(0x5158)
        .open()
        .unwrap();
        let tc = trap.attach(counter, TrapHandler::Count).unwrap();
        tc.counter().enable().unwrap();
        b.iter(hit);
        tc.counter().disable().unwrap();
    });
    g.finish();
}

fn baseline(c: &mut Criterion) {
    c.bench_function("call_without_event", |b| b.iter(hit));
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = baseline, poll, thread_signal, sigtrap
}
criterion_main!(benches);
