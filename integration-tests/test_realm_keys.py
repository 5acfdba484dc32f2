"""A realm whose keys are all in the cluster (issue 50's acceptance): a
stolen KDB, read with the master key, gives no other real key.

Real processes: three kmpc-mpc-server, kmpc-admin, kadmin.local and
kadmind with kmpc's key dealer (service patterns name the keys' kind),
krb5kdc with the real kdcmpc module, and Debian's own /usr/bin/kinit and
/usr/bin/kvno.

- ktadd of a service the dealer protects (kadmin.local and, through
  kadmind, kadmin: this build's and Debian's unmodified /usr/bin/kadmin)
  gives the admin client the new random key for the keytab, while only a
  handle reaches the KDB: Debian's `kvno -k` with that keytab validates a
  ticket to the service.
- A service moved with `kmpc-admin share --from-existing --service` keeps
  its old keytab working.
- status --kdb names kadmind's keys while they are in the KDB (exit 1),
  and notes cross-realm keys, whose partner realm's KDB holds them too.
- The KDB is read by kdb_dump_ref.py (the stash file and `kdb5_util
  dump`, decrypted by its own RFC 3962 code, nothing of kmpc's): no real
  key but EXPECTED_REAL_KEYS'; `kmpc-admin status --kdb` agrees and exits
  0. A service with a real key makes both name it (status exits 1).
"""
import os
import re
import subprocess

import pytest

import kdb_dump_ref
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.kmpc_realm import KADMIND_KEYS
from kmpc_harness.realm import binpath
from test_cts_handles import CTS256, COLD_PROGRAMS, ENCTYPES, _stock_env, stock_kinit

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server",
                           "mpc-server/libkmpc_dealer.so")

# The principals whose real keys stay in the KDB (name prefixes): the master
# key, and kadmin/history's (kadm5 encrypts the password history under it)
# where the realm has one. kadmind's own keys move (KmpcRealm.move_kadmind_keys).
EXPECTED_REAL_KEYS = ("K/M@", "kadmin/history@")

STOCK_KVNO = "/usr/bin/kvno"
ADMIN, ADMIN_PW = "root/admin", "admin-Pw-5150"
USER, USER_PW = "walt", "Walt-pw-5150"
SVC = "host/keytab.kmpc.test"


