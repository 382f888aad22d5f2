#!/usr/bin/env bash
# The long fuzz campaign: every property test of a decoder of outside bytes, with
# PROPTEST_CASES inputs each (default 10 million), release build. The damaged-run
# scoring target scores a whole run through polars per input (~20 ms): it takes
# TOKENTRACE_FUZZ_RUNS inputs (default 20,000). Prints each target's time; a failing
# case is saved in the crate's tests/proptest-regressions/ (commit it).
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${PROPTEST_CASES:-10000000}
export PROPTEST_CASES=$cases
run() {
  local pkg=$1 test=$2 filter=$3
  local t0=$(date +%s)
  cargo test --release -q -p "$pkg" --test "$test" "$filter" -- --test-threads 2 2>&1 | grep -E "^test result|panicked|minimal failing" || true
  echo "$pkg $filter: $cases cases in $(( $(date +%s) - t0 )) s"
}
run tokentrace-wire wire fuzz::
run tokentrace-recorder recorder fuzz::
run tokentrace-schemas schemas fuzz::
run tokentrace-analyzer analyzer fuzz::any_rules_text
TOKENTRACE_FUZZ_RUNS=${TOKENTRACE_FUZZ_RUNS:-20000} run tokentrace-analyzer analyzer fuzz::damaged_runs
