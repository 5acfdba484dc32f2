// The AES phase of a Run (aes_phase.h).
#include "engine/aes_phase.h"

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace kmpc::engine {
namespace {

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

}  // namespace

void CounterPlus(const uint8_t* ctr0, uint64_t i, uint8_t* out) {
  U128 c = LoadBe(ctr0);
  const uint64_t lo = c.lo + i;
  if (lo < c.lo) ++c.hi;
  c.lo = lo;
  StoreBe(c, out);
}

absl::Status RunAes(const RunContext& ctx, BatchState& b) {
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
      nlanes <= ctx.options.depth3_max_blocks       ? aes::SboxCircuit::kDepth3
      : nlanes >= ctx.options.small_sbox_min_blocks ? aes::SboxCircuit::kDepth6
                                                    : aes::SboxCircuit::kDepth4;
  aes::SharedOptions aes_options;
  aes_options.chunk_lanes = ctx.options.chunk_lanes;
  aes_options.wave_lanes = ctx.options.wave_lanes;
  aes_options.verify_words = ctx.options.verify_words;
  return aes::EncryptShared(ctx.rep3, absl::MakeConstSpan(lanes.get(), nlanes),
                            circuit, aes_options, &ctx.workspace);
}

}  // namespace kmpc::engine
