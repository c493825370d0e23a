//! What a fleet run did, as the closing report on stdout: `Display` for
//! the text, `Serialize` for `fleet run --json` (schema/fleet-run.schema.json).

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use std::fmt;

/// The whole fleet run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The fleet id: every stored run's `fleet` label.
    pub fleet: String,
    /// Seconds from start to end, pairs included.
    pub seconds: f64,
    /// Seconds the hosts took (before the pairs).
    pub hosts_seconds: f64,
    /// Hosts measured at once.
    pub parallel: usize,
    pub hosts: Vec<HostReport>,
    pub pairs: Vec<PairReport>,
    /// Hosts of the inventory.
    #[serde(skip)]
    pub planned_hosts: usize,
    /// The size of this osprobe, for "copied osprobe (N MB)".
    #[serde(skip)]
    pub binary_bytes: u64,
    /// Ctrl-C (or SIGTERM/SIGHUP) stopped the run.
    #[serde(skip)]
    pub interrupted: bool,
}

/// One host.
#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    /// Its inventory name.
    pub host: String,
    pub ok: bool,
    /// The id of its stored run, if one was stored.
    pub run: Option<String>,
    pub measurements: Option<usize>,
    pub failure: Option<String>,
    /// osprobe was copied there (its cached copy was missing or another).
    pub copied: bool,
    /// Seconds per stage, in the order they ran: connect, copy, version, run.
    #[serde(serialize_with = "as_map")]
    pub stages: Vec<(String, f64)>,
    /// A working osprobe is there (copied or found).
    #[serde(skip)]
    pub binary_there: bool,
}

/// One ordered pair.
#[derive(Debug, Clone, Serialize)]
pub struct PairReport {
    /// `SRC -> DST`, inventory names.
    pub pair: String,
    pub ok: bool,
    /// Test name to the id of its stored run.
    #[serde(serialize_with = "as_map")]
    pub runs: Vec<(String, String)>,
    pub failures: Vec<String>,
}

/// A list of (key, value) as a JSON object, in its order.
fn as_map<S: Serializer, V: Serialize>(
    entries: &[(String, V)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(entries.len()))?;
    for (key, value) in entries {
        map.serialize_entry(key, value)?;
    }
    map.end()
}

impl Report {
    /// What an interrupted run says it kept.
    pub const INTERRUPTED: &'static str =
        "interrupted; the runs listed as stored are kept, nothing else was stored";

    /// The command's exit code: 128 + the signal when interrupted, 0 when
    /// every host and pair succeeded, else 1.
    pub fn exit_code(&self) -> u8 {
        match (self.interrupted, self.succeeded()) {
            (true, _) => osprobe_core::interrupt::exit_code(),
            (false, true) => 0,
            (false, false) => 1,
        }
    }

    /// Every host and every pair succeeded (exit 0).
    pub fn succeeded(&self) -> bool {
        self.hosts.len() == self.planned_hosts
            && self.hosts.iter().all(|h| h.ok)
            && self.pairs.iter().all(|p| p.ok)
    }

    /// The widest host name, to align the host lines.
    fn name_width(&self) -> usize {
        self.hosts
            .iter()
            .map(|h| h.host.chars().count())
            .max()
            .unwrap_or(4)
    }

    fn write_host(&self, f: &mut fmt::Formatter<'_>, h: &HostReport) -> fmt::Result {
        let width = self.name_width();
        let status = match (&h.run, h.ok) {
            (Some(run), true) => format!(
                "ok      run {run} ({} measurements)",
                h.measurements.unwrap_or(0)
            ),
            (Some(run), false) => format!("FAILED  run {run} stored, with failures"),
            (None, _) => "FAILED  nothing stored".to_string(),
        };
        writeln!(f, "  {:<width$}  {status}", h.host)?;
        if !h.stages.is_empty() {
            let stages: Vec<String> = h
                .stages
                .iter()
                .map(|(s, t)| format!("{s} {t:.2} s"))
                .collect();
            let copy = match (h.copied, h.binary_there) {
                (true, _) => format!(
                    "; copied osprobe ({:.1} MB)",
                    self.binary_bytes as f64 / 1e6
                ),
                (false, true) => "; osprobe already there".into(),
                (false, false) => String::new(),
            };
            writeln!(f, "  {:<width$}    {}{copy}", "", stages.join(", "))?;
        }
        for line in h.failure.iter().flat_map(|why| why.lines()) {
            writeln!(f, "  {:<width$}    {line}", "")?;
        }
        Ok(())
    }
}

