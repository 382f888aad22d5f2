#!/usr/bin/env bash
# Runs of any size (issue 43): writes synthetic runs of SCALE times the reference matrix's
# tokens (testkit's reference_matrix: 81 cells, 3,494,700 decode tokens at scale 1),
# then times `report` (Markdown and HTML, with the page's size) and `rescore` on each,
# `diff` of two runs of the largest scale, and `catalog` of CATALOG small runs: the wall
# time (min-max of PASSES) and the peak RSS of each, then one `--timings` table per run
# (time and memory per stage). Run from the repository root.
#
#   bash bench/scale.sh [SCALES]          # default "1 10"
#
# BIN=DIR times the `tokentrace` in DIR instead of building this checkout's (to measure
# another commit's build on the same runs: the generator is always this checkout's);
# WORK=DIR keeps the runs there and reuses them on the next call; PASSES (3), CATALOG
# (1000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scales=${1:-"1 10"}
passes=${PASSES:-3}
catalog=${CATALOG:-1000}
target=${CARGO_TARGET_DIR:-target}
cargo build --release --quiet -p tokentrace-testkit --example reference_matrix --example synth_run
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet -p tokentrace
  BIN=$target/release
fi
tt=$BIN/tokentrace
gen=$target/release/examples
if [ -n "${WORK:-}" ]; then
  mkdir -p "$WORK"
  work=$WORK
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
echo "## $(nproc) vCPU, $(free -g | awk '/Mem:/ {print $2}') GiB; tokentrace: $tt ($("$tt" --version))"

# Runs `$@` PASSES times; prints "min-max s, peak MiB" (the largest peak).
measure() {
  local times=() peak=0 out
  for _ in $(seq "$passes"); do
    /usr/bin/time -o "$work/time.txt" -f "%e %M" "$@" > /dev/null 2> "$work/stderr.txt" || {
      echo "failed: $* ($(tail -1 "$work/stderr.txt"))" >&2
      exit 1
    }
    out=$(tail -1 "$work/time.txt")
    times+=("${out% *}")
    local kib=${out#* }
    [ "$kib" -gt "$peak" ] && peak=$kib
  done
  local sorted
  sorted=$(printf '%s\n' "${times[@]}" | sort -g)
  printf '%s-%s s, %d MiB' "$(head -1 <<< "$sorted")" "$(tail -1 <<< "$sorted")" $((peak / 1024))
}

echo
echo "| run | tokens | on disk | report (md) | report --format html | page | rescore |"
echo "|---|---:|---:|---|---|---:|---|"
largest=
for scale in $scales; do
  run=$work/x$scale
  [ -d "$run" ] || "$gen/reference_matrix" "$run" "$scale" > /dev/null
  largest=$run
  tokens=$((3494700 * scale))
  disk=$(du -sb "$run/cells" | cut -f1)
  md=$(measure "$tt" report "$run")
  html=$(measure "$tt" report "$run" --format html --out "$work/page.html")
  page=$(wc -c < "$work/page.html")
  rescore=$(measure "$tt" rescore "$run")
  echo "| ${scale}x | $tokens | $((disk / 1000000)) MB | $md | $html | $page B | $rescore |"
done

echo
run=$largest
[ -d "$run-b" ] || cp -r "$run" "$run-b"
echo "diff of two runs of $(basename "$run"): $(measure "$tt" diff "$run" "$run-b")"
fleet=$work/fleet
if [ ! -d "$fleet" ]; then
  "$gen/synth_run" "$work/small" 2000 8192:1 8192:4 > /dev/null
  mkdir -p "$fleet"
  for i in $(seq -w 1 "$catalog"); do cp -r "$work/small" "$fleet/run-$i"; done
fi
echo "catalog of $catalog small runs (2 cells, 4,000 tokens each): $(measure "$tt" catalog "$fleet" --out "$work/fleet.parquet")"

# Where the time goes: one pass of each with the stages' table (time summed over the
# threads that ran the stage; memory when it last ended).
if "$tt" report --help | grep -q -- --timings; then
  for scale in $scales; do
    echo
    echo "### report x$scale --timings"
    "$tt" report "$work/x$scale" --timings 2>&1 > /dev/null | sed 's/^/    /'
    echo "### report x$scale --format html --timings"
    "$tt" report "$work/x$scale" --format html --timings 2>&1 > /dev/null | sed 's/^/    /'
  done
fi
