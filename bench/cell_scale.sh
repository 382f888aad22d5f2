#!/usr/bin/env bash
# Cells of any length (issue 57): writes three one-cell runs through the real writers
# (testkit's synth_run): 20 M and 80 M tokens of 4,096-token requests at concurrency
# 32, and 600 K requests of 16 tokens at concurrency 64; then times `report`
# (Markdown) on each, PASSES times (wall min-max, the largest peak RSS), and prints the
# `--timings` table of the 80 M cell. Run from the repository root.
#
#   bash bench/cell_scale.sh
#
# BIN=DIR times the `tokentrace` in DIR instead of building this checkout's (another
# commit's build on the same runs: the generator is always this checkout's); WORK=DIR
# keeps the runs there and reuses them (about 1.6 GB); PASSES (2); OUT=DIR keeps each
# report, to compare two builds' outputs byte for byte.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
passes=${PASSES:-2}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet -p tokentrace-testkit --example synth_run
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p tokentrace
  BIN=$target/release
fi
tt=$BIN/tokentrace
gen=$target/release/examples/synth_run
if [ -n "${WORK:-}" ]; then
  mkdir -p "$WORK"
  work=$WORK
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
out=${OUT:-$work/out}
mkdir -p "$out"
echo "## $(nproc) vCPU, $(free -g | awk '/Mem:/ {print $2}') GiB; tokentrace: $tt ($("$tt" --version))"

# name, tokens in the cell, CONTEXT:CONCURRENCY[:MAX_TOKENS]
cells=("c20 20000000 8192:32" "c80 80000000 8192:32" "s600k 9600000 256:64:16")
echo
echo "| cell | tokens | requests | on disk | report (md) |"
echo "|---|---:|---:|---:|---|"
for c in "${cells[@]}"; do
  read -r name tokens shape <<< "$c"
  run=$work/$name
  [ -d "$run" ] || "$gen" "$run" "$tokens" "$shape" > /dev/null
  disk=$(du -sb "$run/cells" | cut -f1)
  requests=$(python3 -c "
import glob, json, re, sys
# every part of the requests table (requests.parquet, requests.1.parquet...)
print(sum(f['rows'] for p in glob.glob(sys.argv[1] + '/cells/*/*/*/cell.json')
          for name, f in json.load(open(p))['files'].items()
          if re.fullmatch(r'requests(\.\d+)?\.parquet', name)))
" "$run")
  times=() peak=0
  for _ in $(seq "$passes"); do
    /usr/bin/time -o "$work/time.txt" -f "%e %M" "$tt" report "$run" > "$out/$name.md" 2> "$work/stderr.txt" || {
      echo "failed: report $run ($(tail -1 "$work/stderr.txt"))" >&2
      exit 1
    }
    read -r s kib < "$work/time.txt"
    times+=("$s")
    [ "$kib" -gt "$peak" ] && peak=$kib
  done
  sorted=$(printf '%s\n' "${times[@]}" | sort -g)
  echo "| $name | $tokens | ${requests:-?} | $((disk / 1000000)) MB | $(head -1 <<< "$sorted")-$(tail -1 <<< "$sorted") s, $((peak / 1024)) MiB |"
done
echo
echo "--timings of c80:"
"$tt" report "$work/c80" --timings 2>&1 > /dev/null | tail -8
