// MulLog (mul_log.h): appending products and openings, packing the live
// lanes of partly live words before a check, and wiping the buffers
// between waves (Rewind) and batches (Clear).
#include "protocol/mul_log.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "share/replicated.h"

namespace kmpc::protocol {

namespace {

using wiping::Reserve;
using wiping::WipeAndFree;

template <class V, size_t N>
size_t CapacityBytes(const std::array<V, N>& vs) {
  size_t b = 0;
  for (const auto& v : vs) b += v.capacity() * sizeof(typename V::value_type);
  return b;
}

}  // namespace

MulLog::~MulLog() {
  Clear();
  FreeAll();
}

void MulLog::FreeAll() {
  for (auto& v : and_) WipeAndFree(v);
  and_n_ = 0;
  for (auto& v : gf_) WipeAndFree(v);
  for (auto& v : fold_) WipeAndFree(v);
  for (auto& v : gf_fold_) WipeAndFree(v);
  weights_.reset();  // public (from a revealed coin)
}

size_t MulLog::retained_bytes() const {
  return CapacityBytes(and_) + CapacityBytes(gf_) + CapacityBytes(fold_) +
         CapacityBytes(gf_fold_) +
         (weights_ != nullptr ? sizeof(dzkp::AndWeights) +
                                    weights_->nu.capacity() * sizeof(uint64_t)
                              : 0);
}

void MulLog::ReleaseExcess() {
  if (retained_bytes() > kMaxRetainedBytes) FreeAll();
}

size_t MulLog::AppendAnd(size_t n, int live, uint64_t* out[5]) {
  const size_t at = and_n_;
  if (live < 64 && n > 0) {
    auto& last = partial_;
    if (!last.empty() && last.back()[0] + last.back()[1] == at &&
        last.back()[2] == static_cast<size_t>(live)) {
      last.back()[1] += n;
    } else {
      last.push_back({at, n, static_cast<size_t>(live)});
    }
  }
  // The buffers' size is their capacity (and_n_ the words in use), so
  // that an append is no call to resize (one per AES tile and component).
  if (at + n > and_[0].size()) {
    for (auto& v : and_) {
      v.resize(at);  // Reserve copies the words in use only
      Reserve(v, at + n);
      v.resize(v.capacity());
    }
  }
  for (int k = 0; k < 5; ++k) out[k] = and_[k].data() + at;
  and_n_ = at + n;
  return at;
}

size_t MulLog::AddAnd(const uint64_t* x0, const uint64_t* x1,
                      const uint64_t* y0, const uint64_t* y1,
                      const uint64_t* z0, size_t n, int live) {
  uint64_t* out[5];
  const size_t at = AppendAnd(n, live, out);
  const uint64_t* src[5] = {x0, x1, y0, y1, z0};
  for (int k = 0; k < 5; ++k) std::memcpy(out[k], src[k], 8 * n);
  return at;
}

void MulLog::SetAndZ1(size_t at, const uint64_t* z1, size_t n) {
  std::memcpy(and_[5].data() + at, z1, 8 * n);
}

void MulLog::AddGf(const uint8_t* x0, const uint8_t* x1, const uint8_t* y0,
                   const uint8_t* y1, const uint8_t* z0, const uint8_t* z1,
                   size_t n) {
  const uint8_t* src[6] = {x0, x1, y0, y1, z0, z1};
  for (auto& v : gf_) Reserve(v, v.size() + 16 * n);
  for (int k = 0; k < 6; ++k) gf_[k].insert(gf_[k].end(), src[k], src[k] + 16 * n);
}

void MulLog::AddOpened(absl::Span<const uint8_t> v) {
  opened_.Update(v);
  opened_any_ = true;
}

absl::Status MulLog::Append(MulLog& other) {
  if (other.opened_any_)
    return absl::FailedPreconditionError("MulLog::Append: the other log opened values");
  const size_t n = other.and_n_;
  if (n > 0) {
    const auto& a = other.and_;
    const size_t at = AddAnd(a[0].data(), a[1].data(), a[2].data(), a[3].data(), a[4].data(), n);
    SetAndZ1(at, a[5].data(), n);
    for (const auto& [first, count, live] : other.partial_)
      partial_.push_back({at + first, count, live});
  }
  const auto& g = other.gf_;
  AddGf(g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(), g[5].data(),
        other.gf_products());
  if (other.deviated_) deviated_ = true;
  other.Clear();
  return absl::OkStatus();
}

namespace {

// Appends bits to a word array in place (writing never overtakes reading).
class BitPacker {
 public:
  explicit BitPacker(uint64_t* out) : out_(out) {}
  // The low k bits of v, 1 <= k <= 64.
  void Put(uint64_t v, int k) {
    if (k < 64) v &= (uint64_t{1} << k) - 1;
    acc_ |= v << bits_;
    if (bits_ + k >= 64) {
      out_[n_++] = acc_;
      acc_ = bits_ == 0 ? 0 : v >> (64 - bits_);
      bits_ = bits_ + k - 64;
    } else {
      bits_ += k;
    }
  }
  // Words written, the last one padded with zero lanes (0 & 0 = 0).
  size_t Finish() {
    if (bits_ > 0) out_[n_++] = acc_;
    acc_ = 0;
    bits_ = 0;
    return n_;
  }

