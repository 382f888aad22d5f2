//! Synthetic traces written through the real writers: a deterministic model of N
//! closed-loop streams (speculative multi-token chunks, reasoning then content, vLLM-shaped
//! SSE bytes, metric scrapes), for format tests, interop checks, size and speed benchmarks.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

use tokentrace_schemas::error::Result;
use tokentrace_schemas::layout::{CellKey, Phase};
use tokentrace_schemas::manifest::{
    CellEntry, CellMeta, CellStatus, Clock, EngineInfo, Manifest, RunConfig, ServerCapabilities,
    Target, ToolInfo,
};
use tokentrace_schemas::protocol::{CLIENT_LAG_METRIC, Engine, LATE_TICK_MS, LagStat};
use tokentrace_schemas::rng::Rng;
use tokentrace_schemas::tables::{
    ChunkKind, ChunkRow, EndReason, Endpoint, EventKind, EventRow, MetricRow, MetricType,
    RequestRow, Role, canonical_labels,
};
use tokentrace_schemas::writer::{CellWriter, WriterLimits};

const SYLLABLES: [&str; 48] = [
    "the", "an", "in", "re", "er", "on", "at", "en", "ed", "is", "it", "ou", "ar", "st", "ing",
    "al", "or", "ion", "to", "es", "ic", "ly", "ent", "ver", "com", "pro", "con", "ter", "ment",
    "ate", "ous", "ist", "ble", "der", "per", "ty", "ure", "tion", "ri", "mo", "la", "di", "ca",
    "sa", "po", "ne", "li", "ma",
];
const PUNCT: [&str; 6] = [",", ".", "\n", ":", ";", "\n\n"];

/// Text tokens drawn from a Zipf-distributed vocabulary of pseudo-words (≈ 4 characters
/// per token, as in English BPE output). Independent draws compress worse than real
/// model text, so sizes measured on it err on the large side.
#[derive(Debug, Clone)]
pub struct Vocab {
    words: Vec<String>,
    cumulative: Vec<f64>,
}

impl Vocab {
    pub fn new(size: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut words = Vec::with_capacity(size);
        for i in 0..size {
            if i % 40 == 7 {
                words.push(PUNCT[i % PUNCT.len()].to_string());
                continue;
            }
            let n = 1 + rng.below(2) as usize;
            let mut w = String::from(if rng.unit() < 0.8 { " " } else { "" });
            for _ in 0..n {
                w.push_str(SYLLABLES[rng.below(SYLLABLES.len() as u64) as usize]);
            }
            words.push(w);
        }
        let mut cumulative = Vec::with_capacity(size);
        let mut total = 0.0;
        for rank in 1..=size {
            total += 1.0 / rank as f64;
            cumulative.push(total);
        }
        Vocab { words, cumulative }
    }

    pub fn token(&self, rng: &mut Rng) -> &str {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let x = rng.unit() * total;
        let i = self.cumulative.partition_point(|&c| c < x);
        self.words
            .get(i.min(self.words.len().saturating_sub(1)))
            .map_or("", String::as_str)
    }
}

