//! A temporary memory cgroup, so fs.cache_size can show where its knee
//! appears when the file cache is known to be small: page-cache pages are
//! charged to the cgroup of the task that reads them in, and a cgroup at its
//! memory limit reclaims its own pages first.
//!
//! The cgroup is `osprobe-<pid>-<start>-<id>` (its owner's pid and start
//! time, see [`osprobe_core::owner`]); it is removed (rmdir) when the guard
//! is dropped, after its process has been reaped, on success, error and
//! Ctrl-C, SIGTERM or SIGHUP alike. A process killed outright cannot clean
//! up (a cgroup outlives every process), so every osprobe command calls
//! [`sweep_everywhere`] at start: it walks the memory hierarchy and removes
//! empty `osprobe-*` cgroups whose owner is gone.
//!
//! Where it is created:
//! - cgroup v1 (`/sys/fs/cgroup/memory`): under this process's own memory
//!   cgroup (`/sys/fs/cgroup/memory/<own cgroup>/osprobe-...`, the path in
//!   the `memory` line of /proc/self/cgroup), so any limit already placed
//!   on osprobe still applies (v1 limits are hierarchical), else at the
//!   hierarchy's root;
//! - cgroup v2 (`/sys/fs/cgroup` with `memory` in cgroup.controllers): at
//!   the root, since a non-root cgroup holding processes cannot pass
//!   controllers to children (the no-internal-processes rule); `+memory` is
//!   written to the root's cgroup.subtree_control when missing, and taken
//!   back afterwards when osprobe added it.

use crate::error::CgroupError;
use osprobe_core::owner::{Claim, Owner};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

const V2_ROOT: &str = "/sys/fs/cgroup";
const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const PREFIX: &str = "osprobe-";

/// Which cgroup interface the memory controller uses here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// A memory cgroup created by osprobe, removed on drop.
#[derive(Debug)]
pub struct MemoryCgroup {
    path: PathBuf,
    version: Version,
    /// The cgroup.subtree_control osprobe wrote `+memory` to, if any.
    enabled_memory_in: Option<PathBuf>,
}

