//! Atomic uploads: `PutBegin`, writes to the upload's handle, `PutCommit`
//! or `PutAbort`.
//!
//! A put never writes the file it replaces. `PutBegin` creates a temporary
//! file beside the target, exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`)
//! under a random name (`.NAME.osprobe-put-…`, below), and answers with an
//! *upload handle*: the handle table's epoch and an index with
//! [`UPLOAD_BIT`] set, which `Write`, `Read`, `Hash` and `Commit` accept
//! like any file handle, from the session that began it only. The client
//! hashes the upload (the same end-to-end check as before) and sends
//! `PutCommit`, which flushes the file and renames it over the target in
//! one step: a reader sees the old file or the new one, never a mix.
//!
//! The session holds its uploads. When it ends, however it ends (goodbye,
//! a dropped TCP connection, a killed client's UDP session expiring, an
//! eviction), the uploads are dropped with it and [`Upload`]'s `Drop`
//! removes their temporary files: the old file is intact and nothing is
//! left behind. A server killed during an upload leaves its temporary file,
//! so the name carries the server's pid and start time
//! (`.NAME.osprobe-put-PID-START-RANDOM`, see `osprobe_core::owner`): a
//! server removes the uploads of dead servers from the export's root when
//! it starts, and from any other directory the first time it puts there.
//!
//! The same mechanism gives the pager a swap file of its own on the server
//! that no other client collides with and that disappears with the
//! session: an upload never committed (`Client::create_scratch`).

use super::{err, io_error, lock, quoted, show_path, OpResult, Service};
use crate::auth;
use crate::export::{self, RelPath};
use crate::protocol::{ErrorCode, Handle, Kind, Reply, MAX_NAME};
use osprobe_core::owner::{Claim, Owner};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// Set in the index of every upload handle (the handle table's indexes
/// count up from 1 and never reach it).
pub(crate) const UPLOAD_BIT: u64 = 1 << 63;
/// Uploads one session may have open at once.
pub const MAX_UPLOADS_PER_SESSION: usize = 8;
/// The part of the target's name kept in the temporary name, so that the
/// temporary name stays within NAME_MAX.
const NAME_PREFIX: usize = MAX_NAME - 64;
/// What marks an upload's temporary name; the owner's tag follows.
const MARK: &str = ".osprobe-put-";
/// Directories swept of dead servers' uploads that are remembered (then
/// the memory starts over: a directory is swept again, which is harmless).
const MAX_SWEPT_DIRS: usize = 4096;

/// One upload in progress: its temporary file and where it goes.
pub(crate) struct Upload {
    index: u64,
    session: u64,
    /// The target's directory, as resolved at `PutBegin`, and its identity.
    dir: RelPath,
    dir_identity: (u64, u64),
    /// The directory, held so the temporary file can be removed by `Drop`
    /// whatever happened to its path.
    dir_fd: OwnedFd,
    name: Vec<u8>,
    temp: CString,
    pub(crate) file: Arc<File>,
    /// Renamed over the target: nothing left to remove.
    committed: AtomicBool,
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.committed.load(Ordering::Acquire) {
            // SAFETY: `temp` is NUL-terminated and `dir_fd` is an open
            // directory; both outlive the call. The name is our own random
            // one, created exclusively.
            unsafe { libc::unlinkat(self.dir_fd.as_raw_fd(), self.temp.as_ptr(), 0) };
        }
    }
}

/// The uploads of one session: they live as long as it does.
#[derive(Default)]
pub(crate) struct SessionUploads(Vec<Arc<Upload>>);

/// Whether `h` is an upload handle (not one of the handle table's).
pub(crate) fn is_upload(h: &Handle) -> bool {
    h.parts().1 & UPLOAD_BIT != 0
}

fn temp_name(name: &[u8], owner: &Owner, tag: u64) -> Vec<u8> {
    let keep = &name[..name.len().min(NAME_PREFIX)];
    let mut t = Vec::with_capacity(keep.len() + 64);
    t.push(b'.');
    t.extend_from_slice(keep);
    t.extend_from_slice(format!("{MARK}{}-{tag:016x}", owner.tag()).as_bytes());
    t
}

