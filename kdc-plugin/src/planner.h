// The exchange plan (kdcmpc interface 1.2, krb5/kdcmpc_plugin.h; design:
// docs/design/exchange-plan.md section 1): the KDC states an exchange's
// whole MPC work at its start, and the planner makes the exchange's first
// Run carry everything that can be computed ahead, so that its later jobs
// need no Run of their own.
//
// Admit (begin): the items given now (the gate DECRYPT, a second ticket)
// and, for every other item, what it will need: a keystream for an
// ENCRYPT (of the item's length bound), a signing pad for a CHECKSUM (a
// SIG_* or CAMMAC_KDC pad naming a TICKET item of the plan is linked to
// that ticket's keystream at ctr0 + 2^17 + slot, kmpc.proto Job.pad_slot),
// a verification pad for a VERIFY (at the ctr0 + 2^17 + slot of the
// DECRYPT item it names, public: the ciphertext's first block; or at the
// item's ctr0). They go as one group (PendingJob::group): the dispatcher
// never splits a group across Runs, and the servers release the prepared
// jobs only if the plan's gate decrypts (Job.release_if_ok).
//
// Take (submit_item): a direct look-up of the item's slot. A held
// keystream makes the ENCRYPT finalize_only, a pad makes the CHECKSUM a
// Sign item, a verification pad makes the VERIFY a verify item. A SIG_SERVER
// whose plan has a SIG_KDC under the same key id, cipher and usage takes
// that item's pad along as a chain (kmpc.proto SignItem.chain,
// BatcherOptions::chain_signatures), and the SIG_KDC is then completed from
// the chained answer if its message is the first signature. Anything else
// (an input over its bound, a prepared item that expired or was refused by
// the budget, a verification whose counter is not the pad's) runs as an
// ordinary job in the next Run, and a miss is counted with its reason. A
// job whose item is prepared by a Run still out (a plan with nothing given
// at begin: the KDC goes on at once) waits in its slot until that Run is
// back (Unpark), or runs alone if it failed (Lost, reason "failover").
//
// End: the exchange's unused prepared state is wiped and its record (kind,
// Runs it appeared in, misses) returned for the metrics (kdc_metrics.h).
//
// Limits (prepared.h, batcher.h): the budget (one token per plan with a
// gate, the gate book's (gate_book.h), given back when the gate verifies:
// a flood of bad timestamps or forged tickets gets at most speculate_max /
// 2 exchanges' prepared work plus the refill of kBudgetRefillPerSec), the
// cap on held and pending
// prepared state (speculate_max) and its TTL (speculate_ttl; verification
// pads kVerifyPadTtl). With BatcherOptions::speculate off nothing is
// prepared: every later job runs in a Run of its own (a miss, "budget").
//
// Proven shapes (docs/reviews/2026-11-26-splice-and-cts-refresh.md,
// "Unauthenticated program churn"): the servers compile a program per aes*-cts shape
// (contract::CtsShape), and a gated reply's shape follows lengths the
// client chooses (its request's, and through it the reply's). A given,
// gated aes*-cts job (the AS REPLY, spliced or not; FAST's KDC_CHALLENGE)
// goes into the gate's Run only if its shape is among the kProvenShapes
// most recently proven, i.e. those of exchanges whose gate verified on
// this cluster; otherwise Admit holds it back (deferred), with the jobs it
// prepares for the plan's later items, and they go as one group in a Run
// of their own once the gate verified, led by a copy of the gate's DECRYPT
// (GateBook::Regate) on which they stay gated, since the servers compute a
// user key's reply only on its gate in the same Run; never if the gate
// failed (the held-back job completes with the gate's verdict, the
// prepared ones are lost). A wrong password therefore never makes the
// servers compile a reply's program; a right one of a new shape costs a
// second Run, and proves the shape; a failed gate does not un-prove it.
// That state (proven shapes, the compile budget, the budget token, the
// jobs held back) is the gate book's (gate_book.h): Admit asks it, the
// step that completes the gate reports the verdict to it, and what it
// releases is queued by the dispatcher (Dispatcher::Release).
//
// A job submitted outside any plan (kdcmpc submit) is an ordinary Run job
// of its own: nothing is prepared for it, nothing guessed from it.
//
// Not thread-safe: every method runs under the dispatcher's mutex.
#ifndef KMPC_KDC_PLUGIN_PLANNER_H_
#define KMPC_KDC_PLUGIN_PLANNER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batcher.h"
#include "contract.h"
#include "gate_book.h"
#include "job.h"
#include "plan.h"
#include "prepared.h"

