//! Replay workloads: a recorded run's cells, or a production trace (Mooncake, Azure,
//! BurstGPT), read and checked whole before any request, and turned into replay cells
//! whose prompts are chains of token-id blocks, so shared hash ids share exact prefixes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::{CELL_FILE, MANIFEST_FILE, list_cells, table_file};
use tokentrace_schemas::manifest::{ReplayConfig, ReplaySource, TraceFormat};
use tokentrace_schemas::rng::mix;
use tokentrace_schemas::tables::{EndReason, Requests, Role};
use tokentrace_schemas::{CellKey, Phase};
use tokentrace_wire::workload::{self, Slice, TraceRow};

/// Prompt tokens per hash id unless told (Mooncake's published traces use 512).
pub const DEFAULT_BLOCK_TOKENS: u32 = 512;
/// Most distinct blocks whose serialized ids are kept for reuse; beyond it a block is
/// built again each time (the same ids: they follow from the hash id alone).
pub const BLOCK_CACHE: usize = 4096;

/// What to replay, as the command line says it.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// A trace file, a run folder, or one cell folder of a run.
    pub from: PathBuf,
    /// `None`: told from the content.
    pub format: Option<TraceFormat>,
    /// Trace time × this (0.5 plays twice as fast).
    pub time_scale: f64,
    /// The slice of the trace, in trace time from its first request.
    pub window: (Option<i64>, Option<i64>),
    pub max_requests: Option<u32>,
    pub max_concurrency: Option<u32>,
    pub block_tokens: u32,
}

/// Why a workload could not be read; nothing was sent.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Trace {
        path: PathBuf,
        #[source]
        source: workload::WorkloadError,
    },
    #[error(transparent)]
    Run(#[from] tokentrace_schemas::Error),
    #[error("{0}")]
    Bad(String),
}

/// One request of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub source_row: i64,
    pub trace_ns: i64,
    /// Due this long after the cell's schedule zero (scaled, from the first taken).
    pub offset_ns: i64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// The prompt's blocks: hash ids, each `block_tokens` ids (the last one cut).
    pub blocks: Vec<u64>,
    /// Prompt tokens shared with an earlier item (see [`expected_cached`]).
    pub expected_cached: u32,
    /// Why it will not be sent, decided before the cell starts.
    pub skipped: Option<String>,
}

/// One replay cell's workload.
#[derive(Debug, Clone)]
pub struct SourceCell {
    pub key_context: u32,
    pub source: ReplaySource,
    pub items: Vec<Item>,
}

/// A whole workload: its format and its cells (one for a trace file, one per replayed
/// cell of a run).
#[derive(Debug, Clone)]
pub struct Workload {
    pub format: TraceFormat,
    pub cells: Vec<SourceCell>,
}

impl Workload {
    /// The manifest's `config.replay`.
    pub fn config(&self, opts: &ReplayOptions) -> ReplayConfig {
        ReplayConfig {
            from: opts.from.display().to_string(),
            format: self.format,
            time_scale_ppm: (opts.time_scale * 1e6).round() as u64,
            window_start_ns: opts.window.0,
            window_end_ns: opts.window.1,
            max_requests: opts.max_requests,
            max_concurrency: opts.max_concurrency,
            block_tokens: opts.block_tokens,
            sources: self.cells.iter().map(|c| c.source.clone()).collect(),
        }
    }

    /// The cells' keys, in order.
    pub fn keys(&self) -> Vec<CellKey> {
        self.cells
            .iter()
            .map(|c| CellKey::replay(c.key_context, c.source.index))
            .collect()
    }

