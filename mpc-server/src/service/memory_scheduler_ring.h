// The three parties' SchedulerRings of one cluster inside one process
// (tests): per worker, one ordered queue of control and data messages into
// each party. Sends never block; receives wait at most recv_timeout (data)
// or their deadline (control). Each link is a connection that a Reset at
// either end closes, as a TLS ring's would be: what was sent on it is
// dropped, the other end's sends and receives on it fail at once, and
// Connect (or a Reset) adopts the new one. So a peer still finishing a
// failed batch cannot leave messages for the next batch on that worker.
#ifndef KMPC_SERVICE_MEMORY_SCHEDULER_RING_H_
#define KMPC_SERVICE_MEMORY_SCHEDULER_RING_H_

#include <array>
#include <memory>

#include "absl/time/time.h"
#include "service/ring.h"

namespace kmpc::service {

class MemorySchedulerRings {
 public:
  MemorySchedulerRings(int workers, absl::Duration recv_timeout);
  ~MemorySchedulerRings();
  MemorySchedulerRings(const MemorySchedulerRings&) = delete;
  MemorySchedulerRings& operator=(const MemorySchedulerRings&) = delete;

  SchedulerRing& party(int i);
  // Every pending and later receive fails with UNAVAILABLE; Connect too.
  void Shutdown();
  // Party i's workers sleep `d` before each control message they send (a
  // follower slow to answer a proposal, as on a loaded machine); zero
  // undoes it. control_sends_delayed() counts the delayed sends made
  // (counted once their sleep is over).
  void DelayControlSends(int i, absl::Duration d);
  int control_sends_delayed() const;
  // What party i's worker w was last given by WorkerRing::SpinThroughWhile
  // says now (false when it was given none).
  bool SpinThroughAllowed(int party, int worker);

  class Shared;  // the queues, shared by the three parties' workers

 private:
  class Party;
  std::shared_ptr<Shared> shared_;
  std::array<std::unique_ptr<Party>, 3> parties_;
};

}  // namespace kmpc::service

#endif  // KMPC_SERVICE_MEMORY_SCHEDULER_RING_H_
