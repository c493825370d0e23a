#!/usr/bin/env python3
"""fleet.py: the Python half of bench/fleet.sh.

  stages SUMMARY.json   the fleet run's per-host stage seconds, as TSV lines
                        host<TAB>stage<TAB>seconds
  report RECORDS.tsv --overhead S --bytes N [--json]
                        medians over the rounds: the fleet's wall time
                        (cold, warm) beside the hosts run by hand one after
                        another, and per host the ssh transport and copy cost
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict


def stages(path):
    with open(path) as f:
        summary = json.load(f)
    for host in summary["hosts"]:
        for stage, seconds in host["stages"].items():
            print(f"{host['host']}\t{stage}\t{seconds:.3f}")


def report(path, overhead, size, as_json):
    values = defaultdict(list)
    with open(path) as f:
        for line in f:
            _round, what, key, seconds = line.rstrip("\n").split("\t")
            values[(what, key)].append(float(seconds))
    med = {k: statistics.median(v) for k, v in values.items()}
    rounds = max((len(v) for v in values.values()), default=0)
    hosts = sorted({k.split(".")[0] for (w, k) in med if w == "warm" and "." in k})
    by_hand = {h: med.get(("hand", h)) for h in hosts}
    slowest = max((v for v in by_hand.values() if v is not None), default=0.0)
    warm, cold = med.get(("warm", "wall"), 0.0), med.get(("cold", "wall"), 0.0)
    per_host = {}
    for h in hosts:
        transport = med.get(("warm", f"{h}.connect"), 0.0) + med.get(("warm", f"{h}.version"), 0.0)
        per_host[h] = {
            "by_hand_s": by_hand[h],
            "fleet_run_stage_s": med.get(("warm", f"{h}.run")),
            "ssh_transport_s": transport,
            "copy_s": med.get(("cold", f"{h}.copy")),
        }
    verdict = warm <= slowest + overhead
    out = {
        "rounds": rounds,
        "binary_bytes": size,
        "fleet_cold_s": cold,
        "fleet_warm_s": warm,
        "by_hand_sum_s": med.get(("hand", "sum")),
        "by_hand_slowest_s": slowest,
        "target": f"warm fleet <= slowest by hand + {overhead} s",
        "within_target": verdict,
        "hosts": per_host,
    }
    if as_json:
        json.dump(out, sys.stdout, indent=2)
        print()
        return
    print(f"fleet run --parallel 3 over 3 hosts, medians of {rounds} round(s)")
    print(f"  fleet, cold (osprobe copied)   {cold:8.2f} s")
    print(f"  fleet, warm (already there)    {warm:8.2f} s")
    print(f"  by hand, one after another     {out['by_hand_sum_s'] or 0:8.2f} s")
    print(f"  by hand, slowest host          {slowest:8.2f} s")
    word = "within" if verdict else "OUTSIDE"
    print(f"  warm fleet - slowest by hand   {warm - slowest:8.2f} s  ({word} {overhead} s)")
    print(f"per host (copy of {size / 1e6:.1f} MB):")
    print(f"  {'host':6} {'by hand':>9} {'in fleet':>9} {'ssh':>7} {'copy':>7}")
    for h, v in per_host.items():
        fmt = lambda x: f"{x:7.2f}" if x is not None else "      -"
        print(f"  {h:6} {fmt(v['by_hand_s'])}   {fmt(v['fleet_run_stage_s'])}  {fmt(v['ssh_transport_s'])} {fmt(v['copy_s'])}")
    print("  ssh: connect + probe + version check (warm); copy: cold run; seconds")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stages")
    s.add_argument("summary")
    r = sub.add_parser("report")
    r.add_argument("records")
    r.add_argument("--overhead", type=float, default=5.0)
    r.add_argument("--bytes", type=int, default=0)
    r.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.cmd == "stages":
        stages(args.summary)
    else:
        report(args.records, args.overhead, args.bytes, args.json)


if __name__ == "__main__":
    main()
