//! Run labels (`--label k=v`) and the filters of `history --host H --label
//! k=v`. A label is `key=value`: the key in `[a-z0-9_.-]`, the value
//! printable text; both bounded, since labels are stored with every run
//! and shown in tables. The `pair` label (`SRC -> DST`) is read back by the
//! fleet page, so its form is checked here, where both sides find it.

use crate::model::RunSummary;
use std::collections::BTreeMap;

/// Longest key accepted.
pub const MAX_KEY: usize = 64;
/// Longest value accepted, in characters.
pub const MAX_VALUE: usize = 256;

/// Why a label, or a set of them, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// `shown` is the input as it may be echoed (control characters
    /// replaced, cut short).
    #[error("'{shown}': {problem}")]
    Malformed {
        shown: String,
        problem: LabelProblem,
    },
    #[error("--label {key}: given twice ({key}={first} and {key}={second}); give each key once")]
    GivenTwice {
        key: String,
        first: String,
        second: String,
    },
}

/// What is wrong with one `key=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelProblem {
    #[error("expected KEY=VALUE, e.g. team=db or host=web-1")]
    NoEquals,
    #[error("the key is empty; expected KEY=VALUE")]
    EmptyKey,
    #[error("the key is longer than {MAX_KEY} characters")]
    KeyTooLong,
    #[error("the key may hold only a-z, 0-9, '_', '.' and '-' (found {0:?})")]
    KeyCharacter(char),
    #[error("the value is empty; expected KEY=VALUE with a value")]
    EmptyValue,
    #[error("the value is longer than {MAX_VALUE} characters")]
    ValueTooLong,
    #[error("the value holds a control character; only printable text is accepted")]
    ControlCharacter,
    #[error("the value starts or ends with white space")]
    WhiteSpace,
    #[error("a pair label is SRC -> DST, e.g. pair=web-1 -> web-2")]
    NotAPair,
}

/// Parse `key=value` (clap's value parser for `--label`), naming what is
/// accepted when it is not.
pub fn parse_label(raw: &str) -> Result<(String, String), LabelError> {
    let malformed = |problem| LabelError::Malformed {
        shown: shown(raw),
        problem,
    };
    let (key, value) = raw
        .split_once('=')
        .ok_or_else(|| malformed(LabelProblem::NoEquals))?;
    check_key(key).map_err(malformed)?;
    check_value(value).map_err(malformed)?;
    // A pair label is read back by the fleet page: refuse one it could
    // not read rather than store a run it must leave out.
    if key == "pair" && parse_pair(value).is_none() {
        return Err(malformed(LabelProblem::NotAPair));
    }
    Ok((key.to_string(), value.to_string()))
}

fn check_key(key: &str) -> Result<(), LabelProblem> {
    if key.is_empty() {
        return Err(LabelProblem::EmptyKey);
    }
    if key.len() > MAX_KEY {
        return Err(LabelProblem::KeyTooLong);
    }
    match key
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '.' | '-'))
    {
        Some(c) => Err(LabelProblem::KeyCharacter(c)),
        None => Ok(()),
    }
}

fn check_value(value: &str) -> Result<(), LabelProblem> {
    if value.is_empty() {
        return Err(LabelProblem::EmptyValue);
    }
    if value.chars().count() > MAX_VALUE {
        return Err(LabelProblem::ValueTooLong);
    }
    if value.chars().any(char::is_control) {
        return Err(LabelProblem::ControlCharacter);
    }
    if value.trim() != value {
        return Err(LabelProblem::WhiteSpace);
    }
    Ok(())
}

/// Input as it may be echoed in a message: control characters replaced,
/// and cut short.
fn shown(raw: &str) -> String {
    let cleaned: String = raw
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if cleaned.chars().count() > 80 {
        format!("{}...", cleaned.chars().take(80).collect::<String>())
    } else {
        cleaned
    }
}

/// A `pair` label's two ends, `SRC -> DST`; None when it is not of that
/// form.
pub fn parse_pair(label: &str) -> Option<(String, String)> {
    let (src, dst) = label.split_once("->")?;
    let (src, dst) = (src.trim(), dst.trim());
    (!src.is_empty() && !dst.is_empty() && !dst.contains("->"))
        .then(|| (src.to_string(), dst.to_string()))
}

