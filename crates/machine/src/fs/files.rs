//! What fs.read, fs.contention and fs.cache_size share: where their files
//! go, how much disk they may use, files of pseudo-random data, O_DIRECT
//! alignment and buffers, page-cache eviction with a check, and forked
//! reader processes.
//!
//! Traps this module exists to avoid:
//! - tmpfs (often /tmp) keeps every page in memory: nothing read from it is
//!   ever a device read, and `posix_fadvise(DONTNEED)` cannot evict. The
//!   default directory therefore moves to a disk (`$XDG_CACHE_HOME/osprobe`
//!   or `~/.cache/osprobe`) when the temp directory is memory-backed; a
//!   directory the user names is taken as it is, and a tmpfs one is refused.
//! - Files of zeros can be compressed or deduplicated by a file system or a
//!   virtual disk, so files hold pseudo-random data.
//! - After `fork` in a process that may have other threads (the progress
//!   bar), the child may not allocate or take locks: readers that run in a
//!   child only call the allocation-free helpers at the end of this file on
//!   buffers prepared before the fork.

use crate::error::WorkerError;
use crate::page_cache;
use osprobe_core::scratch::ScratchDir;
use osprobe_core::{Context, ExperimentError, Params};
use std::alloc::Layout;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The unit every experiment here reads: one 4 KiB block per system call.
pub const BLOCK: usize = 4096;

/// Bytes in a mebibyte, for sizes and notes.
pub const MIB: u64 = 1 << 20;

/// The `dir` parameter every fs experiment accepts.
pub const DIR_PARAM: osprobe_core::ParamSpec = osprobe_core::ParamSpec {
    name: "dir",
    help: "directory for the test files, on the disk to measure (default: the temp directory, or ~/.cache/osprobe when that is tmpfs)",
    kind: osprobe_core::ParamKind::Path,
};

// ---------------------------------------------------------------------------
// Where the files go

/// File-system magic numbers (statfs f_type) of the common kinds, for notes
/// and for refusing memory-backed ones.
const FS_NAMES: &[(u32, &str)] = &[
    (0xEF53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0xF2F5_2010, "f2fs"),
    (0x2FC1_2FC1, "zfs"),
    (0x794C_7630, "overlayfs"),
    (0x6969, "nfs"),
    (0x6573_5546, "fuse"),
    (0x0102_1994, "tmpfs"),
    (0x8584_58F6, "ramfs"),
];

const TMPFS_MAGIC: u32 = 0x0102_1994;
const RAMFS_MAGIC: u32 = 0x8584_58F6;

/// The kind of file system holding a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsKind {
    pub magic: u32,
}

impl FsKind {
    /// Files on it live only in memory (no device to read from).
    pub fn is_memory_backed(&self) -> bool {
        self.magic == TMPFS_MAGIC || self.magic == RAMFS_MAGIC
    }

    pub fn name(&self) -> String {
        FS_NAMES
            .iter()
            .find(|(m, _)| *m == self.magic)
            .map(|(_, n)| n.to_string())
            .unwrap_or_else(|| format!("file system {:#x}", self.magic))
    }
}

/// The file-system kind of `path` (statfs).
pub fn fs_kind(path: &Path) -> io::Result<FsKind> {
    let c_path = c_path(path)?;
    // SAFETY: st is a plain struct filled by statfs; c_path is NUL-terminated.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c_path.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        // f_type is a signed word; magic numbers are 32-bit patterns.
        Ok(FsKind {
            magic: (st.f_type as u64 & 0xFFFF_FFFF) as u32,
        })
    }
}

/// Free and total bytes of the file system holding `path` (statvfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    /// Available to unprivileged writers.
    pub free: u64,
    pub total: u64,
}

pub fn disk_space(path: &Path) -> io::Result<DiskSpace> {
    let c_path = c_path(path)?;
    // SAFETY: st is a plain struct filled by statvfs; c_path is NUL-terminated.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(c_path.as_ptr(), &mut st) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(DiskSpace {
            free: st.f_bavail as u64 * st.f_frsize as u64,
            total: st.f_blocks as u64 * st.f_frsize as u64,
        })
    }
}

