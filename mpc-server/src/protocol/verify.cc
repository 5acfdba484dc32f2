#include "protocol/verify.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "absl/strings/cord.h"
#include "protocol/gf128.h"
#include "protocol/prf.h"
#include "protocol/rep3.h"
#include "share/replicated.h"

namespace kmpc::protocol {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) { Reset(); }
void Sha256::Reset() {
  ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
}
Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }
void Sha256::Update(absl::Span<const uint8_t> b) {
  if (ok_ && !b.empty()) ok_ = EVP_DigestUpdate(ctx_, b.data(), b.size()) == 1;
}
absl::Status Sha256::Final(std::array<uint8_t, 32>& out) {
  unsigned int len = 0;
  if (!ok_ || EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != 32) {
    return absl::InternalError("SHA-256 failed");
  }
  return absl::OkStatus();
}

bool IsIntegrityFailure(const absl::Status& st) {
  return st.code() == absl::StatusCode::kDataLoss &&
         st.GetPayload(kIntegrityPayload).has_value();
}

namespace {

constexpr double kStatBits = 40.0;

double Log2Binom(double n, double k) {
  return (std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1)) /
         std::log(2.0);
}

// log2 of max_j binom(N, j) / binom(N*B + C, j*B). Its logarithm is convex
// in j (the ratio of consecutive terms grows with j for B >= 2), so the
// maximum is at j = 1 or j = N; small N are scanned whole all the same.
double LogWin(double n, int b, double c) {
  const double m = n * b + c;
  auto term = [&](double j) { return Log2Binom(n, j) - Log2Binom(m, j * b); };
  double worst = std::max(term(1), term(n));
  if (n <= 256) {
    for (double j = 2; j < n; ++j) worst = std::max(worst, term(j));
  }
  return worst;
}

}  // namespace

BucketParams ChooseBuckets(size_t n_words) {
  static std::mutex mu;
  static std::map<size_t, BucketParams> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(n_words); it != cache.end()) return it->second;
  const double n = static_cast<double>(std::max<size_t>(n_words, 1));
  constexpr size_t kMaxC = 1 << 16;
  BucketParams best;
  double best_cost = 0;
  for (int b = 2; b <= 64; ++b) {
    if (best.b != 0 && n * b >= best_cost) break;
    // A B that fails even with the most opened items cannot do.
    if (LogWin(n, b, static_cast<double>(kMaxC)) > -kStatBits) continue;
    // The smallest C (the bound falls as C grows): binary search.
    size_t lo = 1, hi = kMaxC;
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (LogWin(n, b, static_cast<double>(mid)) <= -kStatBits) hi = mid;
      else lo = mid + 1;
    }
    const double cost = n * b + static_cast<double>(lo);
    if (best.b == 0 || cost < best_cost) {
      best = {b, lo};
      best_cost = cost;
    }
  }
  if (best.b == 0) best = {64, kMaxC};  // unreachable for n >= 1
  if (cache.size() < 4096) cache[n_words] = best;
  return best;
}

namespace {

// Wipes v over its whole capacity (the elements past size() may hold an
// earlier, larger use's data) and frees it.
template <class T>
void WipeAndFree(std::vector<T>& v) {
  v.resize(v.capacity());
  share::Wipe(v.data(), v.size() * sizeof(T));
  std::vector<T>().swap(v);
}

// Makes room for n elements in v. A reallocation (capacity doubled, as
// insert would) copies into a fresh buffer and wipes the old one, so the
// shares it held are not left behind in freed memory.
template <class T>
void Reserve(std::vector<T>& v, size_t n) {
  if (n <= v.capacity()) return;
  std::vector<T> bigger;
  bigger.reserve(std::max(n, 2 * v.capacity()));
  bigger.assign(v.begin(), v.end());
  WipeAndFree(v);
  v.swap(bigger);
}

template <class T, size_t N>
size_t CapacityBytes(const std::array<std::vector<T>, N>& vs) {
  size_t b = 0;
  for (const auto& v : vs) b += v.capacity() * sizeof(T);
  return b;
}

}  // namespace

MulLog::~MulLog() {
  Clear();
  FreeAll();
}

