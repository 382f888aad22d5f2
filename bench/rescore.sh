#!/usr/bin/env bash
# Re-scoring speed: writes a synthetic run the size of the reference matrix (81 cells,
# ~3.5 M tokens) through the real writers, then times `tokentrace report` and
# `tokentrace rescore` (two rule sets) on it: wall time and peak RSS, three runs each.
# Run from the repository root; builds the release binaries first.
set -euo pipefail
# The binary and the example apart: `--example` alone builds no binary, and a stale
# `tokentrace` would be timed.
cargo build --release --quiet -p tokentrace
cargo build --release --quiet -p tokentrace-testkit --example reference_matrix
bin=${CARGO_TARGET_DIR:-target}/release
run=$(mktemp -d)/reference-matrix
trap 'rm -rf "$(dirname "$run")"' EXIT
"$bin/examples/reference_matrix" "$run"
echo "run folder: $(du -sb "$run" | cut -f1) bytes"
measure() {
  local what=$1; shift
  for i in 1 2 3; do
    /usr/bin/time -f "$what: %e s wall, %M KiB peak RSS" "$@" > /dev/null
  done
}
measure "report (default)" "$bin/tokentrace" report "$run"
measure "report --format json" "$bin/tokentrace" report "$run" --format json
measure "report --format html" "$bin/tokentrace" report "$run" --format html
"$bin/tokentrace" report "$run" --format html --out "$run/../page.html"
echo "html page: $(wc -c < "$run/../page.html") bytes"
measure "rescore --rules reference" "$bin/tokentrace" rescore "$run" --rules reference
measure "rescore --rules default" "$bin/tokentrace" rescore "$run" --rules default
ls -l "$run/results"
