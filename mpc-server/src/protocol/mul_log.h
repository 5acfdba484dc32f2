// The multiplication log of the malicious check (verify.h): every AND word
// and GF(2^128) product a party computes in a batch, with its operands'
// shares, and the hash of every value it opened, in order; the Verifier
// checks them and keeps its vectors here from one batch to the next. Every
// buffer holds shares of wire values: each is wiped before it is freed,
// reallocated or reused for another batch (Clear), and together they keep
// at most kMaxRetainedBytes from one batch to the next (ReleaseExcess).
#ifndef KMPC_PROTOCOL_MUL_LOG_H_
#define KMPC_PROTOCOL_MUL_LOG_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "protocol/dzkp.h"
#include "protocol/sha256.h"
#include "share/replicated.h"

namespace kmpc::protocol {

// Vectors of shares that grow or go without leaving a copy behind in freed
// memory (the log's buffers, the Verifier's vectors).
namespace wiping {

// Wipes v over its whole capacity (the elements past size() may hold an
// earlier, larger use's data) and frees it.
template <class V>
void WipeAndFree(V& v) {
  v.resize(v.capacity());
  share::Wipe(v.data(), v.size() * sizeof(typename V::value_type));
  V().swap(v);
}

// Makes room for n elements in v. A reallocation (capacity doubled, as
// insert would) copies into a fresh buffer and wipes the old one, so the
// shares it held are not left behind in freed memory.
template <class V>
void Reserve(V& v, size_t n) {
  if (n <= v.capacity()) return;
  V bigger;
  bigger.reserve(std::max(n, 2 * v.capacity()));
  bigger.assign(v.begin(), v.end());
  WipeAndFree(v);
  v.swap(bigger);
}

}  // namespace wiping

// Every product and opening of a batch, in order, by one party.
class MulLog {
 public:
  MulLog() = default;
  ~MulLog();
  MulLog(const MulLog&) = delete;
  MulLog& operator=(const MulLog&) = delete;

  // Appends n AND words (x0, x1, y0, y1, z0); returns where their z1 goes
  // (SetAndZ1 once the layer's reply is in). Only lanes 0 .. live-1 of
  // each word are checked: the caller guarantees that the others never
  // reach an output (bitsliced lanes are independent, and lanes without a
  // block are dropped).
  size_t AddAnd(const uint64_t* x0, const uint64_t* x1, const uint64_t* y0,
                const uint64_t* y1, const uint64_t* z0, size_t n, int live = 64);
  // AddAnd without the copy: room for n words whose x0, x1, y0, y1, z0 the
  // caller writes at out[0 .. 5) before the next call.
  size_t AppendAnd(size_t n, int live, uint64_t* out[5]);
  void SetAndZ1(size_t at, const uint64_t* z1, size_t n);
  // Where the z1 words of AppendAnd's words from `at` go (the caller
  // receives them there instead of calling SetAndZ1). Valid until the next
  // append.
  uint64_t* AndZ1At(size_t at) { return and_[5].data() + at; }
  // n GF(2^128) products, 16 bytes each.
  void AddGf(const uint8_t* x0, const uint8_t* x1, const uint8_t* y0,
             const uint8_t* y1, const uint8_t* z0, const uint8_t* z1,
             size_t n);
  void AddOpened(absl::Span<const uint8_t> v);
  // Moves other's AND words and GF(2^128) products after this log's, in
  // their order (a rider's log, engine/ride.h: the check then covers both
  // protocols' products at once), and clears other. FAILED_PRECONDITION,
  // nothing moved, if other opened a value since its last check: its
  // openings' hash is compared by its own protocol, not carried over.
  absl::Status Append(MulLog& other);
  // This party saw a deviation outside the log (batch_agreement.cc CheckForwarded:
  // a forwarded message whose tag failed): its next compare fails whatever
  // its successor's hash says (the cheater knows every value this party
  // opened, so it could send back this party's own hash). Until Clear.
  void MarkDeviated() { deviated_ = true; }
  bool deviated() const { return deviated_; }
  // The hash of the values opened since the last Rewind, as Compare would
  // send it now; opening may go on (cts/masked_eval.cc's per-message view).
  absl::Status OpenedDigest(std::array<uint8_t, 32>& out) { return opened_.Peek(out); }

