"""The deviation breaker on real processes (mpc-server/src/service/breaker.h).

One deviating server (party 1 on the test-only kmpc-mpc-server-cheat, the
harness of test_malicious.py) makes the honest servers' malicious check
fail batch after batch (BATCH_INTEGRITY_CHECK_FAILED). After
--breaker_deviations of them within --breaker_window an honest server's
breaker opens: every batch is refused with BATCH_BREAKER_OPEN (gRPC
FAILED_PRECONDITION, 9) before anything of it is computed, also after the
cheater is gone and after the server restarts (the trip is kept in its
store directory), until the operator of each tripped server removes its
STORE_DIR/breaker-open and `kmpc-admin breaker-reset` runs (the Admin
certificate alone, which the KDC host holds, does not reopen the ring:
an intruder there beside a deviating server would reset the bound at
will). `kmpc-admin status`
names the open breaker (PROBLEMS, exit 1). Then the next batch, or login,
works.

The cheat: test_malicious.py's "forwarded_header" case, a bit of the
header party 1 forwards in every batch's agreement (ring message 1, byte
3): it does not depend on the batch's shape, so it fits any batch (a
keystream job, a login's Run).

With the KDC: every login while party 1 cheats fails with
KDC_ERR_SVC_UNAVAILABLE (not a wrong password), the module sends each
integrity-failed batch once and never again to that cluster
(kmpc_kdc_run_requests_total moves by one per failed login, the leader
ran one batch for it), and kmpc_kdc_deviations_total counts them.
"""
import os
import re
import subprocess
import time

import test_mpc_cluster as tmc
from test_malicious import CHEATER, INTEGRITY, KEY, assert_right, clusters, keystream_batch, read_log  # noqa: F401
from test_metrics import delta, parse, scrape, value
from test_mpc_cluster import certs  # noqa: F401

CHEAT_BIN = "kmpc-mpc-server-cheat"
FORWARDED_HEADER = "1:3:1"  # step:offset:mask, every batch from the first
BREAKER = "deviation breaker"
FAILED_PRECONDITION = 9


def admin(c, *args, cert="admin"):
    return subprocess.run([os.path.join(tmc.BIN, "kmpc-admin"), f"--servers={c.servers}",
                           f"--ca={c.certs}/ca.pem", f"--cert={c.certs}/{cert}.pem",
                           f"--key={c.certs}/{cert}.key", *args],
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items()
                               if k != "KMPC_ADMIN_CONFIG"})


def open_breakers(status_out):
    """The parties whose status line says their breaker is open."""
    return {int(m) for m in re.findall(r"^server (\d) \([^)]*\): breaker: OPEN", status_out,
                                       re.M)}


