#!/usr/bin/env bash
# perf_compare.sh: run osprobe beside `perf bench` in one run and print ratios.
#
#   syscall        perf bench syscall basic          vs  osprobe cpu.syscall getppid
#   pipe.process   taskset perf bench sched pipe     vs  osprobe proc.ctx_switch round_trip kind=process
#   pipe.thread    taskset perf bench sched pipe -T  vs  osprobe proc.ctx_switch round_trip kind=thread
#
# Each tool runs R times, alternating with the other; the report gives each
# tool's median over the runs, the ratio osprobe/perf with a verdict against
# a tolerance (15%), and each tool's run-to-run spread (max-min)/median.
# See bench/README.md. Exit: 0 all comparisons made (whatever the verdicts),
# 1 a tool failed while measuring, 2 cannot start (usage, perf unusable).

set -euo pipefail
# Let failures inside $(...) stop the function that runs there too.
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# bench/ sits at the repository root, so the root is one level up.
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/perf_compare.py"
# The prefix of every log line (bench/lib.sh's log).
BENCH_NAME=perf_compare
readonly HERE ROOT HELPER BENCH_NAME
# log, die, parse_args, build_osprobe, checked, record, report and the rest
# shared with mem_fs_compare.sh.
# Found next to this script, from whatever directory shellcheck runs.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# Defaults, overridable from the environment (flags override these too).
RUNS="${RUNS:-5}"
# Loop counts chosen so each perf invocation takes about a second; osprobe's
# full profile samples each point for about two seconds, so that both tools
# see a comparable stretch of the host's slow and fast periods.
SYSCALL_LOOPS="${SYSCALL_LOOPS:-5000000}"
PIPE_LOOPS="${PIPE_LOOPS:-100000}"
TOLERANCE_PCT="${TOLERANCE_PCT:-15}"
# No single invocation may hang the script: each is killed after this long.
TIMEOUT_S="${TIMEOUT_S:-60}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
PERF="${PERF:-}"

readonly PAIRS=(syscall pipe.process pipe.thread)

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Run perf bench (syscall basic, sched pipe, sched pipe -T) beside osprobe
(cpu.syscall, proc.ctx_switch kind=process|thread) and print ratios.

  --runs N     runs of each tool per comparison (default 5; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, SYSCALL_LOOPS ($SYSCALL_LOOPS), PIPE_LOOPS ($PIPE_LOOPS),
TOLERANCE_PCT ($TOLERANCE_PCT), TIMEOUT_S ($TIMEOUT_S), PERF (perf binary),
OSPROBE (osprobe binary), PYTHON (python3).
EOF
}

# True when this perf binary can actually run a benchmark. Debian's
# /usr/bin/perf may be a wrapper that only dispatches to perf_X.Y for the
# running kernel and fails with "perf not found for kernel X" otherwise.
perf_works() {
    timeout "$TIMEOUT_S" "$1" bench syscall basic -l 1000 >/dev/null 2>"$WORK/perf_probe.err"
}

find_perf() {
    local candidate
    if [[ -n "$PERF" ]]; then
        perf_works "$PERF" || die 2 "PERF=$PERF cannot run 'perf bench': $(cat "$WORK/perf_probe.err")"
        return
    fi
    if ! candidate="$(command -v perf)"; then
        die 2 "perf is not installed. On Debian/Ubuntu: sudo apt-get install linux-perf (Ubuntu: linux-tools-generic)"
    fi
    if perf_works "$candidate"; then
        PERF="$candidate"
        return
    fi
    local wrapper_error
    wrapper_error="$(cat "$WORK/perf_probe.err")"
    log "'$candidate bench' failed (${wrapper_error%%$'\n'*}); trying versioned binaries"
    # Newest version first: any perf can run these two benchmarks, whatever
    # kernel it was built for.
    local versioned=()
    mapfile -t versioned < <(compgen -G '/usr/bin/perf_*' | sort -rV)
    for candidate in "${versioned[@]}"; do
        if [[ -x "$candidate" ]] && perf_works "$candidate"; then
            log "using $candidate"
            PERF="$candidate"
            return
        fi
    done
    die 2 "perf is installed but 'perf bench' does not run, and no working /usr/bin/perf_* was found:
$wrapper_error
Install a perf that matches some kernel (sudo apt-get install linux-perf), or set PERF=/path/to/perf."
}

