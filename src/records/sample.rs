//! [`Sample`]: a `PERF_RECORD_SAMPLE`, field by field in the man page's order.

use std::fmt;

use zerocopy::FromBytes;

use super::error::DecodeError;
use super::layout::{Layout, Word, ABSENT};
use super::view::{
    read_len, u32_at, u32_hi, u32_lo, u64_at, u64_word, Array, Misc, ReadValues, SampleId, U64s,
};
use crate::sys;

/// A `PERF_RECORD_SAMPLE`, read in place.
///
/// The fields before the first variable-length one (identifier, ip, pid/tid, time,
/// addr, id, stream_id, cpu, period, and a non-group read) sit at offsets fixed by the
/// [`Layout`], and so does the callchain unless a group read precedes it: these
/// accessors are one bounds-checked load. Parsing walked every field once and checked
/// it lies inside the record; the fields after the callchain (raw, branch stack,
/// registers, user stack, weight, ..., aux) are located again by a short walk when
/// asked for. Each accessor returns `None` when `sample_type` does not record that field.
///
/// The order (after `code_page_size`, `aux` last) is the kernel's and the man page's;
/// the comment in the 6.1 `perf_event.h` lists `aux` before the page sizes and omits
/// `cgroup`, which is wrong. Bytes after the last field (a kernel newer than this
/// decoder) are ignored.
#[derive(Clone, Copy)]
pub struct Sample<'a> {
    bytes: &'a [u8],
    layout: &'a Layout,
    /// The callchain's entries, found and checked against the record by `parse`, so
    /// that `callchain()` is free: no offset to re-read, no bounds to re-check.
    /// (An earlier offset-and-`nr` pair packed in narrow fields stalled store-to-load
    /// forwarding when the record went through memory, and cost a check per call.)
    /// The offsets of later variable fields are found again by [`walk`] when asked
    /// for: they are rare, and this keeps a sample small.
    chain: Option<&'a [[u8; 8]]>,
}

/// Walks the variable part, checking each length against the record.
struct Walk<'a> {
    b: &'a [u8],
    at: usize,
}

impl Walk<'_> {
    /// The u64 at the cursor (not consumed).
    #[inline(always)]
    fn word(&self, field: &'static str) -> Result<u64, DecodeError> {
        u64_at(self.b, self.at).ok_or_else(|| self.short(field, 8))
    }

    #[cold]
    fn short(&self, field: &'static str, needed: usize) -> DecodeError {
        DecodeError::truncated(field, self.at, needed, self.b.len().saturating_sub(self.at))
    }

    /// Consumes `count * size` bytes (a length read from the record: may be absurd).
    #[inline(always)]
    fn skip(&mut self, count: u64, size: usize, field: &'static str) -> Result<(), DecodeError> {
        let n = usize::try_from(count)
            .ok()
            .and_then(|c| c.checked_mul(size))
            .unwrap_or(usize::MAX);
        if n > self.b.len().saturating_sub(self.at) {
            return Err(self.short(field, n));
        }
        self.at += n;
        Ok(())
    }
}

