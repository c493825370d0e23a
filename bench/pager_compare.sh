#!/usr/bin/env bash
# pager_compare.sh: osprobe's user-space demand pager against the kernel's
# own page faults, in one run, and a small table of replacement policies.
#
#   zero_fill     pager.fault fault=zero_fill              vs  mem.page_fault fault=minor
#                 (serve=handler-thread: the pager's thread serves each fault)
#   zero_fill_faulting  the same, serve=faulting-thread: served on the faulting
#                 thread in a SIGBUS handler
#   swap_in_file  pager.fault fault=swap_in_file           vs  mem.page_fault fault=major
#                                                          and the kernel's fault on a
#                                                          page-cached file page (pager.fault's
#                                                          own notes)
#   swap_in_rfs   pager.fault fault=swap_in_rfs path=loopback  vs  the pager's swap_in_file
#   policy        pager.policy (quick profile, once): faults per policy, offline and live
#   scan          pager.scan read_around=1 and 128, loopback TCP, 32 x 32 KiB: a sequential
#                 scan through rfs swap against rfs get of the same bytes on the same path
#                 (each round; target: scan >= 0.5x rfs get with read-around)
#
# Each comparison runs R times, the pager and the kernel alternating which
# goes first; the report gives medians over the runs of each run's p50, the
# ratio pager/kernel, each side's run-to-run spread (max-min)/median, and the
# verdict against the targets (zero-fill p50 <= 15 us, local swap-in p50 <=
# 30 us), and for each serving mode the zero-fill's ratio to the kernel's
# minor fault measured in the same pager.fault run (target <= 3x), naming
# the modes that meet it. See bench/README.md. Exit: 0 all comparisons made (whatever the
# verdicts), 1 a tool failed while measuring, 2 cannot start (usage, no
# userfaultfd, an osprobe without the experiments).

set -euo pipefail
# Let failures inside $(...) stop the function that runs there too.
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# bench/ sits at the repository root, so the root is one level up.
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/pager_compare.py"
# The prefix of every log line (bench/lib.sh's log).
BENCH_NAME=pager_compare
readonly HERE ROOT HELPER BENCH_NAME
# log, die, parse_args, build_osprobe, checked, record, report and the rest
# shared with the other scripts.
# Found next to this script, from whatever directory shellcheck runs.
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

# Defaults, overridable from the environment (flags override these too).
RUNS="${RUNS:-5}"
# The issue's targets on this machine, in microseconds (p50).
TARGET_ZERO_FILL_US="${TARGET_ZERO_FILL_US:-15}"
TARGET_SWAP_IN_US="${TARGET_SWAP_IN_US:-30}"
# Issue 21: the zero-fill within this many times the kernel's minor fault.
TARGET_ZERO_FILL_RATIO="${TARGET_ZERO_FILL_RATIO:-3}"
# No single invocation may hang the script: each is killed after this long.
TIMEOUT_S="${TIMEOUT_S:-120}"
# mem.page_fault fault=major's scratch file goes here (--param dir=); empty:
# osprobe's default, the temp directory.
PAGE_FAULT_DIR="${PAGE_FAULT_DIR:-}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"

# Comparisons, in report order, and the osprobe invocations that feed them
# (one invocation each per run; the policy table is measured once).
readonly PAIRS=(zero_fill zero_fill_faulting swap_in_file swap_in_rfs)
readonly PAGER_FAULTS=(zero_fill zero_fill_faulting swap_in_file swap_in_rfs)
readonly KERNEL_FAULTS=(minor major)

