//! The server's gauges and the GPUs' telemetry as the live view shows them: kept scrape
//! by scrape from the rows the scraper writes ([`Gauges`]), and shared with the view
//! ([`Feed`]), never touched by a request.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokentrace_schemas::protocol::{Engine, EngineSeries};
use tokentrace_schemas::tables::{GpuRow, MetricRow};

/// Points kept per gauge (two minutes at the default scrape interval).
pub const SERIES_POINTS: usize = 120;

/// The recent values of one gauge, oldest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series(pub VecDeque<f64>);

impl Series {
    pub fn push(&mut self, v: f64) {
        if self.0.len() == SERIES_POINTS {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    pub fn last(&self) -> Option<f64> {
        self.0.back().copied()
    }
}

/// The server's gauges and the GPUs' telemetry, scrape by scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gauges {
    pub running: Series,
    pub waiting: Series,
    /// KV-cache use, 0–1, where the engine exposes it.
    pub kv_cache: Series,
    /// Speculative decoding: accepted over proposed draft tokens between scrapes (0–1),
    /// or the engine's mean acceptance length where it gives no counters.
    pub spec: Series,
    pub spec_is_length: bool,
    /// All GPUs' power draw together, W, and their mean utilisation, %.
    pub gpu_power_w: Series,
    pub gpu_util_pct: Series,
    /// Tokens so far of each stream in flight, in request order (the writer's count).
    pub lanes: Vec<u64>,
    /// The last scrape's (accepted, proposed) draft token counters.
    last_spec: Option<(f64, f64)>,
}

impl Gauges {
    /// Adds a scrape's rows: the first engine whose running gauge appears names them.
    pub fn scraped(&mut self, rows: &[MetricRow]) {
        let sum = |name: &str| {
            let mut v = rows
                .iter()
                .filter(|r| r.name == name)
                .map(|r| r.value)
                .peekable();
            v.peek().is_some().then(|| v.sum::<f64>())
        };
        let Some(series) = Engine::ALL
            .iter()
            .map(|e| e.series())
            .find(|s| sum(s.running).is_some())
        else {
            return;
        };
        let EngineSeries {
            running,
            waiting,
            kv_cache_usage,
            spec_draft_tokens,
            spec_accepted_tokens,
            spec_accept_length,
            ..
        } = series;
        self.running.push(sum(running).unwrap_or(0.0));
        self.waiting.push(sum(waiting).unwrap_or(0.0));
        if let Some(kv) = kv_cache_usage.and_then(sum) {
            // vLLM reports a share (0–1); some engines a percentage.
            self.kv_cache.push(if kv > 1.0 { kv / 100.0 } else { kv });
        }
        if let (Some(acc), Some(prop)) = (
            spec_accepted_tokens.and_then(sum),
            spec_draft_tokens.and_then(sum),
        ) {
            if let Some((a0, p0)) = self.last_spec
                && prop > p0
            {
                self.spec.push((acc - a0) / (prop - p0));
            }
            self.last_spec = Some((acc, prop));
        } else if let Some(len) = spec_accept_length.and_then(sum) {
            self.spec_is_length = true;
            self.spec.push(len);
        }
    }

