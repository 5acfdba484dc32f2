#include "store/share_store.h"

#include <lmdb.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "test_util.h"

namespace kmpc::store {
namespace {

std::string TempDir() { return ::kmpc::testing::MakeTempDir("store-test"); }

KeyId Id(uint8_t b) {
  KeyId id;
  id.fill(b);
  return id;
}

TEST(ShareStoreTest, PutGetListDelete) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<uint8_t> shares = {1, 2, 3, 4, 5};
  KeyMeta meta{Id(7), Cipher::kAes256, 3, "alice@EXAMPLE.COM"};
  ASSERT_TRUE((*store)->Put(meta, shares, false).ok());
  EXPECT_EQ((*store)->Put(meta, shares, false).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE((*store)->Put(meta, shares, true).ok());
  auto rec = (*store)->Get(Id(7));
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ(rec->meta.cipher, Cipher::kAes256);
  EXPECT_EQ(rec->meta.kvno, 3u);
  EXPECT_EQ(rec->meta.label, "alice@EXAMPLE.COM");
  EXPECT_EQ(std::vector<uint8_t>(rec->shares.span().begin(), rec->shares.span().end()),
            shares);
  EXPECT_EQ((*store)->Get(Id(8)).status().code(), absl::StatusCode::kNotFound);
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(*(*store)->Count(), 1u);
  EXPECT_TRUE((*store)->Delete(Id(7)).ok());
  EXPECT_EQ((*store)->Delete(Id(7)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*(*store)->Count(), 0u);
}

TEST(ShareStoreTest, KeyIdSize) {
  std::vector<uint8_t> b(31);
  EXPECT_EQ(KeyIdFromBytes(b).status().code(), absl::StatusCode::kInvalidArgument);
  b.resize(32);
  EXPECT_TRUE(KeyIdFromBytes(b).ok());
}

TEST(ShareStoreTest, DecodeHostileRecords) {
  KeyMeta meta{Id(1), Cipher::kAes128, 1, "x"};
  std::vector<uint8_t> shares(100, 9);
  std::vector<uint8_t> good = EncodeRecord(meta, shares);
  ASSERT_TRUE(DecodeRecord(Id(1), good).ok());
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(DecodeRecord(Id(1), absl::MakeConstSpan(good.data(), n)).ok()) << n;
  }
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  EXPECT_FALSE(DecodeRecord(Id(1), longer).ok());
  std::mt19937 rng(2);
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> v = good;
    v[rng() % v.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    (void)DecodeRecord(Id(1), v);
    std::vector<uint8_t> r(rng() % 64);
    for (auto& x : r) x = rng();
    (void)DecodeRecord(Id(1), r);
  }
}

// The key's kind (kmpc.proto KeyKind) is stored with its metadata; a
// record written before it ("KMS1", no kind byte) loads as a user's key,
// the gated kind; an unknown kind does not load.
TEST(ShareStoreTest, KindRoundTripsAndOldRecordsAreUserKeys) {
  std::vector<uint8_t> shares(40, 7);
  for (KeyKind k : {KeyKind::kUser, KeyKind::kService, KeyKind::kUserService}) {
    KeyMeta meta{Id(2), Cipher::kAes256Cts, 4, "bob@R"};
    meta.kind = k;
    auto rec = DecodeRecord(Id(2), EncodeRecord(meta, shares));
    ASSERT_TRUE(rec.ok()) << rec.status();
    EXPECT_EQ(rec->meta.kind, k);
    EXPECT_EQ(rec->meta.label, "bob@R");
  }
  // A record of the format before key kinds ("KMS1"). Byte by byte: GCC
  // 12 reads a range insert here as a read past the initializer list
  // (-Wstringop-overread, a false positive).
  const uint8_t v1_header[] = {'K', 'M', 'S', '1', 18, 4,   0,   0,   0,   5,
                               0,   'b', 'o', 'b', '@', 'R', 40, 0,   0,   0};
  std::vector<uint8_t> v1;
  for (uint8_t b : v1_header) v1.push_back(b);
  for (uint8_t b : shares) v1.push_back(b);
  auto old = DecodeRecord(Id(2), v1);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->meta.kind, KeyKind::kUser);
  EXPECT_EQ(old->meta.cipher, Cipher::kAes256Cts);
  EXPECT_EQ(old->meta.kvno, 4u);
  KeyMeta meta{Id(2), Cipher::kAes256Cts, 4, "bob@R"};
  std::vector<uint8_t> bad = EncodeRecord(meta, shares);
  bad[5] = 3;  // the kind byte
  EXPECT_FALSE(DecodeRecord(Id(2), bad).ok());
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok()) << store.status();
  meta.kind = KeyKind::kService;
  ASSERT_TRUE((*store)->Put(meta, shares, false).ok());
  EXPECT_EQ((*store)->Get(Id(2))->meta.kind, KeyKind::kService);
  EXPECT_EQ((*(*store)->List())[0].kind, KeyKind::kService);
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

std::string FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// How many of the 64-byte pieces of `secret` occur in the file: 0 means no
// recognisable part of it is left.
int PiecesInFile(const std::string& path, const std::vector<uint8_t>& secret) {
  const std::string file = FileBytes(path);
  int found = 0;
  for (size_t off = 0; off + 64 <= secret.size(); off += 64) {
    std::string piece(reinterpret_cast<const char*>(secret.data() + off), 64);
    if (file.find(piece) != std::string::npos) ++found;
  }
  return found;
}

// A record of the format before key kinds ("KMS1": no kind byte), as the
// servers of that time wrote it.
std::vector<uint8_t> OldFormatRecord(const KeyMeta& meta, const std::vector<uint8_t>& shares) {
  std::vector<uint8_t> v = EncodeRecord(meta, shares);
  v[3] = '1';
  v.erase(v.begin() + 5);  // the kind byte
  return v;
}

// Re-marking a stored key's kind (Admin.SetKeyKind): with immutable ids,
// the servers' default, Put cannot replace a record, so a key stored
// before key kinds could not be given one (nor lose material) short of a
// new key; Edit rewrites it in the current format and scrubs the old
// record from the file.
TEST(ShareStoreTest, EditRewritesAnOldFormatRecordUnderImmutableIds) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok()) << store.status();
  (*store)->set_immutable_ids(true);
  const std::vector<uint8_t> shares = RandomBytes(3000, 11);
  KeyMeta meta{Id(4), Cipher::kAes256Cts, 2, "carol@R"};
  ASSERT_TRUE((*store)->put_raw_for_test(Id(4), OldFormatRecord(meta, shares)).ok());
  auto old = (*store)->Get(Id(4));
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_TRUE(old->meta.kind_unrecorded);
  EXPECT_EQ(old->meta.kind, KeyKind::kUser);
  EXPECT_TRUE((*(*store)->List())[0].kind_unrecorded);
  // The only way before Edit: refused.
  meta.kind = KeyKind::kUser;
  EXPECT_EQ((*store)->Put(meta, shares, true).code(), absl::StatusCode::kFailedPrecondition);

  const std::vector<uint8_t> smaller(shares.begin(), shares.begin() + 1000);
  auto changed = (*store)->Edit(Id(4), [&](KeyRecord& rec) -> absl::StatusOr<bool> {
    EXPECT_TRUE(rec.meta.kind_unrecorded);
    rec.meta.kind = KeyKind::kUser;
    rec.shares = SecretBytes(smaller);
    return true;
  });
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  auto now = (*store)->Get(Id(4));
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_FALSE(now->meta.kind_unrecorded);
  EXPECT_EQ(now->meta.kind, KeyKind::kUser);
  EXPECT_EQ(now->meta.label, "carol@R");
  EXPECT_EQ(now->meta.kvno, 2u);
  EXPECT_EQ(std::vector<uint8_t>(now->shares.span().begin(), now->shares.span().end()),
            smaller);
  // What the edit removed is gone from the file (scrubbed), what it kept
  // is there.
  const std::vector<uint8_t> removed(shares.begin() + 1000, shares.end());
  EXPECT_EQ(PiecesInFile((*store)->data_file(), removed), 0);
  EXPECT_GT(PiecesInFile((*store)->data_file(), smaller), 0);
}

