// CtsProgramCache (cts_jobs.h): the aes*-cts programs by shape, compiled
// on first use or in the background (precompiled shapes, the shape file),
// and their compiles over masked wires, behind the Runs.
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cts/cts.h"
#include "cts/lut_map.h"
#include "cts/masked.h"
#include "engine/cts_jobs.h"

namespace kmpc::engine {
namespace {

// The calling thread (a background compile) runs only when no other
// thread of the host wants the core: SCHED_IDLE, which a woken Run's
// thread preempts at once (a ring round waits on three such wake-ups; at
// nice +10 a busy compile delayed each by up to the scheduler's wake-up
// granularity, seconds over a login's thousands of rounds). Where the
// policy is refused, nice +10 (a thread's nice value is its own on Linux).
void RunBehindTheRuns() {
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
  sched_param sp{};
  sp.sched_priority = 0;
  (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
}

absl::StatusOr<cts::Program> Compile(pb::JobType type, int nr, size_t n, size_t cf2_bytes,
                                     uint32_t usage, size_t splice_m, size_t splice_off) {
  if (splice_m != 0 || splice_off != 0) {
    if (type != pb::JOB_ENCRYPT || cf2_bytes != 0)
      return absl::InvalidArgumentError(
          "a splice is for an aes*-cts ENCRYPT under the dealt key only");
    if (usage == contract::kTicketUsage)
      return cts::TicketClassProgram(nr, n, splice_m, splice_off, contract::kTicketSignatureGap);
    return cts::SpliceEncryptClassProgram(nr, n, splice_m, splice_off);
  }
  // ENCRYPT and CHECKSUM: a program per length class (cts.h), whichever
  // length of it n is.
  if (cf2_bytes != 0) {
    switch (type) {
      case pb::JOB_DECRYPT: return cts::Cf2DecryptProgram(nr, cf2_bytes, usage, n, true);
      case pb::JOB_ENCRYPT: return cts::Cf2EncryptClassProgram(nr, cf2_bytes, usage, n);
      default:
        return absl::InvalidArgumentError("a FAST key is for aes*-cts DECRYPT and ENCRYPT only");
    }
  }
  switch (type) {
    case pb::JOB_DECRYPT: return cts::DecryptProgram(nr, n, CtsHasWindow(type, 0, usage));
    case pb::JOB_ENCRYPT: return cts::EncryptClassProgram(nr, n);
    case pb::JOB_CHECKSUM: return cts::ChecksumClassProgram(n);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no aes*-cts program for job type ", static_cast<int>(type)));
  }
}

}  // namespace

CtsProgramCache& CtsProgramCache::Shared() {
  static CtsProgramCache* cache = new CtsProgramCache();
  return *cache;
}

size_t ProgramBytes(const cts::Program& p) {
  size_t b = sizeof(p) + 4 * (p.input_slot.size() + p.output_slot.size());
  for (const cts::Program::Layer& l : p.layers)
    b += sizeof(l) + 4 * (l.ands.size() + l.xors.size());
  return b;
}

size_t MaskedProgramBytes(const cts::MaskedProgram& p) {
  size_t b = sizeof(p) +
             4 * (p.input_slot.size() + p.output_slot.size() + p.leaves.size() +
                  p.gate_products.size()) +
             8 * p.form_on.size() +
             sizeof(cts::MaskedProgram::Gate) * p.gates.size() +
             sizeof(cts::MaskedProgram::Form) * p.forms.size() +
             sizeof(cts::MaskedProgram::Term) * p.terms.size();
  for (const cts::MaskedProgram::Round& r : p.round) {
    b += sizeof(r) + 4 * (r.draws.size() + r.lambda_xors.size() + r.products.size() +
                          r.rep3.size() + r.opens.size() + r.local.size() + r.xors.size());
  }
  return b;
}

size_t CtsProgramCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void CtsProgramCache::set_masked_retry(absl::Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  masked_retry_ = d;
}

void CtsProgramCache::set_max_masked_bytes(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  max_masked_bytes_ = n;
  EvictLocked();
}

size_t CtsProgramCache::masked_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return masked_bytes_;
}

size_t CtsProgramCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

CtsProgramCache::Shape CtsProgramCache::MakeShape(pb::JobType type, int nr, size_t n,
                                                  size_t cf2_bytes, uint32_t usage,
                                                  size_t splice_m, size_t splice_off) {
  return contract::MakeCtsShape(type, nr, n, cf2_bytes, usage, splice_m, splice_off);
}

size_t CtsProgramCache::ShapeBytes(const Shape& s) { return contract::CtsShapeBytes(s); }

CtsProgramCache::Shape ShapeOf(const CtsTask& t) {
  return CtsProgramCache::MakeShape(t.type, t.nr, t.n, t.cf2_bytes, t.usage, t.splice_m,
                                    t.splice_off);
}

absl::StatusOr<std::shared_ptr<const cts::Program>> CtsProgramCache::Get(
    pb::JobType type, int nr, size_t n, size_t cf2_bytes, uint32_t usage, size_t splice_m,
    size_t splice_off) {
  const Shape shape = MakeShape(type, nr, n, cf2_bytes, usage, splice_m, splice_off);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(shape);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++hits_;
      Entry& e = it->second;
      const uint64_t uses = ++e.uses;
      const bool pow2 = (uses & (uses - 1)) == 0;
      if (pow2) LogShapeLocked(shape);
      // Its masked program dropped past kMaxMaskedBytes (or its compile
      // failed): mapped again on its first use masked_retry_ after the
      // drop, or when its uses reach a power of two.
      if (masked_on_ && !e.masked_queued && e.program->masked->get() == nullptr &&
          (pow2 || absl::Now() - e.dropped_at >= masked_retry_)) {
        e.dropped_at = absl::InfiniteFuture();
        QueueMaskedLocked(e);
      }
      return e.program;
    }
  }
  ++misses_;
  // Compiled outside the lock: two workers may compile one shape at once;
  // the second insert keeps the first.
  absl::StatusOr<cts::Program> p = Compile(type, nr, n, cf2_bytes, usage, splice_m, splice_off);
  if (!p.ok()) return p.status();
  std::shared_ptr<const cts::Program> held = Insert(shape, *std::move(p));
  if (std::optional<Shape> sibling = precompile_on_ ? TimestampSibling(shape) : std::nullopt)
    PrecompileInBackground({*sibling});
  return held;
}

