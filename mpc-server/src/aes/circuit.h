// Bitsliced AES written once over an abstract AND engine E. Included by
// the kernel translation units inside an ISA-specific namespace
// (KMPC_AES_ARCH), so that each gets its own copy of these templates.
//
// Data layout (see also aes.h): a "wire" holds one bit position j of all 16
// state bytes of all lanes of a chunk, as wn groups of 16 64-bit words:
// word 16*w + p holds bit j of state byte p (FIPS-197 order: p = row +
// 4*column) of lanes 64*w .. 64*w+63, lane l at bit l%64. The state is the
// 8 wires kSt+j (bit j, 0 = least significant).
//
// The circuit runs tile by tile, a tile being one group of 64 lanes (16
// words of every wire): all 16 S-boxes, ShiftRows, MixColumns and
// AddRoundKey of a group happen in L1-resident tile temporaries; only the
// state and the AND-layer outputs (the values that cross a network round)
// live in the chunk's arena (kernel_impl.inc: one region per group of
// wires, tile-major inside, so a layer's message is one contiguous region
// and a tile's data is a few small blocks; a wire-major arena would put
// the wires of a tile 4 KiB apart, all in the same L1 sets).
//
// Engine concept:
//   static constexpr int kComps;        1 (clear) or 2 (share components)
//   static constexpr size_t kTileWords; 16
//   size_t wn();                        lane groups in the chunk
//   void SetTile(size_t w);             selects group w for P()
//   uint64_t* P(int comp, int wire);    the tile's 16 words of a wire
//   void XorOnes(int wire);             add the public all-ones (tile)
//   void TileMask(int first, int n);    per tile, before the layer's ANDs
//   void And(int d, int a, int b);      prepare an AND of the current layer
//   void EndLayer(int first, int n);    after the last tile: send wires
//                                       first..first+n-1 (one message); the
//                                       next Step starts after the Await
//   void AddRoundKey(int round);        XOR round key into the tile's state
#ifndef KMPC_AES_ARCH
#error "define KMPC_AES_ARCH before including aes/circuit.h"
#endif