/// Walks a sample's variable part in the man page's order, checking every length.
/// Returns the offset of the field whose `sample_type` bit is in `stop` (the caller
/// knows it is recorded), or with `stop == 0` the end of the last field.
fn walk(b: &[u8], layout: &Layout, stop: u64) -> Result<usize, DecodeError> {
    let v = layout.variable;
    let mut w = Walk {
        b,
        at: usize::from(layout.fixed_end),
    };
    macro_rules! field {
        ($bits:expr) => {{
            let bits = u64::from($bits);
            if v & bits == 0 {
                false
            } else if stop & bits != 0 {
                return Ok(w.at);
            } else {
                true
            }
        }};
    }
    if field!(sys::PERF_SAMPLE_READ) {
        // Only a group read is variable-length (and in `variable`).
        w.at += read_len(b, w.at, layout.read_format)?;
    }
    if field!(sys::PERF_SAMPLE_CALLCHAIN) {
        let nr = w.word("callchain.nr")?;
        w.at += 8;
        w.skip(nr, 8, "callchain.ips")?;
    }
    if field!(sys::PERF_SAMPLE_RAW) {
        let size = u32_at(b, w.at).ok_or_else(|| w.short("raw.size", 4))?;
        w.at += 4;
        w.skip(u64::from(size), 1, "raw.data")?;
    }
    if field!(sys::PERF_SAMPLE_BRANCH_STACK) {
        let nr = w.word("branch_stack.nr")?;
        w.at += 8;
        if layout.branch_hw_index() {
            w.skip(1, 8, "branch_stack.hw_idx")?;
        }
        w.skip(
            nr,
            std::mem::size_of::<sys::perf_branch_entry>(),
            "branch_stack.entries",
        )?;
        if layout.branch_counters() {
            w.skip(nr, 8, "branch_stack.counters")?;
        }
    }
    if field!(sys::PERF_SAMPLE_REGS_USER) {
        let abi = w.word("regs_user.abi")?;
        w.at += 8;
        if abi != u64::from(sys::PERF_SAMPLE_REGS_ABI_NONE) {
            w.skip(u64::from(layout.n_regs_user), 8, "regs_user.regs")?;
        }
    }
    if field!(sys::PERF_SAMPLE_STACK_USER) {
        let size = w.word("stack_user.size")?;
        w.at += 8;
        w.skip(size, 1, "stack_user.data")?;
        if size != 0 {
            w.skip(1, 8, "stack_user.dyn_size")?;
        }
    }
    if field!(sys::PERF_SAMPLE_WEIGHT_TYPE) {
        w.skip(1, 8, "weight")?;
    }
    if field!(sys::PERF_SAMPLE_DATA_SRC) {
        w.skip(1, 8, "data_src")?;
    }
    if field!(sys::PERF_SAMPLE_TRANSACTION) {
        w.skip(1, 8, "transaction")?;
    }
    if field!(sys::PERF_SAMPLE_REGS_INTR) {
        let abi = w.word("regs_intr.abi")?;
        w.at += 8;
        if abi != u64::from(sys::PERF_SAMPLE_REGS_ABI_NONE) {
            w.skip(u64::from(layout.n_regs_intr), 8, "regs_intr.regs")?;
        }
    }
    if field!(sys::PERF_SAMPLE_PHYS_ADDR) {
        w.skip(1, 8, "phys_addr")?;
    }
    if field!(sys::PERF_SAMPLE_CGROUP) {
        w.skip(1, 8, "cgroup")?;
    }
    if field!(sys::PERF_SAMPLE_DATA_PAGE_SIZE) {
        w.skip(1, 8, "data_page_size")?;
    }
    if field!(sys::PERF_SAMPLE_CODE_PAGE_SIZE) {
        w.skip(1, 8, "code_page_size")?;
    }
    if field!(sys::PERF_SAMPLE_AUX) {
        let size = w.word("aux.size")?;
        w.at += 8;
        w.skip(size, 1, "aux.data")?;
    }
    Ok(w.at)
}

/// The callchain's entries (after its `nr` at byte `at`), checked to lie inside the
/// record.
fn chain_ips(b: &[u8], at: usize) -> Result<&[[u8; 8]], DecodeError> {
    let Some(nr) = u64_at(b, at) else {
        return Err(chain_short(b, at, None));
    };
    // The `u64_at` above makes `b.len() >= at + 8`.
    let ips = b.get(at + 8..).unwrap_or_default();
    let (words, _) = ips.as_chunks::<8>();
    match usize::try_from(nr).ok().and_then(|n| words.get(..n)) {
        Some(ips) => Ok(ips),
        None => Err(chain_short(b, at, Some(nr))),
    }
}

/// The callchain of the common layout, whose `nr` is word `nr_at` (the first after
/// the fixed fields) and whose entries end the record. Counted in whole words, the
/// record needs two comparisons: `nr_at` inside it (which proves every fixed field
/// in bounds too) and `nr` entries after it; no `nr * 8` to guard against overflow.
#[inline(always)]
fn chain_words(b: &[u8], nr_at: Word) -> Result<&[[u8; 8]], DecodeError> {
    let (words, _) = b.as_chunks::<8>();
    let at = usize::from(nr_at);
    let Some((nr, ips)) = words.get(at..).and_then(<[_]>::split_first) else {
        return Err(chain_short(b, 8 * at, None));
    };
    let nr = u64::from_ne_bytes(*nr);
    match usize::try_from(nr).ok().and_then(|n| ips.get(..n)) {
        Some(ips) => Ok(ips),
        None => Err(chain_short(b, 8 * at, Some(nr))),
    }
}

