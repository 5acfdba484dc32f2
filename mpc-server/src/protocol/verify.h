// Security with abort against one malicious party for the replicated
// 3-party protocol (rep3.h): every AND and GF(2^128) multiplication of a
// batch is logged and verified, and every value opened among the servers
// is compared, before anything that depends on them is opened or released.
//
// AND gates (GF(2)): multiplication triples generated with the semi-honest
// AND and checked by cut-and-choose and bucketing, then one triple per gate
// (Furukawa, Lindell, Nof, Weinstein, "High-throughput secure three-party
// computation for malicious adversaries and an honest majority",
// EUROCRYPT 2017, Protocols 2.11 (triple verification), 2.18 (triples with
// cut-and-choose and bucketing) and 2.24 (circuit verification); Araki et
// al., IEEE S&P 2017, section 2). In replicated sharing a deviating party
// can only add a (known) error to the products it computes and to the
// shares it sends (Genkin et al., STOC 2014, additive attacks), so a
// triple is (a, b, a&b ^ E) and a gate's output x&y ^ D. Checking a pair
// of them opens rho = x^a, sigma = y^b (independent of x and y: a and b
// are uniform to the adversary) and tests
//   v = z ^ c ^ sigma&a ^ rho&b ^ rho&sigma = D ^ E
// for zero. Items are runs of 1 to 16 64-lane words, not bits: a bucket
// passes only if all its items carry the same error pattern, so the
// cut-and-choose game of Furukawa et al. (section 2.5) holds with N = the
// number of gate items (BucketParams below picks B and C for 2^-40).
//
// GF(2^128) products: one semi-honest triple per product and a public
// random challenge t drawn after everything is committed (SPDZ's
// sacrifice, Damgard et al., CRYPTO 2012, section 3, in its large-field
// form): rho = t*x ^ a, sigma = y ^ b, and
//   v = t*z ^ c ^ sigma*a ^ rho*b ^ rho*sigma = t*D ^ E,
// zero for D, E != 0 with probability 2^-128.
//
// Zero test without opening: party i holds (v_i, v_{i+1}) and sends
// H(v_i ^ v_{i+1}) to party i-1, which compares it with H(v_{i-1})
// ("compare view", Araki et al., S&P 2017, section 2.3); the two honest
// parties together hold all three shares, so one of them sees any nonzero
// v. The same message carries a hash of every value opened among the
// servers in the batch, which catches a party that sent different shares
// of an opening to different parties (or sent its part late, biased by
// the others': the honest copy of that share differs).
//
// On a one-way ring the honest party that receives the cheater's messages
// can always be fooled; the other honest party detects and fails the
// batch, and the KDC requires the same result from all three (kdc-plugin
// batch_step.cc), so no value computed from a cheated product reaches it.
#ifndef KMPC_PROTOCOL_VERIFY_H_
#define KMPC_PROTOCOL_VERIFY_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace kmpc::protocol {

class Rep3;

// The payload (absl::Status::SetPayload) marking a DATA_LOSS as a detected
// deviation rather than a broken ring message.
inline constexpr char kIntegrityPayload[] = "kmpc.v1/integrity-check-failed";
bool IsIntegrityFailure(const absl::Status& st);

// Streaming SHA-256 (OpenSSL EVP).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(absl::Span<const uint8_t> b);
  void Update(const uint64_t* w, size_t n) {
    Update(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(w), 8 * n));
  }
  absl::Status Final(std::array<uint8_t, 32>& out);
  // Starts a new digest.
  void Reset();

 private:
  EVP_MD_CTX* ctx_;
  bool ok_;
};

// Bucket size B and opened triples C for N gate words: the smallest
// N*B + C with max_j binom(N, j) / binom(N*B + C, j*B) <= 2^-40 (the
// adversary wins only if its bad triple words fill whole buckets and none
// is opened).
struct BucketParams {
  int b = 0;
  size_t c = 0;
};
BucketParams ChooseBuckets(size_t n_words);

