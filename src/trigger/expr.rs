//! [`Expr`]: `page-faults > 1000/s`, `context-switches/task-clock > 0.5/ms`,
//! `cache-misses/instructions * 1000 > 5`, parsed with errors that point at the part
//! that is wrong.

use std::fmt;
use std::ops::Range;

use crate::event::{Event, Kind, Software};
use crate::{Error, ErrorKind, Result};

/// Which way the condition compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `>`: the condition holds while the value is above the threshold.
    Above,
    /// `<`: the condition holds while the value is below the threshold.
    Below,
}

/// A time unit a threshold can be given per: `/s`, `/ms`, `/us`, `/ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// `/s`
    Second,
    /// `/ms`
    Milli,
    /// `/us` (or `/µs`)
    Micro,
    /// `/ns`
    Nano,
}

impl TimeUnit {
    /// Nanoseconds in one unit.
    pub fn nanos(self) -> f64 {
        match self {
            TimeUnit::Second => 1e9,
            TimeUnit::Milli => 1e6,
            TimeUnit::Micro => 1e3,
            TimeUnit::Nano => 1.0,
        }
    }

    fn parse(s: &str) -> Option<TimeUnit> {
        Some(match s {
            "s" | "sec" => TimeUnit::Second,
            "ms" => TimeUnit::Milli,
            "us" | "µs" => TimeUnit::Micro,
            "ns" => TimeUnit::Nano,
            _ => return None,
        })
    }

    /// How the unit is written (`s`, `ms`, `us`, `ns`).
    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Second => "s",
            TimeUnit::Milli => "ms",
            TimeUnit::Micro => "us",
            TimeUnit::Nano => "ns",
        }
    }
}

/// One event of an expression, with where it was written.
#[derive(Debug, Clone)]
pub struct Operand {
    /// The event.
    pub event: Event,
    /// Its bytes in the expression.
    pub span: Range<usize>,
}

impl Operand {
    /// Whether the event counts nanoseconds of time (`task-clock`, `cpu-clock`), so
    /// that dividing by it gives a rate.
    pub fn is_time(&self) -> bool {
        is_clock(&self.event)
    }
}

pub(crate) fn is_clock(event: &Event) -> bool {
    matches!(
        event.kind(),
        Kind::Software(Software::TaskClock | Software::CpuClock)
    )
}

/// What an expression measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// `X > N/unit` or `X/clock > N/unit`: events per unit of the clock's time.
    Rate(TimeUnit),
    /// `a/b > N`: the ratio of two counts (times a constant factor).
    Ratio,
}

/// A parsed trigger condition: `NUMERATOR [/ DENOMINATOR] [* FACTOR] (>|<) THRESHOLD[/UNIT]`.
///
/// - `page-faults > 1000/s`: a rate, per second of the time base (by default the
///   thread's CPU time, `task-clock`, as `perf stat`'s `/sec` column).
/// - `context-switches/task-clock > 0.5/ms`: a rate per the named clock.
/// - `cache-misses/instructions > 0.01`, `cache-misses/instructions * 1000 > 5`: a
///   ratio of two counts, with an optional constant factor (numbers may multiply or
///   divide anywhere on the left).
///
/// Events are written in perf's syntax; one that contains `/`, spaces, `*`, `<` or `>`
/// (`cpu/event=0x3c/`, `mem:0x1000/4:w`) goes in braces: `{mem:0x1000/4:w}/task-clock`.
///
/// # Examples
/// ```
/// use perfring::trigger::{Cmp, Expr, Measure, TimeUnit};
/// let e = Expr::parse("page-faults > 1000/s")?;
/// assert_eq!(e.measure(), Measure::Rate(TimeUnit::Second));
/// assert_eq!((e.cmp(), e.threshold()), (Cmp::Above, 1000.0));
/// assert_eq!(e.numerator().event.name(), "page-faults");
///
/// let bad = Expr::parse("page-falts > 1000/s").unwrap_err();
/// assert!(bad.to_string().contains("page-faults"), "{bad}"); // the suggestion
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Expr {
    text: String,
    numerator: Operand,
    denominator: Option<Operand>,
    factor: f64,
    cmp: Cmp,
    threshold: f64,
    unit: Option<TimeUnit>,
}

