"""kmpc with its KDB in OpenLDAP: MIT's kldap module on Debian's slapd.

Each realm gets a slapd of its own (kmpc_harness/ldap.py: its cn=config and
mdb database under the test's directory, on 127.0.0.1 and an ldapi socket
there, MIT's schema kerberos.openldap.ldif), the realm made by
`kdb5_ldap_util create`, the KDC's and kadmind's bind passwords stashed by
`kdb5_ldap_util stashsrvpw` (Realm(ldap=True), kmpc_factory(ldap=True)).

What runs against it, all with real processes:
  - the key dealer: new principals and password changes through
    kadmin.local, kadmind (the kadm5 RPC and kpasswd), randkey/keepold;
    kmpc-admin share and status --kdb; refresh (given ids, resumed after a
    crash); rebuild-party after a lost server. These call the bodies of
    tests of test_key_lifecycle, test_admin, test_refresh and
    test_replace_party with LDAP realms: their meaning is theirs.
  - where keys are: after every admin operation, each protected
    principal's keys are read from the LDAP KDB with the master key
    (`kadmin.local ktadd -norandkey`, and kmpc-kdb-handle) and compared with
    the keys derived here from the password (RFC 3962 string-to-key,
    ctr_mpc_ref.py); a principal outside the dealer's protection is the
    control that the same reading does find a password's key.
  - S4U2Proxy under LDAP's delegation policy (krbAllowedToDelegateTo on the
    proxy service's entry), with the krbtgt in the cluster, through Debian's
    /usr/bin/kvno and the patched build's kvno, case by case against a
    stock krb5kdc on an LDAP KDB set up the same way: same outcome, same
    error, same KDC status. MIT 1.20's kldap module has no
    allowed_to_delegate_from method (plugins/kdb/ldap/ldap_exp.c), so
    resource-based delegation is refused by both ("UNSUPPORTED_S4U2PROXY_
    REQUEST"), which the tests assert rather than skip.
  - MIT's tests/t_kdb.py in k5test's kmpc mode (krbtgt in the cluster in
    each of its LDAP realms).
"""
import functools
import hashlib
import os
import re
import struct
import subprocess
import time

import pytest

import ctr_mpc_ref
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.kmpc_realm import KmpcRealm
from kmpc_harness import ldap as kmpc_ldap
from kmpc_harness import realm as kmpc_realm
import test_admin
import test_key_lifecycle as kl
import test_refresh
import test_replace_party
import test_unmodified_clients as tu
from kmpc_harness.cluster import default_salt, password

kmpc_cluster.require_built("mpc-server/kmpc-admin", "kdc-plugin/libkmpc_kdc.so",
                           "kdc-plugin/kmpc-kdb-handle")

REALM = kmpc_realm.REALM
SERVICE = tu.SERVICE                       # the proxy: +ok_to_auth_as_delegate
TARGET = tu.PROXY_TARGET                   # in SERVICE's krbAllowedToDelegateTo
OTHER = "HTTP/other.kmpc.test"             # in nobody's list at first
NOPT = "host/nopt.kmpc.test"               # a list, no protocol transition
NOLIST = "host/nolist.kmpc.test"           # protocol transition, no list


@pytest.fixture(scope="module", autouse=True)
def _print_runtime(request):
    t0 = time.monotonic()
    yield
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(f"\ntest_ldap.py: {time.monotonic() - t0:.1f} s", flush=True)


@pytest.fixture
def ldap_factory(kmpc_factory):
    """kmpc_factory whose realms keep their KDB in their own slapd."""
    return functools.partial(kmpc_factory, ldap=True)


