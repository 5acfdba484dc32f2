"""Pre-authentication of aes*-cts users whose key is in the cluster, with
requests no MIT client sends, answered as MIT answers them for a user whose
key is in the KDB (docs/reviews/2026-11-26-fast-for-aes-cts-users.md,
findings 4 and 5).

- Program churn (finding 4): the servers compile a CBC-CTS program per
  ciphertext length, so a PA-ENC-TIMESTAMP or a FAST PA-ENCRYPTED-CHALLENGE
  of a length no PA-ENC-TS-ENC has (a DER PA-ENC-TS-ENC is 21, 26, 27 or 28
  bytes: RFC 4120 5.2.7.2, a 15-character KerberosTime and an optional
  Microseconds of 1-3 bytes; 16 + n + 12 bytes of RFC 3962 ciphertext) is
  refused by the KDC before any MPC work: no exchange, no program-cache
  miss on any server, and the client, the log and the lockout count see
  what a KDB-key user's identical request gets (PREAUTH_FAILED).
- Enctype label (finding 5): a challenge labelled ENCTYPE_NULL (0) with a
  valid tag is refused, one labelled ENCTYPE_UNKNOWN (511) accepted, as
  krb5_c_decrypt() (MIT's ec_verify()) does.

The test is the client: it builds the AS-REQs and the FAST armor itself
(RFC 6113: armor AP-REQ with a subkey, armor key KRB-FX-CF2(subkey, ticket
session key), the challenge under KRB-FX-CF2(armor key, K)), with the RFC
3962 code of test_cts_server_view.py; a genuine challenge logging in is
the control that this code agrees with MIT's and the cluster's.

Real processes as test_cts_as.py: three kmpc-mpc-server (both security
modes), krb5kdc with the real kdcmpc module.
"""
import datetime
import os
import re
import secrets
import time

import pytest

import krb_der
from kmpc_harness import tickets
from test_cts_as import Stock, failed_attempts, realm  # noqa: F401 (fixture)
from test_cts_fast import armor_ccache, preauth_log_lines, prf_plus, share
from test_cts_handles import CTS256, keys_of
from test_cts_server_view import rfc3962_checksum, rfc3962_decrypt, rfc3962_encrypt

AES256 = 18
ENCTYPE_UNKNOWN = 0x1FF
PA_ENC_TIMESTAMP = 2
PA_FX_FAST = 136
PA_ENCRYPTED_CHALLENGE = 138
PA_FX_COOKIE = 133
PA_FX_ERROR = 137
HMAC_SHA1_96_AES256 = 16
KRB_AP_REQ = 14
# RFC 4120 7.5.1, RFC 6113 5.4
USAGE_AP_REQ_AUTH, USAGE_FAST_REQ_CHKSUM, USAGE_FAST_ENC = 11, 50, 51
USAGE_FAST_REP, USAGE_ENC_CHALLENGE_CLIENT = 52, 54
PREAUTH_FAILED = 24
# Ciphertext lengths of no DER PA-ENC-TS-ENC (49, 54, 55, 56 are), all under
# the KDC's 256-byte cap on the timestamp.
WRONG_LENGTHS = (48, 57, 64, 100, 200)
WINDOW_S = 10  # the KDC logs a request after its reply


