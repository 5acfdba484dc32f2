#include "contract.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kmpc::contract {
namespace {

JobCheck Malformed(std::string detail) {
  return {pb::JOB_MALFORMED, std::move(detail)};
}
JobCheck CannotVerify(std::string detail) {
  return {pb::JOB_INTEGRITY_FAILED, std::move(detail)};
}

JobCheck CheckSize(const JobShape& job, absl::string_view what, uint64_t n) {
  if (n > kMaxJobBytes)
    return Malformed(absl::StrCat(JobTypeName(job.type), " ", what, " of ", n,
                                  " bytes exceeds the limit of ", kMaxJobBytes));
  return {};
}

}  // namespace

bool CounterRangeOk(absl::string_view ctr0, uint64_t n) {
  if (ctr0.size() != kCtr0Size) return false;
  unsigned __int128 c0 = 0;
  for (unsigned char b : ctr0) c0 = (c0 << 8) | b;
  return c0 != 0 && c0 <= ~static_cast<unsigned __int128>(0) - n;
}

bool LinkedPadCtr0(absl::string_view ctr0, uint32_t slot, std::string* out) {
  if (slot >= kPadSlots || !CounterRangeOk(ctr0, kLinkedPadOffset + slot))
    return false;
  unsigned __int128 c = 0;
  for (unsigned char b : ctr0) c = (c << 8) | b;
  c += kLinkedPadOffset + slot;
  out->assign(kCtr0Size, '\0');
  for (int i = kCtr0Size - 1; i >= 0; --i, c >>= 8)
    (*out)[i] = static_cast<char>(c & 0xff);
  return true;
}

const char* CipherName(pb::Cipher cipher) {
  switch (cipher) {
    case pb::CIPHER_AES128: return "AES128";
    case pb::CIPHER_AES256: return "AES256";
    case pb::CIPHER_AES128_CTS: return "AES128-CTS";
    case pb::CIPHER_AES256_CTS: return "AES256-CTS";
    case pb::CIPHER_UNSPECIFIED: return "UNSPECIFIED";
    default: return "UNKNOWN";
  }
}

bool KnownCipher(pb::Cipher cipher) {
  return cipher == pb::CIPHER_AES128 || cipher == pb::CIPHER_AES256 ||
         CtsCipher(cipher);
}

bool CtsCipher(pb::Cipher cipher) {
  return cipher == pb::CIPHER_AES128_CTS || cipher == pb::CIPHER_AES256_CTS;
}

const char* JobTypeName(pb::JobType type) {
  switch (type) {
    case pb::JOB_ENCRYPT: return "ENCRYPT";
    case pb::JOB_DECRYPT: return "DECRYPT";
    case pb::JOB_CHECKSUM: return "CHECKSUM";
    case pb::JOB_VERIFY_CHECKSUM: return "VERIFY_CHECKSUM";
    case pb::JOB_FINALIZE: return "FINALIZE";
    case pb::JOB_PAD: return "PAD";
    default: return "UNKNOWN";
  }
}

JobShape ShapeOf(const pb::Job& job, const MessageShares* shares) {
  JobShape s{job.type(), job.cipher(), job.key_id().size(), job.length(),
             job.data(), job.checksum()};
  s.cts_key = job.cts_key();
  s.usage = job.usage();
  s.splice_length = job.splice_length();
  s.splice_offset = job.splice_offset();
  s.sign_pad = job.has_sign_pad();
  if (shares != nullptr) {
    s.share_sizes[0] = shares->first.size();
    s.share_sizes[1] = shares->second.size();
  }
  return s;
}

std::string WireVersionProblem(uint32_t got, absl::string_view peer) {
  if (got == kWireVersion) return {};
  return absl::StrCat(
      peer, " speaks KeyOps wire version ", got,
      got == 0 ? " (1 or unset: a build from before the flat share buffers)"
               : "",
      ", this end version ", kWireVersion,
      ": the KDC module and the MPC servers must be upgraded together");
}

