//! Conversation cells against the simulator: every turn sends the whole history with
//! the server's real answers, waits its think time, and is written to the `turns` table;
//! the prefix cache serves each turn the history before it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokentrace_recorder::run::runner;
use tokentrace_recorder::run::session::Mode;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::{CellStatus, ConversationConfig, Think};
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{EndReason, Endpoint, RequestRow, Requests, TurnRow, Turns};
use tokentrace_schemas::{CellKey, Phase};
use tokentrace_sim::{Profile, SimServer};

/// The simulator's KV-cache block (profile `tiny`).
const BLOCK: i32 = 16;
const THINK: Duration = Duration::from_millis(40);

/// Sessions of three turns of `message`-token messages and `answer`-token answers, one
/// after another (no think time, no system prompt), `sessions` live (the real engines'
/// tests use it too).
pub(crate) fn three_turns(
    sessions: Vec<u32>,
    message: u32,
    answer: u32,
    seed: u64,
) -> ConversationConfig {
    ConversationConfig {
        sessions,
        turns_min: 3,
        turns_max: 3,
        message_tokens: message,
        answer_tokens: answer,
        stop_at_eos: false,
        system_tokens: 0,
        tool_tokens: 0,
        think: Think::Fixed,
        think_ns: 0,
        seed,
        from: None,
    }
}

fn config(sessions: Vec<u32>) -> ConversationConfig {
    ConversationConfig {
        system_tokens: 40,
        think_ns: i64::try_from(THINK.as_nanos()).expect("ns"),
        ..three_turns(sessions, 48, 24, 11)
    }
}

/// Records conversation cells only, against `sim`, into `out`.
async fn record(sim: &SimServer, out: &Path, endpoint: Endpoint, c: ConversationConfig) {
    let mut opts = crate::record::options(&sim.url(), out);
    opts.endpoint = endpoint;
    opts.modes = vec![Mode::Conversation];
    opts.window = Duration::from_millis(1500);
    opts.metrics_url = Some(format!("{}/metrics", sim.url()));
    opts.conversation = Some(c);
    let m = runner::record(&opts, |_| {}).await.expect("recorded");
    assert!(
        m.cells.iter().all(|c| c.status == CellStatus::Complete),
        "{:?}",
        m.cells
    );
    assert_eq!(m.schema_version, tokentrace_schemas::CONVERSATION_VERSION);
}

/// A cell's turns with their requests, by session then turn.
fn turns(dir: &Path) -> BTreeMap<(i64, i32), (TurnRow, RequestRow)> {
    let requests: BTreeMap<i64, RequestRow> = read_table::<Requests>(&dir.join("requests.parquet"))
        .expect("requests")
        .into_iter()
        .map(|r| (r.request_id, r))
        .collect();
    read_table::<Turns>(&dir.join("turns.parquet"))
        .expect("turns")
        .into_iter()
        .map(|t| {
            let r = requests
                .get(&t.request_id)
                .unwrap_or_else(|| panic!("turn {t:?} has no request row"))
                .clone();
            ((t.session, t.turn), (t, r))
        })
        .collect()
}

