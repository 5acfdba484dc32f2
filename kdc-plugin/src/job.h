// Jobs of the kdcmpc module's C++ core. An absl::Status becomes a
// krb5_error_code in one place (KrbErrorFromStatus, kdcmpc_c.h), by the
// table every side of kmpc classifies statuses with (proto/status_class.h:
// also the metric's cause label and whether the cluster, not the job,
// failed).
//
// Status codes inside the core carry a fixed meaning, so that the boundary
// mapping is a table and not a guess:
//
//   kUnavailable        the MPC cluster cannot serve the job (a party is
//                       unreachable or refused the batch, a party answered
//                       inconsistently or a share's two copies disagreed,
//                       the servers hold inconsistent shares of the key:
//                       JOB_KEY_INCONSISTENT; a detected deviation)
//                                              -> KRB5KDC_ERR_SVC_UNAVAILABLE
//   kDeadlineExceeded   the batch's deadline passed        -> the same
//   kAborted            a server's answer does not fit the batch (wire
//                       version, party order, results out of order or
//                       disagreeing)                        -> the same
//   kResourceExhausted  the module's queue is full          -> the same
//   kCancelled          the call was cancelled (the module shutting down,
//                       a plan abandoned)                    -> the same
//   kOutOfRange         an aes*-cts job longer than real exchanges need
//                       (contract.h CtsLengthProblem), refused before it
//                       is queued                           -> the same
//   kNotFound           no shares exist for the key id (JOB_UNKNOWN_KEY)
//                                                      -> KRB5_KT_NOTFOUND
//   kDataLoss           the tag or checksum did not verify, or a ciphertext
//                       cannot be one of these enctypes at all
//                                              -> KRB5KRB_AP_ERR_BAD_INTEGRITY
//   kUnauthenticated    withheld: the job's gate (release_if_ok) failed
//                                                             -> the same
//   kPermissionDenied   the key id was dealt for the other cipher than the
//                       job's enctype (JOB_WRONG_CIPHER)     -> KRB5_BAD_ENCTYPE
//   kInvalidArgument,   a malformed job (JOB_MALFORMED), a job the plan
//   kFailedPrecondition does not allow                          -> EINVAL
//   anything else       an internal failure              -> KRB5_CRYPTO_INTERNAL
#ifndef KMPC_KDC_PLUGIN_JOB_H_
#define KMPC_KDC_PLUGIN_JOB_H_

#include <openssl/crypto.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "contract.h"
#include "kmpc.pb.h"

