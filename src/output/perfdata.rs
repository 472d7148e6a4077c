//! `perf.data` (the `PERFILE2` format) written from the ring's records as they are.
//!
//! The file, in order: the 104-byte header; each event's id array; the attr section
//! (`attr` + the section of its ids, per event); the data section (the records); at
//! the end, the feature sections' table and contents. References:
//! `tools/perf/Documentation/perf.data-file-format.txt` in the kernel tree, and what
//! `perf report --header-only` and `perf report -D` show for a file `perf record`
//! wrote.
//!
//! A recording cut short stays readable: the header and attrs are written first, and
//! the header's data size is brought up to date after every chunk (perf reads nothing
//! from a file whose data size is 0). Feature sections only come at
//! [`finish`](PerfData::finish), since they follow the data.
//!
//! To a pipe ([`PerfData::pipe`], `perf record -o -`), perf's pipe format: a 16-byte
//! header (magic, size 16), the feature sections perf synthesizes for a pipe as
//! `PERF_RECORD_HEADER_FEATURE` records, each event's attr and ids as a
//! `PERF_RECORD_HEADER_ATTR`, then the records; nothing is rewritten, so `perf report
//! -i -` and `perf script -i -` read it as it streams.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use zerocopy::IntoBytes;

use super::EventInfo;
use crate::error::{Error, ErrorKind, Result};
use crate::records::{encode, Layout};
use crate::stream::{whole_records, Chunk, Sink};
use crate::sys;

/// `PERFILE2`, read as a native-endian u64 (tells readers the byte order).
const MAGIC: &[u8; 8] = b"PERFILE2";
/// `sizeof(struct perf_file_header)`: magic, size, attr_size, three sections, 4 flag words.
const HEADER_SIZE: u64 = 8 + 8 + 8 + 3 * 16 + 4 * 8;
/// Where `header.data.size` sits: after magic, size, attr_size, attrs, data.offset.
const DATA_SIZE_AT: u64 = 8 + 8 + 8 + 16 + 8;
/// Where the feature bitmap sits.
const FLAGS_AT: u64 = 8 + 8 + 8 + 3 * 16;
/// `PERF_ATTR_SIZE_VER0`: the smallest attr a reader accepts.
const ATTR_SIZE_VER0: usize = 64;

// Feature bits (`HEADER_*` in the format document).
const HEADER_BUILD_ID: u32 = 2;
const HEADER_HOSTNAME: u32 = 3;
const HEADER_OSRELEASE: u32 = 4;
const HEADER_VERSION: u32 = 5;
const HEADER_ARCH: u32 = 6;
const HEADER_NRCPUS: u32 = 7;
const HEADER_TOTAL_MEM: u32 = 10;
const HEADER_CMDLINE: u32 = 11;
const HEADER_EVENT_DESC: u32 = 12;

/// `PERF_RECORD_HEADER_ATTR`: an event's attr and ids, in the pipe format.
const RECORD_HEADER_ATTR: u32 = 64;
/// `PERF_RECORD_HEADER_FEATURE`: a feature section, in the pipe format.
const RECORD_HEADER_FEATURE: u32 = 80;
/// `PERF_RECORD_EVENT_UPDATE`: more about an event (its name, in the pipe format).
const RECORD_EVENT_UPDATE: u32 = 78;
/// `PERF_EVENT_UPDATE__NAME`: an event update carrying the event's name.
const EVENT_UPDATE_NAME: u64 = 2;
/// `sizeof(struct perf_pipe_file_header)`: magic and size.
const PIPE_HEADER_SIZE: u64 = 16;

/// `PERF_RECORD_HEADER_BUILD_ID`: the record type of a build-id feature entry.
const RECORD_HEADER_BUILD_ID: u32 = 67;
/// `PERF_RECORD_MISC_BUILD_ID_SIZE`: the entry carries the build id's length.
const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
/// Strings in feature sections are padded to this (perf's `NAME_ALIGN`).
const NAME_ALIGN: usize = 64;

/// A `perf.data` file being written: a [`Sink`] for a [`Streamer`](super::Streamer),
/// or used directly.
///
/// # Examples
/// ```no_run
/// use perfring::output::{EventInfo, PerfData};
/// # let attr: perfring::sys::perf_event_attr = unimplemented!();
/// let events = [EventInfo::new("cpu-clock", attr, vec![42])?];
/// let mut out = PerfData::create("perf.data", &events, &[])?;
/// # let record: &[u8] = &[];
/// out.write_records(record)?; // whole records, as the ring holds them
/// out.finish()?;
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug)]
pub struct PerfData {
    file: File,
    path: PathBuf,
    events: Vec<EventInfo>,
    layouts: Vec<Layout>,
    cmdline: Vec<String>,
    attr_size: usize,
    data_offset: u64,
    /// Bytes of whole records written to the data section.
    data_size: u64,
    /// Executable files mapped by user space (from MMAP/MMAP2 records): (name, build
    /// id) → where the bytes were read (a container's file, through its root), for the
    /// `BUILD_ID` feature and perf's build-id cache.
    mapped: BTreeMap<(Vec<u8>, Vec<u8>), std::sync::Arc<Path>>,
    /// Build ids already read, by where the bytes are.
    ids: std::collections::HashMap<std::sync::Arc<Path>, Option<Vec<u8>>>,
    records: u64,
    lost: u64,
    finished: bool,
    /// Whether the header and attrs were written (an [`open`](PerfData::open)ed file
    /// waits for [`Output::start`]).
    started: bool,
    /// Made by [`resume_output`](PerfData::resume_output): `start` goes on after the
    /// records already there.
    resuming: bool,
    /// As an [`Output`]: records encoded since the last write, and per event whether its
    /// samples are re-encoded with the unwound chain (frame-pointer mode, see
    /// [`Output`'s impl](#impl-Output-for-PerfData)).
    pending: Vec<u8>,
    rechain: Vec<bool>,
    scratch: Vec<u64>,
    /// perf's pipe format, written in order ([`pipe`](PerfData::pipe)).
    pipe: bool,
}

