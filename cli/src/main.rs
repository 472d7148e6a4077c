//! `perfring`: the command-line front end. Thin by design: `cli` parses and prints,
//! the library does the work, and this file alone decides exit codes.

mod args;
mod doctor;
mod exec;
mod explain;
mod inject;
mod json;
mod outputs;
mod push;
mod record;
mod report;
mod run;
mod stat;
mod stat_table;
mod trigger;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use run::Failure;

/// Success.
const EXIT_OK: u8 = 0;
/// The operation failed at run time.
const EXIT_FAILURE: u8 = 1;
/// The command line was wrong.
const EXIT_USAGE: u8 = 2;

fn exit_code(failure: &Failure) -> u8 {
    match failure {
        Failure::Usage(_) | Failure::Input(_) => EXIT_USAGE,
        Failure::Runtime(_) => EXIT_FAILURE,
    }
}

fn main() -> ExitCode {
    match run::run(std::env::args_os().skip(1)) {
        Ok(done) => {
            let mut stdout = std::io::stdout().lock();
            // `stat -- COMMAND` passes the command's status on, as `perf stat` does.
            let code = done
                .child_exit
                .map_or(EXIT_OK, |c| u8::try_from(c).unwrap_or(EXIT_FAILURE));
            match stdout
                .write_all(done.text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                // A closed pipe (`perfring doctor | head -1`) is not a failure.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("perfring: writing the output: {e}");
                    ExitCode::from(EXIT_FAILURE)
                }
                _ => ExitCode::from(code),
            }
        }
        Err(failure) => {
            eprintln!("perfring: {failure}");
            ExitCode::from(exit_code(&failure))
        }
    }
}
