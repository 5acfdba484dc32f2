// The Batcher (batcher.h): the dispatcher (dispatcher.h) on a thread of its
// own, behind the public face the KDC module and the router use.
#include "batcher.h"

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "dispatcher.h"

namespace kmpc::kdc {

Batcher::Batcher(BatcherOptions options, Transport* transport, Sink* sink,
                 BatchObserver* observer)
    : dispatcher_(
          std::make_shared<Dispatcher>(options, transport, sink, observer)) {
  thread_ = std::thread([d = dispatcher_.get()] { d->RunUntilStopped(); });
}

Batcher::~Batcher() { Stop(); }

absl::Status Batcher::Submit(uint64_t token, Job job) {
  return dispatcher_->Submit(token, std::move(job));
}

absl::Status Batcher::Begin(uint64_t id, Plan plan,
                            std::vector<ItemJob> given) {
  return dispatcher_->Begin(id, std::move(plan), std::move(given));
}

absl::Status Batcher::SubmitItem(uint64_t id, int item, uint64_t token,
                                 Job job) {
  return dispatcher_->SubmitItem(id, item, token, std::move(job));
}

std::optional<ExchangeRecord> Batcher::End(uint64_t id) {
  return dispatcher_->End(id);
}

void Batcher::CountMiss(uint64_t id, int item, Miss why) {
  dispatcher_->CountMiss(id, item, why);
}

void Batcher::SubmitterIdle() { dispatcher_->SubmitterIdle(); }

std::vector<uint64_t> Batcher::TakeQueued(std::vector<uint64_t>* held_back) {
  return dispatcher_->TakeQueued(held_back);
}

void Batcher::Stop() {
  dispatcher_->RequestStop();
  if (thread_.joinable()) thread_.join();
  dispatcher_->Close();
}

BatcherStats Batcher::stats() const { return dispatcher_->Stats(); }

}  // namespace kmpc::kdc
