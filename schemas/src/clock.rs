//! The run clock: one monotonic zero per run, every time in the trace is i64 nanoseconds
//! since it, and the manifest maps that zero to UTC and to the host's CLOCK_MONOTONIC, so
//! another process on the same host (the simulator's ground truth) can be aligned with it.

use std::time::{Duration, Instant, SystemTime};

use crate::manifest::Clock;

/// The host's CLOCK_MONOTONIC in nanoseconds: the same reading in every process of the
/// host (Rust's `Instant` reads this clock on Linux but does not expose its value).
pub fn monotonic_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec)
}

/// CPU time (user + system) this process has used so far, in ns (CLOCK_PROCESS_CPUTIME_ID).
pub fn process_cpu_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec)
}

/// A monotonic clock whose zero is the start of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    zero: Instant,
    utc_at_zero: SystemTime,
    monotonic_at_zero: i64,
}

impl RunClock {
    /// Starts a clock now.
    pub fn start() -> Self {
        // Read both clocks back to back; the UTC anchor is informational (wall clocks
        // step), all measurements use the monotonic side.
        // The monotonic zero is bracketed by two CLOCK_MONOTONIC reads (after one to warm
        // the vDSO path); their midpoint maps it within half their gap, well under 1 µs.
        let _ = monotonic_ns();
        let before = monotonic_ns();
        let zero = Instant::now();
        let after = monotonic_ns();
        let monotonic_at_zero = before + (after - before) / 2;
        let utc_at_zero = SystemTime::now();
        RunClock {
            zero,
            utc_at_zero,
            monotonic_at_zero,
        }
    }

    /// CLOCK_MONOTONIC at the zero, in nanoseconds.
    pub fn monotonic_at_zero(&self) -> i64 {
        self.monotonic_at_zero
    }

    /// The run time of a CLOCK_MONOTONIC reading (e.g. from the simulator's ground truth).
    pub fn from_monotonic(&self, monotonic_ns: i64) -> i64 {
        monotonic_ns.saturating_sub(self.monotonic_at_zero)
    }

    /// Nanoseconds since the zero (saturating at i64::MAX, some 292 years).
    pub fn now_ns(&self) -> i64 {
        self.ns_at(Instant::now())
    }

    /// The run time of an instant taken elsewhere (e.g. right after a socket read).
    /// Instants before the zero give negative values.
    pub fn ns_at(&self, t: Instant) -> i64 {
        match t.checked_duration_since(self.zero) {
            Some(d) => duration_ns(d),
            None => -duration_ns(self.zero.duration_since(t)),
        }
    }

    /// The manifest's record of this clock.
    pub fn anchor(&self) -> Clock {
        Clock {
            utc_at_zero: humantime::format_rfc3339_nanos(self.utc_at_zero).to_string(),
            monotonic_at_zero_ns: Some(self.monotonic_at_zero),
        }
    }
}

fn duration_ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

impl Clock {
    /// The UTC time of the run's zero, parsed; `None` if the text is not RFC 3339.
    pub fn utc(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339(&self.utc_at_zero).ok()
    }

    /// UTC time of a run time in nanoseconds.
    pub fn utc_of(&self, ns: i64) -> Option<SystemTime> {
        let zero = self.utc()?;
        if ns >= 0 {
            zero.checked_add(Duration::from_nanos(ns.unsigned_abs()))
        } else {
            zero.checked_sub(Duration::from_nanos(ns.unsigned_abs()))
        }
    }
}
