#!/usr/bin/env bash
# link_compare.sh: the link emulator against a plain veth pair, in one run.
#
#   throughput  iperf3 TCP from namespace A to B through `osprobe link` (no
#               impairment) vs over a veth pair joining the same namespaces
#               (`osprobe link --reference-veth`); the two alternate which
#               goes first from round to round; and, for information,
#               through the emulator with --no-offload
#   release     the emulator's release error (actual minus due time of each
#               packet) with 10 ms each way, under a saturating TCP flow and
#               under a paced 100 Mbit/s UDP flow
#   rtt         osprobe net rtt (UDP) through 20 ms each way: the median
#               must be 40 ms
#   longfat     seed 001's middlebox: one iperf3 TCP stream through 50 ms
#               each way with `--wmem 256M`, bbr and cubic, without loss and
#               with 1% loss of data packets; with what bounds each (the
#               send buffer, the congestion window, the loss-based bound,
#               the forwarders' and the machine's CPU)
#
# Targets (issue 5): >= 2.5 Gbit/s and >= 0.3x veth; release error p99 below
# 100 us; the RTT within 1 ms. Issue 16: through 50 ms each way without
# loss >= 5 Gbit/s; with 1% loss bbr >= 10x cubic (seed 001: 13.6x). Needs root (namespaces, TUN), iperf3 (installed
# from Debian's packages when missing) and python3. See bench/README.md.
# Exit: 0 all measured (whatever the verdicts), 1 a tool failed while
# measuring, 2 cannot start.

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/link_compare.py"
BENCH_NAME=link_compare
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${RUNS:-3}"
# Seconds per iperf3 test.
DURATION_S="${DURATION_S:-4}"
# One-way delay of the release-error runs, in ms, and the paced UDP rate.
RELEASE_DELAY_MS="${RELEASE_DELAY_MS:-10}"
UDP_RATE="${UDP_RATE:-100M}"
TIMEOUT_S="${TIMEOUT_S:-120}"
# The long fat pipe: one-way delay in ms, socket buffer ceiling, seconds per
# stream (slow start to a 60 MB window takes over a second at 100 ms), loss.
LONG_DELAY_MS="${LONG_DELAY_MS:-50}"
WMEM="${WMEM:-256M}"
LONG_DURATION_S="${LONG_DURATION_S:-10}"
LOSS="${LOSS:-1%}"
# all, or longfat: only the long-fat-pipe streams (issue 16's targets).
SECTIONS="${SECTIONS:-all}"
# Seconds of the iperf3 test being run (run_link); empty: DURATION_S.
TEST_S=""
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
IPERF3="${IPERF3:-}"

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Measure TCP throughput through osprobe's link emulator and over a veth pair
between the same two namespaces, the emulator's release error, and the RTT
through 20 ms each way; print the figures against the targets.

  --runs N     rounds (default 3; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, DURATION_S ($DURATION_S), RELEASE_DELAY_MS ($RELEASE_DELAY_MS),
UDP_RATE ($UDP_RATE, iperf3 -b), LONG_DELAY_MS ($LONG_DELAY_MS), WMEM ($WMEM),
LONG_DURATION_S ($LONG_DURATION_S), LOSS ($LOSS), SECTIONS ($SECTIONS: all or
longfat), TIMEOUT_S ($TIMEOUT_S), IPERF3,
OSPROBE, PYTHON.
EOF
}

find_iperf3() {
    if [[ -z "$IPERF3" ]] && ! command -v iperf3 >/dev/null; then
        command -v apt-get >/dev/null || die 2 "iperf3 is not installed (Debian: apt-get install iperf3)"
        log "installing iperf3 from Debian's packages (apt-get)"
        apt-get update -q >&2 || die 2 "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q iperf3 >&2 ||
            die 2 "apt-get install -y iperf3 failed"
    fi
    IPERF3="${IPERF3:-$(command -v iperf3)}"
    [[ -x "$IPERF3" ]] || die 2 "IPERF3=$IPERF3 is not an executable"
}

