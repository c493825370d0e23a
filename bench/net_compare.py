#!/usr/bin/env python3
"""Helper for net_compare.sh: parse iperf3, qperf, sockperf and osprobe
outputs, and report.

Kept apart from the shell script because JSON and statistics are clumsy in
bash. Standard library only, so it runs on a bare Debian python3. Helpers
shared with the other comparisons live in benchlib.py, beside this file.

Subcommands:
  first-cpu                 the lowest CPU this process may run on
  free-ports N              N distinct TCP ports free on 127.0.0.1 now, one
                            a line (bound together, then released)
  iperf3-rates              stdin: `iperf3 -J` (client side); prints
                            RECEIVED SENT RETRANSMITS, the rates in bytes/s
  qperf-rtt-ns              stdin: `qperf ... tcp_lat`; prints the round
                            trip in ns: twice qperf's latency, which is the
                            mean one-way time (see below)
  sockperf-rtt-ns           stdin: `sockperf ping-pong`; prints the round
                            trip P50 and MEAN in ns (doubled when sockperf
                            printed one-way latency, i.e. without --full-rtt)
  osprobe-bandwidth STREAMS stdin: `osprobe bench net.bandwidth --json`;
                            prints RECEIVER SENDER_WHOLE SENDER_P50 (bytes/s)
                            of the loopback point with that many streams
  osprobe-rtt               stdin: `osprobe bench net.rtt --json`; prints the
                            P50 and MEAN of metric tcp (loopback), in ns
  dd-rate                   stdin: GNU dd's closing lines (LC_ALL=C); prints
                            the bytes/s it wrote
  send-rates                stdin: `osprobe send --json`; prints RX TX BYTES
                            (rates in bytes/s); fails unless verified
  report FILE [--json]      FILE: the records net_compare.sh wrote; prints
                            the comparison table, or JSON with --json
"""

import json
import re
import socket
import statistics
import sys

# benchlib.py sits beside this file (the script's directory is on sys.path);
# leave no __pycache__ behind in the repository.
sys.dont_write_bytecode = True
from benchlib import (fail, find_measurement, first_cpu, load_osprobe_doc,  # noqa: E402
                      report as report_records, spread_pct, table_lines)

# sockperf colours some lines even when its output is a pipe.
ANSI = re.compile(r"\x1b\[[0-9;]*m")
TIME_UNITS_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "sec": 1e9, "s": 1e9}


def free_ports(count):
    # Holding all sockets open at once makes the ports distinct; they are
    # free again when closed. Another process could take one in between,
    # which the script notices when its server fails to listen.
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        for s in sockets:
            print(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()


def iperf3_rates():
    text = sys.stdin.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"iperf3's output is not JSON: {e}\n{text[:2000]}")
    if doc.get("error"):
        fail(f"iperf3 reported: {doc['error']}")
    end = doc.get("end") or {}
    received, sent = end.get("sum_received"), end.get("sum_sent")
    if not received or not sent:
        fail("no end.sum_received / end.sum_sent in iperf3's output")
    # iperf3 reports bits/s (decimal); osprobe bytes/s. sum_received is the
    # bytes the server read over the server's own test time, which is what
    # osprobe's receiver rate is.
    print(f"{received['bits_per_second'] / 8:.1f} {sent['bits_per_second'] / 8:.1f} "
          f"{sent.get('retransmits', 0)}")


def qperf_rtt_ns():
    text = sys.stdin.read()
    # e.g. "tcp_lat:\n    latency  =  10.5 us". qperf divides the elapsed
    # time by the messages received on both sides (qperf.c calc_results:
    # time / (local + remote received)), two per round trip: its latency is
    # the mean one-way time, RTT / 2.
    match = re.search(r"^\s*latency\s*=\s*([0-9.]+)\s*(ns|us|ms|sec|s)\s*$", text, re.MULTILINE)
    if not match:
        fail("no 'latency = X us' line in qperf's output:\n" + text)
    one_way = float(match.group(1)) * TIME_UNITS_NS[match.group(2)]
    print(f"{2.0 * one_way:.1f}")


def sockperf_rtt_ns():
    text = ANSI.sub("", sys.stdin.read())
    # With --full-rtt sockperf prints "avg-rtt=..." and its percentiles are
    # round trips; without, "avg-latency=..." and every figure is RTT / 2
    # (sockperf halves each measured round trip). Both in usec.
    avg = re.search(r"avg-(rtt|latency)=([0-9.]+)", text)
    p50 = re.search(r"percentile 50\.000\s*=\s*([0-9.]+)", text)
    if not avg or not p50:
        fail("no 'avg-rtt=' / 'percentile 50.000 =' lines in sockperf's output:\n" + text)
    factor = 1.0 if avg.group(1) == "rtt" else 2.0
    print(f"{float(p50.group(1)) * 1e3 * factor:.1f} {float(avg.group(2)) * 1e3 * factor:.1f}")


