#!/usr/bin/env bash
# soak.sh: `osprobe serve` and `osprobe rfs serve` under load and attack, on
# loopback (bench/soak.py does the work and the report):
#
#   quiet    CLIENTS legitimate clients per server for --seconds: `osprobe
#            send` of a 2 MiB file into serve's --dir, `osprobe rfs get` of a
#            2 MiB file (UDP and TCP alternating); every transfer verified
#   attack   the same load beside hostile traffic for at most 60 s: trickling
#            and silent connections, TCP garbage, connect floods, UDP garbage,
#            wrong tokens
#   then, against the file service alone, one attack each beside the rfs
#   clients: hello-flood (hellos that never prove the token, from the
#   clients' own address), hash-flood (6 TCP connections with the token
#   hashing an 8 GiB sparse file), other-user (`nobody` trying get and put
#   on a tokenless `rfs serve --writable` of root's)
#
# Prints transfers done and failed, p50 and p99 of a transfer's wall time
# and each server's largest RSS, per phase; how many bytes UDP garbage drew
# back; each rfs attack's p99 against quiet and what its attacker achieved.
# Target: zero failed transfers, no UDP amplification, no other-user try
# let in, p99 under attack within 2x of quiet.
#
# Usage: bench/soak.sh [--clients N] [--seconds S] [--attack-seconds S]
#                      [--rfs-attack-seconds S] [--json] [--no-build]
# Exit: 0 target met, 1 a transfer failed, UDP amplified or another user
# got in, 2 cannot start.

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/soak.py"
BENCH_NAME=soak
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS=1
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"

usage() {
    sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# Flags of this script's own go to the helper; the shared ones to parse_args.
extra=()
rest=()
while (($#)); do
    case "$1" in
    --clients | --seconds | --attack-seconds | --rfs-attack-seconds)
        [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || die 2 "$1 needs a positive integer"
        extra+=("$1" "$2"); shift 2 ;;
    *) rest+=("$1"); shift ;;
    esac
done
parse_args ${rest[@]+"${rest[@]}"}
command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed (apt-get install python3)"
build_osprobe

args=(--osprobe "$OSPROBE" ${extra[@]+"${extra[@]}"})
((JSON)) && args+=(--json)
exec "$PYTHON" "$HELPER" "${args[@]}"