# What runs inside namespace A (bash -c): an iperf3 server in B on each
# address in $TARGETS (one at a time), a client to it, its JSON to
# $WORK/<name><round>.json. Servers are killed on the way out, so none
# outlives the namespace.
# shellcheck disable=SC2016
INNER='
set -euo pipefail
server=""
trap '\''[[ -n "$server" ]] && kill "$server" 2>/dev/null; true'\'' EXIT
for target in $TARGETS; do
    name="${target%%=*}"
    var="${target#*=}"
    addr="${!var}"
    nsenter --net="$OSPROBE_LINK_NS_B" "$IPERF3" -s -1 -B "$addr" >/dev/null 2>&1 &
    server=$!
    for _ in $(seq 50); do
        nsenter --net="$OSPROBE_LINK_NS_B" ss -Hltn "src $addr" | grep -q . && break
        sleep 0.1
    done
    "$IPERF3" -c "$addr" -t "$DURATION_S" $CLIENT_ARGS -J >"$WORK/$name$ROUND.json"
    wait "$server" || true
    server=""
done
'

# osprobe link OPTIONS -- bash -c INNER, with the inner script's settings.
run_link() {
    local what="$1" targets="$2" client_args="$3"
    shift 3
    if ! TARGETS="$targets" CLIENT_ARGS="$client_args" ROUND="$round" WORK="$WORK" \
        DURATION_S="${TEST_S:-$DURATION_S}" IPERF3="$IPERF3" \
        timeout "$TIMEOUT_S" "$OSPROBE" link -q "$@" -- bash -c "$INNER" 2>"$WORK/tool.err"; then
        die 1 "$what failed: $(cat "$WORK/tool.err")"
    fi
}

main() {
    parse_args "$@"
    [[ "$DURATION_S" =~ ^[1-9][0-9]*$ ]] || die 2 "DURATION_S must be a positive integer"
    [[ "$RELEASE_DELAY_MS" =~ ^[1-9][0-9]*$ ]] || die 2 "RELEASE_DELAY_MS must be a positive integer"
    [[ "$LONG_DELAY_MS" =~ ^[1-9][0-9]*$ ]] || die 2 "LONG_DELAY_MS must be a positive integer"
    [[ "$LONG_DURATION_S" =~ ^[1-9][0-9]*$ ]] || die 2 "LONG_DURATION_S must be a positive integer"
    [[ "$LOSS" =~ ^[0-9]+(\.[0-9]+)?%$ ]] || die 2 "LOSS must be a percentage, e.g. 1%"
    [[ "$SECTIONS" == all || "$SECTIONS" == longfat ]] || die 2 "SECTIONS must be all or longfat"
    [[ "$WMEM" =~ ^[1-9][0-9]*[KMG]?$ ]] || die 2 "WMEM must be a size, e.g. 256M"
    [[ "$(id -u)" == 0 ]] || die 2 "the link emulator needs root (namespaces, /dev/net/tun)"
    command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"
    command -v ss >/dev/null || die 2 "ss is needed (apt-get install iproute2)"
    find_iperf3
    build_osprobe
    "$OSPROBE" link --help >/dev/null 2>&1 || die 2 "$OSPROBE has no link command"

    WORK="$(mktemp -d "${TMPDIR:-/tmp}/osprobe-link.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$WORK'" EXIT
    RECORDS="$WORK/records.tsv"
    : >"$RECORDS"
    record meta runs "$RUNS"
    record meta duration_s "$DURATION_S"
    record meta release_delay_ms "$RELEASE_DELAY_MS"
    record meta udp_rate "$UDP_RATE"
    record meta kernel "$(uname -r)"
    record meta cpus "$(nproc)"
    record meta long_delay_ms "$LONG_DELAY_MS"
    record meta wmem "$WMEM"
    record meta long_duration_s "$LONG_DURATION_S"
    record meta loss "$LOSS"

    local round
    for ((round = 1; round <= RUNS; round++)); do
        [[ "$SECTIONS" == longfat ]] || issue5_round
        longfat_round
    done
    report
}

