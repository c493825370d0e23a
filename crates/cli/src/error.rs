//! The one error the binary classifies itself: a mistake in what the user
//! asked for (a flag, a value, a run id), which exits with code 2. Every
//! other error exits with 1 (main.rs). Each variant names the input and
//! what it accepts.

use std::error::Error;

/// A library's error, kept whole for the user to read.
pub type Cause = Box<dyn Error + Send + Sync>;

/// A mistake in what the user asked for: exit code 2. The message is the
/// whole story: a cause is printed in it, not also as a source (main.rs
/// prints the chain, which would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// A flag's value outside what the flag accepts.
    #[error("{flag} '{value}': expected {accepted}")]
    Value {
        flag: &'static str,
        value: String,
        accepted: String,
    },
    /// A name that is none of the known ones (an experiment, a test).
    #[error("unknown {what} '{name}'; known: {}", known.join(", "))]
    Unknown {
        what: &'static str,
        name: String,
        known: Vec<&'static str>,
    },
    /// An input (a flag, a file) that cannot be used as given, and what to
    /// give instead.
    #[error("{input}: {problem}")]
    Input { input: String, problem: String },
    /// An input the library reading it refused; `input` is the flag, the
    /// cause says what was wrong and what is accepted.
    #[error("{input}: {cause}")]
    Refused { input: &'static str, cause: Cause },
    /// An input the library reading it refused, with an error that names
    /// the input itself (a store URL, a run id, a label).
    #[error("{0}")]
    Invalid(Cause),
}

impl UsageError {
    /// An input refused by the library that read it, its error naming it.
    pub fn invalid(cause: impl Into<Cause>) -> UsageError {
        UsageError::Invalid(cause.into())
    }

    /// The flag `input` refused by the library that read it.
    pub fn refused(input: &'static str, cause: impl Into<Cause>) -> UsageError {
        UsageError::Refused {
            input,
            cause: cause.into(),
        }
    }

    /// `input`, and what is wrong with it (with what to give instead).
    pub fn input(input: impl std::fmt::Display, problem: impl Into<String>) -> UsageError {
        UsageError::Input {
            input: input.to_string(),
            problem: problem.into(),
        }
    }
}

/// An error and its causes on one line, each cause said once: the
/// libraries' errors often print their source inside their own message
/// and also keep it as the source, which `{:#}` would print again.
pub fn chain_text(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_names_the_input_and_what_it_accepts() {
        let value = UsageError::Value {
            flag: "--profile",
            value: "huge".into(),
            accepted: "smoke, quick or full".into(),
        };
        assert_eq!(
            value.to_string(),
            "--profile 'huge': expected smoke, quick or full"
        );
        let unknown = UsageError::Unknown {
            what: "experiment",
            name: "cpu.nope".into(),
            known: vec!["cpu.syscall", "cpu.fork"],
        };
        assert_eq!(
            unknown.to_string(),
            "unknown experiment 'cpu.nope'; known: cpu.syscall, cpu.fork"
        );
        let refused = UsageError::refused("--only", std::io::Error::other("no match"));
        assert_eq!(refused.to_string(), "--only: no match");
        assert!(
            refused.source().is_none(),
            "said once, not also as a source"
        );
        let input = UsageError::input("--token-file t", "its first line is empty");
        assert_eq!(input.to_string(), "--token-file t: its first line is empty");
    }

    #[test]
    fn a_usage_error_is_found_through_anyhow_for_exit_code_2() {
        let err: anyhow::Error = UsageError::input("--out d", "is a directory").into();
        assert!(err.is::<UsageError>());
        assert_eq!(format!("{err:#}"), "--out d: is a directory");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot bind UDP on 127.0.0.1:1: {source}")]
    struct Bind {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let in_use = || std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        let err = anyhow::Error::new(Bind { source: in_use() });
        let text = chain_text(&err);
        assert_eq!(text.matches(&in_use().to_string()).count(), 1, "{text}");
        let wrapped = anyhow::Error::new(in_use()).context("starting the server");
        assert_eq!(
            chain_text(&wrapped),
            format!("starting the server: {}", in_use())
        );
    }
}
