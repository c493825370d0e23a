//! Checks on what a peer sends as JSON (a far end's description): every
//! string short and free of control characters, lists and maps small,
//! nesting shallow, and no field this build does not know. Apart from
//! [`crate::describe`] so the protocol's decoder can apply them without
//! depending on the client.

use osprobe_core::nic::NicInfo;
use osprobe_core::{peer_text, Environment};
use serde_json::Value;

/// The longest string a peer's description may hold (a kernel version or
/// a mitigation's text is well under it).
const MAX_PEER_TEXT: usize = 1024;
/// The most entries in one list or map (caches, mitigations, notes).
const MAX_PEER_ITEMS: usize = 256;
/// The deepest nesting (the environment is four levels deep).
const MAX_PEER_DEPTH: usize = 8;

/// Why a value a peer sent was refused; `path` names where in it.
#[derive(Debug, thiserror::Error)]
pub enum PeerValueError {
    #[error("{path}: nested too deeply")]
    TooDeep { path: String },
    /// A list (`what` = "items") or map ("fields") too long.
    #[error("{path}: {count} {what}, at most {MAX_PEER_ITEMS}")]
    TooMany {
        path: String,
        what: &'static str,
        count: usize,
    },
    #[error("{path}: text of {len} bytes, at most {MAX_PEER_TEXT}")]
    TextTooLong { path: String, len: usize },
    /// `shown` is the text escaped and capped.
    #[error("{path}: control characters in '{shown}'")]
    ControlCharacters { path: String, shown: String },
    /// `key` is escaped and capped.
    #[error("unknown field `{key}` in {path}")]
    UnknownField { path: String, key: String },
    #[error("{0}")]
    Json(#[from] serde_json::Error),
}

/// Limits on text from a peer, checked on the JSON of what it sent: every
/// string short and free of control and bidi characters (what
/// [`peer_text::escape`] would change), every list and map small, the
/// nesting shallow.
pub fn check_peer_value(what: &str, value: &Value) -> Result<(), PeerValueError> {
    check_value(what, value, 0)
}

fn check_value(path: &str, value: &Value, depth: usize) -> Result<(), PeerValueError> {
    if depth > MAX_PEER_DEPTH {
        return Err(PeerValueError::TooDeep { path: path.into() });
    }
    let too_many = |what, count| PeerValueError::TooMany {
        path: path.into(),
        what,
        count,
    };
    match value {
        Value::String(s) => check_text(path, s),
        Value::Array(items) => {
            if items.len() > MAX_PEER_ITEMS {
                return Err(too_many("items", items.len()));
            }
            for (i, item) in items.iter().enumerate() {
                check_value(&format!("{path}[{i}]"), item, depth + 1)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            if map.len() > MAX_PEER_ITEMS {
                return Err(too_many("fields", map.len()));
            }
            for (key, item) in map {
                check_text(&format!("{path} key"), key)?;
                check_value(&format!("{path}.{key}"), item, depth + 1)?;
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(()),
    }
}

fn check_text(path: &str, s: &str) -> Result<(), PeerValueError> {
    if s.len() > MAX_PEER_TEXT {
        return Err(PeerValueError::TextTooLong {
            path: path.into(),
            len: s.len(),
        });
    }
    if peer_text::escape(s, MAX_PEER_TEXT) != s {
        return Err(PeerValueError::ControlCharacters {
            path: path.into(),
            shown: peer_text::escape(s, 64),
        });
    }
    Ok(())
}

/// Refuse a `Described` body naming a field the typed values do not have:
/// serde's `default` on [`Environment`] (right for stored runs, whose
/// fields are only ever added) would otherwise drop it silently.
pub fn refuse_unknown_fields(
    body: &[u8],
    environment: &Environment,
    nic: &Option<Box<NicInfo>>,
) -> Result<(), PeerValueError> {
    let sent: Value = serde_json::from_slice(body)?;
    if let Some(env) = sent.get("environment") {
        only_known_keys("environment", env, &serde_json::to_value(environment)?)?;
    }
    if let Some(n) = sent.get("nic") {
        only_known_keys("nic", n, &serde_json::to_value(nic)?)?;
    }
    Ok(())
}

/// Every object key in `sent` exists at the same place in `known`.
fn only_known_keys(path: &str, sent: &Value, known: &Value) -> Result<(), PeerValueError> {
    match (sent, known) {
        (Value::Object(s), Value::Object(k)) => {
            for (key, value) in s {
                let Some(known_value) = k.get(key) else {
                    return Err(PeerValueError::UnknownField {
                        path: path.into(),
                        key: peer_text::escape(key, 64),
                    });
                };
                only_known_keys(&format!("{path}.{key}"), value, known_value)?;
            }
            Ok(())
        }
        (Value::Array(s), Value::Array(k)) => {
            for (i, (a, b)) in s.iter().zip(k).enumerate() {
                only_known_keys(&format!("{path}[{i}]"), a, b)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_and_long_lists_are_refused() {
        let long = Value::from("x".repeat(MAX_PEER_TEXT + 1));
        assert!(check_peer_value("e", &long).is_err());
        let many = Value::Array(vec![Value::from(1); MAX_PEER_ITEMS + 1]);
        assert!(check_peer_value("e", &many).is_err());
        let mut deep = Value::from(1);
        for _ in 0..=MAX_PEER_DEPTH + 1 {
            deep = Value::Array(vec![deep]);
        }
        assert!(check_peer_value("e", &deep).is_err());
        assert!(check_peer_value("e", &Value::from("é ok")).is_ok());
    }
}
