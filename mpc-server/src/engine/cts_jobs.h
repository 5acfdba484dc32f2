// The aes*-cts jobs of a batch (kmpc.proto JobType, CIPHER_AES*_CTS): the
// RFC 3962 programs of cts/cts.h run on the material the dealer dealt per
// key and usage (engine.h CtsMaterial), in the same Run as the batch's
// ctr-mpc AES, over the same Rep3 context (so the same malicious check).
//
// Lanes: the jobs of one shape (type, nr, n) are bitsliced together, one
// job per lane (cts/circuit.h), and all shapes run side by side in the
// same AND rounds (cts::EvaluateAll): a batch of logins costs the rounds
// of its deepest program, not the sum.
//
// Nothing here opens a value: the outputs stay shares. The engine opens a
// DECRYPT's mismatch bit only after the batch's checks so far passed
// (tags.cc OpenCtsVerdicts), and releases outputs only after the last.
#ifndef KMPC_ENGINE_CTS_JOBS_H_
#define KMPC_ENGINE_CTS_JOBS_H_

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "contract.h"
#include "cts/circuit.h"
#include "cts/cts.h"
#include "engine/engine.h"
#include "protocol/prss.h"
#include "protocol/rep3.h"

namespace kmpc::engine {

// Compiled programs per shape, shared by the worker threads: compiling a
// 300-byte reply's program takes ~90 ms and ~14 MiB (cts-circuits.md), so
// each shape is compiled once and kept, least recently used first out,
// within kMaxPrograms programs and kMaxBytes of gate lists. Their masked
// programs (several times larger) are kept within kMaxMaskedBytes apart:
// past it the least recently used program's masked program is dropped (its
// shape runs Rep3 ANDs until it is mapped again: set_masked_retry), so
// masked programs never push out the programs every batch needs.
class CtsProgramCache {
 public:
  static constexpr size_t kMaxPrograms = contract::kCtsProgramsKept;
  static constexpr size_t kMaxBytes = size_t{512} << 20;
  static constexpr size_t kMaxMaskedBytes = size_t{1} << 30;

  // The process's one cache (the servers' workers share it).
  static CtsProgramCache& Shared();

  // The program of an aes*-cts job: DECRYPT (n = len(C)), ENCRYPT (n =
  // |conf || P|), CHECKSUM (n = |D|; nr unused); an ENCRYPT's and a
  // CHECKSUM's program serves n's length class (cts.h EncryptClassProgram,
  // ChecksumClassProgram; the shape names the class); under a FAST key of
  // cf2_bytes (16, 32; 0: the dealt key) for `usage` (cts.h Cf2*Program;
  // usage unused otherwise); an ENCRYPT under the dealt key with
  // splice_m > 0 the PA-REQ-ENC-PA-REP splice of an m-byte message's
  // checksum at P's byte splice_off (cts.h SpliceEncryptProgram).
  // INVALID_ARGUMENT for another type, a splice on another job or a shape
  // cts.h refuses.
  absl::StatusOr<std::shared_ptr<const cts::Program>> Get(pb::JobType type, int nr,
                                                          size_t n, size_t cf2_bytes = 0,
                                                          uint32_t usage = 0,
                                                          size_t splice_m = 0,
                                                          size_t splice_off = 0);

  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }
  // The bound on masked programs' bytes (kMaxMaskedBytes; tests lower it).
  void set_max_masked_bytes(size_t n);
  // A dropped masked program is mapped again on its shape's first use this
  // long after the drop (kMaskedRetry: at most one background compile a
  // minute per shape when the hot shapes' masked programs pass the bound),
  // or when its uses reach a power of two.
  static constexpr absl::Duration kMaskedRetry = absl::Seconds(60);
  void set_masked_retry(absl::Duration d);
  size_t bytes() const;         // the programs' gate lists
  size_t masked_bytes() const;  // their masked programs'
  size_t size() const;          // programs held

