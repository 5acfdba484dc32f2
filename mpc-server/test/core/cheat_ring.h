// Three parties of the malicious check's tests on the in-memory ring, one
// of them behind a CheatingChannel, each with its PRSS and Rep3 set up.
#ifndef KMPC_TEST_CORE_CHEAT_RING_H_
#define KMPC_TEST_CORE_CHEAT_RING_H_

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <memory>
#include <optional>

#include "../cheat.h"
#include "net/memory_ring.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "test_util.h"

namespace kmpc::testing {

class CheatRing {
 public:
  CheatRing(int cheater, std::chrono::milliseconds ring_timeout)
      : cheater_(cheater), ring_(ring_timeout) {
    cheat_ = std::make_unique<CheatingChannel>(ring_.party(cheater));
    for (int i = 0; i < 3; ++i) ch_[i] = i == cheater ? cheat_.get() : &ring_.party(i);
    auto st = RunParties([&](int i) -> absl::Status {
      auto p = protocol::Prss::Setup(*ch_[i]);
      if (!p.ok()) return p.status();
      prss_[i].emplace(std::move(*p));
      return absl::OkStatus();
    });
    for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
    for (int i = 0; i < 3; ++i)
      rep3_[i] = std::make_unique<protocol::Rep3>(*ch_[i], *prss_[i]);
  }
  CheatingChannel& cheat() { return *cheat_; }

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
