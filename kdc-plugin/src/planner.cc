#include "planner.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "contract.h"
#include "cts_items.h"

namespace kmpc::kdc {

namespace pb = ::kmpc::v1;

namespace {

// A group id is the exchange id with the top bit set (never 0).
constexpr uint64_t kPlanGroupBit = uint64_t{1} << 63;

bool Signs(const RoleInfo& r) { return r.type == pb::JOB_CHECKSUM; }

}  // namespace

bool RoleOf(Role role, RoleInfo* out) {
  // kdcmpc_plugin.h krb5_kdcmpc_role: type, usage (RFC 4120 7.5.1; 17
  // KRB5_KEYUSAGE_APP_DATA_CKSUM for PAC signatures, 64 for CAMMAC, 56
  // PA-REQ-ENC-PA-REP) and linked-pad slot (contract::kPadSlots).
  static constexpr RoleInfo kRoles[] = {
      {pb::JOB_DECRYPT, 1, -1},          {pb::JOB_DECRYPT, 2, -1},
      {pb::JOB_DECRYPT, 2, -1},          {pb::JOB_DECRYPT, 2, -1},
      {pb::JOB_CHECKSUM, 56, -1},        {pb::JOB_ENCRYPT, 2, -1},
      {pb::JOB_ENCRYPT, 3, -1},          {pb::JOB_CHECKSUM, 17, 0},
      {pb::JOB_CHECKSUM, 17, 1},         {pb::JOB_CHECKSUM, 64, 2},
      {pb::JOB_CHECKSUM, 17, 3},         {pb::JOB_CHECKSUM, 64, -1},
      {pb::JOB_VERIFY_CHECKSUM, 17, 0},  {pb::JOB_VERIFY_CHECKSUM, 17, 1},
      {pb::JOB_VERIFY_CHECKSUM, 64, 2},  {pb::JOB_VERIFY_CHECKSUM, 17, 3},
      // FAST's encrypted challenge (RFC 6113 5.4.6): the client's (the
      // gate of a FAST AS exchange) and the KDC's.
      {pb::JOB_DECRYPT, 54, -1},         {pb::JOB_ENCRYPT, 55, -1},
      // The full-PAC signature (MIT 1.21), made and checked at slot 4.
      {pb::JOB_CHECKSUM, 17, 4},         {pb::JOB_VERIFY_CHECKSUM, 17, 4}};
  const int r = static_cast<int>(role);
  if (r < 1 || r > static_cast<int>(std::size(kRoles))) return false;
  *out = kRoles[r - 1];
  return true;
}

const char* MissName(Miss m) {
  switch (m) {
    case Miss::kBound: return "bound";
    case Miss::kCtr0: return "ctr0";
    case Miss::kExpired: return "expired";
    case Miss::kBudget: return "budget";
    case Miss::kFailover: return "failover";
  }
  return "unknown";
}

const char* ExchangeName(ExchangeKind k) {
  static const char* const kNames[] = {"as",  "as_fast",  "tgs",      "renew",
                                       "forward", "u2u", "s4u2self", "s4u2proxy"};
  const int i = static_cast<int>(k);
  return i >= 1 && i <= 8 ? kNames[i - 1] : "unknown";
}

const char* RoleName(Role r) {
  static const char* const kNames[] = {
      "timestamp",  "armor",      "header_ticket", "second_ticket",
      "req_checksum", "ticket",   "reply",         "sig_server",
      "sig_kdc",    "cammac_kdc", "sig_ticket",    "cammac_svc",
      "verify_server", "verify_kdc", "verify_cammac", "verify_ticket",
      "challenge",  "kdc_challenge", "sig_full", "verify_full"};
  const int i = static_cast<int>(r);
  return i >= 1 && i <= static_cast<int>(std::size(kNames)) ? kNames[i - 1] : "unknown";
}

// Why item i of `plan` is not acceptable; empty if it is.
static std::string ItemProblem(const Plan& plan, size_t i) {
  const PlanItem& p = plan.items[i];
  const size_t n = plan.items.size();
  RoleInfo info;
  if (!RoleOf(p.role, &info)) return "an unknown role";
  if (p.type != info.type || p.usage != info.usage)
    return absl::StrCat("a job type or key usage other than its role's (",
                        RoleName(p.role), ")");
  if (!contract::KnownCipher(p.cipher)) return "an unknown cipher";
  if (contract::CtsCipher(p.cipher))
    if (std::string why = CtsItemProblem(p); !why.empty()) return why;
  if (std::string why = CtsSpliceProblem(plan, i); !why.empty()) return why;
  if (p.key_id.size() != contract::kKeyIdSize) return "a key id of the wrong size";
  if (p.length > contract::kMaxJobBytes) return "a length over the job limit";
  if ((p.flags & kItemGated) &&
      (p.gate < 0 || static_cast<size_t>(p.gate) >= n ||
       plan.items[p.gate].type != pb::JOB_DECRYPT || !plan.items[p.gate].given))
    return "a gate that is no DECRYPT given at begin";
  if (p.ticket >= 0 && static_cast<size_t>(p.ticket) >= n)
    return "a ticket index outside the plan";
  if (Signs(info) && p.ticket >= 0 &&
      (info.slot < 0 || plan.items[p.ticket].role != Role::kTicket))
    return "a linked signature whose ticket is no TICKET item";
  if (info.type == pb::JOB_VERIFY_CHECKSUM &&
      (p.ticket >= 0 ? plan.items[p.ticket].type != pb::JOB_DECRYPT ||
                           !plan.items[p.ticket].given
                     : p.ctr0.size() != contract::kCtr0Size))
    return "a verification with neither a given DECRYPT nor a 16-byte ctr0";
  return {};
}

absl::Status Planner::Check(const Plan& plan) {
  const size_t n = plan.items.size();
  if (n < 1 || n > kMaxPlanItems)
    return absl::InvalidArgumentError(
        absl::StrCat("a plan has 1 to ", kMaxPlanItems, " items, not ", n));
  int gate = -1, tickets = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::string why = ItemProblem(plan, i); !why.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("plan item ", i, " has ", why));
    const PlanItem& p = plan.items[i];
    tickets += p.role == Role::kTicket;
    if (!(p.flags & kItemGated)) continue;
    if (gate >= 0 && p.gate != gate)
      return absl::InvalidArgumentError("a plan has one gate at most");
    gate = p.gate;
  }
  if (tickets > 1)
    return absl::InvalidArgumentError("a plan has one TICKET item at most");
  return absl::OkStatus();
}