  // (job type, nr (0 for CHECKSUM), n, cf2_bytes, usage (0 unless cf2_bytes),
  // splice_m, splice_off), as Get takes them: contract::CtsShape, which the
  // KDC module derives from a job the same way (contract::CtsShapeOf).
  using Shape = contract::CtsShape;
  // The shape Get(type, nr, n, cf2_bytes, usage, splice_m, splice_off)
  // keys its program by.
  static Shape MakeShape(pb::JobType type, int nr, size_t n, size_t cf2_bytes,
                         uint32_t usage, size_t splice_m = 0, size_t splice_off = 0);
  // contract::CtsShapeBytes: what a shape's program and scratch grow with
  // (EngineOptions::cts_batch_bytes).
  static size_t ShapeBytes(const Shape& s);

  // A program compiled inside a batch delays the batch by its compile time
  // (~90 ms for a 300-byte reply on an idle core, seconds on a loaded host:
  // past the KDC module's deadline_ms), so a server compiles the shapes it
  // expects before the first batch needs them, the common ones first.
  // The shape log at `path` (public lengths of what the KDC sent): one
  // "type nr n cf2_bytes usage splice_m splice_off [weight]" line per
  // shape compiled, and one more each time a shape's uses reach a power of
  // two (2, 4, 8, ...), so a shape's weight grows with the log of its
  // uses. RecordShapesTo first rewrites the file as ReadShapes reads it
  // (each kept shape once, with its weight), and again whenever
  // kMaxLogLines lines were appended since: the file stays bounded
  // whatever the KDC sends. Empty path: none recorded.
  static constexpr size_t kMaxLogLines = 8 * kMaxPrograms;
  void RecordShapesTo(const std::string& path);
  // The shapes of such a file, at most kMaxPrograms / 2: the heaviest
  // (ties: the most recent), heaviest first (ties: oldest first); lines
  // that are no shape Get accepts are skipped. A line of five fields (a
  // file written before the splice) is a shape without one; a missing
  // weight is 1.
  static std::vector<Shape> ReadShapes(const std::string& path);
  // The timestamp DECRYPTs of MIT's and Heimdal's kinit under both key
  // sizes: PA-ENC-TS-ENC with microseconds of three bytes (from 32,768 on:
  // ~97% of logins), conf || P of 44 bytes, first; then of two bytes (128
  // to 32,767: ~3%, one login in 30), 43 bytes.
  static std::vector<Shape> UsualShapes();
  // A timestamp DECRYPT's other usual length (44 for 43 and 43 for 44), of
  // the same key size and FAST key: a PA-ENC-TIMESTAMP's (no FAST key, no
  // usage) or a FAST encrypted challenge's (usage 54); none for another
  // shape. Get (set_precompile on) compiles it in the background behind a
  // miss on one of them, so that a realm's first FAST encrypted challenge
  // (RFC 6113 5.4.6) also readies the other length. UsualShapes leaves the
  // KRB-FX-CF2 ones out: the four (both key sizes and lengths) with their
  // masked programs held 75-110 MB more of a server's RSS, which only
  // armored realms need.
  static std::optional<Shape> TimestampSibling(const Shape& s);
  static constexpr uint32_t kEncChallengeClient = 54;  // KRB5_KEYUSAGE_ENC_CHALLENGE_CLIENT
  // Whether Get queues a timestamp's sibling (--cts_precompile; on).
  void set_precompile(bool on) { precompile_on_ = on; }
  // Queues each shape neither held nor queued already for the cache's one
  // precompile thread, idle priority (behind the batches' threads), which
  // compiles those still not held at their turn, in order; returns at once.
  // Get meanwhile works as before (a shape asked for before its turn is
  // compiled there).
  void PrecompileInBackground(std::vector<Shape> shapes);
  // Waits until the precompile queue is empty and no compile is in hand
  // (tests, shutdown): shapes queued meanwhile are waited for too.
  void WaitPrecompiled();
  // Shapes queued for the precompile thread and not done yet.
  size_t precompile_pending() const { return precompile_pending_.load(); }
  // Each program inserted is also compiled as k-input gates over masked
  // wires (cts/masked.h, k = kMaskedInputs: about half the rounds) on one
  // thread of its own at idle priority, and attached to the program when done
  // (cts::Program::masked); a Run uses it once every party holds it
  // (RunCtsTasks). WaitMasked waits for the queue to drain (tests, the
  // bench's warm-up).
  static constexpr int kMaskedInputs = 6;
  // About a login's masked Run (the spliced reply's ~2,160 messages): a
  // program of at most this AND depth is mapped within its own depth.
  static constexpr int kMaskedShallowDepth = 2200;
  // A masked program is attached only if it logs at most this many AND
  // words a lane word per AND of its program (the hybrid's products and
  // Rep3 gates: ~1.9x for a spliced reply, ~2.5x for a signed ticket) and
  // sends at most kMaskedPrepRounds messages more than its program's AND
  // depth (the mask products' layers: ceil(log2 kMaskedInputs)), so that
  // CostOf can price every shape at these bounds, whichever programs this
  // party holds: facts of the program, the same on every party.
  static constexpr size_t kMaskedAndsPerAnd = 4;
  static constexpr int kMaskedPrepRounds = 3;
  void WaitMasked();
  // Programs queued or being compiled over masked wires.
  size_t masked_pending() const;
  // Programs whose masked compile failed or came out past CostOf's price
  // (kMaskedAndsPerAnd, kMaskedPrepRounds): their Runs stay on Rep3 ANDs.
  uint64_t masked_refused() const { return masked_refused_.load(); }
  // Masked compiles ended (attached or refused), and masked programs
  // dropped past kMaxMaskedBytes (each recompiled on a later use, at most
  // once every kMaskedRetry): both grow with a realm's new shapes, and a
  // steady realm whose shapes do not fit the bound keeps them growing.
  uint64_t masked_compiles() const { return masked_compiles_.load(); }
  uint64_t masked_drops() const { return masked_drops_.load(); }
  // Whether programs inserted from now on are compiled over masked wires
  // (the cache's default; a server's is --cts_masked_gates, on).
  void set_masked(bool on) { masked_on_ = on; }
  ~CtsProgramCache();

