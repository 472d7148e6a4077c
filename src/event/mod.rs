//! What to count: [`Event`], parsed from perf's event syntax or built in code.
//!
//! An [`Event`] is a kind (hardware, cache, software, breakpoint, tracepoint, raw, or
//! any sysfs PMU) plus [`Modifiers`] (`:u`, `:k`, `:ppp`, ...). It knows how to fill
//! the "what" fields of a `perf_event_attr` ([`Event::apply`]) and nothing else:
//! periods, sample types and fds belong to the counter.
//!
//! # Architecture Invariant
//! This module is pure: it opens no perf fd and reads sysfs/tracefs only below the
//! root of the [`Sysfs`] it is handed ([`Event::parse`] uses `/`).
//!
//! # Syntax
//! | form | example |
//! | --- | --- |
//! | hardware | `cycles`, `instructions:u`, `branch-misses` |
//! | hardware cache | `L1-dcache-load-misses`, `LLC-loads`, `dTLB-store-misses` |
//! | software | `cpu-clock`, `page-faults:u`, `cs` |
//! | breakpoint | `mem:0x1000`, `mem:0x1000/4:w`, `mem:0x401000:x` |
//! | tracepoint | `sched:sched_switch` |
//! | raw | `r1a8` |
//! | PMU | `cpu/event=0x3c,umask=0x0/`, `cpu/cache-misses/`, `8/config=0x1/` |
//!
//! Modifiers follow a `:` (`u k h I G H` and `p` up to three times). A PMU may also be
//! named by its decimal type number, which perf does not accept but which lets every
//! [`Event`] print as a string that parses back to it.

pub(crate) mod names;
mod parse;
mod sysfs;

use std::ffi::CStr;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::sys;

pub use sysfs::{ConfigWord, Format, Pmu, Sysfs};

/// Something to count: a kind, its modifiers, and the name the user wrote.
///
/// Two events are equal when they count the same thing the same way; the
/// [`name`](Event::name) is a label and takes no part in equality.
///
/// # Examples
/// ```
/// use perfring::event::{Event, Software};
/// let e: Event = "cpu-clock:u".parse()?;
/// assert_eq!(e.name(), "cpu-clock:u");
/// assert!(e.modifiers().exclude_kernel);
/// assert_eq!(e, Event::software(Software::CpuClock).with_modifiers(e.modifiers()));
/// assert!(!e.is_hardware());
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Event {
    kind: Kind,
    modifiers: Modifiers,
    name: String,
}

/// The kind of an [`Event`]: which counter, on which PMU.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A generalized hardware event.
    #[doc(alias = "PERF_TYPE_HARDWARE")]
    Hardware(Hardware),
    /// A generalized hardware cache event.
    #[doc(alias = "PERF_TYPE_HW_CACHE")]
    Cache(Cache),
    /// A kernel software event.
    #[doc(alias = "PERF_TYPE_SOFTWARE")]
    Software(Software),
    /// A hardware breakpoint (watchpoint).
    #[doc(alias = "PERF_TYPE_BREAKPOINT")]
    Breakpoint(Breakpoint),
    /// A tracepoint, by id.
    #[doc(alias = "PERF_TYPE_TRACEPOINT")]
    Tracepoint(Tracepoint),
    /// A raw, CPU-specific event code for the core PMU.
    #[doc(alias = "PERF_TYPE_RAW")]
    Raw(u64),
    /// An event of a dynamic PMU from sysfs (or given by type number).
    Pmu(PmuEvent),
    /// A uprobe on a file offset, through the `uprobe` PMU.
    Uprobe(Uprobe),
}

