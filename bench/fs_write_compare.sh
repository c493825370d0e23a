#!/usr/bin/env bash
# fs_write_compare.sh: osprobe fs.write and fs.fsync beside fio with the same
# job parameters, and the ratios.
#
#   write.buffered.seq.1M  fio --rw=write     --bs=1m                vs  fs.write mode=buffered pattern=sequential block=1M
#   write.direct.rand.4K   fio --rw=randwrite --bs=4k --direct=1     vs  fs.write mode=direct pattern=random block=4K
#   write.dsync.seq.4K     fio --rw=write     --bs=4k --sync=dsync   vs  fs.write mode=dsync pattern=sequential block=4K
#   fsync.fdatasync.4K     fio --rw=write --size=4k --fdatasync=1    vs  fs.fsync method=fdatasync block=4K
#   qd16.randread.4K       fio --ioengine=io_uring --iodepth=16 --rw=randread --direct=1 --norandommap
#                                                                    vs  fs.iodepth op=randread depth=16
#
# Every fio job but the last: psync engine, iodepth 1, overwrite=1 (the file laid out
# first, as osprobe does), time based. Each tool runs R times per comparison,
# alternating which goes first; the report gives each median, the ratio
# osprobe/fio and a verdict against the target (within 15%).
# See bench/README.md. Exit: 0 all comparisons made (whatever the verdicts),
# 1 a tool failed while measuring, 2 cannot start (usage, fio missing, no
# directory on a disk).

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/fs_write_compare.py"
BENCH_NAME=fs_write_compare
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${RUNS:-3}"
# The file fio and osprobe write (osprobe's quick default is 32M).
SIZE="${SIZE:-32M}"
# How long one fio job writes (osprobe's quick profile writes about 0.6 s
# per point).
FIO_RUNTIME_S="${FIO_RUNTIME_S:-2}"
TOLERANCE_PCT="${TOLERANCE_PCT:-15}"
TIMEOUT_S="${TIMEOUT_S:-120}"
BENCH_DIR="${BENCH_DIR:-}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
FIO="${FIO:-}"
OSPROBE_PROFILE="${OSPROBE_PROFILE:-quick}"

readonly PAIRS=(write.buffered.seq.1M write.direct.rand.4K write.dsync.seq.4K fsync.fdatasync.4K qd16.randread.4K)

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Run fio write jobs beside osprobe fs.write and fs.fsync with the same
parameters, and print the ratios.

  --runs N     runs of each tool per comparison (default 3; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, SIZE ($SIZE), FIO_RUNTIME_S ($FIO_RUNTIME_S),
TOLERANCE_PCT ($TOLERANCE_PCT), TIMEOUT_S ($TIMEOUT_S), BENCH_DIR (parent of
the scratch directory; not tmpfs), FIO, OSPROBE (binaries), PYTHON (python3),
OSPROBE_PROFILE ($OSPROBE_PROFILE).
EOF
}

check_settings() {
    [[ "$FIO_RUNTIME_S" =~ ^[1-9][0-9]*$ ]] || die 2 "FIO_RUNTIME_S must be a positive integer, got '$FIO_RUNTIME_S'"
    [[ "$SIZE" =~ ^[1-9][0-9]*[MG]$ ]] || die 2 "SIZE must look like 32M (M or G), got '$SIZE'"
    [[ "$TOLERANCE_PCT" =~ ^[0-9]+$ ]] || die 2 "TOLERANCE_PCT must be an integer, got '$TOLERANCE_PCT'"
}

# The scratch directory on a disk (not tmpfs), removed by the EXIT trap.
make_scratch() {
    local parent candidates=() fstype
    if [[ -n "$BENCH_DIR" ]]; then
        candidates=("$BENCH_DIR")
    else
        candidates=(/var/tmp "${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}" "$ROOT/target")
    fi
    for parent in "${candidates[@]}"; do
        mkdir -p "$parent" 2>/dev/null || continue
        [[ -w "$parent" ]] || continue
        fstype="$(stat -f -c %T "$parent")" || continue
        case "$fstype" in
        tmpfs | ramfs) log "$parent is on $fstype, not a disk; skipping it"; continue ;;
        esac
        SCRATCH="$(mktemp -d "$parent/osprobe-fs-write.XXXXXX")" || continue
        SCRATCH_FS="$fstype"
        [[ "$SCRATCH" != *[[:space:]]* ]] || die 2 "the scratch path '$SCRATCH' has blanks; set BENCH_DIR"
        return
    done
    die 2 "no writable directory on a disk among: ${candidates[*]} (set BENCH_DIR to one that is not tmpfs)"
}

check_experiments() {
    local list exp
    list="$(timeout "$TIMEOUT_S" "$OSPROBE" list 2>&1)" || die 1 "'$OSPROBE list' failed: $list"
    for exp in fs.write fs.fsync fs.iodepth; do
        grep -qx "$exp" <<<"$list" || die 2 "this osprobe ($OSPROBE) has no experiment $exp"
    done
}