MessageShares FlatReader::TakePair(uint64_t n) {
  if (n > left() / 2) return {};
  MessageShares m{buf_.substr(at_, n), buf_.substr(at_ + n, n)};
  at_ += 2 * n;
  return m;
}

absl::string_view FlatReader::Take(uint64_t n) {
  if (n > left()) return {};
  absl::string_view v = buf_.substr(at_, n);
  at_ += n;
  return v;
}

uint64_t SharedBytes(pb::JobType type, uint64_t length) {
  switch (type) {
    case pb::JOB_CHECKSUM:
      return length;
    case pb::JOB_VERIFY_CHECKSUM:
      return length + kTagSize;
    default:
      return 0;
  }
}

uint64_t SpliceDealtBytes(uint64_t m) {
  // 64 + m + 1 + 8 bytes rounded up to whole blocks, less the pad block.
  return (64 + m + 9 + 63) / 64 * 64 - 64;
}

std::string SplicePadding(uint64_t m) {
  std::string pad(SpliceDealtBytes(m) - m, '\0');
  pad[0] = static_cast<char>(0x80);
  const uint64_t bits = 8 * (64 + m);
  for (int k = 0; k < 8; ++k) pad[pad.size() - 1 - k] = static_cast<char>(bits >> (8 * k));
  return pad;
}

uint64_t CtsKeyBytes(pb::CtsKey key) {
  switch (key) {
    case pb::CTS_KEY_CF2_AES128: return 16;
    case pb::CTS_KEY_CF2_AES256: return 32;
    default: return 0;
  }
}

uint64_t CtsHashBlocks(uint64_t n) { return (n + 9 + 63) / 64; }

uint64_t CtsClassMax(pb::JobType type, uint64_t n) {
  const uint64_t hash_max = 64 * CtsHashBlocks(n) - 9;
  switch (type) {
    case pb::JOB_ENCRYPT: return std::min(16 * ((n + 15) / 16), hash_max);
    case pb::JOB_CHECKSUM: return hash_max;
    default: return n;
  }
}

uint64_t CtsSpliceWindow(uint64_t off) {
  const uint64_t end = kCtsConfounder + off + kSpliceBytes;
  return 16 * ((end + 15) / 16) - kCtsConfounder - kSpliceBytes;
}

uint64_t CtsTicketClassMax(uint64_t n) { return 64 * CtsHashBlocks(n) - 9; }

uint64_t CtsTicketWindow(uint64_t off) {
  return 64 * ((kCtsConfounder + off) / 64) + 63 - kCtsConfounder;
}

CtsShape MakeCtsShape(pb::JobType type, int nr, uint64_t n, uint64_t cf2_bytes, uint32_t usage,
                      uint64_t splice_m, uint64_t splice_off) {
  const bool ticket = type == pb::JOB_ENCRYPT && cf2_bytes == 0 && splice_m != 0 &&
                      usage == kTicketUsage;
  return {static_cast<int>(type), type == pb::JOB_CHECKSUM ? 0 : nr,
          ticket ? CtsTicketClassMax(n) : CtsClassMax(type, n), cf2_bytes,
          cf2_bytes != 0 || (type == pb::JOB_DECRYPT && usage == kTicketUsage) ||
                  (splice_m != 0 && usage == kTicketUsage)
              ? usage
              : 0,
          splice_m,
          splice_m == 0 ? splice_off
          : ticket      ? CtsTicketWindow(splice_off)
                        : CtsSpliceWindow(splice_off)};
}

int CtsRounds(pb::Cipher cipher) {
  switch (cipher) {
    case pb::CIPHER_AES128_CTS: return 10;
    case pb::CIPHER_AES256_CTS: return 14;
    default: return 0;
  }
}

uint64_t CtsLengthOf(const JobShape& s) {
  if (s.type == pb::JOB_DECRYPT) return s.length > kCtsTag ? s.length - kCtsTag : 0;
  if (s.type == pb::JOB_ENCRYPT) return kCtsConfounder + s.length;
  return s.length;
}

