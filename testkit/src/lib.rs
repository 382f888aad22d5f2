//! tokentrace test support (not published): synthetic run folders written through the
//! real writers, for the format's, the analyzer's and the CLI's tests, the interop check,
//! and the size and speed benchmarks; and a fault proxy ([`netfault`]) for the network
//! tests and the chaos benchmark. No product crate depends on it.

pub mod netfault;
pub mod synth;
