//! The client side of the control protocol: open a session on a peer's
//! `osprobe serve`, attach data streams, finish and collect the server's
//! report.

use crate::auth::{self, Purpose};
use crate::error::CongestionControlRefused;
use crate::hello_wait::{self, HelloWait};
use crate::protocol::{
    self, unhex, ErrorCode, FrameError, Message, StreamReport, TestSpec, PROTOCOL_VERSION,
};
use crate::sock::{self, ConnectOptions};
use osprobe_core::peer_text;
use std::io;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// What went wrong talking to a server, in words for the user.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("cannot connect to {addr}: {source}{hint}")]
    Unreachable {
        addr: SocketAddr,
        hint: &'static str,
        #[source]
        source: io::Error,
    },
    /// The server is full (or evicted this connection to make room): a
    /// later attempt may succeed.
    #[error("{addr}: server busy, try again ({message})")]
    Busy { addr: SocketAddr, message: String },
    #[error("{addr} refused the test ({code:?}): {message}")]
    Refused {
        addr: SocketAddr,
        code: ErrorCode,
        message: String,
    },
    #[error("{addr} while {context}: {source}")]
    Protocol {
        addr: SocketAddr,
        context: &'static str,
        #[source]
        source: FrameError,
    },
    #[error("{addr} while {context}: expected {expected}, got {got}")]
    Unexpected {
        addr: SocketAddr,
        context: &'static str,
        expected: &'static str,
        got: &'static str,
    },
    /// No hello within the reply timeout (or, while the server was still
    /// finishing the handshake, its give-up time); `seen` is the
    /// connection's TCP_INFO, when it could be read.
    #[error("{addr} while reading the server's hello: nothing came in {} s ({})", waited.as_secs(), seen.as_ref().map_or("no TCP_INFO".to_string(), |s| s.to_string()))]
    NoHello {
        addr: SocketAddr,
        waited: Duration,
        seen: Option<HelloWait>,
    },
    #[error("{addr} requires a token: pass --token-file PATH (or set OSPROBE_TOKEN)")]
    TokenRequired { addr: SocketAddr },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// The kernel refused the congestion control asked for the connection.
    #[error("cannot connect to {addr}: {refused}")]
    CongestionControl {
        addr: SocketAddr,
        #[source]
        refused: CongestionControlRefused,
    },
}

/// A network error as an experiment's: the cause kept as the source where
/// there is one, the words unchanged. A congestion control the kernel
/// refuses is the `cc` parameter's fault (`net.cc` skips it).
impl From<NetError> for osprobe_core::ExperimentError {
    fn from(e: NetError) -> Self {
        match e {
            NetError::Io { context, source } => {
                osprobe_core::ExperimentError::Io { context, source }
            }
            NetError::Protocol {
                addr,
                context,
                source,
            } => osprobe_core::ExperimentError::failed(format!("{addr} while {context}"), source),
            NetError::CongestionControl { .. } => {
                osprobe_core::ExperimentError::invalid_parameter("cc", e.to_string())
            }
            // The far end's answer (busy, refused, an unexpected message, a
            // token wanted) is the whole story; an unreachable one's hint
            // follows its cause in the words.
            NetError::Unreachable { .. }
            | NetError::Busy { .. }
            | NetError::Refused { .. }
            | NetError::Unexpected { .. }
            | NetError::NoHello { .. }
            | NetError::TokenRequired { .. } => {
                osprobe_core::ExperimentError::Failed(e.to_string())
            }
        }
    }
}

impl NetError {
    pub fn io(context: impl Into<String>, source: io::Error) -> NetError {
        NetError::Io {
            context: context.into(),
            source,
        }
    }
}

/// A server to run tests against.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    pub token: Option<String>,
    pub connect_timeout: Duration,
    /// How long to wait for any control message.
    pub reply_timeout: Duration,
}

impl Peer {
    pub fn new(addr: SocketAddr, token: Option<String>) -> Peer {
        Peer {
            addr,
            token,
            connect_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(10),
        }
    }

    /// The remote file service the server offers beside its tests
    /// (`osprobe serve --export DIR`): its address (the server's, with the
    /// port its hello announces), or None when it offers none. Asks the
    /// hello only: the file service proves the token itself.
    pub fn file_service(&self) -> Result<Option<SocketAddr>, NetError> {
        let (_, _, _, rfs_port) = self.hello(&ConnectOptions::default())?;
        Ok(rfs_port.map(|port| SocketAddr::new(self.addr.ip(), port)))
    }

    /// Connect and read the server's hello: (stream, nonce, auth required).
    fn greet(&self, options: &ConnectOptions) -> Result<(TcpStream, String, bool), NetError> {
        let (stream, nonce, auth_required, _) = self.hello(options)?;
        Ok((stream, nonce, auth_required))
    }