/// Bytes an experiment may write: at most half the free space, and never so
/// much that less than a tenth of the file system stays free.
pub fn writable_budget(space: DiskSpace) -> u64 {
    (space.free / 2).min(space.free.saturating_sub(space.total / 10))
}

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// The directory an experiment writes into, with its scratch directory.
pub struct Target {
    /// Removed with every file in it on drop (also on Ctrl-C).
    pub scratch: ScratchDir,
    /// The parent directory chosen (given or default).
    pub dir: PathBuf,
    pub kind: FsKind,
    /// How the directory was chosen, for the notes.
    pub note: String,
}

impl Target {
    /// Room for `needed` more bytes, or a skip that says how much there is.
    pub fn require_space(&self, needed: u64, what: &str) -> Result<(), ExperimentError> {
        let budget = self.budget()?;
        if needed > budget {
            return Err(ExperimentError::Unsupported(format!(
                "{what} needs {} MiB in {}, but osprobe may use only {} MiB there (half the free space, keeping 10% of the file system free)",
                needed.div_ceil(MIB),
                self.dir.display(),
                budget / MIB
            )));
        }
        Ok(())
    }

    /// Bytes that may be written under this directory now.
    pub fn budget(&self) -> Result<u64, ExperimentError> {
        let space = disk_space(self.scratch.path())
            .map_err(|e| ExperimentError::io(format!("free space of {}", self.dir.display()), e))?;
        Ok(writable_budget(space))
    }

    /// A path for a new file in the scratch directory.
    pub fn file(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }
}

/// The directory for an fs experiment's files: `--param dir=PATH` as given
/// (an error naming it if it cannot be used, a skip if it is tmpfs), or by
/// default the temp directory, moved to `~/.cache/osprobe` when that is
/// memory-backed.
pub fn target_dir(params: &Params) -> Result<Target, ExperimentError> {
    match params.text("dir") {
        Some(dir) => given_dir(Path::new(dir)),
        None => default_dir(),
    }
}

fn given_dir(dir: &Path) -> Result<Target, ExperimentError> {
    let bad = |e: io::Error| {
        ExperimentError::io(format!("--param dir={}: cannot be used", dir.display()), e)
    };
    let kind = fs_kind(dir).map_err(bad)?;
    if kind.is_memory_backed() {
        return Err(ExperimentError::Unsupported(format!(
            "{} is on {}, whose files never leave memory: pass --param dir=PATH on a disk",
            dir.display(),
            kind.name()
        )));
    }
    let scratch = ScratchDir::new_in(dir).map_err(bad)?;
    Ok(Target {
        scratch,
        dir: dir.to_path_buf(),
        kind,
        note: format!("files in {} ({}), as given", dir.display(), kind.name()),
    })
}

fn default_dir() -> Result<Target, ExperimentError> {
    let temp = std::env::temp_dir();
    let temp_kind = fs_kind(&temp);
    if let Ok(kind) = temp_kind {
        if !kind.is_memory_backed() {
            let scratch = ScratchDir::new_in(&temp).map_err(|e| {
                ExperimentError::io(
                    format!(
                        "temp directory {} (set TMPDIR or --param dir=PATH)",
                        temp.display()
                    ),
                    e,
                )
            })?;
            return Ok(Target {
                scratch,
                dir: temp.clone(),
                kind,
                note: format!(
                    "files in the temp directory {} ({}); --param dir=PATH picks another disk",
                    temp.display(),
                    kind.name()
                ),
            });
        }
    }
    let why = match temp_kind {
        Ok(kind) => format!("the temp directory {} is {}", temp.display(), kind.name()),
        Err(e) => format!("the temp directory {} cannot be used ({e})", temp.display()),
    };
    let Some(cache) = user_cache_dir() else {
        return Err(ExperimentError::Unsupported(format!(
            "{why} and neither XDG_CACHE_HOME nor HOME is set: pass --param dir=PATH on a disk"
        )));
    };
    std::fs::create_dir_all(&cache).map_err(|e| {
        ExperimentError::io(format!("{why}; creating {} instead", cache.display()), e)
    })?;
    let kind = fs_kind(&cache)
        .map_err(|e| ExperimentError::io(format!("{why}; using {}", cache.display()), e))?;
    if kind.is_memory_backed() {
        return Err(ExperimentError::Unsupported(format!(
            "{why} and {} is {} too: pass --param dir=PATH on a disk",
            cache.display(),
            kind.name()
        )));
    }
    let scratch = ScratchDir::new_in(&cache)
        .map_err(|e| ExperimentError::io(format!("{why}; using {}", cache.display()), e))?;
    Ok(Target {
        scratch,
        dir: cache.clone(),
        kind,
        note: format!(
            "files in {} ({}): {why}, and tmpfs pages never leave memory",
            cache.display(),
            kind.name()
        ),
    })
}