namespace kmpc::aes::KMPC_AES_ARCH {

// Wire ids. The outputs of every AND layer are consecutive (one message).
struct Wires {
  enum : int {
    // Persistent wires (one full wire per chunk): live across AND layers.
    kSt = 0,  // 8: the state, bit j at kSt + j
    // AND layer 1 (9)
    t2 = kSt + 8, t3, t5, t7, t8, t10, t12, t13, t15,
    t21, t22, t23, t24,
    // SEA 2010 inversion in GF(2^4): layers t26 | t28 t32 | t36 | t39
    t25, t26, t28, t32, t27, t29, t33, t34, t36, t37, t39,
    // SEC 2012 inversion: layers m25 m31 m34 | m29 m30 m32 m35
    m24, m27, m25, m31, m34, m29, m30, m32, m35,
    // output AND layer (18)
    z0, z1, z2, z3, z4, z5, z6, z7, z8, z9, z10, z11, z12, z13, z14, z15,
    z16, z17,
    kCount,
    // Temporaries: tile-local, never cross an AND layer.
    kFirstTemp = kCount,
    kOut = kFirstTemp,  // 8: S-box output, bit j at kOut + j
    y1 = kOut + 8, y2, y3, y4, y5, y6, y7, y8, y9, y10, y11, y12, y13, y14,
    y15, y16, y17, y18, y19, y20, y21, u0, u1,
    t4, t6, t9, t11, t14, t16, t17, t18, t19, t20,
    t30, t31, t35, t38, t40, m26, m28, m33, m36, m37, m38, m39, m40,
    t41, t42, t43, t44, t45,
    t46, t47, t48, t49, t50, t51, t52, t53, t54, t55, t56, t57, t58, t59,
    t60, t61, t62, t63, t64, t65, t66, t67,
    kTempEnd,
    kTemps = kTempEnd - kFirstTemp,
  };
};

#define KMPC_INLINE inline __attribute__((always_inline))

// The 16 words of one wire in a tile (one lane group: word p = state byte
// p = row + 4*column) as registers: two zmm with AVX-512 (columns 0-1 and
// 2-3), four ymm with AVX2 (one column each). ShiftRows, the row rotations
// of MixColumns and the round-key broadcast are register permutations.
#if defined(__AVX512F__)
struct V16 {
  __m512i a, b;
};
KMPC_INLINE V16 operator^(V16 x, V16 y) {
  return {_mm512_xor_si512(x.a, y.a), _mm512_xor_si512(x.b, y.b)};
}
KMPC_INLINE V16 operator&(V16 x, V16 y) {
  return {_mm512_and_si512(x.a, y.a), _mm512_and_si512(x.b, y.b)};
}
KMPC_INLINE V16 operator~(V16 x) {
  return {_mm512_ternarylogic_epi64(x.a, x.a, x.a, 0x55),
          _mm512_ternarylogic_epi64(x.b, x.b, x.b, 0x55)};
}
KMPC_INLINE V16& operator^=(V16& x, V16 y) { return x = x ^ y; }
KMPC_INLINE V16 Load16(const uint64_t* p) {
  return {_mm512_loadu_si512(p), _mm512_loadu_si512(p + 8)};
}
KMPC_INLINE void Store16(uint64_t* p, V16 v) {
  _mm512_storeu_si512(p, v.a);
  _mm512_storeu_si512(p + 8, v.b);
}
// new[r + 4c] = old[r + 4((c + r) mod 4)]
KMPC_INLINE V16 ShiftRowsV(V16 x) {
  const __m512i lo = _mm512_setr_epi64(0, 5, 10, 15, 4, 9, 14, 3);
  const __m512i hi = _mm512_setr_epi64(8, 13, 2, 7, 12, 1, 6, 11);
  return {_mm512_permutex2var_epi64(x.a, lo, x.b),
          _mm512_permutex2var_epi64(x.a, hi, x.b)};
}
// new[r + 4c] = old[(r + 1) mod 4 + 4c], resp. r + 2.
KMPC_INLINE V16 RotRow1(V16 x) {
  return {_mm512_permutex_epi64(x.a, 0x39), _mm512_permutex_epi64(x.b, 0x39)};
}
KMPC_INLINE V16 RotRow2(V16 x) {
  return {_mm512_permutex_epi64(x.a, 0x4e), _mm512_permutex_epi64(x.b, 0x4e)};
}
// Word p = all-ones iff bit j of key[p] is set.
KMPC_INLINE V16 KeyBitMask(const uint8_t* key, int j) {
  const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(key));
  const __mmask16 m =
      _mm_test_epi8_mask(k, _mm_set1_epi8(static_cast<char>(1 << j)));
  return {_mm512_maskz_set1_epi64(static_cast<__mmask8>(m), -1),
          _mm512_maskz_set1_epi64(static_cast<__mmask8>(m >> 8), -1)};
}
#else
struct V16 {
  __m256i c[4];
};
KMPC_INLINE V16 operator^(V16 x, V16 y) {
  V16 r;
  for (int i = 0; i < 4; ++i) r.c[i] = _mm256_xor_si256(x.c[i], y.c[i]);
  return r;
}
KMPC_INLINE V16 operator&(V16 x, V16 y) {
  V16 r;
  for (int i = 0; i < 4; ++i) r.c[i] = _mm256_and_si256(x.c[i], y.c[i]);
  return r;
}
KMPC_INLINE V16 operator~(V16 x) {
  V16 r;
  for (int i = 0; i < 4; ++i) {
    r.c[i] = _mm256_xor_si256(x.c[i], _mm256_set1_epi64x(-1));
  }
  return r;
}
KMPC_INLINE V16& operator^=(V16& x, V16 y) { return x = x ^ y; }
KMPC_INLINE V16 Load16(const uint64_t* p) {
  V16 r;
  for (int i = 0; i < 4; ++i) {
    r.c[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * i));
  }
  return r;
}
KMPC_INLINE void Store16(uint64_t* p, V16 v) {
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 4 * i), v.c[i]);
  }
}
KMPC_INLINE V16 ShiftRowsV(V16 x) {
  // Column c takes row r from column c + r: blend 64-bit lanes.
  V16 r;
  for (int c = 0; c < 4; ++c) {
    __m256i v = _mm256_blend_epi32(x.c[c], x.c[(c + 1) & 3], 0x0c);
    v = _mm256_blend_epi32(v, x.c[(c + 2) & 3], 0x30);
    r.c[c] = _mm256_blend_epi32(v, x.c[(c + 3) & 3], 0xc0);
  }
  return r;
}
KMPC_INLINE V16 RotRow1(V16 x) {
  V16 r;
  for (int i = 0; i < 4; ++i) r.c[i] = _mm256_permute4x64_epi64(x.c[i], 0x39);
  return r;
}
KMPC_INLINE V16 RotRow2(V16 x) {
  V16 r;
  for (int i = 0; i < 4; ++i) r.c[i] = _mm256_permute4x64_epi64(x.c[i], 0x4e);
  return r;
}
KMPC_INLINE V16 KeyBitMask(const uint8_t* key, int j) {
  V16 r;
  for (int i = 0; i < 4; ++i) {
    int32_t w;
    std::memcpy(&w, key + 4 * i, 4);
    const __m256i b = _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(w));
    r.c[i] = _mm256_sub_epi64(
        _mm256_setzero_si256(),
        _mm256_and_si256(_mm256_srli_epi64(b, j), _mm256_set1_epi64x(1)));
  }
  return r;
}
#endif

