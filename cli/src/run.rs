//! The `perfring` command: parse flags, call the library, print. Nothing here opens an
//! event, maps a ring or decodes a record by itself; exit codes are chosen in `main.rs`.

use std::ffi::OsString;
use std::fmt;

use crate::args::{Command, Topic};
use crate::{doctor, explain, inject, record, report, stat, watch};

/// Why the command failed; `main` turns each kind into an exit code.
#[derive(Debug)]
pub enum Failure {
    /// The command line is wrong (unknown flag, missing value, conflicting flags).
    Usage(String),
    /// A flag's value was rejected by the library (e.g. an event string that does not parse).
    Input(perfring::Error),
    /// The library failed at run time (`stat` opening a counter, starting a command).
    /// `doctor` reports failures as findings and `explain` opens nothing.
    Runtime(perfring::Error),
}

/// What a successful command produced.
#[derive(Debug)]
pub struct Done {
    /// The text for stdout.
    pub text: String,
    /// For `stat -- COMMAND`: the command's exit code, which becomes ours.
    pub child_exit: Option<i32>,
}

impl From<String> for Done {
    fn from(text: String) -> Done {
        Done {
            text,
            child_exit: None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(msg) => f.write_str(msg),
            Failure::Input(e) | Failure::Runtime(e) => write!(f, "{e}"),
        }
    }
}

/// Runs the command line `args` (without the program name), returning what to print.
pub fn run(args: impl IntoIterator<Item = OsString>) -> Result<Done, Failure> {
    Ok(match crate::args::parse(args)? {
        Command::Help(topic) => help(topic).to_string().into(),
        Command::Version => version().into(),
        Command::Doctor { json } => {
            let report = perfring::doctor::run();
            if json {
                (doctor::json(&report).to_string() + "\n").into()
            } else {
                doctor::table(&report).into()
            }
        }
        Command::Explain { event, json } => {
            // The attr as it would be opened by this user: user space only where the
            // kernel may not be profiled, as watch, record and stat open it.
            let cpu_wide = event.cpu.is_some() && event.pid.is_none() && event.tid.is_none();
            let fitted = perfring::privilege::Privileges::current()
                .fit(event.builder()?, cpu_wide)
                .map_err(Failure::Input)?;
            let fields = perfring::counter::explain::fields(&fitted.builder);
            let note = fitted.user_only.then(|| {
                format!(
                    "user space only: perf_event_paranoid is {} and the kernel needs 1 or CAP_PERFMON",
                    perfring::counter::diagnose::paranoid_level().unwrap_or(2)
                )
            });
            if json {
                let mut v = explain::json(&fields);
                if let (Some(note), Some(obj)) = (&note, v.as_object_mut()) {
                    obj.insert("note".into(), note.clone().into());
                }
                (v.to_string() + "\n").into()
            } else {
                let mut text = explain::text(&fields);
                if let Some(note) = note {
                    text += &format!("note: {note}\n");
                }
                text.into()
            }
        }
        Command::Watch(args) => Done {
            // Lines were printed as they came; the command's status is ours.
            text: String::new(),
            child_exit: watch::run(&args)?,
        },
        Command::Inject(args) => Done {
            text: String::new(),
            child_exit: Some(inject::run(&args)?),
        },
        Command::Record(args) => Done {
            // The summary went to stderr: stdout may be the profile.
            text: String::new(),
            child_exit: record::run(&args)?,
        },
        Command::Report(args) => report::run(&args)?.into(),
        Command::Stat(args) => Done {
            // The report went to stderr (or -o FILE), as perf stat's does.
            text: String::new(),
            child_exit: stat::run(&args)?,
        },
    })
}

/// `perfring version X.Y.Z`, as `perf version` prints perf's.
pub fn version() -> String {
    format!("perfring version {}\n", env!("CARGO_PKG_VERSION"))
}

