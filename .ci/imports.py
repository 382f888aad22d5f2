#!/usr/bin/env python3
"""Import circles between the files of each crate: a file imports another when it names
it through `crate::` (a `use crate::x`, a `use crate::{x, y}` or a path `crate::x::…`), or
a child module through `super::` from a folder's files. Prints every circle (strongly
connected group of more than one file) and exits 1 when there is one; `--graph` prints
each file's imports as well.

    python3 .ci/imports.py [--graph] [CRATE_DIR ...]
"""

import re
import sys
from pathlib import Path

CRATES = ["schemas", "wire", "recorder", "analyzer", "sim", "testkit", "."]


def modules(src: Path) -> dict:
    """Module path (`a::b`) -> file, for every .rs file under src."""
    out = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        out["::".join(parts)] = f
    return out


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def use_paths(text: str, prefix: str):
    """Every path that follows `prefix::` (`crate` or `super`), expanding `{a, b::c}`."""
    out = []
    i = 0
    needle = prefix + "::"
    while True:
        i = text.find(needle, i)
        if i < 0:
            return out
        if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
            i += len(needle)
            continue
        j = i + len(needle)
        out.extend(expand(text, j))
        i = j


def expand(text: str, j: int):
    """The paths starting at text[j]: `a::b`, or a braced group of them."""
    if j < len(text) and text[j] == "{":
        depth, k = 1, j + 1
        while k < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        inner = text[j + 1 : k - 1]
        parts, depth, start = [], 0, 0
        for n, c in enumerate(inner):
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == "," and depth == 0:
                parts.append(inner[start:n])
                start = n + 1
        parts.append(inner[start:])
        out = []
        for p in parts:
            p = p.strip()
            if p:
                out.extend(expand(p, 0) if p.startswith("{") else [first_path(p)])
        return out
    return [first_path(text[j:])]


def first_path(s: str) -> str:
    m = re.match(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*", s.strip())
    return m.group(0) if m else ""


def resolve(path: str, mods: dict):
    """The longest module prefix of `path` that is a file of the crate."""
    parts = path.split("::")
    for n in range(len(parts), 0, -1):
        key = "::".join(parts[:n])
        if key in mods:
            return key
    return None


def graph(src: Path) -> dict:
    mods = modules(src)
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        text = strip_comments(f.read_text(encoding="utf-8"))
        # `mod tests { … }` blocks import the module they test; they are not its imports.
        cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)
        if cut:
            text = text[: cut.start()]
        for p in use_paths(text, "crate"):
            t = resolve(p, mods)
            if t is not None and t != m and t != "":
                edges[m].add(t)
        # `super::x` from a file of a folder module names a sibling.
        parent = m.rsplit("::", 1)[0] if "::" in m else ""
        if f.name != "mod.rs":
            for p in use_paths(text, "super"):
                full = f"{parent}::{p}" if parent else p
                t = resolve(full, mods)
                if t is not None and t != m and t != parent and t != "":
                    edges[m].add(t)
    return edges


def circles(edges: dict):
    """Tarjan's strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(argv):
    show = "--graph" in argv
    dirs = [a for a in argv if not a.startswith("--")] or CRATES
    found = 0
    for d in dirs:
        src = Path(d) / "src"
        if not src.is_dir():
            continue
        edges = graph(src)
        name = Path(d).resolve().name
        if show:
            for m in sorted(edges):
                print(f"{name}: {m or '(root)'} -> {', '.join(sorted(edges[m])) or '-'}")
        for c in circles(edges):
            found += 1
            print(f"{name}: import circle: {' <-> '.join(x or '(root)' for x in c)}")
    if found:
        print(f"imports: {found} circle(s)", file=sys.stderr)
        return 1
    print("imports: no circle within any crate")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
