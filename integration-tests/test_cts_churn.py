"""A client without the password cannot make the MPC servers compile
programs (docs/reviews/2026-11-26-splice-and-cts-refresh.md, item 2,
"Unauthenticated program churn through the request's length").

The servers compile an aes*-cts program per shape (engine/cts_jobs.h
CtsProgramCache: the reply's length, the request's length, the checksum's
offset), and an AS-REQ's length, which the client chooses, sets the
spliced reply's shape. The KDC module sends a reply whose shape no login
with a verified timestamp proved only after the timestamp verified, in a
Run of its own (kdc-plugin/src/planner.h, "Proven shapes"). So AS-REQs of
ever new lengths with a wrong password leave every server's program cache
misses (kmpc_cts_program_cache_total{result="miss"}) where they were, and
no reply is computed for them; the right password still logs in: its first
login of a shape in two Runs (kmpc_kdc_exchange_runs_total), the next of
that shape in one.

Real processes: krb5kdc with the real kdcmpc module, three
kmpc-mpc-server. The test is the client (test_cts_server_view.py's RFC
3962 code and AS-REQ): it varies the request's length by its number of
client addresses (which the reply carries too, in caddr), with a nonce and
microseconds of fixed DER lengths, so that equal address counts are equal
shapes.
"""
import datetime
import secrets
import time

import ctr_mpc_ref
import krb_der
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.cluster import default_salt
from test_cts_handles import COLD_PROGRAMS, CTS256, ENCTYPES
from test_cts_server_view import (PA_ENC_TIMESTAMP, PA_REQ_ENC_PA_REP, _as_req, _pa,
                                  rfc3962_decrypt, _enc_part_cipher, rfc3962_encrypt)
from test_metrics import parse, scrape, value

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

KDC_ERR_PREAUTH_FAILED = 24


def cts_user_realm(kmpc_factory, princ="cleo", pw="Cleo-pw-4242", flags=None):
    """A realm (cold programs, metrics) with one user whose aes256-cts key is
    in the cluster, KDC running; (realm, the user's key, a wrong key)."""
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS)
    kr.setup_krbtgt()
    kr.addprinc(princ, pw, enctypes=[CTS256], **({} if flags is None else {"flags": flags}))
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", princ)
    kr.start()
    salt = default_salt(f"{princ}@{kr.realm}").encode()
    key = ctr_mpc_ref.string_to_key("aes256-ctr-mpc", pw.encode(), salt)
    wrong = ctr_mpc_ref.string_to_key("aes256-ctr-mpc", b"wrong-" + pw.encode(), salt)
    assert wrong != key
    return kr, key, wrong


def _login(kr, princ, key, addresses):
    """One AS-REQ with PA-ENC-TIMESTAMP under key and PA-REQ-ENC-PA-REP;
    the KDC's answer."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ")
    # pausec and nonce of fixed DER lengths (3 and 4 bytes).
    ts = krb_der.seq(krb_der.ctx(0, krb_der.der(0x18, now.encode())),
                     krb_der.ctx(1, krb_der.der_int(100000 + secrets.randbelow(800000))))
    enc = krb_der.seq(krb_der.ctx(0, krb_der.der_int(18)),
                      krb_der.ctx(2, krb_der.der(0x04, rfc3962_encrypt(key, 1, ts))))
    req = _as_req(kr.realm, princ, (1 << 30) | secrets.randbits(30),
                  [_pa(PA_ENC_TIMESTAMP, enc), _pa(PA_REQ_ENC_PA_REP, b"")],
                  addresses=addresses)
    return krb_der.send_tcp(kr.kdc_port, req)


def _misses(kr):
    """Each server's aes*-cts program cache misses (compiles)."""
    return [value(parse(scrape(kr.cluster.metrics_url(i))), "kmpc_cts_program_cache_total",
                  result="miss") for i in range(3)]


def _kdc(kr):
    """(AS exchanges ok, their Runs, replies held back, ... sent later)."""
    m = parse(scrape(kr.kdc_metrics_url))
    return (value(m, "kmpc_kdc_exchanges_total", missing=0, exchange="as", result="ok"),
            value(m, "kmpc_kdc_exchange_runs_total", missing=0, exchange="as", result="ok"),
            value(m, "kmpc_kdc_cts_deferred_total", missing=0),
            value(m, "kmpc_kdc_cts_deferred_sent_total", missing=0))


def _since(kr, before, exchanges=0):
    """What _kdc counted since `before`, once `exchanges` more ok AS
    exchanges were counted (the KDC releases one after its reply)."""
    deadline = time.time() + 5
    while True:
        d = tuple(a - b for a, b in zip(_kdc(kr), before))
        if d[0] >= exchanges or time.time() > deadline:
            return d
        time.sleep(0.05)


def test_a_wrong_password_compiles_no_reply_program(kmpc_factory):
    princ = "cleo"
    kr, key, wrong = cts_user_realm(kmpc_factory, princ)

    # The timestamp's own program (its DECRYPT's shape is the same for every
    # request here) is compiled by the first attempt.
    rep = _login(kr, princ, wrong, 1)
    assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_FAILED, kr.kdc_log_text()[-3000:]

    misses0, kdc0 = _misses(kr), _kdc(kr)
    for addresses in (2, 3, 4, 5, 7):
        rep = _login(kr, princ, wrong, addresses)
        assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_FAILED, rep[:8].hex()
    d = _since(kr, kdc0)
    assert _misses(kr) == misses0, (
        "a wrong password made the servers compile programs", misses0, _misses(kr))
    assert d[2] == 5 and d[3] == 0, d  # every reply held back, none sent

    # The right password: its shape (3 addresses) is new, so the reply goes
    # after the timestamp verified, in a second Run; one program more.
    before = _kdc(kr)
    rep = _login(kr, princ, key, 3)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    assert rfc3962_decrypt(key, 3, _enc_part_cipher(rep))[16:17] in (b"\x79", b"\x7a")
    assert _since(kr, before, 1) == (1, 2, 1, 1)
    compiled = [b - a for a, b in zip(misses0, _misses(kr))]
    assert all(c >= 1 for c in compiled), compiled  # control: misses are counted
    # The same shape again: one Run, nothing compiled.
    misses1, before = _misses(kr), _kdc(kr)
    rep = _login(kr, princ, key, 3)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    assert _since(kr, before, 1) == (1, 1, 0, 0)
    assert _misses(kr) == misses1
    # A wrong password of that proven shape: withheld by the servers in the
    # timestamp's Run; still nothing compiled.
    rep = _login(kr, princ, wrong, 3)
    assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_FAILED
    assert _misses(kr) == misses1
    assert kr.kdc_alive()
