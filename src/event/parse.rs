//! perf's event syntax: `name[:mods]`, `subsystem:name[:mods]`, `mem:ADDR[/LEN][:ACCESS][:mods]`,
//! `rHEX[:mods]` and `pmu/term=value,.../[:mods]`.
//!
//! Every error points at a byte span of the input and, where it can, suggests names.

use std::ops::Range;

use super::names::{self, did_you_mean};
use super::sysfs::{safe_component, PmuFormats, Sysfs};
use super::{Access, Breakpoint, Cache, CacheResult, Event, Kind, Modifiers, PmuEvent, Tracepoint};
use crate::error::{Error, ErrorKind, Result};
use crate::sys;

const MODIFIER_HELP: &str = "modifiers are u (user), k (kernel), h (hypervisor), I (not idle), \
                             G (guest only), H (host only) and p, pp or ppp (precise level), \
                             e.g. cycles:uk or instructions:upp";
const MEM_HELP: &str = "a breakpoint is mem:ADDR[/LEN][:ACCESS] with ADDR a number (0x for hex), \
                        LEN 1 to 8 bytes (default 8, or sizeof(long) for x) and ACCESS r, w, rw \
                        or x (default rw), e.g. mem:0x1000/4:w";
const PMU_HELP: &str = "a PMU event is PMU/TERM=VALUE,.../ with terms from \
                        /sys/bus/event_source/devices/PMU/format, e.g. cpu/event=0x3c,umask=0x0/";

pub(super) fn parse(input: &str, sysfs: &Sysfs) -> Result<Event> {
    Parser { input, sysfs }.event()
}

struct Parser<'a> {
    input: &'a str,
    sysfs: &'a Sysfs,
}

impl<'a> Parser<'a> {
    /// A `BadEvent` error whose cause ends with the input and carets under `span`.
    fn err(&self, span: Range<usize>, why: impl std::fmt::Display, fix: Option<String>) -> Error {
        let shown: String = self
            .input
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        let start = span.start.min(self.input.len());
        let end = span.end.clamp(start, self.input.len());
        let col = self.input.get(..start).map_or(0, |p| p.chars().count());
        let width = self
            .input
            .get(start..end)
            .map_or(1, |p| p.chars().count())
            .max(1);
        let why = format!(
            "{why} (at byte {start})\n    {shown}\n    {}{}",
            " ".repeat(col),
            "^".repeat(width)
        );
        let e = Error::new(ErrorKind::BadEvent, "parse event", why);
        match fix {
            Some(f) => e.with_fix(f),
            None => e,
        }
    }

    /// Re-raises a sysfs lookup error at `span`.
    fn wrap(&self, span: Range<usize>, e: Error) -> Error {
        self.err(
            span,
            format!("{}: {}", e.operation(), e.cause()),
            e.fix().map(str::to_string),
        )
    }

    fn event(&self) -> Result<Event> {
        let start = self.input.len() - self.input.trim_start().len();
        let s = self.input.trim();
        let end = start + s.len();
        if s.is_empty() {
            return Err(self.err(
                0..self.input.len(),
                "empty event string",
                Some("name an event such as cpu-clock (see perf list)".into()),
            ));
        }
        let first_slash = s.find('/');
        let first_colon = s.find(':');
        let (kind, mods, name) = if s.starts_with("mem:") {
            let (kind, mods) = self.breakpoint(start + 4, end)?;
            (kind, mods, None)
        } else if first_slash.is_some_and(|sl| first_colon.is_none_or(|c| sl < c)) {
            self.pmu_event(start, end)?
        } else {
            let (kind, mods) = self.named(start, end)?;
            (kind, mods, None)
        };
        Ok(Event {
            kind,
            modifiers: mods,
            name: name.unwrap_or_else(|| s.to_string()),
        })
    }

