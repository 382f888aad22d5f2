#!/usr/bin/env bash
# How closely replay cells follow their trace (issue 26): a Mooncake trace of Poisson
# arrivals per rate, replayed against the simulator with ground truth on, in the same
# process, serving every request at once (fast steps, no batch limit), so the server
# never holds the client back; per request, the recorder's send time and the
# simulator's read of the request against the trace's offset, and the prefix cache's
# hits against the trace's sharing.
#   bash bench/replay_lag.sh [REQUESTS=2000] [RATES...=100 1000 5000]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
requests=${1:-2000}
shift || true
rates=("$@")
[ "${#rates[@]}" -eq 0 ] && rates=(100 1000 5000)
cargo build --release --quiet -p tokentrace-recorder --example replay_lag_bench
"${CARGO_TARGET_DIR:-target}/release/examples/replay_lag_bench" "$requests" "${rates[@]}"
