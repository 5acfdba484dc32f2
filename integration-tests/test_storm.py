"""kmpc-storm against a real krb5kdc: short storms (a few hundred logins) that
must all succeed, and checks that the tool's counts are real: the KDC log
shows one NEEDED_PREAUTH and one ISSUE per login, a user whose keytab key is
stale shows up as KDC_ERR_PREAUTH_FAILED, a deleted user as
KDC_ERR_C_PRINCIPAL_UNKNOWN, each exactly as often as they were tried."""
import csv
import json
import os
import re
import subprocess
import time

import pytest

from bench import storm_bench
from kmpc_harness.realm import PREFIX, storm_users_realm

# A load-bearing timing test (a storm, latencies or a window): make test
# runs it alone, after the parallel part (conftest.py, "serial").
pytestmark = pytest.mark.serial

ENCTYPES = ["aes256-cts-hmac-sha1-96"]


def _have_enctype(name):
    lib = os.path.join(PREFIX, "lib", "libk5crypto.so")
    try:
        with open(lib, "rb") as f:
            return name.encode() in f.read()
    except OSError:
        return False


# The ctr-mpc enctypes exist once krb5's ctr-mpc enctypes patch is in build/krb5.
if _have_enctype("aes256-ctr-mpc"):
    ENCTYPES.append("aes256-ctr-mpc")


@pytest.fixture(scope="module")
def storm_bin():
    return storm_bench.find_storm()


def _storm(storm_bin, realm, tmp_path, *args, users, name="storm"):
    js = tmp_path / f"{name}.json"
    cs = tmp_path / f"{name}.csv"
    argv = [storm_bin, "--keytab", realm.keytab, "--principals", "user%d@" + realm.realm,
            "--users", str(users), "--json", str(js), "--csv", str(cs),
            "--watch-pid", str(realm.kdc_proc.pid), *map(str, args)]
    p = subprocess.run(argv, env=realm.env, capture_output=True, text=True, timeout=120)
    res = json.loads(js.read_text()) if js.exists() else None
    rows = list(csv.DictReader(cs.open())) if cs.exists() else []
    return p, res, rows