TEST(ShareStoreTest, EditOfNothingChangesNothingAndErrorsAbort) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok()) << store.status();
  (*store)->set_immutable_ids(true);
  const std::vector<uint8_t> shares(64, 9);
  KeyMeta meta{Id(5), Cipher::kAes128Cts, 1, "dave@R"};
  ASSERT_TRUE((*store)->Put(meta, shares, false).ok());
  auto same = (*store)->Edit(Id(5), [](KeyRecord&) -> absl::StatusOr<bool> { return false; });
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(*same);
  auto refused = (*store)->Edit(Id(5), [](KeyRecord& rec) -> absl::StatusOr<bool> {
    rec.meta.kind = KeyKind::kService;
    return absl::FailedPreconditionError("no");
  });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->Get(Id(5))->meta.kind, KeyKind::kUser);
  // Only the kind and the shares may change.
  auto relabel = (*store)->Edit(Id(5), [](KeyRecord& rec) -> absl::StatusOr<bool> {
    rec.meta.label = "eve@R";
    return true;
  });
  EXPECT_FALSE(relabel.ok());
  EXPECT_EQ((*store)->Get(Id(5))->meta.label, "dave@R");
  auto none = (*store)->Edit(Id(6), [](KeyRecord&) -> absl::StatusOr<bool> { return true; });
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE((*store)->Delete(Id(5)).ok());  // a tombstone (immutable ids)
  auto gone = (*store)->Edit(Id(5), [](KeyRecord&) -> absl::StatusOr<bool> { return true; });
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
}