template <class E>
class AesProgram {
 public:
  AesProgram(E& e, int nr, SboxCircuit circuit)
      : e_(e),
        nr_(nr),
        circuit_(circuit),
        layers_(AndDepth(circuit)) {}

  // nr S-boxes of `layers_` AND layers each, plus the final linear step.
  int steps() const { return nr_ * layers_ + 1; }

  // Runs step k: everything after AND layer k-1 (whose result the caller
  // has received) up to and including the preparation of AND layer k, in
  // one pass over the lane groups; then sends layer k.
  void Step(int k) {
    const int phase = k % layers_;
    const int round = k / layers_;
    if (phase == 0) {
      // Finish S-box `round` (if any), ShiftRows, MixColumns,
      // AddRoundKey(round), start S-box round+1 (if any).
      const bool sbox_next = round < nr_;
      Layer(W::t2, sbox_next ? 9 : 0, [&] {
        if (round > 0) {
          if (circuit_ == SboxCircuit::kDepth3) {
            Sbox3Bottom();
          } else {
            SboxBottom();
          }
          if (round < nr_) {
            ShiftRowsMixColumns();
          } else {
            ShiftRowsOnly();
          }
        }
        e_.AddRoundKey(round);
        if (sbox_next) {
          if (circuit_ == SboxCircuit::kDepth3) {
            Sbox3Layer1();
          } else {
            SboxLayer1();
          }
        }
      });
      return;
    }
    switch (circuit_) {
      case SboxCircuit::kDepth3:
        switch (phase) {
          case 1: Layer(W::t21, 24, [this] { Sbox3Layer2(); }); break;
          case 2: Layer(W::z0, 18, [this] { Sbox3Layer3(); }); break;
        }
        break;
      case SboxCircuit::kDepth4:
        switch (phase) {
          case 1: Layer(W::m25, 3, [this] { Inv4Layer2(); }); break;
          case 2: Layer(W::m29, 4, [this] { Inv4Layer3(); }); break;
          case 3: Layer(W::z0, 18, [this] { Inv4Finish(); }); break;
        }
        break;
      case SboxCircuit::kDepth6:
        switch (phase) {
          case 1: Layer(W::t26, 1, [this] { Inv6Layer2(); }); break;
          case 2: Layer(W::t28, 2, [this] { Inv6Layer3(); }); break;
          case 3: Layer(W::t36, 1, [this] { Inv6Layer4(); }); break;
          case 4: Layer(W::t39, 1, [this] { Inv6Layer5(); }); break;
          case 5: Layer(W::z0, 18, [this] { Inv6Finish(); }); break;
        }
        break;
    }
  }

 private:
  using W = Wires;
  // BearSSL's x0..x7 (x0 = most significant bit) and s0..s7.
  static constexpr int X(int k) { return W::kSt + 7 - k; }
  static constexpr int S(int k) { return W::kOut + 7 - k; }