macro_rules! id_enum {
    ($(#[$m:meta])* $name:ident : $($(#[$vm:meta])* $v:ident = $c:path),+ $(,)?) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name { $($(#[$vm])* $v),+ }
        impl $name {
            /// The kernel's number for it.
            pub fn id(self) -> u64 {
                match self { $($name::$v => u64::from($c)),+ }
            }
        }
    };
}

id_enum! {
    /// A generalized hardware event (`perf list hw`).
    Hardware:
    /// `cycles`, `cpu-cycles`
    #[doc(alias = "PERF_COUNT_HW_CPU_CYCLES")]
    Cycles = sys::PERF_COUNT_HW_CPU_CYCLES,
    /// `instructions`
    #[doc(alias = "PERF_COUNT_HW_INSTRUCTIONS")]
    Instructions = sys::PERF_COUNT_HW_INSTRUCTIONS,
    /// `cache-references`
    #[doc(alias = "PERF_COUNT_HW_CACHE_REFERENCES")]
    CacheReferences = sys::PERF_COUNT_HW_CACHE_REFERENCES,
    /// `cache-misses`
    #[doc(alias = "PERF_COUNT_HW_CACHE_MISSES")]
    CacheMisses = sys::PERF_COUNT_HW_CACHE_MISSES,
    /// `branches`, `branch-instructions`
    #[doc(alias = "PERF_COUNT_HW_BRANCH_INSTRUCTIONS")]
    BranchInstructions = sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    /// `branch-misses`
    #[doc(alias = "PERF_COUNT_HW_BRANCH_MISSES")]
    BranchMisses = sys::PERF_COUNT_HW_BRANCH_MISSES,
    /// `bus-cycles`
    #[doc(alias = "PERF_COUNT_HW_BUS_CYCLES")]
    BusCycles = sys::PERF_COUNT_HW_BUS_CYCLES,
    /// `stalled-cycles-frontend`, `idle-cycles-frontend`
    #[doc(alias = "PERF_COUNT_HW_STALLED_CYCLES_FRONTEND")]
    StalledCyclesFrontend = sys::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    /// `stalled-cycles-backend`, `idle-cycles-backend`
    #[doc(alias = "PERF_COUNT_HW_STALLED_CYCLES_BACKEND")]
    StalledCyclesBackend = sys::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    /// `ref-cycles`
    #[doc(alias = "PERF_COUNT_HW_REF_CPU_CYCLES")]
    RefCycles = sys::PERF_COUNT_HW_REF_CPU_CYCLES,
}

id_enum! {
    /// A kernel software event (`perf list sw`).
    Software:
    /// `cpu-clock`
    #[doc(alias = "PERF_COUNT_SW_CPU_CLOCK")]
    CpuClock = sys::PERF_COUNT_SW_CPU_CLOCK,
    /// `task-clock`
    #[doc(alias = "PERF_COUNT_SW_TASK_CLOCK")]
    TaskClock = sys::PERF_COUNT_SW_TASK_CLOCK,
    /// `page-faults`, `faults`
    #[doc(alias = "PERF_COUNT_SW_PAGE_FAULTS")]
    PageFaults = sys::PERF_COUNT_SW_PAGE_FAULTS,
    /// `context-switches`, `cs`
    #[doc(alias = "PERF_COUNT_SW_CONTEXT_SWITCHES")]
    ContextSwitches = sys::PERF_COUNT_SW_CONTEXT_SWITCHES,
    /// `cpu-migrations`, `migrations`
    #[doc(alias = "PERF_COUNT_SW_CPU_MIGRATIONS")]
    CpuMigrations = sys::PERF_COUNT_SW_CPU_MIGRATIONS,
    /// `minor-faults`
    #[doc(alias = "PERF_COUNT_SW_PAGE_FAULTS_MIN")]
    MinorFaults = sys::PERF_COUNT_SW_PAGE_FAULTS_MIN,
    /// `major-faults`
    #[doc(alias = "PERF_COUNT_SW_PAGE_FAULTS_MAJ")]
    MajorFaults = sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ,
    /// `alignment-faults`
    #[doc(alias = "PERF_COUNT_SW_ALIGNMENT_FAULTS")]
    AlignmentFaults = sys::PERF_COUNT_SW_ALIGNMENT_FAULTS,
    /// `emulation-faults`
    #[doc(alias = "PERF_COUNT_SW_EMULATION_FAULTS")]
    EmulationFaults = sys::PERF_COUNT_SW_EMULATION_FAULTS,
    /// `dummy`: counts nothing; used to receive side-band records.
    #[doc(alias = "PERF_COUNT_SW_DUMMY")]
    Dummy = sys::PERF_COUNT_SW_DUMMY,
    /// `bpf-output`
    #[doc(alias = "PERF_COUNT_SW_BPF_OUTPUT")]
    BpfOutput = sys::PERF_COUNT_SW_BPF_OUTPUT,
    /// `cgroup-switches`
    #[doc(alias = "PERF_COUNT_SW_CGROUP_SWITCHES")]
    CgroupSwitches = sys::PERF_COUNT_SW_CGROUP_SWITCHES,
}

id_enum! {
    /// Which cache a [`Cache`] event watches.
    CacheLevel:
    /// `L1-dcache`
    #[doc(alias = "PERF_COUNT_HW_CACHE_L1D")]
    L1Data = sys::PERF_COUNT_HW_CACHE_L1D,
    /// `L1-icache`
    #[doc(alias = "PERF_COUNT_HW_CACHE_L1I")]
    L1Instruction = sys::PERF_COUNT_HW_CACHE_L1I,
    /// `LLC`
    #[doc(alias = "PERF_COUNT_HW_CACHE_LL")]
    LastLevel = sys::PERF_COUNT_HW_CACHE_LL,
    /// `dTLB`
    #[doc(alias = "PERF_COUNT_HW_CACHE_DTLB")]
    DataTlb = sys::PERF_COUNT_HW_CACHE_DTLB,
    /// `iTLB`
    #[doc(alias = "PERF_COUNT_HW_CACHE_ITLB")]
    InstructionTlb = sys::PERF_COUNT_HW_CACHE_ITLB,
    /// `branch` (the branch prediction unit)
    #[doc(alias = "PERF_COUNT_HW_CACHE_BPU")]
    Branch = sys::PERF_COUNT_HW_CACHE_BPU,
    /// `node` (local memory)
    #[doc(alias = "PERF_COUNT_HW_CACHE_NODE")]
    Node = sys::PERF_COUNT_HW_CACHE_NODE,
}

id_enum! {
    /// The access a [`Cache`] event counts.
    CacheOp:
    /// `load`
    #[doc(alias = "PERF_COUNT_HW_CACHE_OP_READ")]
    Read = sys::PERF_COUNT_HW_CACHE_OP_READ,
    /// `store`
    #[doc(alias = "PERF_COUNT_HW_CACHE_OP_WRITE")]
    Write = sys::PERF_COUNT_HW_CACHE_OP_WRITE,
    /// `prefetch`
    #[doc(alias = "PERF_COUNT_HW_CACHE_OP_PREFETCH")]
    Prefetch = sys::PERF_COUNT_HW_CACHE_OP_PREFETCH,
}

id_enum! {
    /// Whether a [`Cache`] event counts all accesses or only misses.
    CacheResult:
    /// accesses (`-loads`, `-refs`)
    #[doc(alias = "PERF_COUNT_HW_CACHE_RESULT_ACCESS")]
    Access = sys::PERF_COUNT_HW_CACHE_RESULT_ACCESS,
    /// misses (`-load-misses`)
    #[doc(alias = "PERF_COUNT_HW_CACHE_RESULT_MISS")]
    Miss = sys::PERF_COUNT_HW_CACHE_RESULT_MISS,
}

impl CacheLevel {
    /// Whether perf considers `op` meaningful for this cache (e.g. no stores to the
    /// instruction cache).
    pub fn supports(self, op: CacheOp) -> bool {
        match self {
            CacheLevel::L1Instruction => op != CacheOp::Write,
            CacheLevel::InstructionTlb | CacheLevel::Branch => op == CacheOp::Read,
            _ => true,
        }
    }
}

/// A generalized hardware cache event, e.g. `L1-dcache-load-misses`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cache {
    /// Which cache.
    pub level: CacheLevel,
    /// Which access.
    pub op: CacheOp,
    /// All accesses, or misses.
    pub result: CacheResult,
}