/// Checks every turn of a cell of `sessions` live sessions; returns how many turns
/// followed an answer.
fn check_cell(dir: &Path, sessions: u32, c: &ConversationConfig) -> usize {
    let all = turns(dir);
    assert!(!all.is_empty(), "{}: no turns", dir.display());
    let mut followed = 0;
    let live: std::collections::BTreeSet<i32> = all.values().filter_map(|(_, r)| r.slot).collect();
    assert_eq!(
        live,
        (0..i32::try_from(sessions).expect("n")).collect(),
        "every place ran sessions"
    );
    for ((session, turn), (t, r)) in &all {
        assert_eq!(t.turns, 3);
        let message = if *turn > 1 && c.tool_tokens > 0 {
            c.tool_tokens
        } else {
            c.message_tokens
        };
        assert_eq!(t.message_tokens, Some(message as i32));
        assert_eq!(r.max_tokens, Some(24));
        if *turn == 1 {
            assert_eq!(t.think_ns, None);
            assert_eq!(
                t.history_tokens, c.system_tokens as i32,
                "turn 1 repeats the system prompt"
            );
            continue;
        }
        let (before, prev) = all.get(&(*session, turn - 1)).unwrap_or_else(|| {
            panic!(
                "session {session} turn {turn} came without turn {}",
                turn - 1
            )
        });
        assert!(
            matches!(prev.end_reason, EndReason::FinishedLength),
            "a turn follows an answer only: {prev:?}"
        );
        let (p, a) = (
            prev.prompt_tokens_server.expect("usage"),
            prev.completion_tokens_server.expect("usage"),
        );
        assert_eq!(a, 24, "ignore_eos: every answer is whole");
        assert_eq!(t.history_tokens, p + a, "{t:?} after {before:?}");
        let think = t.think_ns.expect("think time");
        assert!(
            think >= i64::try_from(THINK.as_nanos()).expect("ns"),
            "waited {think} ns, less than the think time"
        );
        if r.end_reason == EndReason::Cancelled {
            continue;
        }
        followed += 1;
        let prompt = r.prompt_tokens_server.expect("usage");
        assert!(
            prompt >= t.history_tokens + t.message_tokens.unwrap_or(0),
            "the prompt ({prompt}) holds the history ({}) and the new message",
            t.history_tokens
        );
        // The prefix cache serves the history's whole blocks: the previous prompt and
        // the answer sent back as it was streamed.
        let cached = r.cached_tokens_server.expect("cached tokens");
        let whole = (t.history_tokens - 1) / BLOCK * BLOCK;
        assert!(
            cached >= whole - BLOCK,
            "session {session} turn {turn}: {cached} cached of {} history tokens",
            t.history_tokens
        );
    }
    followed
}

/// A work folder and the `tiny` simulator on loopback.
async fn tiny() -> (tempfile::TempDir, SimServer) {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    (tempfile::tempdir().expect("tempdir"), sim)
}

async fn conversations_over(endpoint: Endpoint) {
    let (run_dir, sim) = tiny().await;
    let out = run_dir.path().join("run");
    let c = config(vec![1, 3]);
    record(&sim, &out, endpoint, c.clone()).await;
    let cells = list_cells(&out).expect("cells");
    assert_eq!(
        cells.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        vec![CellKey::conversation(48, 1), CellKey::conversation(48, 3)]
    );
    for (key, dir) in &cells {
        assert_eq!(key.phase, Phase::Conversation);
        assert!(
            dir.ends_with(format!(
                "phase=conversation/context=48/sessions={}",
                key.concurrency
            )),
            "{}",
            dir.display()
        );
        let followed = check_cell(dir, key.concurrency, &c);
        assert!(
            followed >= 2,
            "{key}: only {followed} turns after an answer"
        );
    }
    let check = tokentrace(&["check"], &out);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // The report's figures of each cell: every turn place, the cache serving the history.
    let json = report_json(&out);
    for cell in cells_of(&json) {
        let talk = &cell["figures"]["conversation"];
        let by_turn = talk["by_turn"].as_array().expect("by turn");
        assert_eq!(
            by_turn
                .iter()
                .map(|t| t["turn"].as_i64())
                .collect::<Vec<_>>(),
            vec![Some(1), Some(2), Some(3)],
            "{talk}"
        );
        let hit = talk["cache_hit_ratio"].as_f64().expect("hit ratio");
        assert!(hit > 0.8, "a cache that kept every session: {hit} ({talk})");
        assert!(talk["server_cache_hit_ratio"].as_f64().is_some(), "{talk}");
        assert!(
            talk["sessions_started"].as_u64().unwrap_or(0) >= 1,
            "{talk}"
        );
        assert!(
            !warning_kinds(cell).contains(&"prefix_evicted".to_string()),
            "{:?}",
            cell["warnings"]
        );
    }
    let md = tokentrace(&["report"], &out);
    let text = String::from_utf8_lossy(&md.stdout);
    assert!(
        text.contains("## Conversations") && text.contains("### By turn"),
        "{text}"
    );
}

fn tokentrace(args: &[&str], run: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args(args)
        .arg(run)
        .output()
        .expect("runs")
}

