//! Parsers for the values a user types: delays (`50ms`), probabilities
//! (`1%`), rates (`100mbit`), queue bounds (`1000p`, `64kb`) and loss
//! models (`1%`, `ge:p=1%,r=25%`).
//!
//! Every error names the value and the accepted forms, because these reach
//! the user unchanged (`osprobe link --rate 100mb` must say that `mb` is not
//! a rate unit, not "invalid digit").
//!
//! Units follow tc(8) where tc has one: rates in bits per second with SI
//! prefixes (`kbit` = 1000 bit/s), queue sizes in bytes with binary prefixes
//! (`kb` = 1024 bytes, as tc's `limit`).

use std::fmt;
use std::time::Duration;

/// A value that could not be parsed: what it was meant to be, the text,
/// why it was refused and the forms that are accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub what: &'static str,
    pub value: String,
    pub reason: String,
    pub accepted: &'static str,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} '{}': {}; accepted: {}",
            self.what, self.value, self.reason, self.accepted
        )
    }
}

impl std::error::Error for ParseError {}

pub const DURATION_FORMS: &str = "a number with a unit, e.g. 50ms, 1.5ms, 250us, 2s, 800ns (or 0)";
pub const PROBABILITY_FORMS: &str = "a percentage from 0% to 100%, e.g. 1%, 0.5%";
pub const RATE_FORMS: &str =
    "bits per second with a unit, e.g. 10kbit, 100mbit, 1gbit, 1.5gbit (also kbps, mbps, gbps)";
pub const QUEUE_FORMS: &str =
    "packets (1000p) or bytes (1500b, 64kb, 1mb; kb = 1024 bytes), or 'unlimited'";
pub const LOSS_FORMS: &str = "a percentage (1%, 0.5%) for independent loss, or a Gilbert-Elliott \
     model ge:p=P,r=R[,bad=B][,good=G] with percentages (p: good->bad, r: bad->good, \
     bad/good: loss in each state, default 100% and 0%)";

fn error(
    what: &'static str,
    value: &str,
    reason: impl Into<String>,
    accepted: &'static str,
) -> ParseError {
    ParseError {
        what,
        value: value.to_string(),
        reason: reason.into(),
        accepted,
    }
}

/// Split `12.5ms` into (12.5, "ms"); the number must be finite and >= 0.
fn number_and_unit<'a>(
    text: &'a str,
    what: &'static str,
    original: &str,
    accepted: &'static str,
) -> Result<(f64, &'a str), ParseError> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() {
        return Err(error(
            what,
            original,
            "it does not start with a number",
            accepted,
        ));
    }
    let value: f64 = number.parse().map_err(|_| {
        error(
            what,
            original,
            format!("'{number}' is not a number"),
            accepted,
        )
    })?;
    if !value.is_finite() {
        return Err(error(what, original, "the number is not finite", accepted));
    }
    Ok((value, unit.trim()))
}

