#!/usr/bin/env bash
# `tokentrace site` at fleet scale: N small runs (copies of fixtures/runs/sim-completions,
# 8 cells each, under 50 models × N/50 engine releases, so 50 groups), published from
# nothing, then again with nothing changed, then with one run added: wall time and
# peak RSS of each build. Usage: bench/site_scale.sh [N] (default 1000). Builds the
# release binary first unless BIN names one (BIN=.../debug/tokentrace NO_BUILD=1).
set -euo pipefail
n=${1:-1000}
if [ -z "${NO_BUILD:-}" ]; then cargo build --release --quiet -p tokentrace; fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/tokentrace}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work/fleet" "$n" <<'PY'
import json, pathlib, shutil, sys
out, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
src = pathlib.Path("fixtures/runs/sim-completions")
for i in range(n):
    model, release = i % 50, i // 50
    run = out / f"model-{model:02d}" / f"release-{release:03d}"
    shutil.copytree(src, run)
    m = json.loads((run / "manifest.json").read_text())
    m["model"] = f"org/model-{model:02d}"
    m["run_id"] = f"m{model:02d}-r{release:03d}"
    m["engine"]["version"] = f"0.{release}.0"
    m["clock"]["utc_at_zero"] = f"2026-{1 + release // 28:02d}-{1 + release % 28:02d}T10:00:00.000000000Z"
    (run / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
PY
echo "fleet: $n runs, $(du -sm "$work/fleet" | cut -f1) MiB"
measure() {
  local what=$1; shift
  /usr/bin/time -f "$what: %e s wall, %M KiB peak RSS" "$@"
}
measure "first build ($n runs)" "$bin" site "$work/fleet" --out "$work/site"
measure "again, nothing changed" "$bin" site "$work/fleet" --out "$work/site"
python3 - "$work/fleet" <<'PY'
import json, pathlib, shutil, sys
out = pathlib.Path(sys.argv[1])
run = out / "model-07" / "release-new"
shutil.copytree("fixtures/runs/sim-completions", run)
m = json.loads((run / "manifest.json").read_text())
m["model"], m["run_id"], m["engine"]["version"] = "org/model-07", "m07-new", "1.0.0"
m["clock"]["utc_at_zero"] = "2027-06-01T10:00:00.000000000Z"
(run / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
PY
measure "one run added" "$bin" site "$work/fleet" --out "$work/site"
echo "site: $(find "$work/site" -type f | wc -l) files, $(du -sm "$work/site" | cut -f1) MiB, index $(wc -c < "$work/site/index.html") bytes"
