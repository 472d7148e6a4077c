//! Holding each new task of the target until its counters are open
//! ([`SamplerBuilder::exact_periods`](super::SamplerBuilder::exact_periods)).
//!
//! A counter opened on a thread by id, after the thread has started, misses what the
//! thread did before; an inherited counter misses nothing but writes, with every copy,
//! into one ring that threads on two CPUs then write at once (the kernel's ring code
//! assumes one writer per CPU: measured, the ring stops publishing for good). So each
//! task gets counters of its own, opened *before its first instruction*: a thread of
//! this process, the tracer, `PTRACE_SEIZE`s every thread of the target with
//! `PTRACE_O_TRACECLONE`/`FORK`/`VFORK`. The kernel then stops every new task before it
//! runs; the tracer opens its counters (one per event, each with a ring, enabled),
//! hands them to the sampler, and lets the task go. Every other stop is passed through
//! as if untraced: a signal is delivered (`PTRACE_CONT` with it), a group stop waits
//! for `SIGCONT` (`PTRACE_LISTEN`).
//!
//! The tracer polls `waitid(__WNOTHREAD)` (its own tracees only, never another
//! thread's children), backing off from 20 µs after activity to 2 ms when idle, so a
//! stop waits at most that long; requests from the sampler wake it at once. When the
//! holder is dropped the tracer stops and detaches every tracee before it returns (a
//! signal it was stopped for is delivered, a group stop stays stopped); one it could
//! not within a second is detached by the thread's exit (the kernel's `exit_ptrace`).

use std::collections::HashSet;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::counter::{Builder, Counter, Scope};
use crate::notify::{Poller, Waker};
use crate::ring::{Ring, RingSize};
use crate::sys::ptrace;
use crate::{Error, ErrorKind, Result};

const OPTIONS: libc::c_int =
    libc::PTRACE_O_TRACECLONE | libc::PTRACE_O_TRACEFORK | libc::PTRACE_O_TRACEVFORK;

/// Shortest and longest sleep between two `waitpid` polls of the tracer.
const FAST: Duration = Duration::from_micros(20);
const SLOW: Duration = Duration::from_millis(2);

/// What the tracer opens on each new task: every event, grouped as the sampler's.
#[derive(Debug, Clone)]
pub(super) struct Opener {
    pub(super) builders: Vec<Builder>,
    pub(super) leader_of: Vec<Option<usize>>,
    pub(super) size: RingSize,
}

/// The counters opened on one task, enabled: `(event, counter, ring)`.
pub(super) type Opened = Vec<(usize, Counter, Ring)>;

impl Opener {
    /// Every event's counter and ring on task `tid`, enabled once all are open.
    fn open(&self, tid: libc::pid_t) -> Result<Opened> {
        let mut out: Opened = Vec::with_capacity(self.builders.len());
        for (i, b) in self.builders.iter().enumerate() {
            let mut b = b.clone().target(Scope::Thread(tid)).enable_on_exec(false);
            if let Some(leader) = self.leader_of.get(i).copied().flatten() {
                if let Some((_, c, _)) = out.iter().find(|(e, _, _)| *e == leader) {
                    b = b.group(c);
                }
            }
            let counter = b.open()?;
            let ring = Ring::map_within_budget(&counter, self.size)?;
            out.push((i, counter, ring));
        }
        for (_, c, _) in &out {
            c.enable()?;
        }
        Ok(out)
    }
}

/// What the tracer tells the sampler.
#[derive(Debug)]
pub(super) enum Report {
    /// A task it held until its counters were open (or failed to open).
    Birth { tid: u32, opened: Result<Opened> },
    /// A process of this process's own has exited: its parent may reap it now.
    Exited(libc::pid_t),
}

/// What [`Holder::seize`] found.
#[derive(Debug)]
pub(super) enum Seized {
    /// Traced from now on: its new tasks will be held.
    Held,
    /// Already traced by this holder (a task held at its birth).
    Ours,
    /// The thread has exited.
    Gone,
}

enum Request {
    /// Trace a task; `true` for a child of this process, whose exit is its parent's
    /// to reap.
    Seize(libc::pid_t, bool, mpsc::Sender<Result<Seized>>),
}