    /// `name`, `name:mods`, `subsystem:name` or `subsystem:name:mods`.
    fn named(&self, start: usize, end: usize) -> Result<(Kind, Modifiers)> {
        let s = &self.input[start..end];
        let (head, rest) = match s.find(':') {
            Some(i) => (&s[..i], Some((start + i + 1, &s[i + 1..]))),
            None => (s, None),
        };
        let head_span = start..start + head.len();
        if let Some(kind) = self.symbolic(head, head_span.clone())? {
            let mods = match rest {
                Some((at, text)) => self.modifiers(text, at)?,
                None => Modifiers::default(),
            };
            return Ok((kind, mods));
        }
        if let Some(kind) = self.bare_alias(head, head_span.clone())? {
            let mods = match rest {
                Some((at, text)) => self.modifiers(text, at)?,
                None => Modifiers::default(),
            };
            return Ok((kind, mods));
        }
        let Some((at, rest)) = rest else {
            return Err(self.unknown_event(head, head_span));
        };
        let (tp, mods) = match rest.find(':') {
            Some(i) => (&rest[..i], Some((at + i + 1, &rest[i + 1..]))),
            None => (rest, None),
        };
        // `cpu-clok:u` is more likely a typo than a tracepoint called `u`.
        let looks_like_mods = !tp.is_empty() && tp.chars().all(|c| "ukhIGHp".contains(c));
        let is_subsystem = safe_component(head)
            && self
                .sysfs
                .tracefs()
                .is_some_and(|t| t.join("events").join(head).is_dir());
        if mods.is_none() && looks_like_mods && !is_subsystem {
            return Err(self.unknown_event(head, head_span));
        }
        let tp_span = start..at + tp.len();
        if head.is_empty() || tp.is_empty() {
            return Err(self.err(
                tp_span,
                "a tracepoint is SUBSYSTEM:NAME",
                Some("e.g. sched:sched_switch (see perf list tracepoint)".into()),
            ));
        }
        let id = self
            .sysfs
            .tracepoint_id(head, tp)
            .map_err(|e| self.wrap(tp_span, e))?;
        let mods = match mods {
            Some((at, text)) => self.modifiers(text, at)?,
            None => Modifiers::default(),
        };
        let name = Some(format!("{head}:{tp}"));
        Ok((Kind::Tracepoint(Tracepoint { id, name }), mods))
    }

    /// A PMU event named without its PMU (`tsc` for `msr/tsc/`), as perf allows when
    /// exactly one PMU has it.
    fn bare_alias(&self, word: &str, span: Range<usize>) -> Result<Option<Kind>> {
        let pmus = self.sysfs.pmus_with_alias(word);
        match pmus.as_slice() {
            [] => Ok(None),
            [one] => {
                let pmu = self
                    .sysfs
                    .pmu(one)
                    .map_err(|e| self.wrap(span.clone(), e))?;
                let mut words = [0; 3];
                let mut name = None;
                self.term(word, span.start, Some(&pmu), &mut words, &mut name, true)?;
                Ok(Some(pmu_kind(pmu, words)))
            }
            [first, ..] => Err(self.err(
                span,
                format!("event '{word}' exists in several PMUs: {}", pmus.join(", ")),
                Some(format!("name the PMU, e.g. {first}/{word}/")),
            )),
        }
    }

    fn unknown_event(&self, word: &str, span: Range<usize>) -> Error {
        let known = names::all_symbolic()
            .iter()
            .chain(self.sysfs.all_aliases())
            .map(String::as_str);
        let fix = names::did_you_mean_of(word, known)
            .unwrap_or_else(|| "see perf list for the events this machine has".into());
        self.err(span, format!("unknown event '{word}'"), Some(fix))
    }

