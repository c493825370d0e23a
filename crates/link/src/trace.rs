//! Mahimahi's trace format for a link's capacity over time.
//!
//! A trace is a text file of non-decreasing integer millisecond timestamps,
//! one per line. Each line is a delivery opportunity: at that millisecond
//! the link may send up to [`OPPORTUNITY_BYTES`] (one 1500-byte packet; the
//! same timestamp on several lines means several opportunities in that
//! millisecond). The trace repeats with a period equal to its last
//! timestamp, so a file with the single line `1` is a link that sends one
//! packet every millisecond, 12 Mbit/s.
//!
//! As in Mahimahi, an opportunity with nothing queued is lost (capacity
//! does not accumulate), and a packet smaller than an opportunity leaves
//! room for the next packet in the same opportunity.

use std::fmt;
use std::path::Path;

/// Bytes one delivery opportunity can carry (Mahimahi's MTU-sized packet).
pub const OPPORTUNITY_BYTES: u32 = 1500;
/// The most lines a trace may have (Mahimahi's own traces have ~10^5).
pub const MAX_LINES: usize = 10_000_000;

/// A parsed trace: opportunity times within one period, in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Non-decreasing; the last one is the period.
    times_ms: Vec<u64>,
    /// Where it came from, for messages.
    source: String,
}

/// Why a trace was refused; names the source and the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError(pub String);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

const FORM: &str = "expected Mahimahi's format: one integer millisecond timestamp per line, \
     non-decreasing, the last one (the period) above 0";

impl Trace {
    /// Read a trace file.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| TraceError(format!("cannot read trace file {}: {e}", path.display())))?;
        Trace::parse(&text, &path.display().to_string())
    }

    /// Parse the text of a trace; `source` names it in errors.
    pub fn parse(text: &str, source: &str) -> Result<Trace, TraceError> {
        let mut times_ms = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            let ms: u64 = t.parse().map_err(|_| {
                TraceError(format!(
                    "trace {source}, line {line_no}: '{t}' is not a whole number of milliseconds; {FORM}"
                ))
            })?;
            if let Some(&previous) = times_ms.last() {
                if ms < previous {
                    return Err(TraceError(format!(
                        "trace {source}, line {line_no}: {ms} comes after {previous}; {FORM}"
                    )));
                }
            }
            if times_ms.len() == MAX_LINES {
                return Err(TraceError(format!(
                    "trace {source}: more than {MAX_LINES} lines"
                )));
            }
            times_ms.push(ms);
        }
        match times_ms.last() {
            None => Err(TraceError(format!(
                "trace {source} has no timestamps; {FORM}"
            ))),
            Some(0) => Err(TraceError(format!(
                "trace {source}: its last timestamp (the period) is 0; {FORM}"
            ))),
            Some(_) => Ok(Trace {
                times_ms,
                source: source.to_string(),
            }),
        }
    }

    /// The period in milliseconds (the last timestamp).
    pub fn period_ms(&self) -> u64 {
        *self.times_ms.last().expect("a parsed trace is not empty")
    }

    /// Opportunities per period.
    pub fn opportunities(&self) -> usize {
        self.times_ms.len()
    }

    /// The long-run capacity in bits per second.
    pub fn mean_rate_bps(&self) -> f64 {
        self.times_ms.len() as f64 * f64::from(OPPORTUNITY_BYTES) * 8.0 * 1000.0
            / self.period_ms() as f64
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The time of opportunity `index` of cycle `cycle`, in ms from the
    /// start. Saturating: a trace file may hold timestamps up to u64::MAX,
    /// and its second cycle then lies past the end of the clock ("never"),
    /// not at a wrapped-around time (or a panic, as the fuzz test found).
    fn time_ms(&self, cursor: Cursor) -> u64 {
        cursor
            .cycle
            .saturating_mul(self.period_ms())
            .saturating_add(self.times_ms[cursor.index])
    }
}