usage() {
    cat <<EOF
Usage: $(basename "$0") [--runs N] [--json] [--no-build] [--help]

Run osprobe's pager.fault (zero-fill, swap-in from a local file, swap-in over
the remote file service on loopback) beside the kernel's faults from
mem.page_fault, and print ratios and the targets; then pager.policy's fault
counts per policy.

  --runs N     runs of each comparison (default 5; env RUNS)
  --json       print a JSON object instead of the tables
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, TARGET_ZERO_FILL_US ($TARGET_ZERO_FILL_US), TARGET_SWAP_IN_US ($TARGET_SWAP_IN_US),
TARGET_ZERO_FILL_RATIO ($TARGET_ZERO_FILL_RATIO, zero-fill / the kernel's minor fault),
TIMEOUT_S ($TIMEOUT_S per invocation), PAGE_FAULT_DIR (mem.page_fault major's
scratch directory; default the temp directory), OSPROBE (osprobe binary),
PYTHON (python3), OSPROBE_PROFILE (quick).
EOF
}

# The settings beyond --runs (lib.sh's parse_args checks that), checked
# before anything runs.
check_settings() {
    [[ "$TARGET_ZERO_FILL_US" =~ ^[0-9]+([.][0-9]+)?$ ]] || die 2 "TARGET_ZERO_FILL_US must be a number (us), got '$TARGET_ZERO_FILL_US'"
    [[ "$TARGET_SWAP_IN_US" =~ ^[0-9]+([.][0-9]+)?$ ]] || die 2 "TARGET_SWAP_IN_US must be a number (us), got '$TARGET_SWAP_IN_US'"
    [[ "$TARGET_ZERO_FILL_RATIO" =~ ^[0-9]+([.][0-9]+)?$ ]] || die 2 "TARGET_ZERO_FILL_RATIO must be a number (a ratio), got '$TARGET_ZERO_FILL_RATIO'"
    [[ "$TIMEOUT_S" =~ ^[1-9][0-9]*$ ]] || die 2 "TIMEOUT_S must be a positive integer (seconds), got '$TIMEOUT_S'"
    # The commands are rebuilt by word splitting: no blanks in the path.
    [[ "$PAGE_FAULT_DIR" != *[[:space:]]* ]] || die 2 "PAGE_FAULT_DIR must have no blanks, got '$PAGE_FAULT_DIR'"
    if [[ -n "$PAGE_FAULT_DIR" && ! -d "$PAGE_FAULT_DIR" ]]; then
        die 2 "PAGE_FAULT_DIR=$PAGE_FAULT_DIR is not a directory"
    fi
    command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"
    command -v timeout >/dev/null || die 2 "timeout is needed (apt-get install coreutils)"
}

# An osprobe built from an older tree may lack the experiments compared here:
# refuse it (exit 2) rather than fail in the middle of measuring.
check_experiments() {
    local list exp
    list="$(timeout "$TIMEOUT_S" "$OSPROBE" list 2>&1)" || die 1 "'$OSPROBE list' failed: $list"
    for exp in pager.fault pager.policy mem.page_fault; do
        grep -qx "$exp" <<<"$list" || die 2 "this osprobe ($OSPROBE) has no experiment $exp"
    done
}

# userfaultfd must be usable before anything is measured. pager.fault
# reports a point it cannot run as skipped, with the cause and the fix in
# the reason; one smoke-profile zero-fill point (a fraction of a second)
# tells. Unavailable: exit 2 with osprobe's reason.
check_pager() {
    local out reason rc=0
    out="$(timeout "$TIMEOUT_S" "$OSPROBE" bench pager.fault --profile smoke --param fault=zero_fill \
        --json --no-store --quiet 2>"$WORK/tool.err")" || rc=$?
    if ((rc != 0)); then
        if grep -qi userfaultfd "$WORK/tool.err"; then
            die 2 "the pager cannot run here: $(cat "$WORK/tool.err")"
        fi
        die 1 "osprobe bench pager.fault (smoke check) failed (exit $rc): $(cat "$WORK/tool.err")"
    fi
    # The helper exits 3 when the point was skipped, printing the reason.
    rc=0
    reason="$(printf '%s' "$out" | "$PYTHON" "$HELPER" pager-check)" || rc=$?
    case "$rc" in
    0) ;;
    3) die 2 "the pager cannot run here (pager.fault skipped its point): $reason" ;;
    *) die 1 "cannot read osprobe's output (pager.fault smoke check)" ;;
    esac
}

