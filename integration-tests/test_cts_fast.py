"""FAST (RFC 6113) for users whose aes256/aes128-cts-hmac-sha1-96 key lives
only in the cluster: Debian's unmodified kinit -T and kpasswd.

With FAST the client's keys are KRB-FX-CF2(A, K) of a key A the KDC holds
and the user's long-term key K: the client's encrypted challenge (usage 54)
under CF2(armor key, K) and the reply (usage 3) under the strengthened
reply key CF2(strengthen key, K). The KDC computes PRF+(A, pepper_a) and
deals it as XOR shares; the servers add PRF+(K, pepper_k) from K's dealt PRF
material and run the challenge's DECRYPT as the gate, the KDC's challenge
(usage 55) and the reply's ENCRYPT in the AS exchange's one Run once their shapes are proven (docs/design/cts-circuits.md "FAST",
exchange-plan.md section 2). PRF+(K, .) is a password-equivalent: it must
reach no server whole (the recorded requests are searched for it).

Real processes as test_cts_as.py (three kmpc-mpc-server in both security
modes, krb5kdc with the real kdcmpc module, kadmind with the key dealer),
and Debian's /usr/bin/kinit, klist, kvno and kpasswd. The armor is the TGT
of an ordinary user (its key in the KDB, the TGT under the krbtgt handle).
"""
import hashlib
import os
import subprocess
import time

import pytest

import ctr_mpc_ref
from kmpc_harness import tickets
from test_cts_as import (MODES, SERVICE, Stock, failed_attempts,
                         deferred_sent, kdc_counts, realm)  # noqa: F401 (fixture)
from test_cts_handles import (COLD_PROGRAMS, CTS128, CTS256, ENCTYPES,
                              assert_only_handles, keys_of)
from test_metrics import parse, scrape, value

EC_USED = "encrypted_challenge (138) (real) returned: 0/Success"


def prf(key, data):
    """RFC 3962 section 6: AES(DK(key, "prf"), truncate16(SHA-1(data)))."""
    return ctr_mpc_ref.aes_block(ctr_mpc_ref.derive_random(key, b"prf"),
                                 hashlib.sha1(data).digest()[:16])


def prf_plus(key, pepper, n):
    """RFC 6113 section 5.1 PRF+ cut to n bytes."""
    out, i = b"", 1
    while len(out) < n:
        out += prf(key, bytes([i]) + pepper)
        i += 1
    return out[:n]


def password_equivalents(kr, princ, password):
    """K and its PRF+ halves of every FAST key (both key sizes), 16-byte
    pieces: none may reach a server."""
    out = []
    for k in keys_of(kr, princ, password).values():
        out.append(k)
        for pepper in (b"challengelongterm", b"replykey"):
            h = prf_plus(k, pepper, 32)
            out += [h[:16], h[16:]]
    return out


def fast_counts(kr):
    """(as_fast exchanges, their Runs) the KDC module counted, ok results."""
    m = parse(scrape(kr.kdc_metrics_url))
    return tuple(value(m, n, missing=0, exchange="as_fast", result="ok")
                 for n in ("kmpc_kdc_exchanges_total", "kmpc_kdc_exchange_runs_total"))


