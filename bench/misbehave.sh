#!/usr/bin/env bash
# The misbehaving-server cases, one recording each with the slim recorder against a
# simulator process whose profile (tiny, plus the case's lines) misbehaves: the exit
# code, how the cells ended, how the requests ended, and the recorder's peak memory
# (/usr/bin/time). Builds the binaries first: the recorder BUILD=release|debug (default
# release), the simulator SIM_BUILD (default debug: a release CLI compiles polars for half
# an hour on 2 cores, and the server's own speed is not what is measured).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${BUILD:-release}
sim_mode=${SIM_BUILD:-debug}
flag() { [ "$1" = release ] && echo --release || true; }
cargo build -q $(flag "$sim_mode") --bin tokentrace -p tokentrace
cargo build -q $(flag "$mode") -p tokentrace-recorder --bin tokentrace-record
bin=${CARGO_TARGET_DIR:-target}/$mode
sim_bin=${CARGO_TARGET_DIR:-target}/$sim_mode
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
printf '| case | exit | cells | requests | recorder peak RSS |\n|---|---:|---|---|---:|\n'
case_run() {
  local name=$1 extra=$2; shift 2
  { cat sim/profiles/tiny.toml; printf '%b\n' "$extra"; } > "$work/$name.toml"
  "$sim_bin/tokentrace" sim --profile "$work/$name.toml" --listen "127.0.0.1:$port" >/dev/null 2>&1 &
  local sim=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  local code=0
  /usr/bin/time -f "%M" -o "$work/$name.rss" "$bin/tokentrace-record" --target "http://127.0.0.1:$port" \
    --out "$work/$name" --contexts 512 --gpu-telemetry off --metrics-interval 200ms "$@" \
    >/dev/null 2>"$work/$name.log" || code=$?
  kill $sim 2>/dev/null; wait $sim 2>/dev/null || true
  local cells requests
  cells=$(python3 -c "import json,collections;m=json.load(open('$work/$name/manifest.json'));print(', '.join(f'{v} {k}' for k,v in collections.Counter(c['status'] for c in m['cells']).items()))" 2>/dev/null || echo none)
  requests=$(grep -o "committed: [^,]*, [^)]*)\?[^:]* in" "$work/$name.log" | sed 's/committed: [0-9]* chunks, //; s/ in$//' | paste -sd ';' - || true)
  printf '| %s | %s | %s | %s | %s MiB |\n' "$name" "$code" "$cells" "${requests:-—}" "$(( $(tail -1 "$work/$name.rss") / 1024 ))"
}
case_run baseline "" --concurrency 1,3 --duration 2s --max-tokens 200
case_run metrics-slow "[metrics]\ndelay_seconds = 1.5" --concurrency 1,3 --duration 2s --max-tokens 200
case_run metrics-huge "[metrics]\nextra_series = 100000" --concurrency 1,3 --duration 2s --max-tokens 200
case_run metrics-garbage "[metrics]\ngarbage = true" --concurrency 1,3 --duration 2s --max-tokens 200
case_run trickle "[faults]\ntrickle = 1.0" --concurrency 1 --duration 2s --max-tokens 8
case_run huge-event "[faults]\nhuge_event = 1.0" --concurrency 1 --duration 2s --max-tokens 200
case_run headers-never "[faults]\nslow_headers = 1.0\nstall_seconds = 3600" --concurrency 1 --duration 2s --max-tokens 50 --stall-timeout 3s
case_run headers-cut "[faults]\npartial_headers = 1.0\nstall_seconds = 3600" --concurrency 1 --duration 2s --max-tokens 50 --stall-timeout 3s
