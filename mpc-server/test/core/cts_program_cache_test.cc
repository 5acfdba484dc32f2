// CtsProgramCache (engine/cts_jobs.h, cts_program_cache.cc): one compile
// per shape and its hits, the masked programs' own bound and their retry,
// the background precompile of recorded shapes, and the bounded shape log.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "cts/cts.h"
#include "cts/masked.h"
#include "engine/cts_jobs.h"

namespace kmpc::engine {
namespace {

// One compile per shape; the second Get hits.
TEST(CtsProgramCache, CachesPerShapeAndCountsHits) {
  CtsProgramCache& cache = CtsProgramCache::Shared();
  const uint64_t h0 = cache.hits(), m0 = cache.misses();
  auto a = cache.Get(pb::JOB_CHECKSUM, 0, 333);
  auto b = cache.Get(pb::JOB_CHECKSUM, 14, 333);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.misses(), m0 + 1);
  EXPECT_EQ(cache.hits(), h0 + 1);
  EXPECT_GT(cache.bytes(), 0u);
  EXPECT_FALSE(cache.Get(pb::JOB_PAD, 14, 100).ok());
  // Another length of its class is the same program.
  const uint64_t before = cache.misses();
  ASSERT_TRUE(cache.Get(pb::JOB_CHECKSUM, 0, 320).ok());  // 312..375
  EXPECT_EQ(cache.misses(), before);
  // Past kMaxPrograms shapes the least recently used goes: 333 compiles
  // again, and the cache holds no more than the bound.
  for (size_t n = 1; n <= CtsProgramCache::kMaxPrograms; ++n)
    ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 100 + n).ok());
  const uint64_t m1 = cache.misses();
  ASSERT_TRUE(cache.Get(pb::JOB_CHECKSUM, 0, 333).ok());
  EXPECT_EQ(cache.misses(), m1 + 1);
  EXPECT_LE(cache.size(), CtsProgramCache::kMaxPrograms);
  EXPECT_LE(cache.bytes(), CtsProgramCache::kMaxBytes);
}

// A program's masked program counts in the cache's masked bytes once
// attached, apart from the programs' bytes (kMaxBytes bounds those alone).
TEST(CtsProgramCache, CountsMaskedProgramsApart) {
  CtsProgramCache cache;
  cache.set_masked(true);
  auto p = cache.Get(pb::JOB_DECRYPT, 10, 45);
  ASSERT_TRUE(p.ok());
  cache.WaitMasked();
  const std::shared_ptr<const cts::MaskedProgram> m = (*p)->masked->get();
  ASSERT_NE(m, nullptr);
  EXPECT_GT(MaskedProgramBytes(*m), ProgramBytes(**p));
  EXPECT_EQ(cache.bytes(), ProgramBytes(**p));
  EXPECT_EQ(cache.masked_bytes(), MaskedProgramBytes(*m));
  auto q = cache.Get(pb::JOB_DECRYPT, 14, 45);
  ASSERT_TRUE(q.ok());
  cache.WaitMasked();
  ASSERT_NE((*q)->masked->get(), nullptr);
  EXPECT_EQ(cache.bytes(), ProgramBytes(**p) + ProgramBytes(**q));
  EXPECT_EQ(cache.masked_bytes(),
            MaskedProgramBytes(*m) + MaskedProgramBytes(*(*q)->masked->get()));
}

// A cache with masked programs on holding two shapes' programs, p (10
// rounds) and q (14), `p_uses` uses of p before q's second (q the most
// recent), both masked programs attached.
struct TwoMaskedShapes {
  CtsProgramCache cache;
  std::shared_ptr<const cts::Program> p, q;
  explicit TwoMaskedShapes(int p_uses = 1) {
    cache.set_masked(true);
    auto a = cache.Get(pb::JOB_DECRYPT, 10, 45);
    auto b = cache.Get(pb::JOB_DECRYPT, 14, 45);
    EXPECT_TRUE(a.ok() && b.ok());
    if (!a.ok() || !b.ok()) return;
    p = *a;
    q = *b;
    for (int k = 1; k < p_uses; ++k) EXPECT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 45).ok());
    if (p_uses > 1) EXPECT_TRUE(cache.Get(pb::JOB_DECRYPT, 14, 45).ok());
    cache.WaitMasked();
    EXPECT_NE(p->masked->get(), nullptr);
    EXPECT_NE(q->masked->get(), nullptr);
  }
};

