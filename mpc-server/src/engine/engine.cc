// The job engine: one batch = digest agreement, counter draw, one
// bitsliced AES pass over every block of every job, then (if needed) the
// H-power extension, one GF(2^128) multiplication round and one reveal
// round for the tag checks. See engine.h and shared/design/enctype.md.
#include "engine/engine.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "aes/aes.h"
#include "protocol/gf128.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

constexpr size_t kMaxKeyIdBytes = 256;
constexpr int kMaxCounterDraws = 16;

using Block = std::array<uint8_t, 16>;

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int k = 3; k >= 0; --k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
}
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int k = 7; k >= 0; --k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
}
void PutBytes(std::vector<uint8_t>& out, absl::Span<const uint8_t> b) {
  PutU32(out, static_cast<uint32_t>(b.size()));
  out.insert(out.end(), b.begin(), b.end());
}

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) {
    ok_ = ctx_ != nullptr && EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) == 1;
  }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void Update(absl::Span<const uint8_t> b) {
    if (ok_ && !b.empty()) ok_ = EVP_DigestUpdate(ctx_, b.data(), b.size()) == 1;
  }
  absl::StatusOr<Block> Final32(uint8_t* out32) {
    unsigned int len = 0;
    if (!ok_ || EVP_DigestFinal_ex(ctx_, out32, &len) != 1 || len != 32) {
      return absl::InternalError("SHA-256 failed");
    }
    return Block{};
  }

 private:
  EVP_MD_CTX* ctx_;
  bool ok_;
};

// 128-bit big-endian counter helpers.
struct U128 {
  uint64_t hi, lo;
};
U128 LoadBe(const uint8_t* p) {
  uint64_t hi, lo;
  std::memcpy(&hi, p, 8);
  std::memcpy(&lo, p + 8, 8);
  return {__builtin_bswap64(hi), __builtin_bswap64(lo)};
}
void StoreBe(U128 v, uint8_t* p) {
  const uint64_t hi = __builtin_bswap64(v.hi), lo = __builtin_bswap64(v.lo);
  std::memcpy(p, &hi, 8);
  std::memcpy(p + 8, &lo, 8);
}
// enctype.md: c0 != 0 and c0 + n <= 2^128 - 1, so no block c0 .. c0+n is
// the all-zero block.
bool CounterRangeOk(const uint8_t* ctr0, uint64_t n) {
  const U128 c = LoadBe(ctr0);
  if (c.hi == 0 && c.lo == 0) return false;
  const uint64_t lo = c.lo + n;
  const bool carry = lo < c.lo;
  return !(carry && c.hi == ~uint64_t{0});
}
void CounterPlus(const uint8_t* ctr0, uint64_t i, uint8_t* out) {
  U128 c = LoadBe(ctr0);
  const uint64_t lo = c.lo + i;
  if (lo < c.lo) ++c.hi;
  c.lo = lo;
  StoreBe(c, out);
}

std::array<uint8_t, 4> UsageBe(uint32_t usage) {
  return {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
          static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage)};
}

// Per-job working state inside RunBatch.
struct Work {
  absl::Status status;
  std::shared_ptr<const KeyShares> key;
  uint8_t key_view = 0;     // KeyView: this party's view of the job's key
  bool needs_ctr0 = false;  // the cluster picks it
  bool ctr0_drawn = false;
  bool check = false;       // masked zero test of T'
  Block ctr0{};
  uint64_t nks = 0;          // keystream blocks
  size_t lane0 = 0;          // lane of AES_K(c0); keystream follows
  std::vector<uint8_t> ghash_in;  // public GHASH input blocks
  size_t m = 0;                   // GHASH blocks = powers needed
  Block tag{};                    // public tag to check against
  std::array<std::vector<uint8_t>, 2> powers;  // if m > stored
  std::array<Block, 2> tprime{};               // shares of T' (or tag)
  ~Work() {
    for (auto& p : powers) share::Wipe(p);
    for (auto& t : tprime) share::Wipe(t.data(), t.size());
  }
  const uint8_t* Powers(int comp) const {
    return m > static_cast<size_t>(kStoredHPowers) ? powers[comp].data()
                                                   : key->h_powers[comp].data();
  }
};

bool NeedsKey(JobType t) { return t != JobType::kFinalize; }

// One party's view of one job's key, compared among the three parties in
// the agreement: 1 code byte, the cipher, the dealing id (not secret).
enum KeyView : uint8_t {
  kViewNone = 0,     // no key needed (FINALIZE) or the job is malformed
  kViewMissing = 1,  // the store has no shares for the key id
  kViewBad = 2,      // shares unusable here (malformed, other party, I/O)
  kViewPresent = 3,
};
constexpr size_t kKeyViewBytes = 18;

