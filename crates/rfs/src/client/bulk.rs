//! Whole files through the window: `get` streams a remote file in order
//! into a local partial file and renames it once the hashes agree; `put`
//! streams a local file into an upload the server renames over the target
//! once the hashes agree. Also the scratch files built on uploads.

use super::ops::{OpenFile, OpenMode};
use super::write_job::WriteFrom;
use super::{check_stop, remote, unexpected, Client, Fd, Progress};
use crate::auth;
use crate::error::ClientError;
use crate::pipeline::{Encoder, Job};
use crate::protocol::{ErrorCode, Handle, Kind, Op, RemoteError, Reply, Request};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::Xxh3;

/// What a finished `get` or `put` moved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TransferSummary {
    pub bytes: u64,
    pub elapsed: Duration,
    /// xxh3-128 of the bytes, equal on both sides.
    pub hash: u128,
    /// Retransmissions during the transfer.
    pub retransmissions: u64,
}

impl Client {
    // -- whole files ---------------------------------------------------------

    /// Copy the remote file `remote` to the local path `local` (written
    /// under a temporary name and renamed when complete and verified).
    pub fn get(
        &mut self,
        remote_path: &str,
        local: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<TransferSummary, ClientError> {
        let started = Instant::now();
        let retrans0 = self.pipe.stats().retransmissions;
        let (handle, attr) = self.walk(remote_path)?;
        if attr.kind != Kind::File {
            return Err(ClientError::BadPath {
                path: remote_path.to_string(),
                why: format!(
                    "it is a {}; only regular files can be copied",
                    attr.kind.name()
                ),
            });
        }
        let (tmp, mut file) = create_partial(local)?;
        let result = self.get_into(handle, remote_path, attr.size, &mut file, &tmp, progress);
        let outcome = result.and_then(|(bytes, hash)| {
            // The one commit policy (osprobe_core::sys::commit): fsync, rename,
            // fsync of the directory. A get replaces the local file, as cp does.
            use osprobe_core::sys::CommitError;
            let rename_failed = |source| {
                let what = format!("cannot rename {} to {}", tmp.display(), local.display());
                ClientError::io(what, source)
            };
            osprobe_core::sys::commit_file(&file, &tmp, local, true).map_err(|e| match e {
                CommitError::Flush { source, .. } => {
                    ClientError::io(format!("cannot flush {}", tmp.display()), source)
                }
                CommitError::Rename { source, .. } => rename_failed(source),
                CommitError::AlreadyExists { .. } => {
                    rename_failed(io::Error::from(io::ErrorKind::AlreadyExists))
                }
                CommitError::SyncDir { dir, source } => ClientError::io(
                    format!("flushing directory {} to disk", dir.display()),
                    source,
                ),
            })?;
            Ok((bytes, hash))
        });
        match outcome {
            Ok((bytes, hash)) => Ok(TransferSummary {
                bytes,
                elapsed: started.elapsed(),
                hash,
                retransmissions: self.pipe.stats().retransmissions - retrans0,
            }),
            Err(e) => {
                let removed = std::fs::remove_file(&tmp);
                Err(match e {
                    ClientError::Interrupted { .. } => ClientError::Interrupted {
                        cleanup: match removed {
                            Ok(()) => format!("the partial file {} was removed", tmp.display()),
                            Err(why) => {
                                format!("the partial file {} is left: {why}", tmp.display())
                            }
                        },
                    },
                    other => other,
                })
            }
        }
    }

    fn get_into(
        &mut self,
        handle: Handle,
        remote_path: &str,
        size: u64,
        file: &mut File,
        tmp: &Path,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(u64, u128), ClientError> {
        let mut hasher = Xxh3::new();
        let mut sink = |bytes: &[u8]| -> Result<(), ClientError> {
            hasher.update(bytes);
            file.write_all(bytes)
                .map_err(|e| ClientError::io(format!("cannot write {}", tmp.display()), e))
        };
        let mut job = ReadStream {
            handle,
            next: 0,
            limit: size.max(1),
            end: None,
            total: size,
            packet: self.packet as u64,
            delivered: 0,
            pending: BTreeMap::new(),
            asked: HashMap::new(),
            sink: &mut sink,
            progress,
            server: self.server,
            path: remote_path,
            stop: self.stop,
        };
        self.pipe.run(&mut job)?;
        let delivered = job.delivered;
        let local_hash = hasher.digest128();
        let (remote_size, remote_hash) = self.hash_handle(handle, remote_path)?;
        if remote_size != delivered || remote_hash != local_hash {
            return Err(ClientError::ChecksumMismatch {
                remote: remote_path.to_string(),
                local_size: delivered,
                local_hash,
                remote_size,
                remote_hash,
            });
        }
        Ok((delivered, local_hash))
    }

    /// Copy the local file `local` to `remote`, atomically: the bytes go
    /// to a temporary file the server creates beside `remote`, which is
    /// hashed, compared and only then renamed over `remote`. If the put
    /// fails or is interrupted (or the client dies), `remote` keeps its
    /// old contents and the server removes the temporary file.
    pub fn put(
        &mut self,
        local: &Path,
        remote_path: &str,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<TransferSummary, ClientError> {
        let started = Instant::now();
        let retrans0 = self.pipe.stats().retransmissions;
        let mut file = File::open(local)
            .map_err(|e| ClientError::io(format!("cannot open {}", local.display()), e))?;
        let meta = file
            .metadata()
            .map_err(|e| ClientError::io(format!("cannot stat {}", local.display()), e))?;
        if !meta.is_file() {
            return Err(ClientError::io(
                format!("cannot send {}", local.display()),
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        let mode = meta.permissions().mode() & crate::protocol::MAX_CREATE_MODE;
        let upload = self.put_begin(remote_path, mode, meta.len())?;
        let mut hasher = Xxh3::new();
        let mut reader = HashingReader {
            inner: &mut file,
            hasher: &mut hasher,
        };
        let mut job = WriteFrom::new(
            upload,
            0,
            &mut reader,
            self.packet,
            self.server,
            remote_path,
        );
        job.total = meta.len();
        job.progress = Some(progress);
        job.source_name = local.display().to_string();
        job.stop = self.stop;
        let ran = self.pipe.run(&mut job);
        let sent = job.acked;
        let local_hash = hasher.digest128();
        let result = ran.and_then(|()| {
            let (remote_size, remote_hash) = self.hash_handle(upload, remote_path)?;
            if remote_size != sent || remote_hash != local_hash {
                return Err(ClientError::ChecksumMismatch {
                    remote: remote_path.to_string(),
                    local_size: sent,
                    local_hash,
                    remote_size,
                    remote_hash,
                });
            }
            self.put_end(Request::PutCommit { upload }, remote_path)?;
            Ok(TransferSummary {
                bytes: sent,
                elapsed: started.elapsed(),
                hash: local_hash,
                retransmissions: self.pipe.stats().retransmissions - retrans0,
            })
        });
        result.map_err(|e| {
            // A failed commit has discarded the upload on the server
            // already; otherwise discard it now. If the connection is
            // gone, the server discards it when the session ends.
            let discarded = self.put_end(Request::PutAbort { upload }, remote_path);
            match e {
                ClientError::Interrupted { .. } => ClientError::Interrupted {
                    cleanup: match discarded {
                        Ok(()) => format!(
                            "\"{remote_path}\" on the server is unchanged and the partial upload was discarded"
                        ),
                        Err(why) => format!(
                            "\"{remote_path}\" on the server is unchanged; the partial upload goes when the session ends ({why})"
                        ),
                    },
                },
                other => other,
            }
        })
    }

    /// Start an upload of `path`: the handle of the server's temporary file.
    /// `size`: what the upload will hold (the server reserves it).
    fn put_begin(&mut self, path: &str, mode: u32, size: u64) -> Result<Handle, ClientError> {
        let (dir, name) = self.walk_parent(path)?;
        let server = self.server;
        self.call(
            &Request::PutBegin {
                dir,
                name: name.as_bytes(),
                mode,
                size,
            },
            false,
            |r| match r {
                Ok(Reply::Handle { handle, .. }) => Ok(handle),
                Ok(_) => Err(unexpected(server, "put-begin")),
                // A server older than atomic puts knows no such operation.
                Err(error) if error.code == ErrorCode::Unsupported => Err(ClientError::OldServer {
                    server,
                    op: Op::PutBegin,
                }),
                Err(error) => Err(remote(
                    server,
                    format!("starting the upload of \"{path}\""),
                    error,
                )),
            },
        )
    }

    /// Send `PutCommit` or `PutAbort` for an upload of `path`.
    fn put_end(&mut self, req: Request<'_>, path: &str) -> Result<(), ClientError> {
        let server = self.server;
        let doing = match req {
            Request::PutCommit { .. } => "committing",
            _ => "discarding",
        };
        self.call(&req, true, |r| match r {
            Ok(_) => Ok(()),
            Err(error) => Err(remote(
                server,
                format!("{doing} the upload of \"{path}\""),
                error,
            )),
        })
    }

    /// A scratch file on the server beside `near` (which it never
    /// touches), open for reading and writing, that no other client can
    /// collide with: an upload that is never committed. It is removed by
    /// [`Client::discard`], or by the server when the session ends, however
    /// the client ends (a kill -9 included).
    pub fn create_scratch(&mut self, near: &str) -> Result<Fd, ClientError> {
        let handle = self.put_begin(near, 0o600, 0)?;
        self.new_fd(OpenFile {
            handle,
            path: format!("{near} (scratch)"),
            mode: OpenMode::ReadWrite,
            offset: 0,
        })
    }

    /// Close the scratch file `fd` and remove it from the server.
    pub fn discard(&mut self, fd: Fd) -> Result<(), ClientError> {
        let f = self.fd_entry(fd)?;
        let (upload, path) = (f.handle, f.path.clone());
        self.fds.remove(&fd.0);
        self.put_end(Request::PutAbort { upload }, &path)
    }
}

/// The partial file of a `get` into `local`: beside it (so the final
/// rename stays on one file system), under a random name, created
/// exclusively and never through a symbolic link, readable by the owner
/// only until it is complete. A name planted in advance (a link to a
/// file the user can write) is never opened.
fn create_partial(local: &Path) -> Result<(PathBuf, File), ClientError> {
    let name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "download".into());
    let mut tries = 0;
    loop {
        let tag = u64::from_ne_bytes(
            auth::random_bytes::<8>().map_err(|e| ClientError::io("getting random bytes", e))?,
        );
        let tmp = local.with_file_name(format!(".{name}.osprobe-get-{tag:016x}"));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp);
        match opened {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 4 => tries += 1,
            Err(e) => {
                return Err(ClientError::io(
                    format!("cannot create {}", tmp.display()),
                    e,
                ))
            }
        }
    }
}

/// `get`: a whole file streamed in order to a sink.
struct ReadStream<'a> {
    handle: Handle,
    next: u64,
    /// Ask up to here: the size when the transfer started (a reply that
    /// reports another size stops the transfer).
    limit: u64,
    /// End of file, once a reply showed it.
    end: Option<u64>,
    total: u64,
    packet: u64,
    delivered: u64,
    /// Replies that arrived ahead of `delivered`, at most a window of them.
    pending: BTreeMap<u64, Vec<u8>>,
    /// Length asked for by each request in flight, by offset.
    asked: HashMap<u64, u64>,
    sink: &'a mut dyn FnMut(&[u8]) -> Result<(), ClientError>,
    progress: &'a mut dyn FnMut(Progress),
    server: SocketAddr,
    path: &'a str,
    stop: Option<&'a AtomicBool>,
}

impl ReadStream<'_> {
    fn deliver(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        (self.sink)(bytes)?;
        self.delivered += bytes.len() as u64;
        (self.progress)(Progress {
            done: self.delivered,
            total: self.total,
        });
        Ok(())
    }
}

impl Job for ReadStream<'_> {
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        check_stop(self.stop)?;
        let stop = self.end.map_or(self.limit, |e| e.min(self.limit));
        if self.next >= stop {
            return Ok(None);
        }
        let len = self.packet.min(stop - self.next);
        enc.request(&Request::Read {
            file: self.handle,
            offset: self.next,
            count: len as u32,
        })?;
        let tag = self.next;
        self.asked.insert(tag, len);
        self.next += len;
        Ok(Some(tag))
    }

