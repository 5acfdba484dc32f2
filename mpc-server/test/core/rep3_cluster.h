// Three parties in one process over the in-memory ring, each with a set-up
// PRSS and a Rep3 context (prss_test, rep3_test, aes_test's shared AES).
#ifndef KMPC_TEST_CORE_REP3_CLUSTER_H_
#define KMPC_TEST_CORE_REP3_CLUSTER_H_

#include <gtest/gtest.h>

#include <array>
#include <memory>
#include <optional>
#include <vector>

#include "net/memory_ring.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::testing {

// Each party's PRSS (Prss::Setup, one exchange over its channel ch[i], the
// three at once) and its Rep3 context on that channel. The channels may be
// a ring's own or wrappers of them (a cheating or tapping party's).
inline void SetUpParties(const std::array<net::RingChannel*, 3>& ch,
                         std::array<std::optional<protocol::Prss>, 3>& prss,
                         std::array<std::unique_ptr<protocol::Rep3>, 3>& rep3) {
  auto st = RunParties([&](int i) -> absl::Status {
    auto p = protocol::Prss::Setup(*ch[i]);
    if (!p.ok()) return p.status();
    prss[i].emplace(std::move(*p));
    return absl::OkStatus();
  });
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) rep3[i] = std::make_unique<protocol::Rep3>(*ch[i], *prss[i]);
}

struct Rep3Cluster {
  net::InMemoryRing ring;
  std::array<std::optional<protocol::Prss>, 3> prss;
  std::array<std::unique_ptr<protocol::Rep3>, 3> rep3;
  Rep3Cluster() { SetUpParties({&ring.party(0), &ring.party(1), &ring.party(2)}, prss, rep3); }
};

// The value of three party views (checks the copies of every share agree).
inline std::vector<uint8_t> Open3(const std::array<share::View, 3>& v) {
  auto o = share::Open(v);
  EXPECT_TRUE(o.ok()) << o.status();
  return o.ok() ? *o : std::vector<uint8_t>{};
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_REP3_CLUSTER_H_
