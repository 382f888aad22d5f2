#!/usr/bin/env bash
# The recorder on a long open-loop cell (issue 43): the simulator (bench/bench-sim.toml:
# TTFT 50 ms, 10 ms steps, a token per chunk) in a process of its own, and one rate cell
# of RATE requests per second for DURATION, TOKENS output tokens each (256-token
# prompts). The recorder's RSS is sampled every 10 s while it records (and its memory map
# saved each minute in WORK/smaps: bench/heapwatch/arenas.py); then `check` and `report`
# on the run are timed, and the run's bytes per streamed token printed.
#   bash bench/long_cell.sh [RATE=1000] [DURATION=10m] [TOKENS=16]
# WORK=DIR keeps the run there (it is about 5 bytes per token: 1 GB for 10 minutes at
# 1,000 requests per second of 16 tokens... less with fewer tokens).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rate=${1:-1000}
duration=${2:-10m}
tokens=${3:-16}
cargo build --release --quiet -p tokentrace
bin=${CARGO_TARGET_DIR:-target}/release
if [ -n "${WORK:-}" ]; then
  mkdir -p "$WORK"
  work=$WORK
else
  work=$(mktemp -d)
fi
port=$((20000 + RANDOM % 20000))
"$bin/tokentrace" sim --profile bench/bench-sim.toml --listen "127.0.0.1:$port" > "$work/sim.log" 2>&1 &
sim=$!
cleanup() {
  kill "$sim" 2> /dev/null || true
  wait "$sim" 2> /dev/null || true
  [ -n "${WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.2; done
run=$work/run
rm -rf "$run"
"$bin/tokentrace" record --target "http://127.0.0.1:$port" --out "$run" --display plain \
  --mode rate --rates "$rate" --rate-duration "$duration" --contexts 256 \
  --max-tokens "$tokens" --drain-timeout 60s > "$work/record.log" 2>&1 &
rec=$!
started=$(date +%s)
mkdir -p "$work/smaps"
rm -f "$work"/smaps/smaps.*
echo "seconds  recorder RSS MiB"
copied=-1
while kill -0 "$rec" 2> /dev/null; do
  t=$(($(date +%s) - started))
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$rec/status" 2> /dev/null || true)
  [ -n "$rss" ] && printf '%7d  %16.1f\n' "$t" "$(echo "$rss / 1024" | bc -l)"
  # The memory map once a minute: bench/heapwatch/arenas.py reads it arena by arena.
  if [ $((t / 60)) -gt "$copied" ]; then
    cp "/proc/$rec/smaps" "$work/smaps/smaps.$t" 2> /dev/null || true
    copied=$((t / 60))
  fi
  sleep 10
done
wait "$rec" || { tail "$work/record.log"; exit 1; }
tail -2 "$work/record.log"
/usr/bin/time -f "check: %e s, %M KiB peak RSS" "$bin/tokentrace" check "$run" > "$work/check.log" 2>&1 \
  || { tail "$work/check.log"; exit 1; }
tail -1 "$work/check.log"
/usr/bin/time -f "report: %e s, %M KiB peak RSS" "$bin/tokentrace" report "$run" > "$work/report.md" 2> "$work/report.err" \
  || { tail "$work/report.err"; exit 1; }
tail -1 "$work/report.err"
"$bin/tokentrace" report "$run" --format json --out "$work/report.json"
bytes=$(du -sb "$run/cells" | cut -f1)
streamed=$(python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
print(sum(c['figures'].get('output_tokens') or 0 for c in s['cells'] if c.get('figures')))
" "$work/report.json")
echo "run folder: $bytes bytes of cells, $streamed output tokens, $(echo "scale=2; $bytes / $streamed" | bc) bytes per token"
