//! The symbolic event names perf accepts, and "did you mean" suggestions.

use super::{CacheLevel, CacheOp, CacheResult, Hardware, Software};

/// Hardware event spellings, canonical first for each event.
pub(super) const HARDWARE: &[(&str, Hardware)] = &[
    ("cycles", Hardware::Cycles),
    ("cpu-cycles", Hardware::Cycles),
    ("instructions", Hardware::Instructions),
    ("cache-references", Hardware::CacheReferences),
    ("cache-misses", Hardware::CacheMisses),
    ("branches", Hardware::BranchInstructions),
    ("branch-instructions", Hardware::BranchInstructions),
    ("branch-misses", Hardware::BranchMisses),
    ("bus-cycles", Hardware::BusCycles),
    ("stalled-cycles-frontend", Hardware::StalledCyclesFrontend),
    ("idle-cycles-frontend", Hardware::StalledCyclesFrontend),
    ("stalled-cycles-backend", Hardware::StalledCyclesBackend),
    ("idle-cycles-backend", Hardware::StalledCyclesBackend),
    ("ref-cycles", Hardware::RefCycles),
];

/// Software event spellings, canonical first for each event.
pub(super) const SOFTWARE: &[(&str, Software)] = &[
    ("cpu-clock", Software::CpuClock),
    ("task-clock", Software::TaskClock),
    ("page-faults", Software::PageFaults),
    ("faults", Software::PageFaults),
    ("minor-faults", Software::MinorFaults),
    ("major-faults", Software::MajorFaults),
    ("context-switches", Software::ContextSwitches),
    ("cs", Software::ContextSwitches),
    ("cpu-migrations", Software::CpuMigrations),
    ("migrations", Software::CpuMigrations),
    ("alignment-faults", Software::AlignmentFaults),
    ("emulation-faults", Software::EmulationFaults),
    ("dummy", Software::Dummy),
    ("bpf-output", Software::BpfOutput),
    ("cgroup-switches", Software::CgroupSwitches),
];

/// Cache spellings (matched case-insensitively), canonical first.
pub(super) const CACHE_LEVELS: &[(&str, CacheLevel)] = &[
    ("L1-dcache", CacheLevel::L1Data),
    ("l1-d", CacheLevel::L1Data),
    ("l1d", CacheLevel::L1Data),
    ("L1-data", CacheLevel::L1Data),
    ("L1-icache", CacheLevel::L1Instruction),
    ("l1-i", CacheLevel::L1Instruction),
    ("l1i", CacheLevel::L1Instruction),
    ("L1-instruction", CacheLevel::L1Instruction),
    ("LLC", CacheLevel::LastLevel),
    ("L2", CacheLevel::LastLevel),
    ("dTLB", CacheLevel::DataTlb),
    ("d-tlb", CacheLevel::DataTlb),
    ("Data-TLB", CacheLevel::DataTlb),
    ("iTLB", CacheLevel::InstructionTlb),
    ("i-tlb", CacheLevel::InstructionTlb),
    ("Instruction-TLB", CacheLevel::InstructionTlb),
    ("branch", CacheLevel::Branch),
    ("branches", CacheLevel::Branch),
    ("bpu", CacheLevel::Branch),
    ("btb", CacheLevel::Branch),
    ("bpc", CacheLevel::Branch),
    ("node", CacheLevel::Node),
];

/// Operation spellings (case-insensitive), canonical singular first.
pub(super) const CACHE_OPS: &[(&str, CacheOp)] = &[
    ("load", CacheOp::Read),
    ("loads", CacheOp::Read),
    ("read", CacheOp::Read),
    ("store", CacheOp::Write),
    ("stores", CacheOp::Write),
    ("write", CacheOp::Write),
    ("prefetch", CacheOp::Prefetch),
    ("prefetches", CacheOp::Prefetch),
    ("speculative-read", CacheOp::Prefetch),
    ("speculative-load", CacheOp::Prefetch),
];

/// Result spellings (case-insensitive), canonical first.
pub(super) const CACHE_RESULTS: &[(&str, CacheResult)] = &[
    ("refs", CacheResult::Access),
    ("reference", CacheResult::Access),
    ("ops", CacheResult::Access),
    ("access", CacheResult::Access),
    ("misses", CacheResult::Miss),
    ("miss", CacheResult::Miss),
];