std::vector<uint8_t> SharesOf(ShareStore& s, const KeyId& id) {
  auto rec = s.Get(id);
  EXPECT_TRUE(rec.ok()) << rec.status();
  if (!rec.ok()) return {};
  return std::vector<uint8_t>(rec->shares.span().begin(), rec->shares.span().end());
}

// LMDB keeps freed pages as they were; the store must not leave a deleted
// or replaced record's shares in data.mdb.
TEST(ShareStoreTest, DeletedAndReplacedSharesLeaveTheFile) {
  const std::string dir = TempDir();
  auto store = ShareStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  ShareStore& s = **store;
  const auto a = RandomBytes(3000, 1), b = RandomBytes(3000, 2),
             b2 = RandomBytes(3000, 3), c = RandomBytes(500, 4);
  ASSERT_TRUE(s.Put({Id(1), Cipher::kAes256, 1, "a"}, a, false).ok());
  ASSERT_TRUE(s.Put({Id(2), Cipher::kAes256, 1, "b"}, b, false).ok());
  ASSERT_TRUE(s.Put({Id(3), Cipher::kAes128, 1, "c"}, c, false).ok());
  const std::string file = s.data_file();
  // The scan finds live records (so a zero below means something).
  ASSERT_EQ(PiecesInFile(file, a), 3000 / 64);
  ASSERT_EQ(PiecesInFile(file, b), 3000 / 64);

  ASSERT_TRUE(s.Delete(Id(1)).ok());
  EXPECT_EQ(PiecesInFile(file, a), 0);
  EXPECT_EQ(PiecesInFile(file, b), 3000 / 64);
  EXPECT_EQ(s.Get(Id(1)).status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(s.Put({Id(2), Cipher::kAes256, 2, "b"}, b2, true).ok());
  EXPECT_EQ(PiecesInFile(file, b), 0);
  EXPECT_EQ(PiecesInFile(file, b2), 3000 / 64);
  EXPECT_EQ(SharesOf(s, Id(2)), b2);
  EXPECT_EQ(SharesOf(s, Id(3)), c);
  EXPECT_EQ(*s.Count(), 2u);

  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(access((file + ".compact").c_str(), F_OK), 0);

  // Still a good store after a restart.
  store->reset();
  auto again = ShareStore::Open(dir);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(SharesOf(**again, Id(2)), b2);
  EXPECT_EQ(SharesOf(**again, Id(3)), c);
  EXPECT_EQ(*(*again)->Count(), 2u);
}

// A store whose file already holds a deleted record (written before this
// scrubbing existed, or a crash before the compaction) is cleaned at Open.
TEST(ShareStoreTest, OpenScrubsWhatLmdbLeftBehind) {
  const std::string dir = TempDir();
  const auto secret = RandomBytes(3000, 5);
  {
    auto store = ShareStore::Open(dir);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Put({Id(9), Cipher::kAes128, 1, "keep"}, RandomBytes(100, 6),
                              false).ok());
  }
  // Plain LMDB: put and delete a record, as the store did before.
  MDB_env* env = nullptr;
  ASSERT_EQ(mdb_env_create(&env), 0);
  ASSERT_EQ(mdb_env_open(env, dir.c_str(), 0, 0600), 0);
  for (int del = 0; del < 2; ++del) {
    MDB_txn* txn = nullptr;
    MDB_dbi dbi;
    ASSERT_EQ(mdb_txn_begin(env, nullptr, 0, &txn), 0);
    ASSERT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
    KeyId id = Id(8);
    MDB_val k{id.size(), id.data()};
    std::vector<uint8_t> rec = EncodeRecord({id, Cipher::kAes128, 1, "gone"}, secret);
    MDB_val v{rec.size(), rec.data()};
    ASSERT_EQ(del ? mdb_del(txn, dbi, &k, nullptr) : mdb_put(txn, dbi, &k, &v, 0), 0);
    ASSERT_EQ(mdb_txn_commit(txn), 0);
  }
  mdb_env_close(env);
  const std::string file = dir + "/data.mdb";
  // LMDB's behaviour this guards against: the deleted shares are still there.
  ASSERT_GT(PiecesInFile(file, secret), 0);
  auto store = ShareStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(PiecesInFile(file, secret), 0);
  EXPECT_EQ(*(*store)->Count(), 1u);
  EXPECT_EQ((*store)->Get(Id(8)).status().code(), absl::StatusCode::kNotFound);
}

