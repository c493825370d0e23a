"""Shared helpers for the bench/ comparison scripts' Python halves.

perf_compare.py and mem_fs_compare.py import this module from their own
directory. Standard library only, so it runs on a bare Debian python3.

What is shared:
  - fail(): an error on stderr, prefixed with the calling helper's name, and
    exit status 1 (the shell scripts turn that into "a tool failed");
  - first_cpu(): the CPU osprobe pins its measuring thread to;
  - load_osprobe_doc() / find_measurement(): read an osprobe run document
    (`--json`) and pick one measurement by experiment, metric and params;
  - spread_pct(): the run-to-run spread, (max - min) / median;
  - load_records(): the tab-separated records the shell scripts append;
  - table_lines(): a plain aligned text table.
"""

import json
import os
import statistics
import sys


def fail(message):
    # The helper's own file name (perf_compare.py, mem_fs_compare.py), so
    # that messages say which script's helper failed.
    print(f"{os.path.basename(sys.argv[0])}: {message}", file=sys.stderr)
    sys.exit(1)


def first_cpu():
    """The lowest CPU this process may run on: the CPU osprobe pins to
    (PinGuard::first_allowed)."""
    return min(os.sched_getaffinity(0))


def load_osprobe_doc(stream):
    """An osprobe run document (`osprobe bench ... --json`) from stream."""
    try:
        return json.load(stream)
    except json.JSONDecodeError as e:
        fail(f"osprobe's output is not JSON: {e}")


def find_measurement(doc, experiment, metric, pairs, unit):
    """The measurement of experiment/metric whose params include every
    K=V in pairs (a list of "K=V" strings); it must be in unit. Fails with
    osprobe's list of skipped points when there is none."""
    want = dict(p.split("=", 1) for p in pairs)
    for m in doc.get("measurements", []):
        params = {k: str(v) for k, v in (m.get("params") or {}).items()}
        if (
            m.get("experiment") == experiment
            and m.get("metric") == metric
            and all(params.get(k) == v for k, v in want.items())
        ):
            if m.get("unit") != unit:
                fail(f"{experiment}/{metric} is in {m.get('unit')!r}, expected {unit}")
            return m
    skipped = doc.get("skipped")
    fail(f"no measurement {experiment}/{metric} {want} in osprobe's output"
         + (f" (skipped: {skipped})" if skipped else ""))


def spread_pct(values):
    """(max - min) / median, in percent: the run-to-run spread."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med * 100.0 if med else float("nan")


def load_records(path, pair_fields):
    """Read the tab-separated records a bench script appends:
    meta KEY VALUE | pair NAME FIELD... | sample NAME TOOL RUN VALUE

    pair_fields names the fields after NAME (e.g. the two commands). Returns
    (meta, pairs, samples): meta maps keys to values (digits become ints),
    pairs is a list of dicts {"name": NAME, field: ...} in file order, and
    samples maps (NAME, TOOL) to the values in file order.
    """
    meta, pairs, samples = {}, [], {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "meta":
                value = fields[2]
                meta[fields[1]] = int(value) if value.isdigit() else value
            elif fields[0] == "pair":
                pair = {"name": fields[1]}
                pair.update(zip(pair_fields, fields[2:]))
                pairs.append(pair)
            elif fields[0] == "sample":
                samples.setdefault((fields[1], fields[2]), []).append(float(fields[4]))
    return meta, pairs, samples


def report(path, as_json, command_fields, compare, print_table):
    """Print the comparisons recorded in `path`: a table, or one JSON object."""
    meta, pairs, samples = load_records(path, command_fields)
    tolerance, rows = compare(meta, pairs, samples)
    if as_json:
        json.dump({"meta": meta, "tolerance_pct": tolerance, "comparisons": rows},
                  sys.stdout, indent=2)
        print()
    else:
        print_table(meta, tolerance, rows)


def table_lines(header, body):
    """header and body rows (lists of strings) as aligned lines, with a rule
    under the header: the first column left-aligned, figures right-aligned."""
    widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(row) for row in body]
