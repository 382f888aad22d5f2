//! Medians and percentiles by the methods a rule set names. Values are sorted with a
//! total order first, so the result never depends on the order rows were read in.

use crate::rules::{MedianMethod, PercentileMethod};

/// Sorts `v` (NaN last) so the functions below can index it. Values equal in the total
/// order are the same bits, so an unstable sort gives the same result as a stable one.
pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// Median of sorted values; `None` when empty.
pub fn median(sorted: &[f64], method: MedianMethod) -> Option<f64> {
    median_by(sorted.len(), &|i| sorted[i], method)
}

/// Median of `n` values of which `at(i)` gives the one at rank `i` (0-based, in
/// ascending order); `None` when `n` is 0. It asks only for the ranks it needs.
pub fn median_by(n: usize, at: &dyn Fn(usize) -> f64, method: MedianMethod) -> Option<f64> {
    if n == 0 {
        return None;
    }
    if n % 2 == 1 {
        return Some(at(n / 2));
    }
    let (lo, hi) = (at(n / 2 - 1), at(n / 2));
    Some(match method {
        MedianMethod::Midpoint => lo + (hi - lo) / 2.0,
        MedianMethod::Lower => lo,
        MedianMethod::Upper => hi,
    })
}

/// The `p`-th percentile (0–100) of sorted values; `None` when empty.
pub fn percentile(sorted: &[f64], p: f64, method: PercentileMethod) -> Option<f64> {
    percentile_by(sorted.len(), p, method, &|i| sorted[i])
}

/// The `p`-th percentile (0–100) of `n` values of which `at(i)` gives the one at rank
/// `i`, as [`median_by`]; `None` when `n` is 0.
pub fn percentile_by(
    n: usize,
    p: f64,
    method: PercentileMethod,
    at: &dyn Fn(usize) -> f64,
) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let q = (p / 100.0).clamp(0.0, 1.0);
    Some(match method {
        PercentileMethod::Linear => {
            let pos = q * (n - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = pos.ceil() as usize;
            let frac = pos - lo as f64;
            let low = at(lo);
            low + (at(hi) - low) * frac
        }
        PercentileMethod::NearestRank => {
            let rank = (q * n as f64).ceil() as usize;
            at(rank.clamp(1, n) - 1)
        }
        PercentileMethod::Lower => at((q * (n - 1) as f64).floor() as usize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_by_method() {
        let v = sorted(vec![4.0, 1.0, 3.0, 2.0]);
        assert_eq!(median(&v, MedianMethod::Midpoint), Some(2.5));
        assert_eq!(median(&v, MedianMethod::Lower), Some(2.0));
        assert_eq!(median(&v, MedianMethod::Upper), Some(3.0));
        assert_eq!(median(&[7.0], MedianMethod::Lower), Some(7.0));
        assert_eq!(median(&[], MedianMethod::Midpoint), None);
    }

    #[test]
    fn percentiles_by_method() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        // numpy.percentile(range(1, 11), 90) == 9.1
        assert!(
            (percentile(&v, 90.0, PercentileMethod::Linear).unwrap_or(0.0) - 9.1).abs() < 1e-12
        );
        assert_eq!(
            percentile(&v, 90.0, PercentileMethod::NearestRank),
            Some(9.0)
        );
        assert_eq!(
            percentile(&v, 95.0, PercentileMethod::NearestRank),
            Some(10.0)
        );
        assert_eq!(percentile(&v, 90.0, PercentileMethod::Lower), Some(9.0));
        assert_eq!(
            percentile(&v, 0.0, PercentileMethod::NearestRank),
            Some(1.0)
        );
        assert_eq!(percentile(&v, 100.0, PercentileMethod::Linear), Some(10.0));
    }
}
