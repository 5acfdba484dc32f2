// Run-time dispatch between the AVX-512 and AVX2 kernels.
#include "aes/aes.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace kmpc::aes {

#define KMPC_DECLARE_KERNELS(arch)                                          \
  namespace arch {                                                          \
  void BlocksToPlanesImpl(absl::Span<const uint8_t* const> blocks,          \
                          size_t wn, uint64_t* planes);                     \
  void PlanesToBlocksImpl(const uint64_t* planes, size_t wn,                \
                          absl::Span<uint8_t* const> blocks);               \
  absl::Status EncryptPlainImpl(absl::Span<const PlainLane> lanes,          \
                                SboxCircuit circuit, Workspace& ws);        \
  absl::Status EncryptSharedImpl(protocol::Rep3& ctx,                       \
                                 absl::Span<const SharedLane> lanes,        \
                                 SboxCircuit circuit,                       \
                                 const SharedOptions& options,              \
                                 Workspace& ws);                            \
  }
KMPC_DECLARE_KERNELS(avx512)
KMPC_DECLARE_KERNELS(avx2)
#undef KMPC_DECLARE_KERNELS

namespace {

std::atomic<bool> g_force_avx2{false};

bool UseAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl");
  return have && !g_force_avx2.load(std::memory_order_relaxed);
}

absl::Status CheckLanes(int nr) {
  if (nr != 10 && nr != 14) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported number of AES rounds: ", nr));
  }
  return absl::OkStatus();
}

}  // namespace

Workspace::~Workspace() = default;

uint64_t* Workspace::Get(size_t words) {
  if (size_ < words) {
    buf_.reset(new uint64_t[words]);
    size_ = words;
  }
  return buf_.get();
}

int AndsPerSbox(SboxCircuit c) {
  switch (c) {
    case SboxCircuit::kDepth3: return 51;
    case SboxCircuit::kDepth4: return 34;
    case SboxCircuit::kDepth6: return 32;
  }
  return 0;
}
int AndDepth(SboxCircuit c) {
  switch (c) {
    case SboxCircuit::kDepth3: return 3;
    case SboxCircuit::kDepth4: return 4;
    case SboxCircuit::kDepth6: return 6;
  }
  return 0;
}

const char* KernelName() { return UseAvx512() ? "avx512" : "avx2"; }
bool ForceAvx2(bool force) { return g_force_avx2.exchange(force); }

void BlocksToPlanes(absl::Span<const uint8_t* const> blocks, size_t wn,
                    uint64_t* planes) {
  if (UseAvx512()) {
    avx512::BlocksToPlanesImpl(blocks, wn, planes);
  } else {
    avx2::BlocksToPlanesImpl(blocks, wn, planes);
  }
}

void PlanesToBlocks(const uint64_t* planes, size_t wn,
                    absl::Span<uint8_t* const> blocks) {
  if (UseAvx512()) {
    avx512::PlanesToBlocksImpl(planes, wn, blocks);
  } else {
    avx2::PlanesToBlocksImpl(planes, wn, blocks);
  }
}

absl::Status EncryptPlain(absl::Span<const PlainLane> lanes,
                          SboxCircuit circuit) {
  for (const PlainLane& l : lanes) {
    if (absl::Status s = CheckLanes(l.nr); !s.ok()) return s;
  }
  if (lanes.empty()) return absl::OkStatus();
  Workspace ws;
  return UseAvx512() ? avx512::EncryptPlainImpl(lanes, circuit, ws)
                     : avx2::EncryptPlainImpl(lanes, circuit, ws);
}

absl::Status EncryptShared(protocol::Rep3& ctx,
                           absl::Span<const SharedLane> lanes,
                           SboxCircuit circuit, const SharedOptions& options,
                           Workspace* workspace) {
  for (const SharedLane& l : lanes) {
    if (absl::Status s = CheckLanes(l.nr); !s.ok()) return s;
  }
  if (options.chunk_lanes == 0 || options.chunk_lanes % 64 != 0) {
    return absl::InvalidArgumentError("chunk_lanes must be a multiple of 64");
  }
  if (lanes.empty()) return absl::OkStatus();
  Workspace local;
  Workspace& ws = workspace != nullptr ? *workspace : local;
  return UseAvx512()
             ? avx512::EncryptSharedImpl(ctx, lanes, circuit, options, ws)
             : avx2::EncryptSharedImpl(ctx, lanes, circuit, options, ws);
}

}  // namespace kmpc::aes