// Past the masked bound the least recently used masked programs are
// dropped (their programs stay); a dropped one is mapped again when its
// shape's uses next reach a power of two.
TEST(CtsProgramCache, DropsMaskedProgramsPastItsBoundAndMapsThemAgain) {
  TwoMaskedShapes t;
  ASSERT_NE(t.q, nullptr);
  CtsProgramCache& cache = t.cache;
  EXPECT_EQ(cache.masked_compiles(), 2u);
  EXPECT_EQ(cache.masked_drops(), 0u);
  const size_t mq = MaskedProgramBytes(*t.q->masked->get());
  cache.set_max_masked_bytes(mq);  // room for q's alone: p's, older, goes
  EXPECT_EQ(t.p->masked->get(), nullptr);
  EXPECT_EQ(cache.masked_drops(), 1u);
  ASSERT_NE(t.q->masked->get(), nullptr);
  EXPECT_EQ(cache.masked_bytes(), mq);
  EXPECT_EQ(cache.size(), 2u);
  cache.set_max_masked_bytes(CtsProgramCache::kMaxMaskedBytes);
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 45).ok());  // p's second use
  cache.WaitMasked();
  ASSERT_NE(t.p->masked->get(), nullptr);
  EXPECT_EQ(cache.masked_bytes(), mq + MaskedProgramBytes(*t.p->masked->get()));
  EXPECT_EQ(cache.masked_compiles(), 3u);
  EXPECT_EQ(cache.masked_drops(), 1u);
}

// A dropped masked program is mapped again on its shape's first use
// masked_retry after the drop, not before (a use that is no power of two).
TEST(CtsProgramCache, MapsADroppedMaskedProgramAgainAfterTheRetryDelay) {
  TwoMaskedShapes t(4);
  ASSERT_NE(t.q, nullptr);
  CtsProgramCache& cache = t.cache;
  const std::shared_ptr<const cts::Program>& p = t.p;
  cache.set_max_masked_bytes(MaskedProgramBytes(*t.q->masked->get()));
  ASSERT_EQ(p->masked->get(), nullptr);
  cache.set_max_masked_bytes(CtsProgramCache::kMaxMaskedBytes);
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 45).ok());  // 5th use, within the delay
  cache.WaitMasked();
  EXPECT_EQ(p->masked->get(), nullptr);
  cache.set_masked_retry(absl::ZeroDuration());
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 45).ok());  // 6th use, past it
  cache.WaitMasked();
  EXPECT_NE(p->masked->get(), nullptr);
}

