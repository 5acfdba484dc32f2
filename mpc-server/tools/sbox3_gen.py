#!/usr/bin/env python3
"""Derives the AND-depth-3 AES S-box circuit and writes aes/sbox3.inc.

The S-box is x -> A * x^254 + 0x63 (FIPS-197 5.1.1). x^254 has algebraic
degree 7, so any circuit of 2-input AND gates needs AND depth
ceil(log2 7) = 3; this one reaches it with the tower field
GF((2^4)^2) = GF(2^4)[Y]/(Y^2 + Y + lam), GF(2^4) = GF(2)[z]/(z^4+z+1)
(the inversion formula of Canright, "A very compact Rijndael S-box",
Sec. 2, in polynomial rather than normal basis):

  a = ah*Y + al,  d = lam*ah^2 + ah*al + al^2   (the norm, in GF(2^4))
  a^-1 = (ah*Y + (ah + al)) * d^-1,  d^-1 = d^14 = d^6 * d^8.

  AND layer 1 (9):  ah*al (Karatsuba, 3 x 3 ANDs); d is then linear.
  AND layer 2 (24): the 6 products d_i*d_j (d^6 = d^2*d^4 is a quadratic
                    form in d's bits: degree wt(6) = 2), P = ah * d^8 and
                    Q = (ah + al) * d^8 (Frobenius d^8 is GF(2)-linear).
  AND layer 3 (18): ah' = P * d^6, al' = Q * d^6.
  Then the basis change back and the affine map (linear).

Every AND gate is a single 2-input AND of GF(2)-linear forms of the
persistent wires (state bits and earlier layers' AND outputs), so the
replicated-share engine and its malicious check (MulLog) handle them like
the depth-4 circuit's gates.

The script checks the circuit against the AES S-box for all 256 inputs,
then emits C++ (member functions of AesProgram, circuit.h) whose linear
parts are reduced with Paar's greedy common-subexpression heuristic
("Optimizing the hardware complexity of finite field arithmetic", 1997).

  sbox3_gen.py --check           exhaustive check only (exit status)
  sbox3_gen.py --out FILE        check, then write the C++ to FILE
  sbox3_gen.py --verify FILE     check, and fail unless FILE is current
"""
import argparse
import sys

# ---------------------------------------------------------------- fields


def gf256_mul(a, b):
    """Multiplication in the AES field GF(2)[x]/(x^8+x^4+x^3+x+1)."""
    r = 0
    while b:
        if b & 1:
            r ^= a
        a <<= 1
        if a & 0x100:
            a ^= 0x11B
        b >>= 1
    return r


def aes_sbox():
    """FIPS-197 5.1.1: inverse (0 -> 0), then the affine map."""
    inv = [0] * 256
    for a in range(1, 256):
        for b in range(1, 256):
            if gf256_mul(a, b) == 1:
                inv[a] = b
                break
    box = []
    for a in range(256):
        b = inv[a]
        s = 0x63
        for i in range(8):
            bit = 0
            for k in (0, 4, 5, 6, 7):
                bit ^= (b >> ((i + k) % 8)) & 1
            s ^= bit << i
        box.append(s)
    return box


def gf16_mul(a, b):
    """GF(2)[z]/(z^4 + z + 1), polynomial basis, bit i = coeff of z^i."""
    r = 0
    for i in range(4):
        if (b >> i) & 1:
            r ^= a << i
    for k in (6, 5, 4):
        if (r >> k) & 1:
            r ^= 0b10011 << (k - 4)
    return r


def gf16_pow(a, e):
    r = 1
    for _ in range(e):
        r = gf16_mul(r, a)
    return r


def pick_lambda():
    """The first lam with Y^2 + Y + lam irreducible over GF(2^4)."""
    for lam in range(1, 16):
        if all(gf16_mul(y, y) ^ y ^ lam for y in range(16)):
            return lam
    raise AssertionError("no irreducible Y^2 + Y + lam")


LAM = pick_lambda()


def tower_mul(a, b):
    """(ah Y + al)(bh Y + bl) with Y^2 = Y + lam; element = ah << 4 | al."""
    ah, al, bh, bl = a >> 4, a & 15, b >> 4, b & 15
    hh = gf16_mul(ah, bh)
    h = hh ^ gf16_mul(ah, bl) ^ gf16_mul(al, bh)
    lo = gf16_mul(hh, LAM) ^ gf16_mul(al, bl)
    return (h << 4) | lo


def tower_iso():
    """Columns of the GF(2)-linear field isomorphism AES -> tower: x^i maps
    to beta^i for a root beta of the AES polynomial in the tower field."""
    for beta in range(2, 256):
        pw = [1]
        for _ in range(8):
            pw.append(tower_mul(pw[-1], beta))
        # x^8 + x^4 + x^3 + x + 1 at beta
        if pw[8] ^ pw[4] ^ pw[3] ^ pw[1] ^ pw[0] == 0:
            return pw[:8]
    raise AssertionError("no root of the AES polynomial in the tower field")


