#!/usr/bin/env bash
# time_compare.sh: run osprobe time.sleep beside cyclictest (rt-tests) in one
# run and print the wake-up error of 100 us sleeps with ratios.
#
#   other.clock_nanosleep_abs  osprobe strategy=clock_nanosleep_abs policy=other  vs  cyclictest -i 100
#   other.hybrid               osprobe strategy=hybrid policy=other               vs  cyclictest -i 100
#   other.hybrid+slack1ns      the same with the thread's timer slack at 1 ns     vs  cyclictest -i 100
#   fifo.clock_nanosleep_abs   osprobe strategy=clock_nanosleep_abs policy=fifo   vs  cyclictest -i 100 -p 80 -m
#   fifo.hybrid                osprobe strategy=hybrid policy=fifo                vs  cyclictest -i 100 -p 80 -m
#
# Every tool sleeps for the same duration per run. Each round runs both
# cyclictest runs and all osprobe points once, the tool that goes first
# alternating from round to round; the report gives each side's p50 and
# p99 (median over the rounds) and max, the ratios osprobe/cyclictest,
# and the verdict against the target: the hybrid's p99 at most 5 us. The
# SCHED_FIFO rows need root. A missing cyclictest is installed from
# Debian's rt-tests (apt-get, as root). See bench/README.md.
# Exit: 0 all comparisons made (whatever the verdicts), 1 a tool failed
# while measuring, 2 cannot start (usage, cyclictest missing and not
# installable, an osprobe without time.sleep's duration_ms).

set -euo pipefail
# Let failures inside $(...) stop the function that runs there too.
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# bench/ sits at the repository root, so the root is one level up.
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/time_compare.py"
# The prefix of every log line (bench/lib.sh's log).
BENCH_NAME=time_compare
readonly HERE ROOT HELPER BENCH_NAME
# log, die, parse_args, build_osprobe, record, report and the rest shared
# with the other comparison scripts.
# Found next to this script, from whatever directory shellcheck runs.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# Defaults, overridable from the environment (flags override these too).
RUNS="${RUNS:-5}"
# The sleep: the issue's 100 us, cyclictest's -i.
INTERVAL_US="${INTERVAL_US:-100}"
# Seconds each tool sleeps per run: 7 runs of this per round, so the
# default five rounds take about 140 s plus start-up.
DURATION_S="${DURATION_S:-4}"
# cyclictest's -p, and osprobe's fixed SCHED_FIFO priority.
PRIORITY=80
# The target of issue 5: hybrid p99 wake-up error at most this many us.
TARGET_P99_US="${TARGET_P99_US:-5}"
# cyclictest's histogram, in ns (it runs with -N): latencies above it are
# counted as overflows at cyclictest's max. 8 bytes a bucket.
HIST_NS="${HIST_NS:-1000000}"
# No single invocation may hang the script: each is killed after this long.
TIMEOUT_S="${TIMEOUT_S:-120}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
CYCLICTEST="${CYCLICTEST:-}"

# 1 when running as root: the SCHED_FIFO rows are measured.
FIFO=0

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Measure the wake-up error of ${INTERVAL_US} us sleeps with osprobe time.sleep
(hybrid, clock_nanosleep_abs) and with cyclictest, at the normal policy and
(as root) at SCHED_FIFO priority ${PRIORITY} with locked memory; print
percentiles, ratios and the verdict against hybrid p99 <= ${TARGET_P99_US} us.

  --runs N     rounds (default 5; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, INTERVAL_US ($INTERVAL_US), DURATION_S ($DURATION_S),
TARGET_P99_US ($TARGET_P99_US), HIST_NS ($HIST_NS), TIMEOUT_S ($TIMEOUT_S),
CYCLICTEST (binary), OSPROBE (osprobe binary), PYTHON (python3).
EOF
}

