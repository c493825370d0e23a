//! The messages between the pager and its processes, over Unix
//! SOCK_SEQPACKET socket pairs (one message per packet, boundaries kept,
//! EOF when the other side is gone), and the one descriptor that travels
//! with a message (SCM_RIGHTS): a process's userfaultfd.
//!
//! Every message is one fixed-size record: a tag, three numbers and a
//! short text. The peer is our own child, but a record that does not
//! decode is still an error naming what arrived, never a panic.

use super::error::WireError;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const TEXT: usize = 240;
const TEXT_AT: usize = 1 + 24 + 2;
/// Bytes of one record on the wire.
pub const RECORD: usize = TEXT_AT + TEXT;

/// One message, either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Child: my region is at `base`, `len` bytes, registered with the
    /// userfaultfd that travels with this message (its handshake gave
    /// `features`).
    Hello { base: u64, len: u64, features: u64 },
    /// Pager: start the workload.
    Go,
    /// Child: set my heap to `pages` pages (brk).
    Brk { pages: u64 },
    /// Pager: the heap is now `pages` pages, or why not.
    BrkDone { pages: u64, refused: Option<String> },
    /// Child: the workload ran `accesses` accesses in `elapsed_ns`; its
    /// check comes next.
    Done { accesses: u64, elapsed_ns: u64 },
    /// Child: what the check found (`ok`), in words.
    Verdict { ok: bool, text: String },
    /// Pager, on the agent socket: unmap `page` (clear its referenced
    /// bit; [`NO_PAGE`]: nothing); answer with `Ack` if `ack`.
    Drop { page: u64, ack: bool },
    /// Child's agent: every drop before this one is done.
    Ack,
}

const HELLO: u8 = 1;
const GO: u8 = 2;
const BRK: u8 = 3;
const BRK_DONE: u8 = 4;
const DONE: u8 = 5;
const VERDICT: u8 = 6;
const DROP: u8 = 7;
const ACK: u8 = 8;

/// A page number that names no page: a drop that only asks for the ack.
pub const NO_PAGE: u64 = u64::MAX;

impl Message {
    pub fn encode(&self) -> [u8; RECORD] {
        let (tag, numbers, text): (u8, [u64; 3], &str) = match self {
            Message::Hello {
                base,
                len,
                features,
            } => (HELLO, [*base, *len, *features], ""),
            Message::Go => (GO, [0; 3], ""),
            Message::Brk { pages } => (BRK, [*pages, 0, 0], ""),
            Message::BrkDone { pages, refused } => (
                BRK_DONE,
                [*pages, u64::from(refused.is_some()), 0],
                refused.as_deref().unwrap_or(""),
            ),
            Message::Done {
                accesses,
                elapsed_ns,
            } => (DONE, [*accesses, *elapsed_ns, 0], ""),
            Message::Verdict { ok, text } => (VERDICT, [u64::from(*ok), 0, 0], text.as_str()),
            Message::Drop { page, ack } => (DROP, [*page, u64::from(*ack), 0], ""),
            Message::Ack => (ACK, [0; 3], ""),
        };
        let mut out = [0u8; RECORD];
        out[0] = tag;
        for (i, n) in numbers.iter().enumerate() {
            out[1 + 8 * i..9 + 8 * i].copy_from_slice(&n.to_le_bytes());
        }
        // Cut at a character boundary within the record.
        let mut end = text.len().min(TEXT);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        out[25..27].copy_from_slice(&(end as u16).to_le_bytes());
        out[TEXT_AT..TEXT_AT + end].copy_from_slice(&text.as_bytes()[..end]);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        if bytes.len() != RECORD {
            return Err(WireError::Length {
                got: bytes.len(),
                expected: RECORD,
            });
        }
        let n = |i: usize| u64::from_le_bytes(bytes[1 + 8 * i..9 + 8 * i].try_into().unwrap());
        let text_len = u16::from_le_bytes([bytes[25], bytes[26]]) as usize;
        if text_len > TEXT {
            return Err(WireError::TextTooLong {
                len: text_len,
                max: TEXT,
            });
        }
        let text = String::from_utf8_lossy(&bytes[TEXT_AT..TEXT_AT + text_len]).into_owned();
        Ok(match bytes[0] {
            HELLO => Message::Hello {
                base: n(0),
                len: n(1),
                features: n(2),
            },
            GO => Message::Go,
            BRK => Message::Brk { pages: n(0) },
            BRK_DONE => Message::BrkDone {
                pages: n(0),
                refused: (n(1) != 0).then_some(text),
            },
            DONE => Message::Done {
                accesses: n(0),
                elapsed_ns: n(1),
            },
            VERDICT => Message::Verdict {
                ok: n(0) != 0,
                text,
            },
            DROP => Message::Drop {
                page: n(0),
                ack: n(1) != 0,
            },
            ACK => Message::Ack,
            other => return Err(WireError::UnknownTag(other)),
        })
    }
}

