//! osprobe-machine: experiments on this machine's OS and hardware.
//!
//! The OS primitives: the clock, loops, procedure and system
//! calls ([`cpu`]), process, program and thread creation ([`process`]), and
//! context switches ([`ctx_switch`]); memory ([`mem`]); the file system
//! ([`fs`]); the rest of lmbench's OS table ([`os`]). Each experiment is described in docs/experiments.md.

pub mod coroutine;
pub mod cpu;
pub mod ctx_switch;
pub mod error;
pub mod fs;
pub mod heartbeat;
pub mod mem;
pub mod os;
pub mod page_cache;
pub mod process;
pub mod rfs_exec;
pub mod stack_timer;
pub mod time;
pub mod tiny_elf;

use osprobe_core::Registry;

/// Add this crate's experiments to `registry`, in the order `run` shows them.
pub fn register(registry: &mut Registry) {
    registry.register(Box::new(cpu::TimerOverhead));
    registry.register(Box::new(cpu::LoopOverhead));
    registry.register(Box::new(cpu::CallOverhead));
    registry.register(Box::new(cpu::Syscall));
    registry.register(Box::new(process::Fork));
    registry.register(Box::new(process::Spawn));
    registry.register(Box::new(process::ThreadCreate));
    registry.register(Box::new(ctx_switch::ContextSwitch));
    mem::register(registry);
    fs::register(registry);
    time::register(registry);
    os::register(registry);
}
