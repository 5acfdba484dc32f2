"""FAST, FAST cookies and auth indicators (CAMMAC) with the krbtgt key held
by the MPC cluster (krb5's key-operation layer patch).  The "cluster" is krb5's test kdcmpc
module (test_kdc_handles.handle_realm: real keys in a file, every job completed
asynchronously), so every ticket and signature can be checked here with the
known keys.

- FAST armor: the armor TGT is decrypted by a DECRYPT job (usage 2), the
  armor key made as MIT does (KRB-FX-CF2 of the armor subkey and the TGT's
  session key).
- Users with ordinary keys (krbtgt-only mode) get encrypted challenge,
  SPAKE (cookies under a key derived from the master key) and kpasswd with a
  TGT in the ccache (kpasswd armors with it).
- Users whose key is in the cluster are refused FAST cleanly: FAST's
  KRB-FX-CF2 with the client key would need a password-equivalent in the KDC.
- Auth indicators: the CAMMAC's KDC and service verifiers under handles are
  CHECKSUM jobs (usage 64), the KDC verifier of a presented TGT a VERIFY job.
"""
import re
import secrets

import pytest

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import tickets
import pac_ref
from kmpc_harness.cluster import REALM, SERVICE, TGS, password as _password
from test_kdc_handles import handle_realm, _events, _key, _rounds, _ticket
from test_metrics import parse, scrape, value

INDICATOR = "fast-ec"
MPC_SERVICE = "host/mpc.kmpc.test"
TGT = ["krbtgt", REALM]


def _realm(kmpc_factory, **kw):
    """alice (key in the cluster), bob (ordinary aes256-cts key), an ordinary
    service and one whose key is in the cluster; KDC started."""
    m = handle_realm(kmpc_factory, **kw).setup(users=("alice",))
    m.passwords["bob"] = _password()
    m.addprinc("bob", m.passwords["bob"],
               enctypes=["aes256-cts-hmac-sha1-96"])
    pw = _password()
    m.addprinc(MPC_SERVICE, pw, enctypes=["aes256-ctr-mpc"], flags="")
    m.migrate(MPC_SERVICE, pw)
    return m.start()


@pytest.fixture
def ec(kmpc_factory):
    """Encrypted challenge adds an auth indicator (kdc.conf, as MIT's
    t_preauth.py)."""
    return _realm(kmpc_factory, realm_extra=(
        f"        encrypted_challenge_indicator = {INDICATOR}\n"))


def _armor(m, tmp_path):
    """A FAST armor ccache holding alice's TGT (under the krbtgt handle)."""
    armor = "FILE:" + str(tmp_path / "armor")
    m.run(["kinit", "-c", armor, "alice"],
          input=m.passwords["alice"] + "\n")
    return armor


def _fast_kinit(m, armor, name, **kw):
    return m.run(["kinit", "-T", armor, name],
                 input=m.passwords[name] + "\n", **kw)


def _check_cammac(plain, server_key, krbtgt_key):
    """The ticket has one CAMMAC carrying INDICATOR whose KDC verifier
    (krbtgt) and service verifier (server_key) are gmac-aes256-mpc and
    verify."""
    cms = pac_ref.cammacs(plain)
    assert len(cms) == 1, cms
    cm = cms[0]
    assert cm.indicators() == [INDICATOR]
    for (ctype, val), key, data in ((cm.kdc, krbtgt_key, cm.kdcver_input()),
                                    (cm.svc, server_key, cm.elements)):
        assert ctype == pac_ref.GMAC_AES256_MPC, ctype
        assert pac_ref.ctr_mpc_ref.verify_checksum(
            key, pac_ref.USAGE_CAMMAC, data, val)
    return cm


# ---- FAST armor -----------------------------------------------------------

