// Three parties of the malicious check's tests on the in-memory ring, one
// of them behind a CheatingChannel, each with its PRSS and Rep3 set up.
#ifndef KMPC_TEST_CORE_CHEAT_RING_H_
#define KMPC_TEST_CORE_CHEAT_RING_H_

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "../cheat.h"
#include "net/memory_ring.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "protocol/verify.h"
#include "rep3_cluster.h"
#include "test_util.h"

namespace kmpc::testing {

class CheatRing {
 public:
  explicit CheatRing(int cheater,
                     std::chrono::milliseconds ring_timeout = std::chrono::milliseconds(5000))
      : cheater_(cheater), ring_(ring_timeout) {
    cheat_ = std::make_unique<CheatingChannel>(ring_.party(cheater));
    for (int i = 0; i < 3; ++i) ch_[i] = i == cheater ? cheat_.get() : &ring_.party(i);
    SetUpParties(ch_, prss_, rep3_);
  }
  CheatingChannel& cheat() { return *cheat_; }
  std::array<protocol::Rep3*, 3> rep3() { return {rep3_[0].get(), rep3_[1].get(), rep3_[2].get()}; }
  int cheater() const { return cheater_; }

  // `layers` AND layers of `words` words and one layer of `gf` GF(2^128)
  // products on random shared inputs, logged, then Verify. One status per
  // party. With live < 64, the AND words are logged as a caller with only
  // lanes 0 .. live-1 carrying data does (MulLog::AddAnd's live).
  std::array<absl::Status, 3> RunCheck(size_t layers, size_t words, int live, size_t gf) {
    return RunParties([&, layers, words, live, gf](int i) -> absl::Status {
      protocol::Rep3& r = *rep3_[i];
      protocol::MulLog log;
      r.set_log(live == 64 ? &log : nullptr);
      absl::Status st;
      std::vector<uint64_t> x0(words), x1(words), y0(words), y1(words), z0(words),
          z1(words);
      auto bytes = [](std::vector<uint64_t>& v) { return reinterpret_cast<uint8_t*>(v.data()); };
      for (size_t layer = 0; layer < layers && st.ok(); ++layer) {
        r.prss().RandomShares(bytes(x0), bytes(x1), 8 * words);
        r.prss().RandomShares(bytes(y0), bytes(y1), 8 * words);
        st = r.And(x0, x1, y0, y1, absl::MakeSpan(z0), absl::MakeSpan(z1));
        if (live < 64) {
          const size_t at = log.AddAnd(x0.data(), x1.data(), y0.data(), y1.data(), z0.data(),
                                       words, live);
          log.SetAndZ1(at, z1.data(), words);
        }
      }
      r.set_log(&log);
      std::vector<uint8_t> a0(16 * gf), a1(16 * gf), b0(16 * gf), b1(16 * gf), c0(16 * gf),
          c1(16 * gf);
      r.prss().RandomShares(a0.data(), a1.data(), a0.size());
      r.prss().RandomShares(b0.data(), b1.data(), b0.size());
      if (st.ok()) st = r.GfMul(a0, a1, b0, b1, absl::MakeSpan(c0), absl::MakeSpan(c1));
      if (st.ok()) st = protocol::Verifier::Verify(r, log);
      r.set_log(nullptr);
      return st;
    });
  }

 protected:
  int cheater_;
  net::InMemoryRing ring_;
  std::unique_ptr<CheatingChannel> cheat_;
  std::array<net::RingChannel*, 3> ch_{};
  std::array<std::optional<protocol::Prss>, 3> prss_;
  std::array<std::unique_ptr<protocol::Rep3>, 3> rep3_;
};

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_CHEAT_RING_H_