impl PerfData {
    /// Creates (truncates) `path` and writes the header and attrs.
    ///
    /// `cmdline` is stored in the `CMDLINE` feature (what `perf report --header`
    /// shows as the command that recorded).
    ///
    /// # Errors
    /// - [`ErrorKind::InvalidArgument`] for no events, or an attr whose `sample_type`
    ///   the decoder does not know.
    /// - [`ErrorKind::Io`] if the file cannot be created or written, naming it.
    pub fn create(
        path: impl AsRef<Path>,
        events: &[EventInfo],
        cmdline: &[String],
    ) -> Result<PerfData> {
        let mut w = PerfData::open(path)?;
        w.begin(events, cmdline)?;
        Ok(w)
    }

    /// Creates (truncates) `path`, mode 0600 ([`create_private`](super::create_private)),
    /// and writes nothing yet: as an [`Output`], the header and attrs are written at
    /// [`start`](Output::start), once the events are known. A bad path fails here,
    /// before anything is recorded.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] (or [`ErrorKind::PermissionDenied`]) naming the file.
    pub fn open(path: impl AsRef<Path>) -> Result<PerfData> {
        let path = path.as_ref();
        let file = super::create_private(path)?;
        PerfData::unstarted(file, path)
    }

    /// Moves an existing, non-empty regular file `path` aside to `path.old` (replacing
    /// an older one), as perf does before it writes a perf.data, so one recording never
    /// silently replaces the last. Returns the new name when something was moved. A
    /// symbolic link stays where it is, so that creating the file refuses it.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if the rename fails, naming both files.
    pub fn keep_old(path: impl AsRef<Path>) -> Result<Option<PathBuf>> {
        let path = path.as_ref();
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.len() > 0 && meta.is_file() => {
                let mut old = path.as_os_str().to_owned();
                old.push(".old");
                let old = PathBuf::from(old);
                std::fs::rename(path, &old).map_err(|e| {
                    Error::from_errno(format!("rename {} to {}", path.display(), old.display()), e)
                })?;
                Ok(Some(old))
            }
            _ => Ok(None),
        }
    }

    /// Writes perf's pipe format to `file` (a pipe, a socket, stdout; a regular file
    /// too), in order and never rewriting: `perf record -o -`, read by `perf report
    /// -i -`. As an [`Output`], the setup records are written at [`start`](Output::start).
    /// The pipe format has no build-id section (perf synthesizes none for a pipe):
    /// readers find files by their paths.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if `file` cannot be examined.
    pub fn pipe(file: File, path: impl AsRef<Path>) -> Result<PerfData> {
        let mut w = PerfData::unstarted_any(file, path.as_ref())?;
        w.pipe = true;
        Ok(w)
    }

    /// Writes into an open, seekable `file` (`path` is only for messages).
    ///
    /// # Errors
    /// As [`create`](Self::create); a pipe or other unseekable file is
    /// [`ErrorKind::InvalidArgument`] (perf.data needs to rewrite its header).
    pub fn new(
        file: File,
        path: impl AsRef<Path>,
        events: &[EventInfo],
        cmdline: &[String],
    ) -> Result<PerfData> {
        let mut w = PerfData::unstarted(file, path.as_ref())?;
        w.begin(events, cmdline)?;
        Ok(w)
    }

    /// Describes `events` and writes the header and attrs.
    fn begin(&mut self, events: &[EventInfo], cmdline: &[String]) -> Result<()> {
        self.describe(events, cmdline)?;
        self.write_start()?;
        self.started = true;
        Ok(())
    }

    /// Goes on writing a perf.data that an earlier writer of the same `events` started
    /// and did not [`finish`](Self::finish) (a process image before its `exec`): new
    /// records follow the ones already there.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] if `file` is not such a perf.data: not one, one
    /// of other events, or one already finished (its feature sections follow the
    /// data). As [`new`](Self::new) otherwise.
    pub fn resume(
        file: File,
        path: impl AsRef<Path>,
        events: &[EventInfo],
        cmdline: &[String],
    ) -> Result<PerfData> {
        let mut w = PerfData::unstarted(file, path.as_ref())?;
        w.describe(events, cmdline)?;
        w.continue_file()?;
        Ok(w)
    }

    /// As [`resume`](Self::resume) for the [`Output`] path: the events come at
    /// [`start`](Output::start), which checks the file against the attrs it would
    /// write and goes on after its records.
    ///
    /// # Errors
    /// As [`new`](Self::new) for a file that is not a regular one.
    pub fn resume_output(file: File, path: impl AsRef<Path>) -> Result<PerfData> {
        let mut w = PerfData::unstarted(file, path.as_ref())?;
        w.resuming = true;
        Ok(w)
    }

    /// Checks that the file holds what [`start_bytes`](Self::start_bytes) would write
    /// for the described events, unfinished, and goes on after its records.
    fn continue_file(&mut self) -> Result<()> {
        self.started = true;
        let start = self.start_bytes();
        let mut head = vec![0u8; start.len()];
        let read = self.file.read_exact_at(&mut head, 0);
        let word = |at: u64| {
            let at = at as usize;
            head.get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_ne_bytes)
        };
        let why = if read.is_err() {
            Some("it is shorter than its header")
        } else if !head.starts_with(MAGIC) {
            Some("it is not a perf.data (no PERFILE2 magic)")
        } else if head[..DATA_SIZE_AT as usize] != start[..DATA_SIZE_AT as usize]
            || !self.same_record_shapes(&head)
        {
            Some("it describes other events")
        } else if (0..4).any(|i| word(FLAGS_AT + 8 * i) != 0) {
            Some("it is finished (feature sections follow its data)")
        } else {
            None
        };
        if let Some(why) = why {
            self.started = false;
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("resume writing {}", self.path.display()),
                why,
            )
            .with_fix("write a new file instead"));
        }
        self.data_size = word(DATA_SIZE_AT);
        Ok(())
    }

    /// Whether the attr section at the start of `head` (what [`start_bytes`] writes)
    /// gives each event the ids and records ours do: the same ids, `sample_type`,
    /// `read_format` and flag bits (`sample_id_all` among them). Other fields may differ: an event
    /// resolved again after an exec has its breakpoint at the new image's address.
    ///
    /// [`start_bytes`]: Self::start_bytes
    fn same_record_shapes(&self, head: &[u8]) -> bool {
        // sample_type, read_format and the flag word: bytes 24..48 of an attr.
        const SHAPE: std::ops::Range<usize> = 24..48;
        let start = self.start_bytes();
        let word = |b: &[u8], at: u64| {
            let at = at as usize;
            b.get(at..at + 8)
                .and_then(|w| w.try_into().ok())
                .map_or(0, u64::from_ne_bytes)
        };
        // The attrs' offset, as the header gives it (equal in both: checked before).
        let attrs_at = word(&start, 8 + 8 + 8) as usize;
        let stride = self.attr_size + 16;
        // The id arrays (between the header and the attrs) must be the same too: the
        // samples name their event by id.
        let ids = HEADER_SIZE as usize..attrs_at;
        head.get(ids.clone()).is_some()
            && head.get(ids.clone()) == start.get(ids)
            && (0..self.events.len()).all(|i| {
                let at = attrs_at + i * stride;
                let range = at + SHAPE.start..at + SHAPE.end;
                head.get(range.clone()).is_some() && head.get(range.clone()) == start.get(range)
            })
    }

    /// The writer, before anything is written.
    fn unstarted(file: File, path: &Path) -> Result<PerfData> {
        let meta = file
            .metadata()
            .map_err(|e| Error::from_errno(format!("stat {}", path.display()), e))?;
        if !meta.is_file() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("write perf.data to {}", path.display()),
                "perf.data must go to a regular file: its header is rewritten at the end",
            )
            .with_fix(
                "give -o a file path, or write perf's pipe format (PerfData::pipe, record -o -)",
            ));
        }
        PerfData::unstarted_any(file, path)
    }

    /// The writer of any file, before anything is written.
    fn unstarted_any(file: File, path: &Path) -> Result<PerfData> {
        let path = path.to_path_buf();
        Ok(PerfData {
            file,
            path,
            events: Vec::new(),
            layouts: Vec::new(),
            cmdline: Vec::new(),
            attr_size: ATTR_SIZE_VER0,
            data_offset: 0,
            data_size: 0,
            mapped: BTreeMap::new(),
            ids: std::collections::HashMap::new(),
            records: 0,
            lost: 0,
            finished: false,
            started: false,
            resuming: false,
            pending: Vec::new(),
            rechain: Vec::new(),
            scratch: Vec::new(),
            pipe: false,
        })
    }

    /// Takes the events (and where the data section starts).
    fn describe(&mut self, events: &[EventInfo], cmdline: &[String]) -> Result<()> {
        super::require_events(events, "write perf.data")?;
        self.layouts = events
            .iter()
            .map(|e| {
                Layout::new(e.attr()).map_err(|d| {
                    Error::new(
                        ErrorKind::InvalidArgument,
                        format!("describe event {} in perf.data", e.name()),
                        d.to_string(),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.attr_size = events
            .iter()
            .map(|e| attr_used_size(e.attr()))
            .max()
            .unwrap_or(ATTR_SIZE_VER0);
        self.events = events.to_vec();
        self.cmdline = cmdline.to_vec();
        self.data_offset = self.start_bytes().len() as u64;
        Ok(())
    }

    /// The path written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes of the data section so far.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Records reported lost before reaching this file (the `PERF_RECORD_LOST`s written).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    fn io_error(&self, what: &str, e: std::io::Error) -> Error {
        write_error(&self.path, what, e)
    }

    /// Header, id arrays and attr section; the data section starts after them.
    fn write_start(&mut self) -> Result<()> {
        if self.pipe {
            let buf = self.pipe_start_bytes();
            return (&self.file)
                .write_all(&buf)
                .map_err(|e| self.io_error("write the pipe header", e));
        }
        let buf = self.start_bytes();
        self.file
            .write_all_at(&buf, 0)
            .map_err(|e| self.io_error("write the header", e))?;
        Ok(())
    }

    /// What [`write_start`](Self::write_start) writes, with the current data size.
    fn start_bytes(&self) -> Vec<u8> {
        let mut buf = vec![0u8; HEADER_SIZE as usize];
        let mut id_sections = Vec::new();
        for e in &self.events {
            let off = buf.len() as u64;
            for id in e.ids() {
                buf.extend_from_slice(&id.to_ne_bytes());
            }
            id_sections.push((off, (e.ids().len() * 8) as u64));
        }
        let attrs_offset = buf.len() as u64;
        for (e, (off, size)) in self.events.iter().zip(&id_sections) {
            buf.extend_from_slice(&attr_bytes(e.attr(), self.attr_size));
            buf.extend_from_slice(&off.to_ne_bytes());
            buf.extend_from_slice(&size.to_ne_bytes());
        }
        let attrs_size = buf.len() as u64 - attrs_offset;
        let header = self.header(attrs_offset, attrs_size, [0; 4]);
        buf[..header.len()].copy_from_slice(&header);
        buf
    }

    /// The pipe format's start: its header, the features perf synthesizes for a pipe
    /// (`HEADER_FEATURE` records, each padded to 8 bytes), each event's
    /// `HEADER_ATTR` (its attr, then its ids) and its name (`EVENT_UPDATE`).
    fn pipe_start_bytes(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&PIPE_HEADER_SIZE.to_ne_bytes());
        let mut record = |ty: u32, body: &[u8]| {
            let size = (8 + body.len()).next_multiple_of(8);
            buf.extend_from_slice(&ty.to_ne_bytes());
            buf.extend_from_slice(&0u16.to_ne_bytes());
            buf.extend_from_slice(&(size as u16).to_ne_bytes());
            buf.extend_from_slice(body);
            buf.resize(buf.len() + size - 8 - body.len(), 0);
        };
        for (bit, content) in self.features() {
            // Build ids and event descriptions are not synthesized for a pipe by perf.
            if bit == HEADER_BUILD_ID || bit == HEADER_EVENT_DESC {
                continue;
            }
            let mut body = u64::from(bit).to_ne_bytes().to_vec();
            body.extend_from_slice(&content);
            record(RECORD_HEADER_FEATURE, &body);
        }
        for e in &self.events {
            let mut body = attr_bytes(e.attr(), self.attr_size);
            for id in e.ids() {
                body.extend_from_slice(&id.to_ne_bytes());
            }
            record(RECORD_HEADER_ATTR, &body);
            // The event's name (the file format's EVENT_DESC), NUL-terminated.
            if let Some(&id) = e.ids().first() {
                let mut body = EVENT_UPDATE_NAME.to_ne_bytes().to_vec();
                body.extend_from_slice(&id.to_ne_bytes());
                body.extend_from_slice(e.name().as_bytes());
                body.push(0);
                record(RECORD_EVENT_UPDATE, &body);
            }
        }
        buf
    }

    fn header(&self, attrs_offset: u64, attrs_size: u64, flags: [u64; 4]) -> Vec<u8> {
        let mut h = Vec::with_capacity(HEADER_SIZE as usize);
        h.extend_from_slice(MAGIC);
        for v in [
            HEADER_SIZE,
            (self.attr_size + 16) as u64,
            attrs_offset,
            attrs_size,
            self.data_offset,
            self.data_size,
            0, // event_types: unused since perf 3.x
            0,
        ] {
            h.extend_from_slice(&v.to_ne_bytes());
        }
        for f in flags {
            h.extend_from_slice(&f.to_ne_bytes());
        }
        h
    }

    /// Appends whole records (each with its header, as the ring holds them).
    ///
    /// # Errors
    /// [`ErrorKind::Io`] on a write failure, naming the file and the cause ("No space
    /// left on device", "File too large"); the file keeps every record written before.
    pub fn write_records(&mut self, records: &[u8]) -> Result<()> {
        if !self.started {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("write records to {}", self.path.display()),
                "the file has no header yet: its events are not known",
            )
            .with_fix("start it (Output::start) or make it with PerfData::create"));
        }
        self.note_mappings(records);
        if self.pipe {
            // In order, whole: a reader of the stream never sees a record cut short
            // unless the writer fails in the middle of one.
            let written = (&self.file).write_all(records);
            if written.is_ok() {
                self.data_size += records.len() as u64;
            }
            return written.map_err(|e| self.io_error("write records", e));
        }
        let at = self.data_offset + self.data_size;
        let mut done = 0;
        let failed = loop {
            if done == records.len() {
                break None;
            }
            match self.file.write_at(&records[done..], at + done as u64) {
                Ok(0) => break Some(std::io::Error::from(std::io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e),
            }
        };
        // Only whole records count: a record cut by a full disk is not part of the file.
        self.data_size += whole_records(&records[..done]) as u64;
        // Keep the header's data size current, so a killed recording stays readable.
        let header = self
            .file
            .write_all_at(&self.data_size.to_ne_bytes(), DATA_SIZE_AT);
        if let Some(e) = failed {
            return Err(self.io_error("write records", e));
        }
        header.map_err(|e| self.io_error("update the header", e))
    }

    /// Writes a `PERF_RECORD_LOST` saying `n` records of the first event were dropped
    /// before reaching the file (perf reports it as lost events).
    ///
    /// # Errors
    /// As [`write_records`](Self::write_records).
    pub fn write_lost(&mut self, n: u64) -> Result<()> {
        let id = self
            .events
            .first()
            .and_then(|e| e.ids().first().copied())
            .unwrap_or(0);
        let Some(layout) = self.layouts.first().copied() else {
            return self.write_records(&[]);
        };
        let ids = encode::Ids {
            id,
            identifier: id,
            ..Default::default()
        };
        let mut rec = Vec::with_capacity(64);
        encode::lost(
            &mut rec,
            &layout,
            sys::PERF_RECORD_MISC_USER as u16,
            id,
            n,
            &ids,
        );
        self.write_records(&rec)?;
        self.lost += n;
        Ok(())
    }

    /// Remembers the user-space executable mappings, whose build ids go in the
    /// `BUILD_ID` feature at the end.
    fn note_mappings(&mut self, records: &[u8]) {
        let mut off = 0;
        while off + 8 <= records.len() {
            let ty = u32::from_ne_bytes(records[off..off + 4].try_into().unwrap());
            let misc = u16::from_ne_bytes([records[off + 4], records[off + 5]]);
            let size = usize::from(u16::from_ne_bytes([records[off + 6], records[off + 7]]));
            if size < 8 || off + size > records.len() {
                break;
            }
            self.records += 1;
            let rec = &records[off..off + size];
            let name_at = match ty {
                sys::PERF_RECORD_MMAP => Some(8 + 4 + 4 + 8 + 8 + 8),
                sys::PERF_RECORD_MMAP2 => Some(8 + 4 + 4 + 8 + 8 + 8 + 24 + 4 + 4),
                _ => None,
            };
            let user =
                u32::from(misc) & sys::PERF_RECORD_MISC_CPUMODE_MASK == sys::PERF_RECORD_MISC_USER;
            let data = u32::from(misc) & sys::PERF_RECORD_MISC_MMAP_DATA != 0;
            if let (Some(at), true, false) = (name_at, user, data) {
                if let Some(tail) = rec.get(at..) {
                    let name = &tail[..tail.iter().position(|&b| b == 0).unwrap_or(tail.len())];
                    let from_record = (ty == sys::PERF_RECORD_MMAP2
                        && u32::from(misc) & sys::PERF_RECORD_MISC_MMAP_BUILD_ID != 0)
                        .then(|| {
                            // build_id_size, 3 reserved bytes, build_id[20], at 40.
                            let n = usize::from(*rec.get(40)?).min(20);
                            rec.get(44..44 + n).map(<[u8]>::to_vec)
                        })
                        .flatten();
                    let pid = rec
                        .get(8..12)
                        .map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap()));
                    self.note_file(pid, name, from_record);
                }
            }
            off += size;
        }
    }

    /// Notes a file mapped by process `pid`, with its build id as the kernel reported it
    /// or as the file, read now through the process's root while it lives, says.
    fn note_file(&mut self, pid: u32, name: &[u8], build_id: Option<Vec<u8>>) {
        let path = Path::new(<std::ffi::OsStr as OsStrExt>::from_bytes(name));
        let is_file = crate::space::Mapping {
            start: 0,
            end: 0,
            pgoff: 0,
            path: std::sync::Arc::from(path),
            build_id: None,
        }
        .is_file();
        if !is_file {
            return;
        }
        let at = crate::space::file_of(pid, path);
        let id = match build_id {
            Some(id) => Some(id),
            None => self
                .ids
                .entry(at.clone())
                .or_insert_with(|| {
                    crate::elf::ElfFile::open(&*at)
                        .ok()
                        .and_then(|f| f.build_id().map(<[u8]>::to_vec))
                })
                .clone(),
        };
        if let Some(id) = id {
            self.mapped.entry((name.to_vec(), id)).or_insert(at);
        }
    }

    /// Copies the files read through a container's root into perf's build-id cache
    /// (`~/.debug`, perf's default `buildid.dir`), as `perf record` does with what it
    /// records: `perf report` finds them there by build id once the container is gone.
    fn cache_foreign_files(&self) {
        let Some(cache) = std::env::var_os("HOME").map(|h| Path::new(&h).join(".debug")) else {
            return;
        };
        for ((name, id), at) in &self.mapped {
            let path = Path::new(<std::ffi::OsStr as OsStrExt>::from_bytes(name));
            let ours = crate::elf::ElfFile::open(path)
                .ok()
                .and_then(|f| f.build_id().map(<[u8]>::to_vec));
            if &**at == path || ours.as_ref() == Some(id) {
                continue; // the file perf finds at that path is the one recorded
            }
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            if hex.len() < 3 {
                continue;
            }
            let rel = path.strip_prefix("/").unwrap_or(path);
            let dir = cache.join(rel).join(&hex);
            let link_dir = cache.join(".build-id").join(&hex[..2]);
            let target = Path::new("../..").join(rel).join(&hex);
            // Best effort: a cache that cannot be written leaves the recording as it is.
            let _ = std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::copy(&**at, dir.join("elf")).map(drop))
                .and_then(|()| std::fs::create_dir_all(&link_dir))
                .and_then(|()| {
                    let link = link_dir.join(&hex[2..]);
                    let _ = std::fs::remove_file(&link);
                    std::os::unix::fs::symlink(&target, link)
                });
        }
    }

    /// Writes the feature sections after the data and the final header. Idempotent.
    ///
    /// # Errors
    /// [`ErrorKind::Io`] if they cannot be written; the header then still holds the
    /// data size written so far, so the records remain readable.
    pub fn finish(&mut self) -> Result<()> {
        if self.finished || !self.started {
            return Ok(());
        }
        self.flush()?;
        self.finished = true;
        self.cache_foreign_files();
        if self.pipe {
            // The pipe format ends with its last record.
            return (&self.file).flush().map_err(|e| self.io_error("flush", e));
        }
        let features = self.features();
        let mut flags = [0u64; 4];
        let table_at = self.data_offset + self.data_size;
        let mut table = Vec::with_capacity(features.len() * 16);
        let mut body = Vec::new();
        let mut at = table_at + (features.len() * 16) as u64;
        for (bit, content) in &features {
            flags[(*bit / 64) as usize] |= 1 << (bit % 64);
            table.extend_from_slice(&at.to_ne_bytes());
            table.extend_from_slice(&(content.len() as u64).to_ne_bytes());
            body.extend_from_slice(content);
            at += content.len() as u64;
        }
        table.extend_from_slice(&body);
        let written = self.file.write_all_at(&table, table_at);
        // Whatever follows (a partial write that failed) is not part of the file.
        let _ = self.file.set_len(
            table_at
                + if written.is_ok() {
                    table.len() as u64
                } else {
                    0
                },
        );
        let flags = if written.is_ok() { flags } else { [0; 4] };
        let mut flag_bytes = Vec::new();
        for f in flags {
            flag_bytes.extend_from_slice(&f.to_ne_bytes());
        }
        self.file
            .write_all_at(&self.data_size.to_ne_bytes(), DATA_SIZE_AT)
            .and_then(|()| self.file.write_all_at(&flag_bytes, FLAGS_AT))
            .and_then(|()| self.file.flush())
            .map_err(|e| self.io_error("complete the header", e))?;
        written.map_err(|e| self.io_error("write the feature sections", e))
    }

    /// The feature sections, by bit, in increasing order.
    fn features(&self) -> Vec<(u32, Vec<u8>)> {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let mut f = vec![(HEADER_BUILD_ID, self.build_ids())];
        f.push((
            HEADER_HOSTNAME,
            header_string(&read("/proc/sys/kernel/hostname")),
        ));
        f.push((
            HEADER_OSRELEASE,
            header_string(&read("/proc/sys/kernel/osrelease")),
        ));
        f.push((
            HEADER_VERSION,
            header_string(concat!("perfring ", env!("CARGO_PKG_VERSION"))),
        ));
        f.push((HEADER_ARCH, header_string(std::env::consts::ARCH)));
        let count =
            |p: &str| crate::counter::parse_cpu_list(&read(p)).map_or(0, |v| v.len() as u32);
        let online = count("/sys/devices/system/cpu/online");
        let present = count("/sys/devices/system/cpu/present").max(online);
        let mut nr = Vec::new();
        nr.extend_from_slice(&present.to_ne_bytes());
        nr.extend_from_slice(&online.to_ne_bytes());
        f.push((HEADER_NRCPUS, nr));
        let mem_kb = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
        f.push((HEADER_TOTAL_MEM, mem_kb.to_ne_bytes().to_vec()));
        let mut cmd = (self.cmdline.len() as u32).to_ne_bytes().to_vec();
        for a in &self.cmdline {
            cmd.extend_from_slice(&header_string(a));
        }
        f.push((HEADER_CMDLINE, cmd));
        let mut desc = Vec::new();
        desc.extend_from_slice(&(self.events.len() as u32).to_ne_bytes());
        desc.extend_from_slice(&(self.attr_size as u32).to_ne_bytes());
        for e in &self.events {
            desc.extend_from_slice(&attr_bytes(e.attr(), self.attr_size));
            desc.extend_from_slice(&(e.ids().len() as u32).to_ne_bytes());
            desc.extend_from_slice(&header_string(e.name()));
            for id in e.ids() {
                desc.extend_from_slice(&id.to_ne_bytes());
            }
        }
        f.push((HEADER_EVENT_DESC, desc));
        f
    }

    /// `build_id_event`s for the mapped files that have a GNU build id.
    fn build_ids(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, id) in self.mapped.keys() {
            let mut fname = name.clone();
            fname.push(0);
            fname.resize(fname.len().next_multiple_of(NAME_ALIGN), 0);
            let size = 8 + 4 + 24 + fname.len();
            out.extend_from_slice(&RECORD_HEADER_BUILD_ID.to_ne_bytes());
            out.extend_from_slice(
                &(sys::PERF_RECORD_MISC_USER as u16 | MISC_BUILD_ID_SIZE).to_ne_bytes(),
            );
            out.extend_from_slice(&(size as u16).to_ne_bytes());
            out.extend_from_slice(&(-1i32).to_ne_bytes()); // the host machine
            let mut bid = [0u8; 24];
            let n = id.len().min(20);
            bid[..n].copy_from_slice(&id[..n]);
            bid[20] = n as u8;
            out.extend_from_slice(&bid);
            out.extend_from_slice(&fname);
        }
        out
    }
}

