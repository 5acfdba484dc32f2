"""The KDC with MPC-held keys: the KDB holds 40-byte key handles for the
krbtgt and for users, and the patched krb5kdc routes every operation with
them to a kdcmpc module.  Here the module is krb5's test module
(kdcmpc/test.so), which holds the real keys in a file and completes every
job asynchronously from a verto timeout, so the KDC's asynchronous paths run
as they will against the MPC cluster.

Keys are migrated the way an admin would do it: create the principal with an
aes256-ctr-mpc key, read the key out (kmpc-kdb-handle get-key), hand it to
the "cluster" (the module's key file), and replace the KDB key by a handle
(kmpc-kdb-handle set).
"""
import os
import re
import secrets
import struct
import subprocess
import time

import pytest

from kmpc_harness import tickets
import krb_der
from kmpc_harness import realm as kmpc_realm
import pac_ref
from kmpc_harness.cluster import REALM, SERVICE, TGS, password as _password
from kmpc_harness.realm import binpath


def handle_realm(kmpc_factory, delay_ms=30, workers=0, **kw):
    """A KmpcRealm without MPC servers (clusters=0): its "cluster" is krb5's
    test module's key file, the module journals every job (journal_lines),
    and fails them all while test_failflag exists."""
    return kmpc_factory(clusters=0, test_module_delay_ms=delay_ms, kdc_workers=workers, **kw)


@pytest.fixture
def mpc(kmpc_factory):
    return handle_realm(kmpc_factory).setup(users=("alice",)).start()


def _klist(realm):
    out = realm.run(["klist", "-e"])
    return re.findall(r"Etype \(skey, tkt\): (\S+), (\S+)", out), out


def _kinit(m, name="alice", **kw):
    return m.login(name, **kw)


# A KDC that answers KDC_ERR_SVC_UNAVAILABLE is given up at once (krb5 patch
# 0005); MIT's client would keep retrying it for ~17 s.
PROMPT_SECONDS = 5


def _timed_kinit(m, **kw):
    """_kinit, and how long it took (seconds)."""
    return m.timed_login(**kw)


# ---- the database -------------------------------------------------------

def test_kdb_holds_only_handles(mpc):
    for princ in ("alice", TGS):
        out = mpc.kadmin_local(f"getprinc {princ}")
        keys = re.findall(r"Key: vno (\d+), (\S+)", out)
        assert [k[1] for k in keys] == ["aes256-ctr-mpc"], out
        assert int(keys[0][0]) >= 2, out
        # What the KDB holds, read with the master key: handles only.
        out, _ = mpc.kdb_handle_run("keys", princ)
        kinds = [line.split()[2] for line in out.splitlines()]
        assert kinds and set(kinds) == {"handle"}, out
    # A principal holding handles can never have a key read out
    # (kadm5_get_principal_keys refuses it: krb5's key dealer patch).
    _, err = mpc.kdb_handle_run("get-key", "alice", "aes256-ctr-mpc", expected_code=1)
    assert "held by the MPC cluster and cannot be extracted" in err


# ---- AS exchange ---------------------------------------------------------

