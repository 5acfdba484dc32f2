"""k5test's kmpc mode (krb5's k5test kmpc-mode patch) itself, beyond MIT's
own scripts (`make test-mit-kmpc` runs those).

A realm whose servers run with flags (KMPC_SERVER_FLAGS, e.g.
--security=malicious) must get the same flags back when k5test restarts
its cluster after realm.stop(): a malicious-mode run of MIT's tests must
not go on against semi-honest servers without saying so."""

import fcntl
import glob
import os
import signal
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
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LD_", "KRB5", "KPROP", "K5TEST", "GSS_", "KMPC_MPC_FLAGS"))}
    env.update(PYTHONPATH=os.path.join(src, "util"), K5TEST_KMPC="krbtgt",
               K5TEST_KMPC_ROOT=mit_kmpc.ROOT, K5TEST_KMPC_CERTS=str(certs),
               K5TEST_KMPC_WORKERS="1", KMPC_SERVER_FLAGS="--security=malicious")
    with open(os.path.join(obj, ".mit-kmpc.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mit_kmpc.prepare(obj, ["tests"], str(out))
        cwd = os.path.join(obj, "tests")
        # Its own process group, so that a timeout also stops the KDC and
        # the MPC servers it started (fixed ports: the next MIT run needs
        # them free), as mit_kmpc.run_test does.
        proc = subprocess.Popen([sys.executable, str(script)], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out_text, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out_text, _ = proc.communicate()
        finally:
            leaked = mit_kmpc.leaked_servers(cwd)
        # k5test writes its log to testlog in the working directory.
        with open(os.path.join(cwd, "testlog"), errors="replace") as f:
            outp = out_text + f.read()
        logs = sorted(glob.glob(os.path.join(cwd, "testdir", "**", "party-*.log"),
                                recursive=True))
        texts = {path: open(path, errors="replace").read() for path in logs}
    assert proc.returncode == 0 and "*** Success: kmpc cluster restart" in outp, outp[-4000:]
    assert not leaked, f"MPC servers left running: {leaked}"
    assert "MPC servers of KRBTEST.COM restarted" in outp, outp[-4000:]
    # The logs are truncated at every start: these are the restarted
    # servers' own lines.
    assert len(texts) == 3, logs
    for path, text in texts.items():
        assert "security malicious" in text, f"{path}:\n{text[-2000:]}"
        assert "security semi-honest" not in text, f"{path}:\n{text[-2000:]}"
