#include "client/reveal.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kmpc::client {
namespace {

// Party p's owned pair (s_p, s_{p+1}).
using Pair = std::pair<std::string, std::string>;

// Three parties' pairs (s_p, s_{p+1}) of v = s0 ^ s1 ^ s2.
std::array<Pair, 3> Deal(const std::string& v, const std::string& s0,
                         const std::string& s1) {
  std::string s2 = v;
  for (size_t i = 0; i < v.size(); ++i) s2[i] ^= s0[i] ^ s1[i];
  const std::string s[3] = {s0, s1, s2};
  std::array<Pair, 3> out;
  for (int p = 0; p < 3; ++p) out[p] = {s[p], s[(p + 1) % 3]};
  return out;
}

std::array<ShareView, 3> Ptrs(const std::array<Pair, 3>& a) {
  std::array<ShareView, 3> v;
  for (int p = 0; p < 3; ++p) v[p] = {a[p].first, a[p].second};
  return v;
}

// Deals `msg` with a fresh draw of its own into three flat buffers (one
// message: each buffer is party p's s_p || s_{p+1}).
std::array<Pair, 3> DealOne(const std::string& msg) {
  DealRandom r;
  EXPECT_TRUE(r.Draw(msg.size()).ok());
  std::array<std::string, 3> flat;
  EXPECT_TRUE(DealFlat(absl::MakeConstSpan(
                           reinterpret_cast<const uint8_t*>(msg.data()), msg.size()),
                       r.Take(msg.size()), {&flat[0], &flat[1], &flat[2]})
                  .ok());
  std::array<Pair, 3> out;
  for (int p = 0; p < 3; ++p)
    out[p] = {flat[p].substr(0, msg.size()), flat[p].substr(msg.size())};
  return out;
}

TEST(Reveal, CombinesThreeShares) {
  auto pairs = Deal("sixteen byte val", "0123456789abcdef", "fedcba9876543210");
  std::vector<uint8_t> out(16);
  ASSERT_TRUE(Reveal(Ptrs(pairs), absl::MakeSpan(out), "tag").ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), "sixteen byte val");
}

TEST(Reveal, NamesTheLyingPartyAndWipesTheOutput) {
  auto pairs = Deal("value", "aaaaa", "bbbbb");
  // Party 1 changes both of its shares: checks 0 (s_1 copies) and 1 (s_2
  // copies) fail, party 1 is common to both.
  pairs[1] = {"Xaaaa", "Xbbbb"};
  std::vector<uint8_t> out(5, 0x55);
  absl::Status st = Reveal(Ptrs(pairs), absl::MakeSpan(out), "keystream of job 4");
  ASSERT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("MPC party 1 is the common party"),
            std::string::npos) << st;
  EXPECT_NE(st.message().find("keystream of job 4"), std::string::npos);
  EXPECT_EQ(out, std::vector<uint8_t>(5, 0));
}

TEST(Reveal, OneDisagreementNamesBothCopies) {
  auto pairs = Deal("value", "aaaaa", "bbbbb");
  pairs[2].second = "Zaaaa";  // party 2's copy of s_0 only
  std::vector<uint8_t> out(5);
  absl::Status st = Reveal(Ptrs(pairs), absl::MakeSpan(out), "tag",
                           [](int p) { return "server " + std::to_string(p); });
  ASSERT_TRUE(absl::IsDataLoss(st));
  EXPECT_NE(st.message().find("share s_0"), std::string::npos) << st;
  EXPECT_NE(st.message().find("server 2 and server 0"), std::string::npos) << st;
  EXPECT_NE(st.message().find("1 of 3"), std::string::npos) << st;
}

TEST(Reveal, WrongLengthIsRefused) {
  auto pairs = Deal("value", "aaaaa", "bbbbb");
  std::vector<uint8_t> out(6);
  EXPECT_TRUE(absl::IsDataLoss(Reveal(Ptrs(pairs), absl::MakeSpan(out), "tag")));
  std::vector<uint8_t> ok(5);
  pairs[0].second = "bbbb";
  EXPECT_TRUE(absl::IsDataLoss(Reveal(Ptrs(pairs), absl::MakeSpan(ok), "tag")));
}

TEST(Reveal, EmptyValue) {
  auto pairs = Deal("", "", "");
  std::vector<uint8_t> out;
  EXPECT_TRUE(Reveal(Ptrs(pairs), absl::MakeSpan(out), "keystream").ok());
}