/// The error for a callchain whose `nr` (`None`: the `nr` word itself) runs past `b`.
#[cold]
#[inline(never)]
fn chain_short(b: &[u8], at: usize, nr: Option<u64>) -> DecodeError {
    match nr {
        // In the callchain-only layout `at` is the end of the fixed fields.
        None if b.len() < at => {
            DecodeError::truncated("sample fixed fields", 8, at - 8, b.len().saturating_sub(8))
        }
        None => DecodeError::truncated("callchain.nr", at, 8, b.len().saturating_sub(at)),
        Some(nr) => DecodeError::truncated(
            "callchain.ips",
            at + 8,
            usize::try_from(nr).map_or(usize::MAX, |n| n.saturating_mul(8)),
            b.len().saturating_sub(at + 8),
        ),
    }
}

/// `Sample::parse` for the layouts with variable fields other than a lone callchain:
/// checks them all and returns the callchain's entries (`None`: not recorded).
fn locate_variable<'a>(
    bytes: &'a [u8],
    layout: &Layout,
) -> Result<Option<&'a [[u8; 8]]>, DecodeError> {
    let fixed = usize::from(layout.fixed_end);
    if bytes.len() < fixed {
        return Err(DecodeError::truncated(
            "sample fixed fields",
            8,
            fixed - 8,
            bytes.len().saturating_sub(8),
        ));
    }
    walk(bytes, layout, 0)?;
    if layout.variable & u64::from(sys::PERF_SAMPLE_CALLCHAIN) == 0 {
        return Ok(None);
    }
    let at = walk(bytes, layout, sys::PERF_SAMPLE_CALLCHAIN.into())?;
    Ok(Some(chain_ips(bytes, at)?))
}

impl<'a> Sample<'a> {
    /// Parses the sample in `bytes` (one whole record, at most 64 KiB as its `u16` size
    /// says), checking every field's bounds.
    #[inline(always)]
    pub(crate) fn parse(bytes: &'a [u8], layout: &'a Layout) -> Result<Self, DecodeError> {
        let chain = if layout.chain_nr != ABSENT {
            // The common case: fixed fields, then only the callchain.
            Some(chain_words(bytes, layout.chain_nr)?)
        } else if layout.variable == 0 && bytes.len() >= usize::from(layout.fixed_end) {
            None
        } else {
            locate_variable(bytes, layout)?
        };
        Ok(Sample {
            bytes,
            layout,
            chain,
        })
    }

    /// Offset of a variable field (one of `bits`), if the layout records it.
    fn field(&self, bits: u64) -> Option<usize> {
        if self.layout.variable & bits == 0 {
            return None;
        }
        walk(self.bytes, self.layout, bits).ok()
    }

