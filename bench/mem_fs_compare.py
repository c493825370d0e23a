#!/usr/bin/env python3
"""Helper for mem_fs_compare.sh: parse mbw, fio and osprobe outputs and report.

Kept apart from the shell script because JSON and statistics are clumsy in
bash. Standard library only, so it runs on a bare Debian python3. Helpers
shared with perf_compare.py live in benchlib.py, beside this file.

Subcommands:
  first-cpu                 the lowest CPU this process may run on (the CPU
                            osprobe pins to: PinGuard::first_allowed)
  mbw-rates                 stdin: `mbw` output; prints one line per method
                            that has an AVG line: METHOD BYTES_PER_S, the
                            rate in decimal bytes/s (mbw's MiB/s x 2^20)
  fio-ns                    stdin: `fio --output-format=json` of one read
                            job; prints its mean total latency (lat_ns) and
                            its median completion latency (clat_ns p50), in
                            ns, separated by a space
  osprobe-metrics EXP UNIT METRIC[,METRIC...] [K=V ...]
                            stdin: an osprobe run document (--json); prints
                            METRIC P50 MEAN for every measurement of EXP
                            whose params include each K=V; each METRIC named
                            must be among them
  report FILE [--json]      FILE: the records mem_fs_compare.sh wrote; prints
                            the comparison table, or JSON with --json
"""

import json
import re
import statistics
import sys

# benchlib.py sits beside this file (the script's directory is on sys.path);
# leave no __pycache__ behind in the repository.
sys.dont_write_bytecode = True
from benchlib import (fail, find_measurement, first_cpu, load_osprobe_doc,  # noqa: E402
                      report as report_records, spread_pct, table_lines)

MIB = 1 << 20
# mbw's three methods in the order it runs them, with what each one does in
# mbw 1.2.2 (Debian bookworm's build, read from its disassembly). The labels
# MEMCPY and DUMB are swapped in mbw's source: worker() runs the plain loop
# for test 0, which printout() calls MEMCPY, and memcpy() for test 1, called
# DUMB. MCBLOCK copies 256 KiB blocks with mempcpy() but never advances the
# source pointer, so it reads one cache-resident block while the destination
# walks the whole array: half a DRAM copy.
MBW_METHODS = {
    "MEMCPY": "b[i]=a[i] loop, 8-byte scalar loads and stores (label swapped)",
    "DUMB": "one glibc memcpy() of the whole array (label swapped)",
    "MCBLOCK": "mempcpy() of 256 KiB blocks, source block never advances (cached)",
}

AVG_LINE = re.compile(
    r"^AVG\s+Method:\s+(\w+)\s+Elapsed:\s+([0-9.]+)\s+MiB:\s+([0-9.]+)\s+Copy:\s+([0-9.]+)\s+MiB/s\s*$",
    re.MULTILINE,
)


def mbw_rates():
    text = sys.stdin.read()
    # e.g. "AVG\tMethod: MEMCPY\tElapsed: 0.03261\tMiB: 256.00000\tCopy:
    # 7851.155 MiB/s": the array's MiB over the mean elapsed time of the
    # iterations, so total bytes / total time. mbw's MiB is 2^20 bytes;
    # osprobe's bytes/s are plain bytes. Copy is used as printed (3 decimals
    # of MiB/s): MiB / Elapsed would lose precision, Elapsed having only 5
    # decimals of a second.
    found = AVG_LINE.findall(text)
    if not found:
        fail("no 'AVG Method: ... Copy: ... MiB/s' line in mbw's output:\n" + text)
    for method, _elapsed, _mib, mib_per_s in found:
        print(f"{method} {float(mib_per_s) * MIB:.1f}")


def fio_ns():
    text = sys.stdin.read()
    # fio may print warnings before the JSON object.
    start = text.find("{")
    try:
        doc = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as e:
        fail(f"fio's output is not JSON: {e}\n{text}")
    jobs = (doc or {}).get("jobs") or []
    if len(jobs) != 1:
        fail(f"expected one job in fio's output, found {len(jobs)}:\n{text}")
    job = jobs[0]
    if job.get("error"):
        fail(f"fio job {job.get('jobname')!r} failed with error {job['error']}")
    read = job["read"]
    if not read.get("total_ios"):
        fail(f"fio job {job.get('jobname')!r} completed no read")
    # lat = submission + completion; with a synchronous engine (psync) the
    # submission latency is zero and clat is the whole pread(2). The mean is
    # total time in reads / reads, which is what a pass time / blocks is.
    lat_mean = read["lat_ns"]["mean"]
    clat_p50 = read["clat_ns"].get("percentile", {}).get("50.000000")
    print(f"{lat_mean:.3f} {clat_p50 if clat_p50 is not None else 'nan'}")


