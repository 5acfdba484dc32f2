"""Key changes through MIT's own tools keep MPC-protected keys in the cluster.

Real binaries only: kadmin.local, kadmind with the real kpasswd and kadmin
clients, kinit changing an expired password, krb5kdc with the kmpc module,
three kmpc-mpc-server processes, and kmpc's key dealer
(kdc-plugin/dealer/dealer_module.cc) loaded by the patched libkdb5
(krb5's key dealer patch).

What the KDB holds is read with the master key (kmpc-kdb-handle keys:
libkdb5 decrypts each key_data entry and prints a handle's key id or the
SHA-256 of a real key), never by scanning a dump, whose key data is
encrypted. Each test derives the new key independently from the password
(RFC 3962 string-to-key, ctr_mpc_ref.py) and checks that neither it nor its
hash is in the KDB or in any log.
"""
import hashlib
import os
import re
import subprocess
import time

import pytest

import ctr_mpc_ref
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.cluster import default_salt
from kmpc_harness.realm import binpath as realm_binpath

ADMIN = "root/admin"
ADMIN_PW = "admin-Pw-4821"


def derived(princ, password, realm):
    """The aes256/aes128 keys MIT derives from password with the default salt."""
    salt = default_salt(f"{princ}@{realm}").encode()
    return {e: ctr_mpc_ref.string_to_key(e, password.encode(), salt)
            for e in ("aes256-ctr-mpc", "aes128-ctr-mpc")}


def assert_only_handles(kr, princ, password=None):
    """princ's KDB entry holds handles only (of the MPC enctypes), and none
    of the keys derived from password, nor their hashes, are in it or in any
    log of the realm."""
    rows = kr.kdb_keys(princ)
    assert rows, f"{princ} has no keys"
    for kvno, enctype, kind, value in rows:
        assert kind == "handle", f"{princ} kvno {kvno} {enctype}: a real key is in the KDB"
        # The realm's supported_enctypes also names aes256-cts-hmac-sha1-96:
        # a protected user gets a handle of it too (krbtgt/* does not).
        assert enctype in ("aes256-ctr-mpc", "aes128-ctr-mpc", "aes256-cts-hmac-sha1-96")
        if princ.startswith("krbtgt/"):
            assert enctype != "aes256-cts-hmac-sha1-96"
    if password is not None:
        secrets_ = []
        for key in derived(princ, password, kr.realm).values():
            secrets_ += [key.hex(), hashlib.sha256(key).hexdigest()]
        hashes = {value for _, _, kind, value in rows if kind == "key"}
        for s in secrets_:
            assert s not in hashes
        for name in os.listdir(kr.dir):
            if name.endswith((".log", ".out")):
                with open(os.path.join(kr.dir, name), "rb") as f:
                    data = f.read()
                for key in derived(princ, password, kr.realm).values():
                    assert key not in data and key.hex().encode() not in data, name
        mpc_logs = os.path.join(kr.dir, "mpc")
        for root, _, files in os.walk(mpc_logs):
            for name in files:
                if name.endswith(".log"):
                    with open(os.path.join(root, name), "rb") as f:
                        data = f.read()
                    for key in derived(princ, password, kr.realm).values():
                        assert key not in data and key.hex().encode() not in data
    return rows


def handle_ids(rows):
    return sorted(value for _, _, kind, value in rows if kind == "handle")


