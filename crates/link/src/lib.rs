//! osprobe-link: network namespaces joined by veth (the `--netns` host of
//! the network experiments) and the user-space link emulator.

pub mod netns;