def test_kinit_through_the_module(mpc):
    trace = _kinit(mpc, env=mpc.trace_env())
    assert re.search(r"AS key obtained for encrypted timestamp: aes256-ctr-mpc/",
                     trace), trace
    etypes, out = _klist(mpc)
    assert etypes == [("aes256-cts-hmac-sha1-96", "aes256-ctr-mpc")], out
    assert TGS in out

    log = mpc.kdc_log_text()
    # Pre-auth decrypt, ticket and reply encryption all went through the
    # module and completed asynchronously.
    for job in ("DECRYPT job (usage 1)", "ENCRYPT job (usage 2)",
                "ENCRYPT job (usage 3)"):
        assert f"kdcmpc: {job} completed asynchronously" in log, log
    assert "kdcmpc: loaded module test" in log
    assert re.search(r"AS_REQ .* ISSUE: authtime \d+, etypes .* "
                     r"alice@KMPC.TEST for krbtgt/KMPC.TEST@KMPC.TEST", log), log

    # Four MPC rounds per login with a PAC, each submitted back to back so
    # the module can batch it: the pre-auth decryption with the
    # PA-REQ-ENC-PA-REP checksum; the PAC's server signature; the KDC
    # signature (over the server signature); the ticket (over the signed
    # PAC) and the reply, in that order, as without a PAC. (The test module
    # prepares nothing: the real module makes these one Run, the exchange's
    # plan.)
    assert _rounds(_events(mpc)) == [
        ["CHECKSUM 56", "DECRYPT 1"], ["CHECKSUM 17"], ["CHECKSUM 17"],
        ["ENCRYPT 2", "ENCRYPT 3"]], _events(mpc)
    assert len(_events(mpc)) == 12, _events(mpc)
    assert [e for e in _events(mpc) if e[0] == "submit"][-2:] == [
        ("submit", "ENCRYPT", "2"), ("submit", "ENCRYPT", "3")], _events(mpc)
    assert "kdcmpc: CHECKSUM job (usage 56) completed asynchronously" in log


def test_kinit_aes128_user(mpc):
    pw = mpc.add_user("carol", enctype="aes128-ctr-mpc")
    mpc.stop_kdc()          # the test module reads its keys at start-up
    mpc.start()
    mpc.kinit("carol", pw)
    etypes, out = _klist(mpc)
    assert etypes == [("aes256-cts-hmac-sha1-96", "aes256-ctr-mpc")], out


def test_wrong_password_is_preauth_failed(mpc):
    trace = mpc.run(["kinit", "alice"], input="not-the-password\n",
                    expected_code=1, expected_msg="Password incorrect",
                    env=mpc.trace_env())
    assert re.search(r"Received error from KDC: -1765328360/Preauthentication "
                     r"failed", trace), trace
    assert "kdcmpc: DECRYPT job (usage 1) failed" in mpc.kdc_log_text()
    assert mpc.kdc_alive()


def test_cluster_unavailable(mpc):
    open(mpc.test_failflag, "w").close()
    out, elapsed = _timed_kinit(mpc, expected_code=1)
    assert "A service is not available" in out, out
    assert elapsed < PROMPT_SECONDS, f"kinit took {elapsed:.1f}s"
    log = mpc.kdc_log_text()
    assert "MPC cluster unavailable (simulated)" in log, log
    assert mpc.kdc_alive()
    # The cluster comes back: logins work again without a KDC restart.
    os.unlink(mpc.test_failflag)
    _kinit(mpc)
    assert mpc.kdc_alive()


# ---- TGS exchange --------------------------------------------------------

def test_service_ticket_via_tgs(mpc):
    _kinit(mpc)
    before = len(mpc.journal_lines())
    mpc.run(["kvno", SERVICE])
    jobs = mpc.journal_lines()[before:]
    # The TGT was decrypted by the module; the service ticket and the reply
    # were made locally (ordinary service key, session key).
    assert jobs[0].startswith("submit DECRYPT usage 2"), jobs
    assert not any("ENCRYPT" in j for j in jobs), jobs
    _, out = _klist(mpc)
    assert f"{SERVICE}@{REALM}" in out
    etypes, _ = _klist(mpc)
    assert ("aes256-cts-hmac-sha1-96", "aes256-cts-hmac-sha1-96") in etypes, out
    assert "kdcmpc: DECRYPT job (usage 2) completed asynchronously" in mpc.kdc_log_text()


def test_tampered_tgt_is_refused(mpc):
    tickets.check_tampered_tgt_is_refused(mpc, mpc.login)


# ---- size caps on unauthenticated MPC work (krb5's key-operation layer patch) -------------

def _as_req_with_enc_ts(cname, cipher):
    """An AS-REQ carrying PA-ENC-TIMESTAMP (2) whose EncryptedData
    (aes256-ctr-mpc) holds `cipher` as is."""
    enc = krb_der.seq(krb_der.ctx(0, krb_der.der_int(-29002)),
                      krb_der.ctx(2, krb_der.der(0x04, cipher)))
    padata = krb_der.seq(krb_der.ctx(1, krb_der.der_int(2)),
                         krb_der.ctx(2, krb_der.der(0x04, enc)))
    return krb_der.as_req(REALM, cname, secrets.randbits(31), padata=[padata])


