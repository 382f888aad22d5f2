#!/usr/bin/env bash
# tokentrace's `--rules reference` beside the reference tool itself (llm-inference-bench),
# on the same simulator profile (reference-h200x4, a fresh simulator per tool), the same
# matrix, the chat endpoint both use, and each tool's own figures per cell side by side
# with their ratios (bench/parity.py); and, from each simulator's ground truth, the
# server's own TTFT of each tool's requests (first token written − the kernel's receive
# of the request), so that a TTFT gap between the tools can be told apart as one tool's
# client or the load it put on the server.
#
# Nothing is fetched: the reference tool's snapshot (its llm_decode_bench.py) and a
# Python that has httpx and rich are given by path. It runs headless: plain display, no
# hardware monitor, stdin from /dev/null, and an unreachable https_proxy so that its
# self-update check fails at once. It exits 0 even when it collected nothing, so its
# JSON file is what is checked.
#   REFBENCH=path/to/llm_decode_bench.py REFBENCH_PYTHON=path/to/python \
#     bash bench/parity.sh [CONTEXTS=1k] [CONCURRENCY=1,4] [DURATION_S=10]
#   (NO_BUILD=1 uses the built binaries; BIN= the folder holding tokentrace and
#   tokentrace-record, default the release build; KEEP_WORK=1 keeps the work folder; PROFILE=
#   a simulator profile, built-in name or file, instead of reference-h200x4; PIN=1 runs
#   the simulator on CPU 0 and each tool's client on CPU 1 (taskset), so that neither
#   client shares a core with the server.)
#
# TARGET=URL runs both tools against a server already running there (real vLLM, say)
# instead of simulators: PASSES passes (default 2), the tools' order alternating
# (reference first in odd passes), each client's CPU seconds measured (/usr/bin/time),
# and the server's own mean TTFT of each tool's run (the change of vLLM's
# time_to_first_token_seconds sum over its count across the run, every request of the
# run counted); bench/parity_passes.py prints every pass's figures and their spread.
# MAX_TOKENS= sets tokentrace's --max-tokens: the reference tool cuts its 2,048 to what
# the server's max_model_len leaves (1,536 at 512 of 2,048), tokentrace skips the cell.
#   TARGET=http://127.0.0.1:8000 PASSES=3 MAX_TOKENS=1536 REFBENCH=… REFBENCH_PYTHON=… \
#     bash bench/parity.sh 512 1,4 10
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${REFBENCH:?set REFBENCH to the llm_decode_bench.py of the reference tool}"
: "${REFBENCH_PYTHON:?set REFBENCH_PYTHON to a python with httpx and rich}"
contexts=${1:-1k}
concurrency=${2:-1,4}
duration=${3:-10}
if [ -z "${NO_BUILD:-}" ] && [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p tokentrace -p tokentrace-recorder
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release}
work=$(mktemp -d)
sim=
if [ -n "${KEEP_WORK:-}" ]; then
  echo "keeping $work" >&2
  trap '[ -n "$sim" ] && kill $sim 2>/dev/null' EXIT
else
  trap '[ -n "$sim" ] && kill $sim 2>/dev/null; rm -rf "$work"' EXIT
fi
server_cpu=(); client_cpu=()
if [ -n "${PIN:-}" ]; then
  server_cpu=(taskset -c 0); client_cpu=(taskset -c 1)
