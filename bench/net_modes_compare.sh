#!/usr/bin/env bash
# net_modes_compare.sh: osprobe's network modes beside iperf3 -u and
# sockperf over loopback (127.0.0.1), and the ratios.
#
#   udp.1460     iperf3 -u -b BITRATE -l 1460       vs  osprobe net.udp size=1460 bitrate=BITRATE (received rate)
#   udp.64.pps   iperf3 -u -b 0 -l 64               vs  osprobe net.udp size=64 bitrate=0 (datagrams/s received)
#   rr.p50       sockperf ping-pong --tcp -m 14     vs  osprobe net.rr mode=rr size=14 (round trip p50)
#
# TCP_CRR has no peer: netperf is not in Debian's main archive, and
# neither iperf3 nor sockperf opens a connection per transaction.
# Each round runs every comparison once per tool, the first tool
# alternating from round to round; the report gives each tool's median, the
# ratio osprobe/peer against the 15% target, and the run-to-run spread.
# Exit: 0 all comparisons made, 1 a tool failed, 2 cannot start.

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/net_modes_compare.py"
BENCH_NAME=net_modes_compare
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${ROUNDS:-${RUNS:-5}}"
DURATION_S="${DURATION_S:-5}"
UDP_BITRATE="${UDP_BITRATE:-1G}"
RR_SIZE="${RR_SIZE:-14}"
TOLERANCE_PCT="${TOLERANCE_PCT:-15}"
TIMEOUT_S="${TIMEOUT_S:-120}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
IPERF3="${IPERF3:-}"
SOCKPERF="${SOCKPERF:-}"
SERVER_PIDS=()

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Run iperf3 -u (1460 B at $UDP_BITRATE, 64 B unlimited) and sockperf ping-pong
beside osprobe net.udp and net.rr over 127.0.0.1; print ratios.

Environment: RUNS/ROUNDS ($RUNS), DURATION_S ($DURATION_S), UDP_BITRATE
($UDP_BITRATE, iperf3's form: 100M, 1G), RR_SIZE ($RR_SIZE, sockperf's minimum
is 14), TOLERANCE_PCT ($TOLERANCE_PCT), TIMEOUT_S ($TIMEOUT_S), IPERF3,
SOCKPERF, OSPROBE (binaries), PYTHON.
EOF
}

check_settings() {
    local name
    for name in DURATION_S RR_SIZE TOLERANCE_PCT TIMEOUT_S; do
        [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || die 2 "$name must be a positive integer, got '${!name}'"
    done
    [[ "$UDP_BITRATE" =~ ^[1-9][0-9]*[KMG]$ ]] || die 2 "UDP_BITRATE must look like 1G or 100M, got '$UDP_BITRATE'"
    ((RR_SIZE >= 14)) || die 2 "RR_SIZE must be at least 14 (sockperf's minimum), got $RR_SIZE"
    ((DURATION_S * 2 + 30 <= TIMEOUT_S)) || die 2 "TIMEOUT_S ($TIMEOUT_S) is too short for DURATION_S=$DURATION_S"
}

# iperf3's 1G is osprobe's 1gbit (both decimal for rates).
osprobe_bitrate() {
    local unit="${UDP_BITRATE: -1}" digits="${UDP_BITRATE%?}"
    case "$unit" in
    K) echo "${digits}kbit" ;;
    M) echo "${digits}mbit" ;;
    G) echo "${digits}gbit" ;;
    esac
}

