// The tags of a Run (tags.h).
#include "engine/tags.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/pads.h"
#include "protocol/gf128.h"
#include "protocol/verify.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

// Message block q of a shared D (X_{2+q}: A' is one block) pairs with
// H^(m-1-q); the products of all shared messages go in one GfMul.
absl::Status AddSharedProducts(const RunContext& ctx, BatchState& b) {
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
  absl::Status st = ctx.rep3.GfMul(x0, x1, y0, y1, absl::MakeSpan(z0), absl::MakeSpan(z1));
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

}  // namespace

absl::Status ExtendPowers(const RunContext& ctx, BatchState& b) {
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
    absl::Status st = ctx.rep3.GfMul(x0, x1, y0, y1, absl::MakeSpan(z0),
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

absl::Status ComputeTags(const RunContext& ctx, BatchState& b) {
  if (absl::Status st = ExtendPowers(ctx, b); !st.ok()) return st;
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
  return AddSharedProducts(ctx, b);
}

absl::Status CheckTags(const RunContext& ctx, BatchState& b) {
  b.pass.assign(b.jobs.size(), false);
  std::vector<size_t> checks, pads;
  for (size_t j = 0; j < b.plan.size(); ++j)
    if (b.plan[j].live() && b.plan[j].check) checks.push_back(j);
  // The verification pads' products go in the same round (VerifyPadInputs).
  const size_t extra = 16 * VerifyPadInputs(b, &pads);
  if (checks.empty() && pads.empty()) return absl::OkStatus();
  const int me = ctx.party();
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
  ctx.prss.RandomShares(r0.data(), r1.data(), n);
  FillVerifyPads(ctx, b, pads, n, &r0, &r1, &d0, &d1);
  absl::Status st = ctx.rep3.GfMul(r0, r1, d0, d1, absl::MakeSpan(z0), absl::MakeSpan(z1));
  if (st.ok()) TakeVerifyPads(b, pads, n, z0, z1);
  // Malicious security: the products behind T' and r * (T' ^ T) are
  // verified before the reveal, and the reveal is compared after it.
  const bool verify = ctx.logging() && n > 0;
  if (st.ok() && verify) st = protocol::Verifier::Verify(ctx.rep3, ctx.log);
  if (st.ok() && n > 0)
    st = ctx.rep3.Reveal(absl::MakeConstSpan(z0).first(n), absl::MakeConstSpan(z1).first(n),
                      absl::MakeSpan(open));
  if (st.ok() && verify) st = protocol::Verifier::CompareOpened(ctx.rep3, ctx.log);
  for (auto* v : {&d0, &d1, &r0, &r1, &z0, &z1}) share::Wipe(*v);
  if (!st.ok()) return st;
  for (size_t c = 0; c < checks.size(); ++c) {
    uint8_t acc = 0;
    for (int i = 0; i < 16; ++i) acc |= open[16 * c + i];
    b.pass[checks[c]] = (acc == 0);
  }
  return absl::OkStatus();
}

absl::Status OpenCtsVerdicts(const RunContext& ctx, BatchState& b) {
  std::vector<uint8_t> m0, m1;
  std::vector<size_t> jobs;
  for (const CtsTask& t : b.cts)
    if (t.type == pb::JOB_DECRYPT) {
      m0.push_back(t.mismatch[0]);
      m1.push_back(t.mismatch[1]);
      jobs.push_back(t.job);
    }
  if (jobs.empty()) return absl::OkStatus();
  const bool verify = ctx.logging();
  absl::Status st;
  if (verify && !ctx.log.empty()) st = protocol::Verifier::Verify(ctx.rep3, ctx.log);
  std::vector<uint8_t> open(jobs.size());
  if (st.ok()) st = ctx.rep3.Reveal(m0, m1, absl::MakeSpan(open));
  if (st.ok() && verify) st = protocol::Verifier::CompareOpened(ctx.rep3, ctx.log);
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

void SettleGates(BatchState& b) {
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.plan[j].live() && b.jobs[j].type == pb::JOB_DECRYPT) b.gates->Settle(j, b.pass[j]);
}

}  // namespace kmpc::engine