 private:
  uint64_t* out_;
  uint64_t acc_ = 0;
  int bits_ = 0;
  size_t n_ = 0;
};

}  // namespace

void MulLog::PackLiveLanes() {
  if (partial_.empty()) return;
  const size_t n = and_n_;
  // The check is over the set of logged words, in any order the three
  // parties share: the full words fill [0, F) (those at or past F move
  // into the partial words' places below F), the live lanes of the partial
  // words, packed, follow.
  size_t partial_words = 0, live_bits = 0;
  for (const auto& [first, count, live] : partial_) {
    partial_words += count;
    live_bits += count * live;
  }
  const size_t full = n - partial_words;
  std::vector<size_t> holes, sources;  // below F partial, at or past F full
  size_t at = full;
  for (const auto& [first, count, live] : partial_) {
    for (size_t i = first; i < std::min(first + count, full); ++i) holes.push_back(i);
    for (; at < first; ++at) sources.push_back(at);
    at = std::max(at, first + count);
  }
  for (; at < n; ++at) sources.push_back(at);
  const size_t packed_words = (live_bits + 63) / 64;
  dzkp::WordVector packed(packed_words);
  for (auto& v : and_) {
    BitPacker out(packed.data());
    for (const auto& [first, count, live] : partial_) {
      for (size_t i = first; i < first + count; ++i) out.Put(v[i], static_cast<int>(live));
    }
    out.Finish();
    for (size_t k = 0; k < holes.size(); ++k) v[holes[k]] = v[sources[k]];
    std::copy(packed.begin(), packed.end(), v.begin() + full);
    share::Wipe(v.data() + full + packed_words, 8 * (n - full - packed_words));
  }
  and_n_ = full + packed_words;
  share::Wipe(packed.data(), 8 * packed.size());
  partial_.clear();
}

void MulLog::Rewind() {
  partial_.clear();
  if (!and_wiped_) and_dirty_ = std::max(and_dirty_, and_n_);
  and_wiped_ = false;
  and_n_ = 0;
  for (auto& v : gf_) {
    share::Wipe(v.data(), v.size());
    v.clear();
  }
  opened_.Reset();
  opened_any_ = false;
}

void MulLog::Clear() {
  Rewind();
  deviated_ = false;
  for (auto& v : and_) share::Wipe(v.data(), 8 * std::min(and_dirty_, v.capacity()));
  for (auto& v : fold_) {
    share::Wipe(v.data(), sizeof(dzkp::F64) * std::min(fold_dirty_, v.capacity()));
    v.clear();
  }
  for (auto& v : gf_fold_) {  // small: wiped over their capacity
    v.resize(v.capacity());
    share::Wipe(v.data(), sizeof(dzkp::Fe) * v.size());
    v.clear();
  }
  and_dirty_ = 0;
  fold_dirty_ = 0;
}

}  // namespace kmpc::protocol
