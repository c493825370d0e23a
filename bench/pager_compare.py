#!/usr/bin/env python3
"""Helper for pager_compare.sh: parse osprobe's pager and page-fault runs
and report.

Kept apart from the shell script because JSON and statistics are clumsy in
bash. Standard library only, so it runs on a bare Debian python3. Helpers
shared with the other scripts live in benchlib.py, beside this file.

Subcommands:
  first-cpu                 the lowest CPU this process may run on (the CPU
                            osprobe pins to: PinGuard::first_allowed)
  pager-check               stdin: a pager.fault run document; exit 0 when
                            it measured something, 3 (printing osprobe's
                            reasons) when it skipped every point
  pager-fault FAULT SERVE   stdin: a pager.fault run document (its point with
                            serve=SERVE, handler-thread or faulting-thread);
                            prints TOOL NS
                            lines: pager (p50), pager_mean, the kernel's fault
                            as pager.fault's notes give it (kernel_same_way
                            for zero_fill, kernel_cached for the swap-ins),
                            handler and handler_evict (time inside the
                            pager's handler)
  kernel-fault KIND         stdin: a mem.page_fault run document (KIND minor
                            or major); prints TOOL NS lines: kernel (p50,
                            sequential order), kernel_mean, kernel_random
                            (p50, random order)
  policy-rows               stdin: a pager.policy run document; prints one
                            tab-separated "policy" record per fault count
  scan-rows RUN             stdin: a pager.scan run document; prints one
                            tab-separated "scan" record per point: RUN,
                            read-around, scan and rfs get p50 in bit/s
  report FILE [--json]      FILE: the records pager_compare.sh wrote; prints
                            the tables, or JSON with --json
"""

import json
import re
import statistics
import sys

# benchlib.py sits beside this file (the script's directory is on sys.path);
# leave no __pycache__ behind in the repository.
sys.dont_write_bytecode = True
from benchlib import (fail, first_cpu, load_osprobe_doc, load_records,  # noqa: E402
                      spread_pct, table_lines)

# pager.fault's notes, as crates/pager/src/experiments/fault.rs writes them:
#   "kernel's own minor fault (...), on this CPU: p50 1.04 us; the pager's is ..."
#   "inside the handler (...), p50: zero-fill 5.93 us, swap-in 14.17 us of which
#    evicting the victim 5.74 us; counters: ..."
# A figure the pager did not measure is "-".
# (the zero-fill's note has no comma before "on this CPU").
KERNEL_NOTE = re.compile(r"kernel's own .*?,? on this CPU: p50 ([0-9.]+) us")
HANDLER_NOTE = re.compile(
    r"inside the handler .*?p50: zero-fill ([0-9.]+ us|-), swap-in ([0-9.]+ us|-) "
    r"of which evicting the victim ([0-9.]+ us|-)")
# pager.policy's notes on a live point.
OFFLINE_SAME = re.compile(r"the offline simulation of this trace gives the same (\d+) faults")
OFFLINE_DIFFERS = re.compile(r"differs from the offline simulation \((\d+) faults\)")
BELADY = "Belady's anomaly"

POLICIES = ["fifo", "clock", "lru", "opt"]
POLICY_LABELS = {"fifo": "FIFO", "clock": "Second Chance", "lru": "LRU (aging)", "opt": "OPT"}


def us_to_ns(text):
    """'5.93 us' as ns, or None for '-'."""
    return None if text == "-" else float(text.split()[0]) * 1e3


def measurements(doc, experiment, metric):
    return [m for m in doc.get("measurements", [])
            if m.get("experiment") == experiment and m.get("metric") == metric]


def skipped_reasons(doc):
    return "; ".join(sorted({s.get("reason", "?") for s in doc.get("skipped") or []}))


def pager_check():
    doc = load_osprobe_doc(sys.stdin)
    if any(m.get("experiment") == "pager.fault" for m in doc.get("measurements", [])):
        return
    reasons = skipped_reasons(doc)
    if not reasons:
        fail("pager.fault measured nothing and skipped nothing")
    print(reasons)
    sys.exit(3)