/// Usage text for `topic`.
pub fn help(topic: Topic) -> &'static str {
    match topic {
        Topic::Main => MAIN_HELP,
        Topic::Doctor => DOCTOR_HELP,
        Topic::Explain => EXPLAIN_HELP,
        Topic::Stat => STAT_HELP,
        Topic::Watch => WATCH_HELP,
        Topic::Inject => INJECT_HELP,
        Topic::Record => RECORD_HELP,
        Topic::Report => REPORT_HELP,
    }
}

const MAIN_HELP: &str = "\
perfring: Linux perf_event overflow notifications and zero-copy ring decoding

Usage: perfring <COMMAND> [OPTIONS]

Commands:
  doctor    Probe what this machine allows: limits, PMUs, and each mechanism
  explain   Print the perf_event_attr an event and its flags would be opened with
  stat      Count events over a command's run, or a running process, like perf stat
  watch     Print each overflow of a counter as it happens, or each time a
            rate or ratio crosses a threshold (--when), and act on it
  record    Write samples to perf.data (perf report), pprof (go tool pprof), a
            flame graph (SVG), folded stacks or the Firefox Profiler's format, or
            push them to Pyroscope or Parca (--push URL [--every 15s])
  report    Print a perf.data's top functions, as perf report --stdio, or
            convert it to any of record's formats
  inject    Act on every overflow from inside an unmodified program (LD_PRELOAD)
  help      Print this text, or a command's (perfring help explain)

Options:
  -h, --help     Print help
  -v, --version  Print the version (also: perfring version)

Exit status: 0 on success, 1 when the operation failed, 2 on a usage error;
'stat -- COMMAND', 'watch -- COMMAND', 'record -- COMMAND' and 'inject -- COMMAND'
exit with the command's status.
";

const INJECT_HELP: &str = "\
Run a command with libperfring_inject.so preloaded: inside the program, every
thread (the main one, pthread_create'd and raw clone'd ones) gets its own counter
that raises a synchronous SIGTRAP in that thread on each overflow, where the
actions run, in signal context.

Usage: perfring inject -e EVENT... (-c N | -F HZ) --action ACTION... [-o FILE] [--format F] [--signal SIG] -- COMMAND...