/// `$XDG_CACHE_HOME/osprobe`, else `$HOME/.cache/osprobe` (core's, so that
/// every command's start-up sweep looks there too).
fn user_cache_dir() -> Option<PathBuf> {
    osprobe_core::scratch::user_cache_dir()
}

// ---------------------------------------------------------------------------
// Pseudo-random data and orders

pub use osprobe_core::random::{shuffled, SplitMix64};

/// Write a new file of `len` bytes of pseudo-random data, flush it to the
/// device, and drop its pages from the cache (a freshly written file is all
/// in memory: the first read would not touch the device).
pub fn create_data_file(
    ctx: &Context,
    path: &Path,
    len: u64,
    seed: u64,
) -> Result<(), ExperimentError> {
    let what = || format!("writing {} MiB to {}", len / MIB, path.display());
    let mut file = File::create(path).map_err(|e| ExperimentError::io(what(), e))?;
    let mut rng = SplitMix64::new(seed);
    let mut chunk = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        ctx.check_interrupt()?;
        let n = left.min(MIB) as usize;
        rng.fill(&mut chunk[..n]);
        file.write_all(&chunk[..n])
            .map_err(|e| ExperimentError::io(what(), e))?;
        left -= n as u64;
    }
    page_cache::evict(&file).map_err(|e| ExperimentError::io(what(), e))?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The page cache

/// Drop a file's pages and check with mincore. When pages stay and this
/// process may, drop the whole page cache (heavier, so only then). Returns
/// the fraction of the file still resident afterwards.
pub fn evict_checked(file: &File) -> Result<f64, ExperimentError> {
    page_cache::evict(file).map_err(|e| ExperimentError::io("posix_fadvise(DONTNEED)", e))?;
    let mut left = resident(file)?;
    if left > 0.01 && page_cache::can_drop_all_caches() {
        page_cache::drop_all_caches()
            .map_err(|e| ExperimentError::io("writing /proc/sys/vm/drop_caches", e))?;
        left = resident(file)?;
    }
    Ok(left)
}

fn resident(file: &File) -> Result<f64, ExperimentError> {
    page_cache::resident_fraction(file).map_err(|e| ExperimentError::io("mincore", e))
}

