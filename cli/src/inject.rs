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
    refuse_static(&args.command[0])?;
    let config = &args.config;
    if config.actions.contains(&Action::Record) {
        // A fresh file per run: the injector appends JSON lines (exec'd programs share
        // the file) and makes a perf.data anew.
        // Mode 0600, never through a symbolic link: it will hold the program's samples.
        perfring::output::create_private(&config.output).map_err(Failure::Runtime)?;
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

/// A program without an interpreter (`PT_INTERP`: statically linked C, most Go
/// programs) never runs the dynamic loader, so `LD_PRELOAD` cannot bring the injector
/// in: refused before it runs, with the commands that need nothing inside it. A script
/// (not ELF) starts a dynamic interpreter and is let through.
fn refuse_static(program: &std::ffi::OsStr) -> Result<(), Failure> {
    let Some(path) = perfring::launch::find_program(program) else {
        return Ok(()); // the run itself says it is not found
    };
    let Ok(elf) = perfring::elf::ElfFile::open(&path) else {
        return Ok(());
    };
    if elf.has_interpreter() {
        return Ok(());
    }
    Err(Failure::Runtime(
        Error::new(
            perfring::ErrorKind::Unsupported,
            format!("inject into {}", path.display()),
            "it is statically linked (no PT_INTERP): the dynamic loader never runs, so \
             LD_PRELOAD cannot load the injector into it",
        )
        .with_fix(
            "use perfring watch or perfring record, which need nothing inside the \
             program; or link it dynamically",
        ),
    ))
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