void EncodeKeyView(const Work& w, uint8_t* out) {
  std::memset(out, 0, kKeyViewBytes);
  out[0] = w.key_view;
  if (w.key_view == kViewPresent && w.key != nullptr) {
    out[1] = static_cast<uint8_t>(w.key->cipher);
    std::memcpy(out + 2, w.key->deal_id.data(), 16);
  }
}

std::string PartyList(const std::vector<int>& parties) {
  std::string s;
  for (size_t k = 0; k < parties.size(); ++k) {
    absl::StrAppend(&s, k == 0 ? "" : (k + 1 == parties.size() ? " and " : ", "),
                    parties[k]);
  }
  return s;
}

// The per-job outcome of the three parties' key views (views[p] is party
// p's 18-byte encoding): the same on every party since all three hold the
// same three views. Only a job whose key is present with the same cipher
// and dealing on all three parties is computed; the others fail alone.
void DecideKey(Work& w, const std::array<const uint8_t*, 3>& views) {
  if (views[0][0] == kViewNone && views[1][0] == kViewNone &&
      views[2][0] == kViewNone) {
    return;  // malformed job or FINALIZE: status already set alike
  }
  bool same = true;
  std::vector<int> missing, bad;
  for (int p = 0; p < 3; ++p) {
    if (views[p][0] == kViewMissing) missing.push_back(p);
    if (views[p][0] == kViewBad || views[p][0] == kViewNone) bad.push_back(p);
    if (std::memcmp(views[p], views[0], kKeyViewBytes) != 0) same = false;
  }
  if (same && views[0][0] == kViewPresent) return;  // compute it
  w.key.reset();
  if (!missing.empty()) {
    w.status = absl::NotFoundError(
        missing.size() == 3
            ? std::string("unknown key id")
            : absl::StrCat("unknown key id: no shares on MPC party ",
                           PartyList(missing),
                           " (the key store of the cluster is inconsistent)"));
  } else if (!bad.empty()) {
    w.status = absl::FailedPreconditionError(absl::StrCat(
        "stored key shares are unusable on MPC party ", PartyList(bad)));
  } else {
    w.status = absl::FailedPreconditionError(
        "the MPC servers hold different dealings of this key (deal_id or "
        "cipher differ): re-deal it");
  }
}

absl::Status CheckKeyId(const Job& job) {
  if (job.key_id.empty() || job.key_id.size() > kMaxKeyIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key_id must be 1..", kMaxKeyIdBytes, " bytes, got ", job.key_id.size()));
  }
  return absl::OkStatus();
}

