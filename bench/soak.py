"""soak.py: the Python half of bench/soak.sh.

Starts `osprobe serve --dir` and `osprobe rfs serve` on 127.0.0.1 with a
token file, keeps CLIENTS legitimate clients busy against each (`osprobe
send` of a file into serve's directory; `osprobe rfs get` of a file from
the export, alternating UDP and TCP), first alone ("quiet") and then beside
hostile traffic ("attack"): trickling connections (one byte a second),
silent ones, garbage over TCP and UDP, connect-and-close floods and wrong
tokens. Every transfer is verified by the tool itself (xxh3-128 end to end)
and again here (SHA-256 of what arrived against the source). Prints, per
server and phase: transfers done and failed, p50 and p99 of a transfer's
wall time, and the server's largest RSS.

Then three attacks on the file service alone, each beside the same rfs
clients and compared with the quiet phase (target: every transfer
succeeds, p99 within 2x of quiet): "hello-flood", hellos that never prove
the token, re-sent from the clients' own address 127.0.0.1 (the session
pool of the server must not lock clients out); "other-user", `nobody`
(through setpriv) trying `rfs get` of a 0600 file and `rfs put` against a
second, tokenless `rfs serve --writable` of root's while root's clients use
it (every try must be refused); "hash-flood", six TCP connections that
hold the token and ask for Hashes of an 8 GiB sparse file over and over
(the server runs at most two at once, BUSY beyond).

Standard library only. Every loop is bounded in time (the phases) and in
rate (sleeps between hostile actions); every connection goes to 127.0.0.1, the hostile ones from 127.0.0.2-9.
"""

import argparse
import hashlib
import hmac
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchlib import fail, table_lines

LOOPBACK = "127.0.0.1"
# Hostile sockets come from other loopback addresses, as another host's
# would: the servers' per-source limits and back-off then apply to them and
# not to the legitimate clients on 127.0.0.1. (Wrong tokens, sent through
# osprobe's own clients, still come from 127.0.0.1.)
HOSTILE_SOURCES = [f"127.0.0.{i}" for i in range(2, 10)]
_next_source = 0


def hostile_connection(addr, timeout):
    """A TCP connection to addr from the next hostile source address."""
    global _next_source
    _next_source = (_next_source + 1) % len(HOSTILE_SOURCES)
    return socket.create_connection(addr, timeout=timeout,
                                    source_address=(HOSTILE_SOURCES[_next_source], 0))
FILE_BYTES = 2 << 20


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def start_server(args, what):
    """A server child and the address it printed on its first line."""
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = child.stdout.readline()
    addr = next((w.rstrip(";,)") for w in first.split() if w.startswith(LOOPBACK + ":")), None)
    if addr is None:
        child.kill()
        fail(f"{what} did not say where it listens: {first!r} {child.stderr.read()!r}")
    # Drain its output so a chatty log never blocks it.
    for stream in (child.stdout, child.stderr):
        threading.Thread(target=lambda s=stream: [None for _ in s], daemon=True).start()
    host, port = addr.rsplit(":", 1)
    return child, (host, int(port))


def stop_server(child):
    """SIGINT, and SIGKILL if it has not stopped within 20 s."""
    child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=20)
    except subprocess.TimeoutExpired:
        child.kill()


class Tally:
    """Transfers of one server in one phase."""

    def __init__(self):
        self.lock = threading.Lock()
        self.times = []
        self.failures = []

    def add(self, seconds, error):
        with self.lock:
            if error is None:
                self.times.append(seconds)
            else:
                self.failures.append(error)


