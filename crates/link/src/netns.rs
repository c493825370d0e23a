//! A second host on this machine: a network namespace joined to the current
//! one by a veth pair.
//!
//! `--netns` measurements run their server in such a namespace, and the link
//! emulator reuses it, so this module knows nothing about either: it builds,
//! enters and removes a namespace and nothing more.
//!
//! # Method
//!
//! [`NetnsPair::create`]:
//!
//! 1. creates a namespace with `unshare(CLONE_NEWNET)` on a short-lived
//!    thread and keeps only an open descriptor of it (`/proc/thread-self/ns/net`):
//!    no name under `/run/netns`. The namespace lives exactly as long as
//!    something holds it: that descriptor, a thread or process inside, or
//!    one of its sockets;
//! 2. `ip link add <label> type veth peer name osprobe-peer netns
//!    /proc/<pid>/fd/<fd>`: the host end is named `osprobe-<pid in hex><counter
//!    char>` (the pair's label, so `ip link` shows where each osprobe link
//!    leads and whose it is), the peer end is created directly inside the
//!    namespace, where no other name can collide with it;
//! 3. a free /30 out of 198.18.0.0/15 (the benchmarking range): host `.1`,
//!    peer `.2`;
//! 4. both ends and the namespace's loopback up. Steps inside the namespace
//!    run `ip` in a child that enters it with `setns(2)` before `exec`
//!    ([`NetnsPair::command`]; iproute2's `ip -n` only takes names).
//!
//! Code runs inside the namespace on a thread that called `setns(2)` on
//! that descriptor ([`NetnsPair::spawn_in`]); every socket that thread (or a
//! thread it starts) creates lives in the namespace.
//!
//! # Nothing left when osprobe dies, however it dies
//!
//! When the osprobe process exits, even by SIGKILL, the kernel closes its
//! descriptors; the namespace then has no holder and is destroyed with
//! every device in it (the peer end, TUN devices, the emulator's reference
//! veth) and their routes. Child processes started in the namespace
//! ([`NetnsPair::command`]) get `PR_SET_PDEATHSIG(SIGKILL)`, so they do not
//! keep it alive.
//!
//! The kernel destroys an unheld namespace late, though (in a shared work
//! queue: seconds, over a minute on a loaded machine), and the host end
//! lives in *this* namespace until then. So each pair has a guardian
//! process (see `guardian.rs`) that wakes when osprobe's descriptors close
//! and deletes the host end at once, which destroys both ends and the
//! host's /30 route within milliseconds.
//!
//! A grandchild (say, a process a shell started, which is not told of
//! osprobe's death) that outlives osprobe keeps its namespace until it
//! exits, but no longer the host end: the guardian deletes that too. If
//! the guardian itself was killed (`kill -9` of the whole process group),
//! the host end goes with the namespace, and [`sweep_stale`], which every
//! osprobe command runs at start as root, deletes the host ends of dead
//! owners. It also removes `osprobe-*` namespaces named in /run/netns by
//! older osprobe versions.
//!
//! # Traps
//!
//! - Interface names are at most 15 bytes (IFNAMSIZ); `osprobe-` leaves 7, and
//!   a pid needs up to 6 hex digits (pid_max is at most 2^22), so the host end
//!   cannot carry a suffix beyond the counter character: it shares the
//!   pair's label, and the peer, alone in its namespace, is `osprobe-peer`.
//! - Linux happily puts the same address on two interfaces, so two processes
//!   picking "the first free /30" at once would both succeed and then route
//!   each other's traffic astray. The choice and the `ip addr add` happen under
//!   an exclusive `flock` on `/run/osprobe-netns.lock`, shared by all processes
//!   (the empty lock file stays; the kernel releases the lock of a dead process).
//! - Deleting the host end destroys both ends at once; a namespace without
//!   holders is torn down asynchronously (in a work queue). Removal
//!   therefore deletes the host end first, then closes the descriptor.
//! - `setns` moves one thread. A thread pool, or an async runtime that moves
//!   tasks between threads, does not follow; and `/proc/net` (a link to
//!   `/proc/self/net`) shows the main thread's namespace: read
//!   `/proc/thread-self/net/...` inside.
//! - `PR_SET_PDEATHSIG` fires when the *thread* that started the child ends:
//!   start long-lived children from a thread that lives as long as they do.
//! - Only `net.*` sysctls belong to a namespace; `kernel.*`, `vm.*` written
//!   from inside change the whole machine, so [`NetnsPair::write_sysctl`]
//!   refuses them.
//! - Ctrl-C reaches the `ip` children too (same process group): the running
//!   step fails, and `create` removes what it had built, like on any failure.
//!   Callers see `osprobe_core::interrupt::requested()`, return, and Drop
//!   removes a finished pair.
//! - [`sweep_stale`] cannot tell a live process in another pid namespace (a
//!   container sharing this network namespace) from a dead one: it only ever
//!   removes `osprobe-*` objects.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::Unavailable;
use crate::guardian::Guardian;

/// Every namespace and link this module creates starts with this.
pub const NAME_PREFIX: &str = "osprobe-";
/// The name of the peer end inside every namespace.
pub const PEER_IFNAME: &str = "osprobe-peer";
/// The range the /30s are taken from: 198.18.0.0/15 (RFC 2544 benchmarking).
pub const ADDRESS_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 0, 0), 15);
/// The prefix length of each pair's subnet.
pub const PAIR_PREFIX_LEN: u8 = 30;

/// The longest interface (and, by our choice, namespace) name: IFNAMSIZ - 1.
const MAX_NAME_LEN: usize = 15;
/// The counter character that tells apart the pairs of one process.
const COUNTER_CHARS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
/// How long `create` waits for another process that holds the address lock.
const ADDRESS_LOCK_TIMEOUT: Duration = Duration::from_secs(10);

// Capability bits, from linux/capability.h.
const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// Why a namespace could not be built, entered or removed.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error(
        "the `ip` command was not found (looked on PATH and in /usr/sbin, /sbin): \
         install iproute2 (e.g. `apt-get install iproute2`)"
    )]
    IpMissing,
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "no free /30 in 198.18.0.0/15: every one overlaps an address or route already \
         on this machine ({0})"
    )]
    NoFreeSubnet(String),
    #[error(
        "no free namespace name: this process already owns {0} osprobe namespaces \
         (one per counter character; remove some first)"
    )]
    NoFreeName(usize),
    #[error("invalid input: {0}")]
    Invalid(String),
}