/// The labels of a run made here from the repeated `--label`s; a key given
/// twice is an error (which value was meant?).
pub fn collect(labels: &[(String, String)]) -> Result<BTreeMap<String, String>, LabelError> {
    let mut out = BTreeMap::new();
    for (key, value) in labels {
        if let Some(first) = out.insert(key.clone(), value.clone()) {
            return Err(LabelError::GivenTwice {
                key: key.clone(),
                first,
                second: value.clone(),
            });
        }
    }
    Ok(out)
}

/// Which runs `history` lists: those of one host (its `host` label, or
/// the machine's hostname for runs without one) carrying every label
/// asked for.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub host: Option<String>,
    pub labels: Vec<(String, String)>,
}

impl Filter {
    pub fn matches(&self, run: &RunSummary) -> bool {
        let host_ok = self.host.as_deref().is_none_or(|host| host_of(run) == host);
        host_ok
            && self
                .labels
                .iter()
                .all(|(k, v)| run.labels.get(k) == Some(v))
    }

    /// The filter in words, for "no run matches ...".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(h) = &self.host {
            parts.push(format!("--host {h}"));
        }
        parts.extend(self.labels.iter().map(|(k, v)| format!("--label {k}={v}")));
        parts.join(" ")
    }
}

/// The host a run belongs to: its `host` label (a fleet's inventory name),
/// else the hostname its environment recorded.
pub fn host_of(run: &RunSummary) -> &str {
    run.labels
        .get("host")
        .map(String::as_str)
        .unwrap_or(&run.hostname)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(hostname: &str, labels: &[(&str, &str)]) -> RunSummary {
        crate::testing::run_summary("01", hostname, labels)
    }

    #[test]
    fn labels_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(
            parse_label("team=db core"),
            Ok(("team".into(), "db core".into()))
        );
        assert_eq!(
            parse_label("pair=a -> b"),
            Ok(("pair".into(), "a -> b".into()))
        );
        assert_eq!(parse_label("k=a=b"), Ok(("k".into(), "a=b".into())));
        for (raw, why) in [
            ("team", "expected KEY=VALUE"),
            ("=db", "the key is empty"),
            ("Team=db", "only a-z, 0-9"),
            ("te am=db", "only a-z, 0-9"),
            ("team=", "the value is empty"),
            ("team=a\u{1b}[31m", "control character"),
            ("team= db", "white space"),
            ("pair=web-1", "SRC -> DST"),
            ("pair=a -> b -> c", "SRC -> DST"),
        ] {
            let err = parse_label(raw).unwrap_err().to_string();
            assert!(err.contains(why), "{raw}: {err}");
            assert!(!err.contains('\u{1b}'), "{err}");
        }
        let long = format!("k={}", "v".repeat(MAX_VALUE + 1));
        assert!(parse_label(&long)
            .unwrap_err()
            .to_string()
            .contains("longer than 256"));
        let key = format!("{}=v", "k".repeat(MAX_KEY + 1));
        assert!(parse_label(&key)
            .unwrap_err()
            .to_string()
            .contains("longer than 64"));
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        let twice = [("a".into(), "1".into()), ("a".into(), "2".into())];
        assert!(collect(&twice)
            .unwrap_err()
            .to_string()
            .contains("given twice"));
        let once = [("a".into(), "1".into()), ("b".into(), "2".into())];
        assert_eq!(collect(&once).unwrap().len(), 2);
    }

    #[test]
    fn pairs_have_two_ends() {
        assert_eq!(parse_pair(" a -> b "), Some(("a".into(), "b".into())));
        for bad in ["a", "a ->", "-> b", "a -> b -> c"] {
            assert_eq!(parse_pair(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_filter_takes_the_host_label_before_the_hostname_and_ands_labels() {
        let web = summary("m1", &[("host", "web-1"), ("team", "a")]);
        let bare = summary("web-1", &[]);
        let other = summary("m2", &[("host", "db-1"), ("team", "a")]);
        let host = Filter {
            host: Some("web-1".into()),
            labels: vec![],
        };
        assert!(host.matches(&web) && host.matches(&bare) && !host.matches(&other));
        let both = Filter {
            host: Some("web-1".into()),
            labels: vec![("team".into(), "a".into())],
        };
        assert!(both.matches(&web) && !both.matches(&bare) && !both.matches(&other));
        let two_labels = Filter {
            host: None,
            labels: vec![("team".into(), "a".into()), ("host".into(), "db-1".into())],
        };
        assert!(two_labels.matches(&other) && !two_labels.matches(&web));
        assert_eq!(both.describe(), "--host web-1 --label team=a");
    }
}
