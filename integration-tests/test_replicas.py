"""A primary KDC and a replica KDC serving one kmpc realm from one MPC cluster.

Real daemons only (kmpc_harness/replica.py): three kmpc-mpc-server processes,
the primary's krb5kdc and kadmind (kmpc's key dealer loaded, iprop enabled),
the replica's krb5kdc, and MIT's kprop/kpropd, all on 127.0.0.1. Each KDC
has its own kdcmpc module instance and its own client certificate, pinned by
the servers.

The tests run in order on one set of daemons (bringing them up is most of
the time): kprop (full) and then kpropd in iprop mode (incremental) each
carry a password change (kpasswd, then the kadm5 RPC, through kadmind with
the key dealer) and a new protected principal to the replica, where the new
password logs in and the old one does not; after every admin operation and
every propagation, each KDB, read with the master key (kmpc-kdb-handle
keys), holds only handles for the protected principals and none of the keys
derived independently from their passwords (RFC 3962 string-to-key,
ctr_mpc_ref.py); with kiprop/HOST and kadmind's keys moved into the
cluster, kpropd authenticates through it (kadmind has the cluster decrypt
its AP-REQ) and iprop carries a user added through kadmind, whose key the
dealer deals, to the replica, where the user logs in; a krbtgt rotated
with -keepold leaves the replica issuing until iprop brings the new kvno; a client listing both KDCs logs in with
either one down; only the pinned per-KDC certificates do MPC work, and
revoking the replica's stops its MPC work and not the primary's.
(deploy/systemd/kmpc-kpropd.service is verified with the other units, in
test_deploy.py.)
"""
import hashlib
import os
import re
import secrets
import subprocess
import sys
import time

import pytest

import ctr_mpc_ref
import test_kdb_rewrite as kdb_rewrite
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import replica as kmpc_replica
from kmpc_harness.cluster import default_salt

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server",
                           "mpc-server/libkmpc_dealer.so", "kdc-plugin/libkmpc_kdc.so",
                           "kdc-plugin/kmpc-kdb-handle")

MPC_ENCTYPES = ("aes256-ctr-mpc", "aes128-ctr-mpc")
# The realm's supported_enctypes names aes256-cts too, so the key dealer
# also gives a protected user a handle of it (docs/design/enctype.md).
HANDLE_ENCTYPES = MPC_ENCTYPES + ("aes256-cts-hmac-sha1-96", "aes128-cts-hmac-sha1-96")
CTS256 = "aes256-cts-hmac-sha1-96"


def pw(tag):
    return f"{tag}-{secrets.token_hex(6)}"


class State:
    """The set of daemons and what the tests did to it: every protected
    principal with every password it ever had."""

    def __init__(self, rs):
        self.rs = rs
        self.passwords = {}

    @property
    def replica(self):
        return self.rs.replicas[0]


@pytest.fixture(scope="module")
def st(tmp_path_factory, request):
    t0 = time.monotonic()
    # The primary's first tickets under kiprop's and kadmind's keys in the
    # cluster compile CBC-CTS programs (test_cts_handles.COLD_PROGRAMS).
    rs = kmpc_replica.ReplicaSet(str(tmp_path_factory.mktemp("replicas")),
                                 module_options={"deadline_ms": "30000"})
    s = State(rs)
    try:
        rs.create().start()
        yield s
    finally:
        rs.stop()
        tr = request.config.pluginmanager.get_plugin("terminalreporter")
        cap = request.config.pluginmanager.get_plugin("capturemanager")
        if tr is not None and cap is not None:
            with cap.global_and_fixture_disabled():
                tr.write_line(f"\ntest_replicas.py: {time.monotonic() - t0:.1f} s "
                              "(daemons up to down)")


@pytest.fixture(autouse=True)
def _logs_on_failure(st, request):
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        sys.stderr.write(f"\n===== daemon logs for {request.node.name} =====\n"
                         + st.rs.logs() + "\n")


