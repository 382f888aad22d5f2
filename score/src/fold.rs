//! Rows into [`Loaded`]: the one place a cell's chunk, metric and event rows are reduced
//! to what the rules read, whoever reads the rows (the trace's own reader for the
//! analyzer, the live view and `watch`; the tests' polars load, held to the same).

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;
use tokentrace_schemas::layout::CellKey;
use tokentrace_schemas::protocol::{self, LagStat};
use tokentrace_schemas::tables::EventKind;

use crate::data::{Loaded, Said, Sample, TickCounts, TokenAgg, UsageCount};

/// One chunk row as the fold reads it: the columns scoring needs, the text borrowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkIn<'a> {
    pub request_id: Option<i64>,
    pub arrival_ns: Option<i64>,
    pub queue_delay_ns: Option<i64>,
    /// Tokens the event carried (null counts as 0).
    pub tokens: i64,
    /// The server's cumulative completion tokens after the event.
    pub completion_tokens: Option<i64>,
    /// Whether it arrived inside its cell's window.
    pub in_window: bool,
    pub content: Option<&'a str>,
    pub reasoning: Option<&'a str>,
}

/// Folds chunk rows into per-request token aggregates, per-cell in-window gaps and
/// queueing delays, and per-request text, in one pass ([`ChunkFold::push`] each row,
/// then [`ChunkFold::finish`]). Each request's rows come in stream order; requests may
/// interleave (a table file read block by block). With [`ChunkFold::counted`], each
/// request's row count is known beforehand, and it is filed once its last row is in.
/// Either way a cell's gaps and delays are filed request by request, in request id
/// order, and only the requests not yet filed are held open.
#[derive(Debug)]
pub struct ChunkFold<'o> {
    /// Each request's cell.
    owner: Owners<'o>,
    open: BTreeMap<i64, Open>,
    /// With known row counts: every request with rows in id order with its rows still
    /// to come, and the first of them not yet filed.
    remaining: Vec<(i64, u64)>,
    next: usize,
    /// With the load's text rules: filed requests' texts waiting to be read by them (in
    /// parallel, a batch at a time), and their bytes.
    texts: Vec<(i64, (String, String))>,
    text_bytes: usize,
}

/// Bytes of answers (as allocated) read by the text rules at once: the batch is searched
/// in parallel, and memory holds at most this much of a cell's answers. 1 MiB keeps two
/// cores busy; 4 MiB cost a cell of 600 K short answers 10 MB more at its peak.
const TEXT_BATCH_BYTES: usize = 1 << 20;

/// Each request's cell, as a fold looks it up.
#[derive(Debug)]
pub enum Owners<'o> {
    /// Requests of any cells, by id (the tests' polars load).
    Map(&'o HashMap<i64, CellKey>),
    /// One cell's requests: their ids, ascending (a cell's own read: 8 bytes a request,
    /// where a map took 70).
    Cell(CellKey, Vec<i64>),
}

impl Owners<'_> {
    fn get(&self, id: i64) -> Option<&CellKey> {
        match self {
            Owners::Map(m) => m.get(&id),
            Owners::Cell(key, ids) => ids.binary_search(&id).is_ok().then_some(key),
        }
    }
}

/// A request whose rows are still coming.
#[derive(Debug, Default)]
struct Open {
    /// Its cell, looked up at its first row.
    key: Option<CellKey>,
    /// Where it is in [`ChunkFold::remaining`], with counted rows.
    at: Option<usize>,
    agg: Agg,
    /// Its last token event's arrival.
    last_token: Option<i64>,
    gaps: Vec<i64>,
    delays: Vec<i64>,
}

impl<'o> ChunkFold<'o> {
    /// A fold of rows in any request order, filed under the cell `owner` gives each
    /// request.
    pub fn new(owner: Owners<'o>) -> Self {
        ChunkFold {
            owner,
            open: BTreeMap::new(),
            remaining: Vec::new(),
            next: 0,
            texts: Vec::new(),
            text_bytes: 0,
        }
    }

