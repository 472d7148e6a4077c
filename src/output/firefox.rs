//! The Firefox Profiler's processed profile format (JSON, opened at
//! profiler.firefox.com or by `samply load`), built with `fxprof-processed-profile`.
//!
//! One process per pid and one thread per tid, named as the recording names them
//! (`COMM`); each sample at its time with its stack, framed by the pipeline's names
//! (already symbolicated: the profiler does not look for symbol files), kernel frames
//! in their own category. Markers show what a timeline should not hide: records lost
//! (`LOST`, `LOST_SAMPLES`, the writer's queue), throttling (`THROTTLE`/`UNTHROTTLE`:
//! the kernel stopped sampling for a while), and each off-CPU wait as an interval.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use fx::{
    CategoryColor, CategoryHandle, CpuDelta, FrameFlags, FrameInfo, MarkerFieldFlags,
    MarkerFieldFormat, MarkerTiming, ProcessHandle, Profile, ReferenceTimestamp, SamplingInterval,
    StaticSchemaMarker, StaticSchemaMarkerField, StringHandle, ThreadHandle, Timestamp,
};
use fxprof_processed_profile as fx;

use super::perfdata::write_error;
use crate::error::Result;
use crate::output::{Output, Recording, SampleRef};
use crate::records::{Record, RecordKind};

/// A marker with a name and one number.
#[derive(Debug, Clone)]
struct CountMarker {
    name: StringHandle,
    category: CategoryHandle,
    count: u64,
}

impl StaticSchemaMarker for CountMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "PerfringCount";
    const CHART_LABEL: Option<&'static str> = Some("{marker.name} {marker.data.count}");
    const TABLE_LABEL: Option<&'static str> = Some("{marker.name}: {marker.data.count}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[StaticSchemaMarkerField {
        key: "count",
        label: "Records",
        format: MarkerFieldFormat::Integer,
        flags: MarkerFieldFlags::empty(),
    }];

    fn name(&self, _: &mut Profile) -> StringHandle {
        self.name
    }
    fn category(&self, _: &mut Profile) -> CategoryHandle {
        self.category
    }
    fn string_field_value(&self, _: u32) -> StringHandle {
        self.name
    }
    fn number_field_value(&self, _: u32) -> f64 {
        self.count as f64
    }
}

/// A marker with a name only (its timing says the rest).
#[derive(Debug, Clone)]
struct PlainMarker {
    name: StringHandle,
    category: CategoryHandle,
}

impl StaticSchemaMarker for PlainMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "PerfringInterval";
    const FIELDS: &'static [StaticSchemaMarkerField] = &[];

    fn name(&self, _: &mut Profile) -> StringHandle {
        self.name
    }
    fn category(&self, _: &mut Profile) -> CategoryHandle {
        self.category
    }
    fn string_field_value(&self, _: u32) -> StringHandle {
        self.name
    }
    fn number_field_value(&self, _: u32) -> f64 {
        0.0
    }
}

/// The profile and the handles made so far.
struct Built {
    profile: Profile,
    user: CategoryHandle,
    kernel: CategoryHandle,
    off_cpu: CategoryHandle,
    lost: CategoryHandle,
    processes: HashMap<u32, ProcessHandle>,
    /// Per tid: the thread and the name it was last given.
    threads: HashMap<u32, (ThreadHandle, String)>,
    first_thread: Option<ThreadHandle>,
}

/// A Firefox Profiler profile written at [`finish`](Output::finish): an [`Output`] of a
/// [`Pipeline`](crate::pipeline::Pipeline); see the [module docs](self).
///
/// Each sample is one entry of its thread's sample table (weight 1, so the call tree
/// counts samples, as `perf report -n` does); for `cpu-clock` and `task-clock` its
/// period is the thread's CPU time since the previous one. An off-CPU sample ends with
/// the [`offcpu::MARKER`](crate::offcpu::MARKER) frame, and its wait is an interval
/// marker on the thread's timeline.
///
/// # Examples
/// ```no_run
/// use perfring::output::FirefoxProfile;
/// let out = FirefoxProfile::create("profile.json")?;
/// # let _ = out;
/// # Ok::<(), perfring::Error>(())
/// ```
pub struct FirefoxProfile {
    out: Option<Box<dyn Write + Send>>,
    path: PathBuf,
    built: Option<Built>,
    /// The time (the samples' clock) that is 0 in the profile: the first record's.
    zero: Option<u64>,
    last: u64,
    clock: bool,
    samples: u64,
}

