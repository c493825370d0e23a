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
//! by text ([`crate::peer_check`]: no control characters, bounded lengths
//! and counts), so what a run stores from a hostile server is plain text.

use crate::client::Peer;
use osprobe_core::environment::BuildInfo;
use osprobe_core::far_end::FarEnd;
use osprobe_core::nic::{self, NicInfo};
use osprobe_core::{Clock, ClockInfo, Environment, Profile};
use std::net::IpAddr;
use std::sync::OnceLock;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode_body, encode, FrameError, Message};
    use serde_json::Value;

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
}
