#!/usr/bin/env python3
"""The MPC ring's latency across server rooms (make bench-netns, after its
storms): Debian's /usr/bin/kinit, one client, sequential logins of a user
whose key is an aes256-cts handle (ctsuser) and of a krbtgt-only user
(kdbuser: its aes256-cts key in the KDB, only the krbtgt's aes256-ctr-mpc
key in the cluster), with a one-way delay between the three MPC servers,
beside the prediction rounds x delay (ring_cost.py: the rounds are the ring
messages each server sent per login, read from its own counters around
each point's logins).

Where the kernel has sch_netem the delay is netem's on the servers' links:
everything a server sends waits, its few answers to the KDC per login too.
Where it has not, each server's ring link to its predecessor goes through
a relay in the server's namespace, under SCHED_FIFO where chrt runs (an
emulated wire does not queue behind the servers for a core): the server
dials 127.0.0.1:RELAY there (--ring_prev over its flag file), the relay
dials the predecessor's ring address and holds every chunk for the delay
both ways. The relay is kmpc-ring-relay (mpc-server/tools/ring_relay.cc)
where it is built (find_relay), else ring_relay.py, its reference: the
same command line and control protocol, ~6 us a message of its own on
loopback against the Python one's 13-28 (relay_ab.py); "relay_impl" in
the JSON says which ran. The relay's own cost is measured twice: the servers
dialling each other directly ("direct", before the relays) against the
relay at 0 ms (the control every delay is judged against), and each
relay's lateness per chunk (ring_relay.py's "stats").

Points, in this order, the servers restarted with --cts_masked_gates=false
(every Run on Rep3 ANDs): direct (relay only), 0 ms, each delay, 0 ms
again (drift); then the servers restarted with their default
--cts_masked_gates (the cts user's Runs over masked wires,
docs/design/masked-gates.md): 0 ms and each delay again ("masked_points", judged against their own 0 ms). Each: N logins of ctsuser, then N of kdbuser, counters read around
each block. kinit runs inside the client namespace from one Python driver
(this file's "kinit-loop"), timed as cts_bench.Stock times it: a process
per login. The KDC runs early_flush (a login's Run leaves at once) with
its deadline_ms raised (DEADLINE_MS) so that a multi-second login is not
cut; kinit's own UDP schedule gives up after ~17 s, which bounds the
delays this can measure (~3 ms one way).

Usage (inside a namespace, by sweep()):
  ring_delay.py kinit-loop USER N    (password on stdin; JSON on stdout)
"""

import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RELAY = os.path.join(HERE, "ring_relay.py")
RELAY_BIN = "kmpc-ring-relay"
STOCK_KINIT = "/usr/bin/kinit"
CTS256 = "aes256-cts-hmac-sha1-96"
USERS = ("ctsuser", "kdbuser")
DEADLINE_MS = 16000
KINIT_TIMEOUT_S = 40
# Party i's relay listens on 127.0.0.1:(ring base + RELAY_PORT_OFFSET + i)
# in party i's namespace (the ring listens on base + 10 + i).
RELAY_PORT_OFFSET = 30


def find_relay():
    """The C++ relay (kmpc-ring-relay), as the harness finds its binaries:
    $KMPC_RING_RELAY ("python" forces ring_relay.py), else
    $KMPC_MPC_BIN_DIR's, else cluster.find_built's ($KMPC_CMAKE_BUILD's,
    else the newest build tree's); None when it is not built."""
    from kmpc_harness import cluster as kmpc_cluster
    env = os.environ.get("KMPC_RING_RELAY")
    if env:
        return None if env == "python" else env
    own = os.path.join(os.environ.get("KMPC_MPC_BIN_DIR") or "", RELAY_BIN)
    if os.environ.get("KMPC_MPC_BIN_DIR") and os.access(own, os.X_OK):
        return own
    return kmpc_cluster.find_built(f"mpc-server/{RELAY_BIN}", required=False)


def relay_command():
    """(impl, argv): the C++ relay where it is built, else ring_relay.py
    under this Python; impl is "c++" or "python"."""
    binary = find_relay()
    if binary:
        return "c++", [binary]
    return "python", [sys.executable, RELAY]