/// `50ms`, `1.5ms`, `250us` (or `µs`), `2s`, `800ns`, or a bare `0`.
pub fn duration(text: &str) -> Result<Duration, ParseError> {
    const WHAT: &str = "duration";
    let t = text.trim();
    if t.starts_with('-') {
        return Err(error(WHAT, text, "it is negative", DURATION_FORMS));
    }
    let (value, unit) = number_and_unit(t, WHAT, text, DURATION_FORMS)?;
    let ns_per_unit = match unit.to_ascii_lowercase().as_str() {
        "ns" => 1.0,
        "us" | "µs" | "μs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" => 1e9,
        "" if value == 0.0 => 1.0,
        "" => return Err(error(WHAT, text, "the unit is missing", DURATION_FORMS)),
        other => {
            return Err(error(
                WHAT,
                text,
                format!("'{other}' is not a time unit"),
                DURATION_FORMS,
            ))
        }
    };
    let ns = value * ns_per_unit;
    if ns > u64::MAX as f64 / 2.0 {
        return Err(error(WHAT, text, "it is too long", DURATION_FORMS));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// `1%`, `0.5%`, `100%` -> 0.01, 0.005, 1.0.
pub fn probability(text: &str) -> Result<f64, ParseError> {
    const WHAT: &str = "probability";
    let t = text.trim();
    let Some(number) = t.strip_suffix('%') else {
        return Err(error(
            WHAT,
            text,
            "the % sign is missing (a bare number would be ambiguous)",
            PROBABILITY_FORMS,
        ));
    };
    let percent: f64 = number.trim().parse().map_err(|_| {
        error(
            WHAT,
            text,
            format!("'{number}' is not a number"),
            PROBABILITY_FORMS,
        )
    })?;
    if !(0.0..=100.0).contains(&percent) {
        return Err(error(
            WHAT,
            text,
            "it is outside 0%..100%",
            PROBABILITY_FORMS,
        ));
    }
    Ok(percent / 100.0)
}

/// The longest delay or jitter accepted (a longer one is surely a typo, and
/// the packets it holds must fit in memory). Defined with the parsers, which
/// enforce it, so that parsing needs nothing from the impairments it feeds.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// A link's delay or jitter: a [`duration`] of at most [`MAX_DELAY`].
pub fn delay(text: &str) -> Result<Duration, ParseError> {
    let delay = duration(text)?;
    let max = MAX_DELAY;
    if delay > max {
        return Err(error(
            "delay",
            text,
            format!("at most {} s", max.as_secs()),
            DURATION_FORMS,
        ));
    }
    Ok(delay)
}

/// The highest rate accepted: 1 Tbit/s (far above what a user-space
/// forwarder reaches; anything beyond is a typo).
pub const MAX_RATE_BPS: u64 = 1_000_000_000_000;

/// `10kbit`, `100mbit`, `1gbit`, `1.5gbit`, `2000bit`, and the same with
/// `bps`, `kbps`, `mbps`, `gbps`: bits per second, SI prefixes.
pub fn rate(text: &str) -> Result<u64, ParseError> {
    const WHAT: &str = "rate";
    let t = text.trim();
    if t.starts_with('-') {
        return Err(error(WHAT, text, "it is negative", RATE_FORMS));
    }
    let (value, unit) = number_and_unit(t, WHAT, text, RATE_FORMS)?;
    let unit_lower = unit.to_ascii_lowercase();
    let unit_lower = unit_lower.strip_suffix("/s").unwrap_or(&unit_lower);
    let factor = match unit_lower {
        "bit" | "bps" => 1.0,
        "kbit" | "kbps" => 1e3,
        "mbit" | "mbps" => 1e6,
        "gbit" | "gbps" => 1e9,
        "tbit" | "tbps" => 1e12,
        "" => return Err(error(WHAT, text, "the unit is missing", RATE_FORMS)),
        other if other.ends_with('b') || other.ends_with("byte") => {
            return Err(error(
                WHAT,
                text,
                format!("'{other}' is ambiguous (bits or bytes?): write bit, e.g. mbit"),
                RATE_FORMS,
            ))
        }
        other => {
            return Err(error(
                WHAT,
                text,
                format!("'{other}' is not a rate unit"),
                RATE_FORMS,
            ))
        }
    };
    let bps = (value * factor).round();
    if bps < 1.0 {
        return Err(error(WHAT, text, "it is below 1 bit/s", RATE_FORMS));
    }
    if bps > MAX_RATE_BPS as f64 {
        return Err(error(WHAT, text, "it is above 1 tbit", RATE_FORMS));
    }
    Ok(bps as u64)
}

/// How much a bottleneck's drop-tail queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueLimit {
    /// No bound of its own (the forwarder's memory cap still applies).
    #[default]
    Unlimited,
    Packets(u64),
    Bytes(u64),
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Unlimited => f.write_str("unlimited"),
            QueueLimit::Packets(n) => write!(f, "{n}p"),
            QueueLimit::Bytes(b) => write!(f, "{b}b"),
        }
    }
}

