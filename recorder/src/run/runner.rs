//! The cell loop: with the run set up ([`crate::run::session`]), per context build the prompt
//! and record its cells (prefill scout and decode cells, burst cells, rate cells, replay
//! cells, as the modes ask), updating the manifest as each cell commits. `resume` skips
//! cells already complete and redoes the rest.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokentrace_schemas::manifest::{CellStatus, Manifest, PrefillMode};
use tokentrace_schemas::tables::Endpoint;
use tokentrace_schemas::{CellKey, Phase};

use crate::run::session::{
    self, DEFAULT_BURST_REQUESTS, Opened, Progress, RecordError, RecordOptions, Session,
};
use crate::send::prompt::{self, PromptError};
use crate::send::request::stream_body;
use crate::store::cell::{self, CellError, CellPlan};
use crate::store::queue::Record;

/// Request ids of cell k start at k × this (unique within the run, stable on resume).
pub const REQUEST_ID_STRIDE: i64 = 1_000_000_000;
/// Prompt tokens of filler whose ids make the pool replay blocks are drawn from.
pub const REPLAY_POOL_TOKENS: u32 = 1024;
/// Prompt tokens of a replay cell's priming request (a prompt no other request shares).
pub const REPLAY_PRIME_TOKENS: u32 = 64;
/// The conversation cells' texts, built with the first: the message, the system prompt
/// and the tool-result block.
#[derive(Debug, Clone)]
struct TalkTexts {
    message: String,
    system: Option<String>,
    tool: Option<String>,
}

/// Seeds of the conversation cells' filler: the message every turn rewords, and the
/// shared system prompt (apart from every context's, which are seeded by their length).
const TALK_MESSAGE_SEED: u64 = 0x000C_04E5_5A6E;
const TALK_SYSTEM_SEED: u64 = 0x0005_7573_7E4D;
const TALK_TOOL_SEED: u64 = 0x0007_0014_7E5A;