std::shared_ptr<const cts::Program> CtsProgramCache::Insert(const Shape& shape,
                                                            cts::Program p) {
  auto program = std::make_shared<const cts::Program>(std::move(p));
  const size_t size = ProgramBytes(*program);
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(shape) != 0) return entries_[shape].program;
  lru_.push_front(shape);
  Entry& e = entries_[shape] = Entry{program, size, lru_.begin()};
  bytes_ += size;
  if (masked_on_) QueueMaskedLocked(e);
  EvictLocked();
  LogShapeLocked(shape);
  return program;
}

void CtsProgramCache::QueueMaskedLocked(Entry& e) {
  e.masked_queued = true;
  masked_queue_.push_back(e.program);
  if (!masked_thread_.joinable()) masked_thread_ = std::thread([this] { MaskedLoop(); });
  masked_cv_.notify_all();
}

void CtsProgramCache::EvictLocked() {
  while (lru_.size() > 1 && (lru_.size() > kMaxPrograms || bytes_ > kMaxBytes)) {
    auto victim = entries_.find(lru_.back());
    bytes_ -= victim->second.bytes;
    masked_bytes_ -= victim->second.masked_bytes;
    entries_.erase(victim);
    lru_.pop_back();
  }
  // A batch that snapshot a dropped masked program keeps it until it ends.
  for (auto it = lru_.rbegin(); masked_bytes_ > max_masked_bytes_ && it != lru_.rend(); ++it) {
    Entry& e = entries_.at(*it);
    if (e.masked_bytes == 0) continue;
    e.program->masked->set(nullptr);
    masked_bytes_ -= e.masked_bytes;
    e.masked_bytes = 0;
    e.dropped_at = absl::Now();
    ++masked_drops_;
  }
}

