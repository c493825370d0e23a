//! Readable numbers: a prefix chosen per row so a column of ns, µs and ms
//! values stays legible, binary prefixes for sizes, decimal for rates.

use osprobe_core::{ParamValue, Params, Unit};

pub use osprobe_core::human::{number, scale_for, Scale};

/// A byte count with a binary prefix: `32 KiB`.
pub fn bytes(n: u64) -> String {
    let s = scale_for(Unit::Bytes, n as f64);
    let v = n as f64 / s.divisor;
    if v.fract() == 0.0 {
        format!("{v:.0} {}", s.label)
    } else {
        format!("{v:.1} {}", s.label)
    }
}

/// Parameters as `k=v`, with sizes that are whole KiB, MiB or GiB written
/// the short way `--param` also accepts for sizes (`size=16M`).
pub fn params_label(params: &Params) -> String {
    params
        .0
        .iter()
        .map(|(k, v)| match v {
            ParamValue::Int(n) if *n >= 1024 && n % 1024 == 0 => {
                format!("{k}={}", osprobe_core::experiment::format_bytes(*n as u64))
            }
            other => format!("{k}={other}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_params_are_short() {
        let p = Params::new()
            .with("size", 16 << 20)
            .with("stride", 64)
            .with("n", 1_000_000)
            .with("mode", "direct");
        assert_eq!(params_label(&p), "mode=direct n=1000000 size=16M stride=64");
    }

    #[test]
    fn prefixes_follow_the_median() {
        assert_eq!(scale_for(Unit::Nanoseconds, 63.0).label, "ns");
        assert_eq!(scale_for(Unit::Nanoseconds, 1_500.0).label, "µs");
        assert_eq!(scale_for(Unit::Nanoseconds, 450_000.0).label, "µs");
        assert_eq!(scale_for(Unit::Nanoseconds, 2.5e6).label, "ms");
        assert_eq!(scale_for(Unit::Nanoseconds, 0.3).label, "ns");
        assert_eq!(scale_for(Unit::BytesPerSecond, 1.4e9).label, "GB/s");
        assert_eq!(scale_for(Unit::Bytes, 32768.0).label, "KiB");
    }

    #[test]
    fn numbers_keep_four_digits() {
        assert_eq!(number(0.31234), "0.312");
        assert_eq!(number(63.04), "63.04");
        assert_eq!(number(109.06), "109.1");
        assert_eq!(number(1_231_790.2), "1,231,790");
        assert_eq!(number(-12_345.0), "-12,345");
        assert_eq!(bytes(32 * 1024), "32 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
    }
}
