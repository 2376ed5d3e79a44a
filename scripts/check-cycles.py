#!/usr/bin/env python3
"""File-level dependency cycles inside each workspace crate.

Nodes are the src/ files of a crate (reached from lib.rs, main.rs, bin/*.rs through `mod`
declarations, `#[path]` honoured, `#[cfg(test)]` items and comments ignored). An edge A -> B
means file A names an item of module B (`use` trees, `crate::`/`super::`/`self::`/child-module
paths in code), resolved to the deepest module that is a file. A parent's `mod child;` is not
an edge. Strongly connected components of more than one file are cycles; those entirely under
an allowed prefix pass. Exit 1 on any other cycle. `--report` prints every cycle, exits 0.
"""
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = ("core/src/plan/",)

ITEM_END = re.compile(r"[;},]\s*$")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod (\w+)\s*;")
MOD_OPEN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?mod (\w+)\s*\{")
USE_START = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+(.*)")
PATH_ATTR = re.compile(r'^\s*#\[path\s*=\s*"([^"]+)"\]')
CODE_PATH = re.compile(r"(?<![\w:])\$?([a-z_]\w*(?:::\w+)+)")


def indent(line):
    return len(line) - len(line.lstrip())


def clean_lines(text):
    """(lineno, line) pairs without comments and without `#[cfg(test)]` items."""
    raw = [(n, re.sub(r"(^|\s)//.*", "", l).rstrip()) for n, l in enumerate(text.splitlines(), 1)]
    out, i = [], 0
    while i < len(raw):
        n, line = raw[i]
        if line.strip() != "#[cfg(test)]":
            out.append((n, line)) if line.strip() else None
            i += 1
            continue
        ind, i = indent(line), i + 1
        while i < len(raw) and raw[i][1].lstrip().startswith("#["):
            i += 1  # further attributes of the same item
        if i < len(raw) and not ITEM_END.search(raw[i][1]):
            i += 1
            while i < len(raw) and not (indent(raw[i][1]) == ind and raw[i][1].strip()
                                        and (raw[i][1].lstrip()[0] == "}" or raw[i][1].endswith(";"))):
                i += 1
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
    for cand in (base / f"{name}.rs", base / name / "mod.rs"):
        if cand.exists():
            return cand
    return None


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
        stack.append(v), on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop()), on.discard(comp[-1])
            out.append(sorted(comp)) if len(comp) > 1 else None

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    report = "--report" in sys.argv[1:]
    members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    rel = lambda p: str(p.relative_to(ROOT))
    nfiles, bad = 0, 0
    for member in members:
        graph = crate_graph(ROOT / member)
        nfiles += len(graph)
        for comp in components(graph):
            allowed = all(rel(f).startswith(ALLOWED) for f in comp)
            bad += not allowed
            if allowed and not report:
                continue
            print(f"{member}: cycle of {len(comp)} files{' (allowed)' if allowed else ''}")
            for f in comp:
                print(f"  {rel(f)}")
                for t, (n, ref) in sorted(graph[f].items()):
                    if t in comp:
                        print(f"    -> {rel(t)}  via {ref} (line {n})")
    status = "ok" if not bad else f"{bad} disallowed cycle(s)"
    print(f"file cycles: {status} ({nfiles} files in {len(members)} crates; allowed: {', '.join(a.rstrip('/') for a in ALLOWED)})")
    return 0 if report or not bad else 1


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    sys.exit(main())