# ---- what the KDBs hold -------------------------------------------------------

def derived_keys(realm, princ, password):
    """The aes256/aes128 keys string-to-key gives for password with princ's
    default salt, computed here (not by krb5)."""
    salt = default_salt(f"{princ}@{realm}").encode()
    return [ctr_mpc_ref.string_to_key(e, password.encode(), salt) for e in MPC_ENCTYPES]


def assert_handles_only(kdc, princ, passwords=()):
    """kdc's KDB entry for princ, read with the master key, holds only
    handles of MPC enctypes, and none of the keys derived from passwords
    (nor their SHA-256, which is what kmpc-kdb-handle prints for a real
    key). Returns the rows."""
    rows = kdc.kdb_keys(princ)
    assert rows, f"{kdc.dir}: {princ} has no keys"
    for kvno, enctype, kind, _ in rows:
        assert kind == "handle", f"{kdc.dir}: {princ} kvno {kvno} {enctype} is a real key"
        assert enctype in HANDLE_ENCTYPES, (princ, enctype)
    # A boolean: a failing assert must not print a key.
    found = password_key_in(rows, kdc.realm, princ, passwords)
    assert not found, f"{kdc.dir}: a key of {princ}'s password is in the KDB"
    return rows


def password_key_in(rows, realm, princ, passwords):
    """Does any of rows (kdb_keys) hold a key derived from one of passwords,
    or its SHA-256 (what kmpc-kdb-handle prints for a real key)?"""
    values = {v for _, _, _, v in rows}
    return any(key.hex() in values or hashlib.sha256(key).hexdigest() in values
               for password in passwords
               for key in derived_keys(realm, princ, password))


def check_kdbs(st, not_yet=()):
    """Every KDB that exists (primary, replica): krbtgt and every protected
    principal hold handles only, none of any password's keys. not_yet:
    principals made on the primary since the replica's last propagation
    (absent there, and checked to be)."""
    rs = st.rs
    for kdc in [rs.primary] + [r for r in rs.replicas if r.has_kdb()]:
        assert_handles_only(kdc, rs.primary.tgs)
        for princ, pws in st.passwords.items():
            if kdc is not rs.primary and princ in not_yet:
                out = kdc.run(["kadmin.local", "-r", kdc.realm, "-q", f"getprinc {princ}"],
                              expected_code=None)
                assert "does not exist" in out, out
                continue
            assert_handles_only(kdc, princ, pws)


def same_keys(a, b, princ):
    """princ holds the same handles (kvno, enctype, key id) in both KDBs."""
    assert sorted(a.kdb_keys(princ)) == sorted(b.kdb_keys(princ)), princ


# ---- logins ------------------------------------------------------------------

def kinit_ok(env_kdc, princ, password, env=None):
    env_kdc.run(["kinit", princ], input=password + "\n", env=env)


def kinit_fails(kdc, princ, password, env=None):
    out = kdc.run(["kinit", princ], input=password + "\n", env=env, expected_code=None)
    assert "Password incorrect" in out or "Preauthentication failed" in out, out


def kinit_unavailable(kdc, princ, password, env=None):
    """A login the cluster cannot serve (a stale handle): a service is
    unavailable, not a wrong password, so the KDB's lockout does not count it."""
    out = kdc.run(["kinit", princ], input=password + "\n", env=env, expected_code=None)
    assert "A service is not available" in out, out
    assert "Password incorrect" not in out, out


def kdc_log_tail(kdc, since):
    with open(kdc.kdc_log, errors="replace") as f:
        f.seek(since)
        return f.read()


def log_size(kdc):
    return os.path.getsize(kdc.kdc_log) if os.path.exists(kdc.kdc_log) else 0


# ---- the tests ------------------------------------------------------------------

