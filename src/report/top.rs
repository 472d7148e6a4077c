//! `perf report`'s top table: each symbol's (or DSO's, command's, thread's) share of
//! an event, itself ("self") and with what it called ("children").

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::output::{Output, Recording, SampleRef};
use crate::symbolize::Frame;

/// What the table's rows are (perf report's `--sort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortKey {
    /// The function: `[.] name` in user space, `[k] name` in the kernel.
    #[default]
    Symbol,
    /// The file mapped (`libc.so.6`, `[kernel.kallsyms]`).
    Dso,
    /// The thread's name.
    Comm,
    /// The thread: `tid:name`.
    Tid,
}

impl std::str::FromStr for SortKey {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<SortKey> {
        Ok(match s {
            "symbol" | "sym" => SortKey::Symbol,
            "dso" => SortKey::Dso,
            "comm" => SortKey::Comm,
            "tid" | "pid" => SortKey::Tid,
            other => {
                return Err(crate::Error::new(
                    crate::ErrorKind::InvalidArgument,
                    format!("sort by {other:?}"),
                    "not a sort key",
                )
                .with_fix("sort by symbol, dso, comm or tid"))
            }
        })
    }
}

/// One row: a key and its weights (in the event's unit: periods, nanoseconds for a
/// clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The key, as `perf report` prints it.
    pub key: String,
    /// Samples whose innermost frame is this key, weighted.
    pub self_weight: u64,
    /// Samples with this key anywhere in their stack (each counted once), weighted.
    pub children_weight: u64,
    /// Samples whose innermost frame is this key.
    pub self_samples: u64,
}

/// One event's table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopTable {
    /// The event's name.
    pub event: String,
    /// Samples of the event.
    pub samples: u64,
    /// Their total weight (perf's "Event count").
    pub total: u64,
    /// Rows, heaviest first: by children weight if `children`, else by self weight;
    /// ties by key.
    pub rows: Vec<Row>,
    /// Whether the samples had stacks (children weights mean something).
    pub has_stacks: bool,
}

/// The tables of a [`Top`] once its pipeline finished.
#[derive(Debug, Clone, Default)]
pub struct TopTables(Arc<Mutex<Vec<TopTable>>>);

impl TopTables {
    /// One table per event that had samples, in event order.
    pub fn take(&self) -> Vec<TopTable> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[derive(Debug, Default)]
struct Acc {
    samples: u64,
    total: u64,
    stacks: bool,
    rows: HashMap<String, (u64, u64, u64)>,
}

/// An [`Output`] that builds [`TopTable`]s: add it to a
/// [`Pipeline`](crate::pipeline::Pipeline), and read the tables from
/// [`tables`](Self::tables) after the pipeline finished.
#[derive(Debug)]
pub struct Top {
    sort: SortKey,
    children: bool,
    names: Vec<String>,
    acc: Vec<Acc>,
    keys: Vec<String>,
    seen: HashSet<String>,
    out: TopTables,
}

impl Top {
    /// A table sorted by `sort`, ordered by children weight when `children` (perf
    /// report's default for recordings with stacks), else by self weight.
    pub fn new(sort: SortKey, children: bool) -> Top {
        Top {
            sort,
            children,
            names: Vec::new(),
            acc: Vec::new(),
            keys: Vec::new(),
            seen: HashSet::new(),
            out: TopTables::default(),
        }
    }

    /// Where the tables will be.
    pub fn tables(&self) -> TopTables {
        self.out.clone()
    }

    /// The keys of a sample's stack, innermost first (one per unwound frame: an
    /// inlined function is shown as the function it was inlined into, as perf does).
    fn keys_of(&self, s: &SampleRef<'_>, out: &mut Vec<String>) {
        out.clear();
        match self.sort {
            SortKey::Comm => out.push(s.thread_name.unwrap_or("[unknown]").to_string()),
            SortKey::Tid => out.push(format!(
                "{:>7}:{}",
                s.tid,
                s.thread_name.unwrap_or("[unknown]")
            )),
            SortKey::Symbol | SortKey::Dso => {
                for f in s.frames.iter().filter(|f| !f.inlined) {
                    out.push(self.frame_key(f));
                }
                if s.off_cpu {
                    out.insert(0, format!("[.] {}", crate::offcpu::MARKER));
                }
                if out.is_empty() {
                    out.push("[unknown]".to_string());
                }
            }
        }
    }

    fn frame_key(&self, f: &Frame) -> String {
        match self.sort {
            SortKey::Dso => match &f.dso {
                Some(d) => d.rsplit('/').next().unwrap_or(d).to_string(),
                None => "[unknown]".to_string(),
            },
            _ => {
                let level = if f.kernel { "[k]" } else { "[.]" };
                match &f.sym {
                    Some(s) => format!("{level} {s}"),
                    None => format!("{level} {:#018x}", f.ip),
                }
            }
        }
    }
}

impl Output for Top {
    fn start(&mut self, rec: &Recording<'_>) -> Result<()> {
        self.names = rec.events.iter().map(|e| e.name().to_string()).collect();
        self.acc = rec.events.iter().map(|_| Acc::default()).collect();
        Ok(())
    }

    fn wants_names(&self) -> bool {
        true
    }

    fn sample(&mut self, s: &SampleRef<'_>) -> Result<()> {
        let mut keys = std::mem::take(&mut self.keys);
        self.keys_of(s, &mut keys);
        let Some(acc) = self.acc.get_mut(s.event) else {
            self.keys = keys;
            return Ok(());
        };
        acc.samples += 1;
        acc.total += s.weight;
        acc.stacks |= s.stack.len() > 1;
        self.seen.clear();
        for (i, k) in keys.iter().enumerate() {
            let first = self.seen.insert(k.clone());
            let row = match acc.rows.get_mut(k) {
                Some(r) => r,
                None => acc.rows.entry(k.clone()).or_default(),
            };
            if i == 0 {
                row.0 += s.weight;
                row.2 += 1;
            }
            if first {
                row.1 += s.weight;
            }
        }
        self.keys = keys;
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        let mut tables = Vec::new();
        for (name, acc) in self.names.iter().zip(std::mem::take(&mut self.acc)) {
            if acc.samples == 0 {
                continue;
            }
            let mut rows: Vec<Row> = acc
                .rows
                .into_iter()
                .map(|(key, (s, c, n))| Row {
                    key,
                    self_weight: s,
                    children_weight: c,
                    self_samples: n,
                })
                .collect();
            let children = self.children && acc.stacks;
            rows.sort_by(|a, b| {
                let (x, y) = if children {
                    (
                        (b.children_weight, b.self_weight),
                        (a.children_weight, a.self_weight),
                    )
                } else {
                    ((b.self_weight, 0), (a.self_weight, 0))
                };
                x.cmp(&y).then_with(|| a.key.cmp(&b.key))
            });
            if !children {
                rows.retain(|r| r.self_weight > 0);
            }
            tables.push(TopTable {
                event: name.clone(),
                samples: acc.samples,
                total: acc.total,
                rows,
                has_stacks: acc.stacks,
            });
        }
        *self.out.0.lock().unwrap_or_else(|e| e.into_inner()) = tables;
        Ok(())
    }
}