void CtsProgramCache::MaskedLoop() {
  RunBehindTheRuns();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    masked_cv_.wait(lock, [this] { return stopping_ || !masked_queue_.empty(); });
    if (stopping_) return;
    std::shared_ptr<const cts::Program> p = std::move(masked_queue_.front());
    masked_queue_.pop_front();
    // The entry holding p (mu_ held), if the cache still does.
    auto entry_of_p = [&] {
      return std::find_if(entries_.begin(), entries_.end(),
                          [&](const auto& e) { return e.second.program == p; });
    };
    // A program evicted before its turn is not mapped: no later batch gets
    // it (one in flight runs Rep3 ANDs).
    if (entry_of_p() == entries_.end()) {
      masked_cv_.notify_all();  // WaitMasked
      continue;
    }
    masked_busy_ = true;
    lock.unlock();
    // A program no deeper than a login's masked Run (a timestamp's
    // DECRYPT) spends its own depth on fewer mask products: beside a reply
    // it adds no round, alone it is no slower than on Rep3 ANDs.
    cts::LutOptions o{kMaskedInputs};
    if (p->depth <= kMaskedShallowDepth) o.depth_target = p->depth;
    const cts::LutMap map = cts::MapLuts(*p, o);
    absl::StatusOr<cts::MaskedProgram> mp = cts::CompileMasked(map);
    if (mp.ok() && (mp->ands > kMaskedAndsPerAnd * p->ands ||
                    mp->rounds > p->depth + kMaskedPrepRounds))
      mp = absl::ResourceExhaustedError("masked program past CostOf's price");
    if (!mp.ok()) ++masked_refused_;
    ++masked_compiles_;
    lock.lock();
    // Attached while the cache holds its program, and counted in
    // masked_bytes_ (kMaxMaskedBytes) meanwhile.
    if (auto held = entry_of_p(); held != entries_.end()) {
      held->second.masked_queued = false;
      if (mp.ok()) {
        held->second.masked_bytes = MaskedProgramBytes(*mp);
        masked_bytes_ += held->second.masked_bytes;
        p->masked->set(std::make_shared<const cts::MaskedProgram>(*std::move(mp)));
        EvictLocked();
      }
    }
    masked_busy_ = false;
    masked_cv_.notify_all();
  }
}

size_t CtsProgramCache::masked_pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return masked_queue_.size() + (masked_busy_ ? 1 : 0);
}

void CtsProgramCache::WaitMasked() {
  std::unique_lock<std::mutex> lock(mu_);
  masked_cv_.wait(lock, [this] { return masked_queue_.empty() && !masked_busy_; });
}

namespace {

void WriteShape(std::ostream& f, const CtsProgramCache::Shape& s, uint64_t weight) {
  f << std::get<0>(s) << ' ' << std::get<1>(s) << ' ' << std::get<2>(s) << ' ' << std::get<3>(s)
    << ' ' << std::get<4>(s) << ' ' << std::get<5>(s) << ' ' << std::get<6>(s);
  if (weight != 1) f << ' ' << weight;
  f << '\n';
}

struct Weighted {
  CtsProgramCache::Shape shape;
  uint64_t weight = 0;
  size_t last = 0;  // its last line's index
};

}  // namespace

void CtsProgramCache::LogShapeLocked(const Shape& shape) {
  if (shapes_path_.empty()) return;
  if (++log_lines_ > kMaxLogLines) {
    // Rewritten as ReadShapes reads it: the heaviest kMaxPrograms / 2.
    const std::string tmp = shapes_path_ + ".new";
    {
      std::ofstream f(tmp, std::ios::trunc);
      for (const auto& [s, w] : ReadWeightedShapes(shapes_path_)) WriteShape(f, s, w);
      WriteShape(f, shape, 1);
    }
    std::rename(tmp.c_str(), shapes_path_.c_str());
    log_lines_ = 0;
    return;
  }
  std::ofstream f(shapes_path_, std::ios::app);
  WriteShape(f, shape, 1);
}

