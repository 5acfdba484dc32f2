"""Pre-authentication for every principal whose key is in the cluster
(issue 62, finding 3: AS-REP roasting by anyone).

An AS reply under a user's key is an offline verifier of the password: MIT's
KDC gives one to anyone who names the user in an AS-REQ without
pre-authentication, unless the principal has +requires_preauth, and
`addprinc`'s default flags do not set it. kmpc's KDC demands
pre-authentication of every client holding a key handle of any enctype
(aes*-ctr-mpc, aes*-cts) that is not a service (its kmpc_key_kind string
attribute says "service"), whatever its flags and whichever enctype the
request names (krb5 patch 0024-KDC-demand-pre-authentication,
kdc_mpc_missing_preauth()); the key dealer and `kmpc-admin share` set
+requires_preauth on the users whose keys they deal; `kmpc-admin status
--kdb` names a user in the cluster without it.

Real processes: three kmpc-mpc-server, kadmin.local with kmpc's key dealer,
krb5kdc with the real kdcmpc module; the test sends raw AS-REQs without
pre-authentication (krb_der.py), as an attacker who knows only the name.
"""
import secrets

import pytest

import ctr_mpc_ref
import krb_der
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.cluster import default_salt

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server",
                           "mpc-server/libkmpc_dealer.so")

CTS256 = "aes256-cts-hmac-sha1-96"
CTS128 = "aes128-cts-hmac-sha1-96"
ENCTYPES = ("aes256-ctr-mpc", "aes128-ctr-mpc", CTS256, CTS128)
ETYPE = {"aes256-ctr-mpc": -29002, "aes128-ctr-mpc": -29001, CTS256: 18, CTS128: 17}
KDC_ERR_PREAUTH_REQUIRED = 25
MPC_FIRST = [ETYPE["aes256-ctr-mpc"], ETYPE[CTS256]]  # the patched kinit's order
COLD_PROGRAMS = {"deadline_ms": "30000"}  # first aes*-cts programs (test_cts_handles.py)


@pytest.fixture
def realm(kmpc_factory):
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS)
    kr.setup_krbtgt()
    kr.dealer_kinds = [("service", "host/dealt*")]
    kr.enable_dealer()
    kr.start()
    return kr


def as_req(realm, client, etypes):
    """An AS-REQ for krbtgt/realm naming etypes, without any padata: what an
    attacker who knows only the client's name sends."""
    body = krb_der.seq(
        krb_der.ctx(0, krb_der.der(0x03, b"\x00\x40\x00\x00\x00")),
        krb_der.ctx(1, krb_der.principal(1, *client.split("/"))),
        krb_der.ctx(2, krb_der.gstr(realm)),
        krb_der.ctx(3, krb_der.principal(2, "krbtgt", realm)),
        krb_der.ctx(5, krb_der.der(0x18, b"20370913024805Z")),
        krb_der.ctx(7, krb_der.der_int((1 << 30) | secrets.randbits(30))),
        krb_der.ctx(8, krb_der.seq(*(krb_der.der_int(e) for e in etypes))))
    return krb_der.der(0x6A, krb_der.seq(krb_der.ctx(1, krb_der.der_int(5)),
                                         krb_der.ctx(2, krb_der.der_int(10)),
                                         krb_der.ctx(4, body)))


def enc_part(as_rep):
    """(etype, cipher) of an AS-REP's enc-part."""
    for tag, _, body in krb_der.children(krb_der.content(krb_der.content(as_rep))):
        if tag == 0xA6:
            f = {t: b for t, _, b in krb_der.children(krb_der.content(body))}
            return (int.from_bytes(krb_der.content(f[0xA0]), "big", signed=True),
                    krb_der.content(f[0xA2]))
    raise AssertionError("no enc-part")


def roasted(kr, princ, password, rep):
    """What an AS-REP gives its requester: a note naming the enc-part's
    enctype and whether it decrypts under the password's key (an offline
    verifier of the password)."""
    etype, cipher = enc_part(rep)
    name = {v: k for k, v in ETYPE.items()}.get(etype, str(etype))
    if etype in (-29002, -29001):
        key = ctr_mpc_ref.string_to_key(name, password.encode(),
                                        default_salt(f"{princ}@{kr.realm}").encode())
        try:
            ctr_mpc_ref.decrypt(key, 3, cipher)
            return f"AS-REP under {name}, decrypts under the password's key"
        except Exception:  # noqa: BLE001 - the note says it did not
            pass
    return f"AS-REP under {name} ({len(rep)} bytes)"


def getprinc(kr, princ):
    return kr.kadmin_local(f"getprinc {princ}")


