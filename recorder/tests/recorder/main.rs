//! Tests of the recorder, one binary:
//! - `cell`: whole prefill and decode cells against the simulator, read back;
//! - `sse`: framing keeps every event's wire length and arrival, across any read split;
//! - `parse`: captured streams of llama.cpp and the simulator read into chunk fields;
//! - `client`: one recorded request against the simulator: counts, times, faults, cancel;
//! - `scrape`: Prometheus text (llama.cpp, vLLM shapes) into long-format metric rows.

mod cell;
mod client;
mod parse;
mod scrape;
mod sse;

/// A captured stream from `fixtures/sse/`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sse")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
