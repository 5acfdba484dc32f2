"""Review of the AS exchange plan: a failed pre-authentication answers as
stock MIT does, whatever else the request carries.

MIT verifies the PA-ENC-TIMESTAMP before it builds anything of the reply
(kdc_preauth.c check_padata, then finish_process_as_req), so a wrong
password is answered KDC_ERR_PREAUTH_FAILED with the hint list and is
counted by the KDB lockout audit, even when a later step of the reply (for
instance return_enc_padata decoding PA-PAC-OPTIONS) would have failed.

With a client key under a handle the timestamp is the exchange plan's gate
and is decrypted after the reply is built (kdc_mpc_as.c). A failure while
the plan is built must therefore still let the timestamp decide first, as
kdc_mpc_as_verdict() does for a failure before the plan; otherwise a wrong
password answers another error, no failed attempt is counted, and the
audit records no failed pre-authentication.
"""
import datetime
import os
import re
import secrets

import ctr_mpc_ref
import krb_der
from kmpc_harness.cluster import REALM, default_salt, password as _password

PREAUTH_FAILED = 24
KRB_ERR_GENERIC = 60
PA_ENC_TIMESTAMP = 2
PA_PAC_OPTIONS = 167


def _pa(pa_type, value):
    return krb_der.seq(krb_der.ctx(1, krb_der.der_int(pa_type)),
                       krb_der.ctx(2, krb_der.der(0x04, value)))


def _wrong_enc_ts():
    """A PA-ENC-TIMESTAMP (aes256-ctr-mpc) that no password encrypted: its
    tag never verifies, as for a wrong password."""
    enc = krb_der.seq(krb_der.ctx(0, krb_der.der_int(-29002)),
                      krb_der.ctx(2, krb_der.der(0x04, os.urandom(60))))
    return _pa(PA_ENC_TIMESTAMP, enc)


def _enc_ts(princ, pw, skew=0):
    """A PA-ENC-TIMESTAMP (aes256-ctr-mpc) under the key of princ's password
    pw, skew seconds off the clock (ctr_mpc_ref.py, independent of libkrb5)."""
    key = ctr_mpc_ref.string_to_key("aes256-ctr-mpc", pw.encode(),
                                    default_salt(f"{princ}@{REALM}").encode())
    now = datetime.datetime.now(datetime.timezone.utc)
    t = (now + datetime.timedelta(seconds=skew)).strftime("%Y%m%d%H%M%SZ")
    plain = krb_der.seq(krb_der.ctx(0, krb_der.der(0x18, t.encode())),
                        krb_der.ctx(1, krb_der.der_int(1234)))
    ct = ctr_mpc_ref.encrypt(key, 1, plain, bytes(8) + secrets.token_bytes(8))
    enc = krb_der.seq(krb_der.ctx(0, krb_der.der_int(-29002)),
                      krb_der.ctx(2, krb_der.der(0x04, ct)))
    return _pa(PA_ENC_TIMESTAMP, enc)


def _e_data_types(reply):
    """The pa-data types of a KRB-ERROR's e-data (METHOD-DATA), or None."""
    for tag, _, body in krb_der.children(krb_der.content(krb_der.content(reply))):
        if tag == 0xAC:
            method_data = krb_der.content(krb_der.content(body))
            return [int.from_bytes(krb_der.content(krb_der.content(
                        krb_der.children(pa)[0][1])), "big", signed=True)
                    for _, _, pa in krb_der.children(method_data)]
    return None


def _as_req(cname, *padata):
    return krb_der.as_req(REALM, cname, secrets.randbits(31), padata=list(padata))


def _kdc_tcp(realm, msg):
    return krb_der.send_tcp(realm.kdc_port, msg)


def _failed_attempts(realm, princ):
    info = realm.kadmin_local(f"getprinc {princ}")
    failed = re.search(r"Failed password attempts: (\d+)", info)
    assert failed is not None, info
    return int(failed.group(1))


