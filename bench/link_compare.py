"""link_compare.sh's Python half: read iperf3's and osprobe's JSON, and
print the comparison against the targets.

  iperf3-bps FILE                 the receiver's rate of an iperf3 -J run, bit/s
  link-release FILE NAME ROUND    `osprobe link --json` release errors as
                                  records (sample NAME <dir>.<stat> ROUND ns)
  rtt-p50 FILE                    the median of osprobe net rtt (UDP), ns
  report RECORDS [--json]         the table, or one JSON object

Standard library only.
"""

import json
import statistics
import sys

from benchlib import fail, load_records, spread_pct, table_lines

# The targets of issue 5.
MIN_GBPS = 2.5
MIN_RATIO = 0.3
MAX_RELEASE_P99_NS = 100_000
RTT_EXPECTED_NS = 40e6
RTT_TOLERANCE_NS = 1e6
STATS = ("p50", "p99", "p999", "max")
# A direction with fewer released packets (iperf3's control connection in
# the direction opposite to the data) has no meaningful p99: shown, not judged.
MIN_PACKETS = 1000


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read {path}: {e}")


def iperf3_bps(path):
    doc = load(path)
    if "error" in doc:
        fail(f"iperf3 reported an error in {path}: {doc['error']}")
    end = doc.get("end", {})
    # TCP: what the receiver got; UDP: the sum (iperf3 counts it there).
    for key in ("sum_received", "sum"):
        if key in end:
            return end[key]["bits_per_second"]
    fail(f"no rate in {path}")


def link_release(path, name, run):
    doc = load(path)
    lines = []
    for direction in ("uplink", "downlink"):
        d = doc[direction]
        if d.get("error"):
            fail(f"{path}: the {direction} forwarder stopped early: {d['error']}")
        release = d["release_error"]
        lines.append(f"sample\t{name}\t{direction}.packets\t{run}\t{d['packets_out']}")
        for stat in STATS:
            if release.get(stat) is not None:
                lines.append(f"sample\t{name}\t{direction}.{stat}\t{run}\t{release[stat]}")
    return "\n".join(lines)


def rtt_p50(path):
    doc = load(path)
    for m in doc.get("measurements", []):
        if m.get("experiment") == "net.rtt" and (m.get("params") or {}).get("proto") == "udp":
            if m.get("unit") != "ns":
                fail(f"net.rtt is in {m.get('unit')}, expected ns")
            return m["summary"]["p50"]
    fail(f"no net.rtt udp measurement in {path}")


def med(samples, name, tool):
    values = samples.get((name, tool))
    return statistics.median(values) if values else None


