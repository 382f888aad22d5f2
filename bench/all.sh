#!/usr/bin/env bash
# Every figure of BENCHMARKS.md in one command (about 18 minutes on 2 vCPUs, plus the
# release build): trace size, recorder accuracy, ingest CPU and memory, re-scoring speed,
# and the hot-path benches. Run from the repository root: bash bench/all.sh
# Not here, because they need a real engine, the reference tool or a GPU (each script's
# header says how, BENCHMARKS.md gives the command beside its figures): parity.sh and
# equal_load.sh (the reference tool), vllm_sim.sh (vLLM), gpu.sh (a GPU machine); and
# long_cell.sh, the recorder on a 15-minute open-loop cell (its own 16 minutes); and
# chaos.sh, the same matrix straight and through a fault proxy (20 minutes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --quiet -p tokentrace -p tokentrace-recorder -p tokentrace-testkit --examples
bin=${CARGO_TARGET_DIR:-target}/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "## machine: $(nproc) vCPU, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr)"
echo "## trace size (1 M tokens)"
"$bin/examples/synth_run" "$work/size" 1000000 8192:32
echo "## recorder accuracy, request by request, simulator in its own process (issue 11)"
PASSES=2 bash bench/accuracy.sh 10 100 1000
echo "## recorder accuracy, simulator in the same process (issue 7)"
"$bin/examples/accuracy_bench" 5 1 10 20 40 100 500 1000
echo "## rate cells against their schedule (issue 18)"
bash bench/rate_lag.sh 2000 10 100 1000
echo "## replay cells against their trace (issue 26)"
bash bench/replay_lag.sh 2000 100 1000 5000
echo "## recorder CPU and memory"
bash bench/recorder.sh 1000 20s 60s
echo "## re-scoring speed"
bash bench/rescore.sh
echo "## runs of any size: 1x and 10x the reference matrix, diff, catalog (issue 43)"
bash bench/scale.sh "1 10"
echo "## cells of any length: one cell of 20 M, 80 M tokens, 600 K short requests (issue 57)"
bash bench/cell_scale.sh
echo "## a fleet as a website: 1,000 small runs (issue 46)"
bash bench/site_scale.sh 1000
echo "## hot paths"
cargo bench --quiet -p tokentrace-wire --bench sse_parse
cargo bench --quiet -p tokentrace-schemas --bench chunk_writer
