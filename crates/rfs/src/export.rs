//! Confinement: the server reaches every file through one directory
//! descriptor, the exported directory, and never leaves it.
//!
//! A path inside the export is a [`RelPath`]: components that each passed
//! [`validate_name`](crate::protocol::validate_name) (no `/`, no NUL, not
//! `.` or `..`), so a path is never absolute and never climbs. What is left
//! is symbolic links, and rfs does not follow any: a link inside the export
//! is listed by readdir, but lookup, open, create and remove act on the link
//! itself or refuse it. Two ways to resolve a path, chosen at start-up:
//!
//! - [`Resolver::Openat2`] (Linux 5.6+): one `openat2` call relative to the
//!   export's descriptor with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS`. The kernel refuses any step outside the
//!   directory, including one caused by a concurrent rename (it answers
//!   EAGAIN, and we retry a few times).
//! - [`Resolver::Walk`] elsewhere (older kernels, seccomp filters that deny
//!   openat2): component by component, each intermediate directory opened
//!   with `O_PATH | O_DIRECTORY | O_NOFOLLOW` relative to the previous one,
//!   the last one with `O_NOFOLLOW`. A symbolic link at any step fails
//!   (ENOTDIR or ELOOP). The one thing the walk cannot see is a directory
//!   on the path being renamed out of the export by a local process while
//!   the walk is inside it; openat2 closes that window.
//!
//! Operations on a name in a directory (create, stat, remove) open the
//! parent this way and then use the `*at` system calls on the single name
//! with `O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW`, so a link planted under the
//! name (even a dangling one pointing outside) is never followed: creating
//! through it fails instead of creating the link's target.
//!
//! Files are opened with `O_NONBLOCK` so a FIFO planted in the export cannot
//! hang a server thread, and their type is checked after opening.

use crate::protocol::{Attr, Kind};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Longest path inside the export (Linux PATH_MAX minus the NUL).
pub const MAX_PATH: usize = 4095;

/// A path inside the export: validated components joined by `/`; empty
/// for the export itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RelPath(Vec<u8>);

impl RelPath {
    pub fn root() -> RelPath {
        RelPath(Vec::new())
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// This path with `name` appended; `name` must have passed
    /// `validate_name`. None if the result is longer than [`MAX_PATH`].
    pub fn join(&self, name: &[u8]) -> Option<RelPath> {
        let len = self.0.len() + usize::from(!self.0.is_empty()) + name.len();
        if len > MAX_PATH {
            return None;
        }
        let mut p = Vec::with_capacity(len);
        p.extend_from_slice(&self.0);
        if !self.0.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        Some(RelPath(p))
    }

    /// The parent and the last name; None for the root.
    pub fn split_last(&self) -> Option<(RelPath, &[u8])> {
        if self.0.is_empty() {
            return None;
        }
        match self.0.iter().rposition(|&b| b == b'/') {
            Some(i) => Some((RelPath(self.0[..i].to_vec()), &self.0[i + 1..])),
            None => Some((RelPath::root(), &self.0[..])),
        }
    }

    fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|&b| b == b'/').filter(|c| !c.is_empty())
    }

    fn to_cstring(&self) -> io::Result<CString> {
        let bytes = if self.0.is_empty() {
            b".".to_vec()
        } else {
            self.0.clone()
        };
        CString::new(bytes).map_err(|_| invalid("a path contains a NUL byte"))
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

fn cname(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| invalid("a name contains a NUL byte"))
}

/// How paths are resolved beneath the export (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    Openat2,
    Walk,
}

/// The exported directory.
#[derive(Debug)]
pub struct Export {
    root: OwnedFd,
    path: PathBuf,
    resolver: Resolver,
}

const RESOLVE_FLAGS: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

