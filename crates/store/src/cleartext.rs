//! Refusing to send a PostgreSQL password in clear text.
//!
//! osprobe talks to PostgreSQL without TLS, and the client library answers
//! a server's request for the cleartext password (`AuthenticationCleartext
//! Password`, pg_hba method `password`) with the password itself, readable
//! by anyone on the path and by whatever answered on that address. It has
//! no option to refuse, so before the real connection osprobe asks the
//! server itself: one startup message with the same user and database, and
//! the first authentication request read back; the password is never sent
//! on this connection. A server that asks for it in clear is refused unless
//! the URL says `osprobe_allow_cleartext=1`.
//!
//! Limit: the server is asked once more by the real connection; a server
//! that answers this question with SCRAM and the next with a cleartext
//! request still gets the password. What this stops is the configuration
//! mistake and the plain impostor, not an impostor that knows of the check.

use postgres::config::Host;
use std::io::{Read, Write};
use std::time::Duration;

/// The protocol version of the startup message: 3.0.
const PROTOCOL_3_0: i32 = 196_608;
/// `AuthenticationCleartextPassword`'s code in an 'R' message.
const AUTH_CLEARTEXT: i32 = 3;
/// How long the question may take when the URL sets no connect_timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server asked for first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstAsk {
    /// The password in clear text.
    Cleartext,
    /// Anything else (SCRAM, MD5, no password, an error): the real
    /// connection deals with it and reports what goes wrong.
    Other,
}

/// Ask the first host of `config` how it wants this user to authenticate.
/// An unreachable host is `Other`: the real connection names the failure.
pub(crate) fn first_ask(config: &postgres::Config) -> FirstAsk {
    let timeout = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(DEFAULT_TIMEOUT);
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let startup = startup_message(config);
    let answer = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => tcp_ask(name, port, timeout, &startup),
        Some(Host::Unix(dir)) => {
            let path = dir.join(format!(".s.PGSQL.{port}"));
            std::os::unix::net::UnixStream::connect(path)
                .and_then(|mut s| ask(&mut s, timeout, &startup, |s, t| s.set_read_timeout(t)))
        }
        None => return FirstAsk::Other,
    };
    match answer {
        Ok(AUTH_CLEARTEXT) => FirstAsk::Cleartext,
        _ => FirstAsk::Other,
    }
}

fn tcp_ask(name: &str, port: u16, timeout: Duration, startup: &[u8]) -> std::io::Result<i32> {
    use std::net::ToSocketAddrs;
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "no address");
    for addr in (name, port).to_socket_addrs()? {
        match std::net::TcpStream::connect_timeout(&addr, timeout) {
            Ok(mut s) => return ask(&mut s, timeout, startup, |s, t| s.set_read_timeout(t)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Send `startup`, read the first message back: the authentication code
/// of an 'R' message, or -1 for any other message.
fn ask<S: Read + Write>(
    stream: &mut S,
    timeout: Duration,
    startup: &[u8],
    set_timeout: impl Fn(&S, Option<Duration>) -> std::io::Result<()>,
) -> std::io::Result<i32> {
    set_timeout(stream, Some(timeout))?;
    stream.write_all(startup)?;
    let mut head = [0u8; 9];
    stream.read_exact(&mut head)?;
    let code = i32::from_be_bytes([head[5], head[6], head[7], head[8]]);
    Ok(if head[0] == b'R' { code } else { -1 })
}

/// A StartupMessage: length, protocol 3.0, then `user` and `database`
/// (the user's name when no database is named, as the server assumes).
fn startup_message(config: &postgres::Config) -> Vec<u8> {
    let user = config.get_user().unwrap_or_default();
    let database = config.get_dbname().unwrap_or(user);
    let mut body = PROTOCOL_3_0.to_be_bytes().to_vec();
    for (key, value) in [("user", user), ("database", database)] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut message = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_startup_message_names_user_and_database() {
        let config: postgres::Config = "postgres://alice:pw@h/runs".parse().unwrap();
        let message = startup_message(&config);
        let len = i32::from_be_bytes(message[..4].try_into().unwrap()) as usize;
        assert_eq!(len, message.len());
        assert_eq!(&message[4..8], &PROTOCOL_3_0.to_be_bytes());
        assert_eq!(&message[8..], b"user\0alice\0database\0runs\0\0");
        // The password is never part of the question.
        assert!(!message.windows(2).any(|w| w == b"pw"));
    }
}
