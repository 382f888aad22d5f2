#!/usr/bin/env python3
"""Lists the functions in product code (each crate's src/, outside #[cfg(test)]) that are over
150 lines, and fails if there is one. A function's length runs from its `fn` line to the
line of its closing brace; braces in strings, chars and comments are skipped."""
import pathlib
import re
import sys

LIMIT = 150
ROOT = pathlib.Path(__file__).resolve().parent.parent
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")


def strip(line, state):
    """The line with strings, chars and comments blanked; state carries a block comment or
    a raw string across lines."""
    out = []
    i = 0
    while i < len(line):
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), state
            state["block"] = False
            i = end + 2
            continue
        if state["raw"] is not None:
            end = line.find('"' + "#" * state["raw"], i)
            if end < 0:
                return "".join(out), state
            i = end + 1 + state["raw"]
            state["raw"] = None
            continue
        if state["str"]:
            if line[i] == "\\":
                i += 2
                continue
            if line[i] == '"':
                state["str"] = False
            i += 1
            continue
        c = line[i]
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["raw"] = len(m.group(1))
            i += len(m.group(0))
            continue
        if c == '"':
            state["str"] = True
            i += 1
            continue
        m = re.match(r"b?'(\\.[^']*|[^'\\])'", line[i:])
        if m:
            i += len(m.group(0))
            continue
        out.append(c)
        i += 1
    return "".join(out), state


def functions(path):
    lines = path.read_text().splitlines()
    state = {"block": False, "raw": None, "str": False}
    depth = 0
    open_fns = []  # (name, start line, depth at which its body opens)
    found = []
    for n, raw in enumerate(lines, 1):
        if raw.strip() == "#[cfg(test)]":
            break
        code, state = strip(raw, state)
        m = FN.match(code)
        if m:
            open_fns.append([m.group(7), n, None])
        for c in code:
            if c == "{":
                depth += 1
                if open_fns and open_fns[-1][2] is None:
                    open_fns[-1][2] = depth
            elif c == "}":
                if open_fns and open_fns[-1][2] == depth:
                    name, start, _ = open_fns.pop()
                    found.append((n - start + 1, name, start))
                depth -= 1
            elif c == ";" and open_fns and open_fns[-1][2] is None:
                open_fns.pop()  # a declaration without a body
    return found


def main():
    long = []
    for src in sorted(ROOT.glob("*/src")) + [ROOT / "src"]:
        if src.parent.name in ("testkit",):
            continue
        for path in sorted(src.rglob("*.rs")):
            for length, name, start in functions(path):
                if length > LIMIT:
                    long.append((length, f"{path.relative_to(ROOT)}:{start}", name))
    for length, where, name in sorted(long, reverse=True):
        print(f"{length:5} {where} {name}")
    if long:
        print(f"longfns: {len(long)} function(s) over {LIMIT} lines", file=sys.stderr)
        return 1
    print(f"longfns: no function in product code over {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
