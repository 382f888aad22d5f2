#!/usr/bin/env bash
# Recorder memory and CPU, with the simulator in a process of its own: `tokentrace-record`
# records one decode cell of N streams (TTFT 50 ms, 10 ms steps, one token per chunk,
# 100 tokens per request) for each window length given; prints wall time, CPU time and
# peak RSS of the recorder, and the chunks it recorded.
#   bash bench/recorder.sh [STREAMS=1000] [WINDOWS=20s 60s]
set -euo pipefail
streams=${1:-1000}
shift || true
windows=("${@:-20s 60s}")
[ "$#" -eq 0 ] && windows=(20s 60s)
cargo build --release --quiet -p tokentrace -p tokentrace-recorder
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
"$bin/tokentrace" sim --profile bench/bench-sim.toml --listen "127.0.0.1:$port" > "$work/sim.log" 2>&1 &
sim=$!
trap 'kill $sim 2>/dev/null; wait $sim 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.2; done
for w in "${windows[@]}"; do
  /usr/bin/time -f "$streams streams, window $w: %e s wall, %U s user, %S s sys, %M KiB peak RSS" \
    "$bin/tokentrace-record" --target "http://127.0.0.1:$port" --out "$work/run-$w" \
    --contexts 256 --concurrency "$streams" --duration "$w" --max-tokens 100 \
    --warmup-timeout 60s --drain-timeout 60s > "$work/record-$w.log" 2>&1 || { tail "$work/record-$w.log"; exit 1; }
  tail -1 "$work/record-$w.log"
  grep -h '"rows"' -B1 "$work/run-$w"/cells/phase=decode/*/*/cell.json | grep -A1 chunks.parquet | tail -1
done