impl Cache {
    /// A cache event (see [`CacheLevel::supports`] for the combinations perf accepts).
    pub fn new(level: CacheLevel, op: CacheOp, result: CacheResult) -> Self {
        Cache { level, op, result }
    }

    /// `level | op << 8 | result << 16`, the kernel's `config` for it.
    pub fn config(self) -> u64 {
        self.level.id() | (self.op.id() << 8) | (self.result.id() << 16)
    }
}

impl fmt::Display for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = names::CACHE_LEVELS
            .iter()
            .find(|(_, l)| *l == self.level)
            .map_or("?", |(n, _)| n);
        let (op, ops) = match self.op {
            CacheOp::Read => ("load", "loads"),
            CacheOp::Write => ("store", "stores"),
            CacheOp::Prefetch => ("prefetch", "prefetches"),
        };
        match self.result {
            CacheResult::Access => write!(f, "{level}-{ops}"),
            CacheResult::Miss => write!(f, "{level}-{op}-misses"),
        }
    }
}

/// What a breakpoint fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reads of the address (`r`; not supported on x86, which has only `w` and `rw`).
    #[doc(alias = "HW_BREAKPOINT_R")]
    Read,
    /// Writes (`w`).
    #[doc(alias = "HW_BREAKPOINT_W")]
    Write,
    /// Reads or writes (`rw`), perf's default.
    #[doc(alias = "HW_BREAKPOINT_RW")]
    ReadWrite,
    /// Executing the instruction at the address (`x`).
    #[doc(alias = "HW_BREAKPOINT_X")]
    Execute,
}