CtsShape CtsShapeOf(const JobShape& s) {
  return MakeCtsShape(s.type, CtsRounds(s.cipher), CtsLengthOf(s), CtsKeyBytes(s.cts_key), s.usage,
                      s.type == pb::JOB_ENCRYPT ? s.splice_length : 0,
                      s.type == pb::JOB_ENCRYPT ? s.splice_offset : 0);
}

uint64_t CtsShapeBytes(const CtsShape& s) { return std::get<2>(s) + std::get<5>(s); }

uint64_t SharedBytes(pb::JobType type, pb::Cipher cipher, uint64_t length, pb::CtsKey key,
                     uint64_t splice_length) {
  if (!CtsCipher(cipher)) return SharedBytes(type, length);
  const bool keyed = type == pb::JOB_ENCRYPT || type == pb::JOB_DECRYPT;
  const uint64_t half = keyed ? CtsKeyBytes(key) : 0;
  const uint64_t spliced = type == pb::JOB_ENCRYPT ? splice_length : 0;
  // Every input is dealt: a DECRYPT's C || T too (a password verifier to
  // whoever holds it whole, docs/security-model.md).
  return half + (keyed || type == pb::JOB_CHECKSUM ? length : 0) + spliced;
}

uint64_t SharedBytes(const pb::Job& j) {
  return SharedBytes(j.type(), j.cipher(), j.length(), j.cts_key(), j.splice_length());
}

uint64_t SharedBytes(const pb::SignItem& item) {
  return uint64_t{item.length()} + (item.verify() ? kTagSize : 0);
}

std::vector<MessageShares> SliceMessageShares(const pb::RunRequest& req) {
  std::vector<MessageShares> out(req.jobs_size());
  FlatReader r(req.data_shares());
  for (int i = 0; i < req.jobs_size(); ++i) {
    const pb::Job& j = req.jobs(i);
    if (const uint64_t n = SharedBytes(j); n > 0)
      out[i] = r.TakePair(n);
  }
  return out;
}

uint64_t RunShareBytes(const pb::RunRequest& req) {
  uint64_t n = 0;
  for (const pb::Job& j : req.jobs())
    n += 2 * SharedBytes(j);
  return n;
}

uint64_t SignShareBytes(const pb::SignRequest& req) {
  uint64_t n = 0;
  for (const pb::SignItem& it : req.items()) n += 2 * SharedBytes(it);
  return n;
}

bool ResultHasCtr0(pb::JobType type, pb::JobStatus status) {
  return status == pb::JOB_OK &&
         (type == pb::JOB_ENCRYPT || type == pb::JOB_CHECKSUM ||
          type == pb::JOB_PAD);
}

bool ResultHasCtr0(const JobShape& job, pb::JobStatus status) {
  return !CtsCipher(job.cipher) && ResultHasCtr0(job.type, status);
}

uint64_t RevealedShareBytes(const JobShape& job, pb::JobStatus status) {
  if (status != pb::JOB_OK) return 0;
  return RevealedBytes(job);
}

namespace {

// CHECKSUM and VERIFY_CHECKSUM: the message as shares only (kmpc.proto,
// "No server ever receives a plaintext").
JobCheck CheckMessageShares(const JobShape& job) {
  if (!job.data.empty())
    return Malformed(absl::StrCat(
        JobTypeName(job.type),
        " takes the message as shares (data_shares), never in the clear"));
  if (JobCheck c = CheckSize(job, "data", job.length); !c.ok()) return c;
  const uint64_t want = SharedBytes(job.type, job.length);
  if (job.share_sizes[0] != want || job.share_sizes[1] != want)
    return Malformed(absl::StrCat(
        JobTypeName(job.type), " shares of ", job.share_sizes[0], " and ",
        job.share_sizes[1], " bytes for a message of ", job.length,
        " (shares of ", want, " bytes each)"));
  return {};
}

}  // namespace