    /// Connect and read the server's hello: (stream, nonce, auth required,
    /// the file service's port).
    fn hello(
        &self,
        options: &ConnectOptions,
    ) -> Result<(TcpStream, String, bool, Option<u16>), NetError> {
        let mut stream =
            sock::connect(self.addr, options, self.connect_timeout).map_err(|source| {
                let source = match CongestionControlRefused::within(source) {
                    Ok(refused) => {
                        return NetError::CongestionControl {
                            addr: self.addr,
                            refused,
                        }
                    }
                    Err(other) => other,
                };
                let hint = match source.kind() {
                    io::ErrorKind::ConnectionRefused => " (is `osprobe serve` running there?)",
                    io::ErrorKind::TimedOut => " (host down, or a firewall drops the port?)",
                    _ => "",
                };
                NetError::Unreachable {
                    addr: self.addr,
                    hint,
                    source,
                }
            })?;
        stream
            .set_read_timeout(Some(self.reply_timeout))
            .map_err(|e| NetError::io("setting a read timeout", e))?;
        stream
            .set_write_timeout(Some(self.reply_timeout))
            .map_err(|e| NetError::io("setting a write timeout", e))?;
        match self.read_hello(&mut stream)? {
            Message::Hello {
                version,
                nonce,
                auth_required,
                rfs_port,
                ..
            } => {
                if version != PROTOCOL_VERSION {
                    return Err(NetError::Refused {
                        addr: self.addr,
                        code: ErrorCode::Version,
                        message: format!(
                            "server speaks protocol version {version}, this client {PROTOCOL_VERSION}: use the same osprobe version on both ends"
                        ),
                    });
                }
                if auth_required && self.token.is_none() {
                    return Err(NetError::TokenRequired { addr: self.addr });
                }
                Ok((stream, nonce, auth_required, rfs_port))
            }
            other => Err(self.unexpected("reading the server's hello", "hello", &other)),
        }
    }

    /// The first message, waited for past the reply timeout while the
    /// server is still resending its SYN-ACK (crate::hello_wait says why).
    fn read_hello(&self, stream: &mut TcpStream) -> Result<Message, NetError> {
        let started = Instant::now();
        // Each round waits one reply timeout; the wait ends at
        // SYNACK_GIVE_UP, or after this many rounds if the timeout is short.
        let rounds = hello_wait::SYNACK_GIVE_UP.as_secs() + 1;
        for _ in 0..rounds {
            match self.read(stream, "reading the server's hello") {
                Err(NetError::Protocol {
                    source: FrameError::TimedOut,
                    ..
                }) => {
                    let seen = crate::tcp_info::tcp_info(stream.as_raw_fd())
                        .ok()
                        .map(|info| HelloWait::from_info(&info));
                    let waited = started.elapsed();
                    if !hello_wait::keep_waiting(seen.as_ref(), waited) {
                        return Err(NetError::NoHello {
                            addr: self.addr,
                            waited,
                            seen,
                        });
                    }
                }
                other => return other,
            }
        }
        Err(NetError::NoHello {
            addr: self.addr,
            waited: started.elapsed(),
            seen: None,
        })
    }

    fn read(&self, stream: &mut TcpStream, context: &'static str) -> Result<Message, NetError> {
        match protocol::read_message(stream) {
            // The server's words reach a terminal: escaped and capped.
            Ok(Message::Error {
                code: ErrorCode::Busy,
                message,
            }) => Err(NetError::Busy {
                addr: self.addr,
                message: peer_text::escape(&message, peer_text::MAX_CHARS),
            }),
            Ok(Message::Error { code, message }) => Err(NetError::Refused {
                addr: self.addr,
                code,
                message: peer_text::escape(&message, peer_text::MAX_CHARS),
            }),
            Ok(msg) => Ok(msg),
            Err(source) => Err(NetError::Protocol {
                addr: self.addr,
                context,
                source,
            }),
        }
    }

    fn write(
        &self,
        stream: &mut TcpStream,
        msg: &Message,
        context: &'static str,
    ) -> Result<(), NetError> {
        protocol::write_message(stream, msg).map_err(|source| NetError::Protocol {
            addr: self.addr,
            context,
            source,
        })
    }

    fn unexpected(&self, context: &'static str, expected: &'static str, got: &Message) -> NetError {
        NetError::Unexpected {
            addr: self.addr,
            context,
            expected,
            got: got.kind(),
        }
    }

    fn proof(&self, auth_required: bool, nonce: &str, purpose: Purpose) -> Option<String> {
        match (&self.token, auth_required) {
            (Some(token), true) => Some(auth::proof(token, nonce, purpose)),
            _ => None,
        }
    }

    /// Open a session for `test`, expected to take `duration`.
    pub fn open(&self, test: TestSpec, duration: Duration) -> Result<Session, NetError> {
        let (mut control, nonce, auth_required) = self.greet(&ConnectOptions {
            nodelay: true,
            ..ConnectOptions::default()
        })?;
        let duration_s = duration.as_secs_f64().ceil().clamp(1.0, 86_400.0) as u32;
        let purpose = Purpose::Open {
            test: &test,
            duration_s,
        };
        let open = Message::Open {
            version: PROTOCOL_VERSION,
            proof: self.proof(auth_required, &nonce, purpose),
            duration_s,
            test: test.clone(),
        };
        self.write(&mut control, &open, "opening a session")?;
        match self.read(&mut control, "opening a session")? {
            Message::Opened { session } => Ok(Session {
                peer: self.clone(),
                control,
                id: session,
                test,
            }),
            other => Err(self.unexpected("opening a session", "opened", &other)),
        }
    }