def _kdc_log_counts(realm, expect_total, kind="AS_REQ"):
    """Per-outcome counts of the KDC log lines of one request kind, waiting
    (briefly) until the KDC has written expect_total of them."""
    deadline = time.time() + 10
    while True:
        with open(realm.kdc_log) as f:
            lines = [l for l in f if f" {kind} " in l]
        if len(lines) >= expect_total or time.time() > deadline:
            break
        time.sleep(0.1)
    counts = {}
    for l in lines:
        m = re.search(r"127\.0\.0\.1: (\w+):", l)
        key = m.group(1) if m else "?"
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize("enctype", ENCTYPES)
def test_closed_loop_storm_all_logins_succeed(realm_factory, storm_bin, tmp_path, enctype):
    realm = storm_users_realm(realm_factory, enctype, users=50)
    p, res, rows = _storm(storm_bin, realm, tmp_path, "-c", 4, "-n", 300, users=50)
    assert p.returncode == 0, p.stdout + p.stderr
    assert res["ok"] == 300 and res["failed_all_phases"] == 0, res
    assert res["errors"] == []
    # Two round trips per login: PREAUTH_REQUIRED, then the TGT.
    assert res["requests"] == 2 * res["ok_all_phases"], res
    assert res["retransmits"] == 0
    # The histogram holds every measured login.
    assert sum(b[2] for b in res["histogram_us"]) == res["ok"]
    lat = res["latency_us"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert sum(int(r["ok"]) for r in rows) == res["ok_all_phases"]
    # The KDC saw exactly these exchanges.
    counts = _kdc_log_counts(realm, 2 * res["ok_all_phases"])
    assert counts == {"NEEDED_PREAUTH": res["ok_all_phases"],
                      "ISSUE": res["ok_all_phases"]}, counts
    # The summary on stdout names the figures.
    assert "logins ok       300" in p.stdout and "p99.9" in p.stdout


def test_progress_line_and_histogram_csv(realm_factory, storm_bin, tmp_path):
    realm = storm_users_realm(realm_factory, ENCTYPES[0], users=5, service=False)
    hist = tmp_path / "hist.csv"
    p, res, _ = _storm(storm_bin, realm, tmp_path, "-r", 100, "-d", 2.2, "--progress",
                       "--hist-csv", hist, users=5)
    assert p.returncode == 0, p.stdout + p.stderr
    # Not a terminal: quiet unless asked; asked here, one line a second.
    assert p.stderr.count("logins/s") >= 2 and "p99" in p.stderr, p.stderr
    buckets = list(csv.DictReader(hist.open()))
    assert sum(int(b["count"]) for b in buckets) == res["ok"]
    assert all(int(b["lower_us"]) <= int(b["upper_us"]) for b in buckets)
    p, _, _ = _storm(storm_bin, realm, tmp_path, "-c", 1, "-n", 5, users=5, name="quiet")
    assert "logins/s " not in p.stderr


@pytest.mark.parametrize("enctype", ENCTYPES[:1])
def test_open_loop_and_tgs(realm_factory, storm_bin, tmp_path, enctype):
    realm = storm_users_realm(realm_factory, enctype, users=20)
    service = f"{storm_bench.SERVICE}@{realm.realm}"
    p, res, rows = _storm(storm_bin, realm, tmp_path, "-r", 150, "-d", 2, "-w", 0.5,
                          "--tgs", service, users=20)
    assert p.returncode == 0, p.stdout + p.stderr
    assert res["mode"] == "open" and res["dropped"] == 0
    # 300 due in the 2 s window (uniform spacing), give or take the edge.
    assert 295 <= res["ok"] <= 301, res
    assert res["failed_all_phases"] == 0
    assert res["requests"] == 3 * res["ok_all_phases"]
    assert {r["phase"] for r in rows} >= {"warmup", "measure"}
    tgs = _kdc_log_counts(realm, res["ok_all_phases"], kind="TGS_REQ")
    assert tgs == {"ISSUE": res["ok_all_phases"]}, tgs


def test_sync_engine_and_tcp(realm_factory, storm_bin, tmp_path):
    realm = storm_users_realm(realm_factory, ENCTYPES[0], users=10)
    for extra, name in ((["--engine", "sync"], "sync-udp"),
                        (["--engine", "sync", "--transport", "tcp"], "sync-tcp"),
                        (["--transport", "tcp"], "async-tcp"),
                        (["-t", "2", "--ramp", "0.3"], "async-ramp")):
        p, res, _ = _storm(storm_bin, realm, tmp_path, "-c", 2, "-n", 100, *extra,
                           users=10, name=name)
        assert p.returncode == 0, name + ": " + p.stdout + p.stderr
        assert res["ok"] == 100 and res["failed_all_phases"] == 0, (name, res)
    with open(realm.krb5_conf) as f:
        assert "udp_preference_limit = 1\n" in f.read()  # the user's file untouched


def test_failed_logins_are_counted_by_code(realm_factory, storm_bin, tmp_path):
    users = 20
    realm = storm_users_realm(realm_factory, ENCTYPES[0], users=users)
    # user3: new key in the KDB, the keytab keeps the old one.  user5: gone.
    realm.kadmin_local("cpw -randkey user3")
    realm.kadmin_local("delprinc -force user5")
    with open(realm.kdc_log) as f:
        before = sum(1 for _ in f)
    # One worker, closed loop: logins go round the users in order, so each
    # user is tried exactly 200 / 20 = 10 times.
    p, res, _ = _storm(storm_bin, realm, tmp_path, "-c", 2, "-n", 200, users=users)
    assert p.returncode == 1, p.stdout + p.stderr
    errs = {e["name"]: e for e in res["errors"]}
    assert set(errs) == {"KDC_ERR_PREAUTH_FAILED", "KDC_ERR_C_PRINCIPAL_UNKNOWN"}, errs
    assert errs["KDC_ERR_PREAUTH_FAILED"]["count"] == 10
    assert errs["KDC_ERR_C_PRINCIPAL_UNKNOWN"]["count"] == 10
    assert "Preauthentication failed" in errs["KDC_ERR_PREAUTH_FAILED"]["message"]
    assert res["failed"] == 20 and res["ok"] == 180
    assert "KDC_ERR_PREAUTH_FAILED" in p.stdout and "20 failed logins" in p.stderr
    # The KDC log agrees.
    with open(realm.kdc_log) as f:
        new = [l for l in list(f)[before:] if " AS_REQ " in l]
    assert sum("PREAUTH_FAILED" in l and "user3@" in l for l in new) == 10
    assert sum("CLIENT_NOT_FOUND" in l and "user5@" in l for l in new) == 10
    assert sum(": ISSUE:" in l for l in new) == 180
    # --max-errors lets a known number of failures through.
    p, res, _ = _storm(storm_bin, realm, tmp_path, "-c", 2, "-n", 200, "--max-errors", 20,
                       users=users, name="allowed")
    assert p.returncode == 0, p.stdout + p.stderr


def test_unreachable_kdc_times_out(realm_factory, storm_bin, tmp_path):
    realm = storm_users_realm(realm_factory, ENCTYPES[0], users=2, service=False)
    pid = realm.kdc_proc.pid
    realm.stop_kdc()
    argv = [storm_bin, "--keytab", realm.keytab, "--principals", "user%d@" + realm.realm,
            "--users", "2", "-c", "2", "-n", "2", "--timeout", "1.5",
            "--json", str(tmp_path / "s.json")]
    t = time.time()
    p = subprocess.run(argv, env=realm.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert time.time() - t < 10
    res = json.loads((tmp_path / "s.json").read_text())
    assert [e["name"] for e in res["errors"]] == ["KRB5_KDC_UNREACH"], res
    assert res["retransmits"] >= 2  # 1 s, as kinit, before giving up at 1.5 s
    assert pid  # (the KDC was stopped on purpose)


def test_usage_errors(realm_factory, storm_bin, tmp_path):
    realm = storm_users_realm(realm_factory, ENCTYPES[0], users=2, service=False)
    base = [storm_bin, "--keytab", realm.keytab]
    for extra, msg in ((["--principals", "user%d@KMPC.TEST", "--users", "3"], "has no key"),
                       (["-c", "1", "-r", "10"], "not both"),
                       (["-d", "1", "-n", "10"], "not both")):
        p = subprocess.run(base + extra, env=realm.env, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2 and msg in p.stderr, (extra, p.stderr)


def test_keytab_from_passwords(realm_factory, storm_bin, tmp_path):
    """The path a realm whose KDC holds no keys takes: users made with
    passwords, the storm's keytab derived on the client side."""
    realm = realm_factory(enctypes=[ENCTYPES[-1]])
    pws = {}
    for i in range(3):
        pws[f"user{i}@{realm.realm}"] = "pw-" + os.urandom(6).hex()
        realm.addprinc(f"user{i}", pws[f"user{i}@{realm.realm}"], enctypes=[ENCTYPES[-1]])
    realm.start_kdc()
    kt = storm_bench.client_keytab_from_passwords(realm.env, pws, [ENCTYPES[-1]],
                                                  str(tmp_path / "pw.keytab"))
    p = subprocess.run([storm_bin, "--keytab", kt, "-c", "2", "-n", "30", "-q",
                        "--json", str(tmp_path / "pw.json")],
                       env=realm.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "pw.json").read_text())
    assert res["users"] == 3 and res["ok"] == 30


def test_storm_against_the_kmpc_realm(storm_bin, tmp_path):
    """The same storm, the realm swapped for kmpc's (kmpc_harness/kmpc_realm.py:
    handles in the KDB, the kdcmpc module, three MPC servers): every login,
    and the TGS-REQ after it, must succeed."""
    from kmpc_harness import cluster as kmpc_cluster
    kmpc_cluster.require_built("mpc-server/kmpc-mpc-server", "mpc-server/kmpc-admin")
    target = storm_bench.KmpcTarget(str(tmp_path / "kmpc"), "headline", 40)
    try:
        js = tmp_path / "kmpc.json"
        argv = [storm_bin, "--keytab", target.keytab, "--principals", target.principal_fmt,
                "--users", "40", "-c", "32", "--ramp", "0.3", "-n", "160", "--timeout", "10",
                "--tgs", target.service, "--json", str(js)]
        for pid in target.watch.values():
            argv += ["--watch-pid", str(pid)]
        p = subprocess.run(argv, env=target.env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr + target.logs()[-5000:]
        res = json.loads(js.read_text())
        assert res["ok"] == 160 and res["failed_all_phases"] == 0, res
        assert res["requests"] == 3 * res["ok_all_phases"], res  # (retransmits not counted)
        assert len(res["watched"]) == 4  # krb5kdc and the three servers
        assert target.alive(), target.logs()[-5000:]

        # Early flush, one client: each login is its AS exchange's plan
        # (exchange-plan.md 1.5), so its one Run brings the ticket's and
        # the reply's keystreams and the PAC signatures' pads along; the
        # signatures are ring-free Sign requests, the servers FINALIZE the
        # ticket and the reply, and the client checks the tags. Every login
        # must still succeed.
        from bench import storm_soak
        storm_soak.restart_kdc_with(target, {"early_flush": "true"})
        m0 = target.mpc_counters()
        js = tmp_path / "kmpc-ef.json"
        p = subprocess.run([storm_bin, "--keytab", target.keytab, "--principals",
                            target.principal_fmt, "--users", "40", "-c", "1", "-n", "60",
                            "-w", "0", "--json", str(js), "-q"],
                           env=target.env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr + target.logs()[-5000:]
        res = json.loads(js.read_text())
        assert res["ok_all_phases"] == 60 and res["failed_all_phases"] == 0, res
        per = storm_bench.mpc_per_login(m0, target.mpc_counters(), 60)
        # One Run per login, from the first (nothing is learnt).
        assert per["run_batches_per_login"] <= 1.05, per
        assert per["finalize_batches_per_login"] >= 0.95, per
    finally:
        target.stop()


def test_storm_against_the_kmpc_realm_with_malicious_servers(storm_bin, tmp_path):
    """make bench's kmpc-malicious target (storm_bench.KmpcMaliciousTarget):
    the same realm with the three servers in --security=malicious; every
    login and TGS-REQ of a short storm succeeds through the verified
    protocol."""
    from kmpc_harness import cluster as kmpc_cluster
    kmpc_cluster.require_built("mpc-server/kmpc-mpc-server", "mpc-server/kmpc-admin")
    target = storm_bench.KmpcMaliciousTarget(str(tmp_path / "kmpc"), "headline", 16)
    try:
        for i in range(3):
            with open(f"/proc/{target.realm.cluster.pid(i)}/cmdline", "rb") as f:
                assert b"--security=malicious" in f.read().split(b"\0"), i
        js = tmp_path / "kmpc-mal.json"
        p = subprocess.run([storm_bin, "--keytab", target.keytab, "--principals",
                            target.principal_fmt, "--users", "16", "-c", "8", "-n", "40",
                            "--timeout", "20", "--tgs", target.service, "--json", str(js)],
                           env=target.env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr + target.logs()[-5000:]
        res = json.loads(js.read_text())
        assert res["ok"] == 40 and res["failed_all_phases"] == 0, res
        assert target.alive(), target.logs()[-5000:]
        assert "MPC integrity check failed" not in target.logs()
    finally:
        target.stop()


MIX = "login,tgs,renew,forward"


def _check_mix(res, realm_log, n):
    """n operations of MIX in turn, every one succeeded; the KDC issued one
    TGS reply per tgs, renew and forward operation and failed none."""
    assert res["ok"] == n and res["failed_all_phases"] == 0, res
    # (with -n, whichever worker is free claims the next measured operation)
    mix = res["mix"]
    assert sorted(mix) == sorted(MIX.split(",")), res
    assert all(v["ok"] >= n // 8 and v["failed"] == 0 for v in mix.values()), mix
    assert sum(v["ok"] for v in mix.values()) == n, mix
    with open(realm_log) as f:
        tgs = [l for l in f if " TGS_REQ " in l]
    assert len(tgs) >= n - mix["login"]["ok"] and all(": ISSUE: " in l for l in tgs), tgs[:5]


def test_mix_of_renewal_and_forwarding(realm_factory, storm_bin, tmp_path):
    """--mix: logins, TGS-REQs, renewals of a renewable TGT and forwarded
    TGTs, in turn; every exchange succeeds against the stock KDC. The async
    engine refuses a mix (libkrb5 has no step API for them), a mix with tgs
    needs --tgs."""
    realm = storm_users_realm(realm_factory, ENCTYPES[0], users=8)
    service = f"{storm_bench.SERVICE}@{realm.realm}"
    p, res, _ = _storm(storm_bin, realm, tmp_path, "-c", 4, "-n", 80, "--engine", "sync",
                       "--mix", MIX, "--tgs", service, users=8)
    assert p.returncode == 0, p.stdout + p.stderr
    _check_mix(res, realm.kdc_log, 80)
    assert re.search(r"renew ok \d+ failed 0;", p.stdout), p.stdout
    base = [storm_bin, "--keytab", realm.keytab, "-n", "4"]
    for extra, msg in ((["--mix", MIX, "--tgs", service], "needs --engine sync"),
                       (["--mix", "login,renew", "--engine", "sync", "-c", "1"], None),
                       (["--mix", "tgs", "--engine", "sync"], "needs --tgs"),
                       (["--mix", "login,validate", "--engine", "sync"], "unknown operation")):
        q = subprocess.run(base + extra, env=realm.env, capture_output=True, text=True,
                           timeout=60)
        if msg is None:
            assert q.returncode == 0, q.stdout + q.stderr
        else:
            assert q.returncode == 2 and msg in q.stderr, (extra, q.stderr)


def test_mix_against_the_kmpc_realm(storm_bin, tmp_path):
    """The same mix against kmpc: renewed and forwarded TGTs are encrypted
    (and their PACs signed) under the MPC-held krbtgt; zero failures."""
    target = storm_bench.KmpcTarget(str(tmp_path / "kmpc"), "headline", 16)
    try:
        js = tmp_path / "mix.json"
        p = subprocess.run([storm_bin, "--keytab", target.keytab, "--principals",
                            target.principal_fmt, "--users", "16", "-c", "8", "-n", "80",
                            "--engine", "sync", "--mix", MIX, "--tgs", target.service,
                            "--json", str(js), "-q"],
                           env=target.env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr + target.logs()[-5000:]
        _check_mix(json.loads(js.read_text()), target.realm.kdc_log, 80)
        log = open(target.realm.kdc_log).read()
        assert "tkt=aes256-ctr-mpc" in log and "refusing" not in log
        assert target.alive(), target.logs()[-5000:]
    finally:
        target.stop()
