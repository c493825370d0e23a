//! The terminal output of `bench` as a user sees it: within the width the
//! terminal (here $COLUMNS) allows, `--brief` one line per experiment, a
//! summary line at the end. Structure only; the numbers are not checked.

use assert_cmd::Command;

fn bench(columns: &str, extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .env("COLUMNS", columns)
        .arg("--db")
        .arg(dir.path().join("runs.db"))
        .arg("--quiet")
        .args([
            "bench",
            "cpu.call_overhead",
            "--profile",
            "smoke",
            "--no-store",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn assert_fits(out: &str, width: usize) {
    for line in out.lines() {
        assert!(
            line.chars().count() <= width,
            "wider than {width}: {line:?}\n{out}"
        );
    }
}

#[test]
fn the_table_fits_the_width_from_columns() {
    let out = bench("80", &[]);
    assert_fits(&out, 80);
    assert!(out.contains("\ncpu.call_overhead\n"), "{out}");
    assert!(
        out.contains("1 experiment measured, 8 measurements"),
        "{out}"
    );
    let wide = bench("200", &[]);
    assert!(
        wide.contains("outliers") && wide.contains("95% CI"),
        "{wide}"
    );
}

#[test]
fn brief_prints_one_line_per_experiment_and_the_summary() {
    let out = bench("60", &["--brief"]);
    assert_fits(&out, 60);
    assert_eq!(out.matches("cpu.call_overhead").count(), 1, "{out}");
    assert!(!out.contains("Kernel:"), "no environment block: {out}");
    assert!(
        out.ends_with("1 experiment measured, 8 measurements\n"),
        "{out}"
    );
}
