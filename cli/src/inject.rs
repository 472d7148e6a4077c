//! `perfring inject`: start the command with the injector preloaded and its
//! configuration in `PERFRING_*` variables; the work happens inside the program
//! (`inject/`), configured by `perfring::inject`.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;

use perfring::inject::{find_library, Action, RecordFormat};
use perfring::Error;

use crate::args::InjectArgs;
use crate::Failure;

/// Runs the command; returns its exit status (128 + N if killed by signal N).
pub fn run(args: &InjectArgs) -> Result<i32, Failure> {
    let lib = find_library().map_err(Failure::Runtime)?;
    let config = &args.config;
    if config.actions.contains(&Action::Record) {
        // A fresh file per run: the injector appends JSON lines (exec'd programs share
        // the file) and makes a perf.data anew.
        std::fs::File::create(&config.output).map_err(|e| {
            Failure::Runtime(
                Error::from_errno(format!("create {}", config.output.display()), e)
                    .with_fix("give a writable file with -o"),
            )
        })?;
    }
    let mut preload = OsString::from(&lib);
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        preload.push(" ");
        preload.push(existing);
    }
    let program = &args.command[0];
    let status = std::process::Command::new(program)
        .args(&args.command[1..])
        .envs(config.to_env())
        .env("LD_PRELOAD", preload)
        .status()
        .map_err(|e| {
            Failure::Runtime(
                Error::from_errno(format!("run {}", program.to_string_lossy()), e)
                    .with_fix("check the command's name and that it is executable"),
            )
        })?;
    if config.actions.contains(&Action::Record) && config.format == RecordFormat::Perf {
        report_perf_files(&config.output);
    }
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Says on stderr what the program's processes wrote besides `FILE`: the `FILE.PID`
/// of each other process that recorded samples (children that exec'd).
fn report_perf_files(output: &std::path::Path) {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let Some(name) = output.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let mut others: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|f| {
            f.strip_prefix(&name)
                .and_then(|rest| rest.strip_prefix('.'))
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    others.sort();
    if !others.is_empty() {
        eprintln!(
            "perfring inject: other processes of the program recorded samples too, each in \
             its own file: {}",
            others.join(", ")
        );
    }
}
