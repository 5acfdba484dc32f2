"""Recovery of a realm when one MPC server is killed (SIGKILL) and restarted
with the same command line, under a login storm (issue 17, item 1).

Real processes: three kmpc-mpc-servers, krb5kdc with the kdcmpc module,
kmpc-storm (AS + TGS exchange per login) writing one line per login
(--events: when it was due, when it finished, its error code, on the wall
clock). The restarted server's "listening on" line (its log's timestamp)
is the reference for the figures:

  recovery_s     from the listening line to the first successful login that
                 was due after it;
  serving_s      from the listening line to the due time of the last failed
                 login (every login due later succeeded);
  down_fail_*    latency of the logins that failed while the party was down
                 (they must fail at once, KDC_ERR_SVC_UNAVAILABLE, not be
                 held until a deadline);
  after_p99_s    p99 latency of the logins due in the seconds after the
                 restart.

Asserted for each party: serving within 1 s of the listening line, failures
while down with p99 well under a second and no login held past the
module's deadline, normal latency right after.

As a script it runs the scenario of the issue and prints the figures:
  python3 integration-tests/test_recovery.py --rate 600 --before 8 --down 5
"""
import argparse
import calendar
import csv
import os
import re
import secrets
import signal
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


from kmpc_harness import cluster as kmpc_cluster  # noqa: E402
from kmpc_harness.kmpc_realm import KmpcRealm, storm_realm  # noqa: E402
from bench import storm_bench  # noqa: E402
import pytest  # noqa: E402

# A load-bearing timing test (a storm, latencies or a window): make test
# runs it alone, after the parallel part (conftest.py, "serial").
pytestmark = pytest.mark.serial

kmpc_cluster.require_built("mpc-server/kmpc-admin", "kdc-plugin/libkmpc_kdc.so")

# KRB5KDC_ERR_SVC_UNAVAILABLE: ERROR_TABLE_BASE_krb5 (-1765328384) + 29.
SVC_UNAVAILABLE = -1765328384 + 29
# The kdcmpc module's batch deadline (options.h deadline_ms default).
MODULE_DEADLINE_S = 3.0


# ---- the storm and its events ---------------------------------------------

class Storm:
    """kmpc-storm in the background, open loop, every login's outcome in an
    events file."""

    def __init__(self, realm, keytab, users, rate, duration, tmp):
        tag = secrets.token_hex(4)
        self.events = os.path.join(tmp, f"events-{tag}.csv")
        self.json = os.path.join(tmp, f"storm-{tag}.json")
        argv = [storm_bench.find_storm(), "--keytab", keytab, "--principals",
                "user%d@" + realm.realm, "--users", str(users), "-r", str(rate),
                "-d", str(duration), "-w", "0", "--tgs",
                f"{kmpc_cluster.SERVICE}@{realm.realm}", "--timeout", "10",
                "--events", self.events, "--json", self.json, "--no-progress",
                "-q", "--max-errors", str(10 ** 9)]
        self.proc = subprocess.Popen(argv, env=realm.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def result(self, timeout):
        out, err = self.proc.communicate(timeout=timeout)
        assert os.path.exists(self.events), f"kmpc-storm wrote no events: {err}"
        with open(self.events) as f:
            rows = list(csv.DictReader(f))
        return [(float(r["due_s"]), float(r["done_s"]), int(r["code"])) for r in rows]


def log_time(line, now=None):
    """The wall-clock time of a server log line ("I0612 10:11:12.123456 ...",
    UTC, no year: the year that puts it nearest to now)."""
    m = re.match(r"[IWE](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ", line)
    assert m, line
    mon, day, hh, mm, ss, us = (int(x) for x in m.groups())
    now = now or time.time()
    year = time.gmtime(now).tm_year
    cands = [calendar.timegm((y, mon, day, hh, mm, ss, 0, 0, 0)) + us / 1e6
             for y in (year - 1, year, year + 1)]
    return min(cands, key=lambda t: abs(t - now))


def listening_time(cluster, party, offset):
    """When party's log (from byte offset on) says "listening on"."""
    with open(cluster.log_path(party), errors="replace") as f:
        f.seek(offset)
        for line in f:
            if "listening on" in line:
                return log_time(line)
    raise AssertionError(f"party {party} logged no listening line")


def kill9(pid):
    os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:  # not ours (started by mpc-local.sh)
            if not kmpc_cluster.pid_alive(pid):
                return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} survived SIGKILL")