  template <class F>
  void Layer(int first, int count, F&& body) {
    const size_t wn = e_.wn();
    for (size_t w = 0; w < wn; ++w) {
      e_.SetTile(w);
      if (count > 0) e_.TileMask(first, count);
      body();
    }
    if (count > 0) e_.EndLayer(first, count);
  }

  KMPC_INLINE void Xor(int d, int a, int b) {
    for (int c = 0; c < E::kComps; ++c) {
      Store16(e_.P(c, d), Load16(e_.P(c, a)) ^ Load16(e_.P(c, b)));
    }
  }
  KMPC_INLINE void Xnor(int d, int a, int b) {
    Xor(d, a, b);
    e_.XorOnes(d);
  }

  // Top linear transformation (y1..y21 from the state); Boyar and Peralta
  // 2010 / BearSSL aes_ct.c br_aes_ct_bitslice_Sbox. The y's are tile
  // temporaries: later layers recompute them from the state, which stays
  // put for the whole S-box (23 XORs in L1 are cheaper than keeping 21
  // wires in memory).
  KMPC_INLINE void TopLinear() {
    const int x0 = X(0), x1 = X(1), x2 = X(2), x3 = X(3), x4 = X(4),
              x5 = X(5), x6 = X(6), x7 = X(7);
    Xor(W::y14, x3, x5);
    Xor(W::y13, x0, x6);
    Xor(W::y9, x0, x3);
    Xor(W::y8, x0, x5);
    Xor(W::u0, x1, x2);
    Xor(W::y1, W::u0, x7);
    Xor(W::y4, W::y1, x3);
    Xor(W::y12, W::y13, W::y14);
    Xor(W::y2, W::y1, x0);
    Xor(W::y5, W::y1, x6);
    Xor(W::y3, W::y5, W::y8);
    Xor(W::u1, x4, W::y12);
    Xor(W::y15, W::u1, x5);
    Xor(W::y20, W::u1, x1);
    Xor(W::y6, W::y15, x7);
    Xor(W::y10, W::y15, W::u0);
    Xor(W::y11, W::y20, W::y9);
    Xor(W::y7, x7, W::y11);
    Xor(W::y17, W::y10, W::y11);
    Xor(W::y19, W::y10, W::y8);
    Xor(W::y16, W::u0, W::y11);
    Xor(W::y21, W::y13, W::y16);
    Xor(W::y18, x0, W::y16);
  }

  // AND layer 1 (9 ANDs).
  void SboxLayer1() {
    TopLinear();
    const int x7 = X(7);
    e_.And(W::t2, W::y12, W::y15);
    e_.And(W::t3, W::y3, W::y6);
    e_.And(W::t5, W::y4, x7);
    e_.And(W::t7, W::y13, W::y16);
    e_.And(W::t8, W::y5, W::y1);
    e_.And(W::t10, W::y2, W::y7);
    e_.And(W::t12, W::y9, W::y11);
    e_.And(W::t13, W::y14, W::y17);
    e_.And(W::t15, W::y8, W::y10);
  }

  // Combines layer 1 into the GF(2^4) element (t21, t22, t23, t24) to invert.
  void SboxMiddleIn() {
    Xor(W::t4, W::t3, W::t2);
    Xor(W::t6, W::t5, W::t2);
    Xor(W::t9, W::t8, W::t7);
    Xor(W::t11, W::t10, W::t7);
    Xor(W::t14, W::t13, W::t12);
    Xor(W::t16, W::t15, W::t12);
    Xor(W::t17, W::t4, W::t14);
    Xor(W::t18, W::t6, W::t16);
    Xor(W::t19, W::t9, W::t14);
    Xor(W::t20, W::t11, W::t16);
    Xor(W::t21, W::t17, W::y20);
    Xor(W::t22, W::t18, W::y19);
    Xor(W::t23, W::t19, W::y21);
    Xor(W::t24, W::t20, W::y18);
  }