def osprobe_metrics(experiment, unit, metrics, pairs):
    doc = load_osprobe_doc(sys.stdin)
    wanted = [m for m in metrics.split(",") if m]
    for metric in wanted:
        # Fails, naming osprobe's skipped points, when one is missing.
        find_measurement(doc, experiment, metric, pairs, unit)
    want = dict(p.split("=", 1) for p in pairs)
    seen = set()
    for m in doc.get("measurements", []):
        params = {k: str(v) for k, v in (m.get("params") or {}).items()}
        if (
            m.get("experiment") == experiment
            and m.get("unit") == unit
            and m.get("metric") not in seen
            and all(params.get(k) == v for k, v in want.items())
        ):
            seen.add(m["metric"])
            print(f"{m['metric']} {m['summary']['p50']:.3f} {m['summary']['mean']:.3f}")


# The comparisons, in report order. "higher": a rate (bytes/s), the target
# is osprobe >= the peer; "lower": a latency (ns), the target is osprobe
# within the tolerance of the peer.
COMPARISONS = {
    "mem.copy": {"better": "higher", "peer": "mbw"},
    "fs.sequential": {"better": "lower", "peer": "fio"},
    "fs.random": {"better": "lower", "peer": "fio"},
}


def median_or_none(values):
    return statistics.median(values) if values else None


def compare(meta, pairs, samples):
    tolerance = float(meta.pop("tolerance_pct", 15))
    rows = []
    for p in pairs:
        name = p["name"]
        kind = COMPARISONS[name]
        osp = samples.get((name, "osprobe"), [])
        osp_mean = samples.get((name, "osprobe_mean"), [])
        if kind["peer"] == "mbw":
            # Every method mbw printed, each as the median of its per-run
            # averages; the best of them is the peer figure.
            variants = {}
            for method in list(MBW_METHODS) + sorted(
                    t[len("mbw."):] for (n, t) in samples
                    if n == name and t.startswith("mbw.") and t[len("mbw."):] not in MBW_METHODS):
                runs = samples.get((name, f"mbw.{method}"), [])
                if runs:
                    variants[method] = {
                        "what": MBW_METHODS.get(method, ""),
                        "runs_bytes_per_s": runs,
                        "median_bytes_per_s": statistics.median(runs),
                        "spread_pct": spread_pct(runs),
                    }
            if not variants or not osp:
                fail(f"no samples for {name}")
            best = max(variants, key=lambda v: variants[v]["median_bytes_per_s"])
            peer = variants[best]["runs_bytes_per_s"]
            # MCBLOCK reads a cache-resident source: say so where it wins.
            peer_label = f"mbw {best}" + (" (cached source)" if best == "MCBLOCK" else "")
        else:
            peer = samples.get((name, "fio"), [])
            if not peer or not osp:
                fail(f"no samples for {name}")
            peer_label = "fio " + ("read" if name == "fs.sequential" else "randread")
        peer_med, osp_med = statistics.median(peer), statistics.median(osp)
        osp_mean_med = median_or_none(osp_mean)
        ratio = osp_med / peer_med
        if kind["better"] == "higher":
            met = ratio >= 1.0
        else:
            met = abs(ratio - 1.0) <= tolerance / 100.0
        peer_spread, osp_spread = spread_pct(peer), spread_pct(osp)
        row = {
            **p,
            "unit": "bytes/s" if kind["better"] == "higher" else "ns",
            "target": "osprobe >= best mbw variant" if kind["better"] == "higher"
            else f"osprobe within {tolerance:g}% of fio",
            "peer": peer_label,
            "peer_runs": peer,
            "osprobe_runs": osp,
            "peer_median": peer_med,
            "osprobe_median": osp_med,
            "ratio": ratio,
            "target_met": met,
            "peer_spread_pct": peer_spread,
            "osprobe_spread_pct": osp_spread,
            "osprobe_spread_le_peer": osp_spread <= peer_spread,
            # Informational: osprobe's mean over the peer's figure.
            "osprobe_mean_runs": osp_mean,
            "osprobe_mean_median": osp_mean_med,
            "mean_ratio": osp_mean_med / peer_med if osp_mean_med else None,
        }
        if kind["peer"] == "mbw":
            row["mbw_best_method"] = best
            row["mbw_variants"] = variants
            # osprobe's other single-thread operations, for information.
            info = {}
            for (n, tool), runs in sorted(samples.items()):
                if n == name and tool.startswith("osprobe.") and not tool.endswith("_mean"):
                    info[tool[len("osprobe."):]] = {
                        "runs_bytes_per_s": runs,
                        "median_bytes_per_s": statistics.median(runs),
                    }
            row["osprobe_other_ops"] = info
        else:
            clat = [v for v in samples.get((name, "fio_clat_p50"), []) if v == v]
            row["fio_clat_p50_runs"] = clat
            row["fio_clat_p50_median"] = median_or_none(clat)
        rows.append(row)
    return tolerance, rows


def show(value, unit):
    """A figure as the table shows it: rates in decimal GB/s, times in ns."""
    if unit == "bytes/s":
        return f"{value / 1e9:.2f}"
    return f"{value:.0f}"


