#!/usr/bin/env bash
# tokentrace's GPU telemetry on a real GPU: records a small matrix against
# bench/gpu_server.py (a randomly initialised ~1B Llama generating on the GPU; vLLM
# itself cannot be installed on the device machine, which reaches no package
# registry) with NVML telemetry on, while nvidia-smi samples the same GPU every 200 ms
# as an independent reading. Leaves the run folder (run.tgz), nvidia-smi's samples
# (smi.csv) and both logs in $OUT. Run on the GPU machine from the repository root,
# with .gpu/ holding tokentrace-record.gz (a gzipped Linux x86-64 recorder) and
# tokenizer.json (SmolLM2's):
#   mkdir -p .gpu && strip -o .gpu/tokentrace-record target/debug/tokentrace-record \
#     && gzip -9 .gpu/tokentrace-record
#   cp ~/.cache/tokentrace/vllm/smollm2-135m-instruct-bf16/tokenizer.json .gpu/
#   OUT=/tmp/out bash bench/gpu.sh [CONTEXTS=1K,4K] [CONCURRENCY=1,4] [DURATION=15s]
# Then, here: tokentrace report RUN (its GPU section: power, energy, tokens per joule).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${OUT:?set OUT to the folder for the results}"
contexts=${1:-1K,4K}
concurrency=${2:-1,4}
duration=${3:-15s}
work=$(mktemp -d)
gunzip -c .gpu/tokentrace-record.gz > "$work/tokentrace-record"
chmod +x "$work/tokentrace-record"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
nvidia-smi --query-gpu=timestamp,power.draw,utilization.gpu,memory.used,clocks.sm,temperature.gpu \
  --format=csv,nounits -lms 200 > "$OUT/smi.csv" 2>&1 &
smi=$!
PYTHONUNBUFFERED=1 python3 bench/gpu_server.py --tokenizer .gpu/tokenizer.json --port 8011 \
  > "$OUT/server.log" 2>&1 &
server=$!
trap 'kill $server $smi 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf http://127.0.0.1:8011/health > /dev/null && break
  kill -0 $server 2>/dev/null || { echo "the server exited" >&2; cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.5
done
echo "server: $(head -1 "$OUT/server.log")"
# Idle before, so the report's power has a floor to compare with.
sleep 5
"$work/tokentrace-record" --target http://127.0.0.1:8011 --out "$work/run" \
  --contexts "$contexts" --concurrency "$concurrency" --duration "$duration" \
  --max-tokens 512 --display plain --describe hardware="1x H200 (device machine)" \
  2>&1 | tee "$OUT/record.log"
sleep 3
kill $smi 2>/dev/null || true
tar czf "$OUT/run.tgz" -C "$work" run
echo "ok: $(wc -l < "$OUT/smi.csv") nvidia-smi samples"