Planner::Planner(const BatcherOptions& options, GateBook* gates, size_t cluster)
    : options_(options), gates_(*gates), cluster_(cluster) {}

size_t Planner::Preparable(const Exchange& x) {
  size_t n = 0;
  for (const PlanItem& p : x.plan.items)
    n += !p.given && p.type != pb::JOB_DECRYPT;
  return n;
}

const PendingJob* Planner::GivenJob(const std::vector<PendingJob>& given,
                                    int item) {
  for (const PendingJob& q : given)
    if (q.item == item) return &q;
  return nullptr;
}

// The gate of a plan that gates nothing: its aes*-cts HEADER_TICKET (a
// renewal of a ticket to a service whose key is a handle, the krbtgt in
// the KDB) or, with no header ticket in the plan, its aes*-cts
// SECOND_TICKET (an S4U2Proxy evidence ticket or a user-to-user second
// ticket whose header ticket the KDC decrypted itself: kdc_mpc_back.c).
// Its verified tag proves the shapes given with it, its own among them
// (gate_book.h): a ticket of that length verified under the service's key,
// so the next one takes no compile token. -1 if there is none.
static int UngatedCtsGate(const Plan& plan) {
  for (const Role role : {Role::kHeaderTicket, Role::kSecondTicket}) {
    for (size_t i = 0; i < plan.items.size(); ++i) {
      const PlanItem& p = plan.items[i];
      if (p.role == Role::kHeaderTicket && role == Role::kSecondTicket) return -1;
      if (p.role == role && p.given && contract::CtsCipher(p.cipher))
        return static_cast<int>(i);
    }
  }
  return -1;
}

