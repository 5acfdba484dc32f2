"""Users' keys under the standard AES enctypes (aes256/aes128-cts-hmac-sha1-96)
held by the cluster: the KDB holds handles of enctypes 18 and 17.

Real processes: three kmpc-mpc-server, kmpc-admin, kadmin.local with kmpc's
key dealer (libkmpc_dealer.so, krb5's key dealer patch), krb5kdc with the
real kdcmpc module, and Debian's own /usr/bin/kinit with a krb5.conf that
names no MPC enctype (what an unmodified client offers).

What the KDB holds is read with the master key (kmpc-kdb-handle keys: a
handle's key id, or the SHA-256 of a real key) and with kadmin.local's
`ktadd -norandkey`, which must extract nothing. The keys are derived
independently from the passwords (RFC 3962 string-to-key, ctr_mpc_ref.py:
the aes*-ctr-mpc keys are byte-identical to the aes*-cts ones) and must
be nowhere in the realm's files after sharing.

The KDC computes such a user's AS exchange in the cluster (test_cts_as.py
has the details): here the login succeeds with the right password and
fails as PREAUTH_FAILED with a wrong one, and the keys are in no log. What
the KDC does not serve under such a handle (a ticket to it from the AS,
a presented ticket under it: docs/limitations.md) is refused as
KDC_ERR_SVC_UNAVAILABLE, with
the refusal in the KDC's log; the handle is never used as a key.
"""
import glob
import hashlib
import os
import re
import subprocess

import pytest

import ctr_mpc_ref
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.cluster import default_salt
from kmpc_harness.realm import binpath

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server",
                           "mpc-server/libkmpc_dealer.so")

CTS256 = "aes256-cts-hmac-sha1-96"
CTS128 = "aes128-cts-hmac-sha1-96"
ENCTYPES = ("aes256-ctr-mpc", "aes128-ctr-mpc", CTS256, CTS128)
STOCK_KINIT = "/usr/bin/kinit"
REFUSAL = "kdcmpc: refusing a job ("
# The servers compile a CBC-CTS program per key size and message length on
# first use (cts-circuits.md, "Cost"): on a loaded machine a first login can
# take longer than the module's default 3 s deadline_ms.
COLD_PROGRAMS = {"deadline_ms": "30000"}


def keys_of(kr, princ, password):
    """{enctype: key} as MIT derives them from password with the default salt
    (the ctr-mpc keys are the aes*-cts keys' bytes: enctype.md)."""
    salt = default_salt(f"{princ}@{kr.realm}").encode()
    return {CTS256: ctr_mpc_ref.string_to_key("aes256-ctr-mpc", password.encode(), salt),
            CTS128: ctr_mpc_ref.string_to_key("aes128-ctr-mpc", password.encode(), salt)}


def sha(key):
    return hashlib.sha256(key).hexdigest()


def realm_files(kr):
    """Every file of the realm except keytabs (which hold keys by design)."""
    blobs = {}
    for f in glob.glob(os.path.join(kr.dir, "**"), recursive=True):
        if os.path.isfile(f) and not f.endswith(".keytab"):
            with open(f, "rb") as fh:
                blobs[os.path.relpath(f, kr.dir)] = fh.read()
    return blobs


def assert_keys_nowhere(kr, keys):
    for name, data in realm_files(kr).items():
        for et, key in keys.items():
            assert key[:12] not in data, f"{et} key in {name}"
            assert key.hex().encode() not in data, f"{et} key (hex) in {name}"
            assert sha(key).encode() not in data, f"{et} key's hash in {name}"


def assert_only_handles(kr, princ, keys=None):
    """princ's KDB entry holds handles only; none of `keys` (or their
    hashes) is in it; ktadd -norandkey extracts nothing. Returns the rows."""
    rows = kr.kdb_keys(princ)
    assert rows, f"{princ} has no keys"
    for kvno, enctype, kind, value in rows:
        assert kind == "handle", f"{princ} kvno {kvno} {enctype}: a real key is in the KDB"
    for key in (keys or {}).values():
        assert sha(key) not in {r[3] for r in rows}
    kt = os.path.join(kr.dir, f"{princ.replace('/', '_')}.keytab")
    out = kr.kadmin_local(f"ktadd -norandkey -k {kt} {princ}", expected_code=None)
    assert "held by the MPC cluster" in out or "MPC key handle" in out, out
    assert not os.path.exists(kt) or os.path.getsize(kt) <= 2, out
    assert kr.kdb_keys(princ) == rows  # and nothing changed
    return rows


