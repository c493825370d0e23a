#!/usr/bin/env bash
# mem_fs_compare.sh: run osprobe beside mbw and fio in one run and print ratios.
#
#   mem.copy       taskset mbw -n 10 256                  vs  osprobe mem.bandwidth copy threads=1
#   fs.sequential  fio --rw=read     --direct=1 --bs=4k   vs  osprobe fs.read sequential mode=direct
#   fs.random      fio --rw=randread --direct=1 --bs=4k   vs  osprobe fs.read random mode=direct
#
# Each tool runs R times, alternating with the other; the report gives each
# tool's median over the runs, the ratio osprobe/peer with a verdict against
# the target (copy: at least mbw's best method; fs.read: within 15% of fio),
# and each tool's run-to-run spread (max-min)/median.
# See bench/README.md. Exit: 0 all comparisons made (whatever the verdicts),
# 1 a tool failed while measuring, 2 cannot start (usage, mbw or fio missing,
# no directory on a disk).

set -euo pipefail
# Let failures inside $(...) stop the function that runs there too.
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# bench/ sits at the repository root, so the root is one level up.
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/mem_fs_compare.py"
# The prefix of every log line (bench/lib.sh's log).
BENCH_NAME=mem_fs_compare
readonly HERE ROOT HELPER BENCH_NAME
# log, die, parse_args, build_osprobe, checked, record, report and the rest
# shared with perf_compare.sh.
# Found next to this script, from whatever directory shellcheck runs.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# Defaults, overridable from the environment (flags override these too).
RUNS="${RUNS:-5}"
# mbw's array size in MiB (each of its two arrays; osprobe gets the same
# size per buffer) and its iterations per method in one invocation.
MBW_MIB="${MBW_MIB:-256}"
MBW_LOOPS="${MBW_LOOPS:-10}"
# fio's file (and osprobe's) and how many times fio reads it per invocation
# (osprobe's quick profile makes 3 to 15 passes of each pattern in about 1.2
# s, about 6 at 25 us a block); FIO_RUNTIME_S caps an invocation on a slow
# disk (fio stops at the first of the two).
FIO_SIZE="${FIO_SIZE:-16M}"
FIO_LOOPS="${FIO_LOOPS:-6}"
FIO_RUNTIME_S="${FIO_RUNTIME_S:-20}"
TOLERANCE_PCT="${TOLERANCE_PCT:-15}"
# No single invocation may hang the script: each is killed after this long.
TIMEOUT_S="${TIMEOUT_S:-120}"
# Where the scratch directory for fio's and osprobe's files goes; it must be
# on a disk, not tmpfs. Default: the first of /var/tmp, the cache directory
# and target/ that is.
BENCH_DIR="${BENCH_DIR:-}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
MBW="${MBW:-}"
FIO="${FIO:-}"

# Comparisons are made in groups: one invocation of each tool feeds a group
# (fio runs once per access pattern).
readonly GROUPS_=(mem fs)
readonly PAIRS=(mem.copy fs.sequential fs.random)

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Run mbw (single-thread copy, ${MBW_MIB} MiB) beside osprobe mem.bandwidth, and fio
(O_DIRECT 4 KiB read and randread) beside osprobe fs.read, and print ratios.

  --runs N     runs of each tool per comparison (default 5; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, MBW_MIB ($MBW_MIB), MBW_LOOPS ($MBW_LOOPS), FIO_SIZE ($FIO_SIZE),
FIO_LOOPS ($FIO_LOOPS), FIO_RUNTIME_S ($FIO_RUNTIME_S), TOLERANCE_PCT ($TOLERANCE_PCT),
TIMEOUT_S ($TIMEOUT_S), BENCH_DIR (parent of the scratch directory; not tmpfs),
MBW, FIO (binaries), OSPROBE (osprobe binary), PYTHON (python3),
OSPROBE_PROFILE (quick).
EOF
}

# The settings beyond --runs (lib.sh's parse_args checks that), checked
# before anything runs.
check_settings() {
    [[ "$MBW_MIB" =~ ^[1-9][0-9]*$ ]] || die 2 "MBW_MIB must be a positive integer (MiB), got '$MBW_MIB'"
    [[ "$MBW_LOOPS" =~ ^[1-9][0-9]*$ ]] || die 2 "MBW_LOOPS must be a positive integer, got '$MBW_LOOPS'"
    [[ "$FIO_LOOPS" =~ ^[1-9][0-9]*$ ]] || die 2 "FIO_LOOPS must be a positive integer, got '$FIO_LOOPS'"
    [[ "$FIO_RUNTIME_S" =~ ^[1-9][0-9]*$ ]] || die 2 "FIO_RUNTIME_S must be a positive integer, got '$FIO_RUNTIME_S'"
    # A size both fio and osprobe read the same way: digits and K, M or G
    # (binary multiples in both).
    [[ "$FIO_SIZE" =~ ^[1-9][0-9]*[KMG]$ ]] || die 2 "FIO_SIZE must look like 16M (K, M or G), got '$FIO_SIZE'"
}