void CtsProgramCache::RecordShapesTo(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  shapes_path_ = path;
  log_lines_ = 0;
  if (path.empty()) return;
  const std::string tmp = path + ".new";
  {
    std::ofstream f(tmp, std::ios::trunc);
    for (const auto& [s, w] : ReadWeightedShapes(path)) WriteShape(f, s, w);
  }
  std::rename(tmp.c_str(), path.c_str());
}

std::vector<CtsProgramCache::Shape> CtsProgramCache::ReadShapes(const std::string& path) {
  std::vector<Shape> out;
  for (const auto& [s, w] : ReadWeightedShapes(path)) out.push_back(s);
  return out;
}

std::vector<std::pair<CtsProgramCache::Shape, uint64_t>> CtsProgramCache::ReadWeightedShapes(
    const std::string& path) {
  std::ifstream f(path);
  std::map<Shape, Weighted> by_shape;
  std::string line;
  for (size_t index = 0; std::getline(f, line); ++index) {
    std::istringstream in(line);
    int type = 0, nr = 0;
    size_t n = 0, cf2 = 0, splice_m = 0, splice_off = 0;
    uint32_t usage = 0;
    uint64_t weight = 1;
    if (!(in >> type >> nr >> n >> cf2 >> usage)) continue;
    // Two more fields and a weight, two more, or none (a line written
    // before the splice).
    if (!(in >> splice_m)) {
      in.clear();
      std::string rest;
      if (in >> rest) continue;
    } else if (!(in >> splice_off)) {
      continue;
    } else if (!(in >> weight)) {
      in.clear();
      std::string rest;
      if (in >> rest) continue;
      weight = 1;
    } else if (weight == 0 || weight > (uint64_t{1} << 32)) {
      continue;
    }
    // A length no job has (read before the class names it).
    const bool n_ok = type == pb::JOB_CHECKSUM ? n <= cts::kMaxBytes - 64
                                               : n >= 16 && n <= cts::kMaxBytes - 64;
    // Named by its class (a line of an exact length reads as its class).
    const Shape s = MakeShape(static_cast<pb::JobType>(type), nr, n, cf2, usage, splice_m,
                              splice_off);
    n = std::get<2>(s);
    splice_off = std::get<6>(s);
    const bool ok = (type == pb::JOB_DECRYPT || type == pb::JOB_ENCRYPT) ? (nr == 10 || nr == 14)
                    : type == pb::JOB_CHECKSUM                           ? nr == 0 && cf2 == 0
                                                                         : false;
    // A FAST key only in the KDC's direction (engine.h kCtsCf2*Usages).
    const absl::Span<const uint32_t> dir = type == pb::JOB_DECRYPT
                                               ? absl::MakeConstSpan(kCtsCf2DecryptUsages)
                                               : absl::MakeConstSpan(kCtsCf2EncryptUsages);
    // A ticket's DECRYPT (back50) and a ticket signed in the cluster
    // (cts.h TicketClassProgram) keep their usage, 2.
    const bool ticket = cf2 == 0 && usage == contract::kTicketUsage && splice_m != 0;
    const bool key_ok = cf2 == 0 ? usage == 0 || ticket ||
                                       (type == pb::JOB_DECRYPT && usage == contract::kTicketUsage)
                                 : (cf2 == 16 || cf2 == 32) &&
                                       std::find(dir.begin(), dir.end(), usage) != dir.end();
    // A splice (cts.h SpliceEncryptProgram): a plain ENCRYPT's, inside P.
    const bool splice_ok =
        splice_m == 0 ? splice_off == 0
                      : type == pb::JOB_ENCRYPT && cf2 == 0 &&
                            (ticket ? cts::TicketClassFits(n, splice_m, splice_off,
                                                           contract::kTicketSignatureGap)
                                    : cts::SpliceClassFits(n, splice_m, splice_off));
    if (!(ok && key_ok && splice_ok && n_ok)) continue;
    Weighted& w = by_shape[s];
    w.shape = s;
    w.weight += weight;
    w.last = index;
  }
  std::vector<Weighted> all;
  for (const auto& [s, w] : by_shape) all.push_back(w);
  // The heaviest kMaxPrograms / 2 (ties: the most recent) ...
  std::sort(all.begin(), all.end(), [](const Weighted& a, const Weighted& b) {
    return a.weight != b.weight ? a.weight > b.weight : a.last > b.last;
  });
  if (all.size() > kMaxPrograms / 2) all.resize(kMaxPrograms / 2);
  // ... heaviest first (ties: oldest first).
  std::sort(all.begin(), all.end(), [](const Weighted& a, const Weighted& b) {
    return a.weight != b.weight ? a.weight > b.weight : a.last < b.last;
  });
  std::vector<std::pair<Shape, uint64_t>> out;
  for (const Weighted& w : all) out.emplace_back(w.shape, w.weight);
  return out;
}