impl Sink for PerfData {
    fn write_chunk(&mut self, chunk: &Chunk) -> Result<()> {
        if chunk.lost_before() > 0 {
            self.write_lost(chunk.lost_before())?;
        }
        if !chunk.is_empty() {
            self.write_records(chunk.bytes())?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        PerfData::finish(self)
    }
}

/// Records gathered before a write, within a round (one `pwrite` and one header
/// update per this many, and at each round's end).
const WRITE_BYTES: usize = 256 << 10;

impl PerfData {
    /// Writes what [`Output`] gathered.
    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let r = self.write_records(&pending);
        self.pending = pending;
        self.pending.clear();
        r
    }

    fn queue(&mut self, record: &[u8]) -> Result<()> {
        self.pending.extend_from_slice(record);
        if self.pending.len() >= WRITE_BYTES {
            self.flush()?;
        }
        Ok(())
    }
}

/// As the [`Output`] of a [`Pipeline`](crate::pipeline::Pipeline): each record as the
/// ring held it, with two exceptions.
///
/// - The tracking counter's records (`MMAP2`, `COMM`, `FORK`, `EXIT`) are re-laid with
///   the first event's `sample_id` trailer and id ([`relayout`](super::relayout)):
///   perf.data readers need every record of a file to place its id alike.
/// - Samples of a frame-pointer event ([`CallGraph::Fp`](crate::unwind::CallGraph)),
///   which carry the user registers and a few hundred bytes of stack for the unwinder,
///   are written with the unwound chain (the direct caller the kernel's walk skipped
///   put back) and without the registers and stack, and the event's attr says so: perf
///   then shows the stacks perfring's other outputs show, and does not try a DWARF
///   unwind of a stack copy too short for it. DWARF samples are kept whole: `perf
///   report -g` unwinds them as it unwinds its own.
impl crate::output::Output for PerfData {
    fn start(&mut self, rec: &crate::output::Recording<'_>) -> Result<()> {
        self.rechain = rec.events.iter().map(|e| rechained(e.attr())).collect();
        if self.started {
            return Ok(());
        }
        let written = rec
            .events
            .iter()
            .zip(&self.rechain)
            .map(|(e, &re)| {
                if !re {
                    return Ok(e.clone());
                }
                let mut attr = *e.attr();
                attr.sample_type &=
                    !u64::from(sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER);
                attr.sample_regs_user = 0;
                attr.sample_stack_user = 0;
                EventInfo::new(e.name(), attr, e.ids().to_vec())
            })
            .collect::<Result<Vec<_>>>()?;
        if self.resuming {
            self.describe(&written, rec.cmdline)?;
            return self.continue_file();
        }
        self.begin(&written, rec.cmdline)
    }

