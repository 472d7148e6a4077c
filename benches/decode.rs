//! Decode throughput: perfring's `Record::parse` against linux-perf-event-reader 0.10,
//! perf-event-data 0.1, and a loop that only walks record headers (the floor).
//!
//! The stream is synthetic, written with `perfring::records::encode`: 97% samples with
//! IP|TID|TIME|CPU|PERIOD|CALLCHAIN (depth 4..=32 from a fixed-seed xorshift), the rest
//! MMAP2, COMM, LOST, THROTTLE and UNTHROTTLE, all with a `sample_id_all` trailer. Two
//! sizes: a 512 KiB window (a typical ring) and a 64 MiB stream. Every decoder must
//! agree on the record count, the sum of IPs and the number of callchain entries before
//! timing; the timed loops compute exactly those (each decoder fully parses every
//! record, the header walk only reads sizes).
//!
//! Run: `cargo bench --bench decode -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use perfring::records::encode::{self, Ids, SampleFields};
use perfring::records::{Layout, Mmap2, Mmap2File, Record, RecordKind, Throttle};
use perfring::sys;

const SAMPLE_TYPE: u32 = sys::PERF_SAMPLE_IP
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_CPU
    | sys::PERF_SAMPLE_PERIOD
    | sys::PERF_SAMPLE_CALLCHAIN;

/// What every decoder must agree on.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Totals {
    records: u64,
    ip_sum: u64,
    chain_entries: u64,
}

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Records in the kernel's format until `target` bytes (whole records only).
fn stream(layout: &Layout, target: usize) -> Vec<u8> {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::with_capacity(target + 4096);
    let mut rec = Vec::with_capacity(512);
    let mut time = 1_000_000u64;
    loop {
        rec.clear();
        time += 1000 + rng.next() % 1000;
        let r = rng.next();
        let ids = Ids {
            pid: 4242,
            tid: 4243 + (r % 4) as u32,
            time,
            cpu: (r >> 8) as u32 % 2,
            ..Ids::default()
        };
        if r % 100 < 97 {
            let depth = 4 + (rng.next() % 29) as usize;
            let base = 0x5555_0000_0000 + (rng.next() % 0x10_0000);
            let f = SampleFields {
                ip: base,
                pid: ids.pid,
                tid: ids.tid,
                time,
                cpu: ids.cpu,
                period: 100_003,
                callchain: (0..depth).map(|i| base + 64 * i as u64).collect(),
                ..SampleFields::default()
            };
            encode::sample(&mut rec, layout, sys::PERF_RECORD_MISC_USER as u16, &f);
        } else {
            let kind = match r % 5 {
                0 => RecordKind::Mmap2(Mmap2 {
                    pid: 4242,
                    tid: 4242,
                    addr: 0x7f00_0000_0000 + (r & 0xffff_f000),
                    len: 0x20_0000,
                    pgoff: 0,
                    file: Mmap2File::Inode {
                        maj: 8,
                        min: 1,
                        ino: r >> 20,
                        ino_generation: 0,
                    },
                    prot: 5,
                    flags: 2,
                    filename: b"/usr/lib/x86_64-linux-gnu/libc.so.6",
                }),
                1 => RecordKind::Comm(perfring::records::Comm {
                    pid: 4242,
                    tid: ids.tid,
                    comm: b"worker-thread",
                }),
                2 => RecordKind::Lost(perfring::records::Lost {
                    id: 1,
                    lost: r % 64,
                }),
                3 => RecordKind::Throttle(Throttle {
                    time,
                    id: 1,
                    stream_id: 1,
                }),
                _ => RecordKind::Unthrottle(Throttle {
                    time,
                    id: 1,
                    stream_id: 1,
                }),
            };
            encode::record_kind(&mut rec, layout, 0, &kind, &ids);
        }
        if out.len() + rec.len() > target {
            return out;
        }
        out.extend_from_slice(&rec);
    }
}

/// The floor: read each header's size and skip.
fn header_walk(data: &[u8]) -> Totals {
    let mut t = Totals::default();
    let mut rest = data;
    while let Some(h) = rest.first_chunk::<8>() {
        let size = usize::from(u16::from_ne_bytes([h[6], h[7]]));
        if size < 8 {
            break;
        }
        t.records += 1;
        rest = rest.get(size..).unwrap_or_default();
    }
    t
}

fn perfring(data: &[u8], layout: &Layout) -> Totals {
    let mut t = Totals::default();
    for rec in Record::iter(data, layout) {
        let rec = rec.expect("valid stream");
        t.records += 1;
        if let RecordKind::Sample(s) = rec.kind() {
            t.ip_sum = t.ip_sum.wrapping_add(s.ip().unwrap_or(0));
            if let Some(chain) = s.callchain() {
                t.chain_entries += chain.len() as u64;
            }
        }
    }
    t
}

