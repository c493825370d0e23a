"""userspace_compare.sh's Python half: read net.userspace's JSON, and print
the user-space stacks against the kernel's TCP.

  records FILE STACK ROUND   the throughput (median of the interval samples,
                             bit/s) and CPU per byte (ns) of one run, as
                             records
  report RECORDS [--json]    the table, or one JSON object

Standard library only.
"""

import json
import statistics
import sys

from benchlib import fail, find_measurement, load_records, spread_pct, table_lines

# The targets of issue 15.
MIN_BPS = 1e9
MAX_SPREAD_PCT = 10.0


def records(path, stack, run):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read {path}: {e}")
    pairs = [f"stack={stack}"]
    tput = find_measurement(doc, "net.userspace", "throughput", pairs, "bits/s")
    cpu = find_measurement(doc, "net.userspace", "cpu_per_byte", pairs, "ns")
    return "\n".join([
        f"sample\tthroughput\t{stack}\t{run}\t{tput['summary']['p50']}",
        f"sample\tcpu_per_byte\t{stack}\t{run}\t{cpu['summary']['p50']}",
    ])


def compare(meta, samples):
    stacks = str(meta.get("stacks", "")).split()
    kernel = samples.get(("throughput", "kernel"), [])
    kernel_cpu = samples.get(("cpu_per_byte", "kernel"), [])
    rows = []
    for stack in stacks:
        tput = samples.get(("throughput", stack), [])
        cpu = samples.get(("cpu_per_byte", stack), [])
        if not tput:
            continue
        row = {
            "stack": stack,
            "throughput_bps": statistics.median(tput),
            "spread_pct": spread_pct(tput),
            "cpu_per_byte_ns": statistics.median(cpu) if cpu else None,
        }
        if stack == "kernel":
            row.update({"target": "baseline", "ok": None})
        else:
            # Per round: both stacks measured minutes apart at most.
            ratios = [s / k for s, k in zip(tput, kernel) if k]
            cpu_ratios = [s / k for s, k in zip(cpu, kernel_cpu) if k]
            row["ratio_to_kernel"] = statistics.median(ratios) if ratios else None
            row["cpu_ratio_to_kernel"] = statistics.median(cpu_ratios) if cpu_ratios else None
            row["target"] = f">= {MIN_BPS / 1e9:.0f} Gbit/s, spread <= {MAX_SPREAD_PCT:.0f}%"
            row["ok"] = row["throughput_bps"] >= MIN_BPS and (
                len(tput) < 2 or row["spread_pct"] <= MAX_SPREAD_PCT)
        rows.append(row)
    return rows


def fmt(value, form):
    return "-" if value is None else form.format(value)


def verdict(ok):
    return "info" if ok is None else ("ok" if ok else "MISSED")


def print_table(meta, rows):
    print(f"net.userspace, clock=fine, unimpaired emulated path: {meta.get('runs')} rounds of "
          f"{meta.get('duration')} per stack, kernel {meta.get('kernel')}, {meta.get('cpus')} CPUs")
    print()
    body = []
    for r in rows:
        body.append([
            r["stack"],
            f"{r['throughput_bps'] / 1e9:.2f} Gbit/s",
            f"{r['spread_pct']:.0f}%",
            fmt(r.get("ratio_to_kernel"), "{:.2f}"),
            fmt(r["cpu_per_byte_ns"], "{:.3f} ns"),
            fmt(r.get("cpu_ratio_to_kernel"), "{:.1f}x"),
            r["target"],
            verdict(r["ok"]),
        ])
    for line in table_lines(["stack", "throughput", "spread", "/kernel", "cpu/byte",
                             "cpu /kernel", "target", "verdict"], body):
        print(line)
    print()
    print("Medians over the rounds. cpu/byte: the sending thread's CPU time per byte delivered;")
    print("the kernel's undercounts (its ACK processing runs in softirq context on other threads).")


def report(path, as_json):
    meta, _, samples = load_records(path, [])
    rows = compare(meta, samples)
    if as_json:
        json.dump({"meta": meta, "comparisons": rows}, sys.stdout, indent=2)
        print()
    else:
        print_table(meta, rows)


def main(argv):
    if not argv:
        fail(__doc__)
    command, args = argv[0], argv[1:]
    if command == "records" and len(args) == 3:
        print(records(*args))
    elif command == "report" and len(args) in (1, 2):
        report(args[0], args[1:] == ["--json"])
    else:
        fail(f"unknown command or arguments: {' '.join(argv)}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
