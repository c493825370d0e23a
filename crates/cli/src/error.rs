//! The one error the binary classifies itself: a mistake in what the user
//! asked for (a flag, a value, a run id), which exits with code 2. Every
//! other error exits with 1 (main.rs).

/// A mistake in what the user asked for: exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
