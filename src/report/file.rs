//! A `perf.data` file (`PERFILE2`) read in place: the header, the attrs and their ids,
//! the feature sections perfring uses (build ids, event names, the command line), and
//! the data section's records, decoded where they lie with [`Record::iter_large`].
//!
//! The layout, from `tools/perf/Documentation/perf.data-file-format.txt`: a 104-byte
//! header (magic, its size, the size of one attr entry, then the attrs, data and
//! unused event-types sections as offset/size pairs, then a 256-bit feature
//! bitmap); the attr entries (`perf_event_attr` + the section of its ids); the data
//! section; after it, one offset/size pair per feature bit set, in bit order, and the
//! features' contents.

use std::ops::Range;
use std::path::Path;

use zerocopy::FromZeros;

use crate::error::{Error, ErrorKind, Result};
use crate::records::{DecodeError, Layout, Record};
use crate::sampler::EventInfo;
use crate::sys;

const MAGIC: &[u8; 8] = b"PERFILE2";
const HEADER_SIZE: usize = 104;
/// Feature bits (`HEADER_*` in the format document).
const HEADER_BUILD_ID: usize = 2;
const HEADER_CMDLINE: usize = 11;
const HEADER_EVENT_DESC: usize = 12;
/// `PERF_RECORD_MISC_BUILD_ID_SIZE`: the entry carries the build id's length.
const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
/// Record types from here on are written by perf itself, not the kernel
/// (`PERF_RECORD_USER_TYPE_START`): no `sample_id` trailer.
pub const USER_TYPE_START: u32 = 64;
/// `PERF_RECORD_FINISHED_ROUND`: every record before it was handed over in one pass.
pub const FINISHED_ROUND: u32 = 68;

/// One entry of the build-id feature: a file the recording mapped and its GNU build id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildId<'a> {
    /// The process (`-1`: the host's kernel and files of no one process).
    pub pid: i32,
    /// The build id's bytes.
    pub id: &'a [u8],
    /// The file's path, as recorded.
    pub path: &'a [u8],
}

/// Where reading the data section stopped before its end, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// The file offset of the first record not read.
    pub offset: u64,
    /// What was expected there.
    pub why: String,
}

/// A perf.data file's header, events and sections, over its bytes.
#[derive(Debug)]
pub struct PerfFile<'a> {
    bytes: &'a [u8],
    events: Vec<EventInfo>,
    layouts: Vec<Layout>,
    /// Whether every event's records have one layout (one decoder for the stream).
    uniform: bool,
    /// (id, event index), sorted by id.
    ids: Vec<(u64, usize)>,
    /// The data section's bytes present in the file.
    data: Range<usize>,
    /// What the header says the data section is.
    declared: Range<u64>,
    features: [u64; 4],
    build_ids: Vec<BuildId<'a>>,
    cmdline: Vec<String>,
    notes: Vec<String>,
}

/// The error for a file that is not what it should be at `offset`.
fn bad(what: &str, offset: usize, why: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::Decode,
        format!("read {what}"),
        format!("at offset {offset:#x}: {}", why.into()),
    )
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)
        .map(|w| u32::from_ne_bytes(w.try_into().expect("4 bytes")))
}

/// Reads a whole file for [`PerfFile::parse`].
///
/// The file is read, not mapped: `perf record` truncates and rewrites `perf.data` in
/// place, and a mapping of a file that shrinks faults (`SIGBUS`) where a read only
/// comes back short.
///
/// # Errors
/// [`ErrorKind::Io`] or [`ErrorKind::NotFound`] naming the file.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::from_errno(format!("read {}", path.display()), e)
            .with_fix("give the path of a perf.data file (perf record -o, perfring record -o)")
    })
}