def pager_fault(fault, serve):
    doc = load_osprobe_doc(sys.stdin)
    # A point without `serve` is served by the handler thread.
    found = [m for m in measurements(doc, "pager.fault", fault)
             if m.get("params", {}).get("fault") == fault
             and m["params"].get("serve", "handler-thread") == serve]
    if fault == "swap_in_rfs":
        found = [m for m in found if m["params"].get("path") == "loopback"]
    else:
        # `--param fault=X` also turns the grid's swap_in_rfs point (which
        # carries path=loopback) into a second X point: the same measurement
        # made twice. Take the plain one.
        found.sort(key=lambda m: "path" in m["params"])
    if not found:
        reasons = skipped_reasons(doc)
        fail(f"no pager.fault/{fault} serve={serve} measurement in osprobe's output"
             + (f" (skipped: {reasons})" if reasons else ""))
    m = found[0]
    if m.get("unit") != "ns":
        fail(f"pager.fault/{fault} is in {m.get('unit')!r}, expected ns")
    print(f"pager {m['summary']['p50']:.1f}")
    print(f"pager_mean {m['summary']['mean']:.1f}")
    for note in m.get("notes") or []:
        k = KERNEL_NOTE.search(note)
        if k:
            tool = "kernel_same_way" if fault == "zero_fill" else "kernel_cached"
            print(f"{tool} {float(k.group(1)) * 1e3:.1f}")
        h = HANDLER_NOTE.search(note)
        if h:
            zero, swap, evict = (us_to_ns(g) for g in h.groups())
            handler = zero if fault == "zero_fill" else swap
            if handler is not None:
                print(f"handler {handler:.1f}")
            if fault != "zero_fill" and evict is not None:
                print(f"handler_evict {evict:.1f}")


def kernel_fault(kind):
    doc = load_osprobe_doc(sys.stdin)
    by_order = {m.get("params", {}).get("order"): m
                for m in measurements(doc, "mem.page_fault", kind)}
    seq = by_order.get("sequential")
    if seq is None:
        reasons = skipped_reasons(doc)
        fail(f"no mem.page_fault/{kind} order=sequential measurement in osprobe's output"
             + (f" (skipped: {reasons})" if reasons else ""))
    if seq.get("unit") != "ns":
        fail(f"mem.page_fault/{kind} is in {seq.get('unit')!r}, expected ns")
    print(f"kernel {seq['summary']['p50']:.1f}")
    print(f"kernel_mean {seq['summary']['mean']:.1f}")
    rnd = by_order.get("random")
    if rnd is not None:
        print(f"kernel_random {rnd['summary']['p50']:.1f}")


def policy_rows():
    """policy TRACE PAGES LENGTH FRAMES POLICY MODE FAULTS BELADY RUN_TIME_NS
    OFFLINE_FAULTS: one line per `faults` measurement. PAGES and LENGTH are
    "-" where the trace has none (classic); BELADY is 1 when a note names
    the anomaly; RUN_TIME_NS (live only) and OFFLINE_FAULTS (live only, from
    the note comparing it with the simulation) are "-" when absent."""
    doc = load_osprobe_doc(sys.stdin)
    run_times = {}
    for m in measurements(doc, "pager.policy", "run_time"):
        run_times[json.dumps(m["params"], sort_keys=True)] = m["summary"]["p50"]
    rows = 0
    for m in measurements(doc, "pager.policy", "faults"):
        p = m.get("params", {})
        notes = m.get("notes") or []
        offline = "-"
        for note in notes:
            o = OFFLINE_SAME.search(note) or OFFLINE_DIFFERS.search(note)
            if o:
                offline = o.group(1)
        run_time = run_times.get(json.dumps(p, sort_keys=True))
        fields = ["policy", p.get("trace", "?"), str(p.get("pages", "-")),
                  str(p.get("length", "-")), str(p.get("frames", "?")), p.get("policy", "?"),
                  p.get("mode", "?"), f"{m['summary']['p50']:.0f}",
                  "1" if any(BELADY in n for n in notes) else "0",
                  f"{run_time:.0f}" if run_time is not None else "-", offline]
        print("\t".join(fields))
        rows += 1
    if not rows:
        reasons = skipped_reasons(doc)
        fail("no pager.policy/faults measurement in osprobe's output"
             + (f" (skipped: {reasons})" if reasons else ""))


