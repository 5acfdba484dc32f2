"""MIT krb5's own tests against kmpc, the fast subset `make test` runs.

`make test-mit-kmpc` (integration-tests/mit_kmpc.py) runs MIT's KDC-facing
Python tests on MIT's k5test harness in its kmpc mode (krb5's k5test kmpc-mode patch):
every realm a test creates gets three MPC servers and its krbtgt key in
them. Here three of them that pass, through that target, in krbtgt mode:
t_renew (renewal and validation decrypt and re-encrypt TGTs through the
cluster), t_u2u (user-to-user: the second ticket is a TGT under the
MPC-held krbtgt) and gssapi/t_s4u (S4U2Self, S4U2Proxy, RBCD across three
realms, with every evidence ticket's KDC and ticket signatures checked by
VERIFY jobs; its realms on MIT's test KDB module get key handles,
krb5's k5test kmpc-mode patch). Besides their passing, the logs must show that the krbtgt
really was in the cluster and that the KDC issued tickets under it.
"""
import json
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("KMPC_BUILD", os.path.join(ROOT, "build"))
SUBSET = ["tests/t_renew", "tests/t_u2u", "tests/gssapi/t_s4u"]


def make_test_mit_kmpc(tmp_path, mode, tests):
    """`make test-mit-kmpc` of tests in mode on the built trees, logs in
    tmp_path: (exit status, output)."""
    argv = ["make", "-s", "--no-print-directory", "-C", ROOT, "test-mit-kmpc",
            "MIT_NO_BUILD=1", f"MODE={mode}", f"MIT_TESTS={' '.join(tests)}",
            f"MIT_OUT={tmp_path}", f"BUILD={BUILD}"]
    if os.environ.get("KMPC_CMAKE_BUILD"):
        argv.append(f"CMAKE_BUILD={os.environ['KMPC_CMAKE_BUILD']}")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def test_mit_tests_krbtgt_mode(tmp_path):
    rc, out = make_test_mit_kmpc(tmp_path, "krbtgt", SUBSET)
    assert rc == 0, out
    assert f"{len(SUBSET)} passed, 0 failed (mode krbtgt)" in out, out
    logs = tmp_path / "krbtgt"
    results = json.loads((logs / "summary.json").read_text())["results"]
    assert [r["test"] for r in results if r["passed"]] == SUBSET, results
    # Every realm of these tests had its krbtgt in the cluster (those on
    # MIT's test KDB module through key handles).
    by_name = {r["test"]: r for r in results}
    for t in SUBSET:
        assert by_name[t]["krbtgt_in_cluster"] == by_name[t]["realms"] >= 1, by_name[t]

    for t in ("tests/t_renew", "tests/t_u2u"):
        testlog = (logs / (t.replace("/", "_") + ".testlog")).read_text()
        # Each realm's own servers, and its krbtgt key made in them.
        assert "*** kmpc: MPC servers 127.0.0.1:" in testlog, t
        shared = re.findall(r"krbtgt/KRBTEST\.COM@KRBTEST\.COM: shared from a random "
                            r"key as aes256-ctr-mpc", testlog)
        assert shared, f"{t}: the krbtgt was not shared into the cluster"

    # t_renew's realm: TGTs issued, renewed and validated under the MPC-held
    # krbtgt (tkt= is the ticket's enctype in the KDC's ISSUE lines).
    kdc_log = (logs / "tests_t_renew.logs" / "kdc.log").read_text()
    issued = [l for l in kdc_log.splitlines()
              if "ISSUE:" in l and "for krbtgt/KRBTEST.COM@KRBTEST.COM" in l]
    assert issued and all("tkt=aes256-ctr-mpc" in l for l in issued), issued
    assert any("TGS_REQ" in l for l in issued), "no renewal reached the KDC"
    assert "kdcmpc: loaded module kmpc" in kdc_log

    # t_s4u's last realms (RBCD across A, B, C on the test KDB module): their
    # krbtgt keys were put into their clusters and S4U2Proxy tickets issued.
    testlog = (logs / "tests_gssapi_t_s4u.testlog").read_text()
    assert "*** kmpc: krbtgt/A@A: test KDB module keys" in testlog
    s4u_logs = "".join(p.read_text() for p in (logs / "tests_gssapi_t_s4u.logs").glob("*/kdc.log"))
    assert "CONSTRAINED-DELEGATION s4u-client=user@A" in s4u_logs
    assert "kdcmpc: a PAC signature" not in s4u_logs  # every VERIFY held


def test_mit_pkinit_with_every_key_in_the_cluster(tmp_path):
    """MIT's t_pkinit in MODE=all (every key but K/M's in the cluster):
    certificate logins from PEM, PKCS#12, a directory and a PKCS#11 token,
    anonymous PKINIT and FAST armored with it, required freshness tokens
    (krb5 patch 0033-KDC-PKINIT-freshness-tokens); each of its realms had
    its krbtgt in the cluster, and its anonymous TGTs were issued under it."""
    rc, out = make_test_mit_kmpc(tmp_path, "all", ["tests/t_pkinit"])
    assert rc == 0 and "1 passed, 0 failed (mode all)" in out, out
    r, = json.loads((tmp_path / "all" / "summary.json").read_text())["results"]
    assert r["passed"] and r["krbtgt_in_cluster"] == r["realms"] == 2, r
    assert r["kdb_real_keys"] == {"testdir": []}, r
    kdc_log = (tmp_path / "all" / "tests_t_pkinit.logs" / "kdc.log").read_text()
    assert "PKINIT: freshness token received from user@KRBTEST.COM" in kdc_log
    anon = [l for l in kdc_log.splitlines() if "ISSUE:" in l and
            "WELLKNOWN/ANONYMOUS@KRBTEST.COM for krbtgt/KRBTEST.COM@KRBTEST.COM" in l]
    assert anon and all("tkt=aes256-ctr-mpc" in l for l in anon), anon
