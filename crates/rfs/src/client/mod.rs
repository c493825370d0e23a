//! The rfs client: SOS's file system calls (open, close, read, write,
//! getdirent, stat, create) over the request pipeline of
//! [`crate::pipeline`], plus whole-file `get` and `put` with progress and
//! an end-to-end checksum.
//!
//! One concern per file:
//!
//! - this file: the [`Client`] itself, its session (hello, authentication,
//!   goodbye), its settings, and one-request calls;
//! - `options`: [`ClientOptions`] and their checks;
//! - `transport`: the UDP socket or TCP stream under the pipeline;
//! - `paths`: path components, lookups and walks from the export's root;
//! - `ops`: the SOS calls on open files and directories;
//! - `bulk`: whole-file `get` and `put`, streamed through the window.
//!
//! Reads and writes are cut into `packet`-byte requests, `window` of them
//! in flight. `read` places each reply's bytes at their offset in the
//! caller's buffer, whatever order the replies come in, and returns the
//! contiguous prefix (a short reply means end of file). `get` streams a
//! whole file: replies that arrive ahead of the next expected offset wait
//! in a reorder buffer (at most `window` packets) and bytes go to the
//! local file strictly in order, through the hash. `put` reads the local
//! file once, hashes it as it goes, and compares with the server's hash of
//! what it stored, after a commit (fsync) on the server.
//!
//! Paths are relative to the export, components separated by `/`; a
//! leading `/` means the export's root. `.` and `..` are refused here, and
//! would be refused by the server too.

mod bulk;
mod ops;
mod options;
mod paths;
mod transport;
mod write_job;

pub use bulk::TransferSummary;
pub use ops::{Fd, OpenMode};
pub use options::ClientOptions;

use crate::auth;
use crate::error::ClientError;
use crate::pipeline::{ClientStats, Encoder, Job, Pipeline, Timing};
use crate::protocol::{ErrorCode, Handle, RemoteError, Reply, Request, Transport, COOKIE_LEN};

/// What a server's welcome carries: its nonce, whether it wants a proof,
/// the export's root, its largest data, its duplicate cache's span.
type Welcome = ([u8; 32], bool, Handle, u32, u32);
use ops::{DirCursor, OpenFile};
use options::check_packet;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Most requests in flight.
pub const MAX_WINDOW: usize = 256;
/// Most files open at once in one client.
pub const MAX_OPEN_FILES: usize = 1024;
/// Longest a hello waits out address back-offs in all (less than the
/// server's hello timeout over TCP).
const BACKOFF_PATIENCE: Duration = Duration::from_secs(3);
/// Fresh address cookies a hello accepts before giving up.
const MAX_HELLO_RETRIES: u32 = 3;

/// A connection to an rfs server.
pub struct Client {
    pipe: Pipeline,
    server: SocketAddr,
    transport: Transport,
    root: Handle,
    max_data: usize,
    packet: usize,
    window: usize,
    fds: HashMap<u32, OpenFile>,
    next_fd: u32,
    dir_cursor: Option<DirCursor>,
    said_goodbye: bool,
    /// How long a hello waits out an address back-off in all.
    backoff_patience: Duration,
    /// Raised from outside (Ctrl-C) to stop a `get` or `put`.
    stop: Option<&'static AtomicBool>,
}

/// Progress of a whole-file transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes delivered in order (get) or acknowledged by the server (put).
    pub done: u64,
    /// The file's size when the transfer started.
    pub total: u64,
}

impl Client {
    /// Connect to `server`, open a session and authenticate if needed.
    pub fn connect(server: SocketAddr, options: ClientOptions) -> Result<Client, ClientError> {
        options.validate()?;
        let conn = transport::open(server, &options)?;
        let timing = Timing {
            initial_rto: options.initial_rto,
            min_rto: options.min_rto,
            max_rto: options.max_rto,
            max_tries: options.max_tries,
            timeout: options.timeout,
        };
        let mut client = Client {
            pipe: Pipeline::new(conn, server, options.window, timing),
            server,
            transport: options.transport,
            root: Handle([0; 16]),
            max_data: options.transport.max_data(),
            packet: options.packet,
            window: options.window,
            fds: HashMap::new(),
            next_fd: 3, // 0..=2 are stdin, stdout and stderr in SOS too
            dir_cursor: None,
            said_goodbye: false,
            backoff_patience: options.timeout.min(BACKOFF_PATIENCE),
            stop: None,
        };
        client.hello(options.token.as_deref())?;
        Ok(client)
    }