# The settings beyond --runs (lib.sh's parse_args checks that), checked
# before anything runs.
check_settings() {
    local name
    for name in INTERVAL_US DURATION_S HIST_NS TIMEOUT_S; do
        [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || die 2 "$name must be a positive integer, got '${!name}'"
    done
    [[ "$TARGET_P99_US" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die 2 "TARGET_P99_US must be a number, got '$TARGET_P99_US'"
    ((INTERVAL_US <= 1000000)) || die 2 "INTERVAL_US must be at most 1000000 (osprobe's requested), got $INTERVAL_US"
    ((DURATION_S <= 600)) || die 2 "DURATION_S must be at most 600 (osprobe's duration_ms), got $DURATION_S"
    ((HIST_NS <= 100000000)) || die 2 "HIST_NS must be at most 100000000 (800 MB of histogram), got $HIST_NS"
    ((DURATION_S * 2 + 30 <= TIMEOUT_S)) || die 2 "TIMEOUT_S ($TIMEOUT_S) is too short for DURATION_S=$DURATION_S"
}

# Find cyclictest; install Debian's rt-tests when it is missing, which
# needs root and apt-get.
find_cyclictest() {
    if [[ -n "$CYCLICTEST" ]]; then
        [[ -x "$CYCLICTEST" ]] || die 2 "CYCLICTEST=$CYCLICTEST is not an executable"
        return
    fi
    if ! command -v cyclictest >/dev/null; then
        if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
            die 2 "cyclictest is not installed. On Debian/Ubuntu: sudo apt-get install -y rt-tests"
        fi
        log "installing rt-tests (cyclictest) from Debian's packages (apt-get)"
        apt-get update -q >&2 || die 2 "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q rt-tests >&2 ||
            die 2 "apt-get install -y rt-tests failed"
    fi
    CYCLICTEST="$(command -v cyclictest)" || die 2 "cyclictest is still not installed"
}

# SCHED_FIFO and mlockall need root, for cyclictest and osprobe alike.
find_fifo() {
    if [[ "$(id -u)" == 0 ]]; then
        FIFO=1
    else
        FIFO=0
        log "not root: skipping the SCHED_FIFO comparisons (cyclictest -p $PRIORITY -m, osprobe policy=fifo)"
    fi
}

# An osprobe built from an older tree may lack what is compared here: refuse
# it (exit 2) rather than fail in the middle of measuring.
check_osprobe() {
    local out
    out="$(timeout "$TIMEOUT_S" "$OSPROBE" bench time.sleep --param strategy=spin --param requested=1 \
        --param policy=other --param duration_ms=1 --profile smoke --json --no-store --quiet 2>&1)" ||
        die 2 "this osprobe ($OSPROBE) cannot run time.sleep with duration_ms: ${out%%$'\n'*}"
}

# The comparisons, and which cyclictest run each is compared with.
PAIRS=(other.clock_nanosleep_abs other.hybrid other.hybrid+slack1ns)
fifo_pairs() {
    if ((FIFO)); then PAIRS+=(fifo.clock_nanosleep_abs fifo.hybrid); fi
}

# The commands, as displayed and as run. They hold no quoted words, so word
# splitting rebuilds them.
osprobe_cmd() {
    local pair="$1" policy="${1%%.*}" strategy="${1#*.}" slack=""
    if [[ "$strategy" == *+slack1ns ]]; then
        strategy="${strategy%+slack1ns}"
        slack=" --param slack_ns=1"
    fi
    # The full profile's grid collapses to the one point the parameters
    # name (the quick grid would add a slack_ns=1 point).
    echo "$OSPROBE bench time.sleep --param strategy=$strategy --param requested=$INTERVAL_US --param policy=$policy$slack --param duration_ms=$((DURATION_S * 1000)) --profile full --json --no-store --quiet"
}

# One measuring thread (-t1), unpinned like osprobe's; -N: nanoseconds,
# also in the histogram; the histogram itself goes to /dev/null, the
# percentiles are computed from the --json file.
cyclictest_cmd() {
    local policy="$1" realtime=""
    if [[ "$policy" == fifo ]]; then realtime=" -p $PRIORITY -m"; fi
    echo "$CYCLICTEST -t1 -i $INTERVAL_US -D $DURATION_S$realtime -q -N -h $HIST_NS --histfile=/dev/null --json=$WORK/cyclictest.$policy.json"
}

# One run of a tool: prints "NAME STAT VALUE" lines. TOOL is osprobe (with a
# pair name) or cyclictest (with a policy).
run_tool() {
    local tool="$1" what="$2" out parsed p50 p99 max overflows pair
    if [[ "$tool" == osprobe ]]; then
        # shellcheck disable=SC2046
        out="$(checked "osprobe ($what)" $(osprobe_cmd "$what"))" || exit 1
        local strategy="${what#*.}" params=("policy=${what%%.*}" "requested=$INTERVAL_US")
        if [[ "$strategy" == *+slack1ns ]]; then
            strategy="${strategy%+slack1ns}"
            params+=(slack_ns=1)
        fi
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-sleep "$strategy" "${params[@]}")" ||
            die 1 "cannot read osprobe's output ($what)"
        read -r p50 p99 max _ <<<"$parsed"
        echo "$what osprobe_p50 $p50"
        echo "$what osprobe_p99 $p99"
        echo "$what osprobe_max $max"
    else
        # shellcheck disable=SC2046
        checked "cyclictest ($what)" $(cyclictest_cmd "$what") >/dev/null || exit 1
        parsed="$("$PYTHON" "$HELPER" cyclictest "$WORK/cyclictest.$what.json")" ||
            die 1 "cannot read cyclictest's output ($what)"
        read -r p50 p99 max _ overflows <<<"$parsed"
        # One cyclictest run feeds every comparison of its policy.
        for pair in "${PAIRS[@]}"; do
            if [[ "${pair%%.*}" == "$what" ]]; then
                echo "$pair cyclictest_p50 $p50"
                echo "$pair cyclictest_p99 $p99"
                echo "$pair cyclictest_max $max"
                echo "$pair cyclictest_overflows $overflows"
            fi
        done
    fi
}

write_meta() {
    record meta runs "$RUNS"
    record meta interval_us "$INTERVAL_US"
    record meta duration_s "$DURATION_S"
    record meta target_p99_us "$TARGET_P99_US"
    record meta hist_ns "$HIST_NS"
    record meta fifo "$FIFO"
    record meta priority "$PRIORITY"
    record meta cpus "$(nproc)"
    # The slack every tool here inherits (read by cat, a child like them).
    record meta timer_slack_ns "$(cat /proc/self/timerslack_ns 2>/dev/null || echo unknown)"
    record meta cpuidle_driver "$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
    record meta clocksource "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown)"
    record meta cyclictest_binary "$CYCLICTEST"
    record meta cyclictest_version "$("$CYCLICTEST" --help 2>&1 | head -n1)"
    record meta osprobe_binary "$OSPROBE"
    record meta osprobe_version "$("$OSPROBE" --version 2>/dev/null | head -n1)"
    record meta kernel "$(uname -r)"
    record meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local pair
    for pair in "${PAIRS[@]}"; do
        record pair "$pair" "$(osprobe_cmd "$pair")" "$(cyclictest_cmd "${pair%%.*}")"
    done
}

# R rounds; in each, cyclictest runs once per policy and osprobe once per
# comparison. The order flips every round so that neither tool always runs
# on a machine just warmed (or disturbed) by the other.
measure() {
    local run order tool what name stat value out policies=(other) peers=()
    if ((FIFO)); then policies+=(fifo); fi
    for ((run = 1; run <= RUNS; run++)); do
        if ((run % 2)); then order="osprobe cyclictest"; else order="cyclictest osprobe"; fi
        for tool in $order; do
            if [[ "$tool" == osprobe ]]; then peers=("${PAIRS[@]}"); else peers=("${policies[@]}"); fi
            for what in "${peers[@]}"; do
                # Assigned first: set -e sees a failure of $(...) only there.
                out="$(run_tool "$tool" "$what")"
                while read -r name stat value; do
                    record sample "$name" "$stat" "$run" "$value"
                done <<<"$out"
                log "round $run/$RUNS  $tool $what  $(awk '$2 ~ /_p99$/ { printf "p99 %.2f us", $3 / 1e3; exit }' <<<"$out")"
            done
        done
    done
}

main() {
    parse_args "$@"
    check_settings
    command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"
    find_cyclictest
    find_fifo
    fifo_pairs
    WORK="$(mktemp -d)"
    trap 'rm -rf "$WORK"' EXIT
    # An interrupt or a kill still removes the scratch files (through EXIT).
    trap 'exit 130' INT
    trap 'exit 143' TERM
    RECORDS="$WORK/records.tsv"
    build_osprobe
    check_osprobe
    write_meta
    measure
    record meta ended "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    report
}

main "$@"