# The emulator against veth, its release error and the RTT (issue 5).
issue5_round() {
    local order
    if ((round % 2)); then
        order="emulator=OSPROBE_LINK_PEER veth=OSPROBE_LINK_REFERENCE_PEER"
    else
        order="veth=OSPROBE_LINK_REFERENCE_PEER emulator=OSPROBE_LINK_PEER"
    fi
    log "round $round/$RUNS: throughput ($order)"
    run_link "throughput" "$order" "" --reference-veth --json "$WORK/link_tput$round.json"
    for tool in emulator veth; do
        record sample throughput "$tool" "$round" \
            "$("$PYTHON" "$HELPER" iperf3-bps "$WORK/$tool$round.json")"
    done
    "$PYTHON" "$HELPER" link-release "$WORK/link_tput$round.json" throughput.nodelay "$round" >>"$RECORDS"

    log "round $round/$RUNS: throughput without offloads (every wire packet read and written alone)"
    run_link "throughput (no offload)" "nooffload=OSPROBE_LINK_PEER" "" --no-offload
    record sample throughput.nooffload emulator "$round" \
        "$("$PYTHON" "$HELPER" iperf3-bps "$WORK/nooffload$round.json")"

    log "round $round/$RUNS: release error, TCP through ${RELEASE_DELAY_MS} ms each way"
    run_link "release (tcp)" "tcp=OSPROBE_LINK_PEER" "" \
        --delay "${RELEASE_DELAY_MS}ms" --json "$WORK/link_tcp$round.json"
    "$PYTHON" "$HELPER" link-release "$WORK/link_tcp$round.json" release.tcp "$round" >>"$RECORDS"
    record sample throughput.delayed emulator "$round" \
        "$("$PYTHON" "$HELPER" iperf3-bps "$WORK/tcp$round.json")"

    log "round $round/$RUNS: release error, UDP at $UDP_RATE through ${RELEASE_DELAY_MS} ms each way"
    run_link "release (udp)" "udp=OSPROBE_LINK_PEER" "-u -b $UDP_RATE" \
        --delay "${RELEASE_DELAY_MS}ms" --json "$WORK/link_udp$round.json"
    "$PYTHON" "$HELPER" link-release "$WORK/link_udp$round.json" release.udp "$round" >>"$RECORDS"

    log "round $round/$RUNS: osprobe net rtt through 20 ms each way"
    # The single quotes are deliberate: osprobe link substitutes the peer.
    # shellcheck disable=SC2016
    if ! timeout "$TIMEOUT_S" "$OSPROBE" link -q --delay 20ms --serve -- \
        "$OSPROBE" net rtt --to '$OSPROBE_LINK_PEER' --param proto=udp \
        --profile quick --json --no-store >"$WORK/rtt$round.json" 2>"$WORK/tool.err"; then
        die 1 "osprobe net rtt through the link failed: $(cat "$WORK/tool.err")"
    fi
    record sample rtt osprobe "$round" "$("$PYTHON" "$HELPER" rtt-p50 "$WORK/rtt$round.json")"
}

# Seed 001's middlebox: one stream through a long fat pipe (issue 16).
longfat_round() {
    local loss cc name
    for loss in none "$LOSS"; do
        for cc in bbr cubic; do
            name="longfat.$cc"
            local impair=()
            if [[ "$loss" != none ]]; then
                name="longfat.loss.$cc"
                impair=(--uplink-loss "$loss")
            fi
            log "round $round/$RUNS: one $cc stream through ${LONG_DELAY_MS} ms each way, --wmem $WMEM, loss $loss"
            TEST_S="$LONG_DURATION_S"
            head -1 /proc/stat >"$WORK/stat_before"
            run_link "$name" "${name//./_}=OSPROBE_LINK_PEER" "-C $cc" \
                --delay "${LONG_DELAY_MS}ms" --wmem "$WMEM" "${impair[@]}" \
                --json "$WORK/link_$name$round.json"
            head -1 /proc/stat >"$WORK/stat_after"
            TEST_S=""
            record sample "$name" emulator "$round" \
                "$("$PYTHON" "$HELPER" iperf3-bps "$WORK/${name//./_}$round.json")"
            "$PYTHON" "$HELPER" stream-detail "$WORK/${name//./_}$round.json" \
                "$WORK/link_$name$round.json" "$WORK/stat_before" "$WORK/stat_after" \
                "$name" "$round" >>"$RECORDS"
        done
    done
}

main "$@"
