#!/usr/bin/env python3
"""Helper for store_compare.sh: make many runs from one real run, time a
command, and print the figures of both stores side by side.

Standard library only, so it runs on a bare Debian python3. Helpers shared
with the other benchmark scripts live in benchlib.py, beside this file.

Subcommands:
  generate SEED.jsonl N OUT.jsonl   N copies of the first run of SEED (an
                                    `osprobe export`), each with a fresh ULID
                                    one second after the previous one
  time -- CMD...                    run CMD (stdout discarded), print its wall
                                    time in seconds
  report FILE [--json]              FILE: the records store_compare.sh wrote
"""

import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

# benchlib.py sits beside this file; leave no __pycache__ behind.
sys.dont_write_bytecode = True
from benchlib import fail, load_records, table_lines  # noqa: E402

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid(ms, random_bits):
    """A ULID from 48 bits of milliseconds and 80 bits of randomness."""
    value = ((ms & ((1 << 48) - 1)) << 80) | (random_bits & ((1 << 80) - 1))
    return "".join(CROCKFORD[(value >> (125 - 5 * i)) & 31] for i in range(26))


def rfc3339(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def generate(seed_path, n, out_path):
    with open(seed_path, encoding="utf-8") as f:
        line = f.readline()
    if not line.strip():
        fail(f"{seed_path} holds no run")
    seed = json.loads(line)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    length = timedelta(seconds=1)
    with open(out_path, "w", encoding="utf-8") as out:
        for i in range(n):
            begun = start + i * length
            run_id = ulid(int(begun.timestamp() * 1000), int.from_bytes(os.urandom(10), "big"))
            seed["id"] = run_id
            seed["started"] = rfc3339(begun)
            seed["ended"] = rfc3339(begun + length / 2)
            for m in seed["measurements"]:
                m["run"] = run_id
            out.write(json.dumps(seed, separators=(",", ":")))
            out.write("\n")


def time_cmd(cmd):
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        fail(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    print(f"{elapsed:.4f}")


OPERATIONS = [
    ("import", "import of all runs (one transaction)"),
    ("reimport", "second import (all already there)"),
    ("history", "history (table)"),
    ("history_json", "history --json"),
    ("compare", "compare latest~1 latest"),
    ("show", "show latest --json"),
]


def report(path, as_json):
    meta, _, samples = load_records(path, [])
    backends = ["sqlite", "postgres"]
    result = {}
    for op, _ in OPERATIONS:
        for backend in backends:
            values = samples.get((op, backend), [])
            if values:
                result.setdefault(op, {})[backend] = {
                    "median_s": statistics.median(values),
                    "max_s": max(values),
                    "runs": len(values),
                }
    if as_json:
        json.dump({"meta": meta, "result": result}, sys.stdout, indent=2)
        print()
        return
    print(f"{meta.get('runs_stored')} runs of {meta.get('measurements')} measurements each, "
          f"in SQLite ({meta.get('sqlite')}) and PostgreSQL ({meta.get('postgres')}); "
          f"wall time of the osprobe process, median of {meta.get('repeats')} (imports: once)")
    rows = []
    for op, label in OPERATIONS:
        if op not in result:
            continue
        cells = []
        for backend in backends:
            r = result[op].get(backend)
            cells.append(f"{r['median_s'] * 1000:.0f} ms" if r else "-")
        s, p = (result[op].get(b) for b in backends)
        ratio = f"{p['median_s'] / s['median_s']:.2f}" if s and p and s["median_s"] else "-"
        rows.append([label] + cells + [ratio])
    for line in table_lines(["operation", "sqlite", "postgres", "postgres/sqlite"], rows):
        print(line)


def main(argv):
    if not argv:
        fail("usage: store_compare.py generate SEED N OUT | time -- CMD... | report FILE [--json]")
    cmd, args = argv[0], argv[1:]
    if cmd == "generate" and len(args) == 3:
        generate(args[0], int(args[1]), args[2])
    elif cmd == "time" and len(args) >= 2 and args[0] == "--":
        time_cmd(args[1:])
    elif cmd == "report" and args:
        report(args[0], "--json" in args[1:])
    else:
        fail(f"unknown or malformed subcommand: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
