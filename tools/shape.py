#!/usr/bin/env python3
"""Check the shape issue 19 and issue 32 ask of the code, without building it.

  python3 tools/shape.py [--max-lines 60] [--allow-long] [--self-test]

Prints, per crate, its files, its floors (the longest chain of files each
importing the next: how tall the crate stands) and the tallest chain; then
the import cycles between files of one crate, the functions longer than
--max-lines outside tests, and the binary's (crates/cli) non-test lines
with and without flags/, the command-line table. Exits 1 on an import cycle
or (unless --allow-long) on a long function. A file and its own ancestor
module referring to each other is Rust's usual shape, not a cycle.

Text-based on purpose (braces and paths), so it needs no toolchain; it
skips `#[cfg(test)]` modules at the end of a file and crates/*/tests/.
`--self-test` runs the resolver's unit tests (tools/test_shape.py).
"""
import argparse
import os
import re
import signal
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")
TOKEN = re.compile(r"::|[A-Za-z_]\w*|\S")
PATH_HEADS = ("crate", "super", "self")
ROOT_FILES = ("mod.rs", "lib.rs", "main.rs")


def source_files(root):
    for crate in sorted(os.listdir(os.path.join(root, "crates"))):
        src = os.path.join(root, "crates", crate, "src")
        for dirpath, dirs, files in os.walk(src):
            dirs.sort()
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
    """The module a file is: `a/b.rs` and `a/b/mod.rs` are both `a::b`."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def tokens(text):
    # Doc links and string contents name modules without depending on them.
    code = "\n".join(strip_strings(line) for line in text.split("\n"))
    return TOKEN.findall(code)


def use_tree(toks, i, prefix, out):
    """Parses one use tree at toks[i] (after `use`, or inside its braces),
    appending each full path to out; returns the index after the tree."""
    path = list(prefix)
    while i < len(toks):
        tok = toks[i]
        if tok == "{":
            i += 1
            while i < len(toks) and toks[i] != "}":
                i = use_tree(toks, i, path, out)
                if i < len(toks) and toks[i] == ",":
                    i += 1
            return i + 1
        if tok == "self" and path:
            out.append(list(path))  # `a::{self, b}` names `a` itself
            return i + 1
        if re.match(r"\w", tok):
            path.append(tok)
            i += 1
            if i < len(toks) and toks[i] == "::":
                i += 1
                continue
            if i + 1 < len(toks) and toks[i] == "as":
                i += 2
            out.append(path)
            return i
        if tok == "*":
            out.append(path)
            return i + 1
        break
    if path:
        out.append(path)
    return i


def scoped_paths(text, module):
    """Every `crate::`/`super::`/`self::` path in a file's code, with the
    module it is written in: the file's own, or an inline `mod x { }` in it."""
    toks = tokens(text)
    scope, depth, opens, found, i = list(module), 0, [], [], 0
    while i < len(toks):
        tok = toks[i]
        if tok == "mod" and i + 2 < len(toks) and toks[i + 2] == "{":
            scope.append(toks[i + 1])
            opens.append(depth)
            depth += 1
            i += 3
            continue
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if opens and opens[-1] == depth:
                opens.pop()
                scope.pop()
        elif tok == "use":
            paths = []
            i = use_tree(toks, i + 1, [], paths)
            found += [(tuple(scope), p) for p in paths if p and p[0] in PATH_HEADS]
            continue
        elif tok in PATH_HEADS and i + 2 < len(toks) and toks[i + 1] == "::":
            visibility = i >= 2 and toks[i - 1] == "in" and toks[i - 2] == "("
            path, j = [tok], i + 1
            while j + 1 < len(toks) and toks[j] == "::" and re.match(r"\w", toks[j + 1]):
                path.append(toks[j + 1])
                j += 2
            if not visibility:  # `pub(in crate::a)` limits, it does not use
                found.append((tuple(scope), path))
            i = j
            continue
        i += 1
    return found


def resolve(scope, path, modules):
    """The file (module) a path written in `scope` lands in: the longest
    prefix of its absolute form that is a file of the crate, or None."""
    head, rest = path[0], list(path[1:])
    if head == "crate":
        base = ()
    elif head == "self":
        base = scope
    else:  # `super` is the parent of the module the path is written in
        base = scope[:-1]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    target = tuple(base) + tuple(rest)
    while target and target not in modules:
        target = target[:-1]
    return target if target in modules else None


