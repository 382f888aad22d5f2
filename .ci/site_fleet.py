"""Builds a fleet of about 20 runs for the site test (`tokentrace site`, checked by
site.py), from the fixtures only: no network, no GPU.

usage: site_fleet.py OUT_DIR BIN   (OUT_DIR must not exist or be empty; BIN is tokentrace)

- copies of fixtures/runs/sim-chat, sim-completions and sim-open whose manifest.json
  names another engine version (vLLM 0.30.0, 0.31.0, 0.32.0), a later start per version,
  their own run id and, for some, other hardware or another model: model × hardware
  groups of 2 to 4 runs over time;
- the reference tool's results files imported (`BIN import`), and the tokentrace run
  recorded beside one of them (fixtures/refbench/0.4.18-sim-tokentrace-run);
- one launch command naming absolute paths under OUT_DIR (for `site --public`);
- a run hostile to HTML (hostile.py: its model name and answers), and a copy of it with
  a launch command full of quotes and a hardware text holding a script element.

Every run is then checked with `BIN check` (these fixture runs predate checksums and
run digests, so an edited manifest.json stays sound). Prints the number of runs.
Needs pyarrow (for hostile.py), in the Python that runs this.
"""

import json
import pathlib
import shutil
import subprocess
import sys

CI = pathlib.Path(__file__).resolve().parent
REPO = CI.parent
RUNS = REPO / "fixtures" / "runs"
REFBENCH = REPO / "fixtures" / "refbench"

# Engine versions, each released (and benchmarked) a week after the one before.
VERSIONS = {"0.30.0": "2026-12-01", "0.31.0": "2026-12-08", "0.32.0": "2026-12-15"}

H100 = "NVIDIA H100 ×8"
H200 = "NVIDIA H200 ×4"
L40S = "NVIDIA L40S ×2"
LOOPBACK = None  # the fixture's own hardware text ("loopback, 2 vCPU")

# (folder name, fixture, engine version, hour of the day, hardware, model): the model
# None keeps the fixture's ("sim-golden").
COPIES = [
    # sim-golden on 8 H100s: one run per version, and a rerun of the latest.
    ("h100-completions-0.30.0", "sim-completions", "0.30.0", 9, H100, None),
    ("h100-completions-0.31.0", "sim-completions", "0.31.0", 9, H100, None),
    ("h100-completions-0.32.0", "sim-completions", "0.32.0", 9, H100, None),
    ("h100-completions-0.32.0-rerun", "sim-completions", "0.32.0", 15, H100, None),
    # sim-golden on 4 H200s: chat, one run per version.
    ("h200-chat-0.30.0", "sim-chat", "0.30.0", 10, H200, None),
    ("h200-chat-0.31.0", "sim-chat", "0.31.0", 10, H200, None),
    ("h200-chat-0.32.0", "sim-chat", "0.32.0", 10, H200, None),
    # sim-golden on the fixtures' own hardware: burst and rate cells per version.
    ("loopback-open-0.30.0", "sim-open", "0.30.0", 11, LOOPBACK, None),
    ("loopback-open-0.31.0", "sim-open", "0.31.0", 11, LOOPBACK, None),
    ("loopback-open-0.32.0", "sim-open", "0.32.0", 11, LOOPBACK, None),
    # Another model on 2 L40S: three runs, two endpoints and the open-loop cells.
    ("l40s-qwen-chat-0.30.0", "sim-chat", "0.30.0", 12, L40S, "Qwen/Qwen3-8B"),
    ("l40s-qwen-completions-0.31.0", "sim-completions", "0.31.0", 12, L40S, "Qwen/Qwen3-8B"),
    ("l40s-qwen-open-0.32.0", "sim-open", "0.32.0", 12, L40S, "Qwen/Qwen3-8B"),
]

IMPORTS = [
    "0.4.18-sim.json",
    "0.4.18-sim-burst.json",
    "0.4.18-mock-complete.json",
    "0.6.0-built-from-code.json",
]

# The run whose launch command names absolute paths under OUT_DIR.
PATHS_IN = "l40s-qwen-open-0.32.0"

HOSTILE_LAUNCH = """vllm serve "org/model" --chat-template '{{ "<b>" }}'"""
HOSTILE_HARDWARE = "NVIDIA H100 <script>alert(1)</script>"