impl Export {
    /// Open `path` as an export. `resolver` None picks openat2 when the
    /// kernel has it.
    pub fn open(path: &Path, resolver: Option<Resolver>) -> io::Result<Export> {
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            invalid(&format!(
                "export directory {}: the path contains a NUL byte",
                path.display()
            ))
        })?;
        // SAFETY: `c` is a valid NUL-terminated string for the duration of
        // the call; the returned descriptor is checked before it is owned.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!(
                    "export directory {}: {e} (an existing directory is needed)",
                    path.display()
                ),
            ));
        }
        // SAFETY: `fd` was just returned by open and is owned by nobody else.
        let root = unsafe { OwnedFd::from_raw_fd(fd) };
        let resolver = match resolver {
            Some(r) => r,
            None => {
                match openat2(
                    root.as_raw_fd(),
                    c".",
                    libc::O_PATH | libc::O_DIRECTORY,
                    0,
                    RESOLVE_FLAGS,
                ) {
                    Ok(_) => Resolver::Openat2,
                    Err(_) => Resolver::Walk,
                }
            }
        };
        Ok(Export {
            root,
            path: path.to_path_buf(),
            resolver,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// Open `rel` beneath the export with `flags` (`O_CLOEXEC` and, for the
    /// walk, `O_NOFOLLOW` are added). `mode` is used with `O_CREAT` only.
    pub fn open_at(&self, rel: &RelPath, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
        match self.resolver {
            Resolver::Openat2 => {
                let path = rel.to_cstring()?;
                let mode = if flags & libc::O_CREAT != 0 { mode } else { 0 };
                let mut tries = 0;
                loop {
                    match openat2(self.root.as_raw_fd(), &path, flags, mode, RESOLVE_FLAGS) {
                        // EAGAIN: a rename raced with the resolution.
                        Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 8 => tries += 1,
                        other => return other,
                    }
                }
            }
            Resolver::Walk => {
                let mut parts: Vec<&[u8]> = rel.components().collect();
                let last = parts.pop();
                let mut dir: Option<OwnedFd> = None;
                for part in parts {
                    let at = dir
                        .as_ref()
                        .map_or(self.root.as_raw_fd(), |d| d.as_raw_fd());
                    let next = openat(
                        at,
                        &cname(part)?,
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                        0,
                    )?;
                    dir = Some(next);
                }
                let at = dir
                    .as_ref()
                    .map_or(self.root.as_raw_fd(), |d| d.as_raw_fd());
                let name = match last {
                    Some(n) => cname(n)?,
                    None => c".".to_owned(),
                };
                openat(at, &name, flags | libc::O_NOFOLLOW, mode)
            }
        }
    }

    /// An `O_PATH` descriptor of the directory `rel`, for the `*at` calls.
    pub fn open_dir(&self, rel: &RelPath) -> io::Result<OwnedFd> {
        self.open_at(rel, libc::O_PATH | libc::O_DIRECTORY, 0)
    }
}

/// `struct open_how` of openat2(2), version 0 (24 bytes). libc's own is
/// marked non-exhaustive, so it cannot be built field by field.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn openat2(
    dirfd: RawFd,
    path: &CStr,
    flags: libc::c_int,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: u64::from(mode),
        resolve,
    };
    // SAFETY: `path` is NUL-terminated and `how` has the kernel's layout of
    // open_how version 0, whose size we pass; both outlive the call. The
    // result is checked before it is turned into an owned descriptor.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return of openat2 is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn openat(dirfd: RawFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and outlives the call; the result is
    // checked before it is owned.
    let fd = unsafe {
        libc::openat(
            dirfd,
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return of openat is a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open (and maybe create) the single name `name` in the directory `dir`,
/// never following a symbolic link there.
pub fn open_in(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    openat(
        dir.as_raw_fd(),
        &cname(name)?,
        flags | libc::O_NOFOLLOW,
        mode,
    )
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn stat_in(dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<libc::stat> {
    let c = cname(name)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `c` is NUL-terminated and `st` points to writable memory of
    // the right type; both outlive the call.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// `fstat(fd)`.
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `st` points to writable memory of the right type.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it filled `st`.
    Ok(unsafe { st.assume_init() })
}

/// Remove the name `name` from `dir` (an empty directory with `is_dir`).
/// A symbolic link is removed itself, never its target.
pub fn unlink_in(dir: BorrowedFd<'_>, name: &[u8], is_dir: bool) -> io::Result<()> {
    let c = cname(name)?;
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The kind of a file from its `st_mode`.
pub fn kind_of(st_mode: libc::mode_t) -> Kind {
    match st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    }
}

fn ns(sec: i64, nsec: i64) -> i64 {
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// Protocol attributes from a `stat`.
pub fn attr_of(st: &libc::stat) -> Attr {
    Attr {
        kind: kind_of(st.st_mode),
        mode: st.st_mode & 0o7777,
        size: u64::try_from(st.st_size).unwrap_or(0),
        mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
        atime_ns: ns(st.st_atime, st.st_atime_nsec),
    }
}

/// The identity of a file: device and inode.
pub fn identity(st: &libc::stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// Read directory entries from `dir` (opened `O_RDONLY | O_DIRECTORY`)
/// after `cookie` (0 for the start). `take` is called with each entry's
/// cookie (where the next call continues), kind and name, `.` and `..`
/// left out; it returns false to refuse an entry, which ends the page
/// without it. Returns whether the end of the directory was reached.
pub fn read_dir(
    dir: OwnedFd,
    cookie: u64,
    mut take: impl FnMut(u64, Kind, &[u8]) -> bool,
) -> io::Result<bool> {
    let raw = dir.into_raw_fd();
    // SAFETY: `raw` is an open directory descriptor we own; on success
    // fdopendir takes it over (closedir closes it), on failure we close it.
    let dirp = unsafe { libc::fdopendir(raw) };
    if dirp.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    let stream = DirStream(dirp);
    if cookie != 0 {
        // SAFETY: `stream.0` is a valid DIR*; a bad position makes later
        // readdir calls fail or return nothing, never misbehave.
        unsafe { libc::seekdir(stream.0, cookie as libc::c_long) };
    }
    loop {
        // SAFETY: resetting errno so that a NULL from readdir can be told
        // apart from an error; __errno_location returns this thread's errno.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream.0` is a valid DIR* used by this thread only.
        let ent = unsafe { libc::readdir(stream.0) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(0) | None => Ok(true),
                Some(_) => Err(e),
            };
        }
        // SAFETY: readdir returned a valid dirent that stays valid until the
        // next readdir or closedir on this stream; d_name is NUL-terminated.
        let (name, d_type, d_off) = unsafe {
            let ent = &*ent;
            (
                CStr::from_ptr(ent.d_name.as_ptr()).to_bytes(),
                ent.d_type,
                ent.d_off,
            )
        };
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match d_type {
            libc::DT_REG => Kind::File,
            libc::DT_DIR => Kind::Dir,
            libc::DT_LNK => Kind::Symlink,
            libc::DT_UNKNOWN => {
                // SAFETY: dirfd of a valid DIR* is a descriptor that lives as
                // long as the stream, which outlives this borrow.
                let fd = unsafe { BorrowedFd::borrow_raw(libc::dirfd(stream.0)) };
                stat_in(fd, name).map_or(Kind::Other, |st| kind_of(st.st_mode))
            }
            _ => Kind::Other,
        };
        let next = u64::try_from(d_off).unwrap_or(0);
        if !take(next, kind, name) {
            return Ok(false);
        }
    }
}

struct DirStream(*mut libc::DIR);

impl Drop for DirStream {
    fn drop(&mut self) {
        // SAFETY: the DIR* came from fdopendir and is closed exactly once.
        unsafe { libc::closedir(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn exports(dir: &Path) -> Vec<Export> {
        let mut v = vec![Export::open(dir, Some(Resolver::Walk)).unwrap()];
        let auto = Export::open(dir, None).unwrap();
        if auto.resolver() == Resolver::Openat2 {
            v.push(auto);
        }
        v
    }

    fn rel(parts: &[&str]) -> RelPath {
        let mut p = RelPath::root();
        for part in parts {
            p = p.join(part.as_bytes()).unwrap();
        }
        p
    }

    #[test]
    fn relpaths_join_and_split() {
        let p = rel(&["a", "b", "c"]);
        assert_eq!(p.as_bytes(), b"a/b/c");
        let (parent, name) = p.split_last().unwrap();
        assert_eq!((parent.as_bytes(), name), (&b"a/b"[..], &b"c"[..]));
        let a = rel(&["a"]);
        let (parent, name) = a.split_last().unwrap();
        assert!(parent.is_root());
        assert_eq!(name, b"a");
        assert!(RelPath::root().split_last().is_none());
        let long = "x".repeat(255);
        let mut p = RelPath::root();
        let mut n = 0;
        while let Some(next) = p.join(long.as_bytes()) {
            p = next;
            n += 1;
        }
        assert!(p.as_bytes().len() <= MAX_PATH);
        assert_eq!(n, 16);
    }

    #[test]
    fn symlinks_are_never_followed() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        let export = tempfile::tempdir().unwrap();
        let root = export.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/f"), b"inside").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("s")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("inlink")).unwrap();
        for ex in exports(root) {
            let r = ex.resolver();
            // A regular path works.
            assert!(ex.open_at(&rel(&["sub", "f"]), libc::O_RDONLY, 0).is_ok());
            // A link to a file outside, as the last component.
            assert!(
                ex.open_at(&rel(&["s"]), libc::O_RDONLY, 0).is_err(),
                "{r:?}"
            );
            // A link to a directory outside, as an intermediate component.
            assert!(
                ex.open_at(&rel(&["out", "secret"]), libc::O_RDONLY, 0)
                    .is_err(),
                "{r:?}"
            );
            assert!(ex.open_dir(&rel(&["out"])).is_err(), "{r:?}");
            // Even a link that stays inside is not followed.
            assert!(
                ex.open_at(&rel(&["inlink", "f"]), libc::O_RDONLY, 0)
                    .is_err(),
                "{r:?}"
            );
            // Creating through a dangling link does not create its target.
            let target = outside.path().join("created");
            std::os::unix::fs::symlink(&target, root.join("dangling")).unwrap();
            let dir = ex.open_dir(&RelPath::root()).unwrap();
            assert!(open_in(
                dir.as_fd(),
                b"dangling",
                libc::O_CREAT | libc::O_RDWR,
                0o644
            )
            .is_err());
            assert!(ex
                .open_at(&rel(&["dangling"]), libc::O_CREAT | libc::O_RDWR, 0o644)
                .is_err());
            assert!(!target.exists(), "{r:?} followed a dangling link");
            std::fs::remove_file(root.join("dangling")).unwrap();
            // stat_in describes the link, not its target.
            let st = stat_in(dir.as_fd(), b"s").unwrap();
            assert_eq!(kind_of(st.st_mode), Kind::Symlink);
            // Removing a link removes the link only.
            std::os::unix::fs::symlink(outside.path().join("secret"), root.join("rm")).unwrap();
            unlink_in(dir.as_fd(), b"rm", false).unwrap();
            assert!(outside.path().join("secret").exists());
        }
    }

    #[test]
    fn read_dir_pages_with_cookies() {
        let d = tempfile::tempdir().unwrap();
        for i in 0..50 {
            std::fs::write(d.path().join(format!("f{i:02}")), b"").unwrap();
        }
        std::fs::create_dir(d.path().join("dir")).unwrap();
        std::os::unix::fs::symlink("f00", d.path().join("link")).unwrap();
        let ex = Export::open(d.path(), None).unwrap();
        let mut seen = Vec::new();
        let mut cookie = 0;
        loop {
            let fd = ex
                .open_at(&RelPath::root(), libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .unwrap();
            let mut n = 0;
            let eof = read_dir(fd, cookie, |c, kind, name| {
                if n == 7 {
                    return false;
                }
                n += 1;
                cookie = c;
                seen.push((String::from_utf8(name.to_vec()).unwrap(), kind));
                true
            })
            .unwrap();
            if eof {
                break;
            }
        }
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(seen.len(), 52);
        assert!(seen.contains(&("dir".into(), Kind::Dir)));
        assert!(seen.contains(&("link".into(), Kind::Symlink)));
        assert!(seen.contains(&("f49".into(), Kind::File)));
        seen.dedup();
        assert_eq!(seen.len(), 52, "no entry twice");
    }

    #[test]
    fn a_missing_export_is_named() {
        let e = Export::open(Path::new("/nonexistent/rfs-export"), None).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/rfs-export"), "{e}");
    }
}
