//! perf-event-data 0.1 through its allocation-free `Visitor` (its `Record` enum boxes
//! samples and drops other records' `sample_id`).

use super::{k, Fold};
use perf_event_data::endian::Native;
use perf_event_data::parse::{ParseConfig, Parser};
use perf_event_data::{Comm, Lost, Mmap2, RecordMetadata, Sample, Throttle, Visitor};

pub fn config(st: u64, sample_id_all: bool) -> ParseConfig<Native> {
    let mut attr = perf_event_open_sys::bindings::perf_event_attr::default();
    attr.sample_type = st;
    attr.set_sample_id_all(sample_id_all.into());
    ParseConfig::from(attr)
}

/// The crate's visitor: the only way to get a non-sample record's `sample_id`
/// (its `Record` enum drops it), and it skips `Record`'s boxed sample.
struct Reader<'t>(&'t mut Fold);

impl Reader<'_> {
    fn sid(self, m: &RecordMetadata) {
        let s = m.sample_id();
        self.0.sid(s.pid(), s.tid(), s.time(), s.cpu());
    }
}

impl<'a> Visitor<'a> for Reader<'_> {
    type Output = ();

    fn visit_unimplemented(self, m: RecordMetadata) {
        self.sid(&m);
    }

    fn visit_sample(self, s: Sample<'a>, _: RecordMetadata) {
        let t = self.0;
        t.count(super::T_SAMPLE);
        t.opt(k::IP, s.ip());
        t.opt(k::PID, s.pid().map(u64::from));
        t.opt(k::TID, s.tid().map(u64::from));
        t.opt(k::TIME, s.time());
        t.opt(k::CPU, s.cpu().map(u64::from));
        t.opt(k::PERIOD, s.period());
        if let Some(chain) = s.callchain() {
            t.chain(
                chain.len(),
                chain.iter().fold(0u64, |a, &x| a.wrapping_add(x)),
            );
        }
    }

    fn visit_mmap2(self, m: Mmap2<'a>, md: RecordMetadata) {
        let t = &mut *self.0;
        t.count(super::T_MMAP2);
        t.f(k::M_PID, m.pid.into());
        t.f(k::M_TID, m.tid.into());
        t.f(k::M_ADDR, m.addr);
        t.f(k::M_LEN, m.len);
        t.f(k::M_PGOFF, m.pgoff);
        t.opt(k::M_MAJ, m.maj().map(u64::from));
        t.opt(k::M_MIN, m.min().map(u64::from));
        t.opt(k::M_INO, m.ino());
        t.opt(k::M_INO_GEN, m.ino_generation());
        t.f(k::M_PROT, m.prot.into());
        t.f(k::M_FLAGS, m.flags.into());
        t.bytes(k::M_NAME, &m.filename);
        self.sid(&md);
    }

    fn visit_comm(self, c: Comm<'a>, md: RecordMetadata) {
        let t = &mut *self.0;
        t.count(super::T_COMM);
        t.f(k::C_PID, c.pid.into());
        t.f(k::C_TID, c.tid.into());
        let exec = u32::from(md.misc()) & perfring::sys::PERF_RECORD_MISC_COMM_EXEC != 0;
        t.f(k::C_EXEC, u64::from(exec));
        t.bytes(k::C_NAME, &c.comm);
        self.sid(&md);
    }

    fn visit_lost(self, l: Lost, md: RecordMetadata) {
        self.0.count(super::T_LOST);
        self.0.f(k::L_ID, l.id);
        self.0.f(k::L_LOST, l.lost);
        self.sid(&md);
    }

    fn visit_throttle(self, th: Throttle, md: RecordMetadata) {
        self.0.count(super::T_THROTTLE);
        self.0.f(k::T_TIME, th.time);
        self.0.f(k::T_ID, th.id);
        self.0.f(k::T_STREAM, th.stream_id);
        self.sid(&md);
    }

    fn visit_unthrottle(self, th: Throttle, md: RecordMetadata) {
        self.0.count(super::T_UNTHROTTLE);
        self.0.f(k::U_TIME, th.time);
        self.0.f(k::U_ID, th.id);
        self.0.f(k::U_STREAM, th.stream_id);
        self.sid(&md);
    }
}

pub fn decode(data: &[u8], config: &ParseConfig<Native>) -> Fold {
    let mut t = Fold::default();
    super::each_record(data, |_, _, rec| {
        let mut parser = Parser::new(rec, config.clone());
        parser
            .parse_record(Reader(&mut t))
            .expect("perf-event-data parses");
        t.records += 1;
    });
    t
}