// A dealing: every party's pair is consistent with its neighbours', the
// three shares XOR to the message, and two deals of one message differ
// (fresh randomness), so no server can recognise a message it saw before.
TEST(DealFlat, SharesRevealTheMessageAndAreFresh) {
  const std::string msg = "EncTicketPart with a session key and a PAC";
  const std::array<Pair, 3> a = DealOne(msg), b = DealOne(msg);
  std::vector<uint8_t> out(msg.size());
  ASSERT_TRUE(Reveal(Ptrs(a), absl::MakeSpan(out), "message").ok());
  EXPECT_EQ(std::string(out.begin(), out.end()), msg);
  for (int p = 0; p < 3; ++p) {
    EXPECT_NE(a[p].first, b[p].first) << p;
    // Neither share a party holds is the message.
    EXPECT_EQ(a[p].first.find("session"), std::string::npos) << p;
    EXPECT_EQ(a[p].second.find("session"), std::string::npos) << p;
  }
  EXPECT_TRUE(DealOne("")[0].first.empty());
}

// DealFlat (kmpc.proto, "Shares travel flat"): each message appends party
// p's (s_p, s_{p+1}) to its buffer, so the three buffers sliced in order
// reveal every message; slices of one draw are fresh per message; a slice
// of the wrong length appends nothing.
TEST(DealFlat, AppendsEachPartysPairInOrder) {
  const std::string m1 = "a PAC", m2 = "an EncTicketPart";
  DealRandom r;
  ASSERT_TRUE(r.Draw(m1.size() + m2.size()).ok());
  std::array<std::string, 3> flat;
  const std::array<std::string*, 3> out = {&flat[0], &flat[1], &flat[2]};
  for (const std::string* m : {&m1, &m2}) {
    const auto data = absl::MakeConstSpan(
        reinterpret_cast<const uint8_t*>(m->data()), m->size());
    ASSERT_TRUE(DealFlat(data, r.Take(m->size()), out).ok());
  }
  for (int p = 0; p < 3; ++p)
    ASSERT_EQ(flat[p].size(), 2 * (m1.size() + m2.size())) << p;
  size_t at = 0;
  for (const std::string* m : {&m1, &m2}) {
    const size_t n = m->size();
    std::array<ShareView, 3> v;
    for (int p = 0; p < 3; ++p) {
      const absl::string_view f = flat[p];
      v[p] = {f.substr(at, n), f.substr(at + n, n)};
      EXPECT_EQ(v[p].first.find(*m), absl::string_view::npos) << p;
    }
    std::vector<uint8_t> got(n);
    ASSERT_TRUE(Reveal(v, absl::MakeSpan(got), "message").ok());
    EXPECT_EQ(std::string(got.begin(), got.end()), *m);
    at += 2 * n;
  }
  const std::string before = flat[0];
  const auto data = absl::MakeConstSpan(
      reinterpret_cast<const uint8_t*>(m1.data()), m1.size());
  EXPECT_EQ(DealFlat(data, r.Take(m1.size()), out).code(),  // draw used up
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(flat[0], before);
}

// Reveal over flat slices names the party whose copy disagrees.
TEST(RevealViews, ADisagreeingCopyIsRefused) {
  const std::string s0(4, 'a'), s1(4, 'b'), s2(4, 'c'), bad(4, 'x');
  std::array<ShareView, 3> v = {ShareView{s0, s1}, ShareView{s1, s2},
                                ShareView{s2, s0}};
  std::vector<uint8_t> out(4);
  ASSERT_TRUE(Reveal(v, absl::MakeSpan(out), "tag").ok());
  EXPECT_EQ(out[0], 'a' ^ 'b' ^ 'c');
  v[1].second = bad;  // party 1's copy of s_2
  absl::Status st = Reveal(v, absl::MakeSpan(out), "tag");
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_EQ(out, std::vector<uint8_t>(4, 0));  // wiped
}

TEST(CombineAdditive, XorsThreeValuesAndChecksLengths) {
  const std::string t0(16, '\x01'), t1(16, '\x02'), t2(16, '\x07');
  std::vector<uint8_t> out(16);
  ASSERT_TRUE(CombineAdditive({&t0, &t1, &t2}, absl::MakeSpan(out), "tag").ok());
  EXPECT_EQ(out, std::vector<uint8_t>(16, 0x04));
  const std::string shortv(15, '\x02');
  absl::Status st = CombineAdditive({&t0, &shortv, &t2}, absl::MakeSpan(out), "tag");
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("MPC party 1"), std::string::npos) << st;
  EXPECT_EQ(out, std::vector<uint8_t>(16, 0));
}

}  // namespace
}  // namespace kmpc::client