impl Expr {
    /// Parses `text`, resolving events with [`Event::parse`].
    ///
    /// # Errors
    /// [`ErrorKind::BadEvent`] naming the part that is wrong, with carets under it: an
    /// unknown event (with the nearest names), `/` or `*` with nothing after it, a
    /// missing or doubled comparison, a threshold that is not a number, a unit that
    /// does not fit (`/ms` on a ratio of two counts, none on a rate).
    pub fn parse(text: &str) -> Result<Expr> {
        Expr::parse_with(text, &mut |s: &str| Event::parse(s))
    }

    /// Parses `text`, resolving each event string with `resolve` (e.g.
    /// [`crate::symbols::resolve_event`] for `mem:SYMBOL:x`).
    ///
    /// # Errors
    /// As [`parse`](Self::parse); `resolve`'s errors are returned with the event's
    /// place in the expression added.
    pub fn parse_with(text: &str, resolve: &mut dyn FnMut(&str) -> Result<Event>) -> Result<Expr> {
        Parser { text }.parse(resolve)
    }

    /// The expression as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The event counted on top.
    pub fn numerator(&self) -> &Operand {
        &self.numerator
    }

    /// The event divided by, if any.
    pub fn denominator(&self) -> Option<&Operand> {
        self.denominator.as_ref()
    }

    /// The constant factor on the left (`* 1000`), 1 if none.
    pub fn factor(&self) -> f64 {
        self.factor
    }

    /// `>` or `<`.
    pub fn cmp(&self) -> Cmp {
        self.cmp
    }

    /// The threshold, in the expression's unit (per [`measure`](Self::measure)).
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// Whether this is a rate (and per what) or a ratio of counts.
    pub fn measure(&self) -> Measure {
        match self.unit {
            Some(u) => Measure::Rate(u),
            None => Measure::Ratio,
        }
    }

    /// The expression with another threshold (same unit).
    pub fn with_threshold(mut self, threshold: f64) -> Expr {
        self.threshold = threshold;
        self
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Event(String),
    Number(f64),
    Slash,
    Star,
    Cmp(Cmp),
}

struct Parser<'a> {
    text: &'a str,
}

