//! End-to-end tests of the `tokentrace` command line, one binary:
//! - `check`: a sound run passes; damaged, incomplete and missing cells are named and fail.

mod check;