    /// The whole record, header included.
    #[inline]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The layout plan this sample was decoded with.
    #[inline]
    pub fn layout(&self) -> &'a Layout {
        self.layout
    }

    /// The header's `misc` bits (`cpumode`, `exact_ip`).
    #[inline]
    pub fn misc(&self) -> Misc {
        Misc(super::view::u16_at(self.bytes, 4).unwrap_or(0))
    }

    /// The id fields (`identifier`, `pid`/`tid`, `time`, `id`, `stream_id`, `cpu`).
    #[inline]
    pub fn sample_id(&self) -> SampleId<'a> {
        SampleId::new(self.bytes, &self.layout.sample_ids)
    }

    fn var_word(&self, bit: u32) -> Option<u64> {
        u64_at(self.bytes, self.field(bit.into())?)
    }

    /// `PERF_SAMPLE_IDENTIFIER`
    #[inline]
    pub fn identifier(&self) -> Option<u64> {
        u64_word(self.bytes, self.layout.sample_ids.identifier)
    }
    /// `PERF_SAMPLE_IP`: the instruction pointer.
    #[inline]
    pub fn ip(&self) -> Option<u64> {
        u64_word(self.bytes, self.layout.ip)
    }
    /// `PERF_SAMPLE_TID`: process id.
    #[inline]
    pub fn pid(&self) -> Option<u32> {
        u32_lo(self.bytes, self.layout.sample_ids.tid)
    }
    /// `PERF_SAMPLE_TID`: thread id.
    #[inline]
    pub fn tid(&self) -> Option<u32> {
        u32_hi(self.bytes, self.layout.sample_ids.tid)
    }
    /// `PERF_SAMPLE_TIME`: timestamp.
    #[inline]
    pub fn time(&self) -> Option<u64> {
        u64_word(self.bytes, self.layout.sample_ids.time)
    }
    /// `PERF_SAMPLE_ADDR`: an address, usually of a tracepoint, breakpoint or memory access.
    #[inline]
    pub fn addr(&self) -> Option<u64> {
        u64_word(self.bytes, self.layout.addr)
    }
    /// `PERF_SAMPLE_ID`: the counter's id (the leader's in a group).
    #[inline]
    pub fn id(&self) -> Option<u64> {
        u64_word(self.bytes, self.layout.sample_ids.id)
    }
    /// `PERF_SAMPLE_STREAM_ID`: the id of the counter this one was inherited from.
    #[inline]
    pub fn stream_id(&self) -> Option<u64> {
        u64_word(self.bytes, self.layout.sample_ids.stream_id)
    }
    /// `PERF_SAMPLE_CPU`: the CPU.
    #[inline]
    pub fn cpu(&self) -> Option<u32> {
        u32_lo(self.bytes, self.layout.sample_ids.cpu)
    }
    /// `PERF_SAMPLE_CPU`: the reserved word after the CPU.
    #[inline]
    pub fn cpu_res(&self) -> Option<u32> {
        u32_hi(self.bytes, self.layout.sample_ids.cpu)
    }
    /// `PERF_SAMPLE_PERIOD`: the sampling period when the sample was taken.
    #[inline]
    pub fn period(&self) -> Option<u64> {
        u64_word(self.bytes, self.layout.period)
    }

    /// `PERF_SAMPLE_READ`: the counter values, in `read_format`'s layout.
    pub fn read(&self) -> Option<ReadValues<'a>> {
        let at = usize::from(self.layout.read?);
        ReadValues::parse(self.bytes.get(at..)?, self.layout.read_format)
            .ok()
            .map(|(v, _)| v)
    }

    /// `PERF_SAMPLE_CALLCHAIN`: the call chain, innermost first, with `PERF_CONTEXT_*`
    /// markers between the kernel and user parts.
    #[inline]
    pub fn callchain(&self) -> Option<U64s<'a>> {
        self.chain
            .map(|ips| Array::new_unchecked_len(ips.as_flattened()))
    }

    /// `PERF_SAMPLE_RAW`: the raw data (for tracepoints, the event's fields), including
    /// the kernel's padding to keep the record 8-aligned.
    pub fn raw(&self) -> Option<&'a [u8]> {
        let at = self.field(sys::PERF_SAMPLE_RAW.into())?;
        let size = usize::try_from(u32_at(self.bytes, at)?).ok()?;
        self.bytes.get(at + 4..)?.get(..size)
    }

    /// `PERF_SAMPLE_BRANCH_STACK`: the last branches taken (LBR and kin).
    pub fn branch_stack(&self) -> Option<BranchStack<'a>> {
        let at = self.field(sys::PERF_SAMPLE_BRANCH_STACK.into())?;
        let nr = usize::try_from(u64_at(self.bytes, at)?).ok()?;
        let mut p = at + 8;
        let hw_idx = if self.layout.branch_hw_index() {
            p += 8;
            Some(u64_at(self.bytes, p - 8)?)
        } else {
            None
        };
        let n = nr.checked_mul(std::mem::size_of::<sys::perf_branch_entry>())?;
        let entries = self.bytes.get(p..)?.get(..n)?;
        p += n;
        let counters = if self.layout.branch_counters() {
            Some(Array::new_unchecked_len(
                self.bytes.get(p..)?.get(..nr.checked_mul(8)?)?,
            ))
        } else {
            None
        };
        Some(BranchStack {
            hw_idx,
            entries: Array::new_unchecked_len(entries),
            counters,
        })
    }

    fn regs(&self, bit: u32, n: u16, mask: u64) -> Option<Regs<'a>> {
        let at = self.field(bit.into())?;
        let abi = u64_at(self.bytes, at)?;
        let n = if abi == u64::from(sys::PERF_SAMPLE_REGS_ABI_NONE) {
            0
        } else {
            usize::from(n)
        };
        let regs = self.bytes.get(at + 8..)?.get(..8 * n)?;
        Some(Regs {
            abi,
            mask,
            regs: Array::new_unchecked_len(regs),
        })
    }

    /// `PERF_SAMPLE_REGS_USER`: the user-space registers in `sample_regs_user`.
    pub fn regs_user(&self) -> Option<Regs<'a>> {
        self.regs(
            sys::PERF_SAMPLE_REGS_USER,
            self.layout.n_regs_user,
            self.layout.regs_user_mask,
        )
    }

    /// `PERF_SAMPLE_STACK_USER`: a copy of the top of the user stack.
    pub fn stack_user(&self) -> Option<UserStack<'a>> {
        let at = self.field(sys::PERF_SAMPLE_STACK_USER.into())?;
        let size = usize::try_from(u64_at(self.bytes, at)?).ok()?;
        let data = self.bytes.get(at + 8..)?.get(..size)?;
        let dyn_size = if size == 0 {
            None
        } else {
            Some(u64_at(self.bytes, at + 8 + size)?)
        };
        Some(UserStack { data, dyn_size })
    }

    /// `PERF_SAMPLE_WEIGHT` or `PERF_SAMPLE_WEIGHT_STRUCT`: the weight as one `u64`.
    pub fn weight(&self) -> Option<u64> {
        u64_at(self.bytes, self.field(sys::PERF_SAMPLE_WEIGHT_TYPE)?)
    }

    /// `PERF_SAMPLE_WEIGHT_STRUCT`: the weight as `{var1_dw, var2_w, var3_w}`.
    pub fn weight_struct(&self) -> Option<sys::perf_sample_weight> {
        if !self.layout.has(sys::PERF_SAMPLE_WEIGHT_STRUCT) {
            return None;
        }
        let at = self.field(sys::PERF_SAMPLE_WEIGHT_TYPE)?;
        sys::perf_sample_weight::read_from_prefix(self.bytes.get(at..)?)
            .ok()
            .map(|(w, _)| w)
    }

    /// `PERF_SAMPLE_DATA_SRC`: where a memory access was served from
    /// (`sys::perf_mem_data_src`'s `val`).
    pub fn data_src(&self) -> Option<u64> {
        self.var_word(sys::PERF_SAMPLE_DATA_SRC)
    }
    /// `PERF_SAMPLE_TRANSACTION`: why a transaction aborted (`PERF_TXN_*`).
    pub fn transaction(&self) -> Option<u64> {
        self.var_word(sys::PERF_SAMPLE_TRANSACTION)
    }

    /// `PERF_SAMPLE_REGS_INTR`: the registers at the interrupt, in `sample_regs_intr`.
    pub fn regs_intr(&self) -> Option<Regs<'a>> {
        self.regs(
            sys::PERF_SAMPLE_REGS_INTR,
            self.layout.n_regs_intr,
            self.layout.regs_intr_mask,
        )
    }

    /// `PERF_SAMPLE_PHYS_ADDR`: the physical address of `addr`.
    pub fn phys_addr(&self) -> Option<u64> {
        self.var_word(sys::PERF_SAMPLE_PHYS_ADDR)
    }
    /// `PERF_SAMPLE_CGROUP`: the cgroup id (see `PERF_RECORD_CGROUP`).
    pub fn cgroup(&self) -> Option<u64> {
        self.var_word(sys::PERF_SAMPLE_CGROUP)
    }
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`: the page size of `addr`.
    pub fn data_page_size(&self) -> Option<u64> {
        self.var_word(sys::PERF_SAMPLE_DATA_PAGE_SIZE)
    }
    /// `PERF_SAMPLE_CODE_PAGE_SIZE`: the page size of `ip`.
    pub fn code_page_size(&self) -> Option<u64> {
        self.var_word(sys::PERF_SAMPLE_CODE_PAGE_SIZE)
    }

    /// `PERF_SAMPLE_AUX`: a snapshot of the AUX area, padded to 8 bytes.
    pub fn aux(&self) -> Option<&'a [u8]> {
        let at = self.field(sys::PERF_SAMPLE_AUX.into())?;
        let size = usize::try_from(u64_at(self.bytes, at)?).ok()?;
        self.bytes.get(at + 8..)?.get(..size)
    }
}

impl fmt::Debug for Sample<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Sample");
        d.field("misc", &self.misc());
        macro_rules! opt {
            ($($name:ident),*) => {$(
                if let Some(v) = self.$name() {
                    d.field(stringify!($name), &v);
                }
            )*};
        }
        opt!(identifier, ip, pid, tid, time, addr, id, stream_id, cpu, period, read, callchain);
        opt!(
            raw,
            branch_stack,
            regs_user,
            stack_user,
            weight,
            data_src,
            transaction
        );
        opt!(
            regs_intr,
            phys_addr,
            cgroup,
            data_page_size,
            code_page_size,
            aux
        );
        d.finish()
    }
}

/// `PERF_SAMPLE_BRANCH_STACK`: `bnr`, `hw_idx`, `lbr[bnr]` (and `cntr[bnr]`).
///
/// With `PERF_SAMPLE_BRANCH_HW_INDEX`, `hw_idx` is taken to be always present, as
/// `perf` does; a kernel that had no branch stack at all writes only `bnr = 0`, and such
/// a sample then fails to decode (or misreads the next field) with that flag set.
#[derive(Clone, Copy, Debug)]
pub struct BranchStack<'a> {
    /// `PERF_SAMPLE_BRANCH_HW_INDEX`: the hardware index of the newest entry.
    pub hw_idx: Option<u64>,
    /// The entries, newest first.
    pub entries: Array<'a, sys::perf_branch_entry>,
    /// `PERF_SAMPLE_BRANCH_COUNTERS` (Linux 6.8): an event count per entry.
    pub counters: Option<U64s<'a>>,
}

/// A register block (`PERF_SAMPLE_REGS_USER` / `PERF_SAMPLE_REGS_INTR`).
#[derive(Clone, Copy, Debug)]
pub struct Regs<'a> {
    /// `PERF_SAMPLE_REGS_ABI_*`; `NONE` (a kernel thread) means no registers follow.
    pub abi: u64,
    /// The mask the registers were requested with: `regs` holds one value per set bit,
    /// lowest bit first.
    pub mask: u64,
    /// The register values.
    pub regs: U64s<'a>,
}

impl Regs<'_> {
    /// The value of register number `reg` (a bit position in the mask, e.g.
    /// `PERF_REG_X86_IP`), if it was recorded.
    pub fn get(&self, reg: u32) -> Option<u64> {
        if reg >= 64 || self.mask & (1 << reg) == 0 {
            return None;
        }
        let index = (self.mask & ((1u64 << reg) - 1)).count_ones() as usize;
        self.regs.get(index)
    }
}

/// `PERF_SAMPLE_STACK_USER`: `size`, `data[size]`, `dyn_size`.
#[derive(Clone, Copy, Debug)]
pub struct UserStack<'a> {
    /// The copied stack, `size` bytes (padded).
    pub data: &'a [u8],
    /// How many bytes of `data` are valid; absent when `size` is 0.
    pub dyn_size: Option<u64>,
}

impl<'a> UserStack<'a> {
    /// The valid part of the copy: the first `dyn_size` bytes.
    pub fn used(&self) -> &'a [u8] {
        let n = self
            .dyn_size
            .and_then(|d| usize::try_from(d).ok())
            .unwrap_or(0);
        self.data.get(..n).unwrap_or(self.data)
    }
}
