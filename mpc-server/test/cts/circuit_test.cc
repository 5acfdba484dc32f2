// The circuit layer: constant folding, ASAP layering (AND depth), slot
// reuse, lane transposition, and the same program in the clear and among
// three parties (semi-honest and with the malicious check).
#include "cts/circuit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "cts_testing.h"
#include "rep3_cluster.h"

namespace kmpc::cts {
namespace {

using testing::Bytes;

TEST(Circuit, FoldsPublicConstants) {
  Circuit c;
  const Wire x = c.Input(), y = c.Input();
  EXPECT_EQ(c.And(x, kZero), kZero);
  EXPECT_EQ(c.And(kOne, x), x);
  EXPECT_EQ(c.Xor(x, kZero), x);
  EXPECT_EQ(c.Xor(x, x), kZero);
  EXPECT_EQ(c.And(y, y), y);
  EXPECT_EQ(c.Xor(kOne, kOne), kZero);
  c.Output(c.And(x, kOne));
  const Program p = c.Compile();
  EXPECT_EQ(p.ands, 0u);
  EXPECT_EQ(p.depth, 0);
}

TEST(Circuit, DepthIsAsSoonAsPossible) {
  Circuit c;
  const Bits in = c.Inputs(8);
  // A chain of 3 ANDs beside a balanced tree of 7: depth 3 either way.
  Wire chain = c.And(in[0], in[1]);
  chain = c.And(chain, in[2]);
  chain = c.And(chain, in[3]);
  Bits t = in;
  while (t.size() > 1) {
    Bits n;
    for (size_t i = 0; i < t.size(); i += 2) n.push_back(c.And(t[i], t[i + 1]));
    t = n;
  }
  c.Output(chain);
  c.Output(t[0]);
  c.Output(c.Xor(chain, t[0]));
  const Program p = c.Compile();
  EXPECT_EQ(p.depth, 3);
  EXPECT_EQ(p.ands, 10u);
  ASSERT_EQ(p.layers.size(), 4u);
  EXPECT_EQ(p.layers[1].ands.size() / 3, 5u);  // in0&in1 and the 4 leaves
}

TEST(Circuit, DeadGatesArePruned) {
  Circuit c;
  const Bits in = c.Inputs(4);
  c.And(in[0], in[1]);  // unused
  c.Output(c.And(in[2], in[3]));
  const Program p = c.Compile();
  EXPECT_EQ(p.ands, 1u);
}

// A long XOR/AND chain keeps only a few slots live.
TEST(Circuit, SlotsAreReused) {
  Circuit c;
  const Bits in = c.Inputs(2);
  Wire a = in[0], b = in[1];
  for (int i = 0; i < 1000; ++i) {
    const Wire t = c.And(a, b);
    a = c.Xor(t, b);
    b = c.Xor(t, a);
  }
  c.Output(a);
  const Program p = c.Compile();
  EXPECT_EQ(p.ands, 1000u);
  EXPECT_LT(p.slots, 10u);
}

TEST(Circuit, PackUnpackRoundTrip) {
  std::vector<Bytes> lanes;
  for (int l = 0; l < 130; ++l) lanes.push_back(::kmpc::testing::Random(5));
  std::vector<absl::Span<const uint8_t>> spans(lanes.begin(), lanes.end());
  const auto w = PackLanes(spans, 3);
  ASSERT_EQ(w.size(), 40u * 3);
  for (size_t l = 0; l < lanes.size(); ++l) EXPECT_EQ(UnpackLane(w, 3, l), lanes[l]);
}

// PackLanes against its definition, bit by bit: wire i, lane l at bit
// l % 64 of word i * wn + l / 64, zero past the lanes; lane counts that
// leave a partial group of eight, and spare words (wn past the lanes').
TEST(Circuit, PackLanesIsTheTransposition) {
  for (size_t n : {1, 7, 9, 64, 65, 130, 200}) {
    for (size_t wn : {(n + 63) / 64, (n + 63) / 64 + 1}) {
      std::vector<Bytes> lanes;
      for (size_t l = 0; l < n; ++l) lanes.push_back(::kmpc::testing::Random(3));
      std::vector<absl::Span<const uint8_t>> spans(lanes.begin(), lanes.end());
      const auto w = PackLanes(spans, wn);
      ASSERT_EQ(w.size(), 24 * wn);
      for (size_t i = 0; i < 24; ++i) {
        for (size_t l = 0; l < 64 * wn; ++l) {
          const uint64_t want = l < n ? (lanes[l][i / 8] >> (i % 8)) & 1 : 0;
          ASSERT_EQ((w[i * wn + l / 64] >> (l % 64)) & 1, want) << n << " " << wn << " " << l;
        }
      }
    }
  }
}

// A random circuit of XOR, NOT and AND over 16 input bits, its value
// computed directly beside it.
struct RandomCircuit {
  Program p;
  std::vector<std::vector<int>> expect;  // per lane, the output bits
};

RandomCircuit MakeRandom(const std::vector<Bytes>& lanes, uint32_t seed) {
  std::mt19937 rng(seed);
  Circuit c;
  Bits w = c.Inputs(16);
  std::vector<std::vector<int>> val(lanes.size());
  for (size_t l = 0; l < lanes.size(); ++l) {
    for (int i = 0; i < 16; ++i) val[l].push_back((lanes[l][i / 8] >> (i % 8)) & 1);
  }
  for (int g = 0; g < 400; ++g) {
    const size_t a = rng() % w.size(), b = rng() % w.size(), op = rng() % 3;
    w.push_back(op == 0 ? c.Xor(w[a], w[b]) : op == 1 ? c.Not(w[a]) : c.And(w[a], w[b]));
    for (auto& v : val) v.push_back(op == 0 ? v[a] ^ v[b] : op == 1 ? !v[a] : v[a] & v[b]);
  }
  RandomCircuit r;
  for (size_t k = w.size() - 64; k < w.size(); ++k) c.Output(w[k]);
  for (auto& v : val) r.expect.emplace_back(v.end() - 64, v.end());
  r.p = c.Compile();
  return r;
}

int BitOf(const Bytes& b, size_t i) { return (b[i / 8] >> (i % 8)) & 1; }

TEST(Circuit, RandomCircuitsInTheClear) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::vector<Bytes> lanes;
    for (int l = 0; l < 70; ++l) lanes.push_back(::kmpc::testing::Random(2));
    const RandomCircuit r = MakeRandom(lanes, seed);
    const auto out = testing::RunClear(r.p, lanes);
    for (size_t l = 0; l < lanes.size(); ++l) {
      for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(out[l], i), r.expect[l][i]) << seed;
    }
  }
}