def test_fast_armor_and_encrypted_challenge(ec, tmp_path):
    """kinit -T with a TGT under the krbtgt handle as armor: the armor TGT is
    a DECRYPT job, bob (ordinary key) authenticates with encrypted
    challenge, and his TGT carries the indicator in a CAMMAC whose two
    verifiers (both krbtgt) were made by CHECKSUM jobs before the PAC's."""
    armor = _armor(ec, tmp_path)
    before = len(ec.journal_lines())
    trace = _fast_kinit(ec, armor, "bob", env=ec.trace_env())
    assert re.search(r"encrypted_challenge \(138\) \(real\) returned: 0/Success",
                     trace), trace
    assert "refusing" not in ec.kdc_log_text()
    # First request (PREAUTH_REQUIRED), then the one with the challenge:
    # each opens the armor; the CAMMAC's two verifiers alongside the PAC's
    # server signature (a TGT has no ticket signature covering the CAMMAC),
    # the KDC signature, then the ticket.
    assert _rounds(_events(ec, before)) == [
        ["DECRYPT 2"], ["DECRYPT 2"],
        ["CHECKSUM 17", "CHECKSUM 64", "CHECKSUM 64"],
        ["CHECKSUM 17"], ["ENCRYPT 2"]], _events(ec, before)
    out = ec.run(["klist"])
    assert f"bob@{REALM}" in out and TGS in out, out
    krbtgt = _key(ec, TGS)
    _, _, der_tgt = _ticket(ec, TGT)
    plain = pac_ref.Ticket(der_tgt, krbtgt).plain
    _check_cammac(plain, krbtgt, krbtgt)
    pac_ref.check_signatures(pac_ref.EncTicketPart(plain), krbtgt, krbtgt,
                             ticket_sig=False)


def test_tampered_armor_ticket_is_refused(ec, tmp_path):
    """An armor TGT whose ciphertext was altered fails its DECRYPT job (tag
    checked in the MPC); nothing else is done for the request."""
    armor = _armor(ec, tmp_path)
    path = armor[len("FILE:"):]
    spans = [s for s in tickets.ccache_ticket_spans(path) if s[0] == TGT]
    _, start, length = spans[0]
    with open(path, "r+b") as f:
        f.seek(start + length - 20)
        b = f.read(1)
        f.seek(start + length - 20)
        f.write(bytes([b[0] ^ 1]))
    before = len(ec.journal_lines())
    out = _fast_kinit(ec, armor, "bob", expected_code=1)
    assert "bob" not in ec.run(["klist"], expected_code=None)
    assert [e[1:] for e in _events(ec, before) if e[0] == "submit"] == \
        [("DECRYPT", "2")], _events(ec, before)
    assert "while handling ap-request armor" in ec.kdc_log_text(), out


def test_fast_is_refused_for_a_user_whose_key_is_in_the_cluster(ec, tmp_path):
    """FAST strengthens the reply key with KRB-FX-CF2 of the client key and
    encrypted challenge needs KRB-FX-CF2 of it too: a password-equivalent
    the KDC must not learn.  alice is refused with a clear log line, before
    any pre-authentication or MPC work besides the armor."""
    armor = _armor(ec, tmp_path)
    before = len(ec.journal_lines())
    out = _fast_kinit(ec, armor, "alice", expected_code=1)
    assert "KDC policy rejects request" in out, out
    assert (f"kdcmpc: refusing FAST for alice@{REALM}: its key is MPC-held, "
            "and FAST's KRB-FX-CF2 with the client key would need a "
            "password-equivalent in the KDC") in ec.kdc_log_text()
    assert [e[1:] for e in _events(ec, before) if e[0] == "submit"] == \
        [("DECRYPT", "2")], _events(ec, before)
    # Without FAST alice still logs in (encrypted timestamp in the cluster).
    ec.login("alice")
    assert ec.kdc_alive()


def test_kpasswd_with_a_tgt_in_the_ccache(ec):
    """kpasswd armors its AS-REQ for kadmin/changepw with the TGT in the
    default ccache (a TGT under the krbtgt handle); the password change goes
    through kadmind and the new password works."""
    ec.start_kadmind()
    ec.login("bob")
    before = len(ec.journal_lines())
    new = _password()
    out = ec.run(["kpasswd", "bob"],
                 input=f"{ec.passwords['bob']}\n{new}\n{new}\n")
    assert "Password changed" in out, out
    assert ("submit", "DECRYPT", "2") in _events(ec, before)
    assert "refusing" not in ec.kdc_log_text()
    ec.passwords["bob"] = new
    ec.login("bob")
    # alice (key in the cluster) with her TGT in the ccache: refused
    # cleanly, her password unchanged.
    ec.login("alice")
    out = ec.run(["kpasswd", "alice"],
                 input=f"{ec.passwords['alice']}\n{new}\n{new}\n",
                 expected_code=1)
    assert "KDC policy rejects request" in out, out
    assert f"kdcmpc: refusing FAST for alice@{REALM}" in ec.kdc_log_text()
    ec.login("alice")
    # With an empty ccache kpasswd uses no armor: encrypted timestamp in the
    # cluster (as docs/limitations.md says).
    out = ec.run(["kpasswd", "alice"],
                 input=f"{ec.passwords['alice']}\n{new}\n{new}\n",
                 env={**ec.env, "KRB5CCNAME": "MEMORY:none"})
    assert "Password changed" in out, out