    /// A fold of rows in any request order whose number per request is `rows` (a first
    /// pass over the ids; ascending ids): a request is filed as soon as its last row and
    /// every request of a lower id are in, so memory holds the requests under way, not
    /// the cell's.
    pub fn counted(owner: Owners<'o>, rows: Vec<(i64, u64)>) -> Self {
        debug_assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "ids ascending");
        ChunkFold {
            remaining: rows,
            ..ChunkFold::new(owner)
        }
    }

    /// Whether request `id` is one of the fold's cells'.
    pub fn owns(&self, id: i64) -> bool {
        self.owner.get(id).is_some()
    }

    /// Adds the next row (a request's rows in stream order).
    pub fn push(&mut self, row: ChunkIn<'_>, out: &mut Loaded) {
        let Some(id) = row.request_id else { return };
        let (owner, remaining) = (&self.owner, &self.remaining);
        let o = self.open.entry(id).or_insert_with(|| Open {
            key: owner.get(id).copied(),
            at: remaining.binary_search_by_key(&id, |r| r.0).ok(),
            ..Open::default()
        });
        let (owned, at_row) = (o.key.is_some(), o.at);
        let (at, t, in_window) = (row.arrival_ns, row.tokens, row.in_window);
        if in_window
            && owned
            && let Some(d) = row.queue_delay_ns
        {
            o.delays.push(d);
        }
        if t > 0 {
            if in_window
                && owned
                && let (Some(last_at), Some(at)) = (o.last_token, at)
            {
                o.gaps.push(at - last_at);
            }
            o.last_token = at;
        }
        o.agg.add(&row);
        if let Some((_, left)) = at_row.and_then(|i| self.remaining.get_mut(i)) {
            *left = left.saturating_sub(1);
            if *left == 0 {
                while let Some(&(first, left)) = self.remaining.get(self.next) {
                    if left > 0 {
                        break;
                    }
                    self.file(first, out);
                    self.next += 1;
                }
            }
        }
    }

    /// Files request `id`'s aggregates, text, gaps and delays.
    fn file(&mut self, id: i64, out: &mut Loaded) {
        let Some(o) = self.open.remove(&id) else {
            return;
        };
        if let Some(key) = &o.key {
            if !o.delays.is_empty() {
                if !out.queue_delays.contains_key(key) {
                    out.queue_delays.insert(*key, out.column());
                }
                if let Some(c) = out.queue_delays.get_mut(key) {
                    c.extend(o.delays);
                }
            }
            if !o.gaps.is_empty() {
                let owners = out.gap_owners.entry(*key).or_insert_with(|| {
                    // At most one a request: a cell of many is not grown by doubling.
                    Vec::with_capacity(self.remaining.len())
                });
                owners.push((id, o.gaps.len()));
                if !out.gaps.contains_key(key) {
                    out.gaps.insert(*key, out.column());
                }
                if let Some(c) = out.gaps.get_mut(key) {
                    c.extend(o.gaps);
                }
            }
        }
        if let Some(text) = o.agg.finish(id, out) {
            if out.text_rules.is_some() {
                self.text_bytes += text.0.capacity() + text.1.capacity();
                self.texts.push((id, text));
                if self.text_bytes >= TEXT_BATCH_BYTES {
                    self.read_texts(out);
                }
            } else {
                append(out.text.entry(id).or_default(), text);
            }
        }
    }

    /// Reads the waiting texts by the load's text rules ([`crate::said`]), in parallel
    /// (each request's is independent), and keeps each text only where the loop
    /// evidence will quote it, so that a cell's answers are not all held.
    fn read_texts(&mut self, out: &mut Loaded) {
        let batch = std::mem::take(&mut self.texts);
        self.text_bytes = 0;
        let read: Vec<(i64, Option<Said>, (String, String))> = {
            let (owner, loaded): (&Owners, &Loaded) = (&self.owner, out);
            batch
                .into_par_iter()
                .map(|(id, text)| (id, read_text(id, owner.get(id), &text, loaded), text))
                .collect()
        };
        for (id, found, text) in read {
            match found {
                None => append(out.text.entry(id).or_default(), text),
                Some(found) => {
                    if !found.repeats.is_empty() {
                        append(out.text.entry(id).or_default(), text);
                    }
                    if !found.is_empty() {
                        out.said.insert(id, found);
                    }
                }
            }
        }
    }

    /// Files every request still open, in request id order, and reads the texts still
    /// waiting.
    pub fn finish(mut self, out: &mut Loaded) {
        let ids: Vec<i64> = self.open.keys().copied().collect();
        for id in ids {
            self.file(id, out);
        }
        self.read_texts(out);
    }
}