def add_users(realm):
    """ctsuser (its aes256-cts key moved into the cluster) and kdbuser (its
    key left in the KDB) with random passwords; the realm's cluster must be
    up. Returns {name: password}."""
    import secrets
    pws = {u: f"{u}-" + secrets.token_hex(12) for u in USERS}
    for name, pw in pws.items():
        realm.addprinc(name, pw, enctypes=[CTS256])
    realm.admin("share", "--from-existing", f"--enctype={CTS256}", "ctsuser")
    return pws


def kinit_loop(user, n):
    """n runs of /usr/bin/kinit USER, the password from stdin: [[ms, rc,
    last line of output]] (the environment names the krb5.conf)."""
    pw = sys.stdin.readline().rstrip("\n")
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        try:
            p = subprocess.run([STOCK_KINIT, user], input=pw + "\n", capture_output=True,
                               text=True, timeout=KINIT_TIMEOUT_S)
            rc, text = p.returncode, (p.stdout + p.stderr).strip()
        except subprocess.TimeoutExpired:
            rc, text = -1, f"timed out after {KINIT_TIMEOUT_S} s"
        out.append([round((time.perf_counter() - t0) * 1e3, 3), rc,
                    text.splitlines()[-1] if rc and text else ""])
    return out


class Client:
    """Debian's kinit in the client namespace: a krb5.conf naming the KDC's
    namespace address and the standard AES enctypes only, the environment
    scrubbed as cts_bench.Stock's."""

    def __init__(self, target, passwords, work):
        from bench import cts_bench
        from kmpc_harness.netns import HOSTS
        r = target.realm
        stock = cts_bench.Stock(r, "ring-delay")
        with open(stock.conf) as f:
            conf = f.read().replace(f"127.0.0.1:{r.kdc_port}", f"{HOSTS['kdc']}:{r.kdc_port}")
        with open(stock.conf, "w") as f:
            f.write(conf)
        self.env = stock.env
        self.prefix = target.lan.exec_prefix("cl")
        self.passwords = passwords

    def logins(self, user, n):
        """[(ms, rc, error)] of n sequential logins of user."""
        p = subprocess.run([*self.prefix, sys.executable, os.path.abspath(__file__),
                            "kinit-loop", user, str(n)], input=self.passwords[user] + "\n",
                           capture_output=True, text=True, env=self.env,
                           timeout=n * KINIT_TIMEOUT_S + 60)
        if p.returncode != 0:
            raise RuntimeError(f"kinit-loop {user} failed ({p.returncode}): {p.stderr[-2000:]}")
        return [tuple(x) for x in json.loads(p.stdout)]


def summary(runs):
    """p50/p99/min/max (ms) of the runs that passed, the failures."""
    ok = sorted(ms for ms, rc, _ in runs if rc == 0)
    errs = sorted({e for _, rc, e in runs if rc != 0})
    at = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))]  # noqa: E731
    return {"n": len(ok), "failed": len(runs) - len(ok), "errors": errs[:3],
            "p50_ms": round(statistics.median(ok), 2) if ok else None,
            "p99_ms": round(at(0.99), 2) if ok else None,
            "min_ms": round(ok[0], 2) if ok else None,
            "max_ms": round(ok[-1], 2) if ok else None}


class RelayRing:
    """A relay (relay_command: kmpc-ring-relay, else ring_relay.py) on each
    server's ring link to its predecessor, in the server's namespace
    (module docstring)."""

    via = "relay"

    def __init__(self, lan, base, work):
        from kmpc_harness.netns import HOSTS
        self.lan, self.work = lan, work
        self.ports = {i: base + RELAY_PORT_OFFSET + i for i in range(3)}
        self.upstream = {i: f"{HOSTS[f'p{(i + 2) % 3}']}:{base + 10 + (i + 2) % 3}"
                         for i in range(3)}
        self.controls = {i: os.path.join(work, f"relay-{i}.sock") for i in range(3)}
        self.procs = {}
        self.rt = bool(shutil.which("chrt"))
        self.impl, self.argv = relay_command()

    def start(self):
        for i in range(3):
            argv = [*self.lan.exec_prefix(f"p{i}"), *(["chrt", "-f", "1"] if self.rt else []),
                    *self.argv, "--listen", f"127.0.0.1:{self.ports[i]}",
                    "--to", self.upstream[i], "--control", self.controls[i]]
            self.procs[i] = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        for i, p in self.procs.items():
            ready, _, _ = select.select([p.stdout], [], [], 10)
            line = p.stdout.readline() if ready else ""
            if not line.startswith("listening"):
                self.stop()
                raise RuntimeError(f"relay {i} did not start: {line!r}")
        return self

    def ring_prev(self):
        return {i: f"127.0.0.1:{port}" for i, port in self.ports.items()}

    def command(self, i, line):
        import socket
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.controls[i])
            s.sendall((line + "\n").encode())
            return s.makefile().readline().strip()

    def set_delay(self, ms):
        for i in range(3):
            reply = self.command(i, f"delay {ms}")
            if not reply.startswith("ok"):
                raise RuntimeError(f"relay {i}: {reply}")

    def stats(self):
        return [json.loads(self.command(i, "stats")) for i in range(3)]

    def stop(self):
        from kmpc_harness import cluster as kmpc_cluster
        kmpc_cluster.stop_pids([p.pid for p in self.procs.values()])
        self.procs = {}


