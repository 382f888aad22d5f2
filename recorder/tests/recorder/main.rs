//! Tests of the recorder, one binary:
//! - `cell`: whole prefill and decode cells against the simulator, read back;
//! - `client`: one recorded request against the simulator: counts, times, faults, cancel,
//!   kept-alive connections and the retry of one found closed;
//! - `fuzz`: property tests: Prometheus text, response heads and chunked bodies under any
//!   split, never a panic;
//! - `http`: response heads and chunked bodies decoded under any read split;
//! - `queue`: the writer queue's byte bound holds senders back until the writer takes,
//!   a record heavier than the bound still passes, a gone writer frees waiting senders;
//! - `scrape`: Prometheus text (llama.cpp, vLLM shapes) into long-format metric rows;
//! - `version`: `--version` names the commit and the recorder's features.

mod cell;
mod client;
mod fuzz;
mod http;
mod queue;
mod scrape;
mod version;

/// A captured file from `fixtures/sse/`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sse")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
