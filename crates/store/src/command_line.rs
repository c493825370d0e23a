//! The command line as stored with a run: secrets never reach the store,
//! so the values of `--token` and `--db` (whatever form a PostgreSQL URL's
//! password takes in it) and the password of any other PostgreSQL URL are
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

/// Flags whose value is never stored: a token, and the store's location
/// (a URL may carry a password in more spellings than any redaction can
/// promise to know, and where the store is says nothing about the run).
const SECRET_FLAGS: &[&str] = &["--token", "--db"];

fn redact_token(args: impl Iterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut hide_next = false;
    for arg in args {
        let secret_flag = SECRET_FLAGS.iter().find(|f| {
            arg.strip_prefix(**f)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
        });
        if hide_next {
            out.push("***".into());
            hide_next = false;
        } else if let Some(flag) = secret_flag {
            hide_next = arg.len() == flag.len();
            out.push(if hide_next {
                arg
            } else {
                format!("{flag}=***")
            });
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
    fn the_store_s_location_is_never_stored() {
        let args = [
            "run",
            "--db",
            "postgres://u:pa/ss@h/db",
            "--db=postgres://u@h/db?password=s3cr",
            "--dbx",
            "postgresql://v:a?b@h/db",
        ];
        let line = redacted(args.iter().map(|s| s.to_string()));
        assert_eq!(
            line, "run --db *** --db=*** --dbx postgresql://v:***@h/db",
            "{line}"
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