def compare(meta, samples):
    rows = []
    emu = samples.get(("throughput", "emulator"), [])
    veth = samples.get(("throughput", "veth"), [])
    if emu and veth:
        ratios = [e / v for e, v in zip(emu, veth) if v]
        emu_m, veth_m, ratio = statistics.median(emu), statistics.median(veth), statistics.median(ratios)
        rows.append({
            "name": "throughput", "emulator_bps": emu_m, "veth_bps": veth_m, "ratio": ratio,
            "spread_pct": {"emulator": spread_pct(emu), "veth": spread_pct(veth)},
            "target": f">= {MIN_GBPS} Gbit/s and >= {MIN_RATIO}x veth",
            "ok": emu_m >= MIN_GBPS * 1e9 and ratio >= MIN_RATIO,
        })
    no_offload = samples.get(("throughput.nooffload", "emulator"), [])
    if no_offload:
        rows.append({
            "name": "throughput, --no-offload", "emulator_bps": statistics.median(no_offload),
            "target": "information", "ok": None,
        })
    delayed = samples.get(("throughput.delayed", "emulator"), [])
    if delayed:
        rows.append({
            "name": f"throughput.delayed ({meta.get('release_delay_ms')} ms each way)",
            "emulator_bps": statistics.median(delayed), "target": "information", "ok": None,
        })
    for name, label in (("release.tcp", "release error, saturating TCP"),
                        ("release.udp", f"release error, UDP {meta.get('udp_rate')}"),
                        ("throughput.nodelay", "release error, no delay (information)")):
        per_direction = {}
        for direction in ("uplink", "downlink"):
            stats = {s: med(samples, name, f"{direction}.{s}") for s in STATS}
            if stats["p99"] is not None:
                stats["packets"] = med(samples, name, f"{direction}.packets")
                per_direction[direction] = stats
        if not per_direction:
            continue
        judged = [d["p99"] for d in per_direction.values() if (d["packets"] or 0) >= MIN_PACKETS]
        worst_p99 = max(judged) if judged else None
        informative = name == "throughput.nodelay" or worst_p99 is None
        rows.append({
            "name": label, "release_ns": per_direction, "worst_p99_ns": worst_p99,
            "target": "information" if informative else f"p99 < {MAX_RELEASE_P99_NS / 1e3:.0f} us",
            "ok": None if informative else worst_p99 < MAX_RELEASE_P99_NS,
        })
    rtts = samples.get(("rtt", "osprobe"), [])
    if rtts:
        m = statistics.median(rtts)
        rows.append({
            "name": "rtt through 20 ms each way", "rtt_p50_ns": m,
            "error_ns": m - RTT_EXPECTED_NS, "target": "40 ms +- 1 ms",
            "ok": abs(m - RTT_EXPECTED_NS) <= RTT_TOLERANCE_NS,
        })
    return rows


def us(ns):
    return "-" if ns is None else f"{ns / 1e3:.1f}"


def verdict(ok):
    return "info" if ok is None else ("ok" if ok else "MISSED")


def print_table(meta, rows):
    print(f"osprobe link vs veth: {meta.get('runs')} rounds, {meta.get('duration_s')} s per test, "
          f"kernel {meta.get('kernel')}, {meta.get('cpus')} CPUs")
    print()
    body = []
    for r in rows:
        if "veth_bps" in r:
            body.append([r["name"], f"{r['emulator_bps'] / 1e9:.2f} Gbit/s",
                         f"veth {r['veth_bps'] / 1e9:.2f} Gbit/s, ratio {r['ratio']:.2f}",
                         r["target"], verdict(r["ok"])])
        elif "emulator_bps" in r:
            body.append([r["name"], f"{r['emulator_bps'] / 1e9:.2f} Gbit/s", "", r["target"],
                         verdict(r["ok"])])
        elif "rtt_p50_ns" in r:
            body.append([r["name"], f"{r['rtt_p50_ns'] / 1e6:.3f} ms",
                         f"error {r['error_ns'] / 1e3:+.0f} us", r["target"], verdict(r["ok"])])
        else:
            for direction, s in r["release_ns"].items():
                body.append([f"{r['name']} ({direction})", f"p99 {us(s['p99'])} us",
                             f"p50 {us(s['p50'])} p99.9 {us(s['p999'])} max {us(s['max'])} us, "
                             f"{s['packets']:.0f} pkts", r["target"], verdict(r["ok"])])
    for line in table_lines(["comparison", "osprobe link", "detail", "target", "verdict"], body):
        print(line)
    print()
    print("Medians over the rounds; release error = actual minus due time of each packet.")


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
    if command == "iperf3-bps" and len(args) == 1:
        print(iperf3_bps(args[0]))
    elif command == "link-release" and len(args) == 3:
        print(link_release(*args))
    elif command == "rtt-p50" and len(args) == 1:
        print(rtt_p50(args[0]))
    elif command == "report" and len(args) in (1, 2):
        report(args[0], args[1:] == ["--json"])
    elif command == "first-cpu":
        print(min(__import__("os").sched_getaffinity(0)))
    else:
        fail(f"unknown command or arguments: {' '.join(argv)}\n{__doc__}")


if __name__ == "__main__":
    main(sys.argv[1:])
