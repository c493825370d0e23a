#!/usr/bin/env bash
# net_compare.sh: run osprobe beside iperf3, qperf and sockperf in one run,
# over loopback (127.0.0.1), and print ratios.
#
#   bw.single     iperf3 -P 1 -l 128K -t 5          vs  osprobe net.bandwidth streams=1 (receiver)
#   bw.multi      iperf3 -P 4 -l 128K -t 5          vs  osprobe net.bandwidth streams=4 (receiver)
#   rtt.qperf     qperf -m 32 tcp_lat (2 x mean)    vs  osprobe net.rtt proto=tcp size=32 (p50)
#   rtt.sockperf  sockperf ping-pong --tcp -m 32    vs  the same osprobe run
#   transfer      osprobe net.bandwidth streams=1   vs  osprobe send of a 1 GiB file (receiver)
#
# Each round runs every comparison once per tool, the tool that goes first
# alternating from round to round; the report gives each tool's median over
# the rounds, the ratio osprobe/peer with a verdict against the target, and
# each tool's run-to-run spread (max-min)/median. Missing peers are installed
# from Debian's packages (apt-get, as root). See bench/README.md.
# Exit: 0 all comparisons made (whatever the verdicts), 1 a tool failed while
# measuring, 2 cannot start (usage, a peer missing and not installable, no
# room on a disk for the file transfer, an osprobe without the net commands).

set -euo pipefail
# Let failures inside $(...) stop the function that runs there too.
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# bench/ sits at the repository root, so the root is one level up.
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/net_compare.py"
# The prefix of every log line (bench/lib.sh's log).
BENCH_NAME=net_compare
readonly HERE ROOT HELPER BENCH_NAME
# log, die, parse_args, build_osprobe, find_cpu, record, report and the rest
# shared with the other comparison scripts.
# Found next to this script, from whatever directory shellcheck runs.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# Defaults, overridable from the environment (flags override these too).
# ROUNDS is an alias of RUNS (the other scripts' name).
RUNS="${ROUNDS:-${RUNS:-5}}"
# Bandwidth: iperf3's default TCP write size, its default duration rounded
# to osprobe's full profile (5 s), and a multi-stream count above the CPU
# count of a small VM.
WRITE_SIZE="${WRITE_SIZE:-128K}"
DURATION_S="${DURATION_S:-5}"
MULTI_STREAMS="${MULTI_STREAMS:-4}"
# Round trip: the CSE 221 report's 32-byte message; each peer pings for RTT_S seconds
# (osprobe's full profile samples for about 2 s, up to 50,000 round trips).
RTT_SIZE="${RTT_SIZE:-32}"
RTT_S="${RTT_S:-5}"
# The file osprobe send transfers, in MiB.
TRANSFER_MIB="${TRANSFER_MIB:-1024}"
# The targets (see the README).
BW_TARGET="${BW_TARGET:-0.95}"
MULTI_TARGET="${MULTI_TARGET:-1.0}"
RTT_TOLERANCE_PCT="${RTT_TOLERANCE_PCT:-10}"
TRANSFER_TARGET="${TRANSFER_TARGET:-0.9}"
# 1: a second pass with every process of both tools pinned to one CPU.
PINNED="${PINNED:-0}"
# 1: the bandwidth comparisons only (bw.single, bw.multi): no qperf,
# sockperf, osprobe serve or file to transfer; the quick loop while working
# on net.bandwidth.
BW_ONLY="${BW_ONLY:-0}"
# 1 (default): iperf3's bandwidth runs get -A SENDER,RECEIVER, the CPUs
# osprobe net.bandwidth's pin=auto puts its sender and receiver on (the
# second and the first allowed CPU), so both tools measure the same
# placement; 0: iperf3 unpinned, the scheduler's placement against
# osprobe's fixed one (what the issue's 0.92x compared).
BW_AFFINITY="${BW_AFFINITY:-1}"
# No single invocation may hang the script: each is killed after this long.
TIMEOUT_S="${TIMEOUT_S:-120}"
# Parent of the scratch directory for the transfer's file and the server's
# copy; it must be on a disk, not tmpfs. Default: the first of /var/tmp, the
# cache directory and target/ that is.
BENCH_DIR="${BENCH_DIR:-}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
IPERF3="${IPERF3:-}"
QPERF="${QPERF:-}"
SOCKPERF="${SOCKPERF:-}"

