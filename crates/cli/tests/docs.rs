//! The docs-staleness test: docs/experiments.md is generated from the
//! registry and must match what this build prints; every relative link in
//! README.md and docs/*.md must name a file of the repository.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn experiment_reference_is_up_to_date() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus <= 1 {
        // Grids with a thread per CPU have no second point on one CPU.
        println!("skipped: the reference is generated on a machine with more than one CPU");
        return;
    }
    let out = Command::cargo_bin("osprobe")
        .unwrap()
        .args(["docs", "experiments"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "osprobe docs experiments failed: {out:?}"
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    let path = repo_root().join("docs/experiments.md");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        generated == checked_in,
        "docs/experiments.md is stale: regenerate it with\n\n    \
         cargo run --release -- docs experiments > docs/experiments.md\n"
    );
}

/// The targets of `[text](target)` links in Markdown, without fragments.
fn relative_links(markdown: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = markdown;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].trim();
        let file = target.split('#').next().unwrap_or("");
        let external = target.contains("://") || target.starts_with("mailto:");
        if !external && !file.is_empty() {
            links.push(file.to_string());
        }
    }
    links
}

#[test]
fn relative_links_resolve_to_files() {
    let root = repo_root();
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    pages.push(root.join("bench/README.md"));
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let Ok(text) = std::fs::read_to_string(page) else {
            continue;
        };
        let dir = page.parent().unwrap();
        for link in relative_links(&text) {
            let target = dir.join(&link);
            if !target.exists() {
                broken.push(format!("{}: {link}", page.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to missing files:\n{}",
        broken.join("\n")
    );
}

#[test]
fn link_extraction_skips_urls_and_fragments() {
    let text = "[a](docs/x.md#y) [b](https://e.org/) [c](#local) [d](../ARCHITECTURE.md)";
    assert_eq!(
        relative_links(text),
        vec!["docs/x.md", "../ARCHITECTURE.md"]
    );
}

/// The file and directory names ARCHITECTURE.md mentions: words ending in
/// a source or document extension or in `/`, or starting at the
/// repository's top (`crates/`, `docs/`, `.ci/`...). Globs (`crates/*/`)
/// and URLs are left out.
fn named_paths(markdown: &str) -> Vec<String> {
    const EXTENSIONS: [&str; 6] = [".rs", ".md", ".py", ".sh", ".toml", ".json"];
    const TOPS: [&str; 7] = [
        "crates/", "docs/", "tools/", "bench/", "fuzz/", "schema/", ".ci/",
    ];
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_-./*".contains(c);
    markdown
        .split(|c: char| !is_path_char(c))
        // A sentence's full stop is not part of the name; `.ci/`'s dot is.
        .map(|word| word.trim_end_matches('.').to_string())
        .filter(|word| !word.contains('*') && !word.contains("//") && word.len() > 1)
        .filter(|word| {
            EXTENSIONS.iter().any(|e| word.ends_with(e))
                || (word.ends_with('/') && word.len() > 2)
                || TOPS.iter().any(|t| word.starts_with(t))
        })
        .collect()
}

/// Every file and directory of the repository (directories with a
/// trailing `/`), relative to its root, skipping build output and git.
fn repository_paths(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if matches!(name.as_str(), "target" | ".git") {
                continue;
            }
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if path.is_dir() {
                found.push(format!("{rel}/"));
                dirs.push(path);
            } else {
                found.push(rel);
            }
        }
    }
    found
}

/// A name holds when it is a path from the top or the end of one
/// (`measure.rs`, `cli/src/output/`, `protocol/framing.rs`), cut at a `/`;
/// a directory may be named without its trailing `/` (`crates/cli`).
fn names_a_path(name: &str, paths: &[String]) -> bool {
    let as_dir = format!("{}/", name.trim_end_matches('/'));
    [name, as_dir.as_str()].iter().any(|n| {
        paths
            .iter()
            .any(|p| p == n || p.ends_with(&format!("/{n}")))
    })
}

#[test]
fn every_path_architecture_names_exists() {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let paths = repository_paths(&root);
    let names = named_paths(&text);
    assert!(names.len() > 40, "too few names found: {names:?}");
    let missing: Vec<&String> = names.iter().filter(|n| !names_a_path(n, &paths)).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names files that do not exist (moved or renamed?): {missing:?}"
    );
}

#[test]
fn path_names_are_found_and_checked_at_a_slash() {
    let text = "`crates/cli/src/measure.rs`, `store.rs` and `flags/` (see .ci/run). \
                Display/Serialize, loopback|netns, postgres://host/db, `crates/*/tests/`.";
    assert_eq!(
        named_paths(text),
        vec!["crates/cli/src/measure.rs", "store.rs", "flags/", ".ci/run"]
    );
    let paths = vec![
        "crates/cli/src/measure.rs".to_string(),
        "crates/cli/src/flags/".into(),
    ];
    assert!(names_a_path("measure.rs", &paths));
    assert!(names_a_path("cli/src/flags/", &paths));
    assert!(
        !names_a_path("easure.rs", &paths),
        "a name is matched at a slash"
    );
    assert!(names_a_path("crates/cli/src/flags", &paths));
    assert!(!names_a_path("commands.rs", &paths));
}