/// Every canonical cache event name perf would list (for suggestions).
fn cache_names() -> impl Iterator<Item = String> {
    let levels = [
        CacheLevel::L1Data,
        CacheLevel::L1Instruction,
        CacheLevel::LastLevel,
        CacheLevel::DataTlb,
        CacheLevel::InstructionTlb,
        CacheLevel::Branch,
        CacheLevel::Node,
    ];
    let ops = [CacheOp::Read, CacheOp::Write, CacheOp::Prefetch];
    levels.into_iter().flat_map(move |l| {
        ops.into_iter()
            .filter(move |o| l.supports(*o))
            .flat_map(move |o| {
                [CacheResult::Access, CacheResult::Miss]
                    .into_iter()
                    .map(move |r| super::Cache::new(l, o, r).to_string())
            })
    })
}

/// All symbolic names the parser knows without sysfs (built once).
pub(super) fn all_symbolic() -> &'static [String] {
    static ALL: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        HARDWARE
            .iter()
            .map(|(n, _)| n.to_string())
            .chain(SOFTWARE.iter().map(|(n, _)| n.to_string()))
            .chain(cache_names())
            .collect()
    })
}

/// Levenshtein distance over chars, ASCII case-insensitively: the plain definition,
/// which the tests hold [`distance_within`] to.
#[cfg(test)]
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// Up to three candidates closest to `word`, nearest first, within a distance that
/// grows with the word's length.
///
/// This runs on every event string that fails to parse, against every known name, so
/// it skips what cannot be near (a length differing by more than the limit) and stops
/// a comparison as soon as its row passes the limit, reusing two rows for all.
pub(crate) fn closest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Vec<&'a str> {
    let word: Vec<char> = word.chars().map(|c| c.to_ascii_lowercase()).collect();
    // Comparing a huge input against every name would be slow and pointless.
    if word.len() > 64 {
        return Vec::new();
    }
    let limit = (word.len() / 3).max(2);
    let (mut prev, mut cur) = (Vec::new(), Vec::new());
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| c.chars().count().abs_diff(word.len()) <= limit)
        .filter_map(|c| Some((distance_within(&word, c, limit, &mut prev, &mut cur)?, c)))
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

/// [`edit_distance`] of the lowercased `a` and `b` if it is at most `limit`, else
/// `None` (found as soon as a whole row exceeds `limit`: distances never shrink down
/// the rows). `prev` and `cur` are scratch rows.
fn distance_within(
    a: &[char],
    b: &str,
    limit: usize,
    prev: &mut Vec<usize>,
    cur: &mut Vec<usize>,
) -> Option<usize> {
    let n = b.chars().count();
    prev.clear();
    prev.extend(0..=n);
    cur.clear();
    cur.resize(n + 1, 0);
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        let mut row_min = cur[0];
        for (j, cb) in b.chars().map(|c| c.to_ascii_lowercase()).enumerate() {
            let sub = prev[j] + usize::from(*ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
            row_min = row_min.min(cur[j + 1]);
        }
        if row_min > limit {
            return None;
        }
        std::mem::swap(prev, cur);
    }
    Some(prev[n]).filter(|&d| d <= limit)
}

/// "did you mean 'a', 'b' or 'c'?", or `None` when nothing is close.
pub(crate) fn did_you_mean(word: &str, candidates: &[String]) -> Option<String> {
    did_you_mean_of(word, candidates.iter().map(String::as_str))
}

/// As [`did_you_mean`], over any candidates.
pub(crate) fn did_you_mean_of<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let near = closest(word, candidates);
    let quoted: Vec<String> = near.iter().map(|n| format!("'{n}'")).collect();
    match quoted.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean {one}?")),
        [rest @ .., last] => Some(format!("did you mean {} or {last}?", rest.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        for (a, b, d) in [
            ("", "", 0),
            ("cpu-clok", "cpu-clock", 1),
            ("CYCLES", "cycles", 0),
            ("kitten", "sitting", 3),
            ("abc", "", 3),
        ] {
            assert_eq!(edit_distance(a, b), d, "{a} vs {b}");
            let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
            let (mut p, mut c) = (Vec::new(), Vec::new());
            for limit in 0..5 {
                let within = distance_within(&a, b, limit, &mut p, &mut c);
                assert_eq!(
                    within,
                    Some(d).filter(|&d| d <= limit),
                    "{a:?} vs {b} within {limit}"
                );
            }
        }
    }

    #[test]
    fn suggestions() {
        let all = all_symbolic().to_vec();
        assert_eq!(
            did_you_mean("cpu-clok", &all).as_deref(),
            Some("did you mean 'cpu-clock'?")
        );
        assert!(all.iter().any(|n| n == "L1-dcache-load-misses"));
        assert!(all.iter().any(|n| n == "LLC-loads"));
        assert!(!all.iter().any(|n| n == "L1-icache-stores"));
        assert_eq!(did_you_mean("zzzzzzzzzzzz", &all), None);
    }
}
