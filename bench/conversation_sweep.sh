#!/usr/bin/env bash
# The eviction knee on the simulator (issue 56): conversation cells of 1 to 32 live
# sessions against a profile whose KV cache holds about five sessions' histories
# (bench/conversation-kv4k.toml: the tiny profile with 4,096 tokens of KV cache), then
# the report's Conversations section: the prefix cache's hit of the history per number
# of sessions, sessions completed per second, TTFT, and the prefix_evicted warnings.
#   bash bench/conversation_sweep.sh [SESSIONS=1,2,4,8,16,32] [DURATION=10s]
#   (BIN= the folder holding tokentrace, default the debug build.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
sessions=${1:-1,2,4,8,16,32}
duration=${2:-10s}
bin=${BIN:-${CARGO_TARGET_DIR:-target}/debug}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/tokentrace" record --sim-profile bench/conversation-kv4k.toml --out "$work/run" \
    --conversations "$sessions" --turns 4 --message-tokens 128 --answer-tokens 64 \
    --think 200ms --duration "$duration" --display plain > "$work/record.log" 2>&1
"$bin/tokentrace" report "$work/run" | sed -n '/^## Conversations/,/^## All measurements/p'
"$bin/tokentrace" report "$work/run" | grep 'prefix evicted' || true
