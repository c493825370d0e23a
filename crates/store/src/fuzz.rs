//! Entry point for fuzzing what the store reads back from its file: a
//! run's JSON (the measurement bodies, the environment, the skipped list
//! are stored as JSON text, and a database file can be damaged or edited).
//! Shared by the cargo-fuzz target in `fuzz/` and the bounded mutation
//! loop in the tests. Takes any bytes and must return without panicking.

use osprobe_core::{Measurement, Run};

/// A run's JSON and a measurement's JSON: what parses serialises and
/// parses back to the same value (the store writes what it read).
pub fn run_json(data: &[u8]) {
    if let Ok(run) = serde_json::from_slice::<Run>(data) {
        let text = crate::codec::to_json(&run);
        let back: Run = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("a parsed run serialises to JSON that fails: {e}"));
        assert_eq!(back, run, "a parsed run round-trips");
    }
    if let Ok(m) = serde_json::from_slice::<Measurement>(data) {
        let text = crate::codec::to_json(&m);
        let back: Measurement = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("a parsed measurement serialises to JSON that fails: {e}"));
        assert_eq!(back, m, "a parsed measurement round-trips");
    }
}
