"""What the MPC servers receive at an aes*-cts user's login holds no
plaintext of it and no password verifier: no 8-byte window of the
PA-ENC-TS-ENC the client encrypted, of its ciphertext and tag, nor of the
EncASRepPart the servers encrypted (its session key, nonce, times, flags,
addresses...), is in any server's recorded KeyOps requests; under FAST,
none of the encrypted challenge's ciphertext and tag either
(docs/security-model.md, "Users' keys under the standard enctypes": the
timestamp's and the challenge's C || T and the reply's plaintext go as
fresh XOR shares; whole, C || T lets whoever holds it test password
guesses offline).

The test is the client: it knows the password, so it builds the AS-REQ
and its PA-ENC-TIMESTAMP itself (RFC 3962 encryption written here,
independent of libkrb5 and of the servers' circuits) and decrypts the
AS-REP's enc-part with the user's key; the KDC accepting the timestamp
and the reply's HMAC-SHA1-96 verifying here cross-check this RFC 3962
code against MIT's and the cluster's. A window that a network observer
sees anyway (in the AS-REQ or the AS-REP as sent) is public and not
looked for. Control: every server's recording holds the user's key id,
and the three recordings together rebuild this login's PA-ENC-TIMESTAMP
ciphertext (keyops_records: the DECRYPT reached the servers, the recorder
saw the traffic) as no one of them can.

The AS-REQ asks for PA-REQ-ENC-PA-REP (RFC 6806 section 11): the reply's
plaintext then holds the checksum of the request under usage 56, which the
servers computed on shares of the request and spliced into the reply's
shares (docs/design/exchange-plan.md section 2). The test checks that
checksum with its own RFC 3962 code, and that no 8-byte window of the
request either (dealt as shares like the reply, though public) is in any
server's recording.

The demo's realm (demo.py's configuration: users' keys under aes*-cts
only, made by `kadmin.local addprinc -pw` through kmpc's key dealer)
with real clients: the patched kinit and Debian's /usr/bin/kinit log in
over TCP through a relay in the test that keeps every byte each way, so
that each login's PA-ENC-TIMESTAMP cipher and AS-REP enc-part cipher, as
sent, are known; no 8-byte window of either is in any server's recording.
"""
import datetime
import hashlib
import hmac
import os
import secrets
import socket
import threading

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

import ctr_mpc_ref
import keyops_records
import krb_der
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.cluster import default_salt
from test_cts_handles import CTS128, CTS256, COLD_PROGRAMS, ENCTYPES, assert_only_handles

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

PA_ENC_TIMESTAMP = 2
PA_REQ_ENC_PA_REP = 149
HMAC_SHA1_96_AES256 = 16
WINDOW = 8


# --- RFC 3962 (aes*-cts-hmac-sha1-96), RFC 3961 section 5.3 --------------

def _ecb(key, block, decrypt=False):
    c = Cipher(algorithms.AES(key), modes.ECB())
    op = c.decryptor() if decrypt else c.encryptor()
    return op.update(block) + op.finalize()


def _xor(a, b):
    return bytes(x ^ y for x, y in zip(a, b))


def _dk(key, usage, tail):
    return ctr_mpc_ref.derive_random(key, usage.to_bytes(4, "big") + bytes([tail]))