/// The sampler's side of the tracer thread.
pub(super) struct Holder {
    requests: Option<mpsc::Sender<Request>>,
    reports: mpsc::Receiver<Report>,
    doorbell: Waker,
    thread: Option<JoinHandle<()>>,
    /// The process that started the tracer: only there does the thread exist.
    pid: u32,
}

impl std::fmt::Debug for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Holder").field("pid", &self.pid).finish()
    }
}

impl Holder {
    /// Starts the tracer thread; `wake` is rung after each report.
    pub(super) fn start(opener: Opener, wake: Waker) -> Result<Holder> {
        let (req_tx, req_rx) = mpsc::channel();
        let (report_tx, report_rx) = mpsc::channel();
        let mut poller = Poller::new()?;
        let doorbell = poller.waker()?;
        let thread = std::thread::Builder::new()
            .name("perfring-hold".into())
            .spawn(move || {
                Tracer {
                    opener,
                    requests: req_rx,
                    reports: report_tx,
                    wake,
                    poller,
                    traced: HashSet::new(),
                    started: HashSet::new(),
                    children: HashSet::new(),
                    me: std::process::id(),
                }
                .run()
            })
            .map_err(|e| Error::from_errno("start the perfring-hold thread", e))?;
        Ok(Holder {
            requests: Some(req_tx),
            reports: report_rx,
            doorbell,
            thread: Some(thread),
            pid: std::process::id(),
        })
    }

    /// Traces thread `tid` (`PTRACE_SEIZE`): from now on the tasks it creates are held
    /// until their counters are open. `child`: a process this process started, whose
    /// exit status its parent thread reaps.
    ///
    /// # Errors
    /// [`ErrorKind::PermissionDenied`] when the kernel refuses (another tracer, Yama's
    /// `ptrace_scope`, no permission), naming the fixes.
    pub(super) fn seize(&self, tid: libc::pid_t, child: bool) -> Result<Seized> {
        let gone = || {
            Error::new(
                ErrorKind::Io,
                format!("hold the new threads of {tid}"),
                "the perfring-hold thread has stopped",
            )
        };
        let (tx, rx) = mpsc::channel();
        self.requests
            .as_ref()
            .ok_or_else(gone)?
            .send(Request::Seize(tid, child, tx))
            .map_err(|_| gone())?;
        let _ = self.doorbell.wake();
        rx.recv().map_err(|_| gone())?
    }

