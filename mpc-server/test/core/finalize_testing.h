// Test-only: both replicated components of an ENCRYPT's tag, as one party
// holds them. The server never computes this for anyone: KeyOps.Finalize
// answers engine::FinalizeShare's one additive share, because two answers
// that each carried both components would give a KDC that sent two servers
// different ciphertexts [H]_j times a known difference, i.e. H = AES_K(0)
// (enctype.md, security invariant 7; engine.h, FinalizeShare). Tests use it
// to check the tag against the replicated sharing and as the control of
// that attack. It lives here, outside every library the server links, and
// integration-tests/test_code_layout.py fails if mpc-server/src names it.
#ifndef KMPC_TEST_CORE_FINALIZE_TESTING_H_
#define KMPC_TEST_CORE_FINALIZE_TESTING_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/engine.h"
#include "protocol/gf128.h"

namespace kmpc::testing {

// tag[k] = component (party+k)%3 of GHASH_H(A, C) ^ AES_K(c0), with
// A = usage (4 bytes big-endian) (enctype.md); the checks are
// FinalizeShare's, whose share is component 0.
inline absl::StatusOr<engine::JobResult> FinalizeBothComponents(
    const engine::EncryptState& state, uint32_t usage,
    absl::Span<const uint8_t> ciphertext) {
  engine::JobResult r;
  if (absl::Status st = engine::FinalizeShare(state, usage, ciphertext, r.tag[0]);
      !st.ok())
    return st;
  r.ctr0 = state.ctr0;
  const uint8_t a[4] = {static_cast<uint8_t>(usage >> 24),
                        static_cast<uint8_t>(usage >> 16),
                        static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage)};
  const std::vector<uint8_t> x = protocol::GhashInput(a, ciphertext);
  protocol::GhashWithPowers(x, state.Powers(1), r.tag[1].data());
  for (int b = 0; b < 16; ++b) r.tag[1][b] ^= state.mask[1][b];
  return r;
}

}  // namespace kmpc::testing

#endif  // KMPC_TEST_CORE_FINALIZE_TESTING_H_
