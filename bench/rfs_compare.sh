#!/usr/bin/env bash
# rfs_compare.sh: the remote file service against a plain TCP stream and
# against its own throughput model, in one run (bench/rfs_compare.py does
# the measuring and the report):
#
#   stream      rfs.throughput read, loopback TCP, window 32 x 32 KiB, 8 MiB file
#               vs a plain TCP stream of the same 8 MiB over 127.0.0.1
#               (a sender process and a receiver on one warm connection, the
#               median of 5 transfers into an 8 MiB buffer in reads of at
#               most 1 MiB, neither side pinned, as rfs); target ratio >= 0.9;
#               and the same read over UDP: UDP/TCP, target >= 0.8
#   curves      rfs.throughput read and write over window 1..64, UDP and TCP,
#               loopback, SOS's 1284-byte packets and a 1 MB file (figure 5)
#   model       over the emulated link with a 10 ms round trip (root):
#               measured read throughput against the prediction
#               min(window x packet / RTT, bandwidth, server rate);
#               target within 20% where the window term binds
#   cost        CPU-seconds per GiB (client and server together) of the
#               stream part's read over TCP and UDP and of a plain TCP
#               stream, in one process (the read_cost example, --runs
#               rounds alternating the cases): the figure that survives a
#               loaded machine; TCP/UDP cost is UDP's throughput ratio
#               where the read is CPU-bound
#
# Usage: bench/rfs_compare.sh [--runs N] [--json] [--no-build]
#                              [--part stream|curves|model|cost]  (one part only)
# Exit: 0 every comparison made (whatever the verdicts), 1 a measurement
# failed, 2 cannot start.

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/rfs_compare.py"
BENCH_NAME=rfs_compare
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${RUNS:-3}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"

usage() {
    sed -n '2,29p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# --part is this script's own; the shared flags go to parse_args.
PART=all
rest=()
while (($#)); do
    case "$1" in
    --part) PART="${2:-}"; shift 2 || die 2 "--part needs a value" ;;
    --part=*) PART="${1#--part=}"; shift ;;
    *) rest+=("$1"); shift ;;
    esac
done
[[ "$PART" =~ ^(all|stream|curves|model|cost)$ ]] || die 2 "--part must be stream, curves, model or cost, got '$PART'"
parse_args ${rest[@]+"${rest[@]}"}
command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed (apt-get install python3)"
build_osprobe
"$OSPROBE" list 2>/dev/null | grep -q rfs.throughput || die 2 "$OSPROBE has no rfs.throughput (an older build?)"

READ_COST="$ROOT/target/release/examples/read_cost"
if [[ "$PART" =~ ^(all|cost)$ ]]; then
    if ((BUILD)); then
        log "building the read_cost example (cargo build --release --example read_cost)"
        (cd "$ROOT" && cargo build --release --quiet -p osprobe-rfs --example read_cost) >&2 ||
            die 1 "cargo build of the read_cost example failed"
    fi
    [[ -x "$READ_COST" ]] || die 1 "no read_cost example at $READ_COST (build it, or drop --no-build)"
fi

args=(--osprobe "$OSPROBE" --read-cost "$READ_COST" --runs "$RUNS" --part "$PART")
((JSON)) && args+=(--json)
exec "$PYTHON" "$HELPER" "${args[@]}"
