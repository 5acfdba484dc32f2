// The phases of a Run (engine/batch_state.h) driven alone, without an
// Engine: three parties' RunContexts over the in-memory ring, keys dealt
// to them, and jobs with their dealt messages.
#ifndef KMPC_TEST_CORE_BATCH_TESTING_H_
#define KMPC_TEST_CORE_BATCH_TESTING_H_

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "contract.h"
#include "engine/batch_state.h"
#include "engine/engine.h"
#include "rep3_cluster.h"
#include "share/replicated.h"
#include "test_util.h"

namespace kmpc::engine::phase_testing {

using Bytes = std::vector<uint8_t>;
using ::kmpc::testing::RunParties;

// A key id of contract::kKeyIdSize bytes.
inline std::string KeyId(const std::string& name) {
  std::string id = name;
  id.resize(contract::kKeyIdSize, '.');
  return id;
}

// Three parties, each with the context a Run's phases compute with.
struct PhaseCluster {
  ::kmpc::testing::Rep3Cluster c;
  std::array<EngineOptions, 3> options;
  std::array<protocol::MulLog, 3> log;
  std::array<CtsReleaseLimiter, 3> limiter;
  std::array<aes::Workspace, 3> ws;
  std::array<std::map<std::string, std::shared_ptr<const KeyShares>>, 3> store;
  // Party i's gate budgets (GateRun's); a fresh one per cluster.
  std::array<GateBudget, 3> budget;

  RunContext ctx(int i) {
    return RunContext{c.ring.party(i), *c.prss[i], *c.rep3[i], log[i],
                      options[i],      limiter[i], ws[i]};
  }

  // Deals `key` (16 or 32 bytes: its cipher's) to the three parties under
  // id, as a key of `kind`.
  void AddKey(const std::string& id, const Bytes& key, Cipher cipher,
              KeyKind kind = KeyKind::kService) {
    auto views = DealKey(cipher, key, kind);
    ASSERT_TRUE(views.ok()) << views.status();
    for (int i = 0; i < 3; ++i) {
      (*views)[i].kind = kind;
      store[i][id] = std::make_shared<const KeyShares>((*views)[i]);
    }
  }

  KeyLookup Lookup(int i) {
    return [this, i](absl::string_view id) -> absl::StatusOr<std::shared_ptr<const KeyShares>> {
      auto it = store[i].find(std::string(id));
      if (it == store[i].end()) return absl::NotFoundError("no such key");
      return it->second;
    };
  }
};

// A ctr-mpc job of `type` under key id (AES-128), usage 3.
inline Job CtrJob(pb::JobType type, const std::string& id, uint32_t nblocks = 0) {
  Job j;
  j.type = type;
  j.cipher = pb::CIPHER_AES128;
  j.key_id = id;
  j.usage = 3;
  j.nblocks = nblocks;
  return j;
}

// An aes*-cts job of `type` under key id (AES-128), its `n` dealt bytes
// random (a DECRYPT's C || T, an ENCRYPT's conf-less P, a CHECKSUM's D);
// the same job on the three parties but for the shares.
inline std::array<Job, 3> CtsJob(pb::JobType type, const std::string& id, uint32_t usage,
                                 size_t n) {
  Job j;
  j.type = type;
  j.cipher = pb::CIPHER_AES128_CTS;
  j.key_id = id;
  j.usage = usage;
  j.length = static_cast<uint32_t>(n);
  j.now = absl::ToUnixSeconds(absl::Now());
  std::array<Job, 3> out = {j, j, j};
  auto views = share::Deal(::kmpc::testing::Random(n));
  EXPECT_TRUE(views.ok());
  for (int i = 0; i < 3 && views.ok(); ++i) out[i].data_shares = (*views)[i].comp;
  return out;
}

// Job `j` of every party with the message `msg` dealt as shares
// (Job::data_shares), as the KDC module deals it; length set.
inline void DealMessage(std::array<std::vector<Job>, 3>& jobs, size_t j, const Bytes& msg) {
  auto views = share::Deal(msg);
  ASSERT_TRUE(views.ok());
  for (int i = 0; i < 3; ++i) {
    jobs[i][j].length = static_cast<uint32_t>(msg.size());
    jobs[i][j].data_shares = (*views)[i].comp;
  }
}

// The value of the three parties' 16-byte share pairs (copies checked).
inline Block Open16(const std::array<std::array<Block, 2>, 3>& v) {
  Block out{};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(v[i][1], v[(i + 1) % 3][0]) << "copies of share " << (i + 1) % 3;
    for (int k = 0; k < 16; ++k) out[k] ^= v[i][0][k];
  }
  return out;
}

}  // namespace kmpc::engine::phase_testing

#endif  // KMPC_TEST_CORE_BATCH_TESTING_H_
