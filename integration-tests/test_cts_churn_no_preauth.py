"""Review of the proven-shapes fix (kdc-plugin/src/planner.h, "Proven
shapes"; docs/reviews/2026-11-26-splice-and-cts-refresh.md, item 2): what a
client without the password can still make the MPC servers compile, and
what the KDC module's metrics say of the jobs it holds back. Each test
states the secure behaviour (A, C and D are fixed).

- Finding A: an AS exchange with no timestamp had no gate. MIT answers a
  request without pre-authentication with the AS-REP for a principal
  without requires_preauth (MIT's default for addprinc: kdc.conf
  default_principal_flags has no +preauth), so kdc_mpc_as.c planned the
  reply given and ungated, and the module put it into a Run whatever its
  shape: a client who knew only the user's name made every server
  compile a spliced reply program per request by varying the AS-REQ's
  length (here its number of client addresses, which the reply's caddr
  carries too), and got an offline verifier of the password. Now the KDC
  demands pre-authentication of any client holding a key handle that is
  not a service, whatever its flags (krb5 patch 0024,
  kdc_mpc_missing_preauth; test_preauth_handles.py for every enctype),
  and the servers compute a user key's reply only on its timestamp or
  challenge (kmpc.proto KeyKind), so a KDC that planned one ungated would
  get nothing either.
- Finding C: a shape stays proven however many failed gates use it, and
  the module keeps 256 proven shapes per cluster while each server keeps
  32 programs (engine/cts_jobs.h kMaxPrograms): logins of one account with
  33 or more shapes, once, let wrong passwords (of any aes*-cts user)
  compile a program per request in the timestamp's Run.
- Finding D: the keystreams and pads prepared for an exchange whose reply
  is held back are counted as sent when the exchange is admitted, though
  after a failed gate they never reach the servers.

Real processes as test_cts_churn.py; the test is the client.
"""
import secrets


import krb_der
from kmpc_harness import cluster as kmpc_cluster
from test_cts_churn import (KDC_ERR_PREAUTH_FAILED, _kdc, _login, _misses, _since,
                             cts_user_realm)
from test_cts_server_view import (PA_REQ_ENC_PA_REP, _as_req, _enc_part_cipher, _pa,
                                  rfc3962_decrypt)
from test_metrics import parse, scrape, value

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")


def _no_timestamp(kr, princ, addresses):
    """An AS-REQ without PA-ENC-TIMESTAMP (PA-REQ-ENC-PA-REP only, as MIT's
    kinit sends its first request); the KDC's answer."""
    req = _as_req(kr.realm, princ, (1 << 30) | secrets.randbits(30),
                  [_pa(PA_REQ_ENC_PA_REP, b"")], addresses=addresses)
    return krb_der.send_tcp(kr.kdc_port, req)


KDC_ERR_PREAUTH_REQUIRED = 25


def test_no_password_compiles_no_reply_program_without_requires_preauth(kmpc_factory):
    princ = "dora"
    kr, key, _ = cts_user_realm(kmpc_factory, princ, "Dora-pw-4242",
                                flags="-requires_preauth")  # MIT's default
    # share sets +requires_preauth on a user; an admin may clear it again.
    kr.kadmin_local(f"modprinc -requires_preauth {princ}")
    assert "REQUIRES_PRE_AUTH" not in kr.kadmin_local(f"getprinc {princ}")

    # A request without a timestamp gets PREAUTH_REQUIRED with the hint list
    # (ETYPE-INFO2 naming the user's enctype), as for +requires_preauth: no
    # AS-REP, no offline verifier, nothing planned for the cluster.
    misses0 = _misses(kr)
    for addresses in (1, 2, 3, 4, 5, 7):
        rep = _no_timestamp(kr, princ, addresses)
        assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_REQUIRED, (
            addresses, rep[:8].hex(), kr.kdc_log_text()[-3000:])
    assert _misses(kr) == misses0, (
        "requests without the password made the servers compile programs",
        misses0, _misses(kr))
    assert "NEEDED_PREAUTH" in kr.kdc_log_text()

    # Control: with the password the user logs in, under its aes256-cts key.
    rep = _login(kr, princ, key, 1)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    assert rfc3962_decrypt(key, 3, _enc_part_cipher(rep))[16:17] in (b"\x79", b"\x7a")
    assert kr.kdc_alive()


def _prepared_sent(kr):
    """(prepared keystreams, pads) the KDC module counts as sent."""
    m = parse(scrape(kr.kdc_metrics_url))
    return (value(m, "kmpc_kdc_speculative_encrypts_total", missing=0),
            value(m, "kmpc_kdc_pads_drawn_total", missing=0))


def test_prepared_jobs_of_a_held_back_reply_count_as_sent_only_when_sent(kmpc_factory):
    princ = "cleo"
    kr, _, wrong = cts_user_realm(kmpc_factory, princ)

    before, kdc0 = _prepared_sent(kr), _kdc(kr)
    wasted0 = value(parse(scrape(kr.kdc_metrics_url)), "kmpc_kdc_speculative_wasted_total",
                    missing=0)
    for addresses in (2, 3, 4):
        rep = _login(kr, princ, wrong, addresses)
        assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_FAILED, rep[:8].hex()
    d = _since(kr, kdc0)
    assert d[2] == 3 and d[3] == 0, d  # control: every reply held back, none sent
    # Nothing but the timestamps reached the servers: no keystream, no pad.
    assert _prepared_sent(kr) == before, (before, _prepared_sent(kr))
    # And none counts as wasted either: it was never sent.
    m = parse(scrape(kr.kdc_metrics_url))
    assert value(m, "kmpc_kdc_speculative_wasted_total", missing=0) == wasted0, m


def test_proven_shapes_do_not_let_wrong_passwords_compile(kmpc_factory):
    princ = "cleo"
    kr, key, wrong = cts_user_realm(kmpc_factory, princ)

    # One account logs in with 34 reply shapes (1..34 addresses): each is
    # proven, and each server's 32-program cache has evicted the first ones.
    for addresses in range(1, 35):
        rep = _login(kr, princ, key, addresses)
        assert rep[:1] == b"\x6b", (addresses, rep[:8].hex(), kr.kdc_log_text()[-3000:])
    misses0 = _misses(kr)
    # Wrong passwords of the earliest proven shapes.
    for addresses in (1, 2, 3):
        rep = _login(kr, princ, wrong, addresses)
        assert krb_der.krb_error_code(rep) == KDC_ERR_PREAUTH_FAILED, rep[:8].hex()
    assert _misses(kr) == misses0, (
        "wrong passwords made the servers compile programs", misses0, _misses(kr))
