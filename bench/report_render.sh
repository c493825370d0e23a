#!/usr/bin/env bash
# report_render.sh: time `osprobe report` on a large stored run and check
# the targets of issue 8: rendering a full run's report takes under one
# second and the HTML file stays under 2 MB.
#
# With --run ID (and --db PATH, else osprobe's default store) it renders
# that stored run. Without, it first measures a full-profile run of the
# experiments with the most grid points and plots (EXPERIMENTS, below) into
# a scratch store, then renders it. Each of RUNS renders is timed as the
# wall time of the whole `osprobe report` process (store read included).
# See bench/README.md.
# Exit: 0 measured (whatever the verdicts), 1 a command failed, 2 cannot
# start (usage, python3 missing).

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/report_render.py"
BENCH_NAME=report_render
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${RUNS:-5}"
TIMEOUT_S="${TIMEOUT_S:-900}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
RUN_ID="${RUN_ID:-}"
DB="${DB:-}"
# Many points and many plots: latency curves, sleep histograms, policy
# sweeps, congestion control bars.
EXPERIMENTS="${EXPERIMENTS:-mem.latency,mem.bandwidth,time.sleep,time.timers,pager.policy,net.rtt,net.cc,proc.ctx_switch,cpu.call_overhead}"
TARGET_S=1
TARGET_MB=2

usage() {
    cat <<EOF
Usage: $(basename "$0") [--run ID] [--db PATH] [--runs N] [--json] [--no-build] [--help]

Render the HTML report of a stored run RUNS times with \`osprobe report\`;
print the render time and the file size against the targets (< ${TARGET_S} s,
< ${TARGET_MB} MB). Without --run, measure a full-profile run of
\$EXPERIMENTS into a scratch store first (several minutes).

  --run ID     a stored run (an id, a prefix, latest); env RUN_ID
  --db PATH    the store holding it (default: osprobe's); env DB
  --runs N     renders (default 5; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: RUNS, RUN_ID, DB, EXPERIMENTS ($EXPERIMENTS),
TIMEOUT_S ($TIMEOUT_S, per command), OSPROBE (osprobe binary), PYTHON (python3).
EOF
}

rest=()
while (($#)); do
    case "$1" in
    --run) RUN_ID="${2:-}"; shift 2 || die 2 "--run needs a value" ;;
    --run=*) RUN_ID="${1#--run=}"; shift ;;
    --db) DB="${2:-}"; shift 2 || die 2 "--db needs a value" ;;
    --db=*) DB="${1#--db=}"; shift ;;
    *) rest+=("$1"); shift ;;
    esac
done
parse_args "${rest[@]+"${rest[@]}"}"
command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"

build_osprobe
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
RECORDS="$WORK/records.tsv"
: >"$RECORDS"

if [[ -z "$RUN_ID" ]]; then
    DB="$WORK/results.db"
    log "measuring a full-profile run of $EXPERIMENTS (several minutes)"
    checked "osprobe run" "$OSPROBE" --db "$DB" --quiet run --profile full --only "$EXPERIMENTS" >/dev/null
    RUN_ID=latest
fi
db_args=()
if [[ -n "$DB" ]]; then
    db_args=(--db "$DB")
fi

checked "osprobe show" "$OSPROBE" "${db_args[@]+"${db_args[@]}"}" show "$RUN_ID" --json >"$WORK/run.json"
read -r id measurements < <("$PYTHON" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["id"], len(r["measurements"]))' "$WORK/run.json")
record meta run "$id"
record meta measurements "$measurements"
record meta target_s "$TARGET_S"
record meta target_mb "$TARGET_MB"

log "rendering run $id ($measurements measurements) $RUNS times"
for ((i = 1; i <= RUNS; i++)); do
    timing="$(checked "osprobe report" "$PYTHON" "$HELPER" time "$WORK/report.html" -- \
        "$OSPROBE" "${db_args[@]+"${db_args[@]}"}" report "$id" --out "$WORK/report.html")"
    read -r seconds bytes plots <<<"$timing"
    record sample render seconds "$i" "$seconds"
    record sample render bytes "$i" "$bytes"
    record sample render plots "$i" "$plots"
done
report