/// What to generate for one decode cell.
#[derive(Debug, Clone)]
pub struct DecodeSpec {
    pub key: CellKey,
    /// Stop once this many completion tokens were streamed (the last requests are cancelled).
    pub total_tokens: u64,
    pub max_tokens: u32,
    /// Mean time between decode steps.
    pub step_ns: i64,
    pub ttft_ns: i64,
    /// Draft tokens per step (speculative decoding); 0 gives one token per chunk.
    pub spec_tokens: u32,
    pub acceptance: f64,
    /// Share of each request's tokens streamed as reasoning before content.
    pub reasoning_share: f64,
    pub scrape_interval_ns: i64,
    pub seed: u64,
    /// The server's running gauge (default: the concurrency).
    pub running: Option<f64>,
    /// The server's waiting gauge at every scrape.
    pub waiting: f64,
    /// Scrapes (by index from the window's start, one per `scrape_interval_ns`) whose
    /// running and waiting gauges read other values: (index, running, waiting).
    pub scrape_overrides: Vec<(usize, f64, f64)>,
    /// The request with this index (in send order) streams this text in every event,
    /// so that its text loops with the text as its cycle.
    pub looping: Option<(usize, String)>,
    /// With `looping`: (characters per event, total characters): the request streams
    /// its cycle over and over up to the total, cut into events of that many characters,
    /// then events without text, instead of one cycle per event (how a stream is
    /// chunked must not change what the loop rules find).
    pub looping_chunks: Option<(usize, usize)>,
    /// The request with this index ends with an error event instead of finishing.
    pub failing: Option<usize>,
    /// The recorder's lag, one entry per second from the window's start: the latest
    /// tick (ms) and how many of the second's 100 ticks were later than each lateness
    /// threshold below it (empty: no lag series, as before the recorder had one).
    pub lag_seconds: Vec<(f64, u32)>,
    /// With `lag_seconds`: write the tick counts (false: only max and mean, as a
    /// recorder before issue 14 did).
    pub lag_counts: bool,
    /// The request with this index reports a cumulative usage this many tokens above
    /// its streamed tokens from its 10th event on (usage and token ids disagree).
    pub usage_extra: Option<(usize, i32)>,
    /// The request with this index prefilled cold: nothing of its prompt was cached,
    /// and its first token comes after `cold_ttft_ns`.
    pub cold: Option<(usize, i64)>,
    /// The request with this index came through a buffering proxy: each of its events
    /// arrives at the next multiple of this period (ns) after its send, many to a read.
    pub buffered: Option<(usize, i64)>,
    /// The writer's batch and row-group sizes (small ones split a cell's tables into
    /// many row groups).
    pub limits: WriterLimits,
    /// Lifecycle events of these kinds carry this detail (none by default, as a
    /// recorder before details were written).
    pub details: Vec<(EventKind, String)>,
    /// Write the server's last two scrapes in the wrong order (a table out of scrape
    /// order, noticed by a reader only after it filed every scrape before them, which it
    /// must then group whole).
    pub scrapes_swapped: bool,
}

impl DecodeSpec {
    /// A cell shaped like the reference report's mid-matrix cells.
    pub fn new(key: CellKey, total_tokens: u64) -> Self {
        DecodeSpec {
            key,
            total_tokens,
            max_tokens: 4096,
            step_ns: 10_000_000,
            ttft_ns: 150_000_000,
            spec_tokens: 3,
            acceptance: 0.6,
            reasoning_share: 0.25,
            scrape_interval_ns: 1_000_000_000,
            seed: u64::from(key.context) * 1_000_003 + u64::from(key.concurrency),
            running: None,
            waiting: 0.0,
            scrape_overrides: Vec::new(),
            looping: None,
            looping_chunks: None,
            failing: None,
            usage_extra: None,
            lag_seconds: Vec::new(),
            lag_counts: true,
            cold: None,
            buffered: None,
            limits: WriterLimits::default(),
            details: Vec::new(),
            scrapes_swapped: false,
        }
    }
}

fn sse_event(id: i64, created: i64, reasoning: bool, text: &str, usage: (i32, i32)) -> String {
    let field = if reasoning { "reasoning" } else { "content" };
    let text = serde_json::Value::String(text.to_string()).to_string();
    format!(
        "data: {{\"id\":\"chatcmpl-{id:016x}\",\"object\":\"chat.completion.chunk\",\"created\":{created},\
         \"model\":\"deepseek\",\"choices\":[{{\"index\":0,\"delta\":{{\"{field}\":{text}}},\"logprobs\":null,\
         \"finish_reason\":null}}],\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{t},\"completion_tokens\":{c}}}}}\n\n",
        p = usage.0,
        t = usage.0 + usage.1,
        c = usage.1,
    )
}

struct Stream {
    request: RequestRow,
    chunks: Vec<(ChunkRow, String)>,
}