impl std::fmt::Debug for FirefoxProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirefoxProfile")
            .field("path", &self.path)
            .field("samples", &self.samples)
            .finish_non_exhaustive()
    }
}

impl FirefoxProfile {
    /// Creates `path` now, mode 0600, and writes the profile there at the end.
    ///
    /// # Errors
    /// [`ErrorKind::Io`](crate::ErrorKind::Io) (or
    /// [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied)) naming the
    /// file.
    pub fn create(path: impl AsRef<Path>) -> Result<FirefoxProfile> {
        let path = path.as_ref();
        let file = super::create_private(path)?;
        Ok(FirefoxProfile::new(std::io::BufWriter::new(file), path))
    }

    /// Writes the profile to `out` at the end (`name` is for messages).
    pub fn new(out: impl Write + Send + 'static, name: impl AsRef<Path>) -> FirefoxProfile {
        FirefoxProfile {
            out: Some(Box::new(out)),
            path: name.as_ref().to_path_buf(),
            built: None,
            zero: None,
            last: 0,
            clock: false,
            samples: 0,
        }
    }

    /// `time` on the profile's timeline (the first time seen is 0).
    fn at(&mut self, time: u64) -> Timestamp {
        let zero = *self.zero.get_or_insert(time);
        self.last = self.last.max(time);
        Timestamp::from_nanos_since_reference(time.saturating_sub(zero))
    }
}

impl Built {
    fn thread(&mut self, pid: u32, tid: u32, name: Option<&str>, start: Timestamp) -> ThreadHandle {
        let name = name.map_or_else(|| format!("[tid {tid}]"), str::to_string);
        if let Some((handle, known)) = self.threads.get_mut(&tid) {
            // A thread renamed (prctl, exec) is shown by its latest name.
            if *known != name {
                self.profile.set_thread_name(*handle, &name);
                *known = name;
            }
            return *handle;
        }
        let process = match self.processes.get(&pid) {
            Some(&p) => p,
            None => {
                let p = self.profile.add_process(&name, pid, start);
                self.processes.insert(pid, p);
                p
            }
        };
        let handle = self.profile.add_thread(process, tid, start, tid == pid);
        self.profile.set_thread_name(handle, &name);
        self.threads.insert(tid, (handle, name));
        self.first_thread.get_or_insert(handle);
        handle
    }

    fn marker(&mut self, tid: Option<u32>, timing: MarkerTiming, name: &str, count: Option<u64>) {
        let thread = tid
            .and_then(|t| self.threads.get(&t).map(|h| h.0))
            .or(self.first_thread);
        let Some(thread) = thread else { return };
        let name = self.profile.intern_string(name);
        match count {
            Some(count) => {
                let category = self.lost;
                self.profile.add_marker(
                    thread,
                    timing,
                    CountMarker {
                        name,
                        category,
                        count,
                    },
                );
            }
            None => {
                let category = self.off_cpu;
                self.profile
                    .add_marker(thread, timing, PlainMarker { name, category });
            }
        }
    }
}