fn report_json(run: &Path) -> serde_json::Value {
    let out = tokentrace(&["report", "--format", "json"], run);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

fn cells_of(json: &serde_json::Value) -> Vec<&serde_json::Value> {
    json["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter(|c| c["phase"] == "conversation")
        .collect()
}

fn warning_kinds(cell: &serde_json::Value) -> Vec<String> {
    cell["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|x| x["kind"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The agent case: a long shared system prompt, then tool results instead of user
/// messages after the first turn (chat `tool` messages); the cache keeps serving the
/// history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sessions_send_tool_results_after_the_first_turn() {
    let (run_dir, sim) = tiny().await;
    let out = run_dir.path().join("run");
    let mut c = config(vec![2]);
    c.system_tokens = 200;
    c.tool_tokens = 64;
    record(&sim, &out, Endpoint::Chat, c.clone()).await;
    let cells = list_cells(&out).expect("cells");
    let [(key, dir)] = &cells[..] else {
        panic!("one cell: {cells:?}")
    };
    let followed = check_cell(dir, key.concurrency, &c);
    assert!(followed >= 2, "{key}: only {followed} tool turns answered");
    let json = report_json(&out);
    let talk = &cells_of(&json)[0]["figures"]["conversation"];
    let first = &talk["by_turn"][0];
    assert!(
        first["cache_hit_ratio"]
            .as_f64()
            .expect("turn 1 repeats the system prompt")
            > 0.5,
        "the shared system prompt is served from cache to later sessions: {first}"
    );
}

/// A server whose KV cache holds a few conversations: the sweep over live sessions
/// shows where it stops holding them (the hit ratio falls, and the cell is warned of
/// `prefix_evicted` with the KV-cache usage), while one session keeps its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_shows_where_the_cache_stops_holding_the_conversations() {
    let run_dir = tempfile::tempdir().expect("tempdir");
    let out = run_dir.path().join("run");
    let mut profile = Profile::load("tiny").expect("tiny");
    // About two sessions' histories (up to 260 tokens each) in 32 blocks: twelve
    // sessions evict each other however their turns interleave (at 768 tokens a loaded
    // machine once let 53% through).
    profile.kv_cache_tokens = 512;
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(profile, addr).await.expect("sim");
    let mut c = config(vec![1, 12]);
    c.system_tokens = 0;
    c.think_ns = 0;
    record(&sim, &out, Endpoint::Completions, c).await;
    let json = report_json(&out);
    let cells = cells_of(&json);
    assert_eq!(cells.len(), 2);
    let hit = |c: &serde_json::Value| {
        c["figures"]["conversation"]["cache_hit_ratio"]
            .as_f64()
            .expect("hit ratio")
    };
    let (one, many) = (cells[0], cells[1]);
    eprintln!(
        "hit ratio: 1 session {}, 12 sessions {}",
        hit(one),
        hit(many)
    );
    assert_eq!(
        (one["concurrency"].as_u64(), many["concurrency"].as_u64()),
        (Some(1), Some(12))
    );
    assert!(
        hit(one) > 0.8,
        "one session keeps its history: {}",
        hit(one)
    );
    assert!(hit(many) < 0.5, "twelve do not fit: {}", hit(many));
    assert!(!warning_kinds(one).contains(&"prefix_evicted".to_string()));
    let evicted = many["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .find(|w| w["kind"] == "prefix_evicted")
        .unwrap_or_else(|| panic!("no prefix_evicted warning: {}", many["warnings"]));
    assert!(evicted["kv_metric"].as_str().is_some(), "{evicted}");
    assert!(evicted["kv_usage_max"].as_f64().is_some(), "{evicted}");
    assert!(
        evicted["mostly_missed"].as_u64().unwrap_or(0) > 0,
        "{evicted}"
    );
    let md = tokentrace(&["report"], &out);
    assert!(
        String::from_utf8_lossy(&md.stdout).contains("prefix evicted"),
        "the report says so"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_conversations_send_the_real_history_each_turn() {
    conversations_over(Endpoint::Completions).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_conversations_send_the_real_history_each_turn() {
    conversations_over(Endpoint::Chat).await;
}

/// Recorded conversations sent again (a ShareGPT file): each session once, its user
/// messages as its turns after its system prompt, the answers the server's own; the
/// session without a user message left out, and no session sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_sessions_are_sent_again_with_live_answers() {
    let (run_dir, sim) = tiny().await;
    let out = run_dir.path().join("run");
    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/conversations/sharegpt-small.json");
    let bytes = std::fs::read(&file).expect("fixture");
    let (scripts, left_out) = tokentrace_wire::sessions::parse(&bytes).expect("sessions");
    assert_eq!((scripts.len(), left_out), (2, 1));
    let mut c = config(vec![2]);
    c.system_tokens = 0;
    c.from = Some(tokentrace_schemas::manifest::SessionsSource {
        file: file.display().to_string(),
        sha256: tokentrace_schemas::digest::Sha256::of_bytes(&bytes).to_string(),
        sessions: 2,
    });
    let mut opts = crate::record::options(&sim.url(), &out);
    opts.endpoint = Endpoint::Chat;
    opts.modes = vec![Mode::Conversation];
    opts.window = Duration::from_millis(1500);
    opts.metrics_url = Some(format!("{}/metrics", sim.url()));
    opts.conversation = Some(c);
    opts.conversation_scripts = Some(std::sync::Arc::new(scripts));
    let m = runner::record(&opts, |_| {}).await.expect("recorded");
    assert!(
        m.config
            .conversation
            .as_ref()
            .is_some_and(|c| c.from.is_some())
    );
    let cells = list_cells(&out).expect("cells");
    let [(key, dir)] = &cells[..] else {
        panic!("one cell: {cells:?}")
    };
    assert_eq!(
        *key,
        CellKey::conversation(0, 2),
        "recorded messages: context 0"
    );
    let all = turns(dir);
    let mut by_session: BTreeMap<i64, Vec<i32>> = BTreeMap::new();
    for ((session, turn), (t, r)) in &all {
        assert_eq!(t.message_tokens, None, "a recorded message is not counted");
        assert_eq!(r.end_reason, EndReason::FinishedLength, "{r:?}");
        by_session.entry(*session).or_default().push(*turn);
        if *turn > 1 {
            let (_, prev) = &all[&(*session, turn - 1)];
            assert_eq!(
                t.history_tokens,
                prev.prompt_tokens_server.expect("usage")
                    + prev.completion_tokens_server.expect("usage")
            );
        }
    }
    assert_eq!(
        by_session,
        BTreeMap::from([(1, vec![1, 2, 3]), (2, vec![1, 2])]),
        "each recorded session once, all its user turns"
    );
}

/// The cache of the real vLLM test's `conversations_evicted` (four 128-token blocks, a
/// 512-token model length) under its four two-turn sessions of 192-token messages: a
/// second turn fills the cache, so no other session's history outlives it. On vLLM
/// 0.32.0 every second turn got 0 of its 238 tokens from the cache; so here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_turn_that_fills_the_cache_evicts_every_other_history() {
    let run_dir = tempfile::tempdir().expect("tempdir");
    let out = run_dir.path().join("run");
    let mut profile = Profile::load("tiny").expect("tiny");
    profile.block_size = 128;
    profile.kv_cache_tokens = 512;
    profile.max_model_len = 512;
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(profile, addr).await.expect("sim");
    let c = ConversationConfig {
        turns_min: 2,
        turns_max: 2,
        ..three_turns(vec![4], 192, 16, 3)
    };
    record(&sim, &out, Endpoint::Chat, c).await;
    let cells = list_cells(&out).expect("cells");
    let [(_, dir)] = &cells[..] else {
        panic!("one cell: {cells:?}")
    };
    let later: Vec<(TurnRow, RequestRow)> = turns(dir)
        .into_values()
        .filter(|(t, r)| t.turn == 2 && r.end_reason == EndReason::FinishedLength)
        .collect();
    for (t, r) in &later {
        eprintln!(
            "session {} turn 2: {:?} prompt tokens, history {}, {:?} cached",
            t.session, r.prompt_tokens_server, t.history_tokens, r.cached_tokens_server
        );
    }
    assert!(later.len() >= 4, "{} second turns answered", later.len());
    assert!(
        later.iter().all(|(_, r)| r.cached_tokens_server == Some(0)),
        "a history outlived a second turn"
    );
    let json = report_json(&out);
    let cell = cells_of(&json)[0];
    assert!(
        warning_kinds(cell).contains(&"prefix_evicted".to_string()),
        "{}",
        cell["warnings"]
    );
}