impl NetnsError {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        NetnsError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<NetnsError> for osprobe_core::ExperimentError {
    fn from(e: NetnsError) -> Self {
        match e {
            NetnsError::IpMissing => osprobe_core::ExperimentError::Unsupported(e.to_string()),
            NetnsError::Io { context, source } => {
                osprobe_core::ExperimentError::Io { context, source }
            }
            other => osprobe_core::ExperimentError::setup("building a network namespace", other),
        }
    }
}

/// A network namespace, held by a descriptor only, joined to the current
/// namespace by a veth pair whose host end is `osprobe-<pid><c>`, with a /30
/// from 198.18.0.0/15 (host `.1`, peer `.2`).
///
/// Dropping it removes the veth pair and releases the namespace, ignoring
/// errors; [`NetnsPair::remove`] does the same and reports them. If the
/// process dies instead, the kernel removes both.
#[derive(Debug)]
pub struct NetnsPair {
    /// The pair's label: the host end's name, shown in messages.
    name: String,
    /// The namespace itself: it exists while this (or a thread, process or
    /// socket inside) holds it.
    ns: File,
    host_ifname: String,
    peer_ifname: String,
    host_addr: Ipv4Addr,
    peer_addr: Ipv4Addr,
    /// Whether `ip link add` succeeded: only then is the host end ours to delete.
    host_link_created: bool,
    removed: bool,
    /// Deletes the host end if this process dies before `teardown` runs.
    guardian: Guardian,
    /// Holds the counter character until the pair is removed.
    _reservation: NameReservation,
}

/// A step of `create`, for tests that make one fail on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Namespace,
    Veth,
    HostAddress,
    PeerAddress,
    LinksUp,
}

/// How `build` proceeds; `create` uses the default.
struct Plan {
    peer_ifname: String,
    /// Fail right after this step (tests only set it).
    fail_after: Option<Step>,
    /// The name `build` chose, so tests can look for leftovers.
    chosen_name: Mutex<Option<String>>,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            peer_ifname: PEER_IFNAME.to_string(),
            fail_after: None,
            chosen_name: Mutex::new(None),
        }
    }
}

impl Plan {
    fn after(&self, step: Step) -> Result<(), NetnsError> {
        if self.fail_after == Some(step) {
            return Err(NetnsError::Invalid(format!(
                "injected failure after {step:?}"
            )));
        }
        Ok(())
    }
}

impl NetnsPair {
    /// Build a namespace, a veth pair into it, addresses, and bring it all up.
    /// On failure everything built so far is removed again.
    pub fn create() -> Result<NetnsPair, NetnsError> {
        Self::build(&Plan::default())
    }

    fn build(plan: &Plan) -> Result<NetnsPair, NetnsError> {
        ip_program()?;
        let reservation = reserve_name()?;
        let name = reservation.name.clone();
        *lock_ignoring_poison(&plan.chosen_name) = Some(name.clone());

        // Before the veth exists, so no moment leaves it unguarded.
        let guardian = Guardian::start(ip_program()?, &name)
            .map_err(|e| NetnsError::io(format!("starting the guardian of {name}"), e))?;
        let ns = new_namespace()?;
        // From here on `pair` stands for what exists: an early return drops it,
        // and Drop releases the namespace (and the host end once it exists).
        let mut pair = NetnsPair {
            ns,
            host_ifname: name.clone(),
            peer_ifname: plan.peer_ifname.clone(),
            name,
            host_addr: Ipv4Addr::UNSPECIFIED,
            peer_addr: Ipv4Addr::UNSPECIFIED,
            host_link_created: false,
            removed: false,
            guardian,
            _reservation: reservation,
        };
        plan.after(Step::Namespace)?;

        let ns_path = pair.netns_path().display().to_string();
        ip(&[
            "link",
            "add",
            &pair.host_ifname,
            "type",
            "veth",
            "peer",
            "name",
            &pair.peer_ifname,
            "netns",
            &ns_path,
        ])?;
        pair.host_link_created = true;
        plan.after(Step::Veth)?;

        let (host_addr, peer_addr) = assign_host_address(&pair.host_ifname, &pair.name)?;
        pair.host_addr = host_addr;
        pair.peer_addr = peer_addr;
        plan.after(Step::HostAddress)?;

        let peer_cidr = format!("{peer_addr}/{PAIR_PREFIX_LEN}");
        pair.ip(&["addr", "add", &peer_cidr, "dev", &pair.peer_ifname])?;
        plan.after(Step::PeerAddress)?;

        ip(&["link", "set", "dev", &pair.host_ifname, "up"])?;
        pair.ip(&["link", "set", "dev", &pair.peer_ifname, "up"])?;
        pair.ip(&["link", "set", "dev", "lo", "up"])?;
        plan.after(Step::LinksUp)?;
        Ok(pair)
    }