/// Whether `name` is an upload's temporary file whose server is gone.
fn is_dead_upload(name: &[u8]) -> bool {
    if name.first() != Some(&b'.') {
        return false;
    }
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    let Some(at) = name.rfind(MARK) else {
        return false;
    };
    match Claim::parse(&name[at + MARK.len()..], "") {
        Some(claim @ Claim::Exact(_)) => claim.owner_is_gone(),
        _ => false,
    }
}

/// Remove from the directory `dir` (open for reading) the temporary files
/// of uploads whose server is gone; returns how many.
pub(super) fn sweep_dead_uploads(dir: OwnedFd) -> usize {
    // read_dir consumes `dir`; a duplicate stays open for unlinkat.
    let Ok(path) = dir.try_clone() else {
        return 0;
    };
    let mut dead: Vec<CString> = Vec::new();
    let _ = export::read_dir(dir, 0, |_, kind, name| {
        if kind == Kind::File && is_dead_upload(name) {
            if let Ok(c) = CString::new(name) {
                dead.push(c);
            }
        }
        dead.len() < 1024 // a page at a time is plenty
    });
    let mut removed = 0;
    for name in dead {
        // SAFETY: `name` is NUL-terminated and `path` an open directory;
        // both outlive the call. Only names of dead servers' uploads.
        if unsafe { libc::unlinkat(path.as_raw_fd(), name.as_ptr(), 0) } == 0 {
            removed += 1;
        }
    }
    removed
}

impl Service {
    /// Sweep the directory `path` (with `identity`) of dead servers'
    /// uploads, unless this server did already.
    pub(super) fn sweep_once(&self, path: &RelPath, identity: (u64, u64)) {
        {
            let mut swept = lock(&self.swept_dirs);
            if swept.len() >= MAX_SWEPT_DIRS {
                swept.clear();
            }
            if !swept.insert(identity) {
                return;
            }
        }
        if let Ok(dir) = self.export.open_at(
            path,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NONBLOCK,
            0,
        ) {
            sweep_dead_uploads(dir);
        }
    }

    /// The open temporary file of upload handle `h` (for `open_file`).
    pub(super) fn upload_file(&self, h: &Handle) -> OpResult<Arc<File>> {
        self.upload(h).map(|u| Arc::clone(&u.file))
    }

    fn upload(&self, h: &Handle) -> OpResult<Arc<Upload>> {
        let (epoch, index) = h.parts();
        let ours = epoch == lock(&self.handles).root().parts().0;
        let found = if ours {
            lock(&self.uploads).get(&index).and_then(Weak::upgrade)
        } else {
            None
        };
        found.ok_or_else(|| {
            err(
                ErrorCode::Stale,
                "unknown upload (committed, discarded, its session ended, or the server restarted); put the file again",
            )
        })
    }

    /// Refuse an upload handle used by a session other than its own.
    pub(super) fn check_upload_owner(&self, session: u64, h: &Handle) -> OpResult<()> {
        if self.upload(h)?.session != session {
            return Err(err(
                ErrorCode::Access,
                "this upload belongs to another session",
            ));
        }
        Ok(())
    }

    /// Take upload `h` out of `session`'s uploads (commit and abort end it).
    fn take_upload(&self, session: u64, h: &Handle) -> OpResult<Arc<Upload>> {
        self.check_upload_owner(session, h)?;
        let s = lock(&self.sessions).get(&session).cloned();
        let index = h.parts().1;
        let taken = s.and_then(|s| {
            let mut list = lock(&s.uploads);
            let at = list.0.iter().position(|u| u.index == index)?;
            Some(list.0.swap_remove(at))
        });
        lock(&self.uploads).remove(&index);
        taken.ok_or_else(|| {
            err(
                ErrorCode::Stale,
                "unknown upload (already committed or discarded); put the file again",
            )
        })
    }