namespace kmpc::kdc {

// An allocator that wipes memory before handing it back: plaintexts and
// keystreams (keystream XOR ciphertext = a plaintext ticket) live only in
// SecureBytes, including every buffer a vector outgrows.
template <typename T>
struct ZeroizingAllocator {
  using value_type = T;
  ZeroizingAllocator() = default;
  template <typename U>
  ZeroizingAllocator(const ZeroizingAllocator<U>&) {}  // NOLINT
  T* allocate(size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, size_t n) {
    OPENSSL_cleanse(p, n * sizeof(T));
    std::allocator<T>().deallocate(p, n);
  }
  template <typename U>
  bool operator==(const ZeroizingAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const ZeroizingAllocator<U>&) const { return false; }
};
using SecureBytes = std::vector<uint8_t, ZeroizingAllocator<uint8_t>>;

// Wipes a std::string in place (protobuf fields holding shares).
inline void Cleanse(std::string* s) {
  if (!s->empty()) OPENSSL_cleanse(s->data(), s->size());
  s->clear();
}

// A job as the KDC submits it. `type` is the contract's job type
// (kmpc.proto JobType; module.cc maps the krb5 patch's
// krb5_kdcmpc_job_type to it); FINALIZE is never submitted.
struct Job {
  kmpc::v1::JobType type = kmpc::v1::JOB_TYPE_UNSPECIFIED;
  // The enctype the KDC uses the key as (krb5_kdcmpc_job.enctype, mapped by
  // module.cc): sent as kmpc.proto Job.cipher, so the servers compute only
  // with a key dealt for it (else JOB_WRONG_CIPHER). Required.
  kmpc::v1::Cipher cipher = kmpc::v1::CIPHER_UNSPECIFIED;
  std::string key_id;    // contract::kKeyIdSize bytes
  uint32_t usage = 0;
  // ENCRYPT: the plaintext; CHECKSUM, VERIFY_CHECKSUM: the message (secret:
  // a ticket signature covers the EncTicketPart, session key included; it
  // leaves the KDC only as shares, batch_step.cc); DECRYPT: ctr0 || C || T.
  SecureBytes input;
  // VERIFY_CHECKSUM: ctr0 || tag; a verification PAD: its ctr0 (16 bytes).
  std::string checksum;
  // PAD (prepared by the planner for a plan's CHECKSUM or VERIFY item,
  // never submitted by the KDC): the longest message the pad may sign.
  uint32_t pad_length = 0;
  // aes*-cts DECRYPT / ENCRYPT under a FAST key (kmpc.proto Job.cts_key):
  // the KDC's half of KRB-FX-CF2, PRF+ of a key the KDC holds (secret: it
  // leaves the KDC only as fresh shares, before an ENCRYPT's plaintext).
  kmpc::v1::CtsKey cts_key = kmpc::v1::CTS_KEY_DEALT;
  SecureBytes cf2_half;
  // aes*-cts ENCRYPT under usage 3 and the dealt key (kmpc.proto
  // Job.splice_length, splice_offset): the message D (the AS-REQ as
  // received) whose usage-56 checksum the servers XOR into the plaintext's
  // bytes [splice_offset, +12) before encrypting it, followed by its HMAC
  // inner hash's SHA-1 padding (contract::SplicePadding: the servers'
  // program follows D's block count). D goes as shares after the
  // plaintext's, like it; the checksum is never released. Empty: none.
  SecureBytes splice;
  uint32_t splice_offset = 0;
  // aes*-cts ENCRYPT under usage 2, a ticket signed in the cluster
  // (kdcmpc_plugin.h submit_ticket, kmpc.proto Job.sign_pad): `splice`
  // holds the ticket's PAC (both signatures zeroed) and its HMAC inner
  // padding, splice_offset the server signature's place in the ticket; the
  // KDC signature is made under a signing PAD of this key (the krbtgt's),
  // queued with the job in one group (dispatcher.cc Submit). Empty: none.
  std::string sign_key_id;
  kmpc::v1::Cipher sign_cipher = kmpc::v1::CIPHER_UNSPECIFIED;
};

// A job's public figures, from its shape (ShapeOf) computed once, when
// the job is checked (CheckJob) or made (PreparedJob, a gate's copy): what
// the batch limits, the deep queue, the batch's bound on aes*-cts programs
// and the gate's proven shapes ask of it (gate_book.h).
struct JobFigures {
  uint64_t cost = 0;   // contract::JobCost
  uint64_t depth = 0;  // contract::CtsDepthBound: 0 but for aes*-cts jobs
  // An aes*-cts job: `program` is the servers' key of its program
  // (contract::CtsShapeOf).
  bool cts = false;
  contract::CtsShape program{};
};
JobFigures FiguresOf(const Job& job);

// A job from Submit to its Result: queued by the dispatcher, then owned by
// the BatchStep that carries it (moved, never copied).
struct PendingJob {
  uint64_t token = 0;  // the caller's name for it in its Result
  Job job;
  JobFigures figures;  // of `job`, set where the job is made
  uint64_t blocks = 0;  // figures.cost; 0 for a finalize_only or sign job
  absl::Time enqueued;
  // Queued in a unit (its group, or itself) with an aes*-cts job: behind a
  // Run in flight it waits up to BatcherOptions::cts_window, not window.
  bool cts_unit = false;
  // A job the planner prepared for a later plan item (planner.h): an
  // ENCRYPT of a length only, whose keystream is held for the item's
  // ENCRYPT, or a PAD; no caller, nothing is delivered.
  bool prepared = false;
  // The group of a planned exchange's first Run (its given jobs and the
  // prepared ones, queued together: the dispatcher never cuts a group);
  // 0 for none.
  uint64_t group = 0;
  // An ENCRYPT whose keystream a prepared ENCRYPT of an earlier Run gave:
  // `output` holds ctr0 || C already, only FINALIZE remains, under the
  // ENCRYPT state (run_batch_id, run_job_id) the servers keep.
  bool finalize_only = false;
  // A CHECKSUM that a pad of an earlier Run signs (prepared.h): `output`
  // holds the pad's ctr0; a Sign request (kmpc.proto SignItem) under the
  // pad (run_batch_id, run_job_id) gives the tag. A VERIFY_CHECKSUM under
  // a verification pad likewise: a verify item (SignItem.verify).
  bool sign = false;
  // finalize_only: the ENCRYPT state; sign: the pad.
  std::string run_batch_id;
  uint64_t run_job_id = 0;
  // sign: a second pad under the same key (planner.h, chained signatures)
  // that signs this signature (ctr0 || tag) in the same Sign
  // item (kmpc.proto SignItem.chain); empty chain_batch_id: none.
  std::string chain_batch_id;
  uint64_t chain_job_id = 0;
  std::string chain_ctr0;
  // A CHECKSUM completed when submitted, from a chained answer kept for
  // its message (planner.h): `output` holds ctr0 || tag, no request.
  bool chained_done = false;
  // The signing PAD a ticket ENCRYPT of its group spends (Job.sign_key_id):
  // prepared, nothing held or delivered (its result is a ctr0 only).
  bool ticket_pad = false;
  // A prepared signing PAD linked to its group's prepared ticket ENCRYPT
  // (kmpc.proto Job.pad_after) when both go in one Run, at that ticket's
  // ctr0 + kLinkedPadOffset + pad_slot (Job.pad_slot, contract::kPadSlots).
  bool link_pad = false;
  uint32_t pad_slot = 0;
  // A job of a planned exchange (planner.h): its id and plan item; 0 / -1
  // for none. `gate`: the plan's gate DECRYPT. `gated`: an ENCRYPT,
  // CHECKSUM or verification PAD of the exchange's first Run, released
  // only if the gate decrypts (kmpc.proto Job.release_if_ok).
  uint64_t exchange_id = 0;
  int item = -1;
  bool gate = false;
  bool gated = false;
  // A copy of an exchange's gate DECRYPT sent again, with the jobs held
  // back until the gate verified (planner.h, proven shapes), as their gate
  // in that later Run: the servers compute a user key's AS reply only when
  // released on its timestamp or challenge in the same Run (kmpc.proto
  // KeyKind). Also `prepared` (nothing is delivered for it), item -1.
  bool regate = false;
  // sign with a chain: the plan item (SIG_KDC) the chained answer is for.
  int chain_item = -1;
  // The value under construction, wiped when it goes: ENCRYPT ctr0 || C ||
  // T (T from FINALIZE), DECRYPT the plaintext, CHECKSUM ctr0 || tag, a
  // prepared ENCRYPT its keystream.
  SecureBytes output;
  bool done = false;  // completed (guarded by the BatchStep's mutex)
};

// A FIFO of pending jobs in one vector. std::deque keeps 512 bytes per
// node, i.e. one PendingJob per node: an allocation and a free per job
// queued. Here a popped job is moved from (its SecureBytes moved out, so
// nothing secret stays behind) and its slot reused once the FIFO empties,
// or dropped with the others before it once they are half the storage.
class JobFifo {
 public:
  using iterator = std::vector<PendingJob>::iterator;
  bool empty() const { return head_ == v_.size(); }
  size_t size() const { return v_.size() - head_; }
  PendingJob& front() { return v_[head_]; }
  const PendingJob& front() const { return v_[head_]; }
  void push_back(PendingJob&& job) { v_.push_back(std::move(job)); }
  void pop_front() {
    if (++head_ == v_.size()) {
      clear();
    } else if (head_ >= kCompactAt && 2 * head_ >= v_.size()) {
      v_.erase(v_.begin(), v_.begin() + static_cast<ptrdiff_t>(head_));
      head_ = 0;
    }
  }
  void clear() {  // the jobs' SecureBytes wipe themselves
    v_.clear();
    head_ = 0;
  }
  iterator begin() { return v_.begin() + static_cast<ptrdiff_t>(head_); }
  iterator end() { return v_.end(); }