bool GatedOnItsTimestamp(const Plan& plan, size_t i) {
  const PlanItem& p = plan.items[i];
  if ((p.role != Role::kReply && p.role != Role::kReqChecksum) ||
      !(p.flags & kItemGated) || contract::CtsCipher(p.cipher))
    return false;
  const PlanItem& g = plan.items[p.gate];
  return g.key_id == p.key_id && g.cipher == p.cipher;
}

// Whether item i may run alone after a miss, gated on a copy of the gate
// (Planner::Take): not given, and GatedOnItsTimestamp.
static bool RegatedAlone(const Plan& plan, size_t i) {
  return !plan.items[i].given && GatedOnItsTimestamp(plan, i);
}

absl::Status Planner::Admit(uint64_t id, Plan plan, std::vector<PendingJob>* given,
                            std::vector<PendingJob>* prepared) {
  Exchange& x = exchanges_[id];
  x.plan = std::move(plan);
  x.group = kPlanGroupBit | id;
  int gate = -1;
  for (const PlanItem& p : x.plan.items)
    if (p.flags & kItemGated) gate = p.gate;
  const int verdict = gate >= 0 ? gate : UngatedCtsGate(x.plan);
  for (PendingJob& q : *given) {
    q.exchange_id = id;
    q.group = x.group;
    q.gate = q.item == verdict;
    // The servers release only an ENCRYPT or CHECKSUM on a condition
    // (kmpc.proto Job.release_if_ok): a given DECRYPT is never gated.
    q.gated = (x.plan.items[q.item].flags & kItemGated) &&
              q.job.type != pb::JOB_DECRYPT;
    x.slots[q.item].no_miss = true;
    if (gate >= 0 && q.item == gate && q.job.type == pb::JOB_DECRYPT)
      for (size_t i = 0; i < x.plan.items.size() && !x.gate_copy; ++i)
        if (RegatedAlone(x.plan, i)) x.gate_copy = GateBook::Regate(q);
  }
  const absl::Time now = given->empty() ? absl::Now() : given->front().enqueued;
  const size_t n = Preparable(x);
  bool ok = options_.speculate && held_ + pending_ + n <= options_.speculate_max;
  // The compile budget, the proven shapes (what is held back) and, for a
  // plan with a gate, the budget token (gate_book.h).
  const GateBook::Admission a = gates_.Admit(cluster_, id, given, ok && gate >= 0, now);
  if (a.decision == GateBook::Decision::kRefuse) {
    exchanges_.erase(id);
    return a.why;
  }
  if (ok && gate >= 0) ok = a.token;
  for (size_t i = 0; i < x.plan.items.size(); ++i) {
    const PlanItem& p = x.plan.items[i];
    if (p.given || p.type == pb::JOB_DECRYPT) {
      x.slots[i].no_miss = true;  // given now, or a Run of its own anyway
    } else if (ok) {
      Prepare(id, &x, static_cast<int>(i), *given, prepared);
    }  // else its slot stays kNone, why kBudget
  }
  for (PendingJob& q : *prepared) q.enqueued = now;
  gates_.Admit(cluster_, id, prepared, /*token=*/false, now);
  // Counted as sent when they go: now, or with the held-back job after its
  // gate verified (Dispatcher::Release), never after a failed one.
  for (const PendingJob& q : *prepared) CountSent(q);
  return absl::OkStatus();
}

