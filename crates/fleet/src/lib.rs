//! osprobe's fleet driver: characterize the hosts of an Ansible inventory
//! over the system's ssh, and the network paths between them
//! (docs/fleet.md). A library first, used by `osprobe fleet run`:
//! the inventory (`inventory`), the transport (`ssh`), the shell scripts
//! run on hosts (`remote`), the pairs (`pairs`) and the per-host progress
//! on stderr (`progress`).

pub mod inventory;
pub mod pairs;
pub mod progress;
pub mod remote;
pub mod ssh;
