//! `perfring doctor`, through the library and through the binary.

#[test]
fn library_report_prints() {
    let r = perfring::doctor::run();
    for (n, c) in &r.checks {
        eprintln!("{n:14} {} {}", c.ok, c.detail);
    }
    eprintln!("{r:?}");
}
