"""An independent reader of a KDB's keys: the master key from the stash
file (a keytab, MIT's format since 1.7) and each principal's key data from
`kdb5_util dump` (MIT's dump format "kdb5_util load_dump version 7",
kadmin/dbutil/dump.c), each key decrypted with the master key by this
file's own RFC 3961/3962 aes*-cts-hmac-sha1-96 decryption (python3-
cryptography's AES block function and the standard library's HMAC-SHA1),
so that what the KDB holds is judged by code that shares nothing with
kmpc's tools or with libkdb5's decryption.

A key handle (kmpc: "kmpc-key" || 32-byte key id, 40 bytes) is told from a
real key (16 or 32 bytes for AES, other lengths for other enctypes) by the
decrypted plaintext. Nothing decrypted is returned or printed: only its
kind and length.
"""
import hashlib
import hmac
import math
import struct
from functools import reduce

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

HANDLE_MAGIC = b"kmpc-key"
HANDLE_LEN = 40
AES_CTS = {17: 16, 18: 32}  # enctype -> key length (RFC 3962)


def nfold(data, nbytes):
    """RFC 3961 section 5.1 n-fold of data to nbytes bytes."""
    def rotate_right(b, nbits):
        n = len(b)
        whole, bits = (nbits // 8) % n, nbits % 8
        return bytearray(((b[i - whole] >> bits) |
                          (b[i - whole - 1] << (8 - bits))) & 0xff for i in range(n))

    def add_ones_complement(a, b):
        n = len(a)
        v = [x + y for x, y in zip(a, b)]
        while any(x & ~0xff for x in v):
            v = [(v[i - n + 1] >> 8) + (v[i] & 0xff) for i in range(n)]
        return bytearray(v)

    slen = len(data)
    lcm = nbytes * slen // math.gcd(nbytes, slen)
    big = bytearray()
    for i in range(lcm // slen):
        big += rotate_right(bytearray(data), 13 * i)
    return bytes(reduce(add_ones_complement,
                        (big[p:p + nbytes] for p in range(0, lcm, nbytes))))


def _ecb(key):
    return Cipher(algorithms.AES(key), modes.ECB())


def derive(key, constant):
    """RFC 3961 DK for AES (random-to-key is the identity): DR's blocks,
    each AES of the previous, from the 128-bit n-fold of constant."""
    enc = _ecb(key).encryptor()
    block, out = nfold(constant, 16), b""
    while len(out) < len(key):
        block = enc.update(block)
        out += block
    return out[:len(key)]


def cts_decrypt(key, data):
    """AES-CBC with ciphertext stealing, zero IV (RFC 3962 section 5)."""
    dec = _ecb(key).decryptor()
    if len(data) == 16:
        return dec.update(data)
    blocks = [data[p:p + 16] for p in range(0, len(data), 16)]
    last = len(blocks[-1])
    prev, out = bytes(16), b""
    for b in blocks[:-2]:
        out += bytes(x ^ y for x, y in zip(dec.update(b), prev))
        prev = b
    d = dec.update(blocks[-2])
    tail = bytes(x ^ y for x, y in zip(d[:last], blocks[-1]))
    full = dec.update(blocks[-1] + d[last:])
    return out + bytes(x ^ y for x, y in zip(full, prev)) + tail


def decrypt(key, usage, ciphertext):
    """RFC 3962 aes*-cts-hmac-sha1-96 decryption: confounder, plaintext and
    the 96-bit HMAC-SHA1 under Ki, checked. Raises ValueError on a wrong
    key or damaged data."""
    u = struct.pack(">I", usage)
    ke, ki = derive(key, u + b"\xaa"), derive(key, u + b"\x55")
    body, mac = ciphertext[:-12], ciphertext[-12:]
    if len(body) < 16:
        raise ValueError("ciphertext too short")
    plain = cts_decrypt(ke, body)
    if not hmac.compare_digest(hmac.new(ki, plain, hashlib.sha1).digest()[:12], mac):
        raise ValueError("integrity check failed (not this master key)")
    return plain[16:]


def read_stash(path):
    """The master key from a stash file in keytab format (version 0x502):
    (enctype, key bytes) of its first entry."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] != b"\x05\x02":
        raise ValueError(f"{path}: not a keytab-format stash file")
    size = struct.unpack(">i", data[2:6])[0]
    entry, p = data[6:6 + size], 0
    ncomp = struct.unpack(">H", entry[p:p + 2])[0]
    p += 2
    for _ in range(ncomp + 1):  # the realm, then each component
        p += 2 + struct.unpack(">H", entry[p:p + 2])[0]
    p += 4 + 4 + 1  # name type, timestamp, 8-bit kvno
    enctype, klen = struct.unpack(">HH", entry[p:p + 4])
    return enctype, entry[p + 4:p + 4 + klen]


def parse_dump(text):
    """{principal: [(kvno, enctype, key_data_contents[0] bytes)]} from a
    kdb5_util dump (version 7 "princ" records; policies are skipped)."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("princ\t"):
            continue
        f = line.split("\t")
        n_tl, n_key = int(f[3]), int(f[4])
        name, p = f[6], 7 + 8  # the name, then 8 fixed fields
        p += 3 * n_tl
        keys = []
        for _ in range(n_key):
            ver, kvno = int(f[p]), int(f[p + 1])
            p += 2
            fields = []
            for _ in range(ver):
                etype, length, hexdata = int(f[p]), int(f[p + 1]), f[p + 2]
                fields.append((etype, bytes.fromhex(hexdata) if length > 0 else b""))
                p += 3
            keys.append((kvno, fields[0][0], fields[0][1]))
        out[name] = keys
    return out


def classify(master, stored):
    """("handle" | "key", plaintext length) for one stored key: its 16-bit
    little-endian length, then its encryption under the master key with
    usage 0 (lib/kdb/encrypt_key.c)."""
    enctype, mkey = master
    if enctype not in AES_CTS:
        raise ValueError(f"master key enctype {enctype}: only aes*-cts is read here")
    length = struct.unpack("<H", stored[:2])[0]
    plain = decrypt(mkey, 0, stored[2:])[:length]
    kind = ("handle" if len(plain) == HANDLE_LEN and plain.startswith(HANDLE_MAGIC)
            else "key")
    return kind, len(plain)


def real_keys(stash_path, dump_text):
    """{principal: [(kvno, enctype, length)]} of every stored key that is
    not a kmpc key handle."""
    master = read_stash(stash_path)
    found = {}
    for name, keys in parse_dump(dump_text).items():
        for kvno, enctype, stored in keys:
            kind, length = classify(master, stored)
            if kind == "key":
                found.setdefault(name, []).append((kvno, enctype, length))
    return found
