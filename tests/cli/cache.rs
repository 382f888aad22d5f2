//! Prompt caches across runs: a second recording against the same server prefills
//! cold again (each run's prompts start with its own nonce), so its prefill figure
//! matches the first run's instead of measuring a cache hit.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_recorder::run::runner;
use tokentrace_schemas::Phase;
use tokentrace_schemas::column::StrEnum;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::manifest::PrefillMode;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Requests, Role};
use tokentrace_sim::{Profile, SimServer};

use crate::record::options;

/// (prompt tok/s, cached tokens) of the scout of `context` in `run`, whose prefill
/// cell must be Valid under the default rules.
pub fn prefill(run: &Path, context: u32) -> (f64, Option<i32>) {
    let s = score_dir(run, &RuleSet::builtin("default").expect("rules")).expect("scored");
    let cell = s
        .cells
        .iter()
        .find(|c| c.phase == Phase::Prefill && c.context == context)
        .expect("prefill cell");
    assert_eq!(
        cell.verdict,
        Some(tokentrace_analyzer::contract::Verdict::Valid),
        "{cell:?}"
    );
    let rate = cell
        .figures
        .as_ref()
        .and_then(|f| f.prompt_tok_s)
        .expect("prompt tok/s");
    let dir = list_cells(run)
        .expect("cells")
        .into_iter()
        .find(|(k, _)| k.phase == Phase::Prefill && k.context == context)
        .expect("prefill folder")
        .1;
    // A refused scout is sent again: the last one is the measurement.
    let scout = read_table::<Requests>(&dir.join("requests.parquet"))
        .expect("requests")
        .into_iter()
        .rev()
        .find(|r| r.role == Role::Scout)
        .expect("scout");
    (rate, scout.cached_tokens_server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_against_the_same_server_prefills_cold() {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut runs = Vec::new();
    for name in ["first", "second"] {
        let out = dir.path().join(name);
        let mut opts = options(&sim.url(), &out);
        opts.contexts = vec![12_288];
        opts.concurrency = vec![1];
        opts.window = Duration::from_millis(300);
        let m = runner::record(&opts, |_| {}).await.expect("recorded");
        assert_eq!(m.config.prompt_nonces.len(), 1, "{name}: one nonce");
        runs.push((prefill(&out, 12_288), m.config.prompt_nonces[0].clone()));
    }
    sim.stop();
    // A cached scout is ~100× faster; 1.5× leaves room for a loaded machine's jitter.
    let ((first, first_cached), first_nonce) = &runs[0];
    let ((second, second_cached), second_nonce) = &runs[1];
    assert_ne!(first_nonce, second_nonce, "each run has its own nonce");
    assert_eq!(*first_cached, Some(0), "the first scout is cold");
    assert_eq!(*second_cached, Some(0), "the second scout is cold too");
    let ratio = second / first;
    assert!(
        (0.67..1.5).contains(&ratio),
        "prefill {first:.0} then {second:.0} tok/s"
    );
}

/// An engine with per-slot prompt caches (llama.cpp's default) serves the scout's warm
/// prompt only on the slot that ran it. The recorder primes every slot before the
/// warm-up (again while any prime was cold), so no stream's TTFT holds a cold prefill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_slot_is_warm_before_the_window_on_per_slot_caches() {
    let mut profile = Profile::load("tiny").expect("tiny");
    profile.per_slot_cache = true;
    profile.max_num_seqs = 3;
    // 10 ms steps: a round's primes overlap on the server even on a loaded machine.
    profile.step_ms = tokentrace_sim::profile::Curve::try_from(vec![[1.0, 10.0]]).expect("curve");
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(profile, addr).await.expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&sim.url(), &out);
    opts.contexts = vec![4096];
    opts.concurrency = vec![3];
    opts.window = Duration::from_millis(800);
    // Short requests, so that many finish (and report their cached tokens) in the window.
    opts.max_tokens = 30;
    runner::record(&opts, |_| {}).await.expect("recorded");
    sim.stop();
    let decode = list_cells(&out)
        .expect("cells")
        .into_iter()
        .find(|(k, _)| k.phase == Phase::Decode)
        .expect("decode cell")
        .1;
    let rows = read_table::<Requests>(&decode.join("requests.parquet")).expect("requests");
    let cold = |r: &tokentrace_schemas::tables::RequestRow| {
        r.cached_tokens_server
            .zip(r.prompt_tokens_server)
            .is_some_and(|(c, p)| c * 2 < p)
    };
    // The trap is there: the first primes land on slots that never saw the prompt.
    assert!(
        rows.iter().any(|r| r.role == Role::Prime && cold(r)),
        "some prime prefilled cold"
    );
    let streams: Vec<_> = rows
        .iter()
        .filter(|r| matches!(r.role, Role::Warmup | Role::Measured))
        .collect();
    assert!(streams.iter().any(|r| r.cached_tokens_server.is_some()));
    for r in &streams {
        assert!(
            !cold(r),
            "request {} prefilled cold: {:?} cached",
            r.request_id,
            r.cached_tokens_server
        );
    }
    let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
    for c in &s.cells {
        assert!(
            !c.warnings.iter().any(|w| matches!(
                w,
                tokentrace_analyzer::contract::Warning::ColdPrefill { .. }
            )),
            "{:?}",
            c.warnings
        );
    }
}