    /// The tracer's next report, if any.
    pub(super) fn next_report(&self) -> Option<Report> {
        self.reports.try_recv().ok()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            // A forked child: the tracer thread is the parent's; leave it alone.
            std::mem::forget(self.thread.take());
            return;
        }
        // A closed channel tells the tracer to return; its exit detaches the tracees.
        self.requests = None;
        let _ = self.doorbell.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The tracer thread's state.
struct Tracer {
    opener: Opener,
    requests: mpsc::Receiver<Request>,
    reports: mpsc::Sender<Report>,
    wake: Waker,
    /// Sleeps here between polls; the holder rings its waker.
    poller: Poller,
    /// Every task traced: seized, or attached by the kernel at its birth.
    traced: HashSet<libc::pid_t>,
    /// Traced tasks that have run: seized ones, and born ones once let go.
    started: HashSet<libc::pid_t>,
    /// Children of this process (a command): their parent reaps them.
    children: HashSet<libc::pid_t>,
    me: u32,
}

impl Tracer {
    fn run(mut self) {
        let mut sleep = FAST;
        let mut scratch = Vec::new();
        loop {
            loop {
                match self.requests.try_recv() {
                    Ok(Request::Seize(tid, child, reply)) => {
                        if child {
                            self.children.insert(tid);
                        }
                        let r = self.seize(tid);
                        let _ = reply.send(r);
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return self.detach_all(),
                }
            }
            sleep = if self.reap() {
                FAST
            } else {
                (sleep * 2).min(SLOW)
            };
            if self.traced.is_empty() {
                // Nothing to reap: sleep until the holder rings.
                let _ = self.poller.poll(&mut scratch, None);
            } else if sleep < Duration::from_millis(1) {
                // epoll waits whole milliseconds: a short nap is a plain sleep (a
                // request waits for it, and the doorbell stays rung for later).
                std::thread::sleep(sleep);
            } else {
                let _ = self.poller.poll(&mut scratch, Some(sleep));
            }
        }
    }

    /// Handles every pending stop and exit; whether there was any.
    ///
    /// A process of this process's own (a command, or `-p` of a child) is reaped by
    /// its parent thread, with its status: its exit is reported (once) and left
    /// pending. (A tracer in the parent's own process would otherwise reap it, and the
    /// parent's `waitpid` would report this tracer's stops as the child's: the parent
    /// must not wait for it before that report.) `waitid` reports the first pending
    /// tracee, so once such an exit is pending the others are polled one by one.
    fn reap(&mut self) -> bool {
        let mut any = false;
        loop {
            let (tid, exited) = match ptrace::peek_any_nohang() {
                Ok(Some(p)) => p,
                Ok(None) => return any,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // ECHILD: nothing traced (any more).
                Err(_) => {
                    self.traced.clear();
                    self.started.clear();
                    return any;
                }
            };
            if exited && self.children.contains(&tid) {
                if self.traced.remove(&tid) {
                    self.started.remove(&tid);
                    let _ = self.reports.send(Report::Exited(tid));
                    let _ = self.wake.wake();
                    any = true;
                }
                return self.reap_each() || any;
            }
            if let Ok(Some(status)) = ptrace::wait_nohang(tid) {
                any = true;
                self.on_status(tid, status);
            }
        }
    }

    /// [`reap`](Self::reap) tracee by tracee.
    fn reap_each(&mut self) -> bool {
        let mut any = false;
        let tids: Vec<libc::pid_t> = self.traced.iter().copied().collect();
        for tid in tids {
            while let Ok(Some(status)) = ptrace::wait_nohang(tid) {
                any = true;
                self.on_status(tid, status);
            }
        }
        any
    }

    fn on_status(&mut self, tid: libc::pid_t, status: libc::c_int) {
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            self.traced.remove(&tid);
            self.started.remove(&tid);
            return;
        }
        if !libc::WIFSTOPPED(status) {
            return;
        }
        let signal = libc::WSTOPSIG(status);
        match status >> 16 {
            libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => {
                // The new task exists and waits for its first stop to be passed on.
                if let Ok(child) = ptrace::event_msg(tid) {
                    self.born(child as libc::pid_t);
                }
                let _ = ptrace::cont(tid, 0);
            }
            ptrace::PTRACE_EVENT_STOP if !self.started.contains(&tid) => {
                // A new task's first stop, before its first instruction.
                self.born(tid);
                self.started.insert(tid);
                let _ = ptrace::cont(tid, 0);
            }
            ptrace::PTRACE_EVENT_STOP
                if matches!(
                    signal,
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                ) =>
            {
                // A group stop: stay stopped until SIGCONT, as without a tracer.
                let _ = ptrace::listen(tid);
            }
            // Woken from a group stop (or an event we did not ask for): run on.
            ptrace::PTRACE_EVENT_STOP => {
                let _ = ptrace::cont(tid, 0);
            }
            // A signal on its way: deliver it.
            0 => {
                let _ = ptrace::cont(tid, signal);
            }
            _ => {
                let _ = ptrace::cont(tid, 0);
            }
        }
    }