# Servers this script started (killed on exit), and the network namespace
# flag for qperf (set by find_qperf_netns).
SERVER_PIDS=()
QPERF_NETNS=0

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--pinned] [--bw-only] [--json] [--no-build] [--help]

Run iperf3 (1 and ${MULTI_STREAMS} streams), qperf tcp_lat and sockperf ping-pong beside
osprobe net.bandwidth and net.rtt over 127.0.0.1, and osprobe send of a
${TRANSFER_MIB} MiB file beside osprobe's memory-to-memory rate; print ratios.

  --runs N     rounds (default 5; env RUNS or ROUNDS)
  --pinned     a second pass with both ends of every tool on one CPU (PINNED=1)
  --bw-only    only the bandwidth comparisons against iperf3 (BW_ONLY=1)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS/ROUNDS, WRITE_SIZE ($WRITE_SIZE), DURATION_S ($DURATION_S),
MULTI_STREAMS ($MULTI_STREAMS), RTT_SIZE ($RTT_SIZE), RTT_S ($RTT_S),
TRANSFER_MIB ($TRANSFER_MIB), BW_TARGET ($BW_TARGET), MULTI_TARGET ($MULTI_TARGET),
RTT_TOLERANCE_PCT ($RTT_TOLERANCE_PCT), TRANSFER_TARGET ($TRANSFER_TARGET),
PINNED ($PINNED), BW_ONLY ($BW_ONLY), BW_AFFINITY ($BW_AFFINITY: iperf3 -A as osprobe's pin=auto), TIMEOUT_S ($TIMEOUT_S), BENCH_DIR (not tmpfs), IPERF3, QPERF,
SOCKPERF (binaries), OSPROBE (osprobe binary), PYTHON (python3).
EOF
}