def scan_rows(run):
    """scan RUN READ_AROUND SCAN_BPS GET_BPS: one line per pager.scan point."""
    doc = load_osprobe_doc(sys.stdin)
    gets = {}
    for m in measurements(doc, "pager.scan", "rfs_get"):
        gets[str(m["params"].get("read_around"))] = m["summary"]["p50"]
    rows = 0
    for m in measurements(doc, "pager.scan", "scan"):
        ra = str(m["params"].get("read_around"))
        if ra not in gets:
            continue
        print("\t".join(["scan", run, ra, f"{m['summary']['p50']:.0f}", f"{gets[ra]:.0f}"]))
        rows += 1
    if not rows:
        reasons = skipped_reasons(doc)
        fail("no pager.scan measurement in osprobe's output"
             + (f" (skipped: {reasons})" if reasons else ""))


# The target: a sequential scan through rfs swap at least half of
# rfs get's throughput on the same path.
SCAN_TARGET = 0.5


def scan_table(path):
    """Per read-around: the medians over the runs of scan and rfs get, the
    ratio of each run and its median, and the verdict (read-around only)."""
    by_ra = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0] != "scan":
                continue
            _, _run, ra, scan, get = fields
            by_ra.setdefault(int(ra), []).append((float(scan), float(get)))
    rows = []
    for ra in sorted(by_ra):
        runs = by_ra[ra]
        ratios = [s / g for s, g in runs if g > 0]
        ratio = statistics.median(ratios) if ratios else None
        rows.append({
            "read_around": ra,
            "scan_median_bps": statistics.median(s for s, _ in runs),
            "rfs_get_median_bps": statistics.median(g for _, g in runs),
            "ratio_runs": ratios,
            "ratio_median": ratio,
            "target": SCAN_TARGET if ra > 1 else None,
            "target_met": (ratio is not None and ratio >= SCAN_TARGET) if ra > 1 else None,
        })
    return rows


# The zero-fill's serving modes: comparison name, serve parameter.
ZERO_FILL_MODES = [("zero_fill", "handler-thread"), ("zero_fill_faulting", "faulting-thread")]


def zero_fill_ratios(meta, samples):
    """Per serving mode: the zero-fill's p50 over the kernel's minor fault
    measured in the same pager.fault run (timed the same way), run by run,
    their median and the verdict against the ratio target; and, for
    information, the ratio to mem.page_fault's minor fault (a separate run
    in the same round)."""
    target = float(meta.get("target_zero_fill_ratio", 3))
    kernel = samples.get(("zero_fill", "kernel"), [])
    rows = []
    for name, serve in ZERO_FILL_MODES:
        pager = samples.get((name, "pager"), [])
        same = samples.get((name, "kernel_same_way"), [])
        if not pager or len(same) != len(pager):
            continue
        ratios = [p / k for p, k in zip(pager, same) if k > 0]
        ratio = statistics.median(ratios) if ratios else None
        rows.append({
            "serve": serve,
            "pager_median_ns": statistics.median(pager),
            "kernel_same_run_median_ns": statistics.median(same),
            "ratio_runs": ratios,
            "ratio_median": ratio,
            "ratio_to_mem_page_fault": statistics.median(pager) / statistics.median(kernel)
            if kernel else None,
            "target_ratio": target,
            "target_met": ratio is not None and ratio <= target,
        })
    return rows


def print_zero_fill_ratios(rows):
    if not rows:
        return
    target = rows[0]["target_ratio"]
    print()
    print(f"Zero-fill vs the kernel's minor fault measured in the same pager.fault run (timed the "
          f"same way; target <= {target:g}x), per serving mode:")
    header = ["serve", "zero-fill us", "kernel us", "ratio", "runs", "vs mem.page_fault",
              "target", "verdict"]
    body = []
    for r in rows:
        body.append([r["serve"], us(r["pager_median_ns"]), us(r["kernel_same_run_median_ns"]),
                     "-" if r["ratio_median"] is None else f"{r['ratio_median']:.2f}",
                     " ".join(f"{x:.2f}" for x in r["ratio_runs"]),
                     "-" if r["ratio_to_mem_page_fault"] is None
                     else f"{r['ratio_to_mem_page_fault']:.2f}",
                     f"<= {target:g}x", "met" if r["target_met"] else "ABOVE"])
    for text in table_lines(header, body):
        print(text)
    met = [r["serve"] for r in rows if r["target_met"]]
    if met:
        print(f"Zero-fill within {target:g}x of the kernel's minor fault: met with serve="
              + " and serve=".join(met) + ".")
    else:
        print(f"Zero-fill within {target:g}x of the kernel's minor fault: met by no serving mode.")