    /// Lets every tracee go before the thread returns, so that the target is untraced
    /// when the holder's drop returns (the kernel's detach at the tracer's exit comes
    /// after `join` may return): each is stopped (`PTRACE_INTERRUPT`) and detached at
    /// its stop, a signal it was stopped for delivered, a group stop kept. Tasks born
    /// meanwhile are detached too, without counters. Bounded: whatever is left after a
    /// second is detached by the thread's exit.
    fn detach_all(&mut self) {
        for &tid in &self.traced {
            let _ = ptrace::interrupt(tid);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        let mut stopping = Vec::new();
        while !self.traced.is_empty() && std::time::Instant::now() < deadline {
            let tids: Vec<libc::pid_t> = self.traced.iter().copied().collect();
            let mut any = false;
            for tid in tids {
                let Ok(Some(status)) = ptrace::wait_nohang(tid) else {
                    continue;
                };
                any = true;
                if !libc::WIFSTOPPED(status) {
                    // Exited (a child's exit was already left to its parent).
                    self.traced.remove(&tid);
                    continue;
                }
                let signal = match status >> 16 {
                    0 => libc::WSTOPSIG(status),
                    libc::PTRACE_EVENT_CLONE
                    | libc::PTRACE_EVENT_FORK
                    | libc::PTRACE_EVENT_VFORK => {
                        if let Ok(child) = ptrace::event_msg(tid) {
                            self.traced.insert(child as libc::pid_t);
                        }
                        0
                    }
                    _ => 0,
                };
                // A group stop is kept: the kernel puts a detached task of a stopped
                // process back in its stop.
                let stops = matches!(
                    libc::WSTOPSIG(status),
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU
                );
                if ptrace::detach(tid, signal).is_ok() || !crate::proc::is_alive(tid) {
                    self.traced.remove(&tid);
                    if stops {
                        stopping.push(tid);
                    }
                }
            }
            if !any {
                std::thread::sleep(FAST);
            }
        }
        // A detached task goes (back) into its stop when it next runs: wait for it, so
        // that a process stopped while sampled is seen stopped once the drop returns.
        for tid in stopping {
            while std::time::Instant::now() < deadline
                && !matches!(crate::proc::state(tid), Some('T') | None)
            {
                std::thread::sleep(FAST);
            }
        }
    }

    /// Opens the counters of a task the kernel holds, once, and hands them over.
    fn born(&mut self, tid: libc::pid_t) {
        if !self.traced.insert(tid) {
            return;
        }
        let opened = self.opener.open(tid);
        let _ = self.reports.send(Report::Birth {
            tid: tid as u32,
            opened,
        });
        let _ = self.wake.wake();
    }

    fn seize(&mut self, tid: libc::pid_t) -> Result<Seized> {
        if self.traced.contains(&tid) {
            return Ok(Seized::Ours);
        }
        match ptrace::seize(tid, OPTIONS) {
            Ok(()) => {
                self.traced.insert(tid);
                self.started.insert(tid);
                Ok(Seized::Held)
            }
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(Seized::Gone),
            Err(e) => {
                // A task attached at its birth whose first stop is not reported yet is
                // ours already (the kernel refuses a second attach with EPERM).
                self.reap();
                if self.traced.contains(&tid) || tracer_of(tid) == Some(self.me) {
                    return Ok(Seized::Ours);
                }
                Err(refused(tid, e))
            }
        }
    }
}

/// The `TracerPid` of task `tid` (0: none), from `/proc`.
fn tracer_of(tid: libc::pid_t) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse().ok())
}

fn refused(tid: libc::pid_t, e: std::io::Error) -> Error {
    let tracer = tracer_of(tid).filter(|&t| t != 0);
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    let cause = match (tracer, yama) {
        (Some(t), _) => format!("process {t} already traces it (a debugger, strace, another perfring)"),
        (None, Some(scope)) if scope > 0 => format!(
            "Yama's ptrace_scope is {scope}, which lets only ancestors (1), CAP_SYS_PTRACE (2) or nobody (3) trace"
        ),
        _ => "the kernel refused ptrace (permission)".to_string(),
    };
    Error::new(
        ErrorKind::PermissionDenied,
        format!("hold the new threads of task {tid} (PTRACE_SEIZE)"),
        format!(
            "exact periods hold each new thread until its counters are open, with ptrace; {cause} ({e})"
        ),
    )
    .with_source(e)
    .with_fix(
            "detach the other tracer, or run as a user allowed to trace it (CAP_SYS_PTRACE, \
             or /proc/sys/kernel/yama/ptrace_scope at 0), or use per-CPU rings \
             (SamplerBuilder::exact_periods(false): a thread's period restarts on each CPU)",
        )
}