# The settings beyond --runs (lib.sh's parse_args checks that), checked
# before anything runs.
check_settings() {
    local name
    for name in DURATION_S MULTI_STREAMS RTT_SIZE RTT_S TRANSFER_MIB TIMEOUT_S; do
        [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || die 2 "$name must be a positive integer, got '${!name}'"
    done
    for name in BW_TARGET MULTI_TARGET RTT_TOLERANCE_PCT TRANSFER_TARGET; do
        [[ "${!name}" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die 2 "$name must be a number, got '${!name}'"
    done
    # A size iperf3 (-l) and osprobe (write_size) read alike: digits and an
    # optional K or M, binary in both.
    [[ "$WRITE_SIZE" =~ ^[1-9][0-9]*[KM]?$ ]] || die 2 "WRITE_SIZE must look like 128K (K or M), got '$WRITE_SIZE'"
    [[ "$PINNED" =~ ^[01]$ ]] || die 2 "PINNED must be 0 or 1, got '$PINNED'"
    [[ "$BW_ONLY" =~ ^[01]$ ]] || die 2 "BW_ONLY must be 0 or 1, got '$BW_ONLY'"
    [[ "$BW_AFFINITY" =~ ^[01]$ ]] || die 2 "BW_AFFINITY must be 0 or 1, got '$BW_AFFINITY'"
    ((DURATION_S * 2 + 30 <= TIMEOUT_S)) || die 2 "TIMEOUT_S ($TIMEOUT_S) is too short for DURATION_S=$DURATION_S"
    ((RTT_S * 2 + 30 <= TIMEOUT_S)) || die 2 "TIMEOUT_S ($TIMEOUT_S) is too short for RTT_S=$RTT_S"
}

# Find the three peers; install the missing ones from Debian's packages
# (one apt-get for all), which needs root and apt-get.
find_peers() {
    local missing=() var name peers=(IPERF3:iperf3)
    if ((!BW_ONLY)); then peers+=(QPERF:qperf SOCKPERF:sockperf); fi
    for var in "${peers[@]}"; do
        name="${var#*:}"
        var="${var%%:*}"
        if [[ -z "${!var}" ]] && ! command -v "$name" >/dev/null; then
            missing+=("$name")
        fi
    done
    if ((${#missing[@]})); then
        if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
            die 2 "${missing[*]} not installed. On Debian/Ubuntu: sudo apt-get install -y ${missing[*]}"
        fi
        log "installing ${missing[*]} from Debian's packages (apt-get)"
        apt-get update -q >&2 || die 2 "apt-get update failed"
        # iperf3's package asks whether to start a daemon; the non-interactive
        # default is no, which is what we want.
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2 ||
            die 2 "apt-get install -y ${missing[*]} failed"
    fi
    for var in "${peers[@]}"; do
        name="${var#*:}"
        var="${var%%:*}"
        local path="${!var}"
        if [[ -z "$path" ]]; then
            path="$(command -v "$name")" || die 2 "$name is still not installed"
        fi
        [[ -x "$path" ]] || die 2 "$var=$path is not an executable"
        printf -v "$var" '%s' "$path"
    done
    command -v ss >/dev/null || die 2 "ss is needed to see when a server listens (apt-get install iproute2)"
}

# qperf's server cannot bind an address: it listens on every interface.
# To keep its port off the machine's real interfaces, it runs in a private
# network namespace that has only loopback (unshare --net), and its client
# joins that namespace (nsenter). The kernel's loopback path is the same as
# the host's; the namespace disappears with the server. Without the rights
# to make one, qperf runs in the host's namespace, and the log says so.
find_qperf_netns() {
    if unshare --net -- ip link set lo up 2>/dev/null && command -v nsenter >/dev/null; then
        QPERF_NETNS=1
    else
        QPERF_NETNS=0
        log "cannot make a network namespace (not root?): qperf's server listens on all addresses of this host while the script runs"
    fi
}

# Filesystems that keep files in memory: the transfer's file must be read
# from, and written to, a disk's page cache like a real file.
in_memory_fs() {
    case "$1" in
    tmpfs | ramfs | devtmpfs | hugetlbfs) return 0 ;;
    *) return 1 ;;
    esac
}

# The scratch directory on a disk for the file to send and the directory
# the server receives into: created here, removed by the EXIT trap.
make_scratch() {
    local parent candidates=() fstype free_kib need_kib
    if [[ -n "$BENCH_DIR" ]]; then
        candidates=("$BENCH_DIR")
    else
        candidates=(/var/tmp "${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}" "$ROOT/target")
    fi
    # The file, the server's copy, and some room to spare.
    need_kib=$(((TRANSFER_MIB * 2 + 256) * 1024))
    for parent in "${candidates[@]}"; do
        mkdir -p "$parent" 2>/dev/null || continue
        [[ -w "$parent" ]] || continue
        fstype="$(stat -f -c %T "$parent")" || continue
        if in_memory_fs "$fstype"; then
            log "$parent is on $fstype, not a disk; skipping it"
            continue
        fi
        free_kib="$(df -Pk "$parent" | awk 'NR == 2 { print $4 }')"
        if ((free_kib < need_kib)); then
            log "$parent has $((free_kib / 1024)) MiB free, $((need_kib / 1024)) MiB needed; skipping it"
            continue
        fi
        SCRATCH="$(mktemp -d "$parent/osprobe-net.XXXXXX")" || continue
        SCRATCH_FS="$fstype"
        # The commands are rebuilt by word splitting: no blanks in the path.
        [[ "$SCRATCH" != *[[:space:]]* ]] || die 2 "the scratch path '$SCRATCH' has blanks; set BENCH_DIR"
        return
    done
    die 2 "no writable directory on a disk with $((need_kib / 1024)) MiB free among: ${candidates[*]} (set BENCH_DIR)"
}

# An osprobe built from an older tree may lack what is compared here: refuse
# it (exit 2) rather than fail in the middle of measuring.
check_osprobe() {
    local list help exp
    list="$(timeout "$TIMEOUT_S" "$OSPROBE" list 2>&1)" || die 1 "'$OSPROBE list' failed: $list"
    for exp in net.bandwidth net.rtt; do
        grep -qx "$exp" <<<"$list" || die 2 "this osprobe ($OSPROBE) has no experiment $exp"
    done
    help="$("$OSPROBE" --help 2>&1)" || true
    for exp in serve send; do
        grep -qE "^  $exp " <<<"$help" || die 2 "this osprobe ($OSPROBE) has no '$exp' command"
    done
}

# Wait until something listens on 127.0.0.1:PORT (as ss sees it, without
# connecting: a stray connection would count as a client of iperf3), while
# the server PID lives. Remaining arguments: a prefix that runs ss in the
# server's network namespace.
wait_listening() {
    local port="$1" pid="$2" what="$3" log_file="$4" i
    shift 4
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || die 1 "$what exited at start: $(tail -n 5 "$log_file")"
        if [[ -n "$("$@" ss -Hltn "sport = :$port")" ]]; then
            return
        fi
        sleep 0.1
    done
    die 1 "$what does not listen on port $port after 10 s: $(tail -n 5 "$log_file")"
}

# Start one server in the background and wait for it to listen. KIND is
# iperf3, sockperf, qperf or osprobe; PIN is empty or a CPU for taskset.
# Sets STARTED_PID.
start_server() {
    local kind="$1" port="$2" pin="$3" log_file pid
    local prefix=()
    if [[ -n "$pin" ]]; then
        prefix=(taskset -c "$pin")
    fi
    log_file="$WORK/$kind.$port.log"
    case "$kind" in
    iperf3)
        "${prefix[@]}" "$IPERF3" -s -B 127.0.0.1 -p "$port" >"$log_file" 2>&1 &
        ;;
    sockperf)
        "${prefix[@]}" "$SOCKPERF" server --tcp -i 127.0.0.1 -p "$port" >"$log_file" 2>&1 &
        ;;
    qperf)
        if ((QPERF_NETNS)); then
            # unshare and bash exec in turn: the PID is qperf's, so killing
            # it empties the namespace, which the kernel then removes.
            # The single quotes are for the inner bash.
            # shellcheck disable=SC2016
            "${prefix[@]}" unshare --net -- bash -c 'ip link set lo up && exec "$@"' qperf-server \
                "$QPERF" --listen_port "$port" >"$log_file" 2>&1 &
        else
            "${prefix[@]}" "$QPERF" --listen_port "$port" >"$log_file" 2>&1 &
        fi
        ;;
    osprobe)
        "$OSPROBE" serve --bind "127.0.0.1:$port" --dir "$SERVE_DIR" --quiet >"$log_file" 2>&1 &
        ;;
    esac
    pid=$!
    SERVER_PIDS+=("$pid")
    if [[ "$kind" == qperf ]] && ((QPERF_NETNS)); then
        wait_listening "$port" "$pid" "$kind server" "$log_file" nsenter "--net=/proc/$pid/ns/net" --
    else
        wait_listening "$port" "$pid" "$kind server" "$log_file"
    fi
    STARTED_PID="$pid"
}