    /// Hardware, software, cache and raw events: those that need no sysfs.
    fn symbolic(&self, word: &str, span: Range<usize>) -> Result<Option<Kind>> {
        if let Some((_, h)) = names::HARDWARE.iter().find(|(n, _)| *n == word) {
            return Ok(Some(Kind::Hardware(*h)));
        }
        if let Some((_, s)) = names::SOFTWARE.iter().find(|(n, _)| *n == word) {
            return Ok(Some(Kind::Software(*s)));
        }
        if let Some(hex) = word.strip_prefix('r') {
            let hex = hex.strip_prefix("0x").unwrap_or(hex);
            if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return match parse_hex(hex) {
                    Some(v) => Ok(Some(Kind::Raw(v))),
                    None => Err(self.err(
                        span,
                        "raw event code does not fit in 64 bits",
                        Some(
                            "a raw event is r followed by at most 16 hex digits, e.g. r1a8".into(),
                        ),
                    )),
                };
            }
        }
        self.cache(word, span)
    }

    /// `<cache>[-<op>][-<result>]`, case-insensitively, as perf spells them.
    fn cache(&self, word: &str, span: Range<usize>) -> Result<Option<Kind>> {
        for (alias, level) in names::CACHE_LEVELS {
            let Some(rest) = strip_prefix_ci(word, alias) else {
                continue;
            };
            let Some((op, result)) = cache_suffix(rest) else {
                continue;
            };
            if !level.supports(op) {
                return Err(self.err(
                    span,
                    format!("'{word}': this cache has no such operation"),
                    Some(format!(
                        "{} counts {}",
                        alias,
                        [
                            super::CacheOp::Read,
                            super::CacheOp::Write,
                            super::CacheOp::Prefetch
                        ]
                        .into_iter()
                        .filter(|o| level.supports(*o))
                        .map(|o| Cache::new(*level, o, CacheResult::Access).to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                    )),
                ));
            }
            return Ok(Some(Kind::Cache(Cache::new(*level, op, result))));
        }
        Ok(None)
    }

    /// The letters after `:`; `at` is the byte offset of `text` in the input.
    fn modifiers(&self, text: &str, at: usize) -> Result<Modifiers> {
        if text.is_empty() {
            return Err(self.err(
                at.saturating_sub(1)..at,
                "empty modifier list after ':'",
                Some(MODIFIER_HELP.into()),
            ));
        }
        let (mut u, mut k, mut h, mut guest, mut host) = (false, false, false, false, false);
        let mut m = Modifiers::default();
        for (i, c) in text.char_indices() {
            match c {
                'u' => u = true,
                'k' => k = true,
                'h' => h = true,
                'I' => m.exclude_idle = true,
                'G' => guest = true,
                'H' => host = true,
                'p' if m.precise < 3 => m.precise += 1,
                'p' => {
                    return Err(self.err(
                        at + i..at + i + 1,
                        "precise level is at most 3 (ppp)",
                        Some(MODIFIER_HELP.into()),
                    ))
                }
                _ => {
                    return Err(self.err(
                        at + i..at + i + c.len_utf8(),
                        format!("unknown modifier '{c}'"),
                        Some(MODIFIER_HELP.into()),
                    ))
                }
            }
        }
        if u || k || h {
            m.exclude_user = !u;
            m.exclude_kernel = !k;
            m.exclude_hv = !h;
        }
        if guest || host {
            m.exclude_host = !host;
            m.exclude_guest = !guest;
        }
        Ok(m)
    }

    /// `ADDR[/LEN][:ACCESS][:mods]`, from byte `start` (just after `mem:`).
    fn breakpoint(&self, start: usize, end: usize) -> Result<(Kind, Modifiers)> {
        let s = &self.input[start..end];
        let mut parts = Vec::new();
        let mut at = start;
        for part in s.split(':') {
            parts.push((at, part));
            at += part.len() + 1;
        }
        let (at0, addr_len) = parts[0];
        let (addr_text, len_text) = match addr_len.find('/') {
            Some(i) => (&addr_len[..i], Some((at0 + i + 1, &addr_len[i + 1..]))),
            None => (addr_len, None),
        };
        let addr = parse_num(addr_text).ok_or_else(|| {
            self.err(
                at0..at0 + addr_text.len(),
                format!("bad breakpoint address '{addr_text}'"),
                Some(MEM_HELP.into()),
            )
        })?;
        let mut access = None;
        let mut mods = None;
        let mut rest = parts[1..].iter();
        if let Some(&(at, text)) = rest.next() {
            if !text.is_empty() && text.bytes().all(|b| matches!(b, b'r' | b'w' | b'x')) {
                access = Some(self.access(text, at)?);
                if let Some(&(at, text)) = rest.next() {
                    mods = Some(self.modifiers(text, at)?);
                }
            } else {
                mods = Some(self.modifiers(text, at)?);
            }
        }
        if let Some(&(at, _)) = rest.next() {
            return Err(self.err(
                at.saturating_sub(1)..end,
                "unexpected text after the breakpoint's modifiers",
                Some(MEM_HELP.into()),
            ));
        }
        let access = access.unwrap_or(Access::ReadWrite);
        let len = match len_text {
            None => access.default_len(),
            Some((at, text)) => match parse_num(text) {
                Some(n @ 1..=8) => n,
                _ => {
                    return Err(self.err(
                        at..at + text.len(),
                        format!("bad breakpoint length '{text}'"),
                        Some(MEM_HELP.into()),
                    ))
                }
            },
        };
        Ok((
            Kind::Breakpoint(Breakpoint { access, addr, len }),
            mods.unwrap_or_default(),
        ))
    }

    fn access(&self, text: &str, at: usize) -> Result<Access> {
        let has = |c| text.contains(c);
        let span = at..at + text.len();
        match (has('r'), has('w'), has('x')) {
            (_, _, true) if text.bytes().all(|b| b == b'x') => Ok(Access::Execute),
            (_, _, true) => Err(self.err(
                span,
                "an execute breakpoint cannot also watch reads or writes",
                Some("use two events, e.g. mem:ADDR:x and mem:ADDR:rw".into()),
            )),
            (true, true, false) => Ok(Access::ReadWrite),
            (true, false, false) => Ok(Access::Read),
            _ => Ok(Access::Write),
        }
    }

    /// `pmu/terms/[:mods]` over `start..end`; returns the kind, modifiers and any `name=`.
    fn pmu_event(&self, start: usize, end: usize) -> Result<(Kind, Modifiers, Option<String>)> {
        let s = &self.input[start..end];
        let slash = s.find('/').unwrap_or(0);
        let pmu_name = &s[..slash];
        let pmu_span = start..start + slash;
        let terms_at = start + slash + 1;
        let after = &s[slash + 1..];
        let Some(close) = after.find('/') else {
            return Err(self.err(
                start..end,
                "missing the closing '/' of the PMU event",
                Some(PMU_HELP.into()),
            ));
        };
        let terms = &after[..close];
        let tail_at = terms_at + close + 1;
        let tail = &after[close + 1..];
        let mods = if tail.is_empty() {
            Modifiers::default()
        } else if let Some(text) = tail.strip_prefix(':') {
            self.modifiers(text, tail_at + 1)?
        } else {
            return Err(self.err(
                tail_at..end,
                "unexpected text after the PMU event",
                Some("modifiers go after a ':', e.g. cpu/event=0x3c/:u".into()),
            ));
        };
        if pmu_name.is_empty() {
            return Err(self.err(
                pmu_span,
                "missing PMU name before '/'",
                Some(PMU_HELP.into()),
            ));
        }
        let pmu = if pmu_name.bytes().all(|b| b.is_ascii_digit()) {
            None
        } else {
            Some(
                self.sysfs
                    .pmu(pmu_name)
                    .map_err(|e| self.wrap(pmu_span.clone(), e))?,
            )
        };
        let type_ = match &pmu {
            Some(p) => p.type_,
            None => pmu_name.parse::<u32>().map_err(|_| {
                self.err(
                    pmu_span.clone(),
                    "PMU type number does not fit in 32 bits",
                    None,
                )
            })?,
        };
        let mut words = [0u64; 3];
        let mut name = None;
        if !terms.is_empty() {
            let mut at = terms_at;
            for term in terms.split(',') {
                self.term(term, at, pmu.as_ref(), &mut words, &mut name, true)?;
                at += term.len() + 1;
            }
        }
        let kind = match pmu {
            Some(pmu) => pmu_kind(pmu, words),
            None => pmu_kind_by_type(None, type_, words),
        };
        Ok((kind, mods, name))
    }

    /// One `key[=value]` term at byte `at`, applied to `words`. Aliases from `events/`
    /// expand (one level) when `allow_alias`.
    fn term(
        &self,
        term: &str,
        at: usize,
        pmu: Option<&PmuFormats>,
        words: &mut [u64; 3],
        name: &mut Option<String>,
        allow_alias: bool,
    ) -> Result<()> {
        let span = at..at + term.len();
        let (key, value) = match term.split_once('=') {
            Some((k, v)) => (k, Some((at + k.len() + 1, v))),
            None => (term, None),
        };
        if key.is_empty() {
            return Err(self.err(span, "empty term", Some(PMU_HELP.into())));
        }
        let number = |value: Option<(usize, &str)>| -> Result<u64> {
            match value {
                None => Ok(1),
                Some((vat, v)) => parse_num(v).ok_or_else(|| {
                    self.err(
                        vat..vat + v.len(),
                        format!("bad value '{v}' for '{key}'"),
                        Some("values are decimal or 0x-prefixed hex numbers".into()),
                    )
                }),
            }
        };
        match key {
            "config" | "config1" | "config2" if value.is_some() => {
                let i = match key {
                    "config" => 0,
                    "config1" => 1,
                    _ => 2,
                };
                words[i] = number(value)?;
                return Ok(());
            }
            "name" => {
                return match value {
                    Some((_, v)) if !v.is_empty() => {
                        *name = Some(v.to_string());
                        Ok(())
                    }
                    _ => Err(self.err(span, "name= needs a value", None)),
                };
            }
            "period" | "freq" => {
                return Err(self.err(
                    span,
                    format!("'{key}' is not part of the event"),
                    Some("set the sampling period or frequency on the counter builder".into()),
                ));
            }
            _ => {}
        }
        if let Some(format) = pmu.and_then(|p| p.format(key)) {
            let v = number(value)?;
            return format.encode(v, words).map_err(|e| {
                self.err(
                    span,
                    format!("'{key}': {}", e.cause()),
                    e.fix().map(|f| format!("{f} (the term is {format})")),
                )
            });
        }
        if value.is_none() {
            if let Some(hex) = key.strip_prefix('r') {
                let hex = hex.strip_prefix("0x").unwrap_or(hex);
                if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    if let Some(v) = parse_hex(hex) {
                        words[0] = v;
                        return Ok(());
                    }
                }
            }
            if let (Some(pmu), true) = (pmu, allow_alias) {
                if let Some(alias) = pmu.alias(key) {
                    for t in alias.split(',').filter(|t| !t.is_empty()) {
                        self.term(t, at, Some(pmu), words, name, false)
                            .map_err(|e| {
                                self.err(
                                    span.clone(),
                                    format!(
                                        "event '{key}' of PMU '{}' is '{alias}', which does not apply: {}",
                                        pmu.name,
                                        e.cause().lines().next().unwrap_or("")
                                    ),
                                    e.fix().map(str::to_string),
                                )
                            })?;
                    }
                    return Ok(());
                }
            }
        }
        let (terms, aliases) = match pmu {
            Some(p) => (p.term_names(), p.alias_names()),
            None => (Vec::new(), Vec::new()),
        };
        let mut known: Vec<String> = terms.clone();
        known.extend(["config", "config1", "config2", "name"].map(String::from));
        known.extend(aliases.iter().cloned());
        let listing = format!(
            "terms: {}{}",
            known[..terms.len() + 4].join(", "),
            if aliases.is_empty() {
                String::new()
            } else {
                format!("; events: {}", aliases.join(", "))
            }
        );
        let pmu_label = pmu.map_or("this PMU".to_string(), |p| format!("PMU '{}'", p.name));
        let fix = match did_you_mean(key, &known) {
            Some(m) => format!("{m} ({listing})"),
            None => listing,
        };
        Err(self.err(
            at..at + key.len(),
            format!("unknown term '{key}' for {pmu_label}"),
            Some(fix),
        ))
    }
}

