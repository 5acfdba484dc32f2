"""Availability with a second MPC cluster (issue 17, item 2; Araki et al.,
CCS 2016, section 5.3: "simply using two clusters").

Real processes: two clusters of three kmpc-mpc-servers each on loopback
(each with its own CA and stores), krb5kdc with the kdcmpc module
configured with both (servers / servers2), every key dealt to both by
kmpc-admin under the same key id, kmpc-storm (AS + TGS per login).

- A server of the primary cluster is killed (SIGKILL) mid-storm: no login
  fails (the module fails its jobs over to cluster 2); it is restarted,
  the primary serves again, and a server of cluster 2 is killed mid-storm:
  still no login fails.
- Dealing is all-or-nothing across the clusters: with cluster 2 (partly)
  down, kmpc-admin share and the key dealer (kadmin.local cpw) fail with a
  message naming cluster 2, the KDB is unchanged, and no new key is left in
  cluster 1.

As a script it prints the storm figures with two clusters:
  python3 integration-tests/test_two_clusters.py --rate 300 --duration 10
"""
import argparse
import os
import re
import shutil
import signal
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

from kmpc_harness import cluster as kmpc_cluster  # noqa: E402
from kmpc_harness.kmpc_realm import KmpcRealm, storm_realm  # noqa: E402
# Skipped as test_recovery is (kmpc-admin and the module built).
from test_recovery import Storm, kill9, quantile  # noqa: E402
import pytest  # noqa: E402

# A load-bearing timing test (a storm, latencies or a window): make test
# runs it alone, after the parallel part (conftest.py, "serial").
pytestmark = pytest.mark.serial



def make_realm(make, users, tmp):
    """Two clusters, krbtgt and users dealt to both, the KDC running; the
    storm's keytab."""
    r, _, kt = storm_realm(make, users, tmp, clusters=2)
    return r, kt


def key_ids(cluster):
    """The key ids cluster's three servers list (kmpc-mpc-client list-keys),
    one set per server."""
    out = cluster.client("list-keys")
    per = [set() for _ in range(3)]
    server = None
    for line in out.splitlines():
        m = re.match(r"\s*(?:server|party) (\d)", line)
        if m:
            server = int(m.group(1))
        for h in re.findall(r"\b[0-9a-f]{64}\b", line):
            if server is not None:
                per[server].add(h)
    return per


def batches_ok(r, cluster_no):
    """Sum of the batches cluster_no's servers report done (kmpc-admin
    status)."""
    _, out, _ = r.admin("status", expected_code=None)
    prefix = f"cluster {cluster_no}: "
    return sum(int(m) for m in re.findall(
        re.escape(prefix) + r"server \d \([^)]*\): [^\n]*batches ok (\d+)", out))


def assert_kdb_consistent(r):
    """kmpc-admin status --kdb: every handle's key on all six servers,
    nothing unreferenced (the warm-up principal is reported as migrated,
    by design: make_realm moves its KDB key)."""
    _, out, _ = r.admin("status", "--kdb", expected_code=None)
    for c in (1, 2):
        assert re.search(rf"cluster {c}: keys: \d+ on all three servers, 0 incomplete",
                         out), out
    assert ", 0 handles without shares, " in out, out
    assert " 0 unreferenced keys" in out, out


def storm_with_kill(r, kt, users, cluster, party, rate, before_s, after_s, tmp):
    """A storm; cluster's party killed (SIGKILL) before_s into it; the storm
    runs after_s more. Returns its events [(due, done, code)]."""
    storm = Storm(r, kt, users, rate, before_s + after_s, tmp)
    time.sleep(before_s)
    assert storm.proc.poll() is None, storm.proc.communicate()
    kill9(cluster.pid(party))
    events = storm.result(timeout=before_s + after_s + 60)
    assert r.kdc_alive(), r.logs()
    return events


def summary(events):
    lat = [done - due for due, done, code in events if code == 0]
    return {"logins": len(events), "failed": sum(1 for e in events if e[2] != 0),
            "codes": sorted({e[2] for e in events if e[2] != 0}),
            "p50_s": round(quantile(lat, 0.5), 4), "p99_s": round(quantile(lat, 0.99), 4)}