// kmpc-mpc-server's default: a stored id's shares cannot be replaced, and a
// deleted id cannot be stored again (no swapping in shares of a known key).
TEST(ShareStoreTest, ImmutableIds) {
  const std::string dir = TempDir();
  auto store = ShareStore::Open(dir);
  ASSERT_TRUE(store.ok());
  ShareStore& s = **store;
  s.set_immutable_ids(true);
  const auto a = RandomBytes(3000, 11), a2 = RandomBytes(3000, 12);
  ASSERT_TRUE(s.Put({Id(1), Cipher::kAes256, 1, "krbtgt"}, a, false).ok());
  ASSERT_TRUE(s.Put({Id(2), Cipher::kAes256, 1, "other"}, a2, false).ok());
  EXPECT_EQ(s.Put({Id(1), Cipher::kAes256, 1, "krbtgt"}, a2, false).code(),
            absl::StatusCode::kAlreadyExists);
  absl::Status st = s.Put({Id(1), Cipher::kAes256, 2, "krbtgt"}, a2, true);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_EQ(SharesOf(s, Id(1)), a);
  ASSERT_TRUE(s.Delete(Id(1)).ok());
  EXPECT_EQ(PiecesInFile(s.data_file(), a), 0);  // the tombstone scrubs too
  EXPECT_EQ(s.Get(Id(1)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.Delete(Id(1)).code(), absl::StatusCode::kNotFound);
  for (bool replace : {false, true}) {
    st = s.Put({Id(1), Cipher::kAes256, 2, "krbtgt"}, a2, replace);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(st.message().find("was deleted"), std::string::npos) << st;
  }
  EXPECT_EQ(*s.Count(), 1u);
  auto list = s.List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].label, "other");
  // The tombstone outlives a restart; with replacing allowed it can be reused.
  store->reset();
  auto again = ShareStore::Open(dir);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->Get(Id(1)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*again)->Put({Id(1), Cipher::kAes256, 2, "k"}, a2, false).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE((*again)->Put({Id(1), Cipher::kAes256, 2, "k"}, a2, true).ok());
  EXPECT_EQ(SharesOf(**again, Id(1)), a2);
  EXPECT_EQ(*(*again)->Count(), 2u);
}

