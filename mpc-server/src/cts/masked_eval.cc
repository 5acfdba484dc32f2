// EvaluateMaskedAll (masked.h): the run of compiled masked programs on one
// party's replicated shares.
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include <openssl/crypto.h>

#include "cts/masked.h"
#include "cts/masked_run.h"
#include "share/replicated.h"

namespace kmpc::cts {
namespace {

using masked_run::Buffers;
using masked_run::JobState;
using masked_run::kViewWords;
using masked_run::LambdaRef;
using masked_run::Message;
using Mp = MaskedProgram;

// The share of a masked gate's value, component c into out[c][0 .. wn):
// XOR over its terms of c_S(m) AND lambda_S (masked.h), the monomials of
// the leaves' m built up once per gate. Words per wire known at compile
// time (WN != 0): the lane words innermost, so each step is a vector op.
template <size_t WN>
void GateShare(const Mp& p, const Mp::Gate& g, JobState& j, std::array<bool, 2> pub,
               std::array<uint64_t*, 2> out) {
  constexpr size_t kW = WN ? WN : 8;  // run-time widths: 8 words at a time
  const size_t wn = WN ? WN : j.wn;
  const Mp::Form& f = p.forms[g.form];
  const uint32_t* leaves = p.leaves.data() + g.leaf_at;
  const Mp::Term* terms = p.terms.data() + f.term_at;
  const uint32_t* products = p.gate_products.data() + g.product_at;
  for (size_t w0 = 0; w0 < wn; w0 += kW) {
    const size_t nw = std::min(kW, wn - w0);
    uint64_t pr[64][kW];
    for (size_t w = 0; w < nw; ++w) pr[0][w] = ~uint64_t{0};
    for (uint64_t rs = f.need_r & ~uint64_t{1}; rs != 0; rs &= rs - 1) {
      const uint32_t r = __builtin_ctzll(rs);
      const uint64_t* mv = j.template M<WN>(leaves[__builtin_ctz(r)]) + w0;
      const uint64_t* prev = pr[r & (r - 1)];
      for (size_t w = 0; w < nw; ++w) pr[r][w] = prev[w] & mv[w];
    }
    uint64_t a0[kW] = {}, a1[kW] = {}, c[kW];
    for (size_t t = 0; t < f.terms; ++t) {
      const Mp::Term& tm = terms[t];
      for (size_t w = 0; w < nw; ++w) c[w] = 0;
      for (uint64_t rs = tm.r; rs != 0; rs &= rs - 1) {
        const uint64_t* q = pr[__builtin_ctzll(rs)];
        for (size_t w = 0; w < nw; ++w) c[w] ^= q[w];
      }
      if (tm.s == 0) {
        for (size_t w = 0; w < nw; ++w) {
          a0[w] ^= pub[0] ? c[w] : 0;
          a1[w] ^= pub[1] ? c[w] : 0;
        }
        continue;
      }
      const uint32_t ref = LambdaRef(tm, leaves, products);
      const uint64_t* l0 = j.template R<WN>(ref, 0) + w0;
      const uint64_t* l1 = j.template R<WN>(ref, 1) + w0;
      for (size_t w = 0; w < nw; ++w) {
        a0[w] ^= c[w] & l0[w];
        a1[w] ^= c[w] & l1[w];
      }
    }
    for (size_t w = 0; w < nw; ++w) {
      out[0][w0 + w] = a0[w];
      out[1][w0 + w] = a1[w];
    }
  }
}

// XORs (dst, a, b) of all three words of each slot, or (WORDS = 2) of the
// lambdas only (s_0, s_1).
template <size_t WN, int WORDS>
void Xors(const std::vector<uint32_t>& xs, JobState& j) {
  const size_t wn = WN ? WN : j.wn, n = WORDS * wn, off = (3 - WORDS) * wn;
  for (size_t k = 0; k < xs.size(); k += 3) {
    uint64_t* d = j.template M<WN>(xs[k]) + off;
    const uint64_t* a = j.template M<WN>(xs[k + 1]) + off;
    const uint64_t* b = j.template M<WN>(xs[k + 2]) + off;
    for (size_t w = 0; w < n; ++w) d[w] = a[w] ^ b[w];
  }
}

// A one-lane job's walk is masked_lane0.cc's (masked_run.h JobState).
bool OneLane(const JobState& j) { return j.live == 1 && !j.job->word_walk; }

// A job of fewer than 64 live lanes (one word per wire) sends only its
// lanes' bits of each word, back to back from a word of its own (as
// cts::EvaluateAll packs its last words): one bit per gate and lane on the
// ring. AND and XOR are bitwise, so the message computed on packed words
// is the packed message. A one-lane job on masked_lane0.cc's walk
// (direct) writes and reads its bits in the packed words itself.
struct Packing {
  std::vector<size_t> at, n, pat;  // each job's first word unpacked, words, first packed
  std::vector<int> live;
  std::vector<bool> direct;
  size_t words = 0;
  bool any = false;  // some job packs
};

// The words one message carries, and where each job's start: unpacked
// (pa.at, po.at) and packed.
struct Layout {
  size_t ands = 0, opens = 0;
  Packing pa, po;
};

Packing PackPlan(std::vector<size_t> at, size_t total, const std::vector<JobState>& js) {
  Packing p;
  p.at = std::move(at);
  for (size_t k = 0; k < js.size(); ++k) {
    const size_t n = (k + 1 < js.size() ? p.at[k + 1] : total) - p.at[k];
    const int live = js[k].live;
    p.n.push_back(n);
    p.pat.push_back(p.words);
    p.live.push_back(live);
    p.direct.push_back(OneLane(js[k]));
    p.words += live == 64 ? n : (n * live + 63) / 64;
    p.any = p.any || (live < 64 && n != 0);
  }
  return p;
}

Layout Plan(std::vector<JobState>& js, size_t r) {
  Layout l;
  std::vector<size_t> and_at, open_at;
  for (JobState& j : js) {
    and_at.push_back(l.ands);
    open_at.push_back(l.opens);
    if (r >= j.job->program->round.size()) continue;
    const Mp::Round& rd = j.job->program->round[r];
    l.ands += (rd.products.size() / 3 + rd.rep3.size() / 4) * j.wn;
    l.opens += rd.opens.size() * j.wn;
  }
  l.pa = PackPlan(std::move(and_at), l.ands, js);
  l.po = PackPlan(std::move(open_at), l.opens, js);
  return l;
}

// Calls f with the words per wire as a compile-time constant for jobs of up
// to 256 lanes (a busy KDC's batches), 0 (run time) past that.
template <typename F>
void ByWn(size_t wn, F&& f) {
  switch (wn) {
    case 1: return f(std::integral_constant<size_t, 1>());
    case 2: return f(std::integral_constant<size_t, 2>());
    case 3: return f(std::integral_constant<size_t, 3>());
    case 4: return f(std::integral_constant<size_t, 4>());
    default: return f(std::integral_constant<size_t, 0>());
  }
}

// Before message r: the masks drawn and the masked XORs' lambdas that it
// is the first to read.
template <size_t WN>
void Lambdas(JobState& j, const Mp::Round& rd, protocol::Prss& prss, std::vector<uint64_t>& r0,
             std::vector<uint64_t>& r1) {
  const size_t wn = WN ? WN : (WN ? WN : j.wn), n = rd.draws.size() * wn;
  if (n != 0) {
    prss.RandomShares(reinterpret_cast<uint8_t*>(r0.data()), reinterpret_cast<uint8_t*>(r1.data()),
                      8 * n);
    for (size_t i = 0; i < rd.draws.size(); ++i) {
      uint64_t* c0 = j.template C<WN>(rd.draws[i], 0);
      uint64_t* c1 = j.template C<WN>(rd.draws[i], 1);
      for (size_t w = 0; w < wn; ++w) {
        c0[w] = r0[i * wn + w];
        c1[w] = r1[i * wn + w];
      }
    }
  }
  Xors<WN, 2>(rd.lambda_xors, j);
}

// The round's operands and opened shares, job j's part.
template <size_t WN>
void Gather(JobState& j, const Mp::Round& rd, int party, Message& msg, size_t at, size_t oat) {
  const size_t wn = WN ? WN : (WN ? WN : j.wn);
  for (size_t k = 0; k < rd.products.size(); k += 3, at += wn) {
    for (int c = 0; c < 2; ++c) {
      const uint64_t* a = j.template R<WN>(rd.products[k + 1], c);
      const uint64_t* b = j.template R<WN>(rd.products[k + 2], c);
      for (size_t w = 0; w < wn; ++w) {
        msg.x[c][at + w] = a[w];
        msg.y[c][at + w] = b[w];
      }
    }
  }
  for (size_t k = 0; k < rd.rep3.size(); k += 4, at += wn) {
    const uint64_t na = rd.rep3[k + 3] & 1 ? ~uint64_t{0} : 0;
    const uint64_t nb = rd.rep3[k + 3] & 2 ? ~uint64_t{0} : 0;
    for (int c = 0; c < 2; ++c) {
      const bool pub = share::HoldsPublicIn(party, c);
      const uint64_t* a = j.template C<WN>(rd.rep3[k + 1], c);
      const uint64_t* b = j.template C<WN>(rd.rep3[k + 2], c);
      const uint64_t* am = j.template M<WN>(rd.rep3[k + 1]);
      const uint64_t* bm = j.template M<WN>(rd.rep3[k + 2]);
      for (size_t w = 0; w < wn; ++w) {
        msg.x[c][at + w] = a[w] ^ (pub ? am[w] ^ na : 0);
        msg.y[c][at + w] = b[w] ^ (pub ? bm[w] ^ nb : 0);
      }
    }
  }
  const Mp& p = *j.job->program;
  const std::array<bool, 2> pub{share::HoldsPublicIn(party, 0), share::HoldsPublicIn(party, 1)};
  for (size_t k = 0; k < rd.opens.size(); ++k, oat += wn) {
    const Mp::Gate& g = p.gates[rd.opens[k]];
    std::array<uint64_t*, 2> out{msg.o[0].data() + oat, msg.o[1].data() + oat};
    GateShare<WN>(p, g, j, pub, out);
    for (int c = 0; c < 2; ++c) {
      const uint64_t* lam = j.template C<WN>(g.root, c);
      for (size_t w = 0; w < wn; ++w) out[c][w] ^= lam[w];
    }
  }
}

template <size_t WN>
void Scatter(JobState& j, const Mp::Round& rd, int party, const Message& msg, size_t at,
             size_t oat) {
  const size_t wn = WN ? WN : (WN ? WN : j.wn);
  for (size_t k = 0; k < rd.products.size(); k += 3, at += wn) {
    for (int c = 0; c < 2; ++c) {
      uint64_t* d = j.prods.data() + (2 * rd.products[k] + c) * wn;
      for (size_t w = 0; w < wn; ++w) d[w] = msg.z[c][at + w];
    }
  }
  for (size_t k = 0; k < rd.rep3.size(); k += 4, at += wn) {
    std::fill_n(j.template M<WN>(rd.rep3[k]), wn, rd.rep3[k + 3] & 4 ? ~uint64_t{0} : 0);
    for (int c = 0; c < 2; ++c) {
      uint64_t* d = j.template C<WN>(rd.rep3[k], c);
      for (size_t w = 0; w < wn; ++w) d[w] = msg.z[c][at + w];
    }
  }
  const Mp& p = *j.job->program;
  for (size_t k = 0; k < rd.opens.size(); ++k, oat += wn) {
    uint64_t* d = j.template M<WN>(p.gates[rd.opens[k]].root);
    for (size_t w = 0; w < wn; ++w) d[w] = msg.opened[oat + w];
  }
  const std::array<bool, 2> pub{share::HoldsPublicIn(party, 0), share::HoldsPublicIn(party, 1)};
  for (uint32_t g : rd.local) {
    const uint32_t root = p.gates[g].root;
    std::fill_n(j.template M<WN>(root), wn, 0);
    GateShare<WN>(p, p.gates[g], j, pub, {j.template C<WN>(root, 0), j.template C<WN>(root, 1)});
  }
  Xors<WN, 3>(rd.xors, j);
}

void PackWords(const Packing& p, const uint64_t* in, uint64_t* out) {
  for (size_t k = 0; k < p.at.size(); ++k) {
    if (p.direct[k]) continue;
    const uint64_t* src = in + p.at[k];
    uint64_t* dst = out + p.pat[k];
    const int live = p.live[k];
    if (live == 64) {
      for (size_t w = 0; w < p.n[k]; ++w) dst[w] = src[w];
      continue;
    }
    if (live == 1) {  // one login's job: lane 0 of 64 words to a word
      const size_t n = p.n[k];
      for (size_t w0 = 0; w0 < n; w0 += 64) {
        uint64_t acc = 0;
        const size_t m = std::min<size_t>(64, n - w0);
        for (size_t b = 0; b < m; ++b) acc |= (src[w0 + b] & 1) << b;
        dst[w0 / 64] = acc;
      }
      continue;
    }
    std::fill_n(dst, (p.n[k] * live + 63) / 64, 0);
    for (size_t w = 0; w < p.n[k]; ++w) PutBits(dst, w * live, live, src[w]);
  }
}

void UnpackWords(const Packing& p, const uint64_t* in, uint64_t* out) {
  for (size_t k = 0; k < p.at.size(); ++k) {
    if (p.direct[k]) continue;
    const uint64_t* src = in + p.pat[k];
    uint64_t* dst = out + p.at[k];
    const int live = p.live[k];
    if (live == 64) {
      for (size_t w = 0; w < p.n[k]; ++w) dst[w] = src[w];
      continue;
    }
    if (live == 1) {
      for (size_t w = 0; w < p.n[k]; ++w) dst[w] = (src[w / 64] >> (w % 64)) & 1;
      continue;
    }
    for (size_t w = 0; w < p.n[k]; ++w) dst[w] = GetBits(src, w * live, live);
  }
}

// One message: the ANDs' products and the openings, on packed words,
// logged (the packed words: every bit of them is a live lane or zero in
// both operands).
absl::Status Exchange(protocol::Rep3& ctx, std::vector<JobState>& js, const Layout& l,
                      Message& msg) {
  const Packing &pa = l.pa, &po = l.po;
  const size_t n = pa.words, m = po.words;
  std::array<uint64_t*, 2> x{msg.x[0].data(), msg.x[1].data()}, y{msg.y[0].data(), msg.y[1].data()},
      z{msg.z[0].data(), msg.z[1].data()}, o{msg.o[0].data(), msg.o[1].data()};
  uint64_t* opened = msg.opened.data();
  if (pa.any || po.any) {
    for (int c = 0; c < 2; ++c) {
      PackWords(pa, x[c], msg.px[c].data());
      PackWords(pa, y[c], msg.py[c].data());
      PackWords(po, o[c], msg.po[c].data());
      x[c] = msg.px[c].data();
      y[c] = msg.py[c].data();
      z[c] = msg.pz[c].data();
      o[c] = msg.po[c].data();
    }
    opened = msg.popened.data();
  }
  ctx.prss().ZeroShare(reinterpret_cast<uint8_t*>(z[0]), 8 * n);
  for (size_t w = 0; w < n; ++w) z[0][w] ^= (x[0][w] & y[0][w]) ^ (x[0][w] & y[1][w]) ^ (x[1][w] & y[0][w]);
  std::copy_n(z[0], n, msg.send.data());
  std::copy_n(o[1], m, msg.send.data() + n);
  protocol::MulLog* const mlog = ctx.log();
  const size_t v = mlog != nullptr ? kViewWords : 0;
  std::array<uint8_t, 32> view{};
  if (v != 0 && !mlog->deviated()) {
    if (absl::Status st = mlog->OpenedDigest(view); !st.ok()) return st;
  }
  std::memcpy(msg.send.data() + n + m, view.data(), 8 * v);
  absl::Status st = ctx.channel().Exchange(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(msg.send.data()), 8 * (n + m + v)),
      absl::MakeSpan(reinterpret_cast<uint8_t*>(msg.recv.data()), 8 * (n + m + v)));
  if (!st.ok()) return st;
  if (v != 0 && !mlog->deviated() &&
      CRYPTO_memcmp(msg.recv.data() + n + m, view.data(), 8 * v) != 0)
    mlog->MarkDeviated();
  std::copy_n(msg.recv.data(), n, z[1]);
  for (size_t w = 0; w < m; ++w) opened[w] = o[0][w] ^ o[1][w] ^ msg.recv[n + w];
  if (mlog != nullptr) {
    if (n != 0) mlog->SetAndZ1(mlog->AddAnd(x[0], x[1], y[0], y[1], z[0], n), z[1], n);
    if (m != 0) mlog->AddOpened(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(opened), 8 * m));
  }
  if (pa.any || po.any) {
    for (int c = 0; c < 2; ++c) UnpackWords(pa, z[c], msg.z[c].data());
    UnpackWords(po, opened, msg.opened.data());
  }
  return absl::OkStatus();
}