def pa_enc_ts(usec=True, micro=None):
    """A DER PA-ENC-TS-ENC of now (its microseconds micro if given)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    fields = [krb_der.ctx(0, krb_der.der(0x18, now.strftime("%Y%m%d%H%M%SZ").encode()))]
    if usec:
        fields.append(krb_der.ctx(1, krb_der.der_int(now.microsecond if micro is None
                                                     else micro)))
    return krb_der.seq(*fields)


def enc_data(etype, cipher):
    return krb_der.seq(krb_der.ctx(0, krb_der.der_int(etype)),
                       krb_der.ctx(2, krb_der.der(0x04, cipher)))


def pa_data(pa_type, value):
    return krb_der.seq(krb_der.ctx(1, krb_der.der_int(pa_type)),
                       krb_der.ctx(2, krb_der.der(0x04, value)))


def req_body(kr, cname):
    """KDC-REQ-BODY for krbtgt/realm, aes256-cts then aes128-cts."""
    return krb_der.seq(
        krb_der.ctx(0, krb_der.der(0x03, b"\x00\x40\x00\x00\x00")),
        krb_der.ctx(1, krb_der.principal(1, cname)),
        krb_der.ctx(2, krb_der.gstr(kr.realm)),
        krb_der.ctx(3, krb_der.principal(2, "krbtgt", kr.realm)),
        krb_der.ctx(5, krb_der.der(0x18, b"20370913024805Z")),
        krb_der.ctx(7, krb_der.der_int(secrets.randbits(30) | 1 << 30)),  # 4 DER bytes
        krb_der.ctx(8, krb_der.seq(krb_der.der_int(18), krb_der.der_int(17))))


def as_req(body, padata):
    return krb_der.der(0x6A, krb_der.seq(
        krb_der.ctx(1, krb_der.der_int(5)), krb_der.ctx(2, krb_der.der_int(10)),
        krb_der.ctx(3, krb_der.seq(*padata)), krb_der.ctx(4, body)))


def fx_cf2(k1, pepper1, k2, pepper2):
    """KRB-FX-CF2 (RFC 6113 5.1) of AES keys, in k1's size and enctype."""
    a, b = prf_plus(k1, pepper1, len(k1)), prf_plus(k2, pepper2, len(k1))
    return bytes(x ^ y for x, y in zip(a, b))


class Armor:
    """FAST armor from a ccache's TGT: an AP-REQ with a fresh aes256-cts
    subkey per request and the armor key it gives (RFC 6113 5.4.1.1)."""

    def __init__(self, ccache_path, realm_name, cname):
        tgt, = [c for c in tickets.ccache_credentials(ccache_path)
                if c["server"][0] == "krbtgt"]
        assert len(tgt["key"]) == 32, "the armor TGT's session key is aes256-cts"
        with open(ccache_path, "rb") as f:
            buf = f.read()
        start, length = tgt["ticket"]
        self.ticket, self.tkt_key = buf[start:start + length], tgt["key"]
        self.realm, self.cname = realm_name, cname

    def fresh(self):
        """(armor AP-REQ DER, armor key)."""
        subkey = secrets.token_bytes(32)
        now = datetime.datetime.now(datetime.timezone.utc)
        auth = krb_der.der(0x62, krb_der.seq(
            krb_der.ctx(0, krb_der.der_int(5)),
            krb_der.ctx(1, krb_der.gstr(self.realm)),
            krb_der.ctx(2, krb_der.principal(1, self.cname)),
            krb_der.ctx(4, krb_der.der_int(now.microsecond)),
            krb_der.ctx(5, krb_der.der(0x18, now.strftime("%Y%m%d%H%M%SZ").encode())),
            krb_der.ctx(6, krb_der.seq(krb_der.ctx(0, krb_der.der_int(AES256)),
                                       krb_der.ctx(1, krb_der.der(0x04, subkey))))))
        ap_req = krb_der.der(0x6E, krb_der.seq(
            krb_der.ctx(0, krb_der.der_int(5)), krb_der.ctx(1, krb_der.der_int(KRB_AP_REQ)),
            krb_der.ctx(2, krb_der.der(0x03, b"\x00\x00\x00\x00\x00")),
            krb_der.ctx(3, self.ticket),
            krb_der.ctx(4, enc_data(AES256, rfc3962_encrypt(self.tkt_key, USAGE_AP_REQ_AUTH,
                                                            auth)))))
        return ap_req, fx_cf2(subkey, b"subkeyarmor", self.tkt_key, b"ticketarmor")


