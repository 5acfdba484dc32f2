// The job engine: one batch runs as named phases (Engine::Impl::Run):
//   LookupKeys    contract check, this party's key for every job;
//   AgreeOnBatch  digests of the public inputs and key views compared on the
//                 ring (agreement.h), first ctr0 draw riding along; then
//                 what a user's key may not run fails (user_key_rule.h);
//   DrawCounters  ctr0 for jobs the agreement drew none for (one reveal);
//   RunAes        one bitsliced AES pass over every block of every job;
//   ComputeTags   H-power extension and T' = GHASH ^ AES_K(c0) on shares;
//   CheckTags     one GF(2^128) multiplication round and one reveal round;
//   Collect       the per-job results.
// Public per-job metadata (JobPlan) and secret share buffers (JobSecrets,
// AesOutput) live apart; the secret ones are wiped on every way out. See
// engine.h and docs/design/enctype.md.
#include "engine/engine.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "aes/aes.h"
#include "engine/agreement.h"
#include "engine/cts_jobs.h"
#include "engine/gate_budget.h"
#include "engine/user_key_rule.h"
#include "cts/cts.h"
#include "protocol/gf128.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"
#include "protocol/verify.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

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

using protocol::Sha256;

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
void CounterPlus(const uint8_t* ctr0, uint64_t i, uint8_t* out) {
  U128 c = LoadBe(ctr0);
  const uint64_t lo = c.lo + i;
  if (lo < c.lo) ++c.hi;
  c.lo = lo;
  StoreBe(c, out);
}
bool CounterRangeOk(const Block& ctr0, uint64_t n) {
  return contract::CounterRangeOk(
      absl::string_view(reinterpret_cast<const char*>(ctr0.data()), 16), n);
}

// A drawn ctr0 (public, opened among the servers) made valid without
// another round: if its range c0 .. c0 + max(n, kLinkedPadOffset +
// kPadSlots) (every linked pad's slot, Job::pad_slot) would
// touch the all-zero block (c0 = 0 or c0 > 2^128 - 1 - that; probability
// below 2^-106 for an honest draw), its top bit is flipped, which puts it
// in [2^127 - 2^21, 2^127], valid for every job and a linked pad. A
// deterministic function of the opened value: parties that opened the same
// value use the same counter, and parties that opened different values (a
// cheater's share) stay in step and are caught by the compare view, where
// the opened value was logged. A redraw instead would be a round that only
// the parties seeing the bad value run, desynchronising the ring.
void FixCounter(Block& ctr0, uint64_t n) {
  static_assert(contract::kMaxJobBlocks < (uint64_t{1} << 21) &&
                contract::kLinkedPadOffset + contract::kPadSlots < (uint64_t{1} << 21));
  const uint64_t reach = contract::kLinkedPadOffset + contract::kPadSlots;
  if (!CounterRangeOk(ctr0, std::max<uint64_t>(n, reach))) ctr0[0] ^= 0x80;
}

std::array<uint8_t, 4> UsageBe(uint32_t usage) {
  return {static_cast<uint8_t>(usage >> 24), static_cast<uint8_t>(usage >> 16),
          static_cast<uint8_t>(usage >> 8), static_cast<uint8_t>(usage)};
}

absl::string_view View(const std::vector<uint8_t>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()), v.size());
}

// One party's view of one job's key, compared among the three parties in
// the agreement: 1 code byte (KeyView, agreement.h; kViewNone for a job
// that failed its check), the cipher, the dealing id (not secret).
constexpr size_t kKeyViewBytes = 18;

// The public facts of one job inside RunBatch: its outcome so far, its key,
// where its lanes are, the public GHASH input and tag. No secrets.
struct JobPlan {
  pb::JobStatus status = pb::JOB_OK;
  std::string detail;
  bool live() const { return status == pb::JOB_OK && key != nullptr; }
  void Fail(pb::JobStatus s, std::string why) {
    status = s;
    detail = std::move(why);
    key.reset();
  }
  std::shared_ptr<const KeyShares> key;
  uint8_t key_view = kViewNone;
  pb::Cipher cipher = pb::CIPHER_UNSPECIFIED;  // the job's (Job::cipher)
  bool needs_ctr0 = false;  // the cluster picks it
  bool ctr0_drawn = false;
  bool check = false;       // masked zero test of T' ^ T
  Block ctr0{};
  uint64_t nks = 0;               // keystream blocks
  size_t lane0 = 0;               // lane of AES_K(c0); keystream follows
  // Public GHASH input blocks; for a shared message (CHECKSUM, VERIFY) the
  // message blocks are zero here and enter as shared products.
  std::vector<uint8_t> ghash_in;
  size_t m = 0;                   // GHASH blocks = powers needed
  size_t shared_blocks = 0;       // blocks of a shared message D
  Block tag{};                    // DECRYPT: the public tag to check against
  // An aes*-cts job (engine/cts_jobs.h): no AES lane, no GHASH; its task
  // in Batch::cts once planned (PlanCts), else -1.
  bool cts = false;
  int64_t cts_task = -1;
  bool aes() const { return live() && !cts; }
  // A password-derived key's gated AS reply (GatedUserReply): counted in
  // the key's releases when released; over_rate: this party's
  // CtsReleaseLimiter says the key is past its bound; over_budget: a gate
  // DECRYPT this party's GateRun refused (both in the key view). deal:
  // the key's KeyShares::Origin, what both count by.
  bool gated_reply = false;
  bool over_rate = false;
  bool over_budget = false;
  DealId deal{};
  // Under a password-derived key (KeyKind): a job gated on a stale
  // timestamp is withheld (Collect). A random key's reply is no verifier,
  // and the servers compute it ungated anyway (CheckUserGate).
  bool user_key = false;
};

// One job's secret shares inside RunBatch; wiped when the batch ends.
struct JobSecrets {
  std::array<std::vector<uint8_t>, 2> powers;  // H^1..H^m if m > stored
  std::array<Block, 2> tprime{};               // shares of T' (or the tag)
  Block zero{};                                // PAD: z_party
  // Verification PAD (MaskVerifyPads): shares of r*H^1..r*H^m, r*AES_K(c0)
  // and r, for a fresh shared random r.
  std::array<std::vector<uint8_t>, 2> rpowers;
  std::array<Block, 2> rmask{}, r{};
  ~JobSecrets() {
    for (auto& p : powers) share::Wipe(p);
    for (auto& p : rpowers) share::Wipe(p);
    for (auto& t : rmask) share::Wipe(t.data(), t.size());
    for (auto& t : r) share::Wipe(t.data(), t.size());
    for (auto& t : tprime) share::Wipe(t.data(), t.size());
    share::Wipe(zero.data(), zero.size());
  }
};

const uint8_t* PowersOf(const JobPlan& p, const JobSecrets& s, int comp) {
  return p.m > static_cast<size_t>(kStoredHPowers) ? s.powers[comp].data()
                                                   : p.key->h_powers[comp].data();
}

// Bits 7 and 6 of a present view's cipher byte: this party's release
// bound for the key is reached (JobPlan::over_rate), its failure budget
// refused the gate DECRYPT (over_budget). Ciphers are below 0x40.
constexpr uint8_t kViewOverRate = 0x80, kViewOverBudget = 0x40;

void EncodeKeyView(const JobPlan& w, uint8_t* out) {
  std::memset(out, 0, kKeyViewBytes);
  out[0] = w.key_view;
  if (w.key_view == kViewPresent && w.key != nullptr) {
    out[1] = static_cast<uint8_t>(w.key->cipher);
    if (w.over_rate) out[1] |= kViewOverRate;
    if (w.over_budget) out[1] |= kViewOverBudget;
    // The dealing and the key's kind (KeyKind: what it may run,
    // user_key_rule.h), so that a server whose record says otherwise fails
    // the key's jobs alike instead of one server computing what the others
    // refuse; for an aes*-cts key also which material this server holds
    // (kind, usage, size; public, no share byte), so that a record that
    // differs on one server fails the key's jobs alike on all three
    // (JOB_KEY_INCONSISTENT) instead of one server skipping a job the
    // others run (PlanCtsJob), which would put the ring out of step for
    // the whole batch.
    std::vector<std::array<uint8_t, 7>> layout;
    for (const CtsMaterial& m : w.key->cts)
      layout.push_back({static_cast<uint8_t>(m.kind), static_cast<uint8_t>(m.usage >> 24),
                        static_cast<uint8_t>(m.usage >> 16),
                        static_cast<uint8_t>(m.usage >> 8), static_cast<uint8_t>(m.usage),
                        static_cast<uint8_t>(m.share[0].size() >> 8),
                        static_cast<uint8_t>(m.share[0].size())});
    std::sort(layout.begin(), layout.end());
    static constexpr char kTag[] = "kmpc-cts-key-view-v2";
    Sha256 h;
    h.Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(kTag), sizeof kTag));
    h.Update(absl::MakeConstSpan(w.key->deal_id.data(), 16));
    const uint8_t kind = static_cast<uint8_t>(w.key->kind);
    h.Update(absl::MakeConstSpan(&kind, 1));
    for (const auto& l : layout) h.Update(l);
    std::array<uint8_t, 32> d;
    if (h.Final(d).ok()) std::memcpy(out + 2, d.data(), 16);
    else std::memset(out + 2, 0xff, 16);  // never equal to a good view
  }
}

// The per-job outcome of the three parties' key views (views[p] is party
// p's 18-byte encoding): the same on every party since all three hold the
// same three views. Only a job whose key is present with the same cipher
// and dealing on all three parties, and dealt for the job's cipher, is
// computed; the others fail alone.
void DecideKey(JobPlan& w, const std::array<const uint8_t*, 3>& raw) {
  if (raw[0][0] == kViewNone && raw[1][0] == kViewNone && raw[2][0] == kViewNone) {
    return;  // failed its check: status already set alike
  }
  // Any party's release bound or failure budget fails the job on all (the
  // parties' counts may differ by a batch in flight, or a restart):
  // compared without them.
  std::array<std::array<uint8_t, kKeyViewBytes>, 3> copy;
  std::array<const uint8_t*, 3> views;
  uint8_t over = 0;
  for (int p = 0; p < 3; ++p) {
    std::memcpy(copy[p].data(), raw[p], kKeyViewBytes);
    if (copy[p][0] == kViewPresent) {
      over |= copy[p][1] & (kViewOverRate | kViewOverBudget);
      copy[p][1] &= static_cast<uint8_t>(~(kViewOverRate | kViewOverBudget));
    }
    views[p] = copy[p].data();
  }
  bool same = true;
  for (int p = 0; p < 3; ++p)
    if (std::memcmp(views[p], views[0], kKeyViewBytes) != 0) same = false;
  if (same && views[0][0] == kViewPresent && over != 0) {
    w.Fail(pb::JOB_RATE_LIMITED,
           (over & kViewOverBudget) != 0
               ? "refused: this user key's gate is over the MPC servers' failure budget "
                 "(--gate_decrypts_per_run, --gate_failures_per_window)"
               : "this user key's AS replies are over the MPC servers' "
                 "--cts_releases_per_minute");
    return;
  }
  if (same && views[0][0] == kViewPresent) {
    // The agreed view's cipher byte (EncodeKeyView) against the job's: the
    // inputs digest covers the job's cipher, so every party decides alike.
    // A key is never run under another cipher's round count.
    if (views[0][1] != static_cast<uint8_t>(w.cipher)) {
      w.Fail(pb::JOB_WRONG_CIPHER,
             absl::StrCat("the key id was dealt for ",
                          contract::CipherName(static_cast<pb::Cipher>(views[0][1])),
                          ", the job names ", contract::CipherName(w.cipher)));
    }
    return;  // else compute it
  }
  auto [status, why] = KeyPresence(views);
  if (status != pb::JOB_OK) {
    w.Fail(status, std::move(why));
  } else {
    w.Fail(pb::JOB_KEY_INCONSISTENT,
           "the MPC servers hold different dealings of this key (deal_id, "
           "cipher or aes*-cts material differ): re-deal it");
  }
}

