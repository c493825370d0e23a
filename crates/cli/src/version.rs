//! Which binary this is: the version, the git commit and the build profile
//! recorded by build.rs, for `--version` and for every stored run.

use osprobe_core::environment::BuildInfo;

/// What `osprobe --version` prints after the name.
pub const TEXT: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OSPROBE_GIT_COMMIT"),
    ", ",
    env!("OSPROBE_BUILD_PROFILE"),
    " build)"
);

/// This binary, as recorded in a run's environment.
pub fn build_info() -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("OSPROBE_GIT_COMMIT").to_string(),
        profile: env!("OSPROBE_BUILD_PROFILE").to_string(),
    }
}

/// A warning for measurements taken by an unoptimised binary: its own
/// overheads (loops, harness) inflate the smallest results.
pub fn debug_build_warning() -> Option<String> {
    let opt_level = env!("OSPROBE_OPT_LEVEL");
    (env!("OSPROBE_BUILD_PROFILE") == "debug").then(|| {
        format!(
            "osprobe: warning: this is a debug build (opt-level {opt_level}); \
             its own overheads inflate small timings: build with `cargo build --release` to measure"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_text_agrees_with_the_recorded_build() {
        let build = build_info();
        assert_eq!(build.text(), TEXT);
        assert!(!build.commit.is_empty());
        assert!(["release", "debug"].contains(&build.profile.as_str()));
    }
}