def apply_cols(cols, v):
    r = 0
    for i, c in enumerate(cols):
        if (v >> i) & 1:
            r ^= c
    return r


def invert_cols(cols):
    """Inverse of an 8x8 GF(2) matrix given by its columns (brute force)."""
    inv = [0] * 8
    table = {apply_cols(cols, v): v for v in range(256)}
    assert len(table) == 256, "matrix is singular"
    for i in range(8):
        inv[i] = table[1 << i]
    return inv


# ---------------------------------------------------------------- circuit
# A linear form is an int: bit k = persistent variable k. Variables 0..7
# are the state bits (bit j of the S-box input byte), then the AND outputs
# of layers 1, 2, 3 in order.

N_STATE = 8


class Circuit:
    def __init__(self):
        self.nvars = N_STATE
        self.layers = [[], [], []]  # per layer: (var, form_a, form_b)
        self.layer = 0

    def and_gate(self, a, b):
        assert a and b, "AND of a zero form"
        var = self.nvars
        self.nvars += 1
        self.layers[self.layer].append((var, a, b))
        return 1 << var


def poly_kmul(c, a, b):
    """Karatsuba product of two polynomials of equal power-of-two length
    whose coefficients are linear forms: 3 ANDs for length 2."""
    n = len(a)
    if n == 1:
        return [c.and_gate(a[0], b[0])]
    h = n // 2
    lo = poly_kmul(c, a[:h], b[:h])
    hi = poly_kmul(c, a[h:], b[h:])
    mid = poly_kmul(c, [x ^ y for x, y in zip(a[:h], a[h:])],
                    [x ^ y for x, y in zip(b[:h], b[h:])])
    out = [0] * (2 * n - 1)
    for i, v in enumerate(lo):
        out[i] ^= v
        out[i + h] ^= v
    for i, v in enumerate(hi):
        out[i + 2 * h] ^= v
        out[i + h] ^= v
    for i, v in enumerate(mid):
        out[i + h] ^= v
    return out


def gf16_kmul(c, a, b):
    """GF(2^4) product of two 4-vectors of linear forms: 9 ANDs."""
    p = poly_kmul(c, a, b)
    for k in (6, 5, 4):  # z^k = z^(k-3) + z^(k-4)
        p[k - 3] ^= p[k]
        p[k - 4] ^= p[k]
    return p[:4]


def gf16_linear(fn, v):
    """Applies the GF(2)-linear map fn on GF(2^4) to a 4-vector of forms."""
    out = [0] * 4
    for i in range(4):
        img = fn(1 << i)
        for k in range(4):
            if (img >> k) & 1:
                out[k] ^= v[i]
    return out


def build():
    """Returns (circuit, output forms, output constant)."""
    c = Circuit()
    iso = tower_iso()
    x = [1 << j for j in range(8)]
    t = [0] * 8  # tower bits: 0..3 = al, 4..7 = ah
    for j in range(8):
        for k in range(8):
            if (iso[j] >> k) & 1:
                t[k] ^= x[j]
    al, ah = t[:4], t[4:]
    # Layer 1: d = lam*ah^2 + al^2 + ah*al.
    c.layer = 0
    d = gf16_kmul(c, ah, al)
    lin = gf16_linear(lambda e: gf16_mul(LAM, gf16_mul(e, e)), ah)
    sq = gf16_linear(lambda e: gf16_mul(e, e), al)
    d = [d[i] ^ lin[i] ^ sq[i] for i in range(4)]
    # Layer 2: d_i*d_j, P = ah*d^8, Q = (ah + al)*d^8.
    c.layer = 1
    prod = {}
    for i in range(4):
        for j in range(i + 1, 4):
            prod[(i, j)] = c.and_gate(d[i], d[j])
    d6 = [0] * 4
    for k in range(4):
        # ANF of bit k of d^6 over d's bits (Moebius transform).
        tt = [(gf16_pow(v, 6) >> k) & 1 for v in range(16)]
        anf = tt[:]
        for i in range(4):
            for m in range(16):
                if m >> i & 1:
                    anf[m] ^= anf[m ^ (1 << i)]
        for m in range(1, 16):
            if not anf[m]:
                continue
            bits = [i for i in range(4) if m >> i & 1]
            assert len(bits) <= 2, "d^6 is not quadratic"
            d6[k] ^= d[bits[0]] if len(bits) == 1 else prod[tuple(bits)]
        assert anf[0] == 0
    d8 = gf16_linear(lambda e: gf16_pow(e, 8), d)
    p = gf16_kmul(c, ah, d8)
    q = gf16_kmul(c, [ah[i] ^ al[i] for i in range(4)], d8)
    # Layer 3.
    c.layer = 2
    oh = gf16_kmul(c, p, d6)
    ol = gf16_kmul(c, q, d6)
    inv_tower = ol + oh  # bits 0..3 = al', 4..7 = ah'
    back = invert_cols(iso)
    inv_aes = [0] * 8
    for k in range(8):
        for j in range(8):
            if (back[k] >> j) & 1:
                inv_aes[j] ^= inv_tower[k]
    out = [0] * 8
    for i in range(8):
        for k in (0, 4, 5, 6, 7):
            out[i] ^= inv_aes[(i + k) % 8]
    return c, out, 0x63


