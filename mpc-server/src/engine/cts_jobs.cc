#include "engine/cts_jobs.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "cts/cts.h"
#include "cts/masked.h"
#include "protocol/sha256.h"
#include "share/replicated.h"

namespace kmpc::engine {
namespace {

void WipeWords(std::vector<uint64_t>& v) {
  OPENSSL_cleanse(v.data(), v.size() * sizeof(uint64_t));
}

// One shape's lanes: the tasks, and the packed inputs and outputs of the
// two share components.
struct Group {
  std::vector<CtsTask*> tasks;
  size_t wn = 0;
  std::array<std::vector<uint64_t>, 2> in, out;
  ~Group() {
    for (auto* v : {&in[0], &in[1], &out[0], &out[1]}) WipeWords(*v);
  }
};

// Bytes a public value of a lane takes in component c of this party's
// shares: the value where the party holds it (share/replicated.h
// HoldsPublicIn), zeros elsewhere, so the three parties' components sum
// to it.
void AppendPublic(std::vector<uint8_t>& b, int party, int c, const std::vector<uint8_t>& v) {
  if (share::HoldsPublicIn(party, c))
    b.insert(b.end(), v.begin(), v.end());
  else
    b.insert(b.end(), v.size(), 0);
}

// The public lane inputs of a class program after the dealt message (cts.h
// EncryptClassProgram): zeros up to 64 * HashBlocks(n), the SHA-1
// padding; a splice's selector goes after D. Each server fills them in
// from the job's public length: the KDC deals none of them, so it cannot
// choose other padding.
size_t ClassTailBytes(size_t n) {
  return 64 * cts::HashBlocks(n) - n + cts::PaddingBytes(n).size();
}

// Lane bytes of component c of a task: its material's share, then its
// dealt inputs (engine/cts_jobs.h CtsTask), the ENCRYPT's confounder
// first, and a class program's public inputs.
std::vector<uint8_t> LaneBytes(const CtsTask& t, int party, int c,
                               const std::array<uint8_t, 16>& conf) {
  // Sized once: a reallocation would free a copy of the material's share
  // (the round keys' and HMAC states' component) unwiped.
  std::vector<uint8_t> b;
  const absl::Span<const uint8_t> splice_material =
      t.splice_material != nullptr ? absl::MakeConstSpan(t.splice_material->share[c])
                                   : absl::Span<const uint8_t>();
  const bool classed = t.type == pb::JOB_ENCRYPT || t.type == pb::JOB_CHECKSUM;
  // A splice's one-hot selector (public): a signed ticket's, or a reply's.
  const std::vector<uint8_t> sel =
      t.splice_m == 0 ? std::vector<uint8_t>()
      : t.ticket      ? cts::TicketSelector(t.splice_off)
                      : cts::SpliceSelector(t.splice_off);
  b.reserve(t.material->share[c].size() + splice_material.size() + conf.size() +
            t.shared_in[c].size() + t.window[c].size() + (classed ? ClassTailBytes(t.n) : 0) +
            sel.size() + t.sign[c].size());
  b.assign(t.material->share[c].begin(), t.material->share[c].end());
  // A splice's checksum material follows the reply's (cts.h
  // SpliceEncryptProgram); P || D follow the confounder as dealt.
  b.insert(b.end(), splice_material.begin(), splice_material.end());
  // A FAST key's KDC half, right after K's PRF material (cts.h
  // Cf2EncryptProgram's inputs); the rest of shared_in is the message.
  absl::Span<const uint8_t> shared = t.shared_in[c];
  if (t.cf2_bytes != 0) {
    b.insert(b.end(), shared.begin(), shared.begin() + t.cf2_bytes);
    shared.remove_prefix(t.cf2_bytes);
  }
  if (t.type == pb::JOB_ENCRYPT) b.insert(b.end(), conf.begin(), conf.end());
  if (!classed) {
    b.insert(b.end(), shared.begin(), shared.end());
    // A DECRYPT's freshness window after C || T (cts.h DecryptProgram).
    if (CtsHasWindow(t.type, t.cf2_bytes, t.usage))
      b.insert(b.end(), t.window[c].begin(), t.window[c].end());
    return b;
  }
  // P (or a CHECKSUM's D), then the zeros past n and the padding, then a
  // splice's D and its selector.
  const size_t msg = t.type == pb::JOB_ENCRYPT ? t.n - cts::kBlock : t.n;
  b.insert(b.end(), shared.begin(), shared.begin() + msg);
  b.insert(b.end(), 64 * cts::HashBlocks(t.n) - t.n, 0);
  AppendPublic(b, party, c, cts::PaddingBytes(t.n));
  b.insert(b.end(), shared.begin() + msg, shared.end());
  if (!sel.empty()) AppendPublic(b, party, c, sel);
  if (t.ticket) b.insert(b.end(), t.sign[c].begin(), t.sign[c].end());
  return b;
}

// Packs a group's inputs; every ENCRYPT draws its confounder here, in the
// order of `tasks` (the same on the three parties).
absl::Status PackGroup(Group& g, protocol::Prss& prss) {
  const int party = prss.party();
  const cts::Program& p = *g.tasks[0]->program;
  g.wn = (g.tasks.size() + 63) / 64;
  for (int c = 0; c < 2; ++c) {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<absl::Span<const uint8_t>> lanes;
    std::array<std::array<uint8_t, 16>, 2> conf{};
    bytes.reserve(g.tasks.size());
    for (CtsTask* t : g.tasks) {
      if (c == 0 && t->type == pb::JOB_ENCRYPT) {
        prss.RandomShares(conf[0].data(), conf[1].data(), 16);
        t->out[0].assign(conf[1].begin(), conf[1].end());  // parked until c == 1
      }
      std::array<uint8_t, 16> mine = conf[0];
      if (c == 1 && t->type == pb::JOB_ENCRYPT)
        std::copy(t->out[0].begin(), t->out[0].end(), mine.begin());
      bytes.push_back(LaneBytes(*t, party, c, mine));
      OPENSSL_cleanse(mine.data(), mine.size());
      if (bytes.back().size() * 8 != p.inputs) {
        for (auto& v : bytes) share::Wipe(v);
        return absl::InternalError("aes*-cts lane of the wrong size for its program");
      }
    }
    for (auto& v : bytes) lanes.push_back(v);
    g.in[c] = cts::PackLanes(lanes, g.wn);
    g.out[c].assign(p.outputs * g.wn, 0);
    for (auto& v : bytes) share::Wipe(v);
    OPENSSL_cleanse(conf.data(), sizeof conf);
  }
  for (CtsTask* t : g.tasks) share::Wipe(t->out[0]);
  return absl::OkStatus();
}

// Each lane's outputs into its task (CtsTask: out, and a DECRYPT's
// mismatch byte). An ENCRYPT's class program outputs every CBC block: cut
// to its own n (cts.h CutClassOutput) here, on each share component alike,
// so the bytes it drops (the stolen block's tail) never leave the server.
void UnpackGroup(Group& g) {
  for (size_t l = 0; l < g.tasks.size(); ++l) {
    CtsTask& t = *g.tasks[l];
    for (int c = 0; c < 2; ++c) {
      t.out[c] = cts::UnpackLane(g.out[c], g.wn, l);
      if (t.type == pb::JOB_ENCRYPT) {
        std::vector<uint8_t> all = std::move(t.out[c]);
        t.out[c] = cts::CutClassOutput(t.n, all);
        share::Wipe(all);
      }
      if (t.type == pb::JOB_DECRYPT) {
        t.mismatch[c] = t.out[c].back();
        t.out[c].back() = 0;  // past size() after the pop: Wipe would miss it
        t.out[c].pop_back();
      }
    }
  }
}

}  // namespace

CtsCircuitCounters& CtsCircuitCounters::Shared() {
  static CtsCircuitCounters* counters = new CtsCircuitCounters();
  return *counters;
}

bool CtsHasWindow(pb::JobType type, size_t cf2_bytes, uint32_t usage) {
  return type == pb::JOB_DECRYPT && (cf2_bytes != 0 || usage != contract::kTicketUsage);
}

std::string CtsTimeWindow(int64_t now, uint32_t skew_s) {
  constexpr int64_t kLast = 253402300799;  // 9999-12-31T23:59:59Z
  std::string out;
  for (int64_t t : {now - int64_t{skew_s}, now + int64_t{skew_s}}) {
    const time_t clamped = static_cast<time_t>(std::clamp<int64_t>(t, 0, kLast));
    struct tm tm;
    gmtime_r(&clamped, &tm);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04d%02d%02d%02d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                  tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    out.append(buf, cts::kTsDigits);
  }
  return out;
}

void CtsReleaseLimiter::Refill(Bucket& b, uint32_t limit, absl::Time now) {
  const double add = absl::ToDoubleSeconds(now - b.at) * limit / 60.0;
  if (add > 0) {
    b.tokens = std::min<double>(limit, b.tokens + add);
    b.at = now;
  }
}

bool CtsReleaseLimiter::Take(const std::string& deal, uint32_t limit, absl::Time now) {
  if (limit == 0) return true;
  std::lock_guard<std::mutex> l(mu_);
  auto [it, added] = buckets_.try_emplace(deal, Bucket{static_cast<double>(limit), now});
  Refill(it->second, limit, now);
  if (it->second.tokens < 1) return false;
  it->second.tokens -= 1;
  if (added && buckets_.size() > kMaxKeys) {
    // A full bucket is as good as none (never the one just taken from).
    for (auto b = buckets_.begin(); b != buckets_.end();) {
      Refill(b->second, limit, now);
      b = b->second.tokens >= limit ? buckets_.erase(b) : std::next(b);
    }
  }
  return true;
}

void CtsReleaseLimiter::GiveBack(const std::string& deal, uint32_t limit, absl::Time now) {
  if (limit == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = buckets_.find(deal);
  if (it == buckets_.end()) return;  // forgotten full: nothing to return
  Refill(it->second, limit, now);
  it->second.tokens = std::min<double>(limit, it->second.tokens + 1);
}

void CtsReleaseLimiter::Clear() {
  std::lock_guard<std::mutex> l(mu_);
  buckets_.clear();
}

CtsTask::~CtsTask() {
  for (auto& v : out) share::Wipe(v);
  OPENSSL_cleanse(mismatch.data(), mismatch.size());
  OPENSSL_cleanse(sign.data(), sizeof(sign));
}

uint64_t CtsCost::Verifies(uint64_t verify_words) const {
  if (and_words == 0) return 0;
  const uint64_t by_words = (and_words + verify_words - 1) / verify_words;
  return std::min<uint64_t>(static_cast<uint64_t>(depth), by_words);
}

namespace {

// Per shape, as RunCtsTasks groups (decided alike on every party): the
// task whose programs RunCtsTasks runs (the first) and the lane words
// (64 tasks a word).
std::map<CtsProgramCache::Shape, std::pair<const CtsTask*, uint64_t>> WordsByShape(
    absl::Span<const CtsTask> tasks) {
  std::map<CtsProgramCache::Shape, std::pair<const CtsTask*, uint64_t>> lanes;
  for (const CtsTask& t : tasks) {
    auto& l = lanes[ShapeOf(t)];
    if (l.first == nullptr) l.first = &t;
    ++l.second;
  }
  for (auto& [shape, tn] : lanes) tn.second = (tn.second + 63) / 64;
  return lanes;
}

}  // namespace

CtsCost CostOf(absl::Span<const CtsTask> tasks) {
  CtsCost c;
  for (const auto& [shape, tw] : WordsByShape(tasks)) {
    const auto& [t, words] = tw;
    c.and_words += CtsProgramCache::kMaskedAndsPerAnd * t->program->ands * words;
    c.depth = std::max(c.depth, t->program->depth + CtsProgramCache::kMaskedPrepRounds);
  }
  return c;
}

uint64_t RunWords(absl::Span<const CtsTask> tasks) {
  uint64_t n = 0;
  for (const auto& [shape, tw] : WordsByShape(tasks)) n += tw.first->program->ands * tw.second;
  return n;
}

namespace {

// Whether every party holds the same masked programs for the Run's shapes
// and chose to run them (`digest`: a hash of theirs, in group order;
// `mine` false: not all compiled, or the Run past this party's size).
// Three ring messages: each party's bit and digest; its bit AND its
// successor's (digests equal); then the outcome, which each party
// compares with its successor's: a party that told its neighbours
// different things cannot split the honest parties between the two
// protocols (the honest party whose successor is the other sees it, a
// detected deviation, before any message of either); the outcome is
// hashed with the opened values too.
absl::StatusOr<bool> AgreeAll(protocol::Rep3& rep3, bool mine,
                              const std::array<uint8_t, 32>& digest) {
  std::array<uint8_t, 33> out{}, in{};
  out[0] = mine;
  std::copy(digest.begin(), digest.end(), out.begin() + 1);
  absl::Status st = rep3.channel().Exchange(out, absl::MakeSpan(in));
  if (!st.ok()) return st;
  if (in[0] > 1) return protocol::IntegrityFailure();
  uint8_t both = mine && in[0] == 1 && std::equal(in.begin() + 1, in.end(), out.begin() + 1),
          next = 0;
  st = rep3.channel().Exchange(absl::MakeConstSpan(&both, 1), absl::MakeSpan(&next, 1));
  if (!st.ok()) return st;
  if (next > 1) return protocol::IntegrityFailure();
  uint8_t all = both && next, theirs = 0;
  st = rep3.channel().Exchange(absl::MakeConstSpan(&all, 1), absl::MakeSpan(&theirs, 1));
  if (!st.ok()) return st;
  if (theirs != all) return protocol::IntegrityFailure();
  if (rep3.log() != nullptr) rep3.log()->AddOpened(absl::MakeConstSpan(&all, 1));
  return all == 1;
}

}  // namespace

absl::Status RunCtsTasks(protocol::Rep3& rep3, protocol::Prss& prss, size_t verify_words,
                         absl::Span<CtsTask> tasks, uint64_t masked_max_and_words) {
  if (tasks.empty()) return absl::OkStatus();
  // Groups by shape (type, nr, n), in order of first appearance (the same
  // on every party: the tasks are). Not by program object: the cache is
  // per process and evicts, so one party may hold two equal programs for
  // one shape in a batch where the others hold one; grouping by address
  // would pack other lanes there and put the ring out of step.
  std::vector<std::unique_ptr<Group>> groups;
  std::map<CtsProgramCache::Shape, Group*> by_shape;
  for (CtsTask& t : tasks) {
    Group*& g = by_shape[ShapeOf(t)];
    if (g == nullptr) {
      groups.push_back(std::make_unique<Group>());
      g = groups.back().get();
    }
    g->tasks.push_back(&t);
  }
  std::vector<cts::Job> jobs;
  for (auto& g : groups) {
    if (absl::Status st = PackGroup(*g, prss); !st.ok()) return st;
    jobs.push_back(cts::Job{g->tasks[0]->program.get(), g->wn,
                            {absl::MakeConstSpan(g->in[0]), absl::MakeConstSpan(g->in[1])},
                            {absl::MakeSpan(g->out[0]), absl::MakeSpan(g->out[1])},
                            g->tasks.size()});
  }
  std::vector<std::shared_ptr<const cts::MaskedProgram>> masked;
  protocol::Sha256 h;
  bool held = true;
  for (auto& g : groups) {
    masked.push_back(g->tasks[0]->masked);
    held = held && masked.back() != nullptr;
    if (held) h.Update(masked.back()->digest);
  }
  std::array<uint8_t, 32> digest{};
  if (absl::Status st = h.Final(digest); !st.ok()) return st;
  const bool chosen = held && RunWords(tasks) <= masked_max_and_words;
  absl::StatusOr<bool> use_masked = AgreeAll(rep3, chosen, digest);
  if (!use_masked.ok()) return use_masked.status();
  uint64_t ands = 0;
  int depth = 0;
  if (*use_masked) {
    std::vector<cts::MaskedJob> mjobs;
    for (size_t k = 0; k < jobs.size(); ++k) {
      mjobs.push_back({masked[k].get(), jobs[k].wn, jobs[k].in, jobs[k].out, jobs[k].lanes});
      ands += masked[k]->ands * groups[k]->tasks.size();
      depth = std::max(depth, masked[k]->rounds);
    }
    if (absl::Status st = cts::EvaluateMaskedAll(mjobs, rep3, verify_words); !st.ok()) return st;
  } else {
    cts::ShareEngine engine(rep3, verify_words);
    if (absl::Status st = cts::EvaluateAll(jobs, engine); !st.ok()) return st;
    for (auto& g : groups) {
      ands += g->tasks[0]->program->ands * g->tasks.size();
      depth = std::max(depth, g->tasks[0]->program->depth);
    }
  }
  for (auto& g : groups) UnpackGroup(*g);
  CtsCircuitCounters& counters = CtsCircuitCounters::Shared();
  counters.ands += ands;
  counters.rounds += static_cast<uint64_t>(depth);
  ++counters.evaluations;
  counters.masked += *use_masked;
  return absl::OkStatus();
}

}  // namespace kmpc::engine