def crate_edges(src, paths):
    """module -> the modules (files) of the same crate it imports."""
    modules = {module_of(src, p): p for p in paths}
    edges = {m: set() for m in modules}
    for module, path in modules.items():
        for scope, used in scoped_paths("\n".join(non_test_lines(path)), module):
            target = resolve(scope, used, modules)
            if target is not None and target != module:
                edges[module].add(target)
    return edges


def crates_of(root):
    crates = {}
    for crate, path in source_files(root):
        crates.setdefault(crate, []).append(path)
    return {
        crate: crate_edges(os.path.join(root, "crates", crate, "src"), paths)
        for crate, paths in crates.items()
    }


def related(a, b):
    return a[: len(b)] == b or b[: len(a)] == a


def without_ancestors(edges):
    """The graph without the edges between a module and an ancestor of it."""
    return {m: {t for t in ts if not related(m, t)} for m, ts in edges.items()}


def strongly_connected(graph):
    """Tarjan's groups, iteratively (a deep crate must not hit the
    recursion limit): each a list of modules, in reverse topological order."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                groups.append(group)
    return groups


def name(module):
    return "::".join(module) or "(root)"


def cycles(edges):
    groups = strongly_connected(without_ancestors(edges))
    return [sorted(name(m) for m in g) for g in groups if len(g) > 1]


def floors(edges):
    """How tall the crate stands: the longest chain of files each importing
    the next (a file importing nothing is floor 1; a cycle counts as one
    floor), and that chain's files, top first."""
    graph = without_ancestors(edges)
    height, below = {}, {}
    for group in strongly_connected(graph):  # dependencies come first
        members = set(group)
        best, best_next = 0, None
        for node in sorted(group):
            for nxt in sorted(graph[node] - members):
                if height[nxt] > best:
                    best, best_next = height[nxt], nxt
        for node in group:
            height[node], below[node] = best + 1, best_next
    if not height:
        return 0, []
    top = max(sorted(height), key=lambda m: height[m])
    chain = [top]
    while below[chain[-1]] is not None:
        chain.append(below[chain[-1]])
    return height[top], [name(m) for m in chain]


def report(root, max_lines, allow_long, out=sys.stdout):
    """Prints the shape of the workspace at root; returns the exit status."""
    crates = crates_of(root)
    print("crate       files  floors  tallest chain (each file imports the next)", file=out)
    for crate, edges in crates.items():
        height, chain = floors(edges)
        print(f"  {crate:10} {len(edges):5} {height:7}  {' -> '.join(chain)}", file=out)

    found = [(crate, group) for crate, edges in crates.items() for group in cycles(edges)]
    print(f"import cycles between files of a crate: {len(found)}", file=out)
    for crate, group in found:
        print(f"  {crate}: {' <-> '.join(group)}", file=out)

    long = []
    for _, path in source_files(root):
        long += long_functions(path, max_lines)
    print(f"functions over {max_lines} lines (non-test): {len(long)}", file=out)
    for length, path, line, fn_name in sorted(long, reverse=True):
        print(f"  {length:4} {os.path.relpath(path, root)}:{line} {fn_name}", file=out)

    cli = os.path.join(root, "crates", "cli", "src")
    total = flags = 0
    for _, path in source_files(root):
        if path.startswith(cli + os.sep):
            n = len(non_test_lines(path))
            total += n
            if os.sep + "flags" + os.sep in path:
                flags += n
    print(f"crates/cli non-test lines: {total} ({total - flags} without flags/, the command-line table)", file=out)
    return 1 if (long and not allow_long) or found else 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-lines", type=int, default=60)
    parser.add_argument("--allow-long", action="store_true",
                        help="list long functions without failing (import cycles still fail)")
    parser.add_argument("--self-test", action="store_true",
                        help="run the resolver's unit tests (tools/test_shape.py) instead")
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    if args.self_test:
        import unittest
        suite = unittest.defaultTestLoader.discover(here, pattern="test_shape.py")
        return 0 if unittest.TextTestRunner(verbosity=1).run(suite).wasSuccessful() else 1
    return report(args.root or os.path.dirname(here), args.max_lines, args.allow_long)


if __name__ == "__main__":
    # Under `| head`, end quietly as other Unix tools do (killed by SIGPIPE).
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