def test_kill_a_server_of_either_cluster_no_login_fails(kmpc_factory, tmp_path):
    users = 24
    tmp = str(tmp_path)
    r, kt = make_realm(kmpc_factory, users, tmp)
    c1, c2 = r.clusters
    # Every key is on all six servers, under the same ids.
    ids1, ids2 = key_ids(c1), key_ids(c2)
    assert ids1[0] and all(s == ids1[0] for s in ids1 + ids2), (ids1, ids2)
    assert_kdb_consistent(r)

    # Kill a server of the primary (its jobs fail over to cluster 2), then,
    # with it back and the primary serving again, one of cluster 2.
    for n, (victim, party, serving) in enumerate(((c1, 1, 2), (c2, 0, 1))):
        served = batches_ok(r, serving)
        ev = storm_with_kill(r, kt, users, victim, party, rate=150, before_s=2,
                             after_s=3, tmp=tmp)
        s = summary(ev)
        print(f"\nFIGURES two clusters, cluster {n + 1} party {party} killed: {s}")
        assert s["logins"] > 300 and s["failed"] == 0, s
        # The other cluster served during that storm.
        assert batches_ok(r, serving) > served
        victim.start_party(party)
        victim.wait_ring()
        time.sleep(1.5)  # the module's kDownFor (router.h): the primary again
    # A hung server (SIGSTOP: its connections stay up, nothing answers) of
    # the primary: its batch fails at the module's deadline and every job
    # goes to cluster 2, the jobs queued behind it at once.
    storm = Storm(r, kt, users, 150, 5, tmp)
    time.sleep(1.5)
    pid = c1.pid(2)
    os.kill(pid, signal.SIGSTOP)
    try:
        s3 = summary(storm.result(timeout=60))
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"FIGURES two clusters, cluster 1 party 2 hung: {s3}")
    assert s3["logins"] >= 700 and s3["failed"] == 0, s3
    # The KDC logged its failovers, without a secret.
    with open(r.kdc_log, errors="replace") as f:
        log = f.read()
    assert "jobs go to cluster 2 after failing elsewhere" in log, log[-3000:]
    assert "did not answer within" in log, log[-3000:]