def _kdc_tcp(m, msg):
    return krb_der.send_tcp(m.kdc_port, msg)


def _submits(m):
    return [j for j in m.journal_lines() if j.startswith("submit")]


def test_oversized_enc_timestamp_is_refused_without_a_job(mpc):
    # A genuine one goes through the module (control).
    _kinit(mpc)
    before = len(_submits(mpc))
    reply = _kdc_tcp(mpc, _as_req_with_enc_ts("alice", os.urandom(1000)))
    assert krb_der.krb_error_code(reply) == 24, reply.hex()   # PREAUTH_FAILED
    assert len(_submits(mpc)) == before, mpc.journal_lines()
    log = mpc.kdc_log_text()
    assert ("kdcmpc: refusing a PA-ENC-TIMESTAMP of 1000 bytes (limit 256) "
            "without an MPC job") in log, log
    assert mpc.kdc_alive()


def test_oversized_tgt_is_refused_without_a_job(mpc):
    _kinit(mpc)
    start, length = tickets.tgt_span(mpc.ccache)
    with open(mpc.ccache, "rb") as f:
        buf = f.read()
    # Ticket ::= [APPLICATION 1] SEQUENCE { ..., [3] EncryptedData }; grow
    # the cipher octets past the 16384-byte default cap.
    tseq = krb_der.content(krb_der.content(buf[start:start + length]))
    fields = krb_der.children(tseq)
    assert fields[-1][0] == 0xA3
    encseq = krb_der.content(fields[-1][2])
    enc = []
    for tag, whole, body in krb_der.children(encseq):
        if tag == 0xA2:
            cipher = krb_der.content(body)
            whole = krb_der.ctx(2, krb_der.der(0x04, cipher + os.urandom(20000)))
        enc.append(whole)
    ticket = krb_der.der(0x61, krb_der.seq(*(f[1] for f in fields[:-1]),
                                           krb_der.ctx(3, krb_der.seq(*enc))))
    with open(mpc.ccache, "wb") as f:
        f.write(buf[:start - 4] + struct.pack(">I", len(ticket)) + ticket +
                buf[start + length:])
    before = len(_submits(mpc))
    out = mpc.run(["kvno", SERVICE], expected_code=1)
    # Answered as for any ticket which does not decrypt.
    assert "integrity check failed" in out, out
    assert len(_submits(mpc)) == before, mpc.journal_lines()
    log = mpc.kdc_log_text()
    assert re.search(r"kdcmpc: refusing a TGS-REQ ticket of \d+ bytes "
                     r"\(limit 16384\) without an MPC job", log), log
    assert mpc.kdc_alive()


# ---- guardrails ----------------------------------------------------------

def test_user_to_user_through_the_module(mpc):
    """kvno --u2u: the KDC decrypts both the TGT of the request and the
    second ticket (alice's own TGT, under the krbtgt handle) through the
    module, then encrypts the ticket under the second ticket's session key."""
    _kinit(mpc)
    before = len(_submits(mpc))
    out = mpc.run(["kvno", "--u2u", mpc.ccache, "alice"])
    assert "alice@KMPC.TEST: kvno = 0" in out or "kvno" in out, out
    decrypts = [j for j in _submits(mpc)[before:] if "DECRYPT" in j]
    assert len(decrypts) == 2, _submits(mpc)[before:]
    assert "refusing user-to-user" not in mpc.kdc_log_text()
    assert mpc.kdc_alive()


def _ticket_enc(realm, service):
    """(etype, kvno) of service's ticket in the ccache (klist -e -v is not
    needed: kvno prints the kvno, klist -e the ticket's enctype)."""
    out = realm.run(["klist", "-e"])
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if service in line:
            m = re.search(r"Etype \(skey, tkt\): (\S+), (\S+)", lines[i + 1])
            return m.group(2)
    raise AssertionError(f"no ticket for {service}:\n{out}")