    /// A DWARF sample keeps its stack copy in the file, for `perf report` to unwind;
    /// frame-pointer chains are rechained from [`SampleRef::stack`], which needs no copy
    /// unwound.
    ///
    /// [`SampleRef::stack`]: crate::output::SampleRef::stack
    fn wants_user_stacks(&self) -> bool {
        false
    }

    fn sample(&mut self, s: &crate::output::SampleRef<'_>) -> Result<()> {
        if s.off_cpu {
            // Written at its time, as a record (below); this is its weighted copy.
            return Ok(());
        }
        if !self.rechain.get(s.event).copied().unwrap_or(false) {
            return self.queue(s.bytes);
        }
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        out.extend(chain_of(s.stack));
        let mut rec = Vec::with_capacity(s.bytes.len());
        let r = match rechain(s.sample, &out, &mut rec) {
            Some(()) => self.queue(&rec),
            // A sample without the parts to rewrite is kept as it is.
            None => self.queue(s.bytes),
        };
        self.scratch = out;
        r
    }

    fn record(
        &mut self,
        event: Option<usize>,
        record: &crate::records::Record<'_>,
        bytes: &[u8],
    ) -> Result<()> {
        match event {
            Some(_) => self.queue(bytes),
            None => {
                let (Some(layout), Some(id)) = (
                    self.layouts.first().copied(),
                    self.events.first().and_then(|e| e.ids().first().copied()),
                ) else {
                    return Ok(());
                };
                let mut rec = Vec::with_capacity(bytes.len() + 48);
                if crate::synth::relayout(record, &layout, id, &mut rec) {
                    self.queue(&rec)?;
                }
                Ok(())
            }
        }
    }

