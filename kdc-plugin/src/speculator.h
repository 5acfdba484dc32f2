// Speculation (BatcherOptions::speculate): a request's first Run takes
// along the AES work its later steps will need, so that they need no Run
// of their own.
//
// Keystreams: an AS-REQ's encrypted-timestamp DECRYPT (usage 1) takes two
// speculative ENCRYPT jobs along in its batch, the ticket's (usage 2,
// under the krbtgt key of the last AS reply) and the reply's (usage 3,
// under the client's key), sized by the plaintext lengths seen lately.
// When the KDC then submits the ticket's and reply's ENCRYPT, a held
// keystream that fits turns it into a finalize_only job: a login needs one
// MPC Run instead of two. A TGS-REQ's TGT DECRYPT (usage 2 under that
// krbtgt key) takes one ticket keystream along when recent TGS exchanges
// encrypted a ticket under it (a renewal or validation: the new TGT).
//
// Pads: both DECRYPTs also draw PAD jobs (kmpc.proto JOB_PAD, usage 17 =
// KRB5_KEYUSAGE_APP_DATA_CKSUM, MIT's PAC signatures) under the key the
// KDC signed its last exchange's final PAC signature with, as many as
// recent exchanges of that kind (AS, TGS) signed under it, each as long as
// recent usage-17 messages need (the keystreams' bound). A usage-17
// CHECKSUM that a held pad fits (key id, cipher, usage, length) becomes a
// `sign` job: one ring-free Sign request (kmpc.proto SignItem) instead of
// a Run. Exchanges are told apart by their first DECRYPT; a signature or
// ticket counts for the exchange started last (under concurrency the
// counts blur between exchanges, their mean per exchange does not).
//
// Linked pads (one Run per TGS exchange): a TGS-REQ's TGT carries a PAC
// whose server signature MIT checks (get_verified_pac), and its counter is
// inside the TGT. So the group that speculates a ticket under the krbtgt
// (an AS's, a renewal's) links one of its pads to that ticket's keystream
// (Job.pad_after: the pad's counter is the ticket's ctr0 + 2^17). The
// first usage-17 CHECKSUM that is a PAC (the server signature's message)
// takes the linked pad whose keystream is still held, and reserves that
// keystream for the ENCRYPT whose plaintext holds the pad's ctr0 (the
// ticket carrying that signature). A TGT's DECRYPT then draws a
// verification pad at its own ctr0 + 2^17 (public: the ciphertext's first
// block), kept by the servers only if the TGT decrypts (release_if_ok),
// and the server signature's VERIFY_CHECKSUM whose ctr0 is that counter
// becomes a ring-free verify item (kmpc.proto SignItem.verify). Any
// other VERIFY (old tickets, a broken link) runs in a Run as before.
//
// Chained signatures (BatcherOptions::chain_signatures; kmpc.proto
// SignItem.chain, enctype.md "Chained signatures"): MIT's KDC signature of
// a PAC is a checksum of its server signature (ctr0 || tag, 32 bytes),
// under the same key for a TGT (the krbtgt's). A PAC server signature that
// takes a pad whose powers of H reach two beyond its message's
// (contract::PadPowers) takes a second held signing pad of the same key
// id, usage and cipher along (an unlinked one first), and the servers
// answer both tags in one item. The Sign step then keeps (key id, cipher,
// usage, ctr0_1 || tag_1) -> ctr0_2 || tag_2 (KeepChained) for
// kChainedTtl; the CHECKSUM whose message is exactly ctr0_1 || tag_1
// under that key, usage and cipher is completed from it when submitted
// (no request), and the entry goes: one answer per entry. Anything else
// (another message or key, an expired entry) takes a pad or runs as
// before. The linked pad of a TGT's server signature stays its first pad.
//
// Invariants:
//  - Not thread-safe: every method runs under the dispatcher's mutex.
//  - Held keystreams and pads + speculative jobs queued or in flight
//    (pending) stay within speculate_max; each is held at most
//    speculate_ttl from its Run (below the servers' state TTLs), used at
//    most once (taken out of the held list before its job is sent:
//    enctype.md invariant 6 for pads), and wiped when it goes
//    (SecureBytes; a pad is public metadata only: its ctr0).
//  - Budget: making a keystream group takes a token of the keystream
//    budget, drawing an exchange's pads one of the pad budget; each
//    keystream or pad used gives its share of the token back. Each budget
//    refills at kBudgetRefillPerSec up to speculate_max / 2. A group whose
//    DECRYPT failed (unauthenticated: a bad timestamp or TGT), or that
//    expired unused, keeps its tokens spent: a flood gets at most
//    speculate_max / 2 groups of each plus the refill out of the cluster.
//  - Keystream lengths are learnt from AS replies only: a ticket (usage 2)
//    submitted right next to a reply part (usage 3, AS-REP only; a
//    TGS-REP's is usage 8/9), so a TGS-REQ's service ticket changes
//    neither the key nor the lengths.
#ifndef KMPC_KDC_PLUGIN_SPECULATOR_H_
#define KMPC_KDC_PLUGIN_SPECULATOR_H_

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "batcher.h"
#include "job.h"
#include "prepared.h"