    /// The pair's label, `osprobe-<pid in hex><counter char>`: the host end's
    /// name. The namespace itself has no name (see the module docs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The address of the host end (in the current namespace).
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host_addr
    }

    /// The address of the peer end (inside the namespace).
    pub fn peer_addr(&self) -> Ipv4Addr {
        self.peer_addr
    }

    /// The prefix length both addresses carry (30).
    pub fn prefix_len(&self) -> u8 {
        PAIR_PREFIX_LEN
    }

    /// The host end's interface name (equal to the namespace's name).
    pub fn host_ifname(&self) -> &str {
        &self.host_ifname
    }

    /// The peer end's interface name inside the namespace.
    pub fn peer_ifname(&self) -> &str {
        &self.peer_ifname
    }

    /// A path to the namespace while this pair lives: `/proc/<pid>/fd/<fd>`
    /// of the descriptor holding it. Other programs can enter it with
    /// `nsenter --net=PATH` or move a device into it with `ip link set DEV
    /// netns PATH`.
    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.ns.as_raw_fd()
        ))
    }

    /// A command that runs `program` inside the namespace: the child enters
    /// it with `setns(2)` before `exec`, and is killed (SIGKILL) when the
    /// thread that spawns it ends, so that no child outlives osprobe and
    /// keeps the namespace alive. Spawn it from a thread that lives as long
    /// as the child should.
    pub fn command(&self, program: impl AsRef<OsStr>) -> io::Result<Command> {
        let ns = self.open_netns()?;
        let mut command = Command::new(program);
        let parent = std::process::id();
        // SAFETY: the closure runs in the child between fork and exec and
        // only makes system calls (setns, prctl, getppid), which are
        // async-signal-safe; `ns` is owned by the closure, so its
        // descriptor is open in the child.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                die_with_parent(parent)
            });
        }
        Ok(command)
    }

    /// Run `ip args...` inside the namespace.
    pub fn ip(&self, args: &[&str]) -> Result<String, NetnsError> {
        let command = self
            .command(ip_program()?)
            .map_err(|e| NetnsError::io(format!("entering namespace {}", self.name), e))?;
        run_ip(
            command,
            &format!("ip {} (in namespace {})", args.join(" "), self.name),
            args,
        )
    }

    /// Start a thread that enters the namespace and then runs `f`. Sockets
    /// created by `f`, or by threads it starts, live in the namespace. The
    /// handle yields the error of `setns` or `f`'s result.
    ///
    /// The namespace file is opened before the thread starts, so a removed
    /// namespace is reported here rather than through the handle.
    pub fn spawn_in<F, T>(&self, f: F) -> io::Result<JoinHandle<io::Result<T>>>
    where
        F: FnOnce() -> io::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let ns_file = self.open_netns()?;
        let name = self.name.clone();
        std::thread::Builder::new()
            .name(format!("in-{name}"))
            .spawn(move || {
                enter_netns(&ns_file, &name)?;
                drop(ns_file);
                f()
            })
    }

    /// Move the calling thread into the namespace, for good: use it only on a
    /// thread that will not go back to work in the current namespace.
    pub fn enter_in_this_thread(&self) -> io::Result<()> {
        let ns_file = self.open_netns()?;
        enter_netns(&ns_file, &self.name)
    }

    /// Move the calling thread into the namespace until the returned guard
    /// is dropped, which moves it back. Threads it starts meanwhile are
    /// inside (a new thread takes its creator's namespace) and stay there.
    pub fn enter_until_dropped(&self) -> io::Result<ThreadNetnsGuard> {
        ThreadNetnsGuard::enter(&self.open_netns()?, &self.name)
    }

    /// Run `program args...` inside the namespace (see [`NetnsPair::command`])
    /// and return its output, whatever its exit status: check `status`
    /// yourself.
    pub fn run_command<I, S>(&self, program: impl AsRef<OsStr>, args: I) -> io::Result<Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let program = program.as_ref();
        self.command(program)?
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "running `{}` in namespace {}: {e}",
                        program.to_string_lossy(),
                        self.name
                    ),
                )
            })
    }

    /// Read a `net.*` sysctl as the namespace sees it, e.g.
    /// `net.ipv4.tcp_congestion_control` (dots or slashes as separators).
    pub fn read_sysctl(&self, key: &str) -> Result<String, NetnsError> {
        let path = net_sysctl_path(key)?;
        let context = format!("reading sysctl {key} in namespace {}", self.name);
        let handle = self
            .spawn_in(move || std::fs::read_to_string(path))
            .map_err(|e| NetnsError::io(&context, e))?;
        let value = join_thread(handle).map_err(|e| NetnsError::io(&context, e))?;
        Ok(value.trim_end().to_string())
    }

    /// Set a `net.*` sysctl inside the namespace only.
    pub fn write_sysctl(&self, key: &str, value: &str) -> Result<(), NetnsError> {
        let path = net_sysctl_path(key)?;
        let context = format!("setting sysctl {key}={value} in namespace {}", self.name);
        let value = value.to_string();
        let handle = self
            .spawn_in(move || std::fs::write(path, value))
            .map_err(|e| NetnsError::io(&context, e))?;
        join_thread(handle).map_err(|e| NetnsError::io(&context, e))
    }

    /// Remove the namespace and the veth pair, reporting what failed.
    pub fn remove(mut self) -> Result<(), NetnsError> {
        self.teardown()
    }

    /// A second descriptor of the namespace (close-on-exec, like the first).
    fn open_netns(&self) -> io::Result<File> {
        self.ns.try_clone().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("duplicating the descriptor of namespace {}: {e}", self.name),
            )
        })
    }

    /// Delete the host end, which destroys both ends at once; the namespace
    /// goes when its descriptor is closed, right after (Drop). Something
    /// already gone counts as removed.
    fn teardown(&mut self) -> Result<(), NetnsError> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        let mut first_error = None;
        if self.host_link_created {
            if let Err(e) = ip(&["link", "del", "dev", &self.host_ifname]) {
                if link_exists(&self.host_ifname) {
                    first_error.get_or_insert(e);
                }
            }
        }
        // Reaped before the name is released, so it never deletes a later pair's.
        self.guardian.dismiss();
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// Whether this machine can build network namespaces here, or why not.
pub fn available() -> Result<(), Unavailable> {
    let euid = osprobe_core::sys::geteuid();
    if euid != 0 {
        return Err(Unavailable::NotRoot { euid });
    }
    ip_program().map_err(|_| Unavailable::IpMissing)?;
    if !Path::new("/proc/self/ns/net").exists() {
        return Err(Unavailable::NoNetworkNamespaces);
    }
    let status = std::fs::read_to_string("/proc/self/status").map_err(Unavailable::ProcStatus)?;
    let effective = parse_cap_eff(&status).ok_or(Unavailable::NoCapEff)?;
    for (bit, name) in [
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
    ] {
        if effective & (1u64 << bit) == 0 {
            return Err(Unavailable::MissingCapability(name));
        }
    }
    try_unshare()
}

/// The real test: a throw-away namespace on a throw-away thread (a
/// container's seccomp policy may forbid it despite the capabilities).
fn try_unshare() -> Result<(), Unavailable> {
    let trial = std::thread::Builder::new()
        .name("netns-probe".into())
        .spawn(|| {
            // SAFETY: unshare only affects this short-lived thread, which
            // exits right after; its new namespace goes away with it.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        })
        .map_err(Unavailable::ProbeThread)?;
    match trial.join() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Unavailable::UnshareRefused(e)),
        Err(_) => Err(Unavailable::ProbePanicked),
    }
}

/// Remove `osprobe-*` namespaces and links whose owner (the pid in the name)
/// is dead, and those of this process's pid that no live pair holds (left by
/// an earlier process with the same pid). Returns how many were removed.
pub fn sweep_stale() -> usize {
    // Held throughout so no pair of ours is between reserving a name and
    // creating it while we look.
    let reserved = lock_ignoring_poison(reservations());
    // SAFETY: getpid has no preconditions.
    let own_pid = unsafe { libc::getpid() } as u32;
    let is_stale = |name: &str| match owner_of(name) {
        Some((pid, c)) if pid == own_pid => !reserved.contains(&c),
        Some((pid, _)) => !pid_alive(pid),
        None => false,
    };
    // A host end whose pid now belongs to another process: the owner holds
    // its namespace by a descriptor from before `ip link add` until after
    // the link is deleted, so a live process holding no namespace at all
    // is a newcomer with a reused pid. (Older versions' pairs, named in
    // /run/netns, are held by the name instead: not judged this way.)
    let link_is_stale = |name: &str| {
        is_stale(name)
            || owner_of(name).is_some_and(|(pid, _)| {
                pid != own_pid && !netns_file(name).exists() && !holds_a_namespace(pid)
            })
    };
    let mut removed = 0;
    // Links first: deleting a host end destroys its pair at once, while a
    // deleted namespace takes its links down only later.
    for link in list_links().unwrap_or_default() {
        if link_is_stale(&link) {
            let _ = ip(&["link", "del", "dev", &link]);
            if !link_exists(&link) {
                removed += 1;
            }
        }
    }
    for ns in list_netns().unwrap_or_default() {
        if is_stale(&ns) {
            let _ = ip(&["netns", "del", &ns]);
            if !netns_file(&ns).exists() {
                removed += 1;
            }
        }
    }
    removed
}