    fn lost(&mut self, records: u64) -> Result<()> {
        self.flush()?;
        self.write_lost(records)
    }

    fn end_round(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut marker = [0u8; 8];
        marker[..4].copy_from_slice(&crate::stream::FINISHED_ROUND.to_ne_bytes());
        marker[6..].copy_from_slice(&8u16.to_ne_bytes());
        self.pending.extend_from_slice(&marker);
        // Written at each round's end: a recording cut short (even `kill -9`) keeps
        // every round before it, and an `exec` loses nothing handed over.
        self.flush()
    }

    fn finish(&mut self) -> Result<()> {
        PerfData::finish(self)
    }
}

/// Whether an event's samples carry a frame-pointer chain plus the registers and stack
/// the unwinder's first frame needs (what [`CallGraph::Fp`](crate::unwind::CallGraph)
/// configures), which perf.data gets rewritten.
///
/// Not an off-CPU counter's: its samples reach the file before they are unwound (as
/// records, at their time, see [`Output::record`](crate::output::Output::record)), so
/// they keep their registers and stack for a reader to decide the first frame.
fn rechained(attr: &sys::perf_event_attr) -> bool {
    let need = u64::from(
        sys::PERF_SAMPLE_CALLCHAIN | sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER,
    );
    attr.sample_type & need == need
        && attr.exclude_callchain_user() == 0
        && !crate::offcpu::is_off_cpu(attr)
}

