#!/usr/bin/env python3
"""Helper for net_modes_compare.sh: parse iperf3 -u, sockperf and osprobe
outputs, and report.

Standard library only. Helpers shared with the other comparisons live in
benchlib.py, beside this file.

Subcommands:
  first-cpu                 the lowest CPU this process may run on
  iperf3-udp SIZE           stdin: `iperf3 -u -J` (client side); prints
                            RECEIVED_BYTES_PER_S RECEIVED_PPS LOSS JITTER_NS,
                            the receiver's figures (end.sum_received, and
                            lost_percent and jitter_ms of end.sum)
  osprobe-udp SIZE RATE     stdin: `osprobe bench net.udp --json`; prints the
                            same four figures of the loopback point
  sockperf-rtt-ns           stdin: `sockperf ping-pong --full-rtt`; prints the
                            round trip P50 in ns
  osprobe-rr                stdin: `osprobe bench net.rr --json`; prints the
                            latency P50 (ns) and transactions/s of mode=rr
  report FILE [--json]      FILE: the records the script wrote
"""

import re
import statistics
import sys

sys.dont_write_bytecode = True
from benchlib import (fail, find_measurement, first_cpu, load_osprobe_doc,  # noqa: E402
                      report as report_records, spread_pct, table_lines)

ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Which figure each comparison sets side by side, and in what unit.
COMPARISONS = {
    "udp.1460": {"unit": "bytes/s", "peer": "iperf3", "what": "received rate"},
    "udp.64.pps": {"unit": "pps", "peer": "iperf3", "what": "datagrams/s received"},
    "rr.p50": {"unit": "ns", "peer": "sockperf", "what": "round trip p50"},
}


def iperf3_udp(size):
    import json
    text = sys.stdin.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"iperf3's output is not JSON: {e}\n{text[:2000]}")
    if doc.get("error"):
        fail(f"iperf3 reported: {doc['error']}")
    end = doc.get("end") or {}
    received, whole = end.get("sum_received"), end.get("sum")
    if not received or not whole:
        fail("no end.sum_received / end.sum in iperf3's output")
    seconds = received["seconds"] or float("nan")
    rate = received["bytes"] / seconds
    pps = received["bytes"] / int(size) / seconds
    print(f"{rate:.1f} {pps:.1f} {whole['lost_percent'] / 100.0:.6f} "
          f"{whole['jitter_ms'] * 1e6:.1f}")


def osprobe_udp(size, rate):
    doc = load_osprobe_doc(sys.stdin)
    pairs = [f"size={size}", f"bitrate={rate}", "path=loopback"]
    figures = []
    for metric, unit in (("received", "bytes/s"), ("packets_per_s", "count"),
                         ("loss", "ratio"), ("jitter", "ns")):
        figures.append(find_measurement(doc, "net.udp", metric, pairs, unit)["summary"]["p50"])
    print(" ".join(f"{v:.6f}" for v in figures))


def sockperf_rtt_ns():
    text = ANSI.sub("", sys.stdin.read())
    avg = re.search(r"avg-(rtt|latency)=([0-9.]+)", text)
    p50 = re.search(r"percentile 50\.000\s*=\s*([0-9.]+)", text)
    if not avg or not p50:
        fail("no 'avg-rtt=' / 'percentile 50.000 =' lines in sockperf's output:\n" + text)
    factor = 1.0 if avg.group(1) == "rtt" else 2.0
    print(f"{float(p50.group(1)) * 1e3 * factor:.1f}")


def osprobe_rr():
    doc = load_osprobe_doc(sys.stdin)
    pairs = ["mode=rr", "path=loopback"]
    latency = find_measurement(doc, "net.rr", "latency", pairs, "ns")
    rate = find_measurement(doc, "net.rr", "transactions_per_s", pairs, "count")
    print(f"{latency['summary']['p50']:.1f} {rate['summary']['p50']:.1f}")


