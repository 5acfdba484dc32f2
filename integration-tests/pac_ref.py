"""Tickets and their PACs, read and re-signed by hand with known keys, so the
tests can check the KDC's PAC signatures independently of krb5 and forge
altered ones.

Formats: Ticket and EncTicketPart (RFC 4120 5.3), AuthorizationData with
AD-IF-RELEVANT (RFC 4120 5.2.6), the PAC ([MS-PAC] 2.3-2.4) and its
signatures ([MS-PAC] 2.8): ticket signature over the EncTicketPart with the
PAC replaced by one zero byte, the full-PAC (extended KDC) signature of MIT
1.21 over the PAC with the full, server and KDC signature values zeroed (in
the tickets that have a ticket signature), server signature over the PAC
with the server and KDC signature values zeroed, KDC signature over the
server signature value.
Every signature here is gmac-aes*-mpc (enctype.md) with key usage 17
(KRB5_KEYUSAGE_APP_DATA_CKSUM), as the KDC makes them with MPC-held keys.
"""
import os
import struct

import ctr_mpc_ref
from krb_der import children, content, ctx, der, seq

USAGE_TICKET = 2
USAGE_PAC = 17
AD_IF_RELEVANT = 1
AD_WIN2K_PAC = 128
PAC_SERVER_CHECKSUM = 6
PAC_PRIVSVR_CHECKSUM = 7
PAC_TICKET_CHECKSUM = 16
PAC_FULL_CHECKSUM = 19
GMAC_AES256_MPC = -29102


def _fields(seq_body):
    """{context tag number: (whole element, content)} of a SEQUENCE body."""
    return {tag & 0x1F: (whole, body) for tag, whole, body in children(seq_body)}


class Ticket:
    """A Ticket (DER) whose enc-part is aes*-ctr-mpc under a known key."""

    def __init__(self, der_ticket, key):
        self.key = key
        tseq = content(content(der_ticket))          # [APPLICATION 1] SEQUENCE
        self.fields = [(t, w, b) for t, w, b in children(tseq)]
        encseq = content(self.fields[-1][2])          # [3] EncryptedData
        self.enc = [(t, w, b) for t, w, b in children(encseq)]
        cipher = [content(b) for t, w, b in self.enc if t == 0xA2][0]
        self.plain = ctr_mpc_ref.decrypt(key, USAGE_TICKET, cipher)

    def encode(self, plain=None):
        """The Ticket again, with plain (default: the current one) encrypted
        under a fresh ctr0."""
        plain = self.plain if plain is None else plain
        cipher = ctr_mpc_ref.encrypt(self.key, USAGE_TICKET, plain, os.urandom(16))
        enc = [ctx(2, der(0x04, cipher)) if t == 0xA2 else w
               for t, w, b in self.enc]
        return der(0x61, seq(*(w for _, w, _ in self.fields[:-1]),
                             ctx(3, seq(*enc))))


class EncTicketPart:
    """The PAC inside a DER EncTicketPart ([APPLICATION 3] SEQUENCE)."""

    def __init__(self, plain):
        self.items = [(t, w, b) for t, w, b in children(content(content(plain)))]
        ad = [b for t, w, b in self.items if t == 0xAA]
        if not ad:
            raise LookupError("no authorization data")
        self.ad = [(t, w, b) for t, w, b in children(content(ad[0]))]
        for i, (_, _, elem) in enumerate(self.ad):
            f = _fields(elem)
            if _int(f[0][1]) != AD_IF_RELEVANT:
                continue
            inner = [(t, w, b) for t, w, b in children(content(content(f[1][1])))]
            for j, (_, _, ielem) in enumerate(inner):
                g = _fields(ielem)
                if _int(g[0][1]) == AD_WIN2K_PAC:
                    self.i, self.j, self.inner = i, j, inner
                    self.ifrel_type, self.pac_type = f[0][0], g[0][0]
                    self.pac = bytes(content(g[1][1]))
                    return
        raise LookupError("no PAC")

    def encode(self, pac):
        """The EncTicketPart with its PAC's contents replaced by pac."""
        inner = list(w for _, w, _ in self.inner)
        inner[self.j] = seq(self.pac_type, ctx(1, der(0x04, pac)))
        ifrel = seq(self.ifrel_type, ctx(1, der(0x04, seq(*inner))))
        ad = list(w for _, w, _ in self.ad)
        ad[self.i] = ifrel
        items = [ctx(10, seq(*ad)) if t == 0xAA else w for t, w, _ in self.items]
        return der(0x63, seq(*items))


def _int(der_int):
    return int.from_bytes(content(der_int), "big", signed=True)


def pac_buffers(pac):
    """{type: (offset, length)} of a PAC's buffers."""
    count, _version = struct.unpack_from("<II", pac, 0)
    out = {}
    for k in range(count):
        t, n, off = struct.unpack_from("<IIQ", pac, 8 + 16 * k)
        out[t] = (off, n)
    return out


def signature(pac, btype):
    """(checksum type, value offset, value) of a PAC signature buffer."""
    off, n = pac_buffers(pac)[btype]
    ctype, = struct.unpack_from("<i", pac, off)
    return ctype, off + 4, pac[off + 4:off + n]


def zeroed(pac, types=(PAC_SERVER_CHECKSUM, PAC_PRIVSVR_CHECKSUM)):
    """The PAC with the server and KDC signature values (or those of types)
    zeroed."""
    b = bytearray(pac)
    for t in types:
        _, off, val = signature(pac, t)
        b[off:off + len(val)] = bytes(len(val))
    return bytes(b)


