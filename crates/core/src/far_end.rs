//! Both ends of a networked run: the far host as its `osprobe serve`
//! described itself, and the interfaces each end used.
//!
//! A run's [`crate::Environment`] is the near machine. A run that measured
//! against a remote host (`--to HOST`) also keeps one [`FarEnd`] per host:
//! the far machine's environment (the same capture a run stores: CPU,
//! caches, memory, kernel, clock, virtualization), the far interface that
//! carried the connection, and the near interface towards it. Seed 004's
//! Table 3 describes its two machines side by side; [`side_by_side`] gives
//! the rows for that table.

use crate::environment::Environment;
use crate::nic::NicInfo;
use serde::{Deserialize, Serialize};

/// One remote host a run measured against.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FarEnd {
    /// The host as the user named it (`--to`), e.g. `198.18.80.2`.
    pub to: String,
    /// The address it was reached at, e.g. `198.18.80.2:5301`.
    pub address: String,
    /// This machine's interface towards it.
    pub near_nic: Option<NicInfo>,
    /// The far machine as its server described it (text escaped on receipt).
    pub environment: Option<Environment>,
    /// The far machine's interface carrying the connection.
    pub far_nic: Option<NicInfo>,
    /// Why the far end could not be described (an older server, a refusal);
    /// the run's measurements stand without it.
    pub error: Option<String>,
}

/// (label, near, far) rows: the machines, then their interfaces.
pub fn side_by_side(near: &Environment, far: &FarEnd) -> Vec<(String, String, String)> {
    let mut rows = Vec::new();
    let not_described = || {
        far.error
            .clone()
            .map(|e| format!("not described: {e}"))
            .unwrap_or_else(|| "not described".to_string())
    };
    let near_lines = near.summary_lines();
    match &far.environment {
        Some(env) => {
            let far_lines = env.summary_lines();
            for (label, near_value) in &near_lines {
                let far_value = far_lines
                    .iter()
                    .find(|(l, _)| l == label)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| "-".to_string());
                rows.push((label.clone(), near_value.clone(), far_value));
            }
        }
        None => {
            let host = near_lines
                .first()
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            rows.push(("Host".to_string(), host, not_described()));
        }
    }
    let nic_lines = |nic: &Option<NicInfo>| nic.as_ref().map(NicInfo::summary_lines);
    let (near_nic, far_nic) = (nic_lines(&far.near_nic), nic_lines(&far.far_nic));
    let labels = near_nic
        .as_ref()
        .or(far_nic.as_ref())
        .map(|l| l.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>())
        .unwrap_or_default();
    for label in labels {
        let value = |lines: &Option<Vec<(String, String)>>| {
            lines
                .as_ref()
                .and_then(|l| l.iter().find(|(k, _)| *k == label).map(|(_, v)| v.clone()))
                .unwrap_or_else(|| "-".to_string())
        };
        rows.push((label.clone(), value(&near_nic), value(&far_nic)));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_pair_the_machines_then_the_interfaces() {
        let near = Environment {
            hostname: "near".into(),
            ..Environment::default()
        };
        let far_env = Environment {
            hostname: "far".into(),
            ..Environment::default()
        };
        let far = FarEnd {
            to: "198.18.80.2".into(),
            address: "198.18.80.2:5301".into(),
            near_nic: Some(NicInfo {
                name: "veth0".into(),
                mtu: Some(1500),
                ..NicInfo::default()
            }),
            environment: Some(far_env),
            far_nic: Some(NicInfo {
                name: "veth1".into(),
                mtu: Some(9000),
                ..NicInfo::default()
            }),
            error: None,
        };
        let rows = side_by_side(&near, &far);
        let host = rows.iter().find(|r| r.0 == "Host").unwrap();
        assert!(
            host.1.starts_with("near") && host.2.starts_with("far"),
            "{host:?}"
        );
        let mtu = rows.iter().find(|r| r.0 == "MTU").unwrap();
        assert_eq!((mtu.1.as_str(), mtu.2.as_str()), ("1500", "9000"));
        let nic = rows.iter().position(|r| r.0 == "Interface").unwrap();
        let kernel = rows.iter().position(|r| r.0 == "Kernel").unwrap();
        assert!(kernel < nic, "machines first");
    }

    #[test]
    fn a_far_end_not_described_says_why() {
        let far = FarEnd {
            to: "h".into(),
            error: Some("refused".into()),
            ..FarEnd::default()
        };
        let rows = side_by_side(&Environment::default(), &far);
        assert_eq!(rows[0].2, "not described: refused");
    }
}