def compare(meta, pairs, samples):
    tolerance = float(meta.pop("tolerance_pct", 15))
    rows = []
    for p in pairs:
        name = p["name"]
        kind = COMPARISONS[name]
        peer = samples.get((name, kind["peer"]), [])
        osp = samples.get((name, "osprobe"), [])
        if not peer or not osp:
            fail(f"no samples for {name}")
        peer_med, osp_med = statistics.median(peer), statistics.median(osp)
        ratio = osp_med / peer_med if peer_med else float("nan")
        rows.append({
            **p,
            "unit": kind["unit"],
            "what": kind["what"],
            "peer": kind["peer"],
            "peer_runs": peer,
            "osprobe_runs": osp,
            "peer_median": peer_med,
            "osprobe_median": osp_med,
            "ratio": ratio,
            "target_met": abs(ratio - 1.0) <= tolerance / 100.0,
            "peer_spread_pct": spread_pct(peer),
            "osprobe_spread_pct": spread_pct(osp),
            "all_runs": {tool: runs for (n, tool), runs in sorted(samples.items()) if n == name},
        })
    return tolerance, rows


def show(value, unit):
    if value != value:
        return "-"
    if unit == "bytes/s":
        return f"{value / 1e9:.3f} GB/s"
    if unit == "pps":
        return f"{value / 1e3:.1f} kpps"
    if unit == "ns":
        return f"{value / 1e3:.2f} us"
    return f"{value:.4g}"


def print_table(meta, tolerance, rows):
    header = ["comparison", "what", "peer", "peer median", "osprobe median", "osp/peer",
              "verdict", "peer spread", "osp spread"]
    body = [[r["name"], r["what"], r["peer"], show(r["peer_median"], r["unit"]),
             show(r["osprobe_median"], r["unit"]), f"{r['ratio']:.3f}",
             f"within {tolerance:g}%" if r["target_met"] else f"OUTSIDE {tolerance:g}%",
             f"{r['peer_spread_pct']:.1f}%", f"{r['osprobe_spread_pct']:.1f}%"] for r in rows]
    print(f"osprobe network modes vs iperf3 -u and sockperf over loopback: {meta.get('runs')} "
          f"round(s), alternating; medians of per-run figures")
    print(f"{meta.get('iperf3_version')}; {meta.get('sockperf_version')}; osprobe "
          f"{meta.get('osprobe_version')}; kernel {meta.get('kernel')}; {meta.get('cpus')} CPU(s)")
    print()
    for text in table_lines(header, body):
        print(text)
    print()
    print("UDP: the receiver's figures (iperf3 end.sum_received; osprobe net.udp received and "
          "packets_per_s). TCP_CRR has no peer here: netperf is not in Debian's main archive.")
    for r in rows:
        print(f"{r['name']}:")
        print(f"  peer    {r['peer_command']}")
        print(f"  osprobe {r['osprobe_command']}")
        for tool, runs in r["all_runs"].items():
            print(f"          {tool:<18} {' '.join(f'{v:.6g}' for v in runs)}")


def report(path, as_json):
    report_records(path, as_json, ("peer_command", "osprobe_command"), compare, print_table)


def main(argv):
    if not argv:
        fail("usage: net_modes_compare.py first-cpu|iperf3-udp|osprobe-udp|sockperf-rtt-ns|"
             "osprobe-rr|report ...")
    cmd, args = argv[0], argv[1:]
    if cmd == "first-cpu":
        print(first_cpu())
    elif cmd == "iperf3-udp" and len(args) == 1:
        iperf3_udp(args[0])
    elif cmd == "osprobe-udp" and len(args) == 2:
        osprobe_udp(args[0], args[1])
    elif cmd == "sockperf-rtt-ns":
        sockperf_rtt_ns()
    elif cmd == "osprobe-rr":
        osprobe_rr()
    elif cmd == "report" and args:
        report(args[0], "--json" in args[1:])
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
