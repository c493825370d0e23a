//! What the environment tests share: a scratch directory tree standing in
//! for /sys, and a clock description.

use crate::clock::ClockInfo;
use std::fs;
use std::path::PathBuf;

pub(super) fn test_clock() -> ClockInfo {
    ClockInfo {
        source: "tsc".into(),
        reason: "test".into(),
        tsc_hz: Some(2_500_000_000.0),
        calibration_error_ppm: Some(12.0),
        calibration: Some("test".into()),
    }
}

/// A scratch directory under the system temp dir, removed on drop.
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("osprobe-env-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub(super) fn write(&self, rel: &str, contents: &str) {
        let path = self.0.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