# The commands of each invocation, as displayed and as run.
osprobe_common() { echo "--profile ${OSPROBE_PROFILE:-quick} --json --no-store --quiet"; }

# A comparison's pager.fault fault and serving mode (every command names
# the mode: the grid's faulting-thread zero-fill would add a point).
pager_fault_of() {
    case "$1" in
    zero_fill_faulting) echo zero_fill ;;
    *) echo "$1" ;;
    esac
}

serve_of() {
    case "$1" in
    zero_fill_faulting) echo faulting-thread ;;
    *) echo handler-thread ;;
    esac
}

pager_cmd() {
    local fixed
    fixed="--param fault=$(pager_fault_of "$1") --param serve=$(serve_of "$1")"
    case "$1" in
    swap_in_rfs) echo "$OSPROBE bench pager.fault $fixed --param path=loopback $(osprobe_common)" ;;
    *) echo "$OSPROBE bench pager.fault $fixed $(osprobe_common)" ;;
    esac
}

kernel_cmd() {
    local dir=""
    if [[ "$1" == major && -n "$PAGE_FAULT_DIR" ]]; then
        dir=" --param dir=$PAGE_FAULT_DIR"
    fi
    echo "$OSPROBE bench mem.page_fault --param fault=$1$dir $(osprobe_common)"
}

policy_cmd() { echo "$OSPROBE bench pager.policy --profile quick --json --no-store --quiet"; }

# The quick grid of pager.scan: read-around off (1) and 128 pages.
scan_cmd() { echo "$OSPROBE bench pager.scan --profile quick --param frames=${SCAN_FRAMES:-4096} --json --no-store --quiet"; }

# What each comparison sets against what: the pager's command and the other
# side's (for swap_in_rfs, the pager's own local swap-in).
peer_cmd() {
    case "$1" in
    zero_fill | zero_fill_faulting) kernel_cmd minor ;;
    swap_in_file) kernel_cmd major ;;
    swap_in_rfs) pager_cmd swap_in_file ;;
    esac
}

# One invocation: prints "COMPARISON TOOL VALUE" lines, VALUE in ns.
# TOOL is pager (p50), pager_mean, kernel_cached and kernel_same_way (the
# kernel's fault as pager.fault's notes give it), handler and handler_evict
# (time inside the pager's handler, information) for a pager.fault run;
# kernel (p50 of the sequential order), kernel_mean and kernel_random for a
# mem.page_fault run.
# The commands hold no quoted words, so word splitting rebuilds them.
run_pager() {
    local fault="$1" out parsed tool value
    # shellcheck disable=SC2046
    out="$(checked "osprobe (pager.fault $fault)" $(pager_cmd "$fault"))" || exit 1
    parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" pager-fault "$(pager_fault_of "$fault")" "$(serve_of "$fault")")" ||
        die 1 "cannot read osprobe's output (pager.fault $fault)"
    while read -r tool value; do
        echo "$fault $tool $value"
    done <<<"$parsed"
}

run_kernel() {
    local fault="$1" name out parsed tool value
    case "$fault" in
    minor) name=zero_fill ;;
    major) name=swap_in_file ;;
    esac
    # shellcheck disable=SC2046
    out="$(checked "osprobe (mem.page_fault $fault)" $(kernel_cmd "$fault"))" || exit 1
    parsed="$(printf '%s' "$out" | "$PYTHON" "$HELPER" kernel-fault "$fault")" ||
        die 1 "cannot read osprobe's output (mem.page_fault $fault)"
    while read -r tool value; do
        echo "$name $tool $value"
    done <<<"$parsed"
}