impl Output for FirefoxProfile {
    fn start(&mut self, rec: &Recording<'_>) -> Result<()> {
        let product = rec.program.and_then(Path::file_name).map_or_else(
            || "perfring".to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        self.clock = rec.events.iter().all(|e| e.counts_cpu_time());
        // The events' rate, when they have one (a frequency, or a clock's period in ns).
        let interval = rec
            .events
            .first()
            .map(|e| {
                let a = e.attr();
                let n = crate::counter::sample_period(a);
                if a.freq() != 0 && n > 0 {
                    SamplingInterval::from_hz(n as f32)
                } else if e.counts_cpu_time() && n > 0 {
                    SamplingInterval::from_nanos(n)
                } else {
                    SamplingInterval::from_millis(1)
                }
            })
            .unwrap_or(SamplingInterval::from_millis(1));
        let mut profile = Profile::new(
            &product,
            ReferenceTimestamp::from_system_time(SystemTime::now()),
            interval,
        );
        profile.set_symbolicated(true);
        profile.set_os_name("Linux");
        let user = profile.add_category("User", CategoryColor::Yellow);
        let kernel = profile.add_category("Kernel", CategoryColor::Orange);
        let off_cpu = profile.add_category("Off-CPU", CategoryColor::Blue);
        let lost = profile.add_category("Lost", CategoryColor::Red);
        self.built = Some(Built {
            profile,
            user,
            kernel,
            off_cpu,
            lost,
            processes: HashMap::new(),
            threads: HashMap::new(),
            first_thread: None,
        });
        Ok(())
    }

    fn wants_names(&self) -> bool {
        true
    }

    fn sample(&mut self, s: &SampleRef<'_>) -> Result<()> {
        let time = s.sample.time().unwrap_or(self.last);
        let at = self.at(time);
        let clock = self.clock;
        let Some(b) = self.built.as_mut() else {
            return Ok(());
        };
        let thread = b.thread(s.pid, s.tid, s.thread_name, at);
        let (user, kernel, off_cpu) = (b.user, b.kernel, b.off_cpu);
        // Outermost first; frames' names are the pipeline's.
        let mut frames: Vec<FrameInfo> = s
            .frames
            .iter()
            .rev()
            .map(|f| FrameInfo {
                frame: fx::Frame::Label(b.profile.intern_string(&super::folded::frame_name(f))),
                category_pair: if f.kernel { kernel } else { user }.into(),
                flags: FrameFlags::empty(),
            })
            .collect();
        if s.off_cpu {
            frames.push(FrameInfo {
                frame: fx::Frame::Label(b.profile.intern_string(crate::offcpu::MARKER)),
                category_pair: off_cpu.into(),
                flags: FrameFlags::empty(),
            });
        }
        let stack = b.profile.intern_stack_frames(thread, frames.into_iter());
        let cpu = if clock && !s.off_cpu {
            CpuDelta::from_nanos(s.weight)
        } else {
            CpuDelta::ZERO
        };
        b.profile.add_sample(thread, at, stack, cpu, 1);
        if s.off_cpu {
            let end = Timestamp::from_nanos_since_reference(
                time.saturating_add(s.weight)
                    .saturating_sub(self.zero.unwrap_or(time)),
            );
            b.marker(
                Some(s.tid),
                MarkerTiming::Interval(at, end),
                "Off-CPU",
                None,
            );
        }
        self.samples += 1;
        Ok(())
    }

    fn record(&mut self, _: Option<usize>, record: &Record<'_>, _: &[u8]) -> Result<()> {
        let (name, count) = match record.kind() {
            RecordKind::Lost(l) => ("Lost records", Some(l.lost)),
            RecordKind::LostSamples(l) => ("Lost samples", Some(l.lost)),
            RecordKind::Throttle(_) => ("Throttled", Some(1)),
            RecordKind::Unthrottle(_) => ("Unthrottled", Some(1)),
            _ => return Ok(()),
        };
        let id = record.sample_id();
        let at = match id.time() {
            Some(t) => self.at(t),
            None => self.at(self.last),
        };
        if let Some(b) = self.built.as_mut() {
            b.marker(id.tid(), MarkerTiming::Instant(at), name, count);
        }
        Ok(())
    }

    fn lost(&mut self, records: u64) -> Result<()> {
        let at = self.at(self.last);
        if let Some(b) = self.built.as_mut() {
            b.marker(
                None,
                MarkerTiming::Instant(at),
                "Dropped by the writer",
                Some(records),
            );
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        let (Some(mut out), Some(b)) = (self.out.take(), self.built.take()) else {
            return Ok(());
        };
        serde_json::to_writer(&mut out, &b.profile)
            .map_err(std::io::Error::from)
            .and_then(|()| out.flush())
            .map_err(|e| write_error(&self.path, "write the Firefox profile", e))
    }
}