/// Set the kernel's readahead policy for an open file.
pub fn advise(file: &File, advice: libc::c_int) -> Result<(), ExperimentError> {
    // SAFETY: a valid descriptor; offset 0 and length 0 mean the whole file.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, advice) };
    if rc != 0 {
        return Err(ExperimentError::io(
            "posix_fadvise",
            io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// O_DIRECT

/// What statx said about direct I/O on a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatxDio {
    /// The kernel filled the STATX_DIOALIGN fields (6.1+ and a file system
    /// that reports them).
    pub reported: bool,
    pub mem_align: u32,
    pub offset_align: u32,
}

/// The alignment O_DIRECT needs: of the buffer in memory and of file
/// offsets and lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DioAlign {
    pub memory: usize,
    pub offset: usize,
    /// From statx STATX_DIOALIGN, or the 4096-byte fallback.
    pub from_statx: bool,
}

/// The fallback when statx does not report alignment: 4096 bytes covers
/// every common logical block size (512 and 4096).
const FALLBACK_ALIGN: usize = 4096;

/// Decide the alignment from statx's answer: `Err` with the reason when the
/// file cannot be read with O_DIRECT in 4 KiB blocks.
pub fn dio_alignment(stx: Option<StatxDio>) -> Result<DioAlign, crate::error::DioError> {
    use crate::error::DioError;
    let Some(stx) = stx.filter(|s| s.reported) else {
        return Ok(DioAlign {
            memory: FALLBACK_ALIGN,
            offset: FALLBACK_ALIGN,
            from_statx: false,
        });
    };
    let (memory, offset) = (stx.mem_align as usize, stx.offset_align as usize);
    if memory == 0 || offset == 0 {
        return Err(DioError::NotSupported);
    }
    if !memory.is_power_of_two() || !offset.is_power_of_two() {
        return Err(DioError::NotPowersOfTwo { memory, offset });
    }
    if offset > BLOCK {
        return Err(DioError::OffsetTooCoarse(offset));
    }
    Ok(DioAlign {
        memory,
        offset,
        from_statx: true,
    })
}

/// Whether a read of `len` bytes at `offset` into `addr` is aligned.
pub fn is_aligned(align: &DioAlign, addr: usize, offset: u64, len: usize) -> bool {
    addr % align.memory == 0 && offset % align.offset as u64 == 0 && len % align.offset == 0
}

/// statx(STATX_DIOALIGN) of an open file; `None` where the call fails
/// (kernels before 4.11 have no statx).
pub fn statx_dio(file: &File) -> Option<StatxDio> {
    // SAFETY: stx is a plain struct filled by statx; an empty path with
    // AT_EMPTY_PATH refers to the descriptor itself.
    unsafe {
        let mut stx: libc::statx = std::mem::zeroed();
        let rc = libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        );
        if rc != 0 {
            return None;
        }
        Some(StatxDio {
            reported: stx.stx_mask & libc::STATX_DIOALIGN != 0,
            mem_align: stx.stx_dio_mem_align,
            offset_align: stx.stx_dio_offset_align,
        })
    }
}

/// Open `path` for O_DIRECT reading. `Unsupported` (naming the directory)
/// when the file system refuses O_DIRECT (EINVAL) or 4 KiB aligned reads.
pub fn open_direct(path: &Path, target: &Target) -> Result<(File, DioAlign), ExperimentError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::EINVAL) {
                ExperimentError::Unsupported(format!(
                    "{} ({}) does not support O_DIRECT (open returned EINVAL): use mode=buffered or another --param dir",
                    target.dir.display(),
                    target.kind.name()
                ))
            } else {
                ExperimentError::io(format!("opening {} with O_DIRECT", path.display()), e)
            }
        })?;
    let align = dio_alignment(statx_dio(&file)).map_err(|why| {
        ExperimentError::Unsupported(format!(
            "{} ({}): {why}",
            target.dir.display(),
            target.kind.name()
        ))
    })?;
    Ok((file, align))
}

/// The note that says how O_DIRECT alignment was chosen.
pub fn alignment_note(align: &DioAlign) -> String {
    if align.from_statx {
        format!(
            "O_DIRECT: alignment from statx STATX_DIOALIGN: buffer {} B, file offsets {} B",
            align.memory, align.offset
        )
    } else {
        "O_DIRECT: statx did not report STATX_DIOALIGN; assumed 4096 B for buffer and offsets (covers 512 B and 4 KiB logical blocks)".to_string()
    }
}

/// A zeroed heap buffer with a chosen alignment (O_DIRECT needs one).
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: Layout,
}