#[allow(clippy::too_many_arguments)]
fn gen_request(
    spec: &DecodeSpec,
    index: usize,
    vocab: &Vocab,
    rng: &mut Rng,
    id: i64,
    slot: i32,
    start_ns: i64,
    budget: u64,
) -> Stream {
    let prompt = i32::try_from(spec.key.context).unwrap_or(i32::MAX);
    let max = u64::from(spec.max_tokens).min(budget.max(1));
    let reasoning_tokens = (spec.max_tokens as f64 * spec.reasoning_share) as u64;
    let sent = start_ns + 50_000;
    let headers = sent + 2_000_000;
    let cold = spec.cold.filter(|(i, _)| *i == index).map(|(_, ttft)| ttft);
    let mut t =
        sent + cold.unwrap_or(spec.ttft_ns) + (rng.unit() * spec.ttft_ns as f64 * 0.2) as i64;
    let mut done = 0u64;
    let mut chunks = Vec::new();
    let mut seq = 0i32;
    let mut first_token = None;
    let mut last_token = None;
    // The looping request's text, and how far into it its events have streamed.
    let looping: Option<Vec<char>> = spec
        .looping
        .as_ref()
        .filter(|(i, _)| *i == index)
        .map(|(_, cycle)| cycle.chars().collect());
    let mut looped_chars = 0usize;
    while done < max {
        let mut n = 1u64;
        while n <= u64::from(spec.spec_tokens) && rng.unit() < spec.acceptance {
            n += 1;
        }
        let n = n.min(max - done);
        let reasoning = done < reasoning_tokens;
        let mut text = String::new();
        for _ in 0..n {
            text.push_str(vocab.token(rng));
        }
        if let Some(cycle) = looping.as_ref().filter(|c| !c.is_empty()) {
            let (len, total) = spec.looping_chunks.unwrap_or((cycle.len(), usize::MAX));
            let end = looped_chars.saturating_add(len.max(1)).min(total);
            text = (looped_chars..end.max(looped_chars))
                .map(|i| cycle[i % cycle.len()])
                .collect();
            looped_chars = end.max(looped_chars);
        }
        done += n;
        let extra = spec
            .usage_extra
            .filter(|(i, _)| *i == index && seq >= 10)
            .map_or(0, |(_, extra)| extra);
        let cum = i32::try_from(done)
            .unwrap_or(i32::MAX)
            .saturating_add(extra);
        let event = sse_event(
            id,
            1_796_000_000 + t / 1_000_000_000,
            reasoning,
            &text,
            (prompt, cum),
        );
        // Through a buffer: released at the period's next tick.
        let at = match spec.buffered.filter(|(i, _)| *i == index) {
            Some((_, period)) if period > 0 => sent + (t - sent + period - 1) / period * period,
            _ => t,
        };
        first_token.get_or_insert(at);
        last_token = Some(at);
        let row = ChunkRow {
            request_id: id,
            seq,
            arrival_ns: at,
            queue_delay_ns: Some(2_000 + rng.below(10_000) as i64),
            bytes: i32::try_from(event.len()).unwrap_or(i32::MAX),
            kind: ChunkKind::Data,
            tokens: Some(i32::try_from(n).unwrap_or(i32::MAX)),
            completion_tokens: Some(cum),
            content: (!reasoning).then(|| text.clone()),
            reasoning: reasoning.then_some(text),
            finish_reason: None,
            error: None,
        };
        chunks.push((row, event));
        seq += 1;
        let jitter = 0.85 + 0.3 * rng.unit();
        t += (spec.step_ns as f64 * jitter) as i64;
    }
    let failing = spec.failing == Some(index);
    let finished = done >= u64::from(spec.max_tokens) && !failing;
    let end = t.max(last_token.unwrap_or(t));
    // The event that ends the stream: an error event, or `[DONE]`.
    let terminal = |kind: ChunkKind, event: &str, error: Option<&str>| {
        (
            ChunkRow {
                request_id: id,
                seq,
                arrival_ns: end,
                queue_delay_ns: Some(3_000),
                bytes: i32::try_from(event.len()).unwrap_or(0),
                kind,
                tokens: None,
                completion_tokens: None,
                content: None,
                reasoning: None,
                finish_reason: None,
                error: error.map(str::to_string),
            },
            event.to_string(),
        )
    };
    if failing {
        chunks.push(terminal(
            ChunkKind::Error,
            "event: error\ndata: {\"error\":{\"message\":\"synthetic failure\"}}\n\n",
            Some("synthetic failure"),
        ));
    }
    if finished {
        chunks.push(terminal(ChunkKind::Done, "data: [DONE]\n\n", None));
        if let Some((last, _)) = chunks.iter_mut().rev().nth(1) {
            last.finish_reason = Some("length".to_string());
        }
    }
    let completion = i32::try_from(done).unwrap_or(i32::MAX);
    Stream {
        request: RequestRow {
            request_id: id,
            slot: Some(slot),
            role: Role::Measured,
            endpoint: Endpoint::Chat,
            prompt_tokens_requested: prompt,
            prompt_tokens_server: Some(prompt),
            cached_tokens_server: Some(if cold.is_some() {
                0
            } else {
                prompt - prompt % 256
            }),
            completion_tokens_server: Some(completion),
            max_tokens: Some(i32::try_from(spec.max_tokens).unwrap_or(i32::MAX)),
            scheduled_ns: start_ns,
            sent_ns: Some(sent),
            headers_ns: Some(headers),
            first_chunk_ns: first_token,
            first_token_ns: first_token,
            last_token_ns: last_token,
            end_ns: Some(end),
            end_reason: if failing {
                EndReason::StreamError
            } else if finished {
                EndReason::FinishedLength
            } else {
                EndReason::Cancelled
            },
            finish_reason: finished.then(|| "length".to_string()),
            http_status: Some(200),
            error: failing.then(|| "synthetic failure".to_string()),
            server_request_id: Some(format!("chatcmpl-{id:016x}")),
            connection_id: None,
            connect_start_ns: None,
            connection_ns: None,
            retries: None,
        },
        chunks,
    }
}

