//! The rfs wire format: binary, versioned, every message one UDP datagram
//! or one length-prefixed TCP frame.
//!
//! Every message starts with a 24-byte header (all integers big-endian):
//!
//! ```text
//! 0      2      3        4          8             16            24
//! +------+------+--------+----------+-------------+-------------+---------
//! | "RF" | ver  | opcode | reserved | session u64 | request u64 | body ...
//! +------+------+--------+----------+-------------+-------------+---------
//! ```
//!
//! A request carries the operation code (1..=15); its reply carries the
//! same code with [`REPLY_BIT`] set, the same session and the same request
//! id (the "xid", as in ONC RPC). A reply body starts with a status byte: 0
//! and the operation's result, or an [`ErrorCode`] and a short UTF-8 detail
//! that names what was wrong and what would be accepted.
//!
//! Parsing is strict, because the server reads from anyone who can send it
//! a datagram: every length is checked against what is left of the buffer
//! (and against its own limit) before it is used, booleans are 0 or 1,
//! enumerations have no unknown values, reserved bytes are zero, names are
//! validated ([`validate_name`]), offsets stay below `i64::MAX`, and bytes
//! left over after the last field are an error. Nothing is allocated from
//! a length a peer sent, except directory entries, which are bounded by the
//! message size. A decoder never panics; the tests feed it random bytes,
//! every truncation of every kind of message, and a corpus of tricky
//! inputs.
//!
//! Sizes: data in one read or write is at most [`MAX_DATA`] (64 KiB) over
//! TCP, and [`MAX_UDP_DATA`] over UDP, since an IPv4 UDP datagram carries
//! at most 65,507 bytes and the header and fields need [`DATA_OVERHEAD`] of
//! them. No message is larger than [`MAX_MESSAGE`].

pub(crate) mod framing;

use std::fmt;

/// First two bytes of every message.
pub const MAGIC: [u8; 2] = *b"RF";
/// Bumped when a change breaks older peers. Version 2: hellos are padded
/// to [`HELLO_LEN`] and carry a cookie; a hello is answered `Retry` or
/// `Welcome`. The layout of the header and of error replies is the same in
/// every version, so a peer of another version gets an error it can read.
pub const VERSION: u8 = 2;
/// Size of every hello message: the padding leaves room for the server's
/// answer, which is never larger (so a forged source address cannot be
/// used to amplify traffic; see [`crate::cookie`]).
pub const HELLO_LEN: usize = 256;
/// Size of a source-address cookie.
pub const COOKIE_LEN: usize = 32;
/// First byte of a successful hello reply's body: which answer it is.
const HELLO_WELCOME: u8 = 0;
const HELLO_RETRY: u8 = 1;
/// Size of the fixed header.
pub const HEADER_LEN: usize = 24;
/// Largest data in one read or write (TCP).
pub const MAX_DATA: usize = 64 * 1024;
/// Largest UDP payload over IPv4 (65,535 minus the IP and UDP headers).
pub const MAX_UDP_DATAGRAM: usize = 65_507;
/// Room for everything around the data in a write request (52 bytes) or a
/// read reply (38 bytes), rounded up.
pub const DATA_OVERHEAD: usize = 64;
/// Largest data in one read or write over UDP.
pub const MAX_UDP_DATA: usize = MAX_UDP_DATAGRAM - DATA_OVERHEAD;
/// Largest message of any kind, header included.
pub const MAX_MESSAGE: usize = MAX_DATA + 1024;
/// Longest name of one directory entry (Linux NAME_MAX).
pub const MAX_NAME: usize = 255;
/// Longest error detail in a reply.
pub const MAX_DETAIL: usize = 200;
/// Most entries one readdir may ask for.
pub const MAX_READDIR_ENTRIES: u16 = 4096;
/// Size of a file handle on the wire.
pub const HANDLE_LEN: usize = 16;
/// Set in the opcode of every reply.
pub const REPLY_BIT: u8 = 0x80;
/// Permission bits a create may ask for (no setuid, setgid or sticky bit).
pub const MAX_CREATE_MODE: u32 = 0o777;
/// Largest file offset (and offset plus length) the protocol carries.
pub const MAX_OFFSET: u64 = i64::MAX as u64;

/// How messages travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// One message per datagram; the client retransmits.
    Udp,
    /// Each message behind a 4-byte big-endian length; reliable.
    Tcp,
}

impl Transport {
    /// Largest data in one read or write on this transport.
    pub fn max_data(self) -> usize {
        match self {
            Transport::Udp => MAX_UDP_DATA,
            Transport::Tcp => MAX_DATA,
        }
    }

    /// Largest message on this transport.
    pub fn max_message(self) -> usize {
        match self {
            Transport::Udp => MAX_UDP_DATAGRAM,
            Transport::Tcp => MAX_MESSAGE,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transport::Udp => "UDP",
            Transport::Tcp => "TCP",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Open a session; the reply carries a nonce, the root handle, limits.
    Hello = 1,
    /// Prove knowledge of the server's token (see [`crate::auth`]).
    Auth = 2,
    /// End the session and free its server state.
    Goodbye = 3,
    /// Find a name in a directory.
    Lookup = 4,
    /// Create (or truncate) a regular file.
    Create = 5,
    /// Read up to `count` bytes at an offset.
    Read = 6,
    /// Write bytes at an offset.
    Write = 7,
    /// Attributes of a handle.
    Getattr = 8,
    /// Directory entries after a cookie.
    Readdir = 9,
    /// Remove a file or an empty directory.
    Remove = 10,
    /// xxh3-128 of a whole file, for end-to-end checks.
    Hash = 11,
    /// Flush a file to stable storage (fsync).
    Commit = 12,
    /// Start an atomic upload of a name in a directory: the server creates
    /// a temporary file of its own beside it, held by the session, and
    /// answers with a handle for writing it (see [`crate::put`]).
    PutBegin = 13,
    /// Rename the upload's temporary file over its name (after the client
    /// compared hashes), flushed first.
    PutCommit = 14,
    /// Discard an upload: its temporary file is removed, the name untouched.
    PutAbort = 15,
}

impl Op {
    /// Every operation, in code order.
    pub const ALL: [Op; 15] = [
        Op::Hello,
        Op::Auth,
        Op::Goodbye,
        Op::Lookup,
        Op::Create,
        Op::Read,
        Op::Write,
        Op::Getattr,
        Op::Readdir,
        Op::Remove,
        Op::Hash,
        Op::Commit,
        Op::PutBegin,
        Op::PutCommit,
        Op::PutAbort,
    ];

    pub fn from_code(code: u8) -> Option<Op> {
        Op::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            Op::Hello => "hello",
            Op::Auth => "auth",
            Op::Goodbye => "goodbye",
            Op::Lookup => "lookup",
            Op::Create => "create",
            Op::Read => "read",
            Op::Write => "write",
            Op::Getattr => "getattr",
            Op::Readdir => "readdir",
            Op::Remove => "remove",
            Op::Hash => "hash",
            Op::Commit => "commit",
            Op::PutBegin => "put-begin",
            Op::PutCommit => "put-commit",
            Op::PutAbort => "put-abort",
        }
    }

    /// Whether a retransmission must be answered from the duplicate-request
    /// cache instead of being executed again: operations that change the
    /// file system (a second create with `Exclusive` would fail, a second
    /// remove would say NOENT, a late duplicate write could overwrite a
    /// newer one) and hashing, which is expensive.
    pub fn is_cached(self) -> bool {
        matches!(
            self,
            Op::Create
                | Op::Write
                | Op::Remove
                | Op::Hash
                | Op::PutBegin
                | Op::PutCommit
                | Op::PutAbort
        )
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
    /// Device, FIFO, socket: listed, never read or written.
    Other = 4,
}

impl Kind {
    fn from_code(code: u8) -> Option<Kind> {
        match code {
            1 => Some(Kind::File),
            2 => Some(Kind::Dir),
            3 => Some(Kind::Symlink),
            4 => Some(Kind::Other),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::File => "file",
            Kind::Dir => "directory",
            Kind::Symlink => "symbolic link",
            Kind::Other => "special file",
        }
    }
}

/// Why the server refused or failed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorCode {
    /// No such file or directory.
    NoEnt = 1,
    /// The name exists already.
    Exist = 2,
    /// Not permitted: permissions, a symbolic link, outside the export.
    Access = 3,
    /// The export is read-only.
    ReadOnly = 4,
    /// No space (or quota) left on the server's file system.
    NoSpace = 5,
    /// A request the server does not accept (the detail says why).
    Invalid = 6,
    /// The handle no longer names a file (removed, replaced, or the server
    /// restarted).
    Stale = 7,
    /// A size beyond a limit of the protocol or the transport.
    TooBig = 8,
    /// The server's file system failed.
    Io = 9,
    /// A directory was expected.
    NotDir = 10,
    /// A directory where a file was expected.
    IsDir = 11,
    /// A path too long for the server.
    NameTooLong = 12,
    /// The directory is not empty.
    NotEmpty = 13,
    /// Unknown session, or the session belongs to another address.
    BadSession = 14,
    /// A token is required, or the proof was wrong.
    Auth = 15,
    /// Too many clients, or the client's memory bound is reached.
    Busy = 16,
    /// Malformed message or unsupported version.
    Protocol = 17,
    /// An operation this server does not know.
    Unsupported = 18,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 18] = [
        ErrorCode::NoEnt,
        ErrorCode::Exist,
        ErrorCode::Access,
        ErrorCode::ReadOnly,
        ErrorCode::NoSpace,
        ErrorCode::Invalid,
        ErrorCode::Stale,
        ErrorCode::TooBig,
        ErrorCode::Io,
        ErrorCode::NotDir,
        ErrorCode::IsDir,
        ErrorCode::NameTooLong,
        ErrorCode::NotEmpty,
        ErrorCode::BadSession,
        ErrorCode::Auth,
        ErrorCode::Busy,
        ErrorCode::Protocol,
        ErrorCode::Unsupported,
    ];