// Checks one job's public inputs; fills the public parts of `w`.
absl::Status ValidateJob(const Job& job, Work& w) {
  switch (job.type) {
    case JobType::kEncrypt: {
      if (absl::Status s = CheckKeyId(job); !s.ok()) return s;
      // nblocks 0 is an empty plaintext (enctype.md allows it; the shared
      // vectors have one): no keystream, the tag covers only A.
      if (job.nblocks > kMaxJobBlocks) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ENCRYPT: nblocks must be 0..", kMaxJobBlocks, ", got ", job.nblocks));
      }
      if (!job.data.empty() || !job.checksum.empty() || job.state != nullptr) {
        return absl::InvalidArgumentError(
            "ENCRYPT: data, checksum and state must be empty");
      }
      w.needs_ctr0 = true;
      w.nks = job.nblocks;
      w.m = protocol::GhashBlocks(4, 16 * static_cast<size_t>(job.nblocks));
      return absl::OkStatus();
    }
    case JobType::kFinalize:
      if (job.state == nullptr) {
        return absl::InvalidArgumentError("FINALIZE: no encrypt state");
      }
      return absl::OkStatus();
    case JobType::kDecrypt: {
      if (absl::Status s = CheckKeyId(job); !s.ok()) return s;
      if (job.data.size() < 32) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DECRYPT: ciphertext has ", job.data.size(),
            " bytes, at least 32 (ctr0 || C || T) needed"));
      }
      const size_t clen = job.data.size() - 32;
      if (clen > 16 * static_cast<size_t>(kMaxJobBlocks)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DECRYPT: ciphertext longer than ", kMaxJobBlocks, " blocks"));
      }
      if (!job.checksum.empty() || job.state != nullptr || job.nblocks != 0) {
        return absl::InvalidArgumentError(
            "DECRYPT: nblocks, checksum and state must be empty");
      }
      std::memcpy(w.ctr0.data(), job.data.data(), 16);
      w.nks = (clen + 15) / 16;
      if (!CounterRangeOk(w.ctr0.data(), w.nks)) {
        return absl::InvalidArgumentError(
            "DECRYPT: counter range touches the all-zero block");
      }
      const auto a = UsageBe(job.usage);
      w.ghash_in = protocol::GhashInput(
          a, absl::MakeConstSpan(job.data.data() + 16, clen));
      w.m = w.ghash_in.size() / 16;
      std::memcpy(w.tag.data(), job.data.data() + 16 + clen, 16);
      w.check = true;
      return absl::OkStatus();
    }
    case JobType::kChecksum:
    case JobType::kVerifyChecksum: {
      const bool verify = job.type == JobType::kVerifyChecksum;
      const char* name = verify ? "VERIFY_CHECKSUM" : "CHECKSUM";
      if (absl::Status s = CheckKeyId(job); !s.ok()) return s;
      if (job.data.size() > 16 * static_cast<size_t>(kMaxJobBlocks)) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, ": data longer than ", kMaxJobBlocks, " blocks"));
      }
      if (job.state != nullptr || job.nblocks != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": nblocks and state must be empty"));
      }
      if (verify) {
        if (job.checksum.size() != 32) {
          return absl::InvalidArgumentError(absl::StrCat(
              "VERIFY_CHECKSUM: checksum has ", job.checksum.size(),
              " bytes, want 32 (ctr0 || tag)"));
        }
        std::memcpy(w.ctr0.data(), job.checksum.data(), 16);
        std::memcpy(w.tag.data(), job.checksum.data() + 16, 16);
        if (!CounterRangeOk(w.ctr0.data(), 0)) {
          return absl::InvalidArgumentError(
              "VERIFY_CHECKSUM: ctr0 is the all-zero block");
        }
        w.check = true;
      } else {
        if (!job.checksum.empty()) {
          return absl::InvalidArgumentError("CHECKSUM: checksum must be empty");
        }
        w.needs_ctr0 = true;
      }
      // A' = usage (4 bytes big-endian) || 0x99 (enctype.md).
      const auto u = UsageBe(job.usage);
      const uint8_t a[5] = {u[0], u[1], u[2], u[3], 0x99};
      w.ghash_in = protocol::GhashInput(a, job.data);
      w.m = w.ghash_in.size() / 16;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job type ", static_cast<int>(job.type)));
}

void EncodeJob(const Job& job, std::vector<uint8_t>& out) {
  out.push_back(static_cast<uint8_t>(job.type));
  PutBytes(out, absl::MakeConstSpan(
                    reinterpret_cast<const uint8_t*>(job.key_id.data()),
                    job.key_id.size()));
  PutU32(out, job.usage);
  PutU32(out, job.nblocks);
  PutBytes(out, job.data);
  PutBytes(out, job.checksum);
  if (job.state != nullptr) {
    out.push_back(1);
    out.insert(out.end(), job.state->ctr0.begin(), job.state->ctr0.end());
    PutU32(out, job.state->nblocks);
    PutU32(out, job.state->usage);
  } else {
    out.push_back(0);
  }
}

}  // namespace

absl::StatusOr<JobResult> Finalize(const EncryptState& state, uint32_t usage,
                                   absl::Span<const uint8_t> ciphertext) {
  if (state.party < 0 || state.party > 2) {
    return absl::InvalidArgumentError("FINALIZE: state has no party");
  }
  if (usage != state.usage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FINALIZE: usage ", usage, " differs from the encryption's ", state.usage));
  }
  // At most the keystream's length: a KDC may use a prefix of it (its
  // speculative keystream is sized by a bound); the tag covers that C.
  const uint64_t n = (ciphertext.size() + 15) / 16;
  if (n > state.nblocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FINALIZE: ciphertext of ", ciphertext.size(), " bytes is ", n,
        " blocks, the encryption produced only ", state.nblocks));
  }
  const auto a = UsageBe(usage);
  std::vector<uint8_t> x = protocol::GhashInput(a, ciphertext);
  const size_t m = x.size() / 16;
  if (state.NumPowers() < m) {
    return absl::InvalidArgumentError("FINALIZE: state lacks powers of H");
  }
  JobResult r;
  r.ctr0 = state.ctr0;
  for (int k = 0; k < 2; ++k) {
    protocol::GhashWithPowers(x, state.Powers(k), r.tag[k].data());
    for (int b = 0; b < 16; ++b) r.tag[k][b] ^= state.mask[k][b];
  }
  return r;
}

class Engine::Impl {
 public:
  Impl(net::RingChannel& channel, protocol::Prss prss, EngineOptions options)
      : channel_(channel),
        prss_(std::move(prss)),
        rep3_(channel_, prss_),
        options_(options) {}

