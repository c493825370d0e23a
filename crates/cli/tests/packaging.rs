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