    fn reply(
        &mut self,
        offset: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        let asked = self.asked.remove(&offset).unwrap_or(0);
        let (size, eof, data) = match result {
            Ok(Reply::Data { size, eof, data }) => (size, eof, data),
            Ok(_) => return Err(unexpected(self.server, "read")),
            Err(error) => {
                return Err(remote(
                    self.server,
                    format!("reading \"{}\" at offset {offset}", self.path),
                    error,
                ))
            }
        };
        let got = (data.len() as u64).min(asked);
        if eof || got < asked {
            let end = offset + got;
            self.end = Some(self.end.map_or(end, |e| e.min(end)));
        }
        if size != self.total {
            // Written while we read: what arrived is a mix of versions.
            return Err(ClientError::SizeChanged {
                remote: self.path.to_string(),
                was: self.total,
                now: size,
            });
        }
        let end = self.end.unwrap_or(u64::MAX);
        if offset >= end || data.is_empty() {
            return self.drain(end);
        }
        let keep = (end - offset).min(got) as usize;
        if offset == self.delivered {
            self.deliver(&data[..keep])?;
        } else if offset > self.delivered {
            self.pending.insert(offset, data[..keep].to_vec());
        }
        self.drain(end)
    }
}

impl ReadStream<'_> {
    /// Deliver the pending replies that are next in order, up to `end`.
    fn drain(&mut self, end: u64) -> Result<(), ClientError> {
        while self.delivered < end {
            let Some(bytes) = self.pending.remove(&self.delivered) else {
                break;
            };
            let keep = (end - self.delivered).min(bytes.len() as u64) as usize;
            self.deliver(&bytes[..keep])?;
        }
        self.pending.retain(|&o, _| o < end);
        Ok(())
    }
}

/// A reader that hashes what it reads.
struct HashingReader<'a> {
    inner: &'a mut File,
    hasher: &'a mut Xxh3,
}

impl Read for HashingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}
