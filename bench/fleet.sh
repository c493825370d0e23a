#!/usr/bin/env bash
# fleet.sh: `osprobe fleet run` over three hosts against running the same
# profile on the three one after another by hand over ssh.
#
# The hosts are network namespaces osprobe-fleet-bench-N on a bridge in
# 198.18.40.240/28, each with its own OpenSSH server (sshd -D, host key and
# authorized key made in a scratch directory), reached from this namespace.
# Per round:
#   cold      fleet run --parallel 3 with empty caches (osprobe copied to each)
#   warm      fleet run --parallel 3 again (osprobe already there)
#   by hand   for each host in turn: ssh HOST osprobe run --json --no-store
# and the report gives the medians over the rounds: the fleet's wall time
# beside the slowest host by hand and the sum by hand, and per host the
# overhead of the ssh transport (connect + probe + version check) and of the
# binary copy, from the fleet's own per-stage timings (--json).
# Target: warm fleet <= slowest host by hand + OVERHEAD_S seconds.
# At the end bench/store_compare.sh runs when it exists (the store half).
# Exit: 0 measured (whatever the verdict), 1 a run failed, 2 cannot start.

set -euo pipefail
shopt -s inherit_errexit

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
HELPER="$HERE/fleet.py"
BENCH_NAME=fleet
readonly HERE ROOT HELPER BENCH_NAME
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"

RUNS="${RUNS:-3}"
PROFILE="${PROFILE:-smoke}"
# Empty: every experiment of the profile; e.g. ONLY=cpu.*,proc.* for less.
ONLY="${ONLY:-}"
OVERHEAD_S="${OVERHEAD_S:-5}"
TIMEOUT_S="${TIMEOUT_S:-900}"
PYTHON="${PYTHON:-python3}"
OSPROBE="${OSPROBE:-}"

usage() {
    cat <<EOF
usage: bench/fleet.sh [--runs N] [--json] [--no-build]
  The $PROFILE profile on 3 namespace hosts over ssh: fleet run --parallel 3
  vs the three by hand, one after another. Needs root, sshd, ssh, ip.
  Environment: RUNS=$RUNS PROFILE=$PROFILE ONLY=$ONLY OVERHEAD_S=$OVERHEAD_S
  OSPROBE=path (default: target/release/osprobe, built unless --no-build)
EOF
}

parse_args "$@"
[[ "$(id -u)" -eq 0 ]] || die 2 "needs root (network namespaces, sshd)"
SSHD="$(command -v sshd || echo /usr/sbin/sshd)"
[[ -x "$SSHD" ]] || die 2 "needs sshd: apt-get install openssh-server"
for tool in ssh ssh-keygen ip "$PYTHON" timeout flock; do
    command -v "$tool" >/dev/null || die 2 "needs $tool"
done
build_osprobe

# 198.18.40.240/28 is slot 15 of the fleet tests' subnet; their lock
# keeps a test run and this script from using it at once.
lock_dir=/run/lock
[[ -d "$lock_dir" ]] || lock_dir="${TMPDIR:-/tmp}"
exec 9>"$lock_dir/osprobe-fleet-slot-15.lock"
flock -n 9 || die 2 "198.18.40.240/28 is in use (another bench/fleet.sh?)"

WORK="$(mktemp -d /tmp/osprobe-fleet-bench.XXXXXX)"
RECORDS="$WORK/records.tsv"
BRIDGE=oflbenchbr
HOSTS=(h1 h2 h3)
SSHD_PIDS=()