def fast_as_req(kr, armor, cname, inner):
    """An armored AS-REQ (RFC 6113 5.4.2) with a fresh armor, whose inner
    padata are inner(armor key); and that armor key."""
    ap_req, akey = armor.fresh()
    body = req_body(kr, cname)
    fast_req = krb_der.seq(krb_der.ctx(0, krb_der.der(0x03, b"\x00\x00\x00\x00\x00")),
                           krb_der.ctx(1, krb_der.seq(*inner(akey))),
                           krb_der.ctx(2, body))
    armored = krb_der.seq(
        krb_der.ctx(0, krb_der.seq(krb_der.ctx(0, krb_der.der_int(1)),
                                   krb_der.ctx(1, krb_der.der(0x04, ap_req)))),
        krb_der.ctx(1, krb_der.seq(
            krb_der.ctx(0, krb_der.der_int(HMAC_SHA1_96_AES256)),
            krb_der.ctx(1, krb_der.der(0x04, rfc3962_checksum(akey, USAGE_FAST_REQ_CHKSUM,
                                                              body))))),
        krb_der.ctx(2, enc_data(AES256, rfc3962_encrypt(akey, USAGE_FAST_ENC, fast_req))))
    return as_req(body, [pa_data(PA_FX_FAST, krb_der.ctx(0, armored))]), akey


def challenge(akey, key, plain=None, cipher=None, etype=AES256):
    """PA-ENCRYPTED-CHALLENGE of plain (a PA-ENC-TS-ENC of now) under
    KRB-FX-CF2(armor key, K), or of the given ciphertext, labelled etype."""
    if cipher is None:
        ckey = fx_cf2(akey, b"clientchallengearmor", key, b"challengelongterm")
        cipher = rfc3962_encrypt(ckey, USAGE_ENC_CHALLENGE_CLIENT,
                                 pa_enc_ts() if plain is None else plain)
    return pa_data(PA_ENCRYPTED_CHALLENGE, enc_data(etype, cipher))


def server_sum(kr, series):
    """A series (a name and a label pattern, as a regular expression)
    summed over the three servers, from their Admin Metrics (which brings
    the counters up to the engine's program cache)."""
    out = kr.cluster.client("metrics")
    found = re.findall(r'^%s\} (\S+)$' % series, out, re.M)
    assert len(found) == 3, out[-2000:]
    return sum(float(v) for v in found)


def program_cache(kr, result):
    """aes*-cts program lookups of this result ("hit": compiled before,
    "miss": compiled now) summed over the three servers; the FAST armor's
    decryption (under the krbtgt's aes*-ctr-mpc handle) makes none."""
    return server_sum(kr, r'kmpc_cts_program_cache_total\{[^}]*result="%s"[^}]*' % result)


def misses(kr):
    return program_cache(kr, "miss")


def lookups(kr):
    return program_cache(kr, "hit") + program_cache(kr, "miss")


def send(kr, msg):
    return krb_der.send_tcp(kr.kdc_port, msg)


def logged(kr, start, princ):
    """The pre-authentication failure lines of princ's request logged since
    start (offset into the KDC log), as test_cts_fast.py reads them."""
    deadline = time.time() + WINDOW_S
    while (f"PREAUTH_FAILED: {princ}@" not in kr.kdc_log_text()[start:]
           and time.time() < deadline):
        time.sleep(0.1)
    return preauth_log_lines(kr.kdc_log_text()[start:], princ)


def method_data(reply):
    """The KRB-ERROR's e-data as [(padata-type, value)]; PA-FX-COOKIE's
    value (encrypted, fresh each time) as its length."""
    err = {t: b for t, _, b in krb_der.children(krb_der.content(krb_der.content(reply)))}
    if 0xAC not in err:
        return []
    out = []
    for _, _, pa in krb_der.children(krb_der.content(krb_der.content(err[0xAC]))):
        f = {t: b for t, _, b in krb_der.children(pa)}
        t = int.from_bytes(krb_der.content(f[0xA1]), "big")
        v = krb_der.content(f[0xA2])
        out.append((t, len(v) if t == PA_FX_COOKIE else v))
    return out


def fast_error(reply, akey):
    """The KRB-ERROR's PA-FX-FAST reply opened under the armor key (RFC 6113
    5.4.3): (the inner padata types, the inner KRB-ERROR's error-code)."""
    value_, = [v for t, v in method_data(reply) if t == PA_FX_FAST]
    rep = krb_der.content(krb_der.content(value_))          # KrbFastArmoredRep
    ed, = [b for t, _, b in krb_der.children(rep) if t == 0xA0]
    enc = {t: b for t, _, b in krb_der.children(krb_der.content(ed))}
    plain = rfc3962_decrypt(akey, USAGE_FAST_REP, krb_der.content(enc[0xA2]))[16:]
    resp = {t: b for t, _, b in krb_der.children(krb_der.content(plain))}
    types, code = [], None
    for _, _, pa in krb_der.children(krb_der.content(resp[0xA0])):
        f = {t: b for t, _, b in krb_der.children(pa)}
        t = int.from_bytes(krb_der.content(f[0xA1]), "big")
        types.append(t)
        if t == PA_FX_ERROR:
            code = krb_der.krb_error_code(krb_der.content(f[0xA2]))
    return types, code