    pub fn from_code(code: u8) -> Option<ErrorCode> {
        ErrorCode::ALL
            .get(usize::from(code).checked_sub(1)?)
            .copied()
    }

    /// The short upper-case name (as in NFS: NOENT, EXIST, ...).
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::NoEnt => "NOENT",
            ErrorCode::Exist => "EXIST",
            ErrorCode::Access => "ACCES",
            ErrorCode::ReadOnly => "ROFS",
            ErrorCode::NoSpace => "NOSPC",
            ErrorCode::Invalid => "INVAL",
            ErrorCode::Stale => "STALE",
            ErrorCode::TooBig => "TOOBIG",
            ErrorCode::Io => "IO",
            ErrorCode::NotDir => "NOTDIR",
            ErrorCode::IsDir => "ISDIR",
            ErrorCode::NameTooLong => "NAMETOOLONG",
            ErrorCode::NotEmpty => "NOTEMPTY",
            ErrorCode::BadSession => "BADSESSION",
            ErrorCode::Auth => "AUTH",
            ErrorCode::Busy => "BUSY",
            ErrorCode::Protocol => "PROTOCOL",
            ErrorCode::Unsupported => "UNSUPPORTED",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error reply: the code and a sentence for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    pub code: ErrorCode,
    /// At most [`MAX_DETAIL`] bytes (longer details are cut when encoded).
    pub detail: String,
}

impl RemoteError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> RemoteError {
        RemoteError {
            code,
            detail: detail.into(),
        }
    }
}

/// An operating-system error as a protocol error about `what`: the errno
/// decides the code a client acts on.
pub fn io_error(e: &std::io::Error, what: &str) -> RemoteError {
    let code = match e.raw_os_error() {
        Some(libc::ENOENT) => ErrorCode::NoEnt,
        Some(libc::EEXIST) => ErrorCode::Exist,
        Some(libc::EACCES | libc::EPERM) => ErrorCode::Access,
        Some(libc::EROFS) => ErrorCode::ReadOnly,
        Some(libc::ENOSPC | libc::EDQUOT) => ErrorCode::NoSpace,
        Some(libc::ENOTDIR) => ErrorCode::NotDir,
        Some(libc::EISDIR) => ErrorCode::IsDir,
        Some(libc::ENAMETOOLONG) => ErrorCode::NameTooLong,
        Some(libc::ENOTEMPTY) => ErrorCode::NotEmpty,
        Some(libc::ELOOP) => {
            return RemoteError::new(
                ErrorCode::Access,
                format!(
                    "{what}: a symbolic link is in the way (rfs does not follow symbolic links)"
                ),
            )
        }
        Some(libc::EXDEV) => {
            return RemoteError::new(
                ErrorCode::Access,
                format!("{what}: leads outside the export"),
            )
        }
        Some(libc::EFBIG) => ErrorCode::TooBig,
        Some(libc::EINVAL) => ErrorCode::Invalid,
        Some(libc::ESTALE) => ErrorCode::Stale,
        _ => ErrorCode::Io,
    };
    RemoteError::new(code, format!("{what}: {e}"))
}

impl fmt::Display for RemoteError {
    /// The detail came from the peer: escaped, so that a hostile server
    /// cannot put terminal escapes or forged lines on the client's screen.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.detail.is_empty() {
            write!(f, "{}", self.code)
        } else {
            let detail = osprobe_core::peer_text::escape(&self.detail, MAX_DETAIL);
            write!(f, "{}: {detail}", self.code)
        }
    }
}

/// An opaque file handle. The server maps it to a path inside its export;
/// the client only stores and returns it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle(pub [u8; HANDLE_LEN]);

impl Handle {
    /// A handle made of two numbers (the server's epoch and an index).
    pub(crate) fn from_parts(epoch: u64, index: u64) -> Handle {
        let mut b = [0u8; HANDLE_LEN];
        b[..8].copy_from_slice(&epoch.to_be_bytes());
        b[8..].copy_from_slice(&index.to_be_bytes());
        Handle(b)
    }

    pub(crate) fn parts(&self) -> (u64, u64) {
        let mut epoch = [0u8; 8];
        let mut index = [0u8; 8];
        epoch.copy_from_slice(&self.0[..8]);
        index.copy_from_slice(&self.0[8..]);
        (u64::from_be_bytes(epoch), u64::from_be_bytes(index))
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Handle(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Attributes of a file (what `stat` returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub kind: Kind,
    /// Permission bits (at most 0o7777).
    pub mode: u32,
    pub size: u64,
    /// Last modification, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Last access, nanoseconds since the Unix epoch.
    pub atime_ns: i64,
}

/// One directory entry of a readdir reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Where the next readdir continues after this entry.
    pub cookie: u64,
    pub kind: Kind,
    /// The name's bytes (Linux names need not be UTF-8).
    pub name: Vec<u8>,
}

impl DirEntry {
    /// The name for display: invalid UTF-8 replaced.
    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// What `Create` does when the name exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CreateHow {
    /// Fail with EXIST.
    Exclusive = 0,
    /// Truncate the existing regular file to zero bytes.
    Truncate = 1,
}

/// A request, borrowing names and data from the buffer it was decoded from
/// (or from the caller that encodes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Hello {
        /// The client's random nonce: a retransmitted hello with the same
        /// nonce gets the same session.
        nonce: [u8; 16],
        /// The cookie from the server's `Retry` (UDP), all zeros at first.
        cookie: [u8; COOKIE_LEN],
    },
    Auth {
        proof: [u8; 32],
    },
    Goodbye,
    Lookup {
        dir: Handle,
        name: &'a [u8],
    },
    Create {
        dir: Handle,
        name: &'a [u8],
        mode: u32,
        how: CreateHow,
    },
    Read {
        file: Handle,
        offset: u64,
        count: u32,
    },
    Write {
        file: Handle,
        offset: u64,
        data: &'a [u8],
    },
    Getattr {
        handle: Handle,
    },
    Readdir {
        dir: Handle,
        /// 0 starts at the beginning; otherwise a cookie from an entry.
        cookie: u64,
        max_entries: u16,
    },
    Remove {
        dir: Handle,
        name: &'a [u8],
    },
    Hash {
        file: Handle,
    },
    Commit {
        file: Handle,
    },
    PutBegin {
        dir: Handle,
        name: &'a [u8],
        mode: u32,
        /// The size the upload will have: the server refuses it beyond its
        /// file size bound and reserves the space before a byte is written.
        size: u64,
    },
    PutCommit {
        upload: Handle,
    },
    PutAbort {
        upload: Handle,
    },
}

impl Request<'_> {
    pub fn op(&self) -> Op {
        match self {
            Request::Hello { .. } => Op::Hello,
            Request::Auth { .. } => Op::Auth,
            Request::Goodbye => Op::Goodbye,
            Request::Lookup { .. } => Op::Lookup,
            Request::Create { .. } => Op::Create,
            Request::Read { .. } => Op::Read,
            Request::Write { .. } => Op::Write,
            Request::Getattr { .. } => Op::Getattr,
            Request::Readdir { .. } => Op::Readdir,
            Request::Remove { .. } => Op::Remove,
            Request::Hash { .. } => Op::Hash,
            Request::Commit { .. } => Op::Commit,
            Request::PutBegin { .. } => Op::PutBegin,
            Request::PutCommit { .. } => Op::PutCommit,
            Request::PutAbort { .. } => Op::PutAbort,
        }
    }
}

/// The result of a successful request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply<'a> {
    /// To `Hello`.
    Welcome {
        /// What an auth proof covers.
        nonce: [u8; 32],
        auth_required: bool,
        root: Handle,
        /// Largest data per read or write on this transport.
        max_data: u32,
        /// How many cached replies the server keeps for this session: a
        /// client keeps its request ids in flight within half of it.
        drc_span: u32,
    },
    /// To `Hello` from a source address not yet validated (UDP): send the
    /// hello again with this cookie.
    Retry { cookie: [u8; COOKIE_LEN] },
    /// To `Auth`, `Goodbye`, `Remove`, `Commit`, `PutCommit`, `PutAbort`.
    Done,
    /// To `Lookup`, `Create` and `PutBegin`.
    Handle { handle: Handle, attr: Attr },
    /// To `Read`.
    Data {
        /// The file's size when it was read.
        size: u64,
        /// The read reached the end of the file.
        eof: bool,
        data: &'a [u8],
    },
    /// To `Write`.
    Written { count: u32, size: u64 },
    /// To `Getattr`.
    Attr(Attr),
    /// To `Readdir`.
    Entries { eof: bool, entries: Vec<DirEntry> },
    /// To `Hash`: xxh3-128 of the file's bytes, big-endian.
    Hash { size: u64, hash: [u8; 16] },
}