@pytest.fixture
def realm(kmpc_factory):
    for p in (STOCK_KVNO, "/usr/bin/kinit"):
        if not os.path.exists(p):
            pytest.fail(f"{p} missing: run deploy/install-deps.sh (krb5-user)")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS)
    kr.dealer_kinds = [("service", "host/*")]
    kr.protect = [ADMIN, USER]
    kr.enable_dealer()
    kr.kadmin_local(f"setstr {kr.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    kr.kadmin_local(f"cpw -randkey {kr.tgs}")
    for name, pw in ((ADMIN, ADMIN_PW), (USER, USER_PW)):
        kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw {pw} {name}")
    kr.start()
    return kr


def kdb_real_keys(kr):
    """{principal: [(kvno, enctype, length)]} of the real keys in the KDB,
    read by kdb_dump_ref.py from the stash and a dump."""
    dump = os.path.join(kr.dir, "kdb.dump")
    kr.run(["kdb5_util", "-r", kr.realm, "dump", dump])
    with open(dump) as f:
        return kdb_dump_ref.real_keys(os.path.join(kr.dir, "stash"), f.read())


def unexpected(found):
    return {n: k for n, k in found.items() if not n.startswith(EXPECTED_REAL_KEYS)}


def stock_kvno_k(kr, keytab, princ):
    """Debian's kvno: a ticket to princ from the user's TGT, validated with
    keytab (-k). (returncode, output)."""
    p = subprocess.run([STOCK_KVNO, "-k", keytab, princ], capture_output=True,
                       text=True, env=_stock_env(kr), timeout=120)
    return p.returncode, p.stdout + p.stderr


def status_kdb(kr):
    rc, out, err = kr.admin("status", "--kdb", expected_code=None)
    problems = [l for l in out.splitlines()
                if l.startswith("kdb: ") and not l.startswith("kdb: realm ")]
    return rc, problems, out + err


def test_reader_decrypts_with_rfc3962():
    """kdb_dump_ref's own crypto against RFC 3961's n-fold and RFC 3962's
    key derivation vectors (appendix B, iteration count 1)."""
    import hashlib
    assert kdb_dump_ref.nfold(b"012345", 8).hex() == "be072631276b1955"
    assert kdb_dump_ref.nfold(b"kerberos", 16).hex() == "6b65726265726f737b9b5b2b93132b93"
    tkey = hashlib.pbkdf2_hmac("sha1", b"password", b"ATHENA.MIT.EDUraeburn", 1, 16)
    assert kdb_dump_ref.derive(tkey, b"kerberos").hex() == "42263c6e89f4fc28b8df68ee09799f15"


def test_ktadd_gives_the_keytab_the_key_and_the_kdb_a_handle(realm):
    kr = realm
    kt = os.path.join(kr.dir, "svc.keytab")
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {SVC}")
    out = kr.kadmin_local(f"ktadd -e {CTS256}:normal -k {kt} {SVC}")
    assert "added to keytab" in out, out
    assert [(r[0], r[1], r[2]) for r in kr.kdb_keys(SVC)] == [("2", CTS256, "handle")]
    assert SVC not in "".join(unexpected(kdb_real_keys(kr)))
    rc, out = stock_kinit(kr, USER, USER_PW, stock=True)  # Debian's kinit
    assert rc == 0, out
    rc, out = stock_kvno_k(kr, kt, SVC)
    assert rc == 0 and "keytab entry valid" in out, out + kr.kdc_log_text()[-3000:]
    # cpw -randkey, then ktadd through kadmind: the new key reaches the
    # remote admin client's keytab; the KDB again holds only a handle.
    kr.kadmin_local(f"cpw -e {CTS256}:normal -randkey {SVC}")
    kr.start_kadmind()
    kt2 = os.path.join(kr.dir, "svc-remote.keytab")
    out = kr.run(["kadmin", "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW,
                  "-q", f"ktadd -e {CTS256}:normal -k {kt2} {SVC}"])
    assert "added to keytab" in out, out
    assert [(r[0], r[2]) for r in kr.kdb_keys(SVC)] == [("4", "handle")]
    rc, out = stock_kinit(kr, USER, USER_PW, stock=True)  # a ccache without kvno 2's
    assert rc == 0, out
    rc, out = stock_kvno_k(kr, kt2, SVC)
    assert rc == 0 and "kvno = 4" in out and "keytab entry valid" in out, out
    # Debian's unmodified kadmin, through kadmind, likewise.
    kt3 = os.path.join(kr.dir, "svc-debian.keytab")
    env = {k: v for k, v in kr.env.items() if not k.startswith("LD_")}
    p = subprocess.run(["/usr/bin/kadmin", "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW,
                        "-q", f"ktadd -e {CTS256}:normal -k {kt3} {SVC}"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and "added to keytab" in p.stdout + p.stderr, \
        p.stdout + p.stderr
    assert [(r[0], r[2]) for r in kr.kdb_keys(SVC)] == [("5", "handle")]
    rc, out = stock_kinit(kr, USER, USER_PW, stock=True)
    assert rc == 0, out
    rc, out = stock_kvno_k(kr, kt3, SVC)
    assert rc == 0 and "kvno = 5" in out and "keytab entry valid" in out, out
    # ktadd -norandkey still extracts no handle; a krbtgt's key never leaves.
    out = kr.kadmin_local(f"ktadd -norandkey -k {kt2} {SVC}", expected_code=None)
    assert "held by the MPC cluster" in out, out
    before = kr.kdb_keys(kr.tgs)
    out = kr.kadmin_local(f"ktadd -k {kt2} {kr.tgs}", expected_code=None)
    assert "held by the MPC cluster" in out, out
    assert kr.kdb_keys(kr.tgs) == before
    assert kr.kdc_alive()


def test_a_service_moved_from_the_kdb_keeps_its_keytab(realm):
    kr = realm
    old = "cifs/moved.kmpc.test"  # no pattern names it: the KDB holds its key
    kt = os.path.join(kr.dir, "moved.keytab")
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {old}")
    kr.kadmin_local(f"ktadd -norandkey -k {kt} {old}")
    assert old in "".join(unexpected(kdb_real_keys(kr)))
    rc, problems, out = status_kdb(kr)
    assert rc == 1 and any(l.startswith(f"kdb: {old}@{kr.realm} holds real keys")
                           for l in problems), out
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "--service", old)
    assert {r[2] for r in kr.kdb_keys(old)} == {"handle"}
    assert old not in "".join(unexpected(kdb_real_keys(kr)))
    rc, out = stock_kinit(kr, USER, USER_PW)
    assert rc == 0, out
    rc, out = stock_kvno_k(kr, kt, old)
    assert rc == 0 and "keytab entry valid" in out, out + kr.kdc_log_text()[-3000:]


def test_the_kdb_holds_no_other_real_key(realm):
    """Every principal but EXPECTED_REAL_KEYS' in the cluster: the reader
    finds no other real key and status --kdb agrees (exit 0); a service
    with a real key makes both name it."""
    kr = realm
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {SVC}")
    # A service no pattern names, given a new key in the cluster by
    # kmpc-admin (a service's kind), which prints no key.
    rand = "nfs/rand.kmpc.test"
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {rand}")
    _, out, err = kr.admin("share", "--randkey", f"--enctype={CTS256}", "--service", rand)
    rows = kr.kdb_keys(rand)
    assert {r[2] for r in rows} == {"handle"}
    printed = out + err
    for r in rows:  # the key ids are no secret
        printed = printed.replace(r[3], "")
    assert not re.search(r"[0-9a-fA-F]{32}", printed), out + err
    # kadmind's keys: status names them while they are in the KDB; then new
    # random keys in the cluster, of a service's kind (kadmind has the
    # cluster decrypt the tickets to them).
    rc, problems, out = status_kdb(kr)
    assert rc == 1 and sorted(l.split()[1] for l in problems) == [
        f"{p}@{kr.realm}" for p in KADMIND_KEYS], out
    assert all("(kadmind's own key: " in l for l in problems), out
    kr.move_kadmind_keys()
    found = kdb_real_keys(kr)
    assert unexpected(found) == {}, found
    assert any(n.startswith("K/M@") for n in found), found
    rc, problems, out = status_kdb(kr)
    assert rc == 0 and problems == [], out
    assert " 0 exposed" in out and " 0 others with real keys" in out, out
    # A real service key: the reader and status both name it.
    real = "HTTP/real.kmpc.test"
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {real}")
    assert list(unexpected(kdb_real_keys(kr))) == [f"{real}@{kr.realm}"]
    rc, problems, out = status_kdb(kr)
    assert rc == 1 and len(problems) == 1, out
    assert problems[0].startswith(f"kdb: {real}@{kr.realm} holds real keys in the KDB"), out
    assert " 1 others with real keys" in out, out


def test_status_names_kadminds_keys_and_notes_cross_realm_keys(kmpc_factory):
    """kadmind's keys in the KDB are problems (exit 1): with kadmin/changepw
    a thief forges INITIAL tickets to kpasswd. Cross-realm keys stay by
    design (the partner realm's KDB holds the same key): status --kdb names
    them on "kdb note:" lines, which are no problem; K/M is not named."""
    kr = kmpc_factory(module="test")
    for p in ("krbtgt/OTHER.TEST", "krbtgt/KMPC.TEST@OTHER.TEST"):
        kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw Cross-pw-5150 {p}")
    rc, problems, out = status_kdb(kr)
    notes = [l for l in out.splitlines() if l.startswith("kdb note: ")]
    assert len(notes) == 2, out
    for p in ("krbtgt/OTHER.TEST@KMPC.TEST", "krbtgt/KMPC.TEST@OTHER.TEST"):
        assert any(l.startswith(f"kdb note: {p} keeps real keys in the KDB (a cross-realm "
                                "key") for l in notes), out
    assert not any("K/M@" in l for l in notes + problems), out
    # The local krbtgt still holds the key kdb5_util made, and kadmind's
    # keys theirs (an aes*-ctr-mpc one among them, as kdb5_util create gives
    # every supported enctype: not "should be MPC-protected" for that).
    assert rc == 1 and len(problems) == 3, out
    assert any(l.startswith(f"kdb: {kr.tgs} should be MPC-protected") for l in problems), out
    for p in KADMIND_KEYS:
        assert any(l.startswith(f"kdb: {p}@{kr.realm} holds real keys in the KDB: ")
                   and "(kadmind's own key: " in l for l in problems), out
    assert (" 1 exposed, " in out and " 2 others with real keys, 3 keeping them by design "
            "(K/M included)" in out), out
    # Moved into the cluster: the krbtgt is the one problem left.
    kr.move_kadmind_keys()
    rc, problems, out = status_kdb(kr)
    assert rc == 1 and [l.split(" should be")[0] for l in problems] == [
        f"kdb: {kr.tgs}"], out


def server_kinds(kr, princ, kind):
    """How many of the servers' records of princ's current keys already
    are of `kind`, read from their stores (kmpc-admin set-kind to the same
    kind answers "already KIND" and changes nothing)."""
    _, out, err = kr.admin("set-kind", f"--kind={kind}", princ, expected_code=None)
    return out.count(f"already {kind}"), out + err


def test_a_password_on_a_service_pattern_principal_is_no_service_key(realm):
    """The attack: with the dealer's `service` pattern on, a password set
    with kadmin.local (addprinc or cpw -pw) was dealt as a random service
    key: the servers release its AS reply ungated and decrypt tickets under
    it, an offline verifier of the password. It is dealt as user+service
    now (libkdb5 tells the dealer a random key from a password's); a random
    key of the same principal still is a service's."""
    kr = realm
    svc = "host/pw.kmpc.test"
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw Svc-pw-1 {svc}")
    assert server_kinds(kr, svc, "user+service")[0] == 3
    kr.kadmin_local(f"cpw -e {CTS256}:normal -pw Svc-pw-2 {svc}")
    n, out = server_kinds(kr, svc, "user+service")
    assert n == 3, out
    kr.kadmin_local(f"cpw -e {CTS256}:normal -randkey {svc}")
    n, out = server_kinds(kr, svc, "service")
    assert n == 3, out
