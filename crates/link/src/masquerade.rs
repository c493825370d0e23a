//! Source NAT for a middlebox's traffic as it leaves this host: an
//! nftables table of its own holding one `masquerade` rule, so a real host
//! answers to this host's address instead of an address in 198.18.0.0/15
//! that it has no route for.
//!
//! The whole table belongs to one middlebox: removing it (`nft delete
//! table`) removes the rule and nothing else, whatever other rules the
//! machine has. Its name carries the owner's pid and start time
//! (`osprobe_mbox_<pid>_<start>_<n>`; nft names take no dashes), and
//! [`sweep`], which every osprobe command runs at start as root, deletes
//! the tables of owners that are gone (a SIGKILL leaves the table behind:
//! the kernel ties no nftables object to a process).

use crate::error::CommandError;
use osprobe_core::owner::Owner;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// Every table this module makes starts with this.
pub const TABLE_PREFIX: &str = "osprobe_mbox_";

/// The `nft` program (Debian: the nftables package), or why there is none.
pub fn nft_program() -> Result<PathBuf, CommandError> {
    osprobe_core::find_program("nft")
        .or_else(|| {
            ["/usr/sbin/nft", "/sbin/nft"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .ok_or(CommandError::Missing(
            "the `nft` command was not found: the middlebox masquerades its traffic with \
             nftables (install it, e.g. `apt-get install nftables`)",
        ))
}

/// Run `nft args...` with `stdin` as its input; its stdout or an error
/// naming the command and what nft said.
fn nft(args: &[&str], stdin: Option<&str>) -> Result<String, CommandError> {
    let program = nft_program()?;
    let label = format!("nft {}", args.join(" "));
    let run = |what: &'static str, label: &str| {
        let label = label.to_string();
        move |source| CommandError::Run {
            what,
            label,
            source,
        }
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(run("running", &label))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(run("writing to", &label))?;
    }
    let output = child
        .wait_with_output()
        .map_err(run("waiting for", &label))?;
    if !output.status.success() {
        return Err(CommandError::Failed {
            label,
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A masquerade rule for one source address, until dropped.
#[derive(Debug)]
pub struct Masquerade {
    table: String,
    removed: bool,
}

/// The ruleset text for one table.
fn ruleset(table: &str, source: Ipv4Addr) -> String {
    format!(
        "table ip {table} {{\n\
         \tchain postrouting {{\n\
         \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\tip saddr {source} masquerade\n\
         \t}}\n\
         }}\n"
    )
}

impl Masquerade {
    /// Masquerade packets from `source` leaving this namespace.
    pub fn install(source: Ipv4Addr) -> Result<Masquerade, CommandError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let owner = Owner::current();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let table = format!("{TABLE_PREFIX}{}_{}_{n}", owner.pid, owner.start);
        nft(&["-f", "-"], Some(&ruleset(&table, source)))?;
        Ok(Masquerade {
            table,
            removed: false,
        })
    }

    /// The table's name (`nft list table ip NAME` shows it).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Delete the table, reporting a failure.
    pub fn remove(mut self) -> Result<(), CommandError> {
        self.remove_inner()
    }

    fn remove_inner(&mut self) -> Result<(), CommandError> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        nft(&["delete", "table", "ip", &self.table], None).map(drop)
    }
}

impl Drop for Masquerade {
    fn drop(&mut self) {
        let _ = self.remove_inner();
    }
}

/// The owner of a table name this module makes; None for any other name.
fn owner_of(table: &str) -> Option<Owner> {
    let rest = table.strip_prefix(TABLE_PREFIX)?;
    let parts: Vec<&str> = rest.split('_').collect();
    match parts.as_slice() {
        [pid, start, n] if n.parse::<u64>().is_ok() => Some(Owner {
            pid: pid.parse().ok()?,
            start: start.parse().ok()?,
        }),
        _ => None,
    }
}

/// The names of the `ip` tables in `nft list tables` output.
fn ip_tables(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("table"), Some("ip"), Some(name), None) => Some(name.to_string()),
                _ => None,
            }
        })
        .collect()
}

/// The names of this module's tables that exist now.
pub fn tables() -> Result<Vec<String>, CommandError> {
    Ok(ip_tables(&nft(&["list", "tables", "ip"], None)?)
        .into_iter()
        .filter(|t| t.starts_with(TABLE_PREFIX))
        .collect())
}

/// Delete the tables of owners that are gone. Returns how many went.
/// Without `nft` there is nothing this module could have made.
pub fn sweep() -> usize {
    if nft_program().is_err() {
        return 0;
    }
    let mut removed = 0;
    for table in tables().unwrap_or_default() {
        if owner_of(&table).is_some_and(|o| !o.is_alive())
            && nft(&["delete", "table", "ip", &table], None).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_carry_their_owner() {
        assert_eq!(
            owner_of("osprobe_mbox_123_456_7"),
            Some(Owner {
                pid: 123,
                start: 456
            })
        );
        for other in [
            "osprobe_mbox_123_456",
            "osprobe_mbox_x_456_7",
            "filter",
            "osprobe_mbox_1_2_3_4",
        ] {
            assert_eq!(owner_of(other), None, "{other}");
        }
    }

    #[test]
    fn listings_are_parsed_for_ip_tables_only() {
        let listing = "table ip filter\ntable inet fw\ntable ip osprobe_mbox_1_2_0\n\ngarbage\n";
        assert_eq!(ip_tables(listing), vec!["filter", "osprobe_mbox_1_2_0"]);
    }

    #[test]
    fn the_ruleset_masquerades_one_source() {
        let text = ruleset("osprobe_mbox_1_2_0", Ipv4Addr::new(198, 18, 70, 2));
        assert!(text.starts_with("table ip osprobe_mbox_1_2_0 {"), "{text}");
        assert!(text.contains("hook postrouting priority srcnat"), "{text}");
        assert!(text.contains("ip saddr 198.18.70.2 masquerade"), "{text}");
    }
}