// SAFETY: an AlignedBuf owns its allocation alone (no shared pointer), so
// moving it to another thread (fs.iodepth's I/O threads) is sound.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes aligned to `align` (a power of two), and never less than
    /// a page, so the buffer shares no page with other data.
    pub fn new(len: usize, align: usize) -> Result<AlignedBuf, ExperimentError> {
        let align = align.max(page_cache::page_size());
        let layout = Layout::from_size_align(len.max(1), align).map_err(|e| {
            ExperimentError::failed(format!("buffer of {len} B aligned to {align} B"), e)
        })?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw).ok_or_else(|| {
            ExperimentError::io(
                format!("allocating {len} B for a read buffer"),
                std::io::ErrorKind::OutOfMemory.into(),
            )
        })?;
        Ok(AlignedBuf { ptr, layout })
    }

    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.layout.size()
    }

    pub fn is_empty(&self) -> bool {
        self.layout.size() == 0
    }

    /// Write every page so that a forked child takes its copy-on-write
    /// faults now, not inside a timed read. Allocation-free.
    pub fn touch(&self) {
        let page = 4096;
        let mut i = 0;
        while i < self.layout.size() {
            // SAFETY: i is within the allocation.
            unsafe { self.ptr.as_ptr().add(i).write_volatile(0) };
            i += page;
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

// ---------------------------------------------------------------------------
// Notes shared by the experiments

/// What a reader should know about a virtual disk, if this is a VM.
pub fn virtual_disk_note(ctx: &Context) -> Option<String> {
    let virt = &ctx.environment.virtualization;
    let name = virt
        .detected
        .clone()
        .or_else(|| virt.hypervisor_flag.then(|| "a hypervisor".to_string()))?;
    Some(format!(
        "running under {name}: a virtual disk is often cached by the host, so 'cold' reads may measure the virtual I/O path and the host's memory rather than the physical device"
    ))
}

/// Cold 4 KiB reads faster than this are faster than flash and look like
/// memory behind a virtual I/O path.
pub const MEMORY_LIKE_BLOCK_NS: f64 = 20_000.0;

/// The note for reads that bypassed the guest's cache yet ran at
/// memory-like speed.
pub fn memory_like_note(per_block_ns: f64) -> Option<String> {
    (per_block_ns < MEMORY_LIKE_BLOCK_NS).then(|| {
        format!(
            "cold 4 KiB reads took {:.1} us, faster than flash (~50-100 us): the device itself seems cached (by the hypervisor's page cache, a loop device's backing file, or RAM)",
            per_block_ns / 1e3
        )
    })
}

// ---------------------------------------------------------------------------
// Forked readers

/// A pipe's two ends, each closed on drop unless taken.
pub struct Pipe {
    pub read: RawFd,
    pub write: RawFd,
}

impl Pipe {
    pub fn new() -> Result<Pipe, ExperimentError> {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(ExperimentError::last_os("pipe2"));
        }
        Ok(Pipe {
            read: fds[0],
            write: fds[1],
        })
    }

    /// Close the write end (readers then see EOF once every copy is closed).
    /// Allocation-free, so a child may call it.
    pub fn close_write(&mut self) {
        close_fd(&mut self.write);
    }

    pub fn close_read(&mut self) {
        close_fd(&mut self.read);
    }
}

fn close_fd(fd: &mut RawFd) {
    if *fd >= 0 {
        // SAFETY: we own the descriptor; it is forgotten right after.
        unsafe { libc::close(*fd) };
        *fd = -1;
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.close_write();
        self.close_read();
    }
}

/// Child processes of one measurement. Whatever happens to the parent
/// (error, Ctrl-C), dropping this kills and reaps every child not yet
/// waited for, so none is left running or as a zombie.
#[derive(Default)]
pub struct Children {
    pids: Vec<libc::pid_t>,
}

impl Children {
    pub fn new() -> Children {
        Children::default()
    }

    /// Fork a child that runs `body` and exits with its return value.
    ///
    /// `body` runs after fork in a process that may have had other threads:
    /// it must only make system calls on memory prepared before the fork (no
    /// allocation, no locks, no printing). It never returns into the
    /// parent's code: a panic ends the child with status 101 instead of
    /// unwinding through the parent's frames (which would, for instance,
    /// delete the parent's scratch directory).
    pub fn fork(&mut self, body: impl FnOnce() -> i32) -> Result<libc::pid_t, ExperimentError> {
        // SAFETY: the child only runs `body` (bound by the contract above)
        // and _exit; it never returns from this function.
        match unsafe { libc::fork() } {
            -1 => Err(ExperimentError::last_os("fork")),
            0 => {
                die_with_parent();
                let code =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(101);
                // SAFETY: _exit skips atexit handlers and destructors, which
                // belong to the parent.
                unsafe { libc::_exit(code) }
            }
            pid => {
                self.pids.push(pid);
                Ok(pid)
            }
        }
    }

    /// Wait for every child; an error names the first that did not exit 0.
    pub fn wait_all(&mut self) -> Result<(), ExperimentError> {
        let mut first_error = None;
        for pid in std::mem::take(&mut self.pids) {
            let status = wait_for(pid)?;
            if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) && first_error.is_none()
            {
                first_error = Some(ExperimentError::failed(
                    format!("reader process {pid}"),
                    WorkerError::Exit(status),
                ));
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: pid is our unreaped child, so it cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = wait_for(pid);
        }
    }
}

/// The child dies if the parent does (killed outright, it could not reap).
fn die_with_parent() {
    // SAFETY: prctl and getppid are plain system calls.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() == 1 {
            libc::_exit(1);
        }
    }
}