  int party() const { return prss_.party(); }

  absl::StatusOr<BatchResult> RunBatch(uint64_t batch_seq,
                                       absl::Span<const Job> jobs,
                                       const KeyLookup& lookup) {
    if (broken_) {
      return absl::FailedPreconditionError(
          "engine unusable after a ring failure: create a new Engine on a "
          "fresh ring");
    }
    absl::StatusOr<BatchResult> r = Run(batch_seq, jobs, lookup);
    // ABORTED / FAILED_PRECONDITION (agreement) and INVALID_ARGUMENT (batch
    // too large) are decided identically by all parties with the ring in
    // step; anything else came from the channel.
    if (!r.ok() && r.status().code() != absl::StatusCode::kAborted &&
        r.status().code() != absl::StatusCode::kFailedPrecondition &&
        r.status().code() != absl::StatusCode::kInvalidArgument) {
      broken_ = true;
    }
    return r;
  }

 private:
  absl::StatusOr<BatchResult> Run(uint64_t batch_seq,
                                  absl::Span<const Job> jobs,
                                  const KeyLookup& lookup);
  absl::Status AgreeOnBatch(uint64_t batch_seq, absl::Span<const Job> jobs,
                            std::vector<Work>& work);
  absl::Status DrawCounters(absl::Span<const Job> jobs, std::vector<Work>& work);
  absl::Status ExtendPowers(std::vector<Work>& work);

  net::RingChannel& channel_;
  protocol::Prss prss_;
  protocol::Rep3 rep3_;
  EngineOptions options_;
  aes::Workspace workspace_;
  // Set after a channel failure: the parties may be out of step (PRSS
  // counters, half-read messages), so the engine refuses further batches.
  bool broken_ = false;
};