def test_breaker_stops_the_cluster_until_an_operator_clears_it(clusters):
    flags = ["--security=malicious", "--depth3_max_blocks=1000",
             "--breaker_deviations=3", "--breaker_window=600s"]
    # Party 1 cheats in its first three batches only: the fourth is honest
    # on its side, and still refused.
    c = clusters("malicious", cheat=f"{FORWARDED_HEADER}:0:0:3", flags=[flags] * 3)
    kid = c.put_key(KEY.hex())
    for n in range(3):
        r = keystream_batch(c, kid)
        assert r.returncode != 0 and not re.search(r"^ok ", r.stdout, re.M), (n, r.stdout)
        assert re.search(rf"^rpc_error \d 15 .*{INTEGRITY}", r.stdout, re.M), (n, r.stdout)
    # The documented error: BATCH_BREAKER_OPEN, FAILED_PRECONDITION.
    r = keystream_batch(c, kid)
    assert r.returncode != 0 and not re.search(r"^ok ", r.stdout, re.M), r.stdout
    assert re.search(rf"^rpc_error \d {FAILED_PRECONDITION} .*{BREAKER} is open since",
                     r.stdout, re.M), r.stdout
    assert read_log(c, CHEATER).count("corrupting ring message") == 3
    # An honest server tripped (the cheat binary is honest but for its
    # injection: it detects the deviation too, and may trip as well).
    tripped = {i for i in range(3) if f"{BREAKER} open since" in read_log(c, i)}
    assert tripped & {0, 2}, [read_log(c, i)[-3000:] for i in (0, 2)]

    p = admin(c, "status")
    assert p.returncode == 1, p.stdout + p.stderr
    assert open_breakers(p.stdout) == tripped, p.stdout
    assert "BATCH_BREAKER_OPEN" in p.stdout and "breaker-reset" in p.stdout, p.stdout
    assert p.stdout.rstrip().endswith("status: PROBLEMS (see above)"), p.stdout

    # A restart does not clear it (STORE_DIR/breaker-open).
    i = min(tripped & {0, 2})
    assert os.path.exists(os.path.join(c.store_dir(i), "breaker-open"))
    c.kill_party(i)
    c.restart_party(i)
    p = admin(c, "status")
    assert p.returncode == 1 and i in open_breakers(p.stdout), p.stdout
    assert "before this restart" in p.stdout, p.stdout
    r = keystream_batch(c, kid)
    assert re.search(rf"^rpc_error \d {FAILED_PRECONDITION} .*{BREAKER}", r.stdout,
                     re.M), r.stdout

    # Only an admin certificate may clear it (Admin RPCs' authorization):
    # the KDC's and a stranger's from the same CA are refused.
    for cert in ("kdc", "kmpc-rogue"):
        p = admin(c, "breaker-reset", cert=cert)
        assert p.returncode == 1 and "breaker cleared" not in p.stdout, p.stdout + p.stderr
        assert "refused our certificate for the Admin service" in p.stdout, p.stdout
    assert open_breakers(admin(c, "status").stdout) >= {i}

    # The admin certificate alone does not clear it either: each tripped
    # server refuses while its trip file exists (its operator's to remove).
    p = admin(c, "breaker-reset")
    assert p.returncode == 1 and "breaker cleared" not in p.stdout, p.stdout + p.stderr
    assert p.stdout.count("this server's operator removes that file") == len(tripped), p.stdout
    assert open_breakers(admin(c, "status").stdout) == tripped
    for t in tripped:
        os.unlink(os.path.join(c.store_dir(t), "breaker-open"))
    p = admin(c, "breaker-reset")
    assert p.returncode == 0, p.stdout + p.stderr
    for t in tripped:
        assert re.search(rf"^server {t} \([^)]*\): breaker cleared \(was .*open", p.stdout,
                         re.M), p.stdout
    assert not os.path.exists(os.path.join(c.store_dir(i), "breaker-open"))
    # The next batch is right (it also brings the ring back up, which the
    # failed batches took down), and status is clean.
    assert_right(c, keystream_batch(c, kid))
    p = admin(c, "status")
    assert p.returncode == 0 and not open_breakers(p.stdout), p.stdout
    assert "status: OK" in p.stdout, p.stdout
    c.check_alive()


def kdc_samples(r):
    return {"kdc": parse(scrape(r.kdc_metrics_url)),
            **{i: parse(scrape(r.cluster.metrics_url(i))) for i in (0, 2)}}


def failed_login(r, password):
    """A login that fails; the metrics before and after it."""
    before = kdc_samples(r)
    r.kinit("alice", password, expected_code=1)
    return before, kdc_samples(r)


def leader_errors(r, before, wait_s=10.0):
    """Run batches party 0 counted as failed since `before`. The module answers
    the client on the first server's refusal; party 0 may still be ending the
    same batch (its ring peer gone), so wait for its count to move."""
    deadline = time.monotonic() + wait_s
    while True:
        n = delta(before, parse(scrape(r.cluster.metrics_url(0))), "kmpc_batches_total",
                  kind="run", result="error")
        if n or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def deviated_logins(r, password, want):
    """Logins while party 1 cheats, until `want` of them failed with a
    deviation (the first after the cheater's restart may fail only because
    the module's connection to it is not back yet). Each deviation is one
    Run request, never resent: one batch failed on the leader."""
    seen = 0
    for _ in range(want + 6):
        b, a = failed_login(r, password)
        n = delta(b["kdc"], a["kdc"], "kmpc_kdc_deviations_total")
        if n == 0:
            time.sleep(0.5)
            continue
        assert n == 1
        assert delta(b["kdc"], a["kdc"], "kmpc_kdc_run_requests_total") == 1
        assert leader_errors(r, b[0]) == 1
        seen += 1
        if seen == want:
            return
    raise AssertionError(f"only {seen} of {want} logins failed with a deviation")