impl Reply<'_> {
    /// Whether this reply is the right shape for `op`.
    pub fn answers(&self, op: Op) -> bool {
        matches!(
            (op, self),
            (Op::Hello, Reply::Welcome { .. } | Reply::Retry { .. })
                | (
                    Op::Auth | Op::Goodbye | Op::Remove | Op::Commit | Op::PutCommit | Op::PutAbort,
                    Reply::Done
                )
                | (Op::Lookup | Op::Create | Op::PutBegin, Reply::Handle { .. })
                | (Op::Read, Reply::Data { .. })
                | (Op::Write, Reply::Written { .. })
                | (Op::Getattr, Reply::Attr(_))
                | (Op::Readdir, Reply::Entries { .. })
                | (Op::Hash, Reply::Hash { .. })
        )
    }
}

/// The fixed header of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    /// Raw operation code, [`REPLY_BIT`] included.
    pub opcode: u8,
    pub session: u64,
    pub xid: u64,
}

/// A name that is not one safe path component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("name \"{name}\" is not accepted: {why} (a name is one path component of 1..=255 bytes, without '/' or NUL, and not '.' or '..')")]
pub struct NameError {
    /// The name, printable and cut to 64 characters.
    pub name: String,
    pub why: &'static str,
}

/// Check that `name` is one path component that cannot leave its
/// directory: not empty, not `.` or `..`, no `/`, no NUL, at most
/// [`MAX_NAME`] bytes.
pub fn validate_name(name: &[u8]) -> Result<(), NameError> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_NAME {
        "it is longer than 255 bytes"
    } else if name == b"." || name == b".." {
        "it refers to a directory itself or its parent"
    } else if name.contains(&b'/') {
        "it contains '/'"
    } else if name.contains(&0) {
        "it contains a NUL byte"
    } else {
        return Ok(());
    };
    Err(NameError {
        name: printable(name, 64),
        why,
    })
}

/// `bytes` as text for a message: invalid UTF-8 and control characters
/// escaped, cut to `max` characters.
pub fn printable(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A message that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("message of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short { len: usize },
    #[error("message of {len} bytes exceeds the limit of {MAX_MESSAGE} bytes")]
    TooLarge { len: usize },
    #[error("not an rfs message: it starts with {got:02x?}, expected \"RF\"")]
    BadMagic { got: [u8; 2] },
    #[error("protocol version {got} is not supported (this side speaks version {VERSION})")]
    Version { got: u8 },
    #[error("reserved header bytes must be zero, got {got:#010x}")]
    Reserved { got: u32 },
    #[error(
        "unknown operation code {got:#04x} (requests use 1..=15, replies the same with 0x80 set)"
    )]
    UnknownOp { got: u8 },
    #[error("expected a {expected}, got operation code {got:#04x}")]
    WrongDirection { expected: &'static str, got: u8 },
    #[error("{what} is truncated: it needs {need} bytes, {have} are left")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    FieldTooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} {value} is not accepted (accepted: {accepted})")]
    BadValue {
        what: &'static str,
        value: u64,
        accepted: &'static str,
    },
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("{extra} unexpected bytes after the {what}")]
    Trailing { what: &'static str, extra: usize },
    #[error("the error detail is not UTF-8")]
    BadText,
    #[error("a {op} request cannot be answered by a {got} reply")]
    Mismatch { op: Op, got: &'static str },
}

/// A message that cannot be encoded (a caller's mistake, caught before
/// anything is sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{what} {value} is not accepted (accepted: {accepted})")]
    BadValue {
        what: &'static str,
        value: u64,
        accepted: &'static str,
    },
    #[error("a {op} request cannot be answered by this reply")]
    Mismatch { op: Op },
}

// ---------------------------------------------------------------------------
// Encoding

