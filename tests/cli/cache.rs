//! Prompt caches across runs: a second recording against the same server prefills
//! cold again (each run's prompts start with its own nonce), so its prefill figure
//! matches the first run's instead of measuring a cache hit.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokentrace_analyzer::{RuleSet, score_dir};
use tokentrace_recorder::runner;
use tokentrace_schemas::Phase;
use tokentrace_schemas::layout::list_cells;
use tokentrace_schemas::reader::read_table;
use tokentrace_schemas::tables::{Requests, Role};
use tokentrace_sim::{Profile, SimServer};

use crate::record::options;

/// (prompt tok/s, cached tokens) of the run's one prefill scout.
fn prefill(run: &Path) -> (f64, Option<i32>) {
    let s = score_dir(run, &RuleSet::builtin("default").expect("rules")).expect("scored");
    let cell = s
        .cells
        .iter()
        .find(|c| c.phase == Phase::Prefill)
        .expect("prefill cell");
    let rate = cell
        .figures
        .as_ref()
        .and_then(|f| f.prompt_tok_s)
        .expect("prompt tok/s");
    let dir = list_cells(run)
        .expect("cells")
        .into_iter()
        .find(|(k, _)| k.phase == Phase::Prefill)
        .expect("prefill folder")
        .1;
    let scout = read_table::<Requests>(&dir.join("requests.parquet"))
        .expect("requests")
        .into_iter()
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
        opts.contexts = vec![8192];
        opts.concurrency = vec![1];
        opts.window = Duration::from_millis(300);
        let m = runner::record(&opts, |_| {}).await.expect("recorded");
        assert_eq!(m.config.prompt_nonces.len(), 1, "{name}: one nonce");
        runs.push((prefill(&out), m.config.prompt_nonces[0].clone()));
    }
    sim.stop();
    let ((first, first_cached), first_nonce) = &runs[0];
    let ((second, second_cached), second_nonce) = &runs[1];
    assert_ne!(first_nonce, second_nonce, "each run has its own nonce");
    assert_eq!(*first_cached, Some(0), "the first scout is cold");
    assert_eq!(*second_cached, Some(0), "the second scout is cold too");
    let ratio = second / first;
    assert!(
        (0.8..1.25).contains(&ratio),
        "prefill {first:.0} then {second:.0} tok/s"
    );
}