/// A connected SOCK_SEQPACKET pair, close-on-exec.
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair fills two descriptors.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two new descriptors we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send one message, with `fd` attached when given. A peer that is gone
/// is EPIPE (never SIGPIPE).
pub fn send(socket: &OwnedFd, message: &Message, fd: Option<RawFd>) -> io::Result<()> {
    let record = message.encode();
    let mut iov = libc::iovec {
        iov_base: record.as_ptr() as *mut libc::c_void,
        iov_len: record.len(),
    };
    // Room for one descriptor, aligned as cmsghdr wants.
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; the fields set below point at
    // live locals.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        header.msg_control = control.as_mut_ptr().cast();
        header.msg_controllen = space as _;
        // SAFETY: the control buffer holds `space` bytes, so the first
        // header and its data fit.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&header);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: the header describes live buffers.
        let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &header, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// What a receive found.
pub enum Received {
    Message(Message, Option<OwnedFd>),
    /// The other side is gone.
    Closed,
    /// Nothing within the timeout.
    TimedOut,
}

/// Receive one message, waiting at most `timeout_ms` (-1: for ever).
pub fn receive(socket: &OwnedFd, timeout_ms: i32) -> io::Result<Received> {
    let mut pfd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if rc > 0 {
            break;
        }
        if rc == 0 {
            return Ok(Received::TimedOut);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
    let mut record = [0u8; RECORD + 1];
    let mut iov = libc::iovec {
        iov_base: record.as_mut_ptr().cast(),
        iov_len: record.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: as in `send`.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = loop {
        // SAFETY: the header describes live buffers.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut header, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECONNRESET) => return Ok(Received::Closed),
            _ => return Err(e),
        }
    };
    if n == 0 {
        return Ok(Received::Closed);
    }
    let mut fd = None;
    // SAFETY: walking the control messages the kernel wrote.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&header);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            cmsg = libc::CMSG_NXTHDR(&header, cmsg);
        }
    }
    let message =
        Message::decode(&record[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Received::Message(message, fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_survives_the_wire_and_a_descriptor_travels_with_one() {
        let (a, b) = socket_pair().unwrap();
        let messages = [
            Message::Hello {
                base: 0x7f00_0000_0000,
                len: 1 << 20,
                features: 0x4500,
            },
            Message::Go,
            Message::Brk { pages: 12 },
            Message::BrkDone {
                pages: 12,
                refused: Some("over the limit é".into()),
            },
            Message::BrkDone {
                pages: 3,
                refused: None,
            },
            Message::Done {
                accesses: 5,
                elapsed_ns: 6,
            },
            Message::Verdict {
                ok: false,
                text: "x".repeat(1000),
            },
            Message::Drop {
                page: NO_PAGE,
                ack: true,
            },
            Message::Ack,
        ];
        for m in &messages {
            send(&a, m, Some(a.as_raw_fd())).unwrap();
            let Received::Message(got, fd) = receive(&b, 1000).unwrap() else {
                panic!("nothing received");
            };
            assert!(fd.is_some());
            match (m, &got) {
                (Message::Verdict { .. }, Message::Verdict { text, .. }) => {
                    assert_eq!(text.len(), TEXT)
                }
                _ => assert_eq!(&got, m),
            }
        }
        drop(a);
        assert!(matches!(receive(&b, 1000).unwrap(), Received::Closed));
    }

    #[test]
    fn a_record_that_does_not_decode_is_an_error() {
        assert!(Message::decode(&[1, 2, 3]).is_err());
        let mut record = Message::Go.encode();
        record[0] = 99;
        assert!(Message::decode(&record)
            .unwrap_err()
            .to_string()
            .contains("unknown tag 99"));
        let mut record = Message::Go.encode();
        record[25] = 0xff;
        assert!(Message::decode(&record).is_err());
    }
}