/// Writes one synthetic decode cell through [`CellWriter`]; returns its commit mark.
/// Requests are generated slot by slot as a closed loop would send them, and each
/// chunk is written once no request still to come can arrive before it (chunks in
/// arrival order, as a recorder writes them): memory holds the requests under way, not
/// the cell, so cells of any length can be written.
pub fn write_decode_cell(run: &Path, spec: &DecodeSpec) -> Result<CellMeta> {
    let vocab = Vocab::new(5000, 7);
    let mut rng = Rng::new(spec.seed);
    let n = spec.key.concurrency.max(1);
    let mut w = CellWriter::with_limits(run, spec.key, spec.limits)?;
    // Chunks not yet written, least (arrival, request, seq) first.
    let mut pending: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut remaining = spec.total_tokens;
    let mut slot_time = vec![0i64; n as usize];
    let mut id = i64::from(spec.key.context) * 1_000_000 + i64::from(spec.key.concurrency) * 10_000;
    let mut index = 0;
    'outer: loop {
        for slot in 0..slot_time.len() {
            if remaining == 0 {
                break 'outer;
            }
            let s = gen_request(
                spec,
                index,
                &vocab,
                &mut rng,
                id,
                slot as i32,
                slot_time[slot],
                remaining,
            );
            let got = s.request.completion_tokens_server.unwrap_or(0) as u64;
            remaining = remaining.saturating_sub(got.max(1));
            slot_time[slot] = s.request.end_ns.unwrap_or(slot_time[slot]) + 100_000;
            id += 1;
            index += 1;
            w.push_request(s.request)?;
            pending.extend(
                s.chunks
                    .into_iter()
                    .map(|(row, event)| Reverse(Pending(row, event))),
            );
            // Every request still to come starts at some slot's time, and its chunks
            // arrive after that.
            let horizon = slot_time.iter().copied().min().unwrap_or(i64::MAX);
            write_before(&mut w, &mut pending, horizon)?;
        }
    }
    write_before(&mut w, &mut pending, i64::MAX)?;
    let end_ns = slot_time.iter().copied().max().unwrap_or(0);
    for (time_ns, kind) in [
        (0, EventKind::CellStart),
        (0, EventKind::WarmupStart),
        (0, EventKind::WarmupEnd),
        (0, EventKind::WindowOpen),
        (end_ns, EventKind::WindowClose),
        (end_ns, EventKind::DrainStart),
        (end_ns + 1_000_000, EventKind::DrainEnd),
        (end_ns + 1_000_000, EventKind::CellEnd),
    ] {
        w.push_event(EventRow {
            time_ns,
            kind,
            request_id: None,
            detail: spec
                .details
                .iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, d)| d.clone()),
        })?;
    }
    write_scrapes(&mut w, spec, end_ns)?;
    write_lag(&mut w, spec)?;
    w.commit()
}

/// A chunk row and its raw event, ordered by (arrival, request, seq).
struct Pending(ChunkRow, String);

impl Pending {
    fn order(&self) -> (i64, i64, i32) {
        (self.0.arrival_ns, self.0.request_id, self.0.seq)
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order()
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.order().cmp(&other.order())
    }
}

