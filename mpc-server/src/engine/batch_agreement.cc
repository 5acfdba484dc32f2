// The agreement of a Run (batch_agreement.h).
#include "engine/batch_agreement.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "engine/keys.h"
#include "engine/pads.h"
#include "protocol/verify.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

using protocol::Sha256;

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

// A forwarded message (what party i+1 forwarded from party i+2) checked
// against its tag under k0 (our component 0 of the tag key, which party
// i+2 holds as its component 1). On a bad tag: b.deviated, `mine` put in
// its place (with honest parties' inputs the same, what the originator
// sent), and the bad bytes logged as opened, so that party i-1's compare
// view differs from ours.
void CheckForwarded(const RunContext& ctx, BatchState& b, const uint8_t k0[16],
                    absl::Span<uint8_t> fwd, absl::Span<const uint8_t> mine) {
  const size_t n = fwd.size() - kForwardTagSize;
  if (ForwardTagOk(k0, fwd.subspan(0, n), fwd.data() + n)) return;
  b.deviated = true;
  if (ctx.logging()) {
    ctx.log.AddOpened(fwd);
    ctx.log.MarkDeviated();
  }
  std::memcpy(fwd.data(), mine.data(), n);
}

// Same inputs (hence the same number of jobs), different key views: two
// more rounds exchange the per-job views (tagged as the headers are), then
// every party fails the same jobs (JOB_UNKNOWN_KEY / JOB_KEY_INCONSISTENT)
// and runs the rest.
absl::Status ExchangeKeyViews(const RunContext& ctx, BatchState& b) {
  const size_t vbytes = kKeyViewBytes * b.plan.size();
  const size_t n = vbytes + kForwardTagSize;
  std::vector<uint8_t> vmine(n), vnext(n), vnext2(n);
  for (size_t j = 0; j < b.plan.size(); ++j)
    EncodeKeyView(b.plan[j], &vmine[kKeyViewBytes * j]);
  const ForwardTagKeys keys(ctx.prss);
  ForwardTag(keys.k1, absl::MakeConstSpan(vmine.data(), vbytes), vmine.data() + vbytes);
  if (absl::Status st = ctx.channel.Exchange(vmine, absl::MakeSpan(vnext)); !st.ok())
    return st;
  if (absl::Status st = ctx.channel.Exchange(vnext, absl::MakeSpan(vnext2)); !st.ok())
    return st;
  CheckForwarded(ctx, b, keys.k0, absl::MakeSpan(vnext2), vmine);
  const int me = ctx.party();
  for (size_t j = 0; j < b.plan.size(); ++j) {
    std::array<const uint8_t*, 3> views;
    views[me] = &vmine[kKeyViewBytes * j];
    views[(me + 1) % 3] = &vnext[kKeyViewBytes * j];
    views[(me + 2) % 3] = &vnext2[kKeyViewBytes * j];
    DecideKey(b.plan[j], views);
  }
  return absl::OkStatus();
}

// SHA-256 over a domain tag, the pair's key, the batch number and every
// live job's copy of component (party + comp) % 3, each with its index and
// length. A job failed by now (its check, its key view: decided alike on
// the three parties) is never computed on, so its copies are left out.
absl::Status DealtCopyDigest(const BatchState& b, int comp, const uint8_t key[16],
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

}  // namespace