def test_unauthenticated_as_req_naming_any_enctype_gets_preauth_required(realm):
    """A user made by addprinc -pw whose keys are handles (aes*-ctr-mpc and
    aes*-cts, all of one password) and who lacks +requires_preauth (MIT's
    default for addprinc; an admin may clear it): an AS-REQ without
    pre-authentication naming any of its enctypes, alone or first in a
    list, gets PREAUTH_REQUIRED, never an AS-REP under its key."""
    kr, princ, pw = realm, "roast", "Roast-pw-4711"
    kr.kadmin_local(f"addprinc -pw {pw} {princ}")
    kr.kadmin_local(f"modprinc -requires_preauth {princ}")
    assert "REQUIRES_PRE_AUTH" not in getprinc(kr, princ)
    rows = kr.kdb_keys(princ)
    assert {r[2] for r in rows} == {"handle"}, rows
    held = {r[1] for r in rows}
    assert {"aes256-ctr-mpc", CTS256} <= held, rows
    # Each list's first enctype the user holds is the reply key; the KDC
    # takes the session key's from the list too, never an MPC one
    # (ETYPE_NOSUPP for a list of MPC enctypes alone), so the MPC ones come
    # with an aes*-cts enctype after them, as the patched kinit sends them.
    requests = [[ETYPE[e], ETYPE[CTS256]] for e in ENCTYPES if e in held]
    requests.append([ETYPE[CTS256], ETYPE["aes256-ctr-mpc"]])
    if CTS128 in held:
        # RC4 first: a key it does not hold; aes256-cts for the session key.
        requests.append([23, ETYPE[CTS128], ETYPE[CTS256]])
    for etypes in requests:
        rep = krb_der.send_tcp(kr.kdc_port, as_req(kr.realm, princ, etypes))
        if rep[:1] == b"\x6b":
            pytest.fail(f"etypes {etypes}: {roasted(kr, princ, pw, rep)}")
        assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_REQUIRED, (etypes, rep[:8].hex())
    log = kr.kdc_log_text()
    assert "NEEDED_PREAUTH" in log
    # Nothing was planned for the cluster: no reply job the servers refused.
    assert "JOB_MALFORMED" not in log and "ENCRYPT job (usage 3) failed" not in log, log[-3000:]
    # Control: with the password the user logs in (pre-authenticated).
    kr.kinit(princ, pw)
    assert kr.kdc_alive()


def test_a_service_gets_mits_answer(realm):
    """A service (kmpc_key_kind "service": a random key), its key an
    aes256-ctr-mpc or an aes256-cts handle, without +requires_preauth gets
    its AS-REP without pre-authentication, as from MIT's KDC (`kinit -k`
    asks so first); with +requires_preauth, PREAUTH_REQUIRED."""
    kr = realm
    for svc, enctype in (("host/roastsvc.kmpc.test", "aes256-ctr-mpc"),
                         ("host/dealtcts.kmpc.test", CTS256)):
        kr.kadmin_local(f"addprinc -nokey {svc}")
        kr.kadmin_local(f"setstr {svc} kmpc_key_kind service")
        kr.kadmin_local(f"cpw -randkey -e {enctype}:normal {svc}")
        assert [(r[1], r[2]) for r in kr.kdb_keys(svc)] == [(enctype, "handle")]
        assert "REQUIRES_PRE_AUTH" not in getprinc(kr, svc)
        etypes = [ETYPE[enctype], ETYPE[CTS256]]
        rep = krb_der.send_tcp(kr.kdc_port, as_req(kr.realm, svc, etypes))
        assert rep[:1] == b"\x6b", (svc, rep[:8].hex(), kr.kdc_log_text()[-3000:])
        assert enc_part(rep)[0] == ETYPE[enctype]
        kr.kadmin_local(f"modprinc +requires_preauth {svc}")
        rep = krb_der.send_tcp(kr.kdc_port, as_req(kr.realm, svc, etypes))
        assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_REQUIRED, (svc, rep[:8].hex())
    assert kr.kdc_alive()


def test_dealer_sets_requires_preauth_on_users_only(realm):
    """kadmind's key dealer marks a principal whose key it deals as a user's
    +requires_preauth: addprinc -pw, and cpw -pw after an admin cleared it;
    a service's random key (the dealer's `service` pattern, host/dealt*)
    leaves the flags alone."""
    kr = realm
    kr.kadmin_local("addprinc -pw Ursa-pw-1 ursa")
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, "ursa")
    kr.kadmin_local("modprinc -requires_preauth ursa")
    kr.kadmin_local("cpw -pw Ursa-pw-2 ursa")
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, "ursa")
    kr.kinit("ursa", "Ursa-pw-2")

    svc = "host/dealtsvc.kmpc.test"
    kr.kadmin_local(f"addprinc -randkey -e {CTS256}:normal {svc}")
    assert [(r[1], r[2]) for r in kr.kdb_keys(svc)] == [(CTS256, "handle")]
    assert "REQUIRES_PRE_AUTH" not in getprinc(kr, svc)


