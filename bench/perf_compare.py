#!/usr/bin/env python3
"""Helper for perf_compare.sh: parse both tools' outputs and report.

Kept apart from the shell script because JSON and statistics are clumsy in
bash. Standard library only, so it runs on a bare Debian python3. Helpers
shared with mem_fs_compare.py live in benchlib.py, beside this file.

Subcommands:
  first-cpu                 the lowest CPU this process may run on (the CPU
                            osprobe pins to: PinGuard::first_allowed)
  perf-ns                   stdin: `perf bench` output; prints usecs/op in ns
  osprobe-ns EXP METRIC [K=V ...]
                            stdin: an osprobe run document (--json); prints
                            the p50 and the mean of the matching measurement,
                            in ns, separated by a space
  report FILE [--json]      FILE: the records perf_compare.sh wrote; prints
                            the comparison table, or JSON with --json
"""

import re
import statistics
import sys

# benchlib.py sits beside this file (the script's directory is on sys.path);
# leave no __pycache__ behind in the repository.
sys.dont_write_bytecode = True
from benchlib import (fail, find_measurement, first_cpu, load_osprobe_doc,
                      report as report_records, spread_pct, table_lines)


def perf_ns():
    text = sys.stdin.read()
    # perf bench prints e.g. "       6.781910 usecs/op"; the figure is the
    # total wall time divided by the loop count.
    match = re.search(r"^\s*([0-9.]+)\s+usecs/op\s*$", text, re.MULTILINE)
    if not match:
        fail("no 'usecs/op' line in perf's output:\n" + text)
    print(f"{float(match.group(1)) * 1000.0:.3f}")


def osprobe_ns(experiment, metric, pairs):
    m = find_measurement(load_osprobe_doc(sys.stdin), experiment, metric, pairs, "ns")
    # The p50 is osprobe's figure. The mean (of equal batches, so total time
    # / total operations) is what perf's total wall time / loops corresponds
    # to; it is kept to explain disagreements.
    print(f"{m['summary']['p50']:.3f} {m['summary']['mean']:.3f}")


def compare(meta, pairs, samples):
    tolerance = float(meta.pop("tolerance_pct", 15))
    rows = []
    for p in pairs:
        perf = samples.get((p["name"], "perf"), [])
        osp = samples.get((p["name"], "osprobe"), [])
        if not perf or not osp:
            fail(f"no samples for {p['name']}")
        osp_mean = samples.get((p["name"], "osprobe_mean"), [])
        perf_med, osp_med = statistics.median(perf), statistics.median(osp)
        osp_mean_med = statistics.median(osp_mean) if osp_mean else None
        ratio = osp_med / perf_med
        perf_spread, osp_spread = spread_pct(perf), spread_pct(osp)
        rows.append({
            **p,
            "perf_runs_ns": perf,
            "osprobe_runs_ns": osp,
            "perf_median_ns": perf_med,
            "osprobe_median_ns": osp_med,
            "ratio": ratio,
            "within_tolerance": abs(ratio - 1.0) <= tolerance / 100.0,
            "perf_spread_pct": perf_spread,
            "osprobe_spread_pct": osp_spread,
            "osprobe_spread_le_perf": osp_spread <= perf_spread,
            # Informational: osprobe's mean (perf's own statistic) vs perf.
            "osprobe_mean_runs_ns": osp_mean,
            "osprobe_mean_median_ns": osp_mean_med,
            "mean_ratio": osp_mean_med / perf_med if osp_mean_med else None,
        })
    return tolerance, rows


def print_table(meta, tolerance, rows):
    tol = f"{tolerance:g}%"
    header = ["comparison", "perf ns", "osprobe ns", "osp/perf", "verdict",
              "perf spread", "osp spread", "osp spread <= perf", "osp mean/perf"]
    body = [[
        r["name"],
        f"{r['perf_median_ns']:.1f}",
        f"{r['osprobe_median_ns']:.1f}",
        f"{r['ratio']:.3f}",
        f"within {tol}" if r["within_tolerance"] else f"OUTSIDE {tol}",
        f"{r['perf_spread_pct']:.1f}%",
        f"{r['osprobe_spread_pct']:.1f}%",
        "yes" if r["osprobe_spread_le_perf"] else "no",
        f"{r['mean_ratio']:.3f}" if r["mean_ratio"] else "-",
    ] for r in rows]
    print(f"osprobe vs perf bench: {meta.get('runs')} run(s) of each, alternating; "
          f"medians of per-run figures (osprobe: p50, perf: usecs/op)")
    print(f"perf: {meta.get('perf_version')} ({meta.get('perf_binary')}); "
          f"osprobe {meta.get('osprobe_version')}; kernel {meta.get('kernel')}; "
          f"pipe pairs pinned to CPU {meta.get('cpu')}")
    print()
    for text in table_lines(header, body):
        print(text)
    print()
    print("spread = (max - min) / median over the runs. osp mean/perf is information only:")
    print("osprobe's mean (which, like perf's total time / loops, counts every interruption)")
    print("over perf's figure; the verdict uses osprobe's p50.")
    for r in rows:
        print(f"{r['name']}:")
        print(f"  perf    {r['perf_command']}")
        print("          runs ns: " + " ".join(f"{v:.1f}" for v in r["perf_runs_ns"]))
        print(f"  osprobe {r['osprobe_command']}")
        print("          runs ns: " + " ".join(f"{v:.1f}" for v in r["osprobe_runs_ns"])
              + "  (p50)")
        if r["osprobe_mean_runs_ns"]:
            print("                   " + " ".join(f"{v:.1f}" for v in r["osprobe_mean_runs_ns"])
                  + "  (mean)")


def report(path, as_json):
    report_records(path, as_json, ("perf_command", "osprobe_command"), compare, print_table)


def main(argv):
    if not argv:
        fail("usage: perf_compare.py first-cpu|perf-ns|osprobe-ns|report ...")
    cmd, args = argv[0], argv[1:]
    if cmd == "first-cpu":
        print(first_cpu())
    elif cmd == "perf-ns":
        perf_ns()
    elif cmd == "osprobe-ns" and len(args) >= 2:
        osprobe_ns(args[0], args[1], args[2:])
    elif cmd == "report" and args:
        report(args[0], "--json" in args[1:])
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
