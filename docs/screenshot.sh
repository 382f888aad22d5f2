#!/usr/bin/env bash
# Re-draws docs/report-html.png: records a small matrix against the simulator under
# docs/showcase-sim.toml (valid, queued and looped cells), writes its HTML report and
# saves the matrix with the 8K x 32 (queued) drill-down open. Needs chromium,
# chromium-driver and a Python with selenium and pillow ($PYTHON, default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build -q --bin tokentrace
bin="${CARGO_TARGET_DIR:-target}/debug/tokentrace"
"$bin" record --out "$work/run" --sim-profile docs/showcase-sim.toml \
  --contexts 8K,16K,32K --concurrency 1,4,16,32 --duration 5s >/dev/null
"$bin" report "$work/run" --format html --out "$work/report.html"
"${PYTHON:-python3}" docs/screenshot.py "$work/report.html" 8192 32 docs/report-html.png
ls -l docs/report-html.png
