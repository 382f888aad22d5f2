//! Which scrapes a Requests-queued verdict rests on: each queueing evidence names its
//! gauge and the threshold its rule used, so a drawing rings exactly those scrapes.

use crate::contract::Evidence;

/// The scrapes of one gauge a Requests-queued evidence rests on: the gauge, and the
/// side of the rule's threshold their values fell on (a drill-down rings them).
#[derive(Debug, Clone, PartialEq)]
pub struct GaugeMark {
    pub metric: String,
    /// Values below this (the running gauge short of the cell's requests).
    pub below: Option<f64>,
    /// Values above this (the waiting gauge over the rule's threshold).
    pub above: Option<f64>,
}

impl GaugeMark {
    /// Whether a scrape of value `v` is one the evidence rests on.
    pub fn holds(&self, v: f64) -> bool {
        self.below.is_none_or(|b| v < b) && self.above.is_none_or(|a| v > a)
    }
}

impl Evidence {
    /// For an evidence of the Requests-queued verdict read from a gauge, which of the
    /// gauge's scrapes it rests on, by the threshold the rule used.
    pub fn gauge_mark(&self) -> Option<GaugeMark> {
        let mark = |metric: &String, below: Option<f64>, above: Option<f64>| GaugeMark {
            metric: metric.clone(),
            below,
            above,
        };
        match self {
            Evidence::RunningNeverReachedN {
                metric,
                concurrency,
                ..
            } => Some(mark(metric, Some(f64::from(*concurrency)), None)),
            Evidence::RunningMeanBelow {
                metric, threshold, ..
            } => Some(mark(metric, Some(*threshold), None)),
            Evidence::WaitingMeanAbove {
                metric, threshold, ..
            }
            | Evidence::WaitingSampleAbove {
                metric, threshold, ..
            } => Some(mark(metric, None, Some(*threshold))),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queueing_evidence_marks_the_scrapes_on_its_side_of_the_threshold() {
        let never = Evidence::RunningNeverReachedN {
            metric: "vllm:num_requests_running".into(),
            max: 3.0,
            concurrency: 4,
        }
        .gauge_mark()
        .expect("a mark");
        assert_eq!(never.metric, "vllm:num_requests_running");
        assert!(never.holds(3.0) && !never.holds(4.0));
        // A waiting mean over 2: the scrapes over 2, not every one above 0.
        let waiting = Evidence::WaitingMeanAbove {
            metric: "vllm:num_requests_waiting".into(),
            mean: 2.5,
            threshold: 2.0,
            samples: 10,
        }
        .gauge_mark()
        .expect("a mark");
        assert!(waiting.holds(3.0) && !waiting.holds(1.0) && !waiting.holds(2.0));
        let missing = Evidence::Missing {
            what: "window".into(),
        };
        assert_eq!(missing.gauge_mark(), None);
    }
}