fn wait_for(pid: libc::pid_t) -> Result<libc::c_int, ExperimentError> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid int; pid is our child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(ExperimentError::io(format!("waitpid({pid})"), err));
        }
    }
}

// Allocation-free I/O, safe to call in a forked child. Errors are errno
// values (EIO for an unexpected end of file).

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Read exactly `len` bytes at `offset` into the start of `buf`, retrying
/// on EINTR and short reads. EINVAL when `len` exceeds the buffer.
pub fn pread_exact(fd: RawFd, buf: &AlignedBuf, len: usize, offset: u64) -> Result<(), i32> {
    if len > buf.len() {
        return Err(libc::EINVAL);
    }
    let mut done = 0usize;
    while done < len {
        // SAFETY: done < len <= buf.len(): the destination lies within the
        // buffer's allocation.
        let n = unsafe {
            libc::pread(
                fd,
                buf.as_mut_ptr().add(done).cast(),
                len - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(libc::EIO),
            _ => {
                let e = errno();
                if e != libc::EINTR {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Write all of `bytes` to `fd`.
pub fn write_all_raw(fd: RawFd, bytes: &[u8]) -> Result<(), i32> {
    let mut done = 0usize;
    while done < bytes.len() {
        // SAFETY: the slice is valid for its length.
        let n = unsafe { libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n > 0 {
            done += n as usize;
        } else {
            let e = errno();
            if n == 0 || e != libc::EINTR {
                return Err(if n == 0 { libc::EIO } else { e });
            }
        }
    }
    Ok(())
}

/// Fill `bytes` from `fd`. `Ok(false)` when the pipe was closed before the
/// first byte (the writer is done); EIO when it closed midway.
pub fn read_exact_raw(fd: RawFd, bytes: &mut [u8]) -> Result<bool, i32> {
    let mut done = 0usize;
    while done < bytes.len() {
        // SAFETY: the slice is valid for its length.
        let n = unsafe { libc::read(fd, bytes[done..].as_mut_ptr().cast(), bytes.len() - done) };
        match n {
            n if n > 0 => done += n as usize,
            0 if done == 0 => return Ok(false),
            0 => return Err(libc::EIO),
            _ => {
                let e = errno();
                if e != libc::EINTR {
                    return Err(e);
                }
            }
        }
    }
    Ok(true)
}

/// Encode `N` words for a pipe message of `B` = 8 N bytes (allocation-free).
pub fn encode<const N: usize, const B: usize>(words: [u64; N]) -> [u8; B] {
    debug_assert_eq!(B, N * 8, "a message of {N} words has {} bytes", N * 8);
    let mut out = [0u8; B];
    for (i, w) in words.iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    out
}

/// Decode a pipe message of `N` words.
pub fn decode<const N: usize>(bytes: &[u8]) -> [u64; N] {
    let mut out = [0u64; N];
    for (i, w) in out.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        *w = u64::from_ne_bytes(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_visits_every_block_once() {
        for n in [0, 1, 2, 7, 1000] {
            let order = shuffled(n, 42);
            let mut seen = vec![false; n];
            for &i in &order {
                assert!(!seen[i], "{i} twice");
                seen[i] = true;
            }
            assert!(seen.iter().all(|&s| s));
        }
        assert_eq!(shuffled(100, 7), shuffled(100, 7), "seeded: reproducible");
        assert_ne!(shuffled(100, 7), shuffled(100, 8));
        assert_ne!(shuffled(100, 7), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = SplitMix64::new(1);
        let mut hits = [0u32; 3];
        for _ in 0..3000 {
            hits[rng.below(3) as usize] += 1;
        }
        assert!(hits.iter().all(|&h| h > 800), "{hits:?}");
    }

    #[test]
    fn alignment_from_statx_or_fallback() {
        let stx = |reported, mem, off| {
            Some(StatxDio {
                reported,
                mem_align: mem,
                offset_align: off,
            })
        };
        let a = dio_alignment(stx(true, 4, 512)).unwrap();
        assert_eq!((a.memory, a.offset, a.from_statx), (4, 512, true));
        // Not reported (old kernel, file system without the fields): 4096.
        for s in [None, stx(false, 0, 0)] {
            let a = dio_alignment(s).unwrap();
            assert_eq!((a.memory, a.offset, a.from_statx), (4096, 4096, false));
        }
        // Reported as zero: no direct I/O on this file.
        assert!(dio_alignment(stx(true, 0, 0))
            .unwrap_err()
            .to_string()
            .contains("no direct I/O"));
        assert!(dio_alignment(stx(true, 512, 8192))
            .unwrap_err()
            .to_string()
            .contains("8192"));
        assert!(dio_alignment(stx(true, 3, 512)).is_err());
    }

    #[test]
    fn aligned_reads() {
        let a = DioAlign {
            memory: 512,
            offset: 512,
            from_statx: true,
        };
        assert!(is_aligned(&a, 4096, 8192, BLOCK));
        assert!(!is_aligned(&a, 4097, 8192, BLOCK));
        assert!(!is_aligned(&a, 4096, 100, BLOCK));
        assert!(!is_aligned(&a, 4096, 0, 100));
        let buf = AlignedBuf::new(BLOCK, 512).unwrap();
        assert!(is_aligned(&a, buf.as_mut_ptr() as usize, 0, buf.len()));
        let big = AlignedBuf::new(BLOCK, 1 << 16).unwrap();
        assert_eq!(big.as_mut_ptr() as usize % (1 << 16), 0);
    }

    #[test]
    fn budget_keeps_a_tenth_free_and_uses_at_most_half() {
        let gib = 1u64 << 30;
        let b = |free, total| {
            writable_budget(DiskSpace {
                free: free * gib,
                total: total * gib,
            }) / gib
        };
        assert_eq!(b(80, 250), 40, "half the free space");
        assert_eq!(b(30, 250), 5, "keeps 25 of 250 free");
        assert_eq!(b(20, 250), 0, "already below a tenth free");
    }

    #[test]
    fn messages_round_trip() {
        let bytes: [u8; 24] = encode([1, u64::MAX, 42]);
        assert_eq!(decode::<3>(&bytes), [1, u64::MAX, 42]);
    }

    #[test]
    fn memory_backed_kinds() {
        assert!(FsKind { magic: TMPFS_MAGIC }.is_memory_backed());
        assert!(!FsKind { magic: 0xEF53 }.is_memory_backed());
        assert_eq!(FsKind { magic: 0xEF53 }.name(), "ext4");
        assert_eq!(FsKind { magic: 0x1234 }.name(), "file system 0x1234");
    }

    #[test]
    fn a_given_directory_that_does_not_exist_is_named() {
        let p = Params::new().with("dir", "/nonexistent/osprobe-dir");
        let err = target_dir(&p).err().unwrap();
        assert!(!matches!(err, ExperimentError::Unsupported(_)));
        assert!(
            err.to_string().contains("/nonexistent/osprobe-dir"),
            "{err}"
        );
    }

    #[test]
    fn children_are_reaped_even_when_not_waited_for() {
        let mut kids = Children::new();
        let pid = kids
            .fork(|| {
                // SAFETY: pause is a plain system call.
                unsafe { libc::pause() };
                0
            })
            .unwrap();
        drop(kids);
        // SAFETY: signal 0 checks existence; the pid was reaped.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "child killed and reaped");
        let mut kids = Children::new();
        kids.fork(|| 3).unwrap();
        assert!(kids.wait_all().is_err(), "a non-zero exit is an error");
    }
}