contract::JobShape ShapeOf(const Job& job) {
  const bool ctr_encrypt = job.type == pb::JOB_ENCRYPT && !contract::CtsCipher(job.cipher);
  contract::JobShape s{job.type, job.cipher, job.key_id.size(),
                       ctr_encrypt ? 16 * uint64_t{job.nblocks} : uint64_t{job.length},
                       View(job.data), View(job.checksum)};
  s.cts_key = job.cts_key;
  s.usage = job.usage;
  s.splice_length = job.splice_length;
  s.splice_offset = job.splice_offset;
  s.sign_pad = job.sign_pad != Job::kNoCondition;
  s.share_sizes[0] = job.data_shares[0].size();
  s.share_sizes[1] = job.data_shares[1].size();
  return s;
}

// The contract's check of a Run job (a FINALIZE is none: contract::CheckJob
// refuses it, JOB_MALFORMED; the tag of an ENCRYPT is asked for ring-free,
// one additive share per server, FinalizeShare) or the caller's check.
contract::JobCheck CheckJob(const Job& job) {
  if (!job.precheck.ok()) return job.precheck;
  return contract::CheckJob(ShapeOf(job));
}

// Job::pad_after and pad_slot of job j: empty if none or well-formed, else
// why not (a PAD naming another ENCRYPT of the batch, no counter of its
// own, a slot below kPadSlots that no other PAD naming that ENCRYPT has:
// two pads at one counter would give two tags there, enctype.md invariant
// 6). Public: decided alike on every party.
std::string CheckPadAfter(absl::Span<const Job> jobs, size_t j) {
  const int64_t c = jobs[j].pad_after;
  if (c == Job::kNoCondition)
    return jobs[j].pad_slot == 0 ? "" : "pad_slot without pad_after";
  if (jobs[j].type != pb::JOB_PAD || !jobs[j].checksum.empty() || c < 0 ||
      static_cast<size_t>(c) >= jobs.size() || jobs[c].type != pb::JOB_ENCRYPT ||
      contract::CtsCipher(jobs[c].cipher))
    return "pad_after must name a ctr-mpc ENCRYPT of the batch, from a signing PAD";
  if (jobs[j].pad_slot >= contract::kPadSlots)
    return absl::StrCat("pad_slot ", jobs[j].pad_slot, " is not below ",
                        contract::kPadSlots);
  for (size_t k = 0; k < jobs.size(); ++k)
    if (k != j && jobs[k].pad_after == c && jobs[k].pad_slot == jobs[j].pad_slot)
      return "two PADs name the same ENCRYPT and slot (pad_after, pad_slot)";
  return {};
}

// Job::sign_pad of job j: empty if none or well-formed, else why not. The
// pad must be a signing PAD of the batch under a ctr-mpc key (the
// krbtgt), for usage 17 (the PAC's KDC signature), long enough for the
// 12-byte server signature, with its own drawn counter, and named by no
// other ticket: it makes one tag (enctype.md, invariant 6). Public:
// decided alike on every party.
std::string CheckSignPad(absl::Span<const Job> jobs, size_t j) {
  const int64_t p = jobs[j].sign_pad;
  if (p == Job::kNoCondition) return {};
  if (p < 0 || static_cast<size_t>(p) >= jobs.size() || jobs[p].type != pb::JOB_PAD ||
      contract::CtsCipher(jobs[p].cipher) || !jobs[p].checksum.empty() ||
      jobs[p].pad_after != Job::kNoCondition ||
      jobs[p].usage != contract::kTicketChecksumUsage ||
      jobs[p].length < contract::kSpliceBytes)
    return "sign_pad must name a signing PAD of the batch with its own drawn counter under a "
           "ctr-mpc key, usage 17, for 12 bytes or more";
  for (size_t k = 0; k < jobs.size(); ++k)
    if (k != j && jobs[k].sign_pad == p) return "two tickets name the same sign_pad";
  return {};
}

// Whether job p is a PAD a ticket of the batch spends (Job::sign_pad).
bool SpentBySignature(absl::Span<const Job> jobs, size_t p) {
  for (const Job& job : jobs)
    if (job.sign_pad == static_cast<int64_t>(p)) return true;
  return false;
}

// The public plan of a job that passed CheckJob.
void PlanJob(const Job& job, JobPlan& w) {
  if (contract::CtsCipher(job.cipher)) {
    w.cts = true;  // engine/cts_jobs.h: planned by PlanCts
    return;
  }
  switch (job.type) {
    case pb::JOB_ENCRYPT:
      // nblocks 0 is an empty plaintext (enctype.md allows it; the shared
      // vectors have one): no keystream, the tag covers only A.
      w.needs_ctr0 = true;
      w.nks = job.nblocks;
      w.m = protocol::GhashBlocks(4, 16 * static_cast<size_t>(job.nblocks));
      return;
    case pb::JOB_DECRYPT: {
      const size_t clen = job.data.size() - contract::kCiphertextOverhead;
      std::memcpy(w.ctr0.data(), job.data.data(), 16);
      w.nks = contract::CeilBlocks(clen);
      w.ghash_in = protocol::GhashInput(
          UsageBe(job.usage), absl::MakeConstSpan(job.data.data() + 16, clen));
      w.m = w.ghash_in.size() / 16;
      std::memcpy(w.tag.data(), job.data.data() + 16 + clen, 16);
      w.check = true;
      return;
    }
    case pb::JOB_CHECKSUM:
    case pb::JOB_VERIFY_CHECKSUM: {
      if (job.type == pb::JOB_VERIFY_CHECKSUM) {
        // The presented tag is shared (Job::data_shares): CheckTags.
        std::memcpy(w.ctr0.data(), job.checksum.data(), 16);
        w.check = true;
      } else {
        w.needs_ctr0 = true;
      }
      // A' = usage (4 bytes big-endian) || 0x99 (enctype.md). D is shared:
      // its blocks are zero in the public input (GHASH is linear in X) and
      // are added as shared products in ComputeTags.
      const std::vector<uint8_t> zeros(job.length, 0);
      w.ghash_in = protocol::GhashInput(ChecksumAad(job.usage), zeros);
      w.m = w.ghash_in.size() / 16;
      w.shared_blocks = contract::CeilBlocks(job.length);
      return;
    }
    case pb::JOB_PAD:
      // The pad AES_K(c0) and the powers of H a message of up to `length`
      // bytes needs (A', D, the lengths: GhashBlocks); nothing is revealed.
      // A verification pad's counter is given, a linked pad's follows its
      // ENCRYPT's (LinkPads); any other is drawn.
      if (!job.checksum.empty())
        std::memcpy(w.ctr0.data(), job.checksum.data(), 16);
      w.needs_ctr0 = job.checksum.empty() && job.pad_after == Job::kNoCondition;
      w.m = protocol::GhashBlocks(5, job.length);
      return;
    default:
      return;  // no other type passes CheckJob
  }
}

void EncodeJob(const Job& job, std::vector<uint8_t>& out) {
  PutU32(out, static_cast<uint32_t>(job.type));
  PutU32(out, static_cast<uint32_t>(job.cipher));
  PutBytes(out, absl::MakeConstSpan(
                    reinterpret_cast<const uint8_t*>(job.key_id.data()),
                    job.key_id.size()));
  PutU32(out, job.usage);
  PutU32(out, job.nblocks);
  // The message length of a shared message, never its shares: a digest of
  // shares would let a server test guesses of D (kmpc.proto Job.data_shares).
  PutU32(out, job.length);
  PutBytes(out, job.data);
  PutBytes(out, job.checksum);
  PutU32(out, static_cast<uint32_t>(job.precheck.status));
  PutU64(out, static_cast<uint64_t>(job.release_if_ok + 1));
  PutU64(out, static_cast<uint64_t>(job.pad_after + 1));
  PutU32(out, job.pad_slot);
  // The byte that flagged an encrypt state when a Run could carry a
  // FINALIZE: now the FAST key (0 for every other job).
  out.push_back(static_cast<uint8_t>(job.cts_key));
  PutU32(out, job.splice_length);
  PutU32(out, job.splice_offset);
  PutU64(out, static_cast<uint64_t>(job.sign_pad + 1));
  PutU64(out, static_cast<uint64_t>(job.now));
}

// Shares of AES_K(c0) and of the keystream of every lane, wiped on
// destruction (every way out of a batch).
struct AesOutput {
  std::array<std::vector<uint8_t>, 2> out;
  ~AesOutput() {
    for (auto& x : out) share::Wipe(x);
  }
  const uint8_t* Lane(int comp, size_t lane) const { return &out[comp][16 * lane]; }
};

// The three parties' agreement headers as seen by this party.
struct Headers {
  AgreementHeader mine, next, next2;
  bool InputsDiffer() const {
    return !mine.SameInputs(next) || !mine.SameInputs(next2);
  }
  bool KeysDiffer() const { return !mine.SameKeys(next) || !mine.SameKeys(next2); }
  bool CountsDiffer() const {
    return next.counters != mine.counters || next2.counters != mine.counters;
  }
  uint32_t MostCounters() const {
    return std::max({mine.counters, next.counters, next2.counters});
  }
};

}  // namespace

namespace {

// The GHASH input of FINALIZE's tag over C, after the checks every
// FINALIZE makes (the state's party, usage and length; enough powers).
absl::StatusOr<std::vector<uint8_t>> FinalizeInput(
    const EncryptState& state, uint32_t usage,
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
  const uint64_t n = contract::CeilBlocks(ciphertext.size());
  if (n > state.nblocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FINALIZE: ciphertext of ", ciphertext.size(), " bytes is ", n,
        " blocks, the encryption produced only ", state.nblocks));
  }
  std::vector<uint8_t> x = protocol::GhashInput(UsageBe(usage), ciphertext);
  if (state.NumPowers() < x.size() / 16) {
    return absl::InvalidArgumentError("FINALIZE: state lacks powers of H");
  }
  return x;
}

}  // namespace