  size_t and_words() const { return and_n_; }
  size_t gf_products() const { return gf_[0].size() / 16; }
  bool empty() const { return and_words() == 0 && gf_products() == 0; }
  // Wipes and empties everything (the opened-values hash restarts); the
  // engine calls it at the end of every batch.
  void Clear();
  // Empties the log for the next wave of the same batch (the opened-values
  // hash restarts); the AND words and the check's vectors stay in the
  // buffers until Clear wipes them.
  void Rewind();

  // Bytes of buffer capacity the log and the Verifier hold (after Clear:
  // what they keep for the next batch).
  size_t retained_bytes() const;
  // The most retained_bytes() kept from one batch to the next (per
  // worker: each has its own Engine and log). The log holds 48 bytes per
  // AND word and the compressed vectors 64 / G * 32 (four vectors of one
  // 8-byte element per 64 lanes of a group of G words): a busy KDC's
  // batches (up to ~100 logins, ~350,000 words, G = 64) keep ~20 MB and
  // reuse it batch after batch, and a large batch's (a wave of 8,192
  // AES-128 blocks: ~700,000 words, ~35 MB) are not kept for good.
  // EngineOptions::verify_words' default: the AES kernel verifies at the
  // first AND-layer boundary where the log holds this many words (48 bytes
  // each: ~3 MB per party, and the check's vectors ~2 MB more), so that
  // the check reads the words from the cache
  // while the three parties of a 2-core host share a 32 MB L3; a whole
  // wave's log (700,000 words for 8,192 AES-128 blocks, ~33 MB per party)
  // was read from memory, and the check cost ~30% more per word.
  static constexpr size_t kVerifyWords = 65536;
  static constexpr size_t kMaxRetainedBytes = size_t{64} << 20;  // 64 MiB
  // Called after a batch (Clear first): if retained_bytes() exceeds
  // kMaxRetainedBytes, wipes every buffer over its whole capacity (they
  // held shares of wire values) and frees it.
  void ReleaseExcess();

 private:
  friend class Verifier;
  // Wipes every buffer over its whole capacity and frees it.
  void FreeAll();
  // Packs the live lanes of the words logged with live < 64 (in order,
  // as one bit stream per component), in place: a batch of b < 64
  // blocks is checked on b/64 of its words. The z = x & y relation holds
  // lane by lane, so it holds on the packed words.
  void PackLiveLanes();
  // x0, x1, y0, y1, z0, z1: words [0, and_n_) in use; each buffer's size
  // is its capacity.
  std::array<dzkp::WordVector, 6> and_;
  size_t and_n_ = 0;
  bool deviated_ = false;
  // Runs of words with fewer than 64 live lanes: (first word, words, live).
  std::vector<std::array<size_t, 3>> partial_;
  // Elements of and_ / fold_ written since the last Clear and not wiped
  // since (a completed first compression wipes its words of and_).
  size_t and_dirty_ = 0, fold_dirty_ = 0;
  // Verify's first compression wiped and_'s words [0, and_n_) (Rewind
  // then leaves and_dirty_ as it is).
  bool and_wiped_ = false;
  std::array<std::vector<uint8_t>, 6> gf_;
  Sha256 opened_;
  bool opened_any_ = false;  // AddOpened since the last Rewind
  // Verifier's buffers, kept for the next batch: the compressed vectors
  // (f0, f1, g0, g1) of the AND proof (GF(2^64)) and of the GF(2^128)
  // products' proof, and the first compression's weights.
  std::array<dzkp::F64Vector, 4> fold_;
  std::array<dzkp::FeVector, 4> gf_fold_;
  std::unique_ptr<dzkp::AndWeights> weights_;
};

}  // namespace kmpc::protocol

#endif  // KMPC_PROTOCOL_MUL_LOG_H_