def test_kprop_full_carries_password_change_and_new_principal(st):
    rs, r = st.rs, st.replica
    r.start_kpropd(iprop=False)
    a1 = pw("alice1")
    rs.add_principal("alice", a1)
    st.passwords["alice"] = [a1]
    check_kdbs(st)
    rs.propagate_full(r)
    r.start()
    check_kdbs(st)
    same_keys(rs.primary, r, "alice")
    kinit_ok(r, "alice", a1)

    a2, b1 = pw("alice2"), pw("bob1")
    out = rs.change_password("alice", a1, a2, how="kpasswd")
    assert "Password changed" in out, out
    st.passwords["alice"].append(a2)
    rs.add_principal("bob", b1)
    st.passwords["bob"] = [b1]
    plain = pw("plain")
    rs.primary.kadmin_local(f"addprinc -e aes256-cts-hmac-sha1-96:normal -pw {plain} plain")
    check_kdbs(st, not_yet={"bob"})
    # Not propagated yet: the replica still has alice's old handle, whose
    # shares the dealer removed from the cluster when the change committed
    # (kdc-plugin/dealer/dealer.cc). So until the next propagation
    # neither password logs in there (docs/admin-guide.md, "Replica KDCs").
    since = log_size(r)
    kinit_unavailable(r, "alice", a2)
    kinit_unavailable(r, "alice", a1)
    assert "holds no shares for this key id" in kdc_log_tail(r, since)
    info = r.kadmin_local("getprinc alice")
    assert re.search(r"Failed password attempts: 0\b", info), info

    rs.propagate_full(r)
    check_kdbs(st)
    for princ in ("alice", "bob", rs.primary.tgs):
        same_keys(rs.primary, r, princ)
    kinit_ok(r, "alice", a2)
    kinit_fails(r, "alice", a1)
    kinit_ok(r, "bob", b1)
    r.run(["kvno", kmpc_cluster.SERVICE])
    # The check above can see a real key: an unprotected principal's, made
    # from a password, is found in the replica's KDB by the same derivation.
    assert password_key_in(r.kdb_keys("plain"), r.realm, "plain", [plain])


def test_iprop_incremental_carries_password_change_and_new_principal(st):
    rs, r = st.rs, st.replica
    r.stop_kpropd()
    r.start_kpropd(iprop=True)
    # The replica has no update log yet: kadmind gives it a full resync
    # first (kdb5_util dump, kprop to its kpropd).
    kind, _ = r.iprop_wait(r.kpropd.offset)
    assert kind == "full", kind
    check_kdbs(st)

    a2 = st.passwords["alice"][-1]
    a3, c1 = pw("alice3"), pw("carol1")
    out = rs.change_password("alice", a2, a3, how="kadmin")
    assert "changed" in out, out
    st.passwords["alice"].append(a3)
    rs.add_principal("carol", c1)
    st.passwords["carol"] = [c1]
    check_kdbs(st, not_yet={"carol"})

    kind, _ = r.iprop_poll()
    assert kind == "incremental", kind
    log = r.run(["kproplog"])
    assert "Update principal : alice@" in log and "Update principal : carol@" in log, log
    check_kdbs(st)
    for princ in ("alice", "carol"):
        same_keys(rs.primary, r, princ)
    kinit_ok(r, "alice", a3)
    kinit_fails(r, "alice", a2)
    kinit_ok(r, "carol", c1)