impl Parser<'_> {
    /// A `BadEvent` error pointing at `span` of the expression.
    fn err(&self, span: Range<usize>, why: impl fmt::Display, fix: Option<&str>) -> Error {
        let start = span.start.min(self.text.len());
        let end = span.end.clamp(start, self.text.len());
        let col = self.text.get(..start).map_or(0, |p| p.chars().count());
        let width = self
            .text
            .get(start..end)
            .map_or(1, |p| p.chars().count())
            .max(1);
        let shown: String = self
            .text
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        let why = format!(
            "{why} (at byte {start})\n    {shown}\n    {}{}",
            " ".repeat(col),
            "^".repeat(width)
        );
        let e = Error::new(ErrorKind::BadEvent, "parse trigger expression", why);
        match fix {
            Some(f) => e.with_fix(f),
            None => e,
        }
    }

    fn lex(&self) -> Result<Vec<(Tok, Range<usize>)>> {
        let b = self.text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            let start = i;
            match c {
                b' ' | b'\t' | b'\n' => i += 1,
                b'/' => {
                    out.push((Tok::Slash, i..i + 1));
                    i += 1;
                }
                b'*' => {
                    out.push((Tok::Star, i..i + 1));
                    i += 1;
                }
                b'>' | b'<' => {
                    if b.get(i + 1) == Some(&b'=') {
                        return Err(self.err(
                            i..i + 2,
                            "`>=`/`<=` are not supported: a rate is never exactly at its threshold",
                            Some("use `>` or `<`"),
                        ));
                    }
                    let cmp = if c == b'>' { Cmp::Above } else { Cmp::Below };
                    out.push((Tok::Cmp(cmp), i..i + 1));
                    i += 1;
                }
                b'{' => {
                    let Some(len) = self.text[i + 1..].find('}') else {
                        return Err(self.err(i..b.len(), "`{` is never closed", Some("add `}`")));
                    };
                    let inner = &self.text[i + 1..i + 1 + len];
                    if inner.trim().is_empty() {
                        return Err(self.err(i..i + len + 2, "empty `{}`", None));
                    }
                    out.push((Tok::Event(inner.trim().to_string()), i..i + len + 2));
                    i += len + 2;
                }
                b'0'..=b'9' | b'.' => {
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                        // An exponent's sign belongs to the number: 1e-3.
                        if (b[i] == b'e' || b[i] == b'E')
                            && matches!(b.get(i + 1), Some(b'-' | b'+'))
                        {
                            i += 1;
                        }
                        i += 1;
                    }
                    let word = &self.text[start..i];
                    match word.parse::<f64>() {
                        Ok(v) if v.is_finite() => out.push((Tok::Number(v), start..i)),
                        _ => return Err(self.err(
                            start..i,
                            format!("`{word}` is not a number"),
                            Some("write thresholds and factors as plain numbers: 1000, 0.5, 1e-3"),
                        )),
                    }
                }
                _ => {
                    while i < b.len()
                        && !matches!(b[i], b' ' | b'\t' | b'\n' | b'/' | b'*' | b'<' | b'>')
                    {
                        i += 1;
                    }
                    out.push((Tok::Event(self.text[start..i].to_string()), start..i));
                }
            }
        }
        Ok(out)
    }

    fn parse(&self, resolve: &mut dyn FnMut(&str) -> Result<Event>) -> Result<Expr> {
        let toks = self.lex()?;
        let end = self.text.len();
        let cmps: Vec<usize> = toks
            .iter()
            .enumerate()
            .filter(|(_, (t, _))| matches!(t, Tok::Cmp(_)))
            .map(|(i, _)| i)
            .collect();
        let at = match cmps.as_slice() {
            [] => {
                return Err(self.err(
                    end..end,
                    "no comparison: the expression needs `>` or `<` and a threshold",
                    Some("write e.g. `page-faults > 1000/s`"),
                ))
            }
            [one] => *one,
            [_, second, ..] => {
                return Err(self.err(
                    toks[*second].1.clone(),
                    "a second comparison",
                    Some("compare once: `EXPR > THRESHOLD`"),
                ))
            }
        };
        let Tok::Cmp(cmp) = toks[at].0 else {
            unreachable!("found as a comparison")
        };
        let (lhs, rhs) = (&toks[..at], &toks[at + 1..]);
        if lhs.is_empty() {
            return Err(self.err(
                toks[at].1.clone(),
                "nothing to compare before the comparison",
                Some("write e.g. `page-faults > 1000/s`"),
            ));
        }

        // The left side: a product of events and numbers, each multiplied or divided.
        let mut numerator: Option<Operand> = None;
        let mut denominator: Option<Operand> = None;
        let mut factor = 1.0;
        let mut divide = false;
        let mut expect_operand = true;
        for (tok, span) in lhs {
            match (tok, expect_operand) {
                (Tok::Slash | Tok::Star, true) => {
                    return Err(self.err(
                        span.clone(),
                        format!(
                            "`{}` without an operand before it",
                            if *tok == Tok::Slash { '/' } else { '*' }
                        ),
                        None,
                    ))
                }
                (Tok::Slash, false) => {
                    divide = true;
                    expect_operand = true;
                }
                (Tok::Star, false) => {
                    divide = false;
                    expect_operand = true;
                }
                (Tok::Number(v), true) => {
                    if divide {
                        if *v == 0.0 {
                            return Err(self.err(span.clone(), "division by zero", None));
                        }
                        factor /= v;
                    } else {
                        factor *= v;
                    }
                    expect_operand = false;
                }
                (Tok::Event(name), true) => {
                    let event = resolve(name).map_err(|e| self.event_error(span.clone(), e))?;
                    let op = Operand {
                        event,
                        span: span.clone(),
                    };
                    let slot = if divide {
                        &mut denominator
                    } else {
                        &mut numerator
                    };
                    if let Some(prev) = slot {
                        return Err(self.err(
                            span.clone(),
                            format!(
                                "a second event {} (after `{}`)",
                                if divide {
                                    "to divide by"
                                } else {
                                    "to multiply"
                                },
                                &self.text[prev.span.clone()]
                            ),
                            Some("a trigger is one event, or one event divided by another: `a/b`"),
                        ));
                    }
                    *slot = Some(op);
                    expect_operand = false;
                }
                (_, false) => {
                    return Err(self.err(
                        span.clone(),
                        "expected `/`, `*` or a comparison here",
                        None,
                    ))
                }
                (Tok::Cmp(_), true) => unreachable!("the comparison was split off"),
            }
        }
        if expect_operand {
            let span = lhs.last().map_or(0..0, |(_, s)| s.clone());
            let what = if divide {
                "`/` with no event after it: nothing to divide by"
            } else {
                "`*` with nothing after it"
            };
            return Err(self.err(
                span,
                what,
                Some("divide by an event, e.g. `context-switches/task-clock`"),
            ));
        }
        let Some(numerator) = numerator else {
            let span = lhs[0].1.start..lhs[lhs.len() - 1].1.end;
            return Err(self.err(
                span,
                "no event to measure on top",
                Some("put an event before `/`, e.g. `page-faults > 1000/s`"),
            ));
        };

        // The right side: NUMBER [/ UNIT].
        let (threshold, unit_tok) = match rhs {
            [] => {
                return Err(self.err(
                    end..end,
                    "no threshold after the comparison",
                    Some("write e.g. `> 1000/s` or `> 0.01`"),
                ))
            }
            [(Tok::Number(v), _)] => (*v, None),
            [(Tok::Number(v), _), (Tok::Slash, s)] => {
                return Err(self.err(
                    s.clone(),
                    format!("`{v}/` with no unit after it"),
                    Some("write the unit: /s, /ms, /us or /ns"),
                ))
            }
            [(Tok::Number(v), _), (Tok::Slash, _), (Tok::Event(u), s)] => {
                let Some(unit) = TimeUnit::parse(u) else {
                    return Err(self.err(
                        s.clone(),
                        format!("`{u}` is not a unit of time"),
                        Some("write the unit: /s, /ms, /us or /ns"),
                    ));
                };
                (*v, Some((unit, s.clone())))
            }
            [(Tok::Number(_), _), (_, s), ..] | [(_, s), ..] => {
                return Err(self.err(
                    s.clone(),
                    "the threshold must be a number, optionally per a unit of time",
                    Some("write e.g. `> 1000/s` or `> 0.01`"),
                ))
            }
        };

        // Does the unit fit what is measured?
        let den_is_time = denominator.as_ref().is_some_and(Operand::is_time);
        let unit = match (&denominator, unit_tok) {
            (None, Some((u, _))) => Some(u),
            (None, None) => {
                let name = &self.text[numerator.span.clone()];
                let rhs_span = rhs[0].1.clone();
                return Err(self.err(
                    rhs_span,
                    format!("`{name}` alone is a rate: the threshold needs a unit of time"),
                    Some(&format!(
                        "write `{name} > {threshold}/s` (per second of CPU time), or divide by another event for a ratio"
                    )),
                ));
            }
            (Some(_), Some((u, _))) if den_is_time => Some(u),
            (Some(d), None) if den_is_time => {
                let name = &self.text[d.span.clone()];
                return Err(self.err(
                    rhs[0].1.clone(),
                    format!("dividing by `{name}` (a time) makes a rate: the threshold needs a unit of time"),
                    Some(&format!("write e.g. `> {threshold}/ms`")),
                ));
            }
            (Some(d), Some((u, s))) => {
                let name = &self.text[d.span.clone()];
                return Err(self.err(
                    s,
                    format!(
                        "the unit `/{}` does not fit: `{name}` is a count, not a time, so the left side is a plain ratio",
                        u.as_str()
                    ),
                    Some(&format!(
                        "drop the unit (`> {threshold}`), or divide by task-clock for a rate"
                    )),
                ));
            }
            (Some(_), None) => None,
        };
        Ok(Expr {
            text: self.text.to_string(),
            numerator,
            denominator,
            factor,
            cmp,
            threshold,
            unit,
        })
    }

    /// An event's own parse error, re-raised with its place in the expression.
    fn event_error(&self, span: Range<usize>, e: Error) -> Error {
        let name = &self.text[span.clone()];
        let kind = e.kind();
        // The event parser points into the event alone; we point into the expression.
        let cause = e.cause().split(" (at byte").next().unwrap_or_default();
        let mut out = self.err(span, format!("event `{name}`: {cause}"), e.fix());
        if kind != ErrorKind::BadEvent {
            out = out.with_kind(kind);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Expr::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn rates_and_ratios_parse() {
        let e = Expr::parse("page-faults > 1000/s").unwrap();
        assert_eq!(e.measure(), Measure::Rate(TimeUnit::Second));
        assert!(e.denominator().is_none());
        assert_eq!(e.threshold(), 1000.0);

        let e = Expr::parse("context-switches/task-clock > 0.5/ms").unwrap();
        assert_eq!(e.measure(), Measure::Rate(TimeUnit::Milli));
        assert!(e.denominator().unwrap().is_time());
        assert_eq!(e.threshold(), 0.5);

        let e = Expr::parse("page-faults / context-switches * 1000 < 5").unwrap();
        assert_eq!(e.measure(), Measure::Ratio);
        assert_eq!((e.cmp(), e.factor()), (Cmp::Below, 1000.0));
        assert_eq!(e.denominator().unwrap().event.name(), "context-switches");

        let e = Expr::parse("2*{mem:0x1000/4:w}/1e3/cs>1e-3").unwrap();
        assert_eq!(e.factor(), 2e-3);
        assert_eq!(e.numerator().event.name(), "mem:0x1000/4:w");
        assert_eq!(e.numerator().span, 2..18);
        assert_eq!(e.threshold(), 1e-3);
    }

    #[test]
    fn bad_expressions_name_the_part() {
        let e = err("page-falts > 1000/s");
        assert!(
            e.contains("`page-falts`") && e.contains("page-faults"),
            "{e}"
        );
        assert!(e.contains("\n    ^^^^^^^^^^"), "{e}");

        let e = err("page-faults / > 0.5");
        assert!(e.contains("nothing to divide by"), "{e}");
        assert!(e.contains("\n                ^"), "{e}");

        let e = err("page-faults/context-switches > 0.5/ms");
        assert!(
            e.contains("`/ms` does not fit") && e.contains("a count"),
            "{e}"
        );

        let e = err("page-faults > 1000");
        assert!(
            e.contains("needs a unit of time") && e.contains("1000/s"),
            "{e}"
        );

        let e = err("cs/task-clock > 2");
        assert!(e.contains("`task-clock` (a time)"), "{e}");

        let e = err("page-faults > 1000/h");
        assert!(e.contains("`h` is not a unit of time"), "{e}");

        let e = err("page-faults 1000/s");
        assert!(e.contains("no comparison"), "{e}");

        let e = err("page-faults > 1 > 2");
        assert!(e.contains("second comparison"), "{e}");

        let e = err("page-faults >= 1/s");
        assert!(e.contains("`>=`"), "{e}");

        let e = err("page-faults > lots/s");
        assert!(e.contains("threshold must be a number"), "{e}");

        let e = err("page-faults * cs > 1");
        assert!(e.contains("second event to multiply"), "{e}");

        let e = err("1000 > 1/s");
        assert!(e.contains("no event to measure"), "{e}");

        let e = err("{page-faults > 1/s");
        assert!(e.contains("never closed"), "{e}");

        let e = err("cs / 0 > 1");
        assert!(e.contains("division by zero"), "{e}");

        for text in [
            "",
            "   >",
            "> 1",
            "/ cs > 1",
            "cs > ",
            "cs >/s",
            "cs > 1/",
            "cs ** 2 > 1/s",
        ] {
            let e = Expr::parse(text).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BadEvent, "{text:?}: {e}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Any text: never a panic; a parsed expression keeps its text and its events'
        /// spans inside it; an error shows the text it is about.
        #[test]
        fn any_text_parses_or_errs_cleanly(
            text in "[ a-z0-9:/*<>{}.e_-]{0,40}|(page-faults|cs|task-clock|[0-9.]{1,4}|[ /*<>{}]|/s|/ms){1,8}"
        ) {
            match Expr::parse_with(&text, &mut |s: &str| Event::parse_in(s, &crate::event::Sysfs::new("/nonexistent"))) {
                Ok(e) => {
                    proptest::prop_assert_eq!(e.text(), text.as_str());
                    for op in [Some(e.numerator()), e.denominator()].into_iter().flatten() {
                        proptest::prop_assert!(op.span.end <= text.len() && op.span.start < op.span.end);
                    }
                    proptest::prop_assert!(e.threshold().is_finite() && e.factor().is_finite());
                }
                Err(err) => {
                    let shown = format!("    {}", text.replace(|c: char| c.is_control(), "?"));
                    let msg = err.to_string();
                    proptest::prop_assert!(msg.contains(&shown), "{}", msg);
                }
            }
        }
    }
}