def test_breaker_with_the_kdc(kmpc_factory):
    password = "breaker-Pw-41d0"
    r = kmpc_factory(module="real", metrics=True,
                     server_flags="--breaker_deviations=2 --breaker_window=600s")
    r.setup_krbtgt()
    r.setup_warmup()
    r.add_users({"alice": password})
    r.start()
    r.kinit("alice", password)
    r.cluster.restart_party_as(1, CHEAT_BIN, {"KMPC_CHEAT": FORWARDED_HEADER})
    deviated_logins(r, password, 2)
    log = r.kdc_log_text()
    assert "BATCH_INTEGRITY_CHECK_FAILED" in log, log[-3000:]
    assert "detected a deviation" not in log  # one cluster: nothing to fail over to

    # The breaker of an honest server is open: the next login is refused
    # before anything runs (the cheater sees no batch).
    cheats = read_log(r.cluster, 1).count("corrupting ring message")
    b, a = failed_login(r, password)
    assert "BATCH_BREAKER_OPEN" in r.kdc_log_text()
    assert value(a["kdc"], "kmpc_kdc_breaker_open") == 1
    assert max(value(a[i], "kmpc_breaker_open") for i in (0, 2)) == 1
    assert delta(b["kdc"], a["kdc"], "kmpc_kdc_deviations_total") == 0
    assert read_log(r.cluster, 1).count("corrupting ring message") == cheats
    _, out, _ = r.admin("status", expected_code=1)
    assert "breaker: OPEN" in out and "status: PROBLEMS" in out, out

    # The cheater gone, the breaker still holds until the operator clears it.
    r.cluster.restart_party_as(1)
    for _ in range(10):  # until the module's connection to party 1 is back
        seen = len(r.kdc_log_text())
        r.kinit("alice", password, expected_code=1)
        if "BATCH_BREAKER_OPEN" in r.kdc_log_text()[seen:]:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(r.kdc_log_text()[-3000:])
    for i in range(3):  # the operators' part (as in the test above)
        trip = os.path.join(r.cluster.store_dir(i), "breaker-open")
        if os.path.exists(trip):
            os.unlink(trip)
    _, out, _ = r.admin("breaker-reset")
    assert "breaker cleared" in out, out
    r.login_until_ok("alice")
    a = kdc_samples(r)
    assert value(a["kdc"], "kmpc_kdc_breaker_open") == 0
    assert all(value(a[i], "kmpc_breaker_open") == 0 for i in (0, 2))
    r.admin("status")


def test_deviation_fails_over_to_the_other_cluster(kmpc_factory):
    """Two clusters, party 1 of cluster 1 cheating in every batch: the
    login succeeds on cluster 2; cluster 1 computed nothing to the end,
    and each batch it failed was one deviation the module counted (no
    job sent to it twice: kdc-plugin/src/router.h)."""
    password = "breaker-Pw-2c77"
    r = kmpc_factory(module="real", metrics=True, clusters=2)
    r.setup_krbtgt()
    r.setup_warmup()
    r.add_users({"alice": password})
    r.start()
    r.kinit("alice", password)
    r.clusters[0].restart_party_as(1, CHEAT_BIN, {"KMPC_CHEAT": FORWARDED_HEADER})
    time.sleep(2)  # the module reconnects to the restarted server (every 250 ms)

    def samples():
        return {"kdc": parse(scrape(r.kdc_metrics_url)),
                **{c: parse(scrape(r.clusters[c].metrics_url(0))) for c in (0, 1)}}
    before = samples()
    r.login_until_ok("alice")
    for _ in range(3):
        r.kinit("alice", password)
    after = samples()
    devs = delta(before["kdc"], after["kdc"], "kmpc_kdc_deviations_total")
    assert devs >= 1
    assert "detected a deviation" in r.kdc_log_text()
    # Cluster 1's leader: no Run finished, one failed per deviation.
    assert delta(before[0], after[0], "kmpc_batches_total", kind="run", result="ok") == 0
    assert delta(before[0], after[0], "kmpc_batches_total", kind="run",
                 result="error") == devs
    assert delta(before[1], after[1], "kmpc_batches_total", kind="run", result="ok") >= 4
    assert delta(before["kdc"], after["kdc"], "kmpc_kdc_failovers_total") >= devs