fn put_header(out: &mut Vec<u8>, opcode: u8, session: u64, xid: u64) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(opcode);
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&session.to_be_bytes());
    out.extend_from_slice(&xid.to_be_bytes());
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// A create mode: permission bits only (no setuid, setgid or sticky).
fn put_create_mode(out: &mut Vec<u8>, mode: u32) -> Result<(), EncodeError> {
    if mode > MAX_CREATE_MODE {
        return Err(EncodeError::BadValue {
            what: "create mode",
            value: u64::from(mode),
            accepted: "permission bits 0..=0o777",
        });
    }
    put_u32(out, mode);
    Ok(())
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_name(out: &mut Vec<u8>, name: &[u8]) -> Result<(), EncodeError> {
    validate_name(name)?;
    out.push(name.len() as u8); // validate_name bounds it by 255
    out.extend_from_slice(name);
    Ok(())
}

fn put_data(out: &mut Vec<u8>, what: &'static str, data: &[u8]) -> Result<(), EncodeError> {
    if data.len() > MAX_DATA {
        return Err(EncodeError::TooLarge {
            what,
            len: data.len(),
            max: MAX_DATA,
        });
    }
    put_u32(out, data.len() as u32);
    out.extend_from_slice(data);
    Ok(())
}

fn check_span(offset: u64, len: u64) -> Result<(), EncodeError> {
    if offset.checked_add(len).is_none_or(|end| end > MAX_OFFSET) {
        return Err(EncodeError::BadValue {
            what: "offset",
            value: offset,
            accepted: "offset plus length at most 2^63-1",
        });
    }
    Ok(())
}

fn put_attr(out: &mut Vec<u8>, attr: &Attr) -> Result<(), EncodeError> {
    if attr.mode > 0o7777 {
        return Err(EncodeError::BadValue {
            what: "mode",
            value: u64::from(attr.mode),
            accepted: "permission bits 0..=0o7777",
        });
    }
    out.push(attr.kind as u8);
    put_u32(out, attr.mode);
    put_u64(out, attr.size);
    out.extend_from_slice(&attr.mtime_ns.to_be_bytes());
    out.extend_from_slice(&attr.atime_ns.to_be_bytes());
    Ok(())
}

fn check_message_size(out: &[u8], start: usize) -> Result<(), EncodeError> {
    let len = out.len() - start;
    if len > MAX_MESSAGE {
        return Err(EncodeError::TooLarge {
            what: "message",
            len,
            max: MAX_MESSAGE,
        });
    }
    Ok(())
}

/// Append `req` as one message to `out`. On error, `out` is left as it was.
pub fn encode_request(
    session: u64,
    xid: u64,
    req: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    let result = encode_request_inner(session, xid, req, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn encode_request_inner(
    session: u64,
    xid: u64,
    req: &Request<'_>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    put_header(out, req.op().code(), session, xid);
    match req {
        Request::Hello { nonce, cookie } => {
            out.extend_from_slice(nonce);
            out.extend_from_slice(cookie);
            out.resize(start + HELLO_LEN, 0);
        }
        Request::Auth { proof } => out.extend_from_slice(proof),
        Request::Goodbye => {}
        Request::Lookup { dir, name } | Request::Remove { dir, name } => {
            out.extend_from_slice(&dir.0);
            put_name(out, name)?;
        }
        Request::PutBegin {
            dir,
            name,
            mode,
            size,
        } => {
            out.extend_from_slice(&dir.0);
            put_name(out, name)?;
            put_create_mode(out, *mode)?;
            put_u64(out, *size);
        }
        Request::PutCommit { upload: h } | Request::PutAbort { upload: h } => {
            out.extend_from_slice(&h.0)
        }
        Request::Create {
            dir,
            name,
            mode,
            how,
        } => {
            out.extend_from_slice(&dir.0);
            put_name(out, name)?;
            put_create_mode(out, *mode)?;
            out.push(*how as u8);
        }
        Request::Read {
            file,
            offset,
            count,
        } => put_read(out, file, *offset, *count)?,
        Request::Write { file, offset, data } => {
            check_span(*offset, data.len() as u64)?;
            out.extend_from_slice(&file.0);
            put_u64(out, *offset);
            put_data(out, "write data", data)?;
        }
        Request::Getattr { handle: h }
        | Request::Hash { file: h }
        | Request::Commit { file: h } => out.extend_from_slice(&h.0),
        Request::Readdir {
            dir,
            cookie,
            max_entries,
        } => put_readdir(out, dir, *cookie, *max_entries)?,
    }
    check_message_size(out, start)
}

/// A read request's body, its count and span checked.
fn put_read(out: &mut Vec<u8>, file: &Handle, offset: u64, count: u32) -> Result<(), EncodeError> {
    if count == 0 || count as usize > MAX_DATA {
        return Err(EncodeError::BadValue {
            what: "read count",
            value: u64::from(count),
            accepted: "1..=65536",
        });
    }
    check_span(offset, u64::from(count))?;
    out.extend_from_slice(&file.0);
    put_u64(out, offset);
    put_u32(out, count);
    Ok(())
}

/// A readdir request's body, its cookie and entry count checked.
fn put_readdir(
    out: &mut Vec<u8>,
    dir: &Handle,
    cookie: u64,
    max_entries: u16,
) -> Result<(), EncodeError> {
    if cookie > MAX_OFFSET {
        return Err(EncodeError::BadValue {
            what: "readdir cookie",
            value: cookie,
            accepted: "0..=2^63-1",
        });
    }
    if max_entries == 0 || max_entries > MAX_READDIR_ENTRIES {
        return Err(EncodeError::BadValue {
            what: "readdir max_entries",
            value: u64::from(max_entries),
            accepted: "1..=4096",
        });
    }
    out.extend_from_slice(&dir.0);
    put_u64(out, cookie);
    put_u16(out, max_entries);
    Ok(())
}

/// Append the reply to request `(session, xid, op)` to `out`. An error
/// detail longer than [`MAX_DETAIL`] bytes is cut at a character boundary.
/// On error, `out` is left as it was.
pub fn encode_reply(
    session: u64,
    xid: u64,
    op: Op,
    result: &Result<Reply<'_>, RemoteError>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let start = out.len();
    let outcome = encode_reply_inner(session, xid, op, result, out);
    if outcome.is_err() {
        out.truncate(start);
    }
    outcome
}

fn encode_reply_inner(
    session: u64,
    xid: u64,
    op: Op,
    result: &Result<Reply<'_>, RemoteError>,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let reply = match result {
        Err(e) => {
            encode_error_reply(session, xid, op.code(), e, out);
            return Ok(());
        }
        Ok(reply) => reply,
    };
    let start = out.len();
    put_header(out, op.code() | REPLY_BIT, session, xid);
    if !reply.answers(op) {
        return Err(EncodeError::Mismatch { op });
    }
    out.push(0);
    match reply {
        Reply::Welcome {
            nonce,
            auth_required,
            root,
            max_data,
            drc_span,
        } => put_welcome(out, nonce, *auth_required, root, *max_data, *drc_span)?,
        Reply::Retry { cookie } => {
            out.push(HELLO_RETRY);
            out.extend_from_slice(cookie);
        }
        Reply::Done => {}
        Reply::Handle { handle, attr } => {
            out.extend_from_slice(&handle.0);
            put_attr(out, attr)?;
        }
        Reply::Data { size, eof, data } => {
            put_u64(out, *size);
            out.push(u8::from(*eof));
            put_data(out, "read data", data)?;
        }
        Reply::Written { count, size } => {
            put_u32(out, *count);
            put_u64(out, *size);
        }
        Reply::Attr(attr) => put_attr(out, attr)?,
        Reply::Entries { eof, entries } => put_entries(out, *eof, entries)?,
        Reply::Hash { size, hash } => {
            put_u64(out, *size);
            out.extend_from_slice(hash);
        }
    }
    check_message_size(out, start)
}

/// A welcome's body, its largest data checked.
fn put_welcome(
    out: &mut Vec<u8>,
    nonce: &[u8; 32],
    auth_required: bool,
    root: &Handle,
    max_data: u32,
    drc_span: u32,
) -> Result<(), EncodeError> {
    if max_data == 0 || max_data as usize > MAX_DATA {
        return Err(EncodeError::BadValue {
            what: "max_data",
            value: u64::from(max_data),
            accepted: "1..=65536",
        });
    }
    out.push(HELLO_WELCOME);
    out.extend_from_slice(nonce);
    out.push(u8::from(auth_required));
    out.extend_from_slice(&root.0);
    put_u32(out, max_data);
    put_u32(out, drc_span);
    Ok(())
}

/// A directory's entries, no more than a reply may carry.
fn put_entries(out: &mut Vec<u8>, eof: bool, entries: &[DirEntry]) -> Result<(), EncodeError> {
    if entries.len() > usize::from(MAX_READDIR_ENTRIES) {
        return Err(EncodeError::TooLarge {
            what: "directory entries",
            len: entries.len(),
            max: usize::from(MAX_READDIR_ENTRIES),
        });
    }
    out.push(u8::from(eof));
    put_u16(out, entries.len() as u16);
    for e in entries {
        put_u64(out, e.cookie);
        out.push(e.kind as u8);
        put_name(out, &e.name)?;
    }
    Ok(())
}

/// Append an error reply to a request whose operation code is `opcode`
/// as received, which may be one this side does not know (the reply then
/// says UNSUPPORTED under that code).
pub fn encode_error_reply(
    session: u64,
    xid: u64,
    opcode: u8,
    err: &RemoteError,
    out: &mut Vec<u8>,
) {
    encode_error_reply_as(VERSION, session, xid, opcode, err, out)
}

/// [`encode_error_reply`] under another protocol version's header, for a
/// peer of that version (the error layout is the same in every version).
pub fn encode_error_reply_as(
    version: u8,
    session: u64,
    xid: u64,
    opcode: u8,
    err: &RemoteError,
    out: &mut Vec<u8>,
) {
    put_header(out, (opcode & !REPLY_BIT) | REPLY_BIT, session, xid);
    let at = out.len() - HEADER_LEN + 2;
    out[at] = version;
    out.push(err.code as u8);
    let detail = cut_at_char(&err.detail, MAX_DETAIL);
    put_u16(out, detail.len() as u16);
    out.extend_from_slice(detail.as_bytes());
}

/// The offsets of a read reply whose data is filled in place, so a server
/// can `pread` straight into its send buffer: [`begin_read_reply`] writes
/// everything up to the data, the caller appends the data, and
/// [`finish_read_reply`] patches size, eof and length.
#[derive(Debug, Clone, Copy)]
pub struct ReadReplySlot {
    start: usize,
    size_at: usize,
    data_at: usize,
}

impl ReadReplySlot {
    /// Where the data begins in the buffer.
    pub fn data_start(&self) -> usize {
        self.data_at
    }
}

/// Start a successful read reply in `out`; see [`ReadReplySlot`].
pub fn begin_read_reply(session: u64, xid: u64, out: &mut Vec<u8>) -> ReadReplySlot {
    let start = out.len();
    put_header(out, Op::Read.code() | REPLY_BIT, session, xid);
    out.push(0);
    let size_at = out.len();
    put_u64(out, 0);
    out.push(0);
    put_u32(out, 0);
    ReadReplySlot {
        start,
        size_at,
        data_at: out.len(),
    }
}

/// Complete a read reply: the data is `out[slot.data_start()..]`.
pub fn finish_read_reply(
    slot: ReadReplySlot,
    size: u64,
    eof: bool,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    let len = out.len().saturating_sub(slot.data_at);
    if len > MAX_DATA {
        out.truncate(slot.start);
        return Err(EncodeError::TooLarge {
            what: "read data",
            len,
            max: MAX_DATA,
        });
    }
    patch_read_reply(slot, size, eof, len, out);
    Ok(())
}

/// Complete a read reply whose `len` bytes of data the caller sends right
/// after it, straight from the file (a TCP server's sendfile): `out` ends
/// where the data would begin.
pub fn finish_read_reply_header(
    slot: ReadReplySlot,
    size: u64,
    eof: bool,
    len: usize,
    out: &mut Vec<u8>,
) -> Result<(), EncodeError> {
    if len > MAX_DATA || out.len() != slot.data_at {
        out.truncate(slot.start);
        return Err(EncodeError::TooLarge {
            what: "read data",
            len,
            max: MAX_DATA,
        });
    }
    patch_read_reply(slot, size, eof, len, out);
    Ok(())
}

fn patch_read_reply(slot: ReadReplySlot, size: u64, eof: bool, len: usize, out: &mut [u8]) {
    out[slot.size_at..slot.size_at + 8].copy_from_slice(&size.to_be_bytes());
    out[slot.size_at + 8] = u8::from(eof);
    out[slot.size_at + 9..slot.size_at + 13].copy_from_slice(&(len as u32).to_be_bytes());
}

fn cut_at_char(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

// ---------------------------------------------------------------------------
// Decoding

/// A cursor over a received message; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let have = self.left();
        if n > have {
            return Err(DecodeError::Truncated {
                what,
                need: n,
                have,
            });
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::BadValue {
                what,
                value: u64::from(v),
                accepted: "0 or 1",
            }),
        }
    }

    fn handle(&mut self, what: &'static str) -> Result<Handle, DecodeError> {
        Ok(Handle(self.array(what)?))
    }

    fn name(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = usize::from(self.u8("name length")?);
        let name = self.take(len, "name")?;
        validate_name(name)?;
        Ok(name)
    }

    /// A u32 length, checked against `max` before the bytes are taken.
    fn data(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(DecodeError::FieldTooLarge { what, len, max });
        }
        self.take(len, what)
    }

    fn offset(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let v = self.u64(what)?;
        if v > MAX_OFFSET {
            return Err(DecodeError::BadValue {
                what,
                value: v,
                accepted: "0..=2^63-1",
            });
        }
        Ok(v)
    }

    fn attr(&mut self) -> Result<Attr, DecodeError> {
        let kind = self.kind()?;
        let mode = self.u32("mode")?;
        if mode > 0o7777 {
            return Err(DecodeError::BadValue {
                what: "mode",
                value: u64::from(mode),
                accepted: "permission bits 0..=0o7777",
            });
        }
        Ok(Attr {
            kind,
            mode,
            size: self.u64("size")?,
            mtime_ns: self.i64("mtime")?,
            atime_ns: self.i64("atime")?,
        })
    }

    fn kind(&mut self) -> Result<Kind, DecodeError> {
        let k = self.u8("kind")?;
        Kind::from_code(k).ok_or(DecodeError::BadValue {
            what: "kind",
            value: u64::from(k),
            accepted: "1 (file), 2 (directory), 3 (symbolic link), 4 (other)",
        })
    }

    fn finish(&self, what: &'static str) -> Result<(), DecodeError> {
        match self.left() {
            0 => Ok(()),
            extra => Err(DecodeError::Trailing { what, extra }),
        }
    }
}