/// An opportunity: which repetition of the trace and which line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Cursor {
    cycle: u64,
    index: usize,
}

/// A FIFO link whose departures follow a trace. Departure times are worked
/// out when a packet arrives, which is exact for a FIFO without preemption:
/// nothing that arrives later can change when an earlier packet leaves.
#[derive(Debug, Clone)]
pub struct TraceLink {
    trace: std::sync::Arc<Trace>,
    /// Time zero of the trace, in CLOCK_MONOTONIC ns.
    origin_ns: u64,
    /// The last opportunity used, and the bytes it has left.
    current: Option<(Cursor, u32)>,
}

impl TraceLink {
    pub fn new(trace: std::sync::Arc<Trace>, origin_ns: u64) -> TraceLink {
        TraceLink {
            trace,
            origin_ns,
            current: None,
        }
    }

    fn at_ns(&self, cursor: Cursor) -> u64 {
        self.origin_ns
            .saturating_add(self.trace.time_ms(cursor).saturating_mul(1_000_000))
    }

    fn next(&self, cursor: Cursor) -> Cursor {
        if cursor.index + 1 < self.trace.times_ms.len() {
            Cursor {
                cycle: cursor.cycle,
                index: cursor.index + 1,
            }
        } else {
            Cursor {
                cycle: cursor.cycle + 1,
                index: 0,
            }
        }
    }

    /// The first opportunity at or after `t_ns`.
    fn first_at_or_after(&self, t_ns: u64) -> Cursor {
        let since_ms = t_ns.saturating_sub(self.origin_ns).div_ceil(1_000_000);
        let period = self.trace.period_ms();
        // Timestamps run from 0 to the period inclusive, so the end of one
        // cycle can be the answer: start a cycle early. The last line of
        // the cycle after `since_ms / period` is always late enough.
        let mut cycle = (since_ms / period).saturating_sub(1);
        loop {
            let base = cycle.saturating_mul(period);
            let index = self
                .trace
                .times_ms
                .partition_point(|&ms| base.saturating_add(ms) < since_ms);
            if index < self.trace.times_ms.len() {
                return Cursor { cycle, index };
            }
            cycle += 1;
        }
    }