/// In prefill-during-warm-up mode, a context's prefill is its first decode cell's first
/// request; when that cell turns out damaged, the next decode cell of the context
/// measures it, exactly as when the damaged cell had never been recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_first_decode_cell_hands_the_prefill_to_the_next() {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let mut opts = options(&sim.url(), &out);
    opts.contexts = vec![2048];
    opts.concurrency = vec![1, 2];
    opts.window = Duration::from_millis(300);
    opts.prefill_mode = PrefillMode::Warmup;
    runner::record(&opts, |_| {}).await.expect("recorded");
    sim.stop();
    let rules = RuleSet::builtin("default").expect("rules");
    let prefill = |run: &Path| {
        let s = score_dir(run, &rules).expect("scored");
        s.cells
            .into_iter()
            .find(|c| c.phase == Phase::Prefill)
            .expect("a prefill row")
    };
    let whole = prefill(&out);
    // The live view links them as the report does, whichever decode cell it sees first.
    let m = tokentrace_schemas::manifest::Manifest::read(&out).expect("manifest");
    let mut board = tokentrace_score::live::Board::new(&m).expect("board");
    let key = |n: u32| tokentrace_schemas::layout::CellKey::new(Phase::Decode, 2048, n);
    for n in [2, 1] {
        board.add(&m, &out, key(n)).expect("scored live");
    }
    let live = board
        .get(&tokentrace_schemas::layout::CellKey::new(
            Phase::Prefill,
            2048,
            1,
        ))
        .expect("the prefill, live");
    assert_eq!(live.figures, whole.figures);
    let first = out.join("cells/phase=decode/context=2048/concurrency=1");
    // The first decode cell's chunks cut in half: damaged, found on reading.
    let damaged = dir.path().join("damaged");
    crate::report::copy_dir(&out, &damaged);
    let chunks = damaged.join("cells/phase=decode/context=2048/concurrency=1/chunks.parquet");
    let bytes = std::fs::read(&chunks).expect("read");
    std::fs::write(&chunks, &bytes[..bytes.len() / 2]).expect("truncate");
    // The same run without that cell at all.
    let without = dir.path().join("without");
    crate::report::copy_dir(&out, &without);
    std::fs::remove_dir_all(without.join(first.strip_prefix(&out).expect("inside"))).expect("rm");
    let (from_damaged, from_without) = (prefill(&damaged), prefill(&without));
    assert_eq!(from_damaged.figures, from_without.figures);
    assert_eq!(from_damaged.verdict, from_without.verdict);
    assert!(from_damaged.figures.is_some(), "measured by the next cell");
    assert_ne!(
        from_damaged.figures, whole.figures,
        "the first cell's first request measured it before"
    );
}

/// The reference report's prefill mode: no prefill cells; each context's prefill is the
/// first request of its first decode cell, which prefilled cold. It agrees with a cold
/// scout's figure, and the report names the mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_measured_during_decode_warm_up_agrees_with_the_scout() {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let sim = SimServer::start(Profile::load("tiny").expect("tiny"), addr)
        .await
        .expect("sim");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rates = Vec::new();
    for mode in [PrefillMode::Scout, PrefillMode::Warmup] {
        let out = dir.path().join(mode.as_str());
        let mut opts = options(&sim.url(), &out);
        opts.contexts = vec![12_288];
        // Four streams: the first prime goes alone, not sharing its prefill with three.
        opts.concurrency = vec![4];
        opts.window = Duration::from_millis(300);
        opts.prefill_mode = mode;
        let m = runner::record(&opts, |_| {}).await.expect("recorded");
        assert_eq!(m.config.prefill_mode, Some(mode));
        let prefill_cells = m.cells.iter().filter(|c| c.phase == Phase::Prefill).count();
        assert_eq!(prefill_cells, usize::from(mode == PrefillMode::Scout));
        let s = score_dir(&out, &RuleSet::builtin("default").expect("rules")).expect("scored");
        let cell = s
            .cells
            .iter()
            .find(|c| c.phase == Phase::Prefill)
            .expect("a prefill row in both modes");
        assert_eq!(
            cell.verdict,
            Some(tokentrace_analyzer::contract::Verdict::Valid)
        );
        rates.push(
            cell.figures
                .as_ref()
                .and_then(|f| f.prompt_tok_s)
                .expect("rate"),
        );
        let md =
            tokentrace_analyzer::report::render(&s, tokentrace_analyzer::report::Format::Markdown);
        let named = match mode {
            PrefillMode::Scout => "- Prefill mode: Cold scout request per context",
            PrefillMode::Warmup => "- Prefill mode: Measured during decode warm-up",
        };
        assert!(md.contains(named), "{md}");
    }
    sim.stop();
    let ratio = rates[1] / rates[0];
    assert!(
        (0.67..1.5).contains(&ratio),
        "scout {:.0}, warm-up {:.0} tok/s",
        rates[0],
        rates[1]
    );
}