def legit_send(osprobe, addr, token, source, source_hash, recv_dir, worker, phase, stop, tally):
    n = 0
    while not stop.is_set():
        name = f"{phase}-w{worker}-{n}.bin"
        n += 1
        started = time.monotonic()
        out = subprocess.run(
            [osprobe, "send", source, "--to", f"{addr[0]}:{addr[1]}", "--token-file", token,
             "--name", name, "--json", "--quiet"],
            capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
        path = os.path.join(recv_dir, name)
        if out.returncode != 0:
            tally.add(took, f"send exit {out.returncode}: {out.stderr.strip()[:200]}")
        elif not os.path.exists(path) or sha256(path) != source_hash:
            tally.add(took, f"{name}: received bytes differ from the source")
        else:
            tally.add(took, None)
        try:
            os.unlink(path)
        except OSError:
            pass


def legit_get(osprobe, addr, token, source_hash, out_dir, worker, phase, stop, tally):
    n = 0
    while not stop.is_set():
        local = os.path.join(out_dir, f"{phase}-w{worker}-{n}.bin")
        transport = "--tcp" if (worker + n) % 2 else "--udp"
        n += 1
        started = time.monotonic()
        auth = ["--token-file", token] if token else []
        out = subprocess.run(
            [osprobe, "rfs", "get", "data.bin", local, "--server", f"{addr[0]}:{addr[1]}",
             *auth, transport, "--json", "--quiet"],
            capture_output=True, text=True, timeout=120)
        took = time.monotonic() - started
        if out.returncode != 0:
            tally.add(took, f"rfs get {transport} exit {out.returncode}: {out.stderr.strip()[:200]}")
        elif sha256(local) != source_hash:
            tally.add(took, f"{local}: bytes differ from the export's")
        else:
            tally.add(took, None)
        try:
            os.unlink(local)
        except OSError:
            pass


def hostile_trickle(addr, count, stop):
    """count connections that send one byte a second and never finish."""
    conns = []
    for _ in range(count):
        if stop.is_set():
            break
        try:
            conns.append(hostile_connection(addr, 2))
        except OSError:
            time.sleep(0.05)
    while not stop.wait(1.0):
        alive = []
        for c in conns:
            try:
                c.send(b"\x00")
                alive.append(c)
            except OSError:
                c.close()
        # Reconnect what the server cut, so the pressure stays.
        while len(alive) < count and not stop.is_set():
            try:
                alive.append(hostile_connection(addr, 2))
            except OSError:
                break
        conns = alive
    for c in conns:
        c.close()


def hostile_idle(addr, count, stop):
    """count connections that say nothing at all."""
    conns = []
    while not stop.is_set():
        conns = [c for c in conns if c.fileno() != -1]
        while len(conns) < count and not stop.is_set():
            try:
                conns.append(hostile_connection(addr, 2))
            except OSError:
                break
        if stop.wait(2.0):
            break
        # Drop those the server closed (a read of 0 bytes), reopen later.
        for c in conns:
            c.setblocking(False)
            try:
                if c.recv(4096) == b"":
                    c.close()
            except BlockingIOError:
                pass
            except OSError:
                c.close()
    for c in conns:
        c.close()


def hostile_garbage_tcp(addr, rng, stop):
    """Connections that send random bytes (a huge claimed length first, then
    noise) and close, at most 200 a second."""
    while not stop.is_set():
        try:
            with hostile_connection(addr, 2) as c:
                c.sendall(b"\x7f\xff\xff\xff" + rng.randbytes(rng.randrange(1, 4096)))
        except OSError:
            pass
        stop.wait(0.005)


def hostile_udp(addr, rng, stop, rate):
    """Random datagrams at about `rate` a second, and count how many bytes
    come back: a server must not answer an unvalidated source with more
    than it sent."""
    sent = received = 0
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((HOSTILE_SOURCES[0], 0))
    s.setblocking(False)
    while not stop.is_set():
        for _ in range(max(1, rate // 100)):
            payload = rng.randbytes(rng.randrange(1, 1200))
            try:
                s.sendto(payload, addr)
                sent += len(payload)
            except OSError:
                pass
        while True:
            try:
                received += len(s.recv(65536))
            except (BlockingIOError, OSError):
                break
        stop.wait(0.01)
    s.close()
    return sent, received


def hostile_connect_flood(addr, stop):
    """Connect and close at once, at most 500 a second."""
    while not stop.is_set():
        try:
            hostile_connection(addr, 1).close()
        except OSError:
            pass
        stop.wait(0.002)


def hostile_wrong_token(osprobe, rfs_addr, serve_addr, bad_token, stop):
    """Wrong tokens over and over, through osprobe's own clients."""
    while not stop.is_set():
        subprocess.run([osprobe, "rfs", "ls", "--server", f"{rfs_addr[0]}:{rfs_addr[1]}", "--tcp",
                        "--token-file", bad_token, "--quiet"], capture_output=True, timeout=60)
        subprocess.run([osprobe, "net", "rtt", "--to", f"{serve_addr[0]}:{serve_addr[1]}",
                        "--token-file", bad_token, "--profile", "smoke", "--no-store", "--quiet",
                        "--json"], capture_output=True, timeout=60)
        stop.wait(0.1)


# -- the file service's wire, as much as the attackers need --------------
# (crates/rfs/src/protocol.rs: a 24-byte header, then the body; over TCP
# each message follows a 4-byte big-endian length.)
RFS_VERSION = 2
OP_HELLO, OP_AUTH, OP_LOOKUP, OP_HASH = 1, 2, 4, 11
HELLO_LEN = 256
# Connections of the hash flood.
HASH_FLOODERS = 6
AUTH_LABEL = b"osprobe-rfs-auth-v2"


def rfs_message(op, session, xid, body):
    return (b"RF" + bytes([RFS_VERSION, op]) + bytes(4) + session.to_bytes(8, "big")
            + xid.to_bytes(8, "big") + body)


def rfs_hello(nonce, cookie=bytes(32)):
    return rfs_message(OP_HELLO, 0, 0, nonce + cookie).ljust(HELLO_LEN, b"\0")


def rfs_proof(token, server_nonce, client_nonce, session):
    """osprobe_core::proof::sign: HMAC-SHA256 over length-prefixed parts."""
    mac = hmac.new(token.encode(), digestmod="sha256")
    for part in (AUTH_LABEL, server_nonce, client_nonce, session.to_bytes(8, "big")):
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.digest()


def tcp_call(sock, msg):
    """One request over TCP and its reply (header and body), or None."""
    sock.sendall(len(msg).to_bytes(4, "big") + msg)
    head = b""
    while len(head) < 4:
        more = sock.recv(4 - len(head))
        if not more:
            return None
        head += more
    want = int.from_bytes(head, "big")
    body = b""
    while len(body) < want:
        more = sock.recv(min(65536, want - len(body)))
        if not more:
            return None
        body += more
    return body


def hostile_hello_flood(addr, stop, rate, counts):
    """UDP hellos at about `rate` a second that never prove the token, from
    127.0.0.1 (the clients' own address): fetch a cookie, then a fresh
    nonce per hello, each of which the server answers with a session."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((LOOPBACK, 0))
    s.settimeout(1.0)
    while not stop.is_set():
        try:
            s.sendto(rfs_hello(os.urandom(16)), addr)
            reply = s.recv(4096)
        except OSError:
            continue
        if len(reply) < 58 or reply[24] != 0 or reply[25] != 1:
            stop.wait(0.1)
            continue
        cookie = reply[26:58]
        s.setblocking(False)
        renew = time.monotonic() + 10  # cookies last a 30 s bucket
        while time.monotonic() < renew and not stop.is_set():
            for _ in range(max(1, rate // 100)):
                try:
                    s.sendto(rfs_hello(os.urandom(16), cookie), addr)
                    counts["sent"] += 1
                except OSError:
                    pass
            while True:
                try:
                    s.recv(4096)
                    counts["answered"] += 1
                except (BlockingIOError, OSError):
                    break
            stop.wait(0.01)
        s.settimeout(1.0)
    s.close()


def hostile_hash_flood(addr, token, name, stop, counts):
    """A TCP connection with the token asking for Hashes of `name` over and
    over (the next as soon as one is answered)."""
    while not stop.is_set():
        try:
            with socket.create_connection(addr, timeout=130) as c:
                nonce = os.urandom(16)
                welcome = tcp_call(c, rfs_hello(nonce))
                if welcome is None or welcome[24] != 0:
                    stop.wait(0.5)
                    continue
                session = int.from_bytes(welcome[8:16], "big")
                server_nonce, root = welcome[26:58], welcome[59:75]
                proof = rfs_proof(token, server_nonce, nonce, session)
                tcp_call(c, rfs_message(OP_AUTH, session, 1, proof))
                found = tcp_call(c, rfs_message(OP_LOOKUP, session, 2,
                                                root + bytes([len(name)]) + name.encode()))
                if found is None or found[24] != 0:
                    stop.wait(0.5)
                    continue
                handle = found[25:41]
                xid = 3
                while not stop.is_set():
                    reply = tcp_call(c, rfs_message(OP_HASH, session, xid, handle))
                    xid += 1
                    if reply is None:
                        break
                    counts["busy" if reply[24] != 0 else "hashed"] += 1
                    if reply[24] != 0:
                        stop.wait(0.05)
        except OSError:
            stop.wait(0.5)


def hostile_other_user(osprobe, addr, stop, counts):
    """`nobody` tries to read root's 0600 file and to replace a file, over
    UDP and TCP; every try must be refused."""
    n = 0
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", osprobe]
    while not stop.is_set():
        transport = "--tcp" if n % 2 else "--udp"
        n += 1
        for args in (["rfs", "get", "secret.bin", "/dev/null"],
                     ["rfs", "put", "/etc/hostname", "data.bin"]):
            out = subprocess.run(nobody + args + ["--server", f"{addr[0]}:{addr[1]}", transport,
                                                  "--quiet"],
                                 capture_output=True, timeout=60, env={"HOME": "/nonexistent",
                                                                       "PATH": "/usr/bin:/bin"})
            counts["refused" if out.returncode != 0 else "succeeded"] += 1
        stop.wait(0.2)


def sample_rss(pids, stop, peaks):
    while not stop.is_set():
        for name, pid in pids.items():
            kib = rss_kib(pid)
            if kib is not None:
                peaks[name] = max(peaks.get(name, 0), kib)
        stop.wait(0.2)


def run_phase(phase, seconds, opts, servers, hostile):
    stop = threading.Event()
    tallies = {"serve": Tally(), "rfs": Tally()}
    peaks = {}
    threads = [threading.Thread(target=sample_rss, args=(
        {n: s["child"].pid for n, s in servers.items()}, stop, peaks))]
    for w in range(opts.clients):
        threads.append(threading.Thread(target=legit_send, args=(
            opts.osprobe, servers["serve"]["addr"], opts.token, opts.source, opts.source_hash,
            opts.recv_dir, w, phase, stop, tallies["serve"])))
        threads.append(threading.Thread(target=legit_get, args=(
            opts.osprobe, servers["rfs"]["addr"], opts.token, opts.source_hash, opts.out_dir, w,
            phase, stop, tallies["rfs"])))
    udp_results = []
    if hostile:
        rng = random.Random(20261124)
        for s in servers.values():
            addr = s["addr"]
            threads += [
                threading.Thread(target=hostile_trickle, args=(addr, opts.trickle, stop)),
                threading.Thread(target=hostile_idle, args=(addr, opts.trickle, stop)),
                threading.Thread(target=hostile_garbage_tcp,
                                 args=(addr, random.Random(rng.random()), stop)),
                threading.Thread(target=hostile_connect_flood, args=(addr, stop)),
                threading.Thread(target=lambda a=addr, r=random.Random(rng.random()):
                                 udp_results.append((a, hostile_udp(a, r, stop, 2000)))),
            ]
        threads.append(threading.Thread(target=hostile_wrong_token, args=(
            opts.osprobe, servers["rfs"]["addr"], servers["serve"]["addr"], opts.bad_token, stop)))
    for t in threads:
        t.daemon = True
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=130)
    rows = [summarize(name, phase, tally, peaks) for name, tally in tallies.items()]
    amplification = [{"addr": f"{a[0]}:{a[1]}", "sent": s, "received": r}
                      for a, (s, r) in udp_results]
    return rows, amplification


def summarize(name, phase, tally, peaks):
    times = sorted(tally.times)
    p99 = times[min(len(times) - 1, int(0.99 * len(times)))] if times else float("nan")
    return {
        "server": name, "phase": phase, "ok": len(times), "failed": len(tally.failures),
        "p50_s": statistics.median(times) if times else float("nan"), "p99_s": p99,
        "rss_max_kib": peaks.get(name), "first_failures": tally.failures[:3],
    }


def run_rfs_attack(phase, seconds, opts, server, token, attackers):
    """opts.clients `rfs get` clients against one rfs server beside the
    `attackers` (functions of the stop event), for `seconds`."""
    stop = threading.Event()
    tally, peaks = Tally(), {}
    threads = [threading.Thread(target=sample_rss, args=({"rfs": server["child"].pid}, stop,
                                                         peaks))]
    for w in range(opts.clients):
        threads.append(threading.Thread(target=legit_get, args=(
            opts.osprobe, server["addr"], token, opts.source_hash, opts.out_dir, w, phase, stop,
            tally)))
    threads += [threading.Thread(target=a, args=(stop,)) for a in attackers]
    for t in threads:
        t.daemon = True
        t.start()
    stop.wait(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=130)
    return summarize("rfs", phase, tally, peaks)


def rfs_attacks(opts, rfs, export, work):
    """The three attacks on the file service; rows and what each attacker
    achieved."""
    seconds = opts.rfs_attack_seconds
    token_text = open(opts.token, encoding="ascii").read().strip()
    rows, attackers = [], {}
    print(f"soak: rfs hello flood for {seconds} s", file=sys.stderr)
    hellos = {"sent": 0, "answered": 0}
    rows.append(run_rfs_attack("hello-flood", seconds, opts, rfs, opts.token, [
        lambda stop: hostile_hello_flood(rfs["addr"], stop, opts.hello_rate, hellos)]))
    attackers["hello-flood"] = hellos

    print(f"soak: rfs hash flood for {seconds} s", file=sys.stderr)
    sparse = os.path.join(export, "sparse.bin")
    with open(sparse, "wb") as f:
        f.truncate(8 << 30)
    hashes = {"hashed": 0, "busy": 0}
    rows.append(run_rfs_attack("hash-flood", seconds, opts, rfs, opts.token, [
        (lambda stop: hostile_hash_flood(rfs["addr"], token_text, "sparse.bin", stop, hashes))
        for _ in range(HASH_FLOODERS)]))
    attackers["hash-flood"] = hashes
    os.unlink(sparse)

    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("soak: other-user skipped (needs root and setpriv to act as nobody)",
              file=sys.stderr)
        return rows, attackers
    print(f"soak: another local user for {seconds} s", file=sys.stderr)
    secret = os.path.join(export, "secret.bin")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(b"root's alone\n")
    # The other user needs to reach the binary: a copy where nobody may run it.
    osprobe_copy = os.path.join(work, "osprobe-bin")
    subprocess.run(["cp", opts.osprobe, osprobe_copy], check=True)
    os.chmod(work, 0o755)
    os.chmod(osprobe_copy, 0o755)
    open_rfs, open_addr = start_server(
        [opts.osprobe, "rfs", "serve", export, "--bind", f"{LOOPBACK}:0", "--writable",
         "--max-clients", str(opts.clients * 2)], "osprobe rfs serve (no token)")
    tries = {"refused": 0, "succeeded": 0}
    try:
        rows.append(run_rfs_attack("other-user", seconds, opts,
                                   {"child": open_rfs, "addr": open_addr}, None, [
            lambda stop: hostile_other_user(osprobe_copy, open_addr, stop, tries)]))
    finally:
        stop_server(open_rfs)
    attackers["other-user"] = tries
    return rows, attackers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--osprobe", required=True)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--attack-seconds", type=int, default=60)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--trickle", type=int, default=300)
    ap.add_argument("--rfs-attack-seconds", type=int, default=20)
    ap.add_argument("--hello-rate", type=int, default=2000)
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    if not 1 <= opts.rfs_attack_seconds <= 60:
        fail("--rfs-attack-seconds must be 1..60 (each attack is bounded to a minute)")
    if not 1 <= opts.attack_seconds <= 60:
        fail("--attack-seconds must be 1..60 (the hostile traffic is bounded to a minute)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    with tempfile.TemporaryDirectory(prefix="osprobe-soak-") as work:
        opts.token = os.path.join(work, "token")
        opts.bad_token = os.path.join(work, "bad-token")
        with open(os.open(opts.token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(16).hex() + "\n")
        with open(opts.bad_token, "w") as f:
            f.write("not-the-token\n")
        export = os.path.join(work, "export")
        opts.recv_dir = os.path.join(work, "received")
        opts.out_dir = os.path.join(work, "fetched")
        for d in (export, opts.recv_dir, opts.out_dir):
            os.mkdir(d)
        opts.source = os.path.join(export, "data.bin")
        with open(opts.source, "wb") as f:
            f.write(random.Random(1).randbytes(FILE_BYTES))
        opts.source_hash = sha256(opts.source)

        limit = str(opts.clients * 2)
        serve, serve_addr = start_server(
            [opts.osprobe, "serve", "--bind", f"{LOOPBACK}:0", "--token-file", opts.token,
             "--dir", opts.recv_dir, "--max-clients", limit], "osprobe serve")
        # Room beside the clients for the hash flood's connections: they
        # hold the token, and the attack is on the hashers, not the slots.
        rfs, rfs_addr = start_server(
            [opts.osprobe, "rfs", "serve", export, "--bind", f"{LOOPBACK}:0", "--token-file",
             opts.token, "--max-clients", str(opts.clients * 2 + HASH_FLOODERS)],
            "osprobe rfs serve")
        servers = {"serve": {"child": serve, "addr": serve_addr},
                   "rfs": {"child": rfs, "addr": rfs_addr}}
        try:
            print(f"soak: {opts.clients} clients per server, quiet for {opts.seconds} s",
                  file=sys.stderr)
            quiet, _ = run_phase("quiet", opts.seconds, opts, servers, hostile=False)
            print(f"soak: the same beside hostile traffic for {opts.attack_seconds} s",
                  file=sys.stderr)
            attack, udp = run_phase("attack", opts.attack_seconds, opts, servers, hostile=True)
            rfs_rows, attackers = rfs_attacks(opts, servers["rfs"], export, work)
        finally:
            for s in (serve, rfs):
                stop_server(s)
        rows = quiet + attack + rfs_rows
        quiet_rfs_p99 = next(r["p99_s"] for r in quiet if r["server"] == "rfs")
        for r in rfs_rows:
            r["p99_vs_quiet"] = r["p99_s"] / quiet_rfs_p99 if quiet_rfs_p99 else float("nan")
        if opts.json:
            json.dump({"clients": opts.clients, "rows": rows, "udp": udp,
                       "attackers": attackers}, sys.stdout, indent=2)
            print()
        else:
            body = [[r["server"], r["phase"], str(r["ok"]), str(r["failed"]),
                     f"{r['p50_s'] * 1000:.0f} ms", f"{r['p99_s'] * 1000:.0f} ms",
                     f"{(r['rss_max_kib'] or 0) / 1024:.1f} MiB"] for r in rows]
            for line in table_lines(["server", "phase", "transfers ok", "failed", "p50",
                                     "p99", "max RSS"], body):
                print(line)
            for u in udp:
                print(f"UDP garbage to {u['addr']}: sent {u['sent']} B, answered {u['received']} B")
            for r in rfs_rows:
                print(f"rfs {r['phase']}: p99 {r['p99_vs_quiet']:.2f}x quiet; attacker: "
                      f"{attackers[r['phase']]}")
            for r in rows:
                for f in r["first_failures"]:
                    print(f"failure ({r['server']}, {r['phase']}): {f}")
        failed = sum(r["failed"] for r in rows)
        amplified = any(u["received"] > u["sent"] for u in udp)
        let_in = attackers.get("other-user", {}).get("succeeded", 0) > 0
        sys.exit(1 if failed or amplified or let_in else 0)


if __name__ == "__main__":
    main()