WHOLE_TEST = re.compile(r"over the whole test ([0-9.]+(?:[eE][+-]?[0-9]+)?) B/s")


def osprobe_bandwidth(streams):
    doc = load_osprobe_doc(sys.stdin)
    pairs = [f"streams={streams}", "path=loopback"]
    receiver = find_measurement(doc, "net.bandwidth", "receiver", pairs, "bytes/s")
    sender = find_measurement(doc, "net.bandwidth", "sender", pairs, "bytes/s")
    # The sender's p50 is a median of 100 ms interval rates after slow start;
    # its rate over the whole test (bytes sent / test time, iperf3's
    # sum_sent) is only in a note.
    whole = None
    for note in sender.get("notes") or []:
        match = WHOLE_TEST.search(note)
        if match:
            whole = float(match.group(1))
    p50 = sender["summary"]["p50"]
    print(f"{receiver['summary']['p50']:.1f} {whole if whole is not None else 'nan'} {p50:.1f}")


def osprobe_rtt():
    doc = load_osprobe_doc(sys.stdin)
    m = find_measurement(doc, "net.rtt", "tcp", ["proto=tcp", "path=loopback"], "ns")
    print(f"{m['summary']['p50']:.1f} {m['summary']['mean']:.1f}")


def dd_rate():
    text = sys.stdin.read()
    # GNU dd (LC_ALL=C): "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 1.12 s,
    # 953 MB/s"; the rate is recomputed from bytes and seconds, not rounded.
    match = re.search(r"^(\d+) bytes .*copied, ([0-9.]+(?:e[+-]?\d+)?) s", text, re.MULTILINE)
    if not match or float(match.group(2)) <= 0:
        fail("no 'N bytes ... copied, T s' line in dd's output:\n" + text)
    print(f"{int(match.group(1)) / float(match.group(2)):.1f}")


def send_rates():
    text = sys.stdin.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"osprobe send's output is not JSON: {e}\n{text[:2000]}")
    if doc.get("verified") is not True:
        fail(f"osprobe send: the server did not verify the file: {text[:2000]}")
    rx, tx = doc.get("rx_bytes_per_s"), doc.get("tx_bytes_per_s")
    if not isinstance(rx, (int, float)) or not isinstance(tx, (int, float)):
        fail(f"osprobe send gave no rx_bytes_per_s / tx_bytes_per_s: {text[:2000]}")
    print(f"{rx:.1f} {tx:.1f} {doc.get('bytes')}")


# What each comparison compares. Names ending in "+pin" are the same
# comparison with every process pinned to one CPU (PINNED=1).
#   peer, osprobe: the sample tools (net_compare.sh's record names)
#   kind: "min" (osprobe/peer at least `target`, a meta key) or "within"
#         (osprobe/peer within the tolerance of 1)
#   info: (label, numerator tool, denominator tool) ratios for information
COMPARISONS = {
    "bw.single": {
        "unit": "bytes/s", "peer": "iperf3", "osprobe": "osprobe", "kind": "min",
        "target": "bw_target", "peer_label": "iperf3 -P 1 (received)",
        "info": [("sent/sent", "osprobe_sent", "iperf3_sent"),
                 ("sender p50/iperf3 sent", "osprobe_sender_p50", "iperf3_sent")],
    },
    "bw.multi": {
        "unit": "bytes/s", "peer": "iperf3", "osprobe": "osprobe", "kind": "min",
        "target": "multi_target", "peer_label": "iperf3 -P {streams} (received)",
        "info": [("sent/sent", "osprobe_sent", "iperf3_sent"),
                 ("sender p50/iperf3 sent", "osprobe_sender_p50", "iperf3_sent")],
    },
    "rtt.qperf": {
        "unit": "ns", "peer": "qperf", "osprobe": "osprobe", "kind": "within",
        "peer_label": "qperf tcp_lat (2 x mean)",
        "info": [("osp mean/qperf", "osprobe_mean", "qperf")],
    },
    "rtt.sockperf": {
        "unit": "ns", "peer": "sockperf", "osprobe": "osprobe", "kind": "within",
        "peer_label": "sockperf ping-pong p50",
        "info": [("mean/mean", "osprobe_mean", "sockperf_mean")],
    },
    "transfer": {
        "unit": "bytes/s", "peer": "memory", "osprobe": "osprobe", "kind": "min",
        "target": "transfer_target", "peer_label": "net.bandwidth 1 stream",
        "info": [("rx/page-cache write", "osprobe", "page_cache_write"),
                 ("rx/iperf3 -P 1", "osprobe", "iperf3"),
                 ("tx/memory", "osprobe_tx", "memory")],
    },
}


