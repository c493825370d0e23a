//! A file descriptor owned by an experiment, closed on drop (also when a
//! measurement fails half-way), and the raw calls the os.* experiments share.

use osprobe_core::ExperimentError;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// An open descriptor, closed on drop.
#[derive(Debug)]
pub struct Fd(pub libc::c_int);

impl Fd {
    /// Wrap the result of a call returning a descriptor, or say what failed.
    pub fn check(fd: libc::c_int, what: &str) -> Result<Fd, ExperimentError> {
        if fd < 0 {
            Err(ExperimentError::last_os(what))
        } else {
            Ok(Fd(fd))
        }
    }

    /// `open(path, flags)` with O_CLOEXEC, mode 0600 when creating.
    pub fn open(path: &Path, flags: libc::c_int) -> Result<Fd, ExperimentError> {
        let c = c_path(path)?;
        // SAFETY: c is NUL-terminated.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600) };
        Fd::check(fd, &format!("opening {}", path.display()))
    }

    /// Give up ownership without closing.
    pub fn into_raw(self) -> libc::c_int {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

/// A path as a C string, or an error naming it.
pub fn c_path(path: &Path) -> Result<CString, ExperimentError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|e| ExperimentError::io(format!("path {}", path.display()), e.into()))
}

/// A pipe: (read end, write end), both close-on-exec.
pub fn pipe() -> Result<(Fd, Fd), ExperimentError> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(ExperimentError::last_os("pipe2"));
    }
    Ok((Fd(fds[0]), Fd(fds[1])))
}

/// An AF_UNIX stream socket pair, both close-on-exec.
pub fn unix_stream_pair() -> Result<(Fd, Fd), ExperimentError> {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(ExperimentError::last_os("socketpair(AF_UNIX, SOCK_STREAM)"));
    }
    Ok((Fd(fds[0]), Fd(fds[1])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_carries_bytes_and_closes_on_drop() {
        let (r, w) = pipe().unwrap();
        let raw = r.0;
        // SAFETY: one byte to and from our own pipe.
        unsafe {
            assert_eq!(libc::write(w.0, b"x".as_ptr().cast(), 1), 1);
            let mut b = 0u8;
            assert_eq!(libc::read(r.0, (&mut b as *mut u8).cast(), 1), 1);
            assert_eq!(b, b'x');
        }
        drop(r);
        // SAFETY: F_GETFD on a closed descriptor only fails.
        assert_eq!(unsafe { libc::fcntl(raw, libc::F_GETFD) }, -1);
    }

    #[test]
    fn a_bad_path_names_itself() {
        let e = Fd::open(Path::new("/nonexistent/osprobe-x"), libc::O_RDONLY).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/osprobe-x"), "{e}");
    }
}
