//! Programs loaded over the file service (the SOS design document section
//! 9: SOS read each program's ELF from its NFS server): `proc.spawn
//! binary=rfs`.
//!
//! The experiment starts an `rfs` server on one of the rfs experiments'
//! paths (loopback, a network namespace, the link emulator), puts
//! osprobe's tiny static ELF into its export, and for every run of the
//! program reads the file over the service into an anonymous memory file
//! (memfd_create) and starts it from there: no local file is involved.
//!
//! Why the detours:
//!
//! - A memfd is opened read-write, and the kernel refuses to execute a
//!   file that is open for writing (ETXTBSY). Once written, the memfd is
//!   reopened read-only through /proc/self/fd and the writable descriptor
//!   closed, so nothing holds it open for writing at exec.
//! - fork+exec starts it with execveat(fd, "", AT_EMPTY_PATH) (what
//!   fexecve does); posix_spawn takes only a path, so it is given
//!   /proc/self/fd/N, which the kernel opens in the child before the
//!   descriptor's close-on-exec takes effect.
//! - A static ELF needs nothing else. A dynamic one would run too, but its
//!   interpreter (ld.so) and libraries would come from the local disk, so
//!   the tiny static ELF is what shows loading over the service.
//! - The bytes are checked to be an ELF executable for this machine
//!   before they are run, so a wrong file is a clear error rather than a
//!   child that exits 127.

use crate::error::ElfError;
use crate::tiny_elf;
use osprobe_core::{ExperimentError, Params};
use osprobe_rfs::experiments::TestPath;
use osprobe_rfs::{Client, ClientOptions, OpenMode};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The name of the program in the export.
pub const REMOTE_NAME: &str = "true";

/// The largest program loaded (a bound on what the server's size makes
/// us allocate).
pub const MAX_PROGRAM: u64 = 64 << 20;

/// An rfs server on a path, serving one program, and a client of it.
pub struct RemoteProgram {
    // Field order is drop order: the client goes before its server.
    client: Client,
    path: TestPath,
    remote: String,
}

impl RemoteProgram {
    /// Build the path `params` names (`path`, `delay`), put `image` into its
    /// export as `name` (mode 0755) and connect a client.
    pub fn serve(
        params: &Params,
        name: &str,
        image: &[u8],
    ) -> Result<RemoteProgram, ExperimentError> {
        let path = TestPath::open(params)?;
        let file = path.export().join(name);
        std::fs::write(&file, image).map_err(|e| {
            ExperimentError::io(format!("writing {} into the export", file.display()), e)
        })?;
        let client = path.client(ClientOptions::default())?;
        Ok(RemoteProgram {
            client,
            path,
            remote: name.to_string(),
        })
    }

    /// The path in words, for notes.
    pub fn description(&self) -> &str {
        &self.path.description
    }

    /// How the client talks to the server, for notes.
    pub fn client_note(&self) -> String {
        format!(
            "rfs over {}, {} requests of up to {} bytes in flight",
            self.client.transport().name(),
            self.client.window(),
            self.client.packet()
        )
    }

    /// Requests the client has sent so far.
    pub fn requests(&self) -> u64 {
        self.client.stats().requests
    }

    /// Read the program over the service into a fresh memfd, checked.
    pub fn fetch(&mut self) -> Result<LoadedProgram, ExperimentError> {
        let bytes = read_remote(&mut self.client, &self.remote)?;
        let what = format!("rfs://{}/{}", self.client.server(), self.remote);
        check_elf(&bytes).map_err(|why| {
            ExperimentError::failed(
                format!("{what} is not an ELF executable for this machine"),
                why,
            )
        })?;
        LoadedProgram::from_bytes(&bytes, &what)
    }
}

/// The whole of `remote`, read with the SOS calls (open, fstat, read,
/// close).
fn read_remote(client: &mut Client, remote: &str) -> Result<Vec<u8>, ExperimentError> {
    let failed = |what: &str, e: osprobe_rfs::ClientError| {
        ExperimentError::failed(format!("{what} \"{remote}\" over rfs"), e)
    };
    let fd = client
        .open(remote, OpenMode::Read)
        .map_err(|e| failed("opening", e))?;
    let read = (|| {
        let size = client.fstat(fd).map_err(|e| failed("stat of", e))?.size;
        if size > MAX_PROGRAM {
            return Err(ExperimentError::Failed(format!(
                "\"{remote}\" over rfs is {size} bytes; programs of at most {MAX_PROGRAM} bytes are loaded"
            )));
        }
        let mut bytes = vec![0u8; size as usize];
        let n = client
            .read_at(fd, 0, &mut bytes)
            .map_err(|e| failed("reading", e))?;
        bytes.truncate(n);
        Ok(bytes)
    })();
    let closed = client.close(fd).map_err(|e| failed("closing", e));
    let bytes = read?;
    closed?;
    Ok(bytes)
}