def print_scan(meta, rows):
    if not rows:
        return
    print()
    print(f"Sequential scan through rfs swap vs rfs get, same path (pager.scan, {meta.get('runs')} "
          f"run(s): {meta.get('scan_command')})")
    header = ["read-around", "scan Gbit/s", "rfs get Gbit/s", "scan/get", "runs", "target", "verdict"]
    body = []
    for r in rows:
        verdict = "-" if r["target"] is None else ("met" if r["target_met"] else "BELOW")
        body.append([str(r["read_around"]), f"{r['scan_median_bps'] / 1e9:.2f}",
                     f"{r['rfs_get_median_bps'] / 1e9:.2f}",
                     "-" if r["ratio_median"] is None else f"{r['ratio_median']:.2f}",
                     " ".join(f"{x:.2f}" for x in r["ratio_runs"]),
                     "-" if r["target"] is None else f">= {r['target']:g}", verdict])
    for text in table_lines(header, body):
        print(text)


def load_policy(path):
    points = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0] != "policy":
                continue
            trace, pages, length, frames, policy, mode, faults, belady, run_time, offline = fields[1:11]
            points.append({
                "trace": trace,
                "pages": None if pages == "-" else int(pages),
                "length": None if length == "-" else int(length),
                "frames": int(frames),
                "policy": policy,
                "mode": mode,
                "faults": int(faults),
                "belady_noted": belady == "1",
                "run_time_ns": None if run_time == "-" else float(run_time),
                "offline_faults_noted": None if offline == "-" else int(offline),
            })
    return points


def median_or_none(values):
    return statistics.median(values) if values else None


def side(samples, name, tool):
    runs = samples.get((name, tool), [])
    return {"runs_ns": runs, "median_ns": median_or_none(runs),
            "spread_pct": spread_pct(runs) if runs else None}


def compare(meta, pairs, samples):
    targets = {"zero_fill": float(meta.get("target_zero_fill_us", 15)),
               "zero_fill_faulting": float(meta.get("target_zero_fill_us", 15)),
               "swap_in_file": float(meta.get("target_swap_in_us", 30))}
    commands = {p["name"]: p for p in pairs}
    # (comparison, the pager's figure, the other side's, what that is in
    # the table and in the details, whether the target is judged on this row)
    plan = [
        ("zero_fill", "pager", ("zero_fill", "kernel"), "kernel minor",
         "the kernel's minor fault (mem.page_fault, anonymous first touch, sequential)", True),
        ("zero_fill_faulting", "pager", ("zero_fill", "kernel"), "kernel minor",
         "the kernel's minor fault (mem.page_fault, anonymous first touch, sequential)", True),
        ("swap_in_file", "pager", ("swap_in_file", "kernel"), "kernel major",
         "the kernel's major fault (mem.page_fault, evicted file page read back, sequential)", True),
        ("swap_in_file", "pager", ("swap_in_file", "kernel_cached"), "kernel page-cached",
         "the kernel's fault on a page-cached file page (pager.fault's notes; per fault, "
         "one fault maps a whole folio)", False),
        ("swap_in_rfs", "pager", ("swap_in_file", "pager"), "pager swap_in_file",
         "the pager's local swap-in (swap_in_file, same runs)", False),
    ]
    rows = []
    for name, tool, (other_name, other_tool), against, described, judged in plan:
        pager = side(samples, name, tool)
        other = side(samples, other_name, other_tool)
        if pager["median_ns"] is None:
            fail(f"no samples for {name}")
        if other["median_ns"] is None:
            # The page-cached figure is optional (parsed from notes).
            if other_tool == "kernel_cached":
                continue
            fail(f"no samples for {other_name}/{other_tool}")
        target = targets.get(name) if judged else None
        row = {
            "name": name,
            "against": against,
            "against_described": described,
            "pager_command": commands.get(name, {}).get("pager_command"),
            "other_command": commands.get(name, {}).get("peer_command")
            if other_tool != "kernel_cached" else commands.get(name, {}).get("pager_command"),
            "pager_runs_ns": pager["runs_ns"],
            "pager_median_ns": pager["median_ns"],
            "pager_spread_pct": pager["spread_pct"],
            "other_runs_ns": other["runs_ns"],
            "other_median_ns": other["median_ns"],
            "other_spread_pct": other["spread_pct"],
            "ratio": pager["median_ns"] / other["median_ns"],
            "target_p50_us": target,
            "target_met": None if target is None else pager["median_ns"] <= target * 1e3,
            "pager_mean_median_ns": median_or_none(samples.get((name, "pager_mean"), [])),
            "other_mean_median_ns": median_or_none(samples.get((other_name, other_tool + "_mean"), [])),
        }
        # For information: the handler's own time, the kernel's fault in the
        # other order, and the kernel's minor fault as pager.fault times it.
        for key, (n, t) in {
            "handler": (name, "handler"),
            "handler_evict": (name, "handler_evict"),
            "kernel_random": (other_name, "kernel_random") if other_tool == "kernel" else (None, None),
            "kernel_same_way": (name, "kernel_same_way") if name.startswith("zero_fill") else (None, None),
        }.items():
            runs = samples.get((n, t), []) if n else []
            if runs:
                row[key + "_runs_ns"] = runs
                row[key + "_median_ns"] = statistics.median(runs)
        rows.append(row)
    return targets, rows


