#!/usr/bin/env bash
# How closely rate cells follow their arrival schedule (issue 18): the simulator with
# ground truth on, in the same process, serving every request at once (fast steps, no
# batch limit), so the server never holds the client back; one rate cell per rate,
# REQUESTS Poisson arrivals each; per request, the recorder's send time and the
# simulator's read of the request against the schedule.
#   bash bench/rate_lag.sh [REQUESTS=2000] [RATES...=10 100 1000]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
requests=${1:-2000}
shift || true
rates=("$@")
[ "${#rates[@]}" -eq 0 ] && rates=(10 100 1000)
cargo build --release --quiet -p tokentrace-recorder --example rate_lag_bench
"${CARGO_TARGET_DIR:-target}/release/examples/rate_lag_bench" "$requests" "${rates[@]}"
