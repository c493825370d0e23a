//! Who owns a leftover: the process that made it, named by its pid and its
//! start time.
//!
//! Scratch directories and cgroups outlive a process killed outright (the
//! kernel removes neither), so their names carry their owner, and every
//! osprobe command removes at start those whose owner is gone. A pid alone
//! is not enough: pids are reused, and a leftover whose pid now belongs to
//! an unrelated process would never be swept. The start time (field 22 of
//! `/proc/PID/stat`, in clock ticks since boot) tells a reused pid apart:
//! a name is `<prefix><pid>-<start>-<random>`.
//!
//! Limit: a process in another pid namespace that shares the directory (a
//! container with the same /tmp) is invisible in our /proc and counts as
//! gone; only names with osprobe's prefixes are ever removed.

use std::sync::OnceLock;

/// A process: its pid and its start time in clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub pid: u32,
    pub start: u64,
}

/// What a leftover's name says about its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// `<pid>-<start>-<random>`: an exact process.
    Exact(Owner),
    /// `<pid>-<random>`, from osprobe versions before start times: the pid
    /// alone.
    PidOnly(u32),
}

impl Owner {
    /// This process (read once; it does not change).
    pub fn current() -> Owner {
        static CURRENT: OnceLock<Owner> = OnceLock::new();
        *CURRENT.get_or_init(|| {
            let pid = std::process::id();
            // /proc is mounted wherever osprobe runs; without it the start
            // time is 0, which only makes our own leftovers look older.
            Owner::of_pid(pid).unwrap_or(Owner { pid, start: 0 })
        })
    }

    /// The process with this pid now, if there is one (in our /proc).
    pub fn of_pid(pid: u32) -> Option<Owner> {
        if pid == 0 {
            return None;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        Some(Owner {
            pid,
            start: parse_start_time(&stat)?,
        })
    }

    /// `<pid>-<start>`, the part of a name that says whose it is.
    pub fn tag(&self) -> String {
        format!("{}-{}", self.pid, self.start)
    }

    /// A fresh name `<prefix><pid>-<start>-<random>` owned by this process.
    pub fn new_name(prefix: &str) -> String {
        format!(
            "{prefix}{}-{}",
            Owner::current().tag(),
            crate::id::new_run_id()
        )
    }

    /// Whether this exact process still runs.
    pub fn is_alive(&self) -> bool {
        Owner::of_pid(self.pid) == Some(*self)
    }
}

impl Claim {
    /// Read the owner out of a name made by [`Owner::new_name`] (or the
    /// older `<prefix><pid>-<random>`); None for any other name.
    pub fn parse(name: &str, prefix: &str) -> Option<Claim> {
        let rest = name.strip_prefix(prefix)?;
        let parts: Vec<&str> = rest.split('-').collect();
        let number = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        let pid = u32::try_from(number(parts.first()?)?).ok()?;
        match parts.as_slice() {
            [_, start, random] if !random.is_empty() => Some(Claim::Exact(Owner {
                pid,
                start: number(start)?,
            })),
            [_, random] if !random.is_empty() => Some(Claim::PidOnly(pid)),
            _ => None,
        }
    }

    /// Whether the claimed owner is gone, so its leftover may be removed.
    pub fn owner_is_gone(&self) -> bool {
        match *self {
            Claim::Exact(owner) => !owner.is_alive(),
            Claim::PidOnly(pid) => Owner::of_pid(pid).is_none(),
        }
    }
}

/// Field 22 (starttime) of a `/proc/PID/stat` line. The command name
/// (field 2) is in parentheses and may hold spaces and parentheses itself,
/// so fields are counted from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first word after the name: field 22 is the 20th.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_read_past_odd_command_names() {
        let fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        let line = format!("1234 (a) b (c) {}\n", fields.join(" "));
        assert_eq!(parse_start_time(&line), Some(22));
        assert_eq!(parse_start_time("1234 (x) S 1 2"), None);
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not_its_owner() {
        let me = Owner::current();
        assert_eq!(me.pid, std::process::id());
        assert!(me.start > 0);
        assert!(me.is_alive());
        // Same pid, another start time: a process that had our pid before.
        let earlier = Owner {
            pid: me.pid,
            start: me.start - 1,
        };
        assert!(!earlier.is_alive());
        assert!(Claim::Exact(earlier).owner_is_gone());
        assert!(!Claim::Exact(me).owner_is_gone());
        assert!(!Claim::PidOnly(me.pid).owner_is_gone());
    }

    #[test]
    fn names_carry_their_owner() {
        let name = Owner::new_name("osprobe-x-");
        assert_eq!(
            Claim::parse(&name, "osprobe-x-"),
            Some(Claim::Exact(Owner::current()))
        );
        assert_eq!(
            Claim::parse("osprobe-x-12-01ABC", "osprobe-x-"),
            Some(Claim::PidOnly(12))
        );
        for other in [
            "osprobe-x-",
            "osprobe-x-12",
            "osprobe-x-a-01ABC",
            "osprobe-x-12-b-01ABC",
            "osprobe-x-12-3-4-5",
            "osprobe-y-12-01ABC",
            "osprobe-x-99999999999-01ABC",
        ] {
            assert_eq!(Claim::parse(other, "osprobe-x-"), None, "{other}");
        }
    }
}