@pytest.fixture
def kr(ldap_factory):
    """test_key_lifecycle's realm on LDAP: the dealer protecting krbtgt/*
    and every principal with an MPC enctype, the krbtgt key made in the
    cluster, an administrator with an ordinary key, kadmind's keys in the
    cluster, KDC and kadmind up."""
    # kadmind's keys in the cluster: the first ticket to each compiles a
    # CBC-CTS program on the servers (test_cts_handles.COLD_PROGRAMS).
    r = ldap_factory(dealer=True, module_options={"deadline_ms": "30000"})
    r.kadmin_local(f"setstr {r.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    r.kadmin_local(f"cpw -randkey {r.tgs}")
    r.kadmin_local(f"addprinc -e aes256-cts-hmac-sha1-96:normal -pw {kl.ADMIN_PW} "
                   f"{kl.ADMIN}")
    r.move_kadmind_keys()
    r.start()
    r.start_kadmind()
    return r


# ---- reading the LDAP KDB with the master key --------------------------

def keytab_keys(path):
    """{(kvno, enctype number): key bytes} of a MIT keytab (format 0x502:
    big-endian records, src/lib/krb5/keytab/kt_file.c)."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:2] == b"\x05\x02", "not a v2 keytab"
    keys, pos = {}, 2
    while pos < len(buf):
        size, = struct.unpack_from(">i", buf, pos)
        pos += 4
        if size < 0:                         # a hole left by a removal
            pos += -size
            continue
        rec, end = pos, pos + size
        ncomp, = struct.unpack_from(">H", buf, rec)
        rec += 2
        for _ in range(ncomp + 1):           # realm, then the components
            n, = struct.unpack_from(">H", buf, rec)
            rec += 2 + n
        rec += 4 + 4                         # name type, timestamp
        kvno = buf[rec]
        rec += 1
        etype, klen = struct.unpack_from(">HH", buf, rec)
        rec += 4
        key = buf[rec:rec + klen]
        rec += klen
        if end - rec >= 4:                   # the 32-bit kvno, when present
            kvno = struct.unpack_from(">I", buf, rec)[0] or kvno
        keys[(kvno, etype)] = key
        pos = end
    return keys


def kdb_keys_via_ktadd(r, princ):
    """What `kadmin.local ktadd -norandkey` reads for princ from the KDB with
    the master key: (refused, {(kvno, etype): key}). The keytab is removed
    at once; nothing is printed."""
    kt = os.path.join(r.dir, "probe.keytab")
    if os.path.exists(kt):
        os.unlink(kt)
    out = r.kadmin_local(f"ktadd -norandkey -k {kt} {princ}", expected_code=None)
    try:
        keys = keytab_keys(kt) if os.path.exists(kt) and os.path.getsize(kt) > 2 else {}
    finally:
        if os.path.exists(kt):
            os.unlink(kt)
    refused = "held by the MPC cluster" in out
    assert refused or keys, f"ktadd neither refused nor wrote keys for {princ}"
    return refused, keys


def derived_keys(princ, passwords):
    """Every aes128/aes256 key MIT derives from each password with princ's
    default salt (the -cts and -ctr-mpc enctypes share RFC 3962's
    string-to-key)."""
    salt = default_salt(f"{princ}@{REALM}" if "@" not in princ else princ).encode()
    return [ctr_mpc_ref.string_to_key(e, pw.encode(), salt)
            for pw in passwords for e in ("aes256-ctr-mpc", "aes128-ctr-mpc")]


def assert_no_key_in_kdb(r, princ, passwords=()):
    """princ is protected: ktadd -norandkey on the LDAP KDB is refused (the
    entry holds handles) and gives no key; kmpc-kdb-handle, reading every
    key_data with the master key, finds handles only, none equal to a key
    derived from the passwords (by SHA-256: no key is printed)."""
    refused, keys = kdb_keys_via_ktadd(r, princ)
    assert refused and not keys, f"{princ}: ktadd read real keys from the LDAP KDB"
    derived = derived_keys(princ, passwords)
    kl.assert_only_handles(r, princ)
    hashes = {v for _, _, kind, v in r.kdb_keys(princ) if kind == "key"}
    for k in derived:
        assert hashlib.sha256(k).hexdigest() not in hashes


def assert_kdb_holds_key(r, princ, pw):
    """The control: princ (not protected) holds its password's key, and the
    same ktadd reading of the LDAP KDB finds exactly it."""
    refused, keys = kdb_keys_via_ktadd(r, princ)
    assert not refused
    want = derived_keys(princ, [pw])
    assert any(k in want for k in keys.values()), \
        f"{princ}: the LDAP KDB's key is not the password's"


def assert_entry_in_ldap(r, princ):
    """princ's entry is in the realm's slapd (and the realm has no db2
    file): the KDB really is the LDAP one."""
    assert not os.path.exists(os.path.join(r.dir, "principal")), "a db2 KDB exists"
    dn = kmpc_ldap.principal_dn(r.slapd, princ, r.realm)
    assert dn.endswith(f"cn={r.realm},{kmpc_ldap.CONTAINER}"), dn


# ---- the key dealer on LDAP ------------------------------------------------

def test_kadmin_local_on_ldap(kr):
    """kadmin.local against the LDAP KDB: the krbtgt made in the cluster,
    addprinc/cpw and randkey/keepold (test_key_lifecycle's), no key of them
    in the KDB; an unprotected principal's key is found by the same
    reading; status --kdb names it and the administrator's, nothing else."""
    assert_entry_in_ldap(kr, kr.tgs)
    kl.test_krbtgt_made_in_cluster(kr)
    assert_no_key_in_kdb(kr, kr.tgs)
    kl.test_addprinc_and_kadmin_local_cpw(kr)
    assert_entry_in_ldap(kr, "alice")
    assert_no_key_in_kdb(kr, "alice", ["Old-pw-1111", "New-pw-2222"])
    kl.test_randkey_and_keepold(kr)
    assert_no_key_in_kdb(kr, "bob", ["Bob-pw-3333"])
    kl.test_keys_cannot_be_extracted(kr)
    assert_no_key_in_kdb(kr, "fay", ["Fay-pw-1212"])
    pw = password()
    kr.addprinc("plain", pw, enctypes=["aes256-cts-hmac-sha1-96"])
    assert_kdb_holds_key(kr, "plain", pw)
    kl.status_ok(kr, also=["plain"])
    assert kr.slapd.alive()


def test_password_changes_through_kadmind_on_ldap(kr):
    """test_key_lifecycle's three changes through kadmind (kpasswd, the
    kadm5 RPC, kinit of an expired password), in one realm: each user's new
    key is in the cluster, no key of either password in the LDAP KDB."""
    for n, (how, flags, says) in enumerate([
            ("kpasswd", "", "Password changed"),
            ("kadmin", "", "changed"),
            ("expired-kinit", "+needchange", "expired")]):
        name, old, new = f"carol{n}", f"Carol-old-{n}4", f"Carol-new-{n}5"
        kr.kadmin_local(f"addprinc -pw {old} {flags} {name}")
        out = kl._change(kr, how, name, old, new)
        assert says in out.lower() or says in out, out
        kl.assert_changed(kr, name, old, new)
        assert_no_key_in_kdb(kr, name, [old, new])


def test_delprinc_and_status_on_ldap(kr):
    """delprinc removes the shares (status: two keys fewer, nothing
    unreferenced). Refresh on LDAP: test_refresh_given_ids_on_ldap."""
    kl.test_delprinc_removes_shares(kr)
    assert_no_key_in_kdb(kr, kr.tgs)


def test_history_and_purgekeys_on_ldap(kr):
    """test_key_lifecycle's password history (the history emptied once the
    dealer protects the user: the LDAP back end deletes krbPwdHistory) and
    purgekeys with purge-unreferenced, on the LDAP KDB."""
    kl.test_no_real_key_in_the_password_history(kr)
    assert_no_key_in_kdb(kr, "ida", ["Ida-pw-3333", "Ida-pw-4444"])
    kl.test_purgekeys_shares_removed_by_purge_unreferenced(kr)
    assert kr.slapd.alive()


def test_share_and_status_on_ldap(ldap_factory):
    """test_admin's share from a password (no trace of the key anywhere in
    the realm's files, slapd's database included) and status --kdb."""
    r = ldap_factory(module="test", extra_client_cns=("kmpc-rogue",))
    test_admin.test_share_from_password(r)
    assert_no_key_in_kdb(r, "alice")
    r2 = ldap_factory(module="test", extra_client_cns=("kmpc-rogue",))
    test_admin.test_status(r2)


def test_refresh_given_ids_on_ldap(ldap_factory, tmp_path):
    """test_refresh's refresh of given ids and --all resumed after a crash
    (the KDB's handles rewritten in LDAP); no user key in the KDB after."""
    factory, made = _recording(ldap_factory)
    test_refresh.test_refresh_given_ids_and_resume_after_a_crash(factory, tmp_path)
    assert len(made) == 1
    for u in ("user0", "user1", "user2", made[0].tgs):
        assert_no_key_in_kdb(made[0], u)


def _recording(factory):
    """factory, and the list of the realms it made."""
    made = []

    def make(**kw):
        made.append(factory(**kw))
        return made[-1]
    return make, made


def test_rebuild_party_on_ldap(ldap_factory, tmp_path):
    """test_replace_party's lost server rebuilt from the two survivors, the
    handles read from LDAP; the users' and krbtgt's keys stay out of it."""
    factory, made = _recording(ldap_factory)
    test_replace_party.test_replace_a_lost_server_from_the_two_survivors(factory, tmp_path)
    assert len(made) == 1
    for u in ("user0", "user5", made[0].tgs):
        assert_no_key_in_kdb(made[0], u)


# ---- S4U2Proxy with LDAP's delegation policy --------------------------------

def _delegation_principals(r):
    """test_unmodified_clients' principals, two more proxies and a second
    target, keytabs of the proxies and the targets; SERVICE and NOPT may
    delegate to TARGET (krbAllowedToDelegateTo)."""
    pws = tu._principals(r)
    r.addprinc(OTHER, enctypes=["aes256-cts-hmac-sha1-96"], flags="")
    r.addprinc(NOPT, enctypes=["aes256-cts-hmac-sha1-96"], flags="")
    r.addprinc(NOLIST, enctypes=["aes256-cts-hmac-sha1-96"],
               flags="+ok_to_auth_as_delegate")
    r.extract_keytab(f"{NOPT} {NOLIST}")
    r.extract_keytab(f"{TARGET} {OTHER}", os.path.join(r.dir, "targets.keytab"))
    for proxy in (SERVICE, NOPT):
        kmpc_ldap.set_delegation(r.slapd, r.realm, proxy, [f"{TARGET}@{r.realm}"])
    return pws


@pytest.fixture
def s4u_realms(ldap_factory, realm_factory, tmp_path):
    """(kmpc realm on LDAP, krbtgt in the cluster; a stock realm, KDC
    without the kdcmpc module and ordinary keys, on an LDAP KDB of its own
    with the same entries and policy; each with Debian's clients)."""
    tu._check_stock_binaries()
    r = ldap_factory(module="real")
    r.setup_krbtgt()
    r.setup_warmup()
    _delegation_principals(r)
    r.start()
    assert {row[2] for row in r.kdb_keys(r.tgs)} == {"handle"}
    s = realm_factory(enctypes=["aes256-cts-hmac-sha1-96"], ldap=True)
    _delegation_principals(s)
    s.start_kdc()
    clients = []
    for name, realm in (("kmpc", r), ("stock", s)):
        d = tmp_path / f"{name}-clients"
        d.mkdir()
        clients.append(tu.Clients(realm, str(d)))
    return r, s, clients


def _proxy(c, proxy, target, patched):
    """proxy logs in from its keytab (forwardable TGT), then S4U2Self for
    alice and S4U2Proxy to target with Debian's kvno or the patched one;
    the delegated ticket goes to an output ccache. (exit code, output,
    output ccache)."""
    r = c.r
    kt = r.keytab
    c.run("kinit", "-f", "-k", "-t", kt, proxy)
    if isinstance(r, KmpcRealm):
        tu._tgt_is_mpc_keyed(c)             # the kmpc realm's TGT: cluster-made
    out_cc = os.path.join(c.dir, "delegated.cc")
    if os.path.exists(out_cc):
        os.unlink(out_cc)
    argv = ["-U", "alice", "-P", "--out-cache", out_cc, target]
    if patched:
        # The realm's own krb5.conf and environment, the proxy's ccache.
        kvno, env = kmpc_realm.binpath("kvno"), dict(r.env, KRB5CCNAME="FILE:" + c.ccache)
    else:
        kvno, env = tu.STOCK["kvno"], c.env()
    p = subprocess.run([kvno, *argv], capture_output=True, text=True, env=env,
                       timeout=60)
    return p.returncode, p.stdout + p.stderr, out_cc


def _last_s4u2proxy_status(r, target):
    """The status word of the KDC's last TGS_REQ line for target, and
    whether it issued a delegated ticket: ISSUE with a
    CONSTRAINED-DELEGATION line for alice after it (MIT 1.21 logs that
    line for a refused request too)."""
    with open(r.kdc_log) as f:
        log = f.read()
    lines = [l for l in log.splitlines() if "TGS_REQ" in l and f"for {target}@" in l]
    assert lines, log[-3000:]
    m = re.search(r"TGS_REQ \(.*\}\) \S+: ([A-Z0-9_]+): ", lines[-1])
    assert m, lines[-1]
    tail = log[log.rfind(lines[-1]):]
    return m.group(1), (m.group(1) == "ISSUE" and
                        f"CONSTRAINED-DELEGATION s4u-client=alice@{REALM}" in tail)


def _delegated_ticket_ok(c, out_cc, target):
    """The delegated ticket names alice and decrypts with the target's
    keytab (Debian's klist and kvno on the output ccache)."""
    out = c.run("klist", ccache=out_cc)
    assert f"Default principal: alice@{REALM}" in out, out
    out = c.run("kvno", "-k", os.path.join(c.r.dir, "targets.keytab"), target,
                ccache=out_cc)
    assert f"{target}@{REALM}: kvno = 1, keytab entry valid" in out, out


CASES = [
    # proxy, target, allowed, the KDC's status word
    (SERVICE, TARGET, True, "ISSUE"),
    (SERVICE, OTHER, False, "NOT_ALLOWED_TO_DELEGATE"),
    (NOLIST, TARGET, False, "NOT_ALLOWED_TO_DELEGATE"),
    (NOPT, TARGET, False, "EVIDENCE_TKT_NOT_FORWARDABLE"),
]


def _run_cases(r, s, clients, cases, patched):
    for proxy, target, allowed, status in cases:
        results = []
        for c in clients:
            code, out, out_cc = _proxy(c, proxy, target, patched)
            word, delegated = _last_s4u2proxy_status(c.r, target)
            results.append((code, word, delegated))
            what = f"{proxy} -> {target} ({'patched' if patched else 'Debian'} kvno, " \
                   f"{'kmpc' if c.r is r else 'stock'} KDC)"
            assert (code == 0) == allowed, f"{what}: {out}"
            assert word == status and delegated == allowed, (what, word, out)
            if allowed:
                _delegated_ticket_ok(c, out_cc, target)
            else:
                assert "KDC can't fulfill requested option" in out, (what, out)
        assert results[0] == results[1], (proxy, target, results)


def test_s4u2proxy_with_the_ldap_delegation_policy(s4u_realms):
    """Each case with the kmpc KDC (krbtgt in the cluster) and the stock
    KDC, both on LDAP: allowed by krbAllowedToDelegateTo -> a ticket for
    alice to the target; a target not in the list, a proxy with no list
    (the RBCD fallback, which kldap does not implement), an evidence
    ticket that is not forwardable (no ok_to_auth_as_delegate) -> refused
    with the same error and KDC status (MIT 1.21: NOT_ALLOWED_TO_DELEGATE
    for a policy's denial, where 1.20 said UNSUPPORTED_S4U2PROXY_REQUEST). Then the policy is changed in
    LDAP and the KDCs follow it at the next request."""
    r, s, clients = s4u_realms
    for patched in (False, True):
        _run_cases(r, s, clients, CASES, patched)
    for realm in (r, s):
        kmpc_ldap.set_delegation(realm.slapd, realm.realm, SERVICE,
                                 [f"{TARGET}@{REALM}", f"{OTHER}@{REALM}"])
    for patched in (False, True):
        _run_cases(r, s, clients, [(SERVICE, OTHER, True, "ISSUE")], patched)
    for realm in (r, s):
        kmpc_ldap.set_delegation(realm.slapd, realm.realm, SERVICE, [])
    for patched in (False, True):
        _run_cases(r, s, clients,
                   [(SERVICE, TARGET, False, "NOT_ALLOWED_TO_DELEGATE")], patched)
    kdc = open(r.kdc_log).read()
    assert "refusing" not in kdc and "MPC_S4U2PROXY" not in kdc
    assert r.alive() and r.slapd.alive() and s.slapd.alive()


# ---- MIT's own LDAP KDB tests in k5test's kmpc mode ---------------------------

def test_mit_t_kdb_krbtgt_mode(tmp_path):
    """MIT's tests/t_kdb.py (kdbtest on db2, then a slapd of its own with
    kdb5_ldap_util create/modify, principals at given DNs, ticket policies,
    the KDC on LDAP, aliases, password history, renames, dump/load, SASL
    EXTERNAL and DIGEST-MD5 binds) with K5TEST_KMPC=krbtgt: each of its
    three LDAP realms gets its krbtgt key made in the cluster right after
    kdb5_ldap_util create (krb5's k5test kmpc-mode patch); the db2 realm only runs
    kdbtest (no KDB of its own, no krbtgt)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.environ.get("KMPC_BUILD", os.path.join(root, "build"))
    argv = ["make", "-s", "--no-print-directory", "-C", root, "test-mit-kmpc",
            "MIT_NO_BUILD=1", "MODE=krbtgt", "MIT_TESTS=tests/t_kdb",
            f"MIT_OUT={tmp_path}", f"BUILD={build}"]
    if os.environ.get("KMPC_CMAKE_BUILD"):
        argv.append(f"CMAKE_BUILD={os.environ['KMPC_CMAKE_BUILD']}")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "1 passed, 0 failed (mode krbtgt)" in out, out
    assert "krbtgt in the cluster in 3 of 4 realms" in out, out
    testlog = (tmp_path / "krbtgt" / "tests_t_kdb.testlog").read_text()
    assert "*** Success: LDAP and DB2 KDB tests" in testlog
    shared = re.findall(r"krbtgt/KRBTEST\.COM@KRBTEST\.COM: shared from a random key "
                        r"as aes256-ctr-mpc", testlog)
    assert len(shared) == 3, testlog[-3000:]
    # The LDAP realm the KDC tests run on: its krbtgt holds the MPC key
    # (getprinc) before "LDAP KDC operation" logs in through it.
    first_share = testlog.index(shared[0])
    kdc_ops = testlog.index("====== LDAP KDC operation ======")
    assert first_share < kdc_ops
    assert "*** kmpc: MPC servers 1" not in testlog[first_share:kdc_ops]
    assert "Key: vno 2, aes256-ctr-mpc" in testlog[first_share:]