absl::Status FinalizeShare(const EncryptState& state, uint32_t usage,
                           absl::Span<const uint8_t> ciphertext,
                           std::array<uint8_t, 16>& share) {
  absl::StatusOr<std::vector<uint8_t>> x = FinalizeInput(state, usage, ciphertext);
  if (!x.ok()) return x.status();
  // Component s_party only: GHASH is linear in the powers of H, so the
  // three components XOR to GHASH_H(A, C) ^ AES_K(c0).
  protocol::GhashWithPowers(*x, state.Powers(0), share.data());
  for (int b = 0; b < 16; ++b) share[b] ^= state.mask[0][b];
  return absl::OkStatus();
}

class Engine::Impl {
 public:
  Impl(net::RingChannel& channel, protocol::Prss prss, EngineOptions options)
      : channel_(channel),
        prss_(std::move(prss)),
        rep3_(channel_, prss_),
        options_(options),
        limiter_(options_.release_limiter != nullptr ? options_.release_limiter
                                                     : std::make_shared<CtsReleaseLimiter>()),
        budget_(options_.gate_budget != nullptr ? options_.gate_budget
                                                : std::make_shared<GateBudget>()) {}

  int party() const { return prss_.party(); }
  size_t verify_retained_bytes() const { return log_.retained_bytes(); }

  absl::StatusOr<BatchResult> RunBatch(uint64_t batch_seq,
                                       absl::Span<const Job> jobs,
                                       const KeyLookup& lookup) {
    if (broken_) {
      return absl::FailedPreconditionError(
          "engine unusable after a ring failure: create a new Engine on a "
          "fresh ring");
    }
    deviated_ = false;
    absl::StatusOr<BatchResult> r = Run(batch_seq, jobs, lookup);
    // A deviation seen in the agreement (a forwarded message whose tag
    // failed) fails the batch as an integrity failure, whatever came after
    // it: the rest of the batch ran in step with the originator's view,
    // or, if the originator itself deviated, the ring may have broken.
    if (deviated_) r = protocol::IntegrityFailure();
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
  // One RunBatch: the inputs, the public plan and the secret buffers.
  struct Batch {
    uint64_t seq = 0;
    absl::Span<const Job> jobs;
    std::vector<JobPlan> plan;
    std::vector<JobSecrets> secrets;
    AesOutput aes;
    size_t nlanes = 0;
    std::vector<bool> pass;  // tag checks that held
    // aes*-cts DECRYPTs whose timestamp is outside the skew (StaleTimestamp):
    // released themselves if their tag held, never the jobs gated on them.
    std::vector<bool> stale;
    std::vector<CtsTask> cts;  // the live aes*-cts jobs, in job order
    // The distinct shapes of `cts` and the sum of their bytes (PlanCtsJob,
    // CtsProgramCache::ShapeBytes, EngineOptions::cts_batch_bytes).
    std::set<CtsProgramCache::Shape> cts_shapes;
    uint64_t cts_shape_bytes = 0;
    std::unique_ptr<GateRun> gates;  // the gate DECRYPTs' reservations
  };

  absl::StatusOr<BatchResult> Run(uint64_t batch_seq,
                                  absl::Span<const Job> jobs,
                                  const KeyLookup& lookup);
  void LookupKeys(Batch& b, const KeyLookup& lookup);
  absl::Status AgreeOnBatch(Batch& b);
  absl::Status DigestBatch(const Batch& b, AgreementHeader& h);
  absl::Status ExchangeKeyViews(Batch& b);
  absl::Status CheckDealing(const Batch& b);
  static bool AnyDealt(const Batch& b);
  absl::Status DealtCopyDigest(const Batch& b, int comp, const uint8_t key[16],
                               std::array<uint8_t, 32>& out);
  absl::Status DrawCounters(Batch& b);
  void LinkPads(Batch& b);
  absl::Status PlanCts(Batch& b);
  void PlanCtsJob(Batch& b, size_t j);
  void FillTicketSignatures(Batch& b);
  absl::Status OpenCtsVerdicts(Batch& b);
  void SettleGates(Batch& b);
  void CollectCts(Batch& b, size_t j, JobResult& r);
  absl::Status RunAes(Batch& b);
  absl::Status ExtendPowers(Batch& b);
  absl::Status ComputeTags(Batch& b);
  absl::Status AddSharedProducts(Batch& b);
  absl::Status CheckTags(Batch& b);
  size_t VerifyPadInputs(Batch& b, std::vector<size_t>* pads);
  void FillVerifyPads(Batch& b, const std::vector<size_t>& pads, size_t off,
                      std::vector<uint8_t>* x0, std::vector<uint8_t>* x1,
                      std::vector<uint8_t>* y0, std::vector<uint8_t>* y1);
  void TakeVerifyPads(Batch& b, const std::vector<size_t>& pads, size_t off,
                      const std::vector<uint8_t>& z0, const std::vector<uint8_t>& z1);
  void DrawPadZeros(Batch& b);
  BatchResult Collect(Batch& b);
  void CollectJob(Batch& b, size_t j, JobResult& r);
  void FillTagState(Batch& b, size_t j, TagState& s);
  void CollectPad(Batch& b, size_t j, JobResult& r);

  net::RingChannel& channel_;
  protocol::Prss prss_;
  protocol::Rep3 rep3_;
  EngineOptions options_;
  // The server's per-deal bounds (EngineOptions::release_limiter,
  // gate_budget), or this engine's own.
  std::shared_ptr<CtsReleaseLimiter> limiter_;
  std::shared_ptr<GateBudget> budget_;
  aes::Workspace workspace_;
  protocol::MulLog log_;
  // Set after a channel failure: the parties may be out of step (PRSS
  // counters, half-read messages), so the engine refuses further batches.
  bool broken_ = false;
  // Set when this batch's agreement saw a forwarded message fail its tag
  // (agreement.h ForwardTag): RunBatch fails the batch as an integrity
  // failure once it has run in step.
  bool deviated_ = false;
  // A forwarded message (what party i+1 forwarded from party i+2) checked
  // against its tag under k0 (our component 0 of the tag key, which party
  // i+2 holds as its component 1). On a bad tag: deviated_, `mine` put in
  // its place (with honest parties' inputs the same, what the originator
  // sent), and the bad bytes logged as opened, so that party i-1's compare
  // view differs from ours.
  void CheckForwarded(const uint8_t k0[16], absl::Span<uint8_t> fwd,
                      absl::Span<const uint8_t> mine);
};

absl::StatusOr<BatchResult> Engine::Impl::Run(uint64_t batch_seq,
                                              absl::Span<const Job> jobs,
                                              const KeyLookup& lookup) {
  Batch b;
  b.seq = batch_seq;
  b.jobs = jobs;
  b.plan.resize(jobs.size());
  b.secrets.resize(jobs.size());
  b.gates = std::make_unique<GateRun>(budget_.get());
  LookupKeys(b, lookup);
  // Malicious security (protocol/verify.h): every product and opening from
  // here on is logged and verified before a value depending on it is
  // opened (CheckTags) or released (Collect).
  struct LogScope {
    protocol::Rep3& rep3;
    protocol::MulLog& log;
    LogScope(protocol::Rep3& r, protocol::MulLog& l, bool on) : rep3(r), log(l) {
      if (on) rep3.set_log(&log);
    }
    ~LogScope() {
      rep3.set_log(nullptr);
      log.Clear();
      log.ReleaseExcess();  // a large batch's buffers are not kept
    }
  } scope(rep3_, log_, options_.malicious);
  if (absl::Status s = AgreeOnBatch(b); !s.ok()) return s;
  // On the agreed key views (their kind): what a user's aes*-ctr-mpc key
  // may not run fails alike on every party before any AND.
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.plan[j].live())
      if (std::string why = CheckCtrUserKey(b.jobs, j, b.plan[j].key->kind); !why.empty())
        b.plan[j].Fail(pb::JOB_MALFORMED, std::move(why));
  if (!options_.malicious && AnyDealt(b)) {
    if (absl::Status s = CheckDealing(b); !s.ok()) return s;
  }
  if (deviated_) {
    // A forwarded header or view failed its tag: the headers this party
    // decided on may not be its peers' (an honest successor whose key view
    // differs may have revealed, as its ctr0 shares, PRSS components of
    // ids this party would go on to use as masks). Every id revealed in
    // the agreement is below counter_before + 2^32 (u32 counters), so past
    // 2^40 more no message this party sends in this batch is masked by a
    // revealed component. The batch fails (RunBatch); the engine is
    // replaced after it, so the skip never reaches another batch.
    prss_.Skip(uint64_t{1} << 40);
  }
  if (absl::Status s = DrawCounters(b); !s.ok()) return s;
  LinkPads(b);
  if (absl::Status s = PlanCts(b); !s.ok()) return s;
  if (absl::Status s = RunAes(b); !s.ok()) return s;
  if (absl::Status s = ComputeTags(b); !s.ok()) return s;
  FillTicketSignatures(b);
  if (absl::Status s = RunCtsTasks(rep3_, prss_, options_.verify_words, absl::MakeSpan(b.cts));
      !s.ok())
    return s;
  if (absl::Status s = CheckTags(b); !s.ok()) return s;
  if (absl::Status s = OpenCtsVerdicts(b); !s.ok()) return s;
  SettleGates(b);
  DrawPadZeros(b);
  if (rep3_.log() != nullptr && !log_.empty()) {
    if (absl::Status s = protocol::Verifier::Verify(rep3_, log_); !s.ok()) return s;
  }
  return Collect(b);  // b's secret buffers are wiped when it goes
}

