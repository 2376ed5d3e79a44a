#!/usr/bin/env python3
"""File-level dependency cycles inside each workspace crate.

Nodes: the src/ files reached from lib.rs, main.rs, bin/*.rs through `mod` declarations
(`#[path]` honoured; `#[cfg(test)]` items and `//` comments ignored). Edge A -> B: file A names
module B (`use` trees; `crate::`, `super::`, `self::`, child-module paths in code), resolved to the
deepest module that is a file. A parent's `mod child;` is no edge. Strongly connected components
of 2+ files are cycles; exit 1 on one not wholly under ALLOWED. `--report` prints all, exits 0.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = ("core/src/plan/",)

ITEM_END = re.compile(r"[;},]$")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod (\w+)\s*;")
MOD_OPEN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?mod (\w+)\s*\{")
USE_START = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(.*)")
PATH_ATTR = re.compile(r'^\s*#\[path\s*=\s*"([^"]+)"\]')
CODE_PATH = re.compile(r"(?<![\w:])\$?([a-z_]\w*(?:::\w+)+)")


def indent(line):
    return len(line) - len(line.lstrip())


def item_end(raw, i, ind):
    """Index of the last line of the item starting at raw[i], an item indented by `ind`."""
    block = raw[i][1].endswith("{")  # a body: ends at its `}`, not at a `;` inside a raw string
    if ITEM_END.search(raw[i][1]):
        return i
    while i + 1 < len(raw):
        i += 1
        line = raw[i][1]
        if line.strip() and indent(line) == ind and (line.lstrip()[0] == "}" or not block and line.endswith(";")):
            break
    return i


def clean_lines(text):
    """(lineno, line) pairs without comments, blank lines and `#[cfg(test)]` items."""
    raw = [(n, re.sub(r"(^|\s)//.*", "", l).rstrip()) for n, l in enumerate(text.splitlines(), 1)]
    out, i = [], 0
    while i < len(raw):
        line = raw[i][1]
        if line.strip() == "#[cfg(test)]":
            i += 1
            while i < len(raw) and raw[i][1].lstrip().startswith("#["):
                i += 1  # further attributes of the same item
            i = item_end(raw, i, indent(line)) if i < len(raw) else i
        elif line.strip():
            out.append(raw[i])
        i += 1
    return out


def annotate(lines, modpath):
    """Attach to each line the module it is in (file module plus enclosing inline modules)."""
    stack, out = [], []
    for n, line in lines:
        if stack and line == " " * stack[-1][0] + "}":
            stack.pop()
        out.append((n, line, modpath + tuple(name for _, name in stack)))
        m = MOD_OPEN.match(line)
        if m and not line.rstrip().endswith("}"):
            stack.append((len(m.group(1)), m.group(2)))
    return out


def child_file(parent, name, attr_path, owns_dir):
    if attr_path:
        return parent.parent / attr_path
    base = parent.parent if owns_dir else parent.with_suffix("")
    return next((c for c in (base / f"{name}.rs", base / name / "mod.rs") if c.exists()), None)


def walk_crate_root(root_file):
    """Module tree of one crate root: {modpath: file}, {file: annotated lines}, known modpaths."""
    files, parsed, known, todo = {}, {}, set(), [((), root_file, True)]
    while todo:
        modpath, path, owns_dir = todo.pop()
        files[modpath], lines = path, annotate(clean_lines(path.read_text()), modpath)
        parsed[path] = lines
        for k, (n, line, mp) in enumerate(lines):
            known.add(mp)
            m = MOD_DECL.match(line)
            if not m or mp != modpath:
                continue  # declarations inside inline modules are not followed
            attr = next((a.group(1) for _, l, _ in reversed(lines[max(0, k - 3):k])
                         if (a := PATH_ATTR.match(l))), None)
            child = child_file(path, m.group(1), attr, owns_dir)
            if child:  # a mod.rs or #[path] file owns its directory: its children sit beside it
                todo.append((modpath + (m.group(1),), child, child.name == "mod.rs" or attr is not None))
    known |= set(files)
    return files, parsed, known


def flatten_use(tree, prefix=""):
    """`a::{b, c::{self, d as e}}` -> ['a::b', 'a::c', 'a::c::d']."""
    tree = re.sub(r"\s+", " ", tree).strip().rstrip(";").strip()
    m = re.match(r"^(.*?)(?:::)?\s*\{(.*)\}$", tree, re.S)
    if m:
        base = "::".join(p for p in (prefix, m.group(1).strip()) if p)
        parts, depth, cur = [], 0, ""
        for ch in m.group(2):
            depth += (ch == "{") - (ch == "}")
            if ch == "," and depth == 0:
                parts, cur = parts + [cur], ""
            else:
                cur += ch
        return [p for part in parts + [cur] if part.strip() for p in flatten_use(part, base)]
    tree = re.sub(r" as \w+$", "", tree)
    return [re.sub(r"::self$", "", "::".join(p for p in (prefix, tree) if p))]


def references(lines):
    """(lineno, path text, enclosing module) for every path the file's code names."""
    i = 0
    while i < len(lines):
        n, line, mp = lines[i]
        line = re.sub(r"pub\(in [^)]*\)", "pub", line)
        m = USE_START.match(line)
        if m:
            stmt = m.group(1)
            while not stmt.rstrip().endswith(";") and i + 1 < len(lines):
                i += 1
                stmt += " " + lines[i][1]
            yield from ((n, p, mp) for p in flatten_use(stmt))
        else:
            yield from ((n, p.group(1), mp) for p in CODE_PATH.finditer(line))
        i += 1


