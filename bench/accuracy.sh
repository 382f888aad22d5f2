#!/usr/bin/env bash
# Recorder accuracy and cost, request by request, against the simulator's ground truth
# (issue 11's setting): the simulator (bench/bench-sim.toml: TTFT 50 ms, 10 ms steps, one
# token per chunk) runs in its own process with ground truth on; `tokentrace-record`
# records 1K prompts, 100 output tokens, a 20 s window at each level of streams; then
# examples/accuracy_match.rs matches every measured request with what the simulator sent.
# The recorder's CPU is sampled from /proc by bench/cpu_sampler.py (any recorder version
# can be measured alike: RECORDER=path/to/tokentrace-record). Besides its figures, each
# row gets the recorder's peak RSS (/usr/bin/time) and how many connections the kernel
# dropped from a full accept queue (TcpExt ListenOverflows).
#   bash bench/accuracy.sh [STREAMS...=10 100 1000]     (PASSES=2 runs each level twice)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
levels=("$@")
[ "${#levels[@]}" -eq 0 ] && levels=(10 100 1000)
passes=${PASSES:-1}
window=${WINDOW:-20s}
cargo build --release --quiet -p tokentrace -p tokentrace-recorder
cargo build --release --quiet -p tokentrace -p tokentrace-recorder --example accuracy_match
bin=${CARGO_TARGET_DIR:-target}/release
recorder=${RECORDER:-$bin/tokentrace-record}
work=$(mktemp -d)
sim=
trap '[ -n "$sim" ] && kill $sim 2>/dev/null; rm -rf "$work"' EXIT
overflows() {
  awk '/^TcpExt:/ { if (!n) { for (i = 1; i <= NF; i++) k[i] = $i; n = NF } else
       for (i = 1; i <= NF; i++) if (k[i] == "ListenOverflows") print $i }' /proc/net/netstat
}
echo "## machine: $(nproc) vCPU, $(uname -sr); window $window, 1K prompts, 100 output tokens"
echo "| pass | streams | measured requests matched | TTFT error ms p50 / p99 / max | TTFT error > 100 ms | inter-token error ms p50 / p99 / max | send → simulator read ms p50 / p99 (send → kernel receive, kernel receive → read: the socket queue) | simulator intake (read → handler) ms p50 / p99 | first token arrival − write ms p50 / p99 | events between CPU samples | recorder CPU s (cores) | CPU s per 100K events | max RSS MiB | listen overflows |"
echo "|---|---:|---:|---|---:|---|---|---|---|---:|---|---:|---:|---:|"
for pass in $(seq "$passes"); do
  for n in "${levels[@]}"; do
    port=$((20000 + RANDOM % 20000))
    truth=$work/truth-$pass-$n
    "$bin/tokentrace" sim --profile bench/bench-sim.toml --listen "127.0.0.1:$port" \
      --ground-truth "$truth" > "$work/sim.log" 2>&1 &
    sim=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.1; done
    before=$(overflows)
    /usr/bin/time -f "%M" -o "$work/rss" "$recorder" --target "http://127.0.0.1:$port" \
      --out "$work/run-$pass-$n" --contexts 1K --concurrency "$n" --duration "$window" \
      --max-tokens 100 --warmup-timeout 120s --drain-timeout 120s > "$work/record.log" 2>&1 &
    timer=$!
    sleep 0.2
    python3 bench/cpu_sampler.py "$(pgrep -P $timer | head -1)" > "$work/cpu.log" &
    sampler=$!
    wait $timer || { tail "$work/record.log"; exit 1; }
    wait $sampler || true
    after=$(overflows)
    kill -INT $sim; wait $sim || true; sim=
    row=$("$bin/examples/accuracy_match" "$work/run-$pass-$n" "$truth" "$work/cpu.log" "$pass")
    echo "$row $(( $(tail -1 "$work/rss") / 1024 )) | $((after - before)) |"
    rm -rf "$work/run-$pass-$n" "$truth"
  done
done