void MulLog::FreeAll() {
  for (auto& v : and_) WipeAndFree(v);
  for (auto& v : gf_) WipeAndFree(v);
  for (auto& v : tri_) WipeAndFree(v);
  for (auto& v : open_) WipeAndFree(v);
  WipeAndFree(perm_);  // public (from the revealed coin): freed all the same
  WipeAndFree(rnd_);
}

size_t MulLog::retained_bytes() const {
  return CapacityBytes(and_) + CapacityBytes(gf_) + CapacityBytes(tri_) +
         CapacityBytes(open_) + perm_.capacity() * sizeof(uint32_t) +
         rnd_.capacity() * sizeof(uint64_t);
}

void MulLog::ReleaseExcess() {
  if (retained_bytes() > kMaxRetainedBytes) FreeAll();
}

size_t MulLog::AddAnd(const uint64_t* x0, const uint64_t* x1,
                      const uint64_t* y0, const uint64_t* y1,
                      const uint64_t* z0, size_t n) {
  const size_t at = and_[0].size();
  for (auto& v : and_) Reserve(v, at + n);
  const uint64_t* src[5] = {x0, x1, y0, y1, z0};
  for (int k = 0; k < 5; ++k) and_[k].insert(and_[k].end(), src[k], src[k] + n);
  and_[5].resize(at + n);
  return at;
}

void MulLog::SetAndZ1(size_t at, const uint64_t* z1, size_t n) {
  std::memcpy(and_[5].data() + at, z1, 8 * n);
}

void MulLog::AddGf(const uint8_t* x0, const uint8_t* x1, const uint8_t* y0,
                   const uint8_t* y1, const uint8_t* z0, const uint8_t* z1,
                   size_t n) {
  const uint8_t* src[6] = {x0, x1, y0, y1, z0, z1};
  for (auto& v : gf_) Reserve(v, v.size() + 16 * n);
  for (int k = 0; k < 6; ++k) gf_[k].insert(gf_[k].end(), src[k], src[k] + 16 * n);
}

void MulLog::AddOpened(absl::Span<const uint8_t> v) {
  opened_.Update(v);
}

void MulLog::Clear() {
  for (auto& v : and_) {
    share::Wipe(v.data(), 8 * v.size());
    v.clear();
  }
  for (auto& v : gf_) {
    share::Wipe(v.data(), v.size());
    v.clear();
  }
  opened_.Reset();
}

namespace {

// Detaches the context's log while the checks run their own rounds.
class Unlogged {
 public:
  explicit Unlogged(Rep3& ctx) : ctx_(ctx), saved_(ctx.log()) { ctx.set_log(nullptr); }
  ~Unlogged() { ctx_.set_log(saved_); }