find_peers() {
    local missing=() var name path
    for var in IPERF3:iperf3 SOCKPERF:sockperf; do
        name="${var#*:}"
        var="${var%%:*}"
        if [[ -z "${!var}" ]] && ! command -v "$name" >/dev/null; then missing+=("$name"); fi
    done
    if ((${#missing[@]})); then
        if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
            die 2 "${missing[*]} not installed. On Debian/Ubuntu: sudo apt-get install -y ${missing[*]}"
        fi
        log "installing ${missing[*]} from Debian's packages (apt-get)"
        apt-get update -q >&2 || die 2 "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
            die 2 "apt-get install -y ${missing[*]} failed"
    fi
    for var in IPERF3:iperf3 SOCKPERF:sockperf; do
        name="${var#*:}"
        var="${var%%:*}"
        path="${!var}"
        if [[ -z "$path" ]]; then path="$(command -v "$name")" || die 2 "$name is still not installed"; fi
        [[ -x "$path" ]] || die 2 "$var=$path is not an executable"
        printf -v "$var" '%s' "$path"
    done
    command -v ss >/dev/null || die 2 "ss is needed to see when a server listens (apt-get install iproute2)"
}

# A free TCP port on 127.0.0.1 (bound, then released).
free_port() {
    "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

start_server() {
    local kind="$1" port="$2" log_file="$WORK/$1.log" pid i
    case "$kind" in
    iperf3) "$IPERF3" -s -B 127.0.0.1 -p "$port" >"$log_file" 2>&1 & ;;
    sockperf) "$SOCKPERF" server --tcp -i 127.0.0.1 -p "$port" >"$log_file" 2>&1 & ;;
    esac
    pid=$!
    SERVER_PIDS+=("$pid")
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || die 1 "$kind server exited at start: $(tail -n 5 "$log_file")"
        if [[ -n "$(ss -Hltn "sport = :$port")" ]]; then return; fi
        sleep 0.1
    done
    die 1 "$kind server does not listen on port $port after 10 s"
}

iperf3_udp_cmd() {
    echo "$IPERF3 -c 127.0.0.1 -p $IPERF3_PORT -u -b $2 -l $1 -t $DURATION_S -J"
}

osprobe_udp_cmd() {
    echo "$OSPROBE bench net.udp --param path=loopback --param size=$1 --param bitrate=$2 --param duration_ms=$((DURATION_S * 1000)) --profile full --json --no-store --quiet"
}

sockperf_cmd() {
    echo "$SOCKPERF ping-pong --tcp -i 127.0.0.1 -p $SOCKPERF_PORT -m $RR_SIZE -t $DURATION_S --full-rtt"
}

osprobe_rr_cmd() {
    echo "$OSPROBE bench net.rr --param path=loopback --param mode=rr --param size=$RR_SIZE --param duration_ms=$((DURATION_S * 1000)) --profile full --json --no-store --quiet"
}

run_checked() {
    local what="$1"
    shift
    if ! timeout "$TIMEOUT_S" "$@" >"$WORK/tool.out" 2>"$WORK/tool.err"; then
        die 1 "$what failed: $*
$(head -c 2000 "$WORK/tool.out")
$(tail -n 20 "$WORK/tool.err")"
    fi
    cat "$WORK/tool.out"
}

# One run of one tool for one comparison: "NAME TOOL VALUE" lines.
run_tool() {
    local name="$1" tool="$2" out parsed rate pps loss jitter p50 tps
    case "$name/$tool" in
    udp.1460/peer | udp.64.pps/peer)
        local size=1460 bitrate="$UDP_BITRATE"
        if [[ "$name" == udp.64.pps ]]; then size=64 bitrate=0; fi
        # shellcheck disable=SC2046
        out="$(run_checked "iperf3 -u ($name)" $(iperf3_udp_cmd "$size" "$bitrate"))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" iperf3-udp "$size")" || die 1 "cannot read iperf3's output ($name)"
        read -r rate pps loss jitter <<<"$parsed"
        if [[ "$name" == udp.1460 ]]; then echo "$name iperf3 $rate"; else echo "$name iperf3 $pps"; fi
        echo "$name iperf3_loss $loss"
        echo "$name iperf3_jitter_ns $jitter"
        ;;
    udp.1460/osprobe | udp.64.pps/osprobe)
        local size=1460 bitrate
        bitrate="$(osprobe_bitrate)"
        if [[ "$name" == udp.64.pps ]]; then size=64 bitrate=0; fi
        # shellcheck disable=SC2046
        out="$(run_checked "osprobe net.udp ($name)" $(osprobe_udp_cmd "$size" "$bitrate"))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-udp "$size" "$bitrate")" || die 1 "cannot read osprobe's output ($name)"
        read -r rate pps loss jitter <<<"$parsed"
        if [[ "$name" == udp.1460 ]]; then echo "$name osprobe $rate"; else echo "$name osprobe $pps"; fi
        echo "$name osprobe_loss $loss"
        echo "$name osprobe_jitter_ns $jitter"
        ;;
    rr.p50/peer)
        # shellcheck disable=SC2046
        out="$(run_checked "sockperf" $(sockperf_cmd))" || exit 1
        p50="$(printf '%s' "$out" | "$PYTHON" "$HELPER" sockperf-rtt-ns)" || die 1 "cannot read sockperf's output"
        echo "$name sockperf $p50"
        ;;
    rr.p50/osprobe)
        # shellcheck disable=SC2046
        out="$(run_checked "osprobe net.rr" $(osprobe_rr_cmd))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-rr)" || die 1 "cannot read osprobe's output (rr)"
        read -r p50 tps <<<"$parsed"
        echo "$name osprobe $p50"
        echo "$name osprobe_transactions_per_s $tps"
        ;;
    esac
}

write_meta() {
    record meta runs "$RUNS"
    record meta tolerance_pct "$TOLERANCE_PCT"
    record meta duration_s "$DURATION_S"
    record meta udp_bitrate "$UDP_BITRATE"
    record meta rr_size "$RR_SIZE"
    record meta cpus "$(nproc)"
    record meta iperf3_version "$("$IPERF3" --version 2>&1 | head -n1)"
    record meta sockperf_version "$("$SOCKPERF" --version 2>&1 | head -n1)"
    record meta osprobe_version "$("$OSPROBE" --version 2>/dev/null | head -n1)"
    record meta kernel "$(uname -r)"
    record meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    record pair udp.1460 "$(iperf3_udp_cmd 1460 "$UDP_BITRATE")" "$(osprobe_udp_cmd 1460 "$(osprobe_bitrate)")"
    record pair udp.64.pps "$(iperf3_udp_cmd 64 0)" "$(osprobe_udp_cmd 64 0)"
    record pair rr.p50 "$(sockperf_cmd)" "$(osprobe_rr_cmd)"
}

measure() {
    local run name tool out line_name what value order
    for ((run = 1; run <= RUNS; run++)); do
        if ((run % 2)); then order="osprobe peer"; else order="peer osprobe"; fi
        for name in udp.1460 udp.64.pps rr.p50; do
            for tool in $order; do
                out="$(run_tool "$name" "$tool")"
                while read -r line_name what value; do
                    log "round $run/$RUNS  $line_name  $what  $value"
                    record sample "$line_name" "$what" "$run" "$value"
                done <<<"$out"
            done
        done
    done
}

cleanup() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${SERVER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "${WORK:-}"
}

main() {
    parse_args "$@"
    check_settings
    need_python_taskset
    find_peers
    WORK="$(mktemp -d)"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    RECORDS="$WORK/records.tsv"
    build_osprobe
    "$OSPROBE" list 2>/dev/null | grep -qx net.udp || die 2 "this osprobe ($OSPROBE) has no net.udp"
    IPERF3_PORT="$(free_port)"
    start_server iperf3 "$IPERF3_PORT"
    SOCKPERF_PORT="$(free_port)"
    start_server sockperf "$SOCKPERF_PORT"
    write_meta
    measure
    record meta ended "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    report
}

main "$@"