impl Access {
    /// The kernel's `bp_type`.
    pub fn bp_type(self) -> u32 {
        match self {
            Access::Read => sys::HW_BREAKPOINT_R,
            Access::Write => sys::HW_BREAKPOINT_W,
            Access::ReadWrite => sys::HW_BREAKPOINT_RW,
            Access::Execute => sys::HW_BREAKPOINT_X,
        }
    }

    /// The letters perf uses for it: `r`, `w`, `rw` or `x`.
    pub fn letters(self) -> &'static str {
        match self {
            Access::Read => "r",
            Access::Write => "w",
            Access::ReadWrite => "rw",
            Access::Execute => "x",
        }
    }

    /// The length used when none is given, as perf does: 4 bytes for data
    /// (`HW_BREAKPOINT_LEN_4`), `sizeof(long)` for code.
    pub fn default_len(self) -> u64 {
        match self {
            Access::Execute => std::mem::size_of::<libc::c_long>() as u64,
            _ => 4,
        }
    }
}

/// A hardware breakpoint: `mem:ADDR/LEN:ACCESS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Breakpoint {
    /// What fires it.
    pub access: Access,
    /// The watched address.
    pub addr: u64,
    /// How many bytes from `addr` are watched (1 to 8; the architecture decides which).
    pub len: u64,
}

/// A tracepoint: its id and, when parsed from a name, `subsystem:name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tracepoint {
    /// The id from tracefs `events/<subsystem>/<name>/id`.
    pub id: u64,
    /// `subsystem:name`, when known.
    pub name: Option<String>,
}

/// An event of a sysfs PMU: its type number and the three config words.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PmuEvent {
    /// The PMU's name in sysfs, when known (`None` when given by number).
    pub pmu: Option<String>,
    /// The PMU's `type` number.
    pub type_: u32,
    /// `config`
    pub config: u64,
    /// `config1`
    pub config1: u64,
    /// `config2`
    pub config2: u64,
}

/// A uprobe: the `uprobe` PMU's event on an instruction of an ELF file, by file offset.
///
/// The kernel takes the file's path as a *pointer* in `config1` (`uprobe_path`) and
/// reads the string during `perf_event_open` only. The path lives in this value behind
/// an [`Arc`], so every [`Event`] (and every [`Builder`](crate::Builder) or
/// [`Counter`](crate::Counter) holding one) keeps the pointer that
/// [`Event::apply`] wrote valid for as long as it exists.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Uprobe {
    /// The `uprobe` PMU's `type` number (sysfs `bus/event_source/devices/uprobe/type`).
    pub type_: u32,
    /// The probed file, NUL-terminated for the kernel.
    pub path: Arc<CStr>,
    /// The probed instruction's offset in the file (not its virtual address).
    #[doc(alias = "probe_offset")]
    pub offset: u64,
    /// Fire on return instead of entry (`config:0`, the `retprobe` format bit).
    pub retprobe: bool,
}

/// Where an event counts, and how precisely: perf's `:ukhIGHp` modifiers.
///
/// Giving any of `u`, `k`, `h` excludes the ones not given (`cycles:u` counts only
/// user space); likewise `G`/`H` for guest/host. Each `p` raises the precise level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Modifiers {
    /// Do not count in user space.
    pub exclude_user: bool,
    /// Do not count in the kernel.
    pub exclude_kernel: bool,
    /// Do not count in the hypervisor.
    pub exclude_hv: bool,
    /// Do not count while the CPU is idle (`I`).
    pub exclude_idle: bool,
    /// Do not count in the host (`G`: guest only).
    pub exclude_host: bool,
    /// Do not count in guests (`H`: host only).
    pub exclude_guest: bool,
    /// Skid constraint, 0 to 3 (`p`, `pp`, `ppp`).
    #[doc(alias = "precise_ip")]
    pub precise: u8,
}

impl fmt::Display for Modifiers {
    /// The modifier letters, without the leading `:` (empty for the default).
    ///
    /// Exclusions perf cannot spell (all of `u`, `k` and `h`, or both `G` and `H`)
    /// are not printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (eu, ek, eh) = (self.exclude_user, self.exclude_kernel, self.exclude_hv);
        if (eu || ek || eh) && !(eu && ek && eh) {
            for (excluded, c) in [(eu, 'u'), (ek, 'k'), (eh, 'h')] {
                if !excluded {
                    write!(f, "{c}")?;
                }
            }
        }
        if self.exclude_idle {
            f.write_str("I")?;
        }
        match (self.exclude_host, self.exclude_guest) {
            (true, false) => f.write_str("G")?,
            (false, true) => f.write_str("H")?,
            _ => {}
        }
        for _ in 0..self.precise.min(3) {
            f.write_str("p")?;
        }
        Ok(())
    }
}

impl Event {
    fn from_kind(kind: Kind) -> Event {
        let mut e = Event {
            kind,
            modifiers: Modifiers::default(),
            name: String::new(),
        };
        e.name = e.to_string();
        e
    }

    /// A generalized hardware event.
    pub fn hardware(which: Hardware) -> Event {
        Event::from_kind(Kind::Hardware(which))
    }

    /// A generalized hardware cache event.
    pub fn cache(level: CacheLevel, op: CacheOp, result: CacheResult) -> Event {
        Event::from_kind(Kind::Cache(Cache::new(level, op, result)))
    }

    /// A software event.
    ///
    /// ```
    /// use perfring::event::{Event, Software};
    /// assert_eq!(Event::software(Software::CpuClock).to_string(), "cpu-clock");
    /// ```
    pub fn software(which: Software) -> Event {
        Event::from_kind(Kind::Software(which))
    }

    /// A hardware breakpoint on `len` bytes at `addr`.
    ///
    /// ```
    /// use perfring::event::{Access, Event};
    /// let e = Event::breakpoint(Access::Write, 0x1000, 4);
    /// assert_eq!(e.to_string(), "mem:0x1000/4:w");
    /// ```
    pub fn breakpoint(access: Access, addr: u64, len: u64) -> Event {
        Event::from_kind(Kind::Breakpoint(Breakpoint { access, addr, len }))
    }

    /// A tracepoint by its tracefs id.
    pub fn tracepoint_id(id: u64) -> Event {
        Event::from_kind(Kind::Tracepoint(Tracepoint { id, name: None }))
    }

    /// A raw core-PMU event (`rNNNN`).
    pub fn raw(config: u64) -> Event {
        Event::from_kind(Kind::Raw(config))
    }

    /// An event of the PMU with type number `type_` (from its sysfs `type` file).
    ///
    /// The tracepoint PMU's (type 2) events are tracepoints by id, as from
    /// [`tracepoint_id`](Event::tracepoint_id).
    pub fn pmu(type_: u32, config: u64) -> Event {
        Event::from_kind(parse::pmu_kind_by_type(None, type_, [config, 0, 0]))
    }

    /// A uprobe on the instruction at file offset `offset` of `path`, through the
    /// `uprobe` PMU of type `type_`. Its name (and `Display`) is `uprobe:PATH+0xOFFSET`,
    /// which [`symbols::resolve_event`](crate::symbols::resolve_event) parses back.
    ///
    /// # Errors
    /// [`ErrorKind::BadEvent`](crate::ErrorKind::BadEvent) if `path` contains a NUL byte.
    pub fn uprobe(type_: u32, path: &std::path::Path, offset: u64) -> Result<Event> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            Error::new(
                crate::ErrorKind::BadEvent,
                format!("uprobe on {}", path.display()),
                "the path contains a NUL byte",
            )
        })?;
        Ok(Event::from_kind(Kind::Uprobe(Uprobe {
            type_,
            path: Arc::from(c.as_c_str()),
            offset,
            retprobe: false,
        })))
    }

    /// Parses perf's event syntax, resolving PMUs and tracepoints in the running
    /// system's sysfs and tracefs.
    ///
    /// # Errors
    /// [`ErrorKind::BadEvent`](crate::ErrorKind::BadEvent), pointing at the part of
    /// the string that is wrong and suggesting the nearest valid names.
    ///
    /// # Examples
    /// ```no_run
    /// let e = perfring::Event::parse("sched:sched_switch")?;
    /// # Ok::<(), perfring::Error>(())
    /// ```
    pub fn parse(s: &str) -> Result<Event> {
        Event::parse_in(s, &Sysfs::default())
    }

    /// Parses perf's event syntax, resolving PMUs and tracepoints under `sysfs`.
    ///
    /// # Errors
    /// As [`parse`](Event::parse).
    pub fn parse_in(s: &str, sysfs: &Sysfs) -> Result<Event> {
        parse::parse(s, sysfs)
    }

    /// Replaces the modifiers (the precise level is capped at 3).
    ///
    /// An event whose name was its canonical string keeps it up to date; a name the
    /// user wrote is kept.
    pub fn with_modifiers(mut self, modifiers: Modifiers) -> Event {
        let canonical = self.name == self.to_string();
        self.modifiers = modifiers;
        self.modifiers.precise = self.modifiers.precise.min(3);
        if canonical {
            self.name = self.to_string();
        }
        self
    }

    /// Replaces the display name.
    pub fn with_name(mut self, name: impl Into<String>) -> Event {
        self.name = name.into();
        self
    }

    /// The name the user wrote (or the canonical string for events built in code).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What is counted.
    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// Where and how precisely it is counted.
    pub fn modifiers(&self) -> Modifiers {
        self.modifiers
    }

    /// Whether this counts CPU time (`cpu-clock`, `task-clock`): its count is
    /// nanoseconds, and under a frequency the kernel gives it the fixed period
    /// `1e9 / HZ` (a clock's rate is known, so the kernel does not adapt it).
    pub fn counts_cpu_time(&self) -> bool {
        matches!(
            self.kind,
            Kind::Software(Software::CpuClock | Software::TaskClock)
        )
    }

    /// Whether this needs the CPU's hardware PMU (hardware, cache, raw, or a PMU of
    /// the core CPU), so that `ENOENT`/`EOPNOTSUPP` means "no hardware PMU".
    pub fn is_hardware(&self) -> bool {
        match &self.kind {
            Kind::Hardware(_) | Kind::Cache(_) | Kind::Raw(_) => true,
            Kind::Pmu(p) => {
                p.type_ == sys::PERF_TYPE_HARDWARE
                    || p.type_ == sys::PERF_TYPE_HW_CACHE
                    || p.type_ == sys::PERF_TYPE_RAW
                    || matches!(p.pmu.as_deref(), Some("cpu" | "cpu_core" | "cpu_atom"))
            }
            Kind::Software(_) | Kind::Breakpoint(_) | Kind::Tracepoint(_) | Kind::Uprobe(_) => {
                false
            }
        }
    }

    /// Whether the kernel opens this event only for `CAP_PERFMON` (or
    /// `CAP_SYS_ADMIN`) whatever `perf_event_paranoid` says: its uprobe PMU checks
    /// the capability before anything else.
    pub fn needs_perfmon(&self) -> bool {
        matches!(self.kind, Kind::Uprobe(_))
    }

    /// Fills in what to count: `type_`, `config`, `config1`/`config2` (or
    /// `bp_type`/`bp_addr`/`bp_len`), the `exclude_*` bits and `precise_ip`.
    ///
    /// Nothing else is touched: periods, sample types and flags are the counter's.
    ///
    /// # Examples
    /// ```
    /// use perfring::event::{Event, Software};
    /// use zerocopy::FromZeros;
    /// let mut attr = perfring::sys::perf_event_attr::new_zeroed();
    /// "cpu-clock:u".parse::<Event>()?.apply(&mut attr);
    /// assert_eq!(attr.type_, perfring::sys::PERF_TYPE_SOFTWARE);
    /// assert_eq!(attr.exclude_kernel(), 1);
    /// # Ok::<(), perfring::Error>(())
    /// ```
    pub fn apply(&self, attr: &mut sys::perf_event_attr) {
        let (type_, config, config1, config2, bp_type) = match &self.kind {
            Kind::Hardware(h) => (sys::PERF_TYPE_HARDWARE, h.id(), 0, 0, 0),
            Kind::Cache(c) => (sys::PERF_TYPE_HW_CACHE, c.config(), 0, 0, 0),
            Kind::Software(s) => (sys::PERF_TYPE_SOFTWARE, s.id(), 0, 0, 0),
            Kind::Breakpoint(b) => (
                sys::PERF_TYPE_BREAKPOINT,
                0,
                b.addr,
                b.len,
                b.access.bp_type(),
            ),
            Kind::Tracepoint(t) => (sys::PERF_TYPE_TRACEPOINT, t.id, 0, 0, 0),
            Kind::Raw(c) => (sys::PERF_TYPE_RAW, *c, 0, 0, 0),
            Kind::Pmu(p) => (p.type_, p.config, p.config1, p.config2, 0),
            // `uprobe_path` is a pointer into the `Arc` this event (and its clones)
            // keeps alive; see [`Uprobe`].
            Kind::Uprobe(u) => (
                u.type_,
                u64::from(u.retprobe),
                u.path.as_ptr() as usize as u64,
                u.offset,
                0,
            ),
        };
        attr.type_ = type_;
        attr.config = config;
        // `bp_addr`/`config1` and `bp_len`/`config2` share storage.
        attr.__bindgen_anon_3.config1 = config1;
        attr.__bindgen_anon_4.config2 = config2;
        attr.bp_type = bp_type;
        let m = &self.modifiers;
        attr.set_exclude_user(m.exclude_user.into());
        attr.set_exclude_kernel(m.exclude_kernel.into());
        attr.set_exclude_hv(m.exclude_hv.into());
        attr.set_exclude_idle(m.exclude_idle.into());
        attr.set_exclude_host(m.exclude_host.into());
        attr.set_exclude_guest(m.exclude_guest.into());
        attr.set_precise_ip(m.precise.min(3).into());
    }
}