impl<'a> PerfFile<'a> {
    /// Parses the header, attrs, ids and features of the perf.data in `bytes` (`name`
    /// is for messages). A data section cut short by the file's end is read as far as
    /// it goes (see [`notes`](Self::notes)); a header, attr or id section that is not
    /// whole is an error.
    ///
    /// # Errors
    /// [`ErrorKind::Decode`] naming the offset and what was expected there: not a
    /// perf.data, one of the other byte order, one written to a pipe, attrs or ids
    /// beyond the file's end, an attr whose records this decoder cannot lay out.
    pub fn parse(bytes: &'a [u8], name: &str) -> Result<PerfFile<'a>> {
        let what = format!("{name} as perf.data");
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            let why = if bytes.len() >= 8 && bytes[..8].iter().rev().eq(MAGIC.iter()) {
                "its magic is PERFILE2 byte-swapped: it was written on a machine of the \
                 other byte order, which this reader does not convert"
            } else {
                "expected the magic PERFILE2 (the file is not a perf.data)"
            };
            return Err(bad(&what, 0, why));
        }
        let word = |at: usize| {
            u64_at(bytes, at).ok_or_else(|| {
                bad(
                    &what,
                    at,
                    format!(
                        "expected the {HEADER_SIZE}-byte header, the file has {} bytes",
                        bytes.len()
                    ),
                )
            })
        };
        let header_size = word(8)? as usize;
        if header_size != HEADER_SIZE {
            let why = if header_size == 16 {
                "a perf.data written to a pipe (perf record -o -), which has no attr or \
                 data sections: record to a file instead"
                    .to_string()
            } else {
                format!("expected a header size of {HEADER_SIZE}, found {header_size}")
            };
            return Err(bad(&what, 8, why));
        }
        let attr_entry = word(16)? as usize;
        let (attrs_at, attrs_size) = (word(24)? as usize, word(32)? as usize);
        let (data_at, data_size) = (word(40)?, word(48)?);
        let mut features = [0u64; 4];
        for (i, f) in features.iter_mut().enumerate() {
            *f = word(72 + 8 * i)?;
        }
        if attr_entry < 64 + 16 || !attr_entry.is_multiple_of(8) {
            return Err(bad(
                &what,
                16,
                format!("expected an attr entry of at least 80 bytes, a multiple of 8, found {attr_entry}"),
            ));
        }
        if !attrs_size.is_multiple_of(attr_entry) || attrs_size == 0 {
            return Err(bad(
                &what,
                32,
                format!("expected an attr section of whole {attr_entry}-byte entries, found {attrs_size} bytes"),
            ));
        }
        let attrs = bytes
            .get(attrs_at..attrs_at.saturating_add(attrs_size))
            .ok_or_else(|| {
                bad(
                    &what,
                    attrs_at,
                    format!(
                        "expected {attrs_size} bytes of attrs, the file ends at {:#x}",
                        bytes.len()
                    ),
                )
            })?;
        let mut notes = Vec::new();
        let mut file = PerfFile {
            bytes,
            events: Vec::new(),
            layouts: Vec::new(),
            uniform: true,
            ids: Vec::new(),
            data: 0..0,
            declared: data_at..data_at.saturating_add(data_size),
            features,
            build_ids: Vec::new(),
            cmdline: Vec::new(),
            notes: Vec::new(),
        };
        let names = file.event_names(&what);
        for (i, entry) in attrs.chunks_exact(attr_entry).enumerate() {
            let at = attrs_at + i * attr_entry;
            let attr_len = attr_entry - 16;
            let mut attr = sys::perf_event_attr::new_zeroed();
            let n = attr_len.min(std::mem::size_of::<sys::perf_event_attr>());
            zerocopy::IntoBytes::as_mut_bytes(&mut attr)[..n].copy_from_slice(&entry[..n]);
            let (ids_at, ids_size) = (
                u64_at(entry, attr_len).unwrap_or(0) as usize,
                u64_at(entry, attr_len + 8).unwrap_or(0) as usize,
            );
            let ids_bytes = bytes
                .get(ids_at..ids_at.saturating_add(ids_size))
                .filter(|b| b.len().is_multiple_of(8))
                .ok_or_else(|| {
                    bad(
                        &what,
                        at + attr_len,
                        format!(
                            "expected the ids of event {i} ({ids_size} bytes at {ids_at:#x}) within the file's {} bytes",
                            bytes.len()
                        ),
                    )
                })?;
            let ids: Vec<u64> = ids_bytes
                .chunks_exact(8)
                .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                .collect();
            let name = names.get(i).cloned().unwrap_or_else(|| {
                format!("event {i} (type {}, config {:#x})", attr.type_, attr.config)
            });
            let info = EventInfo::new(&name, attr, ids.clone())
                .map_err(|e| bad(&what, at, format!("the attr of {name}: {e}")))?;
            for id in ids {
                file.ids.push((id, i));
            }
            file.layouts.push(*info.layout());
            file.events.push(info);
        }
        file.ids.sort_unstable();
        file.uniform = file.layouts.windows(2).all(|w| w[0] == w[1]);
        if !file.uniform
            && !file
                .layouts
                .iter()
                .all(|l| l.sample_type() & u64::from(sys::PERF_SAMPLE_IDENTIFIER) != 0)
        {
            return Err(bad(
                &what,
                attrs_at,
                "its events lay out their records differently and not every one carries \
                 PERF_SAMPLE_IDENTIFIER, so a record's event cannot be told",
            ));
        }
        // The data section: what the header says, as far as the file goes.
        let start = usize::try_from(data_at).unwrap_or(usize::MAX);
        if start > bytes.len() {
            return Err(bad(
                &what,
                40,
                format!(
                    "expected the data section at {data_at:#x}, the file ends at {:#x}",
                    bytes.len()
                ),
            ));
        }
        let mut end = usize::try_from(file.declared.end).unwrap_or(usize::MAX);
        if data_size == 0 {
            // `perf record` killed before it wrote the size: the records run to the end.
            notes.push(format!(
                "the header's data size is 0 (the recorder did not finish): reading records from {data_at:#x} to the end of the file"
            ));
            end = bytes.len();
        } else if end > bytes.len() {
            notes.push(format!(
                "the file is truncated: it ends at {:#x}, inside the data section, which the header says runs from {data_at:#x} to {:#x}",
                bytes.len(),
                file.declared.end
            ));
            end = bytes.len();
        }
        file.data = start..end;
        if data_size != 0 {
            file.read_features(&what, &mut notes);
        }
        file.notes = notes;
        Ok(file)
    }

