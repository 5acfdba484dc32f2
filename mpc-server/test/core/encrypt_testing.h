// Test-only: one ENCRYPT job run by three engines on a fresh in-memory
// ring, for tests that check which key a set of stored shares computes
// (refresh_test, refresh_check_test).
#ifndef KMPC_TEST_CORE_ENCRYPT_TESTING_H_
#define KMPC_TEST_CORE_ENCRYPT_TESTING_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "net/memory_ring.h"
#include "test_util.h"

namespace kmpc::testing {

namespace pb = ::kmpc::v1;

// The combined keystream (nblocks x 16 bytes, keystream[0] of the three
// parties XORed) and ctr0 of an ENCRYPT job under key_id, usage 7, party
// i's job naming cipher[i] and its engine looking keys up with lookup(i). A party's failed batch or a
// job that is not JOB_OK is the error.
inline absl::StatusOr<std::pair<std::vector<uint8_t>, std::array<uint8_t, 16>>>
EncryptOnFreshRing(const std::array<pb::Cipher, 3>& cipher, const std::string& key_id,
                   uint32_t nblocks, const std::function<engine::KeyLookup(int)>& lookup) {
  net::InMemoryRing ring(std::chrono::milliseconds(20000));
  std::array<absl::StatusOr<engine::BatchResult>, 3> r;
  RunParties([&](int i) -> absl::Status {
    auto e = engine::Engine::Create(ring.party(i));
    if (!e.ok()) return e.status();
    engine::Job job;
    job.type = pb::JOB_ENCRYPT;
    job.cipher = cipher[i];
    job.key_id = key_id;
    job.usage = 7;
    job.nblocks = nblocks;
    r[i] = (*e)->RunBatch(1, {job}, lookup(i));
    return r[i].status();
  });
  std::vector<uint8_t> ks;
  for (int i = 0; i < 3; ++i) {
    if (!r[i].ok()) return r[i].status();
    const engine::JobResult& j = r[i]->jobs[0];
    if (j.status != pb::JOB_OK)
      return absl::InternalError(absl::StrCat("party ", i, ": job status ", j.status,
                                              ": ", j.detail));
    ks.resize(j.keystream[0].size());
    for (size_t k = 0; k < ks.size(); ++k) ks[k] ^= j.keystream[0][k];
  }
  return std::make_pair(std::move(ks), r[0]->jobs[0].ctr0);
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_ENCRYPT_TESTING_H_