def resolve(path, cur, files, known):
    segs = path.split("::")
    if segs[0] == "crate":
        mod, segs = [], segs[1:]
    elif segs[0] in ("super", "self") or cur + (segs[0],) in known:
        mod = list(cur)
    else:
        return None  # an extern crate, a type, an enum...
    for s in segs:
        if s == "super":
            mod = mod[:-1]
        elif s not in ("self", "*"):
            mod.append(s)
    return next((files[tuple(mod[:k])] for k in range(len(mod), -1, -1) if tuple(mod[:k]) in files), None)


def crate_graph(crate_dir):
    """{file: {target file: (lineno, path)}} over all roots of a crate."""
    src, graph = crate_dir / "src", {}
    for root in [src / "lib.rs", src / "main.rs", *sorted(src.glob("bin/*.rs"))]:
        if not root.exists():
            continue
        files, parsed, known = walk_crate_root(root)
        for path, lines in parsed.items():
            edges = graph.setdefault(path, {})
            for n, ref, mp in references(lines):
                target = resolve(ref, mp, files, known)
                if target and target != path and target not in edges:
                    edges[target] = (n, ref)
    return graph


def components(graph):
    """Tarjan's strongly connected components with more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


KNOWN = ROOT / "scripts" / "file-cycles.txt"


def read_known():
    """The recorded cycles: one per line, `crate: file file ...`."""
    if not KNOWN.exists():
        return set()
    lines = [l.strip() for l in KNOWN.read_text().splitlines()]
    return {l for l in lines if l and not l.startswith("#")}


def write_known(found):
    header = (
        "# File cycles the tree still has, one per line (crate: its files). scripts/check-cycles.py\n"
        "# fails when a cycle appears or grows, and when one here is gone or shrank (then delete or\n"
        "# rewrite its line: `scripts/check-cycles.py --write`). The list only ever gets shorter.\n"
    )
    KNOWN.write_text(header + "".join(f"{c}\n" for c in sorted(found)))


def part_of(cycle, recorded):
    """True when `cycle` (a `crate: files` line) is within the recorded one of the same crate."""
    (crate, files), (known_crate, known_files) = (l.split(": ", 1) for l in (cycle, recorded))
    return crate == known_crate and set(files.split()) <= set(known_files.split())


def main():
    args = sys.argv[1:]
    report, write = "--report" in args, "--write" in args
    members = re.findall(r'"([^"]+)"', re.search(r"(?m)^members = \[(.*?)\]", (ROOT / "Cargo.toml").read_text(), re.S)[1])
    rel = lambda p: str(p.relative_to(ROOT))
    nfiles, found = 0, set()
    for member in members:
        graph = crate_graph(ROOT / member)
        nfiles += len(graph)
        for comp in components(graph):
            allowed = all(rel(f).startswith(ALLOWED) for f in comp)
            if not allowed:
                found.add(f"{member}: {' '.join(rel(f) for f in comp)}")
            if report:
                print(f"{member}: cycle of {len(comp)} files{' (allowed)' if allowed else ''}")
                for f in comp:
                    print(f"  {rel(f)}")
                    for t, (n, ref) in sorted(graph[f].items()):
                        if t in comp:
                            print(f"    -> {rel(t)}  via {ref} (line {n})")
    if write:
        write_known(found)
    known = read_known()
    new, gone = sorted(found - known), sorted(known - found)
    for c in new:
        if any(part_of(c, k) for k in known):
            print(f"cycle shrunk or split from a recorded one (record it with --write): {c}")
        else:
            print(f"new or grown cycle (break it; `--report` shows its edges): {c}")
    for c in gone:
        print(f"recorded cycle gone or shrunk (update {rel(KNOWN)} with --write): {c}")
    status = "ok" if not new and not gone else "changed"
    print(
        f"file cycles: {status} ({nfiles} files in {len(members)} crates; {len(found)} recorded cycles left;"
        f" allowed: {', '.join(a.rstrip('/') for a in ALLOWED)})"
    )
    return 0 if report or (not new and not gone) else 1


if __name__ == "__main__":
    sys.exit(main())