class NetemRing:
    """netem's delay on the three servers' links (where the kernel has it)."""

    via = "netem"

    def __init__(self, lan):
        self.lan = lan

    def set_delay(self, ms):
        from kmpc_harness.netns import sh
        for i in range(3):
            sh(["tc", "-n", self.lan.ns(f"p{i}"), "qdisc", "replace", "dev", "eth0", "root",
                "netem", "delay", f"{int(round(ms * 1000))}us", "rate", self.lan.rate,
                "limit", "100000"])

    def stats(self):
        return None

    def stop(self):
        self.lan.shape()  # the LAN's own delay and rate again


def measure(target, client, ring, delay_ms, n, label):
    """One point: the delay set, n logins of each user, counters around
    each block; the relays' stats over the point."""
    from bench import ring_cost
    if ring is not None:
        ring.set_delay(delay_ms)
        ring.stats()  # from here
    point = {"label": label, "via": ring.via if ring else "direct", "delay_ms": delay_ms,
             "loadavg": os.getloadavg()[0]}
    for who, user in zip(("cts", "kdb"), USERS):
        m0 = target.mpc_counters()
        c0 = server_cpu(target)
        runs = client.logins(user, n)
        c1 = server_cpu(target)
        m1 = target.mpc_counters()
        point[who] = {**summary(runs), "servers": ring_cost.per_server(m0, m1, len(runs)),
                      "server_cpu_ms_per_login": (
                          {k: round((c1[k] - c0[k]) * 1e3 / len(runs), 1) for k in c0}
                          if c0 and c1 and runs else None)}
    point["relay"] = ring.stats() if ring is not None else None
    return point


def server_cpu(target):
    """{mpc-server-I: CPU seconds} of the target's three servers (their
    spins included: what a server's host gives a login), None when the
    target does not name their pids."""
    from bench import cts_realm
    pids = {k: v for k, v in getattr(target, "watch", {}).items()
            if k.startswith("mpc-server-")}
    if len(pids) != 3:
        return None
    try:
        return cts_realm.cpu_seconds(pids)
    except OSError:
        return None


def warm(client, log):
    """The first login of each user after a restart (the servers compile
    the cts programs; the module proves the reply's shape): {user: ms}."""
    out = {}
    for user in USERS:
        runs = client.logins(user, 2)
        out[user] = [ms if rc == 0 else f"failed: {e}" for ms, rc, e in runs]
    log(f"  ring delay sweep, first logins after a restart: {out}")
    return out