/// `1000p`, `1500b`, `64kb`, `1mb`, `unlimited`.
pub fn queue_limit(text: &str) -> Result<QueueLimit, ParseError> {
    const WHAT: &str = "queue size";
    let t = text.trim();
    if matches!(
        t.to_ascii_lowercase().as_str(),
        "unlimited" | "inf" | "infinite"
    ) {
        return Ok(QueueLimit::Unlimited);
    }
    if t.starts_with('-') {
        return Err(error(WHAT, text, "it is negative", QUEUE_FORMS));
    }
    let (value, unit) = number_and_unit(t, WHAT, text, QUEUE_FORMS)?;
    if value.fract() != 0.0 && unit.eq_ignore_ascii_case("p") {
        return Err(error(
            WHAT,
            text,
            "a packet count must be a whole number",
            QUEUE_FORMS,
        ));
    }
    let limit = match unit.to_ascii_lowercase().as_str() {
        "p" | "pkt" | "pkts" | "packets" => QueueLimit::Packets(value as u64),
        "b" | "bytes" => QueueLimit::Bytes(value.round() as u64),
        "kb" | "kib" | "k" => QueueLimit::Bytes((value * 1024.0).round() as u64),
        "mb" | "mib" | "m" => QueueLimit::Bytes((value * 1024.0 * 1024.0).round() as u64),
        "" => {
            return Err(error(
                WHAT,
                text,
                "the unit is missing (p for packets, b/kb/mb for bytes)",
                QUEUE_FORMS,
            ))
        }
        other => {
            return Err(error(
                WHAT,
                text,
                format!("'{other}' is not a queue unit"),
                QUEUE_FORMS,
            ))
        }
    };
    match limit {
        QueueLimit::Packets(0) | QueueLimit::Bytes(0) => Err(error(
            WHAT,
            text,
            "a queue must hold something",
            QUEUE_FORMS,
        )),
        QueueLimit::Bytes(b) if b > 1 << 40 => {
            Err(error(WHAT, text, "it is above 1 TiB", QUEUE_FORMS))
        }
        other => Ok(other),
    }
}

/// A loss model as typed: independent, or Gilbert-Elliott.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum LossSpec {
    #[default]
    None,
    /// Each packet lost with this probability, independently.
    Bernoulli(f64),
    /// Two states; `p` good->bad and `r` bad->good per packet, and the loss
    /// probability in each state.
    GilbertElliott {
        p: f64,
        r: f64,
        loss_bad: f64,
        loss_good: f64,
    },
}