impl MemoryCgroup {
    /// Create a cgroup limited to `limit` bytes of memory. `Err` says in
    /// words why this machine cannot (not root, no memory controller, a
    /// read-only cgroup file system).
    pub fn create(limit: u64) -> Result<MemoryCgroup, CgroupError> {
        if !osprobe_core::sys::is_root() {
            return Err(CgroupError::NeedsRoot);
        }
        let (version, parents) = locate()?;
        let mut refusals = Vec::new();
        for parent in parents {
            match create_under(&parent, version, limit) {
                Ok(cg) => return Ok(cg),
                Err(e) => refusals.push((parent, e)),
            }
        }
        Err(CgroupError::Refused(refusals))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `cgroup v1 /sys/fs/cgroup/memory/.../osprobe-...`, for notes.
    pub fn describe(&self) -> String {
        let v = match self.version {
            Version::V1 => "v1",
            Version::V2 => "v2",
        };
        format!("cgroup {v} {}", self.path.display())
    }

    /// Move a process into the cgroup.
    pub fn add_process(&self, pid: libc::pid_t) -> io::Result<()> {
        fs::write(self.path.join("cgroup.procs"), format!("{pid}\n"))
    }

    /// The most memory the cgroup used, where the kernel tracks it
    /// (v1 memory.max_usage_in_bytes, v2 memory.peak since Linux 5.19).
    pub fn peak_bytes(&self) -> Option<u64> {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        fs::read_to_string(self.path.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // The last process may still be leaving (exit is not instant after
        // a kill): retry for a while on EBUSY.
        for _ in 0..50 {
            match fs::remove_dir(&self.path) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        if let Some(control) = &self.enabled_memory_in {
            // Fails (EBUSY) when other cgroups now use the controller: keep it then.
            let _ = fs::write(control, "-memory");
        }
    }
}

/// The version in use and where a new cgroup may go, best first.
fn locate() -> Result<(Version, Vec<PathBuf>), CgroupError> {
    let v2 = Path::new(V2_ROOT);
    if let Ok(controllers) = fs::read_to_string(v2.join("cgroup.controllers")) {
        if has_word(&controllers, "memory") {
            return Ok((Version::V2, vec![v2.to_path_buf()]));
        }
    }
    let v1 = Path::new(V1_ROOT);
    if v1.join("memory.limit_in_bytes").exists() {
        let mut parents = Vec::new();
        if let Some(own) = fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| own_v1_memory_cgroup(&t))
        {
            let dir = v1.join(own.trim_start_matches('/'));
            if dir != v1 && dir.is_dir() {
                parents.push(dir);
            }
        }
        parents.push(v1.to_path_buf());
        return Ok((Version::V1, parents));
    }
    Err(CgroupError::NoController)
}

fn create_under(parent: &Path, version: Version, limit: u64) -> io::Result<MemoryCgroup> {
    sweep_stale(parent);
    let mut enabled_memory_in = None;
    if version == Version::V2 {
        let control = parent.join("cgroup.subtree_control");
        if !has_word(&fs::read_to_string(&control)?, "memory") {
            fs::write(&control, "+memory")?;
            enabled_memory_in = Some(control);
        }
    }
    let path = parent.join(Owner::new_name(PREFIX));
    fs::create_dir(&path)?;
    // From here on the guard removes the directory, also when setting the
    // limit fails.
    let cg = MemoryCgroup {
        path,
        version,
        enabled_memory_in,
    };
    let (file, value) = match version {
        Version::V1 => ("memory.limit_in_bytes", limit.to_string()),
        Version::V2 => ("memory.max", limit.to_string()),
    };
    fs::write(cg.path.join(file), value)?;
    if version == Version::V2 {
        // No swap: anonymous memory of the reader must not stand in for cache.
        let _ = fs::write(cg.path.join("memory.swap.max"), "0");
    }
    Ok(cg)
}

/// How deep [`sweep_everywhere`] looks below a hierarchy's root, and how
/// many cgroups it visits at most: enough for systemd's slices and
/// containers' nesting, bounded on a machine with thousands of cgroups.
const SWEEP_DEPTH: usize = 6;
const SWEEP_MAX_VISITED: usize = 20_000;

/// Remove empty osprobe cgroups under `parent` whose owner is gone; returns
/// how many were removed.
fn sweep_stale(parent: &Path) -> usize {
    let Ok(entries) = fs::read_dir(parent) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(claim) = name.to_str().and_then(|n| Claim::parse(n, PREFIX)) else {
            continue;
        };
        // rmdir fails on a cgroup that still has processes: then it stays.
        if claim.owner_is_gone() && fs::remove_dir(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Remove, anywhere in the memory cgroup hierarchy (v2 and v1 roots, down
/// to [`SWEEP_DEPTH`] levels), empty `osprobe-*` cgroups whose owner is gone.
/// The owner may have run in another cgroup than ours (v1 cgroups go under
/// the owner's own), hence the walk. Needs root; returns how many went.
pub fn sweep_everywhere() -> usize {
    if !osprobe_core::sys::is_root() {
        return 0;
    }
    let mut removed = 0;
    let mut visited = 0;
    // On v1, /sys/fs/cgroup holds every controller's hierarchy: walk only
    // the memory one. On v2 (or hybrid with a v2 memory controller) the
    // unified root.
    let v2 = Path::new(V2_ROOT).join("cgroup.controllers").exists();
    let roots = [
        Some(Path::new(V2_ROOT)).filter(|_| v2),
        Some(Path::new(V1_ROOT)),
    ];
    for root in roots.into_iter().flatten().filter(|r| r.is_dir()) {
        let mut level = vec![root.to_path_buf()];
        for _ in 0..=SWEEP_DEPTH {
            let mut next = Vec::new();
            for dir in &level {
                visited += 1;
                if visited > SWEEP_MAX_VISITED {
                    return removed;
                }
                removed += sweep_stale(dir);
                next.extend(child_cgroups(dir));
            }
            level = next;
        }
    }
    removed
}

/// The sub-directories of a cgroup directory, but not osprobe's own (they
/// have no children) nor symlinks.
fn child_cgroups(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter(|e| !e.file_name().to_string_lossy().starts_with(PREFIX))
        .map(|e| e.path())
        .collect()
}

/// The path of this process's v1 memory cgroup in /proc/self/cgroup text
/// (`4:memory:/some/path`; the controller list may hold several names).
fn own_v1_memory_cgroup(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    })
}

fn has_word(text: &str, word: &str) -> bool {
    text.split_whitespace().any(|w| w == word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_memory_cgroup_from_proc() {
        let text = "9:name=systemd:/\n4:memory:/process_api/abc\n0::/\n";
        assert_eq!(
            own_v1_memory_cgroup(text).as_deref(),
            Some("/process_api/abc")
        );
        let text = "3:cpu,memory:/a:b\n";
        assert_eq!(own_v1_memory_cgroup(text).as_deref(), Some("/a:b"));
        assert_eq!(own_v1_memory_cgroup("0::/user.slice\n"), None);
    }

    /// A cgroup left by a dead owner, nested where a v1 cgroup goes (under
    /// the owner's own memory cgroup), is swept by any process; one of a
    /// live owner is kept. Root with a memory controller only.
    #[test]
    fn sweep_removes_dead_owners_cgroups_anywhere_and_keeps_live_ones() {
        let root = osprobe_core::sys::is_root();
        let Ok((_, parents)) = locate().map_err(|e| eprintln!("skipped: {e}")) else {
            return;
        };
        if !root {
            eprintln!("skipped: removing cgroups needs root");
            return;
        }
        let parent = &parents[0];
        let me = Owner::current();
        // An intermediate cgroup that is not osprobe's, as a session's or a
        // container's would be, holding the dead owner's cgroup.
        let middle = parent.join(format!("sweep-test-{}", Owner::new_name("")));
        let dead = middle.join(format!("{PREFIX}{}-{}-X", me.pid, me.start - 1));
        let live = middle.join(Owner::new_name(PREFIX));
        struct Remove(Vec<PathBuf>);
        impl Drop for Remove {
            fn drop(&mut self) {
                for p in &self.0 {
                    let _ = fs::remove_dir(p);
                }
            }
        }
        let _cleanup = Remove(vec![dead.clone(), live.clone(), middle.clone()]);
        if let Err(e) = fs::create_dir(&middle) {
            eprintln!(
                "skipped: cannot create a cgroup in {}: {e}",
                parent.display()
            );
            return;
        }
        fs::create_dir(&dead).unwrap();
        fs::create_dir(&live).unwrap();
        assert!(sweep_everywhere() >= 1);
        assert!(!dead.exists(), "a dead owner's cgroup was kept");
        assert!(live.exists(), "a live owner's cgroup was removed");
    }

    #[test]
    fn controller_lists() {
        assert!(has_word("cpuset cpu io memory pids\n", "memory"));
        assert!(!has_word("cpuset cpu io memory_x\n", "memory"));
    }

    /// Where the machine allows it (root with a memory controller), a cgroup
    /// is created with its limit and removed on drop.
    #[test]
    fn created_limited_and_removed() {
        let cg = match MemoryCgroup::create(32 << 20) {
            Ok(cg) => cg,
            Err(e) => {
                osprobe_core::testing::skip(format!("cannot create a memory cgroup: {e}"));
                return;
            }
        };
        let path = cg.path().to_path_buf();
        assert!(path.is_dir());
        let limit_file = match cg.version {
            Version::V1 => "memory.limit_in_bytes",
            Version::V2 => "memory.max",
        };
        let limit = fs::read_to_string(path.join(limit_file)).unwrap();
        assert_eq!(limit.trim(), (32u64 << 20).to_string());
        drop(cg);
        assert!(!path.exists());
    }
}
