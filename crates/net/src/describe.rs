//! The far end described: `osprobe serve` answers a `Describe` request
//! with its machine (the same [`Environment`] capture a run stores) and the
//! interface that carries the connection, so a run against a remote host
//! records both ends (seed 004's Table 3 describes its two machines).
//!
//! Server side: [`Describer`] captures on request (memory and load change;
//! the clock is calibrated once, on the first request). Client side:
//! [`far_end`] asks, and adds this machine's interface towards the server.
//! A peer's answer is bounded ([`crate::protocol::MAX_DESCRIBED_FRAME`]),
//! strict (a field this build does not know is refused) and checked text
//! by text ([`check_peer_value`]: no control characters, bounded lengths
//! and counts), so what a run stores from a hostile server is plain text.

use crate::client::Peer;
use osprobe_core::environment::BuildInfo;
use osprobe_core::far_end::FarEnd;
use osprobe_core::nic::{self, NicInfo};
use osprobe_core::{peer_text, Clock, ClockInfo, Environment, Profile};
use serde_json::Value;
use std::net::IpAddr;
use std::sync::OnceLock;

/// The longest string a peer's description may hold (a kernel version or
/// a mitigation's text is well under it).
const MAX_PEER_TEXT: usize = 1024;
/// The most entries in one list or map (caches, mitigations, notes).
const MAX_PEER_ITEMS: usize = 256;
/// The deepest nesting (the environment is four levels deep).
const MAX_PEER_DEPTH: usize = 8;

/// What a server answers `Describe` with; one per server.
#[derive(Debug, Default)]
pub struct Describer {
    build: BuildInfo,
    clock: OnceLock<ClockInfo>,
}

impl Describer {
    /// `build` names the serving binary, as a run's environment does.
    pub fn new(build: BuildInfo) -> Describer {
        Describer {
            build,
            clock: OnceLock::new(),
        }
    }

    /// This machine, and the interface of a connection from `local` to `peer`.
    pub fn describe(&self, local: IpAddr, peer: IpAddr) -> (Environment, Option<NicInfo>) {
        let clock = self
            .clock
            .get_or_init(|| {
                Clock::calibrated(osprobe_core::calibration_plan(Profile::Smoke))
                    .info()
                    .clone()
            })
            .clone();
        let mut environment = osprobe_core::environment::capture(clock);
        environment.build = self.build.clone();
        (environment, nic::of_connection(local, peer).ok())
    }
}

/// Ask the server at `peer` to describe itself; `to` is the host as the
/// user named it. Never fails: a far end that cannot be described says why
/// in `error`, and the run's measurements stand without it.
pub fn far_end(peer: &Peer, to: &str) -> FarEnd {
    let mut end = FarEnd {
        to: to.to_string(),
        address: peer.addr.to_string(),
        near_nic: nic::towards(peer.addr.ip()).ok(),
        ..FarEnd::default()
    };
    match peer.describe() {
        Ok((environment, nic)) => {
            end.environment = Some(environment);
            end.far_nic = nic;
        }
        Err(e) => end.error = Some(e.to_string()),
    }
    end
}

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
    use crate::protocol::{decode_body, encode, FrameError, Message};

    fn described() -> Message {
        let (environment, nic) = Describer::new(BuildInfo::default())
            .describe(IpAddr::from([127, 0, 0, 1]), IpAddr::from([127, 0, 0, 1]));
        Message::Described {
            environment: Box::new(environment),
            nic: nic.map(Box::new),
        }
    }

    #[test]
    fn this_machines_description_round_trips_and_fits() {
        let msg = described();
        let frame = encode(&msg).unwrap();
        assert!(
            frame.len() <= crate::protocol::MAX_DESCRIBED_FRAME,
            "{}",
            frame.len()
        );
        assert_eq!(decode_body(&frame[4..]).unwrap(), msg);
        let Message::Described { nic, .. } = msg else {
            unreachable!()
        };
        assert_eq!(nic.unwrap().name, "lo");
    }

    #[test]
    fn control_characters_and_unknown_fields_from_a_peer_are_refused() {
        let Message::Described {
            mut environment,
            nic,
        } = described()
        else {
            unreachable!()
        };
        environment.hostname = "evil\x1b[2Jhost".into();
        let body = serde_json::to_vec(&Message::Described {
            environment: environment.clone(),
            nic: nic.clone(),
        })
        .unwrap();
        assert!(matches!(decode_body(&body), Err(FrameError::Invalid(_))));

        environment.hostname = "far".into();
        let mut value = serde_json::to_value(Message::Described { environment, nic }).unwrap();
        value["environment"]["clock"]["planted"] = Value::from(1);
        let body = serde_json::to_vec(&value).unwrap();
        let err = decode_body(&body).unwrap_err();
        assert!(
            matches!(&err, FrameError::Malformed(m) if m.contains("planted")),
            "{err}"
        );
    }

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
