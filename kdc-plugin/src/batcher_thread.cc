// The Batcher (batcher_thread.h): the dispatcher (dispatcher.h) on a thread
// of its own; the router and the tests reach the queue through dispatcher().
#include "batcher_thread.h"

#include <memory>
#include <thread>
#include <utility>

#include "dispatcher.h"

namespace kmpc::kdc {

Batcher::Batcher(BatcherOptions options, Transport* transport, Sink* sink,
                 BatchObserver* observer, std::shared_ptr<GateBook> gates, size_t cluster)
    : dispatcher_(std::make_shared<Dispatcher>(options, transport, sink, observer,
                                               std::move(gates), cluster)) {
  thread_ = std::thread([d = dispatcher_.get()] { d->RunUntilStopped(); });
}

Batcher::~Batcher() { Stop(); }

void Batcher::Stop() {
  dispatcher_->RequestStop();
  if (thread_.joinable()) thread_.join();
  dispatcher_->Close();
}

BatcherStats Batcher::stats() const { return dispatcher_->Stats(); }

}  // namespace kmpc::kdc
