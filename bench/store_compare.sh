#!/usr/bin/env bash
# store_compare.sh: the two stores side by side (issue 17). COUNT runs (1,000
# by default), made from one real stored run by giving it new ids, are
# imported into a SQLite file and into PostgreSQL; then `history`, `compare`
# and `show` are timed on both. Prints the wall times.
#
# The PostgreSQL is a private server this script starts (initdb into its
# scratch directory, a Unix socket there, no TCP; run as the `postgres`
# user when root) and stops, unless --pg URL names a database to use (the
# runs are imported there and left behind: give a scratch database).
# See bench/README.md.
# Exit: 0 measured, 1 a command failed, 2 cannot start (usage, python3 or
# PostgreSQL missing).

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/store_compare.py"
BENCH_NAME=store_compare
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${RUNS:-5}"
COUNT="${COUNT:-1000}"
TIMEOUT_S="${TIMEOUT_S:-600}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"
PG_URL="${PG_URL:-}"
# The real run every stored copy is made from: the smoke cpu experiments
# (a few seconds, a few dozen measurements).
SEED_ONLY="${SEED_ONLY:-cpu.*}"

usage() {
    cat <<EOF
Usage: $(basename "$0") [--count N] [--pg URL] [--runs N] [--json] [--no-build] [--help]

Store COUNT copies of one real run (new ids) in SQLite and in PostgreSQL
with \`osprobe import\`, then time \`history\`, \`compare latest~1 latest\` and
\`show latest\` RUNS times on each.

  --count N    runs stored in each (default 1000; env COUNT)
  --pg URL     use this PostgreSQL database instead of a private server
               (COUNT runs are left in it); env PG_URL
  --runs N     repeats of each timed read (default 5; env RUNS)
  --json       print a JSON object instead of the table
  --no-build   do not run cargo build; use \$OSPROBE or target/release/osprobe

Environment: COUNT, PG_URL, RUNS, SEED_ONLY ($SEED_ONLY), TIMEOUT_S ($TIMEOUT_S,
per command), OSPROBE (osprobe binary), PYTHON (python3).
EOF
}

rest=()
while (($#)); do
    case "$1" in
    --count) COUNT="${2:-}"; shift 2 || die 2 "--count needs a value" ;;
    --count=*) COUNT="${1#--count=}"; shift ;;
    --pg) PG_URL="${2:-}"; shift 2 || die 2 "--pg needs a value" ;;
    --pg=*) PG_URL="${1#--pg=}"; shift ;;
    *) rest+=("$1"); shift ;;
    esac
done
parse_args "${rest[@]+"${rest[@]}"}"
[[ "$COUNT" =~ ^[1-9][0-9]*$ ]] && ((COUNT >= 2)) || die 2 "--count must be an integer of at least 2 (compare needs two runs), got '$COUNT'"
command -v "$PYTHON" >/dev/null || die 2 "$PYTHON is needed for the report (apt-get install python3)"

# The newest PostgreSQL server binaries (Debian's layout, else PATH).
find_pg_bin() {
    local dir
    dir="$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
    if [[ -n "$dir" && -x "$dir/initdb" ]]; then
        printf '%s\n' "$dir"
    elif command -v initdb >/dev/null; then
        dirname "$(command -v initdb)"
    else
        return 1
    fi
}

PG_STARTED=0
stop_private_pg() {
    if ((PG_STARTED)); then
        as_pg_user "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
}

# Run a command as the server's user: ourselves, or `postgres` (else
# `nobody`) when root, since PostgreSQL refuses to run as root.
as_pg_user() {
    if [[ -n "${PG_USER:-}" ]]; then
        runuser -u "$PG_USER" -- "$@"
    else
        "$@"
    fi
}

start_private_pg() {
    PG_BIN="$(find_pg_bin)" || die 2 "no PostgreSQL server binaries (apt-get install postgresql), or pass --pg URL"
    PG_USER=""
    if (($(id -u) == 0)); then
        if id postgres >/dev/null 2>&1; then PG_USER=postgres; else PG_USER=nobody; fi
    fi
    mkdir -p "$WORK/pg/socket"
    [[ -z "$PG_USER" ]] || chown -R "$PG_USER" "$WORK/pg"
    chmod 755 "$WORK"
    log "starting a private PostgreSQL ($PG_BIN) on a socket in $WORK/pg/socket"
    (cd "$WORK/pg" && as_pg_user "$PG_BIN/initdb" --auth=trust --no-sync --username=osprobe -D "$WORK/pg/data") \
        >"$WORK/pg/initdb.log" 2>&1 || die 1 "initdb failed: $(tail -n 5 "$WORK/pg/initdb.log")"
    PG_STARTED=1
    (cd "$WORK/pg" && as_pg_user "$PG_BIN/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/server.log" -w \
        -o "-k $WORK/pg/socket -c listen_addresses= -p 5432" start) >/dev/null 2>&1 ||
        die 1 "postgres did not start: $(tail -n 5 "$WORK/pg/server.log")"
    "$PG_BIN/psql" -X -q -h "$WORK/pg/socket" -p 5432 -U osprobe -d postgres \
        -c "CREATE DATABASE osprobe_bench" || die 1 "CREATE DATABASE failed"
    PG_URL="postgres://osprobe@/osprobe_bench?host=$WORK/pg/socket&port=5432"
}

build_osprobe
WORK="$(mktemp -d)"
trap 'stop_private_pg; rm -rf "$WORK"' EXIT
RECORDS="$WORK/records.tsv"
: >"$RECORDS"
[[ -n "$PG_URL" ]] || start_private_pg
SQLITE="$WORK/bench.db"
export XDG_DATA_HOME="$WORK/data"

log "measuring one real run to copy (smoke profile, $SEED_ONLY)"
checked "osprobe run" "$OSPROBE" --db "$WORK/seed.db" --quiet run --profile smoke --only "$SEED_ONLY" >/dev/null
checked "osprobe export" "$OSPROBE" --db "$WORK/seed.db" --quiet export latest >"$WORK/seed.jsonl"
checked "generating runs" "$PYTHON" "$HELPER" generate "$WORK/seed.jsonl" "$COUNT" "$WORK/runs.jsonl"
measurements="$("$PYTHON" -c 'import json,sys; print(len(json.loads(open(sys.argv[1]).readline())["measurements"]))' "$WORK/seed.jsonl")"
record meta runs_stored "$COUNT"
record meta measurements "$measurements"
record meta repeats "$RUNS"
record meta sqlite "$SQLITE"
record meta postgres "${PG_URL%%\?*}"

timed() {
    local op="$1" backend="$2" i="$3"
    shift 3
    local seconds
    seconds="$(checked "osprobe $op ($backend)" "$PYTHON" "$HELPER" time -- "$OSPROBE" --quiet "$@")"
    record sample "$op" "$backend" "$i" "$seconds"
}

for backend in sqlite postgres; do
    if [[ $backend == sqlite ]]; then db="$SQLITE"; else db="$PG_URL"; fi
    log "$backend: importing $COUNT runs"
    timed import "$backend" 1 --db "$db" import "$WORK/runs.jsonl"
    timed reimport "$backend" 1 --db "$db" import "$WORK/runs.jsonl"
    log "$backend: history, compare and show, $RUNS times each"
    for ((i = 1; i <= RUNS; i++)); do
        timed history "$backend" "$i" --db "$db" history
        timed history_json "$backend" "$i" --db "$db" history --json
        timed compare "$backend" "$i" --db "$db" compare latest~1 latest
        timed show "$backend" "$i" --db "$db" show latest --json
    done
done
report