TEST(Circuit, RandomCircuitsOnShares) {
  ::kmpc::testing::Rep3Cluster cl;
  for (bool malicious : {false, true}) {
    std::vector<Bytes> lanes;
    std::vector<testing::Views> views;
    for (int l = 0; l < 70; ++l) {
      lanes.push_back(::kmpc::testing::Random(2));
      views.push_back(testing::DealViews(lanes.back()));
    }
    const RandomCircuit r = MakeRandom(lanes, 7);
    std::array<absl::Status, 3> st;
    const auto out = testing::RunShared({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()},
                                        r.p, views, malicious, &st);
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(out.size(), lanes.size());
    for (size_t l = 0; l < lanes.size(); ++l) {
      for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(out[l], i), r.expect[l][i]);
    }
  }
}

// Two programs of different depths on different lanes in one run: one
// message per layer of the deeper, and each job's outputs as if alone; on
// shares (malicious) too.
TEST(Circuit, JobsShareRounds) {
  std::vector<Bytes> lanes_a, lanes_b;
  for (int l = 0; l < 70; ++l) lanes_a.push_back(::kmpc::testing::Random(2));
  for (int l = 0; l < 3; ++l) lanes_b.push_back(::kmpc::testing::Random(2));
  const RandomCircuit a = MakeRandom(lanes_a, 11), b = MakeRandom(lanes_b, 12);
  ASSERT_NE(a.p.depth, b.p.depth);
  std::vector<absl::Span<const uint8_t>> sa(lanes_a.begin(), lanes_a.end()),
      sb(lanes_b.begin(), lanes_b.end());
  const auto ia = PackLanes(sa, 2), ib = PackLanes(sb, 1);
  std::vector<uint64_t> oa(64 * 2), ob(64);
  const Job jobs[2] = {{&a.p, 2, {ia, {}}, {absl::MakeSpan(oa), {}}},
                       {&b.p, 1, {ib, {}}, {absl::MakeSpan(ob), {}}}};
  testing::CountingEngine e;
  ASSERT_TRUE(EvaluateAll(jobs, e).ok());
  EXPECT_EQ(e.layers, std::max(a.p.depth, b.p.depth));
  for (size_t l = 0; l < lanes_a.size(); ++l) {
    for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(UnpackLane(oa, 2, l), i), a.expect[l][i]);
  }
  for (size_t l = 0; l < lanes_b.size(); ++l) {
    for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(UnpackLane(ob, 1, l), i), b.expect[l][i]);
  }
  ::kmpc::testing::Rep3Cluster cl;
  std::vector<testing::Views> va, vb;
  for (const Bytes& x : lanes_a) va.push_back(testing::DealViews(x));
  for (const Bytes& x : lanes_b) vb.push_back(testing::DealViews(x));
  std::array<absl::Status, 3> st;
  const auto out = testing::RunSharedJobs({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()},
                                          {&a.p, &b.p}, {va, vb}, true, &st);
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  for (size_t l = 0; l < lanes_a.size(); ++l) {
    for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(out[0][l], i), a.expect[l][i]);
  }
  for (size_t l = 0; l < lanes_b.size(); ++l) {
    for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(out[1][l], i), b.expect[l][i]);
  }
}

