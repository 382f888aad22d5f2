#!/usr/bin/env bash
# The long fuzz campaign: every property test of a decoder of outside bytes, with
# PROPTEST_CASES inputs each (default 10 million), release build, one target at a time
# (FUZZ_ONLY=wire|recorder|schemas|analyzer runs one crate's targets). The damaged-run
# scoring target scores a whole run through polars per input (~1.6 ms): it takes
# TOKENTRACE_FUZZ_RUNS inputs (default 200,000). Files the readers' targets write go to
# /dev/shm when it exists (TMPDIR overrides). Prints each target's inputs and time; a
# failing case is saved in the crate's tests/proptest-regressions/ (commit it).
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${PROPTEST_CASES:-10000000}
export PROPTEST_CASES=$cases
if [ -z "${TMPDIR:-}" ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
only=${FUZZ_ONLY:-}
status=0
run() {
  local pkg=$1 test=$2 target=$3 n=${4:-$cases}
  if [ -n "$only" ] && [ "$test" != "$only" ]; then return; fi
  local t0=$(date +%s)
  local out failed=0
  out=$(PROPTEST_CASES=$n TOKENTRACE_FUZZ_RUNS=$n cargo test --release -q -p "$pkg" --test "$test" "fuzz::$target" -- --exact 2>&1) || failed=1
  local verdict=$(grep -E "^test result" <<<"$out" || echo "no result")
  grep -E "panicked|minimal failing" <<<"$out" || true
  if [ $failed = 1 ]; then status=1; tail -5 <<<"$out"; fi
  echo "$test fuzz::$target: $n inputs in $(( $(date +%s) - t0 )) s: $verdict"
}
run tokentrace-wire wire framing_is_the_same_under_any_split
run tokentrace-wire wire event_parsing_takes_any_text
run tokentrace-wire wire assembly_is_the_same_under_any_split
run tokentrace-recorder recorder prometheus_text_parses_or_says_why
run tokentrace-recorder recorder chunked_bodies_decode_the_same_under_any_split
run tokentrace-recorder recorder response_heads_parse_or_refuse
run tokentrace-schemas schemas damaged_tables_read_or_say_where
run tokentrace-schemas schemas damaged_raw_captures_read_or_say_where
run tokentrace-schemas schemas damaged_json_reads_or_says_where
run tokentrace-analyzer analyzer any_rules_text_loads_or_names_the_file
run tokentrace-analyzer analyzer damaged_runs::a_damaged_run_scores_or_says_why "${TOKENTRACE_FUZZ_RUNS:-200000}"
exit $status
