#!/usr/bin/env bash
# The wheels as a user gets them: built by packaging/build-wheels.sh, their binaries
# checked to need only glibc 2.17's libraries (auditwheel, ldd), installed with pip into a
# fresh virtualenv with no cargo or rustc on PATH, then the README's main job, a recording
# of the real llama.cpp server by `tokentrace-record` checked by `tokentrace check`, and a
# `pip uninstall` that must leave the virtualenv as it was.
#   .ci/wheels.sh   (needs TOKENTRACE_LLAMACPP_PYTHON and TOKENTRACE_LLAMACPP_MODEL)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
: "${TOKENTRACE_LLAMACPP_PYTHON:?run fixtures/llamacpp/install.sh first}"
: "${TOKENTRACE_LLAMACPP_MODEL:?run fixtures/llamacpp/install.sh first}"
say() { printf 'wheels: %s\n' "$*"; }
fail() { printf 'ci: wheels: %s\n' "$*" >&2; exit 1; }

rm -rf dist
started=$(date +%s)
bash packaging/build-wheels.sh
say "built in $(($(date +%s) - started)) s"
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
shopt -s nullglob
recorder_wheels=(dist/tokentrace_record-"$version"-*.whl)
cli_wheels=(dist/tokentrace-"$version"-*.whl)
[ ${#recorder_wheels[@]} -eq 1 ] && [ ${#cli_wheels[@]} -eq 1 ] ||
  fail "expected one wheel of each in dist/, found: $(ls dist)"
for w in "${recorder_wheels[0]}" "${cli_wheels[0]}"; do
  case "$w" in
    *-manylinux2014_x86_64.manylinux_2_17_x86_64.whl) ;;
    *) fail "$w does not declare manylinux2014 (glibc 2.17) for x86_64" ;;
  esac
  say "$(basename "$w"): $(du -k "$w" | cut -f1) KiB"
done
rec_kib=$(du -k "${recorder_wheels[0]}" | cut -f1)
[ "$rec_kib" -lt 15360 ] || fail "the recorder wheel is ${rec_kib} KiB, over 15 MB"

work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# auditwheel (PyPI) reads each wheel's binaries: only manylinux2014's libraries.
python3 -m venv "$work/audit"
"$work/audit/bin/pip" install --quiet --disable-pip-version-check auditwheel==6.8.2
for w in "${recorder_wheels[0]}" "${cli_wheels[0]}"; do
  shown=$("$work/audit/bin/auditwheel" show "$w")
  echo "$shown"
  # (auditwheel wraps its lines: join them first)
  grep -q 'consistent with the following platform tag: "manylinux_2_17_x86_64"' <<<"$(tr -s '\n ' ' ' <<<"$shown")" ||
    fail "auditwheel: $w is not consistent with manylinux_2_17_x86_64"
done

# A fresh virtualenv; PATH without ~/.cargo/bin or anything else that has Rust.
python3 -m venv "$work/venv"
before=$(cd "$work/venv" && find . | sort)
export PATH="$work/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
for tool in cargo rustc; do
  ! command -v "$tool" >/dev/null || fail "$tool is on PATH ($(command -v "$tool"))"
done
install_started=$(date +%s%N)
pip install --quiet --disable-pip-version-check --no-index --find-links dist tokentrace
for bin in tokentrace tokentrace-record; do
  [ "$(command -v "$bin")" = "$work/venv/bin/$bin" ] || fail "$bin is not the wheel's"
  # ldd: only the C library's parts and the loader (libgcc_s for unwinding), nothing else.
  ldd "$work/venv/bin/$bin"
  if ldd "$work/venv/bin/$bin" | grep -vE '^\s*(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|(libc|libm|libdl|libpthread|librt|libgcc_s|ld-linux-x86-64)\.so\.[0-9]+) '; then
    fail "$bin needs a library outside glibc 2.17's set"
  fi
  "$bin" --version
  "$bin" --version | grep -q "^$bin $version (commit $(git rev-parse --short=12 HEAD), x86_64-unknown-linux-gnu, release)$" ||
    fail "$bin --version does not name this version and commit"
done

# The README's main job, from the wheel.
tokentrace record --out "$work/demo" && tokentrace report "$work/demo" > "$work/demo.md"
first_report_ms=$((($(date +%s%N) - install_started) / 1000000))
grep -q "^| " "$work/demo.md" || fail "the demo report has no table"
say "install to first report: ${first_report_ms} ms"

# The slim recorder against the real llama.cpp server, checked by the CLI.
"$TOKENTRACE_LLAMACPP_PYTHON" fixtures/llamacpp/serve.py "$TOKENTRACE_LLAMACPP_MODEL" \
  --parallel 2 --ctx 4096 --threads 2 > "$work/serve.json" 2>/dev/null &
server_pid=$!
for _ in $(seq 1200); do
  [ -s "$work/serve.json" ] && break
  sleep 0.1
done
url=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$work/serve.json") ||
  fail "llama.cpp's serve.py did not say where it listens"
tokentrace-record --target "$url" --out "$work/llamacpp" --contexts 256,1K \
  --concurrency 1,2 --duration 3s --max-tokens 24 2>&1 | tail -3 ||
  fail "tokentrace-record against llama.cpp failed"
tokentrace check "$work/llamacpp"
tokentrace report "$work/llamacpp" | head -20
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""

# Uninstalled, the virtualenv is as it was before the install.
pip uninstall --yes --quiet tokentrace tokentrace-record
after=$(cd "$work/venv" && find . -not -path '*/__pycache__*' | sort)
before=$(grep -v __pycache__ <<<"$before")
if [ "$before" != "$after" ]; then
  diff <(echo "$before") <(echo "$after") >&2 || true
  fail "pip uninstall left files behind"
fi
say "pip uninstall left the virtualenv as it was"