namespace kmpc::kdc {

// Held keystreams or pads in the order they were held (their Runs': i.e.
// almost of expiry), indexed by what a job must match to use one (key id,
// usage, cipher). Under load a KDC holds thousands (two keystreams and two
// pads per login in flight); a job finds the newest one of its own key
// among that key's alone, not by a scan of all (a reply's key is the
// client's: one user's among hundreds), and one by its ctr0 (a linked
// pad's ticket keystream, a verification pad) by a look-up, not a scan.
// Invariants: `by_key_` lists every element of `items_` once, under its
// own key, in the order of `items_`; `by_ctr0_` holds every element of
// `items_` once, under its ctr0, with its push order (two verification
// pads share a ctr0 when two TGS requests bring the same TGT: the newest
// is found first, as by TakeNewest).
class HeldList {
 public:
  using List = std::list<HeldKeystream>;
  void push_back(HeldKeystream k);
  // The newest element of (key_id, usage, cipher) at least `min_length`
  // long (Length) that `fits`, taken out (its storage wiped as it goes,
  // SecureBytes); false if none.
  template <typename Fits>
  bool TakeNewest(const std::string& key_id, uint32_t usage,
                  kmpc::v1::Cipher cipher, size_t min_length, Fits fits,
                  HeldKeystream* out);
  // What an element can serve: a pad's pad_length, a keystream's bytes.
  static size_t Length(const HeldKeystream& h) {
    return h.pad ? h.pad_length : h.keystream.size();
  }
  // The element of (key_id, usage, cipher) whose ctr0 is `ctr0`, or null.
  const HeldKeystream* Find(const std::string& key_id, uint32_t usage,
                            kmpc::v1::Cipher cipher,
                            const std::string& ctr0) const;
  // Takes out the element Find returns; false if none.
  bool Take(const std::string& key_id, uint32_t usage,
            kmpc::v1::Cipher cipher, const std::string& ctr0,
            HeldKeystream* out);
  bool empty() const { return items_.empty(); }
  size_t size() const { return items_.size(); }
  const HeldKeystream& front() const { return items_.front(); }
  void pop_front();
  void clear();

 private:
  // What a job must match (key id, usage, cipher); looked up as a KeyView,
  // without a copy of the key id (transparent hash and equality).
  struct Key {
    std::string key_id;
    uint32_t usage;
    int cipher;
  };
  struct KeyView {
    std::string_view key_id;
    uint32_t usage;
    int cipher;
  };
  static KeyView View(const Key& k) { return {k.key_id, k.usage, k.cipher}; }
  static KeyView View(const KeyView& k) { return k; }
  static KeyView ViewOf(const std::string& key_id, uint32_t usage,
                        kmpc::v1::Cipher cipher) {
    return {key_id, usage, static_cast<int>(cipher)};
  }
  struct KeyHash {
    using is_transparent = void;
    template <class K>
    size_t operator()(const K& k) const {
      const KeyView v = View(k);
      return std::hash<std::string_view>()(v.key_id) ^
             (static_cast<size_t>(v.usage) * 0x9e3779b97f4a7c15ULL) ^
             (static_cast<size_t>(v.cipher) << 56);
    }
  };
  struct KeyEq {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      const KeyView x = View(a), y = View(b);
      return x.key_id == y.key_id && x.usage == y.usage && x.cipher == y.cipher;
    }
  };
  using Ctr0Index =
      std::unordered_multimap<std::string, std::pair<uint64_t, List::iterator>>;
  // The newest entry of (key_id, usage, cipher) under ctr0, or end.
  Ctr0Index::const_iterator FindEntry(const std::string& key_id,
                                      uint32_t usage, kmpc::v1::Cipher cipher,
                                      const std::string& ctr0) const;
  // Drops `it`'s entry from by_ctr0_.
  void Unindex(List::iterator it);
  List items_;
  // An element and its Length, side by side: a scan skips the ones too
  // short without touching their list nodes (under load a key has
  // thousands of pads held, most of them passed over by every signature).
  // `seq` is the element's push order (by_ctr0_'s too): a key's deque is
  // in push order, so Take finds an element in it by binary search.
  struct Entry {
    List::iterator it;
    size_t length;
    uint64_t seq;
  };
  std::unordered_map<Key, std::deque<Entry>, KeyHash, KeyEq> by_key_;
  Ctr0Index by_ctr0_;
  uint64_t pushed_ = 0;
};

