#!/usr/bin/env python3
"""Helper for time_compare.sh: read osprobe's and cyclictest's results and
report.

Kept apart from the shell script because JSON and percentiles are clumsy in
bash. Standard library only, so it runs on a bare Debian python3. Helpers
shared with the other comparisons live in benchlib.py, beside this file.

Subcommands:
  osprobe-sleep METRIC [K=V ...]
                            stdin: `osprobe bench time.sleep --json`; prints
                            P50 P99 MAX N of the matching measurement (the
                            wake-up error, ns)
  cyclictest FILE           FILE: cyclictest's --json output of a run with
                            -N (nanoseconds) and -h (histogram); prints P50
                            P99 MAX N OVERFLOWS, the latencies in ns
  report FILE [--json]      FILE: the records time_compare.sh wrote; prints
                            the comparison table, or JSON with --json
"""

import json
import math
import statistics
import sys

# benchlib.py sits beside this file (the script's directory is on sys.path);
# leave no __pycache__ behind in the repository.
sys.dont_write_bytecode = True
from benchlib import (fail, find_measurement, load_osprobe_doc,  # noqa: E402
                      load_records, table_lines)

PERCENTILES = (50.0, 99.0)


def osprobe_sleep(metric, pairs):
    m = find_measurement(load_osprobe_doc(sys.stdin), "time.sleep", metric, pairs, "ns")
    s = m["summary"]
    print(f"{s['p50']:.1f} {s['p99']:.1f} {s['max']:.1f} {s['n']}")


def histogram_percentile(buckets, total, p, overflow_value):
    """Percentile p of the samples a histogram holds, with osprobe's
    definition (linear interpolation between closest ranks, numpy's
    default). buckets: sorted (value, count); total counts the overflows
    too, which lie above every bucket and are represented by
    overflow_value (cyclictest's max)."""
    rank = p / 100.0 * (total - 1)

    def value_at(index):
        seen = 0
        for value, count in buckets:
            seen += count
            if index < seen:
                return value
        return overflow_value

    below, above = math.floor(rank), math.ceil(rank)
    lo, hi = value_at(below), value_at(above)
    return lo + (hi - lo) * (rank - below)