/// [`sweep_stale`] when this process may remove namespaces and links (root,
/// with `ip`), else nothing: for the start of every command, where lacking
/// them is no error. Returns how many were removed.
pub fn sweep_stale_if_root() -> usize {
    if !osprobe_core::sys::is_root() || ip_program().is_err() {
        return 0;
    }
    sweep_stale()
}

/// The owner's pid and the counter character of a name this module makes,
/// `osprobe-<hex pid><char>`; None for any other name.
fn owner_of(name: &str) -> Option<(u32, char)> {
    if name.len() > MAX_NAME_LEN {
        return None;
    }
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let counter = rest.chars().last()?;
    if !counter.is_ascii() || !COUNTER_CHARS.contains(&(counter as u8)) {
        return None;
    }
    let hex = &rest[..rest.len() - 1];
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let pid = u32::from_str_radix(hex, 16).ok()?;
    (pid > 0).then_some((pid, counter))
}

/// Whether process `pid` holds a network namespace by a descriptor. When
/// its descriptors cannot be read (not root), it is assumed to, so that
/// nothing of a live process is ever removed on a guess.
fn holds_a_namespace(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return true;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .map(|target| target.to_string_lossy().starts_with("net:["))
            .unwrap_or(false)
    })
}

/// Whether a process with this pid exists (in our pid namespace).
fn pid_alive(pid: u32) -> bool {
    // kill(0 or negative) addresses process groups: never ask about those.
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; it only checks that the pid exists.
    if unsafe { libc::kill(pid, 0) } == 0 {
        return true;
    }
    // EPERM: it exists but is not ours to signal.
    io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The counter characters of this process's live pairs.
fn reservations() -> &'static Mutex<HashSet<char>> {
    static RESERVED: OnceLock<Mutex<HashSet<char>>> = OnceLock::new();
    RESERVED.get_or_init(|| Mutex::new(HashSet::new()))
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A name held by this process until dropped.
#[derive(Debug)]
struct NameReservation {
    name: String,
    counter: char,
}

impl Drop for NameReservation {
    fn drop(&mut self) {
        lock_ignoring_poison(reservations()).remove(&self.counter);
    }
}

/// Pick `osprobe-<pid><c>` with a counter character no live pair of ours
/// holds and no namespace or link already uses.
fn reserve_name() -> Result<NameReservation, NetnsError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let mut reserved = lock_ignoring_poison(reservations());
    let namespaces: HashSet<String> = list_netns()?.into_iter().collect();
    let links: HashSet<String> = list_links()?.into_iter().collect();
    let start = NEXT.fetch_add(1, Ordering::Relaxed);
    for i in 0..COUNTER_CHARS.len() {
        let counter = COUNTER_CHARS[(start + i) % COUNTER_CHARS.len()] as char;
        if reserved.contains(&counter) {
            continue;
        }
        let name = format!("{NAME_PREFIX}{pid:x}{counter}");
        if name.len() > MAX_NAME_LEN {
            return Err(NetnsError::Invalid(format!(
                "namespace name {name} is longer than {MAX_NAME_LEN} characters"
            )));
        }
        if namespaces.contains(&name) || links.contains(&name) {
            continue;
        }
        reserved.insert(counter);
        return Ok(NameReservation { name, counter });
    }
    Err(NetnsError::NoFreeName(reserved.len()))
}

/// An IPv4 prefix, for overlap tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prefix {
    network: u32,
    len: u8,
}

impl Prefix {
    fn new(addr: Ipv4Addr, len: u8) -> Prefix {
        let len = len.min(32);
        Prefix {
            network: u32::from(addr) & mask(len),
            len,
        }
    }

    /// `a.b.c.d/n`, or `a.b.c.d` for a /32.
    fn parse(text: &str) -> Option<Prefix> {
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, len.parse::<u8>().ok().filter(|&l| l <= 32)?),
            None => (text, 32),
        };
        Some(Prefix::new(addr.parse().ok()?, len))
    }

    fn overlaps(&self, other: &Prefix) -> bool {
        let m = mask(self.len.min(other.len));
        self.network & m == other.network & m
    }
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// The prefixes of `ip -o -4 addr show`: `2: eth0    inet 10.0.0.2/24 brd ...`.
fn parse_addr_prefixes(text: &str) -> Vec<Prefix> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|&w| w == "inet")?;
            Prefix::parse(words.next()?)
        })
        .collect()
}

/// The destinations of `ip -4 route show` more specific than our range (a
/// route covering all of 198.18.0.0/15, or the default route, leaves room).
fn parse_route_prefixes(text: &str) -> Vec<Prefix> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let first = words.next()?;
            // A route may start with its type: `blackhole 198.18.1.0/24`.
            Prefix::parse(first).or_else(|| Prefix::parse(words.next()?))
        })
        .filter(|p| p.len > ADDRESS_RANGE.1)
        .collect()
}

/// The /30 with this index inside 198.18.0.0/15.
fn subnet(index: u32) -> Prefix {
    Prefix {
        network: u32::from(ADDRESS_RANGE.0) + (index << (32 - PAIR_PREFIX_LEN)),
        len: PAIR_PREFIX_LEN,
    }
}

/// The first index from `start` on whose /30 overlaps none of `in_use`.
fn first_free_subnet(in_use: &[Prefix], start: u32) -> Option<Prefix> {
    let count = 1u32 << (PAIR_PREFIX_LEN - ADDRESS_RANGE.1);
    let range = Prefix::new(ADDRESS_RANGE.0, ADDRESS_RANGE.1);
    let in_range: Vec<Prefix> = in_use
        .iter()
        .copied()
        .filter(|p| p.overlaps(&range))
        .collect();
    (0..count)
        .map(|i| subnet((start % count + i) % count))
        .find(|candidate| !in_range.iter().any(|p| p.overlaps(candidate)))
}

/// Choose a free /30 and put `.1` on the host end, under the lock all osprobe
/// processes share, so that no two pairs get the same subnet.
fn assign_host_address(host_ifname: &str, name: &str) -> Result<(Ipv4Addr, Ipv4Addr), NetnsError> {
    let _lock = AddressLock::acquire()?;
    let mut in_use = parse_addr_prefixes(&ip(&["-o", "-4", "addr", "show"])?);
    in_use.extend(parse_route_prefixes(&ip(&["-4", "route", "show"])?));
    // Start where this pair's name points, so that processes rarely race for
    // the same subnet even before the lock settles it.
    let start = owner_of(name)
        .map(|(pid, c)| pid.wrapping_mul(37).wrapping_add(c as u32))
        .unwrap_or(0);
    let chosen = first_free_subnet(&in_use, start).ok_or_else(|| {
        let busy: Vec<String> = in_use
            .iter()
            .filter(|p| p.overlaps(&Prefix::new(ADDRESS_RANGE.0, ADDRESS_RANGE.1)))
            .take(3)
            .map(|p| format!("{}/{}", Ipv4Addr::from(p.network), p.len))
            .collect();
        NetnsError::NoFreeSubnet(busy.join(", "))
    })?;
    let host_addr = Ipv4Addr::from(chosen.network + 1);
    let peer_addr = Ipv4Addr::from(chosen.network + 2);
    let cidr = format!("{host_addr}/{PAIR_PREFIX_LEN}");
    ip(&["addr", "add", &cidr, "dev", host_ifname])?;
    Ok((host_addr, peer_addr))
}