// Two rounds: everyone sends (digest of public inputs, digest of its key
// view, number n of counters it draws) to party i-1, then forwards what it
// got from i+1 together with its half of the reveal of the n fresh ctr0
// values (sized by the announced n, so the ring stays in step whatever the
// inputs). Afterwards every party holds all three headers and takes the
// same decision; on a refusal the PRSS counters are re-aligned to the
// largest n. Same inputs but different key views: two more rounds of
// per-job views (DecideKey), the counters are drawn afresh.
absl::Status Engine::Impl::AgreeOnBatch(uint64_t batch_seq,
                                        absl::Span<const Job> jobs,
                                        std::vector<Work>& work) {
  std::vector<uint8_t> enc;
  // v2: the engine options that shape the rounds are part of the inputs.
  // Servers whose --small_sbox_min_blocks, --chunk_lanes or --wave_lanes
  // differ would run different circuits or message sizes and lose the
  // ring's framing; they refuse every batch here instead, with a message
  // that says so (and so do servers of different versions).
  static constexpr char kTag[] = "kmpc-batch-v2";
  enc.insert(enc.end(), kTag, kTag + sizeof kTag);
  PutU32(enc, options_.small_sbox_min_blocks);
  PutU32(enc, options_.chunk_lanes);
  PutU32(enc, options_.wave_lanes);
  PutU64(enc, batch_seq);
  PutU32(enc, static_cast<uint32_t>(jobs.size()));
  Sha256 inputs;
  inputs.Update(enc);
  Sha256 keys;
  for (size_t j = 0; j < jobs.size(); ++j) {
    enc.clear();
    EncodeJob(jobs[j], enc);
    inputs.Update(enc);
    uint8_t view[kKeyViewBytes];
    EncodeKeyView(work[j], view);
    keys.Update(view);
  }
  std::vector<size_t> pending;
  for (size_t j = 0; j < work.size(); ++j) {
    if (work[j].status.ok() && work[j].key != nullptr && work[j].needs_ctr0) {
      pending.push_back(j);
    }
  }
  constexpr size_t kHeader = 68;
  uint8_t mine[kHeader], next[kHeader];
  if (absl::StatusOr<Block> s = inputs.Final32(mine); !s.ok()) return s.status();
  if (absl::StatusOr<Block> s = keys.Final32(mine + 32); !s.ok()) return s.status();
  const uint32_t n_mine = static_cast<uint32_t>(pending.size());
  for (int k = 0; k < 4; ++k) mine[64 + k] = static_cast<uint8_t>(n_mine >> (24 - 8 * k));
  auto count_of = [](const uint8_t* h) {
    return (uint32_t{h[64]} << 24) | (uint32_t{h[65]} << 16) |
           (uint32_t{h[66]} << 8) | uint32_t{h[67]};
  };
  const uint64_t counter_before = prss_.counter();
  std::vector<uint8_t> r0(16 * n_mine), r1(16 * n_mine);
  prss_.RandomShares(r0.data(), r1.data(), r0.size());
  absl::Status st = channel_.Exchange(mine, absl::MakeSpan(next));
  if (!st.ok()) return st;
  const uint32_t n_next = count_of(next);
  if (n_next > kMaxBatchBlocks) {
    return absl::DataLossError("agreement header out of range");
  }
  // Round 2: forward next's header, reveal our component 1 (r_{i+1}).
  std::vector<uint8_t> out(kHeader + r1.size()), in(kHeader + 16 * n_next);
  std::memcpy(out.data(), next, kHeader);
  if (!r1.empty()) std::memcpy(out.data() + kHeader, r1.data(), r1.size());
  st = channel_.Exchange(out, absl::MakeSpan(in));
  if (!st.ok()) return st;
  const uint8_t* next2 = in.data();
  const uint32_t n_next2 = count_of(next2);
  const bool inputs_differ = std::memcmp(mine, next, 32) != 0 ||
                             std::memcmp(mine, next2, 32) != 0;
  const bool keys_differ = std::memcmp(mine + 32, next + 32, 32) != 0 ||
                           std::memcmp(mine + 32, next2 + 32, 32) != 0;
  if (inputs_differ || keys_differ || n_next != n_mine || n_next2 != n_mine) {
    // Keep the PRSS ids in step for the next batch (or the redraw below).
    const uint64_t most = std::max({n_mine, n_next, n_next2});
    prss_.Skip(counter_before + most - prss_.counter());
    for (auto* v : {&r0, &r1}) share::Wipe(*v);
    if (inputs_differ) {
      return absl::AbortedError(
          "batch refused: the MPC servers received different batch inputs "
          "(or run with different --small_sbox_min_blocks, --chunk_lanes or "
          "--wave_lanes, or different versions)");
    }
    if (!keys_differ) {
      // Same inputs and key views but different counts: cannot happen with
      // a correct peer.
      return absl::FailedPreconditionError(
          "batch refused: the MPC servers disagree about the jobs to run");
    }
    // Same inputs (hence the same number of jobs), different key views:
    // two more rounds exchange the per-job views, then every party fails
    // the same jobs (NOT_FOUND / FAILED_PRECONDITION) and runs the rest.
    // The ctr0 values revealed above are dropped; DrawCounters draws them.
    const size_t vbytes = kKeyViewBytes * work.size();
    std::vector<uint8_t> vmine(vbytes), vnext(vbytes), vnext2(vbytes);
    for (size_t j = 0; j < work.size(); ++j) {
      EncodeKeyView(work[j], &vmine[kKeyViewBytes * j]);
    }
    st = channel_.Exchange(vmine, absl::MakeSpan(vnext));
    if (!st.ok()) return st;
    st = channel_.Exchange(vnext, absl::MakeSpan(vnext2));
    if (!st.ok()) return st;
    const int me = party();
    for (size_t j = 0; j < work.size(); ++j) {
      std::array<const uint8_t*, 3> views;
      views[me] = &vmine[kKeyViewBytes * j];
      views[(me + 1) % 3] = &vnext[kKeyViewBytes * j];
      views[(me + 2) % 3] = &vnext2[kKeyViewBytes * j];
      DecideKey(work[j], views);
    }
    return absl::OkStatus();
  }
  // All three key views are equal: a key missing or unusable here is so
  // everywhere; normalise the statuses so all parties report alike.
  for (size_t j = 0; j < work.size(); ++j) {
    uint8_t view[kKeyViewBytes];
    EncodeKeyView(work[j], view);
    DecideKey(work[j], {view, view, view});
  }
  for (size_t p = 0; p < pending.size(); ++p) {
    Work& w = work[pending[p]];
    for (int b = 0; b < 16; ++b) {
      w.ctr0[b] = r0[16 * p + b] ^ r1[16 * p + b] ^ in[kHeader + 16 * p + b];
    }
    w.ctr0_drawn = true;
  }
  return absl::OkStatus();
}