Options:
  -e, --event EVENT    Event, resolved inside the program: mem:SYMBOL:x (its own
                       symbols), mem:ADDR:x, cpu-clock:u, page-faults, ...
  -c, --count N        Overflow every N events
  -F, --freq HZ|max    About HZ overflows a second (max: the kernel's maximum)
      --action ACTION  What to do on each overflow (repeatable):
                         record              ip, tid, time and frame-pointer stack, written
                                             to FILE as JSON lines (as watch --json) or
                                             perf.data (--format)
                         hook:LIB.so:SYMBOL  call void SYMBOL(const perfring_overflow *,
                                             void *) from LIB.so (async-signal-safe code!)
                         abort-at:N          abort (core dump) at the Nth overflow
                         stop-at:N           SIGSTOP the program at the Nth overflow
  -o, --output FILE    Where record writes (default perfring-inject.jsonl; truncated)
      --format F       json or perf (perf.data, for perf script/report); default
                       perf for a FILE ending in .data, else json
      --signal SIG     Deliver overflows as real-time signal SIG (RTMIN+3) to each
                       thread's own counter, opened as the thread starts, instead of
                       SIGTRAP; threads from a raw clone are then not covered
  -h, --help           Print help

The program's own SIGTRAP handlers keep working: perfring's handler stays and passes
every SIGTRAP that is not an overflow on to them. Without perfring, the same runs
with LD_PRELOAD=libperfring_inject.so and PERFRING_EVENT, PERFRING_PERIOD (or
PERFRING_FREQ), PERFRING_ACTION, PERFRING_OUTPUT, PERFRING_FORMAT (see the README).

Exit status: the command's (128 + N if killed by signal N); 125 if the injector
could not arm (its message says why); 1 or 2 if perfring itself failed.
";

const DOCTOR_HELP: &str = "\
Probe what this machine allows perfring to do, by trying each thing.

Usage: perfring doctor [--json]

Reports the kernel, perf_event_paranoid, perf_event_max_sample_rate,
perf_cpu_time_max_percent, the mlock budget for rings (perf_event_mlock_kb and
RLIMIT_MEMLOCK), the PMUs, and one check per mechanism: hardware, software,
breakpoint_x, breakpoint_w, breakpoint_r, tracepoint, uprobe, mmap, signal,
sigtrap, refresh, rdpmc. A failed check is a finding, not an error: the exit
status is 0 whenever the report was produced.

Options:
      --json  Print one JSON object instead of a table
  -h, --help  Print help
";

const EXPLAIN_HELP: &str = "\
Print the perf_event_attr (and pid, cpu, group_fd, flags) that an event would be
opened with, field by field, using the kernel's field names. Opens nothing.

Usage: perfring explain -e EVENT [OPTIONS]

Event options (the same as perfring watch):
  -e, --event EVENT          Event: cpu-clock, page-faults, cycles, mem:ADDR:x, mem:ADDR/LEN:w, ...
  -c, --count N              Sample period: overflow every N events
  -F, --freq HZ              Sample frequency: about HZ overflows a second
      --inherit              Also count threads and children created later
      --sample LIST          sample_type flags, comma-separated: ip,tid,time,addr,read,
                             callchain,id,cpu,period,stream_id,raw,...
      --read-format LIST     read_format flags: total_time_enabled,total_time_running,
                             id,group,lost
      --wakeup-events N      Wake up (or signal) every N samples
      --sigtrap DATA         Synchronous SIGTRAP on overflow with si_perf_data = DATA
  -p, --pid PID              Watch a process (by its main thread id)
  -t, --tid TID              Watch a thread
  -C, --cpu CPU              Watch one CPU (with -p/-t: that thread on that CPU only)

Numbers are decimal or 0x-prefixed hex. Beyond perf's syntax, -e also takes
mem:SYMBOL[+OFF][/LEN][:ACCESS] (a symbol of -p's executable) and
uprobe:PATH:SYMBOL[+OFF].

Options:
      --json                 Print one JSON object keyed by field name
  -h, --help                 Print help
";

const STAT_HELP: &str = "\
Count events over a command's whole run, a running process or thread, or CPUs,
and print them as perf stat does (to stderr, so the command's stdout stays its own).

Usage: perfring stat [-e EVENT[,EVENT]...] [OPTIONS] [--] COMMAND [ARGS]...
       perfring stat [-e EVENT...] [OPTIONS] (-p PID | -t TID | -a | -C CPUS) [--duration SECS]

The command is started stopped, the counters are attached (inherited by its
threads and children, enabled at its exec), and then it runs; its exit status
becomes perfring's. With -p/-t, counting lasts until it exits, Ctrl-C or
--duration; with -a/-C and no command, until Ctrl-C or --duration.

The table is perf stat's: clocks in msec with \"CPUs utilized\", other events with
their rate per second of task time (/sec), then seconds time elapsed, user and
sys. An event this machine cannot count (cycles without a hardware PMU) is shown
<not supported> and the others are counted; one that never ran is <not counted>;
counts multiplexed off the PMU are scaled by enabled/running time and shown with
the share of time they ran, (xx.xx%). As a user at perf_event_paranoid 2 the
events count user space only and are named :u, as perf's.

Events (default: perf's: task-clock, context-switches, cpu-migrations,
page-faults, cycles, instructions, branches, branch-misses):
  any perf event string    cpu-clock, page-faults:u, mem:0x1000/4:w, sched:sched_switch
  mem:SYMBOL[+OFF][/LEN][:ACCESS]
                           A breakpoint on a symbol of the program (ACCESS r, w,
                           rw or x; a PIE command is run with ASLR off for it)
  uprobe:PATH:SYMBOL[+OFF] A uprobe on a function of any ELF file

Options:
  -e, --event EVENT   Events to count, comma-separated; repeat for more
  -p, --pid PID       Count a running process (every thread it has)
  -t, --tid TID       Count a running thread
  -a, --all-cpus      Count everything on every CPU (root or paranoid <= 0)
  -C, --cpu CPUS      Count everything on these CPUs (0 or 0-3,5)
  -A, --no-aggr       With -a/-C: a line per CPU
      --per-thread    With -p/-t: a line per thread (comm-tid)
  -I, --interval-print MS
                      Print the counts of each MS milliseconds (>= 10) as it ends
  -r, --repeat N      Run the command N times: means, and each one's spread
                      ( +- x% , the standard deviation of the mean)
  -x, --field-separator SEP
                      CSV: value,unit,event,[spread%,]run time,running %,
                      metric,metric unit
  -j, --json          One JSON object per line, with perf's field names:
                      \"counter-value\", \"unit\", \"event\", [\"variance\"],
                      \"event-runtime\", \"pcnt-running\", \"metric-value\",
                      \"metric-unit\" (after \"interval\", \"thread\" or \"cpu\")
  -o, --output FILE   Write the report to FILE instead of stderr
      --duration SECS With -p, -t or -a/-C and no command: stop after SECS
  -h, --help          Print help

Exit status: the command's (128 + N if killed by signal N; of the last run with
-r); 0 without a command; 1 when counting failed (no such program, no
permission); 2 on a usage error or an event that does not parse or resolve
(unknown name or symbol).
";

const WATCH_HELP: &str = "\
Print every overflow of a sampling counter as it happens (one line per sample
record, not per wake-up), act on it, and end with a summary.

Usage: perfring watch [-e EVENT]... [OPTIONS] -- COMMAND [ARGS]...
       perfring watch [-e EVENT]... [OPTIONS] (-p PID | -t TID | -C CPU)
       perfring watch --when EXPR [--for D] [OPTIONS] (-- COMMAND... | -p PID | -t TID)

A command is started stopped; its counters are enabled at its exec and inherited
by its threads and children; its exit status becomes perfring's. -p watches every
thread of the process, also those it creates later, -t one thread, until it exits
or Ctrl-C; -C everything on one CPU until Ctrl-C.

Each line: seconds since start, event, tid, ip and the symbol it is in, the
period, and the event's running count. The summary: overflows, wake-ups, records
lost, throttles, duration. On a terminal, stderr shows a live status line.

Events (default: cycles, or cpu-clock without a hardware PMU):
  any perf event string, mem:SYMBOL[+OFF][/LEN][:ACCESS] (a PIE command is run
  with ASLR off for it), mem:OBJECT:SYMBOL... in a library of a running process
  (-p PID; e.g. mem:libc.so.6:malloc:x), uprobe:PATH:SYMBOL[+OFF]

Options:
  -e, --event EVENT    An event to watch; repeat for more
  -c, --count N        Overflow every N events (default 1 for breakpoints,
                       tracepoints and uprobes)
  -F, --freq HZ|max    About HZ overflows a second (default 1000 for counting
                       events); max, or more than it, is the kernel's maximum
                       (/proc/sys/kernel/perf_event_max_sample_rate), as perf's
  -m, --mmap-pages N   Ring data pages per event (default 64; rounded up to a
                       power of two, with perf's notice)
      --budget N       The kernel stops each event after N overflows per thread
                       (PERF_EVENT_IOC_REFRESH). Budgets are refused on inherited
                       counters, so each thread gets its own counter, opened as
                       its creation is reported (it may run briefly before)
      --exec CMD       Run sh -c CMD per overflow, in order, on a worker thread
                       (a queue of 1024; overflows beyond it are dropped and
                       counted), with PERFRING_EVENT, PERFRING_PID, PERFRING_TID,
                       PERFRING_IP, PERFRING_SYM and PERFRING_SEQ set; its stdout
                       goes to perfring's stderr. perfring waits for the queue
                       to empty before it exits
      --signal SIG     Send SIG (USR1, SIGUSR2, RTMIN+1, 10...) to the thread that
                       overflowed (tgkill)
      --stop-at N      At overflow N, SIGSTOP the process that overflowed, print
                       how to resume it (kill -CONT PID) and end, leaving it stopped.
                       A stopped command keeps perfring's stdout and stderr open:
                       a pipe reading them sees no EOF until it is resumed or killed
      --stop-after N   End after N overflows; a command is then sent SIGTERM
                       (SIGKILL 2 s later); -p/-t targets are left running
      --json           One JSON object per line: {\"type\":\"overflow\",\"seq\",
                       \"event\",\"pid\",\"tid\",\"cpu\",\"time_ns\",\"ip\",\"sym\",
                       \"sym_off\",\"period\",\"total\"}, then {\"type\":\"summary\",
                       \"overflows\",\"wakeups\",\"lost\",\"throttled\",\"duration_s\",
                       \"exit_code\"}. With a command and no -o, the command's
                       stdout goes to stderr, as perf record -o - does, so
                       that stdout holds only the JSON lines
  -o, --output FILE    Write the lines and the summary to FILE (mode 0600)
                       instead of stdout
  -g                   With each overflow, its call stack (--call-graph fp)
      --call-graph MODE
                       fp: the kernel walks frame pointers (code built with
                       -fno-omit-frame-pointer); dwarf[,BYTES]: BYTES of user
                       stack (default 8192) copied per sample and unwound with
                       the files' CFI (.eh_frame), no frame pointers needed.
                       Frames are named with DWARF file:line and inlined
                       functions, from records, even after the process exits.
                       Text: one indented line per frame; JSON: \"stack\":
                       [{\"ip\",\"sym\",\"off\",\"file\",\"line\",\"inlined\",\"dso\"}...],
                       innermost first. A dwarf sample is BYTES + ~100 bytes:
                       at high rates give a bigger ring (-m 512)
  -p, --pid PID        Watch every thread of a running process and the threads
                       it creates later
  -t, --tid TID        Watch a thread
  -C, --cpu CPU        Watch a CPU (needs perf_event_paranoid <= 0 or root)
  -h, --help           Print help

Threshold crossings (instead of overflows; -e, -c, -F, --budget and -C do not apply):
      --when EXPR      Print a line when a rate or ratio crosses a threshold, up
                       and back down, per thread: 'page-faults > 1000/s' (per second
                       of the thread's CPU time, like perf stat's /sec),
                       'context-switches/task-clock > 0.5/ms', 'cache-misses/
                       instructions * 1000 > 5' (a ratio of counts), '<' for
                       below. An event with '/' or spaces goes in braces:
                       '{mem:0x1000/4:w}/task-clock > 1/ms'. A group leader
                       overflows every window and its samples carry every
                       member's count (PERF_SAMPLE_READ), so nothing is read by a
                       system call. Each thread's first window (its exec, the
                       loader) is a baseline and not judged. --exec, --signal,
                       --stop-at N and --stop-after N act on crossings; --exec
                       sets PERFRING_EDGE, PERFRING_VALUE, PERFRING_THRESHOLD,
                       PERFRING_EXPR, PERFRING_PID, PERFRING_TID, PERFRING_SEQ.
                       --json: {\"type\":\"trigger\",\"edge\":\"up\"|\"down\",
                       \"value\",\"threshold\",\"tid\",\"time_ns\",\"pid\",\"seq\",
                       \"window_seq\",\"window_start_ns\",\"deltas\":{EVENT:N}}, then
                       {\"type\":\"summary\",\"crossings\",\"windows\",\"lost\",
                       \"throttled\",\"duration_s\",\"exit_code\",
                       \"active_at_end\":[TID...]} (threads for which the
                       condition still held when the watch ended)
      --window D|N     A window of CPU time (D: 10ms by default; 500us, 1s), or
                       of N events of a ratio's denominator, which then leads the
                       group (exact windows for breakpoints)
      --for D          The condition must hold (or have ended) for D of wall
                       time before a crossing is reported (default 0)
      --hysteresis PCT Down only below the threshold minus PCT percent of it (for
                       '<': up only above it plus PCT percent); default 10
      --per-process    Judge the threads of a process together (their deltas
                       summed over windows of at least one window length)

Exit status: the command's (128 + N if killed by signal N) when it ran to its
end; 0 after --stop-at, --stop-after, or with -p/-t/-C; 1 when watching failed
(no such program, an event this machine cannot count, e.g. a hardware event
without a PMU, no permission); 2 on a usage error or an event that does not parse
or resolve. On failure nothing is left running or stopped.
";

const RECORD_HELP: &str = "\
Record samples into a file other tools read: perf.data (perf report, perf script,
hotspot) or gzipped pprof (go tool pprof, Pyroscope, Parca).

Usage: perfring record [-e EVENT]... [-c N | -F HZ] [-g | --call-graph fp|dwarf]
                       [-o FILE] [--format perf|pprof] -- COMMAND [ARGS]...
       perfring record [OPTIONS] (-p PID | -t TID | -C CPU)
       perfring record [OPTIONS] --push URL [--every D] [PUSH OPTIONS] (TARGET)

The target is followed as with watch: a command from its exec, with its threads
and children; -p every thread of the process, also those created later; -t one
thread; -C one CPU. Recording ends when the target does, or on Ctrl-C (a first
SIGINT is passed to a command, a second one ends the recording). Records are
written as the kernel wrote them, on a writer thread; if it falls behind, records
are dropped and counted (perf.data then holds a LOST record saying how many).
The summary goes to stderr.

Inherited counters write one ring per CPU, as perf record does: a thread's period
restarts on each CPU it runs on, so N calls with -c P give about N/P samples.
--exact-periods keeps one period per thread (exactly N/P, as watch does): each new
thread of the target is held (ptrace) until it has a counter and ring of its own, so
the target is traced while it is recorded and a debugger cannot attach meanwhile.

Events (default: cycles, or cpu-clock without a hardware PMU): as for watch.

Options:
  -e, --event EVENT     An event to record; repeat for more
  -c, --count N         Sample every N events (default 1 for breakpoints,
                        tracepoints and uprobes)
  -F, --freq HZ|max     About HZ samples a second (default 4000 for counting
                        events); max, or more than it, is the kernel's maximum
  -g                    Call stacks by frame pointers (--call-graph fp)
      --call-graph fp|dwarf[,BYTES]
                        dwarf: copy user registers and BYTES of stack (default
                        8192) per sample, for perf report to unwind (pprof gets
                        the leaf only)
  -o, --output FILE     Where to write (default perf.data, or profile.pb.gz with
                        --format pprof); an existing perf.data becomes
                        perf.data.old, as perf keeps it. - is stdout: perf.data
                        in perf's pipe format (perf report -i -) or pprof; the
                        command's stdout then goes to stderr, as perf's does
      --format perf|pprof
                        perf.data (default) or gzipped profile.proto
      --exact-periods   One period per thread (exact N/P; see above)
  -m, --mmap-pages N    Ring data pages per event (default 256; rounded up to
                        a power of two, with perf's notice)
  -p, --pid PID         Record a running process
  -t, --tid TID         Record a thread
  -C, --cpu CPU         Record a CPU (needs perf_event_paranoid <= 0 or root)
  -h, --help            Print help

Pictures and viewers (these flags in their own block):
      --format svg|folded|firefox
                        svg: an interactive flame graph (default flamegraph.svg);
                        folded: one stack a line, for inferno/flamegraph.pl or
                        Pyroscope (stacks.folded); firefox: the Firefox Profiler's
                        format, open at profiler.firefox.com (profile.json)
      --off-cpu         Also sample where each thread blocks (context switches with
                        stacks), weighted by how long it waits: with cpu-clock (the
                        default) running and waiting time show side by side, in ns;
                        waits end in an [off-cpu] frame. Needs perf_event_paranoid
                        <= 1 or CAP_PERFMON (the switch happens in the kernel)
On a terminal, a status line shows the time, samples, records lost and the file's
size as the recording goes.

Pushing to a profile store (Grafana Pyroscope, Parca), once or as an agent:
      --push URL        Send the pprof profile to the store at URL (http:// or
                        https://HOST[:PORT][/PREFIX]) instead of writing a file
                        (with -o, also write it). The store is checked first: a bad
                        URL, certificate or credentials fail before the target starts
      --every D         An agent: a profile per D of the samples' time (15s, 1m),
                        pushed as it is cut, until the target ends or SIGTERM/Ctrl-C;
                        then what is left is pushed (10 s at most) and a summary says
                        how many profiles were cut, pushed and dropped, and why
      --push-protocol P pyroscope (default; push.v1 PusherService/Push),
                        pyroscope-ingest (/ingest, Pyroscope before 1.0), or parca
                        (WriteRaw over gRPC-Web, Parca's HTTP port)
      --push-ca FILE    Trust this CA (PEM) too, beside the system's
      --push-user USER  Basic authentication; the password from
                        $PERFRING_PUSH_PASSWORD or --push-password-file FILE
      --push-token-file FILE
                        A bearer token (first line); else $PERFRING_PUSH_TOKEN
      --push-tenant ID  X-Scope-OrgID (multi-tenant Pyroscope)
      --push-header 'NAME: VALUE'
                        An extra header (not Authorization: credentials never go on
                        the command line)
      --push-label KEY=VALUE
                        A label on every profile (repeatable)
      --push-service NAME
                        service_name (default: the target's program)
      --push-timeout D  One request's limit (default 10s); a stalled store is retried
      --push-queue N    Profiles kept while the store is slow or down (default 8,
                        64 MiB); beyond that the oldest is dropped and counted
Failed pushes that may pass (refused connection, timeout, 429, 5xx) are retried up
to 6 times with backoff (0.5 s doubling to 30 s) and printed as they happen.

Exit status: the command's (128 + N if killed by signal N); 0 with -p/-t/-C;
1 when recording failed (the file then holds what was written before: a full
disk or a closed pipe is named with its fix), or when a profile could not be
pushed; 2 on a usage error.
";

const REPORT_HELP: &str = "\
Read a perf.data back - perfring's own or perf record's - and print its top
functions as perf report --stdio does, or convert it to another format. The
records are replayed through the same unwinder and symbolizer as a recording; the
programs and libraries are read where the recording mapped them.

Usage: perfring report [-i FILE | FILE] [--sort symbol|dso|comm|tid] [--no-children]
       perfring report [-i FILE | FILE] --format perf|pprof|svg|folded|firefox [-o OUT]

Options:
  -i, --input FILE      The perf.data to read (default perf.data)
  -s, --sort KEY        Rows by symbol (default), dso, comm or tid
      --children        Self and children columns (default with call stacks)
      --no-children     Self only, ordered by it
      --stdio           Accepted for perf report's sake (the table is text)
      --format F        Write F instead of the table: perf, pprof, svg (flame
                        graph), folded or firefox
  -o, --output OUT      Where --format writes (default its usual name; - is
                        stdout, except for perf.data)
  -h, --help            Print help

A file cut short is read up to its last whole record; stderr says how far.
Exit status: 0; 1 when the file cannot be read (the offset and what was expected
there are named); 2 on a usage error.
";