def test_iprop_with_kadminds_and_kipropd_keys_in_the_cluster(st):
    """kiprop/HOST (kpropd's client and kadmind's iprop service) and
    kadmind's kadmin/admin and kadmin/changepw moved into the cluster
    (docs/admin-guide.md, "Moving kadmind's keys"): kiprop's with
    --from-existing (the keytabs of kpropd and of the primary keep working),
    kadmind's with --randkey. kpropd, restarted, authenticates anew: its AS
    exchange under the kiprop handle (client and server) goes through the
    cluster, and kadmind has the cluster decrypt its AP-REQ (krb5 patch
    0026-Decrypt-tickets). The moves reach the replica by iprop, in a full
    resync (kmpc-admin rewrote the KDB and reset its update log); then a user
    added through kadmind (remote kadmin with a password: an AP-REQ to
    kadmin/admin), whose key the dealer deals, and a kpasswd change reach it
    too, and the user logs in through the replica's KDC; so does a refresh
    of the user's key ids (same kvno, new ids)."""
    rs, r = st.rs, st.replica
    p = rs.primary
    kiprop = f"kiprop/{rs.host}"
    p.admin("share", "--from-existing", "--service", f"--enctype={CTS256}", kiprop)
    p.move_kadmind_keys()
    moved = (kiprop, "kadmin/admin", "kadmin/changepw")
    for princ in moved:
        assert {(e, kind) for _, e, kind, _ in p.kdb_keys(princ)} == {(CTS256, "handle")}
    # Both moves replaced real keys, so kmpc-admin rewrote the primary's KDB
    # into fresh files and reset its update log (docs/admin-guide.md, "Old
    # keys after a move"): the replica gets them in a full resync.
    kind, _ = r.iprop_poll()
    assert kind == "full", kind
    for princ in moved:
        same_keys(p, r, princ)

    # A new iprop session: kpropd's credentials and AP-REQ under the handle.
    r.stop_kpropd()
    seen = kadmind_log_size(p)
    r.start_kpropd(iprop=True)
    kind, log = r.iprop_wait(r.kpropd.offset)
    assert kind in ("synchronized", "incremental"), kind
    assert "Cannot decrypt" not in kadmind_log(p, seen), kadmind_log(p, seen)

    d1, e1, e2 = pw("dora1"), pw("dora2"), pw("dora3")
    rs.add_principal("dora", d1)
    st.passwords["dora"] = [d1]
    out = rs.change_password("dora", d1, e1, how="kpasswd")
    assert "Password changed" in out, out
    st.passwords["dora"].append(e1)
    out = rs.change_password("dora", e1, e2, how="kadmin")
    assert "changed" in out, out
    st.passwords["dora"].append(e2)
    check_kdbs(st, not_yet={"dora"})
    kind, _ = r.iprop_poll()
    assert kind == "incremental", kind
    assert "Update principal : dora@" in r.run(["kproplog"])
    check_kdbs(st)
    same_keys(p, r, "dora")
    kinit_ok(r, "dora", e2)
    kinit_fails(r, "dora", e1)
    # A refresh switches dora's aes256-ctr-mpc handle to a new key id under
    # the same kvno: iprop carries that too (krb5 patch
    # 0030-Log-key-data-changes).
    (old,) = [v for _, e, _, v in p.kdb_keys("dora") if e == MPC_ENCTYPES[0]]
    p.admin("refresh", old, timeout=300)
    (new,) = [v for _, e, _, v in p.kdb_keys("dora") if e == MPC_ENCTYPES[0]]
    assert new != old
    kind, _ = r.iprop_poll()
    assert kind == "incremental", kind
    same_keys(p, r, "dora")
    kinit_ok(r, "dora", e2)
    # Only real keys left that are no kadmind's: status names none of these.
    _, out, _ = p.admin("status", "--kdb", expected_code=None)
    assert not any(princ in line for princ in moved for line in out.splitlines()
                   if "real keys" in line), out


