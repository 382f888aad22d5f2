//! The arrival schedule of a rate cell: when each request is due, from the rate, the
//! arrival process and a seed. Defined once so that the recorder (which sends on it),
//! the analyzer (which checks `requests.scheduled_ns` against it) and the tests agree.

use crate::layout::Rate;
use crate::rng::{Rng, mix};
use crate::str_enum;

str_enum! {
    /// How a rate cell's requests arrive.
    pub enum Arrival {
        /// A Poisson process: exponential gaps with mean 1 / rate (`vllm bench serve`'s
        /// default, burstiness 1).
        Poisson = "poisson",
        /// Evenly spaced, one every 1 / rate seconds.
        Constant = "constant",
    }
}

/// A rate cell's schedule: offsets (ns from the cell's schedule start) of its requests,
/// ending at `count` requests or at `duration_ns`, whichever comes first.
#[derive(Debug, Clone)]
pub struct Schedule {
    rate: Rate,
    arrival: Arrival,
    rng: Rng,
    at_ns: f64,
    sent: u64,
    count: Option<u64>,
    duration_ns: Option<i64>,
}

impl Schedule {
    /// The schedule of the cell at `rate` (the seed is mixed with the rate, so rates of
    /// one run do not share their gaps). With neither a count nor a duration, or with an
    /// infinite rate and no count, it is empty: the caller checks that first.
    pub fn new(
        rate: Rate,
        arrival: Arrival,
        seed: u64,
        count: Option<u64>,
        duration_ns: Option<i64>,
    ) -> Self {
        Schedule {
            rate,
            arrival,
            rng: Rng::new(mix(seed ^ u64::from(rate.milli()))),
            at_ns: 0.0,
            sent: 0,
            count,
            duration_ns,
        }
    }
}

impl Iterator for Schedule {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        if self.count.is_none() && (self.duration_ns.is_none() || self.rate.is_inf()) {
            return None;
        }
        if self.count.is_some_and(|c| self.sent >= c) {
            return None;
        }
        let gap_ns = if self.rate.is_inf() {
            0.0
        } else {
            let mean = 1e9 / self.rate.per_second();
            match self.arrival {
                Arrival::Constant => mean,
                // Inverse CDF of the exponential; 1 - u is in (0, 1], so ln is finite.
                Arrival::Poisson => -mean * (1.0 - self.rng.unit()).ln(),
            }
        };
        // The first request is due at once; each later one a gap after the one before.
        if self.sent > 0 {
            self.at_ns += gap_ns;
        }
        let at = self.at_ns.round() as i64;
        if self.duration_ns.is_some_and(|d| at >= d) {
            return None;
        }
        self.sent += 1;
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(s: &str) -> Rate {
        Rate::parse(s).expect("rate")
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced_and_stop_at_the_duration() {
        let at: Vec<i64> =
            Schedule::new(rate("4"), Arrival::Constant, 1, None, Some(1_000_000_000)).collect();
        assert_eq!(at, vec![0, 250_000_000, 500_000_000, 750_000_000]);
    }

    #[test]
    fn poisson_arrivals_have_the_asked_mean_rate_and_repeat_with_the_seed() {
        let a: Vec<i64> =
            Schedule::new(rate("100"), Arrival::Poisson, 7, Some(20_000), None).collect();
        let b: Vec<i64> =
            Schedule::new(rate("100"), Arrival::Poisson, 7, Some(20_000), None).collect();
        assert_eq!(a, b);
        let c: Vec<i64> =
            Schedule::new(rate("100"), Arrival::Poisson, 8, Some(20_000), None).collect();
        assert_ne!(a, c);
        assert_eq!(a.len(), 20_000);
        let mean_gap = *a.last().expect("last") as f64 / 19_999.0;
        assert!(
            (mean_gap / 1e7 - 1.0).abs() < 0.03,
            "mean gap {mean_gap} ns"
        );
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn an_infinite_rate_sends_the_count_at_once_and_nothing_without_one() {
        let at: Vec<i64> = Schedule::new(Rate::INF, Arrival::Poisson, 1, Some(3), None).collect();
        assert_eq!(at, vec![0, 0, 0]);
        assert_eq!(
            Schedule::new(Rate::INF, Arrival::Poisson, 1, None, Some(5)).count(),
            0
        );
    }

    #[test]
    fn rates_parse_print_and_order() {
        assert_eq!(rate("0.5").to_string(), "0.5");
        assert_eq!(rate("4").to_string(), "4");
        assert_eq!(rate("4.000").to_string(), "4");
        assert_eq!(rate("1.25").to_string(), "1.25");
        assert_eq!(rate("INF").to_string(), "inf");
        for bad in ["0", "-1", "1.2345", "", ".", "x", "1e3", "5000000"] {
            assert!(Rate::parse(bad).is_none(), "{bad}");
        }
        assert!(rate("0.5") < rate("1") && rate("1000") < Rate::INF);
    }
}