absl::Status DigestBatch(const RunContext& ctx, const BatchState& b, AgreementHeader& h) {
  static constexpr char kTag[] = "kmpc-batch-v19";
  std::vector<uint8_t> enc(kTag, kTag + sizeof kTag);
  PutU32(enc, ctx.options.malicious ? 1 : 0);
  PutU32(enc, ctx.options.small_sbox_min_blocks);
  PutU32(enc, ctx.options.depth3_max_blocks);
  PutU32(enc, ctx.options.chunk_lanes);
  PutU32(enc, ctx.options.wave_lanes);
  PutU32(enc, ctx.options.malicious ? ctx.options.verify_words : 0);
  PutU64(enc, ctx.options.cts_batch_bytes);
  PutU32(enc, ctx.options.cts_skew_s);
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

absl::Status AgreeOnBatch(const RunContext& ctx, BatchState& b) {
  Headers h;
  if (absl::Status s = DigestBatch(ctx, b, h.mine); !s.ok()) return s;
  std::vector<size_t> pending;
  for (size_t j = 0; j < b.plan.size(); ++j)
    if (b.plan[j].live() && b.plan[j].needs_ctr0) pending.push_back(j);
  h.mine.counters = static_cast<uint32_t>(pending.size());
  const ForwardTagKeys keys(ctx.prss);
  const uint64_t counter_before = ctx.prss.counter();
  std::vector<uint8_t> r0(16 * pending.size()), r1(16 * pending.size());
  ctx.prss.RandomShares(r0.data(), r1.data(), r0.size());
  constexpr size_t kMsg = AgreementHeader::kSize + kForwardTagSize;
  uint8_t raw[kMsg], raw_next[kMsg];
  h.mine.Encode(absl::MakeSpan(raw, AgreementHeader::kSize));
  ForwardTag(keys.k1, absl::MakeConstSpan(raw, AgreementHeader::kSize),
             raw + AgreementHeader::kSize);
  if (absl::Status st = ctx.channel.Exchange(raw, absl::MakeSpan(raw_next)); !st.ok())
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
  if (absl::Status st = ctx.channel.Exchange(out, absl::MakeSpan(in)); !st.ok()) return st;
  CheckForwarded(ctx, b, keys.k0, absl::MakeSpan(in.data(), kMsg),
                 absl::MakeConstSpan(raw, kMsg));
  absl::StatusOr<AgreementHeader> next2 = AgreementHeader::Decode(
      absl::MakeConstSpan(in.data(), AgreementHeader::kSize));
  if (!next2.ok()) return next2.status();
  h.next2 = *next2;
  if (h.InputsDiffer() || h.KeysDiffer() || h.CountsDiffer()) {
    // Keep the PRSS ids in step for the next batch (or DrawCounters).
    ctx.prss.Skip(counter_before + h.MostCounters() - ctx.prss.counter());
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
    return ExchangeKeyViews(ctx, b);
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
    if (ctx.logging()) ctx.log.AddOpened(w.ctr0);
    FixCounter(w.ctr0, w.nks);
  }
  return absl::OkStatus();
}

bool AnyDealt(const BatchState& b) {
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.plan[j].live() &&
        (!b.jobs[j].data_shares[0].empty() || !b.jobs[j].data_shares[1].empty()))
      return true;
  return false;
}

absl::Status CheckDealing(const RunContext& ctx, const BatchState& b) {
  const ForwardTagKeys keys(ctx.prss);
  std::array<uint8_t, 32> mine, want, next;
  if (absl::Status s = DealtCopyDigest(b, 0, keys.k0, mine); !s.ok()) return s;
  if (absl::Status s = DealtCopyDigest(b, 1, keys.k1, want); !s.ok()) return s;
  if (absl::Status st = ctx.channel.Exchange(mine, absl::MakeSpan(next)); !st.ok()) return st;
  // Bit 0: the pair (i, i+1) differs; from round 2 on, also (i+1, i+2).
  uint8_t bad = CRYPTO_memcmp(want.data(), next.data(), want.size()) != 0 ? 1 : 0;
  uint8_t in = 0;
  if (absl::Status st = ctx.channel.Exchange(absl::MakeConstSpan(&bad, 1),
                                             absl::MakeSpan(&in, 1));
      !st.ok())
    return st;
  bad |= in;
  if (absl::Status st = ctx.channel.Exchange(absl::MakeConstSpan(&bad, 1),
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

}  // namespace kmpc::engine