// Every job's check (a failed one fails the job alike on all parties) and
// this party's key for it. A key missing or unusable here fails only this
// job; AgreeOnBatch compares the three parties' views of every job's key
// and fails the same jobs on all of them (engine.h, KeyLookup).
void Engine::Impl::LookupKeys(Batch& b, const KeyLookup& lookup) {
  for (size_t j = 0; j < b.jobs.size(); ++j) {
    const Job& job = b.jobs[j];
    JobPlan& w = b.plan[j];
    if (contract::JobCheck c = CheckJob(job); !c.ok()) {
      w.Fail(c.status, std::move(c.detail));
      continue;
    }
    if (job.release_if_ok != Job::kNoCondition) {
      const int64_t c = job.release_if_ok;
      const bool fits =
          (job.type == pb::JOB_ENCRYPT || job.type == pb::JOB_CHECKSUM ||
           job.type == pb::JOB_PAD) && c >= 0 &&
          static_cast<size_t>(c) < b.jobs.size() && static_cast<size_t>(c) != j &&
          (b.jobs[c].type == pb::JOB_DECRYPT || b.jobs[c].type == pb::JOB_VERIFY_CHECKSUM);
      if (!fits) {
        w.Fail(pb::JOB_MALFORMED,
               "release_if_ok must name another job of the batch, a DECRYPT or "
               "VERIFY_CHECKSUM, from an ENCRYPT, CHECKSUM or PAD");
        continue;
      }
    }
    if (std::string why = CheckPadAfter(b.jobs, j); !why.empty()) {
      w.Fail(pb::JOB_MALFORMED, std::move(why));
      continue;
    }
    if (std::string why = CheckSignPad(b.jobs, j); !why.empty()) {
      w.Fail(pb::JOB_MALFORMED, std::move(why));
      continue;
    }
    PlanJob(job, w);
    w.cipher = job.cipher;
    absl::StatusOr<std::shared_ptr<const KeyShares>> key =
        lookup ? lookup(job.key_id)
               : absl::StatusOr<std::shared_ptr<const KeyShares>>(
                     absl::NotFoundError("no key lookup"));
    if (!key.ok() || *key == nullptr) {
      const bool missing = key.ok() || absl::IsNotFound(key.status());
      w.key_view = missing ? kViewMissing : kViewBad;
      w.Fail(missing ? pb::JOB_UNKNOWN_KEY : pb::JOB_KEY_INCONSISTENT,
             missing ? "unknown key id" : "stored key shares are unusable");
      continue;
    }
    if (!(*key)->Validate().ok() || (*key)->party != party()) {
      w.key_view = kViewBad;
      w.Fail(pb::JOB_KEY_INCONSISTENT,
             "stored key shares are malformed or belong to another party");
      continue;
    }
    w.key = *key;
    w.key_view = kViewPresent;
    w.user_key = PasswordDerived((*key)->kind);
    w.deal = (*key)->Origin();
    if (GatedUserReply(job, **key)) {
      w.gated_reply = true;
      w.over_rate = !limiter_->Take(std::string(w.deal.begin(), w.deal.end()),
                                    options_.cts_releases_per_minute, absl::Now());
    }
    if (GateDecrypt(job, **key)) w.over_budget = !b.gates->Take(j, w.deal);
  }
}

// The header's two digests: the public inputs (with the engine options that
// shape the rounds: servers whose --security, --small_sbox_min_blocks,
// --depth3_max_blocks, --chunk_lanes, --wave_lanes, (malicious) --verify_words or
// cts_batch_bytes (which aes*-cts jobs run) differ would
// run different circuits or message sizes and
// lose the ring's framing, so they refuse every batch instead) and this
// party's key views.
absl::Status Engine::Impl::DigestBatch(const Batch& b, AgreementHeader& h) {
  static constexpr char kTag[] = "kmpc-batch-v19";
  std::vector<uint8_t> enc(kTag, kTag + sizeof kTag);
  PutU32(enc, options_.malicious ? 1 : 0);
  PutU32(enc, options_.small_sbox_min_blocks);
  PutU32(enc, options_.depth3_max_blocks);
  PutU32(enc, options_.chunk_lanes);
  PutU32(enc, options_.wave_lanes);
  PutU32(enc, options_.malicious ? options_.verify_words : 0);
  PutU64(enc, options_.cts_batch_bytes);
  PutU32(enc, options_.cts_skew_s);
  PutU64(enc, b.seq);
  PutU32(enc, static_cast<uint32_t>(b.jobs.size()));
  Sha256 inputs, keys;
  inputs.Update(enc);
  for (size_t j = 0; j < b.jobs.size(); ++j) {
    enc.clear();
    EncodeJob(b.jobs[j], enc);
    inputs.Update(enc);
    uint8_t view[kKeyViewBytes];
    EncodeKeyView(b.plan[j], view);
    keys.Update(view);
  }
  if (absl::Status s = inputs.Final(h.inputs); !s.ok()) return s;
  return keys.Final(h.keys);
}

// Two rounds: everyone sends its header (AgreementHeader: digests, number n
// of counters it draws) to party i-1, then forwards what it got from i+1
// together with its half of the reveal of the n fresh ctr0 values (sized by
// the announced n, so the ring stays in step whatever the inputs).
// Afterwards every party holds all three headers and takes the same
// decision; on a refusal the PRSS counters are re-aligned to the largest n.
// Same inputs but different key views: ExchangeKeyViews, and the counters
// are drawn afresh by DrawCounters.
absl::Status Engine::Impl::AgreeOnBatch(Batch& b) {
  Headers h;
  if (absl::Status s = DigestBatch(b, h.mine); !s.ok()) return s;
  std::vector<size_t> pending;
  for (size_t j = 0; j < b.plan.size(); ++j)
    if (b.plan[j].live() && b.plan[j].needs_ctr0) pending.push_back(j);
  h.mine.counters = static_cast<uint32_t>(pending.size());
  const ForwardTagKeys keys(prss_);
  const uint64_t counter_before = prss_.counter();
  std::vector<uint8_t> r0(16 * pending.size()), r1(16 * pending.size());
  prss_.RandomShares(r0.data(), r1.data(), r0.size());
  constexpr size_t kMsg = AgreementHeader::kSize + kForwardTagSize;
  uint8_t raw[kMsg], raw_next[kMsg];
  h.mine.Encode(absl::MakeSpan(raw, AgreementHeader::kSize));
  ForwardTag(keys.k1, absl::MakeConstSpan(raw, AgreementHeader::kSize),
             raw + AgreementHeader::kSize);
  if (absl::Status st = channel_.Exchange(raw, absl::MakeSpan(raw_next)); !st.ok())
    return st;
  absl::StatusOr<AgreementHeader> next =
      AgreementHeader::Decode(absl::MakeConstSpan(raw_next, AgreementHeader::kSize));
  if (!next.ok()) return next.status();
  h.next = *next;
  // Round 2: forward next's header and tag, reveal our component 1 (r_{i+1}).
  std::vector<uint8_t> out(kMsg + r1.size());
  std::vector<uint8_t> in(kMsg + 16 * size_t{h.next.counters});
  std::memcpy(out.data(), raw_next, kMsg);
  if (!r1.empty()) std::memcpy(out.data() + kMsg, r1.data(), r1.size());
  if (absl::Status st = channel_.Exchange(out, absl::MakeSpan(in)); !st.ok()) return st;
  CheckForwarded(keys.k0, absl::MakeSpan(in.data(), kMsg), absl::MakeConstSpan(raw, kMsg));
  absl::StatusOr<AgreementHeader> next2 = AgreementHeader::Decode(
      absl::MakeConstSpan(in.data(), AgreementHeader::kSize));
  if (!next2.ok()) return next2.status();
  h.next2 = *next2;
  if (h.InputsDiffer() || h.KeysDiffer() || h.CountsDiffer()) {
    // Keep the PRSS ids in step for the next batch (or DrawCounters).
    prss_.Skip(counter_before + h.MostCounters() - prss_.counter());
    if (h.InputsDiffer()) {
      return absl::AbortedError(
          "batch refused: the MPC servers received different batch inputs "
          "(or run with different --security, --small_sbox_min_blocks, "
          "--depth3_max_blocks, --chunk_lanes, --wave_lanes or --verify_words, "
          "or different versions)");
    }
    if (!h.KeysDiffer()) {
      // Same inputs and key views but different counts: cannot happen with
      // a correct peer.
      return absl::FailedPreconditionError(
          "batch refused: the MPC servers disagree about the jobs to run");
    }
    return ExchangeKeyViews(b);
  }
  // All three key views are equal: a key missing or unusable here is so
  // everywhere; DecideKey normalises the statuses so all parties report
  // alike.
  for (JobPlan& w : b.plan) {
    uint8_t view[kKeyViewBytes];
    EncodeKeyView(w, view);
    DecideKey(w, {view, view, view});
  }
  const uint8_t* revealed = in.data() + kMsg;
  for (size_t p = 0; p < pending.size(); ++p) {
    JobPlan& w = b.plan[pending[p]];
    for (int k = 0; k < 16; ++k)
      w.ctr0[k] = r0[16 * p + k] ^ r1[16 * p + k] ^ revealed[16 * p + k];
    w.ctr0_drawn = true;
    // An opening among the servers like any other (protocol/verify.h).
    if (rep3_.log() != nullptr) log_.AddOpened(w.ctr0);
    FixCounter(w.ctr0, w.nks);
  }
  return absl::OkStatus();
}

void Engine::Impl::CheckForwarded(const uint8_t k0[16], absl::Span<uint8_t> fwd,
                                  absl::Span<const uint8_t> mine) {
  const size_t n = fwd.size() - kForwardTagSize;
  if (ForwardTagOk(k0, fwd.subspan(0, n), fwd.data() + n)) return;
  deviated_ = true;
  if (rep3_.log() != nullptr) {
    log_.AddOpened(fwd);
    log_.MarkDeviated();
  }
  std::memcpy(fwd.data(), mine.data(), n);
}

// Same inputs (hence the same number of jobs), different key views: two
// more rounds exchange the per-job views (tagged as the headers are), then
// every party fails the same jobs (JOB_UNKNOWN_KEY / JOB_KEY_INCONSISTENT)
// and runs the rest.
absl::Status Engine::Impl::ExchangeKeyViews(Batch& b) {
  const size_t vbytes = kKeyViewBytes * b.plan.size();
  const size_t n = vbytes + kForwardTagSize;
  std::vector<uint8_t> vmine(n), vnext(n), vnext2(n);
  for (size_t j = 0; j < b.plan.size(); ++j)
    EncodeKeyView(b.plan[j], &vmine[kKeyViewBytes * j]);
  const ForwardTagKeys keys(prss_);
  ForwardTag(keys.k1, absl::MakeConstSpan(vmine.data(), vbytes), vmine.data() + vbytes);
  if (absl::Status st = channel_.Exchange(vmine, absl::MakeSpan(vnext)); !st.ok())
    return st;
  if (absl::Status st = channel_.Exchange(vnext, absl::MakeSpan(vnext2)); !st.ok())
    return st;
  CheckForwarded(keys.k0, absl::MakeSpan(vnext2), vmine);
  const int me = party();
  for (size_t j = 0; j < b.plan.size(); ++j) {
    std::array<const uint8_t*, 3> views;
    views[me] = &vmine[kKeyViewBytes * j];
    views[(me + 1) % 3] = &vnext[kKeyViewBytes * j];
    views[(me + 2) % 3] = &vnext2[kKeyViewBytes * j];
    DecideKey(b.plan[j], views);
  }
  return absl::OkStatus();
}