/// `1%` (independent), `0%` (none), or `ge:p=1%,r=25%[,bad=100%][,good=0%]`.
pub fn loss(text: &str) -> Result<LossSpec, ParseError> {
    const WHAT: &str = "loss";
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let Some(params) = lower
        .strip_prefix("ge:")
        .or_else(|| lower.strip_prefix("gilbert-elliott:"))
    else {
        let p = probability(t).map_err(|e| error(WHAT, text, e.reason, LOSS_FORMS))?;
        return Ok(if p == 0.0 {
            LossSpec::None
        } else {
            LossSpec::Bernoulli(p)
        });
    };
    let (mut p, mut r, mut loss_bad, mut loss_good) = (None, None, 1.0, 0.0);
    for item in params.split(',') {
        let Some((key, value)) = item.split_once('=') else {
            return Err(error(
                WHAT,
                text,
                format!("'{item}' is not KEY=PERCENT"),
                LOSS_FORMS,
            ));
        };
        let v = probability(value).map_err(|e| {
            error(
                WHAT,
                text,
                format!("{}: {}", key.trim(), e.reason),
                LOSS_FORMS,
            )
        })?;
        match key.trim() {
            "p" => p = Some(v),
            "r" => r = Some(v),
            "bad" => loss_bad = v,
            "good" => loss_good = v,
            other => {
                return Err(error(
                    WHAT,
                    text,
                    format!("unknown key '{other}'"),
                    LOSS_FORMS,
                ))
            }
        }
    }
    let (Some(p), Some(r)) = (p, r) else {
        return Err(error(WHAT, text, "both p and r are needed", LOSS_FORMS));
    };
    if p + r == 0.0 {
        return Err(error(
            WHAT,
            text,
            "p and r cannot both be 0% (the chain would never move)",
            LOSS_FORMS,
        ));
    }
    Ok(LossSpec::GilbertElliott {
        p,
        r,
        loss_bad,
        loss_good,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_are_bounded() {
        assert_eq!(delay("50ms"), Ok(Duration::from_millis(50)));
        let e = delay("61s").unwrap_err().to_string();
        assert!(e.contains("'61s'") && e.contains("at most 60 s"), "{e}");
        assert!(delay("fast").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(duration("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(duration("1.5ms").unwrap(), Duration::from_micros(1500));
        assert_eq!(duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(duration("250µs").unwrap(), Duration::from_micros(250));
        assert_eq!(duration("2s").unwrap(), Duration::from_secs(2));
        assert_eq!(duration("800ns").unwrap(), Duration::from_nanos(800));
        assert_eq!(duration("0").unwrap(), Duration::ZERO);
        assert_eq!(duration(" 20MS ").unwrap(), Duration::from_millis(20));
        for (bad, why) in [
            ("50", "unit is missing"),
            ("-5ms", "negative"),
            ("ms", "does not start with a number"),
            ("5 parsecs", "not a time unit"),
            ("1.2.3ms", "not a number"),
        ] {
            let e = duration(bad).unwrap_err();
            let text = e.to_string();
            assert!(text.contains(why), "{bad}: {text}");
            assert!(text.contains(&format!("'{bad}'")), "{text}");
            assert!(text.contains("50ms"), "{text}");
        }
    }

    #[test]
    fn probabilities() {
        assert_eq!(probability("1%").unwrap(), 0.01);
        assert_eq!(probability("0.5%").unwrap(), 0.005);
        assert_eq!(probability("100%").unwrap(), 1.0);
        assert_eq!(probability("0%").unwrap(), 0.0);
        assert!(probability("0.01")
            .unwrap_err()
            .to_string()
            .contains("% sign"));
        assert!(probability("101%")
            .unwrap_err()
            .to_string()
            .contains("0%..100%"));
        assert!(probability("-1%")
            .unwrap_err()
            .to_string()
            .contains("0%..100%"));
        assert!(probability("x%")
            .unwrap_err()
            .to_string()
            .contains("not a number"));
    }

    #[test]
    fn rates() {
        assert_eq!(rate("100mbit").unwrap(), 100_000_000);
        assert_eq!(rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(rate("10kbit").unwrap(), 10_000);
        assert_eq!(rate("1.5gbit").unwrap(), 1_500_000_000);
        assert_eq!(rate("2000bit").unwrap(), 2000);
        assert_eq!(rate("50Mbps").unwrap(), 50_000_000);
        assert_eq!(rate("50mbit/s").unwrap(), 50_000_000);
        for (bad, why) in [
            ("100mb", "ambiguous"),
            ("100", "unit is missing"),
            ("0mbit", "below 1 bit/s"),
            ("2tbit", "above 1 tbit"),
            ("fast", "does not start with a number"),
            ("10furlongs", "not a rate unit"),
            ("-1mbit", "negative"),
        ] {
            let text = rate(bad).unwrap_err().to_string();
            assert!(text.contains(why), "{bad}: {text}");
            assert!(text.contains("100mbit"), "{text}");
        }
    }

    #[test]
    fn queue_limits() {
        assert_eq!(queue_limit("1000p").unwrap(), QueueLimit::Packets(1000));
        assert_eq!(queue_limit("64kb").unwrap(), QueueLimit::Bytes(65_536));
        assert_eq!(queue_limit("1mb").unwrap(), QueueLimit::Bytes(1_048_576));
        assert_eq!(queue_limit("1500b").unwrap(), QueueLimit::Bytes(1500));
        assert_eq!(queue_limit("unlimited").unwrap(), QueueLimit::Unlimited);
        for (bad, why) in [
            ("1000", "unit is missing"),
            ("0p", "must hold something"),
            ("1.5p", "whole number"),
            ("10 lorries", "not a queue unit"),
        ] {
            let text = queue_limit(bad).unwrap_err().to_string();
            assert!(text.contains(why), "{bad}: {text}");
            assert!(text.contains("1000p"), "{text}");
        }
        assert_eq!(QueueLimit::Packets(7).to_string(), "7p");
    }

    #[test]
    fn loss_specs() {
        assert_eq!(loss("1%").unwrap(), LossSpec::Bernoulli(0.01));
        assert_eq!(loss("0%").unwrap(), LossSpec::None);
        assert_eq!(
            loss("ge:p=1%,r=25%").unwrap(),
            LossSpec::GilbertElliott {
                p: 0.01,
                r: 0.25,
                loss_bad: 1.0,
                loss_good: 0.0
            }
        );
        assert_eq!(
            loss("GE:p=2%,r=50%,bad=80%,good=0.1%").unwrap(),
            LossSpec::GilbertElliott {
                p: 0.02,
                r: 0.5,
                loss_bad: 0.8,
                loss_good: 0.001
            }
        );
        for (bad, why) in [
            ("1", "% sign"),
            ("ge:p=1%", "both p and r"),
            ("ge:p=1%,r=2%,q=3%", "unknown key 'q'"),
            ("ge:p=1%,r", "not KEY=PERCENT"),
            ("ge:p=0%,r=0%", "never move"),
            ("ge:p=1,r=2%", "p: the % sign"),
        ] {
            let text = loss(bad).unwrap_err().to_string();
            assert!(text.contains(why), "{bad}: {text}");
            assert!(text.contains("ge:p="), "{text}");
        }
    }
}
