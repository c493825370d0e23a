//! A process of the shared pager, after the fork: it maps its region (a
//! memfd the pager also maps), opens its own userfaultfd (the kernel ties
//! one to the address space that opened it, so the pager cannot register
//! a child's memory itself), registers the region, passes the descriptor
//! to the pager (SCM_RIGHTS) and runs its workload on the region.
//!
//! One more thread runs here: the agent, which unmaps pages on the pager's
//! request (MADV_DONTNEED on the shared mapping: the page stays in the
//! memfd). That is the referenced bit of `crate::pager`, across address
//! spaces: no system call lets one process drop another's page-table
//! entry and keep the page (process_madvise refuses MADV_DONTNEED), so the
//! process does it for the pager, as SOS's kernel unmapped pages for its
//! pager.
//!
//! The child never returns into the caller's code: it ends with `_exit`,
//! and it uses no lock another thread of the parent may have held at the
//! fork (no stdout or stderr, only `write(2)` for a last word).

use super::error::{BrkError, WorkloadError};
use super::wire::{receive, send, Message, Received, NO_PAGE};
use crate::uffd::Userfaultfd;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Exit codes of a process of the shared pager.
pub const EXIT_OK: i32 = 0;
/// The workload or its check failed (the verdict says how).
pub const EXIT_FAILED: i32 = 1;
/// The process could not set itself up (the pager says why).
pub const EXIT_SETUP: i32 = 2;
/// An access the pager could not serve (SIGBUS; the pager says why).
pub const EXIT_SIGBUS: i32 = 3;

/// What a workload sees of its process: the data region, and a heap that
/// starts empty right after it and grows with [`ProcessMemory::brk`].
pub struct ProcessMemory {
    base: *mut u8,
    page_size: usize,
    data_pages: u64,
    heap_pages: u64,
    heap_limit_pages: u64,
    control: OwnedFd,
    done_sent: bool,
}

impl ProcessMemory {
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn data_pages(&self) -> u64 {
        self.data_pages
    }

    pub fn heap_pages(&self) -> u64 {
        self.heap_pages
    }

    pub fn heap_limit_pages(&self) -> u64 {
        self.heap_limit_pages
    }

    /// The data region as 64-bit words.
    pub fn data(&mut self) -> &mut [u64] {
        let words = self.data_pages as usize * self.page_size / 8;
        // SAFETY: the region is page-aligned, mapped for the process's
        // life, and `&mut self` makes this the only view of it.
        unsafe { std::slice::from_raw_parts_mut(self.base.cast(), words) }
    }

    /// The heap, up to the break, as 64-bit words.
    pub fn heap(&mut self) -> &mut [u64] {
        let words = self.heap_pages as usize * self.page_size / 8;
        // SAFETY: as `data`; the heap follows the data region inside the
        // same mapping.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.base
                    .add(self.data_pages as usize * self.page_size)
                    .cast(),
                words,
            )
        }
    }

    /// The first byte past the break: a touch there is past the end of
    /// the heap, and the pager answers it with SIGBUS.
    pub fn past_the_break(&self) -> *mut u8 {
        // SAFETY: inside the mapping (the heap's reservation) or one past
        // it; never dereferenced here.
        unsafe {
            self.base
                .add((self.data_pages + self.heap_pages) as usize * self.page_size)
        }
    }

    /// Set the heap to `pages` pages (brk): the pager grows its page
    /// table for them; pages above the old break start as zeros.
    pub fn brk(&mut self, pages: u64) -> Result<(), BrkError> {
        send(&self.control, &Message::Brk { pages }, None).map_err(BrkError::Ask)?;
        loop {
            match receive(&self.control, -1) {
                Ok(Received::Message(Message::BrkDone { pages, refused }, _)) => {
                    return match refused {
                        None => {
                            self.heap_pages = pages;
                            Ok(())
                        }
                        Some(why) => Err(BrkError::Refused(why)),
                    };
                }
                Ok(Received::Message(other, _)) => {
                    return Err(BrkError::Answer(format!("{other:?}")))
                }
                Ok(Received::Closed) => return Err(BrkError::PagerGone),
                Ok(Received::TimedOut) => continue,
                Err(e) => return Err(BrkError::Wait(e)),
            }
        }
    }

    /// Grow the heap by `pages` pages (sbrk).
    pub fn sbrk(&mut self, pages: u64) -> Result<(), BrkError> {
        let want = self
            .heap_pages
            .checked_add(pages)
            .ok_or(BrkError::Overflow(pages))?;
        self.brk(want)
    }

    /// The workload proper is over (`accesses` in `elapsed`): the pager
    /// takes this process's counters now, and answers before the check
    /// touches the pages again.
    pub fn done(&mut self, accesses: u64, elapsed: Duration) {
        self.done_sent = true;
        let done = Message::Done {
            accesses,
            elapsed_ns: elapsed.as_nanos() as u64,
        };
        if send(&self.control, &done, None).is_ok() {
            let _ = receive(&self.control, -1);
        }
    }
}

/// What the child needs, prepared by the parent before the fork.
pub struct ChildSetup<'a> {
    pub index: usize,
    pub parent: libc::pid_t,
    pub memfd: OwnedFd,
    pub control: OwnedFd,
    pub agent: OwnedFd,
    pub data_pages: u64,
    pub heap_limit_pages: u64,
    pub page_size: usize,
    pub workload: &'a super::Workload<'a>,
}

