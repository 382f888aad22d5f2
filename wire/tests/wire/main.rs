//! Tests of the wire crate, one binary:
//! - `sse`: framing keeps every event's wire length and arrival, across any read split;
//! - `event`: captured streams of llama.cpp and the simulator read into chunk fields,
//!   and the typed reader agrees with the `Value` reader on odd input;
//! - `fuzz`: property tests: framing and assembly the same under any split of any bytes,
//!   event parsing total on any text;
//! - `assemble`: a request's reads into rows under each token-counting policy, every end;
//! - `workload`: the replay fixtures (Mooncake, Azure, BurstGPT) parsed row for row, and
//!   every malformed row named by its line; property: no input panics the parsers.

mod assemble;
mod event;
mod fuzz;
mod sse;
mod workload;

/// A captured stream from `fixtures/sse/`.
pub fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/sse")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