// Reads go on, consistent, while deletions and replacements compact and
// reopen the file.
TEST(ShareStoreTest, ReadsDuringCompaction) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok());
  ShareStore& s = **store;
  const auto stable = RandomBytes(2000, 7);
  ASSERT_TRUE(s.Put({Id(1), Cipher::kAes256, 1, "stable"}, stable, false).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&] {
      while (!stop) {
        auto rec = s.Get(Id(1));
        if (!rec.ok() || !std::equal(stable.begin(), stable.end(),
                                     rec->shares.span().begin(), rec->shares.span().end()))
          ++bad;
        if (!s.List().ok()) ++bad;
        ++reads;
      }
    });
  for (int i = 0; i < 20; ++i) {
    auto v = RandomBytes(2000, 100 + i);
    ASSERT_TRUE(s.Put({Id(2), Cipher::kAes256, 1, "x"}, v, true).ok());
    if (i % 2) ASSERT_TRUE(s.Delete(Id(2)).ok());
  }
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(bad, 0);
  EXPECT_GT(reads, 0);
}

// The replaced file is zeroed after the store's lock is released: a read
// made while it is being zeroed does not wait for it.
TEST(ShareStoreTest, ZeroingTheOldFileDoesNotBlockReads) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok());
  ShareStore& s = **store;
  const auto keep = RandomBytes(2000, 21);
  ASSERT_TRUE(s.Put({Id(1), Cipher::kAes256, 1, "keep"}, keep, false).ok());
  ASSERT_TRUE(s.Put({Id(2), Cipher::kAes256, 1, "gone"}, RandomBytes(2000, 22), false).ok());
  int hooks = 0;
  bool read_done = false;
  // Outlives the hook: a read still blocked completes once Delete returns.
  std::future<std::vector<uint8_t>> read;
  s.set_before_zero_hook_for_test([&] {
    ++hooks;
    read = std::async(std::launch::async, [&] { return SharesOf(s, Id(1)); });
    read_done = read.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  });
  ASSERT_TRUE(s.Delete(Id(2)).ok());
  ASSERT_TRUE(read.valid());
  EXPECT_EQ(read.get(), keep);
  EXPECT_EQ(hooks, 1);
  EXPECT_TRUE(read_done) << "a read waited for the old file to be zeroed";
  s.set_before_zero_hook_for_test(nullptr);
  EXPECT_EQ(PiecesInFile(s.data_file(), keep), 2000 / 64);
}

// An environment left closed (a failed reopen after a compaction) is
// reopened by the next read; reads do not stay UNAVAILABLE.
TEST(ShareStoreTest, ReadsReopenAClosedStore) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok());
  ShareStore& s = **store;
  const auto a = RandomBytes(500, 23);
  ASSERT_TRUE(s.Put({Id(1), Cipher::kAes128, 1, "a"}, a, false).ok());
  s.close_env_for_test();
  EXPECT_EQ(SharesOf(s, Id(1)), a);
  s.close_env_for_test();
  auto list = s.List();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 1u);
  s.close_env_for_test();
  auto n = s.Count();
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 1u);
}