/// Writes the pending chunks that arrived before `horizon`, in order.
fn write_before(
    w: &mut CellWriter,
    pending: &mut BinaryHeap<Reverse<Pending>>,
    horizon: i64,
) -> Result<()> {
    while pending
        .peek()
        .is_some_and(|Reverse(p)| p.0.arrival_ns < horizon)
    {
        let Some(Reverse(Pending(row, event))) = pending.pop() else {
            break;
        };
        w.raw
            .write(row.request_id, row.arrival_ns, event.as_bytes())?;
        w.push_chunk(row)?;
    }
    Ok(())
}

fn write_lag(w: &mut CellWriter, spec: &DecodeSpec) -> Result<()> {
    for (i, &(max_ms, late)) in spec.lag_seconds.iter().enumerate() {
        let start = i as i64 * 1_000_000_000;
        for stat in LagStat::all() {
            let value = match stat {
                LagStat::Max => max_ms / 1e3,
                LagStat::Mean => max_ms / 1e3 / 10.0,
                LagStat::Ticks => 100.0,
                LagStat::Over(t) => {
                    let ms = LATE_TICK_MS.get(t).copied().unwrap_or(u32::MAX);
                    if f64::from(ms) < max_ms {
                        f64::from(late)
                    } else {
                        0.0
                    }
                }
            };
            if !spec.lag_counts && !matches!(stat, LagStat::Max | LagStat::Mean) {
                continue;
            }
            w.push_metric(MetricRow {
                scrape_start_ns: start,
                scrape_end_ns: start + 1_000_000_000,
                family: CLIENT_LAG_METRIC.to_string(),
                name: CLIENT_LAG_METRIC.to_string(),
                labels: stat.labels(),
                value,
                metric_type: MetricType::Gauge,
            })?;
        }
    }
    Ok(())
}

fn write_scrapes(w: &mut CellWriter, spec: &DecodeSpec, end_ns: i64) -> Result<()> {
    let labels = canonical_labels(&[("engine", "0"), ("model_name", "deepseek")]);
    let n = f64::from(spec.key.concurrency);
    let times = (0..)
        .map(|i| i * spec.scrape_interval_ns)
        .take_while(|t| *t <= end_ns);
    let mut generated = 0.0;
    // With `scrapes_swapped`, every scrape's rows, the last two to be swapped.
    let mut rows: Vec<Vec<MetricRow>> = Vec::new();
    for (index, t) in times.enumerate() {
        let end = t + 3_000_000;
        let (running, waiting) = spec
            .scrape_overrides
            .iter()
            .find(|o| o.0 == index)
            .map_or((spec.running.unwrap_or(n), spec.waiting), |o| (o.1, o.2));
        generated += n / (spec.step_ns as f64 / 1e9) * (spec.scrape_interval_ns as f64 / 1e9);
        let mut scrape = Vec::new();
        let mut push = |family: &str, name: &str, labels: &str, value: f64, ty: MetricType| {
            scrape.push(MetricRow {
                scrape_start_ns: t,
                scrape_end_ns: end,
                family: family.to_string(),
                name: name.to_string(),
                labels: labels.to_string(),
                value,
                metric_type: ty,
            });
            Ok::<(), tokentrace_schemas::Error>(())
        };
        let vllm = Engine::Vllm.series();
        push(
            vllm.running,
            vllm.running,
            &labels,
            running,
            MetricType::Gauge,
        )?;
        push(
            vllm.waiting,
            vllm.waiting,
            &labels,
            waiting,
            MetricType::Gauge,
        )?;
        push(
            "vllm:kv_cache_usage_perc",
            "vllm:kv_cache_usage_perc",
            &labels,
            0.3,
            MetricType::Gauge,
        )?;
        push(
            "vllm:generation_tokens",
            "vllm:generation_tokens_total",
            &labels,
            generated.floor(),
            MetricType::Counter,
        )?;
        for le in ["0.001", "0.005", "0.01", "0.02", "0.05", "0.1", "+Inf"] {
            let l = canonical_labels(&[("engine", "0"), ("le", le), ("model_name", "deepseek")]);
            push(
                "vllm:inter_token_latency_seconds",
                "vllm:inter_token_latency_seconds_bucket",
                &l,
                generated.floor(),
                MetricType::Histogram,
            )?;
        }
        if spec.scrapes_swapped {
            rows.push(scrape);
        } else {
            for row in scrape {
                w.push_metric(row)?;
            }
        }
    }
    let n = rows.len();
    if n >= 2 {
        rows.swap(n - 2, n - 1);
    }
    for row in rows.into_iter().flatten() {
        w.push_metric(row)?;
    }
    Ok(())
}