def test_a_moved_key_is_in_no_file_of_either_kdc(st):
    """docs/admin-guide.md, "Old keys after a move": frank, with an
    ordinary aes256-cts key, reaches the replica incrementally (its update
    log's entry holds the key data, encrypted in the master key as in the
    primary's files); then he is moved with share --from-existing. The
    primary rewrites its KDB (no file of it holds the old key) and the
    replica gets a full resync, whose load resets its update log's header
    only: the old entry's bytes stay there until kmpc-admin rewrite-kdb on
    the replica (kpropd stopped), after which no file of it holds the key
    either, kpropd gets a full resync and frank logs in at the replica."""
    rs, r = st.rs, st.replica
    p = rs.primary
    f1 = pw("frank1")
    p.addprinc("frank", f1, enctypes=[CTS256])
    kind, _ = r.iprop_poll()
    assert kind == "incremental", kind
    blobs = kdb_rewrite.stored_keys(p, ["frank"])
    assert set(kdb_rewrite.blobs_found(r, blobs)) == {"frank"}
    _, out, err = p.admin("share", "--from-existing", f"--enctype={CTS256}", "frank")
    assert kdb_rewrite.REWROTE in err, out + err
    assert not kdb_rewrite.blobs_found(p, blobs)
    kind, _ = r.iprop_poll()
    assert kind == "full", kind
    same_keys(p, r, "frank")
    assert kdb_rewrite.blobs_found(r, blobs) == {"frank": ["principal.ulog"]}
    r.stop_kpropd()
    proc = subprocess.run([kmpc_cluster.find_built("mpc-server/kmpc-admin"), "rewrite-kdb"],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in r.env.items() if k != "KMPC_ADMIN_CONFIG"})
    assert proc.returncode == 0 and kdb_rewrite.REWROTE in proc.stderr, \
        proc.stdout + proc.stderr
    assert not kdb_rewrite.blobs_found(r, blobs)
    r.start_kpropd(iprop=True)
    kind, _ = r.iprop_wait(r.kpropd.offset)
    assert kind in ("full", "synchronized", "incremental"), kind
    same_keys(p, r, "frank")
    kinit_ok(r, "frank", f1)


def kadmind_log_size(kdc):
    path = os.path.join(kdc.dir, "kadmind.log")
    return os.path.getsize(path) if os.path.exists(path) else 0


def kadmind_log(kdc, since=0):
    with open(os.path.join(kdc.dir, "kadmind.log"), errors="replace") as f:
        f.seek(since)
        return f.read()


def tgt_kvno(kdc):
    """The kvno of the krbtgt key kdc's TGS uses now (kvno of a ticket for
    the krbtgt itself, got with the TGT in the ccache)."""
    out = kdc.run(["kvno", f"krbtgt/{kdc.realm}@{kdc.realm}"])
    return int(re.search(r"kvno = (\d+)", out).group(1))


def test_krbtgt_rotation_with_keepold_keeps_the_replica_issuing(st):
    """docs/admin-guide.md, "Replica KDCs": the krbtgt rotated with
    -keepold on the primary; the replica, not yet updated, still issues under the old kvno
    (its shares are kept), then under the new one once iprop brings it; the
    old kvno purged afterwards. No KDB ever holds a krbtgt key."""
    rs, r = st.rs, st.replica
    p = rs.primary
    alice = st.passwords["alice"][-1]
    kinit_ok(r, "alice", alice)
    old = tgt_kvno(r)
    p.kadmin_local(f"cpw -randkey -keepold {p.tgs}")
    check_kdbs(st)
    kinit_ok(r, "alice", alice)
    assert tgt_kvno(r) == old
    kind, _ = r.iprop_poll()
    assert kind == "incremental", kind
    same_keys(p, r, p.tgs)
    kinit_ok(r, "alice", alice)
    assert tgt_kvno(r) == old + 1
    p.kadmin_local(f"purgekeys -keepkvno {old + 1} {p.tgs}")
    kind, _ = r.iprop_poll()
    assert kind == "incremental", kind
    rows = assert_handles_only(r, p.tgs)
    assert {int(k) for k, _, _, _ in rows} == {old + 1}
    check_kdbs(st)
    kinit_ok(r, "alice", alice)
    kinit_ok(p, "alice", alice)


def test_client_fails_over_between_kdcs(st):
    rs, r = st.rs, st.replica
    p = rs.primary
    env = rs.client_conf(os.path.join(rs.dir, "both.conf"), [p, r])
    alice = st.passwords["alice"][-1]
    kinit_ok(p, "alice", alice, env=env)
    for down, up in ((p, r), (r, p)):
        down.stop_kdc()
        since = log_size(up)
        kinit_ok(p, "alice", alice, env=env)
        p.run(["kvno", kmpc_cluster.SERVICE], env=env)
        assert re.search(r"AS_REQ .*ISSUE.*alice@", kdc_log_tail(up, since)), \
            f"{up.dir} did not serve the login"
        if down is p:
            p.start()
        else:
            r.start()
    kinit_ok(p, "alice", alice, env=env)


