"""A captured PA-ENC-TIMESTAMP sent again (issue 48 item 3;
docs/security-model.md, "Freshness of the gate").

Real processes: krb5kdc with the real kdcmpc module, three
kmpc-mpc-server. The test is the client and the attacker: it builds one
PA-ENC-TIMESTAMP under the user's key (test_cts_server_view.py's RFC 3962
code), logs in with it, then sends the same timestamp inside new AS-REQs,
as anyone who captured it on the network can within the clock skew. On
main the replay logged in (an AS-REP under the user's key for a request
the attacker chose) and proved its request's shape; now the KDC module's
replay cache refuses it (KDC_ERR_PREAUTH_FAILED) before anything is proven
or released. A timestamp outside the clock skew gets MIT's
KRB_AP_ERR_SKEW and proves no shape either.
"""
import datetime
import secrets
import socket
import struct

import krb_der
from kmpc_harness import cluster as kmpc_cluster
from test_cts_churn import KDC_ERR_PREAUTH_FAILED, _kdc, _misses, _since, cts_user_realm
from test_cts_server_view import (PA_ENC_TIMESTAMP, PA_REQ_ENC_PA_REP, _as_req, _pa,
                                  rfc3962_decrypt, _enc_part_cipher, rfc3962_encrypt)

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

KRB_AP_ERR_SKEW = 37


def _timestamp(key, at):
    """A PA-ENC-TIMESTAMP's padata value of time `at` under key."""
    t = at.strftime("%Y%m%d%H%M%SZ")
    ts = krb_der.seq(krb_der.ctx(0, krb_der.der(0x18, t.encode())),
                     krb_der.ctx(1, krb_der.der_int(100000 + secrets.randbelow(800000))))
    return krb_der.seq(krb_der.ctx(0, krb_der.der_int(18)),
                       krb_der.ctx(2, krb_der.der(0x04, rfc3962_encrypt(key, 1, ts))))


def _send(kr, princ, enc, addresses):
    """An AS-REQ of its own nonce carrying the padata value `enc`, over
    TCP; the KDC's answer. A first login of a shape compiles its reply's
    program inside its Run: seconds on a loaded host, so a long timeout."""
    req = _as_req(kr.realm, princ, (1 << 30) | secrets.randbits(30),
                  [_pa(PA_ENC_TIMESTAMP, enc), _pa(PA_REQ_ENC_PA_REP, b"")],
                  addresses=addresses)
    with socket.create_connection(("127.0.0.1", kr.kdc_port), 60) as s:
        s.sendall(struct.pack(">I", len(req)) + req)
        return krb_der.recv_tcp_reply(s)[4:]


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def test_a_replayed_timestamp_is_refused_and_proves_no_shape(kmpc_factory):
    princ = "cleo"
    kr, key, _ = cts_user_realm(kmpc_factory, princ)
    captured = _timestamp(key, _now())
    rep = _send(kr, princ, captured, 1)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    assert rfc3962_decrypt(key, 3, _enc_part_cipher(rep))[16:17] in (b"\x79", b"\x7a")

    # The attacker's requests: a new shape (3 addresses), then the first.
    misses0, kdc0 = _misses(kr), _kdc(kr)
    for addresses in (3, 1):
        rep = _send(kr, princ, captured, addresses)
        assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_FAILED, (
            "a replayed timestamp logged in", rep[:8].hex())
    d = _since(kr, kdc0)
    assert d[0] == 0 and d[3] == 0, d  # no login, nothing held back was sent
    assert _misses(kr) == misses0, "a replay made the servers compile a reply"
    assert "a replayed aes*-cts PA-ENC-TIMESTAMP" in kr.kdc_log_text()

    # The replay proved nothing: the user's own first login of that shape
    # still takes two Runs (its reply waits for its timestamp).
    before = _kdc(kr)
    rep = _send(kr, princ, _timestamp(key, _now()), 3)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    assert _since(kr, before, 1) == (1, 2, 1, 1)
    assert kr.kdc_alive()


def test_a_timestamp_outside_the_skew_proves_no_shape(kmpc_factory):
    princ = "cleo"
    kr, key, _ = cts_user_realm(kmpc_factory, princ)
    rep = _send(kr, princ, _timestamp(key, _now()), 1)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    before = _kdc(kr)
    old = _now() - datetime.timedelta(minutes=10)
    for addresses in (4, 1):  # a new shape, then a proven one
        rep = _send(kr, princ, _timestamp(key, old), addresses)
        assert krb_der.krb_error_code(rep) == KRB_AP_ERR_SKEW, rep[:8].hex()
    d = _since(kr, before)
    assert d[2] == 1 and d[3] == 0, d  # the new shape's reply held back, never sent
    before = _kdc(kr)
    rep = _send(kr, princ, _timestamp(key, _now()), 4)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    assert _since(kr, before, 1) == (1, 2, 1, 1)