    /// The server's welcome to a hello with `client_nonce`: its nonce,
    /// whether it wants a proof, the root, its largest data and its
    /// duplicate cache's span.
    fn welcome(&mut self, client_nonce: [u8; 16]) -> Result<Welcome, ClientError> {
        let server = self.server;
        // Over UDP the first hello is answered with a cookie (the server
        // validates our address before it keeps any state); the second,
        // carrying it, opens the session. A cookie can expire on the way
        // (or the server restart), so a few retries are allowed.
        let mut cookie = [0u8; COOKIE_LEN];
        let mut retries = 0;
        let mut backed_off = Duration::ZERO;
        loop {
            let answer = self.call(
                &Request::Hello {
                    nonce: client_nonce,
                    cookie,
                },
                false,
                |r| match r {
                    Ok(Reply::Welcome {
                        nonce,
                        auth_required,
                        root,
                        max_data,
                        drc_span,
                    }) => Ok(Ok((nonce, auth_required, root, max_data, drc_span))),
                    Ok(Reply::Retry { cookie }) => Ok(Err(cookie)),
                    Ok(_) => Err(unexpected(server, "hello")),
                    Err(error) => Err(remote(server, "opening a session".into(), error)),
                },
            );
            // Wrong tokens from this address (another program's, maybe):
            // wait out a short back-off, then try again.
            let answer = match answer {
                Err(ClientError::Remote { error, .. })
                    if error.code == ErrorCode::Auth
                        && crate::backoff::parse_refusal(&error.detail)
                            .is_some_and(|w| backed_off + w <= self.backoff_patience) =>
                {
                    let wait = crate::backoff::parse_refusal(&error.detail).unwrap_or_default();
                    std::thread::sleep(wait);
                    backed_off += wait;
                    continue;
                }
                other => other?,
            };
            match answer {
                Ok(welcome) => return Ok(welcome),
                Err(_) if retries == MAX_HELLO_RETRIES => {
                    return Err(ClientError::Unexpected {
                        server,
                        what: format!(
                            "the server asked for a new address cookie {} times in a row",
                            retries + 1
                        ),
                    })
                }
                Err(fresh) => {
                    cookie = fresh;
                    retries += 1;
                }
            }
        }
    }

    fn hello(&mut self, token: Option<&str>) -> Result<(), ClientError> {
        let client_nonce =
            auth::random_bytes::<16>().map_err(|e| ClientError::io("getting random bytes", e))?;
        let server = self.server;
        let (nonce, auth_required, root, max_data, drc_span) = self.welcome(client_nonce)?;
        self.root = root;
        self.max_data = max_data as usize;
        // Keep every retransmission inside the server's duplicate cache.
        self.pipe.set_horizon(u64::from(drc_span / 2));
        if self.packet > self.max_data {
            return Err(ClientError::Option {
                what: "packet",
                value: self.packet.to_string(),
                accepted: format!(
                    "at most {} bytes: the server's limit over {}",
                    self.max_data, self.transport
                ),
            });
        }
        if auth_required {
            let Some(token) = token else {
                return Err(ClientError::TokenRequired { server });
            };
            let proof = auth::proof(token, &nonce, &client_nonce, self.pipe.session());
            self.call(&Request::Auth { proof }, false, |r| match r {
                Ok(_) => Ok(()),
                Err(error) => Err(remote(server, "authenticating".into(), error)),
            })?;
        }
        Ok(())
    }

    /// Send one request and turn its reply into a value.
    fn call<T>(
        &mut self,
        req: &Request<'_>,
        patient: bool,
        convert: impl FnMut(Result<Reply<'_>, RemoteError>) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut job = OneShot {
            req: Some(req),
            patient,
            convert,
            out: None,
        };
        self.pipe.run(&mut job)?;
        job.out.unwrap_or_else(|| {
            Err(ClientError::Unexpected {
                server: self.server,
                what: format!("no reply was recorded for a {} request", req.op()),
            })
        })
    }

    // -- settings and state --------------------------------------------------

    /// Stop `get` and `put` when `flag` is raised (osprobe's Ctrl-C flag).
    /// The transfer stops between requests (the replies still in flight are
    /// abandoned; the pipeline ignores them if they come), removes its
    /// partial file, the local one of a `get` or the remote one of a
    /// `put`, and fails with [`ClientError::Interrupted`].
    pub fn set_stop(&mut self, flag: &'static AtomicBool) {
        self.stop = Some(flag);
    }