std::string CtsLengthProblem(const JobShape& job) {
  if (!CtsCipher(job.cipher)) return {};
  if (job.type == pb::JOB_ENCRYPT && job.splice_length > kMaxCtsSpliceBytes)
    return absl::StrCat("a spliced request dealt as ", job.splice_length, " bytes (at most ",
                        kMaxCtsSpliceBytes, ": an AS-REQ of ", kMaxCtsSpliceBytes - 9, ")");
  // A ticket's DECRYPT (kTicketUsage, the dealt key) is capped as a
  // ticket's ENCRYPT is; a timestamp's or a challenge's much lower.
  const bool ticket = job.usage == kTicketUsage && job.cts_key == pb::CTS_KEY_DEALT;
  const uint64_t dec_limit = (ticket ? kMaxCtsBytes : kMaxCtsDecryptBytes) + kCtsTag;
  if (job.type == pb::JOB_DECRYPT && job.length > dec_limit)
    return absl::StrCat("an aes*-cts DECRYPT's ciphertext of ", job.length, " bytes (at most ",
                        dec_limit, ")");
  const uint64_t limit = job.type == pb::JOB_ENCRYPT ? kMaxCtsBytes - kCtsConfounder : kMaxCtsBytes;
  if ((job.type == pb::JOB_ENCRYPT || job.type == pb::JOB_CHECKSUM) && job.length > limit)
    return absl::StrCat("an aes*-cts ", JobTypeName(job.type), " of ", job.length,
                        " bytes (at most ", limit, ")");
  return {};
}

namespace {

// An aes*-cts job (kmpc.proto JobType): DECRYPT of C || T, ENCRYPT of
// shared P, CHECKSUM of a shared message; lengths within CtsLengthProblem.
JobCheck CheckCtsJob(const JobShape& job) {
  const uint64_t want =
      SharedBytes(job.type, job.cipher, job.length, job.cts_key, job.splice_length);
  if (job.splice_length == 0 && job.splice_offset != 0)
    return Malformed("splice_offset without splice_length");
  if (job.sign_pad && (job.splice_length == 0 || job.usage != kTicketUsage))
    return Malformed("sign_pad without a usage-2 ENCRYPT's splice (the ticket's PAC)");
  if (job.splice_length > 0) {
    if (job.type != pb::JOB_ENCRYPT || job.cts_key != pb::CTS_KEY_DEALT ||
        job.usage != (job.sign_pad ? kTicketUsage : kSpliceReplyUsage))
      return Malformed(absl::StrCat("a splice on an aes*-cts ", JobTypeName(job.type),
                                    " (only a usage-3 ENCRYPT under the dealt key, or a "
                                    "usage-2 one with sign_pad)"));
    if (job.sign_pad && (job.splice_offset > job.length ||
                         job.length - job.splice_offset < kTicketSignatureGap + kKdcSignatureBytes))
      return Malformed(absl::StrCat("a ticket's signatures at ", job.splice_offset, " of a ",
                                    job.length, "-byte plaintext (48 bytes must fit)"));
    if (job.splice_length % 64 != 0)
      return Malformed(absl::StrCat("a spliced message dealt as ", job.splice_length,
                                    " bytes (with its SHA-1 padding: a multiple of 64)"));
    if (job.splice_offset > job.length || job.length - job.splice_offset < kSpliceBytes)
      return Malformed(absl::StrCat("splice at ", job.splice_offset, " of a ", job.length,
                                    "-byte plaintext (12 bytes must fit)"));
  }
  if (std::string why = CtsLengthProblem(job); !why.empty()) return Malformed(std::move(why));
  if (job.cts_key != pb::CTS_KEY_DEALT &&
      (CtsKeyBytes(job.cts_key) == 0 ||
       (job.type != pb::JOB_DECRYPT && job.type != pb::JOB_ENCRYPT)))
    return Malformed(absl::StrCat("cts_key ", static_cast<int>(job.cts_key),
                                  " on an aes*-cts ", JobTypeName(job.type)));
  switch (job.type) {
    case pb::JOB_DECRYPT:
      // C || T is an offline password verifier for a user's key: it goes
      // as shares only, its length in the clear (wire version 9).
      if (!job.data.empty() || !job.checksum.empty() || job.share_sizes[0] != want ||
          job.share_sizes[1] != want)
        return Malformed("an aes*-cts DECRYPT takes its length, and C || T (after a FAST "
                         "key's KDC half) as shares only, never data in the clear");
      if (job.length < kCtsConfounder + kCtsTag)
        return CannotVerify(absl::StrCat("ciphertext of ", job.length,
                                         " bytes is shorter than a block and the tag (28)"));
      return {};
    case pb::JOB_ENCRYPT:
    case pb::JOB_CHECKSUM: {
      if (!job.data.empty() || !job.checksum.empty())
        return Malformed(absl::StrCat(JobTypeName(job.type),
                                      " takes its message as shares (data_shares) only"));
      if (job.share_sizes[0] != want || job.share_sizes[1] != want)
        return Malformed(absl::StrCat(JobTypeName(job.type), " shares of ",
                                      job.share_sizes[0], " and ", job.share_sizes[1],
                                      " bytes for a message of ", job.length));
      return {};
    }
    default:
      return Malformed(absl::StrCat(JobTypeName(job.type),
                                    " is not a job of the aes*-cts ciphers"));
  }
}

}  // namespace

