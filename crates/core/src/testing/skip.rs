//! Honest skips. A test that returns early passes as `ok`, so a skip is
//! printed where `cargo test` shows it, and in CI, where everything a test
//! needs is installed and tests run as root, a skip is a failure: CI never
//! passes a test that did not run.

use std::fmt::Display;
use std::io::Write;

/// The environment variable CI systems set (GitHub Actions, GitLab, and
/// `.ci/run` when run as CI) to `true`.
const CI_VAR: &str = "CI";

/// Whether this process runs in CI (`CI=true`).
pub fn in_ci() -> bool {
    std::env::var(CI_VAR).as_deref() == Ok("true")
}

/// Record that the calling test cannot run here, and why. Locally it prints
/// `SKIPPED: reason` on stderr and returns, and the test should then return;
/// in CI (`CI=true`) it panics, failing the test.
///
/// The line is written to the stderr handle directly rather than through
/// `eprintln!`, which the test harness captures and shows only for failing
/// tests: a skip must be seen in a passing run.
pub fn skip(reason: impl Display) {
    if in_ci() {
        panic!("SKIPPED in CI, where every test must run: {reason} (install what it needs, or run as root)");
    }
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "SKIPPED: {reason}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `skip` in a child process (the test binary itself) with CI set
    /// as given, so the environment of this process is never changed.
    fn child_with_ci(ci: &str) -> std::process::Output {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "testing::skip::tests::child_skips",
                "--ignored",
                "--test-threads=1",
            ])
            .env(CI_VAR, ci)
            .output()
            .unwrap()
    }

    #[test]
    #[ignore = "helper process of skip_passes_locally_and_fails_in_ci"]
    fn child_skips() {
        skip("the helper needs nothing, it only skips");
    }

    #[test]
    fn skip_passes_locally_and_fails_in_ci() {
        let local = child_with_ci("false");
        let stderr = String::from_utf8_lossy(&local.stderr);
        assert!(local.status.success(), "{stderr}");
        assert!(
            stderr.contains("SKIPPED: the helper needs nothing"),
            "the reason is shown even though the test passed: {stderr}"
        );
        let ci = child_with_ci("true");
        assert!(!ci.status.success(), "a skip in CI fails the test");
        let stdout = String::from_utf8_lossy(&ci.stdout);
        assert!(stdout.contains("the helper needs nothing"), "{stdout}");
    }
}