def test_renewal_and_validation_through_the_module(mpc):
    """kinit -R: the KDC decrypts the TGT and encrypts the renewed one under
    the krbtgt handle through the module (ENCRYPT job, usage 2); the renewed
    TGT is used for a TGS exchange after. kinit -v validates a postdated
    TGT the same way."""
    pw = mpc.passwords["alice"]
    mpc.run(["kinit", "-r", "1d", "alice"], input=pw + "\n")
    before = len(_submits(mpc))
    mpc.run(["kinit", "-R"])
    jobs = _submits(mpc)[before:]
    assert any("ENCRYPT" in j for j in jobs), jobs
    assert _ticket_enc(mpc, "krbtgt/") == "aes256-ctr-mpc"
    out = mpc.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out
    # Validation of a postdated TGT.
    mpc.run(["kinit", "-s", "1s", "alice"], input=pw + "\n")
    time.sleep(2)
    mpc.run(["kinit", "-v"])
    out = mpc.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out
    assert "refusing ticket renewal" not in mpc.kdc_log_text()
    assert mpc.kdc_alive()


def test_tgs_for_mpc_keyed_service(kmpc_factory):
    """A service whose key is MPC-held (and a TGS-REQ for the krbtgt itself:
    a forwarded or proxied TGT): the ticket is encrypted by the module."""
    mpc = handle_realm(kmpc_factory).setup(users=("alice",))
    pw = _password()
    mpc.addprinc("host/mpc.kmpc.test", pw, enctypes=["aes256-ctr-mpc"],
                 flags="")
    mpc.migrate("host/mpc.kmpc.test", pw)
    mpc.start()
    _kinit(mpc)
    out = mpc.run(["kvno", "host/mpc.kmpc.test"])
    assert "kvno = 2" in out or "kvno = 1" in out, out
    assert _ticket_enc(mpc, "host/mpc.kmpc.test") == "aes256-ctr-mpc"
    # The service decrypts its ticket with its own key: a keytab with the
    # key derived from its password (the test module's key file holds it).
    out = mpc.run(["kvno", "krbtgt/KMPC.TEST"])
    assert "kvno" in out, out
    assert mpc.kdc_alive()


# ---- PACs (MIT 1.20's default) with MPC-held keys -----------------------

def _key(m, princ):
    """The key of princ as the test module's key file holds it."""
    with open(m.test_keyfile) as f:
        keys = dict(line.split() for line in f if line.strip())
    return bytes.fromhex(keys[m.key_id(princ)])


def _ticket(m, server):
    """(offset, length, DER) of the ticket for server (its components) in
    the ccache."""
    spans = [s for s in tickets.ccache_ticket_spans(m.ccache)
             if s[0] == server]
    assert len(spans) == 1, spans
    _, start, length = spans[0]
    with open(m.ccache, "rb") as f:
        f.seek(start)
        return start, length, f.read(length)


def _replace_ticket(m, start, length, der_ticket):
    assert len(der_ticket) == length
    with open(m.ccache, "r+b") as f:
        f.seek(start)
        f.write(der_ticket)


def _events(m, before=0):
    return [re.match(r"(\w+) (\w+) usage (\d+)", l).groups()
            for l in m.journal_lines()[before:]]


def _rounds(events):
    """The jobs of events grouped into rounds: a round is the submits made
    while no job was done since the previous round's submits."""
    rounds, cur, seen_done = [], [], False
    for kind, job, usage in events:
        if kind == "submit":
            if seen_done and cur:
                rounds.append(sorted(cur))
                cur = []
            seen_done = False
            cur.append(f"{job} {usage}")
        else:
            seen_done = True
    if cur:
        rounds.append(sorted(cur))
    return rounds


TGT = ["krbtgt", REALM]


