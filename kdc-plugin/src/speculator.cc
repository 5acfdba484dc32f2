#include "speculator.h"

#include <algorithm>

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

namespace {

// Key usages (RFC 4120 7.5.1) the speculative keystream is about.
constexpr uint32_t kUsageEncTimestamp = 1;
constexpr uint32_t kUsageTicket = 2;
constexpr uint32_t kUsageAsRepPart = 3;
// KRB5_KEYUSAGE_APP_DATA_CKSUM: MIT's PAC signatures (krb5_pac_sign_ext).
constexpr uint32_t kUsagePacSignature = 17;
// Pads per exchange, at most; and usage-17 messages longer than this are
// not drawn pads for, nor learnt from (a PAC is ~1 KB).
constexpr size_t kMaxPadsPerExchange = 4;
constexpr size_t kMaxPadBytes = 8192;
// A ticket issued in a later second than its authtime carries the optional
// starttime (RFC 4120 5.3 EncTicketPart [6]; MIT omits it when equal to
// authtime: do_as_req.c, do_tgs_req.c): a context tag (2 octets) around a
// GeneralizedTime "YYYYMMDDHHMMSSZ" (2 + 15), and one more length octet in
// each of the two headers around it ([APPLICATION 3], SEQUENCE) when they
// cross a length boundary. A TGS ticket (the ticket signature's message)
// and a renewed TGT are nearly always issued after their authtime, so they
// are this much longer than what a login that follows its AS within the
// same second shows.
constexpr size_t kStarttimeBytes = 2 + 2 + 15 + 2;
// Exchanges per kind whose counts are learnt.
constexpr size_t kExchangesLearnt = 16;
// Plaintexts longer than this are not speculated on, nor learnt from.
constexpr size_t kMaxSpeculatedBytes = 2048;
// Lengths learnt from the last this many ENCRYPT jobs of a usage.
constexpr size_t kLengthsLearnt = 64;

template <typename T>
void Push(std::deque<T>* l, T n, size_t keep) {
  l->push_back(n);
  if (l->size() > keep) l->pop_front();
}

void PushLength(std::deque<size_t>* l, size_t n) { Push(l, n, kLengthsLearnt); }

// Bytes to speculate for recent lengths `l`: every length up to one block
// past the 7/8 quantile's (not the longest: one client's oversized reply,
// e.g. many addresses, must not make every login's keystream longer),
// rounded up to blocks; 0 while nothing was learnt. A longer plaintext
// runs as an ordinary job. The extra block is paid only when a recent
// length needs it: lengths that vary by a few bytes (names, nonces)
// mostly fit in the quantile's own last block.
size_t CoverBytes(const std::deque<size_t>& l) {
  if (l.empty()) return 0;
  std::vector<size_t> v(l.begin(), l.end());
  const size_t k = (v.size() - 1) * 7 / 8;
  std::nth_element(v.begin(), v.begin() + k, v.end());
  const size_t m = v[k];
  if (m == 0) return 0;
  const auto round_up = [](size_t n) {
    return contract::CeilBlocks(n) * contract::kBlockSize;
  };
  const size_t limit = round_up(m) + contract::kBlockSize;
  size_t cover = m;
  for (size_t n : l)
    if (n <= limit) cover = std::max(cover, n);
  return round_up(cover);
}

// Whole blocks for `bytes` learnt and a starttime (kStarttimeBytes); 0
// while nothing was learnt.
size_t WithStarttime(size_t bytes) {
  if (bytes == 0) return 0;
  return contract::CeilBlocks(bytes + kStarttimeBytes) * contract::kBlockSize;
}

// Pads: the longest recent message and a starttime (kStarttimeBytes),
// whole blocks. A pad's cost is one AES
// block whatever its length (the length only sets which powers of H the
// servers keep for it), and one exchange signs messages of very different
// lengths (the EncTicketPart of a ticket signature, the PAC, the 32-byte
// server signature of the KDC signature), so a quantile would leave the
// longest, the ticket signature, without a pad.
size_t LongestBytes(const std::deque<size_t>& l) {
  size_t m = 0;
  for (size_t n : l) m = std::max(m, n);
  return WithStarttime(m);
}

// A PAC ([MS-PAC] 2.3 PACTYPE: cBuffers, Version 0, then cBuffers
// 16-byte PAC_INFO_BUFFERs): the message of a PAC server signature (MIT
// pac_sign.c, the PAC with both signature values zeroed). The other
// usage-17 messages are an EncTicketPart (a DER [APPLICATION 3], 0x63:
// the ticket signature) and a 32-byte signature value (the KDC
// signature's), neither of which parses so.
bool IsPac(const SecureBytes& m) {
  if (m.size() < 8 + 16) return false;
  const uint32_t n = m[0] | (m[1] << 8) | (m[2] << 16) | (uint32_t{m[3]} << 24);
  const bool v0 = m[4] == 0 && m[5] == 0 && m[6] == 0 && m[7] == 0;
  return v0 && n >= 1 && n <= 64 && 8 + 16 * size_t{n} <= m.size();
}

// Whether `needle`'s bytes occur in `m` (compared as unsigned bytes).
bool Contains(const SecureBytes& m, const std::string& needle) {
  const auto* n = reinterpret_cast<const uint8_t*>(needle.data());
  return std::search(m.begin(), m.end(), n, n + needle.size()) != m.end();
}

// What `sum` makes per exchange (of `oks`), rounded to the nearest.
size_t PerExchange(double sum, double oks) {
  if (oks < 0.5) return 0;
  return static_cast<size_t>(sum / oks + 0.5);
}

}  // namespace