def _realm(kmpc_factory):
    """alice's key under a handle (the test module's key file), bob's an
    ordinary aes256-ctr-mpc key in the KDB; both under a lockout policy."""
    realm = kmpc_factory(clusters=0, test_module_delay_ms=30).setup(users=("alice",))
    realm.addprinc("bob", _password(), enctypes=["aes256-ctr-mpc"])
    realm.kadmin_local("addpol -maxfailure 5 -failurecountinterval 0 "
                       "-lockoutduration 3600 lockpol")
    for princ in ("alice", "bob"):
        realm.kadmin_local(f"modprinc +requires_preauth -policy lockpol {princ}")
    return realm.start()


def test_wrong_timestamp_with_malformed_pac_options_is_preauth_failed(kmpc_factory):
    """Attack: a wrong password plus a PA-PAC-OPTIONS that does not decode.
    Stock MIT (bob, whose key is in the KDB) answers PREAUTH_FAILED and
    counts the attempt; so must the KDC for alice, whose key is a handle."""
    realm = _realm(kmpc_factory)
    bad_pac_options = _pa(PA_PAC_OPTIONS, b"\x30\x03\x02\x01")
    for princ in ("bob", "alice"):
        reply = _kdc_tcp(realm, _as_req(princ, _wrong_enc_ts(), bad_pac_options))
        code = krb_der.krb_error_code(reply)
        assert code == PREAUTH_FAILED, (princ, code, realm.kdc_log_text()[-3000:])
        assert _failed_attempts(realm, princ) == 1, princ
    # Without the malformed pa-data both are already answered alike.
    for princ in ("bob", "alice"):
        reply = _kdc_tcp(realm, _as_req(princ, _wrong_enc_ts()))
        assert krb_der.krb_error_code(reply) == PREAUTH_FAILED, princ
        assert _failed_attempts(realm, princ) == 2, princ
    # The right password still logs alice in (the count is reset).
    realm.login("alice")
    assert _failed_attempts(realm, "alice") == 0
    assert realm.kdc_alive()


def test_wrong_timestamp_for_a_hw_auth_user_is_preauth_failed(kmpc_factory):
    """Attack: a wrong password for a user marked +requires_hwauth. Stock MIT
    (bob) verifies the timestamp in check_padata: PREAUTH_FAILED, counted;
    only a right one gets PREAUTH_REQUIRED (no hardware pre-authentication).
    For alice the deferred timestamp must decide first as well, not be
    dropped when finish_preauth() finds the hardware flag missing."""
    realm = _realm(kmpc_factory)
    for princ in ("bob", "alice"):
        realm.kadmin_local(f"modprinc +requires_hwauth {princ}")
    for princ in ("bob", "alice"):
        reply = _kdc_tcp(realm, _as_req(princ, _wrong_enc_ts()))
        code = krb_der.krb_error_code(reply)
        assert code == PREAUTH_FAILED, (princ, code, realm.kdc_log_text()[-3000:])
        assert _failed_attempts(realm, princ) == 1, princ
    # The right password: PREAUTH_REQUIRED for both (the same hint list),
    # and not counted.
    realm.kadmin_local("cpw -pw Bob-pw-4711 -e aes256-ctr-mpc:normal bob")
    pws = {"alice": realm.passwords["alice"], "bob": "Bob-pw-4711"}
    hints = {}
    for princ in ("bob", "alice"):
        failed = _failed_attempts(realm, princ)
        reply = _kdc_tcp(realm, _as_req(princ, _enc_ts(princ, pws[princ])))
        assert krb_der.krb_error_code(reply) == 25, princ   # PREAUTH_REQUIRED
        hints[princ] = _e_data_types(reply)
        assert _failed_attempts(realm, princ) == failed, princ
    assert hints["alice"] == hints["bob"], hints
    out = realm.login("alice", expected_code=1)
    assert "Password incorrect" not in out, out
    assert realm.kdc_alive()


