// Counters and pads of a Run (pads.h).
#include "engine/pads.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "contract.h"

namespace kmpc::engine {

void FixCounter(Block& ctr0, uint64_t n) {
  static_assert(contract::kMaxJobBlocks < (uint64_t{1} << 21) &&
                contract::kLinkedPadOffset + contract::kPadSlots < (uint64_t{1} << 21));
  const uint64_t reach = contract::kLinkedPadOffset + contract::kPadSlots;
  const absl::string_view c(reinterpret_cast<const char*>(ctr0.data()), 16);
  if (!contract::CounterRangeOk(c, std::max<uint64_t>(n, reach))) ctr0[0] ^= 0x80;
}

absl::Status DrawCounters(const RunContext& ctx, BatchState& b) {
  std::vector<size_t> pending;
  for (size_t j = 0; j < b.plan.size(); ++j) {
    const JobPlan& w = b.plan[j];
    if (w.live() && w.needs_ctr0 && !w.ctr0_drawn) pending.push_back(j);
  }
  if (pending.empty()) return absl::OkStatus();
  const size_t n = 16 * pending.size();
  std::vector<uint8_t> c0(n), c1(n), open(n);
  ctx.prss.RandomShares(c0.data(), c1.data(), n);
  // Reveal logs the opened values before FixCounter (protocol/verify.h).
  if (absl::Status st = ctx.rep3.Reveal(c0, c1, absl::MakeSpan(open)); !st.ok()) return st;
  for (size_t p = 0; p < pending.size(); ++p) {
    JobPlan& w = b.plan[pending[p]];
    std::memcpy(w.ctr0.data(), open.data() + 16 * p, 16);
    w.ctr0_drawn = true;
    FixCounter(w.ctr0, w.nks);
  }
  return absl::OkStatus();
}

void LinkPads(BatchState& b) {
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

void DrawPadZeros(const RunContext& ctx, BatchState& b) {
  for (size_t j = 0; j < b.jobs.size(); ++j)
    if (b.jobs[j].type == pb::JOB_PAD)
      ctx.prss.ZeroShare(b.secrets[j].zero.data(), 16);
}

size_t VerifyPadInputs(const BatchState& b, std::vector<size_t>* pads) {
  size_t total = 0;
  for (size_t j = 0; j < b.plan.size(); ++j)
    if (b.plan[j].live() && b.jobs[j].type == pb::JOB_PAD && !b.jobs[j].checksum.empty()) {
      pads->push_back(j);
      total += b.plan[j].m + 1;
    }
  return total;
}

void FillVerifyPads(const RunContext& ctx, BatchState& b, const std::vector<size_t>& pads,
                    size_t off, std::vector<uint8_t>* x0, std::vector<uint8_t>* x1,
                    std::vector<uint8_t>* y0, std::vector<uint8_t>* y1) {
  for (size_t j : pads) {
    const JobPlan& w = b.plan[j];
    JobSecrets& s = b.secrets[j];
    ctx.prss.RandomShares(s.r[0].data(), s.r[1].data(), 16);
    for (size_t k = 0; k <= w.m; ++k, off += 16) {
      std::memcpy(&(*x0)[off], s.r[0].data(), 16);
      std::memcpy(&(*x1)[off], s.r[1].data(), 16);
      std::memcpy(&(*y0)[off], k < w.m ? PowersOf(w, s, 0) + 16 * k : b.aes.Lane(0, w.lane0), 16);
      std::memcpy(&(*y1)[off], k < w.m ? PowersOf(w, s, 1) + 16 * k : b.aes.Lane(1, w.lane0), 16);
    }
  }
}

void TakeVerifyPads(BatchState& b, const std::vector<size_t>& pads, size_t off,
                    const std::vector<uint8_t>& z0, const std::vector<uint8_t>& z1) {
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

}  // namespace kmpc::engine