absl::Status Load(absl::Span<const MaskedJob> jobs, protocol::Rep3& ctx,
                  std::vector<JobState>& js, Buffers& bufs) {
  js.resize(jobs.size());
  for (size_t k = 0; k < jobs.size(); ++k) {
    const MaskedJob& jb = jobs[k];
    const Mp& p = *jb.program;
    for (int c = 0; c < 2; ++c) {
      if (jb.in[c].size() != p.inputs * jb.wn || jb.out[c].size() != p.outputs * jb.wn)
        return absl::InvalidArgumentError("cts::EvaluateMaskedAll: wrong input or output size");
    }
    if (p.form_on.size() != 64 * p.forms.size())
      return absl::InvalidArgumentError(
          "cts::EvaluateMaskedAll: a program without its forms' table (FillFormTable)");
    JobState& j = js[k];
    j.job = &jb;
    j.wn = jb.wn;
    j.live = jb.wn == 1 && jb.lanes != 0 && jb.lanes < 64 ? static_cast<int>(jb.lanes) : 64;
    if (OneLane(j)) {
      masked_run::Lane0Load(j, bufs);
      continue;
    }
    bufs.all.push_back(&j.vals);
    bufs.all.push_back(&j.prods);
    j.vals.assign(3 * p.slots * j.wn, 0);
    j.prods.assign(2 * p.products * j.wn, 0);
    std::fill_n(j.M<0>(1), j.wn, ~uint64_t{0});  // slot 1: the constant 1
    for (size_t i = 0; i < p.inputs; ++i) {
      if (p.input_slot[i] == ~uint32_t{0}) continue;
      for (int c = 0; c < 2; ++c)
        std::copy_n(jb.in[c].data() + i * j.wn, j.wn, j.C<0>(p.input_slot[i], c));
    }
    if (!p.round.empty())
      ByWn(j.wn, [&](auto w) { Xors<decltype(w)::value, 3>(p.round[0].xors, j); });
  }
  return absl::OkStatus();
}

