//! A run's manifest: a new run's (what the server is, the facts, the settings and the
//! matrix as cells, a context or cell that does not fit skipped) or the one of a run
//! being resumed, checked against the server and the workload.

use super::*;

/// The matrix as cells: a context that does not fit the server's longest request is
/// skipped whole; with `--skip-over-capacity`, so is each cell whose context × streams
/// exceeds the KV-cache budget (`kv`: tokens and where the number came from).
fn cell_list(
    opts: &RecordOptions,
    limit: Option<u32>,
    source: Option<&str>,
    kv: Option<(u64, &str)>,
    workload: Option<&crate::send::replay::Workload>,
) -> Vec<CellEntry> {
    let mut cells = Vec::new();
    for &ctx in &opts.contexts {
        let fits =
            limit.is_none_or(|m| u64::from(ctx) + u64::from(opts.max_tokens) <= u64::from(m));
        let reason = (!fits).then(|| {
            format!(
                "context {ctx} + max tokens {} exceeds the server's {} {}",
                opts.max_tokens,
                source.unwrap_or("max_model_len"),
                limit.unwrap_or(0)
            )
        });
        let status = if fits {
            CellStatus::Planned
        } else {
            CellStatus::Skipped
        };
        let mut push = |key: CellKey, concurrency: u32| {
            let need = u64::from(ctx) * u64::from(concurrency);
            let over = kv.filter(|(budget, _)| opts.skip_over_capacity && need > *budget);
            let (status, reason) = match (status, over) {
                (CellStatus::Planned, Some((budget, from))) => (
                    CellStatus::Skipped,
                    Some(format!(
                        "context {ctx} × {concurrency} streams needs {need} tokens of KV cache; \
                         the server has {budget} ({from}) and --skip-over-capacity is set"
                    )),
                ),
                _ => (status, reason.clone()),
            };
            cells.push(CellEntry {
                status,
                reason,
                ..CellEntry::planned(key)
            });
        };
        if opts.modes.contains(&Mode::Matrix) {
            if opts.prefill_mode == PrefillMode::Scout {
                push(CellKey::new(Phase::Prefill, ctx, 1), 1);
            }
            for &n in &opts.concurrency {
                push(CellKey::new(Phase::Decode, ctx, n), n);
            }
        }
        if opts.modes.contains(&Mode::Burst) {
            for &n in &opts.concurrency {
                push(CellKey::new(Phase::Burst, ctx, n), n);
            }
        }
        if let Some(rate) = opts
            .rate
            .as_ref()
            .filter(|_| opts.modes.contains(&Mode::Rate))
        {
            // A rate cell holds at most `max_concurrency` prompts at once; uncapped, its
            // need is not known before it runs, and it is never skipped for capacity.
            for &r in &rate.rates {
                push(CellKey::rate(ctx, r), rate.max_concurrency.unwrap_or(0));
            }
        }
    }
    if let Some(c) = opts
        .conversation
        .as_ref()
        .filter(|_| opts.modes.contains(&Mode::Conversation))
    {
        cells.extend(conversation_cells(c, limit, source));
    }
    if let Some(w) = workload.filter(|_| opts.modes.contains(&Mode::Replay)) {
        for (key, c) in w.keys().into_iter().zip(&w.cells) {
            let all_skipped = c.items.iter().all(|i| i.skipped.is_some());
            cells.push(CellEntry {
                status: if all_skipped {
                    CellStatus::Skipped
                } else {
                    CellStatus::Planned
                },
                reason: all_skipped.then(|| {
                    format!(
                        "none of its {} requests can be sent ({})",
                        c.items.len(),
                        c.items
                            .first()
                            .and_then(|i| i.skipped.as_deref())
                            .unwrap_or("")
                    )
                }),
                ..CellEntry::planned(key)
            });
        }
    }
    cells
}

/// Tokens a chat template may add around each message (role markers), allowed for when
/// a session's longest prompt is checked against the server's longest request.
pub const TEMPLATE_TOKENS_PER_MESSAGE: u64 = 8;

/// The conversation cells, one per number of live sessions: skipped when a session's
/// last turn (system prompt, every message and answer, the template's tokens, and the
/// last answer) could exceed the server's longest request.
fn conversation_cells(
    c: &tokentrace_schemas::manifest::ConversationConfig,
    limit: Option<u32>,
    source: Option<&str>,
) -> Vec<CellEntry> {
    let turns = u64::from(c.turns_max);
    let messages = 2 * turns + u64::from(c.system_tokens > 0);
    let longest = u64::from(c.system_tokens)
        + turns * (u64::from(c.message_tokens.max(c.tool_tokens)) + u64::from(c.answer_tokens))
        + messages * TEMPLATE_TOKENS_PER_MESSAGE;
    let over = limit.filter(|&m| longest > u64::from(m));
    c.sessions
        .iter()
        .map(|&n| {
            // Recorded sessions' messages have their own lengths: context 0 (mixed).
            let context = if c.from.is_some() { 0 } else { c.message_tokens };
            let key = CellKey::conversation(context, n);
            match over {
                Some(m) => CellEntry {
                    status: CellStatus::Skipped,
                    reason: Some(format!(
                        "a session's last turn may reach {longest} tokens ({} turns of {} + {}                          tokens, a {}-token system prompt, template tokens); the server's {} is {m}",
                        c.turns_max,
                        c.message_tokens,
                        c.answer_tokens,
                        c.system_tokens,
                        source.unwrap_or("max_model_len"),
                    )),
                    ..CellEntry::planned(key)
                },
                None => CellEntry::planned(key),
            }
        })
        .collect()
}