 private:
  Rep3& ctx_;
  MulLog* saved_;
};

template <class T>
void WipeAll(std::initializer_list<std::vector<T>*> vs) {
  for (auto* v : vs) share::Wipe(v->data(), v->size() * sizeof(T));
}

// Hashes of the zero tests: u = v_i ^ v_{i+1} (sent to party i-1) and v_i
// (compared with what party i+1 sends).
struct ZeroHashes {
  Sha256 u, v;
  void Add(const uint8_t* v0, const uint8_t* v1, size_t n) {
    uint8_t buf[256];
    for (size_t off = 0; off < n; off += sizeof buf) {
      const size_t m = std::min(sizeof buf, n - off);
      for (size_t i = 0; i < m; ++i) buf[i] = v0[off + i] ^ v1[off + i];
      u.Update(absl::MakeConstSpan(buf, m));
    }
    v.Update(absl::MakeConstSpan(v0, n));
    share::Wipe(buf, sizeof buf);
  }
};

// The final round: (H(u), H(opened)) to party i-1; compare what party i+1
// sends with (H(v_i), H(opened)).
absl::Status Compare(Rep3& ctx, ZeroHashes* z, Sha256& opened, bool local_ok) {
  std::array<uint8_t, 32> hu{}, hv{}, ho{};
  absl::Status st = opened.Final(ho);
  if (st.ok() && z != nullptr) st = z->u.Final(hu);
  if (st.ok() && z != nullptr) st = z->v.Final(hv);
  if (!st.ok()) return st;
  uint8_t out[64], in[64];
  std::memcpy(out, hu.data(), 32);
  std::memcpy(out + 32, ho.data(), 32);
  st = ctx.channel().Exchange(absl::MakeConstSpan(out, 64), absl::MakeSpan(in, 64));
  if (!st.ok()) return st;
  const bool same = CRYPTO_memcmp(in, hv.data(), 32) == 0 &&
                    CRYPTO_memcmp(in + 32, ho.data(), 32) == 0;
  if (!same || !local_ok) {
    absl::Status bad = absl::DataLossError(
        "MPC integrity check failed: a server deviated from the protocol; "
        "batch aborted, nothing released");
    bad.SetPayload(kIntegrityPayload, absl::Cord("1"));
    return bad;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Verifier::CompareOpened(Rep3& ctx, MulLog& log) {
  Unlogged detach(ctx);
  absl::Status st = Compare(ctx, nullptr, log.opened_, true);
  log.Clear();
  return st;
}

absl::Status Verifier::Verify(Rep3& ctx, MulLog& log) {
  Unlogged detach(ctx);
  const int me = ctx.party();
  const bool pub0 = share::HoldsPublicIn(me, 0), pub1 = share::HoldsPublicIn(me, 1);
  const size_t g = log.gf_products();
  // Items of sw consecutive words (gates and triples alike): the largest
  // sw whose item count keeps the smallest bucket size, so that large
  // batches walk memory in runs instead of word by word.
  const size_t nw = log.and_words();
  size_t sw = 1;
  if (nw > 0) {
    const int b1 = ChooseBuckets(nw).b;
    for (size_t cand = 2; cand <= 16; cand *= 2) {
      if (nw % cand != 0 || ChooseBuckets(nw / cand).b > std::max(b1, 4)) break;
      sw = cand;
    }
  }
  const size_t n = nw / sw;  // gate items
  const BucketParams bp = n > 0 ? ChooseBuckets(n) : BucketParams{};
  const size_t ti = n > 0 ? n * bp.b + bp.c : 0;  // triple items
  const size_t t = ti * sw;                        // triple words

  // Round 1: AND triples (a, b, a&b + E), a and b from the PRSS.
  // Buffers live in the log and are reused batch after batch (no page
  // faults on fresh allocations); every one is wiped before it returns.
  auto& [a0, a1, b0, b1, c0, c1] = log.tri_;
  for (auto* v : {&a0, &a1, &b0, &b1, &c0, &c1}) v->resize(t);
  absl::Status st;
  if (t > 0) {
    ctx.prss().RandomShares(reinterpret_cast<uint8_t*>(a0.data()),
                            reinterpret_cast<uint8_t*>(a1.data()), 8 * t);
    ctx.prss().RandomShares(reinterpret_cast<uint8_t*>(b0.data()),
                            reinterpret_cast<uint8_t*>(b1.data()), 8 * t);
    st = ctx.And(a0, a1, b0, b1, absl::MakeSpan(c0), absl::MakeSpan(c1));
  }
  // Round 2: GF(2^128) triples.
  std::vector<uint8_t> ga0(16 * g), ga1(16 * g), gb0(16 * g), gb1(16 * g),
      gc0(16 * g), gc1(16 * g);
  if (st.ok() && g > 0) {
    ctx.prss().RandomShares(ga0.data(), ga1.data(), 16 * g);
    ctx.prss().RandomShares(gb0.data(), gb1.data(), 16 * g);
    st = ctx.GfMul(ga0, ga1, gb0, gb1, absl::MakeSpan(gc0), absl::MakeSpan(gc1));
  }
  // Round 3: the coins (permutation seed, GF challenge), drawn after every
  // product and triple is committed.
  uint8_t coin0[32], coin1[32], coin[32];
  if (st.ok()) {
    ctx.prss().RandomShares(coin0, coin1, 32);
    st = ctx.Reveal(absl::MakeConstSpan(coin0, 32), absl::MakeConstSpan(coin1, 32),
                    absl::MakeSpan(coin, 32));
    log.opened_.Update(absl::MakeConstSpan(coin, 32));
  }
  auto wipe = [&] {
    WipeAll<uint64_t>({&a0, &a1, &b0, &b1, &c0, &c1});
    WipeAll<uint8_t>({&ga0, &ga1, &gb0, &gb1, &gc0, &gc1});
    share::Wipe(coin0, 32);
    share::Wipe(coin1, 32);
    log.Clear();
  };
  if (!st.ok()) {
    wipe();
    return st;
  }
  const uint8_t* gf_t = coin + 16;

  // The permutation of the triple words (Fisher-Yates, PRF(seed)).
  std::vector<uint32_t>& perm = log.perm_;
  perm.resize(ti);
  for (size_t i = 0; i < ti; ++i) perm[i] = static_cast<uint32_t>(i);
  if (ti > 1) {
    Prf prf(coin);
    std::vector<uint64_t>& rnd = log.rnd_;
    rnd.resize(2 * ((ti + 1) / 2));
    prf.Fill(0, rnd.size() / 2, reinterpret_cast<uint8_t*>(rnd.data()));
    for (size_t i = ti - 1; i > 0; --i) {
      const size_t j = static_cast<size_t>(
          (static_cast<unsigned __int128>(rnd[i]) * (i + 1)) >> 64);
      std::swap(perm[i], perm[j]);
    }
  }

  // Round 4: every opening in one reveal. Layout (64-bit words): C opened
  // triples (a, b, c); per bucket k, B-1 pairs (rho, sigma) of its first
  // triple against the others; per gate word k, (rho, sigma) against its
  // bucket's first triple; then per GF product (rho, sigma), 32 bytes.
  const size_t nb1 = n * (bp.b > 0 ? bp.b - 1 : 0);
  const size_t words = (3 * bp.c * (t > 0) + 2 * nb1 + 2 * n) * sw;
  auto& [o0, o1, open] = log.open_;
  for (auto* v : {&o0, &o1, &open}) v->resize(words + 4 * g);
  const auto& L = log.and_;
  // Word q of triple item perm[i].
  auto tw = [&](size_t i) { return size_t{perm[i]} * sw; };
  auto first = [&](size_t k) { return tw(bp.c + k * bp.b); };
  size_t w = 0;
  if (t > 0) {
    for (size_t i = 0; i < bp.c; ++i) {
      const size_t p = tw(i);
      for (size_t q = 0; q < sw; ++q, w += 3) {
        o0[w] = a0[p + q], o1[w] = a1[p + q];
        o0[w + 1] = b0[p + q], o1[w + 1] = b1[p + q];
        o0[w + 2] = c0[p + q], o1[w + 2] = c1[p + q];
      }
    }
    for (size_t k = 0; k < n; ++k) {
      const size_t f = first(k);
      for (int m = 1; m < bp.b; ++m) {
        const size_t o = tw(bp.c + k * bp.b + m);
        for (size_t q = 0; q < sw; ++q, w += 2) {
          o0[w] = a0[f + q] ^ a0[o + q], o1[w] = a1[f + q] ^ a1[o + q];
          o0[w + 1] = b0[f + q] ^ b0[o + q], o1[w + 1] = b1[f + q] ^ b1[o + q];
        }
      }
    }
    for (size_t k = 0; k < n; ++k) {
      const size_t f = first(k), x = k * sw;
      for (size_t q = 0; q < sw; ++q, w += 2) {
        o0[w] = L[0][x + q] ^ a0[f + q], o1[w] = L[1][x + q] ^ a1[f + q];
        o0[w + 1] = L[2][x + q] ^ b0[f + q], o1[w + 1] = L[3][x + q] ^ b1[f + q];
      }
    }
  }
  uint8_t* go0 = reinterpret_cast<uint8_t*>(o0.data() + words);
  uint8_t* go1 = reinterpret_cast<uint8_t*>(o1.data() + words);
  const auto& G = log.gf_;
  for (size_t i = 0; i < g; ++i) {
    uint8_t* r0 = go0 + 32 * i;
    uint8_t* r1 = go1 + 32 * i;
    GfMul(G[0].data() + 16 * i, gf_t, r0);
    GfMul(G[1].data() + 16 * i, gf_t, r1);
    for (int q = 0; q < 16; ++q) {
      r0[q] ^= ga0[16 * i + q];
      r1[q] ^= ga1[16 * i + q];
      r0[16 + q] = G[2][16 * i + q] ^ gb0[16 * i + q];
      r1[16 + q] = G[3][16 * i + q] ^ gb1[16 * i + q];
    }
  }
  auto bytes = [](std::vector<uint64_t>& v) {
    return absl::MakeSpan(reinterpret_cast<uint8_t*>(v.data()), 8 * v.size());
  };
  st = ctx.Reveal(bytes(o0), bytes(o1), bytes(open));
  WipeAll<uint64_t>({&o0, &o1});
  if (!st.ok()) {
    wipe();
    return st;
  }
  log.opened_.Update(bytes(open));

  // The zero tests, in the order of the openings.
  bool local_ok = true;
  ZeroHashes z;
  auto check = [&](uint64_t rho, uint64_t sigma, uint64_t x0z, uint64_t x1z,
                   uint64_t c0v, uint64_t c1v, uint64_t a0v, uint64_t a1v,
                   uint64_t b0v, uint64_t b1v, uint64_t* v) {
    v[0] = x0z ^ c0v ^ (sigma & a0v) ^ (rho & b0v) ^ (pub0 ? rho & sigma : 0);
    v[1] = x1z ^ c1v ^ (sigma & a1v) ^ (rho & b1v) ^ (pub1 ? rho & sigma : 0);
  };
  {
    constexpr size_t kBuf = 512;
    uint64_t v0[kBuf], v1[kBuf];
    size_t nv = 0;
    auto flush = [&] {
      z.Add(reinterpret_cast<const uint8_t*>(v0), reinterpret_cast<const uint8_t*>(v1), 8 * nv);
      nv = 0;
    };
    auto push = [&](const uint64_t v[2]) {
      v0[nv] = v[0], v1[nv] = v[1];
      if (++nv == kBuf) flush();
    };
    w = 0;
    if (t > 0) {
      for (size_t i = 0; i < bp.c * sw; ++i, w += 3) {
        if ((open[w] & open[w + 1]) != open[w + 2]) local_ok = false;
      }
      uint64_t v[2];
      for (size_t k = 0; k < n; ++k) {
        const size_t f = first(k);
        for (int m = 1; m < bp.b; ++m) {
          const size_t o = tw(bp.c + k * bp.b + m);
          for (size_t q = 0; q < sw; ++q, w += 2) {
            check(open[w], open[w + 1], c0[f + q], c1[f + q], c0[o + q], c1[o + q],
                  a0[o + q], a1[o + q], b0[o + q], b1[o + q], v);
            push(v);
          }
        }
      }
      for (size_t k = 0; k < n; ++k) {
        const size_t f = first(k), x = k * sw;
        for (size_t q = 0; q < sw; ++q, w += 2) {
          check(open[w], open[w + 1], L[4][x + q], L[5][x + q], c0[f + q], c1[f + q],
                a0[f + q], a1[f + q], b0[f + q], b1[f + q], v);
          push(v);
        }
      }
      flush();
    }
    share::Wipe(v0, sizeof v0);
    share::Wipe(v1, sizeof v1);
  }
  {
    const uint8_t* gopen = reinterpret_cast<const uint8_t*>(open.data() + words);
    uint8_t v0[16], v1[16], tmp[16];
    for (size_t i = 0; i < g; ++i) {
      const uint8_t* rho = gopen + 32 * i;
      const uint8_t* sigma = rho + 16;
      uint8_t rs[16];
      GfMul(rho, sigma, rs);
      for (int c = 0; c < 2; ++c) {
        uint8_t* v = c == 0 ? v0 : v1;
        const auto& ga = c == 0 ? ga0 : ga1;
        const auto& gb = c == 0 ? gb0 : gb1;
        const auto& gc = c == 0 ? gc0 : gc1;
        GfMul(G[4 + c].data() + 16 * i, gf_t, v);
        for (int q = 0; q < 16; ++q) v[q] ^= gc[16 * i + q];
        GfMul(sigma, ga.data() + 16 * i, tmp);
        for (int q = 0; q < 16; ++q) v[q] ^= tmp[q];
        GfMul(rho, gb.data() + 16 * i, tmp);
        for (int q = 0; q < 16; ++q) v[q] ^= tmp[q];
        if (share::HoldsPublicIn(me, c))
          for (int q = 0; q < 16; ++q) v[q] ^= rs[q];
      }
      z.Add(v0, v1, 16);
    }
    share::Wipe(v0, 16);
    share::Wipe(v1, 16);
    share::Wipe(tmp, 16);
  }
  WipeAll<uint64_t>({&open});

  // Round 5: compare.
  st = Compare(ctx, &z, log.opened_, local_ok);
  wipe();
  return st;
}

}  // namespace kmpc::protocol