/// An exclusive flock on a file all osprobe processes agree on; released
/// when dropped (closing the file), or by the kernel if the process dies.
struct AddressLock {
    _file: File,
}

impl AddressLock {
    fn path() -> PathBuf {
        if Path::new("/run").is_dir() {
            PathBuf::from("/run/osprobe-netns.lock")
        } else {
            std::env::temp_dir().join("osprobe-netns.lock")
        }
    }

    fn acquire() -> Result<AddressLock, NetnsError> {
        let path = Self::path();
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| NetnsError::io(format!("opening lock file {}", path.display()), e))?;
        let deadline = Instant::now() + ADDRESS_LOCK_TIMEOUT;
        loop {
            // SAFETY: flock on a descriptor `file` owns and keeps open.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(AddressLock { _file: file });
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(NetnsError::io(format!("locking {}", path.display()), err));
            }
            if Instant::now() >= deadline {
                return Err(NetnsError::io(
                    format!(
                        "locking {}: another process held it for more than {} s",
                        path.display(),
                        ADDRESS_LOCK_TIMEOUT.as_secs()
                    ),
                    err,
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Where iproute2 keeps named namespaces.
fn netns_file(name: &str) -> PathBuf {
    let run = Path::new("/run/netns");
    if run.is_dir() || !Path::new("/var/run/netns").is_dir() {
        run.join(name)
    } else {
        Path::new("/var/run/netns").join(name)
    }
}

fn enter_netns(ns_file: &File, name: &str) -> io::Result<()> {
    // SAFETY: the descriptor belongs to `ns_file`, open for the whole call;
    // CLONE_NEWNET makes the kernel check that it is a network namespace,
    // and setns moves only the calling thread.
    if unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("setns into network namespace {name}: {e}"),
        ));
    }
    Ok(())
}

/// The calling thread inside another network namespace; dropping the
/// guard moves the thread back to the namespace it came from. It is bound
/// to its thread (not Send), since setns moves only the caller.
#[derive(Debug)]
pub struct ThreadNetnsGuard {
    original: File,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl ThreadNetnsGuard {
    fn enter(target: &File, name: &str) -> io::Result<ThreadNetnsGuard> {
        // thread-self, not self: the main thread may be elsewhere.
        let original = File::open("/proc/thread-self/ns/net").map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("opening this thread's network namespace: {e}"),
            )
        })?;
        enter_netns(target, name)?;
        Ok(ThreadNetnsGuard {
            original,
            _not_send: std::marker::PhantomData,
        })
    }
}

impl Drop for ThreadNetnsGuard {
    fn drop(&mut self) {
        // The original namespace is held open by `original`, so it still
        // exists; failing here would leave this thread's later sockets in
        // a namespace about to be removed, which is worth a loud stop.
        if let Err(e) = enter_netns(&self.original, "of this thread before") {
            panic!("cannot return to the original network namespace: {e}");
        }
    }
}

fn join_thread<T>(handle: JoinHandle<io::Result<T>>) -> io::Result<T> {
    handle
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the thread inside the namespace panicked")))
}

/// `/proc/sys/<key>` for a `net.*` key, refusing anything else: only those
/// sysctls are per namespace.
fn net_sysctl_path(key: &str) -> Result<PathBuf, NetnsError> {
    let separator = if key.contains('/') { '/' } else { '.' };
    let parts: Vec<&str> = key.split(separator).collect();
    let valid_part = |p: &&str| {
        !p.is_empty()
            && *p != "."
            && *p != ".."
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.@".contains(&b))
    };
    if parts.first() != Some(&"net") || parts.len() < 2 || !parts.iter().all(valid_part) {
        return Err(NetnsError::Invalid(format!(
            "sysctl key '{key}': expected a net.* key such as net.ipv4.tcp_congestion_control \
             (only net.* sysctls belong to a namespace)"
        )));
    }
    Ok(parts
        .iter()
        .fold(PathBuf::from("/proc/sys"), |path, part| path.join(part)))
}

/// The `CapEff:` mask of /proc/<pid>/status.
fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
}