void Planner::Prepare(uint64_t id, Exchange* x, int item,
                      const std::vector<PendingJob>& given,
                      std::vector<PendingJob>* prepared) {
  const PlanItem& p = x->plan.items[item];
  Slot& s = x->slots[item];
  RoleInfo info;
  RoleOf(p.role, &info);  // Check passed
  PendingJob cause;
  cause.group = x->group;
  const pb::JobType type =
      p.type == pb::JOB_ENCRYPT ? pb::JOB_ENCRYPT : pb::JOB_PAD;
  PendingJob job =
      PreparedJob(cause, type, p.key_id, p.cipher, p.usage, p.length);
  if (p.type == pb::JOB_CHECKSUM && p.ticket >= 0) {
    job.link_pad = true;
    job.pad_slot = static_cast<uint32_t>(info.slot);
  } else if (p.type == pb::JOB_VERIFY_CHECKSUM) {
    std::string ctr0 = p.ctr0;
    if (p.ticket >= 0) {
      const PendingJob* d = GivenJob(given, p.ticket);
      // A CBC-CTS ticket (under a service's aes*-cts key) has no counter:
      // its KDC signatures were made with unlinked pads, whose ctr0 is in
      // its PAC. No pad at a counter taken from its first block, which
      // the client chose and no tag has checked yet.
      if (d != nullptr && CtsJob(d->job)) {
        s.why = Miss::kCtr0;
        return;
      }
      if (d == nullptr || d->job.input.size() < contract::kCiphertextOverhead ||
          !contract::LinkedPadCtr0(
              absl::string_view(reinterpret_cast<const char*>(d->job.input.data()),
                                contract::kCtr0Size),
              static_cast<uint32_t>(info.slot), &ctr0)) {
        s.why = Miss::kCtr0;
        return;
      }
    }
    job.job.checksum = std::move(ctr0);
  }
  // ENCRYPTs and verification pads are released only if the gate decrypts;
  // a signing pad reveals nothing (its ctr0 is public).
  job.gated = (p.flags & kItemGated) &&
              (type == pb::JOB_ENCRYPT || !job.job.checksum.empty());
  job.exchange_id = id;
  job.item = item;
  s.state = State::kInFlight;
  ++pending_;
  prepared->push_back(std::move(job));
}

void Planner::CountSent(const PendingJob& q) {
  if (q.job.type == pb::JOB_PAD)
    ++counts_.pads_drawn;
  else
    ++counts_.keystreams;
}

absl::Status Planner::Match(uint64_t id, int item, const Job& job) const {
  const Exchange& x = exchanges_.at(id);
  if (item < 0 || static_cast<size_t>(item) >= x.plan.items.size())
    return absl::InvalidArgumentError(
        absl::StrCat("item ", item, " is not in the exchange's plan"));
  const PlanItem& p = x.plan.items[item];
  if (p.given)
    return absl::InvalidArgumentError(
        absl::StrCat("plan item ", item, " was given at begin"));
  if (job.type != p.type || job.cipher != p.cipher || job.key_id != p.key_id ||
      job.usage != p.usage)
    return absl::InvalidArgumentError(absl::StrCat(
        "the job does not match plan item ", item, " (", RoleName(p.role), ")"));
  if ((p.flags & kItemExact) && p.type != pb::JOB_DECRYPT &&
      job.input.size() != p.length)
    return absl::InvalidArgumentError(absl::StrCat(
        "plan item ", item, " is exact: ", p.length, " bytes, not ",
        job.input.size()));
  return absl::OkStatus();
}

std::optional<Miss> Planner::Take(uint64_t id, int item, PendingJob* q,
                                  bool* parked, std::vector<PendingJob>* group) {
  Exchange& x = exchanges_.at(id);
  Slot& s = x.slots[item];
  q->exchange_id = id;
  q->item = item;
  *parked = s.state == State::kInFlight && !s.parked;
  if (*parked) {
    s.parked = std::move(*q);
    return std::nullopt;
  }
  std::optional<Miss> why = TakeSlot(&x, item, q);
  if (why && x.gate_copy && RegatedAlone(x.plan, static_cast<size_t>(item))) {
    group->push_back(GateBook::Regate(*x.gate_copy));
    group->back().enqueued = q->enqueued;
    q->group = x.group;
    q->gated = true;
  }
  return why;
}

void Planner::Unpark(uint64_t id, std::vector<PendingJob>* ready) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end()) return;
  Exchange& x = it->second;
  for (size_t i = 0; i < x.plan.items.size(); ++i) {
    Slot& s = x.slots[i];
    if (!s.parked || s.state == State::kInFlight) continue;
    PendingJob q = std::move(*s.parked);
    s.parked.reset();
    TakeSlot(&x, static_cast<int>(i), &q);
    ready->push_back(std::move(q));
  }
}