JobCheck CheckJob(const JobShape& job) {
  if (job.key_id_size != kKeyIdSize)
    return Malformed(absl::StrCat("key id must be ", kKeyIdSize,
                                  " bytes, got ", job.key_id_size));
  if (!KnownCipher(job.cipher))
    return Malformed(absl::StrCat(
        "cipher ", static_cast<int>(job.cipher), " (",
        CipherName(job.cipher), ") is not CIPHER_AES128, CIPHER_AES256 or an aes*-cts cipher"));
  if (CtsCipher(job.cipher)) return CheckCtsJob(job);
  if (job.cts_key != pb::CTS_KEY_DEALT)
    return Malformed("cts_key is for aes*-cts DECRYPT and ENCRYPT jobs only");
  if (job.splice_length != 0 || job.splice_offset != 0 || job.sign_pad)
    return Malformed("a splice (and sign_pad) is for an aes*-cts ENCRYPT only");
  const char* name = JobTypeName(job.type);
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      if (!job.data.empty() || !job.checksum.empty())
        return Malformed("ENCRYPT takes a length, not data or a checksum (the "
                         "plaintext never leaves the KDC)");
      return CheckSize(job, "plaintext", job.length);
    case pb::JOB_DECRYPT: {
      if (job.length != 0 || !job.checksum.empty())
        return Malformed("DECRYPT takes data only");
      if (job.data.size() < kCiphertextOverhead)
        return CannotVerify(absl::StrCat(
            "ciphertext of ", job.data.size(),
            " bytes is shorter than ctr0 || T (32 bytes)"));
      const uint64_t clen = job.data.size() - kCiphertextOverhead;
      if (JobCheck c = CheckSize(job, "ciphertext", clen); !c.ok()) return c;
      if (!CounterRangeOk(job.data.substr(0, kCtr0Size), CeilBlocks(clen)))
        return CannotVerify(
            "ciphertext counter range touches the all-zero block");
      return {};
    }
    case pb::JOB_CHECKSUM:
      if (!job.checksum.empty())
        return Malformed("CHECKSUM takes no checksum");
      return CheckMessageShares(job);
    case pb::JOB_VERIFY_CHECKSUM:
      if (JobCheck c = CheckMessageShares(job); !c.ok()) return c;
      // The tag travels as shares (SharedBytes): the clear field holds
      // its ctr0 only.
      if (job.checksum.size() != kCtr0Size)
        return CannotVerify(absl::StrCat(
            "checksum must be its ", kCtr0Size,
            "-byte ctr0 (the tag goes as shares), got ", job.checksum.size()));
      if (!CounterRangeOk(job.checksum, 0))
        return CannotVerify("checksum counter is the all-zero block");
      return {};
    case pb::JOB_PAD:
      // A checksum, if any, is a verification pad's counter (kmpc.proto
      // JOB_PAD).
      if (!job.data.empty() || job.share_sizes[0] || job.share_sizes[1])
        return Malformed("PAD takes a length and, for a verification pad, "
                         "a 16-byte counter only");
      if (!job.checksum.empty() &&
          (job.checksum.size() != kCtr0Size ||
           !CounterRangeOk(job.checksum, 0)))
        return Malformed("a verification PAD's counter must be 16 bytes, "
                         "not the all-zero block");
      return CheckSize(job, "message", job.length);
    default:
      return Malformed(absl::StrCat(
          "job type ", static_cast<int>(job.type), " (", name,
          ") is not a Run job"));
  }
}