def test_tgt_carries_a_pac_signed_through_the_module(mpc):
    """MIT 1.20's default: the TGT carries a PAC.  Its server and KDC
    signatures (both under the krbtgt key) are CHECKSUM jobs, in chain order
    (the KDC signature is over the server signature), and the ticket is
    encrypted after them; the signatures verify with the krbtgt key."""
    _kinit(mpc)
    assert "refusing PAC" not in mpc.kdc_log_text()
    _, _, der_tgt = _ticket(mpc, TGT)
    tgt = pac_ref.Ticket(der_tgt, _key(mpc, TGS))
    etp = pac_ref.EncTicketPart(tgt.plain)
    krbtgt = _key(mpc, TGS)
    pac_ref.check_signatures(etp, krbtgt, krbtgt, ticket_sig=False)
    # The client info names alice (UTF-16LE in PAC_CLIENT_INFO, type 10).
    assert "alice".encode("utf-16-le") in etp.pac
    # Rounds: pre-auth decryption (+ PA-REQ-ENC-PA-REP checksum), server
    # signature, KDC signature, ticket with the reply.
    assert _rounds(_events(mpc)) == [
        ["CHECKSUM 56", "DECRYPT 1"], ["CHECKSUM 17"], ["CHECKSUM 17"],
        ["ENCRYPT 2", "ENCRYPT 3"]], _events(mpc)


def test_tgs_with_a_pac(mpc):
    """A TGS-REQ with a TGT carrying a PAC: the TGT's server signature is a
    VERIFY job in the same round as the new ticket's first signature; the
    ticket of an ordinary service gets a ticket signature, MIT 1.21's
    full-PAC signature and a KDC signature (krbtgt handle), its server
    signature is made locally."""
    _kinit(mpc)
    before = len(mpc.journal_lines())
    out = mpc.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out
    assert _rounds(_events(mpc, before)) == [
        ["DECRYPT 2"], ["CHECKSUM 17", "VERIFY 17"], ["CHECKSUM 17"],
        ["CHECKSUM 17"]], _events(mpc, before)


def _check_mpc_service_ticket(m, svc, before):
    """A TGS exchange for the MPC-keyed service svc since journal line
    `before`: six rounds (the TGT's DECRYPT; its PAC VERIFY beside the
    ticket signature; the full-PAC, server and KDC signatures; the ticket's
    ENCRYPT), and
    the ticket's PAC, signed under the service and krbtgt keys, names
    alice."""
    assert _rounds(_events(m, before)) == [
        ["DECRYPT 2"], ["CHECKSUM 17", "VERIFY 17"], ["CHECKSUM 17"],
        ["CHECKSUM 17"], ["CHECKSUM 17"], ["ENCRYPT 2"]], _events(m, before)
    _, _, der_t = _ticket(m, ["host", "mpc.kmpc.test"])
    etp = pac_ref.EncTicketPart(pac_ref.Ticket(der_t, _key(m, svc)).plain)
    pac_ref.check_signatures(etp, _key(m, svc), _key(m, TGS), ticket_sig=True)
    assert "alice".encode("utf-16-le") in etp.pac


def _mpc_service_realm(kmpc_factory):
    """A started realm with alice and the service host/mpc.kmpc.test,
    whose key (from a password) is in the cluster: (realm, service,
    password)."""
    m = handle_realm(kmpc_factory).setup(users=("alice",))
    svc = "host/mpc.kmpc.test"
    pw = _password()
    m.addprinc(svc, pw, enctypes=["aes256-ctr-mpc"], flags="")
    m.migrate(svc, pw)
    m.start()
    return m, svc, pw


def test_tgs_with_a_pac_for_an_mpc_keyed_service(kmpc_factory):
    """A service whose key is in the cluster: all four signatures of its
    ticket's PAC are CHECKSUM jobs (ticket, full-PAC, server, KDC, in that
    order), the
    ticket is encrypted after them, and every signature verifies."""
    m, svc, pw = _mpc_service_realm(kmpc_factory)
    _kinit(m)
    before = len(m.journal_lines())
    m.run(["kvno", svc])
    _check_mpc_service_ticket(m, svc, before)