Speculator::Speculator(const BatcherOptions& options)
    : options_(options),
      tokens_{static_cast<double>(options.speculate_max / 2),
              static_cast<double>(options.speculate_max / 2),
              kBudgetRefillPerSec, absl::Time()},
      pad_tokens_(tokens_) {}

void Speculator::OnSubmit(PendingJob* job, size_t queue_size,
                          std::vector<PendingJob>* group_jobs) {
  const uint64_t at = ++submits_;
  if (!options_.speculate) return;
  const Job& j = job->job;
  // A long queue: the jobs the KDC needs come first.
  const bool room = queue_size < options_.max_queue / 2;
  if (j.type == pb::JOB_ENCRYPT &&
      (j.usage == kUsageTicket || j.usage == kUsageAsRepPart) &&
      j.input.size() <= kMaxSpeculatedBytes) {
    if (j.usage == kUsageTicket && j.key_id == ticket_key_id_) ++tickets_;
    Learn(j, at);
    Prune(job->enqueued);
    if (!UseReserved(job)) UseHeld(job);
  } else if (j.type == pb::JOB_CHECKSUM && j.usage == kUsagePacSignature &&
             j.input.size() <= kMaxPadBytes) {
    LearnSignature(j);
    Prune(job->enqueued);
    if (!UseChained(job)) UsePad(job);
  } else if (j.type == pb::JOB_VERIFY_CHECKSUM &&
             j.usage == kUsagePacSignature &&
             j.checksum.size() == contract::kChecksumSize) {
    Prune(job->enqueued);
    UseVerifyPad(job);
  } else if (j.type == pb::JOB_DECRYPT && j.usage == kUsageEncTimestamp) {
    StartExchange(kAs);
    job->exchange = kAs;
    if (!room) return;
    if (!ticket_key_id_.empty() && Room(2)) MakeGroup(job, group_jobs);
    DrawPads(job, kAs, group_jobs);
  } else if (j.type == pb::JOB_DECRYPT && j.usage == kUsageTicket &&
             !ticket_key_id_.empty() && j.key_id == ticket_key_id_ &&
             j.cipher == ticket_cipher_) {
    // A TGS-REQ's TGT (a ticket under another key, e.g. an S4U2Proxy
    // evidence ticket, starts no exchange).
    StartExchange(kTgs);
    job->exchange = kTgs;
    if (!room) return;
    MaybeRenewal(job, group_jobs);
    DrawPads(job, kTgs, group_jobs);
    DrawVerifyPad(job, group_jobs);
  }
}

bool Speculator::Room(size_t n) const {
  return HeldCount() + pending_ + n <=
         options_.speculate_max;
}

// The exchange started last ends: what it signed and encrypted is learnt
// for its kind, and the key of its last signature is the pads' key.
void Speculator::StartExchange(int kind) {
  if (exchange_ != kNoExchange) {
    if (!sigs_.empty()) {
      pad_key_id_ = sigs_.back().first;
      pad_cipher_ = last_sig_cipher_;
      sig_sum_[exchange_] += sigs_.back().second;
    }
    ticket_sum_[exchange_] += tickets_;
  }
  exchange_ = kind;
  sigs_.clear();
  tickets_ = 0;
}