def test_dealing_is_all_or_nothing_across_clusters(kmpc_factory, tmp_path):
    r = kmpc_factory(module="real", clusters=2, dealer=True)
    r.kadmin_local(f"setstr {r.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    r.kadmin_local(f"cpw -randkey {r.tgs}")
    r.move_kadmind_keys()  # to both clusters
    c1, c2 = r.clusters
    r.addprinc("alice", "Alice-old-1234", enctypes=["aes256-ctr-mpc"])
    rows = r.kdb_keys("alice")
    assert {kind for _, _, kind, _ in rows} == {"handle"}, rows
    before1, before2 = key_ids(c1), key_ids(c2)
    assert before1 == before2 and before1[0], (before1, before2)

    c2.stop_party(2)
    # kmpc-admin checks every cluster before dealing anything.
    rc, out, err = r.admin("share", "--password-stdin", "alice",
                           input="Alice-new-5678\n", expected_code=1)
    assert "cluster 2: " in err and "nothing was shared" in err, err
    assert "Alice-new" not in out + err
    # The key dealer deals to cluster 1, then fails on cluster 2 and takes
    # the key off cluster 1 again.
    out = r.kadmin_local("cpw -pw Alice-new-5678 alice", expected_code=None)
    assert "could not be stored on the MPC servers" in out, out
    assert "cluster 2: " in out and "removed again from cluster 1" in out, out
    assert "Alice-new" not in out
    assert r.kdb_keys("alice") == rows
    assert key_ids(c1) == before1
    c2.start_party(2)
    c2.wait_ring()
    assert key_ids(c2) == before2
    # Both clusters back: the change goes through, to both.
    r.kadmin_local("cpw -pw Alice-new-5678 alice")
    after = r.kdb_keys("alice")
    new_ids = {v for _, _, kind, v in after if kind == "handle"}
    assert new_ids and new_ids != {v for _, _, _, v in rows}
    for cl in (c1, c2):
        assert all(new_ids <= s for s in key_ids(cl)), cl.dir
    r.start()
    r.kinit("alice", "Alice-new-5678")
    _, out, _ = r.admin("status", "--kdb", expected_code=0)
    assert "status: OK" in out, out


def test_refresh_moves_keys_in_both_clusters(kmpc_factory, tmp_path):
    users = 3
    r, kt = make_realm(kmpc_factory, users, str(tmp_path))
    c1, c2 = r.clusters
    old = key_ids(c1)[0]
    _, out, err = r.admin("refresh", "--all", expected_code=0)
    new1, new2 = key_ids(c1), key_ids(c2)
    assert new1 == new2 and new1[0], (new1, new2)
    assert not (old & new1[0]), (old, new1)  # every key moved
    assert_kdb_consistent(r)
    # Logins work on either cluster after the refresh.
    kinit = ["kinit", "-k", "-t", kt]
    r.run(kinit + ["user0"])
    c1.stop_party(0)
    r.run(kinit + ["user1"])
    c1.start_party(0)
    c1.wait_ring()


def test_rebuild_a_server_of_cluster_2(kmpc_factory, tmp_path):
    """rebuild-party --cluster=2: server 1 of cluster 2 is replaced (empty
    store); every key moves to a new id on all six servers, the KDB with
    it, and logins work on either cluster."""
    users = 3
    r, kt = make_realm(kmpc_factory, users, str(tmp_path))
    c1, c2 = r.clusters
    old = key_ids(c1)[0]
    c2.stop_party(1)
    shutil.rmtree(c2.store_dir(1))
    os.makedirs(c2.store_dir(1))
    c2.start_party(1)
    c2.wait_ring()
    assert not key_ids(c2)[1]
    r.admin("rebuild-party", "--cluster=3", "1", expected_code=2)
    _, out, err = r.admin("rebuild-party", "--cluster=2", "1", timeout=300)
    assert re.search(rf"\b{len(old)} rebuilt, 0 failed", out), out + err
    new1, new2 = key_ids(c1), key_ids(c2)
    assert new1 == new2 and len(new1[0]) == len(old), (new1, new2)
    assert not (old & new1[0]), (old, new1)
    assert_kdb_consistent(r)
    kinit = ["kinit", "-k", "-t", kt]
    r.run(kinit + ["user0"])
    c1.stop_party(2)
    r.run(kinit + ["user1"])  # on cluster 2, with its rebuilt server
    c1.start_party(2)
    c1.wait_ring()


# ---- script ----------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=300)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--kill", action="store_true",
                    help="kill party 1 of cluster 1 halfway through")
    ap.add_argument("--timeline", action="store_true",
                    help="also the figures of each second (by due time)")
    ap.add_argument("--clusters", type=int, default=2,
                    help="1 for the same storm against one cluster")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kmpc-two-") as tmp:
        r = None
        try:
            r = KmpcRealm(os.path.join(tmp, "realm"), module="real",
                                       clusters=args.clusters)
            r.create()
            r, kt = make_realm(lambda **kw: r, args.users, tmp)
            if args.kill:
                ev = storm_with_kill(r, kt, args.users, r.clusters[0], 1, args.rate,
                                     args.duration / 2, args.duration / 2, tmp)
            else:
                storm = Storm(r, kt, args.users, args.rate, args.duration, tmp)
                ev = storm.result(timeout=args.duration + 60)
            s = summary(ev)
            s["rate_logins_s"] = round(s["logins"] / args.duration, 1)
            print(s, flush=True)
            if args.timeline:
                t0 = min(e[0] for e in ev)
                for sec in range(int(args.duration) + 1):
                    print(sec, summary([e for e in ev if sec <= e[0] - t0 < sec + 1]))
        finally:
            if r is not None:
                r.stop()


if __name__ == "__main__":
    main()