/// A manifest for a synthetic run of the given cells (all complete).
pub fn manifest(run_id: &str, cells: &[CellKey]) -> Manifest {
    Manifest {
        schema_version: tokentrace_schemas::SCHEMA_VERSION,
        tool: ToolInfo::current(),
        run_id: run_id.to_string(),
        clock: Clock {
            utc_at_zero: "2026-11-30T00:00:00.000000000Z".to_string(),
            monotonic_at_zero_ns: None,
        },
        target: Target {
            url: "synthetic://".to_string(),
            api_key: false,
        },
        model: "deepseek".to_string(),
        // The synthetic scrapes carry vLLM's series names.
        engine: EngineInfo {
            name: Some(Engine::Vllm.name().to_string()),
            version: Some(format!("synthetic {}", tokentrace_schemas::TOOL_VERSION)),
            details: Default::default(),
        },
        hardware: None,
        launch_command: None,
        facts: Vec::new(),
        capabilities: ServerCapabilities {
            continuous_usage_stats: Some(true),
            token_counting: Some(tokentrace_schemas::manifest::TokenCounting::Usage),
            ..Default::default()
        },
        config: RunConfig {
            endpoint: Endpoint::Chat,
            contexts: {
                let mut v: Vec<u32> = cells.iter().map(|c| c.context).collect();
                v.sort_unstable();
                v.dedup();
                v
            },
            concurrency: {
                let mut v: Vec<u32> = cells
                    .iter()
                    .filter(|c| c.phase == Phase::Decode)
                    .map(|c| c.concurrency)
                    .collect();
                v.sort_unstable();
                v.dedup();
                v
            },
            window_ns: 30_000_000_000,
            max_tokens: 4096,
            ignore_eos: true,
            scrape_interval_ns: 1_000_000_000,
            warmup_timeout_ns: 600_000_000_000,
            drain_timeout_ns: 300_000_000_000,
            stall_timeout_ns: 600_000_000_000,
            prompt_tolerance_tokens: 8,
            prompt_nonces: Vec::new(),
            prefill_mode: None,
            burst: None,
            rate: None,
            replay: None,
            conversation: None,
        },
        cells: cells
            .iter()
            .map(|k| CellEntry {
                status: CellStatus::Complete,
                ..CellEntry::planned(*k)
            })
            .collect(),
        reparsed: None,
        imported: None,
        cells_sha256: None,
    }
}

/// Writes a synthetic run: the decode cells of `keys`, `tokens_per_cell` tokens each.
pub fn write_run(
    run: &Path,
    run_id: &str,
    keys: &[CellKey],
    tokens_per_cell: u64,
) -> Result<Manifest> {
    std::fs::create_dir_all(run).map_err(|e| tokentrace_schemas::Error::io(run, e))?;
    for key in keys {
        write_decode_cell(run, &DecodeSpec::new(*key, tokens_per_cell))?;
    }
    let m = manifest(run_id, keys);
    m.write(run)?;
    Ok(m)
}

/// Writes one synthetic prefill cell: a cold scout of `key.context` prompt tokens whose
/// first token arrives after `ttft_ns`, then 16 tokens 10 ms apart.
pub fn write_prefill_cell(run: &Path, key: CellKey, ttft_ns: i64) -> Result<CellMeta> {
    write_prefill_cell_cached(run, key, ttft_ns, 0)
}

/// Like [`write_prefill_cell`], with `cached` of the scout's prompt tokens served from the
/// server's prefix cache.
pub fn write_prefill_cell_cached(
    run: &Path,
    key: CellKey,
    ttft_ns: i64,
    cached: i32,
) -> Result<CellMeta> {
    write_prefill_cell_with(run, key, ttft_ns, cached, 0)
}