def stock_kinit(kr, princ, password, stock=False):
    """kinit with a krb5.conf naming only the standard AES enctypes, as an
    unmodified client offers them: Debian's own /usr/bin/kinit (stock: it
    retries a KDC that answered "service unavailable" for ~17 s) or this
    build's (MIT's client code and that fix). (returncode, output)."""
    conf = os.path.join(kr.dir, "stock-krb5.conf")
    with open(conf, "w") as f:
        f.write(f"[libdefaults]\n    default_realm = {kr.realm}\n"
                f"    dns_lookup_kdc = false\n    rdns = false\n"
                f"    default_tkt_enctypes = {CTS256} {CTS128}\n"
                f"    permitted_enctypes = {CTS256} {CTS128}\n"
                f"[realms]\n    {kr.realm} = {{\n        kdc = 127.0.0.1:{kr.kdc_port}\n"
                f"    }}\n")
    env = {k: v for k, v in kr.env.items()
           if not k.startswith(("KRB5", "KMPC")) and not (stock and k.startswith("LD_"))}
    env.update(KRB5_CONFIG=conf, KRB5CCNAME="FILE:" + os.path.join(kr.dir, "stock.cc"),
               LC_ALL="C")
    p = subprocess.run([STOCK_KINIT if stock else binpath("kinit"), princ],
                       input=password + "\n", capture_output=True, text=True, env=env,
                       timeout=90)
    return p.returncode, p.stdout + p.stderr


def assert_kdc_serves(kr, princ, password, keys, stock=False):
    """The login succeeds with password (the AS exchange in the cluster) and
    fails as MIT's PREAUTH_FAILED with another; the KDC refused no job, is
    still running, and its log holds none of the keys."""
    before = kr.kdc_log_text().count(REFUSAL)
    rc, out = stock_kinit(kr, princ, password, stock)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    rc, out = stock_kinit(kr, princ, "wrong-" + password, stock)
    assert rc != 0 and "Password incorrect" in out, out
    log = kr.kdc_log_text()
    assert log.count(REFUSAL) == before, log[-3000:]
    assert re.search(rf"PREAUTH_FAILED: {princ}@{kr.realm}", log), log[-3000:]
    assert kr.kdc_alive()
    for key in keys.values():
        assert key.hex() not in log and sha(key) not in log


@pytest.fixture
def realm(kmpc_factory):
    if not os.path.exists(STOCK_KINIT):
        pytest.fail(f"{STOCK_KINIT} missing: run deploy/install-deps.sh (krb5-user)")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS)
    kr.setup_krbtgt()
    kr.start()
    return kr


def _stock_env(kr):
    """The environment of Debian's unmodified clients (stock_kinit's
    krb5.conf and ccache), without kmpc's variables."""
    env = {k: v for k, v in kr.env.items() if not k.startswith(("KRB5", "KMPC"))}
    env.update(KRB5_CONFIG=os.path.join(kr.dir, "stock-krb5.conf"), LC_ALL="C",
               KRB5CCNAME="FILE:" + os.path.join(kr.dir, "stock.cc"))
    return env


def test_from_existing_moves_both_aes_keys_as_they_are(realm):
    kr, pw = realm, "Alice-pw-9182"
    kr.addprinc("alice", pw, enctypes=[CTS256, CTS128])
    keys = keys_of(kr, "alice", pw)
    before = kr.kdb_keys("alice")
    # The reference derivation is MIT's: the KDB held exactly these keys.
    assert {(r[1], r[3]) for r in before} == {(et, sha(k)) for et, k in keys.items()}
    _, out, _ = kr.admin("share", "--from-existing", f"--enctype={CTS256}", "alice")
    assert f"as {CTS256} kvno 1" in out and f"as {CTS128} kvno 1" in out, out
    rows = assert_only_handles(kr, "alice", keys)
    # Same enctypes and kvno: the password and every client keep working.
    assert sorted((r[0], r[1]) for r in rows) == [("1", CTS128), ("1", CTS256)]
    assert len({r[3] for r in rows}) == 2  # two key ids
    assert_keys_nowhere(kr, keys)
    # status: the handles' shares are on all three servers, alice is not
    # exposed (only its keys' migration from the KDB is reported).
    rc, st, _ = kr.admin("status", "--kdb", expected_code=None)
    assert "NOT on all three" not in st and " 0 exposed" in st, st
    assert "alice@" in st and "migrated from the KDB" in st, st
    assert_kdc_serves(kr, "alice", pw, keys, stock=True)
    assert_kdc_serves(kr, "alice", pw, keys)