def test_renewal_with_a_pac(mpc):
    """kinit -R: the renewed TGT's PAC is signed again through the module and
    verifies; it works for a TGS exchange after."""
    pw = mpc.passwords["alice"]
    mpc.run(["kinit", "-r", "1d", "alice"], input=pw + "\n")
    before = len(mpc.journal_lines())
    mpc.run(["kinit", "-R"])
    assert _rounds(_events(mpc, before)) == [
        ["DECRYPT 2"], ["CHECKSUM 17", "VERIFY 17"], ["CHECKSUM 17"],
        ["ENCRYPT 2"]], _events(mpc, before)
    _, _, der_tgt = _ticket(mpc, TGT)
    krbtgt = _key(mpc, TGS)
    etp = pac_ref.EncTicketPart(pac_ref.Ticket(der_tgt, krbtgt).plain)
    pac_ref.check_signatures(etp, krbtgt, krbtgt, ticket_sig=False)
    out = mpc.run(["kvno", SERVICE])
    assert "kvno = 1" in out, out


def test_s4u2self_with_a_pac(kmpc_factory):
    """kvno -U (S4U2Self): a service whose key is in the cluster gets a
    ticket to itself for alice; the PAC names alice, its signatures are made
    through the module and verify, and the ticket is encrypted under the
    service's handle."""
    m, svc, pw = _mpc_service_realm(kmpc_factory)
    m.kinit(svc, pw)
    before = len(m.journal_lines())
    out = m.run(["kvno", "-U", "alice", svc])
    assert "kvno = " in out, out
    _check_mpc_service_ticket(m, svc, before)
    assert "PROTOCOL-TRANSITION s4u-client=alice@KMPC.TEST" in m.kdc_log_text()
    assert "refusing S4U2Self" not in m.kdc_log_text()


@pytest.mark.parametrize("alteration", ["server-signature-bit", "another-key",
                                        "server-signature-another-key"])
def test_altered_pac_in_tgt_is_refused(mpc, alteration):
    """A TGT whose PAC was altered and which is encrypted again under the
    krbtgt key (as only a holder of that key could): one bit of the server
    signature flipped, both signatures made with another key, the server
    signature alone made with another key (the KDC signature over it
    valid).  A
    TGT's KDC signature is not checked (MIT 1.20.1's get_verified_pac: for
    TGTs only the server signature, under the same krbtgt key), a TGT has
    no ticket signature, and 1.20.1 makes no full-PAC checksum.  The VERIFY
    job fails inside the module and the TGS-REQ is refused; the control
    (the same re-encryption without an alteration) is accepted."""
    _kinit(mpc)
    krbtgt = _key(mpc, TGS)
    start, length, der_tgt = _ticket(mpc, TGT)
    tgt = pac_ref.Ticket(der_tgt, krbtgt)
    etp = pac_ref.EncTicketPart(tgt.plain)
    # Control: re-encrypted, unaltered.
    _replace_ticket(mpc, start, length, tgt.encode(etp.encode(etp.pac)))
    mpc.run(["kvno", SERVICE])
    mpc.run(["kdestroy"])
    _kinit(mpc)
    start, length, der_tgt = _ticket(mpc, TGT)
    tgt = pac_ref.Ticket(der_tgt, krbtgt)
    etp = pac_ref.EncTicketPart(tgt.plain)
    if alteration == "server-signature-bit":
        pac = pac_ref.flip(etp.pac, pac_ref.PAC_SERVER_CHECKSUM, bit=5)
    elif alteration == "another-key":
        other = os.urandom(32)
        pac = pac_ref.resign(etp.pac, other, other)
    else:
        pac = pac_ref.resign(etp.pac, os.urandom(32), krbtgt)
    _replace_ticket(mpc, start, length, tgt.encode(etp.encode(pac)))
    before = len(mpc.journal_lines())
    out = mpc.run(["kvno", SERVICE], expected_code=1)
    assert "Message stream modified" in out, out
    assert ("done", "VERIFY", "17") in _events(mpc, before)
    log = mpc.kdc_log_text()
    assert "kdcmpc: VERIFY job (usage 17) failed" in log, log
    assert "kdcmpc: a PAC signature or CAMMAC verifier of a presented ticket did not verify" in log
    assert mpc.kdc_alive()