/// Like [`write_prefill_cell_cached`], with the scout's first `reasoning` of its 16
/// events streamed as reasoning (a model that thinks before it answers).
pub fn write_prefill_cell_with(
    run: &Path,
    key: CellKey,
    ttft_ns: i64,
    cached: i32,
    reasoning: i32,
) -> Result<CellMeta> {
    let id = i64::from(key.context) * 1_000_000 + 5_000_000;
    let prompt = i32::try_from(key.context).unwrap_or(i32::MAX);
    let vocab = Vocab::new(5000, 7);
    let mut rng = Rng::new(u64::from(key.context));
    let mut w = CellWriter::create(run, key)?;
    let sent = 1_000_000i64;
    let mut t = sent + ttft_ns;
    let first = t;
    for seq in 0..16 {
        let text = vocab.token(&mut rng).to_string();
        let thinking = seq < reasoning;
        let event = sse_event(id, 1_796_000_000, thinking, &text, (prompt, seq + 1));
        w.raw.write(id, t, event.as_bytes())?;
        w.push_chunk(ChunkRow {
            request_id: id,
            seq,
            arrival_ns: t,
            queue_delay_ns: Some(3_000),
            bytes: i32::try_from(event.len()).unwrap_or(i32::MAX),
            kind: ChunkKind::Data,
            tokens: Some(1),
            completion_tokens: Some(seq + 1),
            content: (!thinking).then(|| text.clone()),
            reasoning: thinking.then_some(text),
            finish_reason: (seq == 15).then(|| "length".to_string()),
            error: None,
        })?;
        t += 10_000_000;
    }
    let last = t - 10_000_000;
    w.push_request(RequestRow {
        request_id: id,
        slot: None,
        role: Role::Scout,
        endpoint: Endpoint::Chat,
        prompt_tokens_requested: prompt,
        prompt_tokens_server: Some(prompt),
        cached_tokens_server: Some(cached),
        completion_tokens_server: Some(16),
        max_tokens: Some(16),
        scheduled_ns: 0,
        sent_ns: Some(sent),
        headers_ns: Some(sent + 1_000_000),
        first_chunk_ns: Some(first),
        first_token_ns: Some(first),
        last_token_ns: Some(last),
        end_ns: Some(last),
        end_reason: EndReason::FinishedLength,
        finish_reason: Some("length".to_string()),
        http_status: Some(200),
        error: None,
        server_request_id: Some(format!("chatcmpl-{id:016x}")),
        connection_id: None,
        connect_start_ns: None,
        connection_ns: None,
        retries: None,
    })?;
    for (time_ns, kind) in [(0, EventKind::CellStart), (last, EventKind::CellEnd)] {
        w.push_event(EventRow {
            time_ns,
            kind,
            request_id: None,
            detail: None,
        })?;
    }
    w.commit()
}

/// The reference report's matrix: 9 prefill contexts (8K … 1M), and 9 contexts × 8
/// concurrency levels (1 … 128) of decode cells.
pub const REFERENCE_CONTEXTS: [u32; 9] = [
    8192, 16384, 32768, 65536, 131072, 262144, 524288, 1043456, 1048576,
];
pub const REFERENCE_CONCURRENCY: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Output tokens per decode cell by concurrency, shaped like the reference report's
/// rows (30 s windows), about 388 K per context and 3.5 M for the matrix.
pub const REFERENCE_TOKENS: [u64; 8] = [
    5_000, 9_000, 15_300, 25_700, 42_600, 65_500, 91_500, 133_700,
];

/// Writes a synthetic run the size of the reference matrix (81 cells, ~3.5 M tokens).
pub fn write_reference_matrix(run: &Path, run_id: &str) -> Result<Manifest> {
    write_reference_matrix_scaled(run, run_id, 1)
}

/// The reference matrix with `scale` times the output tokens in every decode cell (its
/// windows that much longer): the scale benchmark's 10x run (bench/scale.sh).
pub fn write_reference_matrix_scaled(run: &Path, run_id: &str, scale: u64) -> Result<Manifest> {
    std::fs::create_dir_all(run).map_err(|e| tokentrace_schemas::Error::io(run, e))?;
    let mut keys = Vec::new();
    for ctx in REFERENCE_CONTEXTS {
        let key = CellKey::new(Phase::Prefill, ctx, 1);
        // Prefill at ~20 K tokens/s.
        write_prefill_cell(run, key, i64::from(ctx) * 50_000)?;
        keys.push(key);
        for (n, tokens) in REFERENCE_CONCURRENCY.iter().zip(REFERENCE_TOKENS) {
            let key = CellKey::new(Phase::Decode, ctx, *n);
            write_decode_cell(run, &DecodeSpec::new(key, tokens * scale.max(1)))?;
            keys.push(key);
        }
    }
    let m = manifest(run_id, &keys);
    m.write(run)?;
    Ok(m)
}
