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
# VIEW=screen runs the recorder with --display screen inside a pseudo-terminal (script),
# keys read, as a user at a terminal would (default: plain lines to a file). PTY=1 runs
# any VIEW there: `script` gives the recorder a session of its own, and with the kernel's
# autogroup scheduling (on by default) that alone changes how the two cores are shared
# with the simulator, so the view's cost is measured against plain lines in the same
# pseudo-terminal (VIEW=plain PTY=1).
# NO_BUILD=1 uses the binaries as built; SIM= and MATCH= name other builds of the
# simulator (tokentrace) and of examples/accuracy_match.
#   bash bench/accuracy.sh [STREAMS...=10 100 1000]     (PASSES=2 runs each level twice)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
levels=("$@")
[ "${#levels[@]}" -eq 0 ] && levels=(10 100 1000)
passes=${PASSES:-1}
window=${WINDOW:-20s}
if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release --quiet -p tokentrace -p tokentrace-recorder
  cargo build --release --quiet -p tokentrace -p tokentrace-recorder --example accuracy_match
fi
bin=${CARGO_TARGET_DIR:-target}/release
recorder=$(realpath "${RECORDER:-$bin/tokentrace-record}")
sim_bin=${SIM:-$bin/tokentrace}
match=${MATCH:-$bin/examples/accuracy_match}
view=${VIEW:-plain}
work=$(mktemp -d)
sim=
trap '[ -n "$sim" ] && kill $sim 2>/dev/null; rm -rf "$work"' EXIT
overflows() {
  awk '/^TcpExt:/ { if (!n) { for (i = 1; i <= NF; i++) k[i] = $i; n = NF } else
       for (i = 1; i <= NF; i++) if (k[i] == "ListenOverflows") print $i }' /proc/net/netstat
}
echo "## machine: $(nproc) vCPU, $(uname -sr); window $window, 1K prompts, 100 output tokens; --display $view${PTY:+ in a pseudo-terminal}"
echo "| pass | streams | measured requests matched | TTFT error ms p50 / p99 / max | TTFT error > 100 ms | inter-token error ms p50 / p99 / max | send → simulator read ms p50 / p99 (send → kernel receive, kernel receive → read: the socket queue) | simulator intake (read → handler) ms p50 / p99 | first token arrival − write ms p50 / p99 | events between CPU samples | recorder CPU s (cores) | CPU s per 100K events | of it the view's thread | max RSS MiB | listen overflows |"
echo "|---|---:|---:|---|---:|---|---|---|---|---:|---|---:|---:|---:|---:|"
for pass in $(seq "$passes"); do
  for n in "${levels[@]}"; do
    port=$((20000 + RANDOM % 20000))
    truth=$work/truth-$pass-$n
    "$sim_bin" sim --profile bench/bench-sim.toml --listen "127.0.0.1:$port" \
      --ground-truth "$truth" > "$work/sim.log" 2>&1 &
    sim=$!
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.1; done
    before=$(overflows)
    args=(--target "http://127.0.0.1:$port" --out "$work/run-$pass-$n" --contexts 1K
      --concurrency "$n" --duration "$window" --max-tokens 100 --warmup-timeout 120s
      --drain-timeout 120s --display "$view")
    if [ "$view" = screen ] || [ -n "${PTY:-}" ]; then
      /usr/bin/time -f "%M" -o "$work/rss" script -qfec \
        "stty cols 160 rows 48; exec $recorder ${args[*]}" /dev/null \
        < /dev/null > "$work/record.log" 2>&1 &
    else
      /usr/bin/time -f "%M" -o "$work/rss" "$recorder" "${args[@]}" > "$work/record.log" 2>&1 &
    fi
    timer=$!
    pid=
    for _ in $(seq 100); do pid=$(pgrep -f "^$recorder " | head -1) && [ -n "$pid" ] && break; sleep 0.05; done
    python3 bench/cpu_sampler.py "$pid" > "$work/cpu.log" &
    sampler=$!
    wait $timer || { tail "$work/record.log"; exit 1; }
    wait $sampler || true
    after=$(overflows)
    kill -INT $sim; wait $sim || true; sim=
    row=$("$match" "$work/run-$pass-$n" "$truth" "$work/cpu.log" "$pass")
    echo "$row $(( $(tail -1 "$work/rss") / 1024 )) | $((after - before)) |"
    rm -rf "$work/run-$pass-$n" "$truth"
  done
done