def mpc_job(cluster, client, key_id):
    """One keystream job on the servers with certs/<client>.pem: the
    kmpc-mpc-client run (returncode, stdout)."""
    p = subprocess.run([kmpc_cluster.find_built("mpc-server/kmpc-mpc-client"),
                        f"--servers={cluster.servers}", f"--certs={cluster.certs}",
                        f"--client={client}", "--timeout_ms=10000", "jobs"],
                       input=f"keystream {key_id} 1 16\n", capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def test_only_the_pinned_kdc_certificates_do_mpc_work(st):
    """Each KDC's own certificate is pinned; another certificate with the
    KDC's CN from the same CA (gen-certs.sh's kdc.pem) is refused."""
    cl = st.rs.primary.cluster
    # A keystream job names an AES-128 key (kmpc-mpc-client's job syntax)
    # of a service's kind: under a user's password-derived key the servers
    # run an AS exchange only, whichever certificate asks
    # (mpc-server/src/engine/user_key_rule.h), so a user's handle cannot
    # show that a certificate is let in. Put with the admin certificate.
    key_id = cl.client("put-key", f"--key_hex={secrets.token_hex(16)}",
                       "--key_kind=service").strip()
    assert re.fullmatch(r"[0-9a-f]{64}", key_id), key_id
    try:
        for name in st.rs.names:
            rc, out = mpc_job(cl, f"kdc-{name}", key_id)
            assert rc == 0 and out.startswith("ok "), out
        rc, out = mpc_job(cl, "kdc", key_id)
        assert rc != 0, out
    finally:
        cl.client("delete-key", f"--key_id_hex={key_id}")
    denied = ""
    for i in range(3):
        with open(cl.log_path(i), errors="replace") as f:
            denied += f.read()
    assert "certificate fingerprint not pinned" in denied


def test_revoking_the_replica_certificate_stops_only_its_mpc_work(st):
    rs, r = st.rs, st.replica
    p = rs.primary
    alice = st.passwords["alice"][-1]
    kinit_ok(r, "alice", alice)
    out = kmpc_replica.gen_certs(p.cluster.certs, "--revoke", rs.cert(r.name))
    assert "revoked" in out, out
    serial = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in", rs.cert(r.name)],
                            capture_output=True, text=True, check=True
                            ).stdout.strip().split("=")[1]
    # The servers re-read the CRL within a second of a change.
    deadline = time.monotonic() + 10
    while True:
        out = r.run(["kinit", "alice"], input=alice + "\n", expected_code=None)
        if "kinit:" in out:
            break
        assert time.monotonic() < deadline, "the replica still logs in after revocation"
        time.sleep(0.3)
    # KDC_ERR_SVC_UNAVAILABLE: what makes clients try the next KDC.
    assert "service is not available" in out, out
    assert r.kdc_alive()
    with open(r.kdc_log, errors="replace") as f:
        assert "the client certificate has been revoked" in f.read()
    # The servers refused the replica's certificate by its serial (the
    # module stops at the first refusal, so not every server need be asked).
    denied = 0
    for i in range(3):
        with open(p.cluster.log_path(i), errors="replace") as f:
            log = f.read()
        denied += bool(re.search(r"KeyOps: denied .*serial " + serial + r".*revoked", log))
    assert denied >= 1
    # The primary's certificate is untouched: its logins go on, and a client
    # listing the replica first fails over to the primary.
    kinit_ok(p, "alice", alice)
    env = rs.client_conf(os.path.join(rs.dir, "replica-first.conf"), [r, p])
    kinit_ok(p, "alice", alice, env=env)