  // --- SEC 2012 (depth-16 paper) inversion, AND depth 2, 7 ANDs. Their
  // M20, M21, M22, M23 are our t21, t22, t23, t24; their M37, M38, M39,
  // M40 our t29, t40, t33, t37 (checked exhaustively by the S-box test).
  void Inv4Layer2() {
    TopLinear();
    SboxMiddleIn();
    Xor(W::m24, W::t23, W::t24);
    Xor(W::m27, W::t21, W::t22);
    e_.And(W::m25, W::t23, W::t21);
    e_.And(W::m31, W::t21, W::t24);
    e_.And(W::m34, W::t22, W::t23);
  }
  void Inv4Layer3() {
    Xor(W::m26, W::t22, W::m25);
    Xor(W::m28, W::t24, W::m25);
    e_.And(W::m29, W::m28, W::m27);
    e_.And(W::m30, W::m26, W::m24);
    e_.And(W::m32, W::m27, W::m31);
    e_.And(W::m35, W::m24, W::m34);
  }
  void Inv4Finish() {
    Xor(W::m33, W::m27, W::m25);
    Xor(W::m36, W::m24, W::m25);
    Xor(W::m37, W::t22, W::m29);
    Xor(W::m38, W::m32, W::m33);
    Xor(W::m39, W::t24, W::m30);
    Xor(W::m40, W::m35, W::m36);
    SboxOutputLayer(W::m37, W::m39, W::m40, W::m38);
  }

  // --- SEA 2010 inversion (BearSSL), AND depth 4, 5 ANDs.
  void Inv6Layer2() {
    TopLinear();
    SboxMiddleIn();
    Xor(W::t25, W::t21, W::t22);
    e_.And(W::t26, W::t21, W::t23);
  }
  void Inv6Layer3() {
    Xor(W::t27, W::t24, W::t26);
    Xor(W::t30, W::t23, W::t24);
    Xor(W::t31, W::t22, W::t26);
    e_.And(W::t28, W::t25, W::t27);
    e_.And(W::t32, W::t31, W::t30);
  }
  void Inv6Layer4() {
    Xor(W::t29, W::t28, W::t22);
    Xor(W::t33, W::t32, W::t24);
    Xor(W::t34, W::t23, W::t33);
    Xor(W::t35, W::t27, W::t33);
    e_.And(W::t36, W::t24, W::t35);
  }
  void Inv6Layer5() {
    Xor(W::t37, W::t36, W::t34);
    Xor(W::t38, W::t27, W::t36);
    e_.And(W::t39, W::t29, W::t38);
  }
  void Inv6Finish() {
    Xor(W::t40, W::t25, W::t39);
    SboxOutputLayer(W::t29, W::t33, W::t37, W::t40);
  }

  // The 18 output ANDs (the inverse in GF(2^4) times the y's).
  KMPC_INLINE void SboxOutputLayer(int t29, int t33, int t37, int t40) {
    TopLinear();
    Xor(W::t41, t40, t37);
    Xor(W::t42, t29, t33);
    Xor(W::t43, t29, t40);
    Xor(W::t44, t33, t37);
    Xor(W::t45, W::t42, W::t41);
    e_.And(W::z0, W::t44, W::y15);
    e_.And(W::z1, t37, W::y6);
    e_.And(W::z2, t33, X(7));
    e_.And(W::z3, W::t43, W::y16);
    e_.And(W::z4, t40, W::y1);
    e_.And(W::z5, t29, W::y7);
    e_.And(W::z6, W::t42, W::y11);
    e_.And(W::z7, W::t45, W::y17);
    e_.And(W::z8, W::t41, W::y10);
    e_.And(W::z9, W::t44, W::y12);
    e_.And(W::z10, t37, W::y3);
    e_.And(W::z11, t33, W::y4);
    e_.And(W::z12, W::t43, W::y13);
    e_.And(W::z13, t40, W::y5);
    e_.And(W::z14, t29, W::y2);
    e_.And(W::z15, W::t42, W::y9);
    e_.And(W::z16, W::t45, W::y14);
    e_.And(W::z17, W::t41, W::y8);
  }

