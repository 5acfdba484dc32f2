"""Independent reference implementation of aes128/aes256-ctr-mpc.

Written from /work/shared/design/enctype.md only, on top of the AES block
function of the `cryptography` package (ECB, one block at a time).  GHASH
and the GF(2^128) bit order are those of GCM (NIST SP 800-38D, section 6.3
and Algorithm 1); string-to-key is RFC 3962 (PBKDF2-HMAC-SHA1, then the
RFC 3961 section 5.1 derivation DK(tkey, "kerberos") with n-fold).

Nothing here calls the C library: the pytest suite compares the two.

    python3 ctr_mpc_ref.py VECTORS.json     # check every vector, exit 1 on mismatch
"""
import hashlib
import json
import math
import os
import sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

ENCTYPES = {
    "aes128-ctr-mpc": {"number": -29001, "keylen": 16,
                       "cksum": "gmac-aes128-mpc", "cksum_number": -29101},
    "aes256-ctr-mpc": {"number": -29002, "keylen": 32,
                       "cksum": "gmac-aes256-mpc", "cksum_number": -29102},
}

BLOCK = 16
MAX_CTR = (1 << 128) - 1


class IntegrityError(Exception):
    """Tag mismatch (KRB5KRB_AP_ERR_BAD_INTEGRITY in the C library)."""


class CounterRangeError(ValueError):
    """ctr0 == 0 or ctr0 + n > 2^128 - 1."""


def aes_block(key, block):
    """E_K on one 16-byte block (ECB of a single block is the raw cipher)."""
    assert len(block) == BLOCK
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(block) + enc.finalize()


# --- GF(2^128) and GHASH, SP 800-38D --------------------------------------

_R = 0xE1 << 120


def gf_mult(x, y):
    """X * Y in GF(2^128) per SP 800-38D Algorithm 1.

    Blocks are read as big-endian integers, so bit 0 of the spec (the
    leftmost bit of the block) is the integer's most significant bit.
    """
    z, v = 0, y
    for i in range(127, -1, -1):
        if (x >> i) & 1:
            z ^= v
        if v & 1:
            v = (v >> 1) ^ _R
        else:
            v >>= 1
    return z


def pad16(b):
    return b + b"\0" * (-len(b) % BLOCK)


def ghash(h, aad, data):
    """GHASH_H(pad16(A) || pad16(C) || [8 len(A)]_64 || [8 len(C)]_64)."""
    hint = int.from_bytes(h, "big")
    s = pad16(aad) + pad16(data) + (8 * len(aad)).to_bytes(8, "big") + \
        (8 * len(data)).to_bytes(8, "big")
    y = 0
    for off in range(0, len(s), BLOCK):
        y = gf_mult(y ^ int.from_bytes(s[off:off + BLOCK], "big"), hint)
    return y.to_bytes(BLOCK, "big")


def xor(a, b):
    return bytes(p ^ q for p, q in zip(a, b))


# --- the construction ------------------------------------------------------

def _check_key(key):
    if len(key) not in (16, 32):
        raise ValueError("bad key size %d" % len(key))


def _check_range(c0, nblocks):
    if c0 == 0 or c0 + nblocks > MAX_CTR:
        raise CounterRangeError("counter range touches the all-zero block")