// A server compiles the shapes it expects before a batch needs them:
// RecordShapesTo appends every shape compiled and a line more at its 2nd,
// 4th, ... use, ReadShapes reads them back (distinct, heaviest first, ties
// oldest first, lines of no valid shape skipped), and
// PrecompileInBackground compiles them so that the next Get hits.
TEST(CtsProgramCache, PrecompilesRecordedShapesInTheBackground) {
  const std::string path =
      ::testing::TempDir() + "/cts-programs-" + std::to_string(::getpid());
  std::remove(path.c_str());
  {
    CtsProgramCache cache;
    cache.RecordShapesTo(path);
    ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 20).ok());
    ASSERT_TRUE(cache.Get(pb::JOB_CHECKSUM, 14, 50).ok());
    ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 20).ok());
    EXPECT_EQ(cache.hits(), 1u);
  }
  {
    std::ofstream f(path, std::ios::app);
    // Refused: nr 12, a PAD, n < 16, a FAST key under a usage it never
    // takes, a FAST key of 24 bytes, a line of three fields.
    f << pb::JOB_DECRYPT << " 12 40 0 0\n" << pb::JOB_PAD << " 14 40 0 0\n"
      << pb::JOB_ENCRYPT << " 14 8 0 0\n" << pb::JOB_DECRYPT << " 14 44 32 3\n"
      << pb::JOB_DECRYPT << " 14 44 24 54\n" << pb::JOB_DECRYPT << " 10 30\n"
      << pb::JOB_DECRYPT << " 10 20 0 0\n" << pb::JOB_DECRYPT << " 14 44 32 54\n";
  }
  const std::vector<CtsProgramCache::Shape> shapes = CtsProgramCache::ReadShapes(path);
  ASSERT_EQ(shapes.size(), 3u);
  // DECRYPT 10 20: compiled, its second use, the line appended above.
  EXPECT_EQ(shapes[0], (CtsProgramCache::Shape{pb::JOB_DECRYPT, 10, 20, 0, 0, 0, 0}));
  // The checksum's class (one SHA-1 block: up to 55 bytes).
  EXPECT_EQ(shapes[1], (CtsProgramCache::Shape{pb::JOB_CHECKSUM, 0, 55, 0, 0, 0, 0}));
  EXPECT_EQ(shapes[2], (CtsProgramCache::Shape{pb::JOB_DECRYPT, 14, 44, 32, 54, 0, 0}));
  CtsProgramCache fresh;
  fresh.PrecompileInBackground(shapes);
  fresh.WaitPrecompiled();
  EXPECT_EQ(fresh.precompile_pending(), 0u);
  EXPECT_EQ(fresh.size(), 3u);
  ASSERT_TRUE(fresh.Get(pb::JOB_DECRYPT, 10, 20).ok());
  ASSERT_TRUE(fresh.Get(pb::JOB_CHECKSUM, 0, 50).ok());
  ASSERT_TRUE(fresh.Get(pb::JOB_DECRYPT, 14, 44, 32, 54).ok());
  EXPECT_EQ(fresh.hits(), 3u);
  EXPECT_EQ(fresh.misses(), 0u);
  {
    // Spliced replies (seven fields) beside the five-field lines above,
    // read as their class (conf || P of 56 to 64 bytes) and offset window
    // (the checksum ending bytes 49 to 64); refused: a splice on a DECRYPT
    // or under a FAST key, past the class's end, an offset without a
    // length, six fields, a message not dealt padded.
    std::ofstream f(path, std::ios::app);
    f << pb::JOB_ENCRYPT << " 14 60 0 0 20 32\n";
    f << pb::JOB_DECRYPT << " 14 60 0 0 64 0\n" << pb::JOB_ENCRYPT << " 14 60 32 3 64 0\n"
      << pb::JOB_ENCRYPT << " 14 60 0 0 64 53\n" << pb::JOB_ENCRYPT << " 14 60 0 0 0 4\n"
      << pb::JOB_ENCRYPT << " 14 60 0 0 64\n" << pb::JOB_ENCRYPT << " 10 60 0 0 64 32\n";
  }
  const auto more = CtsProgramCache::ReadShapes(path);
  ASSERT_EQ(more.size(), 4u);
  EXPECT_EQ(more[0], shapes[0]);
  EXPECT_EQ(more[3], (CtsProgramCache::Shape{pb::JOB_ENCRYPT, 10, 64, 0, 0, 64, 36}));
  {
    // What Get records for a spliced shape reads back as that shape.
    std::remove(path.c_str());
    CtsProgramCache cache;
    cache.RecordShapesTo(path);
    ASSERT_TRUE(cache.Get(pb::JOB_ENCRYPT, 10, 60, 0, 3, 64, 32).ok());
    EXPECT_FALSE(cache.Get(pb::JOB_DECRYPT, 10, 60, 0, 3, 64, 32).ok());
    EXPECT_FALSE(cache.Get(pb::JOB_ENCRYPT, 10, 60, 16, 3, 64, 32).ok());
    EXPECT_FALSE(cache.Get(pb::JOB_ENCRYPT, 10, 60, 0, 3, 64, 53).ok());
  }
  const auto spliced = CtsProgramCache::ReadShapes(path);
  ASSERT_EQ(spliced.size(), 1u);
  EXPECT_EQ(spliced[0], (CtsProgramCache::Shape{pb::JOB_ENCRYPT, 10, 64, 0, 0, 64, 36}));
  EXPECT_EQ(CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 60, 0, 3, 64, 32),
            CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 57, 0, 3, 64, 21));
  EXPECT_NE(CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 60, 0, 3, 64, 32),
            CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 60, 0, 3, 64, 20));
  EXPECT_NE(CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 60, 0, 3, 64, 32),
            CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 60, 0, 3, 128, 32));
  EXPECT_NE(CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 60, 0, 3, 64, 32),
            CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 10, 60, 0, 3));
  {
    // A ticket's (usage 2 kept: cts.h TicketClassProgram) reads back as
    // itself, apart from the reply splice of the same class and window.
    std::remove(path.c_str());
    CtsProgramCache cache;
    cache.RecordShapesTo(path);
    ASSERT_TRUE(cache.Get(pb::JOB_ENCRYPT, 14, 576, 0, 2, 384, 500).ok());
    // T_s's SHA-1 block past the class (568..631 bytes of conf || P).
    EXPECT_FALSE(cache.Get(pb::JOB_ENCRYPT, 14, 576, 0, 2, 384, 624).ok());
    EXPECT_NE(CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 14, 576, 0, 2, 384, 500),
              CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 14, 576, 0, 3, 384, 500));
  }
  const auto ticket = CtsProgramCache::ReadShapes(path);
  ASSERT_EQ(ticket.size(), 1u);
  // Recorded by its class and window (contract::CtsTicketClassMax,
  // CtsTicketWindow: T_s starts at 516, in conf || P's bytes 512..575).
  EXPECT_EQ(ticket[0], (CtsProgramCache::Shape{pb::JOB_ENCRYPT, 14, 631, 0, 2, 384, 559}));
  for (const auto& s : CtsProgramCache::UsualShapes()) {
    EXPECT_EQ(std::get<0>(s), pb::JOB_DECRYPT);
    EXPECT_TRUE(fresh.Get(pb::JOB_DECRYPT, std::get<1>(s), std::get<2>(s)).ok());
  }
  std::remove(path.c_str());
}