# Find a peer tool or say how to install it (exit 2).
find_tool() {
    local var="$1" name="$2" package="$3" path
    path="${!var:-}"
    if [[ -z "$path" ]]; then
        path="$(command -v "$name")" ||
            die 2 "$name is not installed. On Debian/Ubuntu: sudo apt-get install -y $package"
    fi
    [[ -x "$path" ]] || die 2 "$var=$path is not an executable"
    printf -v "$var" '%s' "$path"
}

# Filesystems that keep files in memory: a directory there would measure
# the page cache, and O_DIRECT is refused or meaningless.
in_memory_fs() {
    case "$1" in
    tmpfs | ramfs | devtmpfs | hugetlbfs) return 0 ;;
    *) return 1 ;;
    esac
}

# The scratch directory on a disk for fio's file and osprobe's: created
# here, removed by the EXIT trap.
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
        if in_memory_fs "$fstype"; then
            log "$parent is on $fstype, not a disk; skipping it"
            continue
        fi
        SCRATCH="$(mktemp -d "$parent/osprobe-mem-fs.XXXXXX")" || continue
        SCRATCH_FS="$fstype"
        # The commands are rebuilt by word splitting: no blanks in the path.
        [[ "$SCRATCH" != *[[:space:]]* ]] || die 2 "the scratch path '$SCRATCH' has blanks; set BENCH_DIR"
        return
    done
    die 2 "no writable directory on a disk among: ${candidates[*]} (set BENCH_DIR to one that is not tmpfs)"
}

# An osprobe built from an older tree may lack the experiments compared here:
# refuse it (exit 2) rather than fail in the middle of measuring.
check_experiments() {
    local list exp
    list="$(timeout "$TIMEOUT_S" "$OSPROBE" list 2>&1)" || die 1 "'$OSPROBE list' failed: $list"
    for exp in mem.bandwidth fs.read; do
        grep -qx "$exp" <<<"$list" || die 2 "this osprobe ($OSPROBE) has no experiment $exp"
    done
}

# The commands of each comparison, as displayed and as run.
# osprobe pins its single mem.bandwidth thread to its first allowed CPU;
# mbw runs on the same CPU.
mbw_cmd() { echo "taskset -c $CPU $MBW -n $MBW_LOOPS $MBW_MIB"; }

fio_cmd() {
    local rw
    case "$1" in
    fs.sequential) rw="read" ;;
    fs.random) rw="randread" ;;
    esac
    # fs.read does not pin its thread, so fio is not pinned either.
    echo "$FIO --name=$rw --filename=$SCRATCH/fio.dat --size=$FIO_SIZE --bs=4k --direct=1 --rw=$rw --ioengine=psync --numjobs=1 --loops=$FIO_LOOPS --runtime=$FIO_RUNTIME_S --time_based=0 --output-format=json"
}

osprobe_cmd() {
    local common="--profile ${OSPROBE_PROFILE:-quick} --json --no-store --quiet"
    case "$1" in
    mem) echo "$OSPROBE bench mem.bandwidth --param threads=1 --param size=${MBW_MIB}M $common" ;;
    fs) echo "$OSPROBE bench fs.read --param mode=direct --param size=$FIO_SIZE --param dir=$SCRATCH $common" ;;
    esac
}

peer_cmd() {
    case "$1" in
    mem.copy) mbw_cmd ;;
    fs.*) fio_cmd "$1" ;;
    esac
}

osprobe_cmd_of() {
    case "$1" in
    mem.*) osprobe_cmd mem ;;
    fs.*) osprobe_cmd fs ;;
    esac
}