namespace kmpc::kdc {

// Whether item i of a checked plan is a ctr-mpc user's AS reply or its
// PA-REQ-ENC-PA-REP checksum, gated on the plan's gate under the gate's
// key id: the servers compute it only when released on that gate's DECRYPT
// in the same batch (mpc-server engine/user_key_rule.h), so wherever it
// runs apart from the gate's Run a copy of the gate goes with it
// (Planner::Take, Router's failover).
bool GatedOnItsTimestamp(const Plan& plan, size_t i);

class Planner {
 public:
  // gates: the module's gate book, which outlives the planner; cluster:
  // the planner's in it.
  Planner(const BatcherOptions& options, GateBook* gates, size_t cluster);

  // A plan the planner accepts: 1..kMaxPlanItems items, each matching its
  // role (type, usage), a known cipher, a key id of contract::kKeyIdSize,
  // gate and ticket indices naming DECRYPT (resp. TICKET or DECRYPT) items
  // of the plan, a DECRYPT given at begin, a 16-byte ctr0 where one is
  // needed. kInvalidArgument naming the item otherwise.
  static absl::Status Check(const Plan& plan);

  // Starts exchange `id` (unique, nonzero) with `plan` (checked). `given`:
  // the jobs of the items given now, in plan order (their `item` set); they
  // are marked with the exchange and its group here, and the prepared jobs
  // appended to *prepared, to be queued right after them as one group. The
  // gate book admits both (GateBook::Admit): the jobs it holds back are
  // taken out; refused (the compile budget), the exchange is not started
  // and nothing is kept.
  absl::Status Admit(uint64_t id, Plan plan, std::vector<PendingJob>* given,
                     std::vector<PendingJob>* prepared);
  // Whether exchange `id` was admitted and not yet ended.
  bool Known(uint64_t id) const { return exchanges_.count(id) != 0; }
  // Checks job q (`item` of `id`) against its plan item: kInvalidArgument
  // if it does not match (type, cipher, key id, usage; an exact length).
  absl::Status Match(uint64_t id, int item, const Job& job) const;
  // Job q of `item` (Match passed) uses what was prepared for it, else
  // stays an ordinary job; the miss, if any, is counted and returned
  // (the first miss of an exchange is logged by the caller). While the Run
  // preparing the item is still out (a plan with nothing given at begin:
  // the KDC goes on at once), q is parked in its slot instead (*parked set,
  // q moved from): Unpark hands it back once that Run is back.
  // A miss of an item gated on the plan's gate under the gate's key id and
  // an aes*-ctr-mpc cipher (a ctr-mpc user's AS reply whose keystream was
  // not prepared, or is gone) gates q again on a copy of the gate DECRYPT,
  // appended to *group to go with q as one group (GateBook::Regate): the servers
  // compute such a reply only when released on its timestamp in the same
  // batch (mpc-server engine/user_key_rule.h). A parked job is not regated
  // by Unpark: it misses only when its Run, the gate's, failed.
  std::optional<Miss> Take(uint64_t id, int item, PendingJob* q,
                           bool* parked, std::vector<PendingJob>* group);
  // The parked jobs of exchange `id` whose items' Runs are back, each
  // taken as Take would (using what was prepared, or ordinary with its
  // miss counted), appended to *ready for the queues.
  void Unpark(uint64_t id, std::vector<PendingJob>* ready);
  // A prepared job of `item` of exchange `id` completed without being held
  // (its Run failed, or its gate did; it was dropped from a failed
  // cluster's queue): the item's job runs as an ordinary one (a miss,
  // reason failover). Nothing for an item held already. `sent`: it reached
  // the servers (a keystream lost after that counts as wasted; one held
  // back with its gate's reply and dropped with it was never sent).
  void Lost(uint64_t id, int item, bool sent = true);
  // A prepared job went to the servers: at Admit, or held back with its
  // gate's reply and released after the gate verified (Dispatcher::Release).
  void CountSent(const PendingJob& q);

