# shellcheck shell=bash
# bench/lib.sh: shell helpers shared by the comparison scripts in bench/.
# Sourced, not run: it only defines functions and the flag defaults, so
# that these helpers exist once while each script keeps its own
# `set -euo pipefail`, defaults, usage and measurements.
#
# Before sourcing, a script sets:
#   BENCH_NAME  the prefix of every log line (e.g. perf_compare)
#   ROOT        the repository root (osprobe is built and found there)
#   HELPER      its Python half (first-cpu, report)
# It defines usage() (printed by parse_args), and before calling the
# helpers that use them sets RUNS, TIMEOUT_S, PYTHON, OSPROBE (empty: the
# release build), WORK (a scratch directory) and RECORDS (the TSV file the
# report reads).

# Fail at once, not with a puzzling unprefixed message later.
: "${BENCH_NAME:?set BENCH_NAME before sourcing bench/lib.sh}"

# Set by parse_args from --json and --no-build.
JSON=0
BUILD=1

# Progress and errors go to stderr, so that stdout holds only the report.
log() { printf '%s\n' "$BENCH_NAME: $*" >&2; }

die() {
    local code="$1"
    shift
    log "$*"
    exit "$code"
}

# The flags every script takes. A script with more settings to check does
# so after this returns.
parse_args() {
    while (($#)); do
        case "$1" in
        --runs) RUNS="${2:-}"; shift 2 || die 2 "--runs needs a value" ;;
        --runs=*) RUNS="${1#--runs=}"; shift ;;
        --json) JSON=1; shift ;;
        --no-build) BUILD=0; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die 2 "unknown argument: $1" ;;
        esac
    done
    [[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die 2 "--runs must be a positive integer, got '$RUNS'"
}

# What every script needs before it starts: Python for the report and
# taskset to pin a peer tool beside osprobe.
need_python_taskset() {
    command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"
    command -v taskset >/dev/null || die 2 "taskset is needed for pinning (apt-get install util-linux)"
}

# Build osprobe unless --no-build, and check the binary is there.
build_osprobe() {
    if [[ -z "$OSPROBE" ]]; then
        OSPROBE="$ROOT/target/release/osprobe"
    fi
    if ((BUILD)); then
        log "building osprobe (cargo build --release)"
        # Cargo's progress goes to stderr so that --json output stays clean.
        (cd "$ROOT" && cargo build --release --quiet) >&2 || die 1 "cargo build --release failed"
    fi
    [[ -x "$OSPROBE" ]] || die 1 "no osprobe binary at $OSPROBE (build it, or drop --no-build)"
}

# The CPU osprobe pins to (its first allowed one), for taskset to pin the
# peer tool on the same CPU.
# Set here, read by the sourcing script's commands (shellcheck, checking
# this file alone, cannot see that).
# shellcheck disable=SC2034
find_cpu() {
    CPU="$("$PYTHON" "$HELPER" first-cpu)" || die 2 "$PYTHON $HELPER does not run"
}

# Run a command under the timeout; on failure show its stderr and stop.
checked() {
    local what="$1"
    shift
    if ! timeout "$TIMEOUT_S" "$@" 2>"$WORK/tool.err"; then
        die 1 "$what failed: $*
$(cat "$WORK/tool.err")"
    fi
}

# One line of the records file: fields joined by tabs.
record() {
    local IFS=$'\t'
    printf '%s\n' "$*" >>"$RECORDS"
}

# The table (or with --json the JSON object) on stdout, from the records.
report() {
    if ((JSON)); then
        "$PYTHON" "$HELPER" report "$RECORDS" --json
    else
        "$PYTHON" "$HELPER" report "$RECORDS"
    fi
}
