//! What `osprobe rfs serve` says when it starts and when it stops: the
//! export, the address and the limits ([`Listening`]), then what was
//! served ([`ServerStats`]'s `Display`).

use crate::{Server, ServerOptions, ServerStats, Transports};
use osprobe_core::experiment::format_bytes;
use std::fmt;

/// The line `rfs serve` starts with.
pub struct Listening<'a> {
    pub server: &'a Server,
    pub transports: Transports,
    pub options: &'a ServerOptions,
}

impl Transports {
    /// `--udp`, `--tcp`: one alone if only it is asked for, else both.
    pub fn chosen(udp: bool, tcp: bool) -> Transports {
        match (udp, tcp) {
            (true, false) => Transports::UDP,
            (false, true) => Transports::TCP,
            _ => Transports::BOTH,
        }
    }
}

impl<'a> Listening<'a> {
    pub fn new(server: &'a Server, transports: Transports, options: &'a ServerOptions) -> Self {
        Listening {
            server,
            transports,
            options,
        }
    }
}

impl fmt::Display for Transports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.udp, self.tcp) {
            (true, true) => "UDP and TCP",
            (true, false) => "UDP",
            _ => "TCP",
        })
    }
}

impl fmt::Display for Listening<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut what = vec![self.transports.to_string()];
        if self.options.read_only {
            what.push("read-only".into());
        }
        if self.options.token.is_some() {
            what.push("token required".into());
        }
        what.push(format!("at most {} clients", self.options.max_clients));
        what.push(format!(
            "files up to {}",
            format_bytes(self.options.max_file_size)
        ));
        write!(
            f,
            "osprobe rfs serve: exporting {} on {} ({}); Ctrl-C to stop",
            self.server.export().display(),
            self.server.local_addr(),
            what.join(", ")
        )?;
        // The kernel refused the workers a socket each: say it, since
        // clients then share the workers' batches.
        if let Some(note) = self.server.udp_note() {
            write!(f, "\nosprobe rfs serve: {note}")?;
        }
        Ok(())
    }
}

/// What was served, for the line `rfs serve` stops with.
impl fmt::Display for ServerStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests from {} sessions ({} bytes read, {} written, {} answered from the duplicate cache, {} malformed, {} refused)",
            self.requests,
            self.sessions_opened,
            self.bytes_read,
            self.bytes_written,
            self.replayed,
            self.malformed,
            self.refused
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_says_what_and_where() {
        let dir = tempfile::tempdir().unwrap();
        let options = ServerOptions {
            read_only: true,
            token: Some("s3cret".into()),
            max_clients: 3,
            max_file_size: 64 << 30,
            ..ServerOptions::default()
        };
        let server = Server::bind(
            "127.0.0.1:0".parse().unwrap(),
            Transports::TCP,
            dir.path(),
            options.clone(),
        )
        .unwrap();
        let line = Listening {
            server: &server,
            transports: Transports::TCP,
            options: &options,
        }
        .to_string();
        assert_eq!(
            line,
            format!(
                "osprobe rfs serve: exporting {} on {} (TCP, read-only, token required, at most 3 clients, files up to 64G); Ctrl-C to stop",
                server.export().display(),
                server.local_addr()
            )
        );
    }

    #[test]
    fn one_transport_alone_or_both() {
        assert_eq!(Transports::chosen(true, false), Transports::UDP);
        assert_eq!(Transports::chosen(false, true), Transports::TCP);
        assert_eq!(Transports::chosen(false, false), Transports::BOTH);
        assert_eq!(Transports::chosen(true, true), Transports::BOTH);
    }

    #[test]
    fn stats_read_as_before() {
        let stats = ServerStats {
            requests: 5,
            sessions_opened: 1,
            bytes_read: 10,
            ..ServerStats::default()
        };
        assert_eq!(
            stats.to_string(),
            "5 requests from 1 sessions (10 bytes read, 0 written, 0 answered from the duplicate cache, 0 malformed, 0 refused)"
        );
    }
}