// Every product and opening of a batch, in order, by one party.
class MulLog {
 public:
  MulLog() = default;
  ~MulLog();
  MulLog(const MulLog&) = delete;
  MulLog& operator=(const MulLog&) = delete;

  // Appends n AND words (x0, x1, y0, y1, z0); returns where their z1 goes
  // (SetAndZ1 once the layer's reply is in).
  size_t AddAnd(const uint64_t* x0, const uint64_t* x1, const uint64_t* y0,
                const uint64_t* y1, const uint64_t* z0, size_t n);
  void SetAndZ1(size_t at, const uint64_t* z1, size_t n);
  // n GF(2^128) products, 16 bytes each.
  void AddGf(const uint8_t* x0, const uint8_t* x1, const uint8_t* y0,
             const uint8_t* y1, const uint8_t* z0, const uint8_t* z1,
             size_t n);
  void AddOpened(absl::Span<const uint8_t> v);

  size_t and_words() const { return and_[0].size(); }
  size_t gf_products() const { return gf_[0].size() / 16; }
  bool empty() const { return and_words() == 0 && gf_products() == 0; }
  // Wipes and empties everything (the opened-values hash restarts).
  void Clear();

  // Bytes of buffer capacity the log and the Verifier hold (after Clear:
  // what they keep for the next batch).
  size_t retained_bytes() const;
  // The most retained_bytes() kept from one batch to the next (per
  // worker: each has its own Engine and log). Measured: one login's batch
  // (DECRYPT of a TGT, ENCRYPT, CHECKSUM, VERIFY_CHECKSUM; ~7,600 AND
  // words, B = 4) leaves ~6 MB; an AES-128 ENCRYPT of 2,000 blocks ~80 MB,
  // of 20,000 blocks ~300 MB (capacities). So a busy KDC's batches (up
  // to ~64 logins, ~45 MB) reuse their buffers batch after batch, and a
  // large batch's are not kept by the worker for good. (16 MiB made the
  // malicious login storm reallocate every batch: half the peak in one
  // A/B run on the 2-core bench VM.)
  static constexpr size_t kMaxRetainedBytes = size_t{64} << 20;  // 64 MiB
  // Called after a batch (Clear first): if retained_bytes() exceeds
  // kMaxRetainedBytes, wipes every buffer over its whole capacity (they
  // held shares of wire values) and frees it.
  void ReleaseExcess();

 private:
  friend class Verifier;
  // Wipes every buffer over its whole capacity and frees it.
  void FreeAll();
  // x0, x1, y0, y1, z0, z1
  std::array<std::vector<uint64_t>, 6> and_;
  std::array<std::vector<uint8_t>, 6> gf_;
  Sha256 opened_;
  // Verifier's buffers, kept for the next batch: triples (a0, a1, b0, b1,
  // c0, c1), openings (o0, o1, open), the permutation and its randomness.
  std::array<std::vector<uint64_t>, 6> tri_;
  std::array<std::vector<uint64_t>, 3> open_;
  std::vector<uint32_t> perm_;
  std::vector<uint64_t> rnd_;
};

// Runs the checks of a MulLog among the three parties (all call Verify at
// the same point). Rounds: 1 (AND triples) + 1 (GF triples, if any) + 1
// (coins) + 1 (openings) + 1 (compare). OK: every logged product is right
// and every opening consistent, except with probability 2^-40.
// DATA_LOSS: a party deviated (the batch must fail and the ring be
// re-established); a channel error as is. Clears the log either way.
class Verifier {
 public:
  static absl::Status Verify(Rep3& ctx, MulLog& log);
  // Compares the opened-values hash only (one round): for openings made
  // after the last Verify (the tag checks' reveal).
  static absl::Status CompareOpened(Rep3& ctx, MulLog& log);
};

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_VERIFY_H_
