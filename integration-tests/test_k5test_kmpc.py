"""k5test's kmpc mode (krb5's k5test kmpc-mode patch) itself, beyond MIT's
own scripts (`make test-mit-kmpc` runs those).

A realm whose servers run with flags (KMPC_SERVER_FLAGS, e.g.
--security=malicious) must get the same flags back when k5test restarts
its cluster after realm.stop(): a malicious-mode run of MIT's tests must
not go on against semi-honest servers without saying so.

K5TEST_KMPC=users (MODE=users): the harness's password principals hold
aes256/aes128-cts-hmac-sha1-96 key handles, dealt by the key dealer, and
no real key; the clients' enctype lists are MIT's own; the user logs in
(an AS exchange computed by the cluster) and gets a service ticket.

K5TEST_KMPC=all (MODE=all): every key but K/M's is in the cluster: the
host's (dealt as a service's, its keytab written by ktadd) and kadmind's
(moved with kmpc-admin share --from-existing --service); the KDB, read by
kdb_dump_ref.py through the stash, holds no other real key and `kmpc-admin
status --kdb` agrees; the host keytab validates a ticket, and remote
kadmin with a password and kpasswd work through kadmind."""

import glob
import os
import re
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

USERS_SCRIPT = """
from k5test import *
# get_creds: kinit of the user with its password, MIT's clients and lists.
realm = K5Realm(create_host=True)
for p in (realm.user_princ, realm.admin_princ):
    out = realm.run([kadminl, 'getprinc', p])
    if ('aes256-cts-hmac-sha1-96' not in out or
            'aes128-cts-hmac-sha1-96' not in out or 'ctr-mpc' in out):
        fail('%s: not the standard AES enctypes' % p)
# No real key of the user to extract; the host's (not protected) is one.
realm.run([kadminl, 'ktadd', '-k', os.path.join(realm.testdir, 'ukt'),
           '-norandkey', realm.user_princ], expected_code=1,
          expected_msg='held by the MPC cluster')
# The KDB read through the master key: the user, user/admin and the
# krbtgt hold handles whose shares are on all three servers, no principal
# that should be protected holds a real key, and the host's key and
# kadmind's, which this mode leaves in the KDB, are named as real keys
# (status exits 1).
out = realm.run([realm._kmpc.admin, '--config=' + realm._kmpc.admin_conf,
                 'status', '--kdb'], expected_code=1,
                expected_msg='3 with key handles, 0 exposed, '
                '0 handles without shares')
for p in (realm.host_princ, 'kadmin/admin@' + realm.realm,
          'kadmin/changepw@' + realm.realm):
    if 'kdb: %s holds real keys in the KDB' % p not in out:
        fail('status --kdb does not name %s: %s' % (p, out))
if ' 3 others with real keys' not in out:
    fail('status --kdb counts other real keys: ' + out)
realm.klist(realm.user_princ)
realm.run([kvno, realm.host_princ])
success('kmpc users mode')
"""

ALL_SCRIPT = """
from k5test import *
realm = K5Realm(create_host=True, start_kadmind=True)
# The host's key was dealt as a service's; ktadd wrote a new one (kvno 2)
# to the keytab, which validates a ticket to it.
out = realm.run([kadminl, 'getprinc', realm.host_princ])
if 'Key: vno 2, aes256-cts-hmac-sha1-96' not in out:
    fail('host: no kvno 2 aes256-cts key: ' + out)
realm.run([kvno, '-k', realm.keytab, realm.host_princ],
          expected_msg='keytab entry valid')
out = realm.run([realm._kmpc.admin, '--config=' + realm._kmpc.admin_conf,
                 'status', '--kdb'], expected_msg='status: OK')
if ' 0 exposed' not in out or ' 0 others with real keys' not in out:
    fail('status --kdb: ' + out)
# kadmind's keys are in the cluster: remote kadmin with a password, kpasswd.
realm.run([kadmin, '-p', realm.admin_princ, '-w', password('admin'),
           'getprinc', realm.user_princ], expected_msg='Principal: user@')
realm.run([kpasswd, realm.user_princ],
          input=password('user') + '\\nnew-pw-5150\\nnew-pw-5150\\n',
          expected_msg='Password changed')
realm.kinit(realm.user_princ, 'new-pw-5150')
# A kiprop/ key given to a keytab (ktadd: a real key, which the dealer does
# not protect) moves with share --from-existing: the keytab keeps working.
kiprop = 'kiprop/' + hostname
realm.addprinc(kiprop)
realm.extract_keytab(kiprop, realm.keytab)
realm.run([kvno, '-k', realm.keytab, kiprop], expected_msg='keytab entry valid')
success('kmpc all mode')
"""


