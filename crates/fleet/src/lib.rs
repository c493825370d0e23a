//! osprobe's fleet driver: characterize the hosts of an Ansible inventory
//! over the system's ssh, and the network paths between them
//! (docs/fleet.md). A library first, used by `osprobe fleet run`:
//! the inventory (`inventory`), the transport (`ssh`), the shell scripts
//! run on hosts (`remote`), one host's work (`host`), the pairs (`pairs`),
//! the run of them all (`run`), its closing report (`report`) and the
//! per-host progress on stderr (`progress`).

pub mod error;
mod host;
pub mod inventory;
pub mod pairs;
pub mod progress;
pub mod remote;
pub mod report;
pub mod run;
pub mod ssh;

pub use error::{BinaryError, ExecError, HostError, PairError, PairFailure, PlanError, SshError};
pub use inventory::{Inventory, InventoryError};
pub use report::Report;
pub use run::{run, Observer, Plan};