std::optional<CtsProgramCache::Shape> CtsProgramCache::TimestampSibling(const Shape& s) {
  const size_t n = std::get<2>(s);
  const bool plain = std::get<3>(s) == 0 && std::get<4>(s) == 0;
  const bool challenge = std::get<3>(s) != 0 && std::get<4>(s) == kEncChallengeClient;
  if (std::get<0>(s) != pb::JOB_DECRYPT || (n != 43 && n != 44) || !(plain || challenge) ||
      std::get<5>(s) != 0 || std::get<6>(s) != 0)
    return std::nullopt;
  Shape sibling = s;
  std::get<2>(sibling) = n == 43 ? 44 : 43;
  return sibling;
}

std::vector<CtsProgramCache::Shape> CtsProgramCache::UsualShapes() {
  std::vector<Shape> out;
  for (size_t n : {44, 43})
    for (int nr : {14, 10}) out.push_back(MakeShape(pb::JOB_DECRYPT, nr, n, 0, 0));
  return out;
}

void CtsProgramCache::PrecompileInBackground(std::vector<Shape> shapes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Shape& s : shapes) {
    if (entries_.count(s) != 0 ||
        std::find(precompile_queue_.begin(), precompile_queue_.end(), s) !=
            precompile_queue_.end())
      continue;
    precompile_queue_.push_back(s);
    ++precompile_pending_;
  }
  if (!precompile_thread_.joinable())
    precompile_thread_ = std::thread([this] { PrecompileLoop(); });
  precompile_cv_.notify_all();
}

void CtsProgramCache::PrecompileLoop() {
  RunBehindTheRuns();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    precompile_cv_.wait(lock, [this] { return stopping_ || !precompile_queue_.empty(); });
    if (precompile_queue_.empty()) return;  // stopping, nothing left
    const Shape s = precompile_queue_.front();
    precompile_queue_.pop_front();
    const bool held = entries_.count(s) != 0;
    lock.unlock();
    if (!held) {
      const auto type = static_cast<pb::JobType>(std::get<0>(s));
      absl::StatusOr<cts::Program> p = Compile(type, std::get<1>(s), std::get<2>(s),
                                              std::get<3>(s), std::get<4>(s), std::get<5>(s),
                                              std::get<6>(s));
      if (p.ok()) Insert(s, *std::move(p));
    }
    lock.lock();
    --precompile_pending_;
    precompile_cv_.notify_all();  // WaitPrecompiled
  }
}

void CtsProgramCache::WaitPrecompiled() {
  std::unique_lock<std::mutex> lock(mu_);
  precompile_cv_.wait(lock, [this] { return precompile_pending_ == 0; });
}

CtsProgramCache::~CtsProgramCache() {
  WaitPrecompiled();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  masked_cv_.notify_all();
  precompile_cv_.notify_all();
  if (masked_thread_.joinable()) masked_thread_.join();
  if (precompile_thread_.joinable()) precompile_thread_.join();
}

}  // namespace kmpc::engine