template <typename Fits>
bool HeldList::TakeNewest(const std::string& key_id, uint32_t usage,
                          kmpc::v1::Cipher cipher, size_t min_length,
                          Fits fits, HeldKeystream* out) {
  auto m = by_key_.find(ViewOf(key_id, usage, cipher));
  if (m == by_key_.end()) return false;
  std::deque<Entry>& v = m->second;
  for (auto rit = v.rbegin(); rit != v.rend(); ++rit) {
    if (rit->length < min_length || !fits(*rit->it)) continue;
    List::iterator it = rit->it;
    Unindex(it);
    *out = std::move(*it);
    v.erase(std::next(rit).base());
    if (v.empty()) by_key_.erase(m);
    items_.erase(it);
    return true;
  }
  return false;
}

class Speculator {
 public:
  explicit Speculator(const BatcherOptions& options);

  // Every submitted job, in submit order (`queue_size`: ordinary jobs
  // waiting). An ENCRYPT of a ticket or reply is learnt from and, when a
  // held keystream fits, becomes finalize_only (job->output = ctr0 || C).
  // A timestamp DECRYPT gets a group and its two speculative ENCRYPT jobs
  // appended to *group_jobs when the limits and the budget allow.
  void OnSubmit(PendingJob* job, size_t queue_size,
                std::vector<PendingJob>* group_jobs);

  // Holds the keystreams of a Run's speculative jobs.
  void Hold(std::vector<HeldKeystream>* keystreams);
  // Keeps a chained signature's second checksum for its CHECKSUM (at most
  // speculate_max of them: the oldest goes first).
  void KeepChained(ChainedSignature c);
  // Groups whose timestamp did not decrypt (their keystreams were dropped).
  void GroupsFailed(size_t n) { wasted_ += n; }
  // Pads drawn but never held (their DECRYPT failed, or the PAD job did).
  void PadsWasted(size_t n) { pads_wasted_ += n; }
  // The DECRYPT that started an exchange of this kind (PendingJob::exchange)
  // verified: only such exchanges count in what is learnt per exchange, so
  // bad timestamps or TGTs (unauthenticated) cannot talk the pads down.
  void ExchangeOk(int kind);
  // A speculative job completed (held or dropped): no longer pending.
  void SpeculativeJobDone() { if (pending_ > 0) --pending_; }
  // Drops expired keystreams; returns the next expiry (InfiniteFuture:
  // none held).
  absl::Time Prune(absl::Time now);
  void Clear();

  size_t held() const { return held_.size(); }
  uint64_t encrypts() const { return encrypts_; }
  uint64_t used() const { return used_; }
  uint64_t wasted() const { return wasted_; }
  size_t pads_held() const {
    return held_pads_.size() + held_linked_.size() + held_verify_.size();
  }
  uint64_t verify_pads_used() const { return verify_pads_used_; }
  // Sign items that chained a second pad; CHECKSUMs completed from a kept
  // chained signature.
  uint64_t chains_sent() const { return chains_sent_; }
  uint64_t chained_used() const { return chained_used_; }
  uint64_t pads_drawn() const { return pads_drawn_; }
  uint64_t pads_used() const { return pads_used_; }
  uint64_t pads_wasted() const { return pads_wasted_; }