// Whether a live job of b has dealt shares (Job::data_shares): public and
// agreed (the shares' lengths follow the jobs' shapes, which are in the
// agreement's digest; liveness is decided alike), so every party runs the
// dealing check's rounds, or none of them (a batch of keystream or ctr0
// jobs only has nothing dealt to compare).
bool Engine::Impl::AnyDealt(const Batch& b) {
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.plan[j].live() &&
        (!b.jobs[j].data_shares[0].empty() || !b.jobs[j].data_shares[1].empty()))
      return true;
  return false;
}

// The dealt inputs (Job::data_shares) are the one input that differs
// between the parties: the KDC deals each component to the two parties that
// hold it, and nothing else ties the two copies together. In
// --security=semi-honest a KDC that deals them inconsistently makes the
// parties compute on values that differ between them, which can pass the
// servers' gate on a bogus timestamp (docs/security-model.md, "Review of
// key kinds", finding 2). So, before any AND, each pair compares its copies
// of the one component it shares: party i sends party i-1 a digest of its
// component 0 (component i, which party i-1 holds as its component 1) and
// checks party i+1's digest against its own component 1. The digest goes
// to the one party that holds the same bytes and is never forwarded: party
// i+1, which holds the other two components, could test guesses of a
// low-entropy secret (a timestamp) against a digest of the third. It is
// keyed by a fresh PRSS value that only the pair holds (ForwardTagKeys:
// party i's k0 is party i-1's k1), so that no one else can test such
// guesses either. Two one-byte rounds then tell every party every pair's
// verdict, and all three refuse the batch alike (ABORTED, in step) before
// anything is computed on the copies. --security=malicious needs none of
// this: every AND on an inconsistent input fails the product check
// against the copies the neighbours hold (protocol/verify.h), and every
// opened value is compared, before anything is released.
absl::Status Engine::Impl::CheckDealing(const Batch& b) {
  const ForwardTagKeys keys(prss_);
  std::array<uint8_t, 32> mine, want, next;
  if (absl::Status s = DealtCopyDigest(b, 0, keys.k0, mine); !s.ok()) return s;
  if (absl::Status s = DealtCopyDigest(b, 1, keys.k1, want); !s.ok()) return s;
  if (absl::Status st = channel_.Exchange(mine, absl::MakeSpan(next)); !st.ok()) return st;
  // Bit 0: the pair (i, i+1) differs; from round 2 on, also (i+1, i+2).
  uint8_t bad = CRYPTO_memcmp(want.data(), next.data(), want.size()) != 0 ? 1 : 0;
  uint8_t in = 0;
  if (absl::Status st = channel_.Exchange(absl::MakeConstSpan(&bad, 1),
                                          absl::MakeSpan(&in, 1));
      !st.ok())
    return st;
  bad |= in;
  if (absl::Status st = channel_.Exchange(absl::MakeConstSpan(&bad, 1),
                                          absl::MakeSpan(&in, 1));
      !st.ok())
    return st;
  if ((bad | in) != 0) {
    return absl::AbortedError(
        "batch refused: the two MPC servers that hold one component of a "
        "dealt input received different copies of it (the KDC dealt "
        "inconsistent shares)");
  }
  return absl::OkStatus();
}

// SHA-256 over a domain tag, the pair's key, the batch number and every
// live job's copy of component (party + comp) % 3, each with its index and
// length. A job failed by now (its check, its key view: decided alike on
// the three parties) is never computed on, so its copies are left out.
absl::Status Engine::Impl::DealtCopyDigest(const Batch& b, int comp, const uint8_t key[16],
                                           std::array<uint8_t, 32>& out) {
  static constexpr char kTag[] = "kmpc-dealt-copy-v1";
  std::vector<uint8_t> enc(kTag, kTag + sizeof kTag);
  enc.insert(enc.end(), key, key + 16);
  PutU64(enc, b.seq);
  PutU32(enc, static_cast<uint32_t>(b.jobs.size()));
  Sha256 h;
  h.Update(enc);
  share::Wipe(enc);
  std::vector<uint8_t> head;  // a job's index and its copy's length
  for (size_t j = 0; j < b.jobs.size(); ++j) {
    if (!b.plan[j].live()) continue;
    const std::vector<uint8_t>& copy = b.jobs[j].data_shares[comp];
    head.clear();
    PutU32(head, static_cast<uint32_t>(j));
    PutU32(head, static_cast<uint32_t>(copy.size()));
    h.Update(head);
    h.Update(copy);
  }
  return h.Final(out);
}

// ctr0 for ENCRYPT and CHECKSUM: a fresh PRSS random value revealed among
// the servers (never chosen by the KDC), made valid by FixCounter. The
// first draw rides on the agreement; this one (one reveal) serves the jobs
// it drew none for (different key views: ExchangeKeyViews). Which jobs
// those are is public and agreed, so every party runs the same rounds.
absl::Status Engine::Impl::DrawCounters(Batch& b) {
  std::vector<size_t> pending;
  for (size_t j = 0; j < b.plan.size(); ++j) {
    const JobPlan& w = b.plan[j];
    if (w.live() && w.needs_ctr0 && !w.ctr0_drawn) pending.push_back(j);
  }
  if (pending.empty()) return absl::OkStatus();
  const size_t n = 16 * pending.size();
  std::vector<uint8_t> c0(n), c1(n), open(n);
  prss_.RandomShares(c0.data(), c1.data(), n);
  // Reveal logs the opened values before FixCounter (protocol/verify.h).
  if (absl::Status st = rep3_.Reveal(c0, c1, absl::MakeSpan(open)); !st.ok()) return st;
  for (size_t p = 0; p < pending.size(); ++p) {
    JobPlan& w = b.plan[pending[p]];
    std::memcpy(w.ctr0.data(), open.data() + 16 * p, 16);
    w.ctr0_drawn = true;
    FixCounter(w.ctr0, w.nks);
  }
  return absl::OkStatus();
}

// A linked PAD's counter (Job::pad_after): its ENCRYPT's drawn ctr0 +
// kLinkedPadOffset + pad_slot. The pad fails (withheld, nothing computed) with its
// ENCRYPT, or if the sum would leave the counter range (probability
// 2^-111). Public values only: every party decides alike.
void Engine::Impl::LinkPads(Batch& b) {
  for (size_t j = 0; j < b.plan.size(); ++j) {
    JobPlan& w = b.plan[j];
    const int64_t e = b.jobs[j].pad_after;
    if (!w.live() || e == Job::kNoCondition) continue;
    std::string c;
    if (!b.plan[e].live() ||
        !contract::LinkedPadCtr0(
            absl::string_view(reinterpret_cast<const char*>(b.plan[e].ctr0.data()), 16),
            b.jobs[j].pad_slot, &c)) {
      w.Fail(pb::JOB_WITHHELD, "the ENCRYPT this pad is linked to failed");
      continue;
    }
    std::memcpy(w.ctr0.data(), c.data(), 16);
  }
}

// The aes*-cts jobs' tasks (engine/cts_jobs.h), in job order: each live
// one's dealt material (none for its usage: JOB_UNKNOWN_USAGE, that job
// alone) and program. All public and decided alike on the three parties:
// the key views agreed (same dealing, hence the same material). In
// malicious mode the batch must stay within protocol/verify.h's bound on
// Verifies: the AES part's (EngineOptions::MaxWavesPerBatch) plus the
// circuits' (CtsCost::Verifies) plus the verdicts' and the last; a batch
// over it is refused (INVALID_ARGUMENT, in step) before any AND.
absl::Status Engine::Impl::PlanCts(Batch& b) {
  uint64_t aes_lanes = 0;
  for (size_t j = 0; j < b.plan.size(); ++j) {
    if (b.plan[j].aes()) aes_lanes += 1 + b.plan[j].nks;
    if (b.plan[j].live() && b.plan[j].cts) PlanCtsJob(b, j);
  }
  if (b.cts.empty() || !options_.malicious) return absl::OkStatus();
  const uint64_t waves = (aes_lanes + options_.wave_lanes - 1) / options_.wave_lanes;
  const uint64_t verifies = waves * (EngineOptions::kMaxAndLayersPerWave + 1) + 2 +
                            CostOf(b.cts).Verifies(options_.verify_words) + 2;
  if (verifies > EngineOptions::kMaxVerifiesPerBatch)
    return absl::InvalidArgumentError(absl::StrCat(
        "batch needs up to ", verifies, " malicious checks, over the ",
        EngineOptions::kMaxVerifiesPerBatch, " of protocol/verify.h's bound"));
  return absl::OkStatus();
}

namespace {

// The dealt material of an aes*-cts job (t.type, t.cf2_bytes set) into t:
// its usage's, K's PRF material under a FAST key (cts.h Cf2EncryptProgram),
// and for a reply's PA-REQ-ENC-PA-REP splice (contract::CheckCtsJob admits
// it on a dealt-key usage-3 ENCRYPT only) the usage-56 checksum material.
// Empty, or why the job fails JOB_UNKNOWN_USAGE: a usage in a direction
// the KDC does not use (engine.h kCts*Usages) or no material dealt for it.
// Public, and alike on every party (their key views agreed).
std::string FindCtsMaterial(const Job& job, const KeyShares& key, CtsTask& t) {
  const bool checksum = job.type == pb::JOB_CHECKSUM;
  const bool cf2 = t.cf2_bytes != 0;
  t.material = cf2 ? key.FindCts(CtsKind::kPrf, 0)
                   : key.FindCts(checksum ? CtsKind::kChecksum : CtsKind::kUsage, job.usage);
  auto in = [](absl::Span<const uint32_t> usages, uint32_t u) {
    return std::find(usages.begin(), usages.end(), u) != usages.end();
  };
  const bool dec_ok = in(cf2 ? absl::MakeConstSpan(kCtsCf2DecryptUsages)
                             : absl::MakeConstSpan(kCtsDecryptUsages), job.usage) ||
                      (!cf2 && key.kind == KeyKind::kService &&
                       in(absl::MakeConstSpan(kCtsServiceDecryptUsages), job.usage));
  if (job.type == pb::JOB_DECRYPT && !cf2 && !dec_ok &&
      in(absl::MakeConstSpan(kCtsServiceDecryptUsages), job.usage))
    return absl::StrCat("a DECRYPT under usage ", job.usage,
                        " (a ticket) is computed under a service's key only (KEY_KIND_SERVICE): "
                        "this key is password-derived");
  const bool enc_ok = in(cf2 ? absl::MakeConstSpan(kCtsCf2EncryptUsages)
                             : absl::MakeConstSpan(kCtsEncryptUsages), job.usage);
  const bool service_sum = in(absl::MakeConstSpan(kCtsServiceKeyChecksums), job.usage);
  if (checksum && service_sum && key.kind != KeyKind::kService)
    return absl::StrCat("a CHECKSUM under usage ", job.usage,
                        " (a CAMMAC service verifier) is computed under a service's random key "
                        "only (KEY_KIND_SERVICE): this key is password-derived");
  const bool sum_ok = in(absl::MakeConstSpan(kCtsChecksumUsages), job.usage) || service_sum;
  if ((job.type == pb::JOB_DECRYPT && !dec_ok) || (job.type == pb::JOB_ENCRYPT && !enc_ok) ||
      (checksum && !sum_ok))
    return absl::StrCat("usage ", job.usage, " is not dealt for an aes*-cts ",
                        checksum                       ? "CHECKSUM"
                        : job.type == pb::JOB_DECRYPT ? "DECRYPT"
                                                       : "ENCRYPT",
                        cf2 ? " under a FAST key" : "");
  // A ticket's PAC is signed under usage 17, a reply's request under 56.
  const uint32_t splice_usage = job.sign_pad != Job::kNoCondition
                                    ? contract::kTicketChecksumUsage
                                    : contract::kSpliceChecksumUsage;
  if (job.splice_length != 0) {
    t.splice_m = job.splice_length;
    t.splice_off = job.splice_offset;
    t.splice_material = key.FindCts(CtsKind::kChecksum, splice_usage);
    t.ticket = job.sign_pad != Job::kNoCondition;
  }
  if (t.material == nullptr)
    return absl::StrCat("no material was dealt for ", checksum ? "checksum " : "", "usage ",
                        job.usage, " of this key");
  if (t.splice_m != 0 && t.splice_material == nullptr)
    return absl::StrCat("no material was dealt for checksum usage ", splice_usage,
                        " of this key (the splice's checksum)");
  return {};
}

// Whether t's material has the sizes its program takes.
bool CtsMaterialSizesOk(const CtsTask& t) {
  const size_t want = t.type == pb::JOB_CHECKSUM ? 40
                      : t.cf2_bytes != 0         ? cts::kBlock * (t.nr + 1)
                                                 : cts::UsageMaterialBytes(t.nr);
  const auto sized = [](const CtsMaterial* m, size_t n) {
    return m == nullptr || (m->share[0].size() == n && m->share[1].size() == n);
  };
  return t.material != nullptr && sized(t.material, want) && sized(t.splice_material, 40);
}

}  // namespace