/// The engine's KV-cache budget from the probe's facts: tokens, and `fact source`.
fn kv_budget(facts: &[tokentrace_schemas::manifest::Fact]) -> Option<(u64, &str)> {
    let f = facts.iter().find(|f| f.key == "engine.kv_cache_tokens")?;
    Some((f.value.trim().parse().ok()?, f.source.as_str()))
}

/// The manifest of the run being resumed, checked against the server and the workload.
pub(super) fn resumed_manifest(
    opts: &RecordOptions,
    info: &ServerInfo,
    workload: Option<&Workload>,
) -> Result<Manifest, RecordError> {
    let m = Manifest::read(&opts.out)?;
    if let Some(i) = &m.imported {
        return Err(RecordError::Resume(
            opts.out.clone(),
            format!(
                "it was imported from {}: its cells hold that tool's figures, not a recording",
                i.source()
            ),
        ));
    }
    if m.model != info.model {
        return Err(RecordError::Resume(
            opts.out.clone(),
            format!(
                "it recorded model `{}`, the server serves `{}`",
                m.model, info.model
            ),
        ));
    }
    if let (Some(kept), Some(w)) = (&m.config.replay, workload) {
        let given: Vec<&str> = w.cells.iter().map(|c| c.source.sha256.as_str()).collect();
        let recorded: Vec<&str> = kept.sources.iter().map(|s| s.sha256.as_str()).collect();
        if given != recorded {
            return Err(RecordError::Resume(
                opts.out.clone(),
                format!(
                    "it replays {} (SHA-256 {}), not the workload given",
                    kept.from,
                    recorded.join(", ")
                ),
            ));
        }
    }
    Ok(m)
}

/// A new run's manifest: what the server is, the facts, the settings and the cells.
pub(super) fn new_manifest(
    opts: &RecordOptions,
    info: &ServerInfo,
    facts: Vec<Fact>,
    clock: &RunClock,
    workload: Option<&Workload>,
) -> Manifest {
    let mut engine = info.engine.clone();
    for (k, v) in &opts.describe {
        if Described::of(k) == Described::Detail {
            engine
                .details
                .insert(format!("{}{k}", Described::DETAIL_PREFIX), v.clone());
        }
    }
    let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    Manifest {
        schema_version: SCHEMA_VERSION,
        tool: ToolInfo::current(),
        run_id: format!("run-{}", clock.anchor().utc_at_zero.replace([':', '.'], "")),
        clock: clock.anchor(),
        target: Target {
            url: redact_url(&opts.target),
            api_key: opts.api_key.is_some(),
        },
        model: info.model.clone(),
        engine,
        hardware: opts
            .describe
            .iter()
            .find(|(k, _)| Described::of(k) == Described::Hardware)
            .map(|(_, v)| v.clone()),
        launch_command: opts.launch_command.as_deref().map(redact_command),
        facts,
        capabilities: info.capabilities.clone(),
        config: RunConfig {
            endpoint: opts.endpoint,
            contexts: opts.contexts.clone(),
            concurrency: opts.concurrency.clone(),
            window_ns: ns(opts.window),
            max_tokens: opts.max_tokens,
            ignore_eos: true,
            scrape_interval_ns: ns(opts.scrape_interval),
            warmup_timeout_ns: ns(opts.warmup_timeout),
            drain_timeout_ns: ns(opts.drain_timeout),
            stall_timeout_ns: ns(opts.stall_timeout),
            prompt_tolerance_tokens: opts.prompt_tolerance,
            prompt_nonces: Vec::new(),
            prefill_mode: Some(opts.prefill_mode),
            burst: opts.modes.contains(&Mode::Burst).then_some(BurstConfig {
                requests: opts.burst_requests,
            }),
            rate: opts
                .rate
                .clone()
                .filter(|_| opts.modes.contains(&Mode::Rate)),
            replay: workload
                .zip(opts.replay.as_ref())
                .filter(|_| opts.modes.contains(&Mode::Replay))
                .map(|(w, r)| w.config(&r.opts)),
            conversation: opts
                .conversation
                .clone()
                .filter(|_| opts.modes.contains(&Mode::Conversation)),
        },
        cells: cell_list(
            opts,
            info.max_model_len,
            info.capabilities.max_model_len_source.as_deref(),
            kv_budget(&info.facts),
            workload,
        ),
        reparsed: None,
        imported: None,
        cells_sha256: None,
    }
}
