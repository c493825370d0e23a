"""link_compare.sh's Python half: read iperf3's and osprobe's JSON, and
print the comparison against the targets.

  iperf3-bps FILE                 the receiver's rate of an iperf3 -J run, bit/s
  link-release FILE NAME ROUND    `osprobe link --json` release errors as
                                  records (sample NAME <dir>.<stat> ROUND ns)
  rtt-p50 FILE                    the median of osprobe net rtt (UDP), ns
  stream-detail IPERF LINK STAT0 STAT1 NAME ROUND
                                  what bounds one long-fat-pipe stream, as
                                  records: the sender's largest cwnd, mean
                                  RTT, retransmits (iperf3 -J), the
                                  forwarders' CPU share, kernel drops and
                                  losses (osprobe link --json), the
                                  machine's busy share (/proc/stat lines)
  report RECORDS [--json]         the table, or one JSON object

Standard library only.
"""

import json
import math
import statistics
import sys

from benchlib import fail, load_records, spread_pct, table_lines

# Issue 16: one stream through 50 ms each way, no loss, --wmem 256M; with
# 1% loss bbr against cubic (seed 001: 8602 / 633 Mbit/s = 13.6x).
MIN_LONGFAT_GBPS = 5.0
MIN_BBR_OVER_CUBIC = 10.0
MSS = 1448
# A forwarder or the machine this busy is what bounds the stream.
BUSY = 0.85

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


def cpu_busy(before, after):
    """The busy share of all CPUs between two `cpu` lines of /proc/stat."""
    def fields(path):
        with open(path, encoding="utf-8") as f:
            parts = f.readline().split()
        if not parts or parts[0] != "cpu":
            fail(f"{path} is not a /proc/stat cpu line")
        return [int(x) for x in parts[1:]]
    b, a = fields(before), fields(after)
    delta = [y - x for x, y in zip(b, a)]
    total = sum(delta[:8])  # user nice system idle iowait irq softirq steal
    idle = delta[3] + delta[4]
    return (total - idle) / total if total > 0 else 0.0


def stream_detail(iperf_path, link_path, stat0, stat1, name, run):
    doc = load(iperf_path)
    if "error" in doc:
        fail(f"iperf3 reported an error in {iperf_path}: {doc['error']}")
    sender = doc["end"]["streams"][0]["sender"]
    link = load(link_path)
    duration = link.get("duration_s") or 1.0
    up, down = link["uplink"], link["downlink"]
    for d, direction in ((up, "uplink"), (down, "downlink")):
        if d.get("error"):
            fail(f"{link_path}: the {direction} forwarder stopped early: {d['error']}")
    values = {
        "cwnd_max_bytes": sender.get("max_snd_cwnd"),
        "rtt_mean_us": sender.get("mean_rtt"),
        "retransmits": sender.get("retransmits"),
        "uplink_cpu": up.get("cpu_s", 0.0) / duration,
        "downlink_cpu": down.get("cpu_s", 0.0) / duration,
        "kernel_drops": (up.get("kernel_drops") or 0) + (down.get("kernel_drops") or 0),
        "dropped_loss": up.get("dropped_loss"),
        "packets_in": up.get("packets_in"),
        "machine_busy": cpu_busy(stat0, stat1),
    }
    return "\n".join(f"sample\t{name}\t{key}\t{run}\t{value}"
                     for key, value in values.items() if value is not None)


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
    rows.extend(longfat_rows(meta, samples))
    rtts = samples.get(("rtt", "osprobe"), [])
    if rtts:
        m = statistics.median(rtts)
        rows.append({
            "name": "rtt through 20 ms each way", "rtt_p50_ns": m,
            "error_ns": m - RTT_EXPECTED_NS, "target": "40 ms +- 1 ms",
            "ok": abs(m - RTT_EXPECTED_NS) <= RTT_TOLERANCE_NS,
        })
    return rows


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = str(text)
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def bounds(meta, samples, name, loss):
    """Each candidate bound of one stream in bit/s (or as a share), and
    the one that binds."""
    rtt_s = 2 * float(meta.get("long_delay_ms", 50)) / 1e3
    wmem = size_bytes(meta.get("wmem", "256M"))
    got = lambda key: med(samples, name, key)
    found = {"buffer_bps": wmem * 8 / rtt_s}
    cwnd = got("cwnd_max_bytes")
    if cwnd:
        found["cwnd_bps"] = cwnd * 8 / rtt_s
    if loss and name.endswith(".cubic"):
        # Mathis et al.: a loss-based sender at loss p averages
        # MSS / RTT x sqrt(3 / 2p).
        found["loss_bound_bps"] = MSS * 8 / rtt_s * math.sqrt(1.5 / loss)
    for key in ("uplink_cpu", "downlink_cpu", "machine_busy"):
        if got(key) is not None:
            found[key] = got(key)
    for key in ("retransmits", "kernel_drops", "rtt_mean_us"):
        if got(key) is not None:
            found[key] = got(key)
    return found