/// A callchain with its context markers, from unwound frames.
fn chain_of(stack: &[crate::unwind::RawFrame]) -> impl Iterator<Item = u64> + '_ {
    let mut context = None;
    stack.iter().flat_map(move |f| {
        let want = if f.kernel {
            sys::PERF_CONTEXT_KERNEL
        } else {
            sys::PERF_CONTEXT_USER
        };
        let marker = (context != Some(want)).then_some(want);
        context = Some(want);
        marker.into_iter().chain(std::iter::once(f.ip))
    })
}

/// `sample`'s bytes with its callchain replaced by `chain` and its user registers and
/// stack left out, into `out`; `None` if the sample lacks one of them.
fn rechain(sample: &crate::records::Sample<'_>, chain: &[u64], out: &mut Vec<u8>) -> Option<()> {
    let bytes = sample.as_bytes();
    let base = bytes.as_ptr() as usize;
    let at = |s: &[u8]| (s.as_ptr() as usize).checked_sub(base);
    let cc = sample.callchain()?;
    // The u64 count precedes the addresses.
    let cc_start = at(cc.as_bytes())?.checked_sub(8)?;
    let cc_end = cc_start + 8 + cc.as_bytes().len();
    let regs = sample.regs_user()?;
    let regs_start = at(regs.regs.as_bytes())?.checked_sub(8)?;
    let stack = sample.stack_user()?;
    let stack_start = at(stack.data)?.checked_sub(8)?;
    let stack_end = stack_start + 8 + stack.data.len() + if stack.data.is_empty() { 0 } else { 8 };
    if !(cc_end <= regs_start && regs_start <= stack_start && stack_end <= bytes.len()) {
        return None;
    }
    out.clear();
    out.extend_from_slice(&bytes[..cc_start]);
    out.extend_from_slice(&(chain.len() as u64).to_ne_bytes());
    for ip in chain {
        out.extend_from_slice(&ip.to_ne_bytes());
    }
    out.extend_from_slice(&bytes[cc_end..regs_start]);
    out.extend_from_slice(&bytes[stack_end..]);
    let size = u16::try_from(out.len()).ok()?;
    out[6..8].copy_from_slice(&size.to_ne_bytes());
    Some(())
}

