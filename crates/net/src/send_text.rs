//! What `osprobe send` prints for people: the file, where it went, the
//! verified hash, the rate at each end and what limited it (`--json`
//! prints [`SendOutcome`]'s fields instead).

use crate::send::SendOutcome;
use osprobe_core::human::{number, scale_for};
use osprobe_core::Unit;
use std::fmt;

/// A rate in bytes per second and bits per microsecond, over `seconds`.
fn rate(bytes_per_s: Option<f64>, seconds: f64) -> String {
    match bytes_per_s {
        Some(r) => {
            let scale = scale_for(Unit::BytesPerSecond, r);
            format!(
                "{} {} ({:.0} bits/us) in {seconds:.3} s",
                number(r / scale.divisor),
                scale.label,
                r * 8.0 / 1e6
            )
        }
        None => "- (empty file)".into(),
    }
}

impl fmt::Display for SendOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "sent {} ({} bytes) to {} as '{}': verified (xxh3-128 {})",
            self.file.display(),
            self.bytes,
            self.server,
            self.name,
            self.hash
        )?;
        writeln!(
            f,
            "  Tx (sender, {}):   {}",
            self.method,
            rate(self.tx_bytes_per_s, self.tx_seconds)
        )?;
        writeln!(
            f,
            "  Rx (receiver):      {}",
            rate(self.rx_bytes_per_s, self.rx_seconds)
        )?;
        write!(f, "  {}", self.diagnosis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_take_a_method_and_a_packet_size() {
        use crate::send::SendRequest;
        use crate::transfer::SendMethod;
        let r = SendRequest::from_text("f".into(), None, "packets", "64K").unwrap();
        assert_eq!((r.method, r.packet), (SendMethod::Packets, 65_536));
        let r = SendRequest::from_text("f".into(), None, "sendfile", "16M").unwrap();
        assert_eq!(r.method, SendMethod::Sendfile);
        for bad in ["0", "17M", "big"] {
            let err = SendRequest::from_text("f".into(), None, "packets", bad).unwrap_err();
            assert!(
                err.to_string().starts_with(&format!("--packet '{bad}': ")),
                "{err}"
            );
        }
    }

    #[test]
    fn an_empty_file_has_no_rate() {
        let outcome = SendOutcome {
            file: "empty.bin".into(),
            name: "empty.bin".into(),
            server: "127.0.0.1:5301".into(),
            bytes: 0,
            method: "sendfile",
            packet: 262_144,
            tx_seconds: 0.001,
            tx_bytes_per_s: None,
            rx_seconds: 0.002,
            rx_bytes_per_s: None,
            hash: "0".repeat(32),
            verified: true,
            diagnosis: "nothing to limit".into(),
        };
        let text = outcome.to_string();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(
            text.starts_with("sent empty.bin (0 bytes) to 127.0.0.1:5301 as 'empty.bin': verified")
        );
        assert!(
            text.contains("  Tx (sender, sendfile):   - (empty file)"),
            "{text}"
        );
        assert!(text.ends_with("\n  nothing to limit"), "{text}");
    }
}