def keystream(key, c0, length):
    n = -(-length // BLOCK)
    _check_range(c0, n)
    ks = b"".join(aes_block(key, (c0 + i).to_bytes(BLOCK, "big"))
                  for i in range(1, n + 1))
    return ks[:length]


def tag(key, c0, aad, data):
    h = aes_block(key, bytes(BLOCK))
    return xor(ghash(h, aad, data), aes_block(key, c0.to_bytes(BLOCK, "big")))


def enc_aad(usage):
    return usage.to_bytes(4, "big")


def cksum_aad(usage):
    return usage.to_bytes(4, "big") + b"\x99"


def encrypt(key, usage, plaintext, ctr0):
    """ctr0 || C || T.  ctr0 is 16 bytes, chosen by the caller."""
    _check_key(key)
    c0 = int.from_bytes(ctr0, "big")
    c = xor(plaintext, keystream(key, c0, len(plaintext)))
    return ctr0 + c + tag(key, c0, enc_aad(usage), c)


def decrypt(key, usage, ciphertext):
    _check_key(key)
    if len(ciphertext) < 2 * BLOCK:
        raise ValueError("ciphertext shorter than 32 bytes")
    ctr0, c, t = ciphertext[:BLOCK], ciphertext[BLOCK:-BLOCK], ciphertext[-BLOCK:]
    c0 = int.from_bytes(ctr0, "big")
    _check_range(c0, -(-len(c) // BLOCK))
    if tag(key, c0, enc_aad(usage), c) != t:
        raise IntegrityError("tag mismatch")
    return xor(c, keystream(key, c0, len(c)))


def checksum(key, usage, data, ctr0):
    _check_key(key)
    c0 = int.from_bytes(ctr0, "big")
    _check_range(c0, 0)
    return ctr0 + tag(key, c0, cksum_aad(usage), data)


def verify_checksum(key, usage, data, cksum):
    if len(cksum) != 2 * BLOCK:
        return False
    return checksum(key, usage, data, cksum[:BLOCK]) == cksum


# --- string-to-key, RFC 3962 / RFC 3961 ------------------------------------

def nfold(data, nbytes):
    """RFC 3961 section 5.1 n-fold of data to nbytes bytes.

    Replicate the input lcm(len, n) / len times, each copy rotated right
    by 13 more bits than the last, and add the n-byte slices with
    end-around carry (one's-complement addition).
    """
    inlen = len(data)
    lcm = inlen * nbytes // math.gcd(inlen, nbytes)
    bits = inlen * 8
    val = int.from_bytes(data, "big")
    big = 0
    for i in range(lcm // inlen):
        r = (13 * i) % bits
        rot = ((val >> r) | (val << (bits - r))) & ((1 << bits) - 1)
        big = (big << bits) | rot
    total, mod = 0, (1 << (8 * nbytes)) - 1
    for off in range(lcm // nbytes - 1, -1, -1):
        total += (big >> (8 * nbytes * off)) & mod
    while total >> (8 * nbytes):
        total = (total & mod) + (total >> (8 * nbytes))
    return total.to_bytes(nbytes, "big")


def derive_random(key, constant):
    """RFC 3961 DR(Key, Constant) with E = single-block AES (zero IV)."""
    block = constant if len(constant) == BLOCK else nfold(constant, BLOCK)
    out = b""
    while len(out) < len(key):
        block = aes_block(key, block)
        out += block
    return out[:len(key)]


def string_to_key(enctype, password, salt, iterations=4096):
    keylen = ENCTYPES[enctype]["keylen"]
    tkey = hashlib.pbkdf2_hmac("sha1", password, salt, iterations, keylen)
    # random-to-key is the identity for AES; DK(tkey, "kerberos").
    return derive_random(tkey, b"kerberos")


# --- vectors ---------------------------------------------------------------

def check_vectors(vectors):
    """Return a list of failure descriptions (empty when all match)."""
    fails = []
    for i, v in enumerate(vectors["string_to_key"]):
        got = string_to_key(v["enctype"], v["password"].encode(),
                            v["salt"].encode(), v["iterations"])
        if got.hex() != v["key"]:
            fails.append("string_to_key[%d] (%s)" % (i, v["enctype"]))
    for i, v in enumerate(vectors["encrypt"]):
        key = bytes.fromhex(v["key"])
        if len(key) != ENCTYPES[v["enctype"]]["keylen"]:
            fails.append("encrypt[%d]: key length" % i)
            continue
        pt, ct = bytes.fromhex(v["plaintext"]), bytes.fromhex(v["ciphertext"])
        got = encrypt(key, v["usage"], pt, bytes.fromhex(v["ctr0"]))
        if got != ct:
            fails.append("encrypt[%d] (%s, %d bytes)" % (i, v["enctype"], len(pt)))
        try:
            if decrypt(key, v["usage"], ct) != pt:
                fails.append("decrypt[%d]: wrong plaintext" % i)
        except (IntegrityError, ValueError) as e:
            fails.append("decrypt[%d]: %s" % (i, e))
    for i, v in enumerate(vectors["checksum"]):
        key = bytes.fromhex(v["key"])
        data, ck = bytes.fromhex(v["data"]), bytes.fromhex(v["checksum"])
        got = checksum(key, v["usage"], data, bytes.fromhex(v["ctr0"]))
        if got != ck:
            fails.append("checksum[%d] (%s, %d bytes)" % (i, v["enctype"], len(data)))
    return fails


def main(argv):
    path = argv[1] if len(argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "krb5-patches", "tests", "enctype-vectors.json")
    with open(path) as f:
        vectors = json.load(f)
    fails = check_vectors(vectors)
    for f in fails:
        print("MISMATCH", f)
    n = sum(len(vectors[k]) for k in ("string_to_key", "encrypt", "checksum"))
    print("%d vectors, %d mismatches" % (n, len(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
