//! Integration tests of the analyzer, one binary:
//! - `figures`: decode-cell figures from polars agree with a row-by-row computation;
//! - `interop`: polars reads every table arrow-rs wrote, with the Hive columns, and
//!   incomplete cells are reported rather than read.

mod figures;
mod interop;