# ---- FAST cookies -----------------------------------------------------------

def test_spake_with_cookies_and_an_mpc_krbtgt(kmpc_factory):
    """SPAKE keeps its state in the FAST cookie between the KDC's challenge
    and the client's response; with the krbtgt in the cluster the cookie key
    is derived from the master key.  bob (ordinary key) logs in with SPAKE;
    alice (key in the cluster) is not offered SPAKE (it needs her key) and
    falls back to encrypted timestamp."""
    m = _realm(kmpc_factory,
               krb5_conf_extra="    spake_preauth_groups = edwards25519\n")
    trace = m.run(["kinit", "bob"], input=m.passwords["bob"] + "\n",
                  env=m.trace_env())
    assert re.search(r"Sending SPAKE response", trace), trace
    assert re.search(r"spake \(151\) \(real\) returned: 0/Success", trace), \
        trace
    assert "refusing" not in m.kdc_log_text()
    assert f"bob@{REALM}" in m.run(["klist"])
    trace = m.login("alice", env=m.trace_env())
    assert "Sending SPAKE response" not in trace
    assert re.search(r"AS key obtained for encrypted timestamp: "
                     r"aes256-ctr-mpc/", trace), trace


# ---- auth indicators (CAMMAC) ----------------------------------------------

def test_auth_indicator_reaches_service_tickets(ec, tmp_path):
    """bob's indicator from encrypted challenge survives into service
    tickets: the TGT's CAMMAC KDC verifier is a VERIFY job (usage 64) in the
    round of the first signature job; require_auth is met for an ordinary
    service and for one whose key is in the cluster, whose ticket's CAMMAC
    verifiers (krbtgt, service key) both verify."""
    for svc in (SERVICE, MPC_SERVICE):
        ec.kadmin_local(f"setstr {svc} require_auth {INDICATOR}")
    armor = _armor(ec, tmp_path)
    _fast_kinit(ec, armor, "bob")

    before = len(ec.journal_lines())
    out = ec.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out
    # TGT; VERIFY of its PAC server signature and CAMMAC KDC verifier with
    # the new ticket's CAMMAC KDC verifier; ticket signature; full-PAC
    # signature (MIT 1.21); KDC signature.
    assert _rounds(_events(ec, before)) == [
        ["DECRYPT 2"], ["CHECKSUM 64", "VERIFY 17", "VERIFY 64"],
        ["CHECKSUM 17"], ["CHECKSUM 17"], ["CHECKSUM 17"]], _events(ec, before)

    out = ec.run(["kvno", MPC_SERVICE])
    assert "kvno = " in out, out
    _, _, der_t = _ticket(ec, ["host", "mpc.kmpc.test"])
    svc_key = _key(ec, MPC_SERVICE)
    plain = pac_ref.Ticket(der_t, svc_key).plain
    _check_cammac(plain, svc_key, _key(ec, TGS))
    pac_ref.check_signatures(pac_ref.EncTicketPart(plain), svc_key,
                             _key(ec, TGS), ticket_sig=True)

    # Without FAST there is no indicator, and require_auth refuses.
    ec.login("bob")
    out = ec.run(["kvno", SERVICE], expected_code=1)
    assert "KDC policy rejects request" in out, out
    assert not pac_ref.cammacs(
        pac_ref.Ticket(_ticket(ec, TGT)[2], _key(ec, TGS)).plain)


def test_altered_cammac_in_tgt_is_refused(ec, tmp_path):
    """A TGT whose CAMMAC KDC verifier was altered (and the ticket encrypted
    again with the krbtgt key, so only the VERIFY job can notice) is
    refused; the same TGT re-encrypted unaltered works."""
    armor = _armor(ec, tmp_path)
    _fast_kinit(ec, armor, "bob")
    krbtgt = _key(ec, TGS)
    start, length, der_tgt = _ticket(ec, TGT)
    tgt = pac_ref.Ticket(der_tgt, krbtgt)
    cm = pac_ref.cammacs(tgt.plain)[0]
    with open(ec.ccache, "r+b") as f:
        f.seek(start)
        f.write(tgt.encode(pac_ref.flip_bytes(tgt.plain, cm.kdc[1], bit=3)))
    out = ec.run(["kvno", SERVICE], expected_code=1)
    assert "Message stream modified" in out, out
    assert "kdcmpc: a PAC signature or CAMMAC verifier of a presented " \
        "ticket did not verify" in ec.kdc_log_text()
    with open(ec.ccache, "r+b") as f:
        f.seek(start)
        f.write(tgt.encode())
    out = ec.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out