/// Records the run; `progress` hears of every step.
pub async fn record(
    opts: &RecordOptions,
    mut progress: impl FnMut(Progress),
) -> Result<Manifest, RecordError> {
    let mut s = match session::open(opts, &mut progress).await? {
        Opened::Plan(manifest) => return Ok(*manifest),
        Opened::Run(s) => s,
    };
    let total = s.manifest.cells.len();
    progress(Progress::Plan(Box::new(s.manifest.clone())));
    let mut plans = Plans {
        prompts: BTreeMap::new(),
        replay_prompts: None,
        talk: None,
        probe_records: Some(std::mem::take(&mut s.probe_records)),
    };
    // Contexts whose prefill scout the server refused as a wrong request: their decode
    // cells fail without a request (the same prompt would be refused again).
    let mut refused_contexts: BTreeMap<u32, String> = BTreeMap::new();
    for i in 0..total {
        let key = s.manifest.cells[i].key();
        if let Some(line) = settled(&mut s, opts, i, &refused_contexts)? {
            if let Some(line) = line {
                progress(Progress::CellEnd {
                    index: i,
                    total,
                    key,
                    status: s.manifest.cells[i].status,
                    line,
                });
            }
            continue;
        }
        paused(opts, key, &mut progress).await;
        let Some((plan, tokens)) = plans.plan(&s, opts, i).await? else {
            fail(
                &mut s,
                opts,
                i,
                "a replay cell needs its workload (--replay, as first given), a \
                 conversation cell the run's conversation settings",
            )?;
            progress(Progress::CellEnd {
                index: i,
                total,
                key,
                status: CellStatus::Failed,
                line: "FAILED: no --replay workload given".to_string(),
            });
            continue;
        };
        progress(Progress::CellStart {
            index: i,
            total,
            key,
        });
        let started = std::time::Instant::now();
        let result = match key.phase {
            Phase::Prefill => cell::record_prefill(&s.ctx, &plan, &opts.out).await,
            Phase::Decode => cell::record_decode(&s.ctx, &plan, &opts.out).await,
            Phase::Burst => cell::record_burst(&s.ctx, &plan, &opts.out).await,
            Phase::Rate => cell::record_rate(&s.ctx, &plan, &opts.out).await,
            Phase::Replay => cell::record_replay(&s.ctx, &plan, &opts.out).await,
            Phase::Conversation => cell::record_conversation(&s.ctx, &plan, &opts.out).await,
        };
        let entry = &mut s.manifest.cells[i];
        let prompt_miss = tokens.abs_diff(key.context);
        let line = match result {
            Ok(done) => {
                entry.status = CellStatus::Complete;
                entry.reason = (prompt_miss > 0)
                    .then(|| format!("prompt is {tokens} tokens, {prompt_miss} off the context"));
                let rows = done.meta.table_rows("chunks.parquet");
                format!(
                    "committed: {rows} chunks, {} in {:.1} s",
                    done.tally.requests_line(),
                    started.elapsed().as_secs_f64()
                )
            }
            Err(CellError::Abandoned) => {
                return Err(RecordError::Resume(
                    opts.out.clone(),
                    "interrupted".to_string(),
                ));
            }
            Err(CellError::Refused(why)) if why.by_user => {
                // Nothing of a skipped cell is kept either.
                let _ = std::fs::remove_dir_all(key.staging_dir(&opts.out));
                entry.status = CellStatus::Skipped;
                entry.reason = Some(user_skip_reason());
                format!("skipped ({})", entry.reason.as_deref().unwrap_or(""))
            }
            Err(e) => {
                // Nothing of a failed cell is kept: its staging folder goes.
                let _ = std::fs::remove_dir_all(key.staging_dir(&opts.out));
                if key.phase == Phase::Prefill
                    && let CellError::Refused(why) = &e
                    && why.permanent
                {
                    refused_contexts.insert(key.context, why.message.clone());
                }
                entry.status = CellStatus::Failed;
                entry.reason = Some(e.to_string());
                format!("FAILED: {e}")
            }
        };
        let tolerance = s.manifest.config.prompt_tolerance_tokens;
        if prompt_miss > tolerance && s.manifest.cells[i].status != CellStatus::Skipped {
            let entry = &mut s.manifest.cells[i];
            entry.status = CellStatus::Failed;
            entry.reason = Some(format!(
                "the prompt is {tokens} tokens by the server's count, {prompt_miss} off the asked {} (tolerance {tolerance})",
                key.context
            ));
        }
        progress(Progress::CellEnd {
            index: i,
            total,
            key,
            status: s.manifest.cells[i].status,
            line,
        });
        s.manifest.write(&opts.out)?;
        // Uploaded before the next cell starts, so the upload's traffic and CPU do not
        // share a measurement window; a failed upload is tried again after each cell.
        if let Some(store) = &s.store {
            s.upload_failed = session::sync(store, &opts.out, &mut progress).await;
        }
    }
    if let Some(why) = s.upload_failed {
        return Err(RecordError::Upload(opts.out.clone(), why));
    }
    Ok(s.manifest)
}

/// Whether cell `i` needs no recording, and what to tell of it: `Some(Some(line))`
/// kept complete, skipped or failed without a request; `Some(None)` committed in an
/// earlier session though the manifest did not say so (a crash between the two), now
/// marked; `None` to record.
fn settled(
    s: &mut Session,
    opts: &RecordOptions,
    i: usize,
    refused_contexts: &BTreeMap<u32, String>,
) -> Result<Option<Option<String>>, RecordError> {
    let entry = &s.manifest.cells[i];
    let key = entry.key();
    let committed = key.dir(&opts.out).join("cell.json").exists();
    if entry.status == CellStatus::Complete && committed {
        return Ok(Some(Some("complete, kept".to_string())));
    }
    let user_skipped = entry
        .reason
        .as_deref()
        .is_some_and(|r| r.starts_with(cell::SKIPPED_BY_USER));
    if entry.status == CellStatus::Skipped && !(opts.retry_skipped && user_skipped) {
        return Ok(Some(Some(format!(
            "skipped ({})",
            entry.reason.as_deref().unwrap_or("")
        ))));
    }
    if committed {
        s.manifest.cells[i].status = CellStatus::Complete;
        s.manifest.write(&opts.out)?;
        return Ok(Some(None));
    }
    if let Some(why) = refused_contexts.get(&key.context) {
        fail(
            s,
            opts,
            i,
            &format!("the server refused this context's prefill scout ({why})"),
        )?;
        return Ok(Some(Some(
            "FAILED: not recorded, the server refused this context".to_string(),
        )));
    }
    Ok(None)
}