/// A write error naming the file and, for the usual causes, the fix.
pub(crate) fn write_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    let fix = match e.raw_os_error() {
        Some(libc::ENOSPC) => Some(
            "free space on that filesystem or record elsewhere with -o; \
             the file holds the records written before the disk filled",
        ),
        Some(libc::EFBIG) => Some(
            "raise the file size limit (ulimit -f) or record for less time; \
             the file holds the records written before the limit",
        ),
        Some(libc::EPIPE) => Some("the reader of the pipe went away; keep it reading"),
        Some(libc::EDQUOT) => Some("the disk quota is exhausted; free space or record elsewhere"),
        _ => None,
    };
    let err = Error::from_errno(format!("{what} to {}", path.display()), e);
    match fix {
        Some(f) => err.with_fix(f),
        None => err,
    }
}

/// The attr's bytes up to its last non-zero one, at least `PERF_ATTR_SIZE_VER0` and a
/// multiple of 8: older readers refuse attrs larger than the ones they know, and the
/// trailing fields they do not know are zero anyway.
fn attr_used_size(attr: &sys::perf_event_attr) -> usize {
    let mut a = *attr;
    a.size = 0;
    let bytes = a.as_bytes();
    let last = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    last.next_multiple_of(8).max(ATTR_SIZE_VER0)
}

