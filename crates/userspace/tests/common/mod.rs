//! Helpers for the end-to-end tests: the root check and serialisation.

#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};

/// True when the emulator can run here; says why not otherwise (CI runs as
/// root, so there a missing requirement fails the test).
pub fn can_run() -> bool {
    match osprobe_link::check_requirements() {
        Ok(()) => true,
        Err(e) => {
            osprobe_core::testing::skip(format!("cannot run the link emulator: {e}"));
            false
        }
    }
}

/// One path at a time: on two vCPUs, two emulators forwarding at once
/// would starve each other.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}
