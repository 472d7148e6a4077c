//! `perfring inject`: start the command with the injector preloaded and its
//! configuration in `PERFRING_*` variables; the work happens inside the program
//! (`inject/`), configured by `perfring::inject`.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;

use perfring::inject::{find_library, Action};
use perfring::Error;

use super::args::InjectArgs;
use super::Failure;

/// Runs the command; returns its exit status (128 + N if killed by signal N).
pub fn run(args: &InjectArgs) -> Result<i32, Failure> {
    let lib = find_library().map_err(Failure::Runtime)?;
    let config = &args.config;
    if config.actions.contains(&Action::Record) {
        // A fresh file per run: the injector appends (exec'd programs share it).
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
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}