def read_manifest(run):
    return json.loads((run / "manifest.json").read_text())


def write_manifest(run, m):
    (run / "manifest.json").write_text(json.dumps(m, indent=2, ensure_ascii=False) + "\n")


def restart(m, day, hour, minute):
    """Moves the run's start to `day` at `hour:minute` (keeping the fixture's seconds and
    nanoseconds) and names the run after it, as the recorder does."""
    old = m["clock"]["utc_at_zero"]  # "2026-11-30T09:28:09.678835447Z"
    seconds = old[17:-1]  # "09.678835447"
    utc = f"{day}T{hour:02d}:{minute:02d}:{seconds}Z"
    m["clock"]["utc_at_zero"] = utc
    m["run_id"] = "run-" + utc.replace(":", "").replace(".", "")


def copy_run(src, dst):
    if dst.exists():
        raise SystemExit(f"site_fleet: {dst} exists")
    shutil.copytree(src, dst)


def sim_copies(out):
    made = []
    for n, (name, fixture, version, hour, hardware, model) in enumerate(COPIES):
        dst = out / "recorded" / name
        copy_run(RUNS / fixture, dst)
        m = read_manifest(dst)
        m["engine"]["name"] = "vllm"
        m["engine"]["version"] = version
        details = m["engine"].get("details") or {}
        if "engine" in details:
            details["engine"] = "vllm"
        if "version" in details:
            details["version"] = version
        for fact in m.get("facts", []):
            if fact["key"] == "engine.version":
                fact["value"] = version
        restart(m, VERSIONS[version], hour, n)
        if hardware is not None:
            m["hardware"] = hardware
            if "describe.hardware" in details:
                details["describe.hardware"] = hardware
        if model is not None:
            m["model"] = model
            if m.get("launch_command"):
                m["launch_command"] = m["launch_command"].replace("sim-golden", model)
        if name == PATHS_IN:
            # Paths of the machine that ran it (here, OUT_DIR's): `site --public` drops them.
            m["launch_command"] += f" --download-dir {out.resolve()}/hf-cache --chat-template {out.resolve()}/templates/chat.jinja"
        write_manifest(dst, m)
        made.append(dst)
    return made


def imported(out, bin):
    made = []
    for f in IMPORTS:
        dst = out / "imported" / f.removesuffix(".json")
        subprocess.run([bin, "import", str(REFBENCH / f), "--out", str(dst)], check=True,
                       stdout=subprocess.DEVNULL)
        made.append(dst)
    dst = out / "refbench" / "0.4.18-sim-tokentrace-run"
    copy_run(REFBENCH / "0.4.18-sim-tokentrace-run", dst)
    made.append(dst)
    return made


def hostile(out):
    dst = out / "hostile" / "model"
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(CI / "hostile.py"), str(RUNS / "sim-completions"), str(dst)],
                   check=True, stdout=subprocess.DEVNULL)
    # A further copy: quotes in the launch command, a script element in the hardware.
    dst2 = out / "hostile" / "launch-and-hardware"
    copy_run(dst, dst2)
    m = read_manifest(dst2)
    m["launch_command"] = HOSTILE_LAUNCH
    m["hardware"] = HOSTILE_HARDWARE
    restart(m, "2026-12-16", 8, 0)
    write_manifest(dst2, m)
    return [dst, dst2]


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    out, bin = pathlib.Path(sys.argv[1]), sys.argv[2]
    if out.exists() and any(out.iterdir()):
        print(f"site_fleet: {out} is not empty", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    runs = sim_copies(out) + imported(out, bin) + hostile(out)
    ids = {}
    bad = []
    for run in runs:
        rid = read_manifest(run)["run_id"]
        if rid in ids:
            bad.append(f"{run}: run id {rid} is also {ids[rid]}'s")
        ids[rid] = run
        check = subprocess.run([bin, "check", str(run)], capture_output=True, text=True)
        if check.returncode != 0:
            bad.append(f"{run}: `check` exited {check.returncode}:\n{check.stdout}{check.stderr}")
    for b in bad:
        print(f"site_fleet: {b}", file=sys.stderr)
    if bad:
        return 1
    print(f"site_fleet: {len(runs)} runs in {out}, each sound (`tokentrace check`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
