"""Cluster failures are not failed passwords (KDB lockout).

An encrypted timestamp under an MPC-held client key is decrypted by the
kdcmpc module. Only the verdict "the tag did not verify" says the password
is wrong; every other module error is the cluster's: KRB5_KT_NOTFOUND is
what the kmpc module answers for JOB_UNKNOWN_KEY (kdc-plugin module.cc
KrbErrorFromStatus), which all three servers report as soon as one of them
has no shares for the key (engine agreement.h KeyPresence): one malicious
server, or one whose store was lost. The KDC's layer (patch 0008
mpc_map_result) turns such errors into KDC_ERR_SVC_UNAVAILABLE, which the
KDB lockout audit does not count (plugins/kdb/db2/lockout.c counts only
PREAUTH_FAILED and BAD_INTEGRITY) and which the client reports as a service
being unavailable, not as a wrong password. Otherwise a user typing the
right password would be locked out after maxfailure logins, and stay locked
after the cluster is repaired.

Each test also checks that a wrong password is still counted, so that the
fix cannot have turned real failures into uncounted ones.
"""
import os
import re
import shutil

from kmpc_harness.cluster import password as _password

# com_err text of KRB5KDC_ERR_SVC_UNAVAILABLE (krb5's kdb5_err/krb5_err).
UNAVAILABLE = "A service is not available that is required to process the request"


def _failed_attempts(realm, princ):
    info = realm.kadmin_local(f"getprinc {princ}")
    failed = re.search(r"Failed password attempts: (\d+)", info)
    assert failed is not None, info
    return int(failed.group(1)), info


def _lockout_policy(realm, princ):
    realm.kadmin_local("addpol -maxfailure 2 -failurecountinterval 0 "
                       "-lockoutduration 3600 lockpol")
    realm.kadmin_local(f"modprinc -policy lockpol {princ}")


def _alice_key_ids(realm):
    out, _ = realm.kdb_handle_run("keys", "alice")
    return set(re.findall(r"\b[0-9a-f]{64}\b", out))


def _assert_unavailable_not_counted(realm, princ, outs):
    failed, info = _failed_attempts(realm, princ)
    # The right password is never counted as a wrong one, and the client is
    # told that a service is unavailable, not that its password is wrong.
    assert failed == 0, info + "\n" + "\n".join(outs)
    assert not any("Password incorrect" in o for o in outs), outs
    assert all(UNAVAILABLE in o for o in outs), outs


def _assert_wrong_password_counted(realm, princ):
    """One wrong password is counted; a right one then resets the count."""
    out = realm.kinit(princ, "not-" + realm.passwords[princ], expected_code=1)
    assert "Password incorrect" in out, out
    failed, info = _failed_attempts(realm, princ)
    assert failed == 1, info
    realm.login(princ)
    failed, info = _failed_attempts(realm, princ)
    assert failed == 0, info


def test_cluster_missing_key_is_not_a_failed_password(kmpc_factory):
    """krb5's test module (clusters=0) answers KRB5_KT_NOTFOUND for a key id
    missing from its key file, as the kmpc module does for JOB_UNKNOWN_KEY."""
    realm = kmpc_factory(clusters=0, test_module_delay_ms=30).setup(users=("alice",))
    _lockout_policy(realm, "alice")
    ids = _alice_key_ids(realm)
    assert ids, "alice holds no key handle"
    # The "cluster" loses alice's key (read by the module at start-up).
    with open(realm.test_keyfile) as f:
        lines = f.readlines()
    kept = [l for l in lines if l.split()[0] not in ids]
    assert len(kept) == len(lines) - len(ids), "alice's key id not in the key file"
    with open(realm.test_keyfile, "w") as f:
        f.writelines(kept)
    realm.start()

    outs = [realm.login("alice", expected_code=1) for _ in range(3)]
    log = realm.kdc_log_text()
    assert "kdcmpc: DECRYPT job (usage 1) failed" in log, log
    _assert_unavailable_not_counted(realm, "alice", outs)

    # The cluster is repaired: the same password logs in, nothing was locked.
    realm.stop_kdc()
    with open(realm.test_keyfile, "w") as f:
        f.writelines(lines)
    realm.start_kdc()
    realm.login("alice")
    _assert_wrong_password_counted(realm, "alice")


def test_one_server_without_shares_is_not_a_failed_password(kmpc_factory):
    """The same on the real module and cluster: bob's shares are deleted on
    server 1 only (as one malicious or damaged server would claim); all
    three servers then answer JOB_UNKNOWN_KEY for bob's timestamp. Server 1's
    store is then restored from a copy taken before (the repair)."""
    r = kmpc_factory(module="real", module_options={"deadline_ms": 3000})
    r.setup_krbtgt()
    r.add_service()
    r.add_users({"bob": _password()})
    _lockout_policy(r, "bob")
    r.start()
    r.login("bob")  # the right password works while all three hold the key
    store = r.cluster.store_dir(1)
    backup = store + ".backup"
    r.cluster.stop_party(1)
    shutil.copytree(store, backup)
    r.cluster.start_party(1)
    r.cluster.wait_ring()
    r.login_until_ok("bob")

    r.cluster.client("delete-key", f"--key_id_hex={r.key_id('bob')}", "--only_party=1")
    outs = [r.login("bob", expected_code=1, timeout=30) for _ in range(3)]
    log = r.kdc_log_text()
    assert "no shares on MPC party 1" in log, log
    _assert_unavailable_not_counted(r, "bob", outs)

    r.cluster.stop_party(1)
    shutil.rmtree(store)
    os.rename(backup, store)
    r.cluster.start_party(1)
    r.cluster.wait_ring()
    r.login_until_ok("bob")
    _assert_wrong_password_counted(r, "bob")