// A miss on one usual timestamp length compiles the other in the
// background, with the same key size, FAST key and usage (a realm's first
// FAST encrypted challenge readies its 43- and 44-byte programs); other
// shapes bring no sibling.
TEST(CtsProgramCache, AMissOnATimestampLengthCompilesTheOtherBehindIt) {
  CtsProgramCache cache;
  cache.set_masked(false);
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 14, 44, 32, 54).ok());
  cache.WaitPrecompiled();
  EXPECT_EQ(cache.precompile_pending(), 0u);
  EXPECT_EQ(cache.size(), 2u);
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 14, 43, 32, 54).ok());
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.hits(), 1u);
  // The sibling is of the same FAST key and usage only.
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 43).ok());
  cache.WaitPrecompiled();
  EXPECT_EQ(cache.size(), 4u);
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 44).ok());
  EXPECT_EQ(cache.misses(), 2u);
  // Timestamps only: not another length, type, usage (the KDC's
  // challenge, a ticket's DECRYPT) or a FAST key without the challenge's.
  for (const auto& s : {CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 14, 45, 0, 0),
                        CtsProgramCache::MakeShape(pb::JOB_ENCRYPT, 14, 44, 0, 0),
                        CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 14, 42, 32, 54),
                        CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 14, 43, 32, 55),
                        CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 14, 44, 0, 2)})
    EXPECT_FALSE(CtsProgramCache::TimestampSibling(s).has_value());
  EXPECT_EQ(CtsProgramCache::TimestampSibling(CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 10, 43,
                                                                         16, 54)),
            CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 10, 44, 16, 54));
  // --cts_precompile=false: no background compile at all.
  CtsProgramCache off;
  off.set_masked(false);
  off.set_precompile(false);
  ASSERT_TRUE(off.Get(pb::JOB_DECRYPT, 14, 44).ok());
  off.WaitPrecompiled();
  EXPECT_EQ(off.size(), 1u);
}