def test_renewal_keeps_the_auth_indicator(ec, tmp_path):
    """kinit -R of a TGT with an indicator: the old CAMMAC's KDC verifier is
    a VERIFY job, the renewed TGT's CAMMAC verifiers share the round of its
    PAC server signature (and the VERIFY jobs), and the indicator still
    meets require_auth after."""
    ec.kadmin_local(f"setstr {SERVICE} require_auth {INDICATOR}")
    armor = _armor(ec, tmp_path)
    ec.run(["kinit", "-T", armor, "-r", "1d", "bob"],
           input=ec.passwords["bob"] + "\n")
    before = len(ec.journal_lines())
    ec.run(["kinit", "-R"])
    assert _rounds(_events(ec, before)) == [
        ["DECRYPT 2"],
        ["CHECKSUM 17", "CHECKSUM 64", "CHECKSUM 64", "VERIFY 17",
         "VERIFY 64"],
        ["CHECKSUM 17"], ["ENCRYPT 2"]], _events(ec, before)
    krbtgt = _key(ec, TGS)
    plain = pac_ref.Ticket(_ticket(ec, TGT)[2], krbtgt).plain
    _check_cammac(plain, krbtgt, krbtgt)
    out = ec.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out


# ---- the real cluster ----------------------------------------------------

def test_fast_and_indicators_through_the_mpc_servers(kmpc_factory, tmp_path):
    """The same with the real kdcmpc module and three MPC servers: the armor
    TGT is decrypted and the CAMMAC verifiers (usage 64) are made and
    checked on shares; require_auth is met for bob (ordinary key) after
    kinit -T, and alice (key in the cluster) is refused FAST. An armored AS
    request is two exchanges of kind as_fast, one Run each by their plans
    (docs/design/exchange-plan.md 1.5 "FAST-armored AS"): the armor
    ticket's decryption, then the AS exchange (the inner request is
    encrypted under the armor's subkey, so its plan is known only after
    the first)."""
    kmpc_cluster.find_built("kdc-plugin/libkmpc_kdc.so")  # RealmError if absent
    r = kmpc_factory(module="real", metrics=True, realm_extra=(
        f"        encrypted_challenge_indicator = {INDICATOR}\n"))
    r.setup_krbtgt()
    r.setup_warmup()
    r.add_service()
    pw = {"alice": _password(), "bob": _password()}
    r.add_users({"alice": pw["alice"]})
    r.addprinc("bob", pw["bob"], enctypes=["aes256-cts-hmac-sha1-96"])
    r.kadmin_local(f"setstr {SERVICE} require_auth {INDICATOR}")
    r.start()
    armor = "FILE:" + str(tmp_path / "armor")
    r.run(["kinit", "-c", armor, "alice"], input=pw["alice"] + "\n")
    m0 = parse(scrape(r.kdc_metrics_url))
    r.run(["kinit", "-T", armor, "bob"], input=pw["bob"] + "\n")
    m = parse(scrape(r.kdc_metrics_url))
    # The first request (PREAUTH_REQUIRED) opens the armor; the one with
    # the encrypted challenge opens it again and then is the AS exchange.
    fast = [value(m, n, missing=0, exchange="as_fast", result="ok")
            - value(m0, n, missing=0, exchange="as_fast", result="ok")
            for n in ("kmpc_kdc_exchanges_total", "kmpc_kdc_exchange_runs_total")]
    assert fast == [3, 3], fast
    assert value(m, "kmpc_kdc_plan_misses_total", missing=0) == \
        value(m0, "kmpc_kdc_plan_misses_total", missing=0)
    out = r.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out
    out = r.run(["kinit", "-T", armor, "alice"], input=pw["alice"] + "\n",
                expected_code=1)
    assert "KDC policy rejects request" in out, out
    # bob without FAST: no indicator, refused by require_auth.
    r.kinit("bob", pw["bob"])
    out = r.run(["kvno", SERVICE], expected_code=1)
    assert "KDC policy rejects request" in out, out
    assert r.kdc_alive() and r.cluster.alive()