def policy_table(points):
    """Rows by trace (pages, length) and frames: offline faults per policy,
    live faults beside them, and whether Belady's anomaly was noted."""
    keys = []
    cells = {}
    for p in points:
        key = (p["trace"], p["pages"], p["length"], p["frames"])
        if key not in cells:
            keys.append(key)
            cells[key] = {"offline": {}, "live": {}, "live_run_time_ns": {}, "belady": set(),
                          "offline_from_live_notes": {}}
        c = cells[key]
        c[p["mode"]][p["policy"]] = p["faults"]
        if p["mode"] == "live":
            if p["run_time_ns"] is not None:
                c["live_run_time_ns"][p["policy"]] = p["run_time_ns"]
            if p["offline_faults_noted"] is not None:
                c["offline_from_live_notes"][p["policy"]] = p["offline_faults_noted"]
        if p["belady_noted"]:
            c["belady"].add(p["mode"])
    # Keep the traces in osprobe's order, frames ascending within each.
    order = {}
    for k in keys:
        order.setdefault(k[:3], len(order))
    keys.sort(key=lambda k: (order[k[:3]], k[3]))
    rows = []
    for k in keys:
        c = cells[k]
        rows.append({
            "trace": k[0], "pages": k[1], "length": k[2], "frames": k[3],
            "offline_faults": c["offline"],
            # A live point on a trace the offline grid does not cover: the
            # simulation's count from the live point's note.
            "offline_faults_from_live_notes": c["offline_from_live_notes"],
            "live_faults": c["live"],
            "live_run_time_ns": c["live_run_time_ns"],
            "belady_noted": sorted(c["belady"]),
        })
    return rows


def us(ns):
    return "-" if ns is None else f"{ns / 1e3:.2f}"


def pct(v):
    return "-" if v is None else f"{v:.1f}%"


