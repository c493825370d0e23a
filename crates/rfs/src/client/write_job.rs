//! The job behind `write_at` (ops.rs) and `put` (bulk.rs): chunks of a
//! reader written at increasing offsets, each acknowledged count checked
//! against what was sent. Its own file so that neither of its two users
//! imports the other.

use super::{check_stop, remote, unexpected, Progress};
use crate::error::ClientError;
use crate::pipeline::{Encoder, Job};
use crate::protocol::{Handle, RemoteError, Reply, Request};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

/// `write` and `put`: chunks of a reader written at increasing offsets.
pub(super) struct WriteFrom<'a> {
    handle: Handle,
    next: u64,
    source: &'a mut dyn Read,
    source_done: bool,
    /// What the source is, for errors ("the data", a local file).
    pub(super) source_name: String,
    chunk: Vec<u8>,
    packet: usize,
    /// Length of each request in flight, by offset.
    in_flight: HashMap<u64, usize>,
    pub(super) acked: u64,
    pub(super) total: u64,
    pub(super) progress: Option<&'a mut dyn FnMut(Progress)>,
    server: SocketAddr,
    path: &'a str,
    pub(super) stop: Option<&'a AtomicBool>,
}

impl<'a> WriteFrom<'a> {
    pub(super) fn new(
        handle: Handle,
        offset: u64,
        source: &'a mut dyn Read,
        packet: usize,
        server: SocketAddr,
        path: &'a str,
    ) -> WriteFrom<'a> {
        WriteFrom {
            handle,
            next: offset,
            source,
            source_done: false,
            source_name: "the data".into(),
            chunk: vec![0u8; packet],
            packet,
            in_flight: HashMap::new(),
            acked: 0,
            total: 0,
            progress: None,
            server,
            path,
            stop: None,
        }
    }

    /// Fill `chunk` from the source; the bytes read.
    fn fill(&mut self) -> Result<usize, ClientError> {
        let mut n = 0;
        while n < self.packet {
            match self.source.read(&mut self.chunk[n..self.packet]) {
                Ok(0) => {
                    self.source_done = true;
                    break;
                }
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(ClientError::io(
                        format!("cannot read {} for \"{}\"", self.source_name, self.path),
                        e,
                    ))
                }
            }
        }
        Ok(n)
    }
}

impl Job for WriteFrom<'_> {
    fn next(&mut self, enc: &mut Encoder<'_>) -> Result<Option<u64>, ClientError> {
        check_stop(self.stop)?;
        if self.source_done {
            return Ok(None);
        }
        let n = self.fill()?;
        if n == 0 {
            return Ok(None);
        }
        enc.request(&Request::Write {
            file: self.handle,
            offset: self.next,
            data: &self.chunk[..n],
        })?;
        let tag = self.next;
        self.in_flight.insert(tag, n);
        self.next += n as u64;
        Ok(Some(tag))
    }

    fn reply(
        &mut self,
        offset: u64,
        result: Result<Reply<'_>, RemoteError>,
    ) -> Result<(), ClientError> {
        let asked = self.in_flight.remove(&offset).unwrap_or(0);
        match result {
            Ok(Reply::Written { count, .. }) if count as usize == asked => {
                self.acked += count as u64;
                if let Some(p) = &mut self.progress {
                    p(Progress {
                        done: self.acked,
                        total: self.total,
                    });
                }
                Ok(())
            }
            Ok(Reply::Written { count, .. }) => Err(ClientError::Unexpected {
                server: self.server,
                what: format!(
                    "the server wrote {count} of {asked} bytes at offset {offset} of \"{}\"",
                    self.path
                ),
            }),
            Ok(_) => Err(unexpected(self.server, "write")),
            Err(error) => Err(remote(
                self.server,
                format!("writing \"{}\" at offset {offset}", self.path),
                error,
            )),
        }
    }
}