    /// The events (their names from the event-description feature when present).
    pub fn events(&self) -> &[EventInfo] {
        &self.events
    }

    /// The recording's command line (the `CMDLINE` feature), if stored.
    pub fn cmdline(&self) -> &[String] {
        &self.cmdline
    }

    /// The build-id feature's entries.
    pub fn build_ids(&self) -> &[BuildId<'a>] {
        &self.build_ids
    }

    /// The data section as the header gives it (offset range in the file).
    pub fn declared_data(&self) -> Range<u64> {
        self.declared.clone()
    }

    /// The data section's bytes present in the file (offset range).
    pub fn data_range(&self) -> Range<usize> {
        self.data.clone()
    }

    /// What the reader had to assume (a truncated file, a missing data size, feature
    /// sections beyond the file's end), for the user to be told.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The index of the event whose counter had kernel id `id`.
    pub fn event_of_id(&self, id: u64) -> Option<usize> {
        self.ids
            .binary_search_by_key(&id, |&(i, _)| i)
            .ok()
            .map(|at| self.ids[at].1)
    }

    /// Whether feature `bit` is set.
    fn has_feature(&self, bit: usize) -> bool {
        self.features[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Feature `bit`'s bytes, if it is set and within the file.
    fn feature(&self, bit: usize) -> Option<&'a [u8]> {
        if !self.has_feature(bit) {
            return None;
        }
        // Sections follow the data, one per bit set below and at `bit`, in order.
        let index = (0..bit).filter(|&b| self.has_feature(b)).count();
        let table = usize::try_from(self.declared.end).ok()?;
        let at = table + 16 * index;
        let (off, size) = (
            u64_at(self.bytes, at)? as usize,
            u64_at(self.bytes, at + 8)? as usize,
        );
        self.bytes.get(off..off.checked_add(size)?)
    }

    /// The names in the event-description feature, in attr order (empty without it).
    fn event_names(&self, _what: &str) -> Vec<String> {
        // Read before the events: only the feature table is needed.
        let Some(b) = self.feature(HEADER_EVENT_DESC) else {
            return Vec::new();
        };
        let (Some(nr), Some(attr_size)) = (u32_at(b, 0), u32_at(b, 4)) else {
            return Vec::new();
        };
        let mut at = 8usize;
        let mut names = Vec::new();
        for _ in 0..nr {
            at += attr_size as usize;
            let Some(nr_ids) = u32_at(b, at) else { break };
            let Some(len) = u32_at(b, at + 4) else { break };
            let Some(s) = b.get(at + 8..at + 8 + len as usize) else {
                break;
            };
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            names.push(String::from_utf8_lossy(&s[..end]).into_owned());
            at += 8 + len as usize + 8 * nr_ids as usize;
        }
        names
    }

    fn read_features(&mut self, _what: &str, notes: &mut Vec<String>) {
        let set = (0..256).filter(|&b| self.has_feature(b)).count();
        let table_end = self.declared.end.saturating_add(16 * set as u64);
        if set > 0 && table_end > self.bytes.len() as u64 {
            notes.push(format!(
                "the feature sections' table ({set} entries at {:#x}) is beyond the end of the file ({:#x}): no build ids or event names",
                self.declared.end,
                self.bytes.len()
            ));
            return;
        }
        if let Some(b) = self.feature(HEADER_BUILD_ID) {
            self.build_ids = parse_build_ids(b);
        }
        if let Some(b) = self.feature(HEADER_CMDLINE) {
            let nr = u32_at(b, 0).unwrap_or(0);
            let mut at = 4usize;
            for _ in 0..nr {
                let Some(len) = u32_at(b, at) else { break };
                let Some(s) = b.get(at + 4..at + 4 + len as usize) else {
                    break;
                };
                let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
                self.cmdline
                    .push(String::from_utf8_lossy(&s[..end]).into_owned());
                at += 4 + len as usize;
            }
        }
    }

    /// The records of the data section, each with its event's index (`None` for
    /// perf's own records, type 64 and up, such as `FINISHED_ROUND`), decoded in place,
    /// ending at the first record that cannot be decoded (its offset and why are then
    /// in [`FileRecords::stopped`]).
    pub fn records(&self) -> FileRecords<'_> {
        let data = &self.bytes[self.data.clone()];
        FileRecords {
            file: self,
            base: self.data.start,
            data,
            walk: if self.uniform {
                Walk::Uniform(Record::iter_large(data, &self.layouts[0]))
            } else {
                Walk::ById(0)
            },
            read: 0,
            records: 0,
            stopped: None,
        }
    }