    /// When a packet of `bytes` arriving at `arrival_ns` leaves: at the
    /// opportunity that carries its last byte.
    pub fn departure(&mut self, arrival_ns: u64, bytes: u32) -> u64 {
        let (mut cursor, mut left) = match self.current {
            // The previous packet's opportunity still has room and has not
            // passed yet: this packet shares it.
            Some((c, left)) if left > 0 && self.at_ns(c) >= arrival_ns => (c, left),
            Some((c, _)) => {
                let after_previous = self.next(c);
                let after_arrival = self.first_at_or_after(arrival_ns);
                (after_previous.max(after_arrival), OPPORTUNITY_BYTES)
            }
            None => (self.first_at_or_after(arrival_ns), OPPORTUNITY_BYTES),
        };
        let mut remaining = bytes.max(1);
        loop {
            let take = remaining.min(left);
            remaining -= take;
            left -= take;
            if remaining == 0 {
                break;
            }
            cursor = self.next(cursor);
            left = OPPORTUNITY_BYTES;
        }
        self.current = Some((cursor, left));
        self.at_ns(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const MS: u64 = 1_000_000;

    #[test]
    fn parses_mahimahi_traces() {
        let t = Trace::parse("1\n1\n2\n5\n\n", "t").unwrap();
        assert_eq!(t.period_ms(), 5);
        assert_eq!(t.opportunities(), 4);
        // 4 x 1500 bytes per 5 ms = 9.6 Mbit/s.
        assert!((t.mean_rate_bps() - 9.6e6).abs() < 1.0);
        let one = Trace::parse("1", "one").unwrap();
        assert!((one.mean_rate_bps() - 12e6).abs() < 1.0);
    }

    /// A period near u64::MAX ms puts the second cycle past the end of
    /// the clock: departures saturate there instead of overflowing.
    #[test]
    fn a_huge_period_saturates_instead_of_overflowing() {
        let t = Arc::new(Trace::parse("1\n18446744073709551615\n", "huge").unwrap());
        let mut link = TraceLink::new(t, 0);
        assert_eq!(link.departure(0, 1), MS);
        // Three opportunities: the second line, then the next cycle.
        assert_eq!(link.departure(0, 3 * OPPORTUNITY_BYTES), u64::MAX);
        assert_eq!(link.departure(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn bad_traces_name_the_line() {
        let e = Trace::parse("1\n2\nx\n", "f.trace")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.trace, line 3") && e.contains("'x'"), "{e}");
        let e = Trace::parse("5\n3\n", "f").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("3 comes after 5"), "{e}");
        let e = Trace::parse("\n\n", "f").unwrap_err().to_string();
        assert!(e.contains("no timestamps"), "{e}");
        let e = Trace::parse("0\n0\n", "f").unwrap_err().to_string();
        assert!(e.contains("period) is 0"), "{e}");
        let e = Trace::parse("-1\n", "f").unwrap_err().to_string();
        assert!(e.contains("not a whole number"), "{e}");
        let e = Trace::load(Path::new("/nonexistent/osprobe.trace"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/osprobe.trace"), "{e}");
    }

    #[test]
    fn one_packet_per_opportunity_and_the_trace_repeats() {
        let trace = Arc::new(Trace::parse("2\n4\n", "t").unwrap());
        let origin = 1_000 * MS;
        let mut link = TraceLink::new(trace, origin);
        // Five full packets at time 0: opportunities at 2, 4, 6, 8, 10 ms.
        let departures: Vec<u64> = (0..5).map(|_| link.departure(origin, 1500)).collect();
        assert_eq!(
            departures,
            [2, 4, 6, 8, 10].map(|ms| origin + ms * MS).to_vec()
        );
    }

    #[test]
    fn small_packets_share_an_opportunity_and_idle_ones_are_lost() {
        let trace = Arc::new(Trace::parse("1\n", "t").unwrap());
        let mut link = TraceLink::new(trace, 0);
        // Three 500-byte packets fill the opportunity at 1 ms; the fourth
        // goes at 2 ms.
        let d: Vec<u64> = (0..4).map(|_| link.departure(0, 500)).collect();
        assert_eq!(d, vec![MS, MS, MS, 2 * MS]);
        // Arriving at 10.5 ms, after the link sat idle: the next
        // opportunity is 11 ms; the unused ones are gone.
        assert_eq!(link.departure(10 * MS + MS / 2, 1500), 11 * MS);
        // A packet that arrives after its opportunity passed cannot use the
        // room left in it.
        assert_eq!(link.departure(11 * MS + 1, 100), 12 * MS);
        assert_eq!(link.departure(20 * MS, 100), 20 * MS);
    }

    #[test]
    fn a_packet_larger_than_an_opportunity_spans_several() {
        let trace = Arc::new(Trace::parse("1\n", "t").unwrap());
        let mut link = TraceLink::new(trace, 0);
        assert_eq!(link.departure(0, 1000), MS);
        // 500 bytes left at 1 ms, 1500 at 2 ms: 2000 bytes leave at 2 ms.
        assert_eq!(link.departure(0, 2000), 2 * MS);
    }

    #[test]
    fn repeated_timestamps_are_several_opportunities() {
        let trace = Arc::new(Trace::parse("3\n3\n3\n", "t").unwrap());
        let mut link = TraceLink::new(trace, 0);
        let d: Vec<u64> = (0..4).map(|_| link.departure(0, 1500)).collect();
        assert_eq!(d, vec![3 * MS, 3 * MS, 3 * MS, 6 * MS]);
    }
}