def evaluate(c, out, const, byte):
    val = [(byte >> j) & 1 for j in range(8)] + [0] * (c.nvars - 8)

    def form(f):
        r = 0
        k = 0
        while f:
            if f & 1:
                r ^= val[k]
            f >>= 1
            k += 1
        return r

    for layer in c.layers:
        for var, a, b in layer:
            val[var] = form(a) & form(b)
    r = 0
    for j in range(8):
        r |= form(out[j]) << j
    return r ^ const


def check(c, out, const):
    box = aes_sbox()
    assert box[0] == 0x63 and box[1] == 0x7C and box[0x53] == 0xED  # FIPS-197
    bad = [v for v in range(256) if evaluate(c, out, const, v) != box[v]]
    if bad:
        raise SystemExit(f"S-box mismatch at {len(bad)} inputs, e.g. {bad[0]:#04x}")
    # Each layer's AND inputs use only the state and earlier layers.
    avail = N_STATE
    for layer in c.layers:
        for _, a, b in layer:
            assert a >> avail == 0 and b >> avail == 0, "AND uses its own layer"
        avail += len(layer)
    assert [len(x) for x in c.layers] == [9, 24, 18], [len(x) for x in c.layers]


# ---------------------------------------------------------------- C++ emission


def paar(targets, nbase):
    """Greedy CSE over XOR: returns (ops, column of each target); ops are
    (new_col, col_a, col_b), columns >= nbase are temporaries."""
    rows = [set(k for k in range(nbase + 64) if f >> k & 1) for f in targets]
    ops = []
    ncol = nbase
    while True:
        count = {}
        for r in rows:
            if len(r) < 2:
                continue
            s = sorted(r)
            for i in range(len(s)):
                for j in range(i + 1, len(s)):
                    count[(s[i], s[j])] = count.get((s[i], s[j]), 0) + 1
        if not count:
            break
        best = max(count.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        col = ncol
        ncol += 1
        ops.append((col, best[0], best[1]))
        for r in rows:
            if best[0] in r and best[1] in r:
                r.discard(best[0])
                r.discard(best[1])
                r.add(col)
    result = []
    for r in rows:
        assert len(r) == 1, "zero linear form"
        result.append(next(iter(r)))
    return ops, result


class Emitter:
    """One tile-local program: XORs into temporaries (linear-scan
    allocated), ANDs and output copies in dependency order."""

    def __init__(self, var_wire):
        self.var_wire = var_wire  # persistent var -> C++ wire expression
        self.lines = []
        self.max_temps = 0

    def program(self, ands, outs):
        """ands: (dst var, form a, form b); outs: (wire expr, form, xnor)."""
        forms = [a for _, a, _ in ands] + [b for _, _, b in ands] + [f for _, f, _ in outs]
        nbase = len(self.var_wire)
        ops, cols = paar(forms, nbase)
        na = len(ands)
        a_cols, b_cols, o_cols = cols[:na], cols[na:2 * na], cols[2 * na:]
        # Schedule: each AND / output right after its last input is ready.
        ready_at = {}
        for i, (col, _, _) in enumerate(ops):
            ready_at[col] = i
        def when(col):
            return ready_at.get(col, -1)
        events = []  # (time, order, kind, payload)
        for i, (dst, _, _) in enumerate(ands):
            events.append((max(when(a_cols[i]), when(b_cols[i])), i, "and", (dst, a_cols[i], b_cols[i])))
        for i, (wire, _, xnor) in enumerate(outs):
            events.append((when(o_cols[i]), na + i, "out", (wire, o_cols[i], xnor)))
        events.sort()
        seq = []
        e = 0
        for i, op in enumerate([None] + ops):
            if op is not None:
                seq.append(("xor", op))
            t = i - 1
            while e < len(events) and events[e][0] <= t:
                seq.append((events[e][2], events[e][3]))
                e += 1
        assert e == len(events)
        # Liveness of temporaries.
        last = {}
        for idx, (kind, p) in enumerate(seq):
            for col in (p[1:3] if kind != "out" else p[1:2]):
                last[col] = idx
        slot_of = {}
        free = []
        used = 0

        def name(col):
            if col < nbase:
                return self.var_wire[col]
            return f"T3({slot_of[col]})"

        for idx, (kind, p) in enumerate(seq):
            if kind == "xor":
                col, a, b = p
                text_a, text_b = name(a), name(b)
                for src in (a, b):
                    if src >= nbase and last.get(src) == idx:
                        free.append(slot_of[src])
                if free:
                    free.sort()
                    slot_of[col] = free.pop(0)
                else:
                    slot_of[col] = used
                    used += 1
                self.lines.append(f"Xor({name(col)}, {text_a}, {text_b});")
                continue
            if kind == "and":
                dst, a, b = p
                self.lines.append(f"e_.And({self.var_wire[dst]}, {name(a)}, {name(b)});")
                srcs = (a, b)
            else:
                wire, col, xnor = p
                self.lines.append(f"{'Xnor1' if xnor else 'Copy'}({wire}, {name(col)});")
                srcs = (col,)
            for src in srcs:
                if src >= nbase and last.get(src) == idx:
                    free.append(slot_of[src])
        self.max_temps = max(self.max_temps, used)


PART_LINES = 60


def emit(c, out, const):
    names = {}
    for j in range(8):
        names[j] = f"W::kSt + {j}"
    base = [N_STATE, N_STATE + 9, N_STATE + 33]
    wires = ["W::t2", "W::t21", "W::z0"]
    for li, layer in enumerate(c.layers):
        for k, (var, _, _) in enumerate(layer):
            names[var] = f"{wires[li]} + {k}"
    var_wire = [names[v] for v in range(c.nvars)]
    funcs = []
    temps = 0
    titles = [
        ("Sbox3Layer1", "AND layer 1 (9): ah*al, whence the norm d."),
        ("Sbox3Layer2", "AND layer 2 (24): d_i*d_j, ah*d^8, (ah+al)*d^8."),
        ("Sbox3Layer3", "AND layer 3 (18): P*d^6, Q*d^6."),
    ]
    for li, layer in enumerate(c.layers):
        em = Emitter(var_wire)
        em.program(layer, [])
        funcs.append((titles[li], em.lines))
        temps = max(temps, em.max_temps)
    em = Emitter(var_wire)
    em.program([], [(f"W::kOut + {j}", out[j], (const >> j) & 1) for j in range(8)])
    funcs.append((("Sbox3Bottom", "The basis change back and the affine map (0x63 as XNORs)."), em.lines))
    temps = max(temps, em.max_temps)
    head = [
        "// Generated by mpc-server/tools/sbox3_gen.py: do not edit (the",
        "// generator checks the circuit against the AES S-box on all 256",
        "// inputs; ctest sbox3_gen_check re-runs it and compares this file).",
        f"// Tower field GF((2^4)^2): z^4 + z + 1, Y^2 + Y + {LAM}.",
        f"// ANDs per layer: {[len(x) for x in c.layers]}, {sum(len(x) for x in c.layers)} in all.",
        "// Included inside class AesProgram (aes/circuit.h).",
        f"static constexpr int kSbox3Temps = {temps};",
    ]
    body = []
    for (fname, doc), lines in funcs:
        nx = sum(1 for l in lines if l.startswith("Xor("))
        # Functions stay under the house limit of 80 lines: a long layer is
        # cut into parts (its temporaries live in the tile's scratch, so
        # they carry from one part to the next).
        parts = [lines[i:i + PART_LINES] for i in range(0, len(lines), PART_LINES)]
        if len(parts) > 1:
            for k, part in enumerate(parts):
                body.append(f"KMPC_INLINE void {fname}Part{k}() {{")
                body += ["  " + l for l in part]
                body.append("}")
        body.append(f"// {doc} {nx} XORs.")
        body.append(f"void {fname}() {{")
        if len(parts) > 1:
            body += [f"  {fname}Part{k}();" for k in range(len(parts))]
        else:
            body += ["  " + l for l in lines]
        body.append("}")
    return "\n".join(head + body) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true")
    g.add_argument("--out")
    g.add_argument("--verify")
    args = ap.parse_args()
    c, out, const = build()
    check(c, out, const)
    print(f"sbox3: 256/256 inputs match the AES S-box; ANDs per layer "
          f"{[len(x) for x in c.layers]} (lambda = {LAM})")
    if args.check:
        return 0
    text = emit(c, out, const)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        return 0
    with open(args.verify) as f:
        if f.read() != text:
            print(f"{args.verify} is stale: run sbox3_gen.py --out {args.verify}",
                  file=sys.stderr)
            return 1
    print(f"{args.verify} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