    /// The event of a record decoded with the first event's layout (a uniform file).
    fn event_of(&self, record: &Record<'_>) -> Option<usize> {
        if record.record_type() >= USER_TYPE_START {
            return None;
        }
        if self.events.len() == 1 {
            return Some(0);
        }
        let id = match record.as_sample() {
            Some(s) => s.identifier().or(s.id()),
            None => {
                let sid = record.sample_id();
                sid.identifier().or(sid.id())
            }
        };
        // A record without an id (sample_id_all off) belongs to the first event.
        Some(id.and_then(|id| self.event_of_id(id)).unwrap_or(0))
    }
}

/// The build-id feature: `build_id_event`s back to back.
fn parse_build_ids(b: &[u8]) -> Vec<BuildId<'_>> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let (Some(misc), Some(size)) = (
        b.get(at + 4..at + 6)
            .map(|w| u16::from_ne_bytes([w[0], w[1]])),
        b.get(at + 6..at + 8)
            .map(|w| usize::from(u16::from_ne_bytes([w[0], w[1]]))),
    ) {
        if size < 8 + 4 + 24 || at + size > b.len() {
            break;
        }
        let e = &b[at..at + size];
        let pid = i32::from_ne_bytes(e[8..12].try_into().expect("4 bytes"));
        let raw = &e[12..36];
        let len = if misc & MISC_BUILD_ID_SIZE != 0 {
            usize::from(raw[20]).min(20)
        } else {
            20
        };
        let name = &e[36..];
        let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        out.push(BuildId {
            pid,
            id: &raw[..len],
            path: &name[..end],
        });
        at += size;
    }
    out
}