impl PartialEq for Event {
    fn eq(&self, other: &Event) -> bool {
        self.kind == other.kind && self.modifiers == other.modifiers
    }
}

impl Eq for Event {}

impl fmt::Display for Event {
    /// A canonical perf-syntax string that [`Event::parse_in`] turns back into an
    /// equal event (given the same sysfs for PMU and tracepoint names). Uprobes print
    /// as `uprobe:PATH+0xOFFSET`, which only
    /// [`symbols::resolve_event`](crate::symbols::resolve_event) parses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mods = self.modifiers.to_string();
        match &self.kind {
            Kind::Hardware(h) => f.write_str(first_name(names::HARDWARE, *h))?,
            Kind::Software(s) => f.write_str(first_name(names::SOFTWARE, *s))?,
            Kind::Cache(c) => write!(f, "{c}")?,
            Kind::Raw(c) => write!(f, "r{c:x}")?,
            Kind::Breakpoint(b) => write!(f, "mem:{:#x}/{}:{}", b.addr, b.len, b.access.letters())?,
            Kind::Tracepoint(Tracepoint { name: Some(n), .. }) => f.write_str(n)?,
            Kind::Tracepoint(Tracepoint { id, name: None }) => {
                write!(f, "{}/config={id:#x}/", sys::PERF_TYPE_TRACEPOINT)?
            }
            Kind::Pmu(p) => {
                match &p.pmu {
                    Some(n) => f.write_str(n)?,
                    None => write!(f, "{}", p.type_)?,
                }
                write!(f, "/config={:#x}", p.config)?;
                if p.config1 != 0 {
                    write!(f, ",config1={:#x}", p.config1)?;
                }
                if p.config2 != 0 {
                    write!(f, ",config2={:#x}", p.config2)?;
                }
                f.write_str("/")?;
            }
            Kind::Uprobe(u) => {
                let ret = if u.retprobe { "uretprobe" } else { "uprobe" };
                write!(f, "{ret}:{}+{:#x}", u.path.to_string_lossy(), u.offset)?
            }
        }
        if !mods.is_empty() {
            write!(f, ":{mods}")?;
        }
        Ok(())
    }
}

fn first_name<T: PartialEq + Copy>(table: &[(&'static str, T)], v: T) -> &'static str {
    table.iter().find(|(_, t)| *t == v).map_or("?", |(n, _)| n)
}

impl FromStr for Event {
    type Err = Error;

    /// As [`Event::parse`] (the running system's sysfs).
    fn from_str(s: &str) -> Result<Event> {
        Event::parse(s)
    }
}

#[cfg(test)]
mod tests;