/// The `ip` program: on PATH, or in the usual sbin directories (PATH often
/// lacks them for non-login shells).
fn ip_program() -> Result<&'static Path, NetnsError> {
    static IP: OnceLock<Option<PathBuf>> = OnceLock::new();
    IP.get_or_init(|| {
        osprobe_core::find_program("ip").or_else(|| {
            ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
    })
    .as_deref()
    .ok_or(NetnsError::IpMissing)
}

/// Run `ip args...`; its stdout, or an error naming the command and its stderr.
fn ip(args: &[&str]) -> Result<String, NetnsError> {
    let command = Command::new(ip_program()?);
    run_ip(command, &format!("ip {}", args.join(" ")), args)
}

/// Run `command` (an `ip` program, perhaps set to enter a namespace) with
/// `args`; `label` names it in errors.
fn run_ip(mut command: Command, label: &str, args: &[&str]) -> Result<String, NetnsError> {
    let output = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => NetnsError::IpMissing,
            _ => NetnsError::io(format!("running `{label}`"), e),
        })?;
    if !output.status.success() {
        return Err(NetnsError::Command {
            command: label.to_string(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A new network namespace, held only by the returned descriptor: a
/// short-lived thread unshares into it, opens it and ends (the thread's
/// own reference goes with it).
fn new_namespace() -> Result<File, NetnsError> {
    let maker = std::thread::Builder::new()
        .name("netns-create".into())
        .spawn(|| -> io::Result<File> {
            // SAFETY: unshare only moves this short-lived thread, which
            // ends right after opening its new namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            File::open("/proc/thread-self/ns/net")
        })
        .map_err(|e| NetnsError::io("starting a thread to create a namespace", e))?;
    maker
        .join()
        .map_err(|_| NetnsError::Invalid("the thread creating a namespace panicked".into()))?
        .map_err(|e| NetnsError::io("creating a network namespace (unshare CLONE_NEWNET)", e))
}

/// In a child between fork and exec: be killed when the parent thread
/// ends, and end now if the parent is already gone (the death signal is
/// only armed for a parent alive at the prctl).
fn die_with_parent(parent: u32) -> io::Result<()> {
    // SAFETY: prctl and getppid are plain system calls.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        if libc::getppid() as u32 != parent {
            return Err(io::Error::other("osprobe exited before its child started"));
        }
    }
    Ok(())
}

/// A command whose child is killed (SIGKILL) when the spawning thread ends,
/// for children in the current namespace that must not outlive osprobe.
pub fn command_dying_with_parent(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    let parent = std::process::id();
    // SAFETY: the closure only makes async-signal-safe system calls.
    unsafe {
        command.pre_exec(move || die_with_parent(parent));
    }
    command
}

/// The names of `ip netns list`: `name (id: 3)` or `name`.
fn list_netns() -> Result<Vec<String>, NetnsError> {
    Ok(parse_netns_list(&ip(&["netns", "list"])?))
}

fn parse_netns_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The interface names of the current namespace.
fn list_links() -> Result<Vec<String>, NetnsError> {
    Ok(parse_link_list(&ip(&["-o", "link", "show"])?))
}

/// `5: osprobe-1a2b0@if2: <BROADCAST,...> mtu ...` -> `osprobe-1a2b0`.
fn parse_link_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(|word| word.trim_end_matches(':'))
        .map(|word| word.split('@').next().unwrap_or(word).to_string())
        .filter(|name| !name.is_empty())
        .collect()
}

fn link_exists(ifname: &str) -> bool {
    ip(&["link", "show", "dev", ifname]).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::os::unix::fs::MetadataExt;

    const IO_TIMEOUT: Duration = Duration::from_secs(5);

    /// True when namespaces can be built here; prints why not otherwise. In
    /// CI (root) they must be available, so a missing capability fails.
    fn can_build() -> bool {
        match available() {
            Ok(()) => true,
            Err(reason) => {
                osprobe_core::testing::skip(format!("cannot build network namespaces: {reason}"));
                false
            }
        }
    }

    fn own_pid() -> u32 {
        std::process::id()
    }

    /// Everything `ip` shows about `name` in the current namespace.
    fn leftovers(name: &str) -> Vec<String> {
        let mut found = Vec::new();
        if list_netns().unwrap().iter().any(|n| n == name) || netns_file(name).exists() {
            found.push(format!("namespace {name}"));
        }
        if list_links().unwrap().iter().any(|l| l == name) {
            found.push(format!("link {name}"));
        }
        found
    }

    fn address_in_use(addr: Ipv4Addr) -> bool {
        let text = ip(&["-o", "-4", "addr", "show"]).unwrap();
        text.contains(&format!("inet {addr}/"))
    }

    /// Deletes hand-made objects even when an assertion fails.
    struct HandMade {
        links: Vec<String>,
        namespaces: Vec<String>,
    }

    impl Drop for HandMade {
        fn drop(&mut self) {
            for l in &self.links {
                let _ = ip(&["link", "del", "dev", l]);
            }
            for n in &self.namespaces {
                let _ = ip(&["netns", "del", n]);
            }
        }
    }

    /// The pid of a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = Command::new("true").spawn().expect("spawn `true`");
        let pid = child.id();
        child.wait().expect("wait for `true`");
        if pid_alive(pid) {
            // Reused already: a pid above pid_max can never be alive.
            let max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            return max;
        }
        pid
    }

    #[test]
    fn a_thread_enters_and_comes_back() {
        if !can_build() {
            return;
        }
        let ns_inode = || std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
        let pair = NetnsPair::create().unwrap();
        let before = ns_inode();
        let inside_child = {
            let _guard = pair.enter_until_dropped().unwrap();
            assert_ne!(ns_inode(), before, "setns did not move the thread");
            // A thread started meanwhile is inside and sees the peer address.
            std::thread::spawn(move || {
                (
                    std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino(),
                    ip(&["-o", "-4", "addr", "show"]).unwrap(),
                )
            })
            .join()
            .unwrap()
        };
        assert_eq!(ns_inode(), before, "the guard did not move the thread back");
        assert_ne!(inside_child.0, before);
        assert!(
            inside_child.1.contains(&pair.peer_addr().to_string()),
            "{}",
            inside_child.1
        );
        pair.remove().unwrap();
    }

    #[test]
    fn owner_is_read_back_from_names() {
        assert_eq!(owner_of("osprobe-1a2b0"), Some((0x1a2b, '0')));
        assert_eq!(owner_of("osprobe-3fffffz"), Some((0x3fffff, 'z')));
        assert_eq!(owner_of(&format!("osprobe-{:x}x", 4321)), Some((4321, 'x')));
        for not_ours in [
            "osprobe-peer",
            "osprobe-",
            "osprobe-x",
            "osprobe-0x",
            "osprobe-1234567x",
            "osprobe-12G",
            "veth-1234x",
            "eth0",
            "osprobe-12-x",
        ] {
            assert_eq!(owner_of(not_ours), None, "{not_ours}");
        }
    }

    #[test]
    fn prefixes_overlap_only_when_they_share_the_shorter_prefix() {
        let p = |s| Prefix::parse(s).unwrap();
        assert!(p("198.18.0.0/15").overlaps(&p("198.19.255.252/30")));
        assert!(p("198.18.0.4/30").overlaps(&p("198.18.0.6")));
        assert!(!p("198.18.0.4/30").overlaps(&p("198.18.0.8/30")));
        assert!(!p("198.18.0.0/15").overlaps(&p("198.20.0.0/16")));
        assert!(p("0.0.0.0/0").overlaps(&p("10.1.2.3")));
        assert_eq!(Prefix::parse("198.18.0.1/30").unwrap().network, 0xC612_0000);
        assert_eq!(Prefix::parse("198.18.0.1/33"), None);
        assert_eq!(Prefix::parse("default"), None);
    }

    #[test]
    fn free_subnet_skips_what_is_in_use_and_wraps() {
        let in_use = parse_addr_prefixes(
            "1: lo    inet 127.0.0.1/8 scope host lo\\\n\
             4: eth0    inet 198.18.0.5/30 brd 198.18.0.7 scope global eth0\\\n\
             5: osprobe-1a0    inet 198.18.0.1/30 scope global osprobe-1a0\\\n",
        );
        assert_eq!(in_use.len(), 3);
        let first = first_free_subnet(&in_use, 0).unwrap();
        assert_eq!(Ipv4Addr::from(first.network), Ipv4Addr::new(198, 18, 0, 8));
        // The last index wraps around to the first free one.
        let last = first_free_subnet(&in_use, 32767).unwrap();
        assert_eq!(
            Ipv4Addr::from(last.network),
            Ipv4Addr::new(198, 19, 255, 252)
        );
        let wrapped = first_free_subnet(&in_use, 32768).unwrap();
        assert_eq!(wrapped, first);
        // A /15 address on an interface leaves nothing.
        let everything = [Prefix::parse("198.19.3.4/15").unwrap()];
        assert_eq!(first_free_subnet(&everything, 0), None);
    }

    #[test]
    fn routes_in_the_range_are_avoided_but_broad_ones_are_not() {
        let routes = parse_route_prefixes(
            "default via 192.0.2.1 dev eth0\n\
             198.18.0.0/15 via 192.0.2.9 dev eth0\n\
             blackhole 198.18.0.0/29\n\
             192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2\n",
        );
        assert_eq!(
            routes,
            vec![
                Prefix::parse("198.18.0.0/29").unwrap(),
                Prefix::parse("192.0.2.0/24").unwrap()
            ]
        );
        let first = first_free_subnet(&routes, 0).unwrap();
        assert_eq!(Ipv4Addr::from(first.network), Ipv4Addr::new(198, 18, 0, 8));
    }

    #[test]
    fn ip_listings_are_parsed() {
        assert_eq!(
            parse_netns_list("osprobe-1a0 (id: 3)\nother\n\n"),
            vec!["osprobe-1a0", "other"]
        );
        assert_eq!(
            parse_link_list(
                "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue\n\
                 5: osprobe-1a0@if2: <BROADCAST,MULTICAST,UP> mtu 1500\n"
            ),
            vec!["lo", "osprobe-1a0"]
        );
        assert_eq!(
            parse_cap_eff("Name:\tx\nCapEff:\t000001ffffffffff\n"),
            Some(0x1ff_ffff_ffff)
        );
    }

    #[test]
    fn sysctl_keys_outside_net_are_refused() {
        assert_eq!(
            net_sysctl_path("net.ipv4.tcp_congestion_control").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/tcp_congestion_control")
        );
        assert_eq!(
            net_sysctl_path("net/ipv4/conf/eth0.100/rp_filter").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
        for bad in [
            "kernel.pid_max",
            "net",
            "net..ipv4",
            "net/../kernel/pid_max",
            "net/ipv4/../../vm/swappiness",
            "",
            "net.ipv4.tcp wmem",
        ] {
            let err = net_sysctl_path(bad).unwrap_err();
            assert!(err.to_string().contains("net.*"), "{bad}: {err}");
        }
    }

    #[test]
    fn host_reaches_peer_over_tcp() {
        if !can_build() {
            return;
        }
        let pair = NetnsPair::create().unwrap();
        assert!(pair.name().starts_with(NAME_PREFIX) && pair.name().len() <= MAX_NAME_LEN);
        assert_eq!(owner_of(pair.name()).map(|(pid, _)| pid), Some(own_pid()));
        assert!(pair.host_ifname().len() <= MAX_NAME_LEN);
        assert!(pair.peer_ifname().starts_with(NAME_PREFIX));
        assert_eq!(u32::from(pair.peer_addr()), u32::from(pair.host_addr()) + 1);
        assert!(Prefix::new(ADDRESS_RANGE.0, ADDRESS_RANGE.1)
            .overlaps(&Prefix::new(pair.host_addr(), 32)));

        let peer_addr = pair.peer_addr();
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let server = pair
            .spawn_in(move || {
                let listener = TcpListener::bind((peer_addr, 0))?;
                port_tx.send(listener.local_addr()?.port()).ok();
                // Bounded accept: the host may fail to connect.
                listener.set_nonblocking(true)?;
                let deadline = Instant::now() + IO_TIMEOUT;
                let (mut stream, client) = loop {
                    match listener.accept() {
                        Ok(accepted) => break accepted,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            if Instant::now() > deadline {
                                return Err(io::Error::new(io::ErrorKind::TimedOut, "no client"));
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => return Err(e),
                    }
                };
                stream.set_nonblocking(false)?;
                stream.set_read_timeout(Some(IO_TIMEOUT))?;
                stream.set_write_timeout(Some(IO_TIMEOUT))?;
                let mut buf = [0u8; 5];
                stream.read_exact(&mut buf)?;
                buf.reverse();
                stream.write_all(&buf)?;
                Ok(client)
            })
            .unwrap();
        let port = port_rx.recv_timeout(IO_TIMEOUT).expect("server port");
        let mut stream =
            TcpStream::connect_timeout(&SocketAddr::from((peer_addr, port)), IO_TIMEOUT).unwrap();
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        assert_eq!(stream.local_addr().unwrap().ip(), pair.host_addr());
        stream.write_all(b"hello").unwrap();
        let mut reply = [0u8; 5];
        stream.read_exact(&mut reply).unwrap();
        assert_eq!(&reply, b"olleh");
        let client = server.join().unwrap().unwrap();
        assert_eq!(client.ip(), pair.host_addr());
        pair.remove().unwrap();
    }

    #[test]
    fn spawned_threads_and_their_children_are_inside() {
        if !can_build() {
            return;
        }
        let pair = NetnsPair::create().unwrap();
        let ns_inode = std::fs::metadata(pair.netns_path()).unwrap().ino();
        let ns_link = |path: &str| std::fs::read_link(path).map(|p| p.display().to_string());
        let (outer, inner) = pair
            .spawn_in(move || {
                let outer = ns_link("/proc/thread-self/ns/net")?;
                // Per-thread /proc/net view shows the peer end.
                let devices = std::fs::read_to_string("/proc/thread-self/net/dev")?;
                if !devices.contains(PEER_IFNAME) {
                    return Err(io::Error::other(format!("no peer in {devices}")));
                }
                let inner = std::thread::spawn(move || ns_link("/proc/thread-self/ns/net"))
                    .join()
                    .map_err(|_| io::Error::other("child thread panicked"))??;
                Ok((outer, inner))
            })
            .unwrap()
            .join()
            .unwrap()
            .unwrap();
        let expected = format!("net:[{ns_inode}]");
        assert_eq!(outer, expected);
        assert_eq!(inner, expected);
        assert_ne!(ns_link("/proc/thread-self/ns/net").unwrap(), expected);
    }

    #[test]
    fn commands_run_inside_and_die_with_the_thread_that_started_them() {
        if !can_build() {
            return;
        }
        let pair = NetnsPair::create().unwrap();
        let ns_inode = std::fs::metadata(pair.netns_path()).unwrap().ino();
        let out = pair.run_command("readlink", ["/proc/self/ns/net"]).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("net:[{ns_inode}]")
        );
        let mut command = pair.command("sleep").unwrap();
        command.arg("60");
        // Started by a thread that then ends, as osprobe ending would.
        let mut child = std::thread::spawn(move || command.spawn().unwrap())
            .join()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.and_then(|s| s.signal()),
            Some(libc::SIGKILL),
            "the child outlived the thread that started it"
        );
        pair.remove().unwrap();
    }

    #[test]
    fn sysctls_are_set_inside_only() {
        if !can_build() {
            return;
        }
        let pair = NetnsPair::create().unwrap();
        let key = "net.ipv4.ip_default_ttl";
        let outside_before = std::fs::read_to_string("/proc/sys/net/ipv4/ip_default_ttl").unwrap();
        let value = if outside_before.trim() == "77" {
            "78"
        } else {
            "77"
        };
        pair.write_sysctl(key, value).unwrap();
        assert_eq!(pair.read_sysctl(key).unwrap(), value);
        let outside_after = std::fs::read_to_string("/proc/sys/net/ipv4/ip_default_ttl").unwrap();
        assert_eq!(outside_after, outside_before);
        // `ip netns exec` sees the same namespace.
        let out = pair
            .run_command("cat", ["/proc/sys/net/ipv4/ip_default_ttl"])
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), value);
        assert!(pair.write_sysctl("kernel.pid_max", "1").is_err());
    }

    #[test]
    fn two_pairs_get_different_names_and_subnets() {
        if !can_build() {
            return;
        }
        let builders: Vec<_> = (0..2)
            .map(|_| std::thread::spawn(NetnsPair::create))
            .collect();
        let pairs: Vec<NetnsPair> = builders
            .into_iter()
            .map(|b| b.join().unwrap().unwrap())
            .collect();
        let (a, b) = (&pairs[0], &pairs[1]);
        assert_ne!(a.name(), b.name());
        assert_ne!(a.host_ifname(), b.host_ifname());
        let subnet_a = Prefix::new(a.host_addr(), PAIR_PREFIX_LEN);
        let subnet_b = Prefix::new(b.host_addr(), PAIR_PREFIX_LEN);
        assert!(!subnet_a.overlaps(&subnet_b), "{a:?} {b:?}");
        // Each host address is on exactly one interface.
        let text = ip(&["-o", "-4", "addr", "show"]).unwrap();
        for pair in [a, b] {
            let needle = format!("inet {}/", pair.host_addr());
            assert_eq!(text.matches(&needle).count(), 1, "{text}");
        }
    }

    #[test]
    fn drop_removes_namespace_and_link() {
        if !can_build() {
            return;
        }
        let pair = NetnsPair::create().unwrap();
        let name = pair.name().to_string();
        let host_addr = pair.host_addr();
        // The namespace has no name: only the host end shows, and the
        // namespace through its descriptor.
        assert_eq!(leftovers(&name), vec![format!("link {name}")]);
        assert!(pair.netns_path().exists());
        assert!(address_in_use(host_addr));
        drop(pair);
        assert_eq!(leftovers(&name), Vec::<String>::new());
        assert!(!address_in_use(host_addr));
    }

    #[test]
    fn a_panic_while_the_pair_is_in_use_removes_it() {
        if !can_build() {
            return;
        }
        let name = Mutex::new(String::new());
        let result = std::panic::catch_unwind(|| {
            let pair = NetnsPair::create().unwrap();
            *lock_ignoring_poison(&name) = pair.name().to_string();
            panic!("an experiment failing on purpose, with a live pair");
        });
        assert!(result.is_err());
        let name = name.into_inner().unwrap_or_else(|p| p.into_inner());
        assert!(name.starts_with(NAME_PREFIX));
        assert_eq!(leftovers(&name), Vec::<String>::new());
    }

    #[test]
    fn a_failing_step_leaves_nothing_behind() {
        if !can_build() {
            return;
        }
        let steps = [
            Step::Namespace,
            Step::Veth,
            Step::HostAddress,
            Step::PeerAddress,
            Step::LinksUp,
        ];
        for step in steps {
            let plan = Plan {
                fail_after: Some(step),
                ..Plan::default()
            };
            let err = NetnsPair::build(&plan).unwrap_err();
            assert!(err.to_string().contains("injected"), "{err}");
            let name = lock_ignoring_poison(&plan.chosen_name).clone().unwrap();
            assert_eq!(leftovers(&name), Vec::<String>::new(), "after {step:?}");
        }
        // A real failure of `ip`: a peer name longer than IFNAMSIZ allows.
        let plan = Plan {
            peer_ifname: "osprobe-peer-name-too-long".into(),
            ..Plan::default()
        };
        let err = NetnsPair::build(&plan).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ip link add"), "{text}");
        assert!(matches!(err, NetnsError::Command { .. }), "{text}");
        let name = lock_ignoring_poison(&plan.chosen_name).clone().unwrap();
        assert_eq!(leftovers(&name), Vec::<String>::new());
    }

    #[test]
    fn sweep_removes_what_dead_owners_left_and_keeps_live_pairs() {
        if !can_build() {
            return;
        }
        let live = NetnsPair::create().unwrap();
        let dead = dead_pid();
        let dead_ns = format!("{NAME_PREFIX}{dead:x}x");
        let dead_link = format!("{NAME_PREFIX}{dead:x}y");
        let dead_link_peer = format!("{NAME_PREFIX}{dead:x}z");
        // Left by an earlier process that had our pid: no live pair holds 'w'.
        let recycled_ns = format!("{NAME_PREFIX}{:x}w", own_pid());
        let _cleanup = HandMade {
            links: vec![dead_link.clone()],
            namespaces: vec![dead_ns.clone(), recycled_ns.clone()],
        };
        ip(&["netns", "add", &dead_ns]).unwrap();
        ip(&["netns", "add", &recycled_ns]).unwrap();
        ip(&[
            "link",
            "add",
            &dead_link,
            "type",
            "veth",
            "peer",
            "name",
            &dead_link_peer,
        ])
        .unwrap();
        // A live process that took a dead owner's pid: it holds no
        // namespace, so the host end named after that pid is not its.
        let mut newcomer = Command::new("sleep").arg("30").spawn().unwrap();
        let reused_link = format!("{NAME_PREFIX}{:x}q", newcomer.id());
        let _cleanup_reused = HandMade {
            links: vec![reused_link.clone()],
            namespaces: vec![],
        };
        let reused_peer = format!("{NAME_PREFIX}{:x}r", newcomer.id());
        ip(&[
            "link",
            "add",
            &reused_link,
            "type",
            "veth",
            "peer",
            "name",
            &reused_peer,
        ])
        .unwrap();
        let removed = sweep_stale();
        let _ = newcomer.kill();
        let _ = newcomer.wait();
        assert_eq!(leftovers(&reused_link), Vec::<String>::new(), "reused pid");
        for name in [&dead_ns, &recycled_ns, &dead_link, &dead_link_peer] {
            assert_eq!(leftovers(name), Vec::<String>::new());
        }
        // Two namespaces and two links (the peer goes with its partner);
        // perhaps more if an earlier run left some.
        assert!(removed >= 5, "{removed}");
        assert_eq!(leftovers(live.name()).len(), 1, "a live pair was swept");
        live.remove().unwrap();
    }

    #[test]
    fn available_here_when_root() {
        if osprobe_core::sys::is_root() {
            can_build();
        } else {
            assert!(available().unwrap_err().to_string().contains("root"));
        }
    }
}