def test_kpasswd_through_kadmind_sets_requires_preauth(realm):
    """kadmind's dealer (kpasswd: a password change through kadmind, the
    dealer's kadm5_hook post-commit there) marks the user again after an
    admin cleared the flag."""
    kr = realm
    kr.kadmin_local("addprinc -pw Kiki-pw-1 kiki")
    kr.kadmin_local("modprinc -requires_preauth kiki")
    assert "REQUIRES_PRE_AUTH" not in getprinc(kr, "kiki")
    kr.start_kadmind()
    out = kr.run(["kpasswd", "kiki"], input="Kiki-pw-1\nKiki-pw-2\nKiki-pw-2\n")
    assert "Password changed" in out, out
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, "kiki")
    assert {r[2] for r in kr.kdb_keys("kiki")} == {"handle"}
    kr.kinit("kiki", "Kiki-pw-2")


def test_share_sets_requires_preauth_and_status_names_users_without_it(realm):
    """kmpc-admin share marks a user it moves into the cluster
    +requires_preauth (not a service: --randkey --service); status --kdb
    names a principal holding a user's key (the servers' kind) whose flag
    an admin cleared, and not the service."""
    kr = realm
    kr.addprinc("erin", "Erin-pw-1", enctypes=[CTS256], flags="-requires_preauth")
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "erin")
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, "erin")
    svc = "host/sharedsvc.kmpc.test"
    kr.addprinc(svc, enctypes=[CTS256], flags="-requires_preauth")
    kr.admin("share", "--randkey", "--service", f"--enctype={CTS256}", svc)
    assert "REQUIRES_PRE_AUTH" not in getprinc(kr, svc)

    # A password set on a principal marked "service" is dealt as
    # user+service (the dealer's KindOf): the KDC exempts it from
    # pre-authentication by the attribute, so status names it by its key.
    pwsvc = "host/pwsvc.kmpc.test"
    kr.kadmin_local(f"addprinc -nokey {pwsvc}")
    kr.kadmin_local(f"setstr {pwsvc} kmpc_key_kind service")
    kr.kadmin_local(f"cpw -e aes256-ctr-mpc:normal,{CTS256}:normal -pw Pwsvc-pw-1 {pwsvc}")
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, pwsvc)

    for p in ("erin", pwsvc):
        kr.kadmin_local(f"modprinc -requires_preauth {p}")
    rc, out, _ = kr.admin("status", "--kdb", expected_code=None)
    for p in ("erin", pwsvc):
        line = f"kdb: {p}@{kr.realm} holds a user's key in the cluster but not +requires_preauth"
        assert line in out, out
    assert rc == 1, out
    assert f"{svc}@{kr.realm} holds a user's key" not in out, out
    for p in ("erin", pwsvc):
        kr.kadmin_local(f"modprinc +requires_preauth {p}")
    rc, out, _ = kr.admin("status", "--kdb", expected_code=None)
    assert "not +requires_preauth" not in out, out


def test_kdc_demands_preauth_for_a_ctr_mpc_handle_without_the_servers(kmpc_factory):
    """The KDC's rule alone: krb5's test kdcmpc module (clusters=0) computes
    every job it is given, as servers without a user-key rule would. A user
    whose aes256-ctr-mpc key is a handle and who lacks +requires_preauth:
    an AS-REQ without pre-authentication naming aes256-ctr-mpc first gets
    PREAUTH_REQUIRED (on the KDC before, an AS-REP under the password's
    key), and the module is given no job for it."""
    kr = kmpc_factory(clusters=0, test_module_delay_ms=5)
    kr.setup(users=("mila",))
    kr.kadmin_local("modprinc -requires_preauth mila")
    assert "REQUIRES_PRE_AUTH" not in getprinc(kr, "mila")
    assert [(r[1], r[2]) for r in kr.kdb_keys("mila")] == [("aes256-ctr-mpc", "handle")]
    kr.start()
    before = len(kr.journal_lines())
    rep = krb_der.send_tcp(kr.kdc_port, as_req(kr.realm, "mila", MPC_FIRST))
    if rep[:1] == b"\x6b":
        pytest.fail(roasted(kr, "mila", kr.passwords["mila"], rep))
    assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_REQUIRED, rep[:8].hex()
    assert not [j for j in kr.journal_lines()[before:] if j.startswith("submit")], \
        kr.journal_lines()[before:]
    kr.login("mila")  # control: with the password (pre-authenticated)


def test_dealer_and_share_set_requires_preauth_on_ldap(kmpc_factory):
    """On an LDAP KDB, whose back end writes only the fields an entry's mask
    names: the dealer's write (KADM5_ATTRIBUTES) and share's modify set the
    flag there too."""
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      ldap=True)
    kr.setup_krbtgt()
    kr.enable_dealer()
    kr.kadmin_local("addprinc -pw Lara-pw-1 lara")
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, "lara")
    kr.kadmin_local("modprinc -requires_preauth lara")
    kr.kadmin_local("cpw -pw Lara-pw-2 lara")
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, "lara")
    kr.addprinc("otto", "Otto-pw-1", enctypes=[CTS256], flags="-requires_preauth")
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "otto")
    assert "REQUIRES_PRE_AUTH" in getprinc(kr, "otto")
