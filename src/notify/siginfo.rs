//! Typed reads of the kernel's `siginfo` layout (libc has no `si_perf_*` accessors).
//!
//! # Safety
//! A [`SigInfo`] is built only from a pointer the kernel handed a `SA_SIGINFO` handler
//! (or `sigtimedwait` filled), so all 128 bytes are initialised. The union members
//! read are plain integers and pointers: any bit pattern is a valid value, so reading
//! the "wrong" member yields a meaningless number, never undefined behaviour.
#![allow(unsafe_code)]

use crate::sys;

/// A borrowed kernel `siginfo`, as a `SA_SIGINFO` handler receives it.
#[derive(Clone, Copy)]
pub struct SigInfo<'a> {
    raw: &'a sys::siginfo,
}

impl std::fmt::Debug for SigInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigInfo")
            .field("signo", &self.signo())
            .field("code", &self.code())
            .finish_non_exhaustive()
    }
}

impl<'a> SigInfo<'a> {
    /// Views a `libc::siginfo_t` (same 128-byte kernel layout).
    ///
    /// # Safety
    /// `info` must point to an initialised `siginfo_t` that outlives `'a`.
    pub unsafe fn from_ptr(info: *const libc::siginfo_t) -> SigInfo<'a> {
        const _: () =
            assert!(std::mem::size_of::<libc::siginfo_t>() == std::mem::size_of::<sys::siginfo>());
        // SAFETY: the caller guarantees a live, initialised siginfo; both types are the
        // kernel's 128-byte layout with alignment 8 or less (checked above for size).
        let raw = unsafe { &*info.cast::<sys::siginfo>() };
        SigInfo { raw }
    }

    fn head(&self) -> &'a sys::siginfo__bindgen_ty_1__bindgen_ty_1 {
        // SAFETY: the struct member overlays the whole padding array; its fields are
        // integers and unions of integers/pointers, valid for any bits (module Safety).
        unsafe { &self.raw.__bindgen_anon_1.__bindgen_anon_1 }
    }

    /// `si_signo`.
    pub fn signo(&self) -> i32 {
        self.head().si_signo
    }

    /// `si_code`: `> 0` from the kernel (`POLL_IN`, `POLL_HUP`, `TRAP_PERF`, ...),
    /// `<= 0` from `kill`, `tgkill`, `sigqueue` (`SI_USER`, `SI_TKILL`, `SI_QUEUE`).
    pub fn code(&self) -> i32 {
        self.head().si_code
    }

    /// Whether the kernel (not a process) sent it: `si_code > 0`.
    pub fn from_kernel(&self) -> bool {
        self.code() > 0
    }

    /// `si_fd` of a `SIGPOLL`-style signal (`F_SETSIG`).
    pub fn fd(&self) -> i32 {
        // SAFETY: integer union member (module Safety).
        unsafe { self.head()._sifields._sigpoll._fd }
    }

    /// `si_band` of a `SIGPOLL`-style signal (`POLLIN`/`POLLHUP` bits).
    pub fn band(&self) -> i64 {
        // SAFETY: integer union member (module Safety).
        let band = unsafe { self.head()._sifields._sigpoll._band };
        #[allow(clippy::useless_conversion)] // c_long is i32 on 32-bit targets
        i64::from(band)
    }

    /// `si_addr` of a fault-style signal (for `TRAP_PERF`: the event's address, e.g.
    /// the watched data address of a breakpoint).
    pub fn addr(&self) -> u64 {
        // SAFETY: pointer-typed union member read as an address only (module Safety).
        unsafe { self.head()._sifields._sigfault._addr as u64 }
    }

    /// `si_perf_data` of a `TRAP_PERF` signal: the event's `sig_data`.
    pub fn perf_data(&self) -> u64 {
        // SAFETY: integer union member (module Safety).
        let data = unsafe { self.head()._sifields._sigfault.__bindgen_anon_1._perf._data };
        #[allow(clippy::useless_conversion)] // c_ulong is u32 on 32-bit targets
        u64::from(data)
    }

    /// `si_perf_type` of a `TRAP_PERF` signal: the overflowing kernel event's
    /// `attr.type`, which for an inherited `cpu-clock`/`task-clock` copy is the type of
    /// the PMU the kernel resolved it to (see [`SigtrapInfo::perf_type`]).
    ///
    /// [`SigtrapInfo::perf_type`]: super::SigtrapInfo::perf_type
    pub fn perf_type(&self) -> u32 {
        // SAFETY: integer union member (module Safety).
        unsafe { self.head()._sifields._sigfault.__bindgen_anon_1._perf._type }
    }

    /// `si_perf_flags` of a `TRAP_PERF` signal (`TRAP_PERF_FLAG_ASYNC` if it arrived
    /// while SIGTRAP was blocked, so not synchronously).
    pub fn perf_flags(&self) -> u32 {
        // SAFETY: integer union member (module Safety).
        unsafe {
            self.head()
                ._sifields
                ._sigfault
                .__bindgen_anon_1
                ._perf
                ._flags
        }
    }
}

/// The interrupted instruction pointer from a handler's `ucontext` (0 if unknown).
///
/// # Safety
/// `ctx` must be the third argument a `SA_SIGINFO` handler received (or null).
pub(crate) unsafe fn interrupted_ip(ctx: *mut libc::c_void) -> u64 {
    if ctx.is_null() {
        return 0;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to SA_SIGINFO handlers.
        let uc = unsafe { &*ctx.cast::<libc::ucontext_t>() };
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] as u64
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to SA_SIGINFO handlers.
        let uc = unsafe { &*ctx.cast::<libc::ucontext_t>() };
        uc.uc_mcontext.pc
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        0
    }
}

/// The interrupted stack pointer and frame pointer (`rsp`/`rbp`, `sp`/`x29`) from a
/// handler's `ucontext`, for a frame-pointer walk (`(0, 0)` if unknown).
///
/// # Safety
/// `ctx` must be the third argument a `SA_SIGINFO` handler received (or null).
pub(crate) unsafe fn interrupted_sp_fp(ctx: *mut libc::c_void) -> (u64, u64) {
    if ctx.is_null() {
        return (0, 0);
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to SA_SIGINFO handlers.
        let uc = unsafe { &*ctx.cast::<libc::ucontext_t>() };
        let g = &uc.uc_mcontext.gregs;
        (
            g[libc::REG_RSP as usize] as u64,
            g[libc::REG_RBP as usize] as u64,
        )
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to SA_SIGINFO handlers.
        let uc = unsafe { &*ctx.cast::<libc::ucontext_t>() };
        (uc.uc_mcontext.sp, uc.uc_mcontext.regs[29])
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        (0, 0)
    }
}

/// Saves `errno` on creation and restores it on drop, so handlers leave it untouched.
pub(crate) struct ErrnoGuard(i32);

impl ErrnoGuard {
    pub(crate) fn save() -> ErrnoGuard {
        // SAFETY: __errno_location returns this thread's errno slot, always valid.
        ErrnoGuard(unsafe { *libc::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *libc::__errno_location() = self.0 };
    }
}
