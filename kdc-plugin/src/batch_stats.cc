#include "batch_stats.h"

#include "absl/strings/str_format.h"

namespace kmpc::kdc {

void StepFigures::AddRun(const kmpc::v1::BatchStats& party0,
                         uint64_t max_queue_us, uint64_t max_compute_us) {
  server_queue_us += max_queue_us;
  server_compute_us += max_compute_us;
  ring_messages += party0.ring_messages();
}

std::string DebugLine(uint64_t seq, size_t jobs, size_t failed,
                      uint64_t requested_blocks, absl::Duration queued,
                      absl::Duration total, const StepFigures& f) {
  return absl::StrFormat(
      "kdcmpc: batch #%d: %d jobs (%d failed), %d AES blocks (%d requested), "
      "queued %.1f ms, run %.1f ms (servers: queue %.1f ms, compute %.1f ms, "
      "%d ring messages), finalize %.1f ms, total %.1f ms",
      seq, jobs, failed, f.blocks.load(), requested_blocks,
      absl::ToDoubleMilliseconds(queued), f.run_us.load() / 1000.0,
      f.server_queue_us.load() / 1000.0, f.server_compute_us.load() / 1000.0,
      f.ring_messages.load(), f.finalize_us.load() / 1000.0,
      absl::ToDoubleMilliseconds(total));
}

}  // namespace kmpc::kdc