def cts_encrypt(ke, p):
    """CBC-CTS, IV zero, the last two blocks swapped (RFC 3962 section 5)."""
    if len(p) == 16:
        return _ecb(ke, p)
    m = len(p) - 16 * ((len(p) - 1) // 16)
    padded = p + bytes(16 - m)
    prev, cb = bytes(16), []
    for i in range(0, len(padded), 16):
        prev = _ecb(ke, _xor(padded[i:i + 16], prev))
        cb.append(prev)
    return b"".join(cb[:-2]) + cb[-1] + cb[-2][:m]


def cts_decrypt(ke, c):
    if len(c) == 16:
        return _ecb(ke, c, True)
    nb = (len(c) + 15) // 16
    m = len(c) - 16 * (nb - 1)
    blocks = [c[16 * i:16 * i + 16] for i in range(nb - 2)]
    x, y = c[16 * (nb - 2):16 * (nb - 1)], c[16 * (nb - 1):]
    dx = _ecb(ke, x, True)
    blocks += [y + dx[m:], x]
    out, prev = b"", bytes(16)
    for b in blocks[:-1]:
        out += _xor(_ecb(ke, b, True), prev)
        prev = b
    return out + _xor(dx[:m], y)


def rfc3962_encrypt(key, usage, plain):
    conf_p = secrets.token_bytes(16) + plain
    ki = _dk(key, usage, 0x55)
    return (cts_encrypt(_dk(key, usage, 0xAA), conf_p)
            + hmac.new(ki, conf_p, hashlib.sha1).digest()[:12])


def rfc3962_decrypt(key, usage, ct):
    """conf || P; AssertionError if the tag does not verify."""
    conf_p = cts_decrypt(_dk(key, usage, 0xAA), ct[:-12])
    tag = hmac.new(_dk(key, usage, 0x55), conf_p, hashlib.sha1).digest()[:12]
    assert hmac.compare_digest(tag, ct[-12:]), "the reply's HMAC-SHA1-96 does not verify"
    return conf_p


def rfc3962_checksum(key, usage, msg):
    """hmac-sha1-96-aes (RFC 3962): HMAC-SHA1 under Kc = DK(key, usage ||
    0x99), truncated to 12 bytes."""
    return hmac.new(_dk(key, usage, 0x99), msg, hashlib.sha1).digest()[:12]


def test_rfc3962_code_against_known_answers():
    """RFC 3962 appendix B's CTS vectors (AES-128 key "chicken teriyaki"),
    so that a fault here cannot pass as 'nothing found'."""
    key = b"chicken teriyaki"
    pt = b"I would like the General Gau's Chicken, please, and wonton soup."
    vectors = [
        (17, "c6353568f2bf8cb4d8a580362da7ff7f97"),
        (31, "fc00783e0efdb2c1d445d4c8eff7ed2297687268d6ecccc0c07b25e25ecfe5"),
        (32, "39312523a78662d5be7fcbcc98ebf5a897687268d6ecccc0c07b25e25ecfe584"),
        (47, "97687268d6ecccc0c07b25e25ecfe584b3fffd940c16a18c1b5549d2f838029e"
             "39312523a78662d5be7fcbcc98ebf5"),
        (48, "97687268d6ecccc0c07b25e25ecfe5849dad8bbb96c4cdc03bc103e1a194bbd8"
             "39312523a78662d5be7fcbcc98ebf5a8"),
        (64, "97687268d6ecccc0c07b25e25ecfe58439312523a78662d5be7fcbcc98ebf5a8"
             "4807efe836ee89a526730dbc2f7bc8409dad8bbb96c4cdc03bc103e1a194bbd8"),
    ]
    for n, want in vectors:
        assert cts_encrypt(key, pt[:n]) == bytes.fromhex(want), n
        assert cts_decrypt(key, bytes.fromhex(want)) == pt[:n], n


# --- the login, by hand -----------------------------------------------------

def _pa(pa_type, value):
    return krb_der.seq(krb_der.ctx(1, krb_der.der_int(pa_type)),
                       krb_der.ctx(2, krb_der.der(0x04, value)))


def _as_req(realm, cname, nonce, padata, addresses=2):
    """AS-REQ for krbtgt/realm offering aes256-cts only (what a stock
    client with the standard enctypes offers), with `addresses` client
    addresses (two by default) so that the reply carries them (caddr)."""
    addrs = krb_der.seq(*(krb_der.seq(krb_der.ctx(0, krb_der.der_int(2)),
                                      krb_der.ctx(1, krb_der.der(0x04, os.urandom(4))))
                          for _ in range(addresses)))
    body = krb_der.seq(
        krb_der.ctx(0, krb_der.der(0x03, b"\x00\x40\x00\x00\x00")),
        krb_der.ctx(1, krb_der.principal(1, cname)),
        krb_der.ctx(2, krb_der.gstr(realm)),
        krb_der.ctx(3, krb_der.principal(2, "krbtgt", realm)),
        krb_der.ctx(5, krb_der.der(0x18, b"20370913024805Z")),
        krb_der.ctx(7, krb_der.der_int(nonce)),
        krb_der.ctx(8, krb_der.seq(krb_der.der_int(18))),
        krb_der.ctx(9, addrs))
    return krb_der.der(0x6A, krb_der.seq(
        krb_der.ctx(1, krb_der.der_int(5)), krb_der.ctx(2, krb_der.der_int(10)),
        krb_der.ctx(3, krb_der.seq(*padata)), krb_der.ctx(4, body)))


def _enc_part_cipher(as_rep):
    """The cipher of an AS-REP's enc-part ([APPLICATION 11], field [6])."""
    assert as_rep[:1] == b"\x6b", f"not an AS-REP: {as_rep[:4].hex()}"
    for tag, _, body in krb_der.children(krb_der.content(krb_der.content(as_rep))):
        if tag == 0xA6:
            for t2, _, b2 in krb_der.children(krb_der.content(body)):
                if t2 == 0xA2:
                    return krb_der.content(b2)
    raise AssertionError("no enc-part")


def _session_key(enc_kdc_rep_part):
    """keyvalue of an EncKDCRepPart's key ([0] EncryptionKey)."""
    fields = krb_der.content(krb_der.content(enc_kdc_rep_part))
    for tag, _, body in krb_der.children(fields):
        if tag == 0xA0:
            for t2, _, b2 in krb_der.children(krb_der.content(body)):
                if t2 == 0xA1:
                    return krb_der.content(b2)
    raise AssertionError("no session key")


def _windows(data):
    return {data[i:i + WINDOW] for i in range(len(data) - WINDOW + 1)}


def _recordings(tmp_path):
    recs = []
    for i in range(3):
        with open(os.path.join(tmp_path, f"keyops-{i}.bin"), "rb") as f:
            recs.append(f.read())
    return recs


def _gate_ciphertexts(tmp_path, usage):
    """(FAST key's KDC half, C || T) of every aes*-cts DECRYPT under usage
    the servers ran: C || T from Job.data if a KDC sent it in the clear,
    else rebuilt from the three servers' recorded shares (after the half,
    kmpc.proto Job.cts_key)."""
    paths = [os.path.join(tmp_path, f"keyops-{i}.bin") for i in range(3)]
    out = []
    for job, value in keyops_records.dealt_values(
            paths, lambda j: (j.get("type") == keyops_records.JOB_DECRYPT
                              and j.get("cipher") in keyops_records.CTS_CIPHERS
                              and j.get("usage") == usage)):
        half = keyops_records.CF2_HALF[job.get("cts_key", 0)]
        out.append((value[:half], job.get("data") or value[half:]))
    return out


def _assert_no_window(recs, what, data):
    for w in sorted(_windows(data)):
        for i, rec in enumerate(recs):
            assert w not in rec, (
                f"party {i} received 8 bytes of the {what} at offset {data.find(w)}: {w.hex()}")


def test_no_window_of_the_timestamp_or_reply_plaintext_reaches_any_server(
        kmpc_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    kr.setup_krbtgt()
    princ, pw = "wanda", "Wanda-pw-2718"
    kr.addprinc(princ, pw, enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", princ)
    kr.start()
    key = ctr_mpc_ref.string_to_key("aes256-ctr-mpc", pw.encode(),
                                    default_salt(f"{princ}@{kr.realm}").encode())

    logins = []  # (timestamp ct, PA-ENC-TS-ENC, conf || EncASRepPart, public bytes)
    for _ in range(2):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ")
        ts_plain = krb_der.seq(krb_der.ctx(0, krb_der.der(0x18, now.encode())),
                               krb_der.ctx(1, krb_der.der_int(secrets.randbelow(999999))))
        ts_ct = rfc3962_encrypt(key, 1, ts_plain)
        enc = krb_der.seq(krb_der.ctx(0, krb_der.der_int(18)),
                          krb_der.ctx(2, krb_der.der(0x04, ts_ct)))
        req = _as_req(kr.realm, princ, secrets.randbits(31),
                      [_pa(PA_ENC_TIMESTAMP, enc), _pa(PA_REQ_ENC_PA_REP, b"")])
        rep = krb_der.send_tcp(kr.kdc_port, req)
        assert rep[:1] == b"\x6b", (rep[:64].hex(), kr.kdc_log_text()[-3000:])
        reply_plain = rfc3962_decrypt(key, 3, _enc_part_cipher(rep))
        # [APPLICATION 25] EncASRepPart, or 26 as MIT encodes AS replies
        # too (RFC 4120 section 5.4.2 lets a client accept either).
        assert reply_plain[16:17] in (b"\x79", b"\x7a"), reply_plain[16:20].hex()
        # PA-REQ-ENC-PA-REP: Checksum { cksumtype 16, checksum } over the
        # request as sent, spliced in by the servers (a zero placeholder
        # from the KDC would not verify).
        cksum = krb_der.seq(krb_der.ctx(0, krb_der.der_int(HMAC_SHA1_96_AES256)),
                            krb_der.ctx(1, krb_der.der(0x04, rfc3962_checksum(key, 56, req))))
        assert _pa(PA_REQ_ENC_PA_REP, cksum) in reply_plain, reply_plain.hex()
        logins.append((ts_ct, ts_plain, reply_plain, req + rep, req))

    key_id = bytes.fromhex(assert_only_handles(kr, princ)[0][3])
    recs = _recordings(tmp_path)
    for i, rec in enumerate(recs):
        assert key_id in rec, f"control: party {i} recorded no job under {princ}'s key"
    gates = _gate_ciphertexts(tmp_path, usage=1)
    for ts_ct, _, _, _, _ in logins:
        assert ts_ct in [ct for _, ct in gates], "control: the timestamp's DECRYPT not found"

    for ts_ct, ts_plain, reply_plain, public, req in logins:
        _assert_no_window(recs, "PA-ENC-TIMESTAMP ciphertext and tag", ts_ct)
        # The request went as shares of the spliced reply's ENCRYPT.
        _assert_no_window(recs, "AS-REQ", req)
        seen = _windows(public)
        checked = set()
        for what, plain in (("PA-ENC-TS-ENC", ts_plain), ("EncASRepPart", reply_plain)):
            for w in sorted(_windows(plain) - seen):
                checked.add(w)
                for i, rec in enumerate(recs):
                    assert w not in rec, (
                        f"party {i} received 8 bytes of the {what} plaintext at offset "
                        f"{plain.find(w)}: {w.hex()}")
        # What must never be public was looked for: every window of the
        # session key and of the time stamp's time.
        assert _windows(_session_key(reply_plain[16:])) <= checked
        assert _windows(ts_plain[:21]) <= checked
        assert len(checked) > 100, len(checked)


def test_no_window_of_the_fast_challenge_reaches_any_server(kmpc_factory, tmp_path, monkeypatch):
    """kinit -T (RFC 6113 encrypted challenge, usage 54 under
    KRB-FX-CF2(armor key, K)): the challenge's C || T reaches no server
    whole. The three recordings together rebuild the KDC's half X and
    C || T; the test decrypts C || T under X ^ PRF+(K,
    "challengelongterm") with its own RFC 3962 code (control: it is the
    client's challenge, a PA-ENC-TS-ENC), and looks for every 8-byte
    window of it in each server's recording."""
    from test_cts_fast import Stock, armor_ccache, fast_kinit, prf_plus, share
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    kr.setup_krbtgt()
    kr.addprinc("olly", "Olly-pw-1", enctypes=[CTS256, CTS128])
    princ, pw = "fay", "Fay-pw-6022"
    share(kr, princ, pw, CTS256)
    kr.start()
    c = Stock(kr)
    armor = armor_ccache(kr, c)
    for _ in range(2):
        rc, out = fast_kinit(c, armor, princ, pw)
        assert rc == 0, out + kr.kdc_log_text()[-3000:]
    key = ctr_mpc_ref.string_to_key("aes256-ctr-mpc", pw.encode(),
                                    default_salt(f"{princ}@{kr.realm}").encode())
    challenges = _gate_ciphertexts(tmp_path, usage=54)
    assert len(challenges) >= 2, f"control: {len(challenges)} challenge DECRYPTs found"
    recs = _recordings(tmp_path)
    for half, ct in challenges:
        assert len(half) in (16, 32), len(half)
        cf2 = _xor(half, prf_plus(key, b"challengelongterm", len(half)))
        plain = rfc3962_decrypt(cf2, 54, ct)[16:]
        assert plain[:1] == b"\x30" and b"\xa0\x11\x18\x0f" in plain[:8], plain.hex()
        _assert_no_window(recs, "encrypted challenge's ciphertext and tag", ct)


# --- the demo's realm, real clients through a recording relay ---------------

class KdcRelay:
    """A TCP relay on 127.0.0.1 between Kerberos clients and the KDC: every
    byte each way of every connection is kept (before it is forwarded, so a
    client that has its reply has it recorded). RFC 4120 section 7.2.2
    framing: a 4-byte big-endian length, then the message."""

    def __init__(self, kdc_port):
        self.kdc_port = kdc_port
        self.streams = []  # [(client -> KDC bytearray, KDC -> client bytearray)]
        self.sockets = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            kdc = socket.create_connection(("127.0.0.1", self.kdc_port))
            self.sockets += [client, kdc]
            up, down = bytearray(), bytearray()
            self.streams.append((up, down))
            for src, dst, buf in ((client, kdc, up), (kdc, client, down)):
                threading.Thread(target=self._pump, args=(src, dst, buf),
                                 daemon=True).start()

    def _pump(self, src, dst, buf):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                buf += data
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self):
        self.listener.close()
        for s in self.sockets:
            s.close()

    @staticmethod
    def _frames(stream):
        stream, out = bytes(stream), []
        while len(stream) >= 4:
            n = int.from_bytes(stream[:4], "big")
            if len(stream) < 4 + n:
                break
            out.append(stream[4:4 + n])
            stream = stream[4 + n:]
        return out

    def messages(self, first=0):
        """(requests, replies) of the connections from the first-th on,
        unframed."""
        reqs, reps = [], []
        for up, down in self.streams[first:]:
            reqs += self._frames(up)
            reps += self._frames(down)
        return reqs, reps


def _timestamp_ciphers(as_req):
    """The cipher of each PA-ENC-TIMESTAMP (padata type 2: EncryptedData
    { [0] etype, [1] kvno OPTIONAL, [2] cipher }) of an AS-REQ."""
    out = []
    if as_req[:1] != b"\x6a":
        return out
    for tag, _, body in krb_der.children(krb_der.content(krb_der.content(as_req))):
        if tag != 0xA3:
            continue
        for _, pa, _ in krb_der.children(krb_der.content(body)):
            fields = {t: b for t, _, b in krb_der.children(krb_der.content(pa))}
            if int.from_bytes(krb_der.content(fields[0xA1]), "big") != PA_ENC_TIMESTAMP:
                continue
            enc = {t: b for t, _, b in krb_der.children(
                krb_der.content(krb_der.content(fields[0xA2])))}
            out.append(krb_der.content(enc[0xA2]))
    return out


def test_demo_realm_logins_leave_no_window_of_timestamp_or_reply_cipher(
        kmpc_factory, tmp_path, monkeypatch):
    """The demo's configuration (demo.py): supported_enctypes the standard
    AES ones, user_ctr_mpc off, the dealer on with protect = *, krb5.conf
    the harness's (aes256-ctr-mpc first for the patched kinit). A user
    made by `kadmin.local addprinc -pw` logs in with the patched kinit and
    with Debian's /usr/bin/kinit, both over TCP through KdcRelay, which
    sees each login's PA-ENC-TIMESTAMP cipher and AS-REP enc-part cipher
    as sent. No 8-byte window of either is in any server's recording."""
    from test_cts_as import Stock
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    kr = kmpc_factory(module="real", dealer=True, protect=["*"], user_ctr_mpc=False,
                      supported_enctypes=(CTS256, CTS128), module_options=COLD_PROGRAMS,
                      server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    kr.kadmin_local(f"setstr {kr.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    kr.kadmin_local(f"cpw -randkey -e aes256-ctr-mpc:normal {kr.tgs}")
    assert [(r[1], r[2]) for r in kr.kdb_keys(kr.tgs)] == [("aes256-ctr-mpc", "handle")]
    princ, pw = "alice", "Alice-pw-" + secrets.token_hex(6)
    out = kr.kadmin_local(f"addprinc +requires_preauth -pw {pw} {princ}")
    assert "created" in out, out
    rows = assert_only_handles(kr, princ)
    assert sorted(r[1] for r in rows) == sorted([CTS256, CTS128]), rows
    kr.start()
    assert "aes256-ctr-mpc" in open(kr.krb5_conf).read()

    relay = KdcRelay(kr.kdc_port)
    try:
        patched_conf = os.path.join(kr.dir, "relay-krb5.conf")
        with open(kr.krb5_conf) as f:
            text = f.read()
        kdc_line = f"kdc = 127.0.0.1:{kr.kdc_port}"
        assert kdc_line in text and "udp_preference_limit = 1" in text
        with open(patched_conf, "w") as f:
            f.write(text.replace(kdc_line, f"kdc = 127.0.0.1:{relay.port}"))
        stock = Stock(kr)
        with open(stock.conf) as f:
            text = f.read()
        assert kdc_line in text
        with open(stock.conf, "w") as f:
            f.write(text.replace(kdc_line, f"kdc = 127.0.0.1:{relay.port}").replace(
                "[libdefaults]\n", "[libdefaults]\n    udp_preference_limit = 1\n"))

        captured = {}
        for client in ("patched", "debian"):
            seen = len(relay.streams)
            if client == "patched":
                kr.kinit(princ, pw, env=dict(kr.env, KRB5_CONFIG=patched_conf), timeout=180)
            else:
                rc, out = stock.kinit(princ, pw)
                assert rc == 0, out + kr.kdc_log_text()[-3000:]
            reqs, reps = relay.messages(seen)
            ts = [c for r in reqs for c in _timestamp_ciphers(r)]
            replies = [_enc_part_cipher(r) for r in reps if r[:1] == b"\x6b"]
            assert ts and replies, (client, len(reqs), [r[:1].hex() for r in reps])
            captured[client] = (ts, replies)
    finally:
        relay.close()

    recs = _recordings(tmp_path)
    key_id = bytes.fromhex(next(r[3] for r in rows if r[1] == CTS256))
    for i, rec in enumerate(recs):
        assert key_id in rec, f"control: party {i} recorded no job under {princ}'s key"
    for client, (ts, replies) in captured.items():
        for c in ts:
            _assert_no_window(recs, f"{client} kinit's PA-ENC-TIMESTAMP cipher", c)
        for c in replies:
            _assert_no_window(recs, f"{client} kinit's AS-REP enc-part cipher", c)
