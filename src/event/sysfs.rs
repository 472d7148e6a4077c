//! PMU and tracepoint lookup under a root directory, and sysfs format-term encoding.
//!
//! Nothing here opens a perf fd: it only reads `type`, `format/*`, `events/*` and
//! tracepoint `id` files below the root it is given, so tests can use a fake tree.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, ErrorKind, Result};

/// Where to find sysfs and tracefs: a root directory that mirrors `/`.
///
/// PMUs are read from `<root>/sys/bus/event_source/devices/<pmu>/` and tracepoints
/// from `<root>/sys/kernel/tracing/events/` (or `<root>/sys/kernel/debug/tracing/`),
/// unless [`with_tracefs`](Sysfs::with_tracefs) says otherwise.
///
/// # Examples
/// ```
/// use perfring::event::{Event, Sysfs};
/// let fake = Sysfs::new("/nonexistent");
/// // Symbolic events need no sysfs at all.
/// let e = Event::parse_in("cpu-clock:u", &fake)?;
/// assert_eq!(e.to_string(), "cpu-clock:u");
/// # Ok::<(), perfring::Error>(())
/// ```
///
/// A `Sysfs` lists the PMU names and their event names once and keeps the lists (they
/// are read on every failed parse, for suggestions): make a new one to see PMUs that
/// appeared since.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
    tracefs: Option<PathBuf>,
    pmu_names: OnceLock<Vec<String>>,
    aliases: OnceLock<Vec<String>>,
}

impl PartialEq for Sysfs {
    /// The same tree (what was read from it is a cache).
    fn eq(&self, other: &Sysfs) -> bool {
        self.root == other.root && self.tracefs == other.tracefs
    }
}

impl Eq for Sysfs {}

impl Default for Sysfs {
    /// The running system's sysfs, at `/`.
    fn default() -> Self {
        Sysfs::new("/")
    }
}

/// A PMU the kernel registered: its name and the `perf_event_attr.type` to use for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pmu {
    /// Directory name, e.g. `software`, `breakpoint`, `uprobe`, `cpu`.
    pub name: String,
    /// Its dynamic or fixed type number.
    pub type_: u32,
}

/// A PMU as described in sysfs, for parsing: its `type` number and format terms.
#[derive(Debug, Clone)]
pub(super) struct PmuFormats {
    pub(super) name: String,
    pub(super) type_: u32,
    pub(super) formats: Vec<(String, Format)>,
    dir: PathBuf,
}