// A job of fewer than 64 lanes (Job::lanes) sends its AND operands packed,
// its lanes' bits per gate, gate after gate across word boundaries: each
// layer's words as counted, and the outputs as unpacked, in the
// clear beside an unpacked job and on shares in both modes (the malicious
// check verifies the packed words).
TEST(Circuit, FewLanesArePacked) {
  for (size_t n : {1, 3, 12, 20, 32, 33, 63, 64}) {
    std::vector<Bytes> lanes;
    for (size_t l = 0; l < n; ++l) lanes.push_back(::kmpc::testing::Random(2));
    const RandomCircuit r = MakeRandom(lanes, 20 + static_cast<uint32_t>(n));
    std::vector<absl::Span<const uint8_t>> sp(lanes.begin(), lanes.end());
    const size_t wn = (n + 63) / 64;
    const auto in = PackLanes(sp, wn);
    std::vector<uint64_t> out(64 * wn);
    const Job job{&r.p, wn, {in, {}}, {absl::MakeSpan(out), {}}, n};
    testing::CountingEngine e;
    ASSERT_TRUE(EvaluateAll(absl::MakeConstSpan(&job, 1), e).ok());
    size_t want = 0;
    for (const auto& layer : r.p.layers) {
      const size_t gates = layer.ands.size() / 3;
      want += n < 64 ? (gates * n + 63) / 64 : gates * wn;
    }
    EXPECT_EQ(e.layers, r.p.depth) << n;
    EXPECT_EQ(e.words, want) << n;
    if (n == 1) EXPECT_LT(e.words * 4, r.p.ands) << "a lane costs a bit per AND, not a word";
    for (size_t l = 0; l < n; ++l) {
      for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(UnpackLane(out, wn, l), i), r.expect[l][i]);
    }
    ::kmpc::testing::Rep3Cluster cl;
    std::vector<testing::Views> views;
    for (const Bytes& x : lanes) views.push_back(testing::DealViews(x));
    for (bool malicious : {false, true}) {
      std::array<absl::Status, 3> st;
      const auto o = testing::RunShared({cl.rep3[0].get(), cl.rep3[1].get(), cl.rep3[2].get()},
                                        r.p, views, malicious, &st);
      for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
      ASSERT_EQ(o.size(), n);
      for (size_t l = 0; l < n; ++l) {
        for (size_t i = 0; i < 64; ++i) ASSERT_EQ(BitOf(o[l], i), r.expect[l][i]) << n;
      }
    }
  }
}

