#!/usr/bin/env bash
# Conversations beside vLLM's own multi-turn benchmark (issue 56): the same sessions on
# one running vLLM server, one tool after the other. vLLM's
# benchmarks/multi_turn/benchmark_serving_multi_turn.py (from the vllm source release
# matching the server, not fetched here: PEER= its folder) runs CLIENTS conversations of
# TURNS user turns, MESSAGE-token messages and ANSWER-token answers, back to back
# (no think time); tokentrace records one conversation cell of CLIENTS live sessions of
# the same shape (chat endpoint, --think 0s) for DURATION seconds. Around each tool's run
# the server's /metrics are scraped: its own TTFT histogram (sum over count of the run)
# and its prefix-cache counters (hits over queried tokens) are the truth both tools are
# held to; bench/multi_turn.py prints each tool's TTFT by turn, the cache hits each saw,
# and the server's figures of each run.
#   TARGET=http://127.0.0.1:PORT PEER=path/to/multi_turn PEER_PYTHON=path/to/python \
#   MODEL=path/to/model-folder (the tokenizer the peer loads) \
#     bash bench/multi_turn.sh [CLIENTS=4] [TURNS=5] [MESSAGE=100] [ANSWER=32] [DURATION=60]
#   (BIN= the folder holding tokentrace, default the debug build; PY= a python with
#   pyarrow for the comparison, default python3; KEEP_WORK=1 keeps the work folder.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${TARGET:?set TARGET to the URL of the vLLM server}"
: "${PEER:?set PEER to the benchmarks/multi_turn folder of vLLM}"
: "${PEER_PYTHON:?set PEER_PYTHON to a python with numpy, pandas, aiohttp and transformers}"
: "${MODEL:?set MODEL to the folder of the served model (its tokenizer)}"
clients=${1:-4}
turns=${2:-5}
message=${3:-100}
answer=${4:-32}
duration=${5:-60}
bin=${BIN:-${CARGO_TARGET_DIR:-target}/debug}
work=$(mktemp -d)
[ -z "${KEEP_WORK:-}" ] && trap 'rm -rf "$work"' EXIT
echo "work folder: $work" >&2
served=$(curl -s "$TARGET/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

# The peer sessions: CLIENTS conversations of TURNS user turns (its num_turns counts
# messages), MESSAGE-token messages of text from this repository documents.
cat README.md BENCHMARKS.md schemas/FORMAT.md > "$work/corpus.txt"
cat > "$work/sessions.json" <<EOF
{"filetype": "generate_conversations", "num_conversations": $clients,
 "text_files": ["$work/corpus.txt"], "print_stats": false,
 "prompt_input": {"num_turns": {"distribution": "constant", "value": $((2 * turns))},
   "common_prefix_num_tokens": {"distribution": "constant", "value": 0},
   "prefix_num_tokens": {"distribution": "constant", "value": 0},
   "num_tokens": {"distribution": "constant", "value": $message}},
 "prompt_output": {"num_tokens": {"distribution": "constant", "value": $answer}}}
EOF

scrape() { curl -s "$TARGET/metrics" > "$1"; }

scrape "$work/peer.before"
(cd "$PEER" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PEER_PYTHON" benchmark_serving_multi_turn.py \
    --model "$MODEL" --served-model-name "$served" --url "$TARGET" \
    --input-file "$work/sessions.json" --num-clients "$clients" \
    --max-active-conversations "$clients" --limit-min-tokens "$answer" \
    --limit-max-tokens "$answer" --no-early-stop --seed 0 --request-timeout-sec 600 \
    --stats-json-output "$work/peer.json" > "$work/peer.log" 2>&1) || {
    tail -30 "$work/peer.log" >&2
    exit 1
}
scrape "$work/peer.after"

scrape "$work/ours.before"
"$bin/tokentrace" record --target "$TARGET" --out "$work/run" --display plain \
    --endpoint chat --conversations "$clients" --turns "$turns" \
    --message-tokens "$message" --answer-tokens "$answer" --think 0s \
    --duration "${duration}s" --metrics-interval 1s > "$work/ours.log" 2>&1 || {
    tail -30 "$work/ours.log" >&2
    exit 1
}
scrape "$work/ours.after"
"$bin/tokentrace" report "$work/run" --format json > "$work/ours.json"

"${PY:-python3}" bench/multi_turn.py "$work"