impl Sysfs {
    /// A tree rooted at `root` (`"/"` for the running system).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs {
            root: root.into(),
            tracefs: None,
            pmu_names: OnceLock::new(),
            aliases: OnceLock::new(),
        }
    }

    /// Uses `dir` as the tracefs mount (the directory holding `events/`).
    pub fn with_tracefs(mut self, dir: impl Into<PathBuf>) -> Self {
        self.tracefs = Some(dir.into());
        self
    }

    /// The root directory this was made with.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn devices(&self) -> PathBuf {
        self.root.join("sys/bus/event_source/devices")
    }

    /// The tracefs mount: the override, else the first of `sys/kernel/tracing` and
    /// `sys/kernel/debug/tracing` under the root that has an `events/` directory.
    pub fn tracefs(&self) -> Option<PathBuf> {
        if let Some(t) = &self.tracefs {
            return Some(t.clone());
        }
        ["sys/kernel/tracing", "sys/kernel/debug/tracing"]
            .iter()
            .map(|p| self.root.join(p))
            .find(|p| p.join("events").is_dir())
    }

    /// The PMUs present, each with its `type` number, sorted by type then name.
    pub fn pmus(&self) -> Vec<Pmu> {
        let mut pmus: Vec<Pmu> = self
            .pmu_list()
            .iter()
            .filter(|p| safe_component(p))
            .filter_map(|p| {
                let t = fs::read_to_string(self.devices().join(p).join("type")).ok()?;
                Some(Pmu {
                    name: p.clone(),
                    type_: t.trim().parse().ok()?,
                })
            })
            .collect();
        pmus.sort_by(|a, b| (a.type_, &a.name).cmp(&(b.type_, &b.name)));
        pmus
    }

    /// The names of the PMUs present, sorted (as first listed by this `Sysfs`).
    pub fn pmu_names(&self) -> Vec<String> {
        self.pmu_list().to_vec()
    }

    fn pmu_list(&self) -> &[String] {
        self.pmu_names.get_or_init(|| {
            let mut names: Vec<String> = fs::read_dir(self.devices())
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            names.sort();
            names
        })
    }

    /// The PMUs whose `events/` folder names an event `alias`, sorted.
    pub(super) fn pmus_with_alias(&self, alias: &str) -> Vec<String> {
        if !safe_component(alias) {
            return Vec::new();
        }
        self.pmu_list()
            .iter()
            .filter(|&p| {
                safe_component(p) && self.devices().join(p).join("events").join(alias).is_file()
            })
            .cloned()
            .collect()
    }

    /// Every PMU event name in sysfs (for suggestions), sorted, read once.
    pub(super) fn all_aliases(&self) -> &[String] {
        self.aliases.get_or_init(|| {
            let mut all: Vec<String> = self
                .pmu_list()
                .iter()
                .filter_map(|p| self.pmu(p).ok())
                .flat_map(|p| p.alias_names())
                .collect();
            all.sort();
            all.dedup();
            all
        })
    }

    /// Reads PMU `name`: its type and format terms.
    pub(super) fn pmu(&self, name: &str) -> Result<PmuFormats> {
        let op = format!("look up PMU '{name}'");
        let dir = self.devices().join(name);
        if !safe_component(name) || !dir.is_dir() {
            let present = self.pmu_names();
            let mut fix = if present.is_empty() {
                format!(
                    "no PMUs found under {}; is sysfs mounted?",
                    self.devices().display()
                )
            } else {
                format!("PMUs present: {}", present.join(", "))
            };
            if let Some(m) = super::names::did_you_mean(name, &present) {
                fix = format!("{m} ({fix})");
            }
            return Err(Error::new(ErrorKind::BadEvent, op, "no such PMU").with_fix(fix));
        }
        let type_text = fs::read_to_string(dir.join("type")).map_err(|e| {
            Error::new(
                ErrorKind::BadEvent,
                &op,
                format!("cannot read {}: {e}", dir.join("type").display()),
            )
        })?;
        let type_ = type_text.trim().parse::<u32>().map_err(|_| {
            Error::new(
                ErrorKind::BadEvent,
                &op,
                format!(
                    "{} holds {:?}, not a number",
                    dir.join("type").display(),
                    type_text.trim()
                ),
            )
        })?;
        let mut formats = Vec::new();
        for entry in fs::read_dir(dir.join("format"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(term) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(spec) = fs::read_to_string(entry.path()) else {
                continue;
            };
            let format = Format::parse(spec.trim()).map_err(|e| {
                Error::new(
                    ErrorKind::BadEvent,
                    &op,
                    format!("format/{term}: {}", e.cause()),
                )
            })?;
            formats.push((term, format));
        }
        formats.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(PmuFormats {
            name: name.to_string(),
            type_,
            formats,
            dir,
        })
    }

    /// The id of tracepoint `subsystem:name`, from `<tracefs>/events/<subsystem>/<name>/id`.
    pub(super) fn tracepoint_id(&self, subsystem: &str, name: &str) -> Result<u64> {
        let op = format!("look up tracepoint '{subsystem}:{name}'");
        let fix = "check that tracefs is mounted (mount -t tracefs nodev /sys/kernel/tracing), \
                   that the tracepoint exists (perf list tracepoint), and that you are root or \
                   /proc/sys/kernel/perf_event_paranoid allows tracepoints (-1)";
        let Some(tracefs) = self.tracefs() else {
            return Err(Error::new(
                ErrorKind::BadEvent,
                op,
                format!(
                    "no tracefs found at {} or {}",
                    self.root.join("sys/kernel/tracing").display(),
                    self.root.join("sys/kernel/debug/tracing").display()
                ),
            )
            .with_fix(fix));
        };
        if !safe_component(subsystem) || !safe_component(name) {
            return Err(Error::new(
                ErrorKind::BadEvent,
                op,
                "tracepoint names are letters, digits, '_' and '-'",
            ));
        }
        let path = tracefs.join("events").join(subsystem).join(name).join("id");
        let text = fs::read_to_string(&path).map_err(|e| {
            let mut err = Error::new(
                ErrorKind::BadEvent,
                &op,
                format!("cannot read {}: {e}", path.display()),
            );
            let subsystem_dir = tracefs.join("events").join(subsystem);
            let candidates: Vec<String> = fs::read_dir(&subsystem_dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .collect();
            err = match super::names::did_you_mean(name, &candidates) {
                Some(m) => err.with_fix(format!("{m} ({fix})")),
                None => err.with_fix(fix),
            };
            err
        })?;
        text.trim().parse::<u64>().map_err(|_| {
            Error::new(
                ErrorKind::BadEvent,
                op,
                format!("{} holds {:?}, not a number", path.display(), text.trim()),
            )
        })
    }
}

impl PmuFormats {
    pub(super) fn format(&self, term: &str) -> Option<&Format> {
        self.formats.iter().find(|(n, _)| n == term).map(|(_, f)| f)
    }

    pub(super) fn term_names(&self) -> Vec<String> {
        self.formats.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The named events in `events/` (without `.scale`, `.unit` and similar helpers).
    pub(super) fn alias_names(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.dir.join("events"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.contains('.'))
            .collect();
        names.sort();
        names
    }

    /// The term list of alias `name` (e.g. `event=0x3c,umask=0x1`), if there is one.
    pub(super) fn alias(&self, name: &str) -> Option<String> {
        if !safe_component(name) {
            return None;
        }
        fs::read_to_string(self.dir.join("events").join(name))
            .ok()
            .map(|s| s.trim().to_string())
    }
}

/// A path component we are willing to join: no separators, not `.`/`..`, not empty.
pub(super) fn safe_component(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Which `perf_event_attr` word a format term's bits live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigWord {
    /// `config`
    Config,
    /// `config1`
    Config1,
    /// `config2`
    Config2,
}

impl ConfigWord {
    /// The index into a `[config, config1, config2]` array.
    pub fn index(self) -> usize {
        match self {
            ConfigWord::Config => 0,
            ConfigWord::Config1 => 1,
            ConfigWord::Config2 => 2,
        }
    }
}

/// A PMU format term's layout, as in `/sys/bus/event_source/devices/<pmu>/format/<term>`:
/// `config:0-7`, `config1:0-63`, `config:0-7,32-35`, `config:5`.
///
/// The value's low bits go into the first range, the next bits into the second, and so
/// on (the kernel's and perf's convention).
///
/// # Examples
/// ```
/// use perfring::event::Format;
/// let f = Format::parse("config:0-7,32-35")?;
/// assert_eq!(f.bits(), 12);
/// let mut words = [0u64; 3];
/// f.encode(0xabc, &mut words)?;
/// assert_eq!(words[0], 0xa_0000_00bc);
/// assert_eq!(f.decode(&words), 0xabc);
/// # Ok::<(), perfring::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    word: ConfigWord,
    /// Inclusive `(low, high)` bit ranges, in value order, non-overlapping.
    ranges: Vec<(u8, u8)>,
}

impl Format {
    /// Parses a format spec such as `config1:0-63`.
    ///
    /// # Errors
    /// [`ErrorKind::BadEvent`] when the word is not `config`, `config1` or `config2`,
    /// a bit is above 63, a range is reversed, or ranges overlap.
    pub fn parse(spec: &str) -> Result<Format> {
        let bad = |why: String| {
            Error::new(
                ErrorKind::BadEvent,
                format!("parse format spec {spec:?}"),
                why,
            )
            .with_fix(
                "a format spec is WORD:RANGE[,RANGE...] where WORD is config, config1 or config2 \
                 and RANGE is BIT or LOW-HIGH with bits 0-63, e.g. config:0-7,32-35",
            )
        };
        let (word, ranges_text) = spec
            .split_once(':')
            .ok_or_else(|| bad("missing ':' after the config word".into()))?;
        let word = match word {
            "config" => ConfigWord::Config,
            "config1" => ConfigWord::Config1,
            "config2" => ConfigWord::Config2,
            other => return Err(bad(format!("unknown config word {other:?}"))),
        };
        let bit = |s: &str| -> Result<u8> {
            match s.parse::<u8>() {
                Ok(b) if b < 64 && !s.starts_with('+') => Ok(b),
                _ => Err(bad(format!("{s:?} is not a bit number 0-63"))),
            }
        };
        let mut ranges = Vec::new();
        let mut used = 0u64;
        for part in ranges_text.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (bit(lo)?, bit(hi)?),
                None => {
                    let b = bit(part)?;
                    (b, b)
                }
            };
            if lo > hi {
                return Err(bad(format!("range {part:?} is reversed")));
            }
            let mask = range_mask(lo, hi);
            if used & mask != 0 {
                return Err(bad(format!("range {part:?} overlaps an earlier one")));
            }
            used |= mask;
            ranges.push((lo, hi));
        }
        Ok(Format { word, ranges })
    }

    /// The word the bits live in.
    pub fn word(&self) -> ConfigWord {
        self.word
    }

    /// How many value bits the term holds (at most 64).
    pub fn bits(&self) -> u32 {
        self.ranges
            .iter()
            .map(|(lo, hi)| u32::from(hi - lo) + 1)
            .sum()
    }

    /// The largest value the term can hold.
    pub fn max_value(&self) -> u64 {
        match self.bits() {
            64 => u64::MAX,
            n => (1u64 << n) - 1,
        }
    }

    /// Writes `value` into its bits of `words` (`[config, config1, config2]`), clearing
    /// whatever those bits held.
    ///
    /// # Errors
    /// [`ErrorKind::BadEvent`] when `value` needs more bits than the term has.
    pub fn encode(&self, value: u64, words: &mut [u64; 3]) -> Result<()> {
        if value > self.max_value() {
            return Err(Error::new(
                ErrorKind::BadEvent,
                format!("encode {value:#x} as {self}"),
                format!("the value needs more than the term's {} bits", self.bits()),
            )
            .with_fix(format!("use a value of at most {:#x}", self.max_value())));
        }
        let word = &mut words[self.word.index()];
        let mut rest = value;
        for &(lo, hi) in &self.ranges {
            let width = u32::from(hi - lo) + 1;
            let part = if width == 64 {
                rest
            } else {
                rest & ((1u64 << width) - 1)
            };
            *word = (*word & !range_mask(lo, hi)) | (part << lo);
            rest = rest.checked_shr(width).unwrap_or(0);
        }
        Ok(())
    }

    /// Reads the term's value back out of `words`.
    pub fn decode(&self, words: &[u64; 3]) -> u64 {
        let word = words[self.word.index()];
        let mut value = 0u64;
        let mut shift = 0u32;
        for &(lo, hi) in &self.ranges {
            let part = (word & range_mask(lo, hi)) >> lo;
            value |= part.checked_shl(shift).unwrap_or(0);
            shift += u32::from(hi - lo) + 1;
        }
        value
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let word = match self.word {
            ConfigWord::Config => "config",
            ConfigWord::Config1 => "config1",
            ConfigWord::Config2 => "config2",
        };
        write!(f, "{word}:")?;
        for (i, (lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

/// Bits `lo..=hi` set (`hi` < 64).
fn range_mask(lo: u8, hi: u8) -> u64 {
    let width = u32::from(hi - lo) + 1;
    let ones = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    ones << lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(spec: &str, value: u64, expected: Option<[u64; 3]>) {
        let got = Format::parse(spec).and_then(|f| {
            let mut words = [0; 3];
            f.encode(value, &mut words)?;
            assert_eq!(f.decode(&words), value, "{spec} decode");
            assert_eq!(Format::parse(&f.to_string()).unwrap(), f, "{spec} display");
            Ok(words)
        });
        assert_eq!(got.ok(), expected, "{spec} <- {value:#x}");
    }

    #[test]
    fn formats() {
        check("config:0-7", 0x3c, Some([0x3c, 0, 0]));
        check("config:8-15", 0x41, Some([0x4100, 0, 0]));
        check("config:0-7,32-35", 0xabc, Some([0xa_0000_00bc, 0, 0]));
        check("config1:0-63", u64::MAX, Some([0, u64::MAX, 0]));
        check("config2:5", 1, Some([0, 0, 1 << 5]));
        check("config:63", 1, Some([1 << 63, 0, 0]));
        check("config:0-7", 0x100, None);
        check("config:5", 2, None);
        check("config:7-0", 0, None);
        check("config:0-64", 0, None);
        check("config:0-7,4-9", 0, None);
        check("config3:0-7", 0, None);
        check("config", 0, None);
        check("config:", 0, None);
        check("config:+1", 0, None);
        check("config:1-", 0, None);
    }
}
