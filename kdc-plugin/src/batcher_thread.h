// The Batcher: a cluster's dispatcher (dispatcher.h: the queue, the flush
// policy of batcher.h, the batches in flight) on a thread of its own. The
// router (router.h) has one per cluster; the tests drive one alone.
//
// Invariants:
//  - The dispatcher thread runs from the constructor until Stop() (or the
//    destructor); the queue is reached through dispatcher() meanwhile.
//  - Once Stop() has returned the sink hears nothing more: queued and
//    in-flight jobs are abandoned, and a batch whose transport calls back
//    late completes nothing.
#ifndef KMPC_KDC_PLUGIN_BATCHER_THREAD_H_
#define KMPC_KDC_PLUGIN_BATCHER_THREAD_H_

#include <cstddef>
#include <memory>
#include <thread>

#include "batch_stats.h"
#include "batcher.h"
#include "transport.h"

namespace kmpc::kdc {

class Dispatcher;
class GateBook;

class Batcher {
 public:
  // observer (may be null) must outlive the Batcher. gates: the module's
  // gate book (gate_book.h) and this batcher's cluster in it (null: a book
  // of its own).
  Batcher(BatcherOptions options, Transport* transport, Sink* sink,
          BatchObserver* observer = nullptr, std::shared_ptr<GateBook> gates = nullptr,
          size_t cluster = 0);
  ~Batcher();  // Stop()

  // The queue (dispatcher.h): Submit, the planned exchanges (Begin,
  // SubmitItem, End, CountMiss), SubmitterIdle and TakeQueued, served by
  // this batcher's thread until Stop().
  Dispatcher& dispatcher() const { return *dispatcher_; }

  // Stops the dispatcher thread and abandons queued and in-flight jobs: the
  // sink receives nothing once Stop has returned. The transport must stay
  // usable until Stop returns; late transport callbacks after that are
  // harmless.
  void Stop();

  BatcherStats stats() const;

 private:
  std::shared_ptr<Dispatcher> dispatcher_;  // shared with batches in flight
  std::thread thread_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_BATCHER_THREAD_H_
