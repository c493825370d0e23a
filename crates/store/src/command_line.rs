//! The command line as stored with a run: secrets never reach the store,
//! so the value of `--token` and the password of a PostgreSQL URL are
//! replaced by `***`.

use crate::location::redact_arg;

/// `args` (without the program name) as one line, secrets redacted.
pub fn redacted(args: impl Iterator<Item = String>) -> String {
    redact_token(args)
        .iter()
        .map(|arg| redact_arg(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

fn redact_token(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut hide_next = false;
    for arg in args {
        if hide_next {
            out.push("***".into());
            hide_next = false;
        } else if arg == "--token" {
            out.push(arg);
            hide_next = true;
        } else if arg.starts_with("--token=") {
            out.push("--token=***".into());
        } else {
            out.push(arg);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_redacted_from_stored_command_lines() {
        let args = ["net", "rtt", "--token", "s3cret", "--to", "h", "--token=x"];
        let out = redact_token(args.iter().map(|s| s.to_string()));
        assert_eq!(
            out,
            ["net", "rtt", "--token", "***", "--to", "h", "--token=***"]
        );
    }

    #[test]
    fn urls_lose_their_passwords_too() {
        let args = ["--db=postgres://u:pw@h/db", "--token", "t"];
        let line = redacted(args.iter().map(|s| s.to_string()));
        assert!(!line.contains("pw") && !line.contains(" t"), "{line}");
        assert!(line.ends_with("--token ***"), "{line}");
    }
}