def test_password_stdin_shares_an_aes256_cts_key(realm):
    kr, old, new = realm, "Bob-old-5521", "Bob-new-7733"
    kr.addprinc("bob", old, enctypes=[CTS256])
    kr.admin("share", "--password-stdin", f"--enctype={CTS256}", "bob", input=new + "\n")
    rows = assert_only_handles(kr, "bob", {**keys_of(kr, "bob", old),
                                           **{"new": keys_of(kr, "bob", new)[CTS256]}})
    assert [(r[0], r[1]) for r in rows] == [("2", CTS256)]
    assert_keys_nowhere(kr, {"old": keys_of(kr, "bob", old)[CTS256],
                             "new": keys_of(kr, "bob", new)[CTS256]})
    assert_kdc_serves(kr, "bob", new, keys_of(kr, "bob", new))


def test_rc4_and_krbtgt_are_refused(realm):
    kr, pw = realm, "Carol-pw-6610"
    kr.addprinc("carol", pw, enctypes=[CTS256, "arcfour-hmac"])
    before = kr.kdb_keys("carol")
    rc, out, err = kr.admin("share", "--from-existing", f"--enctype={CTS256}", "carol",
                            expected_code=1)
    assert "arcfour-hmac (enctype 23) kvno 1" in err, err
    assert "NT hash" in err and "cpw -e" in err and "Nothing was changed" in err, err
    assert kr.kdb_keys("carol") == before
    rc, out, err = kr.admin("share", "--randkey", "--force", f"--enctype={CTS256}",
                            kr.tgs, expected_code=1)
    assert "aes256-ctr-mpc or aes128-ctr-mpc only" in err, err
    assert {r[1] for r in kr.kdb_keys(kr.tgs)} == {"aes256-ctr-mpc"}