// ctr0 for ENCRYPT and CHECKSUM: a fresh PRSS random value revealed among
// the servers (never chosen by the KDC; the first draw rides on the
// agreement), redrawn here while its range would touch the all-zero block.
absl::Status Engine::Impl::DrawCounters(absl::Span<const Job> jobs,
                                        std::vector<Work>& work) {
  std::vector<size_t> pending;
  for (size_t j = 0; j < work.size(); ++j) {
    const Work& w = work[j];
    if (w.status.ok() && w.key != nullptr && w.needs_ctr0 &&
        (!w.ctr0_drawn || !CounterRangeOk(w.ctr0.data(), w.nks))) {
      pending.push_back(j);
    }
  }
  for (int draw = 0; !pending.empty(); ++draw) {
    if (draw == kMaxCounterDraws) {
      return absl::InternalError("could not draw a valid counter");
    }
    const size_t n = 16 * pending.size();
    std::vector<uint8_t> c0(n), c1(n), open(n);
    prss_.RandomShares(c0.data(), c1.data(), n);
    absl::Status st = rep3_.Reveal(c0, c1, absl::MakeSpan(open));
    if (!st.ok()) return st;
    std::vector<size_t> again;
    for (size_t p = 0; p < pending.size(); ++p) {
      Work& w = work[pending[p]];
      std::memcpy(w.ctr0.data(), open.data() + 16 * p, 16);
      if (!CounterRangeOk(w.ctr0.data(), w.nks)) again.push_back(pending[p]);
    }
    pending.swap(again);
  }
  (void)jobs;
  return absl::OkStatus();
}

// Powers of H beyond the stored ones, by doubling: H^(a+1..2a) =
// H^a * H^(1..a), one multiplication round per doubling for all jobs.
absl::Status Engine::Impl::ExtendPowers(std::vector<Work>& work) {
  std::vector<size_t> need;
  for (size_t j = 0; j < work.size(); ++j) {
    Work& w = work[j];
    if (!w.status.ok() || w.key == nullptr ||
        w.m <= static_cast<size_t>(kStoredHPowers)) {
      continue;
    }
    for (int k = 0; k < 2; ++k) {
      // Reserve first: assign-then-reserve would reallocate and free an
      // unwiped copy of the H-power shares.
      w.powers[k].reserve(16 * w.m);
      w.powers[k].assign(w.key->h_powers[k].begin(), w.key->h_powers[k].end());
    }
    need.push_back(j);
  }
  while (!need.empty()) {
    size_t total = 0;
    for (size_t j : need) {
      const size_t a = work[j].powers[0].size() / 16;
      total += std::min(a, work[j].m - a);
    }
    std::vector<uint8_t> x0(16 * total), x1(16 * total), y0(16 * total),
        y1(16 * total), z0(16 * total), z1(16 * total);
    size_t off = 0;
    for (size_t j : need) {
      Work& w = work[j];
      const size_t a = w.powers[0].size() / 16;
      const size_t cnt = std::min(a, w.m - a);
      for (size_t i = 0; i < cnt; ++i, off += 16) {
        std::memcpy(&x0[off], &w.powers[0][16 * (a - 1)], 16);
        std::memcpy(&x1[off], &w.powers[1][16 * (a - 1)], 16);
        std::memcpy(&y0[off], &w.powers[0][16 * i], 16);
        std::memcpy(&y1[off], &w.powers[1][16 * i], 16);
      }
    }
    absl::Status st = rep3_.GfMul(x0, x1, y0, y1, absl::MakeSpan(z0),
                                  absl::MakeSpan(z1));
    for (auto* v : {&x0, &x1, &y0, &y1}) share::Wipe(*v);
    if (!st.ok()) return st;
    off = 0;
    std::vector<size_t> again;
    for (size_t j : need) {
      Work& w = work[j];
      const size_t a = w.powers[0].size() / 16;
      const size_t cnt = std::min(a, w.m - a);
      w.powers[0].insert(w.powers[0].end(), z0.begin() + off,
                         z0.begin() + off + 16 * cnt);
      w.powers[1].insert(w.powers[1].end(), z1.begin() + off,
                         z1.begin() + off + 16 * cnt);
      off += 16 * cnt;
      if (w.powers[0].size() / 16 < w.m) again.push_back(j);
    }
    share::Wipe(z0);
    share::Wipe(z1);
    need.swap(again);
  }
  return absl::OkStatus();
}

