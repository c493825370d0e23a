#!/usr/bin/env python3
"""rfs_compare.py: the measuring half of bench/rfs_compare.sh (see there).

Runs `osprobe bench rfs.throughput --json` at chosen points, a plain TCP
stream over 127.0.0.1 for contrast, and prints one report. Everything is
measured in this run; nothing is compared with stored figures.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

STREAM_BYTES = 8 << 20
TIMEOUT_S = 300


def fail(message, code=1):
    print(f"rfs_compare: {message}", file=sys.stderr)
    sys.exit(code)


def bench(osprobe, params, profile="quick"):
    """One osprobe bench run of rfs.throughput; {metric: measurement}."""
    cmd = [osprobe, "bench", "rfs.throughput", "--profile", profile, "--no-store", "--json"]
    for k, v in params.items():
        cmd += ["--param", f"{k}={v}"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        fail(f"timed out: {' '.join(cmd)}")
    if out.returncode != 0:
        fail(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    doc = json.loads(out.stdout)
    found = {m["metric"]: m for m in doc["measurements"] if m["experiment"] == "rfs.throughput"}
    if not found:
        skipped = "; ".join(s.get("reason", "") for s in doc.get("skipped", []))
        return None, skipped or "no measurement"
    return found, ""


def plain_tcp_stream(nbytes, transfers=5):
    """bits/s of a plain TCP stream over 127.0.0.1: the median of `transfers`
    transfers of nbytes on one connection, a peer as fair as rfs.throughput's
    read: a connection already warm (rfs reads on one connection, sample after
    sample; the first transfer here only warms up), each transfer timed from
    the receiver's request to its last byte (as a read_at is), the bytes landing
    in a buffer of nbytes in reads of at most 1 MiB (the rfs client's reply
    buffer), the sender a process of its own (rfs's server is a thread of
    osprobe, not sharing Python's lock) and neither side pinned (nor is rfs)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    pid = os.fork()
    if pid == 0:
        try:
            conn, _ = listener.accept()
            data = b"\x5a" * nbytes
            while conn.recv(1) == b"g":
                conn.sendall(data)
        finally:
            os._exit(0)
    listener_addr = listener.getsockname()
    listener.close()
    rates = []
    try:
        rx = socket.create_connection(listener_addr)
        buf = bytearray(nbytes)
        view = memoryview(buf)
        for i in range(transfers + 1):
            start = time.perf_counter()
            rx.sendall(b"g")
            got = 0
            while got < nbytes:
                n = rx.recv_into(view[got:got + (1 << 20)])
                if n == 0:
                    fail("the plain TCP stream's sender closed early")
                got += n
            if i > 0:
                rates.append(nbytes * 8 / (time.perf_counter() - start))
        rx.close()
    finally:
        os.waitpid(pid, 0)
    return statistics.median(rates)


def read_cost(path, rounds):
    """{case: (Gbit/s, CPU-s/GiB)} from the read_cost example: tcp, udp and
    plain in one process, alternating, medians of `rounds` rounds."""
    cmd = [path, "tcp", "udp", "plain", "--rounds", str(rounds)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        fail(f"timed out: {' '.join(cmd)}")
    if out.returncode != 0:
        fail(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    found = {}
    for line in out.stdout.splitlines():
        f = line.split()
        # "   udp    24.08 Gbit/s   0.397 CPU-s/GiB"
        if len(f) == 5 and f[2] == "Gbit/s" and f[4] == "CPU-s/GiB":
            found[f[0]] = (float(f[1]), float(f[3]))
    if set(found) != {"tcp", "udp", "plain"}:
        fail(f"{' '.join(cmd)} printed no figures for every case: {out.stdout.strip()}")
    return found


def mbit(bits):
    return f"{bits / 1e6:9.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--osprobe", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--read-cost", default="")
    ap.add_argument("--part", choices=["all", "stream", "curves", "model", "cost"], default="all")
    a = ap.parse_args()
    want = lambda part: a.part in ("all", part)
    report = {"stream": {}, "curves": [], "model": [], "model_skipped": "", "cost": {}}

    # 1. rfs over TCP against a plain TCP stream, alternating, median of runs.
    # The same point over UDP gives the UDP/TCP ratio (target >= 0.8:
    # UDP within 20% of TCP).
    rfs_rates, udp_rates, plain_rates = [], [], []
    for i in range(a.runs if want("stream") else 0):
        order = ["rfs", "udp", "plain"] if i % 2 == 0 else ["plain", "udp", "rfs"]
        for who in order:
            if who == "plain":
                plain_rates.append(plain_tcp_stream(STREAM_BYTES))
            else:
                transport = "tcp" if who == "rfs" else "udp"
                found, why = bench(a.osprobe, {
                    "path": "loopback", "transport": transport, "window": 32,
                    "packet": "32K", "size": "8M"})
                if not found:
                    fail(f"rfs.throughput over {transport} gave nothing: {why}")
                (rfs_rates if who == "rfs" else udp_rates).append(found["read"]["summary"]["p50"])
    if rfs_rates:
        rfs_med, plain_med = statistics.median(rfs_rates), statistics.median(plain_rates)
        udp_med = statistics.median(udp_rates)
        report["stream"] = {"rfs_read_bits_per_s": rfs_med, "plain_tcp_bits_per_s": plain_med,
                            "ratio": rfs_med / plain_med, "target": 0.9,
                            "udp_read_bits_per_s": udp_med,
                            "udp_tcp_ratio": udp_med / rfs_med, "udp_target": 0.8,
                            "runs": a.runs,
                            "rfs_runs": rfs_rates, "udp_runs": udp_rates,
                            "plain_runs": plain_rates}

    # CPU-seconds per GiB, which survive load better than throughput.
    if want("cost"):
        if not a.read_cost:
            fail("--read-cost (the read_cost example's path) is needed for the cost part", 2)
        found = read_cost(a.read_cost, a.runs)
        report["cost"] = {case: {"gbit_per_s": g, "cpu_s_per_gib": c}
                          for case, (g, c) in found.items()}
        report["cost"]["tcp_udp_cost_ratio"] = found["tcp"][1] / found["udp"][1]

    # 2. Curves over the window: SOS's figure 5 setting, both transports.
    for transport in ["udp", "tcp"] if want("curves") else []:
        for window in [1, 2, 4, 8, 16, 24, 30, 32, 48, 64]:
            found, why = bench(a.osprobe, {
                "path": "loopback", "transport": transport, "window": window,
                "packet": 1284, "size": "1M"})
            if not found:
                fail(f"rfs.throughput {transport} window {window}: {why}")
            report["curves"].append({
                "transport": transport, "window": window,
                "read": found["read"]["summary"]["p50"],
                "write": found["write"]["summary"]["p50"],
            })

    # 3. The model over an emulated 10 ms round trip (root).
    for transport in ["udp", "tcp"] if want("model") else []:
        for window in [1, 4, 16, 64]:
            found, why = bench(a.osprobe, {
                "path": "emulated", "delay": "5ms", "transport": transport,
                "window": window, "packet": "32K", "size": "1M"}, profile="smoke")
            if not found:
                report["model_skipped"] = why
                break
            m = found["read"]
            binding = next((n.split("binding term: ")[1] for n in m["notes"]
                            if "binding term: " in n), "?")
            report["model"].append({
                "transport": transport, "window": window,
                "measured": m["summary"]["p50"], "predicted": m["prediction"]["value"],
                "ratio": m["summary"]["p50"] / m["prediction"]["value"],
                "binding": binding,
            })
        if report["model_skipped"]:
            break

    if a.json:
        print(json.dumps(report, indent=2))
        return
    s = report["stream"]
    if s:
        verdict = "meets" if s["ratio"] >= s["target"] else "BELOW"
        print("rfs over loopback TCP (window 32 x 32 KiB, 8 MiB read) vs a plain TCP stream of 8 MiB")
        print(f"  rfs read {mbit(s['rfs_read_bits_per_s'])} Mbit/s   plain TCP {mbit(s['plain_tcp_bits_per_s'])} Mbit/s"
              f"   ratio {s['ratio']:.2f} ({verdict} the target >= {s['target']}; median of {a.runs} runs)")
        verdict = "meets" if s["udp_tcp_ratio"] >= s["udp_target"] else "BELOW"
        print("rfs over loopback UDP vs TCP (the same window, packet and file)")
        print(f"  UDP read {mbit(s['udp_read_bits_per_s'])} Mbit/s   TCP read  {mbit(s['rfs_read_bits_per_s'])} Mbit/s"
              f"   ratio {s['udp_tcp_ratio']:.2f} ({verdict} the target >= {s['udp_target']}: UDP within 20% of TCP or faster)")
        print()
    c = report["cost"]
    if c:
        print("CPU-seconds per GiB read (client and server together, window 32 x 32 KiB, 8 MiB;"
              f" median of {a.runs} rounds)")
        for case in ["tcp", "udp", "plain"]:
            print(f"  {case:>5}  {c[case]['cpu_s_per_gib']:6.3f} CPU-s/GiB   {c[case]['gbit_per_s']:6.2f} Gbit/s")
        print(f"  TCP/UDP cost {c['tcp_udp_cost_ratio']:.2f} (UDP's throughput ratio where the read is"
              " CPU-bound; target >= 0.8)")
        print()
    if report["curves"]:
        print("window curves, loopback, 1284-byte packets, 1 MB file (Mbit/s, median per point)")
        print(f"  {'window':>6}  {'UDP read':>9}  {'UDP write':>9}  {'TCP read':>9}  {'TCP write':>9}")
        by = {(c["transport"], c["window"]): c for c in report["curves"]}
        for window in sorted({c["window"] for c in report["curves"]}):
            u, t = by[("udp", window)], by[("tcp", window)]
            print(f"  {window:>6}  {mbit(u['read'])}  {mbit(u['write'])}  {mbit(t['read'])}  {mbit(t['write'])}")
        print()
    if not want("model"):
        return
    if report["model_skipped"]:
        print(f"model over the emulated 10 ms path: skipped ({report['model_skipped']})")
        return
    print("model over an emulated 10 ms round trip, 32 KiB packets, 1 MB read (Mbit/s)")
    print(f"  {'transport':>9}  {'window':>6}  {'measured':>9}  {'predicted':>9}  ratio  binding term")
    for r in report["model"]:
        applies = r["binding"] == "window x packet / RTT"
        mark = ""
        if applies:
            mark = "  ok (within 20%)" if abs(r["ratio"] - 1) <= 0.2 else "  OFF by more than 20%"
        print(f"  {r['transport']:>9}  {r['window']:>6}  {mbit(r['measured'])}  {mbit(r['predicted'])}"
              f"  {r['ratio']:5.2f}  {r['binding']}{mark}")

if __name__ == "__main__":
    main()