fi
start_sim() {
  port=$((20000 + RANDOM % 20000))
  "${server_cpu[@]}" "$bin/tokentrace" sim --profile "${PROFILE:-reference-h200x4}" --listen "127.0.0.1:$port" \
    --ground-truth "$work/truth-$1" > "$work/sim-$1.log" 2>&1 &
  sim=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.1; done
  url=http://127.0.0.1:$port
  model=$(curl -sf "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
}
# Ctrl-C: the simulator writes its ground truth out and stops.
stop_sim() { kill -INT "$sim" 2>/dev/null || true; wait "$sim" 2>/dev/null || true; sim=; }

if [ -n "${TARGET:-}" ]; then
  url=$TARGET
  model=$(curl -sf "$url/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
  # The server's TTFT histogram: sum and count, summed over its label sets.
  ttft_mark() {
    curl -sf "$url/metrics" | awk '/^vllm:time_to_first_token_seconds_sum/ { s += $NF }
      /^vllm:time_to_first_token_seconds_count/ { n += $NF } END { printf "%s %s\n", s, n }'
  }
  run_reference() { # $1: pass
    local before; before=$(ttft_mark)
    env https_proxy=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
      NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost COLUMNS=200 \
      /usr/bin/time -f "%U %S" -o "$work/cpu-reference-$1" \
      "$REFBENCH_PYTHON" "$REFBENCH" --host "$url" --model "$model" --contexts "$contexts" \
      --concurrency "$concurrency" --duration "$duration" --display-mode plain --no-hw-monitor \
      --prefill-contexts "$contexts" --decode-warmup-seconds 0 --no-calibration-cache \
      --token-targeting exact \
      --output "$work/reference-$1.json" < /dev/null > "$work/reference-$1.log" 2>&1 || true
    echo "$before $(ttft_mark)" > "$work/ttft-reference-$1"
    [ -s "$work/reference-$1.json" ] || { echo "the reference tool wrote no results:" >&2; tail -20 "$work/reference-$1.log" >&2; exit 1; }
  }
  run_tokentrace() { # $1: pass
    local before; before=$(ttft_mark)
    /usr/bin/time -f "%U %S" -o "$work/cpu-tokentrace-$1" \
      "$bin/tokentrace-record" --target "$url" --out "$work/run-$1" --endpoint chat \
      --contexts "$(echo "$contexts" | tr 'k' 'K')" --concurrency "$concurrency" \
      --duration "${duration}s" --gpu-telemetry off ${MAX_TOKENS:+--max-tokens "$MAX_TOKENS"} \
      > "$work/tokentrace-$1.log" 2>&1 || {
        code=$?; [ "$code" -eq 3 ] || { tail -20 "$work/tokentrace-$1.log" >&2; exit "$code"; }
      }
    echo "$before $(ttft_mark)" > "$work/ttft-tokentrace-$1"
    "$bin/tokentrace" report "$work/run-$1" --rules reference --format json --out "$work/tokentrace-$1.json"
  }
  for pass in $(seq "${PASSES:-2}"); do
    echo "[pass $pass] $url ($model): contexts $contexts, concurrency $concurrency, ${duration}s" >&2
    if [ $((pass % 2)) -eq 1 ]; then
      run_reference "$pass"; run_tokentrace "$pass"
    else
      run_tokentrace "$pass"; run_reference "$pass"
    fi
  done
  python3 bench/parity_passes.py "$work" "${PASSES:-2}"
  exit 0
fi

# The reference tool: its prefill at the matrix's contexts only, no hidden warm-up cell,
# prompts of the exact length (`--token-targeting exact` searches each through the
# server's /tokenize; its default estimate, from one 8K calibration request, sent 1,473
# tokens for 1K here), no calibration cache carried between runs.
start_sim reference
echo "[reference tool] $url ($model): contexts $contexts, concurrency $concurrency, ${duration}s" >&2
env https_proxy=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 \
  NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost COLUMNS=200 \
  "${client_cpu[@]}" "$REFBENCH_PYTHON" "$REFBENCH" --host "$url" --model "$model" --contexts "$contexts" \
  --concurrency "$concurrency" --duration "$duration" --display-mode plain --no-hw-monitor \
  --prefill-contexts "$contexts" --decode-warmup-seconds 0 --no-calibration-cache \
  --token-targeting exact \
  --output "$work/reference.json" < /dev/null > "$work/reference.log" 2>&1 || true
stop_sim
[ -s "$work/reference.json" ] || { echo "the reference tool wrote no results:" >&2; tail -20 "$work/reference.log" >&2; exit 1; }

# tokentrace: the same matrix (K = 1,024 tokens, as the reference's k), chat endpoint.
start_sim tokentrace
echo "[tokentrace] $url ($model)" >&2
"${client_cpu[@]}" "$bin/tokentrace-record" --target "$url" --out "$work/run" --endpoint chat \
  --contexts "$(echo "$contexts" | tr 'k' 'K')" --concurrency "$concurrency" \
  --duration "${duration}s" --gpu-telemetry off > "$work/tokentrace.log" 2>&1
stop_sim
"$bin/tokentrace" report "$work/run" --rules reference --format json --out "$work/tokentrace.json"

python3 bench/parity.py --reference "$work/reference.json" --tokentrace "$work/tokentrace.json" \
  --truth-reference "$work/truth-reference" --truth-tokentrace "$work/truth-tokentrace" \
  --run "$work/run"