void Engine::Impl::PlanCtsJob(Batch& b, size_t j) {
  const Job& job = b.jobs[j];
  JobPlan& w = b.plan[j];
  if (std::string why = CheckUserGate(b.jobs, j, *w.key); !why.empty()) {
    w.Fail(pb::JOB_MALFORMED, std::move(why));
    return;
  }
  // A ticket's KDC signature needs its pad (known alike on every party
  // once the batch is agreed).
  if (job.sign_pad != Job::kNoCondition && !b.plan[job.sign_pad].live()) {
    w.Fail(pb::JOB_WITHHELD, "the ticket's signing PAD (sign_pad) failed");
    return;
  }
  CtsTask t;
  t.job = j;
  t.type = job.type;
  t.nr = NumRounds(w.key->cipher);
  t.usage = job.usage;
  t.cf2_bytes = contract::CtsKeyBytes(job.cts_key);
  if (std::string why = FindCtsMaterial(job, *w.key, t); !why.empty()) {
    w.Fail(pb::JOB_UNKNOWN_USAGE, std::move(why));
    return;
  }
  // A FAST key's half, then the message (a DECRYPT's C || T).
  t.shared_in = {job.data_shares[0], job.data_shares[1]};
  if (CtsHasWindow(job.type, t.cf2_bytes, job.usage)) {
    // The freshness window, public: shared as (c, 0, 0) (cts.h
    // StaleTimestamp).
    const std::string w = CtsTimeWindow(job.now, options_.cts_skew_s);
    for (int c = 0; c < 2; ++c)
      if (share::HoldsPublicIn(party(), c)) std::memcpy(t.window[c].data(), w.data(), w.size());
  }
  // n before its class (contract::CtsLengthOf): what the output is cut to.
  t.n = contract::CtsLengthOf(ShapeOf(job));
  // A new shape counts against the batch's bound before it is compiled
  // (EngineOptions::cts_batch_bytes); the job's shape is public and the
  // same on every party, so all fail the same jobs.
  const CtsProgramCache::Shape shape = ShapeOf(t);
  const size_t shape_bytes = CtsProgramCache::ShapeBytes(shape);
  if (b.cts_shapes.count(shape) == 0) {
    if (b.cts_shape_bytes + shape_bytes > options_.cts_batch_bytes) {
      w.Fail(pb::JOB_MALFORMED,
             absl::StrCat("this batch's aes*-cts jobs of distinct lengths would pass ",
                          options_.cts_batch_bytes, " bytes: submit the job in another batch"));
      return;
    }
    b.cts_shapes.insert(shape);
    b.cts_shape_bytes += shape_bytes;
  }
  absl::StatusOr<std::shared_ptr<const cts::Program>> p = CtsProgramCache::Shared().Get(
      job.type, t.nr, t.n, t.cf2_bytes, t.usage, t.splice_m, t.splice_off);
  if (!p.ok()) {
    w.Fail(pb::JOB_MALFORMED, std::string(p.status().message()));
    return;
  }
  if (!CtsMaterialSizesOk(t)) {
    w.Fail(pb::JOB_KEY_INCONSISTENT, "the dealt material has the wrong size: re-deal the key");
    return;
  }
  t.program = *std::move(p);
  w.cts_task = static_cast<int64_t>(b.cts.size());
  b.cts.push_back(std::move(t));
}

// The KDC signature's inputs of every ticket task (cts.h
// TicketClassProgram): the pad's ctr0 (public, in the component that holds
// it), H^2, and L = A' H^3 ^ lens H ^ AES_K(c0) for the 12-byte server
// signature (enctype.md "Keyed checksum"): GHASH with the signature's
// block zero, linear in the powers, so each component is computed from
// this party's components alone; the signature's block times H^2 is the
// circuit's.
void Engine::Impl::FillTicketSignatures(Batch& b) {
  for (CtsTask& t : b.cts) {
    if (!t.ticket) continue;
    const size_t p = static_cast<size_t>(b.jobs[t.job].sign_pad);
    PadState pad;
    const JobPlan& w = b.plan[p];
    pad.key = w.key;
    pad.ctr0 = w.ctr0;
    for (int k = 0; k < 2; ++k) {
      std::memcpy(pad.mask[k].data(), b.aes.Lane(k, w.lane0), 16);
      if (w.m > static_cast<size_t>(kStoredHPowers)) pad.h_powers[k] = b.secrets[p].powers[k];
    }
    const std::array<uint8_t, 5> a = ChecksumAad(b.jobs[p].usage);
    const std::vector<uint8_t> x =
        protocol::GhashInput(a, std::vector<uint8_t>(contract::kSpliceBytes, 0));
    for (int k = 0; k < 2; ++k) {
      std::array<uint8_t, 48>& s = t.sign[k];
      s.fill(0);
      if (share::HoldsPublicIn(party(), k)) std::memcpy(s.data(), pad.ctr0.data(), 16);
      std::memcpy(s.data() + 16, pad.Powers(k) + 16, 16);  // H^2
      protocol::GhashWithPowers(x, pad.Powers(k), s.data() + 32);
      for (size_t i = 0; i < 16; ++i) s[32 + i] ^= pad.mask[k][i];
    }
  }
}

// The aes*-cts DECRYPTs' mismatch bits, opened among the servers only
// after every AND so far is verified (malicious mode; the opening is then
// compared like every other): the one value a DECRYPT opens before the
// release, and it reveals only whether the tag held (RFC 3961 section
// 5.3's verdict, which the KDC learns anyway).
absl::Status Engine::Impl::OpenCtsVerdicts(Batch& b) {
  std::vector<uint8_t> m0, m1;
  std::vector<size_t> jobs;
  for (const CtsTask& t : b.cts)
    if (t.type == pb::JOB_DECRYPT) {
      m0.push_back(t.mismatch[0]);
      m1.push_back(t.mismatch[1]);
      jobs.push_back(t.job);
    }
  if (jobs.empty()) return absl::OkStatus();
  const bool verify = rep3_.log() != nullptr;
  absl::Status st;
  if (verify && !log_.empty()) st = protocol::Verifier::Verify(rep3_, log_);
  std::vector<uint8_t> open(jobs.size());
  if (st.ok()) st = rep3_.Reveal(m0, m1, absl::MakeSpan(open));
  if (st.ok() && verify) st = protocol::Verifier::CompareOpened(rep3_, log_);
  share::Wipe(m0);
  share::Wipe(m1);
  if (!st.ok()) return st;
  b.stale.assign(b.jobs.size(), false);
  for (size_t i = 0; i < jobs.size(); ++i) {
    b.pass[jobs[i]] = (open[i] & 1) == 0;
    // A failed tag's stale bit is of junk: never in an answer, which says
    // pass or fail only (the gated jobs' JOB_WITHHELD detail).
    b.stale[jobs[i]] = b.pass[jobs[i]] && (open[i] & 2) != 0;
  }
  return absl::OkStatus();
}

// Every gate DECRYPT's verdict (GateDecrypt), opened alike on every party
// by now (CheckTags, OpenCtsVerdicts), counted into this server's failure
// budget before any result leaves it (gate_budget.h).
void Engine::Impl::SettleGates(Batch& b) {
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.plan[j].live() && b.jobs[j].type == pb::JOB_DECRYPT) b.gates->Settle(j, b.pass[j]);
}

// An aes*-cts result: its output shares (JobResult::keystream carries
// every revealed share) for a DECRYPT whose tag held, an ENCRYPT or a
// CHECKSUM; a DECRYPT whose tag failed reveals nothing.
void Engine::Impl::CollectCts(Batch& b, size_t j, JobResult& r) {
  CtsTask& t = b.cts[b.plan[j].cts_task];
  if (t.type == pb::JOB_DECRYPT && !b.pass[j]) {
    r.status = pb::JOB_INTEGRITY_FAILED;
    r.detail = "the aes*-cts tag did not verify";
    return;
  }
  for (int k = 0; k < 2; ++k) r.keystream[k] = std::move(t.out[k]);
}