# One run of one tool for one group: prints "COMPARISON TOOL VALUE" lines,
# VALUE in bytes/s (mem) or ns per block (fs). TOOL is mbw.METHOD, fio,
# fio_clat_p50, osprobe (the p50), osprobe_mean, or osprobe.OP (another
# mem.bandwidth operation, for information).
# The commands hold no quoted words, so word splitting rebuilds them.
run_tool() {
    local group="$1" tool="$2" out parsed pair metric p50 mean
    case "$group/$tool" in
    mem/peer)
        # shellcheck disable=SC2046
        out="$(checked "mbw" $(mbw_cmd))" || exit 1
        parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" mbw-rates)" || die 1 "cannot read mbw's output"
        while read -r metric p50; do
            echo "mem.copy mbw.$metric $p50"
        done <<<"$parsed"
        ;;
    fs/peer)
        for pair in fs.sequential fs.random; do
            # shellcheck disable=SC2046
            out="$(checked "fio ($pair)" $(fio_cmd "$pair"))" || exit 1
            parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" fio-ns)" || die 1 "cannot read fio's output ($pair)"
            read -r mean p50 <<<"$parsed"
            echo "$pair fio $mean"
            echo "$pair fio_clat_p50 $p50"
        done
        ;;
    mem/osprobe)
        # shellcheck disable=SC2046
        out="$(checked "osprobe (mem.bandwidth)" $(osprobe_cmd mem))" || exit 1
        parsed="$(printf '%s' "$out" |
            "$PYTHON" "$HELPER" osprobe-metrics mem.bandwidth bytes/s copy threads=1)" ||
            die 1 "cannot read osprobe's output (mem.bandwidth)"
        while read -r metric p50 mean; do
            if [[ "$metric" == copy ]]; then
                echo "mem.copy osprobe $p50"
                echo "mem.copy osprobe_mean $mean"
            else
                echo "mem.copy osprobe.$metric $p50"
            fi
        done <<<"$parsed"
        ;;
    fs/osprobe)
        # shellcheck disable=SC2046
        out="$(checked "osprobe (fs.read)" $(osprobe_cmd fs))" || exit 1
        parsed="$(printf '%s' "$out" |
            "$PYTHON" "$HELPER" osprobe-metrics fs.read ns sequential,random mode=direct)" ||
            die 1 "cannot read osprobe's output (fs.read)"
        while read -r metric p50 mean; do
            case "$metric" in
            sequential | random)
                echo "fs.$metric osprobe $p50"
                echo "fs.$metric osprobe_mean $mean"
                ;;
            esac
        done <<<"$parsed"
        ;;
    esac
}

write_meta() {
    record meta runs "$RUNS"
    record meta tolerance_pct "$TOLERANCE_PCT"
    record meta mbw_mib "$MBW_MIB"
    record meta mbw_loops "$MBW_LOOPS"
    record meta fio_size "$FIO_SIZE"
    record meta fio_loops "$FIO_LOOPS"
    record meta cpu "$CPU"
    record meta scratch_dir "$SCRATCH"
    record meta scratch_fs "$SCRATCH_FS"
    record meta mbw_binary "$MBW"
    # mbw has no --version; Debian's package version says which source.
    record meta mbw_version "mbw $(dpkg-query -W -f='${Version}' mbw 2>/dev/null || echo unknown)"
    record meta fio_binary "$FIO"
    record meta fio_version "$("$FIO" --version 2>/dev/null | head -n1)"
    record meta osprobe_binary "$OSPROBE"
    record meta osprobe_version "$("$OSPROBE" --version 2>/dev/null | head -n1)"
    record meta kernel "$(uname -r)"
    record meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    local pair
    for pair in "${PAIRS[@]}"; do
        record pair "$pair" "$(peer_cmd "$pair")" "$(osprobe_cmd_of "$pair")"
    done
}

# A value as the progress line shows it: rates in GB/s, times in ns.
pretty() {
    case "$1" in
    mem.*) awk -v v="$2" 'BEGIN { printf "%.2f GB/s", v / 1e9 }' ;;
    *) awk -v v="$2" 'BEGIN { printf "%.0f ns", v }' ;;
    esac
}

# R rounds; in each, every group runs both tools back to back. The order
# flips every round so that neither tool always runs on a machine just
# warmed (or disturbed) by the other.
measure() {
    local run group tool out name what value order
    for ((run = 1; run <= RUNS; run++)); do
        if ((run % 2)); then order="osprobe peer"; else order="peer osprobe"; fi
        for group in "${GROUPS_[@]}"; do
            for tool in $order; do
                # Assigned first: set -e sees a failure of $(...) only there.
                out="$(run_tool "$group" "$tool")"
                while read -r name what value; do
                    log "run $run/$RUNS  $name  $what  $(pretty "$name" "$value")"
                    record sample "$name" "$what" "$run" "$value"
                done <<<"$out"
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
    need_python_taskset
    find_tool MBW mbw mbw
    find_tool FIO fio fio
    WORK="$(mktemp -d)"
    trap cleanup EXIT
    # An interrupt or a kill still removes the scratch files (through EXIT).
    trap 'exit 130' INT
    trap 'exit 143' TERM
    RECORDS="$WORK/records.tsv"
    make_scratch
    log "scratch directory $SCRATCH ($SCRATCH_FS)"
    build_osprobe
    check_experiments
    find_cpu
    write_meta
    measure
    record meta ended "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    report
}

main "$@"
