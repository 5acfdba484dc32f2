// The aes*-cts jobs free no buffer that still holds a share of a key's
// dealt material (round keys, HMAC states) or of a message (engine/cts_jobs.h:
// "outputs ... wiped"; the brief's "zero secrets after use"). This binary
// replaces free(): while RunCtsTasks runs on three in-process parties, every
// block freed is scanned for the 8-byte markers the material's and the
// messages' share components are made of, and each block holding one is
// counted (as test/server/request_wipe_test.cc does for received requests).
#include <gtest/gtest.h>
#include <malloc.h>

#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "cts/cts.h"
#include "cts/dealer.h"
#include "engine/cts_jobs.h"
#include "engine/engine.h"
#include "rep3_cluster.h"
#include "test_util.h"

extern "C" void __libc_free(void* p);

namespace {

constexpr unsigned char kMarker[8] = {0xC3, 0x5A, 0x96, 0x3C, 0xE1, 0x7B, 0x0F, 0xA4};
// Component k of a value with tag t is kMarker with each byte XOR (16 t + k).
constexpr int kVariants = 64;  // tags 0 to 3
// Or, for values made elsewhere (the dealer's random shares): up to
// kMaxNeedles 8-byte pieces of them, set while disarmed.
constexpr int kMaxNeedles = 64;
unsigned char g_needles[kMaxNeedles][8];
int g_nneedles = 0;
std::atomic<bool> g_armed{false};
std::atomic<int> g_hits{0};
std::atomic<size_t> g_first_hit_size{0};

bool HoldsMarker(const void* p, size_t n) {
  unsigned char m[8];
  for (int v = 0; v < kVariants; ++v) {
    for (int i = 0; i < 8; ++i) m[i] = kMarker[i] ^ static_cast<unsigned char>(v);
    if (memmem(p, n, m, sizeof m) != nullptr) return true;
  }
  for (int k = 0; k < g_nneedles; ++k)
    if (memmem(p, n, g_needles[k], 8) != nullptr) return true;
  return false;
}

}  // namespace

extern "C" void free(void* p) {
  if (p != nullptr && g_armed.load(std::memory_order_relaxed)) {
    const size_t n = malloc_usable_size(p);
    if (HoldsMarker(p, n) && g_hits.fetch_add(1) == 0) g_first_hit_size = n;
  }
  __libc_free(p);
}

namespace kmpc::engine {
namespace {

using ::kmpc::testing::RunParties;

std::vector<uint8_t> Pattern(size_t n, int tag, int comp) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i)
    b[i] = kMarker[i % 8] ^ static_cast<uint8_t>(16 * tag + comp);
  return b;
}

// Party p's two components (p, p+1) of the value whose components are the
// patterns of `tag`.
std::array<std::vector<uint8_t>, 2> View(size_t n, int tag, int party) {
  return {Pattern(n, tag, party), Pattern(n, tag, (party + 1) % 3)};
}

TEST(CtsJobsWipe, NoFreedBlockHoldsMaterialOrMessageShares) {
  ::kmpc::testing::Rep3Cluster c;
  const int nr = 14;
  const size_t mbytes = cts::UsageMaterialBytes(nr);
  const size_t n_dec = 44, n_enc = 16 + 100;
  auto dec = CtsProgramCache::Shared().Get(pb::JOB_DECRYPT, nr, n_dec);
  auto enc = CtsProgramCache::Shared().Get(pb::JOB_ENCRYPT, nr, n_enc);
  ASSERT_TRUE(dec.ok() && enc.ok());
  std::array<std::array<CtsMaterial, 2>, 3> material;
  std::array<std::array<std::vector<uint8_t>, 2>, 3> plain, ct;
  std::array<std::vector<CtsTask>, 3> tasks;
  for (int p = 0; p < 3; ++p) {
    material[p][0].share = View(mbytes, 0, p);
    material[p][1].share = View(mbytes, 1, p);
    plain[p] = View(n_enc - 16, 2, p);
    ct[p] = View(n_dec + cts::kTagBytes, 3, p);
    CtsTask d;
    d.job = 0;
    d.type = pb::JOB_DECRYPT;
    d.nr = nr;
    d.n = n_dec;
    d.material = &material[p][0];
    d.shared_in = {ct[p][0], ct[p][1]};
    d.program = *dec;
    CtsTask e;
    e.job = 1;
    e.type = pb::JOB_ENCRYPT;
    e.nr = nr;
    e.n = n_enc;
    e.material = &material[p][1];
    e.shared_in = {plain[p][0], plain[p][1]};
    e.program = *enc;
    tasks[p].push_back(std::move(d));
    tasks[p].push_back(std::move(e));
  }
  g_hits = 0;
  g_armed = true;
  auto st = RunParties([&](int i) -> absl::Status {
    return RunCtsTasks(*c.rep3[i], *c.prss[i], 1 << 16, absl::MakeSpan(tasks[i]),
                       EngineOptions::kCtsMaskedMaxAndWords);
  });
  for (int p = 0; p < 3; ++p) tasks[p].clear();  // outputs: wiped by ~CtsTask
  g_armed = false;
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(g_hits.load(), 0) << "freed blocks still held a share of the dealt material "
                                 "or of the plaintext (first: a block of "
                              << g_first_hit_size.load() << " bytes)";
}

// A key record of an aes*-cts key (KeyShares::Serialize, as kmpc-admin
// sends it and a server stores it): the buffer grows by the material past
// its first size, and each copy it leaves behind held the round keys' and
// H powers' shares. kmpc-admin serialises all three views, so its freed
// heap held every component of the base key's round keys.
TEST(CtsJobsWipe, KeyRecordSerialisationFreesNoShare) {
  const std::vector<uint8_t> key = ::kmpc::testing::Random(32);
  auto views = DealKey(Cipher::kAes256Cts, key);
  ASSERT_TRUE(views.ok()) << views.status();
  g_nneedles = 0;
  for (int k = 0; k < 2; ++k) {
    const KeyShares& v = (*views)[0];
    for (const std::vector<uint8_t>* b : {&v.round_keys[k], &v.h_powers[k], &v.cts[0].share[k]})
      for (size_t off = 0; off + 8 <= b->size() && g_nneedles < kMaxNeedles; off += 64)
        std::memcpy(g_needles[g_nneedles++], b->data() + off, 8);
  }
  g_hits = 0;
  g_armed = true;
  std::vector<uint8_t> rec = (*views)[0].Serialize();
  share::Wipe(rec);
  rec = std::vector<uint8_t>();
  g_armed = false;
  g_nneedles = 0;
  EXPECT_EQ(g_hits.load(), 0) << "serialising a key record freed a block holding its "
                                 "shares (first: " << g_first_hit_size.load() << " bytes)";
}

}  // namespace
}  // namespace kmpc::engine
