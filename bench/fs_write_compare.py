"""Helper for fs_write_compare.sh: read fio's and osprobe's outputs, report.

Commands:
  first-cpu                 the CPU osprobe pins to (lib.sh's find_cpu)
  fio-value bw|ns_per_op    stdin: `fio --output-format=json` of one write
                            (or read) job; prints its bandwidth in bytes/s, or
                            the time of one operation (write and its sync)
                            in ns, 1e9 / IOPS
  osprobe-value EXP METRIC STAT [K=V ...]
                            stdin: an osprobe run document (--json); prints
                            the summary's STAT (p50, mean) of the measurement
  report RECORDS [--json]   the table (or JSON) of the comparisons
"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (fail, find_measurement, first_cpu, load_osprobe_doc,  # noqa: E402
                      spread_pct, table_lines)
from benchlib import report as report_records  # noqa: E402


def fio_value(kind):
    text = sys.stdin.read()
    # fio may print warnings before the JSON object.
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as e:
        fail(f"fio's output is not JSON: {e}\n{text}")
    if doc is None:
        fail(f"fio printed no JSON:\n{text}")
    jobs = doc.get("jobs", [])
    if len(jobs) != 1:
        fail(f"expected one job in fio's output, found {len(jobs)}")
    job = jobs[0]
    if job.get("error"):
        fail(f"fio job {job.get('jobname')!r} failed with error {job['error']}")
    # A write job, or a read job (the queue-depth comparison).
    write = job["write"] if job["write"].get("total_ios") else job["read"]
    if not write.get("total_ios"):
        fail(f"fio job {job.get('jobname')!r} completed no request")
    if kind == "bw":
        print(f"{write['bw_bytes']:.3f}")
    elif kind == "ns_per_op":
        print(f"{1e9 / write['iops']:.3f}")
    else:
        fail(f"unknown fio value {kind!r}")


def osprobe_value(experiment, metric, stat, pairs):
    doc = load_osprobe_doc(sys.stdin)
    unit = "ns" if experiment == "fs.fsync" else "bytes/s"
    if experiment == "fs.iodepth":
        unit = "bytes/s"
    m = find_measurement(doc, experiment, metric, pairs, unit)
    print(f"{m['summary'][stat]:.3f}")


def median_or_none(values):
    return statistics.median(values) if values else None


def compare(meta, pairs, samples):
    tolerance = float(meta.pop("tolerance_pct", 15))
    rows = []
    for p in pairs:
        name = p["name"]
        osp = samples.get((name, "osprobe"), [])
        peer = samples.get((name, "fio"), [])
        osp_med, peer_med = median_or_none(osp), median_or_none(peer)
        ratio = osp_med / peer_med if osp_med and peer_med else None
        within = ratio is not None and abs(ratio - 1.0) <= tolerance / 100.0
        rows.append({
            "comparison": name,
            "unit": "ns/op" if name.startswith("fsync") else "bytes/s",
            "peer_command": p["peer_command"],
            "osprobe_command": p["osprobe_command"],
            "peer_runs": peer,
            "osprobe_runs": osp,
            "peer_median": peer_med,
            "osprobe_median": osp_med,
            "ratio": ratio,
            "verdict": "within" if within else "outside",
            "peer_spread_pct": spread_pct(peer) if peer else None,
            "osprobe_spread_pct": spread_pct(osp) if osp else None,
        })
    return tolerance, rows


def show(value, unit):
    if value is None:
        return "-"
    if unit == "bytes/s":
        return f"{value / 1e6:.1f} MB/s"
    return f"{value / 1e3:.1f} us"


def print_table(meta, tolerance, rows):
    header = ["comparison", "fio", "osprobe", "osp/fio", "verdict", "fio spread",
              "osp spread"]
    body = [[
        r["comparison"],
        show(r["peer_median"], r["unit"]),
        show(r["osprobe_median"], r["unit"]),
        f"{r['ratio']:.2f}" if r["ratio"] else "-",
        r["verdict"],
        f"{r['peer_spread_pct']:.0f}%" if r["peer_spread_pct"] is not None else "-",
        f"{r['osprobe_spread_pct']:.0f}%" if r["osprobe_spread_pct"] is not None else "-",
    ] for r in rows]
    print(f"osprobe fs.write/fs.fsync vs fio: {meta.get('runs')} run(s) of each, alternating; "
          "medians of per-run figures")
    print(f"{meta.get('fio_version')}; osprobe {meta.get('osprobe_version')}; "
          f"kernel {meta.get('kernel')}; files in {meta.get('scratch_dir')} "
          f"({meta.get('scratch_fs')}), {meta.get('size')} per file")
    print(f"Target: osprobe within {tolerance:g}% of fio with the same job parameters. "
          "Bandwidth: fio bw_bytes vs osprobe's median window; "
          "fsync: 1e9/fio IOPS vs osprobe's mean per operation.")
    print()
    for line in table_lines(header, body):
        print(line)
    print()
    for r in rows:
        print(f"{r['comparison']}:")
        print(f"  fio     {r['peer_command']}")
        print(f"  osprobe {r['osprobe_command']}")


def main(argv):
    if not argv:
        fail("usage: fs_write_compare.py first-cpu|fio-value|osprobe-value|report ...")
    cmd, args = argv[0], argv[1:]
    if cmd == "first-cpu":
        print(first_cpu())
    elif cmd == "fio-value" and len(args) == 1:
        fio_value(args[0])
    elif cmd == "osprobe-value" and len(args) >= 3:
        osprobe_value(args[0], args[1], args[2], args[3:])
    elif cmd == "report" and args:
        report_records(args[0], "--json" in args[1:], ("peer_command", "osprobe_command"),
                       compare, print_table)
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