// The process's virtual size in KiB (/proc/self/status VmSize).
size_t VmSizeKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmSize:", 0) == 0) return std::stoul(line.substr(7));
  return 0;
}

// Background compiles asked for again and again (a KDC whose requests
// keep evicting a timestamp's sibling) run on the cache's one precompile
// thread: no thread, and no thread's stack, per request.
TEST(CtsProgramCache, RepeatedPrecompilesShareOneThread) {
  CtsProgramCache cache;
  cache.set_masked(false);
  ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 45).ok());
  cache.PrecompileInBackground({CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 10, 45, 0, 0)});
  cache.WaitPrecompiled();
  const size_t before = VmSizeKiB();
  ASSERT_GT(before, 0u);
  for (int i = 0; i < 300; ++i)
    cache.PrecompileInBackground({CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 10, 45, 0, 0)});
  // A thread a request (an 8 MiB stack each, kept until joined) would
  // have grown the process by ~2.4 GiB here (a bound well above a malloc
  // arena's 64 MiB, which the Shared() cache's threads may map meanwhile).
  EXPECT_LT(VmSizeKiB(), before + 1024 * 1024);
  cache.WaitPrecompiled();
  EXPECT_EQ(cache.precompile_pending(), 0u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.misses(), 1u);
  // A shape asked for three times in one request is queued once (the
  // thread decrements only after its compile, tens of ms).
  cache.PrecompileInBackground({CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 10, 46, 0, 0),
                                CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 10, 46, 0, 0),
                                CtsProgramCache::MakeShape(pb::JOB_DECRYPT, 10, 46, 0, 0)});
  EXPECT_EQ(cache.precompile_pending(), 1u);
  cache.WaitPrecompiled();
  EXPECT_EQ(cache.size(), 2u);
}

// The shape log stays bounded whatever the KDC sends (issue 48: it grew by
// a line per compile): shapes cycled through more than a server keeps
// are compiled again and again, yet the file never holds more than
// kMaxLogLines + kMaxPrograms / 2 lines, and the common shape (a use per
// round) leads what a restarted server precompiles.
TEST(CtsProgramCache, TheShapeLogIsBoundedAndLedByTheCommonShapes) {
  const std::string path =
      ::testing::TempDir() + "/cts-programs-bounded-" + std::to_string(::getpid());
  std::remove(path.c_str());
  auto lines = [&] {
    std::ifstream f(path);
    size_t n = 0;
    for (std::string l; std::getline(f, l);) ++n;
    return n;
  };
  size_t most = 0;
  {
    CtsProgramCache cache;
    cache.RecordShapesTo(path);
    const size_t distinct = CtsProgramCache::kMaxPrograms + 8;
    for (int round = 0; round < 8; ++round) {
      for (size_t i = 0; i < distinct; ++i) {
        ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 14, 16 + i).ok());
        for (int k = 0; k < 8; ++k) ASSERT_TRUE(cache.Get(pb::JOB_DECRYPT, 10, 44).ok());
      }
      most = std::max(most, lines());
    }
    EXPECT_GE(cache.misses(), 8 * distinct);
  }
  EXPECT_LE(most, CtsProgramCache::kMaxLogLines + CtsProgramCache::kMaxPrograms / 2);
  const auto shapes = CtsProgramCache::ReadShapes(path);
  ASSERT_FALSE(shapes.empty());
  EXPECT_LE(shapes.size(), CtsProgramCache::kMaxPrograms / 2);
  EXPECT_EQ(shapes[0], (CtsProgramCache::Shape{pb::JOB_DECRYPT, 10, 44, 0, 0, 0, 0}));
  // A restart reads and rewrites it: one line per kept shape.
  CtsProgramCache restarted;
  restarted.RecordShapesTo(path);
  EXPECT_EQ(lines(), shapes.size());
  EXPECT_EQ(CtsProgramCache::ReadShapes(path), shapes);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kmpc::engine
