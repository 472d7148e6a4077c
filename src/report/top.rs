//! `perf report`'s top table: each symbol's (or DSO's, command's, thread's) share of
//! an event, itself ("self") and with what it called ("children").

use std::collections::HashMap;
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

/// One row as it is summed.
#[derive(Debug)]
struct RowAcc {
    key: String,
    self_weight: u64,
    children_weight: u64,
    self_samples: u64,
    /// The last sample (by serial) that counted this row's children weight.
    last: u64,
}

/// One event's rows, each found by its name (without allocating for a row seen
/// before: the lookups borrow the frame's name).
#[derive(Debug, Default)]
struct Acc {
    samples: u64,
    total: u64,
    stacks: bool,
    rows: Vec<RowAcc>,
    user: HashMap<String, usize>,
    kernel: HashMap<String, usize>,
}

impl Acc {
    /// The row named `name` (in user or kernel space), made with `key` the first time.
    fn row(&mut self, kernel: bool, name: &str, key: impl FnOnce() -> String) -> usize {
        let map = if kernel {
            &mut self.kernel
        } else {
            &mut self.user
        };
        if let Some(&i) = map.get(name) {
            return i;
        }
        let i = self.rows.len();
        self.rows.push(RowAcc {
            key: key(),
            self_weight: 0,
            children_weight: 0,
            self_samples: 0,
            last: 0,
        });
        map.insert(name.to_string(), i);
        i
    }
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
    /// The rows of the sample being added, innermost first.
    ids: Vec<usize>,
    serial: u64,
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
            ids: Vec::new(),
            serial: 0,
            out: TopTables::default(),
        }
    }

    /// Where the tables will be.
    pub fn tables(&self) -> TopTables {
        self.out.clone()
    }
}

/// The rows of a sample's stack, innermost first: one per unwound frame (an inlined
/// function is shown as the function it was inlined into, as perf does), or the
/// thread's.
fn rows_of(sort: SortKey, acc: &mut Acc, s: &SampleRef<'_>, out: &mut Vec<usize>) {
    out.clear();
    let thread = s.thread_name.unwrap_or("[unknown]");
    match sort {
        SortKey::Comm => out.push(acc.row(false, thread, || thread.to_string())),
        SortKey::Tid => {
            let key = format!("{:>7}:{thread}", s.tid);
            out.push(acc.row(false, &key, || key.clone()));
        }
        SortKey::Symbol | SortKey::Dso => {
            if s.off_cpu {
                let marker = crate::offcpu::MARKER;
                out.push(acc.row(false, marker, || format!("[.] {marker}")));
            }
            for f in s.frames.iter().filter(|f| !f.inlined) {
                out.push(frame_row(sort, acc, f));
            }
            if out.is_empty() {
                out.push(acc.row(false, "[unknown]", || "[unknown]".to_string()));
            }
        }
    }
}

fn frame_row(sort: SortKey, acc: &mut Acc, f: &Frame) -> usize {
    if sort == SortKey::Dso {
        let name = match &f.dso {
            Some(d) => d.rsplit('/').next().unwrap_or(d),
            None => "[unknown]",
        };
        return acc.row(false, name, || name.to_string());
    }
    let level = if f.kernel { "[k]" } else { "[.]" };
    match &f.sym {
        Some(sym) => acc.row(f.kernel, sym, || format!("{level} {sym}")),
        None => {
            let addr = format!("{:#018x}", f.ip);
            acc.row(f.kernel, &addr, || format!("{level} {addr}"))
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
        let Some(acc) = self.acc.get_mut(s.event) else {
            return Ok(());
        };
        let mut ids = std::mem::take(&mut self.ids);
        rows_of(self.sort, acc, s, &mut ids);
        self.serial += 1;
        acc.samples += 1;
        acc.total += s.weight;
        acc.stacks |= s.stack.len() > 1;
        for (i, &id) in ids.iter().enumerate() {
            let row = &mut acc.rows[id];
            if i == 0 {
                row.self_weight += s.weight;
                row.self_samples += 1;
            }
            // Once per sample, however often the stack holds it (recursion).
            if row.last != self.serial {
                row.last = self.serial;
                row.children_weight += s.weight;
            }
        }
        self.ids = ids;
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
                .map(|r| Row {
                    key: r.key,
                    self_weight: r.self_weight,
                    children_weight: r.children_weight,
                    self_samples: r.self_samples,
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
