//! What the flags of `osprobe net TEST` mean as parameter overrides of the
//! experiment: `--to HOST` (measure HOST, or with a link shaped by
//! `--delay/--loss/--rate/--wmem`, the emulator in front of HOST),
//! `--netns`, and iperf3's `-R`/`--bidir` for the direction. A parameter
//! a flag sets is not also swept with `--param`: that would silently
//! measure both.

use osprobe_core::{Experiment, ExperimentError};

/// The parameters a flag sets, refused in `--param` beside that flag.
const SET_BY_FLAGS: [&str; 6] = ["path", "to", "delay", "loss", "rate", "wmem"];

/// The flags of `osprobe net TEST`, as parsed.
#[derive(Debug, Clone, Default)]
pub struct NetFlags<'a> {
    /// `--to HOST`.
    pub to: Option<&'a str>,
    /// `--netns`.
    pub netns: bool,
    /// `--delay/--loss/--rate/--wmem` as `name=value` parameters.
    pub link: Vec<(String, String)>,
    /// `-R/--reverse`.
    pub reverse: bool,
    /// `--bidir`.
    pub bidir: bool,
    /// `--param NAME=VALUE`, in order.
    pub params: &'a [(String, String)],
}

/// Flags that cannot be honoured. All but [`NetFlagError::Unreachable`]
/// are the user's to change (a usage error); the message names the flags
/// and what to give.
#[derive(Debug, thiserror::Error)]
pub enum NetFlagError {
    #[error("--param {name}=...: {name} is already set by --to, --netns or --delay/--loss/--rate/--wmem; give one or the other")]
    SetByFlag { name: String },
    #[error("{flag}: {experiment} has no direction; it applies to bandwidth")]
    NoDirection {
        flag: &'static str,
        experiment: &'static str,
    },
    #[error("{flag} and --param direction=... both set the direction; give one or the other")]
    DirectionTwice { flag: &'static str },
    /// `--to` with a shaped link: the middlebox cannot reach HOST.
    #[error(transparent)]
    Unreachable(ExperimentError),
}

impl NetFlagError {
    /// A mistake in the flags (exit code 2), not a failure of the network.
    pub fn is_usage(&self) -> bool {
        !matches!(self, NetFlagError::Unreachable(_))
    }
}

/// The overrides `flags` ask of `experiment`: the `--param`s, then the
/// direction, the path and the link's parameters.
pub fn overrides(
    flags: &NetFlags,
    experiment: &dyn Experiment,
) -> Result<Vec<(String, String)>, NetFlagError> {
    let flagged = flags.to.is_some() || flags.netns || !flags.link.is_empty();
    if let Some((name, _)) = flags
        .params
        .iter()
        .find(|(name, _)| flagged && SET_BY_FLAGS.contains(&name.as_str()))
    {
        return Err(NetFlagError::SetByFlag { name: name.clone() });
    }
    let mut overrides = flags.params.to_vec();
    if let Some(direction) = direction(flags, experiment)? {
        overrides.push(("direction".into(), direction.into()));
    }
    let link = flags.link.clone();
    if let Some(to) = flags.to {
        // With --delay/--loss/--rate/--wmem the emulator sits in front of
        // HOST (path=emulated with to); without, HOST is measured as is.
        if link.is_empty() {
            overrides.push(("path".into(), "remote".into()));
        } else {
            // A HOST the middlebox cannot reach fails here, once, not
            // at every point.
            osprobe_link::testbed::remote::middlebox_destination(to)
                .map_err(NetFlagError::Unreachable)?;
        }
        overrides.push(("to".into(), to.to_string()));
        overrides.extend(link);
    } else if flags.netns {
        overrides.push(("path".into(), "netns".into()));
    } else {
        // --delay/--loss/--rate/--wmem: path=emulated with those values,
        // checked like --param values.
        overrides.extend(link);
    }
    Ok(overrides)
}

/// The direction iperf3's -R and --bidir ask for, refused where the test
/// has no direction or where --param sets it too.
fn direction(
    flags: &NetFlags,
    experiment: &dyn Experiment,
) -> Result<Option<&'static str>, NetFlagError> {
    let (flag, direction) = match (flags.reverse, flags.bidir) {
        (true, _) => ("-R/--reverse", "reverse"),
        (_, true) => ("--bidir", "bidir"),
        _ => return Ok(None),
    };
    if !experiment.params().iter().any(|p| p.name == "direction") {
        return Err(NetFlagError::NoDirection {
            flag,
            experiment: experiment.id(),
        });
    }
    if flags.params.iter().any(|(name, _)| name == "direction") {
        return Err(NetFlagError::DirectionTwice { flag });
    }
    Ok(Some(direction))
}

