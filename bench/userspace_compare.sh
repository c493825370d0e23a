#!/usr/bin/env bash
# userspace_compare.sh: user-space TCP (smoltcp over TUN) and, when this
# build has it, QUIC (quinn-proto) against the kernel's TCP, on the same
# emulated path with no impairment, in the same run.
#
#   throughput   net.userspace's throughput (acknowledged bytes per
#                interval, median) of each stack at clock=fine, cc=cubic,
#                through osprobe's link emulator with no delay, loss or rate
#                limit; the stacks alternate which goes first from round to
#                round
#   ratio        each user-space stack's throughput over the kernel's, per
#                round (median over the rounds)
#   cpu/byte     CPU time of the sending stack's thread per byte delivered
#
# Targets (issue 15): smoltcp >= 1 Gbit/s and QUIC >= 1 Gbit/s on this
# 2-core VM, each stable within 10% across the rounds (spread = (max - min)
# / median). Needs root (namespaces, TUN) and python3. See bench/README.md.
# Exit: 0 all measured (whatever the verdicts), 1 a tool failed while
# measuring, 2 cannot start.

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/userspace_compare.py"
BENCH_NAME=userspace_compare
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${RUNS:-3}"
# How long each stack sends per round (net.userspace's duration=).
DURATION="${DURATION:-5s}"
TIMEOUT_S="${TIMEOUT_S:-180}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Measure smoltcp's TCP over TUN (and quinn-proto's QUIC when this build has
it) against the kernel's TCP through osprobe's link emulator with no
impairment, clock=fine; print throughput, the ratio to the kernel and the
CPU time per byte against the targets.

  --runs N     rounds (default 3; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, DURATION ($DURATION, per stack and round), TIMEOUT_S
($TIMEOUT_S), OSPROBE, PYTHON.
EOF
}

# The stacks this build's net.userspace accepts, the kernel last.
stacks() {
    local row stack
    row="$("$OSPROBE" docs experiments | grep -E '^\| `stack` ' | head -n 1)" ||
        die 2 "$OSPROBE has no net.userspace (osprobe docs experiments shows no stack parameter)"
    for stack in smoltcp quinn; do
        if [[ "$row" == *"$stack"* ]]; then
            printf '%s\n' "$stack"
        fi
    done
    printf '%s\n' kernel
}

# One stack, one round: its throughput and CPU per byte as records.
measure() {
    local stack="$1" round="$2"
    local out="$WORK/$stack.$round.json"
    if ! timeout "$TIMEOUT_S" "$OSPROBE" bench net.userspace --profile smoke --no-store \
        --quiet --json --param "stack=$stack" --param clock=fine --param cc=cubic \
        --param delay=0ms --param loss=0% --param rate=0 --param wmem=0 \
        --param "duration=$DURATION" >"$out" 2>"$WORK/tool.err"; then
        die 1 "net.userspace stack=$stack failed: $(cat "$WORK/tool.err")"
    fi
    "$PYTHON" "$HELPER" records "$out" "$stack" "$round" >>"$RECORDS"
}

main() {
    parse_args "$@"
    [[ "$DURATION" =~ ^[1-9][0-9]*(ms|s)$ ]] || die 2 "DURATION must be like 5s or 500ms, got '$DURATION'"
    [[ "$(id -u)" == 0 ]] || die 2 "net.userspace needs root (namespaces, /dev/net/tun)"
    command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"
    build_osprobe

    WORK="$(mktemp -d "${TMPDIR:-/tmp}/osprobe-userspace.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$WORK'" EXIT
    RECORDS="$WORK/records.tsv"
    : >"$RECORDS"
    local all=()
    mapfile -t all < <(stacks)
    record meta runs "$RUNS"
    record meta duration "$DURATION"
    record meta stacks "${all[*]}"
    record meta kernel "$(uname -r)"
    record meta cpus "$(nproc)"

    local round i stack order
    for ((round = 1; round <= RUNS; round++)); do
        # Odd rounds in the listed order, even rounds reversed.
        order=()
        for ((i = 0; i < ${#all[@]}; i++)); do
            if ((round % 2)); then
                order+=("${all[i]}")
            else
                order+=("${all[${#all[@]} - 1 - i]}")
            fi
        done
        for stack in "${order[@]}"; do
            log "round $round/$RUNS: $stack, $DURATION"
            measure "$stack" "$round"
        done
    done
    report
}

main "$@"
