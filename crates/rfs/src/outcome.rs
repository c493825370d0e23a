//! What `osprobe rfs get|put|ls|stat` print, for people (`Display`) and
//! programs (`Serialize`: schema/rfs-transfer.schema.json,
//! schema/rfs-ls.schema.json, schema/rfs-stat.schema.json).

use crate::client::{Client, TransferSummary};
use crate::error::ClientError;
use crate::protocol::{Attr, Kind};
use osprobe_core::human::{number, scale_for};
use osprobe_core::peer_text;
use osprobe_core::Unit;
use serde::Serialize;
use std::fmt;

/// Which way a transfer went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// From the server to here.
    Get,
    /// From here to the server.
    Put,
}

/// One file moved and verified end to end.
#[derive(Debug, Clone, Serialize)]
pub struct TransferReport {
    pub op: Direction,
    pub server: String,
    pub remote: String,
    pub local: String,
    pub bytes: u64,
    pub seconds: f64,
    pub bytes_per_s: f64,
    /// The xxh3-128 of the bytes, equal on both sides, in hex.
    pub xxh3_128: String,
    /// Always true: a transfer whose hashes differ is an error, not a report.
    pub verified: bool,
    /// `udp` or `tcp`.
    pub transport: String,
    pub window: usize,
    pub packet: usize,
    pub retransmissions: u64,
}

impl TransferReport {
    pub fn new(
        op: Direction,
        client: &Client,
        remote: &str,
        local: &std::path::Path,
        s: &TransferSummary,
    ) -> TransferReport {
        let seconds = s.elapsed.as_secs_f64();
        TransferReport {
            op,
            server: client.server().to_string(),
            remote: remote.to_string(),
            local: local.display().to_string(),
            bytes: s.bytes,
            seconds,
            bytes_per_s: if seconds > 0.0 {
                s.bytes as f64 / seconds
            } else {
                0.0
            },
            xxh3_128: format!("{:032x}", s.hash),
            verified: true,
            transport: client.transport().name().to_lowercase(),
            window: client.window(),
            packet: client.packet(),
            retransmissions: s.retransmissions,
        }
    }
}

impl fmt::Display for TransferReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let remote = format!("{}:{}", self.server, self.remote);
        let (op, from, to) = match self.op {
            Direction::Get => ("get", &remote, &self.local),
            Direction::Put => ("put", &self.local, &remote),
        };
        let rate = self.bytes_per_s;
        let scale = scale_for(Unit::BytesPerSecond, rate);
        writeln!(
            f,
            "{op} {from} -> {to}: {} bytes in {:.3} s, {} {} ({:.1} Mbit/s)",
            self.bytes,
            self.seconds,
            number(rate / scale.divisor),
            scale.label,
            rate * 8.0 / 1e6
        )?;
        write!(
            f,
            "  verified: xxh3-128 {} on both sides; {} x {} bytes in flight over {}, {} retransmission{}",
            self.xxh3_128,
            self.window,
            self.packet,
            self.transport.to_uppercase(),
            self.retransmissions,
            if self.retransmissions == 1 { "" } else { "s" }
        )
    }
}

/// `file`, `dir`, `symlink` or `other`: the short words of listings and JSON.
pub fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "symlink",
        Kind::Other => "other",
    }
}

fn serialize_kind<S: serde::Serializer>(kind: &Kind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(kind_word(*kind))
}

/// One entry of a remote directory; the size of files only.
#[derive(Debug, Clone, Serialize)]
pub struct ListEntry {
    /// As the server sent it (text shows it escaped).
    pub name: String,
    #[serde(serialize_with = "serialize_kind")]
    pub kind: Kind,
    pub size: Option<u64>,
}

/// A remote directory's entries, in the server's order: a JSON array, and
/// one line per entry as text.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Listing(pub Vec<ListEntry>);