/// Splits a stream into (type, misc, whole record) for the comparison crates.
fn each_record(data: &[u8], mut f: impl FnMut(u32, u16, &[u8])) {
    let mut rest = data;
    while let Some(h) = rest.first_chunk::<8>() {
        let ty = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]);
        let misc = u16::from_ne_bytes([h[4], h[5]]);
        let size = usize::from(u16::from_ne_bytes([h[6], h[7]]));
        let (rec, tail) = rest.split_at(size);
        f(ty, misc, rec);
        rest = tail;
    }
}

mod lper {
    use super::Totals;
    use linux_perf_event_reader::{
        Endianness, EventRecord, PerfEventAttr, RawData, RawEventRecord, RecordParseInfo,
        RecordType,
    };

    pub fn info(attr: &perfring::sys::perf_event_attr) -> RecordParseInfo {
        let bytes = zerocopy::IntoBytes::as_bytes(attr);
        let (attr, _) = PerfEventAttr::parse::<_, byteorder::NativeEndian>(bytes).expect("attr");
        RecordParseInfo::new(&attr, Endianness::NATIVE)
    }

    pub fn decode(data: &[u8], info: RecordParseInfo) -> Totals {
        let mut t = Totals::default();
        super::each_record(data, |ty, misc, rec| {
            let raw = RawEventRecord::new(RecordType(ty), misc, RawData::from(&rec[8..]), info);
            let parsed = raw.parse().expect("lper parses");
            t.records += 1;
            if let EventRecord::Sample(s) = parsed {
                t.ip_sum = t.ip_sum.wrapping_add(s.ip.unwrap_or(0));
                if let Some(chain) = s.callchain {
                    t.chain_entries += chain.len() as u64;
                }
            }
        });
        t
    }
}

mod ped {
    use super::Totals;
    use perf_event_data::endian::Native;
    use perf_event_data::parse::{ParseConfig, Parser};
    use perf_event_data::Record;

    pub fn config(st: u64) -> ParseConfig<Native> {
        let mut attr = perf_event_open_sys::bindings::perf_event_attr::default();
        attr.sample_type = st;
        attr.set_sample_id_all(1);
        ParseConfig::from(attr)
    }

    pub fn decode(data: &[u8], config: &ParseConfig<Native>) -> Totals {
        let mut t = Totals::default();
        super::each_record(data, |_, _, rec| {
            let mut parser = Parser::new(rec, config.clone());
            let parsed: Record = parser.parse().expect("perf-event-data parses");
            t.records += 1;
            if let Record::Sample(s) = parsed {
                t.ip_sum = t.ip_sum.wrapping_add(s.ip().unwrap_or(0));
                if let Some(chain) = s.callchain() {
                    t.chain_entries += chain.len() as u64;
                }
            }
        });
        t
    }
}

fn bench(c: &mut Criterion) {
    let mut attr: sys::perf_event_attr = zerocopy::FromZeros::new_zeroed();
    attr.size = std::mem::size_of::<sys::perf_event_attr>() as u32;
    attr.sample_type = SAMPLE_TYPE.into();
    attr.set_sample_id_all(1);
    let layout = Layout::new(&attr).unwrap();
    let info = lper::info(&attr);
    let config = ped::config(SAMPLE_TYPE.into());

    for (name, size) in [("window_512KiB", 512 << 10), ("stream_64MiB", 64 << 20)] {
        let data = stream(&layout, size);
        let want = perfring(&data, &layout);
        assert_eq!(header_walk(&data).records, want.records);
        assert_eq!(
            lper::decode(&data, info),
            want,
            "linux-perf-event-reader disagrees"
        );
        assert_eq!(
            ped::decode(&data, &config),
            want,
            "perf-event-data disagrees"
        );
        assert!(want.records > 1000 && want.chain_entries > 4 * want.records / 2);
        // For records/s: divide by the times criterion reports.
        eprintln!(
            "decode/{name}: {} records, {} bytes, {} callchain entries (all four decoders agree)",
            want.records,
            data.len(),
            want.chain_entries
        );

        let mut g = c.benchmark_group(format!("decode/{name}"));
        g.throughput(Throughput::Bytes(data.len() as u64));
        if size > 1 << 20 {
            g.sample_size(10).sampling_mode(SamplingMode::Flat);
        }
        g.bench_function("header_walk", |b| b.iter(|| header_walk(black_box(&data))));
        g.bench_function("perfring", |b| {
            b.iter(|| perfring(black_box(&data), black_box(&layout)))
        });
        g.bench_function("linux-perf-event-reader", |b| {
            b.iter(|| lper::decode(black_box(&data), info))
        });
        g.bench_function("perf-event-data", |b| {
            b.iter(|| ped::decode(black_box(&data), &config))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