start_servers() {
    local ports=()
    mapfile -t ports < <("$PYTHON" "$HELPER" free-ports 8)
    ((${#ports[@]} == 8)) || die 1 "could not find free ports on 127.0.0.1"
    IPERF3_PORT="${ports[0]}"
    SOCKPERF_PORT="${ports[1]}"
    QPERF_PORT="${ports[2]}"
    SERVE_PORT="${ports[3]}"
    start_server iperf3 "$IPERF3_PORT" ""
    if ((PINNED)); then
        IPERF3_PIN_PORT="${ports[4]}"
        start_server iperf3 "$IPERF3_PIN_PORT" "$CPU"
    fi
    if ((BW_ONLY)); then
        log "servers on 127.0.0.1: iperf3 :$IPERF3_PORT (bandwidth only)"
        return
    fi
    start_server sockperf "$SOCKPERF_PORT" ""
    start_server qperf "$QPERF_PORT" ""
    QPERF_PID="$STARTED_PID"
    start_server osprobe "$SERVE_PORT" ""
    if ((PINNED)); then
        SOCKPERF_PIN_PORT="${ports[5]}"
        QPERF_PIN_PORT="${ports[6]}"
        start_server sockperf "$SOCKPERF_PIN_PORT" "$CPU"
        start_server qperf "$QPERF_PIN_PORT" "$CPU"
        QPERF_PIN_PID="$STARTED_PID"
    fi
    log "servers on 127.0.0.1: iperf3 :$IPERF3_PORT, sockperf :$SOCKPERF_PORT, qperf :$QPERF_PORT$( ((QPERF_NETNS)) && echo ' (own netns)'), osprobe serve :$SERVE_PORT"
}

# The commands of each comparison, as displayed and as run. The second
# argument "pin" runs the client (and, through the server started pinned,
# both ends) on CPU $CPU. They hold no quoted words, so word splitting
# rebuilds them.
pin_prefix() {
    if [[ "${1:-}" == pin ]]; then echo "taskset -c $CPU "; fi
}

iperf3_cmd() {
    local streams="$1" port="$IPERF3_PORT" affinity=""
    if [[ "${2:-}" == pin ]]; then port="$IPERF3_PIN_PORT"; fi
    # The pinned pass puts everything on one CPU already.
    if ((BW_AFFINITY)) && [[ "${2:-}" != pin && -n "${BW_CPUS:-}" ]]; then affinity=" -A $BW_CPUS"; fi
    echo "$(pin_prefix "${2:-}")$IPERF3 -c 127.0.0.1 -p $port -l $WRITE_SIZE -P $streams -t $DURATION_S$affinity -J"
}

# The sender and receiver CPUs of osprobe's pin=auto, as iperf3 -A's
# "client,server": the second and the first allowed CPU. Empty with one CPU
# (osprobe then does not pin either).
find_bw_cpus() {
    BW_CPUS="$("$PYTHON" -c 'import os; c = sorted(os.sched_getaffinity(0)); print(f"{c[1]},{c[0]}" if len(c) > 1 else "")')" ||
        die 2 "$PYTHON cannot read this process's CPU affinity"
}

osprobe_bw_cmd() {
    echo "$(pin_prefix "${2:-}")$OSPROBE bench net.bandwidth --param path=loopback --param streams=$1 --param write_size=$WRITE_SIZE --param direction=forward --param duration_ms=$((DURATION_S * 1000)) --profile full --json --no-store --quiet"
}

qperf_cmd() {
    local port="$QPERF_PORT" pid="${QPERF_PID:-PID}" enter=""
    if [[ "${1:-}" == pin ]]; then
        port="$QPERF_PIN_PORT"
        pid="${QPERF_PIN_PID:-PID}"
    fi
    if ((QPERF_NETNS)); then enter="nsenter --net=/proc/$pid/ns/net -- "; fi
    # -ws: wait for the server; -e 6: six significant digits, not three.
    echo "$(pin_prefix "${1:-}")$enter$QPERF --listen_port $port -ws 5 -m $RTT_SIZE -t $RTT_S -e 6 127.0.0.1 tcp_lat"
}

sockperf_cmd() {
    local port="$SOCKPERF_PORT"
    if [[ "${1:-}" == pin ]]; then port="$SOCKPERF_PIN_PORT"; fi
    echo "$(pin_prefix "${1:-}")$SOCKPERF ping-pong --tcp -i 127.0.0.1 -p $port -m $RTT_SIZE -t $RTT_S --full-rtt"
}

osprobe_rtt_cmd() {
    echo "$(pin_prefix "${1:-}")$OSPROBE bench net.rtt --param path=loopback --param proto=tcp --param size=$RTT_SIZE --profile full --json --no-store --quiet"
}

dd_cmd() {
    echo "env LC_ALL=C dd if=$SEND_FILE of=$SERVE_DIR/dd.bin bs=256K"
}

send_cmd() {
    echo "$OSPROBE send $SEND_FILE --to 127.0.0.1:$SERVE_PORT --json --quiet"
}

# Run a command under the timeout; print its stdout; on failure show the
# start of its stdout and its stderr (iperf3 -J reports errors on stdout).
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

# One run of one tool for one group: prints "COMPARISON TOOL VALUE" lines,
# VALUE in bytes/s (bandwidth, transfer), ns (round trips) or a count.
# GROUP is bw.single, bw.multi, rtt (two comparisons) or transfer, with
# "+pin" for the pinned pass.
run_tool() {
    local group="$1" tool="$2" pin="" base="${1%+pin}" suffix="" out parsed streams
    local received sent retrans p50 mean whole rx tx
    if [[ "$group" == *+pin ]]; then
        pin=pin
        suffix=+pin
    fi
    case "$base/$tool" in
    bw.*/peer)
        streams=1
        if [[ "$base" == bw.multi ]]; then streams="$MULTI_STREAMS"; fi
        # shellcheck disable=SC2046
        out="$(run_checked "iperf3 ($group)" $(iperf3_cmd "$streams" "$pin"))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" iperf3-rates)" || die 1 "cannot read iperf3's output ($group)"
        read -r received sent retrans <<<"$parsed"
        echo "$group iperf3 $received"
        echo "$group iperf3_sent $sent"
        echo "$group iperf3_retransmits $retrans"
        ;;
    bw.*/osprobe)
        streams=1
        if [[ "$base" == bw.multi ]]; then streams="$MULTI_STREAMS"; fi
        # shellcheck disable=SC2046
        out="$(run_checked "osprobe ($group)" $(osprobe_bw_cmd "$streams" "$pin"))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-bandwidth "$streams")" ||
            die 1 "cannot read osprobe's output ($group)"
        read -r received whole p50 <<<"$parsed"
        echo "$group osprobe $received"
        echo "$group osprobe_sent $whole"
        echo "$group osprobe_sender_p50 $p50"
        ;;
    rtt/peer)
        # shellcheck disable=SC2046
        out="$(run_checked "qperf ($group)" $(qperf_cmd "$pin"))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" qperf-rtt-ns)" || die 1 "cannot read qperf's output ($group)"
        echo "rtt.qperf$suffix qperf $parsed"
        # shellcheck disable=SC2046
        out="$(run_checked "sockperf ($group)" $(sockperf_cmd "$pin"))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" sockperf-rtt-ns)" || die 1 "cannot read sockperf's output ($group)"
        read -r p50 mean <<<"$parsed"
        echo "rtt.sockperf$suffix sockperf $p50"
        echo "rtt.sockperf$suffix sockperf_mean $mean"
        ;;
    rtt/osprobe)
        # shellcheck disable=SC2046
        out="$(run_checked "osprobe ($group)" $(osprobe_rtt_cmd "$pin"))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-rtt)" || die 1 "cannot read osprobe's output ($group)"
        read -r p50 mean <<<"$parsed"
        # One osprobe run feeds both round-trip comparisons.
        echo "rtt.qperf$suffix osprobe $p50"
        echo "rtt.qperf$suffix osprobe_mean $mean"
        echo "rtt.sockperf$suffix osprobe $p50"
        echo "rtt.sockperf$suffix osprobe_mean $mean"
        ;;
    transfer/peer)
        # For information: how fast this file system takes the same bytes
        # into its page cache (dd, 256 KiB writes like osprobe send's
        # default packet, no fsync: the rate the receiver could reach if
        # the network cost nothing).
        cat "$SEND_FILE" >/dev/null
        # shellcheck disable=SC2046
        run_checked "dd" $(dd_cmd) >/dev/null || exit 1
        parsed="$("$PYTHON" "$HELPER" dd-rate <"$WORK/tool.err")" || die 1 "cannot read dd's output"
        rm -f "$SERVE_DIR/dd.bin"
        echo "transfer page_cache_write $parsed"
        ;;
    transfer/osprobe)
        # The sender reads a warm page cache: read the file once first, so
        # that the disk's read speed does not decide the rate.
        cat "$SEND_FILE" >/dev/null
        # shellcheck disable=SC2046
        out="$(run_checked "osprobe send" $(send_cmd))" || exit 1
        # The server's copy goes at once, whatever happened: the next round
        # sends the same name, and the disk must not fill.
        find "$SERVE_DIR" -mindepth 1 -delete
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" send-rates)" || die 1 "cannot read osprobe send's output"
        read -r rx tx _ <<<"$parsed"
        echo "transfer osprobe $rx"
        echo "transfer osprobe_tx $tx"
        ;;
    esac
}