def kind_of(name):
    return COMPARISONS[name[:-len("+pin")] if name.endswith("+pin") else name]


def compare(meta, pairs, samples):
    tolerance = float(meta.pop("rtt_tolerance_pct", 10))
    rows = []
    for p in pairs:
        name = p["name"]
        kind = kind_of(name)
        peer = samples.get((name, kind["peer"]), [])
        osp = samples.get((name, kind["osprobe"]), [])
        if not peer or not osp:
            fail(f"no samples for {name}")
        peer_med, osp_med = statistics.median(peer), statistics.median(osp)
        ratio = osp_med / peer_med
        if kind["kind"] == "min":
            target = float(meta.get(kind["target"]))
            met = ratio >= target
            target_text = f"osprobe >= {target:g} x peer"
        else:
            met = abs(ratio - 1.0) <= tolerance / 100.0
            target_text = f"osprobe within {tolerance:g}% of peer"
        info = {}
        for label, num, den in kind["info"]:
            nums = [v for v in samples.get((name, num), []) if v == v]
            dens = [v for v in samples.get((name, den), []) if v == v]
            if nums and dens:
                info[label] = statistics.median(nums) / statistics.median(dens)
        peer_spread, osp_spread = spread_pct(peer), spread_pct(osp)
        rows.append({
            **p,
            "unit": kind["unit"],
            "peer": kind["peer_label"].format(streams=meta.get("multi_streams")),
            "pinned": name.endswith("+pin"),
            "target": target_text,
            "peer_runs": peer,
            "osprobe_runs": osp,
            "peer_median": peer_med,
            "osprobe_median": osp_med,
            "ratio": ratio,
            "target_met": met,
            "peer_spread_pct": peer_spread,
            "osprobe_spread_pct": osp_spread,
            "info_ratios": info,
            # Every tool's runs under this comparison, for the details.
            "all_runs": {tool: runs for (n, tool), runs in sorted(samples.items()) if n == name},
        })
    return tolerance, rows


def show(value, unit):
    """A figure as the table shows it: rates in decimal GB/s, times in us."""
    if value != value:
        return "-"
    if unit == "bytes/s":
        return f"{value / 1e9:.3f}"
    return f"{value / 1e3:.2f}"


def shown_unit(unit):
    return "GB/s" if unit == "bytes/s" else "us"


def verdict(row, tolerance):
    if row["unit"] == "ns":
        return f"within {tolerance:g}%" if row["target_met"] else f"OUTSIDE {tolerance:g}%"
    target = row["target"].split(">= ")[1].split(" ")[0]
    return f"at least {target}x" if row["target_met"] else f"BELOW {target}x"


def print_table(meta, tolerance, rows):
    header = ["comparison", "unit", "peer (what)", "peer", "osprobe", "osp/peer", "verdict",
              "peer spread", "osp spread", "information"]
    body = []
    for r in rows:
        body.append([
            r["name"],
            shown_unit(r["unit"]),
            r["peer"],
            show(r["peer_median"], r["unit"]),
            show(r["osprobe_median"], r["unit"]),
            f"{r['ratio']:.3f}",
            verdict(r, tolerance),
            f"{r['peer_spread_pct']:.1f}%",
            f"{r['osprobe_spread_pct']:.1f}%",
            "; ".join(f"{k} {v:.3f}" for k, v in r["info_ratios"].items()) or "-",
        ])
    ran = {r["name"].removesuffix("+pin") for r in rows}
    bw_only = meta.get("qperf_version") is None  # BW_ONLY: iperf3 alone
    peers = "iperf3" if bw_only else "iperf3, qperf and sockperf"
    print(f"osprobe vs {peers} over loopback 127.0.0.1: {meta.get('runs')} "
          f"round(s), alternating; medians of per-run figures")
    if bw_only:
        print(f"{meta.get('iperf3_version')}")
    else:
        print(f"{meta.get('iperf3_version')}; qperf {meta.get('qperf_version')} "
              f"({meta.get('qperf_where')}); {meta.get('sockperf_version')}")
    print(f"osprobe {meta.get('osprobe_version')}; kernel {meta.get('kernel')}; "
          f"{meta.get('cpus')} CPU(s); bandwidth placement: iperf3 -A "
          f"{meta.get('bw_affinity', '0')} (1: as osprobe's pin=auto)"
          + ("" if bw_only else "; round trips unpinned")
          + (f", and '+pin' rows with every process on CPU {meta.get('cpu')}"
             if meta.get("pinned") else ""))
    print()
    for text in table_lines(header, body):
        print(text)
    print()
    for line in closing_notes(meta, tolerance, ran):
        print(line)
    for r in rows:
        print(f"{r['name']}:")
        print(f"  peer    {r['peer_command']}")
        print(f"  osprobe {r['osprobe_command']}")
        for tool, runs in r["all_runs"].items():
            if r["unit"] == "ns" or tool.endswith("retransmits"):
                values = " ".join(show(v, r["unit"]) if not tool.endswith("retransmits")
                                  else f"{v:.0f}" for v in runs)
            else:
                values = " ".join(show(v, r["unit"]) for v in runs)
            print(f"          {tool:<20} {values}")