 private:
  struct Entry {
    std::shared_ptr<const cts::Program> program;
    size_t bytes;
    std::list<Shape>::iterator lru;
    uint64_t uses = 1;
    size_t masked_bytes = 0;  // of its masked program, while attached
    bool masked_queued = false;
    // When its masked program was last dropped past kMaxMaskedBytes
    // (InfiniteFuture: not since it was last queued).
    absl::Time dropped_at = absl::InfiniteFuture();
  };
  mutable std::mutex mu_;
  std::map<Shape, Entry> entries_;
  std::list<Shape> lru_;  // most recent first
  size_t bytes_ = 0;
  size_t masked_bytes_ = 0;
  size_t max_masked_bytes_ = kMaxMaskedBytes;  // mu_
  absl::Duration masked_retry_ = kMaskedRetry;  // mu_
  std::atomic<uint64_t> hits_{0}, misses_{0}, masked_refused_{0}, masked_compiles_{0},
      masked_drops_{0};
  std::string shapes_path_;  // guarded by mu_
  size_t log_lines_ = 0;     // appended since the last rewrite; mu_
  // The precompile queue (mu_) and its thread (started by the first
  // PrecompileInBackground); pending counts the queue and the shape being
  // compiled, changed under mu_.
  std::deque<Shape> precompile_queue_;
  std::condition_variable precompile_cv_;
  std::thread precompile_thread_;
  std::atomic<size_t> precompile_pending_{0};
  std::atomic<bool> precompile_on_{true};
  void PrecompileLoop();
  // The masked compiles' queue (mu_), its thread (started by the first
  // Insert) and whether one is running.
  std::deque<std::shared_ptr<const cts::Program>> masked_queue_;
  std::condition_variable masked_cv_;
  std::thread masked_thread_;
  bool masked_busy_ = false, stopping_ = false;
  std::atomic<bool> masked_on_{true};
  void MaskedLoop();

  // ReadShapes with each shape's summed weight.
  static std::vector<std::pair<Shape, uint64_t>> ReadWeightedShapes(const std::string& path);
  // Appends shape to the log (mu_ held), rewriting it past kMaxLogLines.
  void LogShapeLocked(const Shape& shape);
  // Inserts a compiled program (the first of two racing compiles stays).
  std::shared_ptr<const cts::Program> Insert(const Shape& shape, cts::Program p);
  // Drops least recently used programs past kMaxPrograms or kMaxBytes
  // (never the last one held), then least recently used masked programs
  // past kMaxMaskedBytes; mu_ held.
  void EvictLocked();
  // Queues e's program for a masked compile (mu_ held).
  void QueueMaskedLocked(Entry& e);
};

