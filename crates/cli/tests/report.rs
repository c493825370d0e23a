//! `osprobe report`, the report `osprobe run` writes and `show --csv`,
//! through the binary: a real smoke run rendered to HTML, opened in a
//! headless browser (Debian's chromium) for a screenshot; bad input exits 2.

use assert_cmd::Command;
use osprobe_store::{Access, Store};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
#[path = "../../report/tests/geometry/mod.rs"]
mod geometry;

fn osprobe(db: &Path) -> Command {
    let mut cmd = Command::cargo_bin("osprobe").unwrap();
    cmd.arg("--db").arg(db).arg("--quiet");
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One stored smoke run of the cpu experiments and mem.latency, and what
/// `run` printed.
struct Stored {
    dir: tempfile::TempDir,
    db: PathBuf,
    stdout: String,
}

fn stored() -> &'static Stored {
    static RUN: OnceLock<Stored> = OnceLock::new();
    RUN.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("results.db");
        let out = osprobe(&db)
            .args(["run", "--profile", "smoke", "--only", "cpu.*,mem.latency"])
            .output()
            .unwrap();
        assert!(out.status.success(), "run failed: {}", text(&out.stderr));
        Stored {
            dir,
            db,
            stdout: text(&out.stdout),
        }
    })
}

#[test]
fn run_writes_its_report_beside_the_store() {
    let s = stored();
    let line = s
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("report: "))
        .unwrap_or_else(|| panic!("no report line in:\n{}", s.stdout));
    let path = Path::new(line);
    assert_eq!(path.parent(), Some(s.dir.path().join("reports").as_path()));
    assert!(path.is_file(), "{line}");
    let stored_line = s.stdout.find("stored as run").unwrap();
    assert!(s.stdout.find("report: ").unwrap() > stored_line);
}

/// The browsers the screenshot check can drive, by the names their packages
/// put on PATH: Debian's chromium-headless-shell (the lightest, what CI
/// installs) and chromium, Ubuntu's chromium-browser, Google's Chrome.
const BROWSERS: &[&str] = &[
    "chromium-headless-shell",
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
];

/// The first of [`BROWSERS`] installed here. Found on PATH rather than by
/// running `--version`, which a headless shell need not answer: a browser
/// that is installed but broken fails the test instead of skipping it.
fn chromium() -> Option<PathBuf> {
    BROWSERS
        .iter()
        .find_map(|name| osprobe_core::find_program(name))
}

#[test]
fn report_renders_a_stored_run_that_a_browser_opens() {
    let s = stored();
    let out_path = s.dir.path().join("X.html");
    let out = osprobe(&s.db)
        .args(["report", "latest", "--out"])
        .arg(&out_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&out_path.display().to_string()));
    let html = std::fs::read_to_string(&out_path).unwrap();
    assert!(html.len() < 2 << 20, "{} bytes", html.len());
    for expected in [
        "<svg",
        "Environment",
        "Summary",
        "cpu.syscall",
        "mem.latency load against size",
        "size (bytes, log scale)",
        "cpu.call_overhead call against args",
        "(sysfs)",
        "Overview",
        "Reference studies",
        "figures from published studies compared with this run",
    ] {
        assert!(
            html.contains(expected),
            "'{expected}' missing from the report"
        );
    }
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(&html, options).expect("the report is XHTML");
    // The results lead, the reference studies come last.
    let ids: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("section"))
        .filter_map(|n| n.attribute("id"))
        .collect();
    let at = |id: &str| ids.iter().position(|i| *i == id).unwrap_or(usize::MAX);
    assert!(
        at("overview") < at("summary")
            && at("summary") < at("plots")
            && at("plots") < at("references")
            && at("references") == ids.len() - 1,
        "{ids:?}"
    );
    assert!(!page_words(&doc).to_lowercase().contains("seed"));
    // No label over a data mark in any plot of a real run.
    let svg_start = |i: usize| html[i..].find("<svg").map(|j| i + j);
    let mut from = 0;
    let mut checked = 0;
    while let Some(start) = svg_start(from) {
        let end = start + html[start..].find("</svg>").unwrap() + "</svg>".len();
        let overlaps = geometry::text_over_marks(&html[start..end]);
        assert!(overlaps.is_empty(), "{}", overlaps.join("\n"));
        let outside = geometry::text_outside_canvas(&html[start..end]);
        assert!(outside.is_empty(), "{}", outside.join("\n"));
        checked += 1;
        from = end;
    }
    assert!(checked > 0);

    let Some(browser) = chromium() else {
        osprobe_core::testing::skip(format!(
            "the browser check: none of {} on PATH (apt-get install chromium-headless-shell)",
            BROWSERS.join(", ")
        ));
        return;
    };
    let shot = s.dir.path().join("shot.png");
    let profile = s.dir.path().join("chromium-profile");
    let mut child = std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,2000")
        .arg(format!("file://{}", out_path.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained on a thread: a browser that logs more than a pipe holds would
    // otherwise block before it exits.
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut e = String::new();
        let _ = stderr_pipe.read_to_string(&mut e);
        e
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("chromium did not finish the screenshot in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = stderr_reader.join().unwrap();
    assert!(status.success(), "chromium failed: {stderr}");
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot: {e}; {stderr}"));
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    // A blank 1280x2000 page compresses to a few KiB; tables and plots do not.
    assert!(png.len() > 30_000, "screenshot of {} bytes", png.len());
}

/// The text a reader sees (element text, not attributes or markup).
fn page_words(doc: &roxmltree::Document) -> String {
    doc.descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn show_prints_csv_that_matches_the_run() {
    let s = stored();
    let json = common::json_of(
        &osprobe(&s.db)
            .args(["show", "latest", "--json"])
            .output()
            .unwrap(),
    );
    let out = osprobe(&s.db)
        .args(["show", "latest", "--csv"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let csv = text(&out.stdout);
    let header = csv.lines().next().unwrap();
    assert!(header.starts_with(
        "experiment,metric,params,unit,n,min,p50,mean,p90,p99,max,stddev,ci95_low,ci95_high,prediction,prediction_formula"
    ));
    // Notes may hold line breaks inside quotes: count rows by their experiment.
    let rows = csv
        .split("\r\n")
        .filter(|l| l.starts_with("cpu.") || l.starts_with("mem."))
        .count();
    assert_eq!(rows, json["measurements"].as_array().unwrap().len());
    let md = osprobe(&s.db)
        .args(["show", "latest", "--markdown"])
        .output()
        .unwrap();
    assert!(text(&md.stdout).contains("| experiment | metric |"));
}

#[test]
fn bad_input_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    // No store at all.
    let missing = dir.path().join("none.db");
    let out = osprobe(&missing).arg("report").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("nothing has been stored yet"));
    // A store without runs.
    let empty = dir.path().join("empty.db");
    drop(Store::open(&empty, Access::Write).unwrap());
    let out = osprobe(&empty).args(["report", "latest"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("holds no runs yet"),
        "{}",
        text(&out.stderr)
    );
    // An unknown id, in a store that has a run.
    let out = osprobe(&stored().db)
        .args(["report", "NOPE"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no run matches 'NOPE'"));
    // --out naming a directory.
    let out = osprobe(&stored().db)
        .args(["report", "latest", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is a directory"));
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".html")));
}
