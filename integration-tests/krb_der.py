"""Just enough DER to build and read Kerberos messages by hand in the tests
(RFC 4120 5.4.1 AS-REQ, 5.9.1 KRB-ERROR): requests libkrb5 would never send
(oversized pre-authentication) or sends from sockets the test must own."""

AS_REQ_ETYPES = (-29002, 18)  # aes256-ctr-mpc (realm keys), aes256-cts (session keys)


def der(tag, body):
    n = len(body)
    if n < 0x80:
        return bytes([tag, n]) + body
    ln = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(ln)]) + ln + body


def der_int(v):
    return der(0x02, v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True))


def ctx(n, body):
    """[n] EXPLICIT."""
    return der(0xA0 + n, body)


def seq(*items):
    return der(0x30, b"".join(items))


def gstr(s):
    return der(0x1B, s.encode())


def principal(name_type, *parts):
    return seq(ctx(0, der_int(name_type)), ctx(1, seq(*(gstr(p) for p in parts))))


def children(buf):
    """[(tag, header+content bytes, content bytes)] of a DER sequence body."""
    out, pos = [], 0
    while pos < len(buf):
        tag, n = buf[pos], buf[pos + 1]
        hdr = 2
        if n & 0x80:
            k = n & 0x7F
            n = int.from_bytes(buf[pos + 2:pos + 2 + k], "big")
            hdr += k
        out.append((tag, buf[pos:pos + hdr + n], buf[pos + hdr:pos + hdr + n]))
        pos += hdr + n
    return out


def content(buf):
    """The content octets of the one DER element buf holds."""
    (_, _, body), = children(buf)
    return body


def as_req(realm, client, nonce, padata=()):
    """AS-REQ for krbtgt/realm (forwardable); padata: encoded PA-DATA items."""
    body = seq(
        ctx(0, der(0x03, b"\x00\x40\x00\x00\x00")),   # kdc-options: forwardable
        ctx(1, principal(1, client)),
        ctx(2, gstr(realm)),
        ctx(3, principal(2, "krbtgt", realm)),
        ctx(5, der(0x18, b"20370913024805Z")),
        ctx(7, der_int(nonce)),
        ctx(8, seq(*(der_int(e) for e in AS_REQ_ETYPES))))
    fields = [ctx(1, der_int(5)), ctx(2, der_int(10))]
    if padata:
        fields.append(ctx(3, seq(*padata)))
    return der(0x6A, seq(*fields, ctx(4, body)))


def krb_error_code(reply):
    """error-code of a KRB-ERROR ([APPLICATION 30]); AssertionError otherwise."""
    assert reply[:1] == b"\x7e", reply[:4].hex()
    for tag, _, body in children(content(content(reply))):
        if tag == 0xA6:
            return int.from_bytes(content(body), "big", signed=True)
    raise AssertionError("no error-code")


def send_tcp(port, msg, timeout=40):
    """msg to a KDC on 127.0.0.1:port over TCP (RFC 4120 section 7.2.2: a
    4-byte big-endian length, then the message); its reply, unframed.
    timeout: above the module's longest deadline in the tests (30 s for
    cold programs), so that a slow answer is the KDC's, not the client's
    patience running out."""
    import socket
    import struct
    with socket.create_connection(("127.0.0.1", port), timeout) as s:
        s.sendall(struct.pack(">I", len(msg)) + msg)
        return recv_tcp_reply(s)[4:]


def recv_tcp_reply(s):
    """One length-framed KDC reply read from socket s, with its 4-byte
    length; what arrived if the KDC closed the connection first."""
    import struct
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">I", buf[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf
