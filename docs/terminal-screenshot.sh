#!/usr/bin/env bash
# Re-draws docs/record-screen.png, the README's picture of the full-screen view mid-run:
# records a small matrix against the simulator under docs/showcase-sim.toml (valid,
# queued and looped cells) with --display screen in a pseudo-terminal, and draws the
# emulated screen once 7 cells are done and the next is under way (then presses q).
# Needs a Python with venv; pyte and pillow are installed into
# ~/.cache/tokentrace/docs-venv.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
venv="$HOME/.cache/tokentrace/docs-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q pyte==0.8.2 pillow==11.3.0
fi
cargo build -q --bin tokentrace
bin="$(realpath "${CARGO_TARGET_DIR:-target}/debug/tokentrace")"
"$venv/bin/python" docs/terminal_screenshot.py docs/record-screen.png 150 44 7 -- \
  "$bin" record --out "$work/run" --sim-profile docs/showcase-sim.toml \
  --contexts 8K,16K,32K --concurrency 1,4,16,32 --duration 4s --display screen
ls -l docs/record-screen.png