/// One line of a listing: the name came from the server, so it is escaped
/// (a hostile server could name a file with terminal escapes or newlines).
impl fmt::Display for ListEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = self.size.map_or("-".to_string(), |s| s.to_string());
        let name = peer_text::escape(&self.name, peer_text::MAX_CHARS);
        write!(f, "{:<9} {size:>12}  {name}", kind_word(self.kind))
    }
}

impl fmt::Display for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, entry) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{entry}")?;
        }
        Ok(())
    }
}

impl Listing {
    /// The entries of `dir` on the server, with the size of each file
    /// from one getattr each: a listing is for people, so the extra round
    /// trips are worth it (a file that vanished meanwhile has no size).
    pub fn read(client: &mut Client, dir: &str) -> Result<Listing, ClientError> {
        let entries = client.readdir(dir)?;
        let mut rows = Vec::with_capacity(entries.len());
        for e in &entries {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let path = if dir.trim_matches('/').is_empty() {
                name.clone()
            } else {
                format!("{}/{name}", dir.trim_end_matches('/'))
            };
            let size = match e.kind {
                Kind::File => client.stat(&path).ok().map(|a| a.size),
                _ => None,
            };
            rows.push(ListEntry {
                name,
                kind: e.kind,
                size,
            });
        }
        Ok(Listing(rows))
    }
}

/// A remote path's attributes.
#[derive(Debug, Clone, Serialize)]
pub struct StatReport {
    pub path: String,
    #[serde(serialize_with = "serialize_kind")]
    pub kind: Kind,
    pub size: u64,
    /// Permission bits in octal, as `ls -l` users read them: `644`.
    pub mode: String,
    pub mtime_ns: i64,
    pub atime_ns: i64,
}

impl StatReport {
    pub fn new(path: &str, attr: &Attr) -> StatReport {
        StatReport {
            path: path.to_string(),
            kind: attr.kind,
            size: attr.size,
            mode: format!("{:o}", attr.mode),
            mtime_ns: attr.mtime_ns,
            atime_ns: attr.atime_ns,
        }
    }
}

impl fmt::Display for StatReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.path)?;
        writeln!(f, "  kind:  {}", self.kind.name())?;
        writeln!(f, "  size:  {} bytes", self.size)?;
        writeln!(f, "  mode:  {}", self.mode)?;
        write!(
            f,
            "  mtime: {}.{:09} s since the epoch",
            self.mtime_ns.div_euclid(1_000_000_000),
            self.mtime_ns.rem_euclid(1_000_000_000)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_names_are_escaped() {
        let entry = ListEntry {
            name: "evil\x1b[2J\nosprobe: ok\u{202e}".into(),
            kind: Kind::File,
            size: Some(3),
        };
        let line = entry.to_string();
        assert!(!line.contains('\x1b') && !line.contains('\n') && !line.contains('\u{202e}'));
        assert!(
            line.contains("evil") && line.ends_with("ok\\u{202e}"),
            "{line}"
        );
    }

    #[test]
    fn a_listing_is_an_array_of_entries() {
        let listing = Listing(vec![
            ListEntry {
                name: "a".into(),
                kind: Kind::Dir,
                size: None,
            },
            ListEntry {
                name: "b".into(),
                kind: Kind::File,
                size: Some(5),
            },
        ]);
        let json = serde_json::to_value(&listing).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"name": "a", "kind": "dir", "size": null},
                {"name": "b", "kind": "file", "size": 5}
            ])
        );
        assert_eq!(listing.to_string().lines().count(), 2);
    }

    #[test]
    fn stat_reads_as_before() {
        let report = StatReport {
            path: "x.bin".into(),
            kind: Kind::File,
            size: 12,
            mode: "644".into(),
            mtime_ns: 1_500_000_000,
            atime_ns: 0,
        };
        assert_eq!(
            report.to_string(),
            "x.bin\n  kind:  file\n  size:  12 bytes\n  mode:  644\n  mtime: 1.500000000 s since the epoch"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["kind"], "file");
        assert_eq!(json["mode"], "644");
    }
}
