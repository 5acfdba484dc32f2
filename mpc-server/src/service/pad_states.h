// The pads PAD jobs leave for one Sign item each (one_use_states.h).
#ifndef KMPC_SERVICE_PAD_STATES_H_
#define KMPC_SERVICE_PAD_STATES_H_

#include <cstddef>

#include "absl/time/time.h"
#include "engine/engine.h"
#include "service/one_use_states.h"

namespace kmpc::service {

// Pads left by PAD jobs for one Sign item each.
class PadStates : public OneUseStates<engine::PadState> {
 public:
  PadStates(absl::Duration ttl, size_t max_entries, size_t max_bytes)
      : OneUseStates(ttl, max_entries, max_bytes, "PAD jobs awaiting Sign") {}
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_PAD_STATES_H_