 private:
  static constexpr size_t kCompactAt = 256;
  std::vector<PendingJob> v_;
  size_t head_ = 0;
};

// The distinct aes*-cts programs of one Run batch against the servers'
// bound on them (contract::kCtsBatchBytes): a server fails a job whose new
// program would pass it, so the dispatcher starts another batch instead
// (dispatcher.cc TakeUnits). Jobs of other ciphers count nothing; a job's
// program is its figures'.
class CtsBatchShapes {
 public:
  // Takes the programs of the jobs [first, last) if they fit beside those
  // taken, or `always`; whether it took them.
  bool TakeIfFits(JobFifo::iterator first, JobFifo::iterator last, bool always);
  uint64_t bytes() const { return bytes_; }

 private:
  std::set<contract::CtsShape> shapes_;
  uint64_t bytes_ = 0;
};

// The job's public shape for the contract (proto/contract.h): an ENCRYPT
// is its plaintext's length, never its plaintext.
contract::JobShape ShapeOf(const Job& job);

// Bytes of each share of what the job's dealing carries
// (contract::SharedBytes): the message, and after it a checksum's
// presented tag or an aes*-cts ENCRYPT's spliced message; a FAST key's KDC
// half first; 0 for a ctr-mpc DECRYPT, ENCRYPT or PAD.
size_t SharedBytes(const Job& job);

// contract::CheckJob as a status with the meanings above: kOutOfRange
// for an aes*-cts job over its length cap, kInvalidArgument
// for a malformed job (JOB_MALFORMED), kDataLoss for a ciphertext or
// checksum that cannot verify under any key (JOB_INTEGRITY_FAILED). The
// job's figures, from the same shape, into *figures when given.
absl::Status CheckJob(const Job& job, JobFigures* figures = nullptr);

// contract::JobBlocks: the AES blocks the job needs (statistics).
uint64_t JobBlocks(const Job& job);
// contract::JobCost: what the job counts in the batch limits.
uint64_t JobCost(const Job& job);
// contract::CtsDepthBound: the AND rounds an aes*-cts job may take (0 for
// the others: the ctr-mpc AES of any batch is ~50 rounds).
uint64_t JobDepth(const Job& job);

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_JOB_H_