// A second opener of the same store (another server process pointed at the
// same --store_dir) is refused while the first has it open.
TEST(ShareStoreTest, SecondOpenerRefused) {
  const std::string dir = TempDir();
  auto first = ShareStore::Open(dir);
  ASSERT_TRUE(first.ok());
  auto second = ShareStore::Open(dir);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition)
      << second.status();
  EXPECT_NE(second.status().message().find("in use by another process"), std::string::npos);
  // Another process too (flock is per open file, so a child sees it held).
  const std::string cmd = "flock -n " + dir + "/kmpc.lock true";
  EXPECT_NE(system(cmd.c_str()), 0);
  first->reset();
  EXPECT_TRUE(ShareStore::Open(dir).ok());
  EXPECT_EQ(system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace kmpc::store

namespace kmpc::store {
namespace {

// Share refresh's bulk calls: PutAll stores all or nothing, DeleteAll
// removes many ids with one scrub, Taken sees tombstones.
TEST(ShareStoreTest, PutAllIsAllOrNothing) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok()) << store.status();
  ShareStore& s = **store;
  const auto a = RandomBytes(3000, 11), b = RandomBytes(3000, 12);
  ASSERT_TRUE(s.Put({Id(5), Cipher::kAes256, 1, "five"}, a, false).ok());
  // One taken id: nothing of the batch is stored.
  std::vector<ShareStore::NewRecord> bad = {
      {{Id(20), Cipher::kAes256, 2, "x"}, b}, {{Id(5), Cipher::kAes256, 2, "y"}, b}};
  EXPECT_EQ(s.PutAll(bad).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Get(Id(20)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(SharesOf(s, Id(5)), a);
  std::vector<ShareStore::NewRecord> good = {
      {{Id(20), Cipher::kAes256, 2, "x"}, b}, {{Id(21), Cipher::kAes128, 3, "y"}, a}};
  ASSERT_TRUE(s.PutAll(good).ok());
  EXPECT_EQ(SharesOf(s, Id(20)), b);
  auto rec = s.Get(Id(21));
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->meta.kvno, 3u);
  EXPECT_EQ(rec->meta.label, "y");
  EXPECT_EQ(*s.Count(), 3u);
}

TEST(ShareStoreTest, DeleteAllScrubsAndReportsUnknownIds) {
  auto store = ShareStore::Open(TempDir());
  ASSERT_TRUE(store.ok()) << store.status();
  ShareStore& s = **store;
  s.set_immutable_ids(true);
  const auto a = RandomBytes(3000, 21), b = RandomBytes(3000, 22),
             c = RandomBytes(3000, 23);
  ASSERT_TRUE(s.Put({Id(1), Cipher::kAes256, 1, "a"}, a, false).ok());
  ASSERT_TRUE(s.Put({Id(2), Cipher::kAes256, 1, "b"}, b, false).ok());
  ASSERT_TRUE(s.Put({Id(3), Cipher::kAes256, 1, "c"}, c, false).ok());
  EXPECT_FALSE(*s.Taken(Id(9)));
  std::vector<KeyId> missing;
  ASSERT_TRUE(s.DeleteAll({Id(1), Id(9), Id(2)}, &missing).ok());
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0], Id(9));
  const std::string file = s.data_file();
  EXPECT_EQ(PiecesInFile(file, a), 0);
  EXPECT_EQ(PiecesInFile(file, b), 0);
  EXPECT_EQ(PiecesInFile(file, c), 3000 / 64);
  EXPECT_EQ(*s.Count(), 1u);
  // Tombstones: taken, not stored again, not listed.
  EXPECT_TRUE(*s.Taken(Id(1)));
  EXPECT_EQ(s.PutAll({{{Id(1), Cipher::kAes256, 1, "a"}, a}}).code(),
            absl::StatusCode::kFailedPrecondition);
  missing.clear();
  ASSERT_TRUE(s.DeleteAll({Id(1)}, &missing).ok());
  EXPECT_EQ(missing.size(), 1u);
}

}  // namespace
}  // namespace kmpc::store
