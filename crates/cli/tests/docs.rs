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