    pub fn server(&self) -> SocketAddr {
        self.server
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn window(&self) -> usize {
        self.window
    }

    pub fn packet(&self) -> usize {
        self.packet
    }

    /// The largest packet the server accepts on this transport.
    pub fn max_packet(&self) -> usize {
        self.max_data
    }

    /// Change the number of requests in flight (1..=256).
    pub fn set_window(&mut self, window: usize) -> Result<(), ClientError> {
        if window == 0 || window > MAX_WINDOW {
            return Err(ClientError::Option {
                what: "window",
                value: window.to_string(),
                accepted: format!("1..={MAX_WINDOW}"),
            });
        }
        self.window = window;
        self.pipe.set_window(window);
        Ok(())
    }

    /// Change the bytes per read or write request.
    pub fn set_packet(&mut self, packet: usize) -> Result<(), ClientError> {
        check_packet(packet, self.transport)?;
        if packet > self.max_data {
            return Err(ClientError::Option {
                what: "packet",
                value: packet.to_string(),
                accepted: format!("1..={} bytes (the server's limit)", self.max_data),
            });
        }
        self.packet = packet;
        Ok(())
    }

    pub fn stats(&self) -> ClientStats {
        self.pipe.stats()
    }

    /// End the session on the server (it also ends when the client is
    /// dropped: a goodbye is sent without waiting for the answer).
    pub fn disconnect(mut self) -> Result<(), ClientError> {
        self.said_goodbye = true;
        let server = self.server;
        self.call(&Request::Goodbye, false, |r| match r {
            Ok(_) => Ok(()),
            Err(error) => Err(remote(server, "ending the session".into(), error)),
        })
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if !self.said_goodbye && self.pipe.is_udp() {
            self.pipe.send_once(&Request::Goodbye);
        }
    }
}

fn remote(server: SocketAddr, context: String, mut error: RemoteError) -> ClientError {
    if let Some(advice) = session_advice(error.code) {
        error.detail = format!("{} ({advice})", error.detail);
    }
    ClientError::Remote {
        server,
        context,
        error,
    }
}

/// What the client adds to a refusal whose code alone names the remedy.
/// The code decides, never the server's words: those may be cut (a reply
/// to an address the server does not know is cut to the request's size),
/// and an older server's say the same in other words. A server since this
/// change leaves the advice to the client; an older one's BADSESSION
/// detail ("...: it ended or the server restarted; connect again") gets it
/// a second time, which says nothing wrong (docs/rfs.md).
fn session_advice(code: ErrorCode) -> Option<&'static str> {
    match code {
        ErrorCode::BadSession => Some("the server restarted or ended the session: connect again"),
        _ => None,
    }
}

fn unexpected(server: SocketAddr, op: &str) -> ClientError {
    ClientError::Unexpected {
        server,
        what: format!("a reply of the wrong kind to a {op} request"),
    }
}

// -- jobs ----------------------------------------------------------------------

struct OneShot<'r, F, T> {
    req: Option<&'r Request<'r>>,
    patient: bool,
    convert: F,
    out: Option<Result<T, ClientError>>,
}

impl<F, T> Job for OneShot<'_, F, T>
where
    F: FnMut(Result<Reply<'_>, RemoteError>) -> Result<T, ClientError>,
{
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        let Some(req) = self.req.take() else {
            return Ok(None);
        };
        enc.request(req)?;
        if self.patient {
            enc.patient();
        }
        Ok(Some(0))
    }

    fn reply(
        &mut self,
        _tag: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        self.out = Some((self.convert)(result));
        Ok(())
    }
}

/// Whether `stop` was raised: as an error, so that the job ends between
/// requests (the caller fills in what became of the partial file).
fn check_stop(stop: Option<&AtomicBool>) -> Result<(), ClientError> {
    match stop {
        Some(flag) if flag.load(Ordering::Relaxed) => Err(ClientError::Interrupted {
            cleanup: String::new(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "127.0.0.1:9";

    fn shown(detail: &str) -> (ClientError, String) {
        let e = remote(
            SERVER.parse().unwrap(),
            "reading".into(),
            RemoteError::new(ErrorCode::BadSession, detail),
        );
        let text = e.to_string();
        (e, text)
    }

    #[test]
    fn only_badsession_brings_the_advice_to_connect_again() {
        for code in ErrorCode::ALL {
            assert_eq!(
                session_advice(code).is_some(),
                code == ErrorCode::BadSession,
                "{code}"
            );
        }
        let e = remote(
            SERVER.parse().unwrap(),
            "reading".into(),
            RemoteError::new(ErrorCode::Stale, "unknown file handle"),
        );
        assert!(!e.to_string().contains("connect again"), "{e}");
    }

    #[test]
    fn a_session_the_server_does_not_know_is_explained_whatever_its_words() {
        // This server's words, the same cut short (as to an address the
        // server does not know), and another refusal of the session.
        for detail in [
            "unknown session 0000000000003039",
            "unknown session",
            "",
            "session 0000000000003039 belongs to another client address or connection",
        ] {
            let (e, text) = shown(detail);
            assert_eq!(e.code(), Some(ErrorCode::BadSession), "{text}");
            assert_eq!(text.matches("restarted").count(), 1, "{text}");
            assert!(text.contains("connect again"), "{text}");
        }
    }

    #[test]
    fn an_older_servers_refusal_keeps_its_meaning() {
        // A server before the advice moved to the client says it itself:
        // the reply is still a BADSESSION that says to connect again.
        let (e, text) = shown(
            "unknown session 0000000000003039: it ended or the server restarted; connect again",
        );
        assert_eq!(e.code(), Some(ErrorCode::BadSession), "{text}");
        assert!(text.contains("restarted"), "{text}");
        assert!(text.ends_with("connect again)"), "{text}");
    }
}