def print_tables(meta, targets, rows, policy):
    print(f"osprobe's user-space pager vs the kernel's faults: {meta.get('runs')} run(s) of each, "
          "alternating; medians of per-run p50s, in us")
    print(f"{meta.get('osprobe_version')} ({meta.get('profile')} profile); "
          f"kernel {meta.get('kernel')}; user {meta.get('user')}; "
          f"vm.unprivileged_userfaultfd={meta.get('unprivileged_userfaultfd')}; "
          f"osprobe pins to CPU {meta.get('cpu')}")
    print()
    header = ["comparison", "against", "pager", "other", "pager/other", "target",
              "verdict", "pager spread", "other spread"]
    body = []
    for r in rows:
        t = r["target_p50_us"]
        if t is None:
            target, verdict = "-", "-"
        else:
            target = f"p50 <= {t:g} us"
            verdict = "met" if r["target_met"] else f"ABOVE {t:g} us"
        body.append([r["name"], r["against"], us(r["pager_median_ns"]), us(r["other_median_ns"]),
                     f"{r['ratio']:.2f}", target, verdict,
                     pct(r["pager_spread_pct"]), pct(r["other_spread_pct"])])
    for text in table_lines(header, body):
        print(text)
    print()
    print(f"Targets: zero-fill p50 at most {targets['zero_fill']:g} us; local swap-in p50 at most "
          f"{targets['swap_in_file']:g} us.")
    print("pager = pager.fault's p50 (time of the touching access, the fault served in user space);")
    print("spread = (max - min) / median over the runs. The kernel's page-cached figure is per fault,")
    print("and one such fault maps a whole folio (up to 16 pages): per page touched it is cheaper.")
    for r in rows:
        print(f"{r['name']} against {r['against_described']}:")
        print(f"  pager   {r['pager_command']}")
        print("          runs us: " + " ".join(us(x) for x in r["pager_runs_ns"]) + "  (p50)")
        if r.get("handler_runs_ns"):
            line = "          inside the handler us: " + " ".join(us(x) for x in r["handler_runs_ns"])
            if r.get("handler_evict_runs_ns"):
                line += "  (of which evicting: " + " ".join(
                    us(x) for x in r["handler_evict_runs_ns"]) + ")"
            print(line + "  (information)")
        print(f"  other   {r['other_command']}")
        print("          runs us: " + " ".join(us(x) for x in r["other_runs_ns"])
              + ("  (from the notes)" if "page-cached" in r["against"] else "  (p50)"))
        if r.get("kernel_random_runs_ns"):
            print("          random order us: " + " ".join(us(x) for x in r["kernel_random_runs_ns"])
                  + "  (p50, information)")
        if r.get("kernel_same_way_runs_ns"):
            print("          kernel minor fault timed as the pager's (pager.fault's notes) us: "
                  + " ".join(us(x) for x in r["kernel_same_way_runs_ns"]))

    print()
    print(f"Replacement policies: faults per policy (pager.policy, quick profile, one run: "
          f"{meta.get('policy_command')})")
    print("offline = simulated; [live N] = through the real pager (zero-fill + swap-in faults;")
    print("referenced-bit faults not counted). Live points on a trace the offline grid does not")
    print("cover show the simulation's count from the live point's note.")
    print()
    header = ["trace", "pages", "accesses", "frames"] + [POLICY_LABELS[p] for p in POLICIES] + ["Belady"]
    body = []
    for r in policy:
        cells = []
        for p in POLICIES:
            off = r["offline_faults"].get(p, r["offline_faults_from_live_notes"].get(p))
            cell = "-" if off is None else str(off)
            if p in r["live_faults"]:
                cell += f" [live {r['live_faults'][p]}]"
            cells.append(cell)
        belady = " and ".join(r["belady_noted"]) if r["belady_noted"] else "-"
        body.append([r["trace"], "-" if r["pages"] is None else str(r["pages"]),
                     "-" if r["length"] is None else str(r["length"]), str(r["frames"])]
                    + cells + [belady])
    for text in table_lines(header, body):
        print(text)
    live = [(r, p) for r in policy for p in POLICIES if p in r["live_run_time_ns"]]
    if live:
        print("Live run time per access (information):")
        for r, p in live:
            accesses = r["length"] if r["length"] is not None else 12
            print(f"  {r['trace']}, {r['frames']} frames, {POLICY_LABELS[p]}: "
                  f"{r['live_run_time_ns'][p] / 1e3 / accesses:.2f} us")


def report(path, as_json):
    meta, pairs, samples = load_records(path, ("pager_command", "peer_command"))
    targets, rows = compare(meta, pairs, samples)
    ratios = zero_fill_ratios(meta, samples)
    policy = policy_table(load_policy(path))
    scan = scan_table(path)
    if as_json:
        json.dump({"meta": meta, "targets_p50_us": targets, "comparisons": rows,
                   "zero_fill_ratios": ratios, "policy": policy, "scan": scan},
                  sys.stdout, indent=2)
        print()
    else:
        print_tables(meta, targets, rows, policy)
        print_zero_fill_ratios(ratios)
        print_scan(meta, scan)


def main(argv):
    if not argv:
        fail("usage: pager_compare.py first-cpu|pager-check|pager-fault|kernel-fault|policy-rows|report ...")
    cmd, args = argv[0], argv[1:]
    if cmd == "first-cpu":
        print(first_cpu())
    elif cmd == "pager-check":
        pager_check()
    elif cmd == "pager-fault" and len(args) == 2:
        pager_fault(args[0], args[1])
    elif cmd == "kernel-fault" and len(args) == 1:
        kernel_fault(args[0])
    elif cmd == "policy-rows":
        policy_rows()
    elif cmd == "scan-rows" and len(args) == 1:
        scan_rows(args[0])
    elif cmd == "report" and args:
        report(args[0], "--json" in args[1:])
    else:
        fail(f"bad arguments: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