def shown_unit(unit):
    return "GB/s" if unit == "bytes/s" else "ns/block"


def print_table(meta, tolerance, rows):
    tol = f"{tolerance:g}%"
    header = ["comparison", "unit", "peer (method)", "peer", "osprobe", "osp/peer", "verdict",
              "peer spread", "osp spread", "osp spread <= peer", "osp mean/peer"]
    body = []
    for r in rows:
        if r["unit"] == "bytes/s":
            verdict = "at least mbw" if r["target_met"] else "BELOW mbw"
        else:
            verdict = f"within {tol}" if r["target_met"] else f"OUTSIDE {tol}"
        body.append([
            r["name"],
            shown_unit(r["unit"]),
            r["peer"],
            show(r["peer_median"], r["unit"]),
            show(r["osprobe_median"], r["unit"]),
            f"{r['ratio']:.3f}",
            verdict,
            f"{r['peer_spread_pct']:.1f}%",
            f"{r['osprobe_spread_pct']:.1f}%",
            "yes" if r["osprobe_spread_le_peer"] else "no",
            f"{r['mean_ratio']:.3f}" if r["mean_ratio"] else "-",
        ])

    print(f"osprobe vs mbw and fio: {meta.get('runs')} run(s) of each, alternating; "
          f"medians of per-run figures (osprobe: p50; mbw: AVG; fio: mean lat)")
    print(f"{meta.get('mbw_binary')} ({meta.get('mbw_version')}), {meta.get('fio_version')}; "
          f"osprobe {meta.get('osprobe_version')}; kernel {meta.get('kernel')}; "
          f"mbw pinned to CPU {meta.get('cpu')} like osprobe's copy thread")
    print(f"fio and fs.read in {meta.get('scratch_dir')} ({meta.get('scratch_fs')})")
    print()
    for text in table_lines(header, body):
        print(text)
    print()
    print("Targets: copy (one thread) at least mbw's best method; fs.read within "
          f"{tol} of fio's per-block latency.")
    print("GB/s = 10^9 bytes/s; mbw prints MiB/s (2^20 bytes), converted here. Both count")
    print("the bytes of a copy once. spread = (max - min) / median over the runs.")
    print("osp mean/peer is information only: osprobe's mean over the peer's figure.")
    for r in rows:
        print(f"{r['name']}:")
        if "mbw_variants" in r:
            print(f"  mbw     {r['peer_command']}")
            for method, v in r["mbw_variants"].items():
                mark = "*" if method == r["mbw_best_method"] else " "
                runs = " ".join(f"{x / 1e9:.2f}" for x in v["runs_bytes_per_s"])
                mibs = v["median_bytes_per_s"] / MIB
                print(f"        {mark} {method:<8} runs GB/s: {runs}  (median {mibs:.0f} MiB/s)")
                if v["what"]:
                    print(f"                   {v['what']}")
            print(f"  osprobe {r['osprobe_command']}")
            print("          copy runs GB/s: "
                  + " ".join(f"{x / 1e9:.2f}" for x in r["osprobe_runs"]) + "  (p50)")
            if r["osprobe_mean_runs"]:
                print("                          "
                      + " ".join(f"{x / 1e9:.2f}" for x in r["osprobe_mean_runs"]) + "  (mean)")
            for op, v in r["osprobe_other_ops"].items():
                print(f"          {op} runs GB/s: "
                      + " ".join(f"{x / 1e9:.2f}" for x in v["runs_bytes_per_s"])
                      + "  (p50, information)")
        else:
            print(f"  fio     {r['peer_command']}")
            print("          runs ns: " + " ".join(f"{x:.0f}" for x in r["peer_runs"])
                  + "  (mean lat)")
            if r["fio_clat_p50_runs"]:
                print("                   " + " ".join(f"{x:.0f}" for x in r["fio_clat_p50_runs"])
                      + "  (clat p50, information)")
            print(f"  osprobe {r['osprobe_command']}")
            print("          runs ns: " + " ".join(f"{x:.0f}" for x in r["osprobe_runs"])
                  + "  (p50)")
            if r["osprobe_mean_runs"]:
                print("                   " + " ".join(f"{x:.0f}" for x in r["osprobe_mean_runs"])
                      + "  (mean)")


def report(path, as_json):
    report_records(path, as_json, ("peer_command", "osprobe_command"), compare, print_table)


def main(argv):
    if not argv:
        fail("usage: mem_fs_compare.py first-cpu|mbw-rates|fio-ns|osprobe-metrics|report ...")
    cmd, args = argv[0], argv[1:]
    if cmd == "first-cpu":
        print(first_cpu())
    elif cmd == "mbw-rates":
        mbw_rates()
    elif cmd == "fio-ns":
        fio_ns()
    elif cmd == "osprobe-metrics" and len(args) >= 3:
        osprobe_metrics(args[0], args[1], args[2], args[3:])
    elif cmd == "report" and args:
        report(args[0], "--json" in args[1:])
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