/// One request's token aggregates being summed up, row by row in stream order.
#[derive(Debug, Default)]
struct Agg {
    tokens: i64,
    tokens_in_window: i64,
    token_events_in_window: i64,
    first_chunk: Option<i64>,
    first_content: Option<i64>,
    first_text: Option<i64>,
    first_reasoning: Option<i64>,
    reasoning_tokens: i64,
    first_token: Option<i64>,
    first_token_tokens: Option<i64>,
    last_token: Option<i64>,
    /// Token events, the reads they came in, the most of one read, and the current
    /// read's arrival and events so far.
    token_events: i64,
    token_reads: i64,
    largest_read: i64,
    read_at: Option<i64>,
    read_events: i64,
    /// The highest cumulative count seen, and what its increases add up to (in all,
    /// in the window, of the first increase).
    usage_last: i64,
    usage: i64,
    usage_in_window: i64,
    usage_first: Option<i64>,
    /// Whether some token event carried the cumulative count, and whether one did not.
    usage_seen: bool,
    usage_broken: bool,
    /// (content, reasoning) text, when some row had either.
    text: Option<(String, String)>,
}

impl Agg {
    fn add(&mut self, row: &ChunkIn<'_>) {
        let (at, t, in_window) = (row.arrival_ns, row.tokens, row.in_window);
        let content = row.content.is_some_and(|c| !c.is_empty());
        let reasoning = row.reasoning.is_some_and(|r| !r.is_empty());
        // The increase of the cumulative count over its last earlier value.
        let usage = match row.completion_tokens {
            Some(v) => {
                let up = (v - self.usage_last).max(0);
                self.usage_last = self.usage_last.max(v);
                up
            }
            None => 0,
        };
        if t > 0 {
            match row.completion_tokens {
                Some(_) => self.usage_seen = true,
                None => self.usage_broken = true,
            }
        }
        let min = |was: Option<i64>| match (was, at) {
            (Some(w), Some(a)) => Some(w.min(a)),
            (w, a) => w.or(a),
        };
        self.tokens += t;
        self.usage += usage;
        if in_window {
            self.tokens_in_window += t;
            self.usage_in_window += usage;
            self.token_events_in_window += i64::from(t > 0);
        }
        self.first_chunk = min(self.first_chunk);
        if content {
            self.first_content = min(self.first_content);
        }
        if content || reasoning {
            self.first_text = min(self.first_text);
        }
        if reasoning {
            self.first_reasoning = min(self.first_reasoning);
            self.reasoning_tokens += t;
        }
        if t > 0 {
            self.token_events += 1;
            if at.is_none() || at != self.read_at {
                self.token_reads += 1;
                self.read_events = 0;
            }
            self.read_at = at;
            self.read_events += 1;
            self.largest_read = self.largest_read.max(self.read_events);
            self.first_token = min(self.first_token);
            self.first_token_tokens.get_or_insert(t);
            self.last_token = match (self.last_token, at) {
                (Some(w), Some(a)) => Some(w.max(a)),
                (w, a) => w.or(a),
            };
        }
        if usage > 0 {
            self.usage_first.get_or_insert(usage);
        }
        if row.content.is_some() || row.reasoning.is_some() {
            let text = self.text.get_or_insert_with(Default::default);
            text.0.push_str(row.content.unwrap_or(""));
            text.1.push_str(row.reasoning.unwrap_or(""));
        }
    }