void Planner::Lost(uint64_t id, int item, bool sent) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end() || item < 0 ||
      static_cast<size_t>(item) >= it->second.plan.items.size())
    return;
  Slot& s = it->second.slots[item];
  if (s.state != State::kInFlight) return;  // held already
  if (sent && it->second.plan.items[item].type == pb::JOB_ENCRYPT)
    ++counts_.keystreams_wasted;
  --pending_;
  s.state = State::kNone;
  s.why = Miss::kFailover;
}

std::optional<Miss> Planner::TakeSlot(Exchange* xp, int item, PendingJob* q) {
  Exchange& x = *xp;
  Slot& s = x.slots[item];
  std::optional<Miss> why;
  switch (s.state) {
    case State::kHeld:
      why = TakeHeld(&x, item, q);
      break;
    case State::kChained:
      // The chained answer is this item's if its message is the first
      // signature (ctr0 || tag); another message takes no pad (its pad
      // went into the chain).
      if (s.chained && s.chained->expires > q->enqueued &&
          s.chained->message == q->job.input) {
        q->output = std::move(s.chained->checksum);
        q->chained_done = true;
        q->blocks = 0;
        ++counts_.chained_used;
      } else {
        why = s.chained ? Miss::kCtr0 : Miss::kExpired;
      }
      s.chained.reset();  // wipes it (SecureBytes)
      s.state = State::kUsed;
      break;
    case State::kNone:
      if (!s.no_miss) why = s.why;
      break;
    case State::kInFlight:  // a second job of the item while one is parked
      why = Miss::kFailover;
      break;
    case State::kUsed:  // submitted again: what was prepared is gone
      why = Miss::kExpired;
      break;
  }
  if (why) x.misses.emplace_back(x.plan.items[item].role, *why);
  return why;
}

std::optional<Miss> Planner::TakeHeld(Exchange* x, int item, PendingJob* q) {
  Slot& s = x->slots[item];
  const PlanItem& p = x->plan.items[item];
  const size_t len = q->job.input.size();
  std::optional<Miss> why;
  if (s.held.expires <= q->enqueued) {
    why = Miss::kExpired;
  } else if (p.type == pb::JOB_ENCRYPT) {
    if (len > s.held.keystream.size()) why = Miss::kBound;
  } else if (len > s.held.pad_length) {
    why = Miss::kBound;
  } else if (p.type == pb::JOB_VERIFY_CHECKSUM &&
             q->job.checksum.compare(0, contract::kCtr0Size, s.held.ctr0) != 0) {
    why = Miss::kCtr0;
  }
  if (why) {
    Wipe(&s);
    s.state = State::kUsed;
    return why;
  }
  HeldKeystream k = std::move(s.held);
  s.held = HeldKeystream();
  s.state = State::kUsed;
  Unheld(k);
  if (p.type == pb::JOB_ENCRYPT) {
    ++counts_.keystreams_used;
    FinalizeWith(q, std::move(k));
    return std::nullopt;
  }
  if (p.type == pb::JOB_VERIFY_CHECKSUM)
    ++counts_.verify_pads_used;
  else
    ++counts_.pads_used;
  const uint32_t pad_length = k.pad_length;
  SignWith(q, std::move(k));
  MaybeChain(q->exchange_id, x, item, q, pad_length);
  return std::nullopt;
}

