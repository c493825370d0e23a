//! `osprobe fleet run`: characterize the hosts of an Ansible inventory over
//! the system's ssh, and the network paths between them.

pub mod inventory;