def sweep(target, delays, n, via, work, log, masked=True, masked_flags=()):
    """netns.json's "ring_delay": the points (module docstring) and their
    summary. via: "relay", "netem" or "auto" (netem where the LAN has it).
    masked_flags: server flags added to --cts_masked_gates for the masked
    points (a variant to measure, e.g. another --ring_spin_us)."""
    from bench import ring_cost
    lan = target.lan
    if via == "auto":
        via = "netem" if lan.shaping == "netem" else "relay"
    options = {"deadline_ms": DEADLINE_MS, "early_flush": "true"}
    out = {"via": via, "logins": n, "delays_ms": list(delays), "module_options": options,
           "points": []}
    # The first points on Rep3 ANDs (the servers' default runs lone
    # logins over masked wires): the masked points below restart them.
    target.extra_server_flags = ["--cts_masked_gates=false"]
    target.restart_servers(None)
    target.restart_kdc(options)
    client = Client(target, target.delay_passwords, work)
    out["cold"] = warm(client, log)
    ring = None
    try:
        if via == "relay":
            out["points"].append(measure(target, client, None, 0, n, "direct"))
            log_point(out["points"][-1], log)
            ring = RelayRing(lan, target.realm.cluster.base, work)
            out["relay_impl"], out["relay_argv"] = ring.impl, ring.argv
            log(f"  ring relay: {ring.impl} ({' '.join(ring.argv)})")
            ring.start()
            out["relay_sched_fifo"] = ring.rt
            target.restart_servers(ring.ring_prev())
            target.restart_kdc({})
            out["warm_after_relay"] = warm(client, log)
        else:
            ring = NetemRing(lan)
        labels = [f"{via} {d:g} ms" for d in (0, *delays)] + [f"{via} 0 ms again"]
        for d, label in zip([0, *delays, 0], labels):
            out["points"].append(measure(target, client, ring, d, n, label))
            log_point(out["points"][-1], log)
        if masked:
            out["masked_flags"] = ["--cts_masked_gates=true", *masked_flags]
            out["masked_points"] = masked_points(target, client, ring, delays, n, via, log,
                                                 out["masked_flags"])
    finally:
        if ring is not None:
            ring.stop()
    out["summary"] = ring_cost.delay_summary(out["points"])
    for line in ring_cost.summary_lines(out["summary"]):
        log(line)
    if out.get("masked_points"):
        out["masked_summary"] = ring_cost.delay_summary(out["masked_points"])
        for line in ring_cost.summary_lines(out["masked_summary"]):
            log("  masked Runs: " + line.strip())
    return out


def masked_points(target, client, ring, delays, n, via, log, flags):
    """The same points with the servers restarted with flags
    (--cts_masked_gates, docs/design/masked-gates.md, and sweep's
    masked_flags): the cts user's Runs over masked wires once the three
    servers compiled its programs (kmpc_cts_masked_pending 0), beside the
    same krbtgt-only user."""
    target.extra_server_flags = list(flags)
    target.restart_servers(ring.ring_prev() if isinstance(ring, RelayRing) else None)
    target.restart_kdc({})
    warm(client, log)
    t0 = time.time()
    while time.time() - t0 < 300:
        m = target.mpc_counters() or {}
        if len(m) == 3 and all(m[i].get("kmpc_cts_masked_pending", 1) == 0 for i in range(3)):
            break
        time.sleep(0.5)
    log(f"  masked Runs: programs compiled after {time.time() - t0:.1f} s")
    client.logins(USERS[0], 1)
    points = []
    for d in (0, *delays):
        points.append(measure(target, client, ring, d, n, f"{via} {d:g} ms masked"))
        log_point(points[-1], log)
    return points


def log_point(p, log):
    from bench import ring_cost
    lat = [x.get("lateness", {}).get("p50_us") for x in p.get("relay") or []]
    log(f"  {p['label']:14s} " + "; ".join(
        f"{w} p50 {p[w]['p50_ms']} ms (failed {p[w]['failed']}, "
        f"{ring_cost.mean_of(p[w]['servers'], 'ring_messages_per_login')} rounds, "
        f"{ring_cost.mean_of(p[w]['servers'], 'ring_bytes_per_login')} B/server, "
        f"spins ran out {ring_cost.mean_of(p[w]['servers'], 'spins_ran_out_per_login')} / "
        f"{ring_cost.mean_of(p[w]['servers'], 'spinning_waits_per_login')}, slept first "
        f"{ring_cost.mean_of(p[w]['servers'], 'waits_slept_first_per_login')}, spun through "
        f"{ring_cost.mean_of(p[w]['servers'], 'waits_spun_through_per_login')}, CPU ms a "
        f"login {list((p[w].get('server_cpu_ms_per_login') or {}).values())})"
        for w in ("cts", "kdb")) + (f"; relay lateness p50 {lat} us" if lat else ""))


if __name__ == "__main__":
    if sys.argv[1:2] == ["kinit-loop"] and len(sys.argv) == 4:
        print(json.dumps(kinit_loop(sys.argv[2], int(sys.argv[3]))))
        sys.exit(0)
    sys.exit(__doc__.rsplit("Usage", 1)[1])