def closing_notes(meta, tolerance, ran):
    """The targets and the notes on how each figure was read, for the
    comparisons that ran (--bw-only runs the bandwidth ones alone)."""
    targets = []
    if "bw.single" in ran:
        targets.append(f"bw.single >= {meta.get('bw_target')} x iperf3 at the same write size "
                       f"({meta.get('write_size')})")
    if "bw.multi" in ran:
        targets.append(f"bw.multi ({meta.get('multi_streams')} streams) >= "
                       f"{meta.get('multi_target')} x iperf3 -P")
    rtt_peers = [p for p in ("qperf", "sockperf") if f"rtt.{p}" in ran]
    if rtt_peers:
        targets.append(f"TCP round trip (32 B) p50 within {tolerance:g}% of "
                       + " and ".join(rtt_peers))
    if "transfer" in ran:
        targets.append(f"transfer of a {meta.get('transfer_mib')} MiB file (receiver's rate) >= "
                       f"{meta.get('transfer_target')} x osprobe's single-stream "
                       "memory-to-memory rate of the same round")
    lines = ["Targets: " + "; ".join(targets) + "."] if targets else []
    if ran & {"bw.single", "bw.multi", "transfer"}:
        rates = ["iperf3 sum_received", "osprobe's receiver metric"]
        if "transfer" in ran:
            rates.append("osprobe send's rx_bytes_per_s")
        lines.append(f"Rates: the receiver's ({'; '.join(rates)}). GB/s = 10^9 bytes/s.")
    if "qperf" in rtt_peers:
        lines.append("Round trips: qperf prints the mean one-way time (time / messages received "
                     "by both ends), doubled here.")
    if "sockperf" in rtt_peers:
        lines.append("sockperf runs with --full-rtt, so its percentiles are round trips (without "
                     "it they would be RTT/2).")
    if rtt_peers:
        lines.append("osprobe's round trip: p50 of net.rtt proto=tcp.")
    lines.append("spread = (max - min) / median over the runs. The information column is not "
                 "part of any verdict.")
    return lines


def report(path, as_json):
    report_records(path, as_json, ("peer_command", "osprobe_command"), compare, print_table)


def main(argv):
    if not argv:
        fail("usage: net_compare.py first-cpu|free-ports|iperf3-rates|qperf-rtt-ns|"
             "sockperf-rtt-ns|osprobe-bandwidth|osprobe-rtt|send-rates|report ...")
    cmd, args = argv[0], argv[1:]
    if cmd == "first-cpu":
        print(first_cpu())
    elif cmd == "free-ports" and len(args) == 1 and args[0].isdigit():
        free_ports(int(args[0]))
    elif cmd == "iperf3-rates":
        iperf3_rates()
    elif cmd == "qperf-rtt-ns":
        qperf_rtt_ns()
    elif cmd == "sockperf-rtt-ns":
        sockperf_rtt_ns()
    elif cmd == "osprobe-bandwidth" and len(args) == 1:
        osprobe_bandwidth(args[0])
    elif cmd == "osprobe-rtt":
        osprobe_rtt()
    elif cmd == "dd-rate":
        dd_rate()
    elif cmd == "send-rates":
        send_rates()
    elif cmd == "report" and args:
        report(args[0], "--json" in args[1:])
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