def test_dealer_deals_cts_handles(realm):
    kr = realm
    kr.protect = ["dealt*"]
    kr.enable_dealer()
    # supported_enctypes names both ctr-mpc and both aes-cts enctypes: a
    # protected user gets a handle of each, in that order.
    kr.kadmin_local("addprinc -pw Dealt-pw-1 dealt1")
    rows = assert_only_handles(kr, "dealt1", keys_of(kr, "dealt1", "Dealt-pw-1"))
    assert sorted(r[1] for r in rows) == sorted(ENCTYPES)
    assert {r[0] for r in rows} == {"1"}
    # RC4 in the list is dropped (never kept for a protected principal); a
    # password is dealt under the list's aes*-cts enctypes even for a
    # principal holding aes*-ctr-mpc keys (one door per password: the
    # servers see an aes*-cts login's timestamp as shares only).
    kr.kadmin_local(f"cpw -e {CTS256}:normal,arcfour-hmac:normal -pw Dealt-pw-2 dealt1")
    rows = assert_only_handles(kr, "dealt1", keys_of(kr, "dealt1", "Dealt-pw-2"))
    assert [(r[0], r[1]) for r in rows] == [("2", CTS256)]
    # A random key of a principal holding aes*-ctr-mpc keys, changed with a
    # list of aes*-cts enctypes only, stays an aes*-ctr-mpc key.
    kr.kadmin_local("addprinc -randkey -e aes256-ctr-mpc:normal dealt3")
    kr.kadmin_local(f"cpw -randkey -e {CTS256}:normal dealt3")
    assert [(r[0], r[1], r[2]) for r in kr.kdb_keys("dealt3")] == [
        ("2", "aes256-ctr-mpc", "handle")]
    # A new protected principal with such a list gets aes*-cts handles.
    kr.kadmin_local(f"addprinc +requires_preauth -e {CTS256}:normal,arcfour-hmac:normal,"
                    f"{CTS128}:normal -pw Dealt-pw-3 dealt2")
    keys = keys_of(kr, "dealt2", "Dealt-pw-3")
    rows = assert_only_handles(kr, "dealt2", keys)
    assert sorted((r[0], r[1]) for r in rows) == [("1", CTS128), ("1", CTS256)]
    assert_keys_nowhere(kr, {**keys, "dealt1": keys_of(kr, "dealt1", "Dealt-pw-2")[CTS256]})
    assert_kdc_serves(kr, "dealt2", "Dealt-pw-3", keys)
    # A principal that no pattern names and whose new key list names no MPC
    # enctype is protected by the aes-cts handle it holds.
    kr.addprinc("erin", "Erin-pw-1", enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "erin")
    kr.kadmin_local(f"cpw -e {CTS256}:normal -pw Erin-pw-2 erin")
    rows = assert_only_handles(kr, "erin", keys_of(kr, "erin", "Erin-pw-2"))
    assert [(r[0], r[1]) for r in rows] == [("2", CTS256)]
    # A list naming no AES enctype (des3 is never kept for a protected
    # principal) gives it one aes256-cts handle, not an aes*-ctr-mpc key its
    # unmodified clients would not offer.
    kr.kadmin_local("cpw -e des3-cbc-sha1:normal -pw Erin-pw-3 erin")
    rows = assert_only_handles(kr, "erin", keys_of(kr, "erin", "Erin-pw-3"))
    assert [(r[0], r[1]) for r in rows] == [("3", CTS256)]
    # ktadd: a new random key for the keytab, its handle in the KDB.
    out = kr.kadmin_local(f"ktadd -e {CTS256}:normal -k {kr.dir}/erin.keytab erin")
    assert "added to keytab" in out, out
    assert [(r[0], r[1], r[2]) for r in kr.kdb_keys("erin")] == [("4", CTS256, "handle")]
    # A ticket-granting principal gets no aes-cts handle.
    kr.kadmin_local(f"cpw -randkey -keepold {kr.tgs}")
    cur = max(int(r[0]) for r in kr.kdb_keys(kr.tgs))
    assert {r[1] for r in kr.kdb_keys(kr.tgs) if int(r[0]) == cur} <= {
        "aes256-ctr-mpc", "aes128-ctr-mpc"}
    assert kr.kdc_alive()


def test_dealer_deals_the_kind_the_principal_names(realm):
    """kadmind's key dealer deals a user's key (kmpc.proto KeyKind: no
    ticket or PAC material) unless the principal's string attribute
    kmpc_key_kind names another kind: a password-derived service key dealt
    then as "user+service" serves tickets to it."""
    kr = realm
    svc = "host/dealt.kmpc.test"
    kr.protect = ["host/*"]
    kr.enable_dealer()
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw Svc-pw-1 {svc}")
    kr.addprinc("hank", "Hank-pw-1", enctypes=[CTS256])  # its key in the KDB
    rc, out = stock_kinit(kr, "hank", "Hank-pw-1")
    assert rc == 0, out
    env = _stock_env(kr)
    p = subprocess.run([binpath("kvno"), svc], capture_output=True, text=True,
                       env=env, timeout=90)
    assert p.returncode != 0, p.stdout + p.stderr  # a user's key: no ticket to it
    kr.kadmin_local(f"setstr {svc} kmpc_key_kind user+service")
    kr.kadmin_local(f"cpw -e {CTS256}:normal -pw Svc-pw-2 {svc}")
    p = subprocess.run([binpath("kvno"), svc], capture_output=True, text=True,
                       env=env, timeout=90)
    assert p.returncode == 0 and "kvno = 2" in p.stdout, p.stdout + p.stderr + \
        kr.kdc_log_text()[-3000:]


