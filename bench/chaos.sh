#!/usr/bin/env bash
# The chaos benchmark (not CI): the same matrix (contexts 512 and 2048, streams 1, 2, 4)
# recorded twice against a `tokentrace sim` process (profile tiny), once straight and
# once through testkit's fault proxy, which gives 15% of the completion streams' connections
# a fault drawn at random (seeded: latency and jitter, a 64 KiB/s cap, bursts every 500
# ms, a reset, a half-open link, a 10 s stall, 1-byte segments, an idle close) and
# refuses every connection for 5 s every 4 minutes. Prints the requests sent, how they
# ended, the requests unaccounted for, and each decode cell's tok/s against the
# fault-free run. MINUTES (default 20) is the whole benchmark, half each run; SEED
# (default 1). Debug builds: both runs use the same binaries, and the server's own
# speed is not what is measured.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${MINUTES:-20}
seed=${SEED:-1}
cargo build -q --bin tokentrace -p tokentrace
cargo build -q -p tokentrace-testkit --example chaos
target=${CARGO_TARGET_DIR:-target}/debug
# WORK=DIR keeps both runs and their ground truth there.
if [ -n "${WORK:-}" ]; then work=$WORK; else work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi
"$target/examples/chaos" "$target/tokentrace" "$minutes" "$seed" "$work"
