#include "protocol/rep3.h"

#include <vector>

#include "protocol/gf128.h"
#include "share/replicated.h"

namespace kmpc::protocol {

absl::Status Rep3::And(absl::Span<const uint64_t> x0,
                       absl::Span<const uint64_t> x1,
                       absl::Span<const uint64_t> y0,
                       absl::Span<const uint64_t> y1, absl::Span<uint64_t> z0,
                       absl::Span<uint64_t> z1) {
  const size_t n = x0.size();
  if (x1.size() != n || y0.size() != n || y1.size() != n || z0.size() != n ||
      z1.size() != n) {
    return absl::InvalidArgumentError("And: operand sizes differ");
  }
  absl::Status st = AndUnlogged(x0.data(), x1.data(), y0.data(), y1.data(),
                                z0.data(), z1.data(), n);
  if (!st.ok()) return st;
  if (log_ != nullptr) {
    const size_t at =
        log_->AddAnd(x0.data(), x1.data(), y0.data(), y1.data(), z0.data(), n);
    log_->SetAndZ1(at, z1.data(), n);
  }
  return absl::OkStatus();
}

absl::Status Rep3::AndUnlogged(const uint64_t* x0, const uint64_t* x1,
                               const uint64_t* y0, const uint64_t* y1,
                               uint64_t* z0, uint64_t* z1, size_t n) {
  // t_i straight into z0, the reply into z1 (no scratch: Verify calls this
  // for millions of triple words).
  prss_.ZeroShare(reinterpret_cast<uint8_t*>(z0), n * 8);
  for (size_t j = 0; j < n; ++j) {
    z0[j] ^= (x0[j] & y0[j]) ^ (x0[j] & y1[j]) ^ (x1[j] & y0[j]);
  }
  return channel_.Exchange(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(z0), n * 8),
      absl::MakeSpan(reinterpret_cast<uint8_t*>(z1), n * 8));
}

absl::Status Rep3::GfMul(absl::Span<const uint8_t> x0,
                         absl::Span<const uint8_t> x1,
                         absl::Span<const uint8_t> y0,
                         absl::Span<const uint8_t> y1, absl::Span<uint8_t> z0,
                         absl::Span<uint8_t> z1) {
  const size_t nb = x0.size();
  if (nb % 16 != 0 || x1.size() != nb || y0.size() != nb ||
      y1.size() != nb || z0.size() != nb || z1.size() != nb) {
    return absl::InvalidArgumentError("GfMul: operand sizes differ");
  }
  std::vector<uint8_t> t(nb);
  prss_.ZeroShare(t.data(), nb);
  // x_i*y_i ^ x_i*y_{i+1} ^ x_{i+1}*y_i = x_i*(y_i ^ y_{i+1}) ^ x_{i+1}*y_i
  protocol::GfCrossTerms(x0.data(), x1.data(), y0.data(), y1.data(), t.data(),
                         nb / 16);
  absl::Status st = channel_.Exchange(t, z1);
  if (st.ok()) std::copy(t.begin(), t.end(), z0.begin());
  if (st.ok() && log_ != nullptr) {
    log_->AddGf(x0.data(), x1.data(), y0.data(), y1.data(), z0.data(),
                z1.data(), nb / 16);
  }
  share::Wipe(t);
  return st;
}

void Rep3::GfMulPublic(absl::Span<const uint8_t> c,
                       absl::Span<const uint8_t> x0,
                       absl::Span<const uint8_t> x1, absl::Span<uint8_t> z0,
                       absl::Span<uint8_t> z1) {
  const size_t nb = x0.size();
  const bool per_element = c.size() == nb;
  for (size_t j = 0; j + 16 <= nb; j += 16) {
    const uint8_t* cj = c.data() + (per_element ? j : 0);
    protocol::GfMul(x0.data() + j, cj, z0.data() + j);
    protocol::GfMul(x1.data() + j, cj, z1.data() + j);
  }
}

void Rep3::GfSquare(absl::Span<const uint8_t> x0, absl::Span<const uint8_t> x1,
                    absl::Span<uint8_t> z0, absl::Span<uint8_t> z1) {
  for (size_t j = 0; j + 16 <= x0.size(); j += 16) {
    protocol::GfMul(x0.data() + j, x0.data() + j, z0.data() + j);
    protocol::GfMul(x1.data() + j, x1.data() + j, z1.data() + j);
  }
}

absl::Status Rep3::Reveal(absl::Span<const uint8_t> c0,
                          absl::Span<const uint8_t> c1,
                          absl::Span<uint8_t> out) {
  const size_t n = c0.size();
  if (c1.size() != n || out.size() != n) {
    return absl::InvalidArgumentError("Reveal: operand sizes differ");
  }
  // Party i-1 lacks s_{i+1} = our component 1; we lack s_{i+2}.
  std::vector<uint8_t> missing(n);
  absl::Status st = channel_.Exchange(c1, absl::MakeSpan(missing));
  if (!st.ok()) return st;
  for (size_t j = 0; j < n; ++j) out[j] = c0[j] ^ c1[j] ^ missing[j];
  if (log_ != nullptr) log_->AddOpened(out);
  return absl::OkStatus();
}

}  // namespace kmpc::protocol