# The hosts, also those a killed earlier run left: processes in the
# namespaces (sshd and its sessions), the namespaces, veths and the bridge.
remove_hosts() {
    local pid ns i
    for pid in "${SSHD_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for i in 0 1 2; do
        ns="osprobe-fleet-bench-$i"
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill -9 "$pid" 2>/dev/null || true
        done
        ip netns del "$ns" 2>/dev/null || true
        ip link del "oflbenchv$i" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
}
cleanup() {
    remove_hosts
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "hosts: 3 namespaces with sshd in 198.18.40.240/28"
remove_hosts
mkdir -p /run/sshd
ip link add "$BRIDGE" type bridge
ip addr add 198.18.40.241/28 dev "$BRIDGE"
ip link set "$BRIDGE" up
ssh-keygen -q -t ed25519 -N '' -f "$WORK/id_ed25519"
cp "$WORK/id_ed25519.pub" "$WORK/authorized_keys"
: >"$WORK/known_hosts"
: >"$WORK/hosts.ini"
echo "[bench]" >>"$WORK/hosts.ini"
for i in 0 1 2; do
    ns="osprobe-fleet-bench-$i"
    addr="198.18.40.$((242 + i))"
    name="${HOSTS[$i]}"
    ip netns add "$ns"
    ip link add "oflbenchv$i" type veth peer name eth0 netns "$ns"
    ip link set "oflbenchv$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$addr/28" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ssh-keygen -q -t ed25519 -N '' -f "$WORK/${name}_host"
    echo "$addr $(cut -d' ' -f1,2 "$WORK/${name}_host.pub")" >>"$WORK/known_hosts"
    cat >"$WORK/${name}_sshd_config" <<EOF
ListenAddress $addr
HostKey $WORK/${name}_host
PidFile $WORK/${name}_sshd.pid
AuthorizedKeysFile $WORK/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
LogLevel ERROR
EOF
    ip netns exec "$ns" "$SSHD" -D -e -f "$WORK/${name}_sshd_config" 2>>"$WORK/sshd.log" &
    SSHD_PIDS+=("$!")
    echo "$name ansible_host=$addr ansible_user=root osprobe_cache_dir=$WORK/cache-$name" >>"$WORK/hosts.ini"
done
cat >"$WORK/ssh_config" <<EOF
Host *
  User root
  IdentityFile $WORK/id_ed25519
  IdentitiesOnly yes
  IdentityAgent none
  UserKnownHostsFile $WORK/known_hosts
  GlobalKnownHostsFile $WORK/known_hosts
  UpdateHostKeys no
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
EOF
for i in 0 1 2; do
    addr="198.18.40.$((242 + i))"
    for _ in $(seq 100); do
        ssh -F "$WORK/ssh_config" "$addr" true 2>/dev/null && break
        sleep 0.1
    done
    ssh -F "$WORK/ssh_config" "$addr" true || die 2 "sshd on $addr does not answer: $(cat "$WORK/sshd.log")"
done

only_args=()
[[ -n "$ONLY" ]] && only_args=(--only "$ONLY")
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

fleet_run() {
    local what="$1" round="$2" t0 t1
    t0="$(now)"
    timeout "$TIMEOUT_S" "$OSPROBE" --db "$WORK/results.db" fleet run --inventory "$WORK/hosts.ini" \
        -F "$WORK/ssh_config" --profile "$PROFILE" "${only_args[@]}" --parallel 3 --json -q \
        >"$WORK/$what.json" 2>"$WORK/$what.err" ||
        die 1 "fleet run ($what) failed: $(cat "$WORK/$what.err") $(cat "$WORK/$what.json")"
    t1="$(now)"
    record "$round" "$what" "wall" "$(elapsed "$t0" "$t1")"
    "$PYTHON" "$HELPER" stages "$WORK/$what.json" | while IFS=$'\t' read -r host stage seconds; do
        record "$round" "$what" "$host.$stage" "$seconds"
    done
}

for round in $(seq "$RUNS"); do
    log "round $round of $RUNS: fleet run, cold (caches emptied: osprobe copied)"
    rm -rf "$WORK"/cache-*
    fleet_run cold "$round"
    log "round $round of $RUNS: fleet run, warm (osprobe already on the hosts)"
    fleet_run warm "$round"
    log "round $round of $RUNS: the same profile on each host in turn, by hand over ssh"
    total0="$(now)"
    for i in 0 1 2; do
        name="${HOSTS[$i]}"
        addr="198.18.40.$((242 + i))"
        bin="$(ls "$WORK/cache-$name"/osprobe-* | head -n1)"
        t0="$(now)"
        # ssh joins its arguments into one shell line: quote them for it.
        remote="$(printf '%q ' "$bin" run --json --no-store --profile "$PROFILE" "${only_args[@]}" -q)"
        timeout "$TIMEOUT_S" ssh -F "$WORK/ssh_config" "$addr" "$remote" >"$WORK/hand.json" 2>"$WORK/hand.err" ||
            die 1 "by hand on $name failed: $(cat "$WORK/hand.err")"
        t1="$(now)"
        record "$round" "hand" "$name" "$(elapsed "$t0" "$t1")"
    done
    record "$round" "hand" "sum" "$(elapsed "$total0" "$(now)")"
done

report_args=(report "$RECORDS" --overhead "$OVERHEAD_S" --bytes "$(stat -c %s "$OSPROBE")")
((JSON)) && report_args+=(--json)
"$PYTHON" "$HELPER" "${report_args[@]}"

if [[ -x "$HERE/store_compare.sh" ]]; then
    log "the store half: bench/store_compare.sh"
    "$HERE/store_compare.sh" --no-build
fi
