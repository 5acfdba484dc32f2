// engine/agreement.h: the first agreement round's header (wire format,
// strict decoding) and the key-presence decision every party takes alike
// from the three views of a key.
#include "engine/agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/engine.h"

namespace kmpc::engine {
namespace {

using Bytes = std::vector<uint8_t>;

TEST(AgreementHeaderTest, RoundTripsAndRejectsTruncatedOrGarbled) {
  AgreementHeader h;
  for (size_t k = 0; k < 32; ++k) {
    h.inputs[k] = static_cast<uint8_t>(k);
    h.keys[k] = static_cast<uint8_t>(0xa0 + k);
  }
  h.counters = 0x000f0102;
  Bytes wire(AgreementHeader::kSize);
  h.Encode(absl::MakeSpan(wire));
  EXPECT_EQ(wire[64], 0x00);  // counters: big-endian after the digests
  EXPECT_EQ(wire[67], 0x02);
  EXPECT_EQ(wire[0], 0x00);
  EXPECT_EQ(wire[32], 0xa0);
  auto back = AgreementHeader::Decode(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->inputs, h.inputs);
  EXPECT_EQ(back->keys, h.keys);
  EXPECT_EQ(back->counters, h.counters);
  EXPECT_TRUE(back->SameInputs(h) && back->SameKeys(h));
  // Truncated or extended.
  for (size_t n : {size_t{0}, size_t{67}, size_t{69}}) {
    Bytes other(wire.begin(), wire.begin() + std::min(n, wire.size()));
    other.resize(n);
    EXPECT_EQ(AgreementHeader::Decode(other).status().code(),
              absl::StatusCode::kDataLoss) << n;
  }
  // A counter count no batch can draw.
  Bytes garbled = wire;
  garbled[64] = 0xff;
  EXPECT_EQ(AgreementHeader::Decode(garbled).status().code(),
            absl::StatusCode::kDataLoss);
  h.counters = static_cast<uint32_t>(kMaxBatchBlocks);
  h.Encode(absl::MakeSpan(wire));
  EXPECT_TRUE(AgreementHeader::Decode(wire).ok());
  h.counters += 1;
  h.Encode(absl::MakeSpan(wire));
  EXPECT_FALSE(AgreementHeader::Decode(wire).ok());
  // Differing digests are told apart.
  AgreementHeader g = h;
  g.inputs[31] ^= 1;
  EXPECT_FALSE(g.SameInputs(h));
  EXPECT_TRUE(g.SameKeys(h));
}

TEST(AgreementTest, PartyListReadsAsEnglish) {
  EXPECT_EQ(PartyList({}), "");
  EXPECT_EQ(PartyList({1}), "1");
  EXPECT_EQ(PartyList({0, 2}), "0 and 2");
  EXPECT_EQ(PartyList({0, 1, 2}), "0, 1 and 2");
}

// KeyPresence on the views of the three parties, first bytes a, b, c.
std::pair<pb::JobStatus, std::string> Presence(uint8_t a, uint8_t b, uint8_t c) {
  const uint8_t v[3] = {a, b, c};
  return KeyPresence({&v[0], &v[1], &v[2]});
}

TEST(AgreementTest, KeyPresentEverywhereIsOk) {
  auto [status, why] = Presence(kViewPresent, kViewPresent, kViewPresent);
  EXPECT_EQ(status, pb::JOB_OK);
  EXPECT_EQ(why, "");
}

TEST(AgreementTest, MissingSharesNameTheParties) {
  auto [status, why] = Presence(kViewMissing, kViewMissing, kViewMissing);
  EXPECT_EQ(status, pb::JOB_UNKNOWN_KEY);
  EXPECT_EQ(why, "unknown key id");  // a key nobody has: not an inconsistency
  std::tie(status, why) = Presence(kViewPresent, kViewMissing, kViewPresent);
  EXPECT_EQ(status, pb::JOB_UNKNOWN_KEY);
  EXPECT_EQ(why,
            "unknown key id: no shares on MPC party 1 (the key store of the "
            "cluster is inconsistent)");
  // Missing wins over unusable: the operator first re-deals the key.
  std::tie(status, why) = Presence(kViewMissing, kViewBad, kViewMissing);
  EXPECT_EQ(status, pb::JOB_UNKNOWN_KEY);
  EXPECT_NE(why.find("party 0 and 2"), std::string::npos) << why;
}

TEST(AgreementTest, UnusableSharesAreInconsistent) {
  auto [status, why] = Presence(kViewPresent, kViewPresent, kViewBad);
  EXPECT_EQ(status, pb::JOB_KEY_INCONSISTENT);
  EXPECT_EQ(why, "stored key shares are unusable on MPC party 2");
  // A view of "no key" next to present ones counts as unusable there.
  std::tie(status, why) = Presence(kViewNone, kViewPresent, kViewBad);
  EXPECT_EQ(status, pb::JOB_KEY_INCONSISTENT);
  EXPECT_EQ(why, "stored key shares are unusable on MPC party 0 and 2");
}

TEST(AgreementTest, DecisionIsTheSameOnEveryParty) {
  // Every combination of the four views: the outcome depends on the views
  // only, and is OK exactly when all three hold the key.
  const uint8_t kinds[] = {kViewNone, kViewMissing, kViewBad, kViewPresent};
  for (uint8_t a : kinds)
    for (uint8_t b : kinds)
      for (uint8_t c : kinds) {
        auto first = Presence(a, b, c);
        EXPECT_EQ(Presence(a, b, c), first);
        const bool all = a == kViewPresent && b == kViewPresent && c == kViewPresent;
        EXPECT_EQ(first.first == pb::JOB_OK, all) << int(a) << int(b) << int(c);
        EXPECT_EQ(first.second.empty(), all);
      }
}

}  // namespace
}  // namespace kmpc::engine