def test_failed_preauth_answers_alike_for_handle_and_kdb_keys(kmpc_factory):
    """What held: a wrong, a skewed, another user's and a missing timestamp
    get the same error, e-data hint list and lockout count for alice (key
    under a handle) as for bob (stock MIT code, key in the KDB)."""
    realm = _realm(kmpc_factory)
    realm.kadmin_local("cpw -pw Bob-pw-4711 -e aes256-ctr-mpc:normal bob")
    pws = {"alice": realm.passwords["alice"], "bob": "Bob-pw-4711"}
    seen = {}
    for princ in ("bob", "alice"):
        other = "alice" if princ == "bob" else "bob"
        answers = []
        for name, padata, failed in (
                ("wrong", [_wrong_enc_ts()], 1),
                ("missing", [], 1),
                ("skewed", [_enc_ts(princ, pws[princ], skew=3600)], 1),
                ("other's key", [_enc_ts(other, pws[other])], 2)):
            reply = _kdc_tcp(realm, _as_req(princ, *padata))
            answers.append((name, krb_der.krb_error_code(reply), _e_data_types(reply)))
            assert _failed_attempts(realm, princ) == failed, (princ, name)
        reply = _kdc_tcp(realm, _as_req(princ, _enc_ts(princ, pws[princ])))
        assert reply[:1] == b"\x6b", (princ, reply[:4].hex())   # AS-REP
        assert _failed_attempts(realm, princ) == 0, princ
        seen[princ] = answers
    assert seen["alice"] == seen["bob"], seen
    assert [a[1] for a in seen["bob"]] == [24, 25, 37, 24], seen
    assert 19 in seen["bob"][0][2], seen   # PA-ETYPE-INFO2 in the hint list


def test_one_request_tests_one_password_for_a_handle_user(kmpc_factory):
    """Divergence from stock MIT, kept on purpose. MIT's encrypted timestamp
    is not PA_SUFFICIENT, so it tries every PA-ENC-TIMESTAMP of a request and
    logs in if any verifies, counting at most one failure per request: n
    password guesses cost one lockout count (bob below: a wrong and a right
    timestamp log in). For alice only the first timestamp becomes the plan's
    gate (kdc_mpc_encts_defer() refuses a second one), so one request tests
    one password and each wrong first guess is counted."""
    realm = _realm(kmpc_factory)
    realm.kadmin_local("cpw -pw Bob-pw-4711 -e aes256-ctr-mpc:normal bob")
    pws = {"alice": realm.passwords["alice"], "bob": "Bob-pw-4711"}
    guesses = [_wrong_enc_ts() for _ in range(5)]
    reply = _kdc_tcp(realm, _as_req("bob", *guesses, _enc_ts("bob", pws["bob"])))
    assert reply[:1] == b"\x6b", reply[:4].hex()   # stock MIT: 6 guesses, one hit
    assert _failed_attempts(realm, "bob") == 0
    reply = _kdc_tcp(realm, _as_req("alice", *guesses, _enc_ts("alice", pws["alice"])))
    assert krb_der.krb_error_code(reply) == PREAUTH_FAILED
    assert _failed_attempts(realm, "alice") == 1
    # The right password first logs in, whatever follows it.
    reply = _kdc_tcp(realm, _as_req("alice", _enc_ts("alice", pws["alice"]), *guesses))
    assert reply[:1] == b"\x6b", reply[:4].hex()
    assert _failed_attempts(realm, "alice") == 0


def _rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


# The module's failure bound (kdc-plugin/src/gate_failures.h, kdc.conf
# [kdcmpc] gate_failures): the realm's default, which the flood below keeps
# under per user.
GATE_FAILURES = 10
FLOOD_USERS = 32