void Speculator::ExchangeOk(int kind) {
  if (kind != kAs && kind != kTgs) return;
  ok_sum_[kind] += 1;
  if (ok_sum_[kind] > kExchangesLearnt) {
    const double f = kExchangesLearnt / ok_sum_[kind];
    ok_sum_[kind] *= f;
    sig_sum_[kind] *= f;
    ticket_sum_[kind] *= f;
  }
}

void Speculator::LearnSignature(const Job& j) {
  PushLength(&pad_lengths_, j.input.size());
  last_sig_cipher_ = j.cipher;
  auto it = std::find_if(sigs_.begin(), sigs_.end(),
                         [&](const auto& s) { return s.first == j.key_id; });
  uint32_t n = 1;
  if (it != sigs_.end()) {
    n += it->second;
    sigs_.erase(it);
  }
  if (sigs_.size() < kMaxPadsPerExchange) sigs_.emplace_back(j.key_id, n);
}

// Pads per exchange of a kind: the mean of recent such exchanges'
// signatures under the pad key, at most kMaxPadsPerExchange.
size_t Speculator::PadsFor(int kind) const {
  return std::min(kMaxPadsPerExchange,
                  PerExchange(sig_sum_[kind], ok_sum_[kind]));
}

void Speculator::DrawPads(PendingJob* d, int kind,
                          std::vector<PendingJob>* group_jobs) {
  const size_t n = PadsFor(kind);
  const size_t bytes = LongestBytes(pad_lengths_);
  if (n == 0 || bytes == 0 || pad_key_id_.empty() || !Room(n) ||
      !pad_tokens_.Take(d->enqueued))
    return;
  if (d->group == 0) d->group = next_group_++;
  size_t first = group_jobs->size();
  for (size_t i = 0; i < n; ++i)
    group_jobs->push_back(SpeculativeJob(*d, 1.0 / static_cast<double>(n),
                                         pb::JOB_PAD, pad_key_id_, pad_cipher_,
                                         kUsagePacSignature, bytes));
  // An AS issues its speculated ticket itself: one of its pads is linked.
  // A TGS group's ticket keystream may serve a later renewal instead (its
  // own signatures, of a service ticket, are no PACs): its linked pad is
  // one more, held beside that keystream.
  size_t drawn = n;
  if (kind == kTgs && HasTicket(*group_jobs, first) && Room(n + 1)) {
    group_jobs->push_back(SpeculativeJob(*d, 0, pb::JOB_PAD, pad_key_id_,
                                         pad_cipher_, kUsagePacSignature,
                                         bytes));
    first = group_jobs->size() - 1;
    ++drawn;
  }
  LinkPad(group_jobs, first);
  pads_drawn_ += drawn;
  pending_ += drawn;
}

// Whether the group jobs before `end` hold a speculative ticket ENCRYPT.
bool Speculator::HasTicket(const std::vector<PendingJob>& g, size_t end) {
  for (size_t i = 0; i < end && i < g.size(); ++i)
    if (g[i].job.type == pb::JOB_ENCRYPT && g[i].job.usage == kUsageTicket)
      return true;
  return false;
}

// The first pad from `first` on is linked to the group's speculative
// ticket ENCRYPT when both are under the same key (the krbtgt's): the
// server signature of that ticket's PAC is then made at a counter its
// next TGS can name (class comment).
void Speculator::LinkPad(std::vector<PendingJob>* g, size_t first) {
  for (const PendingJob& t : *g) {
    if (t.job.type != pb::JOB_ENCRYPT || t.job.usage != kUsageTicket) continue;
    if (first < g->size() && (*g)[first].job.key_id == t.job.key_id &&
        (*g)[first].job.cipher == t.job.cipher)
      (*g)[first].link_pad = true;
    return;
  }
}

