// EvaluateMaskedAll (masked.h): the run of compiled masked programs on one
// party's replicated shares.
#include <algorithm>
#include <array>
#include <vector>

#include "cts/masked.h"
#include "share/replicated.h"

namespace kmpc::cts {
namespace {

using Mp = MaskedProgram;

// Wipes every buffer it holds on destruction (they hold shares).
struct Buffers {
  std::vector<std::vector<uint64_t>*> all;
  ~Buffers() {
    for (auto* b : all) share::Wipe(b->data(), 8 * b->capacity());
  }
};

// One job's values: slot s at [3 * s * wn, + 3 * wn) as m, s_0, s_1 (wn
// words each); product q at [2 * q * wn, + 2 * wn) as s_0, s_1.
struct JobState {
  const MaskedJob* job;
  size_t wn;
  int live;
  std::vector<uint64_t> vals, prods;
  uint64_t* m(uint32_t s) { return vals.data() + 3 * s * wn; }
  uint64_t* comp(uint32_t s, int c) { return vals.data() + (3 * s + 1 + c) * wn; }
  // A product operand's component c (masked.h kProductRef).
  const uint64_t* ref(uint32_t r, int c) {
    if (r & Mp::kProductRef) return prods.data() + (2 * (r & ~Mp::kProductRef) + c) * wn;
    return comp(r, c);
  }
};

// The share of a masked gate's value, component c into out[c][0 .. wn).
void GateShare(const Mp& p, const Mp::Gate& g, JobState& j, std::array<bool, 2> pub,
               std::array<uint64_t*, 2> out) {
  const uint32_t* leaves = p.leaves.data() + g.leaf_at;
  const Mp::Term* terms = p.terms.data() + g.term_at;
  std::array<uint64_t, 64> pr;
  for (size_t w = 0; w < j.wn; ++w) {
    pr[0] = ~uint64_t{0};
    for (uint64_t rs = g.need_r & ~uint64_t{1}; rs != 0; rs &= rs - 1) {
      const uint32_t r = __builtin_ctzll(rs);
      pr[r] = pr[r & (r - 1)] & j.m(leaves[__builtin_ctz(r)])[w];
    }
    uint64_t a0 = 0, a1 = 0;
    for (size_t t = 0; t < g.terms; ++t) {
      uint64_t c = 0;
      for (uint64_t rs = terms[t].r; rs != 0; rs &= rs - 1) c ^= pr[__builtin_ctzll(rs)];
      const uint8_t s = terms[t].s;
      if (s == 0) {
        a0 ^= pub[0] ? c : 0;
        a1 ^= pub[1] ? c : 0;
      } else if ((s & (s - 1)) == 0) {
        const uint32_t leaf = leaves[__builtin_ctz(s)];
        a0 ^= c & j.comp(leaf, 0)[w];
        a1 ^= c & j.comp(leaf, 1)[w];
      } else {
        a0 ^= c & j.ref(Mp::kProductRef | terms[t].product, 0)[w];
        a1 ^= c & j.ref(Mp::kProductRef | terms[t].product, 1)[w];
      }
    }
    out[0][w] = a0;
    out[1][w] = a1;
  }
}

void Xors(const std::vector<uint32_t>& xs, JobState& j, int words) {
  const size_t n = words * j.wn;
  for (size_t k = 0; k < xs.size(); k += 3) {
    uint64_t* d = j.m(xs[k]);
    const uint64_t* a = j.m(xs[k + 1]);
    const uint64_t* b = j.m(xs[k + 2]);
    const size_t off = words == 2 ? j.wn : 0;  // lambdas only: s_0, s_1
    for (size_t w = 0; w < n; ++w) d[off + w] = a[off + w] ^ b[off + w];
  }
}

// The words one message carries, and where each job's start.
struct Layout {
  size_t ands = 0, opens = 0;
  std::vector<size_t> and_at, open_at;
};

Layout Plan(std::vector<JobState>& js, size_t r) {
  Layout l;
  for (JobState& j : js) {
    l.and_at.push_back(l.ands);
    l.open_at.push_back(l.opens);
    if (r >= j.job->program->round.size()) continue;
    const Mp::Round& rd = j.job->program->round[r];
    l.ands += (rd.products.size() / 3 + rd.rep3.size() / 4) * j.wn;
    l.opens += rd.opens.size() * j.wn;
  }
  return l;
}

struct Message {
  std::array<std::vector<uint64_t>, 2> x, y, z, o;
  std::vector<uint64_t> send, recv, opened;
  std::vector<uint64_t> r0, r1;  // masks drawn before a message
  // Sized once for the largest message (a reallocation would leave shares
  // behind in freed memory).
  void Fit(size_t ands, size_t opens) {
    for (int c = 0; c < 2; ++c) {
      for (auto* v : {&x[c], &y[c], &z[c]}) v->resize(ands);
      o[c].resize(opens);
    }
    send.resize(ands + opens);
    recv.resize(ands + opens);
    opened.resize(opens);
  }
  void Register(Buffers& b) {
    for (int c = 0; c < 2; ++c)
      for (auto* v : {&x[c], &y[c], &z[c], &o[c]}) b.all.push_back(v);
    for (auto* v : {&send, &recv, &opened, &r0, &r1}) b.all.push_back(v);
  }
};

// Before message r: the masks drawn and the masked XORs' lambdas that it
// is the first to read.
void Lambdas(JobState& j, const Mp::Round& rd, protocol::Prss& prss, std::vector<uint64_t>& r0,
             std::vector<uint64_t>& r1) {
  const size_t wn = j.wn, n = rd.draws.size() * wn;
  if (n != 0) {
    prss.RandomShares(reinterpret_cast<uint8_t*>(r0.data()), reinterpret_cast<uint8_t*>(r1.data()),
                      8 * n);
    for (size_t i = 0; i < rd.draws.size(); ++i) {
      uint64_t* c0 = j.comp(rd.draws[i], 0);
      uint64_t* c1 = j.comp(rd.draws[i], 1);
      for (size_t w = 0; w < wn; ++w) {
        c0[w] = r0[i * wn + w];
        c1[w] = r1[i * wn + w];
      }
    }
  }
  Xors(rd.lambda_xors, j, 2);
}

// The round's operands and opened shares, job j's part.
void Gather(JobState& j, const Mp::Round& rd, int party, Message& msg, size_t at, size_t oat) {
  const size_t wn = j.wn;
  for (size_t k = 0; k < rd.products.size(); k += 3, at += wn) {
    for (int c = 0; c < 2; ++c) {
      const uint64_t* a = j.ref(rd.products[k + 1], c);
      const uint64_t* b = j.ref(rd.products[k + 2], c);
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
      const uint64_t* a = j.comp(rd.rep3[k + 1], c);
      const uint64_t* b = j.comp(rd.rep3[k + 2], c);
      const uint64_t* am = j.m(rd.rep3[k + 1]);
      const uint64_t* bm = j.m(rd.rep3[k + 2]);
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
    GateShare(p, g, j, pub, out);
    for (int c = 0; c < 2; ++c) {
      const uint64_t* lam = j.comp(g.root, c);
      for (size_t w = 0; w < wn; ++w) out[c][w] ^= lam[w];
    }
  }
}

void Scatter(JobState& j, const Mp::Round& rd, int party, const Message& msg, size_t at,
             size_t oat) {
  const size_t wn = j.wn;
  for (size_t k = 0; k < rd.products.size(); k += 3, at += wn) {
    for (int c = 0; c < 2; ++c) {
      uint64_t* d = j.prods.data() + (2 * rd.products[k] + c) * wn;
      for (size_t w = 0; w < wn; ++w) d[w] = msg.z[c][at + w];
    }
  }
  for (size_t k = 0; k < rd.rep3.size(); k += 4, at += wn) {
    std::fill_n(j.m(rd.rep3[k]), wn, rd.rep3[k + 3] & 4 ? ~uint64_t{0} : 0);
    for (int c = 0; c < 2; ++c) {
      uint64_t* d = j.comp(rd.rep3[k], c);
      for (size_t w = 0; w < wn; ++w) d[w] = msg.z[c][at + w];
    }
  }
  const Mp& p = *j.job->program;
  for (size_t k = 0; k < rd.opens.size(); ++k, oat += wn) {
    uint64_t* d = j.m(p.gates[rd.opens[k]].root);
    for (size_t w = 0; w < wn; ++w) d[w] = msg.opened[oat + w];
  }
  const std::array<bool, 2> pub{share::HoldsPublicIn(party, 0), share::HoldsPublicIn(party, 1)};
  for (uint32_t g : rd.local) {
    const uint32_t root = p.gates[g].root;
    std::fill_n(j.m(root), wn, 0);
    GateShare(p, p.gates[g], j, pub, {j.comp(root, 0), j.comp(root, 1)});
  }
  Xors(rd.xors, j, 3);
}

// One message: the ANDs' products and the openings, logged.
absl::Status Exchange(protocol::Rep3& ctx, std::vector<JobState>& js, const Layout& l,
                      Message& msg) {
  const size_t n = l.ands;
  ctx.prss().ZeroShare(reinterpret_cast<uint8_t*>(msg.z[0].data()), 8 * n);
  for (size_t w = 0; w < n; ++w) {
    msg.z[0][w] ^= (msg.x[0][w] & msg.y[0][w]) ^ (msg.x[0][w] & msg.y[1][w]) ^
                   (msg.x[1][w] & msg.y[0][w]);
  }
  std::copy_n(msg.z[0].data(), n, msg.send.data());
  std::copy_n(msg.o[1].data(), l.opens, msg.send.data() + n);
  absl::Status st = ctx.channel().Exchange(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(msg.send.data()), 8 * (n + l.opens)),
      absl::MakeSpan(reinterpret_cast<uint8_t*>(msg.recv.data()), 8 * (n + l.opens)));
  if (!st.ok()) return st;
  std::copy_n(msg.recv.data(), n, msg.z[1].data());
  for (size_t w = 0; w < l.opens; ++w)
    msg.opened[w] = msg.o[0][w] ^ msg.o[1][w] ^ msg.recv[n + w];
  protocol::MulLog* log = ctx.log();
  if (log == nullptr) return absl::OkStatus();
  for (size_t k = 0; k < js.size(); ++k) {
    const size_t end = k + 1 < js.size() ? l.and_at[k + 1] : n, at = l.and_at[k];
    if (end == at) continue;
    const size_t pos = log->AddAnd(msg.x[0].data() + at, msg.x[1].data() + at, msg.y[0].data() + at,
                                   msg.y[1].data() + at, msg.z[0].data() + at, end - at, js[k].live);
    log->SetAndZ1(pos, msg.z[1].data() + at, end - at);
  }
  if (l.opens != 0) {
    log->AddOpened(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(msg.opened.data()),
                                       8 * l.opens));
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
    JobState& j = js[k];
    j.job = &jb;
    j.wn = jb.wn;
    j.live = jb.wn == 1 && jb.lanes != 0 && jb.lanes < 64 ? static_cast<int>(jb.lanes) : 64;
    bufs.all.push_back(&j.vals);
    bufs.all.push_back(&j.prods);
    j.vals.assign(3 * p.slots * j.wn, 0);
    j.prods.assign(2 * p.products * j.wn, 0);
    std::fill_n(j.m(1), j.wn, ~uint64_t{0});  // slot 1: the constant 1
    for (size_t i = 0; i < p.inputs; ++i) {
      if (p.input_slot[i] == ~uint32_t{0}) continue;
      for (int c = 0; c < 2; ++c)
        std::copy_n(jb.in[c].data() + i * j.wn, j.wn, j.comp(p.input_slot[i], c));
    }
    if (!p.round.empty()) Xors(p.round[0].xors, j, 3);
  }
  return absl::OkStatus();
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
  for (size_t r = 1; r < rounds; ++r) {
    const Layout l = Plan(js, r);
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
    const Layout l = Plan(js, r);
    for (JobState& j : js)
      if (r < j.job->program->round.size()) Lambdas(j, j.job->program->round[r], ctx.prss(), msg.r0, msg.r1);
    for (size_t k = 0; k < js.size(); ++k) {
      if (r < js[k].job->program->round.size())
        Gather(js[k], js[k].job->program->round[r], party, msg, l.and_at[k], l.open_at[k]);
    }
    if (l.ands + l.opens != 0) {
      if (absl::Status st = Exchange(ctx, js, l, msg); !st.ok()) return st;
    }
    for (size_t k = 0; k < js.size(); ++k) {
      if (r < js[k].job->program->round.size())
        Scatter(js[k], js[k].job->program->round[r], party, msg, l.and_at[k], l.open_at[k]);
    }
    protocol::MulLog* log = ctx.log();
    if (log != nullptr && log->and_words() >= verify_words) {
      if (absl::Status st = protocol::Verifier::Verify(ctx, *log); !st.ok()) return st;
    }
  }
  for (JobState& j : js) {
    const Mp& p = *j.job->program;
    for (int c = 0; c < 2; ++c) {
      const bool pub = share::HoldsPublicIn(party, c);
      for (size_t i = 0; i < p.outputs; ++i) {
        const uint64_t* s = j.comp(p.output_slot[i], c);
        const uint64_t* m = j.m(p.output_slot[i]);
        uint64_t* o = j.job->out[c].data() + i * j.wn;
        for (size_t w = 0; w < j.wn; ++w) o[w] = s[w] ^ (pub ? m[w] : 0);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kmpc::cts
