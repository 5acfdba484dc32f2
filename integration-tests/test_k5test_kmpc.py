"""k5test's kmpc mode (krb5's k5test kmpc-mode patch) itself, beyond MIT's
own scripts (`make test-mit-kmpc` runs those).

A realm whose servers run with flags (KMPC_SERVER_FLAGS, e.g.
--security=malicious) must get the same flags back when k5test restarts
its cluster after realm.stop(): a malicious-mode run of MIT's tests must
not go on against semi-honest servers without saying so."""

import fcntl
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mit_kmpc  # noqa: E402

SCRIPT = """
from k5test import *
realm = K5Realm(create_user=True)
realm.stop()
# start_kdc() brings the stopped cluster back (_KmpcCluster.ensure_running).
realm.start_kdc()
realm.kinit(realm.user_princ, password('user'))
realm.klist(realm.user_princ)
success('kmpc cluster restart')
"""


def test_restarted_cluster_keeps_its_server_flags(tmp_path):
    src = os.path.join(mit_kmpc.BUILD, "krb5-src", "src")
    obj = os.path.join(mit_kmpc.BUILD, "krb5-obj")
    assert os.path.exists(os.path.join(obj, "config.status")), \
        f"no krb5 build tree in {obj} (make krb5)"
    out = tmp_path / "out"
    out.mkdir()
    # k5test finds the source tree's root from the script's directory (a
    # parent holding lib/krb5/krb): a stand-in whose util/ is the real one.
    fake_src = tmp_path / "src"
    (fake_src / "lib" / "krb5" / "krb").mkdir(parents=True)
    (fake_src / "tests").mkdir()
    os.symlink(os.path.join(src, "util"), fake_src / "util")
    script = fake_src / "tests" / "t_kmpc_restart.py"
    script.write_text(SCRIPT)
    certs = tmp_path / "certs"
    subprocess.run(["bash", os.path.join(mit_kmpc.ROOT, "deploy", "gen-certs.sh"), str(certs)],
                   check=True, capture_output=True, timeout=120)
    env = mit_kmpc.test_env(src, "krbtgt", str(certs))
    env.pop("KMPC_MPC_FLAGS", None)
    env.update(K5TEST_KMPC_WORKERS="1", KMPC_SERVER_FLAGS="--security=malicious")
    with open(os.path.join(obj, ".mit-kmpc.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mit_kmpc.prepare(obj, ["tests"], str(out))
        # Run as MIT's own scripts are (its own process group, stopped at
        # the timeout; servers it leaves running are killed and fail it;
        # its testlog and daemon logs copied to out).
        r = mit_kmpc.run_test("tests/t_kmpc_restart", "krbtgt", str(fake_src), obj, str(out),
                              env, 600)
    testlog = (out / "tests_t_kmpc_restart.testlog").read_text(errors="replace")
    assert r["passed"], f"{r['reason']}\n{testlog[-4000:]}"
    assert "*** Success: kmpc cluster restart" in testlog, testlog[-4000:]
    assert "MPC servers of KRBTEST.COM restarted" in testlog, testlog[-4000:]
    # The logs are truncated at every start: these are the restarted
    # servers' own lines.
    logs = sorted(glob.glob(str(out / "tests_t_kmpc_restart.logs" / "**" / "party-*.log"),
                            recursive=True))
    assert len(logs) == 3, logs
    for path in logs:
        text = open(path, errors="replace").read()
        assert "security malicious" in text, f"{path}:\n{text[-2000:]}"
        assert "security semi-honest" not in text, f"{path}:\n{text[-2000:]}"
