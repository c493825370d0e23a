//! What killed osprobe processes left behind, removed before any command
//! runs. Namespaces, veths, TUN devices and routes die with their process
//! (see osprobe-link's netns module); scratch directories and cgroups do
//! not, so their names carry their owner's pid and start time and every
//! command, of any kind, sweeps those whose owner is gone.

/// Sweep scratch directories in the default places, osprobe memory cgroups
/// anywhere in the hierarchy, and (as root) osprobe links and named
/// namespaces left by older osprobe versions or dead owners. Never fails:
/// a leftover that cannot be removed now is tried again next time.
pub fn sweep() {
    osprobe_core::scratch::sweep_default_places();
    osprobe_machine::fs::cgroup::sweep_everywhere();
    osprobe_link::netns::sweep_stale_if_root();
    // Middleboxes' nftables tables and forwarding settings (restored).
    osprobe_link::middlebox::sweep_stale_if_root();
}
