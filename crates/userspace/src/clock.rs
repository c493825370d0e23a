//! The time a user-space stack sees.
//!
//! `fine` is CLOCK_MONOTONIC as it is. `tick:P` advances only in steps of
//! P, as a kernel's jiffies do with HZ = 1 s / P: every reading inside one
//! tick returns the tick's start, and a timer the stack asks for fires at
//! the first tick boundary at or after its deadline (a jiffies timer cannot
//! fire between ticks). `tick:P+floor` is the same clock with the LKL patch
//! the seed measured: an RTT sample of zero counts as one tick (applied by
//! the stack's adapter where the library exposes its samples).

use crate::error::ParamError;
use std::fmt;
use std::time::{Duration, Instant};

/// Which clock a stack runs on: the `clock` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockMode {
    /// CLOCK_MONOTONIC, nanosecond resolution.
    Fine,
    /// A clock that advances in steps of `period`; `floor_rtt` counts a zero
    /// RTT sample as one `period`.
    Tick { period: Duration, floor_rtt: bool },
}

/// What `clock=` accepts, for error messages and help.
pub const CLOCK_VALUES: &str =
    "fine, tick:10ms, tick:1ms, tick:10ms+floor (any tick:<duration>[+floor])";

impl ClockMode {
    /// Parse `fine`, `tick:10ms`, `tick:1ms+floor`, ...
    pub fn parse(text: &str) -> Result<ClockMode, ParamError> {
        let text = text.trim();
        if text == "fine" {
            return Ok(ClockMode::Fine);
        }
        let bad = || ParamError {
            name: "clock",
            reason: format!("clock '{text}': expected {CLOCK_VALUES}"),
        };
        let spec = text.strip_prefix("tick:").ok_or_else(bad)?;
        let (period_text, floor_rtt) = match spec.strip_suffix("+floor") {
            Some(p) => (p, true),
            None => (spec, false),
        };
        // The link emulator's duration syntax (10ms, 250us, 1s), so a tick
        // is written as --delay is.
        let period = osprobe_link::parse::duration(period_text).map_err(|_| bad())?;
        if period.is_zero() || period > Duration::from_secs(1) {
            return Err(ParamError {
                name: "clock",
                reason: format!("clock '{text}': the tick must be above 0 and at most 1s"),
            });
        }
        Ok(ClockMode::Tick { period, floor_rtt })
    }

    /// The tick, or None for the fine clock.
    pub fn tick(&self) -> Option<Duration> {
        match self {
            ClockMode::Fine => None,
            ClockMode::Tick { period, .. } => Some(*period),
        }
    }

    /// Whether a zero RTT sample is raised to one tick.
    pub fn floors_rtt(&self) -> bool {
        matches!(
            self,
            ClockMode::Tick {
                floor_rtt: true,
                ..
            }
        )
    }
}

impl fmt::Display for ClockMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClockMode::Fine => write!(f, "fine"),
            ClockMode::Tick { period, floor_rtt } => {
                let ns = period.as_nanos();
                let (value, unit) = if ns % 1_000_000_000 == 0 {
                    (ns / 1_000_000_000, "s")
                } else if ns % 1_000_000 == 0 {
                    (ns / 1_000_000, "ms")
                } else if ns % 1_000 == 0 {
                    (ns / 1_000, "us")
                } else {
                    (ns, "ns")
                };
                write!(f, "tick:{value}{unit}")?;
                if *floor_rtt {
                    write!(f, "+floor")?;
                }
                Ok(())
            }
        }
    }
}

/// A stack's clock: real time since `origin`, quantized by the mode.
#[derive(Debug, Clone, Copy)]
pub struct StackClock {
    mode: ClockMode,
    origin: Instant,
}

impl StackClock {
    pub fn new(mode: ClockMode) -> StackClock {
        StackClock {
            mode,
            origin: Instant::now(),
        }
    }

    pub fn mode(&self) -> ClockMode {
        self.mode
    }

    /// The real instant the stack's time counts from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// The stack's time now, since the origin.
    pub fn now(&self) -> Duration {
        self.quantize(self.origin.elapsed())
    }

    /// The stack's time now as an `Instant` (for libraries that take one):
    /// the origin plus `now()`, so it moves in ticks too.
    pub fn now_instant(&self) -> Instant {
        self.origin + self.now()
    }