// One bitsliced pass: per job AES_K(c0) then keystream c0+1..c0+n.
absl::Status Engine::Impl::RunAes(Batch& b) {
  size_t nlanes = 0;
  for (JobPlan& w : b.plan) {
    if (!w.aes()) continue;
    w.lane0 = nlanes;
    nlanes += 1 + w.nks;
    if (nlanes > kMaxBatchBlocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch needs more than ", kMaxBatchBlocks, " AES blocks"));
    }
  }
  b.nlanes = nlanes;
  // Every lane's counter block and SharedLane are written below: no
  // value-initialisation (~6 MB of memset per 100,000 blocks).
  std::unique_ptr<uint8_t[]> in(new uint8_t[16 * nlanes]);
  auto& out = b.aes.out;
  out[0].resize(16 * nlanes);
  out[1].resize(16 * nlanes);
  std::unique_ptr<aes::SharedLane[]> lanes(new aes::SharedLane[nlanes]);
  for (const JobPlan& w : b.plan) {
    if (!w.aes()) continue;
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
  // A public rule on the agreed batch: all three parties pick the same.
  const aes::SboxCircuit circuit =
      nlanes <= options_.depth3_max_blocks ? aes::SboxCircuit::kDepth3
      : nlanes >= options_.small_sbox_min_blocks ? aes::SboxCircuit::kDepth6
                                                 : aes::SboxCircuit::kDepth4;
  aes::SharedOptions aes_options;
  aes_options.chunk_lanes = options_.chunk_lanes;
  aes_options.wave_lanes = options_.wave_lanes;
  aes_options.verify_words = options_.verify_words;
  return aes::EncryptShared(rep3_, absl::MakeConstSpan(lanes.get(), nlanes),
                            circuit, aes_options, &workspace_);
}

// Powers of H beyond the stored ones, by doubling: H^(a+1..2a) =
// H^a * H^(1..a), one multiplication round per doubling for all jobs.
absl::Status Engine::Impl::ExtendPowers(Batch& b) {
  std::vector<size_t> need;
  for (size_t j = 0; j < b.plan.size(); ++j) {
    const JobPlan& w = b.plan[j];
    if (!w.live() || w.m <= static_cast<size_t>(kStoredHPowers)) continue;
    for (int k = 0; k < 2; ++k) {
      // Reserve first: assign-then-reserve would reallocate and free an
      // unwiped copy of the H-power shares.
      auto& p = b.secrets[j].powers[k];
      p.reserve(16 * w.m);
      p.assign(w.key->h_powers[k].begin(), w.key->h_powers[k].end());
    }
    need.push_back(j);
  }
  // Powers job j gets this round: a (held) or m - a (still missing).
  auto count = [&](size_t j) {
    const size_t a = b.secrets[j].powers[0].size() / 16;
    return std::make_pair(a, std::min(a, b.plan[j].m - a));
  };
  while (!need.empty()) {
    size_t total = 0;
    for (size_t j : need) total += count(j).second;
    std::vector<uint8_t> x0(16 * total), x1(16 * total), y0(16 * total),
        y1(16 * total), z0(16 * total), z1(16 * total);
    size_t off = 0;
    for (size_t j : need) {
      const auto [a, cnt] = count(j);
      const auto& p = b.secrets[j].powers;
      for (size_t i = 0; i < cnt; ++i, off += 16) {
        std::memcpy(&x0[off], &p[0][16 * (a - 1)], 16);
        std::memcpy(&x1[off], &p[1][16 * (a - 1)], 16);
        std::memcpy(&y0[off], &p[0][16 * i], 16);
        std::memcpy(&y1[off], &p[1][16 * i], 16);
      }
    }
    absl::Status st = rep3_.GfMul(x0, x1, y0, y1, absl::MakeSpan(z0),
                                  absl::MakeSpan(z1));
    for (auto* v : {&x0, &x1, &y0, &y1}) share::Wipe(*v);
    off = 0;
    std::vector<size_t> again;
    for (size_t j : need) {
      if (!st.ok()) break;
      const size_t cnt = count(j).second;
      auto& p = b.secrets[j].powers;
      p[0].insert(p[0].end(), z0.begin() + off, z0.begin() + off + 16 * cnt);
      p[1].insert(p[1].end(), z1.begin() + off, z1.begin() + off + 16 * cnt);
      off += 16 * cnt;
      if (p[0].size() / 16 < b.plan[j].m) again.push_back(j);
    }
    share::Wipe(z0);
    share::Wipe(z1);
    if (!st.ok()) return st;
    need.swap(again);
  }
  return absl::OkStatus();
}

// T' = GHASH_H(A, C) ^ AES_K(c0) on shares for every job but ENCRYPT (whose
// tag FINALIZE computes once the KDC has C). GHASH = sum_j X_j * H^(m-j+1)
// (SP 800-38D, 6.4): public blocks times the shared powers are local; each
// block of a shared message D times its shared power is a shared x shared
// product, all of the batch in one GfMul round (Araki et al., CCS 2016,
// section 2.2: local cross terms plus a zero-share, resharing to i-1),
// then summed locally per job.
absl::Status Engine::Impl::ComputeTags(Batch& b) {
  if (absl::Status st = ExtendPowers(b); !st.ok()) return st;
  for (size_t j = 0; j < b.plan.size(); ++j) {
    const JobPlan& w = b.plan[j];
    if (!w.aes() || b.jobs[j].type == pb::JOB_ENCRYPT ||
        b.jobs[j].type == pb::JOB_PAD)
      continue;
    JobSecrets& s = b.secrets[j];
    for (int k = 0; k < 2; ++k) {
      protocol::GhashWithPowers(w.ghash_in, PowersOf(w, s, k), s.tprime[k].data());
      const uint8_t* mask = b.aes.Lane(k, w.lane0);
      for (int i = 0; i < 16; ++i) s.tprime[k][i] ^= mask[i];
    }
  }
  return AddSharedProducts(b);
}

// Message block q of a shared D (X_{2+q}: A' is one block) pairs with
// H^(m-1-q); the products of all shared messages go in one GfMul.
absl::Status Engine::Impl::AddSharedProducts(Batch& b) {
  size_t total = 0;
  for (size_t j = 0; j < b.plan.size(); ++j)
    if (b.plan[j].live()) total += b.plan[j].shared_blocks;
  if (total == 0) return absl::OkStatus();
  const size_t n = 16 * total;
  std::vector<uint8_t> x0(n, 0), x1(n, 0), y0(n), y1(n), z0(n), z1(n);
  size_t off = 0;
  for (size_t j = 0; j < b.plan.size(); ++j) {
    const JobPlan& w = b.plan[j];
    if (!w.live() || w.shared_blocks == 0) continue;
    const Job& job = b.jobs[j];
    const JobSecrets& s = b.secrets[j];
    std::memcpy(&x0[off], job.data_shares[0].data(), job.length);
    std::memcpy(&x1[off], job.data_shares[1].data(), job.length);
    for (size_t q = 0; q < w.shared_blocks; ++q) {
      const size_t power = w.m - 1 - q;  // H^power at offset 16*(power-1)
      std::memcpy(&y0[off + 16 * q], PowersOf(w, s, 0) + 16 * (power - 1), 16);
      std::memcpy(&y1[off + 16 * q], PowersOf(w, s, 1) + 16 * (power - 1), 16);
    }
    off += 16 * w.shared_blocks;
  }
  absl::Status st = rep3_.GfMul(x0, x1, y0, y1, absl::MakeSpan(z0), absl::MakeSpan(z1));
  if (st.ok()) {
    off = 0;
    for (size_t j = 0; j < b.plan.size(); ++j) {
      const JobPlan& w = b.plan[j];
      if (!w.live() || w.shared_blocks == 0) continue;
      JobSecrets& s = b.secrets[j];
      for (size_t q = 0; q < w.shared_blocks; ++q, off += 16) {
        for (int i = 0; i < 16; ++i) {
          s.tprime[0][i] ^= z0[off + i];
          s.tprime[1][i] ^= z1[off + i];
        }
      }
    }
  }
  for (auto* v : {&x0, &x1, &y0, &y1, &z0, &z1}) share::Wipe(*v);
  return st;
}

// Masked zero test of DECRYPT / VERIFY_CHECKSUM tags: reveal r * (T' ^ T)
// for a fresh shared random r; zero iff the tag holds (except with
// probability 2^-128).
absl::Status Engine::Impl::CheckTags(Batch& b) {
  b.pass.assign(b.jobs.size(), false);
  std::vector<size_t> checks, pads;
  for (size_t j = 0; j < b.plan.size(); ++j)
    if (b.plan[j].live() && b.plan[j].check) checks.push_back(j);
  // The verification pads' products go in the same round (VerifyPadInputs).
  const size_t extra = 16 * VerifyPadInputs(b, &pads);
  if (checks.empty() && pads.empty()) return absl::OkStatus();
  const int me = party();
  const size_t n = 16 * checks.size();
  std::vector<uint8_t> d0(n + extra), d1(n + extra), r0(n + extra), r1(n + extra),
      z0(n + extra), z1(n + extra), open(n);
  for (size_t c = 0; c < checks.size(); ++c) {
    const JobPlan& w = b.plan[checks[c]];
    const JobSecrets& s = b.secrets[checks[c]];
    std::memcpy(&d0[16 * c], s.tprime[0].data(), 16);
    std::memcpy(&d1[16 * c], s.tprime[1].data(), 16);
    const Job& job = b.jobs[checks[c]];
    if (job.type == pb::JOB_VERIFY_CHECKSUM) {
      // The presented tag t' as shares (after D in data_shares): the
      // difference T' ^ t' stays shared, t' never public.
      for (int i = 0; i < 16; ++i) {
        d0[16 * c + i] ^= job.data_shares[0][job.length + i];
        d1[16 * c + i] ^= job.data_shares[1][job.length + i];
      }
      continue;
    }
    for (int i = 0; i < 16; ++i) {
      if (share::HoldsPublicIn(me, 0)) d0[16 * c + i] ^= w.tag[i];
      if (share::HoldsPublicIn(me, 1)) d1[16 * c + i] ^= w.tag[i];
    }
  }
  prss_.RandomShares(r0.data(), r1.data(), n);
  FillVerifyPads(b, pads, n, &r0, &r1, &d0, &d1);
  absl::Status st = rep3_.GfMul(r0, r1, d0, d1, absl::MakeSpan(z0), absl::MakeSpan(z1));
  if (st.ok()) TakeVerifyPads(b, pads, n, z0, z1);
  // Malicious security: the products behind T' and r * (T' ^ T) are
  // verified before the reveal, and the reveal is compared after it.
  const bool verify = rep3_.log() != nullptr && n > 0;
  if (st.ok() && verify) st = protocol::Verifier::Verify(rep3_, log_);
  if (st.ok() && n > 0)
    st = rep3_.Reveal(absl::MakeConstSpan(z0).first(n), absl::MakeConstSpan(z1).first(n),
                      absl::MakeSpan(open));
  if (st.ok() && verify) st = protocol::Verifier::CompareOpened(rep3_, log_);
  for (auto* v : {&d0, &d1, &r0, &r1, &z0, &z1}) share::Wipe(*v);
  if (!st.ok()) return st;
  for (size_t c = 0; c < checks.size(); ++c) {
    uint8_t acc = 0;
    for (int i = 0; i < 16; ++i) acc |= open[16 * c + i];
    b.pass[checks[c]] = (acc == 0);
  }
  return absl::OkStatus();
}

// Verification pads (PadState::verify_only): shares of r*H^k (k = 1..m)
// and r*AES_K(c0) for a fresh shared random r per pad (PRSS), their
// products in the GfMul round of CheckTags (logged and checked in
// malicious mode like every product), kept with r instead of the powers
// and the pad. A verify item (SignItem.verify) then sums to
// r * (T ^ t'): zero iff the presented tag t' is the tag T, uniform
// otherwise, also to the KDC together with one server, which holds two of
// r's three shares. Liveness is public, so the parties draw alike.
// Returns the products needed (m + 1 per pad) and lists the pads.
size_t Engine::Impl::VerifyPadInputs(Batch& b, std::vector<size_t>* pads) {
  size_t total = 0;
  for (size_t j = 0; j < b.plan.size(); ++j)
    if (b.plan[j].live() && b.jobs[j].type == pb::JOB_PAD && !b.jobs[j].checksum.empty()) {
      pads->push_back(j);
      total += b.plan[j].m + 1;
    }
  return total;
}

// The factors from byte `off` on: r (drawn here) against H^1..H^m, then
// AES_K(c0), per pad.
void Engine::Impl::FillVerifyPads(Batch& b, const std::vector<size_t>& pads, size_t off,
                                  std::vector<uint8_t>* x0, std::vector<uint8_t>* x1,
                                  std::vector<uint8_t>* y0, std::vector<uint8_t>* y1) {
  for (size_t j : pads) {
    const JobPlan& w = b.plan[j];
    JobSecrets& s = b.secrets[j];
    prss_.RandomShares(s.r[0].data(), s.r[1].data(), 16);
    for (size_t k = 0; k <= w.m; ++k, off += 16) {
      std::memcpy(&(*x0)[off], s.r[0].data(), 16);
      std::memcpy(&(*x1)[off], s.r[1].data(), 16);
      std::memcpy(&(*y0)[off], k < w.m ? PowersOf(w, s, 0) + 16 * k : b.aes.Lane(0, w.lane0), 16);
      std::memcpy(&(*y1)[off], k < w.m ? PowersOf(w, s, 1) + 16 * k : b.aes.Lane(1, w.lane0), 16);
    }
  }
}

// The products from byte `off` on into each pad's secrets.
void Engine::Impl::TakeVerifyPads(Batch& b, const std::vector<size_t>& pads, size_t off,
                                  const std::vector<uint8_t>& z0,
                                  const std::vector<uint8_t>& z1) {
  for (size_t j : pads) {
    const size_t m = b.plan[j].m;
    JobSecrets& s = b.secrets[j];
    s.rpowers[0].assign(z0.begin() + off, z0.begin() + off + 16 * m);
    s.rpowers[1].assign(z1.begin() + off, z1.begin() + off + 16 * m);
    std::memcpy(s.rmask[0].data(), &z0[off + 16 * m], 16);
    std::memcpy(s.rmask[1].data(), &z1[off + 16 * m], 16);
    off += 16 * (m + 1);
  }
}

// A fresh zero-share z_i for every PAD job of the batch, live or not: the
// jobs are the same on the three parties (the agreement), so their PRSS
// counters stay in step.
void Engine::Impl::DrawPadZeros(Batch& b) {
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.jobs[j].type == pb::JOB_PAD)
      prss_.ZeroShare(b.secrets[j].zero.data(), 16);
}

