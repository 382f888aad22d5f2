//! tokentrace test support (not published): synthetic run folders written through the
//! real writers, for the format's, the analyzer's and the CLI's tests, the interop check,
//! and the size and speed benchmarks. No product crate depends on it.

pub mod synth;