    /// Files the request's token aggregates; returns its text, if it had any.
    fn finish(self, id: i64, out: &mut Loaded) -> Option<(String, String)> {
        // Usage counts only when every event that carried tokens carried the count.
        let continuous = self.usage_seen && !self.usage_broken;
        let agg = TokenAgg {
            tokens: self.tokens,
            tokens_in_window: self.tokens_in_window,
            token_events_in_window: self.token_events_in_window,
            first_chunk_ns: self.first_chunk,
            first_content_ns: self.first_content,
            first_text_ns: self.first_text,
            first_reasoning_ns: self.first_reasoning,
            reasoning_tokens: self.reasoning_tokens,
            first_token_ns: self.first_token,
            first_token_tokens: self.first_token_tokens.unwrap_or(0),
            last_token_ns: self.last_token,
            token_events: self.token_events,
            token_reads: self.token_reads,
            largest_read: self.largest_read,
            usage: continuous.then_some(UsageCount {
                tokens: self.usage,
                tokens_in_window: self.usage_in_window,
                first_token_tokens: self.usage_first.unwrap_or(0),
            }),
        };
        out.tokens.insert(id, crate::data::PackedAgg::pack(&agg));
        self.text
    }
}

/// What the load's text rules read in request `id`'s text (`None` without the rules, or
/// for a request the requests table does not hold: its text is then kept whole).
fn read_text(
    id: i64,
    key: Option<&CellKey>,
    text: &(String, String),
    out: &Loaded,
) -> Option<Said> {
    let info = key.and_then(|k| out.requests.get(k)).and_then(|v| {
        v.binary_search_by_key(&id, |r| r.request_id)
            .ok()
            .and_then(|i| v.get(i))
    })?;
    let rules = out.text_rules.as_ref()?;
    let agg = out.tokens.get(&id)?.unpack();
    Some(crate::said::said(info, &agg, &text.0, &text.1, rules))
}

/// Appends a run of a request's text to what it has (a request whose rows were not all
/// together comes in more than one run).
fn append(to: &mut (String, String), (content, reasoning): (String, String)) {
    if to.0.is_empty() && to.1.is_empty() {
        *to = (content, reasoning);
    } else {
        to.0.push_str(&content);
        to.1.push_str(&reasoning);
    }
}

/// Metric rows of the wanted series, grouped by cell, series and scrape, into
/// [`Loaded::samples`] (label sets summed, in label order) and the recorder's own lag
/// series into [`Loaded::tick_counts`].
#[derive(Debug, Default)]
pub struct MetricFold {
    /// (cell, name, scrape start) -> (scrape end, [(labels, value)]).
    grouped: BTreeMap<(CellKey, String, i64), ScrapeValues>,
}

/// One scrape of one series: its end time and every label set's value.
type ScrapeValues = (i64, Vec<(String, f64)>);

impl MetricFold {
    /// Adds one sample (rows in any order).
    pub fn push(
        &mut self,
        key: CellKey,
        name: String,
        start: i64,
        end: i64,
        labels: String,
        value: f64,
    ) {
        let entry = self
            .grouped
            .entry((key, name, start))
            .or_insert((end, Vec::new()));
        entry.1.push((labels, value));
    }

    /// Files every scrape's value, in time order.
    pub fn finish(self, out: &mut Loaded) {
        for ((key, name, start_ns), (end_ns, mut values)) in self.grouped {
            file_scrape(out, key, &name, (start_ns, end_ns), &mut values);
        }
    }
}