def armor_ccache(kr, c):
    """olly's TGT (key in the KDB) as the FAST armor."""
    path = os.path.join(kr.dir, "armor.cc")
    env = dict(c.env, KRB5CCNAME="FILE:" + path)
    p = subprocess.run(["/usr/bin/kinit", "olly"], input="Olly-pw-1\n", env=env,
                       capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    return "FILE:" + path


def fast_kinit(c, armor, princ, password, trace=False):
    env = dict(c.env)
    if trace:
        c.env["KRB5_TRACE"] = "/dev/stderr"
    try:
        return c.run("kinit", "-T", armor, princ, input=password + "\n")
    finally:
        c.env = env


def share(kr, princ, password, enctype):
    kr.addprinc(princ, password, enctypes=[enctype])
    _, out, _ = kr.admin("share", "--from-existing", f"--enctype={enctype}", princ)
    assert f"as {enctype} kvno 1" in out, out
    assert [(r[0], r[1]) for r in assert_only_handles(kr, princ)] == [("1", enctype)]


@pytest.mark.parametrize("enctype", [CTS256, CTS128])
def test_fast_login_with_encrypted_challenge(realm, enctype):
    """kinit -T: the client's encrypted challenge is verified in the
    cluster, the KDC's challenge is computed there and verifies at the
    client, and the reply is under the strengthened key (the client
    decrypts it: it would fail under K); each FAST exchange is one Run
    (the login one more for a new shape); a service ticket follows; the
    keys are in no log."""
    kr, pw = realm, "Alice-pw-9182"
    share(kr, "alice", pw, enctype)
    c = Stock(kr)
    armor = armor_ccache(kr, c)
    before, d0 = fast_counts(kr), deferred_sent(kr)
    rc, out = fast_kinit(c, armor, "alice", pw, trace=True)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    # The client's challenge sent, then the KDC's verified in the reply
    # (MIT's client decrypts it under CF2(armor, K), usage 55: a failure
    # would be traced as this module returning an error).
    assert out.count(EC_USED) == 2, out
    assert "encrypted_challenge (138) (real) returned: -" not in out, out
    deadline = time.time() + 5
    while True:  # an exchange is counted once the KDC released it
        ex, runs = (a - b for a, b in zip(fast_counts(kr), before))
        if ex >= 3 or time.time() > deadline:
            break
        time.sleep(0.05)
    # Two requests (PREAUTH_REQUIRED, then the challenge), each opening the
    # armor TGT, and the AS exchange: one Run each, and one more when the
    # KDC's challenge or the reply had a new shape (both then go in one
    # Run after the client's challenge verified: planner.h, proven shapes).
    d = deferred_sent(kr) - d0
    assert ex == 3 and d in (0, 1, 2) and runs == ex + (d > 0), (ex, runs, d)
    rc, out = c.run("klist", "-e")
    assert rc == 0 and f"Default principal: alice@{kr.realm}" in out, out
    creds = tickets.ccache_credentials(c.ccache)
    tgt = [x for x in creds if x["server"][0] == "krbtgt"]
    assert len(tgt) == 1 and len(tgt[0]["key"]) in (16, 32), creds
    rc, out = c.run("kvno", SERVICE)
    assert rc == 0 and f"{SERVICE}@{kr.realm}: kvno = " in out, out
    log = kr.kdc_log_text()
    for secret in password_equivalents(kr, "alice", pw):
        assert secret.hex() not in log
    assert "refusing FAST" not in log


def test_fast_wrong_password_refused_as_stock(realm):
    """A wrong password under FAST fails as for a user whose key is in the
    KDB (same kinit message), counted for lockout alike."""
    kr, pw = realm, "Carl-pw-4711"
    share(kr, "carl", pw, CTS256)
    kr.addprinc("dora", "Dora-pw-1", enctypes=[CTS256, CTS128])
    c = Stock(kr)
    armor = armor_ccache(kr, c)
    n0, m0 = failed_attempts(kr, "carl"), failed_attempts(kr, "dora")
    rc, out = fast_kinit(c, armor, "carl", "wrong-" + pw)
    rc2, out2 = fast_kinit(c, armor, "dora", "wrong-Dora-pw-1")
    assert rc != 0 and rc2 != 0, (out, out2)
    assert out.replace("carl", "USER") == out2.replace("dora", "USER"), (out, out2)
    assert "Password incorrect while getting initial credentials" in out, out
    assert failed_attempts(kr, "carl") == n0 + 1
    assert failed_attempts(kr, "dora") == m0 + 1
    rc, out = fast_kinit(c, armor, "carl", pw)
    assert rc == 0, out
    assert kr.kdc_alive()


def test_kpasswd_with_a_tgt_uses_fast(realm):
    """kpasswd with the user's TGT in the ccache armors its AS exchange for
    kadmin/changepw with it (MIT t_changepw.py): the encrypted challenge
    under the user's handle; the new password logs in, with FAST too."""
    kr, old, new = realm, "Kim-old-1357", "Kim-new-2468"
    kr.enable_dealer()
    kr.start_kadmind()
    share(kr, "kim", old, CTS256)
    c = Stock(kr)
    rc, out = c.kinit("kim", old)
    assert rc == 0, out
    c.env["KRB5_TRACE"] = "/dev/stderr"
    rc, out = c.run("kpasswd", "kim", input=f"{old}\n{new}\n{new}\n")
    del c.env["KRB5_TRACE"]
    assert rc == 0 and "Password changed" in out, out + kr.kdc_log_text()[-2000:]
    assert EC_USED in out, out
    assert CTS256 in {r[1] for r in assert_only_handles(kr, "kim")}
    armor = armor_ccache(kr, c)
    rc, out = fast_kinit(c, armor, "kim", new)
    assert rc == 0, out
    rc, out = fast_kinit(c, armor, "kim", old)
    assert rc != 0 and "Password incorrect" in out, out


def test_no_password_equivalent_reaches_any_server(kmpc_factory, tmp_path, monkeypatch):
    """The servers record every KeyOps request (--debug_record_requests):
    after FAST logins no server's view holds the user's key, PRF+(K,
    "challengelongterm") or PRF+(K, "replykey") (either key size's), nor
    the session keys of the replies. Control: the user's key id is there."""
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    kr.setup_krbtgt()
    kr.addprinc("olly", "Olly-pw-1", enctypes=[CTS256, CTS128])
    share(kr, "vera", "Vera-pw-314", CTS256)
    kr.start()
    c = Stock(kr)
    armor = armor_ccache(kr, c)
    keys = set()
    for _ in range(2):
        rc, out = fast_kinit(c, armor, "vera", "Vera-pw-314")
        assert rc == 0, out
        keys |= {x["key"] for x in tickets.ccache_credentials(c.ccache)
                 if x["server"][0] == "krbtgt"}
    assert len(keys) == 2, keys
    secrets = password_equivalents(kr, "vera", "Vera-pw-314")
    key_id = bytes.fromhex(assert_only_handles(kr, "vera")[0][3])
    for i in range(3):
        with open(os.path.join(tmp_path, f"keyops-{i}.bin"), "rb") as f:
            rec = f.read()
        assert key_id in rec, f"control: party {i} recorded no job under vera's key"
        for s in secrets:
            assert s not in rec and s[:8] not in rec and s[8:] not in rec, \
                f"party {i} received a password-equivalent"
        for k in keys:
            assert k not in rec and k[:8] not in rec and k[-8:] not in rec, \
                f"party {i} received a session key"


def preauth_log_lines(text, princ):
    """The KDC log's pre-authentication failure lines of one request, as an
    operator's log watch reads them: without time, pid, address, and with
    the principal's name replaced."""
    out = []
    for line in text.splitlines():
        if "verify failure" not in line and "PREAUTH_FAILED" not in line:
            continue
        line = line.split("): ", 1)[-1]
        line = line.split(") 127.0.0.1: ", 1)[-1]
        out.append(line.replace(princ, "USER"))
    return out


def test_failed_challenge_logged_as_stock(realm):
    """A wrong password under FAST leaves the KDC log lines MIT writes for a
    KDB-key user in the same realm: 'preauth (encrypted_challenge) verify
    failure: ...' and the AS_REQ PREAUTH_FAILED line (log watches, e.g.
    fail2ban filters or SIEM rules, key on both)."""
    kr, pw = realm, "Erin-pw-5150"
    share(kr, "erin", pw, CTS256)
    kr.addprinc("fred", "Fred-pw-1", enctypes=[CTS256, CTS128])
    c = Stock(kr)
    armor = armor_ccache(kr, c)
    lines = {}
    for princ, wrong in (("fred", "wrong-Fred-pw-1"), ("erin", "wrong-" + pw)):
        start = len(kr.kdc_log_text())
        rc, out = fast_kinit(c, armor, princ, wrong)
        assert rc != 0 and "Password incorrect" in out, out
        deadline = time.time() + 10  # the KDC logs the request after its reply
        while (f"PREAUTH_FAILED: {princ}@" not in kr.kdc_log_text()[start:]
               and time.time() < deadline):
            time.sleep(0.1)
        lines[princ] = preauth_log_lines(kr.kdc_log_text()[start:], princ)
    # Control: the KDB-key user's request is logged as MIT logs it.
    assert any(x.startswith("preauth (encrypted_challenge) verify failure")
               for x in lines["fred"]), lines
    assert lines["erin"] == lines["fred"], lines
