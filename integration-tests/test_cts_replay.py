"""A captured PA-ENC-TIMESTAMP sent again (issue 48 item 3;
docs/security-model.md, "Freshness of the gate").

Real processes: krb5kdc with the real kdcmpc module, three
kmpc-mpc-server. The test is the client and the attacker: it builds one
PA-ENC-TIMESTAMP under the user's key (test_cts_server_view.py's RFC 3962
code), logs in with it, then sends the same timestamp inside new AS-REQs,
as anyone who captured it on the network can within the clock skew. On
main the replay logged in (an AS-REP under the user's key for a request
the attacker chose) and proved its request's shape; now the KDC module's
replay cache refuses it before any Run (the KDC answers a refused exchange
KDC_ERR_SVC_UNAVAILABLE), so nothing is proven, computed or released. A timestamp outside the clock skew gets MIT's
KRB_AP_ERR_SKEW and proves no shape either.
"""
import datetime
import secrets
import socket
import struct

import krb_der
from kmpc_harness import cluster as kmpc_cluster
from test_cts_churn import _kdc, _misses, _since, cts_user_realm
from test_cts_server_view import (PA_ENC_TIMESTAMP, PA_REQ_ENC_PA_REP, _as_req, _pa,
                                  rfc3962_decrypt, _enc_part_cipher, rfc3962_encrypt)

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

KRB_AP_ERR_SKEW = 37
KDC_ERR_SVC_UNAVAILABLE = 29


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