fn pmu_kind(pmu: PmuFormats, words: [u64; 3]) -> Kind {
    pmu_kind_by_type(Some(pmu.name), pmu.type_, words)
}

/// A PMU event; the tracepoint PMU's events are tracepoints by id.
pub(super) fn pmu_kind_by_type(pmu: Option<String>, type_: u32, words: [u64; 3]) -> Kind {
    if type_ == sys::PERF_TYPE_TRACEPOINT && words[1] == 0 && words[2] == 0 {
        Kind::Tracepoint(Tracepoint {
            id: words[0],
            name: None,
        })
    } else {
        Kind::Pmu(PmuEvent {
            pmu,
            type_,
            config: words[0],
            config1: words[1],
            config2: words[2],
        })
    }
}

/// A decimal or `0x` hex number, without signs or spaces.
pub(super) fn parse_num(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return parse_hex(hex);
    }
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_hex(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn strip_prefix_ci<'s>(s: &'s str, prefix: &str) -> Option<&'s str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// What follows the cache name: nothing, `-op`, `-result` or `-op-result`.
fn cache_suffix(rest: &str) -> Option<(super::CacheOp, CacheResult)> {
    use super::CacheOp;
    if rest.is_empty() {
        return Some((CacheOp::Read, CacheResult::Access));
    }
    let rest = rest.strip_prefix('-')?;
    for (alias, op) in names::CACHE_OPS {
        if let Some(after) = strip_prefix_ci(rest, alias) {
            if after.is_empty() {
                return Some((*op, CacheResult::Access));
            }
            if let Some(r) = after.strip_prefix('-') {
                if let Some((_, res)) = names::CACHE_RESULTS
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(r))
                {
                    return Some((*op, *res));
                }
            }
        }
    }
    names::CACHE_RESULTS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(rest))
        .map(|(_, res)| (CacheOp::Read, *res))
}