BatchResult Engine::Impl::Collect(Batch& b) {
  BatchResult result;
  result.batch_seq = b.seq;
  result.jobs.resize(b.jobs.size());
  for (size_t j = 0; j < b.jobs.size(); ++j) CollectJob(b, j, result.jobs[j]);
  // Conditional release (Job::release_if_ok): the same on every party, as
  // every job's status is.
  for (size_t j = 0; j < b.jobs.size(); ++j) {
    const int64_t c = b.jobs[j].release_if_ok;
    JobResult& r = result.jobs[j];
    if (c == Job::kNoCondition) continue;
    // A verifier that took its token and is not released gives it back.
    const bool took = b.plan[j].gated_reply && !b.plan[j].over_rate;
    auto give_back = [&] {
      if (took)
        limiter_->GiveBack(std::string(b.plan[j].deal.begin(), b.plan[j].deal.end()),
                           options_.cts_releases_per_minute, absl::Now());
    };
    if (!r.ok()) {
      give_back();
      continue;
    }
    const bool stale =
        b.plan[j].user_key && static_cast<size_t>(c) < b.stale.size() && b.stale[c];
    if (result.jobs[c].ok() && !stale) continue;  // released: its token spent
    give_back();
    for (auto& ks : r.keystream) {
      share::Wipe(ks);
      ks.clear();
    }
    for (auto& t : r.tag) OPENSSL_cleanse(t.data(), t.size());
    r.state.reset();
    r.pad.reset();
    r.ctr0 = {};
    r.status = pb::JOB_WITHHELD;
    r.detail = stale ? "withheld: the timestamp it is released on is outside the MPC "
                       "servers' clock skew (--cts_skew_s)"
                     : "withheld: the job it is released on did not verify";
  }
  return result;
}

// What an ENCRYPT's or a PAD's tag will need: AES_K(c0) and the powers.
void Engine::Impl::FillTagState(Batch& b, size_t j, TagState& s) {
  JobPlan& w = b.plan[j];
  const Job& job = b.jobs[j];
  s.party = party();
  s.cipher = w.key->cipher;
  s.key_id = job.key_id;
  s.usage = job.usage;
  s.ctr0 = w.ctr0;
  for (int k = 0; k < 2; ++k)
    std::memcpy(s.mask[k].data(), b.aes.Lane(k, w.lane0), 16);
  if (w.m > static_cast<size_t>(kStoredHPowers)) {
    // The powers this job computed: moved, not copied (the state wipes
    // them).
    for (int k = 0; k < 2; ++k) s.h_powers[k] = std::move(b.secrets[j].powers[k]);
  } else {
    s.key = w.key;  // the stored powers suffice: no copy
  }
}

void Engine::Impl::CollectPad(Batch& b, size_t j, JobResult& r) {
  const Job& job = b.jobs[j];
  r.ctr0 = b.plan[j].ctr0;
  auto pad = std::make_shared<PadState>();
  FillTagState(b, j, *pad);
  pad->max_length = job.length;
  pad->verify_only = !job.checksum.empty();
  pad->zero = b.secrets[j].zero;
  if (pad->verify_only) {
    // r*H^k, r*AES_K(c0) and r in place of the powers and the pad.
    JobSecrets& s = b.secrets[j];
    pad->key.reset();
    for (int k = 0; k < 2; ++k) {
      share::Wipe(pad->h_powers[k]);
      pad->h_powers[k] = std::move(s.rpowers[k]);
      pad->mask[k] = s.rmask[k];
      pad->r[k] = s.r[k];
    }
  }
  r.pad = std::move(pad);
}

void Engine::Impl::CollectJob(Batch& b, size_t j, JobResult& r) {
  JobPlan& w = b.plan[j];
  const Job& job = b.jobs[j];
  r.status = w.status;
  r.detail = w.detail;
  if (!w.live()) return;
  if (w.cts) return CollectCts(b, j, r);
  auto keystream = [&] {
    for (int k = 0; k < 2; ++k) {
      const auto& out = b.aes.out[k];
      r.keystream[k].assign(out.begin() + 16 * (w.lane0 + 1),
                            out.begin() + 16 * (w.lane0 + 1 + w.nks));
    }
  };
  const bool verified = b.pass[j];
  switch (job.type) {
    case pb::JOB_ENCRYPT: {
      r.ctr0 = w.ctr0;
      keystream();
      auto state = std::make_shared<EncryptState>();
      FillTagState(b, j, *state);
      state->nblocks = job.nblocks;
      r.state = std::move(state);
      return;
    }
    case pb::JOB_DECRYPT:
      r.status = verified ? pb::JOB_OK : pb::JOB_INTEGRITY_FAILED;
      if (verified) keystream();
      return;
    case pb::JOB_CHECKSUM:
      r.ctr0 = w.ctr0;
      r.tag = b.secrets[j].tprime;
      return;
    case pb::JOB_VERIFY_CHECKSUM:
      r.status = verified ? pb::JOB_OK : pb::JOB_INTEGRITY_FAILED;
      return;
    case pb::JOB_PAD:
      CollectPad(b, j, r);
      // Spent on a ticket's KDC signature inside the circuit: only ctr0.
      if (SpentBySignature(b.jobs, j)) r.pad.reset();
      return;
    default:
      return;
  }
}

Job::~Job() {
  for (auto& s : data_shares) share::Wipe(s);
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
  if (verify_words == 0) {
    return absl::InvalidArgumentError("verify_words must be > 0");
  }
  if (cts_batch_bytes == 0) {
    return absl::InvalidArgumentError("cts_batch_bytes must be > 0");
  }
  if (cts_skew_s == 0 || cts_skew_s > 86400) {
    return absl::InvalidArgumentError("cts_skew_s must be 1 to 86400 seconds");
  }
  // Malicious mode: protocol/verify.h's per-batch soundness (< 2^-40)
  // takes at most kMaxVerifiesPerBatch Verifies. A batch of the largest
  // size (contract::kMaxBatchBlocks) runs ceil(blocks / wave_lanes) waves,
  // each with at most one Verify per AND layer (AES-256 with the 32-AND
  // S-box: 14 x 6 layers) and one at its end, and two more follow (tags,
  // batch end). With --verify_words=1 every layer boundary checks.
  if (malicious) {
    const uint64_t waves = (contract::kMaxBatchBlocks + wave_lanes - 1) / wave_lanes;
    const uint64_t verifies = waves * (kMaxAndLayersPerWave + 1) + 2;
    if (verifies > kMaxVerifiesPerBatch)
      return absl::InvalidArgumentError(absl::StrCat(
          "--wave_lanes=", wave_lanes, " with --security=malicious: a batch of ",
          contract::kMaxBatchBlocks, " blocks runs ", waves, " waves, up to ",
          verifies, " checks, over the ", kMaxVerifiesPerBatch,
          " that keep a cheat's chance below 2^-40 per batch (protocol/verify.h); "
          "use --wave_lanes of at least ",
          (contract::kMaxBatchBlocks + MaxWavesPerBatch() - 1) / MaxWavesPerBatch()));
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

size_t Engine::verify_retained_bytes() const { return impl_->verify_retained_bytes(); }

absl::StatusOr<BatchResult> Engine::RunBatch(uint64_t batch_seq,
                                             absl::Span<const Job> jobs,
                                             const KeyLookup& lookup) {
  return impl_->RunBatch(batch_seq, jobs, lookup);
}

}  // namespace kmpc::engine