def test_dealer_deals_the_kind_its_patterns_name(realm):
    """The dealer's `service` pattern (kdc.conf) protects a service from
    its first key on and deals it as a service's: a ticket to it is issued
    with no string attribute set; a user only `protect` names is a user's
    key (no ticket to it); kmpc_key_kind "user" on a principal a pattern
    names wins over the pattern."""
    kr = realm
    svc, other = "host/patterned.kmpc.test", "host/marked.kmpc.test"
    kr.dealer_kinds = [("service", "host/*")]
    kr.protect = ["ivy"]
    kr.enable_dealer()
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {svc}")
    assert [(r[1], r[2]) for r in kr.kdb_keys(svc)] == [(CTS256, "handle")]
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {other}")
    kr.kadmin_local(f"setstr {other} kmpc_key_kind user")
    kr.kadmin_local(f"cpw -e {CTS256}:normal -randkey {other}")
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw Ivy-pw-1 ivy")
    assert [(r[1], r[2]) for r in kr.kdb_keys("ivy")] == [(CTS256, "handle")]
    kr.addprinc("hank", "Hank-pw-1", enctypes=[CTS256])  # its key in the KDB
    rc, out = stock_kinit(kr, "hank", "Hank-pw-1")
    assert rc == 0, out
    env = _stock_env(kr)

    def kvno(name):
        return subprocess.run([binpath("kvno"), name], capture_output=True, text=True,
                              env=env, timeout=90)
    p = kvno(svc)
    assert p.returncode == 0 and "kvno = 1" in p.stdout, p.stdout + p.stderr + \
        kr.kdc_log_text()[-3000:]
    for name in (other, "ivy"):  # users' keys: no ticket to them
        p = kvno(name)
        assert p.returncode != 0, (name, p.stdout + p.stderr)
    assert kr.kdc_alive()


def test_kdc_issues_an_as_ticket_to_a_service_under_a_cts_handle(realm):
    """A service whose key is an aes256-cts handle: from the TGS, and
    straight from the AS (kpasswd and kadmin ask for kadmin/changepw and
    kadmin/admin that way: krb5 patch 0027-KDC-AS-tickets-to-services), its
    ticket is the servers' ENCRYPT under usage 2 (test_cts_service.py and
    test_kadmind_handles.py check the ticket). Under a user's key, which
    holds no ticket material, the servers refuse it: KDC_ERR_SVC_UNAVAILABLE,
    no ticket issued, the KDC still up, and the user still logs in."""
    kr = realm
    svc = "host/ctssvc.kmpc.test"
    kr.addprinc(svc, "Svc-pw-1", enctypes=[CTS256], flags="")
    # A password-derived key that is a service's (kmpc.proto KeyKind).
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "--also-service", svc)
    kr.addprinc("hank", "Hank-pw-1", enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "hank")
    rc, out = stock_kinit(kr, "hank", "Hank-pw-1")
    assert rc == 0, out
    env = _stock_env(kr)
    # From the TGS, with hank's TGT: issued.
    p = subprocess.run([binpath("kvno"), svc], capture_output=True, text=True,
                       env=env, timeout=90)
    assert p.returncode == 0 and "kvno = 1" in p.stdout, p.stdout + p.stderr
    # Straight from the AS: issued, under the service's aes256-cts key.
    env["KRB5CCNAME"] = "FILE:" + os.path.join(kr.dir, "svc.cc")
    p = subprocess.run([binpath("kinit"), "-S", svc, "hank"], input="Hank-pw-1\n",
                       capture_output=True, text=True, env=env, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr + kr.kdc_log_text()[-3000:]
    p = subprocess.run([binpath("klist"), "-e"], capture_output=True, text=True,
                       env=env, timeout=30)
    assert f"{svc}@{kr.realm}" in p.stdout and "aes256-cts-hmac-sha1-96" in p.stdout, p.stdout
    # A user's key as the service: the servers hold no ticket material.
    env["KRB5CCNAME"] = "FILE:" + os.path.join(kr.dir, "user-as-svc.cc")
    p = subprocess.run([binpath("kinit"), "-S", f"hank@{kr.realm}", "hank"],
                       input="Hank-pw-1\n", capture_output=True, text=True, env=env,
                       timeout=90)
    assert p.returncode != 0, p.stdout + p.stderr
    assert "service is not available" in p.stdout + p.stderr, p.stdout + p.stderr
    log = kr.kdc_log_text()
    assert not re.search(rf"AS_REQ .*ISSUE: .* hank@{kr.realm} for hank@", log), log[-3000:]
    rc, out = stock_kinit(kr, "hank", "Hank-pw-1")
    assert rc == 0, out
    assert kr.kdc_alive()