fn check_end(offset: u64, len: usize) -> Result<(), DecodeError> {
    if offset.saturating_add(len as u64) > MAX_OFFSET {
        return Err(DecodeError::BadValue {
            what: "offset",
            value: offset,
            accepted: "offset plus length at most 2^63-1",
        });
    }
    Ok(())
}

/// Split a message into its header and body. Checks the size, the magic
/// and the reserved bytes, not the version (so that a server can answer a
/// peer of another version with an error it understands) nor the opcode.
pub fn decode_header(msg: &[u8]) -> Result<(Header, &[u8]), DecodeError> {
    if msg.len() > MAX_MESSAGE {
        return Err(DecodeError::TooLarge { len: msg.len() });
    }
    if msg.len() < HEADER_LEN {
        return Err(DecodeError::Short { len: msg.len() });
    }
    let mut r = Reader::new(msg);
    let magic = r.array::<2>("magic")?;
    if magic != MAGIC {
        return Err(DecodeError::BadMagic { got: magic });
    }
    let version = r.u8("version")?;
    let opcode = r.u8("opcode")?;
    let reserved = r.u32("reserved")?;
    if reserved != 0 {
        return Err(DecodeError::Reserved { got: reserved });
    }
    let session = r.u64("session")?;
    let xid = r.u64("request id")?;
    Ok((
        Header {
            version,
            opcode,
            session,
            xid,
        },
        &msg[HEADER_LEN..],
    ))
}

/// The request operation named by a header, refusing replies, unknown
/// codes and other versions.
pub fn request_op(header: &Header) -> Result<Op, DecodeError> {
    if header.version != VERSION {
        return Err(DecodeError::Version {
            got: header.version,
        });
    }
    if header.opcode & REPLY_BIT != 0 {
        return Err(DecodeError::WrongDirection {
            expected: "request",
            got: header.opcode,
        });
    }
    Op::from_code(header.opcode).ok_or(DecodeError::UnknownOp { got: header.opcode })
}

/// Decode the body of a request for `op`.
pub fn decode_request_body(op: Op, body: &[u8]) -> Result<Request<'_>, DecodeError> {
    let mut r = Reader::new(body);
    let req = match op {
        Op::Hello => hello_body(&mut r)?,
        Op::Auth => Request::Auth {
            proof: r.array("auth proof")?,
        },
        Op::Goodbye => Request::Goodbye,
        Op::Lookup => Request::Lookup {
            dir: r.handle("directory handle")?,
            name: r.name()?,
        },
        Op::Remove => Request::Remove {
            dir: r.handle("directory handle")?,
            name: r.name()?,
        },
        Op::PutBegin => Request::PutBegin {
            dir: r.handle("directory handle")?,
            name: r.name()?,
            mode: create_mode(&mut r)?,
            size: r.offset("upload size")?,
        },
        Op::PutCommit => Request::PutCommit {
            upload: r.handle("upload handle")?,
        },
        Op::PutAbort => Request::PutAbort {
            upload: r.handle("upload handle")?,
        },
        Op::Create => create_body(&mut r)?,
        Op::Read => read_body(&mut r)?,
        Op::Write => {
            let file = r.handle("file handle")?;
            let offset = r.offset("write offset")?;
            let data = r.data("write data", MAX_DATA)?;
            check_end(offset, data.len())?;
            Request::Write { file, offset, data }
        }
        Op::Getattr => Request::Getattr {
            handle: r.handle("handle")?,
        },
        Op::Hash => Request::Hash {
            file: r.handle("file handle")?,
        },
        Op::Commit => Request::Commit {
            file: r.handle("file handle")?,
        },
        Op::Readdir => readdir_body(&mut r)?,
    };
    r.finish("request")?;
    Ok(req)
}

/// A hello's nonce and cookie, then zeros up to its fixed length.
fn hello_body<'a>(r: &mut Reader<'a>) -> Result<Request<'a>, DecodeError> {
    let nonce = r.array("hello nonce")?;
    let cookie = r.array("hello cookie")?;
    let padding = r.take(r.left(), "hello padding")?;
    let want = HELLO_LEN - HEADER_LEN - 16 - COOKIE_LEN;
    if padding.len() != want || padding.iter().any(|&b| b != 0) {
        return Err(DecodeError::BadValue {
            what: "hello padding",
            value: padding.len() as u64,
            accepted: "zeros up to a hello of 256 bytes",
        });
    }
    Ok(Request::Hello { nonce, cookie })
}

/// A new file's permission bits.
fn create_mode(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let mode = r.u32("create mode")?;
    if mode > MAX_CREATE_MODE {
        return Err(DecodeError::BadValue {
            what: "create mode",
            value: u64::from(mode),
            accepted: "permission bits 0..=0o777",
        });
    }
    Ok(mode)
}

fn create_body<'a>(r: &mut Reader<'a>) -> Result<Request<'a>, DecodeError> {
    let dir = r.handle("directory handle")?;
    let name = r.name()?;
    let mode = create_mode(r)?;
    let how = match r.u8("create how")? {
        0 => CreateHow::Exclusive,
        1 => CreateHow::Truncate,
        v => {
            return Err(DecodeError::BadValue {
                what: "create how",
                value: u64::from(v),
                accepted: "0 (exclusive) or 1 (truncate)",
            })
        }
    };
    Ok(Request::Create {
        dir,
        name,
        mode,
        how,
    })
}

fn read_body<'a>(r: &mut Reader<'a>) -> Result<Request<'a>, DecodeError> {
    let file = r.handle("file handle")?;
    let offset = r.offset("read offset")?;
    let count = r.u32("read count")?;
    if count == 0 || count as usize > MAX_DATA {
        return Err(DecodeError::BadValue {
            what: "read count",
            value: u64::from(count),
            accepted: "1..=65536",
        });
    }
    check_end(offset, count as usize)?;
    Ok(Request::Read {
        file,
        offset,
        count,
    })
}

fn readdir_body<'a>(r: &mut Reader<'a>) -> Result<Request<'a>, DecodeError> {
    let dir = r.handle("directory handle")?;
    let cookie = r.offset("readdir cookie")?;
    let max_entries = r.u16("readdir max_entries")?;
    if max_entries == 0 || max_entries > MAX_READDIR_ENTRIES {
        return Err(DecodeError::BadValue {
            what: "readdir max_entries",
            value: u64::from(max_entries),
            accepted: "1..=4096",
        });
    }
    Ok(Request::Readdir {
        dir,
        cookie,
        max_entries,
    })
}

/// Decode a whole request message.
pub fn decode_request(msg: &[u8]) -> Result<(Header, Request<'_>), DecodeError> {
    let (header, body) = decode_header(msg)?;
    let op = request_op(&header)?;
    Ok((header, decode_request_body(op, body)?))
}

/// Bytes of a successful read reply before its data: the header, the
/// status, the file's size, the end-of-file flag and the data's length.
pub const READ_REPLY_HEAD: usize = HEADER_LEN + 14;

/// The head of a successful read reply, which a client receiving the data
/// in place reads before it: `len` bytes of data follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadHead {
    pub header: Header,
    pub size: u64,
    pub eof: bool,
    pub len: usize,
}

/// The head of a successful read reply of this version, or None for
/// anything else (an error reply, another operation or version, a bad
/// field): such a message is left to [`decode_reply`], which says what it
/// is.
pub fn decode_read_head(head: &[u8; READ_REPLY_HEAD]) -> Option<ReadHead> {
    let (header, body) = decode_header(head).ok()?;
    if header.version != VERSION || header.opcode != Op::Read.code() | REPLY_BIT {
        return None;
    }
    let mut r = Reader::new(body);
    if r.u8("status").ok()? != 0 {
        return None;
    }
    let size = r.u64("size").ok()?;
    let eof = r.bool("eof").ok()?;
    let len = r.u32("read data length").ok()? as usize;
    (len <= MAX_DATA).then_some(ReadHead {
        header,
        size,
        eof,
        len,
    })
}