def check_signatures(etp, server_key, krbtgt_key, ticket_sig):
    """Assert every signature of the PAC in etp (an EncTicketPart) is a
    gmac-aes256-mpc checksum that verifies with the given keys."""
    pac = etp.pac
    types = pac_buffers(pac)
    assert (PAC_TICKET_CHECKSUM in types) == ticket_sig, types
    if ticket_sig:
        ctype, _, val = signature(pac, PAC_TICKET_CHECKSUM)
        assert ctype == GMAC_AES256_MPC, ctype
        data = etp.encode(b"\0")
        assert ctr_mpc_ref.verify_checksum(krbtgt_key, USAGE_PAC, data, val), \
            "ticket signature"
    # MIT 1.21 signs the whole PAC under the privsvr key beside the ticket
    # signature (and requires it when it verifies such a ticket).
    assert (PAC_FULL_CHECKSUM in types) == ticket_sig, types
    if ticket_sig:
        ctype, _, val = signature(pac, PAC_FULL_CHECKSUM)
        assert ctype == GMAC_AES256_MPC, ctype
        assert ctr_mpc_ref.verify_checksum(krbtgt_key, USAGE_PAC, zeroed(pac, FULL_ZEROED),
                                           val), "full-PAC signature"
    ctype, _, sval = signature(pac, PAC_SERVER_CHECKSUM)
    assert ctype == GMAC_AES256_MPC, ctype
    assert ctr_mpc_ref.verify_checksum(server_key, USAGE_PAC, zeroed(pac), sval), \
        "server signature"
    ctype, _, kval = signature(pac, PAC_PRIVSVR_CHECKSUM)
    assert ctype == GMAC_AES256_MPC, ctype
    assert ctr_mpc_ref.verify_checksum(krbtgt_key, USAGE_PAC, sval, kval), \
        "KDC signature"


def flip(pac, btype, bit=0):
    """The PAC with one bit of a signature's tag flipped (past ctr0)."""
    b = bytearray(pac)
    _, off, val = signature(pac, btype)
    b[off + 16 + bit // 8] ^= 1 << (bit % 8)
    return bytes(b)


FULL_ZEROED = (PAC_FULL_CHECKSUM, PAC_SERVER_CHECKSUM, PAC_PRIVSVR_CHECKSUM)


def resign(pac, server_key, krbtgt_key):
    """The PAC with full-PAC (if it has one), server and KDC signatures made
    again with these keys."""
    b = bytearray(pac)
    if PAC_FULL_CHECKSUM in pac_buffers(pac):
        _, foff, _ = signature(pac, PAC_FULL_CHECKSUM)
        f = ctr_mpc_ref.checksum(krbtgt_key, USAGE_PAC, zeroed(pac, FULL_ZEROED),
                                 os.urandom(16))
        b[foff:foff + len(f)] = f
        pac = bytes(b)
    _, soff, sval = signature(pac, PAC_SERVER_CHECKSUM)
    s = ctr_mpc_ref.checksum(server_key, USAGE_PAC, zeroed(pac), os.urandom(16))
    b[soff:soff + len(s)] = s
    _, koff, _ = signature(pac, PAC_PRIVSVR_CHECKSUM)
    k = ctr_mpc_ref.checksum(krbtgt_key, USAGE_PAC, s, os.urandom(16))
    b[koff:koff + len(k)] = k
    return bytes(b)


# ---- CAMMAC (RFC 7751 section 4) -------------------------------------------

USAGE_CAMMAC = 64
AD_CAMMAC = 96
AD_AUTH_INDICATOR = 97


class Cammac:
    """One AD-CAMMAC of a DER EncTicketPart: its elements (DER
    AuthorizationData), and the (checksum type, value) of its KDC and
    service verifiers."""

    def __init__(self, plain, elements, kdc, svc):
        self.plain, self.elements, self.kdc, self.svc = plain, elements, kdc, svc

    def kdcver_input(self):
        """The EncTicketPart with the CAMMAC's elements as its authorization
        data: what the KDC verifier covers."""
        items = [w for t, w, _ in children(content(content(self.plain)))]
        items = [ctx(10, self.elements) if w[0] == 0xAA else w for w in items]
        return der(0x63, seq(*items))

    def indicators(self):
        """The auth indicators (UTF8Strings) among the elements."""
        out = []
        for _, _, elem in children(content(self.elements)):
            f = _fields(elem)
            if _int(f[0][1]) == AD_AUTH_INDICATOR:
                out += [bytes(content(w)).decode()
                        for _, w, _ in children(content(content(f[1][1])))]
        return out


def _verifier(vm):
    f = _fields(content(vm))
    ck = _fields(content(f[3][1]))
    return _int(ck[0][1]), bytes(content(ck[1][1]))


def cammacs(plain):
    """The CAMMACs inside AD-IF-RELEVANT elements of a DER EncTicketPart."""
    items = _fields(content(content(plain)))
    if 10 not in items:
        return []
    out = []
    for _, _, elem in children(content(items[10][1])):
        f = _fields(elem)
        if _int(f[0][1]) != AD_IF_RELEVANT:
            continue
        for _, _, ielem in children(content(content(f[1][1]))):
            g = _fields(ielem)
            if _int(g[0][1]) != AD_CAMMAC:
                continue
            c = _fields(content(content(g[1][1])))
            out.append(Cammac(plain, c[0][1],
                              _verifier(c[1][1]) if 1 in c else None,
                              _verifier(c[2][1]) if 2 in c else None))
    return out


def flip_bytes(plain, value, bit=0):
    """plain with one bit of the (unique) occurrence of value flipped, past
    its first 16 bytes (a gmac checksum's ctr0)."""
    assert plain.count(value) == 1
    off = plain.index(value) + 16 + bit // 8
    b = bytearray(plain)
    b[off] ^= 1 << (bit % 8)
    return bytes(b)
