//! The overflow line: one sample as `perfring watch --json` and the injector's JSON
//! output both write it, a `serde` type so that both write the same fields in the same
//! order (the library has no JSON writer of its own; callers serialize, e.g. with
//! `serde_json::to_writer`).
//!
//! ```text
//! {"type":"overflow","seq":1,"event":"mem:leaf:x","pid":7,"tid":7,"cpu":1,
//!  "time_ns":123,"ip":"0x5555555551bd","sym":"leaf","sym_off":0,"period":1,"total":1,
//!  "stack":[{"ip":"0x5555555551bd","sym":"leaf","off":0,"file":"/src/prog.c",
//!            "line":10,"inlined":false,"dso":"/src/prog"}, ...]}
//! ```

use serde::Serialize;

use crate::output::SampleRef;
use crate::symbolize::Frame;

/// One overflow, ready to serialize.
#[derive(Debug, Clone, Serialize)]
pub struct OverflowLine<'a> {
    /// Always `"overflow"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// 1 for the first overflow of the recording, then 2, 3, ...
    pub seq: u64,
    /// The event's name.
    pub event: &'a str,
    /// The process.
    pub pid: u32,
    /// The thread that overflowed.
    pub tid: u32,
    /// The CPU, when the sample says.
    pub cpu: Option<u32>,
    /// The sample's time, in its clock (`CLOCK_MONOTONIC` for watch and the injector).
    pub time_ns: u64,
    /// The instruction pointer, `0x` hex.
    pub ip: String,
    /// The function at the ip (not an inlined callee), if named.
    pub sym: Option<&'a str>,
    /// The ip's offset in it.
    pub sym_off: Option<u64>,
    /// Events counted between two overflows: the fixed period, or the sample's own
    /// under a frequency (`None` when the sample does not carry it).
    pub period: Option<u64>,
    /// The sum of periods so far for this event: its running count.
    pub total: Option<u64>,
    /// The stack, innermost first, when stacks were asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<Vec<FrameLine<'a>>>,
}

/// One frame of [`OverflowLine::stack`].
#[derive(Debug, Clone, Serialize)]
pub struct FrameLine<'a> {
    /// The address, `0x` hex.
    pub ip: String,
    /// The function, if named.
    pub sym: Option<&'a str>,
    /// The address's offset in it (none for inlined frames).
    pub off: Option<u64>,
    /// Source file.
    pub file: Option<&'a str>,
    /// Source line.
    pub line: Option<u32>,
    /// Inlined into the next frame.
    pub inlined: bool,
    /// The mapped file.
    pub dso: Option<&'a str>,
}

impl<'a> From<&'a Frame> for FrameLine<'a> {
    fn from(f: &'a Frame) -> FrameLine<'a> {
        FrameLine {
            ip: format!("{:#x}", f.ip),
            sym: f.sym.as_deref(),
            off: f.off,
            file: f.file.as_deref(),
            line: f.line,
            inlined: f.inlined,
            dso: f.dso.as_deref(),
        }
    }
}

/// The running counts overflow lines carry: the sequence number and each event's total.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    seq: u64,
    totals: Vec<u64>,
}

impl Tally {
    /// Nothing counted yet.
    pub fn new() -> Tally {
        Tally::default()
    }

    /// Overflows counted so far.
    pub fn overflows(&self) -> u64 {
        self.seq
    }

    /// Counts `s` and describes it; `stacks`: with its named stack.
    pub fn line<'a>(&mut self, s: &'a SampleRef<'a>, stacks: bool) -> OverflowLine<'a> {
        self.seq += 1;
        let attr = s.info.attr();
        let period = if attr.freq() == 0 {
            Some(crate::counter::sample_period(attr))
        } else {
            s.sample.period()
        };
        if self.totals.len() <= s.event {
            self.totals.resize(s.event + 1, 0);
        }
        let total = period.map(|p| {
            let t = &mut self.totals[s.event];
            *t = t.saturating_add(p);
            *t
        });
        let ip = s.sample.ip().unwrap_or(0);
        // The line's symbol: the function (not an inlined callee) at the sample's ip.
        let sym = s
            .frames
            .iter()
            .take_while(|f| f.ip == ip)
            .find(|f| !f.inlined)
            .and_then(|f| Some((f.sym.as_deref()?, f.off.unwrap_or(0))));
        OverflowLine {
            kind: "overflow",
            seq: self.seq,
            event: s.info.name(),
            pid: s.pid,
            tid: s.tid,
            cpu: s.sample.cpu(),
            time_ns: s.sample.time().unwrap_or(0),
            ip: format!("{ip:#x}"),
            sym: sym.map(|s| s.0),
            sym_off: sym.map(|s| s.1),
            period,
            total,
            stack: stacks.then(|| s.frames.iter().map(FrameLine::from).collect()),
        }
    }
}
