//! A user-level coroutine switch: save the callee-saved registers on the
//! current stack, store the stack pointer, load another, restore its
//! registers and return into it. No kernel, no signal mask (unlike
//! swapcontext, which makes a system call), so this is the floor under any
//! context switch — what SOS's coroutines cost (the SOS design document).
//!
//! Only x86_64 is implemented; elsewhere [`PingPong::new`] returns `None`.

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".text",
    ".global osprobe_coroutine_swap",
    "osprobe_coroutine_swap:",
    // rdi: where to save the current stack pointer; rsi: the stack to resume.
    "push rbp",
    "push rbx",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "mov [rdi], rsp",
    "mov rsp, rsi",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    // First entry of a new coroutine: its argument waits in r12, its
    // function in r13 (placed there by `PingPong::new`).
    ".global osprobe_coroutine_start",
    "osprobe_coroutine_start:",
    "mov rdi, r12",
    "call r13",
    "ud2",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn osprobe_coroutine_swap(save_sp: *mut *mut u8, resume_sp: *mut u8);
    fn osprobe_coroutine_start();
}

/// Two stack pointers: the caller's and the coroutine's, each valid while
/// the other side runs.
#[repr(C)]
struct Link {
    caller_sp: *mut u8,
    coroutine_sp: *mut u8,
}

/// A coroutine that does nothing but switch back: resume it, and it yields
/// at once. One `round_trip` is two switches.
pub struct PingPong {
    // Boxed so their addresses stay fixed while the coroutine holds them.
    link: Box<Link>,
    _stack: Vec<u8>,
}

const STACK_SIZE: usize = 64 * 1024;

#[cfg(target_arch = "x86_64")]
extern "C" fn bounce(link: *mut Link) -> ! {
    loop {
        // SAFETY: link points into the PingPong that resumed us; its caller_sp
        // was stored by the swap that resumed this coroutine.
        unsafe { osprobe_coroutine_swap(&mut (*link).coroutine_sp, (*link).caller_sp) };
    }
}

impl PingPong {
    #[cfg(target_arch = "x86_64")]
    pub fn new() -> Option<PingPong> {
        let mut stack = vec![0u8; STACK_SIZE];
        let mut link = Box::new(Link {
            caller_sp: std::ptr::null_mut(),
            coroutine_sp: std::ptr::null_mut(),
        });
        // SAFETY: the initial frame is written inside `stack`. Layout from
        // the new stack pointer up: r15, r14, r13, r12, rbx, rbp (popped by
        // the swap), then the address `ret` jumps to. The stack top is
        // 16-byte aligned at `osprobe_coroutine_start`, so the `call` there
        // enters `bounce` with the alignment the ABI requires.
        unsafe {
            let top = (stack.as_mut_ptr().add(STACK_SIZE) as usize) & !15;
            let sp = (top - 7 * 8) as *mut usize;
            let frame = [
                0,                                             // r15
                0,                                             // r14
                bounce as *const () as usize,                  // r13: the function
                &mut *link as *mut Link as usize,              // r12: its argument
                0,                                             // rbx
                0,                                             // rbp
                osprobe_coroutine_start as *const () as usize, // return address
            ];
            for (i, v) in frame.iter().enumerate() {
                sp.add(i).write(*v);
            }
            link.coroutine_sp = sp as *mut u8;
        }
        Some(PingPong {
            link,
            _stack: stack,
        })
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub fn new() -> Option<PingPong> {
        None
    }

    /// Switch into the coroutine and back, `n` times.
    #[inline(never)]
    pub fn round_trips(&mut self, n: u64) {
        #[cfg(target_arch = "x86_64")]
        for _ in 0..n {
            // SAFETY: coroutine_sp is the coroutine's saved stack, valid
            // because the coroutine is suspended in a swap (or not started).
            unsafe {
                let link: *mut Link = &mut *self.link;
                osprobe_coroutine_swap(&mut (*link).caller_sp, (*link).coroutine_sp);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = n;
    }
}

// Dropping a suspended PingPong frees its stack; the coroutine holds no
// resources, so nothing needs to unwind.

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn switches_there_and_back_many_times() {
        let mut co = PingPong::new().unwrap();
        co.round_trips(1);
        co.round_trips(10_000);
        // Callee-saved state survives: a value live across the switches.
        let before = std::hint::black_box(0x1234_5678u64);
        co.round_trips(3);
        assert_eq!(before, 0x1234_5678);
    }
}
