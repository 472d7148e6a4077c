//! The `perf_event_attr` a [`Builder`] holds, field by field, with the kernel's field
//! names, plus the other `perf_event_open` arguments: what `perfring explain` prints.
//!
//! # Examples
//! ```
//! let b = perfring::Counter::builder("cpu-clock")?.period(100_000);
//! let fields = perfring::counter::explain::fields(&b);
//! let period = fields.iter().find(|f| f.name == "sample_period").unwrap();
//! assert_eq!(period.value, perfring::counter::explain::FieldValue::Dec(100_000));
//! # Ok::<(), perfring::Error>(())
//! ```

use crate::{sys, Builder, ReadFormat, SampleType, Scope};

/// A field's value, with how it is best shown.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// A count or size, in decimal.
    Dec(u64),
    /// A signed value (pid, cpu, fd, clockid).
    Signed(i64),
    /// An address or register mask, in hex.
    Hex(u64),
    /// A value with a symbolic name (`1 (PERF_TYPE_SOFTWARE)`).
    Named(u64, String),
    /// A bit mask with the names of its set flags.
    Flags(u64, Vec<String>),
}

/// One field: the kernel's name and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The kernel's name of the field (`sample_type`, `exclude_kernel`, `pid`, ...).
    pub name: &'static str,
    /// Its value.
    pub value: FieldValue,
}

fn field(name: &'static str, value: FieldValue) -> Field {
    Field { name, value }
}

fn type_name(type_: u32) -> String {
    let fixed = match type_ {
        sys::PERF_TYPE_HARDWARE => "PERF_TYPE_HARDWARE",
        sys::PERF_TYPE_SOFTWARE => "PERF_TYPE_SOFTWARE",
        sys::PERF_TYPE_TRACEPOINT => "PERF_TYPE_TRACEPOINT",
        sys::PERF_TYPE_HW_CACHE => "PERF_TYPE_HW_CACHE",
        sys::PERF_TYPE_RAW => "PERF_TYPE_RAW",
        sys::PERF_TYPE_BREAKPOINT => "PERF_TYPE_BREAKPOINT",
        _ => "",
    };
    if !fixed.is_empty() {
        return fixed.into();
    }
    crate::event::Sysfs::default()
        .pmus()
        .into_iter()
        .find(|p| p.type_ == type_)
        .map_or_else(|| "dynamic PMU".into(), |p| format!("{} PMU", p.name))
}