def test_no_module_is_service_unavailable(kmpc_factory):
    m = handle_realm(kmpc_factory)
    with open(m.kdc_conf) as f:
        conf = f.read()
    with open(m.kdc_conf, "w") as f:
        f.write(re.sub(r"\[plugins\].*?\n    \}\n", "", conf, flags=re.S))
    m.setup(users=("alice",)).start()
    out, elapsed = _timed_kinit(m, expected_code=1)
    assert "A service is not available" in out, out
    assert elapsed < PROMPT_SECONDS, f"kinit took {elapsed:.1f}s"
    assert "no kdcmpc module is loaded" in m.kdc_log_text()
    assert m.kdc_alive()


# ---- several KDCs: failover ---------------------------------------------

def _read(path):
    with open(path) as f:
        return f.read()


def _set_kdcs(realm, ports):
    """Make the client's krb5.conf list one `kdc =` line per port, in order."""
    with open(realm.krb5_conf) as f:
        conf = f.read()
    lines = "".join(f"        kdc = 127.0.0.1:{p}\n" for p in ports)
    conf, n = re.subn(r"^        kdc = .*\n", lines, conf, flags=re.M)
    assert n == 1, conf
    with open(realm.krb5_conf, "w") as f:
        f.write(conf)


@pytest.fixture
def second_kdc(tmp_path):
    """start(m, with_module) runs a second krb5kdc on m's database, on its own
    port and log; returns (port, log path). Stopped by PID afterwards."""
    procs = []

    def start(m, with_module=True):
        port, = kmpc_realm.free_ports(1)
        log = str(tmp_path / "kdc2.log")
        with open(m.kdc_conf) as f:
            conf = f.read()
        conf = conf.replace(f"127.0.0.1:{m.kdc_port}", f"127.0.0.1:{port}")
        conf = conf.replace(f"kdc = FILE:{m.kdc_log}", f"kdc = FILE:{log}")
        if not with_module:
            conf = re.sub(r"\[plugins\].*?\n    \}\n", "", conf, flags=re.S)
        path = str(tmp_path / "kdc2.conf")
        with open(path, "w") as f:
            f.write(conf)
        env = {**m.env, "KRB5_KDC_PROFILE": path}
        with open(str(tmp_path / "kdc2.out"), "ab") as out:
            proc = subprocess.Popen([binpath("krb5kdc"), "-n", "-r", REALM],
                                    env=env, stdout=out,
                                    stderr=subprocess.STDOUT)
        procs.append(proc)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"second krb5kdc exited {proc.returncode}"
            if os.path.exists(log) and "commencing operation" in _read(log):
                return port, log
            time.sleep(0.05)
        pytest.fail("second krb5kdc did not start")

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def test_svc_unavailable_fails_over_to_the_next_kdc(mpc, second_kdc):
    # The first KDC has no module (KDC_ERR_SVC_UNAVAILABLE); the second is
    # the working one: the client moves on to it and logs in.
    down_port, down_log = second_kdc(mpc, with_module=False)
    _set_kdcs(mpc, [down_port, mpc.kdc_port])
    out, elapsed = _timed_kinit(mpc, env=mpc.trace_env())
    assert "no kdcmpc module is loaded" in _read(down_log)
    assert "Reply from" in out and "asks to try another KDC" in out, out
    assert elapsed < PROMPT_SECONDS, f"kinit took {elapsed:.1f}s"
    _klist(mpc)


def test_unreachable_kdc_fails_over_to_the_next_kdc(mpc):
    # MIT's failover past a KDC where nothing listens is unchanged.
    dead, = kmpc_realm.free_ports(1)
    _set_kdcs(mpc, [dead, mpc.kdc_port])
    _kinit(mpc)
    _klist(mpc)


