//! The SOS system calls on open files and directories: open, create,
//! close, read, write, seek, stat, sync, getdirent, readdir, remove; and
//! the pipeline job that places read replies in the caller's buffer.

use super::write_job::WriteFrom;
use super::{remote, unexpected, Client, MAX_OPEN_FILES};
use crate::error::ClientError;
use crate::pipeline::{Encoder, Job};
use crate::protocol::{
    Attr, CreateHow, DirEntry, ErrorCode, Handle, Kind, RemoteError, Reply, Request,
    MAX_READDIR_ENTRIES,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Entries asked for per readdir.
const READDIR_PAGE: u16 = 256;

/// How a file is opened (SOS: O_RDONLY, O_WRONLY, O_RDWR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Read,
    Write,
    ReadWrite,
}

impl OpenMode {
    fn reads(self) -> bool {
        self != OpenMode::Write
    }

    fn writes(self) -> bool {
        self != OpenMode::Read
    }
}

/// An open file of a [`Client`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fd(pub(super) u32);

impl Fd {
    pub fn raw(self) -> u32 {
        self.0
    }
}

pub(super) struct OpenFile {
    pub(super) handle: Handle,
    pub(super) path: String,
    pub(super) mode: OpenMode,
    pub(super) offset: u64,
}

pub(super) struct DirCursor {
    dir: Handle,
    entries: Vec<DirEntry>,
    cookie: u64,
    eof: bool,
}

impl Client {
    pub(super) fn fd_entry(&mut self, fd: Fd) -> Result<&mut OpenFile, ClientError> {
        self.fds.get_mut(&fd.0).ok_or(ClientError::BadFd {
            fd: fd.0,
            why: "is not open",
        })
    }

    pub(super) fn new_fd(&mut self, file: OpenFile) -> Result<Fd, ClientError> {
        if self.fds.len() >= MAX_OPEN_FILES {
            return Err(ClientError::BadFd {
                fd: self.next_fd,
                why: "cannot be opened: too many open files (1024)",
            });
        }
        while self.fds.contains_key(&self.next_fd) {
            self.next_fd = self.next_fd.wrapping_add(1).max(3);
        }
        let fd = self.next_fd;
        self.next_fd = self.next_fd.wrapping_add(1).max(3);
        self.fds.insert(fd, file);
        Ok(Fd(fd))
    }

    // -- the SOS system calls ------------------------------------------------

    /// Open an existing regular file.
    pub fn open(&mut self, path: &str, mode: OpenMode) -> Result<Fd, ClientError> {
        let (handle, attr) = self.walk(path)?;
        if attr.kind != Kind::File {
            return Err(ClientError::BadPath {
                path: path.to_string(),
                why: format!(
                    "it is a {}; only regular files can be opened",
                    attr.kind.name()
                ),
            });
        }
        self.new_fd(OpenFile {
            handle,
            path: path.to_string(),
            mode,
            offset: 0,
        })
    }

    /// Create a regular file (`how`: fail if it exists, or truncate it) and
    /// open it for reading and writing. `mode` is the permission bits
    /// (0..=0o777).
    pub fn create(&mut self, path: &str, how: CreateHow, mode: u32) -> Result<Fd, ClientError> {
        let handle = self.create_handle(path, how, mode)?;
        self.new_fd(OpenFile {
            handle,
            path: path.to_string(),
            mode: OpenMode::ReadWrite,
            offset: 0,
        })
    }

    fn create_handle(
        &mut self,
        path: &str,
        how: CreateHow,
        mode: u32,
    ) -> Result<Handle, ClientError> {
        if mode > crate::protocol::MAX_CREATE_MODE {
            return Err(ClientError::Option {
                what: "mode",
                value: format!("{mode:#o}"),
                accepted: "permission bits 0..=0o777".into(),
            });
        }
        let (dir, name) = self.walk_parent(path)?;
        let server = self.server;
        self.call(
            &Request::Create {
                dir,
                name: name.as_bytes(),
                mode,
                how,
            },
            false,
            |r| match r {
                Ok(Reply::Handle { handle, .. }) => Ok(handle),
                Ok(_) => Err(unexpected(server, "create")),
                Err(error) => Err(remote(server, format!("creating \"{path}\""), error)),
            },
        )
    }