fn config_name(type_: u32, config: u64) -> Option<&'static str> {
    let table: &[(u32, &str)] = match type_ {
        sys::PERF_TYPE_SOFTWARE => &[
            (sys::PERF_COUNT_SW_CPU_CLOCK, "PERF_COUNT_SW_CPU_CLOCK"),
            (sys::PERF_COUNT_SW_TASK_CLOCK, "PERF_COUNT_SW_TASK_CLOCK"),
            (sys::PERF_COUNT_SW_PAGE_FAULTS, "PERF_COUNT_SW_PAGE_FAULTS"),
            (
                sys::PERF_COUNT_SW_CONTEXT_SWITCHES,
                "PERF_COUNT_SW_CONTEXT_SWITCHES",
            ),
            (
                sys::PERF_COUNT_SW_CPU_MIGRATIONS,
                "PERF_COUNT_SW_CPU_MIGRATIONS",
            ),
            (
                sys::PERF_COUNT_SW_PAGE_FAULTS_MIN,
                "PERF_COUNT_SW_PAGE_FAULTS_MIN",
            ),
            (
                sys::PERF_COUNT_SW_PAGE_FAULTS_MAJ,
                "PERF_COUNT_SW_PAGE_FAULTS_MAJ",
            ),
            (
                sys::PERF_COUNT_SW_ALIGNMENT_FAULTS,
                "PERF_COUNT_SW_ALIGNMENT_FAULTS",
            ),
            (
                sys::PERF_COUNT_SW_EMULATION_FAULTS,
                "PERF_COUNT_SW_EMULATION_FAULTS",
            ),
            (sys::PERF_COUNT_SW_DUMMY, "PERF_COUNT_SW_DUMMY"),
            (sys::PERF_COUNT_SW_BPF_OUTPUT, "PERF_COUNT_SW_BPF_OUTPUT"),
            (
                sys::PERF_COUNT_SW_CGROUP_SWITCHES,
                "PERF_COUNT_SW_CGROUP_SWITCHES",
            ),
        ],
        sys::PERF_TYPE_HARDWARE => &[
            (sys::PERF_COUNT_HW_CPU_CYCLES, "PERF_COUNT_HW_CPU_CYCLES"),
            (
                sys::PERF_COUNT_HW_INSTRUCTIONS,
                "PERF_COUNT_HW_INSTRUCTIONS",
            ),
            (
                sys::PERF_COUNT_HW_CACHE_REFERENCES,
                "PERF_COUNT_HW_CACHE_REFERENCES",
            ),
            (
                sys::PERF_COUNT_HW_CACHE_MISSES,
                "PERF_COUNT_HW_CACHE_MISSES",
            ),
            (
                sys::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
                "PERF_COUNT_HW_BRANCH_INSTRUCTIONS",
            ),
            (
                sys::PERF_COUNT_HW_BRANCH_MISSES,
                "PERF_COUNT_HW_BRANCH_MISSES",
            ),
            (sys::PERF_COUNT_HW_BUS_CYCLES, "PERF_COUNT_HW_BUS_CYCLES"),
            (
                sys::PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
                "PERF_COUNT_HW_STALLED_CYCLES_FRONTEND",
            ),
            (
                sys::PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
                "PERF_COUNT_HW_STALLED_CYCLES_BACKEND",
            ),
            (
                sys::PERF_COUNT_HW_REF_CPU_CYCLES,
                "PERF_COUNT_HW_REF_CPU_CYCLES",
            ),
        ],
        _ => return None,
    };
    table
        .iter()
        .find(|(v, _)| u64::from(*v) == config)
        .map(|(_, name)| *name)
}

fn bp_type_name(bp_type: u32) -> String {
    let names = [
        (sys::HW_BREAKPOINT_R, "HW_BREAKPOINT_R"),
        (sys::HW_BREAKPOINT_W, "HW_BREAKPOINT_W"),
        (sys::HW_BREAKPOINT_X, "HW_BREAKPOINT_X"),
    ];
    if bp_type == 0 {
        return "HW_BREAKPOINT_EMPTY".into();
    }
    let set: Vec<&str> = names
        .iter()
        .filter(|(bit, _)| bp_type & bit != 0)
        .map(|(_, n)| *n)
        .collect();
    set.join("|")
}

fn prefixed(prefix: &str, names: Vec<&'static str>) -> Vec<String> {
    names.into_iter().map(|n| format!("{prefix}{n}")).collect()
}

/// The attr's one-bit (and `precise_ip`'s two-bit) flags, in `perf_event_attr` order.
macro_rules! bitfields {
    ($attr:expr, $($flag:ident),* $(,)?) => {
        [$((stringify!($flag), $attr.$flag())),*]
    };
}