    /// Adds one sampling of the GPUs.
    pub fn gpu(&mut self, rows: &[GpuRow]) {
        let power: Vec<f64> = rows.iter().filter_map(|r| r.power_w).collect();
        if !power.is_empty() {
            self.gpu_power_w.push(power.iter().sum());
        }
        let util: Vec<f64> = rows.iter().filter_map(|r| r.utilization_pct).collect();
        if !util.is_empty() {
            self.gpu_util_pct
                .push(util.iter().sum::<f64>() / util.len() as f64);
        }
    }
}

/// The gauges the scraper publishes for the view: taken by the scraper once a scrape
/// and by the view at most four times a second, never by a request.
#[derive(Debug, Default)]
pub struct Feed {
    gauges: Mutex<Gauges>,
}

impl Feed {
    fn with<T>(&self, f: impl FnOnce(&mut Gauges) -> T) -> T {
        // A poisoned lock only means a panic elsewhere; the gauges are still usable.
        let mut g = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    pub fn scraped(&self, rows: &[MetricRow]) {
        self.with(|g| g.scraped(rows));
    }

    pub fn gpu(&self, rows: &[GpuRow]) {
        self.with(|g| g.gpu(rows));
    }

    /// The streams in flight and their tokens so far.
    pub fn lanes(&self, lanes: Vec<u64>) {
        self.with(|g| g.lanes = lanes);
    }

    /// A copy of the gauges now.
    pub fn gauges(&self) -> Gauges {
        self.with(|g| g.clone())
    }
}

/// How often the writer hands the view its lanes.
pub const LANES_EVERY: Duration = Duration::from_millis(250);

/// The cell writer's count of each stream's tokens so far, handed to the [`Feed`] at
/// most every [`LANES_EVERY`] (the writer's thread, never a request's).
#[derive(Debug)]
pub struct Lanes {
    tokens: BTreeMap<i64, u64>,
    sent: Instant,
}

impl Default for Lanes {
    fn default() -> Self {
        Lanes {
            tokens: BTreeMap::new(),
            sent: Instant::now(),
        }
    }
}

impl Lanes {
    /// Request `id` received `n` more tokens.
    pub fn add(&mut self, id: i64, n: u64, feed: &Feed) {
        *self.tokens.entry(id).or_default() += n;
        if self.sent.elapsed() >= LANES_EVERY {
            self.sent = Instant::now();
            feed.lanes(self.tokens.values().copied().collect());
        }
    }

    /// Request `id` ended.
    pub fn end(&mut self, id: i64) {
        self.tokens.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scrape::parse_exposition;

    fn scrape(text: &str) -> Vec<MetricRow> {
        parse_exposition(text, 0, 1).expect("parses")
    }

    #[test]
    fn vllm_gauges_and_spec_acceptance_between_scrapes() {
        let mut g = Gauges::default();
        let at = |accepted: u32, proposed: u32, running: u32| {
            format!(
                "# TYPE vllm:num_requests_running gauge\n\
                 vllm:num_requests_running{{engine=\"0\"}} {running}\n\
                 vllm:num_requests_running{{engine=\"1\"}} 1\n\
                 # TYPE vllm:num_requests_waiting gauge\n\
                 vllm:num_requests_waiting{{engine=\"0\"}} 3\n\
                 # TYPE vllm:kv_cache_usage_perc gauge\n\
                 vllm:kv_cache_usage_perc{{engine=\"0\"}} 0.25\n\
                 # TYPE vllm:spec_decode_num_draft_tokens counter\n\
                 vllm:spec_decode_num_draft_tokens_total{{engine=\"0\"}} {proposed}\n\
                 # TYPE vllm:spec_decode_num_accepted_tokens counter\n\
                 vllm:spec_decode_num_accepted_tokens_total{{engine=\"0\"}} {accepted}\n"
            )
        };
        g.scraped(&scrape(&at(10, 20, 4)));
        // One scrape of counters gives no rate yet.
        assert!(g.spec.0.is_empty());
        g.scraped(&scrape(&at(40, 60, 6)));
        assert_eq!(g.running.0, [5.0, 7.0]);
        assert_eq!(g.waiting.last(), Some(3.0));
        assert_eq!(g.kv_cache.last(), Some(0.25));
        // (40 − 10) accepted of (60 − 20) proposed.
        assert_eq!(g.spec.last(), Some(0.75));
        assert!(!g.spec_is_length);
        for _ in 0..SERIES_POINTS + 5 {
            g.scraped(&scrape(&at(40, 60, 6)));
        }
        assert_eq!(g.running.0.len(), SERIES_POINTS);
    }

    #[test]
    fn llama_cpp_metrics_give_running_and_waiting_only() {
        let text = include_str!("../../fixtures/sse/llamacpp-metrics.txt");
        let mut g = Gauges::default();
        g.scraped(&scrape(text));
        assert_eq!(g.running.0.len(), 1);
        assert_eq!(g.waiting.0.len(), 1);
        assert!(g.kv_cache.0.is_empty() && g.spec.0.is_empty());
    }
}
