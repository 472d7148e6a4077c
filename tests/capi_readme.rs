//! The README's C program, built and run with the README's lines as written: the
//! release library, `capi/perfring.pc` for `pkg-config`, a C compiler, and no
//! `LD_LIBRARY_PATH` (the rpath from `perfring.pc` finds the library). It prints
//! `perfring_version()` and its overflow count, both checked.

use std::path::Path;
use std::process::Command;

/// The fenced block after `marker` in the README.
fn block_after(readme: &str, marker: &str) -> String {
    let after = readme
        .split_once(marker)
        .unwrap_or_else(|| panic!("README has no {marker}"))
        .1;
    let body = after.split_once("```").expect("a fenced block").1;
    let body = body.split_once('\n').expect("a fence line").1;
    body.split_once("```")
        .expect("a closing fence")
        .0
        .to_string()
}

#[test]
fn the_readme_c_program_builds_and_runs_as_the_readme_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let program = block_after(&readme, "<!-- c-example -->");
    let in_checkout = block_after(&readme, "<!-- c-build -->");
    let where_prog_is = block_after(&readme, "<!-- c-compile -->");

    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("readme-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("prog.c"), &program).unwrap();
    // The README's lines in the places it names: the checkout, then prog.c's directory.
    let script = format!(
        "set -e\n{in_checkout}\ncd '{}'\n{where_prog_is}",
        dir.display()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .current_dir(root)
        // What cargo test sets for its own binaries must not help the program.
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run sh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script}\n{stderr}\n(needs gcc and pkg-config: bash scripts/setup.sh)"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().last(),
        Some(format!("perfring {}: 100 overflows", env!("CARGO_PKG_VERSION")).as_str()),
        "{stdout}\n{stderr}"
    );
    // It is the release library, found by the rpath.
    let ldd = Command::new("ldd")
        .arg(dir.join("prog"))
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.lines()
            .any(|l| l.contains("libperfring.so") && l.contains("target/release/libperfring.so")),
        "{ldd}"
    );
}

/// `perfring.pc`'s version is the crates'.
#[test]
fn pkg_config_version_is_the_crates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("pkg-config")
        .args(["--modversion", "perfring"])
        .env("PKG_CONFIG_PATH", root.join("capi"))
        .output()
        .expect("run pkg-config (bash scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        env!("CARGO_PKG_VERSION")
    );
}