enum Walk<'f> {
    /// One layout for every record: the stream decoder.
    Uniform(crate::records::Records<'f, true>),
    /// Events of several layouts: each record's by its identifier; the offset reached.
    ById(usize),
}

/// The records of a [`PerfFile`]'s data section; see [`PerfFile::records`].
pub struct FileRecords<'f> {
    file: &'f PerfFile<'f>,
    base: usize,
    data: &'f [u8],
    walk: Walk<'f>,
    read: usize,
    records: u64,
    stopped: Option<Stopped>,
}

impl std::fmt::Debug for FileRecords<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRecords")
            .field("read", &self.read)
            .field("records", &self.records)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl<'f> FileRecords<'f> {
    /// Records read so far.
    pub fn records_read(&self) -> u64 {
        self.records
    }

    /// The file offset up to which records were read.
    pub fn offset(&self) -> u64 {
        (self.base + self.read) as u64
    }

    /// Where and why reading stopped early, if it did.
    pub fn stopped(&self) -> Option<&Stopped> {
        self.stopped.as_ref()
    }

    fn stop(&mut self, e: DecodeError) {
        let offset = self.offset();
        let left = self.data.len() - self.read.min(self.data.len());
        let clipped = self.data.len() < self.declared_len();
        let why = if clipped && e.kind() == crate::records::DecodeErrorKind::ShortSlice {
            format!("the file ends {left} bytes into a record that needs more ({e})")
        } else if clipped && left < 8 {
            format!("the file ends {left} bytes into a record header")
        } else {
            format!("expected a record: {e}")
        };
        self.stopped = Some(Stopped { offset, why });
    }

    fn declared_len(&self) -> usize {
        let d = self.file.declared_data();
        usize::try_from(d.end - d.start).unwrap_or(usize::MAX)
    }
}

