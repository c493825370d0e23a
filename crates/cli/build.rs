//! Records which commit and profile this binary was built from, for
//! `--version` and for every stored run: OSPROBE_GIT_COMMIT (a short hash,
//! with "-dirty" when the tree had uncommitted changes; "unknown" outside a
//! git checkout, as from a tarball or `cargo install` of a package) and
//! OSPROBE_BUILD_PROFILE (release or debug).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn main() {
    let commit = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            // Untracked files do not change what is built; modified tracked ones do.
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=OSPROBE_GIT_COMMIT={commit}");
    // PROFILE is "release" for --release and the profiles inheriting from
    // it, "debug" otherwise: what matters for timing is optimisation, so
    // report OPT_LEVEL beside it.
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "?".into());
    println!("cargo:rustc-env=OSPROBE_BUILD_PROFILE={profile}");
    println!("cargo:rustc-env=OSPROBE_OPT_LEVEL={opt}");
    // Rebuild when HEAD moves or the index changes (a commit, a checkout,
    // a `git add`); the paths come from git so worktrees work too.
    for what in ["HEAD", "index"] {
        if let Some(path) = git(&["rev-parse", "--git-path", what]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &head_ref]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // ... and when a source file changes, so that "-dirty" is not stale
    // after an edit that was not staged (cargo scans a directory whole).
    if let Some(top) = git(&["rev-parse", "--show-toplevel"]) {
        for what in ["crates", "Cargo.toml", "Cargo.lock"] {
            let path = std::path::Path::new(&top).join(what);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
