//! A decode cell's token events, (arrival ns, tokens), in bounded memory: what the HTML
//! drill-down's output-tokens curve is drawn from. It reads the cumulative count at
//! chosen ranks of time order exactly, by radix selection and one counting pass.

use std::collections::BTreeMap;

use crate::column::{self, Column, Extent};

/// Token events in the order they were read, held as a [`Column`] of interleaved
/// (arrival, tokens) values: in memory up to its limit, in a temporary file beyond.
pub struct Timeline {
    pairs: Column,
    events: usize,
    min: i64,
    max: i64,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::with_limit(column::MEMORY_VALUES)
    }
}

impl std::fmt::Debug for Timeline {
    /// The events in time order (what the tests compare two loads by, whatever order
    /// each read them in).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut events = Vec::new();
        match self.scan(&mut |at, n| events.push((at, n))) {
            Ok(()) => {
                events.sort_unstable();
                f.debug_list().entries(events).finish()
            }
            Err(e) => write!(f, "<unreadable timeline: {e}>"),
        }
    }
}

impl Timeline {
    /// A timeline holding at most `limit` values (half as many events) in memory.
    pub fn with_limit(limit: usize) -> Self {
        Timeline {
            pairs: Column::with_limit(limit.max(2)),
            events: 0,
            min: i64::MAX,
            max: i64::MIN,
        }
    }

    pub fn push(&mut self, arrival_ns: i64, tokens: i64) {
        self.events += 1;
        self.min = self.min.min(arrival_ns);
        self.max = self.max.max(arrival_ns);
        self.pairs.push(arrival_ns);
        self.pairs.push(tokens);
    }

    pub fn len(&self) -> usize {
        self.events
    }

    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// The error that left the timeline incomplete, if writing its file failed.
    pub fn failed(&self) -> Option<&str> {
        self.pairs.failed()
    }

    /// Calls `f` with each event, in the order they were pushed.
    fn scan(&self, f: &mut dyn FnMut(i64, i64)) -> std::io::Result<()> {
        let mut at = None;
        self.pairs.scan(&mut |v| match at.take() {
            None => at = Some(v),
            Some(t) => f(t, v),
        })
    }

    /// For each of `ranks` (ascending, below [`Timeline::len`]) in the events sorted by
    /// (arrival, tokens): the event's arrival, and the tokens of it and every event
    /// before it. What a sort of every event and a running sum give, without either.
    pub fn cumulative_at(&self, ranks: &[usize]) -> std::io::Result<Vec<(i64, i64)>> {
        let ranks: Vec<usize> = ranks.iter().copied().filter(|r| *r < self.events).collect();
        if ranks.is_empty() {
            return Ok(Vec::new());
        }
        // Sorted by (arrival, tokens), an event's arrival is the one at its rank of the
        // arrivals alone.
        let e = Extent {
            n: self.events,
            min: self.min,
            max: self.max,
        };
        let times = column::select(&|f| self.scan(&mut |at, _| f(at)), e, &ranks)?;
        let mut chosen: Vec<i64> = times.values().copied().collect();
        chosen.sort_unstable();
        chosen.dedup();
        // Per chosen arrival: the events before it (count and tokens), and the token
        // counts of the events at it.
        let mut before = vec![(0u64, 0i64); chosen.len() + 1];
        let mut at: Vec<BTreeMap<i64, u64>> = vec![BTreeMap::new(); chosen.len()];
        self.scan(&mut |t, n| {
            let i = chosen.partition_point(|c| *c < t);
            let later = if chosen.get(i) == Some(&t) {
                *at[i].entry(n).or_default() += 1;
                i + 1
            } else {
                i
            };
            // Before every chosen arrival from `later` on (summed below).
            let b = &mut before[later];
            b.0 += 1;
            b.1 = b.1.saturating_add(n);
        })?;
        let mut running = (0u64, 0i64);
        for b in &mut before {
            running = (running.0 + b.0, running.1.saturating_add(b.1));
            *b = running;
        }
        let mut out = Vec::with_capacity(ranks.len());
        for r in ranks {
            let Some(&t) = times.get(&r) else {
                continue;
            };
            let i = chosen.partition_point(|c| *c < t);
            let (count, mut sum) = before[i];
            // This rank's place among the events at `t`, ordered by their tokens.
            let mut left = (r as u64).saturating_sub(count) + 1;
            for (&n, &c) in &at[i] {
                let take = c.min(left);
                sum = sum.saturating_add(n.saturating_mul(take as i64));
                left -= take;
                if left == 0 {
                    break;
                }
            }
            out.push((t, sum));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_schemas::rng::Rng;

    /// The sort and running sum the timeline stands in for.
    fn by_sort(events: &[(i64, i64)], ranks: &[usize]) -> Vec<(i64, i64)> {
        let mut sorted = events.to_vec();
        sorted.sort_unstable();
        let mut total = 0i64;
        let sums: Vec<i64> = sorted
            .iter()
            .map(|(_, n)| {
                total += n;
                total
            })
            .collect();
        ranks.iter().map(|&r| (sorted[r].0, sums[r])).collect()
    }

    #[test]
    fn cumulative_counts_equal_a_sort_with_ties_and_spilled_events() {
        let mut rng = Rng::new(601);
        // Arrivals out of order, many sharing a nanosecond with different token counts.
        let ties: Vec<(i64, i64)> = (0..50_000)
            .map(|_| (rng.below(3_000) as i64 * 1_000, 1 + rng.below(4) as i64))
            .collect();
        let spread: Vec<(i64, i64)> = (0..120_000)
            .map(|_| {
                (
                    1_700_000_000_000_000_000 + rng.below(600_000_000_000) as i64,
                    1,
                )
            })
            .collect();
        let one_instant: Vec<(i64, i64)> = (0..5_000).map(|i| (42, (i % 7) + 1)).collect();
        for events in [&ties, &spread, &one_instant] {
            let n = events.len();
            let ranks: Vec<usize> = (0..n).step_by(n.div_ceil(600)).chain([n - 1]).collect();
            let want = by_sort(events, &ranks);
            for limit in [2, 1_001, column::MEMORY_VALUES] {
                let mut t = Timeline::with_limit(limit);
                for (at, k) in events.iter() {
                    t.push(*at, *k);
                }
                assert_eq!(t.len(), n);
                assert_eq!(
                    t.cumulative_at(&ranks).expect("reads"),
                    want,
                    "limit {limit}"
                );
            }
        }
        assert!(
            Timeline::default()
                .cumulative_at(&[0])
                .expect("reads")
                .is_empty()
        );
    }
}