make_file() {
    SEND_FILE="$SCRATCH/transfer-$TRANSFER_MIB.bin"
    SERVE_DIR="$SCRATCH/received"
    mkdir "$SERVE_DIR"
    log "writing $TRANSFER_MIB MiB of random data to $SEND_FILE ($SCRATCH_FS)"
    # Random data: nothing on the path may compress or deduplicate it.
    head -c "$((TRANSFER_MIB << 20))" /dev/urandom >"$SEND_FILE" || die 1 "cannot write $SEND_FILE"
}

write_meta() {
    record meta runs "$RUNS"
    record meta rtt_tolerance_pct "$RTT_TOLERANCE_PCT"
    record meta bw_target "$BW_TARGET"
    record meta multi_target "$MULTI_TARGET"
    record meta transfer_target "$TRANSFER_TARGET"
    record meta write_size "$WRITE_SIZE"
    record meta duration_s "$DURATION_S"
    record meta multi_streams "$MULTI_STREAMS"
    record meta rtt_size "$RTT_SIZE"
    record meta rtt_s "$RTT_S"
    record meta transfer_mib "$TRANSFER_MIB"
    record meta pinned "$PINNED"
    record meta bw_affinity "$BW_AFFINITY${BW_CPUS:+ (iperf3 -A $BW_CPUS)}"
    record meta cpu "$CPU"
    record meta cpus "$(nproc)"
    record meta iperf3_version "$("$IPERF3" --version 2>&1 | head -n1)"
    record meta osprobe_binary "$OSPROBE"
    record meta osprobe_version "$("$OSPROBE" --version 2>/dev/null | head -n1)"
    record meta kernel "$(uname -r)"
    record meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    record meta bw_only "$BW_ONLY"
    record pair bw.single "$(iperf3_cmd 1)" "$(osprobe_bw_cmd 1)"
    record pair bw.multi "$(iperf3_cmd "$MULTI_STREAMS")" "$(osprobe_bw_cmd "$MULTI_STREAMS")"
    if ((PINNED)); then
        record pair bw.single+pin "$(iperf3_cmd 1 pin)" "$(osprobe_bw_cmd 1 pin)"
        record pair bw.multi+pin "$(iperf3_cmd "$MULTI_STREAMS" pin)" "$(osprobe_bw_cmd "$MULTI_STREAMS" pin)"
    fi
    if ((BW_ONLY)); then return; fi
    record meta scratch_dir "$SCRATCH"
    record meta scratch_fs "$SCRATCH_FS"
    record meta qperf_version "$("$QPERF" --version 2>&1 | head -n1 | sed 's/^qperf //')"
    record meta qperf_where "$( ((QPERF_NETNS)) && echo "server in a private netns" || echo "server on all addresses")"
    record meta sockperf_version "$("$SOCKPERF" --version 2>&1 | head -n1)"
    record pair rtt.qperf "$(qperf_cmd)" "$(osprobe_rtt_cmd)"
    record pair rtt.sockperf "$(sockperf_cmd)" "$(osprobe_rtt_cmd)"
    record pair transfer "$(osprobe_bw_cmd 1) (bw.single's osprobe run; and $(dd_cmd))" "$(send_cmd)"
    if ((PINNED)); then
        record pair rtt.qperf+pin "$(qperf_cmd pin)" "$(osprobe_rtt_cmd pin)"
        record pair rtt.sockperf+pin "$(sockperf_cmd pin)" "$(osprobe_rtt_cmd pin)"
    fi
}

