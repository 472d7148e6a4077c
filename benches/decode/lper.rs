//! linux-perf-event-reader 0.10: `RawEventRecord::parse` per record, the way its users
//! (samply) read a ring. Its `ThrottleRecord` leaves out `stream_id`, which this
//! decoder reads from the record's body itself.

use super::{k, Fold};
use linux_perf_event_reader::{
    Endianness, EventRecord, Mmap2FileId, PerfEventAttr, RawData, RawEventRecord, RecordParseInfo,
    RecordType,
};

pub fn info(attr: &perfring::sys::perf_event_attr) -> RecordParseInfo {
    let bytes = zerocopy::IntoBytes::as_bytes(attr);
    let (attr, _) = PerfEventAttr::parse::<_, byteorder::NativeEndian>(bytes).expect("attr");
    RecordParseInfo::new(&attr, Endianness::NATIVE)
}

/// THROTTLE's `stream_id`, which the crate's `ThrottleRecord` leaves out.
fn stream_id(body: RawData<'_>) -> u64 {
    let mut w = body;
    w.skip(16).expect("throttle body");
    w.read_u64::<byteorder::NativeEndian>()
        .expect("throttle.stream_id")
}

pub fn decode(data: &[u8], info: RecordParseInfo) -> Fold {
    let mut t = Fold::default();
    super::each_record(data, |ty, misc, rec| {
        let body = RawData::from(&rec[8..]);
        let raw = RawEventRecord::new(RecordType(ty), misc, body, info);
        let parsed = raw.parse().expect("lper parses");
        t.records += 1;
        match parsed {
            EventRecord::Sample(s) => {
                t.count(super::T_SAMPLE);
                t.opt(k::IP, s.ip);
                t.opt(k::PID, s.pid.map(|v| u64::from(v as u32)));
                t.opt(k::TID, s.tid.map(|v| u64::from(v as u32)));
                t.opt(k::TIME, s.timestamp);
                t.opt(k::CPU, s.cpu.map(u64::from));
                t.opt(k::PERIOD, s.period);
                if let Some(chain) = s.callchain {
                    let n = chain.len();
                    let sum = (0..n)
                        .map(|i| chain.get(i).expect("callchain entry"))
                        .fold(0u64, |a, x| a.wrapping_add(x));
                    t.chain(n, sum);
                }
                return;
            }
            EventRecord::Mmap2(m) => {
                t.count(super::T_MMAP2);
                t.f(k::M_PID, u64::from(m.pid as u32));
                t.f(k::M_TID, u64::from(m.tid as u32));
                t.f(k::M_ADDR, m.address);
                t.f(k::M_LEN, m.length);
                t.f(k::M_PGOFF, m.page_offset);
                if let Mmap2FileId::InodeAndVersion(i) = &m.file_id {
                    t.f(k::M_MAJ, i.major.into());
                    t.f(k::M_MIN, i.minor.into());
                    t.f(k::M_INO, i.inode);
                    t.f(k::M_INO_GEN, i.inode_generation);
                }
                t.f(k::M_PROT, m.protection.into());
                t.f(k::M_FLAGS, m.flags.into());
                t.bytes(k::M_NAME, &m.path.as_slice());
            }
            EventRecord::Comm(c) => {
                t.count(super::T_COMM);
                t.f(k::C_PID, u64::from(c.pid as u32));
                t.f(k::C_TID, u64::from(c.tid as u32));
                t.f(k::C_EXEC, u64::from(c.is_execve));
                t.bytes(k::C_NAME, &c.name.as_slice());
            }
            EventRecord::Lost(l) => {
                t.count(super::T_LOST);
                t.f(k::L_ID, l.id);
                t.f(k::L_LOST, l.count);
            }
            EventRecord::Throttle(th) => {
                t.count(super::T_THROTTLE);
                t.f(k::T_TIME, th.timestamp);
                t.f(k::T_ID, th.id);
                t.f(k::T_STREAM, stream_id(body));
            }
            EventRecord::Unthrottle(th) => {
                t.count(super::T_UNTHROTTLE);
                t.f(k::U_TIME, th.timestamp);
                t.f(k::U_ID, th.id);
                t.f(k::U_STREAM, stream_id(body));
            }
            _ => {}
        }
        let c = raw.common_data().expect("lper sample_id");
        t.sid(
            c.pid.map(|v| v as u32),
            c.tid.map(|v| v as u32),
            c.timestamp,
            c.cpu,
        );
    });
    t
}