run_group() {
    local fault
    case "$1" in
    pager) for fault in "${PAGER_FAULTS[@]}"; do run_pager "$fault"; done ;;
    kernel) for fault in "${KERNEL_FAULTS[@]}"; do run_kernel "$fault"; done ;;
    esac
}

write_meta() {
    record meta runs "$RUNS"
    record meta target_zero_fill_us "$TARGET_ZERO_FILL_US"
    record meta target_swap_in_us "$TARGET_SWAP_IN_US"
    record meta target_zero_fill_ratio "$TARGET_ZERO_FILL_RATIO"
    record meta cpu "$("$PYTHON" "$HELPER" first-cpu)"
    record meta osprobe_binary "$OSPROBE"
    record meta osprobe_version "$("$OSPROBE" --version 2>/dev/null | head -n1)"
    record meta profile "${OSPROBE_PROFILE:-quick}"
    record meta kernel "$(uname -r)"
    record meta user "$(id -un)"
    record meta unprivileged_userfaultfd "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null || echo unknown)"
    record meta started "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    record meta policy_command "$(policy_cmd)"
    record meta scan_command "$(scan_cmd)"
    local pair
    for pair in "${PAIRS[@]}"; do
        record pair "$pair" "$(pager_cmd "$pair")" "$(peer_cmd "$pair")"
    done
}

# A value as the progress line shows it, in us.
pretty() { awk -v v="$1" 'BEGIN { printf "%.2f us", v / 1e3 }'; }

# R rounds; in each, the pager's three invocations and the kernel's two run
# back to back. The order flips every round so that neither side always runs
# on a machine just warmed (or disturbed) by the other.
measure() {
    local run group out name what value order
    for ((run = 1; run <= RUNS; run++)); do
        if ((run % 2)); then order="pager kernel"; else order="kernel pager"; fi
        for group in $order; do
            # Assigned first: set -e sees a failure of $(...) only there.
            out="$(run_group "$group")"
            while read -r name what value; do
                log "run $run/$RUNS  $name  $what  $(pretty "$value")"
                record sample "$name" "$what" "$run" "$value"
            done <<<"$out"
        done
    done
}

# The policy table: one pager.policy run (fault counts do not vary from run
# to run), its points as "policy" records.
measure_policy() {
    local out rows
    log "pager.policy (quick profile, once)"
    # shellcheck disable=SC2046
    out="$(checked "osprobe (pager.policy)" $(policy_cmd))" || exit 1
    rows="$(printf '%s' "$out" | "$PYTHON" "$HELPER" policy-rows)" ||
        die 1 "cannot read osprobe's output (pager.policy)"
    printf '%s\n' "$rows" >>"$RECORDS"
    log "pager.policy: $(wc -l <<<"$rows") points"
}

# The scan against rfs get: one pager.scan run per round (it alternates
# the two inside), its points as "scan" records.
measure_scan() {
    local run out rows
    for ((run = 1; run <= RUNS; run++)); do
        # shellcheck disable=SC2046
        out="$(checked "osprobe (pager.scan)" $(scan_cmd))" || exit 1
        rows="$(printf '%s' "$out" | "$PYTHON" "$HELPER" scan-rows "$run")" ||
            die 1 "cannot read osprobe's output (pager.scan)"
        printf '%s\n' "$rows" >>"$RECORDS"
        log "run $run/$RUNS  pager.scan: $(tr '\t' ' ' <<<"$rows" | tr '\n' ';')"
    done
}

cleanup() {
    rm -rf "${WORK:-}"
}

main() {
    parse_args "$@"
    check_settings
    WORK="$(mktemp -d)"
    trap cleanup EXIT
    # An interrupt or a kill still removes the scratch files (through EXIT).
    trap 'exit 130' INT
    trap 'exit 143' TERM
    RECORDS="$WORK/records.tsv"
    build_osprobe
    check_experiments
    check_pager
    write_meta
    measure
    measure_policy
    measure_scan
    record meta ended "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    report
}

main "$@"
