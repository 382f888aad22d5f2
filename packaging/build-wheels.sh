#!/usr/bin/env bash
# Builds tokentrace's two wheels with maturin (`bindings = "bin"`) into dist/:
#   tokentrace-record  the slim recorder for the GPU box (recorder/pyproject.toml)
#   tokentrace         the laptop CLI, which depends on tokentrace-record (pyproject.toml)
# Linux wheels are linked by zig (PyPI's `ziglang`) against glibc 2.17 (manylinux2014),
# so they run on any Linux of the last decade; NVML is loaded at run time, not linked.
# Then writes dist/SHA256SUMS and dist/RELEASE-NOTES.md (from packaging/release-notes.md).
#
#   packaging/build-wheels.sh [TARGET...]    default: this machine's Linux triple
#
# A target needs its Rust standard library (`rustup target add TARGET`); one that is not
# installed is named and refused. maturin and ziglang come from $WHEEL_TOOLS (a virtualenv,
# made on first use under ~/.cache/tokentrace/wheel-tools). Builds go to
# $CARGO_TARGET_DIR (default ~/.cache/tokentrace/wheel-target, apart from the test builds:
# zig's C compiler would invalidate them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MATURIN_VERSION=1.16.0
ZIGLANG_VERSION=0.17.1
tools=${WHEEL_TOOLS:-$HOME/.cache/tokentrace/wheel-tools}
export CARGO_TARGET_DIR=${WHEEL_TARGET_DIR:-$HOME/.cache/tokentrace/wheel-target}
out=dist

if ! "$tools/bin/maturin" --version 2>/dev/null | grep -q "$MATURIN_VERSION" ||
   ! "$tools/bin/python" -c "import ziglang" 2>/dev/null; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check \
    "maturin==$MATURIN_VERSION" "ziglang==$ZIGLANG_VERSION"
fi
# maturin finds zig as `python -m ziglang` of the interpreter on PATH.
export PATH="$tools/bin:$PATH"

# One version for both wheels: Cargo's, and the CLI wheel's pin of the recorder's.
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
pinned=$(sed -n 's/^dependencies = \["tokentrace-record==\(.*\)"\]/\1/p' pyproject.toml)
if [ -z "$version" ] || [ "$version" != "$pinned" ]; then
  echo "build-wheels: Cargo.toml's version is '$version' but pyproject.toml pins tokentrace-record==$pinned" >&2
  exit 1
fi
# The commit every binary's --version and every manifest names (schemas/build.rs).
TOKENTRACE_COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
export TOKENTRACE_COMMIT

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=("$(uname -m)-unknown-linux-gnu")
fi
installed=$(rustup target list --installed 2>/dev/null || rustc -vV | sed -n 's/^host: //p')
for target in "${targets[@]}"; do
  if ! grep -qx "$target" <<<"$installed"; then
    echo "build-wheels: the Rust standard library for $target is not installed (rustup target add $target)" >&2
    exit 1
  fi
done

mkdir -p "$out"
for target in "${targets[@]}"; do
  case "$target" in
    *-linux-gnu) link=(--zig --compatibility manylinux2014) ;;
    *-apple-darwin) link=() ;;
    *) echo "build-wheels: no wheel recipe for $target" >&2; exit 1 ;;
  esac
  for manifest in recorder/Cargo.toml Cargo.toml; do
    started=$(date +%s)
    maturin build --release --locked --target "$target" "${link[@]}" \
      --manifest-path "$manifest" --out "$out"
    echo "build-wheels: $manifest for $target in $(($(date +%s) - started)) s" >&2
  done
done

# Checksums and the release note, over every wheel of this version in dist/.
(
  cd "$out"
  sha256sum ./*-"$version"-*.whl | sed 's# \./# #' > SHA256SUMS
)
{
  sed -e "s/@VERSION@/$version/g" -e "s/@COMMIT@/$TOKENTRACE_COMMIT/g" packaging/release-notes.md
  echo
  echo "| wheel | size | SHA-256 |"
  echo "| --- | --- | --- |"
  while read -r sum name; do
    echo "| \`$name\` | $(du -k "$out/$name" | cut -f1) KiB | \`$sum\` |"
  done < "$out/SHA256SUMS"
} > "$out/RELEASE-NOTES.md"
cat "$out/RELEASE-NOTES.md"