def test_wrong_password_flood_leaves_honest_logins_working(kmpc_factory):
    """What held (real module and cluster): a flood of AS-REQs with wrong
    timestamps for other handle users spends the planner's budget
    (speculate_max 8: four exchanges, then 32 a second), and alice's honest
    login still succeeds during and after it; the KDC's memory does not
    grow with the flood.

    The flood's users are not alice: wrong passwords for one key stop that
    key's logins at the module's failure bound (GATE_FAILURES in its window,
    gate_failures.h), the right password's too, as MIT's lockout would;
    test_gate_budget.py has that. A flood at one user would meet the bound
    after GATE_FAILURES requests and reach the planner no more, so the 320
    wrong timestamps are spread over FLOOD_USERS users, GATE_FAILURES each:
    every one of them reaches the planner. Each user's next wrong password
    is then refused by the module's bound, before any Run."""
    import concurrent.futures
    from test_metrics import parse, scrape
    r = kmpc_factory(module="real", metrics=True,
                     module_options={"speculate_max": 8})
    r.setup_krbtgt()
    targets = [f"flood{i}" for i in range(FLOOD_USERS)]
    r.add_users({"alice": _password(), **{t: _password() for t in targets}})
    r.start()
    r.login("alice")
    pid = r.kdc_proc.pid
    rss0 = _rss_kib(pid)

    def flood(users):
        codes = []
        for _ in range(GATE_FAILURES):
            for u in users:
                codes.append(krb_der.krb_error_code(_kdc_tcp(r, _as_req(u, _wrong_enc_ts()))))
        return codes

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        jobs = [pool.submit(flood, targets[i::8]) for i in range(8)]
        r.login("alice", timeout=60)  # during the flood
        codes = [c for j in jobs for c in j.result()]
    assert len(codes) == FLOOD_USERS * GATE_FAILURES
    # Wrong passwords, or a cluster too busy to tell: never a login.
    assert set(codes) <= {PREAUTH_FAILED, 29}, sorted(set(codes))  # 29: SVC_UNAVAILABLE
    assert codes.count(PREAUTH_FAILED) > 0
    m = parse(scrape(r.kdc_metrics_url))
    budget = sum(v for (n, lab), v in m.items()
                 if n == "kmpc_kdc_plan_misses_total" and ("reason", "budget") in lab)
    print(f"flood: {len(codes)} wrong timestamps, {codes.count(29)} refused as "
          f"busy; plan misses for lack of budget: {budget:.0f}")
    r.login("alice", timeout=60)  # after it
    # Each flooded key is at its bound now: one more wrong password is
    # refused by the module, not tried.
    since = len(r.kdc_log_text())
    for t in targets[:2]:
        code = krb_der.krb_error_code(_kdc_tcp(r, _as_req(t, _wrong_enc_ts())))
        assert code == 29, (t, code)
    refused = r.kdc_log_text()[since:]
    assert refused.count(f"(gate_failures = {GATE_FAILURES})") == 2, refused[-3000:]
    assert _rss_kib(pid) - rss0 < 64 * 1024, (rss0, _rss_kib(pid))
    assert r.alive()


def test_as_req_for_a_service_under_a_cts_handle_is_refused_as_unavailable(kmpc_factory):
    """A service whose key is an aes256-cts handle: its handle is never used
    as a key, a wrong password is still PREAUTH_FAILED first, and a TGS-REQ
    for it is KDC_ERR_SVC_UNAVAILABLE here (the test module computes no
    aes*-cts job; test_cts_service.py has the real cluster issue it). An AS-REQ
    straight for it (kinit -S) with the right password goes to the module
    too (krb5 patch 0027-KDC-AS-tickets-to-services; test_cts_handles.py and
    test_kadmind_handles.py have the real cluster issue it), and its failure
    is refused the same way: KDC_ERR_SVC_UNAVAILABLE, no ticket."""
    kr = kmpc_factory(clusters=0, enctypes=("aes256-ctr-mpc", "aes128-ctr-mpc",
                                            "aes256-cts-hmac-sha1-96",
                                            "aes128-cts-hmac-sha1-96"))
    kr.setup(users=("alice",))
    svc = "host/cts.test"
    kr.addprinc(svc, _password(), enctypes=["aes256-cts-hmac-sha1-96"], flags="")
    kr.kdb_handle_run("set", svc, "aes256-cts-hmac-sha1-96", secrets.token_hex(32))
    kr.start()
    kr.login("alice")
    out = kr.run(["kvno", svc], expected_code=1)
    assert "service is not available" in out, out
    out = kr.run(["kinit", "-S", svc, "alice"], input="wrong-" + kr.passwords["alice"] + "\n",
                 expected_code=1)
    assert "Password incorrect" in out, out
    out = kr.run(["kinit", "-S", svc, "alice"], input=kr.passwords["alice"] + "\n",
                 expected_code=1)
    assert "service is not available" in out, (out, kr.kdc_log_text()[-2000:])
    assert not re.search(rf"AS_REQ .*ISSUE: .* for {svc}@", kr.kdc_log_text())
    assert kr.kdc_alive()