/// Waits while the user has paused the run (the screen's `p`), before `key` starts.
async fn paused(opts: &RecordOptions, key: CellKey, progress: &mut impl FnMut(Progress)) {
    if !opts.steer.paused() {
        return;
    }
    progress(Progress::Line(format!(
        "paused before {key}: press p to go on"
    )));
    while opts.steer.paused() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    progress(Progress::Line(format!("going on with {key}")));
}

/// A user-skipped cell's reason in the manifest: who, and when (UTC).
fn user_skip_reason() -> String {
    format!(
        "{} at {}",
        cell::SKIPPED_BY_USER,
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    )
}

/// Marks cell `i` failed without a request, and writes the manifest.
fn fail(s: &mut Session, opts: &RecordOptions, i: usize, why: &str) -> Result<(), RecordError> {
    s.manifest.cells[i].status = CellStatus::Failed;
    s.manifest.cells[i].reason = Some(format!("not recorded: {why}"));
    s.manifest.write(&opts.out)?;
    Ok(())
}

/// The cells' plans, and what they share across cells: each context's prompt, the
/// replay prompt builder (made with the first replay cell), and the probe's records
/// (written into the first cell this session records).
struct Plans {
    prompts: BTreeMap<u32, (Value, u32)>,
    replay_prompts: Option<Arc<crate::send::replay::Prompts>>,
    /// The conversation cells' message and system prompt (built with the first).
    talk: Option<TalkTexts>,
    probe_records: Option<Vec<Record>>,
}