 private:
  enum Exchange { kAs = 0, kTgs = 1, kNoExchange = 2 };
  void StartExchange(int kind);
  void LearnSignature(const Job& job);
  bool UsePad(PendingJob* job);
  void MaybeChain(PendingJob* job, uint32_t pad_length);
  bool UseChained(PendingJob* job);
  bool TakePad(const PendingJob& q, HeldKeystream* pad);
  bool UseVerifyPad(PendingJob* job);
  bool UseReserved(PendingJob* job);
  void DrawVerifyPad(PendingJob* decrypt, std::vector<PendingJob>* group_jobs);
  void LinkPad(std::vector<PendingJob>* group_jobs, size_t first_pad);
  static bool HasTicket(const std::vector<PendingJob>& g, size_t end);
  void DrawPads(PendingJob* decrypt, int kind,
                std::vector<PendingJob>* group_jobs);
  void MaybeRenewal(PendingJob* decrypt, std::vector<PendingJob>* group_jobs);
  size_t PadsFor(int kind) const;
  bool Room(size_t n) const;
  void Learn(const Job& job, uint64_t at);
  void LearnPair();
  bool UseHeld(PendingJob* job);
  // Ticket keystream `k` went to a ticket that is not its linked pad's:
  // that pad, if held, signs as an unlinked one from now on.
  void Unlink(const HeldKeystream& k);
  // Everything held (keystreams, pads, reservations).
  size_t HeldCount() const;
  void MakeGroup(PendingJob* timestamp,
                 std::vector<PendingJob>* group_jobs);
  size_t KeystreamBytes(uint32_t usage) const;

  const BatcherOptions options_;
  // Held in the order of their Runs, i.e. (almost) of expiry.
  HeldList held_;
  size_t pending_ = 0;  // speculative jobs queued or in flight
  std::string ticket_key_id_;     // the krbtgt key of the last AS reply
  kmpc::v1::Cipher ticket_cipher_ = kmpc::v1::CIPHER_UNSPECIFIED;  // its enctype
  std::deque<size_t> lengths_[2];  // last plaintext lengths, usage 2 / 3
  uint64_t next_group_ = 1;
  uint64_t submits_ = 0;  // OnSubmit calls, for the pairing
  uint64_t last_ticket_at_ = 0, last_reply_at_ = 0;
  std::string last_ticket_key_;
  kmpc::v1::Cipher last_ticket_cipher_ = kmpc::v1::CIPHER_UNSPECIFIED;
  size_t last_ticket_len_ = 0;
  Budget tokens_, pad_tokens_;
  uint64_t encrypts_ = 0, used_ = 0, wasted_ = 0;

  // Pads, held in the order of their Runs: unlinked ones (and linked ones
  // whose ticket keystream went to another ticket: Unlink) in held_pads_,
  // linked ones whose ticket keystream is held in held_linked_. A PAC
  // signature takes the newest of held_linked_ (its keystream found by a
  // look-up), not after a scan past every unlinked pad of the key (under
  // load thousands wait for their TTL, and every signature passed them).
  HeldList held_pads_;
  HeldList held_linked_;
  HeldList held_verify_;  // verification pads
  // Ticket keystreams reserved for the ticket that carries the signature
  // made under their linked pad: (that pad's ctr0, the keystream).
  std::deque<std::pair<std::string, HeldKeystream>> reserved_;
  uint64_t verify_pads_used_ = 0;
  std::string pad_key_id_;  // the key of the last exchange's last signature
  kmpc::v1::Cipher pad_cipher_ = kmpc::v1::CIPHER_UNSPECIFIED;
  std::deque<size_t> pad_lengths_;  // last usage-17 message lengths
  // The exchange started last, and what it did so far: its usage-17
  // signatures by key (in order of their last use), its tickets under the
  // krbtgt key.
  int exchange_ = kNoExchange;
  std::vector<std::pair<std::string, uint32_t>> sigs_;
  kmpc::v1::Cipher last_sig_cipher_ = kmpc::v1::CIPHER_UNSPECIFIED;
  uint32_t tickets_ = 0;
  // Per kind of exchange: exchanges whose DECRYPT verified, and the
  // signatures under the pad key and tickets under the krbtgt key that
  // exchanges of that kind made, over about the last kExchangesLearnt
  // exchanges (scaled down together beyond that).
  double ok_sum_[2] = {0, 0}, sig_sum_[2] = {0, 0}, ticket_sum_[2] = {0, 0};
  uint64_t pads_drawn_ = 0, pads_used_ = 0, pads_wasted_ = 0;
  // Kept chained signatures, oldest first (i.e. in order of expiry).
  std::deque<ChainedSignature> chained_;
  uint64_t chains_sent_ = 0, chained_used_ = 0;
};

}  // namespace kmpc::kdc

#endif  // KMPC_KDC_PLUGIN_SPECULATOR_H_