    pub(super) fn put_begin(
        &self,
        session: u64,
        dir: &Handle,
        name: &[u8],
        mode: u32,
        size: u64,
    ) -> OpResult<Reply<'static>> {
        self.check_writable()?;
        let d = self.resolve_dir(dir)?;
        let what = quoted(name);
        self.check_upload_size(size, &what)?;
        if d.path.join(name).is_none() {
            return Err(err(
                ErrorCode::NameTooLong,
                format!("{what}: the path is too long"),
            ));
        }
        let dfd = self.open_dir(&d)?;
        self.sweep_once(&d.path, d.identity);
        replaceable(dfd.as_fd(), name, &what)?;
        let Some(s) = lock(&self.sessions).get(&session).cloned() else {
            return Err(err(ErrorCode::BadSession, "the session ended"));
        };
        if lock(&s.uploads).0.len() >= MAX_UPLOADS_PER_SESSION {
            return Err(err(
                ErrorCode::Busy,
                format!(
                    "this session has {MAX_UPLOADS_PER_SESSION} uploads open already; commit or discard one"
                ),
            ));
        }
        let random = |what: &str| {
            auth::random_nonzero_u64().map_err(|e| io_error(&e, &format!("random {what}")))
        };
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_NONBLOCK | libc::O_NOCTTY;
        let mut tries = 0;
        let (temp, fd) = loop {
            let temp = temp_name(name, &Owner::current(), random("name")?);
            match export::open_in(dfd.as_fd(), &temp, flags, mode & 0o777) {
                Ok(fd) => break (temp, fd),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) && tries < 4 => tries += 1,
                Err(e) => return Err(io_error(&e, &format!("a temporary file beside {what}"))),
            }
        };
        let temp = CString::new(temp)
            .map_err(|_| err(ErrorCode::Invalid, format!("{what} contains a NUL byte")))?;
        let epoch = lock(&self.handles).root().parts().0;
        let index = UPLOAD_BIT | (random("upload id")? >> 1);
        let file = File::from(fd);
        // Built before anything can fail, so that `Drop` removes the
        // temporary file on every path below.
        let upload = Arc::new(Upload {
            index,
            session,
            dir: d.path.clone(),
            dir_identity: d.identity,
            dir_fd: dfd,
            name: name.to_vec(),
            temp,
            file: Arc::new(file),
            committed: AtomicBool::new(false),
        });
        reserve(&upload.file, size, &what)?;
        let st = export::stat_fd(upload.file.as_fd()).map_err(|e| io_error(&e, &what))?;
        {
            let mut all = lock(&self.uploads);
            all.retain(|_, u| u.strong_count() > 0);
            all.insert(index, Arc::downgrade(&upload));
        }
        lock(&s.uploads).0.push(upload);
        Ok(Reply::Handle {
            handle: Handle::from_parts(epoch, index),
            attr: export::attr_of(&st),
        })
    }

    /// An upload may not declare more than the server's file size bound.
    fn check_upload_size(&self, size: u64, what: &str) -> OpResult<()> {
        if size > self.config.max_file_size {
            return Err(err(
                ErrorCode::TooBig,
                format!(
                    "{what}: an upload of {size} bytes is larger than this server accepts ({} bytes at most)",
                    self.config.max_file_size
                ),
            ));
        }
        Ok(())
    }

    /// Flush the upload and rename it over its target. On any failure the
    /// upload is discarded (its temporary file removed) and the target is
    /// left as it was.
    pub(super) fn put_commit(&self, session: u64, h: &Handle) -> OpResult<Reply<'static>> {
        self.check_writable()?;
        let up = self.take_upload(session, h)?;
        let what = quoted(&up.name);
        let fail = |e: crate::protocol::RemoteError| {
            err(
                e.code,
                format!(
                    "{}; the upload was discarded and {what} is unchanged",
                    e.detail
                ),
            )
        };
        up.file
            .sync_all()
            .map_err(|e| fail(io_error(&e, "flushing the upload")))?;
        // The directory again, by its path beneath the export: it must still
        // be the one the put began in (not moved out of the export).
        let dir_what = show_path(&up.dir);
        let dfd = self
            .export
            .open_dir(&up.dir)
            .map_err(|e| fail(io_error(&e, &dir_what)))?;
        let st = export::stat_fd(dfd.as_fd()).map_err(|e| fail(io_error(&e, &dir_what)))?;
        if export::identity(&st) != up.dir_identity {
            return Err(fail(err(
                ErrorCode::Stale,
                format!("{dir_what} was moved or replaced during the upload"),
            )));
        }
        if let Ok(st) = export::stat_in(dfd.as_fd(), &up.name) {
            if export::kind_of(st.st_mode) == Kind::Dir {
                return Err(fail(err(
                    ErrorCode::IsDir,
                    format!("{what} became a directory"),
                )));
            }
        }
        let name = CString::new(up.name.clone())
            .map_err(|_| fail(err(ErrorCode::Invalid, "a name with a NUL byte")))?;
        // SAFETY: both names are NUL-terminated and `dfd` is an open
        // directory; all outlive the call. The temporary name is ours; the
        // target is a single validated name, and rename replaces the name
        // itself (a symbolic link there is replaced, never followed).
        let rc = unsafe {
            libc::renameat(
                dfd.as_raw_fd(),
                up.temp.as_ptr(),
                dfd.as_raw_fd(),
                name.as_ptr(),
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(fail(io_error(&e, &what)));
        }
        up.committed.store(true, Ordering::Release);
        // The rename is durable once the directory is.
        if let Ok(dir) = self.export.open_at(
            &up.dir,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NONBLOCK,
            0,
        ) {
            let _ = File::from(dir).sync_all();
        }
        if let Some(path) = up.dir.join(&up.name) {
            if let Some(i) = lock(&self.handles).forget(&path) {
                lock(&self.fds).forget(i);
            }
        }
        Ok(Reply::Done)
    }

    /// Discard an upload: its temporary file goes, the target stays.
    pub(super) fn put_abort(&self, session: u64, h: &Handle) -> OpResult<Reply<'static>> {
        drop(self.take_upload(session, h)?);
        Ok(Reply::Done)
    }
}