// The aes*-cts circuits this process evaluated (RunCtsTasks calls that
// succeeded): ANDs summed over the lanes (each lane a job), AND rounds
// (each call takes its deepest program's depth) and calls. Public: program
// sizes and lane counts. service/metrics.h renders them as
// kmpc_cts_ands_total, kmpc_cts_and_rounds_total, kmpc_cts_evaluations_total.
// Of the evaluations, `masked` ran as k-input gates over masked wires
// (rounds then count its ring messages, ands its Rep3 ANDs).
struct CtsCircuitCounters {
  std::atomic<uint64_t> ands{0}, rounds{0}, evaluations{0}, masked{0};
  static CtsCircuitCounters& Shared();
};

// Heap bytes of a compiled program's gate lists, and of its masked
// program's (gates, leaves, terms and rounds: several times the former's).
size_t ProgramBytes(const cts::Program& p);
size_t MaskedProgramBytes(const cts::MaskedProgram& p);

// One aes*-cts job inside RunBatch. Inputs are views into the Job and the
// key (alive for the batch); outputs are this party's two shares, wiped
// when the task dies:
//   DECRYPT  out = conf || P (n bytes); mismatch = shares of a byte whose
//            bit 0 is 1 iff the tag is wrong, bit 1 iff the timestamp is
//            outside the window (cts.h StaleTimestamp);
//   ENCRYPT  out = C || T (n + 12 bytes) of conf || P, conf a fresh PRSS
//            random block (known to nobody); with a splice, P's bytes
//            [splice_offset, +12) XORed with the usage-56 checksum of D
//            (splice_material) first, that checksum never an output;
//   CHECKSUM out = the 12-byte checksum.
struct CtsTask {
  size_t job = 0;  // index in the batch
  pb::JobType type = pb::JOB_DECRYPT;
  int nr = 0;
  size_t n = 0;  // the job's own (contract::CtsLengthOf), not its class's
  uint32_t usage = 0;
  // Under a FAST key (Job.cts_key): its KDC half's bytes (16, 32), which
  // lead shared_in; material is then K's PRF material. 0: the dealt key.
  size_t cf2_bytes = 0;
  const CtsMaterial* material = nullptr;
  // A usage-3 ENCRYPT's PA-REQ-ENC-PA-REP splice (Job.splice_length,
  // splice_offset; 0: none): D's bytes as dealt (with its HMAC inner
  // padding, a multiple of 64), the checksum's offset in P, and
  // the key's checksum material for usage 56 (lane input after material).
  size_t splice_m = 0;
  size_t splice_off = 0;
  const CtsMaterial* splice_material = nullptr;
  // A usage-2 ENCRYPT that signs its ticket's PAC (Job::sign_pad; the
  // splice's material is then the key's usage-17 checksum's): the lane's
  // inputs after the selector (cts.h TicketClassProgram), this party's two
  // components of ctr0 (public) || H^2 || L of the pad.
  bool ticket = false;
  std::array<std::array<uint8_t, 48>, 2> sign{};
  // ENCRYPT: [X ||] P [|| D]; CHECKSUM: D; DECRYPT: [X ||] C || T (X a
  // FAST key's KDC half, D a splice's message): all dealt by the KDC
  // module, none in the clear.
  std::array<absl::Span<const uint8_t>, 2> shared_in;
  // DECRYPT: this party's two components of the public freshness window
  // (CtsTimeWindow; cts.h StaleTimestamp), the lane's last input.
  std::array<std::array<uint8_t, cts::kWindowBytes>, 2> window{};
  std::shared_ptr<const cts::Program> program;
  // The program over masked wires, as held when the batch was planned
  // (null: not compiled yet); the Run uses it if every party holds it.
  std::shared_ptr<const cts::MaskedProgram> masked;
  std::array<std::vector<uint8_t>, 2> out;
  std::array<uint8_t, 2> mismatch{};