impl fmt::Display for PairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|(t, id)| format!("{t} {id}"))
            .collect();
        let status = if self.ok { "ok    " } else { "FAILED" };
        let runs = if runs.is_empty() {
            "nothing stored".into()
        } else {
            runs.join(", ")
        };
        writeln!(f, "  {}  {status}  {runs}", self.pair)?;
        for line in self.failures.iter().flat_map(|why| why.lines()) {
            writeln!(f, "      {line}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ok = self.hosts.iter().filter(|h| h.ok).count();
        writeln!(
            f,
            "fleet run {}: {ok} of {} hosts succeeded in {:.1} s ({} at a time)",
            self.fleet, self.planned_hosts, self.hosts_seconds, self.parallel
        )?;
        for host in &self.hosts {
            self.write_host(f, host)?;
        }
        if !self.pairs.is_empty() {
            let ok = self.pairs.iter().filter(|p| p.ok).count();
            writeln!(f, "pairs: {ok} of {} succeeded", self.pairs.len())?;
            for pair in &self.pairs {
                write!(f, "{pair}")?;
            }
        }
        writeln!(
            f,
            "total {:.1} s; `osprobe history` lists the stored runs",
            self.seconds
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            fleet: "01JFLEET".into(),
            seconds: 12.34,
            hosts_seconds: 10.0,
            parallel: 2,
            hosts: vec![
                HostReport {
                    host: "web1".into(),
                    ok: true,
                    run: Some("01JRUN1".into()),
                    measurements: Some(3),
                    failure: None,
                    copied: true,
                    stages: vec![("connect".into(), 0.5), ("copy".into(), 1.25)],
                    binary_there: true,
                },
                HostReport {
                    host: "db".into(),
                    ok: false,
                    run: None,
                    measurements: None,
                    failure: Some("ssh to db: refused\nsecond line".into()),
                    copied: false,
                    stages: Vec::new(),
                    binary_there: false,
                },
            ],
            pairs: vec![PairReport {
                pair: "web1 -> db".into(),
                ok: false,
                runs: Vec::new(),
                failures: vec!["not measured: no working osprobe on db".into()],
            }],
            planned_hosts: 2,
            binary_bytes: 12_500_000,
            interrupted: false,
        }
    }

    #[test]
    fn the_exit_code_says_interrupted_failed_or_fine() {
        let mut r = report();
        assert_eq!(r.exit_code(), 1);
        r.hosts.iter_mut().for_each(|h| h.ok = true);
        r.pairs.clear();
        assert_eq!(r.exit_code(), 0);
        r.interrupted = true;
        assert!(r.exit_code() >= 128);
    }

    #[test]
    fn the_text_lists_hosts_stages_failures_and_pairs() {
        let text = report().to_string();
        let expected = "\
fleet run 01JFLEET: 1 of 2 hosts succeeded in 10.0 s (2 at a time)
  web1  ok      run 01JRUN1 (3 measurements)
          connect 0.50 s, copy 1.25 s; copied osprobe (12.5 MB)
  db    FAILED  nothing stored
          ssh to db: refused
          second line
pairs: 0 of 1 succeeded
  web1 -> db  FAILED  nothing stored
      not measured: no working osprobe on db
total 12.3 s; `osprobe history` lists the stored runs
";
        assert_eq!(text, expected);
    }

    #[test]
    fn the_json_keeps_stages_and_runs_as_objects() {
        let json = serde_json::to_value(report()).unwrap();
        assert_eq!(json["hosts"][0]["stages"]["copy"], 1.25);
        assert_eq!(
            json["hosts"][1]["failure"],
            "ssh to db: refused\nsecond line"
        );
        assert_eq!(json["pairs"][0]["runs"], serde_json::json!({}));
        assert!(json.get("interrupted").is_none() && json.get("binary_bytes").is_none());
    }

    #[test]
    fn success_needs_every_host_and_pair() {
        let mut r = report();
        assert!(!r.succeeded());
        r.hosts[1].ok = true;
        r.pairs[0].ok = true;
        assert!(r.succeeded());
        r.planned_hosts = 3;
        assert!(!r.succeeded());
    }
}