fio_cmd() {
    local common="--ioengine=psync --iodepth=1 --numjobs=1 --overwrite=1 --time_based --runtime=$FIO_RUNTIME_S --output-format=json --filename=$SCRATCH/fio.dat"
    case "$1" in
    write.buffered.seq.1M) echo "$FIO --name=w $common --size=$SIZE --rw=write --bs=1m" ;;
    write.direct.rand.4K) echo "$FIO --name=w $common --size=$SIZE --rw=randwrite --bs=4k --direct=1" ;;
    write.dsync.seq.4K) echo "$FIO --name=w $common --size=$SIZE --rw=write --bs=4k --sync=dsync" ;;
    fsync.fdatasync.4K) echo "$FIO --name=w $common --size=4k --rw=write --bs=4k --fdatasync=1" ;;
    qd16.randread.4K) echo "$FIO --name=qd --overwrite=1 --time_based --runtime=$FIO_RUNTIME_S --output-format=json --filename=$SCRATCH/fio.dat --size=$SIZE --ioengine=io_uring --iodepth=16 --rw=randread --bs=4k --direct=1 --norandommap" ;;
    esac
}

osprobe_cmd() {
    local common="--profile $OSPROBE_PROFILE --json --no-store --quiet --param dir=$SCRATCH"
    case "$1" in
    write.buffered.seq.1M) echo "$OSPROBE bench fs.write --param mode=buffered --param pattern=sequential --param block=1M --param size=$SIZE $common" ;;
    write.direct.rand.4K) echo "$OSPROBE bench fs.write --param mode=direct --param pattern=random --param block=4K --param size=$SIZE $common" ;;
    write.dsync.seq.4K) echo "$OSPROBE bench fs.write --param mode=dsync --param pattern=sequential --param block=4K --param size=$SIZE $common" ;;
    fsync.fdatasync.4K) echo "$OSPROBE bench fs.fsync --param method=fdatasync --param block=4K $common" ;;
    qd16.randread.4K) echo "$OSPROBE bench fs.iodepth --param op=randread --param depth=16 $common" ;;
    esac
}

# One run of one tool for one comparison: prints the value (bytes/s for
# writes, ns per operation for fsync). The commands hold no quoted words,
# so word splitting rebuilds them.
run_tool() {
    local pair="$1" tool="$2" out
    case "$tool/$pair" in
    fio/fsync.*)
        # shellcheck disable=SC2046
        out="$(checked "fio ($pair)" $(fio_cmd "$pair"))" || exit 1
        printf '%s' "$out" | "$PYTHON" "$HELPER" fio-value ns_per_op || die 1 "cannot read fio's output ($pair)"
        ;;
    fio/*)
        # shellcheck disable=SC2046
        out="$(checked "fio ($pair)" $(fio_cmd "$pair"))" || exit 1
        printf '%s' "$out" | "$PYTHON" "$HELPER" fio-value bw || die 1 "cannot read fio's output ($pair)"
        ;;
    osprobe/fsync.*)
        # shellcheck disable=SC2046
        out="$(checked "osprobe ($pair)" $(osprobe_cmd "$pair"))" || exit 1
        printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-value fs.fsync per_op mean method=fdatasync ||
            die 1 "cannot read osprobe's output ($pair)"
        ;;
    osprobe/qd16.*)
        # shellcheck disable=SC2046
        out="$(checked "osprobe ($pair)" $(osprobe_cmd "$pair"))" || exit 1
        printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-value fs.iodepth bandwidth p50 depth=16 ||
            die 1 "cannot read osprobe's output ($pair)"
        ;;
    osprobe/*)
        # shellcheck disable=SC2046
        out="$(checked "osprobe ($pair)" $(osprobe_cmd "$pair"))" || exit 1
        printf '%s' "$out" | "$PYTHON" "$HELPER" osprobe-value fs.write bandwidth p50 ||
            die 1 "cannot read osprobe's output ($pair)"
        ;;
    esac
    # fio's file is rewritten by every job; osprobe removes its own.
    rm -f "$SCRATCH/fio.dat"
}

write_meta() {
    record meta runs "$RUNS"
    record meta tolerance_pct "$TOLERANCE_PCT"
    record meta size "$SIZE"
    record meta fio_runtime_s "$FIO_RUNTIME_S"
    record meta scratch_dir "$SCRATCH"
    record meta scratch_fs "$SCRATCH_FS"
    record meta fio_binary "$FIO"
    record meta fio_version "$("$FIO" --version 2>/dev/null | head -n1)"
    record meta osprobe_binary "$OSPROBE"
    record meta osprobe_version "$("$OSPROBE" --version 2>/dev/null | head -n1)"
    record meta kernel "$(uname -r)"
    record meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local pair
    for pair in "${PAIRS[@]}"; do
        record pair "$pair" "$(fio_cmd "$pair")" "$(osprobe_cmd "$pair")"
    done
}

# R rounds; the order of the two tools flips every round.
measure() {
    local run pair tool order value
    for ((run = 1; run <= RUNS; run++)); do
        if ((run % 2)); then order="osprobe fio"; else order="fio osprobe"; fi
        for pair in "${PAIRS[@]}"; do
            for tool in $order; do
                value="$(run_tool "$pair" "$tool")"
                log "run $run/$RUNS  $pair  $tool  $value"
                record sample "$pair" "$tool" "$run" "$value"
            done
        done
    done
}

cleanup() {
    rm -rf "${WORK:-}" "${SCRATCH:-}"
}

main() {
    parse_args "$@"
    check_settings
    command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"
    if [[ -z "$FIO" ]]; then
        FIO="$(command -v fio)" || die 2 "fio is not installed. On Debian/Ubuntu: sudo apt-get install -y fio"
    fi
    [[ -x "$FIO" ]] || die 2 "FIO=$FIO is not an executable"
    WORK="$(mktemp -d)"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    RECORDS="$WORK/records.tsv"
    make_scratch
    log "scratch directory $SCRATCH ($SCRATCH_FS)"
    build_osprobe
    check_experiments
    write_meta
    measure
    record meta ended "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    report
}

main "$@"