impl<'f> Iterator for FileRecords<'f> {
    type Item = (Option<usize>, Record<'f>);

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.walk {
            Walk::Uniform(it) => match it.next()? {
                Ok(r) => {
                    self.read += r.size();
                    self.records += 1;
                    Some((self.file.event_of(&r), r))
                }
                Err(e) => {
                    self.stop(e);
                    None
                }
            },
            Walk::ById(at) => {
                let rest = self.data.get(*at..)?;
                if rest.is_empty() {
                    return None;
                }
                let layout_of = |rest: &[u8]| -> Option<usize> {
                    let ty = u32_at(rest, 0)?;
                    if ty >= USER_TYPE_START {
                        return None;
                    }
                    let size = usize::from(u16::from_ne_bytes(rest.get(6..8)?.try_into().ok()?));
                    // IDENTIFIER: right after a sample's header, last in other records.
                    let id = if ty == sys::PERF_RECORD_SAMPLE {
                        u64_at(rest, 8)?
                    } else {
                        u64_at(rest, size.checked_sub(8)?)?
                    };
                    Some(self.file.event_of_id(id).unwrap_or(0))
                };
                let event = layout_of(rest);
                let layout = &self.file.layouts[event.unwrap_or(0)];
                match Record::parse(rest, layout) {
                    Ok(r) => {
                        *at += r.size();
                        self.read = *at;
                        self.records += 1;
                        Some((event, r))
                    }
                    Err(e) => {
                        self.walk = Walk::ById(self.data.len());
                        self.stop(e);
                        None
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::PerfData;
    use crate::records::{encode, RecordKind};

    fn event(name: &str, sample_type: u32, id: u64) -> EventInfo {
        let mut attr = *crate::Counter::builder("cpu-clock").unwrap().attr();
        attr.sample_type = u64::from(sample_type);
        attr.set_sample_id_all(1);
        EventInfo::new(name, attr, vec![id]).unwrap()
    }

    fn sample(e: &EventInfo, ip: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let id = e.ids()[0];
        let f = encode::SampleFields {
            identifier: id,
            id,
            ip,
            tid: 7,
            pid: 7,
            ..Default::default()
        };
        encode::sample(&mut out, e.layout(), sys::PERF_RECORD_MISC_USER as u16, &f);
        out
    }

    /// A finished perf.data of `events` with `records`, its bytes.
    fn file(name: &str, events: &[EventInfo], records: &[u8]) -> Vec<u8> {
        let dir =
            std::env::temp_dir().join(format!("perfring-report-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf.data");
        let mut w = PerfData::create(&path, events, &["prog".into(), "arg".into()]).unwrap();
        w.write_records(records).unwrap();
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        bytes
    }

    fn ips(f: &PerfFile<'_>) -> Vec<(Option<usize>, u64)> {
        f.records()
            .filter_map(|(e, r)| match r.kind() {
                RecordKind::Sample(s) => Some((e, s.ip()?)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn events_names_ids_and_records_come_back() {
        let st = sys::PERF_SAMPLE_IP | sys::PERF_SAMPLE_TID;
        let e = [event("cpu-clock", st, 11)];
        let bytes = file("one", &e, &[sample(&e[0], 1), sample(&e[0], 2)].concat());
        let f = PerfFile::parse(&bytes, "t").unwrap();
        assert_eq!(f.events().len(), 1);
        assert_eq!(f.events()[0].name(), "cpu-clock");
        assert_eq!(f.events()[0].ids(), [11]);
        assert_eq!(f.cmdline(), ["prog", "arg"]);
        assert!(f.notes().is_empty(), "{:?}", f.notes());
        assert_eq!(ips(&f), [(Some(0), 1), (Some(0), 2)]);
        let mut r = f.records();
        assert_eq!(r.by_ref().count(), 2);
        assert!(r.stopped().is_none());
        assert_eq!(r.offset(), f.declared_data().end);
    }

    #[test]
    fn events_of_different_layouts_are_told_apart_by_identifier() {
        let a = event("a", sys::PERF_SAMPLE_IDENTIFIER | sys::PERF_SAMPLE_IP, 5);
        let b = event(
            "b",
            sys::PERF_SAMPLE_IDENTIFIER | sys::PERF_SAMPLE_IP | sys::PERF_SAMPLE_TID,
            6,
        );
        let bytes = file(
            "two",
            &[a.clone(), b.clone()],
            &[sample(&a, 1), sample(&b, 2), sample(&a, 3)].concat(),
        );
        let f = PerfFile::parse(&bytes, "t").unwrap();
        assert_eq!(ips(&f), [(Some(0), 1), (Some(1), 2), (Some(0), 3)]);
    }

    #[test]
    fn a_cut_file_is_read_to_its_last_whole_record_and_bad_ones_name_the_offset() {
        let st = sys::PERF_SAMPLE_IP | sys::PERF_SAMPLE_TID;
        let e = [event("cpu-clock", st, 11)];
        let one = sample(&e[0], 1);
        let bytes = file("cut", &e, &[one.clone(), one.clone(), one.clone()].concat());
        let f = PerfFile::parse(&bytes, "t").unwrap();
        let start = f.data_range().start;
        let cut = &bytes[..start + 2 * one.len() + 5];
        let f = PerfFile::parse(cut, "t").unwrap();
        assert!(f.notes()[0].contains("truncated"), "{:?}", f.notes());
        let mut r = f.records();
        assert_eq!(r.by_ref().count(), 2);
        let stop = r.stopped().expect("stopped");
        assert_eq!(stop.offset, (start + 2 * one.len()) as u64);
        assert!(
            stop.why.contains("the file ends 5 bytes into a record"),
            "{}",
            stop.why
        );

        let e = PerfFile::parse(b"PERFILE2", "t").unwrap_err().to_string();
        assert!(
            e.contains("offset 0x8") && e.contains("104-byte header"),
            "{e}"
        );
        let e = PerfFile::parse(b"2ELIFREP and more", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("byte order"), "{e}");
        let mut pipe = b"PERFILE2".to_vec();
        pipe.extend_from_slice(&16u64.to_ne_bytes());
        let e = PerfFile::parse(&pipe, "t").unwrap_err().to_string();
        assert!(e.contains("pipe"), "{e}");
        let e = PerfFile::parse(&bytes[..start - 8], "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("the file's") || e.contains("ends at"), "{e}");
    }
}