def binding(found, rate):
    """What bounds a stream, in words."""
    if found.get("uplink_cpu", 0) >= BUSY:
        return f"the uplink forwarder (one core, {found['uplink_cpu']:.0%} busy)"
    if found.get("machine_busy", 0) >= BUSY:
        return f"the machine's CPUs ({found['machine_busy']:.0%} busy: sender, receiver, forwarders)"
    if "loss_bound_bps" in found and rate <= 2 * found["loss_bound_bps"]:
        return "the loss-based bound MSS/RTT x sqrt(3/2p)"
    if rate >= 0.8 * found["buffer_bps"]:
        return "the socket buffer ceiling / RTT"
    if "cwnd_bps" in found and rate >= 0.5 * found["cwnd_bps"]:
        return "the congestion window (still growing, or cut by losses)"
    return "none of the measured bounds (see the figures)"


def longfat_rows(meta, samples):
    rows = []
    loss = float(str(meta.get("loss", "1%")).rstrip("%")) / 100
    rates = {}
    for name, label, lossy in (("longfat.bbr", "bbr", False), ("longfat.cubic", "cubic", False),
                               ("longfat.loss.bbr", "bbr", True),
                               ("longfat.loss.cubic", "cubic", True)):
        values = samples.get((name, "emulator"), [])
        if not values:
            continue
        rate = statistics.median(values)
        rates[name] = rate
        found = bounds(meta, samples, name, loss if lossy else 0)
        title = (f"{label}, {meta.get('long_delay_ms')} ms each way, --wmem {meta.get('wmem')}"
                 + (f", {meta.get('loss')} loss" if lossy else ""))
        rows.append({
            "name": title, "key": name, "stream_bps": rate, "spread_pct": spread_pct(values),
            "bounds": found, "bound_by": binding(found, rate),
            "target": "information" if lossy else f">= {MIN_LONGFAT_GBPS:g} Gbit/s",
            "ok": None if lossy else rate >= MIN_LONGFAT_GBPS * 1e9,
        })
    if rates.get("longfat.loss.bbr") and rates.get("longfat.loss.cubic"):
        ratio = rates["longfat.loss.bbr"] / rates["longfat.loss.cubic"]
        rows.append({
            "name": f"bbr / cubic, {meta.get('loss')} loss", "ratio": ratio,
            "target": f">= {MIN_BBR_OVER_CUBIC:g}x (seed 001: 13.6x)",
            "ok": ratio >= MIN_BBR_OVER_CUBIC,
        })
    return rows


def bound_text(found):
    parts = [f"buffer/RTT {found['buffer_bps'] / 1e9:.1f}G"]
    if "cwnd_bps" in found:
        parts.append(f"max cwnd/RTT {found['cwnd_bps'] / 1e9:.2f}G")
    if "loss_bound_bps" in found:
        parts.append(f"loss bound {found['loss_bound_bps'] / 1e6:.1f}M")
    if "uplink_cpu" in found:
        parts.append(f"fwd CPU up {found['uplink_cpu']:.0%} down {found.get('downlink_cpu', 0):.0%}")
    if "machine_busy" in found:
        parts.append(f"CPUs {found['machine_busy']:.0%} busy")
    if "retransmits" in found:
        parts.append(f"{found['retransmits']:.0f} retrans")
    if found.get("kernel_drops"):
        parts.append(f"{found['kernel_drops']:.0f} kernel drops")
    return ", ".join(parts)


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
        elif "stream_bps" in r:
            body.append([r["name"], f"{r['stream_bps'] / 1e9:.3f} Gbit/s",
                         f"bound by {r['bound_by']}: {bound_text(r['bounds'])}",
                         r["target"], verdict(r["ok"])])
        elif "ratio" in r and "veth_bps" not in r:
            body.append([r["name"], f"{r['ratio']:.1f}x", "", r["target"], verdict(r["ok"])])
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
    elif command == "stream-detail" and len(args) == 6:
        print(stream_detail(*args))
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