@pytest.fixture
def realm(kmpc_factory):
    # kadmind's keys in the cluster (below): the first ticket to each
    # compiles a CBC-CTS program on the servers (test_cts_handles.COLD_PROGRAMS).
    kr = kmpc_factory(dealer=True, module_options={"deadline_ms": "30000"})
    # The krbtgt key that kdb5_util create made is replaced by one made in
    # the cluster (protect = krbtgt/* by default): no KDB ever held it.
    kr.kadmin_local(f"setstr {kr.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    kr.kadmin_local(f"cpw -randkey {kr.tgs}")
    # The administrator keeps an ordinary key (not protected: no MPC enctype,
    # no protect pattern), so kadmin works while the cluster is down.
    kr.kadmin_local(f"addprinc -e aes256-cts-hmac-sha1-96:normal -pw {ADMIN_PW} {ADMIN}")
    # kadmind's own keys in the cluster, as an administrator moves them.
    kr.move_kadmind_keys()
    kr.start()
    kr.start_kadmind()
    return kr


def kinit_ok(kr, princ, password):
    kr.kinit(princ, password)


def kinit_fails(kr, princ, password):
    out = kr.kinit(princ, password, expected_code=None)
    assert "Password incorrect" in out or "Preauthentication failed" in out, out


def status_ok(kr, also=()):
    """status --kdb finds nothing wrong but the real keys the realm keeps
    on purpose: ADMIN's, so that kadmin.local's admin can still log in
    while the cluster is down, and those of the principals in also
    (status names every principal holding real keys, kadmind's too)."""
    rc, out, err = kr.admin("status", "--kdb", expected_code=None)
    problems = [l for l in out.splitlines()
                if l.startswith("kdb: ") and not l.startswith("kdb: realm ")]
    allowed = [f"kdb: {p}@{kr.realm} holds real keys in the KDB" for p in (ADMIN, *also)]
    assert all(l.startswith(tuple(allowed)) for l in problems), out + err
    assert rc == (1 if problems else 0), out + err
    assert "unreferenced" not in out or " 0 unreferenced" in out, out
    return out


def test_krbtgt_made_in_cluster(realm):
    kr = realm
    rows = assert_only_handles(kr, kr.tgs)
    assert {r[0] for r in rows} == {"2"}
    status_ok(kr)


def assert_changed(kr, name, old, new):
    """After name's first password change (old -> new): the KDB holds only
    handles, at kvno 2, of keys that are not the new password's; the new
    password logs in through the cluster, the old one fails; the old key's
    shares are gone from the servers (status: nothing unreferenced).
    Returns the KDB's rows."""
    rows = assert_only_handles(kr, name, new)
    assert {r[0] for r in rows} == {"2"}
    kinit_ok(kr, name, new)
    kinit_fails(kr, name, old)
    status_ok(kr)
    return rows


def test_addprinc_and_kadmin_local_cpw(realm):
    kr = realm
    kr.kadmin_local("addprinc -pw Old-pw-1111 alice")
    before = handle_ids(assert_only_handles(kr, "alice", "Old-pw-1111"))
    kinit_ok(kr, "alice", "Old-pw-1111")
    kr.kadmin_local("cpw -pw New-pw-2222 alice")
    rows = assert_changed(kr, "alice", "Old-pw-1111", "New-pw-2222")
    assert not set(handle_ids(rows)) & set(before)


def test_randkey_and_keepold(realm):
    kr = realm
    kr.kadmin_local("addprinc -pw Bob-pw-3333 bob")
    first = handle_ids(kr.kdb_keys("bob"))
    kr.kadmin_local("cpw -randkey -keepold bob")
    rows = assert_only_handles(kr, "bob", "Bob-pw-3333")
    assert {r[0] for r in rows} == {"1", "2"}
    assert set(first) <= set(handle_ids(rows))
    kr.kadmin_local("cpw -randkey bob")
    rows = assert_only_handles(kr, "bob")
    assert {r[0] for r in rows} == {"3"}
    kinit_fails(kr, "bob", "Bob-pw-3333")
    status_ok(kr)


def _change(kr, how, name, old, new):
    """Change name's password from old to new with one of MIT's tools;
    return what it printed."""
    if how == "kpasswd":  # the change-password protocol, served by kadmind
        return kr.run(["kpasswd", name], input=f"{old}\n{new}\n{new}\n")
    if how == "kadmin":   # the kadm5 RPC to kadmind
        return kr.run(["kadmin", "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW,
                       "-q", f"cpw -pw {new} {name}"])
    # kinit of an expired password: it asks for a new one (kpasswd protocol)
    return kr.run(["kinit", name], input=f"{old}\n{new}\n{new}\n")


@pytest.mark.parametrize("how,flags,says", [
    ("kpasswd", "", "Password changed"),
    ("kadmin", "", "changed"),
    ("expired-kinit", "+needchange", "expired"),
])
def test_password_change_through_kadmind(realm, how, flags, says):
    kr = realm
    kr.kadmin_local(f"addprinc -pw Carol-old-44 {flags} carol")
    out = _change(kr, how, "carol", "Carol-old-44", "Carol-new-55")
    assert says in out.lower() or says in out, out
    assert_changed(kr, "carol", "Carol-old-44", "Carol-new-55")


def test_keys_cannot_be_extracted(realm):
    """ktadd -norandkey extracts no handle; ktadd (a new random key) gives
    the keytab the key dealt, while the KDB holds its handle only."""
    kr = realm
    kr.kadmin_local("addprinc -pw Fay-pw-1212 fay")
    before = kr.kdb_keys("fay")
    kt = os.path.join(kr.dir, "fay.keytab")
    out = kr.kadmin_local(f"ktadd -norandkey -k {kt} fay", expected_code=None)
    assert "held by the MPC cluster" in out, out
    assert not os.path.exists(kt) or os.path.getsize(kt) <= 2
    assert kr.kdb_keys("fay") == before
    kinit_ok(kr, "fay", "Fay-pw-1212")
    out = kr.kadmin_local(f"ktadd -k {kt} fay")
    assert "added to keytab" in out, out
    assert {r[0] for r in kr.kdb_keys("fay")} == {"2"}
    assert_only_handles(kr, "fay")
    kr.run(["kinit", "-k", "-t", kt, "fay"])


@pytest.mark.parametrize("enctype", ["aes256-cts-hmac-sha1-96", "aes256-ctr-mpc"])
def test_remote_ktadd_gets_the_new_key_the_kdb_a_handle(realm, enctype):
    """kadmin (through kadmind) ktadd of a principal whose only keys are
    handles: the new random keys, dealt to the cluster, reach the remote
    client's keytab, and the KDB, read with the master key, holds only
    their handles. -norandkey extracts nothing and changes nothing."""
    kr = realm
    name = "ivy" if enctype.startswith("aes256-cts") else "jay"
    if enctype.startswith("aes256-cts"):
        # Only aes256-cts handles: the key moved as it is into the cluster.
        kr.kadmin_local(f"addprinc -e {enctype}:normal -pw Ivy-pw-5656 {name}")
        kr.admin("share", "--from-existing", f"--enctype={enctype}", name)
    else:
        kr.kadmin_local(f"addprinc -e {enctype}:normal -pw Jay-pw-5757 {name}")
    before = assert_only_handles(kr, name)
    assert {r[1] for r in before} == {enctype}
    kt = os.path.join(kr.dir, f"{name}-remote.keytab")
    out = kr.run(["kadmin", "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW,
                  "-q", f"ktadd -norandkey -k {kt} {name}"], expected_code=None)
    assert kr.kdb_keys(name) == before, out
    assert not os.path.exists(kt) or os.path.getsize(kt) <= 2, out
    out = kr.run(["kadmin", "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW,
                  "-q", f"ktadd -e {enctype}:normal -k {kt} {name}"])
    assert "added to keytab" in out, out
    after = assert_only_handles(kr, name)
    assert {(r[0], r[1]) for r in after} == {
        (str(int(before[0][0]) + 1), enctype)}, (before, after)
    kr.run(["kinit", "-k", "-t", kt, name])


def test_delprinc_removes_shares(realm):
    kr = realm
    kr.kadmin_local("addprinc -pw Gus-pw-3434 gus")
    _, before, _ = kr.admin("status", expected_code=0)
    kr.kadmin_local("delprinc -force gus")
    _, after, _ = kr.admin("status", expected_code=0)
    count = lambda s: int(s.split("keys: ")[1].split(" ")[0])
    # Its three handles: aes256-ctr-mpc, aes128-ctr-mpc, aes256-cts-hmac-sha1-96.
    assert count(after) == count(before) - 3, (before, after)
    status_ok(kr)


class KadminSession:
    """A remote kadmin session (kadm5 RPC to kadmind) opened now, as ADMIN,
    and authenticated by a first request; finish(query) sends one more
    request through the same RPCSEC_GSS context (no new AP-REQ) and ends
    the session, returning kadmin's output."""

    def __init__(self, kr):
        log = os.path.join(kr.dir, "kadmind.log")
        seen = os.path.getsize(log)
        self.proc = subprocess.Popen(
            [realm_binpath("kadmin"), "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=kr.env)
        self.proc.stdin.write(f"getprinc {ADMIN}\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + 60
        while "kadm5_get_principal" not in open(log).read()[seen:]:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.proc.kill()
                raise AssertionError("kadmin's first request did not reach kadmind:\n"
                                     + self.proc.communicate()[0])
            time.sleep(0.05)

    def finish(self, query):
        out, _ = self.proc.communicate(f"{query}\nquit\n", timeout=90)
        return out


@pytest.mark.parametrize("how", ["kadmin.local", "kadmin", "addprinc", "kpasswd"])
def test_change_refused_with_a_server_down(realm, how):
    kr = realm
    kr.kadmin_local("addprinc -pw Hal-old-5656 hal")
    kinit_ok(kr, "hal", "Hal-old-5656")
    rows = kr.kdb_keys("hal")
    _, listing, _ = kr.admin("status", expected_code=0)
    if how == "kadmin":
        # kadmind has the cluster decrypt the ticket to kadmin/admin (its
        # key is in the cluster), so the kadmin session is opened while the
        # cluster is whole; the change comes through it afterwards.
        session = KadminSession(kr)
    kr.cluster.stop_party(1)
    if how == "kadmin.local":
        out = kr.kadmin_local("cpw -pw Hal-new-7878 hal", expected_code=None)
    elif how == "kadmin":
        out = session.finish("cpw -pw Hal-new-7878 hal")
    elif how == "kpasswd":
        # hal's own key is in the cluster: kpasswd cannot even authenticate.
        out = kr.run(["kpasswd", "hal"], input="Hal-old-5656\nHal-new-7878\nHal-new-7878\n",
                     expected_code=1)
    else:
        out = kr.kadmin_local("addprinc -pw Ivy-pw-9090 ivy", expected_code=None)
    # A readable refusal naming the cause, no secret.
    if how == "kadmin":
        # The kadm5 RPC carries the error code only; kadmind logs the rest.
        assert "The MPC cluster could not store the new key; nothing was changed" in out, out
    elif how != "kpasswd":
        assert "could not be stored on the MPC servers" in out, out
    assert "Hal-new-7878" not in out and "Hal-old-5656" not in out
    assert kr.kdb_keys("hal") == rows
    if how == "addprinc":
        assert "does not exist" in kr.kadmin_local("getprinc ivy", expected_code=None)
    kr.cluster.start_party(1)
    kr.cluster.wait_ring()
    # Nothing changed on the servers either, and the old password works.
    _, listing_after, _ = kr.admin("status", expected_code=0)
    count = lambda s: int(s.split("keys: ")[1].split(" ")[0])
    assert count(listing_after) == count(listing)
    # The login right after a party's restart: the KDC's channel to the
    # restarted server reconnects in the background (at most every 250 ms,
    # kdc-plugin/src/grpc_transport.cc) and a login before that is refused
    # as SVC_UNAVAILABLE. Only that refusal is retried; any other (a wrong
    # password, a changed key) fails at once.
    kr.kinit_until_ok("hal", "Hal-old-5656", timeout=10, pause=0.1,
                      only="A service is not available")
    status_ok(kr)


def realm_with_user5(kmpc_factory):
    """The krbtgt, kadmind's keys and user5's key in the cluster, status
    --kdb OK."""
    kr = kmpc_factory()
    kr.setup_krbtgt()
    kr.move_kadmind_keys()
    kr.addprinc("user5", "User5-old-11", enctypes=["aes256-ctr-mpc"])
    kr.share_passwords([("user5", "User5-old-11")])
    rc, out, _ = kr.admin("status", "--kdb", expected_code=None)
    assert rc == 0, out
    return kr


def test_status_names_what_is_exposed(kmpc_factory):
    """Without the dealer (a realm set up before it, or a KDC host where it
    is not configured), kadmin.local cpw writes real keys again: status
    --kdb exits non-zero and names the principal, and the key its handle
    referred to, now unreferenced on the servers."""
    kr = realm_with_user5(kmpc_factory)
    kr.kadmin_local("cpw -pw User5-new-22 user5")
    assert "key" in {row[2] for row in kr.kdb_keys("user5")}
    rc, out, _ = kr.admin("status", "--kdb", expected_code=None)
    assert rc == 1, out
    assert "kdb: user5@KMPC.TEST should be MPC-protected but holds real keys" in out, out
    assert "(user5@KMPC.TEST, kvno 2) is on the servers but no KDB handle refers" in out, out
    assert "status: PROBLEMS" in out, out


def test_status_names_a_key_id_held_by_two_principals(kmpc_factory):
    """Whoever writes the KDB locally (root on the KDC host, kadmin.local,
    a KDB load, a replica fed a crafted dump) can copy a principal's key
    handle into another entry: the KDC then issues tickets to that entry
    under the first principal's key, a silver ticket once the sname is
    rewritten, and nothing on the servers binds a key id to a principal.
    kmpc deals every key under an id of its own, so status --kdb names a
    key id that two principals refer to and exits 1 (on the code before,
    it exited 0: a non-author review, 2026-11-28)."""
    kr = realm_with_user5(kmpc_factory)
    kid = kr.key_id("user5")
    kr.addprinc("evil/x", enctypes=["aes256-ctr-mpc"])
    tool = kmpc_cluster.find_built("kdc-plugin/kmpc-kdb-handle")
    subprocess.run([tool, "-r", kr.realm, "set", "evil/x", "aes256-ctr-mpc", kid],
                   env=kr.env, timeout=60, check=True, capture_output=True)
    rc, out, _ = kr.admin("status", "--kdb", expected_code=None)
    assert rc == 1, out
    line = [x for x in out.splitlines() if f"key id {kid} is referred to by" in x]
    assert len(line) == 1, out
    assert "user5@KMPC.TEST" in line[0] and "evil/x@KMPC.TEST" in line[0], out
    assert "status: PROBLEMS" in out, out


def test_a_dealer_that_does_not_load_writes_no_real_key(realm):
    """kdc.conf names the key dealer, but its module does not load (a wrong
    path, a library missing after an upgrade): libkrb5 skips such a plugin
    module with a trace line only, and libkdb5 then wrote a protected
    principal's next keys as ordinary ones, a real key in the KDB (on the
    code before: a non-author review, 2026-11-28). Now the change is
    refused and the principal keeps its handles; an administrator who
    means to write real keys takes the dealer out of kdc.conf."""
    kr = realm
    kr.kadmin_local("addprinc -e aes256-ctr-mpc:normal -pw Dora-old-3131 dora")
    assert_only_handles(kr, "dora")
    before = kr.kdb_keys("dora")
    with open(kr.kdc_conf) as f:
        conf = f.read()
    broken = re.sub(r"(mpcdealer = \{\s*module = kmpc:)\S+", r"\1/nonexistent/libkmpc_dealer.so",
                    conf)
    assert broken != conf
    try:
        with open(kr.kdc_conf, "w") as f:
            f.write(broken)
        out = kr.kadmin_local("cpw -pw Dora-new-4242 dora", expected_code=None)
        assert "did not load" in out, out
        assert kr.kdb_keys("dora") == before
        assert_only_handles(kr, "dora", "Dora-new-4242")
    finally:
        with open(kr.kdc_conf, "w") as f:
            f.write(conf)
    kr.kadmin_local("cpw -pw Dora-new-4242 dora")
    assert_only_handles(kr, "dora", "Dora-new-4242")


def test_renewal_forwarded_tgt_and_u2u_through_the_cluster(realm):
    """With the krbtgt in the cluster (made there): kinit -R renews the TGT
    (decrypted and encrypted again by the three servers), a TGS-REQ for the
    krbtgt itself (what a forwarded or proxied TGT needs) is answered with a
    ticket the cluster encrypted, and user-to-user works."""
    kr = realm
    kr.kadmin_local("addprinc -pw Rita-pw-4242 rita")
    kr.add_service()
    kr.run(["kinit", "-r", "1d", "rita"], input="Rita-pw-4242\n")
    kr.run(["kinit", "-R"])
    out = kr.run(["klist", "-e"])
    assert "aes256-ctr-mpc" in out, out
    out = kr.run(["kvno", kmpc_cluster.SERVICE])
    assert "kvno = 1" in out, out
    out = kr.run(["kvno", kr.tgs])
    assert f"{kr.tgs}: kvno = 2" in out, out
    # User-to-user: the second ticket (rita's TGT) is decrypted by the
    # cluster too.
    out = kr.run(["kvno", "--u2u", kr.ccache, "rita"])
    assert "rita@KMPC.TEST: kvno" in out, out
    log = open(os.path.join(kr.dir, "krb5kdc.log")).read()
    assert "refusing" not in log, log


def test_refresh_in_a_realm_with_the_dealer(realm):
    """kmpc-admin refresh opens the KDB with the dealer disabled as every
    kmpc-admin command does (the module and kmpc-admin cannot share a
    process), moves every key to a new id and the logins go on."""
    kr = realm
    kr.kadmin_local("addprinc -pw Sam-pw-5151 sam")
    rows = kr.kdb_keys("sam")
    before = handle_ids(rows)
    cts = [v for _, e, _, v in rows if e == "aes256-cts-hmac-sha1-96"]
    assert len(cts) == 1, rows
    rc, out, err = kr.admin("-q", "refresh", "--all", expected_code=None, timeout=180)
    # Every key moved to a new id, the aes256-cts handle's too (its base
    # key and every dealt usage's material re-shared: test_cts_refresh.py).
    assert rc == 0, out + err
    after = handle_ids(assert_only_handles(kr, "sam", "Sam-pw-5151"))
    assert len(after) == len(before) and not set(after) & set(before), (before, after)
    kinit_ok(kr, "sam", "Sam-pw-5151")
    status_ok(kr)


def _kvno_ids(kr, princ):
    """{kvno: set of key ids} of princ's handles in the KDB."""
    out = {}
    for kvno, _, kind, value in assert_only_handles(kr, princ):
        out.setdefault(int(kvno), set()).add(value)
    return out


def _unreferenced(out):
    """The key ids status --kdb or purge-unreferenced names as referenced by
    no KDB handle."""
    return set(re.findall(r"key ([0-9a-f]{64}) \(.*\): no KDB handle refers", out) +
               re.findall(r"key ([0-9a-f]{64}) \(.*\) is on the servers but no KDB "
                          r"handle refers", out))


def test_purgekeys_shares_removed_by_purge_unreferenced(realm):
    """kadmin purgekeys (-keepkvno, then without) of a protected principal
    through kadmind: status --kdb reports the purged kvnos' shares as
    referenced by nothing, and kmpc-admin purge-unreferenced lists them
    (--dry-run and a "no" remove nothing) and removes exactly them; the
    current key stays and works. Fails on a kmpc without purge-unreferenced
    (the shares stayed on the servers for good)."""
    kr = realm
    kr.kadmin_local("addprinc -pw Hal-pw-1111 hal")
    kr.kadmin_local("cpw -pw Hal-pw-2222 -keepold hal")
    kr.kadmin_local("cpw -pw Hal-pw-3333 -keepold hal")
    ids = _kvno_ids(kr, "hal")
    assert sorted(ids) == [1, 2, 3], ids
    status_ok(kr)

    kr.run(["kadmin", "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW,
            "-q", "purgekeys -keepkvno 2 hal"])
    assert sorted(_kvno_ids(kr, "hal")) == [2, 3]
    rc, out, _ = kr.admin("status", "--kdb", expected_code=None)
    assert rc == 1 and _unreferenced(out) == ids[1], out
    assert "purge-unreferenced" in out, out

    _, out, _ = kr.admin("purge-unreferenced", "--dry-run")
    assert _unreferenced(out) == ids[1] and "dry run" in out, out
    rc, out, _ = kr.admin("purge-unreferenced", "--i-am-primary", input="n\n",
                          expected_code=1)
    assert "nothing was removed" in out, out
    rc, out, _ = kr.admin("status", "--kdb", expected_code=1)
    assert _unreferenced(out) == ids[1], out

    kr.kadmin_local("purgekeys hal")  # every kvno but the current one
    assert sorted(_kvno_ids(kr, "hal")) == [3]
    _, out, _ = kr.admin("purge-unreferenced", "--i-am-primary", "--grace-ms=300",
                         input="y\n")
    assert _unreferenced(out) == ids[1] | ids[2], out
    for i in ids[1] | ids[2]:
        assert f"key {i} " in out and "removed from every server" in out, out
    assert "purge-unreferenced: %d removed, 0 kept, 0 failed" % len(ids[1] | ids[2]) in out
    status_ok(kr)
    kinit_ok(kr, "hal", "Hal-pw-3333")
    _, out, _ = kr.admin("purge-unreferenced", "--i-am-primary", "--yes")
    assert "no unreferenced key" in out, out


def test_purge_unreferenced_keeps_other_realms_and_needs_the_primary(realm):
    """Clusters shared by realms: a key labelled with another realm's
    principal (or with no realm) is referenced by no handle of this KDB, yet
    purge-unreferenced lists and removes only this realm's unreferenced key
    and leaves the others on every server. Without --i-am-primary (the
    admin's word that this is the primary KDC, whose KDB a replica's lags)
    it removes nothing and exits 2; --dry-run needs no such word. Fails on
    a kmpc without the realm filter (the other realm's keys were removed)."""
    kr = realm
    ours, theirs, bare = (os.urandom(32).hex() for _ in range(3))
    for key_id, label in ((ours, f"gone@{kr.realm}"), (theirs, "bob@OTHER.EXAMPLE"),
                          (bare, "no-realm-label")):
        kr.cluster.client("put-key", f"--key_hex={os.urandom(32).hex()}",
                          f"--key_id_hex={key_id}", f"--label={label}")
    rc, _, err = kr.admin("purge-unreferenced", "--yes", expected_code=2)
    assert "--i-am-primary" in err, err
    _, out, _ = kr.admin("purge-unreferenced", "--dry-run")
    assert _unreferenced(out) == {ours}, out
    assert "2 keys whose label names no realm or another realm" in out, out
    _, out, _ = kr.admin("purge-unreferenced", "--i-am-primary", "--yes",
                         "--grace-ms=100")
    assert "purge-unreferenced: 1 removed, 0 kept, 0 failed" in out, out
    listed = kr.cluster.client("list-keys")
    assert ours not in listed and theirs in listed and bare in listed, listed


def test_no_real_key_in_the_password_history(realm):
    """A principal under a policy with a password history (history 3), its
    keys real until the dealer moves it into the cluster at a password
    change: afterwards its kadm5 history (read with the kadmin/history key
    from the KDB) holds no key of an earlier password, nor after its next
    change. On a kmpc without the fix the history kept both earlier
    passwords' real keys."""
    kr = realm
    kr.kadmin_local("addpol -history 3 hist3")
    ets = "aes256-cts-hmac-sha1-96:normal"  # no MPC enctype: not protected
    kr.kadmin_local(f"addprinc -policy hist3 -e {ets} -pw Ida-pw-1111 ida")
    kr.kadmin_local(f"cpw -e {ets} -pw Ida-pw-2222 ida")
    first = derived("ida", "Ida-pw-1111", kr.realm)["aes256-ctr-mpc"]
    # Control: a real key of the first password is in the history.
    hist = kr.kdb_history("ida")
    assert hashlib.sha256(first).hexdigest() in {r[4] for r in hist if r[3] == "key"}, hist

    kr.kadmin_local("cpw -pw Ida-pw-3333 ida")  # the realm's enctypes: protected
    assert_only_handles(kr, "ida", "Ida-pw-3333")
    assert kr.kdb_history("ida") == []
    kr.kadmin_local("cpw -pw Ida-pw-4444 ida")
    assert kr.kdb_history("ida") == []
    # The reuse check is off for protected principals (docs/admin-guide.md).
    kr.kadmin_local("cpw -pw Ida-pw-3333 ida")
    kinit_ok(kr, "ida", "Ida-pw-3333")
    # The change that protected ida replaced her real keys: with a db2 KDB
    # status names her until its files are rewritten (admin/rewrite_due.h;
    # an LDAP KDB, test_ldap.py, is the directory's to rewrite).
    if not kr.ldap:
        _, out, _ = kr.admin("status", "--kdb", expected_code=1)
        assert f"since the KDB was last rewritten (ida@{kr.realm})" in out, out
        kr.admin("rewrite-kdb")
    status_ok(kr)
