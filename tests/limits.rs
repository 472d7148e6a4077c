//! Errors that need process limits or capabilities changed. This file holds ONE test,
//! so nothing else in its process runs while the limits are lowered.

use perfring::ring::{Ring, RingSize};
use perfring::{Counter, ErrorKind, Scope};

fn set_rlimit(resource: libc::__rlimit_resource_t, soft: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer for getrlimit.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut lim) }, 0);
    let old = lim.rlim_cur;
    lim.rlim_cur = soft;
    // SAFETY: valid rlimit; lowering the soft limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(resource, &lim) }, 0);
    old
}

fn get_rlimit(resource: libc::__rlimit_resource_t) -> (u64, u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: valid out-pointer for getrlimit.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut lim) }, 0);
    (lim.rlim_cur, lim.rlim_max)
}

fn set_both_rlimits(resource: libc::__rlimit_resource_t, limit: u64) {
    let lim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: valid rlimit; lowering both limits is always allowed.
    assert_eq!(unsafe { libc::setrlimit(resource, &lim) }, 0);
}

/// Clears capabilities from the effective set (they stay permitted).
fn drop_effective_caps(caps: &[u32]) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    }; // _LINUX_CAPABILITY_VERSION_3
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes two Data structs for version 3; both pointers are valid.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) };
    assert_eq!(r, 0);
    for &cap in caps {
        data[(cap / 32) as usize].effective &= !(1 << (cap % 32));
    }
    // SAFETY: capset reads the header and two Data structs; dropping effective bits is allowed.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()) };
    assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
}

fn fd_count() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

#[test]
fn limits_produce_errors_that_name_the_limit_and_the_fix() {
    // 1. RLIMIT_NOFILE. Below the hard limit, opening raises the soft limit to it.
    let limit = fd_count() + 4;
    let old = set_rlimit(libc::RLIMIT_NOFILE, limit);
    let hard = get_rlimit(libc::RLIMIT_NOFILE).1;
    assert!(
        hard > limit + 20,
        "the hard limit {hard} leaves no room for this test"
    );
    let held: Vec<_> = (0..8)
        .map(|_| Counter::builder("cpu-clock").unwrap().open().unwrap())
        .collect();
    assert_eq!(
        get_rlimit(libc::RLIMIT_NOFILE),
        (hard, hard),
        "EMFILE raised the soft limit to the hard limit"
    );
    drop(held);
    // At the hard limit, the error names the limit and the fix. Lowering the hard limit
    // is for good unless privileged: this binary holds this one test.
    set_both_rlimits(libc::RLIMIT_NOFILE, limit);
    let mut held = Vec::new();
    let err = loop {
        match Counter::builder("cpu-clock").unwrap().open() {
            Ok(c) => held.push(c),
            Err(e) => break e,
        }
        assert!(held.len() < 100, "the fd limit was never hit");
    };
    assert_eq!(err.kind(), ErrorKind::TooManyFiles, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("RLIMIT_NOFILE (soft {limit},")),
        "{msg}"
    );
    assert!(msg.contains(&format!("hard {limit})")), "{msg}");
    assert!(msg.contains("ulimit -n"), "{msg}");
    assert!(msg.contains("already raised the soft limit"), "{msg}");
    drop(held);
    let _ = old;

    // Without CAP_IPC_LOCK, CAP_PERFMON and CAP_SYS_ADMIN, root is an ordinary user here.
    drop_effective_caps(&[14, 21, 38]);

    // 2. perf_event_paranoid: a CPU-wide event needs level <= 0.
    let level = perfring::counter::diagnose::paranoid_level().unwrap();
    if level > 0 {
        let err = Counter::builder("cpu-clock")
            .unwrap()
            .target(Scope::Cpu(0))
            .open()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("perf_event_paranoid is {level}")),
            "{msg}"
        );
        assert!(
            msg.contains("CPU-wide events need perf_event_paranoid <= 0"),
            "{msg}"
        );
    }

    // 3. The mlock budget: perf_event_mlock_kb (516 KiB by default) + RLIMIT_MEMLOCK.
    let mlock_kb = std::fs::read_to_string("/proc/sys/kernel/perf_event_mlock_kb").unwrap();
    let mlock_kb: usize = mlock_kb.trim().parse().unwrap();
    set_rlimit(libc::RLIMIT_MEMLOCK, 0);
    // The budget is per user and every root process's perf rings draw on it (a `perf
    // record` elsewhere on the machine would eat it): become a user of our own, whose
    // budget is untouched, for the rest of the test.
    let uid = 0x7e57_0000 + std::process::id() % 0x1_0000;
    // SAFETY: plain syscall with integer arguments; this process is alone in its test
    // binary and drops root for good on purpose.
    assert_eq!(unsafe { libc::setresuid(uid, uid, uid) }, 0, "setresuid");
    let counter = Counter::builder("cpu-clock")
        .unwrap()
        .exclude_kernel(true)
        .open()
        .unwrap();
    let err = Ring::map(&counter, RingSize::Bytes(4 * mlock_kb * 1024)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MlockLimit, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("kernel.perf_event_mlock_kb is {mlock_kb} KiB")),
        "{msg}"
    );
    assert!(msg.contains("RLIMIT_MEMLOCK 0 bytes"), "{msg}");
    assert!(msg.contains("Fix: use a smaller ring"), "{msg}");
    // A ring within the budget still maps.
    Ring::map(&counter, RingSize::Pages(8)).unwrap();
}
