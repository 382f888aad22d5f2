#!/usr/bin/env bash
# tokentrace and vllm-bench under the same open-loop load, request by request, against the
# simulator's ground truth. At each rate (req/s) each tool, with a fresh simulator of its
# own (bench/bench-sim.toml: TTFT 50 ms, 10 ms steps, one token per chunk; ground truth
# on), sends N requests (rate × 20 s, at least 400; REQUESTS=N overrides) with Poisson
# arrivals: 1,024-token prompts, 100 output tokens, ignore_eos, streaming
# /v1/completions. The tool's CPU is sampled from /proc by bench/cpu_sampler.py, its peak
# RSS by /usr/bin/time; then bench/equal_load.py matches its requests with the truth
# (tokentrace by the server's response id, vllm-bench by send order) and prints one
# Markdown row per tool per rate.
#
# Nothing is fetched: vllm-bench (github.com/vllm-project/vllm-bench, built elsewhere)
# and a tokenizer.json it can read (bench/sim_tokenizer.py writes one that counts as the
# simulator does) are given by path. VLLM_BENCH_SCHEDULE, when set, is a program printing
# vllm-bench's send schedule (`PROG N RATE`: one cumulative delay in s per line) for its
# schedule lag; without it that column says n/a.
#   VLLM_BENCH=path/to/vllm-bench VLLM_BENCH_TOKENIZER=dir/with/tokenizer.json \
#     bash bench/equal_load.sh [RATES...=20 100 500]
#   (TOOLS="tokentrace vllm-bench" to choose; NO_BUILD=1 uses the built binaries as they
#   are; KEEP_WORK=1 leaves the runs, results and truths in the work folder it names)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${VLLM_BENCH:?set VLLM_BENCH to the vllm-bench binary}"
: "${VLLM_BENCH_TOKENIZER:?set VLLM_BENCH_TOKENIZER to a tokenizer.json or its folder}"
rates=("$@")
[ "${#rates[@]}" -eq 0 ] && rates=(20 100 500)
read -r -a tools <<< "${TOOLS:-tokentrace vllm-bench}"
if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release --quiet -p tokentrace -p tokentrace-recorder
fi
bin=${CARGO_TARGET_DIR:-target}/release
recorder=${RECORDER:-$bin/tokentrace-record}
work=$(mktemp -d)
sim=
if [ -n "${KEEP_WORK:-}" ]; then
  echo "keeping $work" >&2
  trap '[ -n "$sim" ] && kill $sim 2>/dev/null' EXIT
else
  trap '[ -n "$sim" ] && kill $sim 2>/dev/null; rm -rf "$work"' EXIT
fi
overflows() {
  awk '/^TcpExt:/ { if (!n) { for (i = 1; i <= NF; i++) k[i] = $i; n = NF } else
       for (i = 1; i <= NF; i++) if (k[i] == "ListenOverflows") print $i }' /proc/net/netstat
}
echo "## machine: $(nproc) vCPU, $(uname -sr); 1K prompts, 100 output tokens, Poisson arrivals"
echo "| tool | rate req/s | requests matched | TTFT error ms p50 / p99 / max (vs simulator read) | TTFT error ms p50 / p99 / max (vs kernel receive) | TTFT error ms p50 / p99 (vs handler start) | TTFT quantile error ms p50 / p99 (unpaired) | inter-token error ms p50 / p99 | schedule lag ms p50 / p99 / max | token events in CPU window | tool CPU s | CPU s per 100K events | max RSS MiB |"
echo "|---|---:|---:|---|---|---|---|---|---|---:|---:|---:|---:|"
for rate in "${rates[@]}"; do
  n=${REQUESTS:-$(( rate * 20 > 400 ? rate * 20 : 400 ))}
  for tool in "${tools[@]}"; do
    port=$((20000 + RANDOM % 20000))
    truth=$work/truth-$tool-$rate
    "$bin/tokentrace" sim --profile bench/bench-sim.toml --listen "127.0.0.1:$port" \
      --ground-truth "$truth" > "$work/sim.log" 2>&1 &
    sim=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.1; done
    url=http://127.0.0.1:$port
    case $tool in
      tokentrace)
        cmd=("$recorder" --target "$url" --out "$work/run-$rate" --contexts 1K
             --rates "$rate" --rate-requests "$n" --arrival poisson --max-tokens 100
             --gpu-telemetry off --warmup-timeout 120s --drain-timeout 120s) ;;
      vllm-bench)
        # Its own cache folder: the "tokenizer verified" mark of an earlier run (keyed by
        # URL and model) is not reused. (`env` execs it: the sampled PID is vllm-bench's.)
        cmd=(env XDG_CACHE_HOME="$work/xdg" "$VLLM_BENCH" --backend openai --base-url "$url"
             --model sim-bench --tokenizer "$VLLM_BENCH_TOKENIZER" --dataset-name random
             --random-input-len 1024 --random-output-len 100 --ignore-eos
             --num-prompts "$n" --request-rate "$rate" --burstiness 1.0 --seed 0
             --disable-tqdm --save-result --save-detailed --result-dir "$work"
             --result-filename "vb-$rate.json") ;;
      *) echo "unknown tool $tool" >&2; exit 2 ;;
    esac
    echo "[$tool @ $rate req/s, $n requests] load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    before=$(overflows)
    /usr/bin/time -f "%M" -o "$work/rss" "${cmd[@]}" > "$work/$tool.log" 2>&1 &
    timer=$!
    child=
    for _ in $(seq 50); do
      child=$(pgrep -P $timer | head -1) || true
      [ -n "$child" ] && break
      sleep 0.02
    done
    python3 bench/cpu_sampler.py "$child" > "$work/cpu.log" &
    sampler=$!
    wait $timer || { tail -20 "$work/$tool.log"; exit 1; }
    wait $sampler || true
    echo "  listen overflows (connections the kernel dropped from a full accept queue): $(( $(overflows) - before ))" >&2
    kill -INT $sim; wait $sim || true; sim=
    case $tool in
      tokentrace)
        python3 bench/equal_load.py --tool tokentrace --rate "$rate" --truth "$truth" \
          --cpu "$work/cpu.log" --rss-kb "$(tail -1 "$work/rss")" --run "$work/run-$rate"
        [ -n "${KEEP_WORK:-}" ] || rm -rf "$work/run-$rate" ;;
      vllm-bench)
        sched=()
        if [ -n "${VLLM_BENCH_SCHEDULE:-}" ]; then
          "$VLLM_BENCH_SCHEDULE" "$n" "$rate" 1 0 > "$work/delays-$rate.txt"
          sched=(--schedule "$work/delays-$rate.txt")
        fi
        python3 bench/equal_load.py --tool vllm-bench --rate "$rate" --truth "$truth" \
          --cpu "$work/cpu.log" --rss-kb "$(tail -1 "$work/rss")" \
          --result "$work/vb-$rate.json" "${sched[@]}" ;;
    esac
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$truth"
  done
done