/// Decode a whole reply message: the header, the operation it answers and
/// its result.
#[allow(clippy::type_complexity)]
pub fn decode_reply(
    msg: &[u8],
) -> Result<(Header, Op, Result<Reply<'_>, RemoteError>), DecodeError> {
    let (header, body) = decode_header(msg)?;
    if header.version != VERSION {
        return Err(DecodeError::Version {
            got: header.version,
        });
    }
    if header.opcode & REPLY_BIT == 0 {
        return Err(DecodeError::WrongDirection {
            expected: "reply",
            got: header.opcode,
        });
    }
    let op = Op::from_code(header.opcode & !REPLY_BIT)
        .ok_or(DecodeError::UnknownOp { got: header.opcode })?;
    let mut r = Reader::new(body);
    let status = r.u8("status")?;
    if status != 0 {
        return Ok((header, op, Err(error_reply(&mut r, status)?)));
    }
    let reply = match op {
        Op::Hello => hello_reply(&mut r)?,
        Op::Auth | Op::Goodbye | Op::Remove | Op::Commit | Op::PutCommit | Op::PutAbort => {
            Reply::Done
        }
        Op::Lookup | Op::Create | Op::PutBegin => Reply::Handle {
            handle: r.handle("handle")?,
            attr: r.attr()?,
        },
        Op::Read => Reply::Data {
            size: r.u64("size")?,
            eof: r.bool("eof")?,
            data: r.data("read data", MAX_DATA)?,
        },
        Op::Write => Reply::Written {
            count: r.u32("count")?,
            size: r.u64("size")?,
        },
        Op::Getattr => Reply::Attr(r.attr()?),
        Op::Readdir => entries_reply(&mut r)?,
        Op::Hash => Reply::Hash {
            size: r.u64("size")?,
            hash: r.array("hash")?,
        },
    };
    r.finish("reply")?;
    Ok((header, op, Ok(reply)))
}

/// A refusal: its error code and the server's words.
fn error_reply(r: &mut Reader<'_>, status: u8) -> Result<RemoteError, DecodeError> {
    let code = ErrorCode::from_code(status).ok_or(DecodeError::BadValue {
        what: "status",
        value: u64::from(status),
        accepted: "0 (ok) or an error code 1..=18",
    })?;
    let len = usize::from(r.u16("error detail length")?);
    if len > MAX_DETAIL {
        return Err(DecodeError::FieldTooLarge {
            what: "error detail",
            len,
            max: MAX_DETAIL,
        });
    }
    let detail = std::str::from_utf8(r.take(len, "error detail")?)
        .map_err(|_| DecodeError::BadText)?
        .to_string();
    r.finish("error reply")?;
    Ok(RemoteError { code, detail })
}

/// The answer to a hello: a cookie to come back with, or the welcome.
fn hello_reply<'a>(r: &mut Reader<'a>) -> Result<Reply<'a>, DecodeError> {
    match r.u8("hello reply kind")? {
        HELLO_RETRY => Ok(Reply::Retry {
            cookie: r.array("retry cookie")?,
        }),
        HELLO_WELCOME => decode_welcome(r),
        kind => Err(DecodeError::BadValue {
            what: "hello reply kind",
            value: u64::from(kind),
            accepted: "0 (welcome) or 1 (retry)",
        }),
    }
}

/// A directory's entries, their count checked before any allocation.
fn entries_reply<'a>(r: &mut Reader<'a>) -> Result<Reply<'a>, DecodeError> {
    let eof = r.bool("eof")?;
    let n = r.u16("entry count")?;
    if n > MAX_READDIR_ENTRIES {
        return Err(DecodeError::FieldTooLarge {
            what: "directory entries",
            len: usize::from(n),
            max: usize::from(MAX_READDIR_ENTRIES),
        });
    }
    // Each entry takes at least 11 bytes: no allocation beyond what
    // the message could hold.
    let mut entries = Vec::with_capacity(usize::from(n).min(r.left() / 11));
    for _ in 0..n {
        let cookie = r.u64("entry cookie")?;
        let kind = r.kind()?;
        let name = r.name()?.to_vec();
        entries.push(DirEntry { cookie, kind, name });
    }
    Ok(Reply::Entries { eof, entries })
}