@pytest.mark.parametrize("unavailable_first", [True, False])
def test_svc_unavailable_and_unreachable_kdc(mpc, unavailable_first):
    # One KDC answers KDC_ERR_SVC_UNAVAILABLE, nothing listens at the other:
    # the clear error, promptly, whatever the order.
    dead, = kmpc_realm.free_ports(1)
    ports = [mpc.kdc_port, dead]
    _set_kdcs(mpc, ports if unavailable_first else ports[::-1])
    open(mpc.test_failflag, "w").close()
    out, elapsed = _timed_kinit(mpc, expected_code=1)
    assert "A service is not available" in out, out
    assert elapsed < PROMPT_SECONDS, f"kinit took {elapsed:.1f}s"


def test_workers_load_the_module_after_fork(kmpc_factory):
    m = handle_realm(kmpc_factory, workers=2).setup(users=("alice",)).start()
    for _ in range(3):
        _kinit(m)
        m.run(["kvno", SERVICE])
    assert m.kdc_log_text().count("kdcmpc: loaded module test") >= 2


# ---- mixed realms --------------------------------------------------------

def test_ordinary_user_with_mpc_krbtgt(mpc):
    # bob keeps an ordinary key: only the ticket goes through the module.
    pw = _password()
    mpc.addprinc("bob", pw, enctypes=["aes256-cts-hmac-sha1-96"])
    before = len(mpc.journal_lines())
    mpc.kinit("bob", pw)
    jobs = [re.match(r"submit (\S+) usage (\d+)", j).groups()
            for j in mpc.journal_lines()[before:] if j.startswith("submit")]
    # The PAC's two signatures (krbtgt), then the ticket.
    assert jobs == [("CHECKSUM", "17"), ("CHECKSUM", "17"), ("ENCRYPT", "2")], jobs
    etypes, out = _klist(mpc)
    assert etypes == [("aes256-cts-hmac-sha1-96", "aes256-ctr-mpc")], out
    mpc.run(["kvno", SERVICE])


def test_mpc_user_as_req_for_ordinary_service(mpc):
    # An AS-REQ straight for a service: the ticket is made locally, only
    # the reply (and its PA-REQ-ENC-PA-REP checksum) uses the user's handle.
    before = len(mpc.journal_lines())
    mpc.run(["kinit", "-S", SERVICE, "alice"],
            input=mpc.passwords["alice"] + "\n")
    jobs = [j for j in mpc.journal_lines()[before:] if j.startswith("submit")]
    assert not any(" usage 2 " in j for j in jobs), jobs
    assert any(j.startswith("submit ENCRYPT usage 3") for j in jobs), jobs
    etypes, out = _klist(mpc)
    assert etypes == [("aes256-cts-hmac-sha1-96", "aes256-cts-hmac-sha1-96")], out


def test_login_in_flight_does_not_undo_a_key_change(kmpc_factory):
    """A login's last-success write-back (db2 lockout) happens when its MPC
    jobs are done, up to seconds after the KDC read the entry; it must not
    write back that stale copy over a key change made meanwhile (krb5's db2
    lockout patch: only the lockout fields are written onto the current entry)."""
    mpc = handle_realm(kmpc_factory, delay_ms=1500).setup(users=("alice",))
    mpc.start()
    before = mpc.kdb_handle_run("keys", "alice")[0]
    assert {l.split()[2] for l in before.splitlines()} == {"handle"}, before
    import subprocess
    p = subprocess.Popen([kmpc_realm.binpath("kinit"), "alice"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=mpc.env, text=True)
    p.stdin.write(mpc.passwords["alice"] + "\n")
    p.stdin.flush()
    time.sleep(0.7)  # the AS-REQ with pre-auth is waiting for the module
    mpc.kadmin_local("cpw -pw New-pw-4711 -e aes256-cts-hmac-sha1-96:normal alice")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    time.sleep(0.5)
    after = mpc.kdb_handle_run("keys", "alice")[0]
    kinds = {l.split()[2] for l in after.splitlines()}
    assert kinds == {"key"}, after  # the new key, not the old handle
    assert "Last successful authentication: [never]" not in \
        mpc.kadmin_local("getprinc alice")