/// Every field of the attr `builder` would pass to `perf_event_open`, then `pid`,
/// `cpu`, `group_fd` and `flags`. Bitfield flags appear only when set; the union
/// members appear under the name that applies (`sample_freq` when `freq` is set,
/// `bp_addr`/`bp_len` for breakpoints, `config1`/`config2` otherwise).
pub fn fields(builder: &Builder) -> Vec<Field> {
    let a = builder.attr();
    // The unions are plain u64/u32 storage; zerocopy reads them without unsafe.
    let period_or_freq: u64 = zerocopy::transmute!(a.__bindgen_anon_1);
    let wakeup: u32 = zerocopy::transmute!(a.__bindgen_anon_2);
    let config1: u64 = zerocopy::transmute!(a.__bindgen_anon_3);
    let config2: u64 = zerocopy::transmute!(a.__bindgen_anon_4);
    let is_bp = a.type_ == sys::PERF_TYPE_BREAKPOINT;

    let mut f = vec![
        field(
            "type",
            FieldValue::Named(a.type_.into(), type_name(a.type_)),
        ),
        field("size", FieldValue::Dec(a.size.into())),
        field(
            "config",
            match config_name(a.type_, a.config) {
                Some(name) => FieldValue::Named(a.config, name.into()),
                None => FieldValue::Hex(a.config),
            },
        ),
        field(
            if a.freq() != 0 {
                "sample_freq"
            } else {
                "sample_period"
            },
            FieldValue::Dec(period_or_freq),
        ),
        field(
            "sample_type",
            FieldValue::Flags(
                a.sample_type,
                prefixed("PERF_SAMPLE_", SampleType::from_bits(a.sample_type).names()),
            ),
        ),
        field(
            "read_format",
            FieldValue::Flags(
                a.read_format,
                prefixed("PERF_FORMAT_", ReadFormat::from_bits(a.read_format).names()),
            ),
        ),
    ];
    let flags = bitfields!(
        a,
        disabled,
        inherit,
        pinned,
        exclusive,
        exclude_user,
        exclude_kernel,
        exclude_hv,
        exclude_idle,
        mmap,
        comm,
        freq,
        inherit_stat,
        enable_on_exec,
        task,
        watermark,
        precise_ip,
        mmap_data,
        sample_id_all,
        exclude_host,
        exclude_guest,
        exclude_callchain_kernel,
        exclude_callchain_user,
        mmap2,
        comm_exec,
        use_clockid,
        context_switch,
        write_backward,
        namespaces,
        ksymbol,
        bpf_event,
        aux_output,
        cgroup,
        text_poke,
        build_id,
        inherit_thread,
        remove_on_exec,
        sigtrap,
    );
    f.extend(
        flags
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(name, v)| field(name, FieldValue::Dec(v))),
    );
    f.push(field(
        if a.watermark() != 0 {
            "wakeup_watermark"
        } else {
            "wakeup_events"
        },
        FieldValue::Dec(wakeup.into()),
    ));
    f.push(field(
        "bp_type",
        FieldValue::Named(a.bp_type.into(), bp_type_name(a.bp_type)),
    ));
    if is_bp {
        f.push(field("bp_addr", FieldValue::Hex(config1)));
        f.push(field("bp_len", FieldValue::Dec(config2)));
    } else {
        f.push(field("config1", FieldValue::Hex(config1)));
        f.push(field("config2", FieldValue::Hex(config2)));
    }
    f.extend([
        field("branch_sample_type", FieldValue::Hex(a.branch_sample_type)),
        field("sample_regs_user", FieldValue::Hex(a.sample_regs_user)),
        field(
            "sample_stack_user",
            FieldValue::Dec(a.sample_stack_user.into()),
        ),
        field("clockid", FieldValue::Signed(a.clockid.into())),
        field("sample_regs_intr", FieldValue::Hex(a.sample_regs_intr)),
        field("aux_watermark", FieldValue::Dec(a.aux_watermark.into())),
        field(
            "sample_max_stack",
            FieldValue::Dec(a.sample_max_stack.into()),
        ),
        field("aux_sample_size", FieldValue::Dec(a.aux_sample_size.into())),
        field("sig_data", FieldValue::Hex(a.sig_data)),
    ]);
    let (pid, cpu) = match builder.target_of() {
        Scope::CallingThread => (0, -1),
        Scope::Thread(tid) => (tid, -1),
        Scope::Cpu(cpu) => (-1, cpu),
        Scope::ThreadOnCpu(tid, cpu) => (tid, cpu),
    };
    f.extend([
        field("pid", FieldValue::Signed(pid.into())),
        field("cpu", FieldValue::Signed(cpu.into())),
        // The CLI never puts an event in a group.
        field("group_fd", FieldValue::Signed(-1)),
        field(
            "flags",
            FieldValue::Flags(
                sys::PERF_FLAG_FD_CLOEXEC.into(),
                vec!["PERF_FLAG_FD_CLOEXEC".into()],
            ),
        ),
    ]);
    f
}
