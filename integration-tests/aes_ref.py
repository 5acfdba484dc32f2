"""FIPS-197 AES key expansion, written from the standard for the tests.

Independent of the C++ dealer (mpc-server) on purpose: the tests use it to
know every round key of a shared key and look for it where it must not be.
"""

_SBOX = None


def _sbox():
    global _SBOX
    if _SBOX is None:
        # FIPS-197 5.1.1: multiplicative inverse in GF(2^8), then the affine map.
        def mul(a, b):
            r = 0
            while b:
                if b & 1:
                    r ^= a
                a = ((a << 1) ^ 0x11B) if a & 0x80 else a << 1
                b >>= 1
            return r
        inv = [0] * 256
        for a in range(1, 256):
            for b in range(1, 256):
                if mul(a, b) == 1:
                    inv[a] = b
                    break
        s = []
        for a in range(256):
            x = inv[a]
            y = x
            for k in range(1, 5):
                y ^= ((x << k) | (x >> (8 - k))) & 0xFF
            s.append(y ^ 0x63)
        _SBOX = s
    return _SBOX


def expand_key(key):
    """FIPS-197 5.2 KeyExpansion: the round keys, round 0 first."""
    sbox = _sbox()
    nk = len(key) // 4
    nr = nk + 6
    w = [list(key[4 * i:4 * i + 4]) for i in range(nk)]
    rcon = 1
    for i in range(nk, 4 * (nr + 1)):
        t = list(w[i - 1])
        if i % nk == 0:
            t = [sbox[b] for b in t[1:] + t[:1]]
            t[0] ^= rcon
            rcon = ((rcon << 1) ^ 0x11B) if rcon & 0x80 else rcon << 1
        elif nk > 6 and i % nk == 4:
            t = [sbox[b] for b in t]
        w.append([a ^ b for a, b in zip(w[i - nk], t)])
    flat = bytes(b for word in w for b in word)
    return [flat[16 * r:16 * r + 16] for r in range(nr + 1)]