impl Plans {
    /// Cell `i`'s plan and its prompt's length in tokens; `None` for a replay cell
    /// without its workload.
    async fn plan(
        &mut self,
        s: &Session,
        opts: &RecordOptions,
        i: usize,
    ) -> Result<Option<(CellPlan, u32)>, RecordError> {
        let key = s.manifest.cells[i].key();
        let (mut plan, tokens) = if key.phase == Phase::Replay {
            match self.replay_plan(s, opts, key).await? {
                Some(plan) => (plan, key.context),
                None => return Ok(None),
            }
        } else if key.phase == Phase::Conversation {
            match self.conversation_plan(s, opts, key).await? {
                Some(plan) => plan,
                None => return Ok(None),
            }
        } else {
            self.prompt_plan(s, opts, key).await?
        };
        plan.first_request_id = (i as i64 + 1) * REQUEST_ID_STRIDE;
        plan.preamble = self
            .probe_records
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.with_request_id((i as i64 + 2) * REQUEST_ID_STRIDE - 1))
            .collect();
        Ok(Some((plan, tokens)))
    }

    /// A replay cell's plan: its items, and a priming request whose prompt shares no
    /// block with the workload.
    async fn replay_plan(
        &mut self,
        s: &Session,
        opts: &RecordOptions,
        key: CellKey,
    ) -> Result<Option<CellPlan>, RecordError> {
        let (Some(w), Some(index)) = (&s.workload, key.replay) else {
            return Ok(None);
        };
        let replay = s.manifest.config.replay.as_ref();
        let prompts = match &self.replay_prompts {
            Some(p) => p.clone(),
            None => {
                let pool = replay_pool(&s.client, &opts.target, &s.manifest, &s.nonce).await?;
                let block_tokens = replay.map_or(crate::send::replay::DEFAULT_BLOCK_TOKENS, |r| {
                    r.block_tokens
                });
                let p = Arc::new(crate::send::replay::Prompts::new(
                    pool,
                    &s.nonce,
                    block_tokens,
                ));
                self.replay_prompts = Some(p.clone());
                p
            }
        };
        let items = w
            .cells
            .iter()
            .find(|c| c.source.index == index)
            .map(|c| c.items.clone())
            .unwrap_or_default();
        let r = Arc::new(cell::ReplayPlan {
            items,
            prompts,
            model: s.manifest.model.clone(),
            max_concurrency: replay.and_then(|r| r.max_concurrency),
        });
        let prime = crate::send::replay::Item {
            source_row: 0,
            trace_ns: 0,
            offset_ns: 0,
            input_tokens: REPLAY_PRIME_TOKENS,
            output_tokens: u32::try_from(cell::PRIME_MAX_TOKENS).unwrap_or(16),
            blocks: vec![u64::MAX - u64::from(index)],
            expected_cached: 0,
            skipped: None,
        };
        let body = r.body(&prime);
        Ok(Some(CellPlan {
            key,
            body: body.clone(),
            scout_body: body.clone(),
            prime_body: body,
            solo_first_prime: false,
            prompt_tokens: i32::try_from(REPLAY_PRIME_TOKENS).unwrap_or(64),
            max_tokens: cell::PRIME_MAX_TOKENS,
            window: Duration::ZERO,
            first_request_id: 0,
            requests: 0,
            rate: None,
            variants: None,
            preamble: Vec::new(),
            replay: Some(r),
            conversation: None,
        }))
    }

    /// A conversation cell's plan: the message every turn rewords and the system prompt,
    /// built with the first conversation cell; `None` without `config.conversation`.
    async fn conversation_plan(
        &mut self,
        s: &Session,
        opts: &RecordOptions,
        key: CellKey,
    ) -> Result<Option<(CellPlan, u32)>, RecordError> {
        let m = &s.manifest;
        let Some(config) = m.config.conversation.clone() else {
            return Ok(None);
        };
        let text = async |n: u32, seed: u64| -> Result<(String, u32), RecordError> {
            let shape = m.capabilities.tokenize.ok_or(RecordError::Prompt {
                context: n,
                source: PromptError::NoTokenizer,
            })?;
            let seed = prompt::Seed {
                context: seed,
                nonce: &s.nonce,
            };
            let p = prompt::fit_text(
                &s.client,
                &opts.target,
                &m.model,
                Endpoint::Completions,
                shape,
                n,
                seed,
            )
            .await
            .map_err(|source| RecordError::Prompt { context: n, source })?;
            Ok((p.value.as_str().unwrap_or_default().to_string(), p.tokens))
        };
        let texts = match &self.talk {
            Some(t) => t.clone(),
            None => {
                let exact = async |n: u32, seed: u64| -> Result<Option<String>, RecordError> {
                    if n == 0 {
                        return Ok(None);
                    }
                    let (t, got) = text(n, seed).await?;
                    if got != n {
                        return Err(RecordError::Prompt {
                            context: n,
                            source: PromptError::Inexact { want: n, got },
                        });
                    }
                    Ok(Some(t))
                };
                let t = TalkTexts {
                    message: exact(config.message_tokens, TALK_MESSAGE_SEED)
                        .await?
                        .unwrap_or_default(),
                    system: if config.system_tokens > 0 {
                        Some(text(config.system_tokens, TALK_SYSTEM_SEED).await?.0)
                    } else {
                        None
                    },
                    tool: exact(config.tool_tokens, TALK_TOOL_SEED).await?,
                };
                self.talk = Some(t.clone());
                t
            }
        };
        let talk = Arc::new(cell::ConversationPlan {
            config: config.clone(),
            model: m.model.clone(),
            endpoint: m.config.endpoint,
            message: texts.message,
            system: texts.system,
            tool: texts.tool,
            scripts: opts.conversation_scripts.clone(),
        });
        let none: bytes::Bytes = bytes::Bytes::new();
        let plan = CellPlan {
            key,
            body: none.clone(),
            scout_body: none.clone(),
            prime_body: none,
            solo_first_prime: false,
            prompt_tokens: i32::try_from(config.message_tokens).unwrap_or(i32::MAX),
            max_tokens: i32::try_from(config.answer_tokens).unwrap_or(i32::MAX),
            window: Duration::from_nanos(u64::try_from(m.config.window_ns).unwrap_or(0)),
            first_request_id: 0,
            requests: 0,
            rate: None,
            variants: None,
            preamble: Vec::new(),
            replay: None,
            conversation: Some(talk),
        };
        Ok(Some((plan, key.context)))
    }

    /// A matrix, burst or rate cell's plan, with its context's prompt (built once per
    /// context).
    async fn prompt_plan(
        &mut self,
        s: &Session,
        opts: &RecordOptions,
        key: CellKey,
    ) -> Result<(CellPlan, u32), RecordError> {
        let m = &s.manifest;
        let (prompt, tokens) = match self.prompts.get(&key.context) {
            Some(p) => p.clone(),
            None => {
                let p = prompt::build(
                    &s.client,
                    &opts.target,
                    &m.model,
                    m.config.endpoint,
                    m.capabilities.tokenize,
                    key.context,
                    prompt::Seed {
                        context: u64::from(key.context),
                        nonce: &s.nonce,
                    },
                )
                .await
                .map_err(|source| RecordError::Prompt {
                    context: key.context,
                    source,
                })?;
                self.prompts
                    .insert(key.context, (p.value.clone(), p.tokens));
                (p.value, p.tokens)
            }
        };
        let body = |n: u32| -> bytes::Bytes {
            stream_body(&m.model, m.config.endpoint, &prompt, n)
                .to_string()
                .into()
        };
        // Burst and rate cells give each measured request a prompt of its own, so that
        // their TTFT and E2E latency include a cold prefill, as in `vllm bench serve`;
        // matrix cells share one prompt (primed, as the reference tool measures decode).
        let full = stream_body(&m.model, m.config.endpoint, &prompt, m.config.max_tokens);
        let variants = matches!(key.phase, Phase::Burst | Phase::Rate)
            .then(|| prompt::Variants::new(&full, m.config.endpoint))
            .flatten()
            .map(Arc::new);
        let plan = CellPlan {
            key,
            body: full.to_string().into(),
            scout_body: body(u32::try_from(cell::SCOUT_MAX_TOKENS).unwrap_or(16)),
            prime_body: body(u32::try_from(cell::PRIME_MAX_TOKENS).unwrap_or(16)),
            solo_first_prime: m.config.prefill_mode == Some(PrefillMode::Warmup),
            prompt_tokens: i32::try_from(tokens).unwrap_or(i32::MAX),
            max_tokens: i32::try_from(m.config.max_tokens).unwrap_or(i32::MAX),
            window: Duration::from_nanos(u64::try_from(m.config.window_ns).unwrap_or(0)),
            first_request_id: 0,
            requests: m
                .config
                .burst
                .as_ref()
                .map_or(DEFAULT_BURST_REQUESTS, |b| b.requests),
            rate: m.config.rate.clone(),
            variants,
            preamble: Vec::new(),
            replay: None,
            conversation: None,
        };
        Ok((plan, tokens))
    }
}

