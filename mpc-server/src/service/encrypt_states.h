// The state ENCRYPT jobs leave for their FINALIZE (one_use_states.h).
#ifndef KMPC_SERVICE_ENCRYPT_STATES_H_
#define KMPC_SERVICE_ENCRYPT_STATES_H_

#include <cstddef>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "service/one_use_states.h"

namespace kmpc::service {

// State left by ENCRYPT jobs for their FINALIZE.
class EncryptStates : public OneUseStates<engine::EncryptState> {
 public:
  EncryptStates(absl::Duration ttl, size_t max_entries, size_t max_bytes)
      : OneUseStates(ttl, max_entries, max_bytes, "ENCRYPT jobs awaiting FINALIZE") {}
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_ENCRYPT_STATES_H_