def quantile(xs, q):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def figures(events, t_kill, t_listen, after_s):
    """The figures of one kill/restart (module docstring)."""
    down = [e for e in events if t_kill <= e[0] < t_listen]
    down_fail = [done - due for due, done, code in down if code != 0]
    down_codes = sorted({code for _, _, code in down if code != 0})
    later = [e for e in events if e[0] >= t_listen]
    first_ok = min((done for due, done, code in later if code == 0), default=None)
    last_fail = max((due for due, done, code in later if code != 0), default=None)
    after = [done - due for due, done, code in later
             if code == 0 and due < t_listen + after_s]
    before = [done - due for due, done, code in events if due < t_kill - 0.5]
    return {
        "recovery_s": None if first_ok is None else round(first_ok - t_listen, 3),
        "serving_s": 0.0 if last_fail is None else round(max(0.0, last_fail - t_listen), 3),
        "down_logins": len(down),
        "down_ok": len(down) - len(down_fail),
        "down_failed": len(down_fail),
        "down_codes": down_codes,
        "down_fail_p50_s": round(quantile(down_fail, 0.5), 3),
        "down_fail_p99_s": round(quantile(down_fail, 0.99), 3),
        "down_max_s": round(max((d - u for u, d, _ in down), default=0.0), 3),
        "after_logins": len([e for e in later if e[0] < t_listen + after_s]),
        "after_failed": len([e for e in later if e[0] < t_listen + after_s and e[2] != 0]),
        "after_p50_s": round(quantile(after, 0.5), 3),
        "after_p99_s": round(quantile(after, 0.99), 3),
        "before_p50_s": round(quantile(before, 0.5), 3),
        "before_p99_s": round(quantile(before, 0.99), 3),
    }


def kill_and_restart(r, kt, users, party, rate, before_s, down_s, after_s, tmp):
    """A storm; party killed (SIGKILL) after before_s, restarted (same command
    line) down_s later; the storm runs after_s more after the restart."""
    c = r.cluster
    storm = Storm(r, kt, users, rate, before_s + down_s + after_s + 1.5, tmp)
    time.sleep(before_s)
    assert storm.proc.poll() is None, storm.proc.communicate()
    t_kill = time.time()
    kill9(c.pid(party))
    time.sleep(down_s)
    log = c.log_path(party)
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    c.start_party(party)
    t_listen = listening_time(c, party, offset)
    events = storm.result(timeout=before_s + down_s + after_s + 60)
    assert r.alive(), r.logs()
    return figures(events, t_kill, t_listen, after_s)


# ---- the test --------------------------------------------------------------

def check(fig, party):
    where = f"party {party}: {fig}"
    # Logins due while the party was down failed, cleanly and at once: no
    # slower than half a second, or than a normal login before the kill on
    # a machine loaded beyond that (seen at load 20: p50 1.7 s, p99 0.9 s).
    assert fig["down_failed"] > 0 and fig["down_codes"] == [SVC_UNAVAILABLE], where
    assert fig["down_fail_p99_s"] < max(0.5, fig["before_p50_s"]), where
    assert fig["down_max_s"] < MODULE_DEADLINE_S, where
    # Serving within a second of its listening line: no login due later
    # than that failed, and the first one due after the line took no longer
    # than that second plus a normal login (this machine's p99 before the
    # kill: a login is several batches).
    assert fig["serving_s"] < 1.0, where
    assert fig["recovery_s"] is not None, where
    assert fig["recovery_s"] < 1.0 + fig["before_p99_s"], where
    # No login held after the restart (issue 17: 4-6 s): the p99 of the
    # logins due in the seconds after it is within two seconds of the p99
    # before the kill. Two, not one: kmpc-storm retransmits over UDP at
    # kinit's 1 s, and on a loaded machine the KDC drops some requests of
    # the backlog that built up while the ring re-formed as stale (krb5
    # patch 0003), so a p99 of one retransmit plus a normal login is
    # expected (seen: 1.59 s against 0.45 s before, at load 10); a held
    # login is not.
    assert fig["after_failed"] < fig["after_logins"] / 2, where
    assert fig["after_p99_s"] < fig["before_p99_s"] + 2.0, where


def test_kill_and_restart_each_party_under_a_storm(kmpc_factory, tmp_path):
    users = 24
    r, _, kt = storm_realm(kmpc_factory, users, tmp_path)
    out = {}
    for party in (0, 1, 2):
        fig = kill_and_restart(r, kt, users, party, rate=200, before_s=2,
                               down_s=2, after_s=4, tmp=str(tmp_path))
        print(f"\nFIGURES recovery party {party}: {fig}")
        out[party] = fig
    for party, fig in out.items():
        check(fig, party)


# ---- script ----------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=600)
    ap.add_argument("--before", type=float, default=8)
    ap.add_argument("--down", type=float, default=5)
    ap.add_argument("--after", type=float, default=15)
    ap.add_argument("--parties", default="1")
    ap.add_argument("--users", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kmpc-recovery-") as tmp:
        r = None
        try:
            r = KmpcRealm(os.path.join(tmp, "realm"), module="real")
            r.create()
            r, _, kt = storm_realm(lambda **kw: r, args.users, tmp)
            for p in (int(x) for x in args.parties.split(",")):
                fig = kill_and_restart(r, kt, args.users, p, args.rate, args.before,
                                       args.down, args.after, tmp)
                print(f"party {p}: {fig}", flush=True)
        finally:
            if r is not None:
                r.stop()


if __name__ == "__main__":
    main()
