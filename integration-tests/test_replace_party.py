"""Replacing a lost MPC server (docs/admin-guide.md: "Replacing a lost server") with real
processes: three kmpc-mpc-servers, a real KDB and krb5kdc with the kdcmpc
module, the real certificate tool and kmpc-admin.

Party 1 is lost (stopped, its store gone). The procedure: revoke its
certificate (deploy/gen-certs.sh --revoke), issue the new server's
(--party 1), start it on an empty store, `kmpc-admin rebuild-party 1`. The
test knows every key (derived here from the passwords) and checks that
  - the lost server's certificate can no longer join the ring;
  - after the rebuild all three new stores recombine to each key, logins
    (kinit, TGS, a short storm) work, `status --kdb` is clean;
  - the old party-1 store combined with either survivor's new store (and
    any old store with any other party's new store) gives no key, round
    keys or H by any XOR of their shares; the survivors' old records are
    gone from their files.
"""
import os
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


from kmpc_harness import cluster as kmpc_cluster  # noqa: E402
from test_refresh import (Storm, check_combines, check_redealt,  # noqa: E402
                          make_realm, one_record, only_id, read_stores, status_ok)
import pytest  # noqa: E402

# A load-bearing timing test (a storm, latencies or a window): make test
# runs it alone, after the parallel part (conftest.py, "serial").
pytestmark = pytest.mark.serial

kmpc_cluster.require_built("mpc-server/kmpc-admin", "kdc-plugin/libkmpc_kdc.so")

GEN_CERTS = os.path.join(os.path.dirname(HERE), "deploy", "gen-certs.sh")
LOST = 1


def gen_certs(r, *args):
    p = subprocess.run(["bash", GEN_CERTS, r.cluster.certs, *args],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def ring_up_count(r):
    p = subprocess.run([kmpc_cluster.find_built("mpc-server/kmpc-admin"),
                        *r.cluster.admin_flags(), "--timeout-ms=2000", "status"],
                       capture_output=True, text=True, timeout=60)
    return (p.stdout + p.stderr).count(", ring up,")


def rebuilt_line(out):
    import re
    m = re.search(r"(\d+) rebuilt, (\d+) failed, (\d+) finished from an earlier run", out)
    assert m, out
    return tuple(int(x) for x in m.groups())


def test_replace_a_lost_server_from_the_two_survivors(kmpc_factory, tmp_path):
    users = 6
    r, pws, keys, kt = make_realm(kmpc_factory, users, tmp_path)
    before = read_stores(r)
    old = {p: [one_record(before[i], p) for i in range(3)] for p in keys}
    for p, k in keys.items():
        check_combines(old[p], k)
    ids_before = {p: only_id(r, p) for p in keys}
    r.kinit("user0", pws["user0"])

    # Party 1 is lost: process gone, store gone. Keep what an attacker who
    # took it would have: its store file, certificate and key.
    certs = r.cluster.certs
    stolen = tmp_path / "stolen"
    stolen.mkdir()
    for f in (f"party-{LOST}.pem", f"party-{LOST}.key"):
        shutil.copy(os.path.join(certs, f), stolen / f)
    r.cluster.stop_party(LOST)
    shutil.rmtree(r.cluster.store_dir(LOST))
    os.makedirs(r.cluster.store_dir(LOST))

    # The certificate tool refuses a new party certificate while the old
    # one is valid; revoke it, then issue the replacement's.
    rc, out = gen_certs(r, "--party", str(LOST))
    assert rc == 1 and "is not revoked" in out, out
    rc, out = gen_certs(r, "--revoke", os.path.join(certs, f"party-{LOST}.pem"))
    assert rc == 0, out
    rc, out = gen_certs(r, "--party", str(LOST))
    assert rc == 0 and "issued" in out, out

    # The lost server's certificate no longer joins the ring: a server
    # started with it (on party 1's ports) is refused by the survivors.
    argv = r.cluster.server_argv(LOST)
    argv = [a.replace(os.path.join(certs, f"party-{LOST}.pem"), str(stolen / f"party-{LOST}.pem"))
             .replace(os.path.join(certs, f"party-{LOST}.key"), str(stolen / f"party-{LOST}.key"))
            for a in argv]
    argv = [a if not a.startswith("--store_dir=") else f"--store_dir={tmp_path / 'rogue'}"
            for a in argv]
    time.sleep(1.5)  # the survivors re-read crl.pem within a second
    rogue_log = open(tmp_path / "rogue.log", "wb")
    rogue = subprocess.Popen(argv, stdout=rogue_log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        time.sleep(4)
        assert ring_up_count(r) < 3, "the revoked party-1 certificate joined the ring"
    finally:
        kmpc_cluster.stop_pid(rogue.pid)
        rogue_log.close()
    logs = "".join(open(r.cluster.log_path(i), errors="replace").read() for i in (0, 2))
    assert "revoked" in logs, logs[-3000:]

    # Usage errors change nothing.
    r.admin("rebuild-party", expected_code=2)
    r.admin("rebuild-party", "3", expected_code=2)
    r.admin("rebuild-party", "1", "--all", expected_code=2)

    # The new server: new certificate, empty store.
    r.cluster.start_party(LOST)
    r.cluster.wait_ring()
    rc, out, err = r.admin("rebuild-party", str(LOST), timeout=300)
    # users + krbtgt + the warm-up principal
    assert rebuilt_line(out) == (users + 2, 0, 0), out + err

    after = read_stores(r)
    # Every old view with every other party's new view, both ways: in
    # particular the lost server's store with either survivor's new one.
    check_redealt(after, old, keys)
    for p in keys:
        nid = only_id(r, p)
        assert nid != ids_before[p]
        for i in (0, 2):  # the survivors' old records are gone from the files
            assert old[p][i]["rk"][0] not in after[i]
    rc, st = status_ok(r)
    assert rc == 0, st

    # A second run finds nothing to do.
    rc, out, err = r.admin("rebuild-party", str(LOST))
    assert rebuilt_line(out) == (0, 0, 0), out + err

    # Logins work through the rebuilt cluster.
    for u in ("user0", "user4"):
        r.kinit(u, pws[u])
    r.run(["kvno", kmpc_cluster.SERVICE])
    res = Storm(r, kt, users, rate=100, duration=2, tmp=str(tmp_path)).result(timeout=60)
    assert res["failed_all_phases"] == 0 and res["ok"] >= 150, res
    assert r.alive()
