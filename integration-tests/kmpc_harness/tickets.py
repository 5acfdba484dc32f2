"""Tickets in a client's ccache, for tests that look inside them: the
credentials of a v4 FILE ccache (server, session key, where the ticket's DER
sits in the file), and the check that a tampered TGT is refused by the
kdcmpc module's decryption while the KDC lives on."""
import re
import struct

from kmpc_harness.cluster import REALM, SERVICE


def ccache_credentials(path):
    """Every credential of a v4 FILE ccache as a dict: server (components),
    key (the session key's bytes), flags (the reply's ticket flags),
    ticket (offset, length of the ticket's DER in the file). Config entries
    (krb5_cc_set_config) are credentials too: server
    ["krb5_ccache_conf_data", name, ...]."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:2] == b"\x05\x04", "not a v4 FILE ccache"
    pos = 2
    hlen, = struct.unpack_from(">H", buf, pos)
    pos += 2 + hlen

    def data():
        nonlocal pos
        n, = struct.unpack_from(">I", buf, pos)
        start = pos + 4
        pos = start + n
        return start, n

    def principal():
        nonlocal pos
        pos += 4                       # name type
        ncomp, = struct.unpack_from(">I", buf, pos)
        pos += 4
        data()                         # realm
        names = []
        for _ in range(ncomp):
            s, n = data()
            names.append(buf[s:s + n].decode())
        return names

    principal()                        # default principal
    creds = []
    while pos < len(buf):
        principal()
        server = principal()
        pos += 2                       # keyblock enctype
        ks, kn = data()                # key
        flags, = struct.unpack_from(">I", buf, pos + 16 + 1)
        pos += 16 + 1 + 4              # times, is_skey, flags
        naddr, = struct.unpack_from(">I", buf, pos)
        pos += 4
        for _ in range(naddr):
            pos += 2
            data()
        nad, = struct.unpack_from(">I", buf, pos)
        pos += 4
        for _ in range(nad):
            pos += 2
            data()
        tstart, tlen = data()
        data()                         # second ticket
        creds.append({"server": server, "key": buf[ks:ks + kn], "flags": flags,
                      "ticket": (tstart, tlen)})
    return creds


def ccache_ticket_spans(path):
    """(server components, offset, length) of every credential's ticket in a
    v4 FILE ccache."""
    return [(c["server"], *c["ticket"]) for c in ccache_credentials(path)]


def tgt_span(ccache):
    """(offset, length) of the one TGT in ccache."""
    spans = [s for s in ccache_ticket_spans(ccache) if s[0] == ["krbtgt", REALM]]
    assert len(spans) == 1, spans
    return spans[0][1:]


def check_tampered_tgt_is_refused(realm, login):
    """login() (a TGT in realm's ccache), then flip one bit of the TGT's
    cipher text in the ccache: the TGS-REQ fails as an integrity error,
    found by the kdcmpc module's decryption, and the KDC lives on."""
    login()
    start, length = tgt_span(realm.ccache)
    with open(realm.ccache, "r+b") as f:
        # A byte in the middle of the encrypted part (the DER of a Ticket
        # ends with the cipher octets).
        off = start + length - 40
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))
    out = realm.run(["kvno", SERVICE], expected_code=1)
    assert "integrity check failed" in out, out
    with open(realm.kdc_log) as f:
        log = f.read()
    assert "kdcmpc: DECRYPT job (usage 2) failed" in log, log
    assert re.search(r"TGS_REQ .*PROCESS_TGS: .*integrity check failed", log), log
    assert realm.kdc_alive()