// A TGT DECRYPT's verification pad at its ctr0 + kLinkedPadOffset (the
// counter its PAC's server signature has if it was made under a linked
// pad), long enough for recent usage-17 messages; released by the servers
// only if the TGT decrypts (release_if_ok). It reveals nothing: the
// servers keep it for one verify item.
void Speculator::DrawVerifyPad(PendingJob* d,
                               std::vector<PendingJob>* group_jobs) {
  const size_t bytes = LongestBytes(pad_lengths_);
  std::string ctr;
  if (bytes == 0 || d->job.input.size() < contract::kCiphertextOverhead ||
      !Room(1) ||
      !contract::LinkedPadCtr0(
          absl::string_view(reinterpret_cast<const char*>(d->job.input.data()),
                            contract::kCtr0Size),
          &ctr))
    return;
  if (d->group == 0) d->group = next_group_++;
  PendingJob v = SpeculativeJob(*d, 0, pb::JOB_PAD, d->job.key_id,
                                d->job.cipher, kUsagePacSignature, bytes);
  v.job.checksum = std::move(ctr);
  group_jobs->push_back(std::move(v));
  ++pending_;
}

// A TGS exchange that encrypts a ticket under the krbtgt key (a renewal,
// a validation: the new TGT) in most recent such exchanges: its TGT's
// DECRYPT takes that ticket's keystream along.
void Speculator::MaybeRenewal(PendingJob* d,
                              std::vector<PendingJob>* group_jobs) {
  // Learnt from AS tickets, which carry no starttime; the new TGT does.
  const size_t bytes = WithStarttime(KeystreamBytes(kUsageTicket));
  if (PerExchange(ticket_sum_[kTgs], ok_sum_[kTgs]) == 0 || bytes == 0 ||
      !Room(1) ||
      !tokens_.Take(d->enqueued))
    return;
  if (d->group == 0) d->group = next_group_++;
  group_jobs->push_back(SpeculativeJob(*d, 1, pb::JOB_ENCRYPT, ticket_key_id_,
                                       ticket_cipher_, kUsageTicket, bytes));
  ++encrypts_;
  ++pending_;
}

// Newest first, as keystreams (UseHeld). Taken out of the held list here,
// before its Sign request exists: a pad signs once (enctype.md invariant
// 6; the servers refuse a second use anyway).
bool Speculator::UsePad(PendingJob* q) {
  HeldKeystream pad;
  if (!TakePad(*q, &pad)) return false;
  pad_tokens_.GiveBack(pad.refund);
  ++pads_used_;
  const uint32_t pad_length = pad.pad_length;
  SignWith(q, std::move(pad));
  MaybeChain(q, pad_length);
  return true;
}

// A PAC server signature under `pad` (taken for it) takes a second held
// signing pad of its key, usage and cipher for its KDC signature
// ("Chained signatures"), when `pad` holds two powers of H beyond the
// message's (the servers refuse the chain otherwise) and a held pad signs
// 32 bytes; an unlinked pad only, newest first: a linked pad belongs to
// its ticket keystream (the PAC of the ticket encrypted with it is signed
// at its counter, which that ticket's TGS-REQ names for verification), and
// a chain would leave that keystream without it.
void Speculator::MaybeChain(PendingJob* q, uint32_t pad_length) {
  const Job& j = q->job;
  if (!options_.chain_signatures || !IsPac(j.input) ||
      !ChainFits(j.input.size(), pad_length))
    return;
  auto fits = [&](const HeldKeystream& h) { return h.expires > q->enqueued; };
  HeldKeystream second;
  if (!held_pads_.TakeNewest(j.key_id, j.usage, j.cipher, contract::kChecksumSize, fits,
                             &second))
    return;
  q->chain_batch_id = std::move(second.run_batch_id);
  q->chain_job_id = second.run_job_id;
  q->chain_ctr0 = std::move(second.ctr0);
  pad_tokens_.GiveBack(second.refund);
  ++pads_used_;
  ++chains_sent_;
}

// A CHECKSUM whose message is a kept chained signature's first one, under
// its key, usage and cipher: completed with the second (taken out: one
// answer per entry). Newest first.
bool Speculator::UseChained(PendingJob* q) {
  const Job& j = q->job;
  if (j.input.size() != contract::kChecksumSize) return false;
  for (auto it = chained_.rbegin(); it != chained_.rend(); ++it) {
    if (it->expires <= q->enqueued || it->usage != j.usage || it->cipher != j.cipher ||
        it->key_id != j.key_id || it->message != j.input)
      continue;
    q->output = std::move(it->checksum);
    q->chained_done = true;
    q->blocks = 0;
    chained_.erase(std::next(it).base());  // wipes its message (SecureBytes)
    ++chained_used_;
    return true;
  }
  return false;
}

