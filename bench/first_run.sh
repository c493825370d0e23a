#!/usr/bin/env bash
# bench/first_run.sh: measure what a newcomer gets on this machine and keep
# the figures the docs quote (docs/figures.md's generated block) true.
#
# Measures, on the machine it runs on:
#   build    a fresh `cargo build --release --locked -p osprobe` into an empty
#            target directory of its own (crates must be downloaded already:
#            the network is not what is measured), and that binary's size;
#   run      `osprobe run` (the quick profile, the default) with that binary:
#            wall time and the lines it prints, into a scratch store;
#   tests    `cargo test --workspace` in the repository's own target directory.
#
# Usage:
#   bench/first_run.sh                  measure all, rewrite docs/figures.md's block
#   bench/first_run.sh --check          measure, change nothing; exit 1 when a figure
#                                       drifted >25% from the block, or the binary is
#                                       10 MB or more
#   bench/first_run.sh --only build,run measure only these (the rest stay as stored)
#   bench/first_run.sh --binary PATH    use PATH instead of building (no build figure)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FIGURES="$ROOT/docs/figures.md"
HELPER="$ROOT/bench/first_run.py"
MODE=write
ONLY="build,run,tests"
BINARY=""

log() { printf 'first_run: %s\n' "$*" >&2; }
die() { log "$2"; exit "$1"; }

while (($#)); do
    case "$1" in
    --check) MODE=check; shift ;;
    --only) ONLY="${2:-}"; shift 2 || die 2 "--only needs a list: build,run,tests" ;;
    --only=*) ONLY="${1#--only=}"; shift ;;
    --binary) BINARY="${2:-}"; shift 2 || die 2 "--binary needs a path" ;;
    --binary=*) BINARY="${1#--binary=}"; shift ;;
    -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die 2 "unknown argument '$1': accepted --check, --only LIST, --binary PATH" ;;
    esac
done
for part in ${ONLY//,/ }; do
    case "$part" in
    build | run | tests) ;;
    *) die 2 "--only: unknown part '$part': accepted build, run, tests" ;;
    esac
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }
if [[ -n "$BINARY" ]]; then
    [[ -x "$BINARY" ]] || die 2 "--binary $BINARY: not an executable file"
    wants build && die 2 "--binary and --only build: a given binary was not built here"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/osprobe-first-run.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# Seconds since the epoch with decimals, so durations need no `time` parsing.
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now)"; }

MACHINE="$(nproc) vCPU $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), \
$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), \
load $(cut -d' ' -f1 /proc/loadavg) at start"
DATE="$(date -u +%Y-%m-%d)"
MEASURED=()

if wants build; then
    log "building from clean into $WORK/target (several minutes)"
    start="$(now)"
    (cd "$ROOT" && CARGO_TARGET_DIR="$WORK/target" CARGO_INCREMENTAL=0 \
        cargo build --release --locked -p osprobe >&2)
    MEASURED+=("build_s=$(elapsed "$start")")
    BINARY="$WORK/target/release/osprobe"
fi
if [[ -z "$BINARY" ]] && wants run; then
    BINARY="$ROOT/target/release/osprobe"
    [[ -x "$BINARY" ]] || die 2 "no $BINARY: build it, or pass --binary PATH or --only build,run"
fi
if [[ -n "$BINARY" ]]; then
    MEASURED+=("binary_bytes=$(stat -c %s "$BINARY")")
fi
if wants run; then
    log "osprobe run (quick profile)"
    start="$(now)"
    OSPROBE_DB="$WORK/results.db" XDG_DATA_HOME="$WORK" XDG_CACHE_HOME="$WORK/cache" \
        "$BINARY" run --quiet >"$WORK/run.out" </dev/null
    MEASURED+=("run_s=$(elapsed "$start")" "run_lines=$(wc -l <"$WORK/run.out")")
fi
if wants tests; then
    log "cargo test --workspace (about a quarter of an hour)"
    start="$(now)"
    (cd "$ROOT" && CARGO_INCREMENTAL=0 cargo test --workspace --quiet >&2)
    MEASURED+=("tests_s=$(elapsed "$start")")
fi

log "measured: ${MEASURED[*]}"
python3 "$HELPER" "$MODE" "$FIGURES" "$DATE" "$MACHINE" "${MEASURED[@]}"