def _bound_realm(kmpc_factory, princ, bound):
    """A realm like cts_user_realm's whose servers release at most `bound`
    replies per key and minute; (realm, the user's key)."""
    import ctr_mpc_ref
    from kmpc_harness.cluster import default_salt
    from test_cts_handles import COLD_PROGRAMS, CTS256, ENCTYPES
    pw = "Cleo-pw-4242"
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS,
                      server_flags=f"--cts_releases_per_minute={bound}")
    kr.setup_krbtgt()
    kr.addprinc(princ, pw, enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", princ)
    kr.start()
    return kr, ctr_mpc_ref.string_to_key("aes256-ctr-mpc", pw.encode(),
                                         default_salt(f"{princ}@{kr.realm}").encode())


def _copies(kr, princ, captured, n):
    """n AS-REQs carrying the padata value `captured`, new nonces, all sent
    over TCP before any answer is read; "AS-REP" or the error code of each."""
    socks = []
    for _ in range(n):
        req = _as_req(kr.realm, princ, (1 << 30) | secrets.randbits(30),
                      [_pa(PA_ENC_TIMESTAMP, captured), _pa(PA_REQ_ENC_PA_REP, b"")],
                      addresses=1)
        s = socket.create_connection(("127.0.0.1", kr.kdc_port), 60)
        s.sendall(struct.pack(">I", len(req)) + req)
        socks.append(s)
    codes = []
    for s in socks:
        with s:
            rep = krb_der.recv_tcp_reply(s)[4:]
        codes.append("AS-REP" if rep[:1] == b"\x6b" else krb_der.krb_error_code(rep))
    return codes


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
        assert krb_der.krb_error_code(rep) == KDC_ERR_SVC_UNAVAILABLE, (
            "a replayed timestamp logged in", rep[:8].hex())
    d = _since(kr, kdc0)
    assert d[0] == 0 and d[3] == 0, d  # no login, nothing held back was sent
    assert _misses(kr) == misses0, "a replay made the servers compile a reply"
    assert "a replayed timestamp: this ciphertext verified before" in kr.kdc_log_text()

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


# A clock moved by KMPC_TIME_SHIFT seconds for the process it is preloaded
# into (gettimeofday, clock_gettime's CLOCK_REALTIME, time): a client whose
# clock is wrong, without touching the host's.
_TIME_SHIFT_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
static long shift(void) { const char *s = getenv("KMPC_TIME_SHIFT"); return s ? atol(s) : 0; }
int gettimeofday(struct timeval *tv, void *tz) {
  int (*real)(struct timeval *, void *) = dlsym(RTLD_NEXT, "gettimeofday");
  int r = real(tv, tz);
  if (r == 0 && tv) tv->tv_sec += shift();
  return r;
}
int clock_gettime(clockid_t id, struct timespec *ts) {
  int (*real)(clockid_t, struct timespec *) = dlsym(RTLD_NEXT, "clock_gettime");
  int r = real(id, ts);
  if (r == 0 && ts && id == CLOCK_REALTIME) ts->tv_sec += shift();
  return r;
}
time_t time(time_t *t) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  if (t) *t = tv.tv_sec;
  return tv.tv_sec;
}
"""


def test_a_client_with_a_wrong_clock_still_logs_in(kmpc_factory, tmp_path):
    """Review (review5) regression: an honest MIT kinit whose clock is 10
    or 15 minutes off logs in (it dates its timestamp by the KDC's time
    from the PREAUTH_REQUIRED error, get_in_tkt.c note_req_timestamp), so
    the module's and the servers' skew checks, both against the KDC's
    clock, refuse nothing an honest client sends."""
    import subprocess
    src, so = tmp_path / "shift.c", tmp_path / "shift.so"
    src.write_text(_TIME_SHIFT_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src), "-ldl"], check=True)
    princ = "cleo"
    kr, _, _ = cts_user_realm(kmpc_factory, princ)
    for shift in (600, -900):
        env = dict(kr.env, LD_PRELOAD=str(so), KMPC_TIME_SHIFT=str(shift),
                   KRB5CCNAME=f"FILE:{tmp_path}/cc{shift}")
        kr.kinit(princ, "Cleo-pw-4242", env=env)
    assert kr.kdc_alive()


def test_replays_the_module_refuses_do_not_spend_the_users_bound(kmpc_factory):
    """Review (review5) ATTACK, fails on 65a7b17: the module checks its
    replay cache only after the Run, so a replayed timestamp of a proven
    shape has its reply computed, released and counted by the servers'
    --cts_releases_per_minute before the KDC answers PREAUTH_FAILED. Anyone
    who saw one login on the network spends that user's bound and the
    user's own next login fails (KDC_ERR_SVC_UNAVAILABLE). Secure
    behaviour: a replay the module refuses costs the user nothing (check
    the cache on C || T, which the KDC holds, before submitting)."""
    princ = "cleo"
    kr, key = _bound_realm(kmpc_factory, princ, 3)
    captured = _timestamp(key, _now())
    rep = _send(kr, princ, captured, 1)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    for _ in range(4):  # the network attacker's replays, new nonces
        rep = _send(kr, princ, captured, 1)
        assert rep[:1] != b"\x6b", "a replayed timestamp logged in"
    rep = _send(kr, princ, _timestamp(key, _now()), 1)
    assert rep[:1] == b"\x6b", (
        "the user's own login failed after refused replays",
        krb_der.krb_error_code(rep) if rep[:1] == b"\x7e" else rep[:8].hex())


def test_a_replay_over_udp_or_with_reordered_padata_is_refused(kmpc_factory):
    """Review (review5) regression: the module's cache is keyed on the key
    and C || T, not on the transport or the rest of the request: a
    timestamp that logged in over TCP, sent again over UDP with a new
    nonce, or over TCP with its padata in the other order, is refused
    (MIT's lookaside cache, keyed on the request's bytes, misses both)."""
    princ = "cleo"
    kr, key, _ = cts_user_realm(kmpc_factory, princ)
    captured = _timestamp(key, _now())
    rep = _send(kr, princ, captured, 1)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    req = _as_req(kr.realm, princ, (1 << 30) | secrets.randbits(30),
                  [_pa(PA_ENC_TIMESTAMP, captured), _pa(PA_REQ_ENC_PA_REP, b"")],
                  addresses=1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(60)
        s.sendto(req, ("127.0.0.1", kr.kdc_port))
        rep = s.recv(65536)
    assert krb_der.krb_error_code(rep) == KDC_ERR_SVC_UNAVAILABLE, rep[:8].hex()
    req = _as_req(kr.realm, princ, (1 << 30) | secrets.randbits(30),
                  [_pa(PA_REQ_ENC_PA_REP, b""), _pa(PA_ENC_TIMESTAMP, captured)],
                  addresses=1)
    rep = krb_der.send_tcp(kr.kdc_port, req)
    assert krb_der.krb_error_code(rep) == KDC_ERR_SVC_UNAVAILABLE, rep[:8].hex()
    assert kr.kdc_alive()


def test_a_heimdal_client_with_a_wrong_clock_fares_as_with_a_stock_key(kmpc_factory, tmp_path):
    """Review (review5) regression: Debian's Heimdal kinit dates its first
    timestamp by its own (wrong) clock and retries with the KDC's time on
    KRB_AP_ERR_SKEW. With its clock 600 s ahead or 900 s behind, after a
    login that proved its request's shape (so the reply rides in the
    gate's Run and the servers withhold it as stale), a user whose key is
    in the cluster fares exactly as a user with an ordinary KDB key: 600 s
    ahead logs in on the retry; 900 s behind fails for both (Heimdal 7.8
    answers PREAUTH_FAILED itself, not kmpc)."""
    import subprocess
    import pytest
    from kmpc_harness import heimdal as kmpc_heimdal
    from test_cts_as import Stock
    from test_cts_handles import CTS256
    try:
        progs = kmpc_heimdal.prepare()
    except kmpc_heimdal.HeimdalError as e:
        pytest.fail(f"Debian's Heimdal clients could not be prepared: {e}")
    src, so = tmp_path / "shift.c", tmp_path / "shift.so"
    src.write_text(_TIME_SHIFT_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src), "-ldl"], check=True)
    kr, _, _ = cts_user_realm(kmpc_factory, "cleo")
    kr.addprinc("olly", "Olly-pw-1", enctypes=[CTS256])  # an ordinary KDB key
    c = Stock(kr, "heimdal")

    def kinit(princ, pw, shift):
        env = dict(kmpc_heimdal.env(c.env), LD_PRELOAD=str(so), KMPC_TIME_SHIFT=str(shift))
        p = subprocess.run([progs["kinit"], "--password-file=STDIN", princ], input=pw + "\n",
                           capture_output=True, text=True, env=env, timeout=90)
        return p.returncode, p.stderr.replace(princ, "USER")

    for shift in (0, 600, -900):
        stock = kinit("olly", "Olly-pw-1", shift)
        assert kinit("cleo", "Cleo-pw-4242", shift) == stock, (shift, stock)
        if shift != -900:
            assert stock[0] == 0, (shift, stock)
    assert kr.kdc_alive()


def test_copies_of_an_inflight_timestamp_lock_no_one_out(kmpc_factory):
    """ATTACK (fails on 819daad): copies of one PA-ENC-TIMESTAMP that reach
    the KDC while the first is still in its Run (a network attacker racing
    the user's login, or the user's own UDP retransmissions once a flood
    has pushed MIT's lookaside entry out) all pass the module's replay
    cache before any Run; all but the first then failed when their gate
    verified as a wrong password does (KDC_ERR_PREAUTH_FAILED), which MIT's
    lockout counts: an attacker who sees a login on the network locks its
    user out (policy maxfailure). Secure: such a copy is answered
    KDC_ERR_SVC_UNAVAILABLE, which lockout does not count and MIT's
    clients skip while they wait for the first copy's answer."""
    princ = "cleo"
    kr, key, _ = cts_user_realm(kmpc_factory, princ)
    kr.kadmin_local("addpol -maxfailure 2 -failurecountinterval 0 -lockoutduration 600 lock")
    kr.kadmin_local(f"modprinc -policy lock {princ}")
    # The shape proven first, so that every copy goes into the gate's Run.
    rep = _send(kr, princ, _timestamp(key, _now()), 1)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    codes = []
    for _ in range(3):
        captured = _timestamp(key, _now())
        codes += _copies(kr, princ, captured, 4)
    assert codes.count("AS-REP") == 3, codes  # each timestamp logs in once
    assert set(codes) <= {"AS-REP", KDC_ERR_SVC_UNAVAILABLE}, codes
    rep = _send(kr, princ, _timestamp(key, _now()), 1)
    assert rep[:1] == b"\x6b", ("the user is locked out after copies of their logins",
                                krb_der.krb_error_code(rep) if rep[:1] == b"\x7e" else "")


def test_copies_of_an_inflight_timestamp_do_not_spend_the_users_bound(kmpc_factory):
    """Review (review6) ATTACK, fails on b04c6a3: copies of one
    PA-ENC-TIMESTAMP sent while the first is in its Run pass the module's
    replay cache (nothing verified yet), so every copy's gated reply is
    computed, released and counted by the servers' --cts_releases_per_
    minute before the module refuses the copy after the Run (998276b made
    that refusal SVC_UNAVAILABLE, not PREAUTH_FAILED, but the bound is
    already spent). A network attacker who sees a login sends a burst of
    copies and the user's next logins fail (KDC_ERR_SVC_UNAVAILABLE) for
    up to a minute, each time. Secure behaviour: copies of an in-flight
    gate cost the user nothing (e.g. hold a copy whose C || T is in flight
    until the first is verified, then refuse it before its Run)."""
    princ = "cleo"
    kr, key = _bound_realm(kmpc_factory, princ, 4)
    # The user's first login proves the shape, so every copy goes into the
    # gate's Run with its reply.
    rep = _send(kr, princ, _timestamp(key, _now()), 1)
    assert rep[:1] == b"\x6b", (rep[:8].hex(), kr.kdc_log_text()[-3000:])
    captured = _timestamp(key, _now())  # the user's second login ...
    codes = _copies(kr, princ, captured, 8)  # ... and the attacker's copies
    assert codes.count("AS-REP") <= 1, codes
    # The user's third login within the minute: 3 of a bound of 4.
    rep = _send(kr, princ, _timestamp(key, _now()), 1)
    assert rep[:1] == b"\x6b", (
        "the user's own login failed after copies of their login", codes,
        krb_der.krb_error_code(rep) if rep[:1] == b"\x7e" else rep[:8].hex())
