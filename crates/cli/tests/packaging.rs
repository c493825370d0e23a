//! The workspace stays installable and publishable: `cargo install` from a
//! package (crates.io) needs every internal dependency to carry a version,
//! crates.io needs a description and a license on every crate, and a
//! placeholder repository URL would be published as a broken link.
//! `cargo metadata` reads the manifests exactly as cargo does, so these
//! checks need no TOML parser of their own.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `cargo metadata --no-deps` of the workspace: its own crates only, offline.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace_root())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

fn packages(meta: &Value) -> Vec<&Value> {
    let list: Vec<&Value> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .collect();
    assert!(
        list.len() >= 9,
        "expected the nine osprobe crates, got {}",
        list.len()
    );
    list
}

fn name(pkg: &Value) -> &str {
    pkg["name"].as_str().unwrap_or("?")
}

#[test]
fn internal_path_dependencies_carry_a_version() {
    let meta = metadata();
    let mut missing = Vec::new();
    for pkg in packages(&meta) {
        for dep in pkg["dependencies"].as_array().into_iter().flatten() {
            // A dev-dependency needs no version: cargo strips path-only ones
            // when it packages a crate.
            let dev = dep["kind"].as_str() == Some("dev");
            if dep["path"].is_string() && !dev && dep["req"].as_str() == Some("*") {
                missing.push(format!(
                    "{} -> {}",
                    name(pkg),
                    dep["name"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "path dependencies without a version (crates.io refuses them): {missing:?}"
    );
}

#[test]
fn every_crate_has_the_metadata_crates_io_asks_for() {
    let meta = metadata();
    for pkg in packages(&meta) {
        let n = name(pkg);
        let description = pkg["description"].as_str().unwrap_or("");
        assert!(!description.trim().is_empty(), "{n}: no description");
        assert_eq!(
            pkg["license"].as_str(),
            Some("MIT OR Apache-2.0"),
            "{n}: license"
        );
        assert!(pkg["readme"].is_string(), "{n}: no readme");
        let keywords = pkg["keywords"].as_array().map(Vec::len).unwrap_or(0);
        assert!(
            (1..=5).contains(&keywords),
            "{n}: 1 to 5 keywords, got {keywords}"
        );
        assert!(
            pkg["categories"].as_array().is_some_and(|c| !c.is_empty()),
            "{n}: no categories"
        );
        if let Some(url) = pkg["repository"].as_str() {
            assert!(
                !url.contains(".invalid") && !url.contains("example."),
                "{n}: placeholder repository URL {url}"
            );
        }
    }
}

#[test]
fn license_files_are_at_the_root_and_in_every_crate() {
    let root = workspace_root();
    let meta = metadata();
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        assert!(text.len() > 500, "{file} missing or too short at the root");
        // `cargo package` takes only files under the crate's folder: each
        // crate links the root's copy so its package carries the license.
        for pkg in packages(&meta) {
            let manifest = PathBuf::from(pkg["manifest_path"].as_str().expect("manifest_path"));
            let copy = manifest.parent().expect("crate folder").join(file);
            let copied = std::fs::read_to_string(&copy).unwrap_or_default();
            assert_eq!(
                copied,
                text,
                "{} does not hold the root's {file}",
                copy.display()
            );
        }
    }
}
/// The lines of one `[section]` of the workspace manifest, up to the next.
fn manifest_section(section: &str) -> Vec<String> {
    let text = std::fs::read_to_string(workspace_root().join("Cargo.toml")).expect("Cargo.toml");
    let header = format!("[{section}]");
    text.lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(|l| l.split('#').next().unwrap_or("").trim().replace(' ', ""))
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn release_builds_without_debug_info_and_profiling_keeps_it() {
    // The release binary was 49 MB with line tables; it ships without them.
    let release = manifest_section("profile.release");
    assert!(
        release.iter().any(|l| l == "debug=0" || l == "debug=false"),
        "[profile.release] must set debug = 0, has {release:?}"
    );
    assert!(
        release
            .iter()
            .any(|l| l == "strip=\"debuginfo\"" || l == "strip=\"symbols\"" || l == "strip=true"),
        "[profile.release] must strip debug info (also the standard library's), has {release:?}"
    );
    // perf needs symbols and line tables: a profile keeps them.
    let profiling = manifest_section("profile.profiling");
    assert!(
        profiling.iter().any(|l| l == "inherits=\"release\""),
        "[profile.profiling] must inherit release, has {profiling:?}"
    );
    assert!(
        profiling
            .iter()
            .any(|l| l.starts_with("debug=") && l != "debug=0" && l != "debug=false"),
        "[profile.profiling] must keep debug info, has {profiling:?}"
    );
    assert!(
        profiling
            .iter()
            .any(|l| l == "strip=\"none\"" || l == "strip=false"),
        "[profile.profiling] must not strip, has {profiling:?}"
    );
}

/// The release binary's bound; bench/first_run.py holds the same number.
const SIZE_BOUND_BYTES: u64 = 10_000_000;

/// The generated block of docs/figures.md: figure name -> (value, date, machine).
fn measured_figures() -> std::collections::BTreeMap<String, (f64, String, String)> {
    let path = workspace_root().join("docs/figures.md");
    let text = std::fs::read_to_string(&path).expect("docs/figures.md");
    assert!(
        text.contains("<!-- figures:begin") && text.contains("<!-- figures:end -->"),
        "docs/figures.md lost its generated block (bench/first_run.sh writes it)"
    );
    let Some(data) = text
        .lines()
        .find_map(|l| l.strip_prefix("<!-- figures-data ")?.strip_suffix(" -->"))
    else {
        return std::collections::BTreeMap::new();
    };
    let data: Value = serde_json::from_str(data).expect("figures-data is JSON");
    let mut figures = std::collections::BTreeMap::new();
    for (name, entry) in data.as_object().expect("figures-data is an object") {
        let value = entry["value"]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: no value"));
        let date = entry["date"].as_str().unwrap_or_default().to_string();
        let machine = entry["machine"].as_str().unwrap_or_default().to_string();
        figures.insert(name.clone(), (value, date, machine));
    }
    figures
}

#[test]
fn figures_block_states_date_and_machine_and_keeps_the_size_bound() {
    // Only bench/first_run.sh writes the block; what it holds must say when
    // and where it was measured, and a measured binary must fit the bound.
    let figures = measured_figures();
    let known = ["build_s", "binary_bytes", "run_s", "run_lines", "tests_s"];
    for (name, (value, date, machine)) in &figures {
        assert!(known.contains(&name.as_str()), "unknown figure {name}");
        assert!(*value > 0.0, "{name}: {value}");
        assert!(is_iso_date(date), "{name}: date '{date}' is not YYYY-MM-DD");
        assert!(
            machine.contains("vCPU"),
            "{name}: machine '{machine}' says no CPU count"
        );
    }
    if let Some((size, _, _)) = figures.get("binary_bytes") {
        assert!(
            (*size as u64) < SIZE_BOUND_BYTES,
            "the release binary measured {size} bytes, over the bound of {SIZE_BOUND_BYTES}"
        );
    }
}

fn is_iso_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

/// Whether `paragraph` states a duration or a size: a number followed by a
/// unit of time or bytes.
fn states_a_figure(paragraph: &str) -> bool {
    const UNITS: [&str; 8] = ["s", "min", "minutes", "seconds", "MB", "GB", "KB", "bytes"];
    let words: Vec<&str> = paragraph.split_whitespace().collect();
    words.windows(2).any(|w| {
        let number = w[0].trim_start_matches(['(', '~']).replace(',', "");
        let unit = w[1].trim_end_matches([',', '.', ')', ';', ':']);
        !number.is_empty()
            && number.chars().all(|c| c.is_ascii_digit() || c == '.')
            && number.chars().any(|c| c.is_ascii_digit())
            && UNITS.contains(&unit)
    })
}

/// Whether `paragraph` says when it was measured (an ISO date).
fn names_its_date(paragraph: &str) -> bool {
    paragraph
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .any(is_iso_date)
}

/// The pages that quote the build, run and size figures (README.md joins
/// them once the integrator's rewrite lands).
const PAGES_WITH_FIGURES: &[&str] = &["docs/install.md"];

#[test]
fn install_page_quotes_measured_figures_only() {
    for page in PAGES_WITH_FIGURES {
        let text = std::fs::read_to_string(workspace_root().join(page)).expect(page);
        assert!(
            text.contains("figures.md"),
            "{page} must point at docs/figures.md for the build, run and size figures"
        );
        let undated: Vec<&str> = text
            .split("\n\n")
            .filter(|p| !p.trim_start().starts_with("```"))
            .filter(|p| states_a_figure(p) && !names_its_date(p))
            .collect();
        assert!(
            undated.is_empty(),
            "{page}: figures without the date they were measured on (quote docs/figures.md, \
             or name the machine and date):\n{}",
            undated.join("\n---\n")
        );
    }
}

#[test]
fn a_figure_is_told_from_prose() {
    assert!(states_a_figure("takes about 50 s on a VM"));
    assert!(states_a_figure("is 8.6 MB"));
    assert!(states_a_figure("took 3 min 34 s"));
    assert!(states_a_figure("was 51,206,176 bytes"));
    assert!(!states_a_figure("the 2-vCPU VM, load about 7"));
    assert!(names_its_date("measured 2026-11-25 on"));
    assert!(!names_its_date("measured 2026-11 on"));
}
