#include "job.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

contract::JobShape ShapeOf(const Job& job) {
  contract::JobShape s;
  s.type = job.type;
  s.cipher = job.cipher;
  s.key_id_size = job.key_id.size();
  if (job.type == pb::JOB_ENCRYPT) {
    s.length = job.input.size();
  } else if (job.type == pb::JOB_CHECKSUM ||
             job.type == pb::JOB_VERIFY_CHECKSUM) {
    // Sent as shares of the message, each as long as it (kmpc.proto
    // Job.data_shares): the module deals them after this check.
    s.length = job.input.size();
    s.share_sizes[0] = s.share_sizes[1] = s.length;
  } else if (job.type == pb::JOB_PAD) {
    s.length = job.pad_length;
  } else {
    s.data = absl::string_view(reinterpret_cast<const char*>(job.input.data()),
                               job.input.size());
  }
  s.checksum = job.checksum;
  return s;
}

absl::Status CheckJob(const Job& job) {
  contract::JobCheck c = contract::CheckJob(ShapeOf(job));
  switch (c.status) {
    case pb::JOB_OK:
      return absl::OkStatus();
    case pb::JOB_INTEGRITY_FAILED:
      return absl::DataLossError(c.detail);
    default:
      return absl::InvalidArgumentError(c.detail);
  }
}

uint64_t JobBlocks(const Job& job) { return contract::JobBlocks(ShapeOf(job)); }

uint64_t JobCost(const Job& job) { return contract::JobCost(ShapeOf(job)); }

}  // namespace kmpc::kdc