// Job k's part of message r: before the exchange its masks, then its
// operands and opened shares; after it, its products and openings.
void Before(JobState& j, size_t r, protocol::Prss& prss, int party, Message& msg,
            const Layout& l, size_t k) {
  const Mp::Round& rd = j.job->program->round[r];
  if (OneLane(j)) {
    masked_run::Lane0Lambdas(j, rd, prss, msg);
    masked_run::Lane0Gather(j, rd, party, msg, l.pa.pat[k], l.po.pat[k]);
    return;
  }
  ByWn(j.wn, [&](auto w) {
    Lambdas<decltype(w)::value>(j, rd, prss, msg.r0, msg.r1);
    Gather<decltype(w)::value>(j, rd, party, msg, l.pa.at[k], l.po.at[k]);
  });
}

void After(JobState& j, size_t r, int party, const Message& msg, const Layout& l, size_t k) {
  const Mp::Round& rd = j.job->program->round[r];
  if (OneLane(j)) return masked_run::Lane0Scatter(j, rd, party, msg, l.pa.pat[k], l.po.pat[k]);
  ByWn(j.wn, [&](auto w) {
    Scatter<decltype(w)::value>(j, rd, party, msg, l.pa.at[k], l.po.at[k]);
  });
}

// This party's output shares (m folded into the component that holds
// public constants).
void Outputs(JobState& j, int party) {
  if (OneLane(j)) return masked_run::Lane0Outputs(j, party);
  const Mp& p = *j.job->program;
  for (int c = 0; c < 2; ++c) {
    const bool pub = share::HoldsPublicIn(party, c);
    for (size_t i = 0; i < p.outputs; ++i) {
      const uint64_t* s = j.C<0>(p.output_slot[i], c);
      const uint64_t* m = j.M<0>(p.output_slot[i]);
      uint64_t* o = j.job->out[c].data() + i * j.wn;
      for (size_t w = 0; w < j.wn; ++w) o[w] = s[w] ^ (pub ? m[w] : 0);
    }
  }
}

}  // namespace