def pair(kr):
    """A user whose aes256-cts key is in the cluster and one whose key is in
    the KDB, names of one length (their salts, in the errors' e-data, too)."""
    tag = secrets.token_hex(2)
    cts, kdb = f"hc{tag}", f"kd{tag}"
    share(kr, cts, "Cts-pw-" + tag, CTS256)
    kr.addprinc(kdb, "Kdb-pw-" + tag, enctypes=[CTS256])
    return (cts, "Cts-pw-" + tag), (kdb, "Kdb-pw-" + tag)


def named(data, princ):
    """data (bytes or nested lists/tuples of them) with princ's name as USER."""
    if isinstance(data, bytes):
        return data.replace(princ.encode(), b"USER")
    if isinstance(data, str):
        return data.replace(princ, "USER")
    if isinstance(data, (list, tuple)):
        return type(data)(named(x, princ) for x in data)
    return data


def refused_as_stock(kr, cts, kdb, send_one):
    """send_one(princ, n) -> (reply, what the client sees) for each length:
    the cluster user's answer, log lines and lockout count equal the KDB-key
    user's, PREAUTH_FAILED; a length no PA-ENC-TS-ENC has costs no aes*-cts
    program lookup (so no miss: no program compiled) on any server, the
    control (55) a lookup on each."""
    for n in WRONG_LENGTHS + (55,):
        m0, l0 = misses(kr), lookups(kr)
        f0, g0 = failed_attempts(kr, cts), failed_attempts(kr, kdb)
        seen = {}
        for princ in (cts, kdb):
            start = len(kr.kdc_log_text())
            reply, view = send_one(princ, n)
            assert krb_der.krb_error_code(reply) == PREAUTH_FAILED, (n, princ, reply.hex())
            seen[princ] = (named(view, princ), logged(kr, start, princ))
        assert seen[cts] == seen[kdb] and seen[kdb][1], (n, seen)
        assert failed_attempts(kr, cts) == f0 + 1 and failed_attempts(kr, kdb) == g0 + 1, n
        if n == 55:   # control: the gate ran in the cluster (and failed its tag)
            assert lookups(kr) >= l0 + 3, n
        else:
            assert misses(kr) == m0, f"a {n}-byte ciphertext compiled a program"
            assert lookups(kr) == l0, f"a {n}-byte ciphertext reached the cluster"
    assert kr.kdc_alive()


def test_enc_timestamp_of_no_pa_enc_ts_length_is_refused_as_stock(realm):
    """Finding 4, plain timestamp: random PA-ENC-TIMESTAMPs of lengths no
    PA-ENC-TS-ENC has reach no server and get the KDB-key user's answer to
    the same bytes: KRB-ERROR code and e-data (names swapped), log lines,
    lockout count."""
    kr = realm
    (cts, _), (kdb, _) = pair(kr)
    ciphers = {n: os.urandom(n) for n in WRONG_LENGTHS + (55,)}

    def send_one(princ, n):
        pa = pa_data(PA_ENC_TIMESTAMP, enc_data(AES256, ciphers[n]))
        reply = send(kr, as_req(req_body(kr, princ), [pa]))
        return reply, method_data(reply)
    refused_as_stock(kr, cts, kdb, send_one)