    /// The stack's reading at real time `elapsed` since the origin.
    pub fn quantize(&self, elapsed: Duration) -> Duration {
        match self.mode.tick() {
            None => elapsed,
            Some(tick) => {
                let ticks = elapsed.as_nanos() / tick.as_nanos();
                tick * ticks as u32
            }
        }
    }

    /// When (real time since the origin) a timer for stack time `deadline`
    /// fires: at the deadline on the fine clock, at the first tick boundary
    /// at or after it on a tick clock.
    pub fn fires_at(&self, deadline: Duration) -> Duration {
        match self.mode.tick() {
            None => deadline,
            Some(tick) => {
                let tick_ns = tick.as_nanos();
                let ticks = deadline.as_nanos().div_ceil(tick_ns);
                Duration::from_nanos((ticks * tick_ns) as u64)
            }
        }
    }

    /// The same as `fires_at` for a library's `Instant` deadline.
    pub fn fires_at_instant(&self, deadline: Instant) -> Instant {
        let since = deadline.saturating_duration_since(self.origin);
        self.origin + self.fires_at(since)
    }

    /// An RTT sample as the patched stack counts it: zero becomes one tick.
    pub fn floor_rtt(&self, sample: Duration) -> Duration {
        match self.mode {
            ClockMode::Tick {
                period,
                floor_rtt: true,
            } if sample < period => period,
            _ => sample,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn parses_the_documented_forms_and_prints_them_back() {
        for text in [
            "fine",
            "tick:10ms",
            "tick:1ms",
            "tick:10ms+floor",
            "tick:250us",
        ] {
            let mode = ClockMode::parse(text).unwrap();
            assert_eq!(mode.to_string(), text);
        }
        assert_eq!(
            ClockMode::parse("tick:10ms+floor").unwrap(),
            ClockMode::Tick {
                period: 10 * MS,
                floor_rtt: true
            }
        );
    }

    #[test]
    fn refuses_what_it_does_not_know_and_names_the_input() {
        for text in [
            "",
            "coarse",
            "tick:",
            "tick:10",
            "tick:0ms",
            "tick:2s",
            "tick:10ms+flor",
            "tick:-1ms",
        ] {
            let err = ClockMode::parse(text).unwrap_err().to_string();
            assert!(err.contains("clock '"), "{text}: {err}");
        }
    }

    #[test]
    fn a_tick_clock_reads_the_start_of_the_current_tick() {
        let clock = StackClock::new(ClockMode::parse("tick:10ms").unwrap());
        assert_eq!(clock.quantize(Duration::ZERO), Duration::ZERO);
        assert_eq!(clock.quantize(9 * MS), Duration::ZERO);
        assert_eq!(clock.quantize(10 * MS), 10 * MS);
        assert_eq!(clock.quantize(29 * MS + MS / 2), 20 * MS);
        let fine = StackClock::new(ClockMode::Fine);
        assert_eq!(fine.quantize(29 * MS + MS / 2), 29 * MS + MS / 2);
    }

    #[test]
    fn timers_fire_on_tick_boundaries() {
        let clock = StackClock::new(ClockMode::parse("tick:10ms").unwrap());
        assert_eq!(clock.fires_at(Duration::ZERO), Duration::ZERO);
        assert_eq!(clock.fires_at(MS), 10 * MS);
        assert_eq!(clock.fires_at(10 * MS), 10 * MS);
        assert_eq!(clock.fires_at(10 * MS + Duration::from_nanos(1)), 20 * MS);
        let origin = clock.origin();
        assert_eq!(clock.fires_at_instant(origin + 3 * MS), origin + 10 * MS);
    }

    #[test]
    fn only_the_patched_clock_floors_rtt_samples() {
        let patched = StackClock::new(ClockMode::parse("tick:10ms+floor").unwrap());
        assert_eq!(patched.floor_rtt(Duration::ZERO), 10 * MS);
        assert_eq!(patched.floor_rtt(20 * MS), 20 * MS);
        let plain = StackClock::new(ClockMode::parse("tick:10ms").unwrap());
        assert_eq!(plain.floor_rtt(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn the_readings_never_go_back() {
        let clock = StackClock::new(ClockMode::parse("tick:1ms").unwrap());
        let mut last = clock.now();
        for _ in 0..1000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
    }
}
