#!/usr/bin/env python3
"""Helper for report_render.sh: time `osprobe report` and print the figures
against the targets (render under 1 s, file under 2 MB).

Standard library only, so it runs on a bare Debian python3. Helpers shared
with the other benchmark scripts live in benchlib.py, beside this file.

Subcommands:
  time FILE -- CMD...       run CMD (an `osprobe report ... --out FILE`),
                            print its wall time in seconds, FILE's size in
                            bytes and how many plots (<svg elements) it holds
  report FILE [--json]      FILE: the records report_render.sh wrote; prints
                            the table, or JSON with --json
"""

import json
import os
import statistics
import subprocess
import sys
import time

# benchlib.py sits beside this file; leave no __pycache__ behind.
sys.dont_write_bytecode = True
from benchlib import fail, load_records, table_lines  # noqa: E402


def time_cmd(out, cmd):
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        fail(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    with open(out, encoding="utf-8") as f:
        html = f.read()
    print(f"{elapsed:.4f} {os.path.getsize(out)} {html.count('<svg')}")


def report(path, as_json):
    meta, _, samples = load_records(path, [])
    seconds = samples.get(("render", "seconds"), [])
    if not seconds:
        fail(f"no render samples in {path}")
    size = int(samples[("render", "bytes")][-1])
    plots = int(samples[("render", "plots")][-1])
    target_s = float(meta.get("target_s", 1))
    target_mb = float(meta.get("target_mb", 2))
    result = {
        "run": meta.get("run"),
        "measurements": meta.get("measurements"),
        "plots": plots,
        "render_s_median": statistics.median(seconds),
        "render_s_max": max(seconds),
        "runs": len(seconds),
        "bytes": size,
        "render_ok": max(seconds) < target_s,
        "size_ok": size < target_mb * 1024 * 1024,
    }
    if as_json:
        json.dump({"meta": meta, "result": result}, sys.stdout, indent=2)
        print()
        return
    verdict = lambda ok: "ok" if ok else "OVER TARGET"  # noqa: E731
    rows = [
        ["render (median)", f"{result['render_s_median'] * 1000:.0f} ms",
         f"< {target_s:g} s", verdict(result["render_ok"])],
        ["render (max)", f"{result['render_s_max'] * 1000:.0f} ms", "", ""],
        ["file size", f"{size / 1024:.0f} KiB", f"< {target_mb:g} MB", verdict(result["size_ok"])],
    ]
    print(f"run {result['run']}: {result['measurements']} measurements, {plots} plots, "
          f"{len(seconds)} renders (wall time of `osprobe report`, store read included)")
    for line in table_lines(["what", "measured", "target", "verdict"], rows):
        print(line)


def main(argv):
    if not argv:
        fail("usage: report_render.py time FILE -- CMD... | report FILE [--json]")
    cmd, args = argv[0], argv[1:]
    if cmd == "time" and len(args) >= 3 and args[1] == "--":
        time_cmd(args[0], args[2:])
    elif cmd == "report" and len(args) in (1, 2):
        report(args[0], args[1:] == ["--json"])
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
