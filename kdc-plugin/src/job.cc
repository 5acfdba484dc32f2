#include "job.h"

#include "absl/strings/str_cat.h"

namespace kmpc::kdc {
uint64_t CeilBlocks(size_t n) { return (n + kBlock - 1) / kBlock; }

bool CounterRangeOk(const std::string& ctr0, uint64_t n) {
  if (ctr0.size() != kBlock) return false;
  unsigned __int128 c0 = 0;
  for (unsigned char b : ctr0) c0 = (c0 << 8) | b;
  return c0 != 0 && c0 <= ~static_cast<unsigned __int128>(0) - n;
}

const char* JobTypeName(JobType t) {
  switch (t) {
    case JobType::kDecrypt: return "DECRYPT";
    case JobType::kEncrypt: return "ENCRYPT";
    case JobType::kChecksum: return "CHECKSUM";
    case JobType::kVerify: return "VERIFY";
  }
  return "UNKNOWN";
}

absl::Status ValidateJob(const Job& job) {
  if (job.key_id.size() != kKeyIdSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "key id must be ", kKeyIdSize, " bytes, got ", job.key_id.size()));
  switch (job.type) {
    case JobType::kEncrypt:
    case JobType::kChecksum:
      if (job.input.size() > kMaxJobBytes)
        return absl::InvalidArgumentError(absl::StrCat(
            JobTypeName(job.type), " input of ", job.input.size(),
            " bytes exceeds the cluster's limit of ", kMaxJobBytes));
      if (!job.checksum.empty())
        return absl::InvalidArgumentError("only VERIFY takes a checksum");
      return absl::OkStatus();
    case JobType::kDecrypt: {
      if (job.input.size() < kOverhead)
        return IntegrityError(absl::StrCat(
            "ciphertext of ", job.input.size(),
            " bytes is shorter than ctr0 || T (32 bytes)"));
      size_t clen = job.input.size() - kOverhead;
      if (clen > kMaxJobBytes)
        return absl::InvalidArgumentError(absl::StrCat(
            "ciphertext of ", clen, " bytes exceeds the cluster's limit"));
      std::string ctr0(job.input.begin(), job.input.begin() + kBlock);
      if (!CounterRangeOk(ctr0, CeilBlocks(clen)))
        return IntegrityError("ciphertext counter range touches the all-zero "
                              "block");
      return absl::OkStatus();
    }
    case JobType::kVerify:
      if (job.input.size() > kMaxJobBytes)
        return absl::InvalidArgumentError("VERIFY data exceeds the cluster's "
                                          "limit");
      if (job.checksum.size() != kOverhead)
        return IntegrityError(absl::StrCat(
            "checksum must be 32 bytes (ctr0 || tag), got ",
            job.checksum.size()));
      if (!CounterRangeOk(job.checksum.substr(0, kBlock), 0))
        return IntegrityError("checksum counter is the all-zero block");
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job type ", static_cast<int>(job.type)));
}

uint64_t JobBlocks(const Job& job) {
  switch (job.type) {
    case JobType::kEncrypt: return CeilBlocks(job.input.size()) + 1;
    case JobType::kDecrypt:
      return job.input.size() >= kOverhead
                 ? CeilBlocks(job.input.size() - kOverhead) + 1
                 : 1;
    case JobType::kChecksum:
    case JobType::kVerify: return 1;
  }
  return 1;
}

}  // namespace kmpc::kdc