void Speculator::KeepChained(ChainedSignature c) {
  if (chained_.size() >= std::max<size_t>(1, options_.speculate_max)) chained_.pop_front();
  chained_.push_back(std::move(c));
}

// The pad for usage-17 CHECKSUM q: for a PAC (a server signature), a
// linked pad whose ticket keystream is still held first, that keystream
// then reserved for the ticket carrying the signature (UseReserved); for
// other messages an unlinked pad first. Newest first within each.
bool Speculator::TakePad(const PendingJob& q, HeldKeystream* pad) {
  const Job& j = q.job;
  const size_t len = j.input.size();
  auto fits = [&](const HeldKeystream& h) {
    return h.pad_length >= len && h.expires > q.enqueued;
  };
  if (IsPac(j.input)) {
    HeldKeystream ks;
    // A linked pad whose ticket keystream is still held (a look-up by its
    // ctr0: under load many linked pads lost theirs to other tickets).
    if (held_linked_.TakeNewest(
            j.key_id, j.usage, j.cipher, len,
            [&](const HeldKeystream& h) {
              return fits(h) && held_.Find(h.key_id, kUsageTicket, h.cipher,
                                           h.linked_ctr0) != nullptr;
            },
            pad) &&
        held_.Take(pad->key_id, kUsageTicket, pad->cipher, pad->linked_ctr0,
                   &ks)) {
      reserved_.emplace_back(pad->ctr0, std::move(ks));
      return true;
    }
  }
  return held_pads_.TakeNewest(j.key_id, j.usage, j.cipher, len, fits, pad) ||
         held_linked_.TakeNewest(j.key_id, j.usage, j.cipher, len, fits, pad);
}

// A VERIFY_CHECKSUM whose ctr0 is a held verification pad's becomes a
// ring-free verify item under it (taken out: one verification per pad).
bool Speculator::UseVerifyPad(PendingJob* q) {
  const Job& j = q->job;
  const size_t len = j.input.size();
  const std::string ctr0 = j.checksum.substr(0, contract::kCtr0Size);
  const HeldKeystream* h = held_verify_.Find(j.key_id, j.usage, j.cipher, ctr0);
  if (h == nullptr || h->pad_length < len || h->expires <= q->enqueued)
    return false;
  HeldKeystream pad;
  held_verify_.Take(j.key_id, j.usage, j.cipher, ctr0, &pad);
  SignWith(q, std::move(pad));
  ++verify_pads_used_;
  return true;
}

// A ticket ENCRYPT whose plaintext carries the ctr0 of a signature made
// under a linked pad (its PAC's server signature) takes that pad's ticket
// keystream, so that its next TGS finds the signature at ctr0 + 2^17.
bool Speculator::UseReserved(PendingJob* q) {
  const Job& j = q->job;
  if (j.usage != kUsageTicket) return false;
  const size_t len = j.input.size();
  for (auto it = reserved_.begin(); it != reserved_.end(); ++it) {
    const HeldKeystream& k = it->second;
    if (k.key_id != j.key_id || k.cipher != j.cipher ||
        k.keystream.size() < len || k.expires <= q->enqueued ||
        !Contains(j.input, it->first))
      continue;
    HeldKeystream ks = std::move(it->second);
    reserved_.erase(it);
    tokens_.GiveBack(ks.refund);
    FinalizeWith(q, std::move(ks));
    ++used_;
    return true;
  }
  return false;
}

void Speculator::Learn(const Job& j, uint64_t at) {
  if (j.usage == kUsageTicket) {
    last_ticket_at_ = at;
    last_ticket_key_ = j.key_id;
    last_ticket_cipher_ = j.cipher;
    last_ticket_len_ = j.input.size();
    if (last_reply_at_ != 0 && last_reply_at_ + 1 == at) LearnPair();
  } else {
    PushLength(&lengths_[1], j.input.size());
    last_reply_at_ = at;
    if (last_ticket_at_ != 0 && last_ticket_at_ + 1 == at) LearnPair();
  }
}