/// The ELF machine number of this architecture, as the tiny ELF uses.
fn this_machine() -> Option<u16> {
    tiny_elf::machine_for_arch()
}

/// Whether `bytes` look like an ELF executable the kernel will run here:
/// the magic, 64-bit little-endian, an executable or position-independent
/// type, this machine, and program headers inside the file. The reason
/// when not.
pub fn check_elf(bytes: &[u8]) -> Result<(), ElfError> {
    const EHDR: usize = 64;
    if bytes.len() < 4 || &bytes[..4] != b"\x7fELF" {
        let start: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(ElfError::NotElf {
            len: bytes.len(),
            start: start.join(" "),
            script: bytes.starts_with(b"#!"),
        });
    }
    if bytes.len() < EHDR {
        return Err(ElfError::Short(bytes.len()));
    }
    if bytes[4] != 2 {
        return Err(ElfError::Class(bytes[4]));
    }
    if bytes[5] != 1 {
        return Err(ElfError::Encoding(bytes[5]));
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let e_type = u16_at(16);
    if e_type != 2 && e_type != 3 {
        return Err(ElfError::Type(e_type));
    }
    let machine = u16_at(18);
    match this_machine() {
        Some(here) if here != machine => {
            return Err(ElfError::Machine {
                machine,
                here,
                arch: std::env::consts::ARCH,
            })
        }
        _ => {}
    }
    let phoff = u64_at(32);
    let phentsize = u64::from(u16_at(54));
    let phnum = u64::from(u16_at(56));
    let end = phoff.saturating_add(phentsize.saturating_mul(phnum));
    if phnum == 0 || end > bytes.len() as u64 {
        return Err(ElfError::Headers {
            count: phnum,
            offset: phoff,
            size: phentsize,
            len: bytes.len(),
        });
    }
    Ok(())
}

/// A program in an anonymous memory file, open read-only, ready to run.
pub struct LoadedProgram {
    fd: OwnedFd,
    /// /proc/self/fd/N, for posix_spawn.
    proc_path: CString,
}

impl LoadedProgram {
    /// Copy `bytes` into a new memfd and reopen it read-only (see the
    /// module documentation); `what` names the source in errors.
    pub fn from_bytes(bytes: &[u8], what: &str) -> Result<LoadedProgram, ExperimentError> {
        let name = c"osprobe-rfs-program";
        // SAFETY: the name is a NUL-terminated string; the flags are valid.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(ExperimentError::last_os("memfd_create"));
        }
        // SAFETY: memfd_create returned a new descriptor we own.
        let writable = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut file = std::fs::File::from(writable);
        std::io::Write::write_all(&mut file, bytes)
            .map_err(|e| ExperimentError::io(format!("copying {what} into a memfd"), e))?;
        let writable_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        let c_writable = CString::new(writable_path.clone()).expect("no NUL in a /proc path");
        // SAFETY: the path is NUL-terminated; the flags are valid.
        let raw = unsafe { libc::open(c_writable.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(ExperimentError::io(
                format!("reopening the memfd read-only through {writable_path}"),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: open returned a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // The writable descriptor closes here: nothing holds the memfd
        // open for writing when it is executed.
        drop(file);
        let proc_path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .expect("no NUL in a /proc path");
        Ok(LoadedProgram { fd, proc_path })
    }

    /// /proc/self/fd/N, a path the kernel can execute.
    pub fn proc_path(&self) -> &CString {
        &self.proc_path
    }

    /// fork, then execveat(fd, "", AT_EMPTY_PATH) in the child; the child's
    /// pid. A child whose exec fails exits 127.
    pub fn fork_execveat(
        &self,
        argv: &[*mut libc::c_char; 2],
        envp: &[*mut libc::c_char; 1],
    ) -> Result<libc::pid_t, ExperimentError> {
        let fd = self.fd.as_raw_fd();
        let empty = c"";
        // SAFETY: the child only makes the execveat system call and _exit
        // (async-signal-safe) on data prepared before the fork.
        match unsafe { libc::fork() } {
            -1 => Err(ExperimentError::last_os("fork")),
            0 => unsafe {
                libc::syscall(
                    libc::SYS_execveat,
                    fd,
                    empty.as_ptr(),
                    argv.as_ptr(),
                    envp.as_ptr(),
                    libc::AT_EMPTY_PATH,
                );
                libc::_exit(127)
            },
            child => Ok(child),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Spawn;
    use osprobe_core::{Context, Experiment, Profile};

    /// The tiny ELF over rfs on `path`: started both ways, each run exits 0
    /// (a child that does not is an error of the run).
    fn spawn_over(path: &str, delay: Option<&str>) {
        let ctx = Context::for_tests(Profile::Smoke);
        for method in ["posix_spawn", "fork_exec"] {
            let mut p = Params::new()
                .with("method", method)
                .with("binary", "rfs")
                .with("path", path);
            if let Some(d) = delay {
                p = p.with("delay", d);
            }
            let ms = Spawn.run(&ctx, &p).unwrap_or_else(|e| panic!("{p}: {e}"));
            let names: Vec<&str> = ms.iter().map(|m| m.metric.as_str()).collect();
            assert_eq!(names, [method, "fetch"]);
            assert!(ms.iter().all(|m| m.summary.n > 0 && m.summary.min > 0.0));
            assert!(
                ms[0].notes.iter().any(|n| n.contains("memfd")),
                "{:?}",
                ms[0].notes
            );
        }
    }

    #[test]
    fn an_elf_over_rfs_on_loopback_runs_and_exits_zero() {
        if tiny_elf::image().is_none() {
            osprobe_core::testing::skip("no static executable image for this architecture");
            return;
        }
        spawn_over("loopback", None);
    }

    #[test]
    fn an_elf_over_rfs_through_the_emulator_runs_and_exits_zero() {
        if tiny_elf::image().is_none() {
            osprobe_core::testing::skip("no static executable image for this architecture");
            return;
        }
        if let Err(why) = osprobe_rfs::experiments::emulator_available() {
            osprobe_core::testing::skip(format!("the link emulator: {why}"));
            return;
        }
        spawn_over("emulated", Some("1ms"));
    }

    #[test]
    fn a_bad_elf_over_rfs_is_a_clear_error() {
        let params = Params::new().with("path", "loopback");
        let mut remote = RemoteProgram::serve(&params, "script", b"#!/bin/sh\nexit 0\n").unwrap();
        let e = remote
            .fetch()
            .err()
            .expect("a script is refused")
            .to_string();
        assert!(
            e.contains("rfs://")
                && e.contains("/script is not an ELF executable")
                && e.contains("a script"),
            "{e}"
        );
        // A name the export does not hold: the service's error, named.
        remote.remote = "missing".into();
        let e = remote.fetch().err().expect("a missing file").to_string();
        assert!(e.contains("opening \"missing\" over rfs"), "{e}");
    }

    #[test]
    fn path_applies_to_rfs_only() {
        let ctx = Context::for_tests(Profile::Smoke);
        let p = Params::new()
            .with("binary", "static")
            .with("path", "emulated");
        let e = Spawn.run(&ctx, &p).unwrap_err().to_string();
        assert!(e.contains("binary=rfs only"), "{e}");
    }

    #[test]
    fn the_tiny_elf_passes_the_check() {
        let Some(image) = tiny_elf::image() else {
            return; // an architecture osprobe writes no ELF for
        };
        assert_eq!(check_elf(&image), Ok(()));
    }

    #[test]
    fn bad_elves_are_named_with_what_is_wrong() {
        let e = check_elf(b"#!/bin/sh\nexit 0\n").unwrap_err().to_string();
        assert!(e.contains("23 21 2f 62") && e.contains("a script"), "{e}");
        assert!(check_elf(b"")
            .unwrap_err()
            .to_string()
            .contains("with nothing"));
        assert!(check_elf(b"\x7fELF\x02\x01")
            .unwrap_err()
            .to_string()
            .contains("64-byte"));
        let Some(good) = tiny_elf::image() else {
            return;
        };
        let mut bad = good.clone();
        bad[4] = 1;
        assert!(check_elf(&bad).unwrap_err().to_string().contains("class 1"));
        let mut bad = good.clone();
        bad[16] = 1;
        assert!(check_elf(&bad)
            .unwrap_err()
            .to_string()
            .contains("relocatable"));
        let mut bad = good.clone();
        bad[18] = 0x28; // ARM
        bad[19] = 0;
        assert!(check_elf(&bad)
            .unwrap_err()
            .to_string()
            .contains("machine 0x28"));
        let mut bad = good.clone();
        bad[56] = 200; // program headers past the end
        assert!(check_elf(&bad).unwrap_err().to_string().contains("outside"));
    }

    #[test]
    fn a_program_runs_from_a_memfd_both_ways() {
        let Some(image) = tiny_elf::image() else {
            return;
        };
        let program = LoadedProgram::from_bytes(&image, "the tiny ELF").unwrap();
        let argv0 = c"true";
        let argv: [*mut libc::c_char; 2] = [argv0.as_ptr() as *mut _, std::ptr::null_mut()];
        let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
        let pid = program.fork_execveat(&argv, &envp).unwrap();
        crate::process::reap(pid, "the tiny ELF from a memfd").unwrap();
        let pid = crate::process::posix_spawn(program.proc_path(), &argv, &envp).unwrap();
        crate::process::reap(pid, "the tiny ELF through /proc/self/fd").unwrap();
    }
}