absl::StatusOr<BatchResult> Engine::Impl::Run(uint64_t batch_seq,
                                              absl::Span<const Job> jobs,
                                              const KeyLookup& lookup) {
  const int party = prss_.party();
  std::vector<Work> work(jobs.size());
  // 1. Local checks and key lookup.
  for (size_t j = 0; j < jobs.size(); ++j) {
    Work& w = work[j];
    w.status = ValidateJob(jobs[j], w);
    if (!w.status.ok() || !NeedsKey(jobs[j].type)) continue;
    absl::StatusOr<std::shared_ptr<const KeyShares>> key =
        lookup ? lookup(jobs[j].key_id)
               : absl::StatusOr<std::shared_ptr<const KeyShares>>(
                     absl::NotFoundError("no key lookup"));
    // A key missing or unusable here fails only this job; AgreeOnBatch
    // compares the three parties' views of every job's key and fails the
    // same jobs on all of them (engine.h, KeyLookup).
    if (!key.ok() || *key == nullptr) {
      const bool missing = key.ok() || absl::IsNotFound(key.status());
      w.key_view = missing ? kViewMissing : kViewBad;
      w.status = missing ? absl::NotFoundError("unknown key id")
                         : absl::FailedPreconditionError(
                               "stored key shares are unusable");
      continue;
    }
    if (absl::Status s = (*key)->Validate(); !s.ok() || (*key)->party != party) {
      w.key_view = kViewBad;
      w.status = absl::FailedPreconditionError(
          "stored key shares are malformed or belong to another party");
      continue;
    }
    w.key = *key;
    w.key_view = kViewPresent;
  }
  // 2. Same inputs and keys on the three servers?
  if (absl::Status s = AgreeOnBatch(batch_seq, jobs, work); !s.ok()) return s;

  // 3. Counters chosen by the cluster.
  if (absl::Status s = DrawCounters(jobs, work); !s.ok()) return s;

  // 4. One bitsliced pass: per job AES_K(c0) then keystream c0+1..c0+n.
  size_t nlanes = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    Work& w = work[j];
    if (!w.status.ok() || w.key == nullptr) continue;
    w.lane0 = nlanes;
    nlanes += 1 + w.nks;
    if (nlanes > kMaxBatchBlocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch needs more than ", kMaxBatchBlocks, " AES blocks"));
    }
  }
  // Every lane's counter block and SharedLane are written below: no
  // value-initialisation (~6 MB of memset per 100,000 blocks).
  std::unique_ptr<uint8_t[]> in(new uint8_t[16 * nlanes]);
  std::array<std::vector<uint8_t>, 2> out;
  // out holds shares of AES_K(c0) and of the keystream: wiped on every
  // way out of here (the early returns below included).
  struct WipeOnExit {
    std::array<std::vector<uint8_t>, 2>& v;
    ~WipeOnExit() {
      for (auto& x : v) share::Wipe(x);
    }
  } wipe_out{out};
  out[0].resize(16 * nlanes);
  out[1].resize(16 * nlanes);
  std::unique_ptr<aes::SharedLane[]> lanes(new aes::SharedLane[nlanes]);
  for (size_t j = 0; j < jobs.size(); ++j) {
    Work& w = work[j];
    if (!w.status.ok() || w.key == nullptr) continue;
    const int nr = NumRounds(w.key->cipher);
    for (uint64_t i = 0; i <= w.nks; ++i) {
      const size_t l = w.lane0 + i;
      CounterPlus(w.ctr0.data(), i, &in[16 * l]);
      lanes[l] = aes::SharedLane{
          {w.key->round_keys[0].data(), w.key->round_keys[1].data()},
          nr,
          &in[16 * l],
          {&out[0][16 * l], &out[1][16 * l]}};
    }
  }
  const aes::SboxCircuit circuit = nlanes >= options_.small_sbox_min_blocks
                                       ? aes::SboxCircuit::kDepth6
                                       : aes::SboxCircuit::kDepth4;
  aes::SharedOptions aes_options;
  aes_options.chunk_lanes = options_.chunk_lanes;
  aes_options.wave_lanes = options_.wave_lanes;
  absl::Status st = aes::EncryptShared(rep3_,
                                       absl::MakeConstSpan(lanes.get(), nlanes),
                                       circuit, aes_options,
                                       &workspace_);
  if (!st.ok()) return st;

  // 5. Powers of H for long messages, then T' = GHASH ^ AES_K(c0) on shares.
  st = ExtendPowers(work);
  if (!st.ok()) return st;
  std::vector<size_t> checks;
  for (size_t j = 0; j < jobs.size(); ++j) {
    Work& w = work[j];
    if (!w.status.ok() || w.key == nullptr || jobs[j].type == JobType::kEncrypt) {
      continue;
    }
    for (int k = 0; k < 2; ++k) {
      protocol::GhashWithPowers(w.ghash_in, w.Powers(k), w.tprime[k].data());
      for (int b = 0; b < 16; ++b) w.tprime[k][b] ^= out[k][16 * w.lane0 + b];
    }
    if (w.check) checks.push_back(j);
  }

  // 6. Masked zero test: reveal r * (T' ^ T) for a fresh shared random r.
  std::vector<bool> pass(jobs.size(), false);
  if (!checks.empty()) {
    const size_t n = 16 * checks.size();
    std::vector<uint8_t> d0(n), d1(n), r0(n), r1(n), z0(n), z1(n), open(n);
    for (size_t c = 0; c < checks.size(); ++c) {
      const Work& w = work[checks[c]];
      std::memcpy(&d0[16 * c], w.tprime[0].data(), 16);
      std::memcpy(&d1[16 * c], w.tprime[1].data(), 16);
      for (int b = 0; b < 16; ++b) {
        if (share::HoldsPublicIn(party, 0)) d0[16 * c + b] ^= w.tag[b];
        if (share::HoldsPublicIn(party, 1)) d1[16 * c + b] ^= w.tag[b];
      }
    }
    prss_.RandomShares(r0.data(), r1.data(), n);
    st = rep3_.GfMul(r0, r1, d0, d1, absl::MakeSpan(z0), absl::MakeSpan(z1));
    if (st.ok()) st = rep3_.Reveal(z0, z1, absl::MakeSpan(open));
    for (auto* v : {&d0, &d1, &r0, &r1, &z0, &z1}) share::Wipe(*v);
    if (!st.ok()) return st;
    for (size_t c = 0; c < checks.size(); ++c) {
      uint8_t acc = 0;
      for (int b = 0; b < 16; ++b) acc |= open[16 * c + b];
      pass[checks[c]] = (acc == 0);
    }
  }

  // 7. Results.
  BatchResult result;
  result.batch_seq = batch_seq;
  result.jobs.resize(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    Work& w = work[j];
    JobResult& r = result.jobs[j];
    const Job& job = jobs[j];
    if (job.type == JobType::kFinalize && w.status.ok()) {
      if (job.state->party != party) {
        r.status = absl::FailedPreconditionError(
            "FINALIZE: encrypt state belongs to another party");
        continue;
      }
      absl::StatusOr<JobResult> f = Finalize(*job.state, job.usage, job.data);
      if (f.ok()) {
        r = std::move(*f);
      } else {
        r.status = f.status();
      }
      continue;
    }
    r.status = w.status;
    if (!w.status.ok()) continue;
    auto keystream = [&](JobResult& res) {
      for (int k = 0; k < 2; ++k) {
        res.keystream[k].assign(out[k].begin() + 16 * (w.lane0 + 1),
                                out[k].begin() + 16 * (w.lane0 + 1 + w.nks));
      }
    };
    switch (job.type) {
      case JobType::kEncrypt: {
        r.ctr0 = w.ctr0;
        keystream(r);
        auto state = std::make_shared<EncryptState>();
        state->party = party;
        state->cipher = w.key->cipher;
        state->key_id = job.key_id;
        state->usage = job.usage;
        state->nblocks = job.nblocks;
        state->ctr0 = w.ctr0;
        for (int k = 0; k < 2; ++k) {
          std::memcpy(state->mask[k].data(), &out[k][16 * w.lane0], 16);
        }
        if (w.m > static_cast<size_t>(kStoredHPowers)) {
          // The powers this job computed: moved, not copied (the state
          // wipes them).
          for (int k = 0; k < 2; ++k) state->h_powers[k] = std::move(w.powers[k]);
        } else {
          state->key = w.key;  // the stored powers suffice: no copy
        }
        r.state = std::move(state);
        break;
      }
      case JobType::kDecrypt:
        r.integrity_ok = pass[j];
        if (pass[j]) keystream(r);
        break;
      case JobType::kChecksum:
        r.ctr0 = w.ctr0;
        r.tag = w.tprime;
        break;
      case JobType::kVerifyChecksum:
        r.integrity_ok = pass[j];
        break;
      case JobType::kFinalize:
        break;
    }
  }
  return result;  // out is wiped by wipe_out
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::Status EngineOptions::Validate() const {
  if (chunk_lanes == 0 || chunk_lanes % 64 != 0) {
    return absl::InvalidArgumentError("chunk_lanes must be a positive multiple of 64");
  }
  if (wave_lanes < chunk_lanes) {
    return absl::InvalidArgumentError("wave_lanes must be >= chunk_lanes");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    net::RingChannel& channel, EngineOptions options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (channel.party() < 0 || channel.party() > 2) {
    return absl::InvalidArgumentError("channel party must be 0, 1 or 2");
  }
  absl::StatusOr<protocol::Prss> prss = protocol::Prss::Setup(channel);
  if (!prss.ok()) return prss.status();
  return std::unique_ptr<Engine>(new Engine(
      std::make_unique<Impl>(channel, std::move(*prss), options)));
}

int Engine::party() const { return impl_->party(); }

absl::StatusOr<BatchResult> Engine::RunBatch(uint64_t batch_seq,
                                             absl::Span<const Job> jobs,
                                             const KeyLookup& lookup) {
  return impl_->RunBatch(batch_seq, jobs, lookup);
}

}  // namespace kmpc::engine