#[cfg(test)]
mod tests {
    use super::*;
    use osprobe_core::Registry;

    fn registry() -> Registry {
        let mut registry = Registry::new();
        crate::register(&mut registry);
        registry
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn to_netns_and_a_shaped_link_choose_the_path() {
        let registry = registry();
        let rtt = registry.get("net.rtt").expect("net.rtt");
        let params = pairs(&[("size", "64")]);
        let remote = NetFlags {
            to: Some("192.0.2.1:5301"),
            params: &params,
            ..NetFlags::default()
        };
        assert_eq!(
            overrides(&remote, rtt).unwrap(),
            pairs(&[("size", "64"), ("path", "remote"), ("to", "192.0.2.1:5301")])
        );
        let netns = NetFlags {
            netns: true,
            ..NetFlags::default()
        };
        assert_eq!(overrides(&netns, rtt).unwrap(), pairs(&[("path", "netns")]));
        let shaped = NetFlags {
            link: pairs(&[("delay", "10ms")]),
            ..NetFlags::default()
        };
        assert_eq!(
            overrides(&shaped, rtt).unwrap(),
            pairs(&[("delay", "10ms")])
        );
    }

    #[test]
    fn a_parameter_set_by_a_flag_and_by_param_is_refused() {
        let registry = registry();
        let rtt = registry.get("net.rtt").expect("net.rtt");
        let params = pairs(&[("path", "loopback")]);
        let both = NetFlags {
            netns: true,
            params: &params,
            ..NetFlags::default()
        };
        let err = overrides(&both, rtt).unwrap_err();
        assert!(matches!(&err, NetFlagError::SetByFlag { name } if name == "path"));
        assert!(err.is_usage());
        assert!(err.to_string().contains("give one or the other"), "{err}");
        // Without a flag setting it, --param path=... is the user's choice.
        let alone = NetFlags {
            params: &params,
            ..NetFlags::default()
        };
        assert_eq!(overrides(&alone, rtt).unwrap(), params);
    }

    #[test]
    fn a_direction_needs_a_test_with_one_and_is_given_once() {
        let registry = registry();
        let rtt = registry.get("net.rtt").expect("net.rtt");
        let reverse = NetFlags {
            reverse: true,
            ..NetFlags::default()
        };
        let err = overrides(&reverse, rtt).unwrap_err();
        assert!(matches!(err, NetFlagError::NoDirection { .. }), "{err}");
        assert!(err.to_string().contains("has no direction"), "{err}");
        let with_direction = registry
            .all()
            .find(|e| e.params().iter().any(|p| p.name == "direction"))
            .expect("a test with a direction");
        assert_eq!(
            overrides(&reverse, with_direction).unwrap(),
            pairs(&[("direction", "reverse")])
        );
        let params = pairs(&[("direction", "forward")]);
        let twice = NetFlags {
            bidir: true,
            params: &params,
            ..NetFlags::default()
        };
        let err = overrides(&twice, with_direction).unwrap_err();
        assert!(matches!(
            err,
            NetFlagError::DirectionTwice { flag: "--bidir" }
        ));
    }
}
