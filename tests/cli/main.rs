//! End-to-end tests of the `tokentrace` command line, one binary:
//! - `answers`: speculative decoding, content rules and connections agree with the
//!   simulator's ground truth (a spec-decoding profile; script leaks, early stops and
//!   kept-alive connections closed under their workers);
//! - `cache`: a second run against the same server prefills cold (per-run prompt nonce);
//! - `catalog`: a small fleet (two engines) scored into one Parquet table, row for row
//!   the runs' JSON scorings, with their facts; a bad run named, the others kept;
//! - `check`: a sound run passes; damaged, incomplete and missing cells are named and fail;
//! - `conversation`: conversation cells over both endpoints: each turn sends the whole
//!   history with the server's answers after its think time, the `turns` table says so,
//!   and the prefix cache serves the history;
//! - `disk`: the disk fills, or the run folder turns read-only, after three cells (a
//!   tmpfs in a private mount namespace): an error naming the file, exit 1, committed
//!   cells unchanged, and `--resume` finishes once the disk is repaired;
//! - `gpu`: GPU telemetry from a simulated box behind the NVML trait gives power and
//!   tokens-per-joule figures; without NVML the report says so; found facts reach the report;
//! - `integrity`: a flipped byte in each kind of committed file, a truncated, a dropped
//!   and two swapped files named by `check` and refused by `report`, the other cells
//!   scored as before; older runs read unverified; `--no-verify`; the run's digest;
//! - `import`: the reference tool's results files (0.4.18 captured, 0.6.0 built from
//!   its writer's code) imported: every figure the file's, the file kept, check and
//!   report read them, rescore refuses, an unknown version imported by shared fields, bad
//!   files exit 2; diff against a tokentrace run of the same simulator;
//! - `inputs`: bad command lines exit 2 before anything is written; an all-skipped run is a valid folder;
//! - `llamacpp`: a real llama.cpp server recorded over both endpoints and analyzed; its
//!   slots keep two conversations' history (`cached_tokens` in its usage);
//! - `misbehave`: slow, huge and garbage `/metrics`, and a server that dies mid-cell and
//!   comes back: the matrix finishes and the trace says what happened;
//! - `network`: a fault proxy between recorder and simulator (latency and jitter, a
//!   bandwidth cap, bursts, a reset, a half-open link, a 10 s stall, 5 s of refusals,
//!   1-byte segments, idle closes): nothing hangs, each request ends once as its fault
//!   says, committed cells stay byte-identical; bursts and resets in front of a real
//!   llama.cpp server;
//! - `record`: recording the simulator: ground truth agrees, a killed run resumes, no secret on disk;
//! - `refusals`: a refused context fails after a few requests; a rate-limiting server is paced;
//! - `reparse`: golden runs and a faulty run re-derived row for row from their raw
//!   capture, reports unchanged; other token-counting policies count as they say;
//! - `replay`: a recorded run replayed request for request; a Mooncake trace's shared
//!   prefixes reach the prefix cache as it says; bad traces exit 2 naming the line;
//! - `report`: golden reports byte for byte, rescore + diff of a one-threshold change,
//!   bad input named with a non-zero exit;
//! - `store`: a run uploaded to a real S3 server (moto), its recorder killed, resumed from
//!   the bucket on a fresh folder, checked and reported by URL byte for byte;
//! - `trials`: SIGKILL at seeded moments of five kinds, and Ctrl-C, then resume: nothing
//!   committed changes, the run ends complete and sound;
//! - `truth`: the analyzer's figures agree within 1% with the simulator's ground truth;
//!   without server metrics, client-side evidence is used and the report says so;
//! - `screen`: the full-screen view in a pseudo-terminal: its matrix is the scoring's,
//!   loops show their hint, the terminal comes back clean; q, s and p steer the run;
//! - `site`: a fleet published as a static site: run pages are their reports plus a
//!   navigation bar, links resolve, hostile facts are text, a second build rewrites only
//!   what a new run touches, `--public` drops hosts, IPs and paths, `--rules` is said;
//! - `sim`: the simulator subcommand starts, says where it listens, serves, and refuses bad profiles;
//! - `version`: `--version` names the commit and features; the manifest keeps the same;
//! - `vllm`: real vLLM (CPU build) recorded over both endpoints, burst, rate, replay and
//!   conversations; prompt lengths, cold scouts, drained cells, cached_tokens, queueing
//!   and a small KV cache's evicted conversations by its own word.

mod answers;
mod cache;
mod catalog;
mod check;
mod conversation;
mod disk;
mod gpu;
mod import;
mod inputs;
mod integrity;
mod llamacpp;
mod misbehave;
mod network;
mod record;
mod refusals;
mod reparse;
mod replay;
mod replay_server;
mod report;
mod screen;
mod serve;
mod sim;
mod site;
mod store;
mod trials;
mod truth;
mod version;
mod vllm;