void Speculator::LearnPair() {
  ticket_key_id_ = last_ticket_key_;
  ticket_cipher_ = last_ticket_cipher_;
  PushLength(&lengths_[0], last_ticket_len_);
  last_ticket_at_ = last_reply_at_ = 0;  // one pair, learnt once
}

// Newest first: the keystream this login's own timestamp brought along,
// rather than an older one left unused (e.g. too short for its ticket),
// which the servers are likelier to have forgotten.
bool Speculator::UseHeld(PendingJob* q) {
  const Job& j = q->job;
  const size_t len = j.input.size();
  HeldKeystream k;  // the keystream wipes itself as it goes (SecureBytes)
  if (!held_.TakeNewest(
          j.key_id, j.usage, j.cipher, len,
          [&](const HeldKeystream& h) {
            return h.keystream.size() >= len && h.expires > q->enqueued;
          },
          &k))
    return false;
  if (j.usage == kUsageTicket) Unlink(k);
  tokens_.GiveBack(k.refund);
  FinalizeWith(q, std::move(k));
  ++used_;
  return true;
}

void Speculator::MakeGroup(PendingJob* ts,
                           std::vector<PendingJob>* group_jobs) {
  const size_t ticket = KeystreamBytes(kUsageTicket);
  const size_t reply = KeystreamBytes(kUsageAsRepPart);
  if (ticket == 0 || reply == 0 || !tokens_.Take(ts->enqueued)) return;
  if (ts->group == 0) ts->group = next_group_++;
  // The reply is under the client's key, as its timestamp (same key id and
  // enctype); the ticket under the krbtgt key and enctype last seen.
  group_jobs->push_back(SpeculativeJob(*ts, 0.5, pb::JOB_ENCRYPT, ticket_key_id_,
                                       ticket_cipher_, kUsageTicket, ticket));
  group_jobs->push_back(SpeculativeJob(*ts, 0.5, pb::JOB_ENCRYPT, ts->job.key_id,
                                       ts->job.cipher, kUsageAsRepPart, reply));
  encrypts_ += 2;
  pending_ += 2;
}

// The keystream to speculate for a usage (CoverBytes).
size_t Speculator::KeystreamBytes(uint32_t usage) const {
  return CoverBytes(lengths_[usage == kUsageTicket ? 0 : 1]);
}

void Speculator::Hold(std::vector<HeldKeystream>* keystreams) {
  for (HeldKeystream& k : *keystreams) {
    HeldList& held = k.verify                ? held_verify_
                     : !k.pad                ? held_
                     : k.linked_ctr0.empty() ? held_pads_
                                             : held_linked_;
    if (HeldCount() < options_.speculate_max)
      held.push_back(std::move(k));
    else
      ++(k.pad ? pads_wasted_ : wasted_);  // its token stays spent
  }
}

// Expired keystreams go from the front: they are held in the order of
// their Runs, i.e. (almost) of expiry; one behind a later-expiring one
// waits at most the difference, and is never used meanwhile (UseHeld
// checks).
absl::Time Speculator::Prune(absl::Time now) {
  while (!held_.empty() && held_.front().expires <= now) {
    ++wasted_;
    held_.pop_front();
  }
  while (!held_pads_.empty() && held_pads_.front().expires <= now) {
    ++pads_wasted_;
    held_pads_.pop_front();  // the servers drop it after their TTL
  }
  while (!held_linked_.empty() && held_linked_.front().expires <= now) {
    ++pads_wasted_;
    held_linked_.pop_front();
  }
  while (!held_verify_.empty() && held_verify_.front().expires <= now)
    held_verify_.pop_front();
  while (!reserved_.empty() && reserved_.front().second.expires <= now) {
    ++wasted_;
    reserved_.pop_front();
  }
  absl::Time next = absl::InfiniteFuture();
  if (!held_.empty()) next = held_.front().expires;
  if (!held_pads_.empty()) next = std::min(next, held_pads_.front().expires);
  if (!held_linked_.empty())
    next = std::min(next, held_linked_.front().expires);
  if (!held_verify_.empty())
    next = std::min(next, held_verify_.front().expires);
  if (!reserved_.empty())
    next = std::min(next, reserved_.front().second.expires);
  while (!chained_.empty() && chained_.front().expires <= now) chained_.pop_front();
  if (!chained_.empty()) next = std::min(next, chained_.front().expires);
  return next;
}