  CtsTask() = default;
  CtsTask(CtsTask&&) = default;
  CtsTask& operator=(CtsTask&&) = default;
  ~CtsTask();
};

// The freshness window of a DECRYPT (cts.h StaleTimestamp): the UTC
// times now - skew_s and now + skew_s as 14 ASCII digits each
// (YYYYMMDDHHMMSS, RFC 4120 section 5.2.3's KerberosTime without its Z),
// clamped to the years 0000 .. 9999.
std::string CtsTimeWindow(int64_t now, uint32_t skew_s);
// Whether a job's program checks a freshness window (cts.h DecryptProgram
// `window`): every DECRYPT (a PA-ENC-TIMESTAMP, a FAST challenge) but a
// ticket's under the dealt key (contract::kTicketUsage), whose plaintext
// is an EncTicketPart, not a PA-ENC-TS-ENC.
bool CtsHasWindow(pb::JobType type, size_t cf2_bytes, uint32_t usage);

// How many gated AS replies of a password-derived key the servers
// released lately (EngineOptions::cts_releases_per_minute), shared by the
// workers of one server (EngineOptions::release_limiter): a token bucket
// per deal (the key's KeyShares::Origin, so a RefreshKeys copy shares its
// original's bucket) of `limit` tokens, refilled at limit per minute.
// Deals whose bucket is full again are forgotten once kMaxKeys are held,
// so memory stays bounded by the keys active within a minute. Public
// counts of deal ids.
class CtsReleaseLimiter {
 public:
  static constexpr size_t kMaxKeys = size_t{1} << 16;
  // Takes one of the deal's tokens for a release; false when none is left
  // (limit 0: always true, nothing counted). `deal`: its 16 bytes.
  bool Take(const std::string& deal, uint32_t limit, absl::Time now);
  // Returns a token Take gave for a release that did not happen.
  void GiveBack(const std::string& deal, uint32_t limit, absl::Time now);
  void Clear();

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time at;
  };
  // Refills b up to limit at limit per minute.
  static void Refill(Bucket& b, uint32_t limit, absl::Time now);
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

// What the tasks cost, whichever way the Run goes (Rep3 ANDs or masked
// gates): AND words over all shapes (per shape, its lane words x
// CtsProgramCache::kMaskedAndsPerAnd x its program's ANDs) and the most
// messages between checks (the deepest program's AND depth +
// kMaskedPrepRounds). Both are priced from the programs, not from the
// masked programs this party holds: parties that differ in holding one (a
// fresh server, one dropped past the cache's bound) count the same checks,
// so none refuses a batch near kMaxVerifiesPerBatch that the others run.
// With the check every verify_words AND words (cts::ShareEngine,
// cts::EvaluateMaskedAll), at most one a message, a Run takes at most
// min(depth, ceil(and_words / verify_words)) Verifies.
struct CtsCost {
  uint64_t and_words = 0;
  int depth = 0;
  uint64_t Verifies(uint64_t verify_words) const;
};
CtsCost CostOf(absl::Span<const CtsTask> tasks);

// A task's shape, as CtsProgramCache keys programs: tasks of one shape run
// the same program, whatever object each one points to.
CtsProgramCache::Shape ShapeOf(const CtsTask& t);

// The Rep3 AND words of running `tasks` in one Run: per shape, its
// program's ANDs x its lane words (ceil(tasks / 64)).
uint64_t RunWords(absl::Span<const CtsTask> tasks);

// Runs every task in one set of AND rounds (ANDs through `rep3`, logged
// and checked every verify_words words when it has a log): over masked
// wires if every party holds the masked programs of all its shapes and
// chose to (RunWords(tasks) <= masked_max_and_words: EngineOptions
// cts_masked_max_and_words, 0 while its server is busy), else Rep3 ANDs.
// The parties must pass the same tasks (types, shapes, order): the
// confounders are drawn from `prss` in task order. A channel error leaves
// the ring out of step.
absl::Status RunCtsTasks(protocol::Rep3& rep3, protocol::Prss& prss, size_t verify_words,
                         absl::Span<CtsTask> tasks, uint64_t masked_max_and_words);

}  // namespace kmpc::engine

#endif  // KMPC_ENGINE_CTS_JOBS_H_
