#include "job.h"

#include "absl/strings/str_cat.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

size_t SharedBytes(const Job& job) {
  return contract::SharedBytes(job.type, job.cipher, job.input.size(), job.cts_key,
                               job.splice.size());
}

contract::JobShape ShapeOf(const Job& job) {
  contract::JobShape s;
  s.type = job.type;
  s.cipher = job.cipher;
  s.key_id_size = job.key_id.size();
  s.usage = job.usage;
  s.splice_length = job.splice.size();
  s.splice_offset = job.splice_offset;
  s.sign_pad = !job.sign_key_id.empty();
  if (job.type == pb::JOB_ENCRYPT) {
    s.length = job.input.size();
    // An aes*-cts ENCRYPT's plaintext, and a spliced message after it, go
    // as shares (cts_items.h).
    s.share_sizes[0] = s.share_sizes[1] = SharedBytes(job);
  } else if (job.type == pb::JOB_CHECKSUM ||
             job.type == pb::JOB_VERIFY_CHECKSUM) {
    // Sent as shares of the message, each as long as it (kmpc.proto
    // Job.data_shares): the module deals them after this check.
    s.length = job.input.size();
    s.share_sizes[0] = s.share_sizes[1] =
        contract::SharedBytes(job.type, s.length);
  } else if (job.type == pb::JOB_PAD) {
    s.length = job.pad_length;
  } else if (contract::CtsCipher(job.cipher)) {
    // An aes*-cts DECRYPT: a FAST key's KDC half and C || T go as shares,
    // the length in the clear (cts_items.h).
    s.length = job.input.size();
    s.share_sizes[0] = s.share_sizes[1] = SharedBytes(job);
  } else {
    s.data = absl::string_view(reinterpret_cast<const char*>(job.input.data()),
                               job.input.size());
  }
  s.cts_key = job.cts_key;
  s.checksum = job.checksum;
  // A VERIFY_CHECKSUM's ctr0 || tag: the wire carries ctr0 in the clear
  // and the tag as shares (kmpc.proto JOB_VERIFY_CHECKSUM). Of another
  // size it stays whole and fails the contract's check.
  if (job.type == pb::JOB_VERIFY_CHECKSUM &&
      job.checksum.size() == contract::kChecksumSize)
    s.checksum = s.checksum.substr(0, contract::kCtr0Size);
  return s;
}

namespace {

JobFigures FiguresOfShape(const contract::JobShape& s) {
  JobFigures f;
  f.cost = contract::JobCost(s);
  f.depth = contract::CtsDepthBound(s);
  f.cts = contract::CtsCipher(s.cipher);
  if (f.cts) f.program = contract::CtsShapeOf(s);
  return f;
}

}  // namespace

JobFigures FiguresOf(const Job& job) { return FiguresOfShape(ShapeOf(job)); }

absl::Status CheckJob(const Job& job, JobFigures* figures) {
  if (job.cf2_half.size() != contract::CtsKeyBytes(job.cts_key))
    return absl::InvalidArgumentError("a FAST key's KDC half of the wrong size");
  if (job.type == pb::JOB_VERIFY_CHECKSUM &&
      job.checksum.size() != contract::kChecksumSize)
    return absl::DataLossError(absl::StrCat(
        "checksum must be ", contract::kChecksumSize,
        " bytes (ctr0 || tag), got ", job.checksum.size()));
  const contract::JobShape shape = ShapeOf(job);
  // Bounded depth (contract.h kMaxCtsBytes): a job longer than real
  // exchanges need is refused here, never batched beside others' logins.
  if (std::string why = contract::CtsLengthProblem(shape); !why.empty())
    return absl::OutOfRangeError(absl::StrCat("over the aes*-cts length cap: ", why));
  contract::JobCheck c = contract::CheckJob(shape);
  switch (c.status) {
    case pb::JOB_OK:
      if (figures != nullptr) *figures = FiguresOfShape(shape);
      return absl::OkStatus();
    case pb::JOB_INTEGRITY_FAILED:
      return absl::DataLossError(c.detail);
    default:
      return absl::InvalidArgumentError(c.detail);
  }
}

bool CtsBatchShapes::TakeIfFits(JobFifo::iterator first, JobFifo::iterator last,
                                bool always) {
  std::set<contract::CtsShape> fresh;  // the unit's programs not taken yet
  uint64_t bytes = 0;
  for (auto it = first; it != last; ++it) {
    if (!it->figures.cts) continue;
    const contract::CtsShape& s = it->figures.program;
    if (shapes_.count(s) == 0 && fresh.insert(s).second) bytes += contract::CtsShapeBytes(s);
  }
  if (!always && bytes_ + bytes > contract::kCtsBatchBytes) return false;
  bytes_ += bytes;
  shapes_.merge(fresh);
  return true;
}

uint64_t JobBlocks(const Job& job) { return contract::JobBlocks(ShapeOf(job)); }

uint64_t JobCost(const Job& job) { return contract::JobCost(ShapeOf(job)); }

uint64_t JobDepth(const Job& job) { return contract::CtsDepthBound(ShapeOf(job)); }

}  // namespace kmpc::kdc