// An engine whose two components are independent clear evaluations (the
// constant 1 in both, z[c] = x[c] & y[c]), recording every layer's
// operands: a mix-up of components, lanes or words shows in the outputs,
// and the recorded words are what a ring would carry.
class TwoClearEngine : public Engine {
 public:
  int comps() const override { return 2; }
  uint64_t OneWord(int) const override { return ~uint64_t{0}; }
  absl::Status AndLayer(std::array<const uint64_t*, 2> x, std::array<const uint64_t*, 2> y,
                        std::array<uint64_t*, 2> z, size_t n) override {
    for (int c = 0; c < 2; ++c) {
      xs[c].emplace_back(x[c], x[c] + n);
      ys[c].emplace_back(y[c], y[c] + n);
      for (size_t i = 0; i < n; ++i) z[c][i] = x[c][i] & y[c][i];
    }
    return absl::OkStatus();
  }
  std::array<std::vector<std::vector<uint64_t>>, 2> xs, ys;
};

// The message layout of circuit.h EvaluateAll, written out plainly: per
// AND layer, the jobs' full words (wn per gate, in job and gate order;
// wn - 1 when the lanes do not fill the last word), then those last words
// packed (each gate's lanes in that word as that many bits, one bit string
// over the words from bit 0 up); each component evaluated on its own as
// TwoClearEngine does.
struct Reference {
  std::array<std::vector<std::vector<uint64_t>>, 2> xs, ys;
  std::vector<std::array<std::vector<uint64_t>, 2>> out;
};

Reference RefEvaluate(const std::vector<Job>& jobs) {
  Reference r;
  // Lanes of a job's last word that do not fill it, else 0.
  auto tail_of = [](const Job& j) -> size_t {
    if (j.lanes == 0 || j.lanes % 64 == 0 || j.lanes <= 64 * (j.wn - 1)) return 0;
    return j.lanes % 64;
  };
  size_t layers = 0;
  for (const Job& j : jobs) layers = std::max(layers, j.program->layers.size());
  for (int c = 0; c < 2; ++c) {
    std::vector<std::vector<uint64_t>> v;
    for (const Job& j : jobs) {
      v.emplace_back(j.program->slots * j.wn, 0);
      for (size_t w = 0; w < j.wn; ++w) v.back()[j.wn + w] = ~uint64_t{0};
      for (size_t i = 0; i < j.program->inputs; ++i) {
        if (j.program->input_slot[i] == std::numeric_limits<uint32_t>::max()) continue;
        for (size_t w = 0; w < j.wn; ++w)
          v.back()[j.program->input_slot[i] * j.wn + w] = j.in[c][i * j.wn + w];
      }
    }
    for (size_t d = 0; d < layers; ++d) {
      std::vector<uint64_t> x, y, px, py;
      std::vector<bool> xbits, ybits;  // the last words' lanes, in order
      for (size_t k = 0; k < jobs.size(); ++k) {
        if (d >= jobs[k].program->layers.size()) continue;
        const auto& ands = jobs[k].program->layers[d].ands;
        const size_t wn = jobs[k].wn, tail = tail_of(jobs[k]), full = wn - (tail != 0);
        for (size_t g = 0; g < ands.size(); g += 3) {
          for (size_t w = 0; w < full; ++w) {
            x.push_back(v[k][ands[g + 1] * wn + w]);
            y.push_back(v[k][ands[g + 2] * wn + w]);
          }
          for (size_t l = 0; l < tail; ++l) {
            xbits.push_back((v[k][ands[g + 1] * wn + wn - 1] >> l) & 1);
            ybits.push_back((v[k][ands[g + 2] * wn + wn - 1] >> l) & 1);
          }
        }
      }
      px.assign((xbits.size() + 63) / 64, 0);
      py.assign(px.size(), 0);
      for (size_t i = 0; i < xbits.size(); ++i) {
        px[i / 64] |= uint64_t{xbits[i]} << (i % 64);
        py[i / 64] |= uint64_t{ybits[i]} << (i % 64);
      }
      const size_t words = x.size();
      x.insert(x.end(), px.begin(), px.end());
      y.insert(y.end(), py.begin(), py.end());
      if (!x.empty()) {
        r.xs[c].push_back(x);
        r.ys[c].push_back(y);
      }
      size_t at = 0, bit = 0;
      for (size_t k = 0; k < jobs.size(); ++k) {
        if (d >= jobs[k].program->layers.size()) continue;
        const size_t wn = jobs[k].wn, tail = tail_of(jobs[k]), full = wn - (tail != 0);
        const auto& ands = jobs[k].program->layers[d].ands;
        for (size_t g = 0; g < ands.size(); g += 3) {
          for (size_t w = 0; w < full; ++w, ++at) v[k][ands[g] * wn + w] = x[at] & y[at];
          if (tail == 0) continue;
          uint64_t& o = v[k][ands[g] * wn + wn - 1];
          o = 0;
          for (size_t l = 0; l < tail; ++l, ++bit) {
            const size_t w = words + bit / 64;
            o |= ((x[w] & y[w]) >> (bit % 64) & 1) << l;
          }
        }
        const auto& xors = jobs[k].program->layers[d].xors;
        for (size_t g = 0; g < xors.size(); g += 3) {
          for (size_t w = 0; w < wn; ++w)
            v[k][xors[g] * wn + w] = v[k][xors[g + 1] * wn + w] ^ v[k][xors[g + 2] * wn + w];
        }
      }
    }
    r.out.resize(jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k) {
      for (uint32_t o : jobs[k].program->output_slot) {
        for (size_t w = 0; w < jobs[k].wn; ++w) r.out[k][c].push_back(v[k][o * jobs[k].wn + w]);
      }
    }
  }
  return r;
}