  // A Run's prepared jobs came back (HeldKeystream::exchange_id set).
  void Hold(HeldKeystream k);
  // A chained signature for the SIG_KDC item c.item of c.exchange_id.
  void KeepChained(ChainedSignature c);
  // A Run request carried a job of exchange `id`.
  void CountRun(uint64_t id);
  // A job of exchange `id` went to another cluster (router.h failover).
  void CountMiss(uint64_t id, int item, Miss why);
  // The exchange is over: its unused prepared state is wiped, and what
  // the gate book held back for it.
  ExchangeRecord End(uint64_t id);

  // Drops prepared state past its TTL; returns the next expiry
  // (InfiniteFuture: none held).
  absl::Time Prune(absl::Time now);
  // Forgets every exchange (and the gate book this cluster's).
  void Clear();

  size_t held() const { return held_; }
  size_t pads_held() const { return held_pads_; }
  size_t pending() const { return pending_; }
  uint64_t exchanges() const { return exchanges_.size(); }
  // What was prepared and used (BatcherStats, kdc_metrics.h).
  struct Counts {
    // keystreams_wasted: prepared and never used (the gate failed, the
    // Run did, they expired, the exchange ended without them).
    uint64_t keystreams = 0, keystreams_used = 0, keystreams_wasted = 0;
    uint64_t pads_drawn = 0, pads_used = 0, pads_wasted = 0;
    uint64_t verify_pads_used = 0, chains_sent = 0, chained_used = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  enum class State { kNone, kInFlight, kHeld, kChained, kUsed };
  struct Slot {
    State state = State::kNone;
    // kNone: why it was not prepared; no_miss: it is not to be prepared
    // (a DECRYPT item, given now or not).
    Miss why = Miss::kBudget;
    bool no_miss = false;
    HeldKeystream held;
    std::optional<ChainedSignature> chained;
    // A job submitted while the Run preparing this item was out (kInFlight).
    std::optional<PendingJob> parked;
  };
  struct Exchange {
    Plan plan;
    std::array<Slot, kMaxPlanItems> slots;
    uint64_t group = 0;
    uint32_t runs = 0;
    std::vector<std::pair<Role, Miss>> misses;
    // A copy of the gate DECRYPT (GateBook::Regate) when an item gated on it
    // under its key may run alone after a miss (Take).
    std::optional<PendingJob> gate_copy;
  };
  // How many prepared jobs `x` needs; whether the gate is given now.
  static size_t Preparable(const Exchange& x);
  void Prepare(uint64_t id, Exchange* x, int item,
               const std::vector<PendingJob>& given,
               std::vector<PendingJob>* prepared);
  // The given DECRYPT job of `item`, or null.
  static const PendingJob* GivenJob(const std::vector<PendingJob>& given,
                                    int item);
  std::optional<Miss> TakeSlot(Exchange* x, int item, PendingJob* q);
  std::optional<Miss> TakeHeld(Exchange* x, int item, PendingJob* q);
  void MaybeChain(uint64_t id, Exchange* x, int item, PendingJob* q,
                  uint32_t pad_length);
  void Wipe(Slot* s);
  void Unheld(const HeldKeystream& h);

  const BatcherOptions options_;
  std::unordered_map<uint64_t, Exchange> exchanges_;
  // (expiry, exchange, item) of held slots, in order of their Runs (almost
  // of expiry): Prune wipes from the front.
  std::deque<std::pair<absl::Time, std::pair<uint64_t, int>>> expiry_;
  size_t held_ = 0, held_pads_ = 0, pending_ = 0;
  Counts counts_;
  GateBook& gates_;
  const size_t cluster_;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_PLANNER_H_