    /// Close `fd`.
    pub fn close(&mut self, fd: Fd) -> Result<(), ClientError> {
        self.fds
            .remove(&fd.0)
            .map(|_| ())
            .ok_or(ClientError::BadFd {
                fd: fd.0,
                why: "is not open",
            })
    }

    /// Read up to `buf.len()` bytes at the file's offset, `window` packets
    /// in flight; returns the bytes read (0 at end of file) and advances the
    /// offset.
    pub fn read(&mut self, fd: Fd, buf: &mut [u8]) -> Result<usize, ClientError> {
        let f = self.fd_entry(fd)?;
        let offset = f.offset;
        let n = self.read_at(fd, offset, buf)?;
        self.fd_entry(fd)?.offset = offset + n as u64;
        Ok(n)
    }

    /// Read at `offset` without moving the file's offset. The data is
    /// received straight into `buf` where it can be, so bytes of `buf`
    /// past the count returned may have been written too.
    pub fn read_at(&mut self, fd: Fd, offset: u64, buf: &mut [u8]) -> Result<usize, ClientError> {
        let f = self.fd_entry(fd)?;
        if !f.mode.reads() {
            return Err(ClientError::BadFd {
                fd: fd.0,
                why: "is open for writing only",
            });
        }
        let (handle, path) = (f.handle, f.path.clone());
        let mut job = ReadInto {
            handle,
            base: offset,
            buf,
            packet: self.packet,
            next: 0,
            limit: 0,
            short: None,
            asked: HashMap::new(),
            server: self.server,
            path: &path,
        };
        job.limit = job.buf.len();
        self.pipe.run(&mut job)?;
        Ok(job.short.unwrap_or(job.limit).min(job.buf.len()))
    }

    /// Write `data` at the file's offset, `window` packets in flight;
    /// returns `data.len()` and advances the offset.
    pub fn write(&mut self, fd: Fd, data: &[u8]) -> Result<usize, ClientError> {
        let offset = self.fd_entry(fd)?.offset;
        let n = self.write_at(fd, offset, data)?;
        self.fd_entry(fd)?.offset = offset + n as u64;
        Ok(n)
    }

    /// Write at `offset` without moving the file's offset.
    pub fn write_at(&mut self, fd: Fd, offset: u64, data: &[u8]) -> Result<usize, ClientError> {
        let f = self.fd_entry(fd)?;
        if !f.mode.writes() {
            return Err(ClientError::BadFd {
                fd: fd.0,
                why: "is open for reading only",
            });
        }
        let (handle, path) = (f.handle, f.path.clone());
        let mut source: &[u8] = data;
        let mut job = WriteFrom::new(handle, offset, &mut source, self.packet, self.server, &path);
        self.pipe.run(&mut job)?;
        Ok(job.acked as usize)
    }

    /// Move the file's offset.
    pub fn seek(&mut self, fd: Fd, offset: u64) -> Result<(), ClientError> {
        self.fd_entry(fd)?.offset = offset;
        Ok(())
    }

    /// Attributes of an open file.
    pub fn fstat(&mut self, fd: Fd) -> Result<Attr, ClientError> {
        let f = self.fd_entry(fd)?;
        let (handle, path) = (f.handle, f.path.clone());
        self.getattr(handle, &path)
    }

    /// Flush an open file to the server's disk (fsync there).
    pub fn sync(&mut self, fd: Fd) -> Result<(), ClientError> {
        let f = self.fd_entry(fd)?;
        let (handle, path) = (f.handle, f.path.clone());
        self.commit(handle, &path)
    }

    fn commit(&mut self, file: Handle, path: &str) -> Result<(), ClientError> {
        let server = self.server;
        self.call(&Request::Commit { file }, true, |r| match r {
            Ok(_) => Ok(()),
            Err(error) => Err(remote(server, format!("committing \"{path}\""), error)),
        })
    }

    /// Attributes of `path`.
    pub fn stat(&mut self, path: &str) -> Result<Attr, ClientError> {
        Ok(self.walk(path)?.1)
    }