// Every words-per-wire count the evaluator specialises and one it does not
// (wn 1, 2, 3, 5; 9 past the specialised 1..8), at lane counts below, at
// and past a word (1, 33, 64, 130), alone and all in one run: each lane's
// outputs as computed directly, in the clear, on two independent
// components, and on shares in both modes; the layers' words as the
// plainly written layout (RefEvaluate).
TEST(Circuit, WordsPerWireAndLaneCounts) {
  struct Case {
    size_t wn, lanes;
  };
  std::vector<Case> cases;
  for (size_t wn : {1, 2, 3, 5, 9}) {
    for (size_t lanes : {1, 33, 64, 130}) {
      if (lanes <= 64 * wn) cases.push_back({wn, lanes});
    }
  }
  struct Data {
    std::vector<Bytes> lanes, flipped;
    RandomCircuit r;
    std::array<std::vector<uint64_t>, 2> in, out;
  };
  std::vector<Data> data(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    Data& dt = data[i];
    for (size_t l = 0; l < cases[i].lanes; ++l) {
      dt.lanes.push_back(::kmpc::testing::Random(2));
      dt.flipped.push_back({static_cast<uint8_t>(~dt.lanes.back()[0]),
                            static_cast<uint8_t>(~dt.lanes.back()[1])});
    }
    dt.r = MakeRandom(dt.lanes, 100 + static_cast<uint32_t>(i));
    std::vector<absl::Span<const uint8_t>> s0(dt.lanes.begin(), dt.lanes.end()),
        s1(dt.flipped.begin(), dt.flipped.end());
    dt.in = {PackLanes(s0, cases[i].wn), PackLanes(s1, cases[i].wn)};
  }
  // The clear value of lane l's inputs `bytes` (the second component's
  // inputs are the complements: a different evaluation).
  auto expect_bits = [](const Program& p, const Bytes& bytes) {
    return testing::RunClear(p, {bytes})[0];
  };
  auto check = [&](const std::vector<size_t>& which) {
    std::vector<Job> jobs;
    for (size_t i : which) {
      Data& dt = data[i];
      for (auto& o : dt.out) o.assign(dt.r.p.outputs * cases[i].wn, 0);
      jobs.push_back({&dt.r.p, cases[i].wn, {dt.in[0], dt.in[1]},
                      {absl::MakeSpan(dt.out[0]), absl::MakeSpan(dt.out[1])}, cases[i].lanes});
    }
    const Reference ref = RefEvaluate(jobs);
    TwoClearEngine e;
    ASSERT_TRUE(EvaluateAll(jobs, e).ok());
    for (int c = 0; c < 2; ++c) {
      ASSERT_EQ(e.xs[c].size(), ref.xs[c].size());
      for (size_t d = 0; d < ref.xs[c].size(); ++d) {
        ASSERT_EQ(e.xs[c][d], ref.xs[c][d]) << "layer " << d;
        ASSERT_EQ(e.ys[c][d], ref.ys[c][d]) << "layer " << d;
      }
    }
    for (size_t k = 0; k < which.size(); ++k) {
      const size_t i = which[k], wn = cases[i].wn;
      const Data& dt = data[i];
      for (size_t l = 0; l < cases[i].lanes; ++l) {
        const Bytes o0 = UnpackLane(dt.out[0], wn, l), o1 = UnpackLane(dt.out[1], wn, l);
        ASSERT_EQ(o0, UnpackLane(ref.out[k][0], wn, l));
        ASSERT_EQ(o1, UnpackLane(ref.out[k][1], wn, l));
        for (size_t b = 0; b < 64; ++b)
          ASSERT_EQ(BitOf(o0, b), dt.r.expect[l][b]) << "wn " << wn << " lane " << l;
        ASSERT_EQ(o1, expect_bits(dt.r.p, dt.flipped[l])) << "wn " << wn << " lane " << l;
      }
    }
    // In the clear (one component).
    for (size_t i : which) {
      Data& dt = data[i];
      const size_t wn = cases[i].wn;
      std::vector<uint64_t> out(dt.r.p.outputs * wn);
      const Job job{&dt.r.p, wn, {dt.in[0], {}}, {absl::MakeSpan(out), {}}, cases[i].lanes};
      ClearEngine ce;
      ASSERT_TRUE(EvaluateAll(absl::MakeConstSpan(&job, 1), ce).ok());
      for (size_t l = 0; l < cases[i].lanes; ++l) {
        const Bytes o = UnpackLane(out, wn, l);
        for (size_t b = 0; b < 64; ++b)
          ASSERT_EQ(BitOf(o, b), dt.r.expect[l][b]) << "wn " << wn << " lane " << l;
      }
    }
  };
  std::vector<size_t> all;
  for (size_t i = 0; i < cases.size(); ++i) {
    check({i});
    all.push_back(i);
  }
  check(all);

  // On shares, all cases in one run, each with its own words per wire.
  ::kmpc::testing::Rep3Cluster cl;
  std::vector<std::vector<testing::Views>> views(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    for (const Bytes& b : data[i].lanes) views[i].push_back(testing::DealViews(b));
  }
  for (bool malicious : {false, true}) {
    std::array<std::vector<std::array<std::vector<uint64_t>, 2>>, 3> outs;
    std::array<protocol::MulLog, 3> logs;
    const auto st = ::kmpc::testing::RunParties([&](int party) -> absl::Status {
      std::vector<std::array<std::vector<uint64_t>, 2>> in(cases.size());
      outs[party].assign(cases.size(), {});
      std::vector<Job> jobs;
      for (size_t i = 0; i < cases.size(); ++i) {
        std::array<std::vector<Bytes>, 2> comp;
        for (const testing::Views& v : views[i]) {
          for (int c = 0; c < 2; ++c) comp[c].push_back(v[party].comp[c]);
        }
        for (int c = 0; c < 2; ++c) {
          std::vector<absl::Span<const uint8_t>> sp(comp[c].begin(), comp[c].end());
          in[i][c] = PackLanes(sp, cases[i].wn);
          outs[party][i][c].assign(data[i].r.p.outputs * cases[i].wn, 0);
        }
        jobs.push_back({&data[i].r.p, cases[i].wn, {in[i][0], in[i][1]},
                        {absl::MakeSpan(outs[party][i][0]), absl::MakeSpan(outs[party][i][1])},
                        cases[i].lanes});
      }
      cl.rep3[party]->set_log(malicious ? &logs[party] : nullptr);
      ShareEngine e(*cl.rep3[party]);
      absl::Status s = EvaluateAll(jobs, e);
      if (s.ok() && malicious) s = protocol::Verifier::Verify(*cl.rep3[party], logs[party]);
      cl.rep3[party]->set_log(nullptr);
      return s;
    });
    for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
    for (size_t i = 0; i < cases.size(); ++i) {
      for (size_t l = 0; l < cases[i].lanes; ++l) {
        testing::Views v;
        for (int party = 0; party < 3; ++party) {
          for (int c = 0; c < 2; ++c)
            v[party].comp[c] = UnpackLane(outs[party][i][c], cases[i].wn, l);
        }
        const Bytes o = ::kmpc::testing::Open3(v);
        ASSERT_EQ(o.size(), 8u);
        for (size_t b = 0; b < 64; ++b)
          ASSERT_EQ(BitOf(o, b), data[i].r.expect[l][b])
              << "wn " << cases[i].wn << " lane " << l << (malicious ? " malicious" : "");
      }
    }
  }
}

}  // namespace
}  // namespace kmpc::cts