/// The attr cut (or zero-padded) to `size` bytes, its `size` field saying so.
fn attr_bytes(attr: &sys::perf_event_attr, size: usize) -> Vec<u8> {
    let mut a = *attr;
    a.size = size as u32;
    let mut v = a.as_bytes().to_vec();
    v.resize(size, 0);
    v
}

/// `struct perf_header_string`: a u32 length, then the NUL-terminated string padded to
/// `NAME_ALIGN`.
fn header_string(s: &str) -> Vec<u8> {
    let len = (s.len() + 1).next_multiple_of(NAME_ALIGN);
    let mut v = Vec::with_capacity(4 + len);
    v.extend_from_slice(&(len as u32).to_ne_bytes());
    v.extend_from_slice(s.as_bytes());
    v.resize(4 + len, 0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_string_is_padded_and_terminated() {
        let s = header_string("x86_64");
        assert_eq!(s.len(), 4 + 64);
        assert_eq!(u32::from_ne_bytes(s[..4].try_into().unwrap()), 64);
        assert_eq!(&s[4..11], b"x86_64\0");
        assert_eq!(header_string(&"a".repeat(64)).len(), 4 + 128);
    }

    #[test]
    fn attr_size_drops_trailing_zero_fields_only() {
        let mut a = crate::Counter::builder("cpu-clock")
            .unwrap()
            .attr()
            .to_owned();
        assert!(attr_used_size(&a) >= ATTR_SIZE_VER0);
        assert!(attr_used_size(&a) < std::mem::size_of::<sys::perf_event_attr>());
        a.__bindgen_anon_4.config2 = 1; // at offset 64..72 (PERF_ATTR_SIZE_VER1)
        assert_eq!(attr_used_size(&a), 72);
        let b = attr_bytes(&a, 72);
        assert_eq!(b.len(), 72);
        assert_eq!(u32::from_ne_bytes(b[4..8].try_into().unwrap()), 72);
    }

    #[test]
    fn a_cut_record_is_not_counted() {
        let rec = |size: u16| {
            let mut r = vec![0u8; usize::from(size)];
            r[6..8].copy_from_slice(&size.to_ne_bytes());
            r
        };
        let bytes = [rec(16), rec(24), rec(8)].concat();
        assert_eq!(whole_records(&bytes), 48);
        assert_eq!(whole_records(&bytes[..47]), 40);
        assert_eq!(whole_records(&bytes[..39]), 16);
        assert_eq!(whole_records(&bytes[..3]), 0);
    }

    #[test]
    fn header_is_104_bytes_with_data_size_where_perf_reads_it() {
        assert_eq!(HEADER_SIZE, 104);
        assert_eq!(DATA_SIZE_AT, 0x30);
        assert_eq!(FLAGS_AT, 0x48);
    }

    #[test]
    fn resume_goes_on_after_the_records_of_an_unfinished_file() {
        let dir = std::env::temp_dir().join(format!("perfring-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf.data");
        let mut attr = *crate::Counter::builder("cpu-clock").unwrap().attr();
        attr.sample_type = u64::from(sys::PERF_SAMPLE_IDENTIFIER | sys::PERF_SAMPLE_IP);
        attr.set_sample_id_all(1);
        let events = [EventInfo::new("cpu-clock", attr, vec![7]).unwrap()];
        let layout = *events[0].layout();
        let sample = |ip: u64| {
            let mut out = Vec::new();
            let f = encode::SampleFields {
                identifier: 7,
                ip,
                ..Default::default()
            };
            encode::sample(&mut out, &layout, sys::PERF_RECORD_MISC_USER as u16, &f);
            out
        };
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap()
        };
        // The image before an exec: two samples, not finished.
        let mut first = PerfData::create(&path, &events, &[]).unwrap();
        first
            .write_records(&[sample(1), sample(2)].concat())
            .unwrap();
        let written = first.data_size();
        drop(first);
        // The image after it: goes on from there.
        let mut again = PerfData::resume(open(), &path, &events, &[]).unwrap();
        assert_eq!(again.data_size(), written);
        again.write_records(&sample(3)).unwrap();
        assert_eq!(again.data_size(), written + sample(3).len() as u64);
        again.finish().unwrap();
        // The data section holds all three, in order.
        let bytes = std::fs::read(&path).unwrap();
        let at = usize::try_from(again.data_offset).unwrap();
        let data = &bytes[at..at + usize::try_from(again.data_size()).unwrap()];
        assert_eq!(data, &[sample(1), sample(2), sample(3)].concat()[..]);
        // A finished file, other events, or not a perf.data: refused, with the cause.
        let e = PerfData::resume(open(), &path, &events, &[]).unwrap_err();
        assert!(e.to_string().contains("finished"), "{e}");
        let other = [EventInfo::new("cpu-clock", attr, vec![8]).unwrap()];
        std::fs::remove_file(&path).unwrap();
        drop(PerfData::create(&path, &events, &[]).unwrap());
        let e = PerfData::resume(open(), &path, &other, &[]).unwrap_err();
        assert!(e.to_string().contains("other events"), "{e}");
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let e = PerfData::resume(open(), &path, &events, &[]).unwrap_err();
        assert!(e.to_string().contains("PERFILE2"), "{e}");
        std::fs::write(&path, b"PERFILE2").unwrap();
        let e = PerfData::resume(open(), &path, &events, &[]).unwrap_err();
        assert!(e.to_string().contains("shorter than its header"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