/// One scrape of one series into [`Loaded::samples`]: its label sets summed in label
/// order (the recorder's own lag: its `stat="max"`, and its tick counts into
/// [`Loaded::tick_counts`]).
fn file_scrape(
    out: &mut Loaded,
    key: CellKey,
    name: &str,
    (start_ns, end_ns): (i64, i64),
    values: &mut [(String, f64)],
) {
    values.sort_by(|a, b| a.0.cmp(&b.0));
    let value = if name == protocol::CLIENT_LAG_METRIC {
        // The recorder's own lag: the `stat="max"` summary is the series; the tick counts
        // go to their own table.
        let stat = |want: LagStat| {
            values
                .iter()
                .find(|(l, _)| LagStat::from_labels(l) == Some(want))
                .map(|(_, v)| *v)
        };
        if let Some(ticks) = stat(LagStat::Ticks) {
            out.tick_counts.entry(key).or_default().push(TickCounts {
                start_ns,
                end_ns,
                ticks,
                over: (0..protocol::LATE_TICK_MS.len())
                    .map(|i| stat(LagStat::Over(i)).unwrap_or(0.0))
                    .collect(),
            });
        }
        stat(LagStat::Max).unwrap_or(f64::NAN)
    } else {
        values.iter().map(|(_, v)| *v).sum()
    };
    let series = out.samples.entry(key).or_default();
    let sample = Sample {
        start_ns,
        end_ns,
        value,
    };
    match series.get_mut(name) {
        Some(v) => v.push(sample),
        None => {
            series.insert(name.to_string(), vec![sample]);
        }
    }
}

/// One cell's metric rows of the wanted series as the recorder writes them, scrape by
/// scrape: each series' scrape is filed as soon as a later one of it comes, so memory
/// holds one scrape per series, not the cell's (a [`MetricFold`] groups rows in any
/// order, holding every one). Rows out of that order are noticed
/// ([`ScrapeFold::finish`] says so), and the cell is then read by a [`MetricFold`]: the
/// same samples either way.
#[derive(Debug)]
pub struct ScrapeFold {
    key: CellKey,
    /// Per series: its scrape being gathered.
    open: BTreeMap<String, OpenScrape>,
    disordered: bool,
}

/// A series' scrape being gathered: its start and end, and every label set's value.
#[derive(Debug)]
struct OpenScrape {
    start: i64,
    end: i64,
    values: Vec<(String, f64)>,
}

impl ScrapeFold {
    pub fn new(key: CellKey) -> Self {
        ScrapeFold {
            key,
            open: BTreeMap::new(),
            disordered: false,
        }
    }

    /// Adds one sample; a scrape of a series is filed when a later one comes.
    pub fn push(
        &mut self,
        name: &str,
        (start, end): (i64, i64),
        labels: String,
        value: f64,
        out: &mut Loaded,
    ) {
        if self.disordered {
            return;
        }
        let next = OpenScrape {
            start,
            end,
            values: vec![(labels, value)],
        };
        let Some(open) = self.open.get_mut(name) else {
            self.open.insert(name.to_string(), next);
            return;
        };
        if start == open.start {
            open.values.extend(next.values);
        } else if start > open.start {
            let mut was = std::mem::replace(open, next);
            file_scrape(out, self.key, name, (was.start, was.end), &mut was.values);
        } else {
            // An earlier scrape than one already filed or under way.
            self.disordered = true;
        }
    }

    /// Files the scrapes still open; `false`: some rows came out of scrape order, and
    /// what was filed is not every sample (read the cell with a [`MetricFold`]).
    pub fn finish(self, out: &mut Loaded) -> bool {
        if self.disordered {
            return false;
        }
        for (name, mut s) in self.open {
            file_scrape(out, self.key, &name, (s.start, s.end), &mut s.values);
        }
        true
    }
}