# The commands of each comparison, as displayed and as run.
perf_cmd() {
    case "$1" in
    # osprobe pins its measuring thread for cpu.syscall; so does perf here.
    syscall) echo "taskset -c $CPU $PERF bench syscall basic -l $SYSCALL_LOOPS" ;;
    # Both processes (or threads) inherit the mask: the same pinning as
    # osprobe, which puts both tasks on its first allowed CPU.
    pipe.process) echo "taskset -c $CPU $PERF bench sched pipe -l $PIPE_LOOPS" ;;
    pipe.thread) echo "taskset -c $CPU $PERF bench sched pipe -T -l $PIPE_LOOPS" ;;
    esac
}

osprobe_cmd() {
    local common="--profile ${OSPROBE_PROFILE:-full} --json --no-store --quiet"
    case "$1" in
    syscall) echo "$OSPROBE bench cpu.syscall --param call=getppid $common" ;;
    pipe.process) echo "$OSPROBE bench proc.ctx_switch --param kind=process $common" ;;
    pipe.thread) echo "$OSPROBE bench proc.ctx_switch --param kind=thread $common" ;;
    esac
}

# Which osprobe measurement each comparison reads: experiment, metric, params.
osprobe_metric() {
    case "$1" in
    syscall) echo "cpu.syscall getppid call=getppid" ;;
    pipe.process) echo "proc.ctx_switch round_trip kind=process" ;;
    pipe.thread) echo "proc.ctx_switch round_trip kind=thread" ;;
    esac
}

# One run of one tool for one comparison: prints nanoseconds per operation
# (osprobe: its p50, then its mean).
# The commands hold no quoted words, so word splitting rebuilds them.
run_tool() {
    local pair="$1" tool="$2" out
    if [[ "$tool" == perf ]]; then
        # shellcheck disable=SC2046
        out="$(checked "perf ($pair)" $(perf_cmd "$pair"))" || exit 1
        printf '%s' "$out" | "$PYTHON" "$HELPER" perf-ns || die 1 "cannot read perf's output ($pair)"
    else
        # shellcheck disable=SC2046
        out="$(checked "osprobe ($pair)" $(osprobe_cmd "$pair"))" || exit 1
        # shellcheck disable=SC2046
        printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-ns $(osprobe_metric "$pair") ||
            die 1 "cannot read osprobe's output ($pair)"
    fi
}

write_meta() {
    record meta runs "$RUNS"
    record meta tolerance_pct "$TOLERANCE_PCT"
    record meta syscall_loops "$SYSCALL_LOOPS"
    record meta pipe_loops "$PIPE_LOOPS"
    record meta cpu "$CPU"
    record meta perf_binary "$PERF"
    record meta perf_version "$("$PERF" --version 2>/dev/null | head -n1)"
    record meta osprobe_binary "$OSPROBE"
    record meta osprobe_version "$("$OSPROBE" --version 2>/dev/null | head -n1)"
    record meta kernel "$(uname -r)"
    record meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local pair
    for pair in "${PAIRS[@]}"; do
        record pair "$pair" "$(perf_cmd "$pair")" "$(osprobe_cmd "$pair")"
    done
}

# R rounds; in each, every comparison runs both tools back to back. The order
# flips every round so that neither tool always runs on a machine just
# warmed (or disturbed) by the other.
measure() {
    local run pair tool out ns mean order
    for ((run = 1; run <= RUNS; run++)); do
        if ((run % 2)); then order="osprobe perf"; else order="perf osprobe"; fi
        for pair in "${PAIRS[@]}"; do
            for tool in $order; do
                # Assigned first: set -e sees a failure of $(...) only there.
                out="$(run_tool "$pair" "$tool")"
                read -r ns mean <<<"$out"
                log "run $run/$RUNS  $pair  $tool  $ns ns${mean:+ (mean $mean ns)}"
                record sample "$pair" "$tool" "$run" "$ns"
                if [[ -n "$mean" ]]; then
                    record sample "$pair" "${tool}_mean" "$run" "$mean"
                fi
            done
        done
    done
}

main() {
    parse_args "$@"
    need_python_taskset
    WORK="$(mktemp -d)"
    trap 'rm -rf "$WORK"' EXIT
    RECORDS="$WORK/records.tsv"
    find_perf
    build_osprobe
    find_cpu
    write_meta
    measure
    record meta ended "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    report
}

main "$@"
