#include "engine/batch_state.h"

#include "share/replicated.h"

namespace kmpc::engine {

JobSecrets::~JobSecrets() {
  for (auto& p : powers) share::Wipe(p);
  for (auto& p : rpowers) share::Wipe(p);
  for (auto& t : rmask) share::Wipe(t.data(), t.size());
  for (auto& t : r) share::Wipe(t.data(), t.size());
  for (auto& t : tprime) share::Wipe(t.data(), t.size());
  share::Wipe(zero.data(), zero.size());
}

AesOutput::~AesOutput() {
  for (auto& x : out) share::Wipe(x);
}

BatchState::BatchState(uint64_t s, absl::Span<const Job> j, GateBudget* budget)
    : seq(s),
      jobs(j),
      plan(j.size()),
      secrets(j.size()),
      gates(std::make_unique<GateRun>(budget)) {}

}  // namespace kmpc::engine