uint64_t JobBlocks(const JobShape& job) {
  if (CtsCipher(job.cipher)) {
    // AES blocks of the CBC-CTS pass; the HMAC's compressions (about four
    // AES blocks' ANDs each per 64 bytes) are counted as one block per 16.
    const uint64_t n = job.type == pb::JOB_DECRYPT
                           ? (job.length > kCtsTag ? job.length - kCtsTag : 0)
                           : job.length + (job.type == pb::JOB_ENCRYPT ? kCtsConfounder : 0);
    // A FAST key (Job.cts_key) is derived first: PRF+ (2 blocks), DK (4),
    // two key schedules and the two HMAC states (about 12 blocks' ANDs).
    // A splice adds the checksum of its message: one block per 16 bytes
    // and the padding's and outer compressions.
    const uint64_t splice =
        job.type == pb::JOB_ENCRYPT && job.splice_length != 0 ? CeilBlocks(job.splice_length) + 8
                                                               : 0;
    return 2 * CeilBlocks(n) + 6 + (job.cts_key != pb::CTS_KEY_DEALT ? 18 : 0) + splice;
  }
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      return CeilBlocks(job.length) + 1;
    case pb::JOB_DECRYPT:
      return job.data.size() >= kCiphertextOverhead
                 ? CeilBlocks(job.data.size() - kCiphertextOverhead) + 1
                 : 1;
    default:
      return 1;
  }
}

uint64_t CtsDepthBound(const JobShape& job) {
  if (!CtsCipher(job.cipher)) return 0;
  constexpr uint64_t kCompression = 487, kCf2Key = 630;
  const uint64_t aes = CtsRounds(job.cipher) == 14 ? 56 : 40;
  const uint64_t n = CtsLengthOf(job);
  const uint64_t key = job.cts_key != pb::CTS_KEY_DEALT ? kCf2Key : 0;
  // The inner compressions after the key block, then the outer one.
  const uint64_t hash = (CtsHashBlocks(n) + 1) * kCompression;
  switch (job.type) {
    case pb::JOB_ENCRYPT: {
      const uint64_t splice =
          job.splice_length != 0 ? (job.splice_length / 64 + 1) * kCompression : 0;
      return key + std::max((n + 15) / 16 * aes, hash) + splice;
    }
    case pb::JOB_DECRYPT: return key + 2 * aes + hash + 7;
    case pb::JOB_CHECKSUM: return hash;
    default: return 0;
  }
}

uint64_t JobCost(const JobShape& job) {
  const uint64_t ghash = job.type == pb::JOB_CHECKSUM ||
                                 job.type == pb::JOB_VERIFY_CHECKSUM ||
                                 job.type == pb::JOB_PAD
                             ? CeilBlocks(job.length)
                             : 0;
  return JobBlocks(job) + ghash;
}

uint64_t RevealedBytes(const JobShape& job) {
  if (CtsCipher(job.cipher)) {
    switch (job.type) {
      case pb::JOB_ENCRYPT: return kCtsConfounder + job.length + kCtsTag;
      case pb::JOB_DECRYPT:
        return job.length >= kCtsConfounder + kCtsTag ? job.length - kCtsTag : 0;
      case pb::JOB_CHECKSUM: return kCtsTag;
      default: return 0;
    }
  }
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      return job.length;
    case pb::JOB_DECRYPT:
      return job.data.size() >= kCiphertextOverhead
                 ? job.data.size() - kCiphertextOverhead
                 : 0;
    case pb::JOB_CHECKSUM:
      return kTagSize;
    default:
      return 0;
  }
}

}  // namespace kmpc::contract