// A SIG_SERVER takes the pad of its plan's SIG_KDC under the same key id,
// cipher and usage along as a chain (the KDC signature is a checksum of
// the server signature: MIT pac_sign.c), when its pad's powers of H allow.
void Planner::MaybeChain(uint64_t id, Exchange* x, int item, PendingJob* q,
                         uint32_t pad_length) {
  const PlanItem& p = x->plan.items[item];
  if (!options_.chain_signatures || p.role != Role::kSigServer ||
      !ChainFits(q->job.input.size(), pad_length))
    return;
  for (size_t j = 0; j < x->plan.items.size(); ++j) {
    const PlanItem& k = x->plan.items[j];
    Slot& s = x->slots[j];
    if (k.role != Role::kSigKdc || k.key_id != p.key_id || k.cipher != p.cipher ||
        k.usage != p.usage || s.state != State::kHeld ||
        s.held.expires <= q->enqueued ||
        s.held.pad_length < contract::kChecksumSize)
      continue;
    q->chain_batch_id = std::move(s.held.run_batch_id);
    q->chain_job_id = s.held.run_job_id;
    q->chain_ctr0 = std::move(s.held.ctr0);
    q->chain_item = static_cast<int>(j);
    q->exchange_id = id;
    Unheld(s.held);
    s.held = HeldKeystream();
    s.state = State::kChained;
    ++counts_.chains_sent;
    ++counts_.pads_used;
    return;
  }
}

void Planner::Hold(HeldKeystream k) {
  auto it = exchanges_.find(k.exchange_id);
  if (it == exchanges_.end() || k.item < 0 ||
      static_cast<size_t>(k.item) >= kMaxPlanItems)
    return;  // ended meanwhile: k is wiped
  Slot& s = it->second.slots[k.item];
  if (s.state != State::kInFlight) return;
  --pending_;
  if (held_ >= options_.speculate_max) {
    s.state = State::kNone;
    s.why = Miss::kBudget;
    return;
  }
  expiry_.push_back({k.expires, {k.exchange_id, k.item}});
  ++held_;
  if (k.pad) ++held_pads_;
  s.held = std::move(k);
  s.state = State::kHeld;
}

void Planner::KeepChained(ChainedSignature c) {
  auto it = exchanges_.find(c.exchange_id);
  if (it == exchanges_.end() || c.item < 0 ||
      static_cast<size_t>(c.item) >= kMaxPlanItems)
    return;
  Slot& s = it->second.slots[c.item];
  if (s.state == State::kChained) s.chained = std::move(c);
}

void Planner::CountRun(uint64_t id) {
  auto it = exchanges_.find(id);
  if (it != exchanges_.end()) ++it->second.runs;
}

void Planner::CountMiss(uint64_t id, int item, Miss why) {
  auto it = exchanges_.find(id);
  if (it == exchanges_.end() || item < 0 ||
      static_cast<size_t>(item) >= it->second.plan.items.size())
    return;
  it->second.misses.emplace_back(it->second.plan.items[item].role, why);
}

void Planner::Unheld(const HeldKeystream& h) {
  --held_;
  if (h.pad) --held_pads_;
}

void Planner::Wipe(Slot* s) {
  if (s->state == State::kHeld) {
    Unheld(s->held);
    ++(s->held.pad ? counts_.pads_wasted : counts_.keystreams_wasted);
  }
  if (s->state == State::kInFlight) --pending_;
  s->held = HeldKeystream();  // SecureBytes wipes the keystream
  s->chained.reset();
  s->state = State::kNone;
}

ExchangeRecord Planner::End(uint64_t id) {
  ExchangeRecord r;
  auto it = exchanges_.find(id);
  if (it == exchanges_.end()) return r;
  Exchange& x = it->second;
  r.kind = x.plan.kind;
  r.runs = x.runs;
  r.misses = std::move(x.misses);
  for (Slot& s : x.slots) Wipe(&s);
  exchanges_.erase(it);
  gates_.End(id);
  return r;
}

absl::Time Planner::Prune(absl::Time now) {
  while (!expiry_.empty() && expiry_.front().first <= now) {
    const auto [id, item] = expiry_.front().second;
    expiry_.pop_front();
    auto it = exchanges_.find(id);
    if (it == exchanges_.end()) continue;
    Slot& s = it->second.slots[item];
    if (s.state != State::kHeld || s.held.expires > now) continue;
    Wipe(&s);
    s.why = Miss::kExpired;
  }
  return expiry_.empty() ? absl::InfiniteFuture() : expiry_.front().first;
}

void Planner::Clear() {
  exchanges_.clear();  // SecureBytes wipes the keystreams
  gates_.Clear(cluster_);
  expiry_.clear();
  held_ = held_pads_ = pending_ = 0;
}

}  // namespace kmpc::kdc