    /// The server's machine and the interface this connection reached it
    /// on (see [`crate::describe`]).
    pub fn describe(
        &self,
    ) -> Result<
        (
            osprobe_core::Environment,
            Option<osprobe_core::nic::NicInfo>,
        ),
        NetError,
    > {
        const CONTEXT: &str = "asking the server to describe itself";
        let (mut stream, nonce, auth_required) = self.greet(&ConnectOptions {
            nodelay: true,
            ..ConnectOptions::default()
        })?;
        let describe = Message::Describe {
            version: PROTOCOL_VERSION,
            proof: self.proof(auth_required, &nonce, Purpose::Describe),
        };
        self.write(&mut stream, &describe, CONTEXT)?;
        // The first capture calibrates the server's clock: allow for it.
        let _ = stream.set_read_timeout(Some(self.reply_timeout * 2));
        let answer =
            match protocol::read_message_limited(&mut stream, protocol::MAX_DESCRIBED_FRAME) {
                Ok(Message::Error { code, message }) => Err(NetError::Refused {
                    addr: self.addr,
                    code,
                    message: peer_text::escape(&message, peer_text::MAX_CHARS),
                }),
                Ok(msg) => Ok(msg),
                Err(source) => Err(NetError::Protocol {
                    addr: self.addr,
                    context: CONTEXT,
                    source,
                }),
            }?;
        match answer {
            Message::Described { environment, nic } => Ok((*environment, nic.map(|n| *n))),
            other => Err(self.unexpected(CONTEXT, "described", &other)),
        }
    }
}

/// An open session: attach streams, then `finish`.
pub struct Session {
    peer: Peer,
    control: TcpStream,
    id: String,
    test: TestSpec,
}

impl Session {
    pub fn test(&self) -> &TestSpec {
        &self.test
    }

    /// The session id (hex) the server gave.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A new data connection joined to the session as stream `index`, with
    /// `options` applied before it connects.
    pub fn attach(&self, index: u32, options: &ConnectOptions) -> Result<TcpStream, NetError> {
        let (mut stream, nonce, auth_required) = self.peer.greet(options)?;
        let purpose = Purpose::Attach {
            session: &self.id,
            stream: index,
        };
        let attach = Message::Attach {
            session: self.id.clone(),
            stream: index,
            proof: self.peer.proof(auth_required, &nonce, purpose),
        };
        self.peer
            .write(&mut stream, &attach, "attaching a stream")?;
        match self.peer.read(&mut stream, "attaching a stream")? {
            Message::Attached {} => {
                // The test decides its own timeouts from here.
                let _ = stream.set_read_timeout(None);
                let _ = stream.set_write_timeout(None);
                Ok(stream)
            }
            other => Err(self
                .peer
                .unexpected("attaching a stream", "attached", &other)),
        }
    }

    /// A UDP socket connected to the server's echo port, and the session
    /// id bytes every datagram must start with.
    pub fn udp_echo(&self) -> Result<(UdpSocket, [u8; 16]), NetError> {
        let bind: SocketAddr = if self.peer.addr.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal address")
        } else {
            "[::]:0".parse().expect("literal address")
        };
        let socket = UdpSocket::bind(bind).map_err(|e| NetError::io("binding a UDP socket", e))?;
        socket
            .connect(self.peer.addr)
            .map_err(|e| NetError::io(format!("UDP connect to {}", self.peer.addr), e))?;
        let mut id = [0u8; 16];
        let bytes = unhex(&self.id).unwrap_or_default();
        id.copy_from_slice(&bytes[..16.min(bytes.len())]);
        Ok((socket, id))
    }

    /// Tell the server every stream is done; wait up to `wait` for its
    /// report of each stream.
    pub fn finish(
        mut self,
        hashes: Vec<Option<String>>,
        wait: Duration,
    ) -> Result<Vec<StreamReport>, NetError> {
        let peer = self.peer.clone();
        peer.write(&mut self.control, &Message::Finish { hashes }, "finishing")?;
        let _ = self
            .control
            .set_read_timeout(Some(wait.max(peer.reply_timeout)));
        match peer.read(&mut self.control, "waiting for the server's report")? {
            Message::Report { mut streams } => {
                // Stream errors are the server's words: they reach a terminal.
                for s in &mut streams {
                    if let Some(e) = &s.error {
                        s.error = Some(peer_text::escape(e, peer_text::MAX_CHARS));
                    }
                }
                Ok(streams)
            }
            other => Err(peer.unexpected("waiting for the server's report", "report", &other)),
        }
    }
}