def run_k5test_script(tmp_path, name, text, mode, extra_env):
    """Runs text as MIT's scripts are run, in k5test's kmpc mode `mode`;
    returns (mit_kmpc.run_test's result, out dir, testlog)."""
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
    script = fake_src / "tests" / f"{name}.py"
    script.write_text(text)
    certs = tmp_path / "certs"
    subprocess.run(["bash", os.path.join(mit_kmpc.ROOT, "deploy", "gen-certs.sh"), str(certs)],
                   check=True, capture_output=True, timeout=120)
    env = mit_kmpc.test_env(src, mode, str(certs))
    env.pop("KMPC_MPC_FLAGS", None)
    env.update(K5TEST_KMPC_WORKERS="1", **extra_env)
    locks = mit_kmpc.run_lock(obj)
    try:
        mit_kmpc.prepare(obj, ["tests"], str(out))
        # Run as MIT's own scripts are (its own process group, stopped at
        # the timeout; servers it leaves running are killed and fail it;
        # its testlog and daemon logs copied to out).
        r = mit_kmpc.run_test(f"tests/{name}", mode, str(fake_src), obj, str(out), env, 600)
    finally:
        for lock in locks:
            lock.close()
    testlog = (out / f"tests_{name}.testlog").read_text(errors="replace")
    return r, out, testlog


def test_users_mode_gives_standard_enctype_handles(tmp_path):
    r, out, testlog = run_k5test_script(tmp_path, "t_kmpc_users", USERS_SCRIPT, "users", {})
    assert r["passed"], f"{r['reason']}\n{testlog[-4000:]}"
    assert "*** Success: kmpc users mode" in testlog, testlog[-4000:]
    logs = out / "tests_t_kmpc_users.logs"
    kdc_log = (logs / "kdc.log").read_text(errors="replace")
    # The user's login: the reply under its aes256-cts key (a handle in the
    # KDB: computed by the cluster), the TGT under the MPC-held krbtgt, the
    # client offering MIT's default enctypes only (no MPC enctype added).
    logins = [l for l in kdc_log.splitlines()
              if "AS_REQ" in l and "ISSUE" in l and "user@KRBTEST.COM for krbtgt/" in l]
    assert logins, kdc_log[-3000:]
    for l in logins:
        assert "rep=aes256-cts-hmac-sha1-96(18)" in l and "tkt=aes256-ctr-mpc" in l, l
        offered = re.search(r"AS_REQ \(\d+ etypes \{([^}]*)\}", l)
        assert offered and "aes256-cts-hmac-sha1-96" in offered.group(1), l
        assert "ctr-mpc" not in offered.group(1), l
    assert any("TGS_REQ" in l and "ISSUE" in l for l in kdc_log.splitlines()), kdc_log[-3000:]


def test_all_mode_leaves_only_the_master_key(tmp_path):
    r, out, testlog = run_k5test_script(tmp_path, "t_kmpc_all", ALL_SCRIPT, "all", {})
    assert r["passed"], f"{r['reason']}\n{testlog[-4000:]}"
    assert "*** Success: kmpc all mode" in testlog, testlog[-4000:]
    assert r["kadmind_in_cluster"] == r["realms"] == 1, r
    # kdb_dump_ref.py's reading of the realm's KDB: K/M's key alone.
    assert r["kdb_real_keys"] == {"testdir": []}, r["kdb_real_keys"]
    # kadmind's keys: new ones in the cluster. kiprop's is there from its
    # creation on, so its ktadd deals the new key (0020-kdb-deal-new-keys
    # protects kadmind's principals once they hold a handle) and the share
    # after it finds it shared; kpropd's keytab holds that key.
    assert re.search(r"kadmin/changepw(@\S+)?: shared from a random key as "
                     r"aes256-cts-hmac-sha1-96", testlog), testlog[-4000:]
    assert re.search(r"kiprop/\S+: already shared", testlog), testlog[-4000:]
    assert re.search(r"kiprop/\S+: kvno = 3, keytab entry valid", testlog), testlog[-4000:]


def test_restarted_cluster_keeps_its_server_flags(tmp_path):
    r, out, testlog = run_k5test_script(tmp_path, "t_kmpc_restart", SCRIPT, "krbtgt",
                                        {"KMPC_SERVER_FLAGS": "--security=malicious"})
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