fn decode_welcome<'a>(r: &mut Reader<'a>) -> Result<Reply<'a>, DecodeError> {
    let nonce = r.array("welcome nonce")?;
    let auth_required = r.bool("auth_required")?;
    let root = r.handle("root handle")?;
    let max_data = r.u32("max_data")?;
    if max_data == 0 || max_data as usize > MAX_DATA {
        return Err(DecodeError::BadValue {
            what: "max_data",
            value: u64::from(max_data),
            accepted: "1..=65536",
        });
    }
    Ok(Reply::Welcome {
        nonce,
        auth_required,
        root,
        max_data,
        drc_span: r.u32("drc_span")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn handle() -> impl Strategy<Value = Handle> {
        any::<[u8; 16]>().prop_map(Handle)
    }

    fn name() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 1..=MAX_NAME)
            .prop_filter("valid names only", |n| validate_name(n).is_ok())
    }

    fn attr() -> impl Strategy<Value = Attr> {
        (
            prop_oneof![
                Just(Kind::File),
                Just(Kind::Dir),
                Just(Kind::Symlink),
                Just(Kind::Other)
            ],
            0u32..=0o7777,
            any::<u64>(),
            any::<i64>(),
            any::<i64>(),
        )
            .prop_map(|(kind, mode, size, mtime_ns, atime_ns)| Attr {
                kind,
                mode,
                size,
                mtime_ns,
                atime_ns,
            })
    }

    /// An owned description of a request, so strategies need no borrows.
    #[derive(Debug, Clone)]
    enum OwnedRequest {
        Hello([u8; 16], [u8; COOKIE_LEN]),
        Auth([u8; 32]),
        Goodbye,
        Lookup(Handle, Vec<u8>),
        Create(Handle, Vec<u8>, u32, CreateHow),
        Read(Handle, u64, u32),
        Write(Handle, u64, Vec<u8>),
        Getattr(Handle),
        Readdir(Handle, u64, u16),
        Remove(Handle, Vec<u8>),
        Hash(Handle),
        Commit(Handle),
        PutBegin(Handle, Vec<u8>, u32, u64),
        PutCommit(Handle),
        PutAbort(Handle),
    }

    impl OwnedRequest {
        fn borrow(&self) -> Request<'_> {
            match self {
                OwnedRequest::Hello(n, c) => Request::Hello {
                    nonce: *n,
                    cookie: *c,
                },
                OwnedRequest::Auth(p) => Request::Auth { proof: *p },
                OwnedRequest::Goodbye => Request::Goodbye,
                OwnedRequest::Lookup(d, n) => Request::Lookup { dir: *d, name: n },
                OwnedRequest::Create(d, n, mode, how) => Request::Create {
                    dir: *d,
                    name: n,
                    mode: *mode,
                    how: *how,
                },
                OwnedRequest::Read(f, o, c) => Request::Read {
                    file: *f,
                    offset: *o,
                    count: *c,
                },
                OwnedRequest::Write(f, o, d) => Request::Write {
                    file: *f,
                    offset: *o,
                    data: d,
                },
                OwnedRequest::Getattr(h) => Request::Getattr { handle: *h },
                OwnedRequest::Readdir(d, c, m) => Request::Readdir {
                    dir: *d,
                    cookie: *c,
                    max_entries: *m,
                },
                OwnedRequest::Remove(d, n) => Request::Remove { dir: *d, name: n },
                OwnedRequest::Hash(f) => Request::Hash { file: *f },
                OwnedRequest::Commit(f) => Request::Commit { file: *f },
                OwnedRequest::PutBegin(d, n, mode, size) => Request::PutBegin {
                    dir: *d,
                    name: n,
                    mode: *mode,
                    size: *size,
                },
                OwnedRequest::PutCommit(h) => Request::PutCommit { upload: *h },
                OwnedRequest::PutAbort(h) => Request::PutAbort { upload: *h },
            }
        }
    }

    fn request() -> impl Strategy<Value = OwnedRequest> {
        prop_oneof![
            (any::<[u8; 16]>(), any::<[u8; COOKIE_LEN]>())
                .prop_map(|(n, c)| OwnedRequest::Hello(n, c)),
            any::<[u8; 32]>().prop_map(OwnedRequest::Auth),
            Just(OwnedRequest::Goodbye),
            (handle(), name()).prop_map(|(d, n)| OwnedRequest::Lookup(d, n)),
            (
                handle(),
                name(),
                0..=MAX_CREATE_MODE,
                prop_oneof![Just(CreateHow::Exclusive), Just(CreateHow::Truncate)]
            )
                .prop_map(|(d, n, m, h)| OwnedRequest::Create(d, n, m, h)),
            (
                handle(),
                0..=MAX_OFFSET - MAX_DATA as u64,
                1..=MAX_DATA as u32
            )
                .prop_map(|(f, o, c)| OwnedRequest::Read(f, o, c)),
            (
                handle(),
                0..=MAX_OFFSET - MAX_DATA as u64,
                proptest::collection::vec(any::<u8>(), 0..2000)
            )
                .prop_map(|(f, o, d)| OwnedRequest::Write(f, o, d)),
            handle().prop_map(OwnedRequest::Getattr),
            (handle(), 0..=MAX_OFFSET, 1..=MAX_READDIR_ENTRIES)
                .prop_map(|(d, c, m)| OwnedRequest::Readdir(d, c, m)),
            (handle(), name()).prop_map(|(d, n)| OwnedRequest::Remove(d, n)),
            handle().prop_map(OwnedRequest::Hash),
            handle().prop_map(OwnedRequest::Commit),
            (handle(), name(), 0..=MAX_CREATE_MODE, 0..=MAX_OFFSET)
                .prop_map(|(d, n, m, s)| OwnedRequest::PutBegin(d, n, m, s)),
            handle().prop_map(OwnedRequest::PutCommit),
            handle().prop_map(OwnedRequest::PutAbort),
        ]
    }

    #[derive(Debug, Clone)]
    enum OwnedReply {
        Welcome([u8; 32], bool, Handle, u32, u32),
        Retry([u8; COOKIE_LEN]),
        Done(Op),
        Handle(Op, Handle, Attr),
        Data(u64, bool, Vec<u8>),
        Written(u32, u64),
        Attr(Attr),
        Entries(bool, Vec<DirEntry>),
        Hash(u64, [u8; 16]),
        Error(Op, ErrorCode, String),
    }

    impl OwnedReply {
        fn op(&self) -> Op {
            match self {
                OwnedReply::Welcome(..) | OwnedReply::Retry(_) => Op::Hello,
                OwnedReply::Done(op) | OwnedReply::Handle(op, ..) | OwnedReply::Error(op, ..) => {
                    *op
                }
                OwnedReply::Data(..) => Op::Read,
                OwnedReply::Written(..) => Op::Write,
                OwnedReply::Attr(_) => Op::Getattr,
                OwnedReply::Entries(..) => Op::Readdir,
                OwnedReply::Hash(..) => Op::Hash,
            }
        }

        fn borrow(&self) -> Result<Reply<'_>, RemoteError> {
            Ok(match self {
                OwnedReply::Welcome(nonce, auth_required, root, max_data, drc_span) => {
                    Reply::Welcome {
                        nonce: *nonce,
                        auth_required: *auth_required,
                        root: *root,
                        max_data: *max_data,
                        drc_span: *drc_span,
                    }
                }
                OwnedReply::Retry(cookie) => Reply::Retry { cookie: *cookie },
                OwnedReply::Done(_) => Reply::Done,
                OwnedReply::Handle(_, handle, attr) => Reply::Handle {
                    handle: *handle,
                    attr: *attr,
                },
                OwnedReply::Data(size, eof, data) => Reply::Data {
                    size: *size,
                    eof: *eof,
                    data,
                },
                OwnedReply::Written(count, size) => Reply::Written {
                    count: *count,
                    size: *size,
                },
                OwnedReply::Attr(a) => Reply::Attr(*a),
                OwnedReply::Entries(eof, entries) => Reply::Entries {
                    eof: *eof,
                    entries: entries.clone(),
                },
                OwnedReply::Hash(size, hash) => Reply::Hash {
                    size: *size,
                    hash: *hash,
                },
                OwnedReply::Error(_, code, detail) => {
                    return Err(RemoteError::new(*code, detail.clone()))
                }
            })
        }
    }

    fn entry() -> impl Strategy<Value = DirEntry> {
        (any::<u64>(), attr(), name()).prop_map(|(cookie, a, name)| DirEntry {
            cookie,
            kind: a.kind,
            name,
        })
    }

    fn reply() -> impl Strategy<Value = OwnedReply> {
        prop_oneof![
            (
                any::<[u8; 32]>(),
                any::<bool>(),
                handle(),
                1..=MAX_DATA as u32,
                any::<u32>()
            )
                .prop_map(|(n, a, r, m, d)| OwnedReply::Welcome(n, a, r, m, d)),
            any::<[u8; COOKIE_LEN]>().prop_map(OwnedReply::Retry),
            prop_oneof![
                Just(Op::Auth),
                Just(Op::Goodbye),
                Just(Op::Remove),
                Just(Op::Commit),
                Just(Op::PutCommit),
                Just(Op::PutAbort)
            ]
            .prop_map(OwnedReply::Done),
            (
                prop_oneof![Just(Op::Lookup), Just(Op::Create), Just(Op::PutBegin)],
                handle(),
                attr()
            )
                .prop_map(|(op, h, a)| OwnedReply::Handle(op, h, a)),
            (
                any::<u64>(),
                any::<bool>(),
                proptest::collection::vec(any::<u8>(), 0..3000)
            )
                .prop_map(|(s, e, d)| OwnedReply::Data(s, e, d)),
            (any::<u32>(), any::<u64>()).prop_map(|(c, s)| OwnedReply::Written(c, s)),
            attr().prop_map(OwnedReply::Attr),
            (any::<bool>(), proptest::collection::vec(entry(), 0..20))
                .prop_map(|(eof, e)| OwnedReply::Entries(eof, e)),
            (any::<u64>(), any::<[u8; 16]>()).prop_map(|(s, h)| OwnedReply::Hash(s, h)),
            (
                proptest::sample::select(Op::ALL.to_vec()),
                proptest::sample::select(ErrorCode::ALL.to_vec()),
                "[ -~]{0,200}"
            )
                .prop_map(|(op, code, detail)| OwnedReply::Error(op, code, detail)),
        ]
    }

    fn encoded_request(req: &OwnedRequest, session: u64, xid: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_request(session, xid, &req.borrow(), &mut out).unwrap();
        out
    }

    fn encoded_reply(reply: &OwnedReply, session: u64, xid: u64) -> Vec<u8> {
        let mut out = Vec::new();
        encode_reply(session, xid, reply.op(), &reply.borrow(), &mut out).unwrap();
        out
    }

    proptest! {
        #[test]
        fn every_request_round_trips(req in request(), session in any::<u64>(), xid in any::<u64>()) {
            let msg = encoded_request(&req, session, xid);
            prop_assert!(msg.len() <= MAX_MESSAGE);
            let (header, back) = decode_request(&msg).unwrap();
            prop_assert_eq!(header.session, session);
            prop_assert_eq!(header.xid, xid);
            prop_assert_eq!(back, req.borrow());
        }

        #[test]
        fn every_reply_round_trips(reply in reply(), session in any::<u64>(), xid in any::<u64>()) {
            let msg = encoded_reply(&reply, session, xid);
            let (header, op, back) = decode_reply(&msg).unwrap();
            prop_assert_eq!(header.xid, xid);
            prop_assert_eq!(header.session, session);
            prop_assert_eq!(op, reply.op());
            prop_assert_eq!(back, reply.borrow());
        }

        #[test]
        fn every_truncation_of_a_request_is_refused(req in request(), cut in any::<prop::sample::Index>()) {
            let msg = encoded_request(&req, 1, 2);
            let cut = cut.index(msg.len());
            prop_assert!(decode_request(&msg[..cut]).is_err());
        }

        #[test]
        fn every_truncation_of_a_reply_is_refused(reply in reply(), cut in any::<prop::sample::Index>()) {
            let msg = encoded_reply(&reply, 1, 2);
            let cut = cut.index(msg.len());
            prop_assert!(decode_reply(&msg[..cut]).is_err());
        }

        #[test]
        fn trailing_bytes_are_refused(req in request(), reply in reply(), extra in proptest::collection::vec(any::<u8>(), 1..8)) {
            let mut msg = encoded_request(&req, 1, 2);
            msg.extend_from_slice(&extra);
            prop_assert!(decode_request(&msg).is_err());
            let mut msg = encoded_reply(&reply, 1, 2);
            msg.extend_from_slice(&extra);
            prop_assert!(decode_reply(&msg).is_err());
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_request(&bytes);
            let _ = decode_reply(&bytes);
        }

        #[test]
        fn random_bodies_behind_a_valid_header_never_panic(
            opcode in any::<u8>(),
            body in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let mut msg = Vec::new();
            put_header(&mut msg, opcode, 7, 9);
            msg.extend_from_slice(&body);
            let _ = decode_request(&msg);
            let _ = decode_reply(&msg);
        }

        #[test]
        fn single_byte_corruptions_never_panic(req in request(), reply in reply(), at in any::<prop::sample::Index>(), v in any::<u8>()) {
            let mut msg = encoded_request(&req, 1, 2);
            let i = at.index(msg.len());
            msg[i] = v;
            let _ = decode_request(&msg);
            let mut msg = encoded_reply(&reply, 1, 2);
            let i = at.index(msg.len());
            msg[i] = v;
            let _ = decode_reply(&msg);
        }
    }

    fn read_req() -> Vec<u8> {
        let mut out = Vec::new();
        encode_request(
            5,
            6,
            &Request::Read {
                file: Handle([1; 16]),
                offset: 0,
                count: 10,
            },
            &mut out,
        )
        .unwrap();
        out
    }

    #[test]
    fn header_checks() {
        let good = read_req();
        assert!(decode_request(&good).is_ok());
        assert_eq!(
            decode_request(&good[..10]),
            Err(DecodeError::Short { len: 10 })
        );
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(
            decode_request(&bad),
            Err(DecodeError::BadMagic { .. })
        ));
        let mut bad = good.clone();
        bad[2] = 1;
        assert_eq!(decode_request(&bad), Err(DecodeError::Version { got: 1 }));
        let mut bad = good.clone();
        bad[7] = 1;
        assert_eq!(decode_request(&bad), Err(DecodeError::Reserved { got: 1 }));
        for op in [0u8, 16, 0x7f] {
            let mut bad = good.clone();
            bad[3] = op;
            assert_eq!(
                decode_request(&bad),
                Err(DecodeError::UnknownOp { got: op })
            );
        }
        let mut bad = good.clone();
        bad[3] |= REPLY_BIT;
        assert!(matches!(
            decode_request(&bad),
            Err(DecodeError::WrongDirection { .. })
        ));
        assert!(matches!(
            decode_reply(&good),
            Err(DecodeError::WrongDirection { .. })
        ));
    }

    #[test]
    fn oversized_messages_and_fields_are_refused() {
        let mut msg = read_req();
        msg.resize(MAX_MESSAGE + 1, 0);
        assert_eq!(
            decode_request(&msg),
            Err(DecodeError::TooLarge {
                len: MAX_MESSAGE + 1
            })
        );
        // A write whose length field claims more than MAX_DATA is refused
        // before the bytes are looked at.
        let mut msg = Vec::new();
        put_header(&mut msg, Op::Write.code(), 1, 1);
        msg.extend_from_slice(&[0; 16]);
        msg.extend_from_slice(&0u64.to_be_bytes());
        msg.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode_request(&msg),
            Err(DecodeError::FieldTooLarge { .. })
        ));
        // A length that fits the limit but not the message.
        let mut msg = Vec::new();
        put_header(&mut msg, Op::Write.code(), 1, 1);
        msg.extend_from_slice(&[0; 16]);
        msg.extend_from_slice(&0u64.to_be_bytes());
        msg.extend_from_slice(&100u32.to_be_bytes());
        msg.extend_from_slice(&[0; 10]);
        assert!(matches!(
            decode_request(&msg),
            Err(DecodeError::Truncated { need: 100, .. })
        ));
        // Encoding refuses too much data.
        let big = vec![0u8; MAX_DATA + 1];
        let mut out = Vec::new();
        assert!(encode_request(
            1,
            1,
            &Request::Write {
                file: Handle([0; 16]),
                offset: 0,
                data: &big
            },
            &mut out
        )
        .is_err());
        assert!(out.is_empty(), "a failed encoding leaves the buffer alone");
    }

    #[test]
    fn bad_values_are_refused() {
        let h = Handle([0; 16]);
        let cases: Vec<Vec<u8>> = vec![
            {
                // read count 0
                let mut m = Vec::new();
                put_header(&mut m, Op::Read.code(), 1, 1);
                m.extend_from_slice(&h.0);
                m.extend_from_slice(&0u64.to_be_bytes());
                m.extend_from_slice(&0u32.to_be_bytes());
                m
            },
            {
                // offset beyond i64
                let mut m = Vec::new();
                put_header(&mut m, Op::Read.code(), 1, 1);
                m.extend_from_slice(&h.0);
                m.extend_from_slice(&u64::MAX.to_be_bytes());
                m.extend_from_slice(&1u32.to_be_bytes());
                m
            },
            {
                // create with setuid bit
                let mut m = Vec::new();
                put_header(&mut m, Op::Create.code(), 1, 1);
                m.extend_from_slice(&h.0);
                m.push(1);
                m.push(b'a');
                m.extend_from_slice(&0o4755u32.to_be_bytes());
                m.push(0);
                m
            },
            {
                // create with an unknown how
                let mut m = Vec::new();
                put_header(&mut m, Op::Create.code(), 1, 1);
                m.extend_from_slice(&h.0);
                m.push(1);
                m.push(b'a');
                m.extend_from_slice(&0o644u32.to_be_bytes());
                m.push(7);
                m
            },
            {
                // readdir asking for 0 entries
                let mut m = Vec::new();
                put_header(&mut m, Op::Readdir.code(), 1, 1);
                m.extend_from_slice(&h.0);
                m.extend_from_slice(&0u64.to_be_bytes());
                m.extend_from_slice(&0u16.to_be_bytes());
                m
            },
        ];
        for msg in cases {
            assert!(
                matches!(decode_request(&msg), Err(DecodeError::BadValue { .. })),
                "{:?}",
                decode_request(&msg)
            );
        }
    }

    #[test]
    fn bad_names_are_refused_both_ways() {
        for bad in [
            &b""[..],
            b".",
            b"..",
            b"a/b",
            b"/etc",
            b"a\0b",
            &[b'x'; 256][..],
        ] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
            let mut out = Vec::new();
            assert!(encode_request(
                1,
                1,
                &Request::Lookup {
                    dir: Handle([0; 16]),
                    name: bad
                },
                &mut out
            )
            .is_err());
            // Hand-made: the decoder refuses it too.
            if bad.len() <= 255 {
                let mut m = Vec::new();
                put_header(&mut m, Op::Lookup.code(), 1, 1);
                m.extend_from_slice(&[0; 16]);
                m.push(bad.len() as u8);
                m.extend_from_slice(bad);
                assert!(
                    matches!(decode_request(&m), Err(DecodeError::Name(_))),
                    "{bad:?}"
                );
            }
        }
        for good in [&b"a"[..], b"...", b".hidden", b"caf\xc3\xa9", b"\xff\xfe"] {
            assert!(validate_name(good).is_ok(), "{good:?}");
        }
        let e = validate_name(b"..").unwrap_err().to_string();
        assert!(e.contains("\"..\"") && e.contains("not '.' or '..'"), "{e}");
    }

    #[test]
    fn bad_booleans_statuses_and_details_are_refused() {
        let mut msg = Vec::new();
        encode_reply(
            1,
            1,
            Op::Read,
            &Ok(Reply::Data {
                size: 3,
                eof: true,
                data: b"abc",
            }),
            &mut msg,
        )
        .unwrap();
        let eof_at = HEADER_LEN + 1 + 8;
        msg[eof_at] = 2;
        assert!(matches!(
            decode_reply(&msg),
            Err(DecodeError::BadValue { what: "eof", .. })
        ));
        let mut msg = Vec::new();
        encode_reply(
            1,
            1,
            Op::Read,
            &Err(RemoteError::new(ErrorCode::NoEnt, "x")),
            &mut msg,
        )
        .unwrap();
        msg[HEADER_LEN] = 99;
        assert!(matches!(
            decode_reply(&msg),
            Err(DecodeError::BadValue { what: "status", .. })
        ));
        msg[HEADER_LEN] = ErrorCode::NoEnt as u8;
        msg[HEADER_LEN + 3] = 0xff;
        assert_eq!(decode_reply(&msg), Err(DecodeError::BadText));
    }

    #[test]
    fn long_details_are_cut_at_a_character_boundary() {
        let detail = "é".repeat(150); // 300 bytes
        let mut msg = Vec::new();
        encode_reply(
            1,
            1,
            Op::Lookup,
            &Err(RemoteError::new(ErrorCode::Invalid, detail)),
            &mut msg,
        )
        .unwrap();
        let (_, _, r) = decode_reply(&msg).unwrap();
        let e = r.unwrap_err();
        assert_eq!(e.detail.len(), MAX_DETAIL);
        assert!(e.detail.chars().all(|c| c == 'é'));
    }

    #[test]
    fn mismatched_replies_are_refused_when_encoding() {
        let mut out = Vec::new();
        assert_eq!(
            encode_reply(1, 1, Op::Read, &Ok(Reply::Done), &mut out),
            Err(EncodeError::Mismatch { op: Op::Read })
        );
    }

    #[test]
    fn in_place_read_replies_decode() {
        let mut out = Vec::new();
        let slot = begin_read_reply(3, 4, &mut out);
        out.extend_from_slice(b"hello");
        finish_read_reply(slot, 99, false, &mut out).unwrap();
        let (h, op, r) = decode_reply(&out).unwrap();
        assert_eq!((h.session, h.xid, op), (3, 4, Op::Read));
        assert_eq!(
            r.unwrap(),
            Reply::Data {
                size: 99,
                eof: false,
                data: b"hello"
            }
        );
    }

    #[test]
    fn a_huge_entry_count_allocates_nothing_it_cannot_fill() {
        let mut m = Vec::new();
        put_header(&mut m, Op::Readdir.code() | REPLY_BIT, 1, 1);
        m.push(0);
        m.push(0);
        m.extend_from_slice(&MAX_READDIR_ENTRIES.to_be_bytes());
        assert!(matches!(
            decode_reply(&m),
            Err(DecodeError::Truncated { .. })
        ));
        let mut m2 = m.clone();
        let at = m2.len() - 2;
        m2[at..].copy_from_slice(&(MAX_READDIR_ENTRIES + 1).to_be_bytes());
        assert!(matches!(
            decode_reply(&m2),
            Err(DecodeError::FieldTooLarge { .. })
        ));
    }

    #[test]
    fn codes_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::from_code(op.code()), Some(op));
        }
        assert_eq!(Op::from_code(0), None);
        assert_eq!(Op::from_code(16), None);
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::from_code(c as u8), Some(c));
        }
        assert_eq!(ErrorCode::from_code(0), None);
        let h = Handle::from_parts(0xdead, 42);
        assert_eq!(h.parts(), (0xdead, 42));
    }
}