    /// The `index`-th entry of directory `dir` (SOS getdirent), or None
    /// past the end. Reading entries in order costs one readdir per page.
    pub fn getdirent(&mut self, dir: &str, index: usize) -> Result<Option<DirEntry>, ClientError> {
        let (handle, attr) = self.walk(dir)?;
        if attr.kind != Kind::Dir {
            return Err(ClientError::BadPath {
                path: dir.to_string(),
                why: format!("it is a {}, not a directory", attr.kind.name()),
            });
        }
        let fresh = match &self.dir_cursor {
            Some(c) => {
                c.dir != handle || index == 0 || index < c.entries.len().saturating_sub(4096)
            }
            None => true,
        };
        if fresh {
            self.dir_cursor = Some(DirCursor {
                dir: handle,
                entries: Vec::new(),
                cookie: 0,
                eof: false,
            });
        }
        loop {
            let Some(c) = &self.dir_cursor else {
                return Ok(None);
            };
            if let Some(e) = c.entries.get(index) {
                return Ok(Some(e.clone()));
            }
            if c.eof {
                return Ok(None);
            }
            let (cookie, dir_handle) = (c.cookie, c.dir);
            let (eof, entries) = self.readdir_page(dir_handle, cookie, dir)?;
            check_progress(self.server, dir, cookie, eof, &entries)?;
            if let Some(c) = &mut self.dir_cursor {
                if let Some(last) = entries.last() {
                    c.cookie = last.cookie;
                }
                c.eof = eof || entries.is_empty();
                c.entries.extend(entries);
            }
        }
    }

    fn readdir_page(
        &mut self,
        dir: Handle,
        cookie: u64,
        path: &str,
    ) -> Result<(bool, Vec<DirEntry>), ClientError> {
        let server = self.server;
        self.call(
            &Request::Readdir {
                dir,
                cookie,
                max_entries: READDIR_PAGE.min(MAX_READDIR_ENTRIES),
            },
            false,
            |r| match r {
                Ok(Reply::Entries { eof, entries }) => Ok((eof, entries)),
                Ok(_) => Err(unexpected(server, "readdir")),
                Err(error) => Err(remote(server, format!("listing \"{path}\""), error)),
            },
        )
    }

    /// Every entry of directory `dir`, in the server's order.
    pub fn readdir(&mut self, dir: &str) -> Result<Vec<DirEntry>, ClientError> {
        let (handle, attr) = self.walk(dir)?;
        if attr.kind != Kind::Dir {
            return Err(ClientError::BadPath {
                path: dir.to_string(),
                why: format!("it is a {}, not a directory", attr.kind.name()),
            });
        }
        let mut all = Vec::new();
        let mut cookie = 0;
        loop {
            let (eof, entries) = self.readdir_page(handle, cookie, dir)?;
            check_progress(self.server, dir, cookie, eof, &entries)?;
            let Some(last) = entries.last() else {
                return Ok(all);
            };
            cookie = last.cookie;
            all.extend(entries);
            if eof {
                return Ok(all);
            }
        }
    }

    /// Remove a file or an empty directory.
    pub fn remove(&mut self, path: &str) -> Result<(), ClientError> {
        let (dir, name) = self.walk_parent(path)?;
        let server = self.server;
        self.call(
            &Request::Remove {
                dir,
                name: name.as_bytes(),
            },
            false,
            |r| match r {
                Ok(_) => Ok(()),
                Err(error) => Err(remote(server, format!("removing \"{path}\""), error)),
            },
        )
    }

    /// The server's size and xxh3-128 of `path`.
    pub fn remote_hash(&mut self, path: &str) -> Result<(u64, u128), ClientError> {
        let (handle, _) = self.walk(path)?;
        self.hash_handle(handle, path)
    }

