//! End-to-end tests of the `tokentrace` command line, one binary:
//! - `check`: a sound run passes; damaged, incomplete and missing cells are named and fail;
//! - `record`: recording the simulator: ground truth agrees, a killed run resumes, no secret on disk;
//! - `sim`: the simulator subcommand starts, says where it listens, serves, and refuses bad profiles.

mod check;
mod record;
mod sim;
