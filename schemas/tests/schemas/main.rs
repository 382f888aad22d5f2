//! Integration tests of the trace format, one binary:
//! - `roundtrip`: every table, the raw capture and the JSON files read back equal;
//! - `errors`: missing, truncated, corrupt, foreign, newer and mismatched files give named errors;
//! - `fuzz`: property tests: damaged tables, raw captures and JSON files read or say where;
//! - `cell`: atomic cell commit and the run layout;
//! - `doc`: FORMAT.md and the code list the same columns, types and values;
//! - `protocol`: the engines' series carry their metric prefixes; names round-trip;
//! - `secrets`: credentials and secret arguments are redacted; the run clock.

mod cell;
mod common;
mod doc;
mod errors;
mod fuzz;
mod protocol;
mod roundtrip;
mod secrets;