def test_fast_challenge_of_no_pa_enc_ts_length_is_refused_as_stock(realm):
    """Finding 4 under FAST: random encrypted challenges of lengths no
    PA-ENC-TS-ENC has reach no server and get the KDB-key user's answer
    (error code, the error inside the FAST reply, log lines, lockout
    count). Control: a genuine challenge logs in (this request code agrees
    with MIT's and the cluster's)."""
    kr = realm
    c = Stock(kr)
    (cts, pw), (kdb, _) = pair(kr)
    armor = Armor(armor_ccache(kr, c)[len("FILE:"):], kr.realm, "olly")
    key = keys_of(kr, cts, pw)[CTS256]
    msg, _ = fast_as_req(kr, armor, cts, lambda a: [challenge(a, key)])
    reply = send(kr, msg)
    assert reply[:1] == b"\x6b", (reply[:4].hex(), kr.kdc_log_text()[-2000:])
    ciphers = {n: os.urandom(n) for n in WRONG_LENGTHS + (55,)}

    def send_one(princ, n):
        msg, akey = fast_as_req(kr, armor, princ,
                                lambda a: [challenge(a, None, cipher=ciphers[n])])
        reply = send(kr, msg)
        return reply, fast_error(reply, akey)
    refused_as_stock(kr, cts, kdb, send_one)


@pytest.mark.parametrize("etype,accepted", [(0, False), (ENCTYPE_UNKNOWN, True)])
def test_challenge_enctype_label_as_stock(realm, etype, accepted):
    """Finding 5: a genuine challenge (valid tag under KRB-FX-CF2(armor key,
    K)) labelled ENCTYPE_NULL is refused, one labelled ENCTYPE_UNKNOWN
    accepted, for the cluster user as for the KDB-key user (MIT's
    krb5_c_decrypt() accepts the key's enctype or ENCTYPE_UNKNOWN only)."""
    kr = realm
    c = Stock(kr)
    (cts, pw), (kdb, kpw) = pair(kr)
    armor = Armor(armor_ccache(kr, c)[len("FILE:"):], kr.realm, "olly")
    got = {}
    for princ, password in ((kdb, kpw), (cts, pw)):
        key = keys_of(kr, princ, password)[CTS256]
        msg, akey = fast_as_req(kr, armor, princ,
                                lambda a: [challenge(a, key, etype=etype)])
        reply = send(kr, msg)
        got[princ] = ("AS-REP" if reply[:1] == b"\x6b" else
                      (krb_der.krb_error_code(reply), fast_error(reply, akey)))
    assert got[kdb] == ("AS-REP" if accepted else (PREAUTH_FAILED, got[kdb][1])), got
    assert got[cts] == got[kdb], got
    assert kr.kdc_alive()


def wait_precompiled(kr):
    deadline = time.time() + 120
    while server_sum(kr, r'kmpc_cts_precompile_pending\{[^}]*') != 0:
        assert time.time() < deadline, "the background precompile did not finish in 120 s"
        time.sleep(0.5)


def test_a_first_fast_challenge_readies_the_other_length(realm):
    """A realm's first FAST login compiles its encrypted challenge's
    program (KRB-FX-CF2 key, 44 bytes of conf || P: microseconds of three
    bytes) and, behind it, the other usual length's
    (CtsProgramCache::TimestampSibling): once kmpc_cts_precompile_pending
    is 0 on all three, a challenge with microseconds of two bytes (43
    bytes: about one login in 30) and one of three each log in without
    compiling a program in their Run (no program-cache miss on any
    server)."""
    kr = realm
    wait_precompiled(kr)
    c = Stock(kr)
    (cts, pw), _ = pair(kr)
    armor = Armor(armor_ccache(kr, c)[len("FILE:"):], kr.realm, "olly")
    key = keys_of(kr, cts, pw)[CTS256]
    # The first login also compiles the reply's and the KDC's challenge's
    # programs (length classes, not precompiled); then neither length of
    # the client's challenge may compile one.
    for micro in (654321, 4321, 765432):
        wait_precompiled(kr)
        m0, l0 = misses(kr), lookups(kr)
        plain = pa_enc_ts(micro=micro)
        assert len(plain) == (28 if micro >= 32768 else 27)
        msg, _ = fast_as_req(kr, armor, cts, lambda a: [challenge(a, key, plain=plain)])
        reply = send(kr, msg)
        assert reply[:1] == b"\x6b", (micro, reply[:4].hex(), kr.kdc_log_text()[-2000:])
        assert lookups(kr) >= l0 + 3, micro
        if micro != 654321:
            assert misses(kr) == m0, f"a challenge with microseconds {micro} compiled in its Run"