absl::Status EvaluateMaskedAll(absl::Span<const MaskedJob> jobs, protocol::Rep3& ctx,
                               size_t verify_words) {
  std::vector<JobState> js;
  Message msg;
  Buffers bufs;  // wipes js's and msg's buffers before they are freed
  msg.Register(bufs);
  if (absl::Status st = Load(jobs, ctx, js, bufs); !st.ok()) return st;
  size_t rounds = 0;
  for (const MaskedJob& j : jobs) rounds = std::max(rounds, j.program->round.size());
  const int party = ctx.party();
  size_t max_ands = 0, max_opens = 0;
  std::vector<Layout> layouts(rounds);
  for (size_t r = 1; r < rounds; ++r) {
    const Layout& l = layouts[r] = Plan(js, r);
    max_ands = std::max(max_ands, l.ands);
    max_opens = std::max(max_opens, l.opens);
  }
  msg.Fit(max_ands, max_opens);
  size_t max_draws = 0;
  for (const MaskedJob& j : jobs)
    for (const Mp::Round& rd : j.program->round) max_draws = std::max(max_draws, rd.draws.size() * j.wn);
  msg.r0.resize(max_draws);
  msg.r1.resize(max_draws);
  for (size_t r = 1; r < rounds; ++r) {
    const Layout& l = layouts[r];
    for (size_t k = 0; k < js.size(); ++k)
      if (r < js[k].job->program->round.size())
        Before(js[k], r, ctx.prss(), party, msg, l, k);
    if (l.ands + l.opens != 0) {
      if (absl::Status st = Exchange(ctx, js, l, msg); !st.ok()) return st;
    }
    for (size_t k = 0; k < js.size(); ++k)
      if (r < js[k].job->program->round.size())
        After(js[k], r, party, msg, l, k);
    protocol::MulLog* log = ctx.log();
    if (log != nullptr && log->and_words() >= verify_words) {
      if (absl::Status st = protocol::Verifier::Verify(ctx, *log); !st.ok()) return st;
    }
  }
  for (JobState& j : js) Outputs(j, party);
  return absl::OkStatus();
}

}  // namespace kmpc::cts