# A value as the progress line shows it: NAME TOOL VALUE.
pretty() {
    case "$1/$2" in
    */*retransmits) echo "$3" ;;
    rtt.*) awk -v v="$3" 'BEGIN { printf "%.2f us", v / 1e3 }' ;;
    *) awk -v v="$3" 'BEGIN { printf "%.3f GB/s", v / 1e9 }' ;;
    esac
}

# R rounds; in each, every group runs both tools back to back. The order
# flips every round so that neither tool always runs on a machine just
# warmed (or disturbed) by the other. The transfer is compared with the
# memory-to-memory rate osprobe measured in the same round (bw.single).
measure() {
    local run group tool out name what value order groups=(bw.single bw.multi rtt transfer)
    local memory iperf3_single
    if ((PINNED)); then groups+=(bw.single+pin bw.multi+pin rtt+pin); fi
    if ((BW_ONLY)); then
        groups=(bw.single bw.multi)
        if ((PINNED)); then groups+=(bw.single+pin bw.multi+pin); fi
    fi
    for ((run = 1; run <= RUNS; run++)); do
        if ((run % 2)); then order="osprobe peer"; else order="peer osprobe"; fi
        for group in "${groups[@]}"; do
            if [[ "$group" == transfer ]]; then
                record sample transfer memory "$run" "$memory"
                record sample transfer iperf3 "$run" "$iperf3_single"
            fi
            for tool in $order; do
                # Assigned first: set -e sees a failure of $(...) only there.
                out="$(run_tool "$group" "$tool")"
                while read -r name what value; do
                    log "round $run/$RUNS  $name  $what  $(pretty "$name" "$what" "$value")"
                    record sample "$name" "$what" "$run" "$value"
                    if [[ "$name" == bw.single && "$what" == osprobe ]]; then memory="$value"; fi
                    if [[ "$name" == bw.single && "$what" == iperf3 ]]; then iperf3_single="$value"; fi
                done <<<"$out"
            done
        done
    done
}

# Stop every server this script started (by PID), then remove the scratch
# files: on a normal exit, an error, Ctrl-C or TERM.
cleanup() {
    local pid
    for pid in "${SERVER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${SERVER_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "${WORK:-}" "${SCRATCH:-}"
}

main() {
    local args=() arg
    # --pinned is this script's own flag; lib.sh's parse_args takes the rest.
    for arg in "$@"; do
        case "$arg" in
        --pinned) PINNED=1 ;;
        --bw-only) BW_ONLY=1 ;;
        *) args+=("$arg") ;;
        esac
    done
    parse_args "${args[@]}"
    check_settings
    need_python_taskset
    find_peers
    WORK="$(mktemp -d)"
    trap cleanup EXIT
    # An interrupt or a kill still stops the servers and removes the files
    # (through EXIT).
    trap 'exit 130' INT
    trap 'exit 143' TERM
    RECORDS="$WORK/records.tsv"
    if ((!BW_ONLY)); then make_scratch; fi
    build_osprobe
    check_osprobe
    find_cpu
    find_bw_cpus
    if ((!BW_ONLY)); then
        find_qperf_netns
        make_file
    fi
    start_servers
    write_meta
    measure
    record meta ended "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    report
}

main "$@"