    pub(super) fn hash_handle(
        &mut self,
        file: Handle,
        path: &str,
    ) -> Result<(u64, u128), ClientError> {
        let server = self.server;
        // A server answers BUSY while all its hashers work for others (a
        // bound, not a failure): wait a little longer each time and ask
        // again, for at most HASH_BUSY_WAIT in all.
        let mut pause = Duration::from_millis(20);
        let mut waited = Duration::ZERO;
        loop {
            let answer = self.call(&Request::Hash { file }, true, |r| match r {
                Ok(Reply::Hash { size, hash }) => Ok(Ok((size, u128::from_be_bytes(hash)))),
                Ok(_) => Err(unexpected(server, "hash")),
                Err(error) if error.code == ErrorCode::Busy && waited < HASH_BUSY_WAIT => {
                    Ok(Err(()))
                }
                Err(error) => Err(remote(server, format!("hashing \"{path}\""), error)),
            })?;
            match answer {
                Ok(hashed) => return Ok(hashed),
                Err(()) => {
                    std::thread::sleep(pause);
                    waited += pause;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

/// How long a hash waits out BUSY answers before it gives up.
const HASH_BUSY_WAIT: Duration = Duration::from_secs(30);

/// A readdir page that is not the last must move the cookie forward, or a
/// listing would never end.
fn check_progress(
    server: SocketAddr,
    dir: &str,
    cookie: u64,
    eof: bool,
    entries: &[DirEntry],
) -> Result<(), ClientError> {
    let stuck = match entries.last() {
        None => false, // an empty page ends the listing
        Some(last) => !eof && (last.cookie == cookie || last.cookie == 0),
    };
    if stuck {
        return Err(ClientError::Unexpected {
            server,
            what: format!(
                "listing \"{dir}\": the directory cookie does not advance (stuck at {cookie})"
            ),
        });
    }
    Ok(())
}

/// `read`: replies placed at their offsets in the caller's buffer.
struct ReadInto<'a> {
    handle: Handle,
    base: u64,
    buf: &'a mut [u8],
    packet: usize,
    /// Next position in `buf` to ask for.
    next: usize,
    /// Do not ask at or beyond this position (shrinks at end of file).
    limit: usize,
    /// Lowest position where a reply came back short.
    short: Option<usize>,
    /// Length asked for by each request in flight, by position.
    asked: HashMap<u64, usize>,
    server: SocketAddr,
    path: &'a str,
}

impl Job for ReadInto<'_> {
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        if self.next >= self.limit {
            return Ok(None);
        }
        let len = self.packet.min(self.limit - self.next);
        enc.request(&Request::Read {
            file: self.handle,
            offset: self.base + self.next as u64,
            count: len as u32,
        })?;
        let tag = self.next as u64;
        self.asked.insert(tag, len);
        self.next += len;
        Ok(Some(tag))
    }

    fn reply(
        &mut self,
        tag: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        let pos = tag as usize;
        let asked = self.asked.remove(&tag).unwrap_or(0);
        match result {
            Ok(Reply::Data { data, .. }) => {
                let n = data.len().min(asked);
                self.buf[pos..pos + n].copy_from_slice(&data[..n]);
                if n < asked {
                    let end = pos + n;
                    self.short = Some(self.short.map_or(end, |s| s.min(end)));
                    self.limit = self.limit.min(end);
                }
                Ok(())
            }
            Ok(_) => Err(unexpected(self.server, "read")),
            Err(error) => Err(remote(
                self.server,
                format!("reading \"{}\" at offset {}", self.path, self.base + tag),
                error,
            )),
        }
    }

    /// Each request's own part of the caller's buffer (tags are positions
    /// in it, increasing in the order requests go out).
    fn places<'s>(&'s mut self, tags: &[u64], out: &mut Vec<&'s mut [u8]>) {
        let mut rest: &'s mut [u8] = &mut *self.buf;
        let mut at = 0; // where `rest` starts in the buffer
        for &tag in tags {
            let Some(&len) = self.asked.get(&tag) else {
                return;
            };
            let pos = tag as usize;
            if pos < at || pos + len > at + rest.len() {
                return;
            }
            let (_, from) = std::mem::take(&mut rest).split_at_mut(pos - at);
            let (place, after) = from.split_at_mut(len);
            out.push(place);
            rest = after;
            at = pos + len;
        }
    }

    fn placed(&mut self, tag: u64, _size: u64, _eof: bool) -> Result<(), ClientError> {
        // Whole: nothing cut short.
        self.asked.remove(&tag);
        Ok(())
    }
}
