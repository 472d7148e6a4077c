//! Accounting: what each thread, and the whole session, delivered and lost.

use std::collections::HashMap;

/// Record counts, per thread ([`ThreadInfo::stats`]) or in total ([`Sampler::stats`]).
///
/// `samples` counts `PERF_RECORD_SAMPLE`s, one per overflow; the rest say why that can
/// be fewer than the overflows that happened: `lost` (records dropped because a ring
/// was full, `PERF_RECORD_LOST`), `lost_samples` (`PERF_RECORD_LOST_SAMPLES`),
/// `throttled` (the kernel's sample-rate cap, `PERF_RECORD_THROTTLE`) and `undecoded`
/// (records the decoder rejected, which would be a perfring bug).
///
/// [`Sampler::stats`]: super::Sampler::stats
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Records of every type handed to the callback.
    pub records: u64,
    /// `PERF_RECORD_SAMPLE` records.
    pub samples: u64,
    /// Records the kernel dropped because the ring was full (sum of `LOST.lost`).
    pub lost: u64,
    /// Samples the kernel dropped (sum of `LOST_SAMPLES.lost`).
    pub lost_samples: u64,
    /// `PERF_RECORD_THROTTLE` records.
    pub throttled: u64,
    /// `PERF_RECORD_UNTHROTTLE` records.
    pub unthrottled: u64,
    /// Records that could not be decoded (skipped, not handed out).
    pub undecoded: u64,
}

impl Stats {
    /// Whether anything was lost, throttled or undecoded: `samples` may undercount.
    pub fn incomplete(&self) -> bool {
        self.lost > 0 || self.lost_samples > 0 || self.throttled > 0 || self.undecoded > 0
    }
}

/// One thread the sampler has seen: in the target when it attached, created later
/// (`PERF_RECORD_FORK`), or named by a record's `tid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadInfo {
    /// Process id (0 until a record says).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// What its records said.
    pub stats: Stats,
    /// `PERF_RECORD_EXIT` seen.
    pub exited: bool,
    comm: [u8; 16],
}

impl ThreadInfo {
    fn new(pid: u32, tid: u32) -> ThreadInfo {
        ThreadInfo {
            pid,
            tid,
            stats: Stats::default(),
            exited: false,
            comm: [0; 16],
        }
    }

    /// The thread's name from its last `PERF_RECORD_COMM` (empty if none was seen).
    pub fn comm(&self) -> &[u8] {
        let n = self.comm.iter().position(|&b| b == 0).unwrap_or(16);
        &self.comm[..n]
    }

    pub(crate) fn set_comm(&mut self, comm: &[u8]) {
        let n = comm.len().min(15);
        self.comm = [0; 16];
        self.comm[..n].copy_from_slice(&comm[..n]);
    }
}

/// Threads by tid. Growing it (a new thread) may allocate; every other record does not.
#[derive(Debug, Default)]
pub(crate) struct Threads {
    map: HashMap<u32, ThreadInfo>,
}

impl Threads {
    pub(crate) fn with_capacity(n: usize) -> Threads {
        Threads {
            map: HashMap::with_capacity(n),
        }
    }

    /// The entry for `tid`, created if new; `pid` fills in an unknown pid.
    pub(crate) fn entry(&mut self, pid: Option<u32>, tid: u32) -> &mut ThreadInfo {
        let t = self
            .map
            .entry(tid)
            .or_insert_with(|| ThreadInfo::new(pid.unwrap_or(0), tid));
        if t.pid == 0 {
            t.pid = pid.unwrap_or(0);
        }
        t
    }

    pub(crate) fn get(&self, tid: u32) -> Option<&ThreadInfo> {
        self.map.get(&tid)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &ThreadInfo> + '_ {
        self.map.values()
    }
}