/// The token ids replay blocks are drawn from: the server's own ids for filler text of
/// [`REPLAY_POOL_TOKENS`] tokens (the first left out: it may be a BOS the tokenizer
/// added).
async fn replay_pool(
    client: &reqwest::Client,
    target: &str,
    manifest: &Manifest,
    nonce: &str,
) -> Result<Vec<u32>, RecordError> {
    let p = prompt::build(
        client,
        target,
        &manifest.model,
        Endpoint::Completions,
        manifest.capabilities.tokenize,
        REPLAY_POOL_TOKENS,
        prompt::Seed {
            context: u64::from(REPLAY_POOL_TOKENS),
            nonce,
        },
    )
    .await
    .map_err(|source| RecordError::Prompt {
        context: REPLAY_POOL_TOKENS,
        source,
    })?;
    let pool: Vec<u32> = p
        .value
        .as_array()
        .map(|ids| {
            ids.iter()
                .skip(1)
                .filter_map(|v| v.as_u64().and_then(|v| u32::try_from(v).ok()))
                .collect()
        })
        .unwrap_or_default();
    if pool.is_empty() {
        return Err(RecordError::Prompt {
            context: REPLAY_POOL_TOKENS,
            source: PromptError::NoTokenizer,
        });
    }
    Ok(pool)
}
