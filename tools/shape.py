#!/usr/bin/env python3
"""Check the shape issue 19 asks of the code, without building it.

  python3 tools/shape.py [--max-lines 80] [--allow-long]

Prints three things and exits 1 if the first (unless --allow-long) or the
third is not empty:
  1. functions longer than --max-lines outside tests (a `match` that only
     dispatches still counts: judge those by eye);
  2. the binary's (crates/cli) non-test lines, with and without flags/,
     the command-line table;
  3. import cycles between files of one crate (a file and its own parent
     module referring to each other is Rust's usual shape, not a cycle).

Text-based on purpose (braces and paths), so it needs no toolchain; it
skips `#[cfg(test)]` modules at the end of a file and crates/*/tests/.
"""
import argparse
import os
import re
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")


def source_files(root):
    for crate in sorted(os.listdir(os.path.join(root, "crates"))):
        src = os.path.join(root, "crates", crate, "src")
        for dirpath, _, files in os.walk(src):
            for name in sorted(files):
                if name.endswith(".rs"):
                    yield crate, os.path.join(dirpath, name)


def non_test_lines(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            return lines[:i]
    return lines


def strip_strings(line):
    # Braces inside string and char literals and comments must not count.
    line = re.sub(r"//.*", "", line)
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return re.sub(r"'(\\.|[^'\\])'", "''", line)


def long_functions(path, max_lines):
    lines = non_test_lines(path)
    found, i = [], 0
    while i < len(lines):
        match = FN.match(lines[i])
        if not match:
            i += 1
            continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            code = strip_strings(lines[j])
            if not opened and code.rstrip().endswith(";"):
                break  # a declaration without a body (trait item, extern)
            for ch in code:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
            if opened and depth <= 0:
                break
            j += 1
        length = j - i + 1
        if opened and length > max_lines:
            found.append((length, path, i + 1, match.group(7)))
        i = j + 1 if opened else i + 1
    return found


def module_of(src, path):
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def import_cycles(root):
    cycles = []
    crates = {}
    for crate, path in source_files(root):
        crates.setdefault(crate, []).append(path)
    for crate, paths in crates.items():
        src = os.path.join(root, "crates", crate, "src")
        modules = {module_of(src, p): p for p in paths}
        edges = {m: set() for m in modules}
        for module, path in modules.items():
            is_dir_module = os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs")
            # Doc links name modules without depending on them.
            text = "\n".join(re.sub(r"//.*", "", l) for l in non_test_lines(path))
            for head, tail in PATH.findall(text):
                parts = tail.strip(":").split("::")
                if head == "crate":
                    base = ()
                elif head == "self":
                    base = module if is_dir_module else module[:-1]
                else:  # super
                    base = module[:-1] if is_dir_module else module[:-2]
                    while parts and parts[0] == "super":
                        base, parts = base[:-1], parts[1:]
                target = base + tuple(parts)
                while target and target not in modules:
                    target = target[:-1]
                if target != module and target in modules:
                    edges[module].add(target)
        cycles += [(crate, c) for c in cycles_without_ancestors(edges)]
    return cycles


def cycles_without_ancestors(edges):
    """Strongly connected groups of files, after dropping every edge
    between a module and one of its ancestors."""
    def related(a, b):
        return a[: len(b)] == b or b[: len(a)] == a

    graph = {m: {t for t in ts if not related(m, t)} for m, ts in edges.items()}
    index, low, stack, on_stack, groups, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted("::".join(m) or "(root)" for m in group))

    sys.setrecursionlimit(10000)
    for node in graph:
        if node not in index:
            visit(node)
    return groups


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-lines", type=int, default=80)
    parser.add_argument("--allow-long", action="store_true",
                        help="list long functions without failing (import cycles still fail)")
    args = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    long = []
    for _, path in source_files(root):
        long += long_functions(path, args.max_lines)
    print(f"functions over {args.max_lines} lines (non-test): {len(long)}")
    for length, path, line, name in sorted(long, reverse=True):
        print(f"  {length:4} {os.path.relpath(path, root)}:{line} {name}")

    cli = os.path.join(root, "crates", "cli", "src")
    total = flags = 0
    for _, path in source_files(root):
        if path.startswith(cli + os.sep):
            n = len(non_test_lines(path))
            total += n
            if os.sep + "flags" + os.sep in path:
                flags += n
    print(f"crates/cli non-test lines: {total} ({total - flags} without flags/, the command-line table)")

    cycles = import_cycles(root)
    print(f"import cycles between files of a crate: {len(cycles)}")
    for crate, group in cycles:
        print(f"  {crate}: {' <-> '.join(group)}")
    return 1 if (long and not args.allow_long) or cycles else 0


if __name__ == "__main__":
    sys.exit(main())
