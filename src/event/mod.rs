//! TEMPORARY stand-in for the event module being written on branch `events`.
#![allow(missing_docs)]
use crate::{sys, Error, ErrorKind, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    name: String,
    type_: u32,
    config: u64,
    bp: Option<(u32, u64, u64)>,
}

impl Event {
    pub fn parse(s: &str) -> Result<Event> {
        let (type_, config) = match s {
            "cpu-clock" => (sys::PERF_TYPE_SOFTWARE, sys::PERF_COUNT_SW_CPU_CLOCK as u64),
            "task-clock" => (
                sys::PERF_TYPE_SOFTWARE,
                sys::PERF_COUNT_SW_TASK_CLOCK as u64,
            ),
            "page-faults" => (
                sys::PERF_TYPE_SOFTWARE,
                sys::PERF_COUNT_SW_PAGE_FAULTS as u64,
            ),
            "dummy" => (sys::PERF_TYPE_SOFTWARE, sys::PERF_COUNT_SW_DUMMY as u64),
            "cycles" => (
                sys::PERF_TYPE_HARDWARE,
                sys::PERF_COUNT_HW_CPU_CYCLES as u64,
            ),
            "instructions" => (
                sys::PERF_TYPE_HARDWARE,
                sys::PERF_COUNT_HW_INSTRUCTIONS as u64,
            ),
            _ => {
                return Err(Error::new(
                    ErrorKind::BadEvent,
                    format!("parse event '{s}'"),
                    "unknown",
                ))
            }
        };
        Ok(Event {
            name: s.into(),
            type_,
            config,
            bp: None,
        })
    }
    pub fn breakpoint_x(addr: u64) -> Event {
        Event {
            name: format!("mem:{addr:#x}:x"),
            type_: sys::PERF_TYPE_BREAKPOINT,
            config: 0,
            bp: Some((sys::HW_BREAKPOINT_X, addr, 8)),
        }
    }
    pub fn breakpoint_w(addr: u64, len: u64) -> Event {
        Event {
            name: format!("mem:{addr:#x}/{len}:w"),
            type_: sys::PERF_TYPE_BREAKPOINT,
            config: 0,
            bp: Some((sys::HW_BREAKPOINT_W, addr, len)),
        }
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn is_hardware(&self) -> bool {
        self.type_ == sys::PERF_TYPE_HARDWARE
    }
    pub fn apply(&self, attr: &mut sys::perf_event_attr) {
        attr.type_ = self.type_;
        attr.config = self.config;
        if let Some((t, a, l)) = self.bp {
            attr.bp_type = t;
            attr.__bindgen_anon_3.bp_addr = a;
            attr.__bindgen_anon_4.bp_len = l;
        }
    }
}