    /// Marks every item whose prompt and output exceed the server's longest request
    /// as skipped, with the reason (a prompt is never cut to fit).
    pub fn skip_over(&mut self, limit: Option<u32>, source: Option<&str>) {
        let Some(limit) = limit else { return };
        for cell in &mut self.cells {
            for it in &mut cell.items {
                let need = u64::from(it.input_tokens) + u64::from(it.output_tokens.max(1));
                if it.skipped.is_none() && need > u64::from(limit) {
                    it.skipped = Some(format!(
                        "prompt {} + output {} tokens exceed the server's {} {limit}",
                        it.input_tokens,
                        it.output_tokens,
                        source.unwrap_or("max_model_len")
                    ));
                }
            }
            cell.source.skipped = cell.items.iter().filter(|i| i.skipped.is_some()).count() as u32;
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReplayError + '_ {
    move |source| ReplayError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads and checks the workload `opts` names (a folder is a tokentrace run, or one of
/// its cells; a file is a trace of `opts.format`, or of the format its content shows).
/// `said` hears which format was found.
pub fn load(opts: &ReplayOptions, said: &mut dyn FnMut(String)) -> Result<Workload, ReplayError> {
    if !(opts.time_scale.is_finite() && opts.time_scale > 0.0) {
        return Err(ReplayError::Bad(format!(
            "--time-scale {}: want a number above 0",
            opts.time_scale
        )));
    }
    if opts.block_tokens == 0 {
        return Err(ReplayError::Bad(
            "--block-tokens must be above 0".to_string(),
        ));
    }
    let path = &opts.from;
    let meta = std::fs::metadata(path).map_err(io(path))?;
    if meta.is_dir() {
        if let Some(f) = opts.format.filter(|f| *f != TraceFormat::Tokentrace) {
            return Err(ReplayError::Bad(format!(
                "{}: a folder (a tokentrace run), but --trace-format {f} was given",
                path.display()
            )));
        }
        said(format!(
            "replay: {} is a tokentrace run folder",
            path.display()
        ));
        return from_run(path, opts);
    }
    if opts.format == Some(TraceFormat::Tokentrace) {
        return Err(ReplayError::Bad(format!(
            "{}: a file, but --trace-format tokentrace wants a run folder",
            path.display()
        )));
    }
    let bytes = std::fs::read(path).map_err(io(path))?;
    let trace = |source| ReplayError::Trace {
        path: path.clone(),
        source,
    };
    let format = match opts.format {
        Some(f) => f,
        None => {
            let f = workload::detect(&bytes).map_err(trace)?;
            said(format!(
                "replay: {} read as {} (told from its content; --trace-format to say otherwise)",
                path.display(),
                f.as_str()
            ));
            f
        }
    };
    let slice = Slice {
        start_ns: opts.window.0,
        end_ns: opts.window.1,
        max: opts.max_requests,
    };
    let rows = workload::parse(&bytes, format, slice).map_err(trace)?;
    if rows.is_empty() {
        return Err(ReplayError::Bad(format!(
            "{}: no request of the trace is inside --replay-window",
            path.display()
        )));
    }
    let file = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let items = trace_items(&rows, opts);
    let n = items.len() as u32;
    Ok(Workload {
        format,
        cells: vec![SourceCell {
            key_context: 0,
            source: ReplaySource {
                index: 1,
                file,
                sha256: sha256(&bytes),
                source_cell: None,
                closed_loop: false,
                requests: n,
                skipped: items.iter().filter(|i| i.skipped.is_some()).count() as u32,
            },
            items,
        }],
    })
}

/// Hash ids of a request's own blocks (no other request shares them): the top bit set,
/// then the request's number and the block's.
fn own_blocks(n: u64, input: u32, block_tokens: u32) -> Vec<u64> {
    (0..u64::from(input.div_ceil(block_tokens)))
        .map(|k| (1 << 63) | (n << 20) | k)
        .collect()
}

fn trace_items(rows: &[TraceRow], opts: &ReplayOptions) -> Vec<Item> {
    let origin = rows.first().map_or(0, |r| r.time_ns);
    let mut items: Vec<Item> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let blocks = if r.hash_ids.is_empty() {
                own_blocks(i as u64, r.input_tokens, opts.block_tokens)
            } else {
                r.hash_ids.clone()
            };
            Item {
                source_row: r.line as i64,
                trace_ns: r.time_ns,
                offset_ns: scale(r.time_ns - origin, opts.time_scale),
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                blocks,
                expected_cached: 0,
                skipped: if r.output_tokens == 0 {
                    Some("the trace gives it no output tokens (a failed request there)".to_string())
                } else if r.input_tokens == 0 {
                    Some("the trace gives it no prompt tokens".to_string())
                } else if !r.hash_ids.is_empty()
                    && (r.hash_ids.len() as u64) * u64::from(opts.block_tokens)
                        < u64::from(r.input_tokens)
                {
                    Some(format!(
                        "its {} hash ids × {} tokens cover less than its {} prompt tokens (--block-tokens?)",
                        r.hash_ids.len(),
                        opts.block_tokens,
                        r.input_tokens
                    ))
                } else {
                    None
                },
            }
        })
        .collect();
    expected_cached(&mut items, opts.block_tokens);
    items
}

fn scale(ns: i64, by: f64) -> i64 {
    (ns as f64 * by).round() as i64
}

/// Sets each item's `expected_cached`: the most leading prompt tokens it shares with one
/// earlier item, i.e. for the longest run of leading blocks it has in common with an
/// earlier item, that run's tokens capped at both prompts' lengths. Items that will
/// not be sent share nothing (no server saw them).
pub fn expected_cached(items: &mut [Item], block_tokens: u32) {
    // Chain hash of a prefix of blocks → the longest earlier prompt that had it.
    let mut seen: HashMap<u64, u32> = HashMap::new();
    for it in items.iter_mut() {
        let mut chain = 0u64;
        let mut best = 0u32;
        let mut chains = Vec::with_capacity(it.blocks.len());
        for (k, b) in it.blocks.iter().enumerate() {
            chain = mix(chain ^ mix(*b));
            chains.push(chain);
            if let Some(&longest) = seen.get(&chain) {
                let tokens =
                    u32::try_from((k as u64 + 1) * u64::from(block_tokens)).unwrap_or(u32::MAX);
                best = best.max(tokens.min(longest).min(it.input_tokens));
            }
        }
        it.expected_cached = best;
        if it.skipped.is_none() {
            for c in chains {
                let e = seen.entry(c).or_insert(0);
                *e = (*e).max(it.input_tokens);
            }
        }
    }
}

/// The cells of a run (or the one cell) at `path` that hold measured requests, each a
/// replay cell.
fn from_run(path: &Path, opts: &ReplayOptions) -> Result<Workload, ReplayError> {
    let cells: Vec<(CellKey, PathBuf)> = if path.join(CELL_FILE).exists() {
        vec![(CellKey::from_path(path)?, path.to_path_buf())]
    } else if path.join(MANIFEST_FILE).exists() {
        list_cells(path)?
    } else {
        return Err(ReplayError::Bad(format!(
            "{}: a folder, but neither a run (no {MANIFEST_FILE}) nor a cell of one (no {CELL_FILE})",
            path.display()
        )));
    };
    let mut out = Vec::new();
    for (key, dir) in cells {
        if key.phase == Phase::Prefill {
            continue;
        }
        let meta = tokentrace_schemas::manifest::CellMeta::read_complete(&dir)?;
        if meta.is_imported() {
            return Err(ReplayError::Bad(format!(
                "{}: an imported cell holds another tool's figures, no requests to replay",
                dir.display()
            )));
        }
        let file = dir.join(table_file::<Requests>());
        let bytes = std::fs::read(&file).map_err(io(&file))?;
        let rows = tokentrace_schemas::reader::read_table::<Requests>(&file)?;
        let mut measured: Vec<_> = rows
            .into_iter()
            .filter(|r| r.role == Role::Measured)
            .filter_map(|r| r.sent_ns.map(|s| (s, r)))
            .collect();
        measured.sort_by_key(|(s, r)| (*s, r.request_id));
        let origin = measured.first().map_or(0, |(s, _)| *s);
        // Shifted by the window: a request sent before its start is not taken.
        let taken: Vec<_> = measured
            .into_iter()
            .filter(|(s, _)| {
                let t = s - origin;
                opts.window.0.is_none_or(|w| t >= w) && opts.window.1.is_none_or(|w| t < w)
            })
            .take(opts.max_requests.map_or(usize::MAX, |m| m as usize))
            .collect();
        let Some(first) = taken.first().map(|(s, _)| *s) else {
            continue;
        };
        let index = out.len() as u32 + 1;
        // Decode cells shared one prompt per context (primed, as the reference tool
        // measures decode): their replay shares one chain of blocks too. Every other
        // kind sent each request a prompt of its own.
        let shared = matches!(key.phase, Phase::Decode);
        // The chain is the cell's own: no other replayed cell's prompt shares it, so
        // its expected cache hits are its own requests' (the first one prefills cold).
        let context_chain = |input: u32| -> Vec<u64> {
            (0..u64::from(input.div_ceil(opts.block_tokens)))
                .map(|k| (1 << 62) | (u64::from(index) << 40) | k)
                .collect()
        };
        let mut items: Vec<Item> = taken
            .iter()
            .map(|(sent, r)| {
                let input = r
                    .prompt_tokens_server
                    .unwrap_or(r.prompt_tokens_requested)
                    .max(0) as u32;
                let output = r.completion_tokens_server.unwrap_or(0).max(0) as u32;
                let skipped = match (output, r.end_reason) {
                    (0, EndReason::HttpError) => {
                        Some("the recorded request was refused (no output to replay)".to_string())
                    }
                    (0, _) => Some("the recorded request produced no tokens".to_string()),
                    _ => None,
                };
                Item {
                    source_row: r.request_id,
                    trace_ns: sent - origin,
                    offset_ns: scale(sent - first, opts.time_scale),
                    input_tokens: input,
                    output_tokens: output,
                    blocks: if shared {
                        context_chain(input)
                    } else {
                        own_blocks(r.request_id.unsigned_abs(), input, opts.block_tokens)
                    },
                    expected_cached: 0,
                    skipped,
                }
            })
            .collect();
        expected_cached(&mut items, opts.block_tokens);
        let rel = file
            .strip_prefix(path)
            .map_or_else(|_| file.display().to_string(), |p| p.display().to_string());
        out.push(SourceCell {
            key_context: key.context,
            source: ReplaySource {
                index,
                file: if rel.is_empty() {
                    table_file::<Requests>()
                } else {
                    rel
                },
                sha256: sha256(&bytes),
                source_cell: Some(key.to_string()),
                closed_loop: matches!(key.phase, Phase::Decode | Phase::Burst),
                requests: items.len() as u32,
                skipped: items.iter().filter(|i| i.skipped.is_some()).count() as u32,
            },
            items,
        });
    }
    if out.is_empty() {
        return Err(ReplayError::Bad(format!(
            "{}: no cell with measured requests to replay (inside --replay-window)",
            path.display()
        )));
    }
    Ok(Workload {
        format: TraceFormat::Tokentrace,
        cells: out,
    })
}

/// Builds replay prompts: each block's token ids drawn from `pool` (ids the server's
/// tokenizer gave for filler text) by the hash id and the session's nonce, serialized
/// once and kept (up to [`BLOCK_CACHE`] blocks).
#[derive(Debug)]
pub struct Prompts {
    pool: Vec<u32>,
    nonce: u64,
    block_tokens: u32,
    cache: Mutex<HashMap<u64, Arc<str>>>,
}

impl Prompts {
    /// `pool` must not be empty (the caller checked); `nonce` is the session's.
    pub fn new(pool: Vec<u32>, nonce: &str, block_tokens: u32) -> Self {
        let nonce = nonce
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| mix(h ^ u64::from(b)));
        Prompts {
            pool,
            nonce,
            block_tokens,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The ids of block `hash` (all `block_tokens` of them).
    pub fn block_ids(&self, hash: u64) -> Vec<u32> {
        let mut x = mix(self.nonce ^ mix(hash));
        let n = self.pool.len().max(1) as u64;
        (0..self.block_tokens)
            .map(|_| {
                x = mix(x);
                self.pool.get((x % n) as usize).copied().unwrap_or(0)
            })
            .collect()
    }

    fn block_text(&self, hash: u64) -> Arc<str> {
        if let Some(t) = self.cache.lock().ok().and_then(|c| c.get(&hash).cloned()) {
            return t;
        }
        let ids = self.block_ids(hash);
        let mut text = String::with_capacity(ids.len() * 7);
        for (i, id) in ids.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&id.to_string());
        }
        let text: Arc<str> = text.into();
        if let Ok(mut c) = self.cache.lock()
            && c.len() < BLOCK_CACHE
        {
            c.insert(hash, text.clone());
        }
        text
    }

    /// The JSON array of `item`'s prompt ids: its blocks in order, cut at its length.
    pub fn prompt_json(&self, item: &Item) -> String {
        let mut out = String::with_capacity(item.input_tokens as usize * 7 + 2);
        out.push('[');
        let mut left = item.input_tokens;
        for (k, b) in item.blocks.iter().enumerate() {
            if left == 0 {
                break;
            }
            if k > 0 {
                out.push(',');
            }
            if left >= self.block_tokens {
                out.push_str(&self.block_text(*b));
                left -= self.block_tokens;
            } else {
                let ids = self.block_ids(*b);
                let part: Vec<String> = ids[..left as usize].iter().map(u32::to_string).collect();
                out.push_str(&part.join(","));
                left = 0;
            }
        }
        out.push(']');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(blocks: &[u64], input: u32) -> Item {
        Item {
            source_row: 0,
            trace_ns: 0,
            offset_ns: 0,
            input_tokens: input,
            output_tokens: 1,
            blocks: blocks.to_vec(),
            expected_cached: 0,
            skipped: None,
        }
    }

    #[test]
    fn expected_cache_hits_follow_the_longest_shared_leading_blocks() {
        let mut items = vec![
            item(&[1, 2, 3], 40),
            item(&[1, 2, 9], 40),
            item(&[1, 2, 3, 4], 50),
            item(&[7, 2, 3], 40),
            item(&[1], 5),
            item(&[1, 2, 3], 30),
        ];
        expected_cached(&mut items, 16);
        let got: Vec<u32> = items.iter().map(|i| i.expected_cached).collect();
        // [1,2] shared (32); [1,2,3] with the first's 40 tokens; none; [1] capped at 5;
        // [1,2,3] capped at its own 30.
        assert_eq!(got, vec![0, 32, 40, 0, 5, 30]);
    }

    #[test]
    fn prompts_share_exactly_their_common_blocks_and_keep_their_lengths() {
        let p = Prompts::new((100..200).collect(), "nonce-a", 4);
        let ids =
            |it: &Item| -> Vec<u32> { serde_json::from_str(&p.prompt_json(it)).expect("json") };
        let a = ids(&item(&[1, 2, 3], 10));
        let b = ids(&item(&[1, 2, 4], 12));
        assert_eq!((a.len(), b.len()), (10, 12));
        assert_eq!(a[..8], b[..8]);
        assert_ne!(a[8..10], b[8..10]);
        let other = Prompts::new((100..200).collect(), "nonce-b", 4);
        assert_ne!(
            p.block_ids(1),
            other.block_ids(1),
            "another session's blocks differ"
        );
        assert!(a.iter().all(|id| (100..200).contains(id)));
    }
}