  // Bottom linear transformation (includes the affine constant 0x63 as
  // the four XNORs).
  KMPC_INLINE void SboxBottom() {
    Xor(W::t46, W::z15, W::z16);
    Xor(W::t47, W::z10, W::z11);
    Xor(W::t48, W::z5, W::z13);
    Xor(W::t49, W::z9, W::z10);
    Xor(W::t50, W::z2, W::z12);
    Xor(W::t51, W::z2, W::z5);
    Xor(W::t52, W::z7, W::z8);
    Xor(W::t53, W::z0, W::z3);
    Xor(W::t54, W::z6, W::z7);
    Xor(W::t55, W::z16, W::z17);
    Xor(W::t56, W::z12, W::t48);
    Xor(W::t57, W::t50, W::t53);
    Xor(W::t58, W::z4, W::t46);
    Xor(W::t59, W::z3, W::t54);
    Xor(W::t60, W::t46, W::t57);
    Xor(W::t61, W::z14, W::t57);
    Xor(W::t62, W::t52, W::t58);
    Xor(W::t63, W::t49, W::t58);
    Xor(W::t64, W::z4, W::t59);
    Xor(W::t65, W::t61, W::t62);
    Xor(W::t66, W::z1, W::t63);
    Xor(S(0), W::t59, W::t63);
    Xnor(S(6), W::t56, W::t62);
    Xnor(S(7), W::t48, W::t60);
    Xor(W::t67, W::t64, W::t65);
    Xor(S(3), W::t53, W::t66);
    Xor(S(4), W::t51, W::t66);
    Xor(S(5), W::t47, W::t65);
    Xnor(S(1), W::t64, S(3));
    Xnor(S(2), W::t55, W::t67);
  }

  // ShiftRows then MixColumns (FIPS-197 5.1.2, 5.1.3) from kOut into kSt:
  // out_r = 2*(a_r ^ a_{r+1}) ^ a_{r+1} ^ a_{r+2} ^ a_{r+3}, where
  // multiplication by 2 (xtime) moves bit j to j+1 and folds bit 7 into
  // bits 0, 1, 3, 4 (x^8 = x^4 + x^3 + x + 1).
  KMPC_INLINE void ShiftRowsMixColumns() {
    for (int c = 0; c < E::kComps; ++c) {
      V16 d[8], rest[8];
      for (int j = 0; j < 8; ++j) {
        const V16 a = ShiftRowsV(Load16(e_.P(c, W::kOut + j)));
        const V16 a1 = RotRow1(a);
        d[j] = a ^ a1;
        // a_{r+1} ^ a_{r+2} ^ a_{r+3} = a1 ^ rot2(a ^ a1)
        rest[j] = a1 ^ RotRow2(d[j]);
      }
      for (int j = 0; j < 8; ++j) {
        V16 x = (j == 0) ? d[7] : d[j - 1];
        if (j == 1 || j == 3 || j == 4) x ^= d[7];
        Store16(e_.P(c, W::kSt + j), x ^ rest[j]);
      }
    }
  }

  KMPC_INLINE void ShiftRowsOnly() {
    for (int c = 0; c < E::kComps; ++c) {
      for (int j = 0; j < 8; ++j) {
        Store16(e_.P(c, W::kSt + j), ShiftRowsV(Load16(e_.P(c, W::kOut + j))));
      }
    }
  }

  // --- The AND-depth-3 S-box (tower field GF((2^4)^2), 9 | 24 | 18 ANDs),
  // generated and checked on all 256 inputs by tools/sbox3_gen.py. Its
  // layers' outputs reuse the depth-4 circuit's wire ids (t2.., t21..m35,
  // z0..), laid out as one region per layer (kernel_impl.inc), and its
  // tile temporaries the ids from y1 on.
  static constexpr int T3(int i) { return W::y1 + i; }
  KMPC_INLINE void Copy(int d, int a) {
    for (int c = 0; c < E::kComps; ++c) Store16(e_.P(c, d), Load16(e_.P(c, a)));
  }
  KMPC_INLINE void Xnor1(int d, int a) {
    Copy(d, a);
    e_.XorOnes(d);
  }
#include "aes/sbox3.inc"
  static_assert(W::y1 + kSbox3Temps <= W::kTempEnd, "sbox3 temporaries");
  static_assert(W::t21 + 24 == W::z0 && W::t2 + 9 == W::t21,
                "sbox3 layer wires are consecutive");

  E& e_;
  const int nr_;
  const SboxCircuit circuit_;
  const int layers_;
};

}  // namespace kmpc::aes::KMPC_AES_ARCH