/// The child's life. Never returns.
pub fn run(setup: ChildSetup<'_>) -> ! {
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // SAFETY: getppid has no preconditions.
    if unsafe { libc::getppid() } != setup.parent {
        exit(EXIT_SETUP);
    }
    close_all_but(&[
        setup.memfd.as_raw_fd(),
        setup.control.as_raw_fd(),
        setup.agent.as_raw_fd(),
    ]);
    on_sigbus_exit();
    let base = map_and_register(&setup);
    // The mapping keeps the memory; the descriptor is not needed.
    drop(setup.memfd);
    let agent = setup.agent;
    let agent_base = base as u64;
    let page_size = setup.page_size;
    if std::thread::Builder::new()
        .spawn(move || serve_agent(agent, agent_base, page_size))
        .is_err()
    {
        say_and_exit(&setup.control, "starting the agent thread", EXIT_SETUP);
    }
    match receive(&setup.control, -1) {
        Ok(Received::Message(Message::Go, _)) => {}
        _ => exit(EXIT_SETUP),
    }
    let mut memory = ProcessMemory {
        base: base.cast(),
        page_size,
        data_pages: setup.data_pages,
        heap_pages: 0,
        heap_limit_pages: setup.heap_limit_pages,
        control: setup.control,
        done_sent: false,
    };
    let started = Instant::now();
    let workload = setup.workload;
    let index = setup.index;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        workload(index, &mut memory)
    }))
    .unwrap_or(Err(WorkloadError::Panicked));
    if !memory.done_sent {
        memory.done(0, started.elapsed());
    }
    let (ok, text) = match result {
        Ok(text) => (true, text),
        Err(e) => (false, e.to_string()),
    };
    let _ = send(&memory.control, &Message::Verdict { ok, text }, None);
    exit(if ok { EXIT_OK } else { EXIT_FAILED })
}

/// Map the region (the memfd is closed after), register it with a
/// userfaultfd of our own and pass that to the pager; where it is mapped.
/// A step that fails ends the process.
fn map_and_register(setup: &ChildSetup<'_>) -> *mut libc::c_void {
    let len = (setup.data_pages + setup.heap_limit_pages) as usize * setup.page_size;
    // SAFETY: a fresh shared mapping of our memfd.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            setup.memfd.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        say_and_exit(&setup.control, "mapping the region", EXIT_SETUP);
    }
    // SAFETY: advice on our own mapping: a page is a page, not 2 MiB.
    unsafe { libc::madvise(base, len, libc::MADV_NOHUGEPAGE) };
    let uffd = match Userfaultfd::open() {
        Ok(u) => u,
        Err(e) => say_and_exit(&setup.control, &e.to_string(), EXIT_SETUP),
    };
    if let Err(e) = uffd.register(base as u64, len as u64) {
        say_and_exit(
            &setup.control,
            &format!("registering the region with userfaultfd: {e}"),
            EXIT_SETUP,
        );
    }
    let hello = Message::Hello {
        base: base as u64,
        len: len as u64,
        features: uffd.features(),
    };
    if send(&setup.control, &hello, Some(uffd.raw())).is_err() {
        exit(EXIT_SETUP);
    }
    // The pager holds the userfaultfd now; the registration lives as long
    // as its copy does.
    drop(uffd);
    base
}

/// The agent: unmap what the pager asks, in order, and acknowledge when
/// asked. The pager gone: the process goes too.
fn serve_agent(agent: OwnedFd, base: u64, page_size: usize) {
    loop {
        match receive(&agent, -1) {
            Ok(Received::Message(Message::Drop { page, ack }, _)) => {
                if page != NO_PAGE {
                    let addr = base + page * page_size as u64;
                    // SAFETY: a page of our registered shared mapping;
                    // MADV_DONTNEED there only unmaps.
                    unsafe {
                        libc::madvise(addr as *mut libc::c_void, page_size, libc::MADV_DONTNEED)
                    };
                }
                if ack && send(&agent, &Message::Ack, None).is_err() {
                    exit(EXIT_SETUP);
                }
            }
            Ok(Received::TimedOut) => {}
            _ => exit(EXIT_SETUP),
        }
    }
}

fn say_and_exit(control: &OwnedFd, why: &str, code: i32) -> ! {
    let _ = send(
        control,
        &Message::Verdict {
            ok: false,
            text: why.to_string(),
        },
        None,
    );
    exit(code)
}

fn exit(code: i32) -> ! {
    // SAFETY: ends the process without running the parent's exit code
    // (atexit handlers, buffered output) a second time.
    unsafe { libc::_exit(code) }
}

/// Close every descriptor but 0-2 and `keep`: the parent's (swap file,
/// other processes' sockets) are none of this process's business, and a
/// copy of another's socket would hide its end from the pager.
fn close_all_but(keep: &[i32]) {
    let mut keep: Vec<u32> = keep.iter().map(|&k| k as u32).collect();
    keep.sort_unstable();
    let mut low = 3u32;
    for k in keep {
        if k > low {
            // SAFETY: closing descriptors of this process.
            unsafe { libc::syscall(libc::SYS_close_range, low, k - 1, 0) };
        }
        low = low.max(k + 1);
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, low, u32::MAX, 0) };
}

/// SIGBUS (the pager could not serve an access, and said why) ends the
/// process with EXIT_SIGBUS, not a core dump.
fn on_sigbus_exit() {
    extern "C" fn on_sigbus(_: libc::c_int) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(EXIT_SIGBUS) };
    }
    // SAFETY: installing a handler that only exits.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
}