size_t Speculator::HeldCount() const {
  return held_.size() + held_pads_.size() + held_linked_.size() +
         held_verify_.size() + reserved_.size();
}

// The pad linked to ticket keystream k has its ctr0 at k's +
// kLinkedPadOffset, under k's key and cipher (LinkPad, contract.h).
void Speculator::Unlink(const HeldKeystream& k) {
  std::string pad_ctr0;
  if (held_linked_.empty() || !contract::LinkedPadCtr0(k.ctr0, &pad_ctr0))
    return;
  HeldKeystream pad;
  if (!held_linked_.Take(k.key_id, kUsagePacSignature, k.cipher, pad_ctr0,
                         &pad))
    return;
  pad.linked_ctr0.clear();
  held_pads_.push_back(std::move(pad));
}

void HeldList::push_back(HeldKeystream k) {
  items_.push_back(std::move(k));
  const List::iterator it = std::prev(items_.end());
  auto m = by_key_.find(ViewOf(it->key_id, it->usage, it->cipher));
  if (m == by_key_.end())
    m = by_key_
            .emplace(Key{it->key_id, it->usage, static_cast<int>(it->cipher)},
                     std::deque<Entry>())
            .first;
  ++pushed_;
  m->second.push_back({it, Length(*it), pushed_});
  by_ctr0_.emplace(it->ctr0, std::make_pair(pushed_, it));
}

void HeldList::Unindex(List::iterator it) {
  auto [b, e] = by_ctr0_.equal_range(it->ctr0);
  for (; b != e; ++b)
    if (b->second.second == it) {
      by_ctr0_.erase(b);
      return;
    }
}

HeldList::Ctr0Index::const_iterator HeldList::FindEntry(
    const std::string& key_id, uint32_t usage, kmpc::v1::Cipher cipher,
    const std::string& ctr0) const {
  auto [b, e] = by_ctr0_.equal_range(ctr0);
  auto best = by_ctr0_.end();
  for (; b != e; ++b) {
    const HeldKeystream& h = *b->second.second;
    if (h.key_id != key_id || h.usage != usage || h.cipher != cipher)
      continue;
    if (best == by_ctr0_.end() || b->second.first > best->second.first)
      best = b;
  }
  return best;
}

const HeldKeystream* HeldList::Find(const std::string& key_id, uint32_t usage,
                                    kmpc::v1::Cipher cipher,
                                    const std::string& ctr0) const {
  auto c = FindEntry(key_id, usage, cipher, ctr0);
  return c == by_ctr0_.end() ? nullptr : &*c->second.second;
}

bool HeldList::Take(const std::string& key_id, uint32_t usage,
                    kmpc::v1::Cipher cipher, const std::string& ctr0,
                    HeldKeystream* out) {
  auto c = FindEntry(key_id, usage, cipher, ctr0);
  if (c == by_ctr0_.end()) return false;
  const List::iterator it = c->second.second;
  const uint64_t seq = c->second.first;
  by_ctr0_.erase(c);
  // Its key's list holds it (invariant), in push order: found by its seq.
  auto m = by_key_.find(ViewOf(key_id, usage, cipher));
  std::deque<Entry>& v = m->second;
  v.erase(std::lower_bound(
      v.begin(), v.end(), seq,
      [](const Entry& e, uint64_t s) { return e.seq < s; }));
  if (v.empty()) by_key_.erase(m);
  *out = std::move(*it);
  items_.erase(it);
  return true;
}

// The oldest element overall is the oldest of its key too.
void HeldList::pop_front() {
  auto m = by_key_.find(ViewOf(items_.front().key_id, items_.front().usage,
                               items_.front().cipher));
  m->second.pop_front();
  if (m->second.empty()) by_key_.erase(m);
  Unindex(items_.begin());
  items_.pop_front();
}

void HeldList::clear() {
  by_key_.clear();
  by_ctr0_.clear();
  items_.clear();  // SecureBytes wipes the keystreams
}

void Speculator::Clear() {
  held_.clear();  // SecureBytes wipes the keystreams
  held_pads_.clear();
  held_linked_.clear();
  held_verify_.clear();
  reserved_.clear();
  chained_.clear();  // SecureBytes wipes them
  pending_ = 0;
}

}  // namespace kmpc::kdc