def cyclictest(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read cyclictest's JSON {path}: {e}")
    if doc.get("resolution_in_ns") != 1:
        fail(f"{path}: cyclictest did not measure in ns (run it with -N)")
    threads = doc.get("thread") or {}
    if len(threads) != 1:
        fail(f"{path}: expected one measuring thread, found {len(threads)}")
    thread = next(iter(threads.values()))
    cycles = int(thread.get("cycles", 0))
    if cycles <= 0:
        fail(f"{path}: cyclictest recorded no cycles")
    buckets = sorted((int(v), int(c)) for v, c in (thread.get("histogram") or {}).items())
    in_histogram = sum(c for _, c in buckets)
    overflows = cycles - in_histogram
    worst = float(thread["max"])
    p50, p99 = (histogram_percentile(buckets, cycles, p, worst) for p in PERCENTILES)
    print(f"{p50:.1f} {p99:.1f} {worst:.1f} {cycles} {overflows}")


def median_or_none(values):
    return statistics.median(values) if values else None


def compare(meta, pairs, samples):
    target_us = float(meta.pop("target_p99_us", 5))
    rows = []
    for p in pairs:
        name = p["name"]
        row = dict(p)
        for tool in ("osprobe", "cyclictest"):
            for stat in ("p50", "p99", "max"):
                runs = samples.get((name, f"{tool}_{stat}"), [])
                if not runs:
                    fail(f"no {tool} {stat} samples for {name}")
                row[f"{tool}_{stat}_runs_ns"] = runs
                # Percentiles: the median over the runs; max: the worst.
                row[f"{tool}_{stat}_ns"] = max(runs) if stat == "max" else statistics.median(runs)
        row["cyclictest_overflows"] = samples.get((name, "cyclictest_overflows"), [])
        for stat in ("p50", "p99"):
            peer = row[f"cyclictest_{stat}_ns"]
            row[f"{stat}_ratio"] = row[f"osprobe_{stat}_ns"] / peer if peer > 0 else None
        # The target is about osprobe's hybrid sleep.
        if "hybrid" in name:
            row["meets_target"] = row["osprobe_p99_ns"] <= target_us * 1000.0
        else:
            row["meets_target"] = None
        rows.append(row)
    return target_us, rows


def us(ns):
    return f"{ns / 1000.0:.3f}"


def ratio(value):
    return f"{value:.3f}" if value is not None else "-"


def print_table(meta, target_us, rows):
    header = ["comparison", "osp p50", "osp p99", "osp max", "cyc p50", "cyc p99", "cyc max",
              "p50 osp/cyc", "p99 osp/cyc", f"p99 <= {target_us:g} us"]
    body = []
    for r in rows:
        verdict = "-" if r["meets_target"] is None else ("yes" if r["meets_target"] else "NO")
        body.append([
            r["name"],
            us(r["osprobe_p50_ns"]), us(r["osprobe_p99_ns"]), us(r["osprobe_max_ns"]),
            us(r["cyclictest_p50_ns"]), us(r["cyclictest_p99_ns"]), us(r["cyclictest_max_ns"]),
            ratio(r["p50_ratio"]), ratio(r["p99_ratio"]), verdict,
        ])
    print(f"osprobe time.sleep vs cyclictest: wake-up error of {meta.get('interval_us')} us sleeps, "
          f"{meta.get('duration_s')} s per run, {meta.get('runs')} round(s), alternating; "
          f"figures in us")
    print(f"{meta.get('cyclictest_version')}; osprobe {meta.get('osprobe_version')}; "
          f"kernel {meta.get('kernel')}; {meta.get('cpus')} CPUs; "
          f"timer slack {meta.get('timer_slack_ns')} ns; cpuidle driver {meta.get('cpuidle_driver')}")
    if meta.get("fifo") == 0:
        print("not root: the SCHED_FIFO rows were skipped")
    print()
    for text in table_lines(header, body):
        print(text)
    print()
    print("p50 and p99: the median over the rounds of each round's percentile; max: the")
    print("worst over all rounds. The target (issue 5) is osprobe's hybrid p99 for")
    print(f"{meta.get('interval_us')} us sleeps at or below {target_us:g} us.")
    for r in rows:
        print(f"{r['name']}:")
        print(f"  osprobe    {r['osprobe_command']}")
        print("             p99 runs us: " + " ".join(us(v) for v in r["osprobe_p99_runs_ns"]))
        print(f"  cyclictest {r['cyclictest_command']}")
        print("             p99 runs us: " + " ".join(us(v) for v in r["cyclictest_p99_runs_ns"]))
        overflows = [int(v) for v in r["cyclictest_overflows"]]
        if any(overflows):
            print(f"             histogram overflows per run: {overflows} "
                  "(above the histogram; counted at cyclictest's max)")


def report(path, as_json):
    # Not benchlib.report: its JSON names the threshold tolerance_pct, and
    # here it is a target in microseconds.
    meta, pairs, samples = load_records(path, ("osprobe_command", "cyclictest_command"))
    target_us, rows = compare(meta, pairs, samples)
    if as_json:
        json.dump({"meta": meta, "target_p99_us": target_us, "comparisons": rows},
                  sys.stdout, indent=2)
        print()
    else:
        print_table(meta, target_us, rows)


def main(argv):
    if not argv:
        fail("usage: time_compare.py osprobe-sleep|cyclictest|report ...")
    cmd, args = argv[0], argv[1:]
    if cmd == "osprobe-sleep" and args:
        osprobe_sleep(args[0], args[1:])
    elif cmd == "cyclictest" and len(args) == 1:
        cyclictest(args[0])
    elif cmd == "report" and args:
        report(args[0], "--json" in args[1:])
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
