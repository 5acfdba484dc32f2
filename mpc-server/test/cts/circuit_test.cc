// The circuit layer: constant folding, ASAP layering (AND depth), slot
// reuse, lane transposition, and the same program in the clear and among
// three parties (semi-honest and with the malicious check).
#include "cts/circuit.h"

#include <gtest/gtest.h>

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

// A job of at most 32 lanes (Job::lanes) sends its AND operands packed,
// 64 / width gates to a word (width: the lanes rounded up to a power of
// two): each layer's words as counted, and the outputs as unpacked, in the
// clear beside an unpacked job and on shares in both modes (the malicious
// check verifies the packed words).
TEST(Circuit, FewLanesArePacked) {
  for (size_t n : {1, 3, 32, 33}) {
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
    size_t width = 1;
    while (width < n) width <<= 1;
    size_t want = 0;
    for (const auto& layer : r.p.layers) {
      const size_t gates = layer.ands.size() / 3;
      want += n <= 32 ? (gates * width + 63) / 64 : gates * wn;
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

}  // namespace
}  // namespace kmpc::cts