/// With every cell's events in [`Loaded::events`]: puts them in time order and finds
/// each cell's measurement window (first open to last close).
pub fn settle_events(out: &mut Loaded) {
    for (key, v) in &mut out.events {
        v.sort_by_key(|e| e.time_ns);
        let at = |kind| v.iter().filter(move |e| e.kind == kind).map(|e| e.time_ns);
        if let (Some(open), Some(close)) = (
            at(EventKind::WindowOpen).min(),
            at(EventKind::WindowClose).max(),
        ) && close >= open
        {
            out.windows.insert(*key, (open, close));
        }
    }
}

/// Whether `at` lies inside `key`'s window (a cell without one has no row inside).
pub fn in_window(out: &Loaded, key: Option<&CellKey>, at: Option<i64>) -> bool {
    match (key.and_then(|k| out.windows.get(k)), at) {
        (Some((open, close)), Some(at)) => at >= *open && at <= *close,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokentrace_schemas::layout::Phase;

    /// Scrapes of three series, two of them with two label sets, and of the recorder's
    /// lag; values that sum differently in another order.
    fn rows() -> Vec<(String, i64, i64, String, f64)> {
        let mut rows = Vec::new();
        for scrape in 0..40i64 {
            let (start, end) = (scrape * 1_000, scrape * 1_000 + 7);
            for (name, labels) in [
                ("running", vec!["engine=\"1\"", "engine=\"0\""]),
                ("waiting", vec!["engine=\"0\""]),
                ("generated", vec!["b", "a", "c"]),
            ] {
                for (i, l) in labels.iter().enumerate() {
                    let v = 0.1 * (scrape as f64) + 1e16 * (i as f64) + 0.3;
                    rows.push((name.to_string(), start, end, l.to_string(), v));
                }
            }
            let lag = protocol::CLIENT_LAG_METRIC;
            for (labels, v) in [
                ("stat=\"max\"", 0.002 * scrape as f64),
                ("stat=\"ticks\"", 1000.0),
            ] {
                rows.push((lag.to_string(), start, end, labels.to_string(), v));
            }
        }
        rows
    }

    fn grouped(rows: &[(String, i64, i64, String, f64)], key: CellKey) -> Loaded {
        let mut out = Loaded::default();
        let mut m = MetricFold::default();
        for (name, start, end, labels, v) in rows.iter().cloned() {
            m.push(key, name, start, end, labels, v);
        }
        m.finish(&mut out);
        out
    }

    #[test]
    fn scrapes_in_order_are_filed_as_a_grouping_files_them() {
        let key = CellKey::new(Phase::Decode, 1024, 8);
        let rows = rows();
        let mut out = Loaded::default();
        let mut s = ScrapeFold::new(key);
        for (name, start, end, labels, v) in rows.iter().cloned() {
            s.push(&name, (start, end), labels, v, &mut out);
        }
        assert!(s.finish(&mut out));
        let want = grouped(&rows, key);
        assert_eq!(format!("{:?}", out.samples), format!("{:?}", want.samples));
        assert_eq!(out.tick_counts, want.tick_counts);
        assert_eq!(out.samples[&key]["running"].len(), 40);
        assert_eq!(out.tick_counts[&key].len(), 40);

        // A row of an earlier scrape after a later one: noticed.
        let mut late = rows.clone();
        let at = late.iter().position(|r| r.1 == 5_000).unwrap_or(0);
        let row = late.remove(at);
        late.push(row);
        let (mut out, mut s) = (Loaded::default(), ScrapeFold::new(key));
        for (name, start, end, labels, v) in late.iter().cloned() {
            s.push(&name, (start, end), labels, v, &mut out);
        }
        assert!(!s.finish(&mut out));
        // The grouping gives the same samples for the rows in any order.
        let again = grouped(&late, key);
        assert_eq!(
            format!("{:?}", again.samples),
            format!("{:?}", want.samples)
        );
    }
}