/// A put may create `name` in `dir` or replace a regular file there, never
/// a directory or anything else.
fn replaceable(dir: std::os::fd::BorrowedFd<'_>, name: &[u8], what: &str) -> OpResult<()> {
    match export::stat_in(dir, name) {
        Ok(st) => match export::kind_of(st.st_mode) {
            Kind::File => Ok(()),
            Kind::Dir => Err(err(ErrorCode::IsDir, format!("{what} is a directory"))),
            k => Err(err(
                ErrorCode::Invalid,
                format!(
                    "{what} is a {}; a put replaces regular files only",
                    k.name()
                ),
            )),
        },
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(io_error(&e, what)),
    }
}

/// Reserve `size` bytes of disk for an upload before a byte is written
/// (the file's size stays 0), so a put that cannot fit is refused at its
/// start with NOSPC, not by a full disk halfway. A file system without
/// fallocate (EOPNOTSUPP) reserves nothing; the writes then find out.
fn reserve(file: &File, size: u64, what: &str) -> OpResult<()> {
    let Ok(len) = libc::off_t::try_from(size) else {
        return Err(err(ErrorCode::TooBig, format!("{what}: {size} bytes")));
    };
    if len == 0 {
        return Ok(());
    }
    // SAFETY: fallocate(2) on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) => Ok(()),
        Some(libc::ENOSPC | libc::EDQUOT) => Err(err(
            ErrorCode::NoSpace,
            format!("{what}: the server has no room for an upload of {size} bytes ({e})"),
        )),
        _ => Err(io_error(&e, &format!("reserving {size} bytes for {what}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_names_stay_within_name_max_and_start_with_a_dot() {
        let long = vec![b'x'; MAX_NAME];
        let worst = Owner {
            pid: u32::MAX,
            start: u64::MAX,
        };
        let t = temp_name(&long, &worst, u64::MAX);
        assert!(t.len() <= MAX_NAME, "{}", t.len());
        assert_eq!(t[0], b'.');
        crate::protocol::validate_name(&t).unwrap();
        let owner = Owner { pid: 12, start: 34 };
        let t = temp_name(b"report.pdf", &owner, 0xab);
        assert_eq!(t, b".report.pdf.osprobe-put-12-34-00000000000000ab");
    }

    #[test]
    fn only_uploads_of_dead_servers_are_dead() {
        let me = Owner::current();
        let live = temp_name(b"f", &me, 1);
        assert!(!is_dead_upload(&live));
        // The same pid started at another time: a server that is gone.
        let reused = Owner {
            pid: me.pid,
            start: me.start + 1,
        };
        assert!(is_dead_upload(&temp_name(b"f", &reused, 1)));
        // Names that are not uploads, or say no exact owner, stay.
        for name in [
            &b"f.osprobe-put-1-2-3"[..],
            b".f.osprobe-put-",
            b".f.osprobe-put-abc",
            b".f.osprobe-put-4000000-0000000000000001",
            b"report.pdf",
        ] {
            assert!(!is_dead_upload(name), "{}", String::from_utf8_lossy(name));
        }
    }
}
