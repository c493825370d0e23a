//! os.*: the rest of lmbench's OS table: the system-call surface of a file
//! system (seed 000's syscall layer), signals, select/poll/epoll, Unix
//! sockets, pipe bandwidth and mmap of a file. See docs/os.md.

pub mod fd;
pub mod mmap;
pub mod pipe_bandwidth;
pub mod select;
pub mod signal;
pub mod stream;
pub mod syscall_surface;
pub mod unix_socket;

use osprobe_core::Registry;

pub fn register(registry: &mut Registry) {
    registry.register(Box::new(syscall_surface::SyscallSurface));
    registry.register(Box::new(signal::Signal));
    registry.register(Box::new(select::Select));
    registry.register(Box::new(unix_socket::UnixSocket));
    registry.register(Box::new(pipe_bandwidth::PipeBandwidth));
    registry.register(Box::new(mmap::Mmap));
}
