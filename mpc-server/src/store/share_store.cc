#include "store/share_store.h"

#include <fcntl.h>
#include <lmdb.h>
#include <openssl/crypto.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <functional>
#include <shared_mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace kmpc::store {
namespace {

// Record layout (little endian):
//   "KMS2" | cipher u8 | kind u8 | kvno u32 | label_len u16 | label |
//   shares_len u32 | shares
// cipher is a store/cipher.h value (1, 2; 17, 18 for aes*-cts), kind a
// KeyKind; the shares are a versioned KeyShares encoding (engine.h: version
// 2 adds the aes*-cts material), so records written before those ciphers
// load unchanged. A "KMS1" record (no kind byte, written before it) loads
// as a user key (KeyKind::kUser).
constexpr uint8_t kMagic[4] = {'K', 'M', 'S', '2'};
constexpr uint8_t kMagicV1[4] = {'K', 'M', 'S', '1'};
// A deleted id's value while key ids are immutable (set_immutable_ids).
constexpr uint8_t kTombstone[4] = {'K', 'M', 'T', '1'};

bool IsTombstone(const MDB_val& v) {
  return v.mv_size == sizeof(kTombstone) &&
         std::memcmp(v.mv_data, kTombstone, sizeof(kTombstone)) == 0;
}
constexpr size_t kMaxLabel = 1024;
constexpr size_t kMaxShares = 1 << 20;

absl::Status LmdbError(const char* what, int rc) {
  std::string msg = absl::StrCat("lmdb ", what, ": ", mdb_strerror(rc));
  if (rc == MDB_MAP_FULL) return absl::ResourceExhaustedError(msg);
  if (rc == MDB_CORRUPTED || rc == MDB_PAGE_NOTFOUND || rc == MDB_INVALID)
    return absl::DataLossError(msg);
  return absl::InternalError(msg);
}

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Read-only transaction, aborted on scope exit.
class ReadTxn {
 public:
  explicit ReadTxn(MDB_env* env) { rc_ = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn_); }
  ~ReadTxn() { if (txn_ != nullptr) mdb_txn_abort(txn_); }
  int rc() const { return rc_; }
  MDB_txn* get() const { return txn_; }

 private:
  MDB_txn* txn_ = nullptr;
  int rc_;
};

// What Put and PutAll accept.
absl::Status CheckRecord(const KeyMeta& meta, absl::Span<const uint8_t> shares) {
  if (meta.label.size() > kMaxLabel)
    return absl::InvalidArgumentError(
        absl::StrCat("label longer than ", kMaxLabel, " bytes"));
  if (shares.empty() || shares.size() > kMaxShares)
    return absl::InvalidArgumentError("shares empty or too large");
  return absl::OkStatus();
}

}  // namespace

SecretBytes& SecretBytes::operator=(SecretBytes&& o) noexcept {
  if (this != &o) {
    if (!data_.empty()) OPENSSL_cleanse(data_.data(), data_.size());
    data_ = std::move(o.data_);
  }
  return *this;
}

SecretBytes::~SecretBytes() {
  if (!data_.empty()) OPENSSL_cleanse(data_.data(), data_.size());
}

absl::StatusOr<KeyId> KeyIdFromBytes(absl::Span<const uint8_t> bytes) {
  if (bytes.size() != kKeyIdSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key id must be ", kKeyIdSize, " bytes, got ", bytes.size()));
  }
  KeyId id;
  std::memcpy(id.data(), bytes.data(), kKeyIdSize);
  return id;
}

std::string KeyIdHex(const KeyId& id) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(id.data()), id.size()));
}

std::vector<uint8_t> EncodeRecord(const KeyMeta& meta,
                                  absl::Span<const uint8_t> shares) {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  out.push_back(static_cast<uint8_t>(meta.cipher));
  out.push_back(static_cast<uint8_t>(meta.kind));
  PutU32(out, meta.kvno);
  out.push_back(static_cast<uint8_t>(meta.label.size()));
  out.push_back(static_cast<uint8_t>(meta.label.size() >> 8));
  out.insert(out.end(), meta.label.begin(), meta.label.end());
  PutU32(out, static_cast<uint32_t>(shares.size()));
  out.insert(out.end(), shares.begin(), shares.end());
  return out;
}

absl::StatusOr<KeyRecord> DecodeRecord(const KeyId& id,
                                       absl::Span<const uint8_t> v) {
  auto corrupt = [&](const char* why) {
    return absl::DataLossError(
        absl::StrCat("corrupt share record ", KeyIdHex(id), ": ", why));
  };
  size_t pos = 0;
  auto need = [&](size_t n) { return v.size() - pos >= n; };
  auto u32 = [&]() {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i) x |= uint32_t{v[pos + i]} << (8 * i);
    pos += 4;
    return x;
  };
  if (!need(4)) return corrupt("magic");
  const bool v1 = std::memcmp(v.data(), kMagicV1, 4) == 0;
  if (!v1 && std::memcmp(v.data(), kMagic, 4) != 0) return corrupt("magic");
  pos = 4;
  if (!need(1 + (v1 ? 0 : 1) + 4 + 2)) return corrupt("truncated header");
  KeyRecord rec;
  rec.meta.key_id = id;
  uint8_t c = v[pos++];
  if (c != 1 && c != 2 && c != 17 && c != 18) return corrupt("cipher");
  rec.meta.cipher = static_cast<Cipher>(c);
  if (!v1) {
    const uint8_t k = v[pos++];
    if (k >= kKeyKinds) return corrupt("kind");
    rec.meta.kind = static_cast<KeyKind>(k);
  }
  rec.meta.kind_unrecorded = v1;
  rec.meta.kvno = u32();
  size_t label_len = v[pos] | (size_t{v[pos + 1]} << 8);
  pos += 2;
  if (label_len > kMaxLabel || !need(label_len)) return corrupt("label");
  rec.meta.label.assign(reinterpret_cast<const char*>(v.data() + pos), label_len);
  pos += label_len;
  if (!need(4)) return corrupt("truncated shares length");
  size_t n = u32();
  if (n > kMaxShares || v.size() - pos != n) return corrupt("shares length");
  rec.shares = SecretBytes(v.subspan(pos, n));
  return rec;
}

// Scrubbing (why the store compacts): LMDB is copy-on-write and never
// clears a page it frees, so after a DeleteKey or a replacing PutKey the old
// record (this server's shares of the old key) stays in data.mdb, in free
// pages, until LMDB happens to reuse them. After every such change, under
// the store's exclusive lock, the store therefore
//   1. writes a compacted copy (mdb_env_copyfd2 with MDB_CP_COMPACT: live
//      pages only) to DIR/data.mdb.compact (0600) and fsyncs it,
//   2. closes the environment, renames the copy over data.mdb (atomic: the
//      file is always a whole database, old or new) and fsyncs DIR,
//   3. reopens the environment on the new file, and
//   4. after releasing the lock (the old file is reachable by no name, and
//      reads must not wait for a whole-file write), overwrites the old
//      file's blocks (still open by descriptor) with zeros and fdatasyncs
//      them before closing it.
// A failed reopen in step 3 leaves the environment closed; the next read or
// write retries the open.
// Open does the same, so a store left unscrubbed (a crash between a change
// and its compaction, or a file written without compaction) is cleaned at
// start.
// Limits: step 4 clears the old blocks on an overwrite-in-place file system
// (ext4, xfs); copy-on-write file systems (btrfs, zfs) and SSD wear levelling
// may keep old blocks regardless; and a compaction copies the whole store,
// so it costs O(store size) per deletion or replacement.
struct ShareStore::Env {
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  std::string dir;
  size_t map_size = 0;
  // Shared by reads; exclusive for writes and compaction (which closes and
  // reopens `env`).
  mutable std::shared_mutex mu;
  bool scrub_pending = false;  // a change whose compaction failed
  std::atomic<bool> immutable_ids{false};
  // Test hook: runs before a replaced file is zeroed (lock released).
  std::function<void()> before_zero;
  int lock_fd = -1;  // DIR/kmpc.lock, flock()ed while the store is open
  ~Env() {
    Close();
    if (lock_fd >= 0) close(lock_fd);
  }
  // With `lock` (shared) held: true when the environment is open, reopening
  // it first (under the exclusive lock) if a failed reopen after a
  // compaction left it closed.
  bool ReadyShared(std::shared_lock<std::shared_mutex>& lock) {
    if (env != nullptr) return true;
    lock.unlock();
    {
      std::unique_lock ex(mu);
      if (env == nullptr) (void)OpenEnv();
    }
    lock.lock();
    return env != nullptr;
  }
  void Close() {
    if (env != nullptr) mdb_env_close(env);
    env = nullptr;
  }
  absl::Status OpenEnv();
  // Runs read(txn) in a read transaction of the open store, under the
  // shared lock: every reader's way in.
  template <typename T, typename F>
  absl::StatusOr<T> Read(F read) {
    std::shared_lock lock(mu);
    if (!ReadyShared(lock)) return absl::UnavailableError("the share store is unavailable");
    ReadTxn txn(env);
    if (txn.rc() != 0) return LmdbError("txn_begin", txn.rc());
    return read(txn.get());
  }
  // With the exclusive lock held: a write transaction of the store,
  // reopening it first if a failed compaction left it closed.
  absl::StatusOr<MDB_txn*> BeginWrite() {
    if (env == nullptr && !OpenEnv().ok())
      return absl::UnavailableError("the share store is unavailable");
    MDB_txn* txn = nullptr;
    int rc = mdb_txn_begin(env, nullptr, 0, &txn);
    if (rc != 0) return LmdbError("txn_begin", rc);
    return txn;
  }
  // mdb_get of `id` in txn: its return code, *v the stored value.
  int GetRaw(MDB_txn* txn, const KeyId& id, MDB_val* v) const {
    MDB_val k{kKeyIdSize, const_cast<uint8_t*>(id.data())};
    return mdb_get(txn, dbi, &k, v);
  }
  // Calls each(k, v) for every record in key order until it returns false
  // or an error.
  template <typename F>
  absl::Status ForEach(MDB_txn* txn, F each) {
    MDB_cursor* cur = nullptr;
    int rc = mdb_cursor_open(txn, dbi, &cur);
    if (rc != 0) return LmdbError("cursor_open", rc);
    MDB_val k, v;
    absl::StatusOr<bool> more = true;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
      more = each(k, v);
      if (!more.ok() || !*more) break;
    }
    mdb_cursor_close(cur);
    if (!more.ok()) return more.status();
    if (*more && rc != MDB_NOTFOUND) return LmdbError("cursor_get", rc);
    return absl::OkStatus();
  }
  // Writes the compacted copy and swaps it in (steps 1-3). On return
  // *old_fd is the replaced file's descriptor (or -1): the caller zeroes it
  // with ZeroAndClose (step 4) after releasing the exclusive lock, so reads
  // do not wait for a whole-file write and sync.
  absl::Status Compact(int* old_fd);
  absl::Status ZeroAndClose(int old_fd);
};

absl::Status ShareStore::Env::OpenEnv() {
  int rc = mdb_env_create(&env);
  if (rc != 0) {
    env = nullptr;
    return LmdbError("env_create", rc);
  }
  absl::Status st;
  MDB_txn* txn = nullptr;
  if ((rc = mdb_env_set_mapsize(env, map_size)) != 0) {
    st = LmdbError("set_mapsize", rc);
    // MDB_NOTLS: read transactions are used from gRPC and worker threads.
  } else if ((rc = mdb_env_open(env, dir.c_str(), MDB_NOTLS, 0600)) != 0) {
    st = LmdbError("env_open", rc);
  } else if ((rc = mdb_txn_begin(env, nullptr, 0, &txn)) != 0) {
    st = LmdbError("txn_begin", rc);
  } else if ((rc = mdb_dbi_open(txn, nullptr, 0, &dbi)) != 0) {
    mdb_txn_abort(txn);
    st = LmdbError("dbi_open", rc);
  } else if ((rc = mdb_txn_commit(txn)) != 0) {
    st = LmdbError("txn_commit", rc);
  }
  if (!st.ok()) Close();
  return st;
}

namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

absl::Status FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + dir);
  int rc = fsync(fd);
  close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("fsync " + dir);
}

// Overwrites the whole file behind `fd` with zeros and syncs it.
absl::Status ZeroFile(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Errno("fstat");
  std::vector<char> zeros(size_t{1} << 20, 0);
  for (off_t off = 0; off < st.st_size;) {
    size_t n = std::min<off_t>(zeros.size(), st.st_size - off);
    ssize_t w = pwrite(fd, zeros.data(), n, off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Errno("pwrite");
    off += w;
  }
  return fdatasync(fd) == 0 ? absl::OkStatus() : Errno("fdatasync");
}

}  // namespace

absl::Status ShareStore::Env::Compact(int* old_fd) {
  *old_fd = -1;
  const std::string data = dir + "/data.mdb";
  const std::string tmp = dir + "/data.mdb.compact";
  if (unlink(tmp.c_str()) != 0 && errno != ENOENT) return Errno("unlink " + tmp);
  // Our own descriptor: mdb_env_copy2 would create the file 0666 & ~umask.
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("create " + tmp);
  int rc = mdb_env_copyfd2(env, fd, MDB_CP_COMPACT);
  absl::Status st = rc != 0 ? LmdbError("compacting copy", rc)
                    : fsync(fd) != 0 ? Errno("fsync " + tmp)
                                     : absl::OkStatus();
  close(fd);
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st;
  }
  int old_fd_local = open(data.c_str(), O_RDWR | O_CLOEXEC);
  if (old_fd_local < 0) {
    st = Errno("open " + data);
    unlink(tmp.c_str());
    return st;
  }
  Close();
  if (rename(tmp.c_str(), data.c_str()) != 0) {
    st = Errno("rename " + tmp);
    unlink(tmp.c_str());
    close(old_fd_local);
    // Still the old file: reopen it.
    absl::Status re = OpenEnv();
    return re.ok() ? st : absl::UnavailableError(absl::StrCat(
                              st.message(), "; reopening the store: ", re.message()));
  }
  st = FsyncDir(dir);
  absl::Status re = OpenEnv();
  // The old file is no longer reachable by name: the caller clears its
  // blocks (ZeroAndClose) once the lock is released.
  *old_fd = old_fd_local;
  if (!re.ok())
    return absl::UnavailableError(
        absl::StrCat("store ", dir, " cannot be reopened after compaction: ", re.message()));
  return st;
}

absl::Status ShareStore::Env::ZeroAndClose(int old_fd) {
  if (old_fd < 0) return absl::OkStatus();
  if (before_zero) before_zero();
  absl::Status z = ZeroFile(old_fd);
  close(old_fd);
  return z;
}

ShareStore::ShareStore(std::unique_ptr<Env> env) : env_(std::move(env)) {}
ShareStore::~ShareStore() = default;

absl::StatusOr<std::unique_ptr<ShareStore>> ShareStore::Open(
    const std::string& dir, size_t map_size) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot create store dir ", dir, ": ", strerror(errno)));
  }
  auto e = std::make_unique<Env>();
  e->dir = dir;
  e->map_size = map_size;
  // One process per store: compaction renames data.mdb under any other
  // opener, which would go on with the old, unlinked file.
  const std::string lock_path = dir + "/kmpc.lock";
  e->lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (e->lock_fd < 0)
    return absl::InternalError(
        absl::StrCat("cannot open ", lock_path, ": ", strerror(errno)));
  if (flock(e->lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return absl::FailedPreconditionError(absl::StrCat(
          "share store ", dir, " is in use by another process (", lock_path,
          " is locked): one kmpc-mpc-server per --store_dir"));
    return absl::InternalError(absl::StrCat("cannot lock ", lock_path, ": ", strerror(errno)));
  }
  if (absl::Status st = e->OpenEnv(); !st.ok()) return st;
  // Scrub what earlier runs may have left in free pages (see above).
  int old_fd = -1;
  absl::Status st = e->Compact(&old_fd);
  absl::Status z = e->ZeroAndClose(old_fd);
  if (st.ok()) st = z;
  if (!st.ok())
    return absl::Status(st.code(), absl::StrCat("store ", dir, ": ", st.message()));
  return std::unique_ptr<ShareStore>(new ShareStore(std::move(e)));
}

std::string ShareStore::data_file() const { return env_->dir + "/data.mdb"; }

// After a committed change that left old shares in free pages.
absl::Status ShareStore::ScrubLocked(absl::string_view what, int* old_fd) {
  *old_fd = -1;
  env_->scrub_pending = true;
  if (env_->env == nullptr && !env_->OpenEnv().ok())
    return absl::UnavailableError(absl::StrCat(what, ", but the store is unavailable"));
  absl::Status st = env_->Compact(old_fd);
  if (!st.ok())
    return absl::Status(st.code(), absl::StrCat(what, ", but the old shares could not "
                                                "be scrubbed from the store file (",
                                                st.message(), "); retried on the "
                                                "next change and at start"));
  env_->scrub_pending = false;
  return absl::OkStatus();
}

absl::Status ShareStore::FinishScrub(absl::Status st, int old_fd, absl::string_view what) {
  absl::Status z = env_->ZeroAndClose(old_fd);
  if (st.ok() && !z.ok())
    return absl::Status(z.code(), absl::StrCat(what, ", but the replaced store file could "
                                               "not be zeroed: ", z.message()));
  return st;
}

absl::Status ShareStore::FinishChange(std::unique_lock<std::shared_mutex>& lock,
                                      absl::Status st, bool scrub,
                                      absl::string_view what) {
  int old_fd = -1;
  if (scrub) st = ScrubLocked(what, &old_fd);
  lock.unlock();
  return FinishScrub(std::move(st), old_fd, what);
}

void ShareStore::set_before_zero_hook_for_test(std::function<void()> f) {
  std::unique_lock lock(env_->mu);
  env_->before_zero = std::move(f);
}

void ShareStore::close_env_for_test() {
  std::unique_lock lock(env_->mu);
  env_->Close();
}

absl::Status ShareStore::put_raw_for_test(const KeyId& id, absl::Span<const uint8_t> value) {
  std::unique_lock lock(env_->mu);
  auto begun = env_->BeginWrite();
  if (!begun.ok()) return begun.status();
  MDB_val k{kKeyIdSize, const_cast<uint8_t*>(id.data())};
  MDB_val v{value.size(), const_cast<uint8_t*>(value.data())};
  int rc = mdb_put(*begun, env_->dbi, &k, &v, 0);
  if (rc != 0) {
    mdb_txn_abort(*begun);
    return LmdbError("put", rc);
  }
  if ((rc = mdb_txn_commit(*begun)) != 0) return LmdbError("commit", rc);
  return absl::OkStatus();
}

absl::Status ShareStore::Put(const KeyMeta& meta,
                             absl::Span<const uint8_t> shares, bool replace) {
  if (absl::Status st = CheckRecord(meta, shares); !st.ok()) return st;
  std::vector<uint8_t> value = EncodeRecord(meta, shares);
  std::unique_lock lock(env_->mu);
  if (env_->env == nullptr && !env_->OpenEnv().ok()) {
    OPENSSL_cleanse(value.data(), value.size());
    return absl::UnavailableError("the share store is unavailable");
  }
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env_->env, nullptr, 0, &txn);
  absl::Status st;
  bool replaced = false;
  if (rc != 0) {
    st = LmdbError("txn_begin", rc);
  } else {
    MDB_val k{kKeyIdSize, const_cast<uint8_t*>(meta.key_id.data())};
    MDB_val old;
    const bool exists = mdb_get(txn, env_->dbi, &k, &old) == 0;
    const bool tomb = exists && IsTombstone(old);
    replaced = replace && exists && !tomb;
    MDB_val v{value.size(), value.data()};
    if (exists && env_->immutable_ids) {
      rc = MDB_KEYEXIST;  // reported below, with the reason
    } else {
      rc = mdb_put(txn, env_->dbi, &k, &v, replace ? 0 : MDB_NOOVERWRITE);
    }
    if (rc == MDB_KEYEXIST && env_->immutable_ids && (tomb || replace)) {
      mdb_txn_abort(txn);
      st = absl::FailedPreconditionError(absl::StrCat(
          "key id ", KeyIdHex(meta.key_id),
          tomb ? " was deleted" : " is stored",
          " and key ids are not reused on this server (its shares cannot be "
          "replaced): share the key under a new id"));
    } else if (rc == MDB_KEYEXIST && tomb) {
      mdb_txn_abort(txn);
      st = absl::AlreadyExistsError(absl::StrCat(
          "key id ", KeyIdHex(meta.key_id), " was deleted; replace to reuse it"));
    } else if (rc == MDB_KEYEXIST) {
      mdb_txn_abort(txn);
      st = absl::AlreadyExistsError(
          absl::StrCat("key id ", KeyIdHex(meta.key_id), " already stored"));
    } else if (rc != 0) {
      mdb_txn_abort(txn);
      st = LmdbError("put", rc);
    } else if ((rc = mdb_txn_commit(txn)) != 0) {
      st = LmdbError("commit", rc);
    }
  }
  OPENSSL_cleanse(value.data(), value.size());
  const bool scrub = st.ok() && (replaced || env_->scrub_pending);
  return FinishChange(lock, std::move(st), scrub,
                      absl::StrCat("key ", KeyIdHex(meta.key_id), " was stored"));
}

absl::StatusOr<KeyRecord> ShareStore::Get(const KeyId& id) const {
  return env_->Read<KeyRecord>([&](MDB_txn* txn) -> absl::StatusOr<KeyRecord> {
    MDB_val v;
    int rc = env_->GetRaw(txn, id, &v);
    if (rc == MDB_NOTFOUND || (rc == 0 && IsTombstone(v)))
      return absl::NotFoundError(absl::StrCat("unknown key id ", KeyIdHex(id)));
    if (rc != 0) return LmdbError("get", rc);
    return DecodeRecord(
        id, absl::MakeConstSpan(static_cast<const uint8_t*>(v.mv_data), v.mv_size));
  });
}

// Deletes id inside txn: MDB_NOTFOUND if it is absent or already a
// tombstone. With immutable ids a tombstone replaces the record, so that the
// id stays taken.
static int DeleteInTxn(MDB_txn* txn, MDB_dbi dbi, bool immutable_ids, const KeyId& id) {
  MDB_val k{kKeyIdSize, const_cast<uint8_t*>(id.data())};
  MDB_val old;
  int rc = mdb_get(txn, dbi, &k, &old);
  if (rc == 0 && IsTombstone(old)) rc = MDB_NOTFOUND;
  if (rc == 0 && immutable_ids) {
    MDB_val t{sizeof(kTombstone), const_cast<uint8_t*>(kTombstone)};
    rc = mdb_put(txn, dbi, &k, &t, 0);
  } else if (rc == 0) {
    rc = mdb_del(txn, dbi, &k, nullptr);
  }
  return rc;
}

absl::Status ShareStore::Delete(const KeyId& id) {
  std::unique_lock lock(env_->mu);
  auto begun = env_->BeginWrite();
  if (!begun.ok()) return begun.status();
  MDB_txn* txn = *begun;
  int rc = 0;
  rc = DeleteInTxn(txn, env_->dbi, env_->immutable_ids, id);
  if (rc != 0) {
    mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND)
      return absl::NotFoundError(absl::StrCat("unknown key id ", KeyIdHex(id)));
    return LmdbError("del", rc);
  }
  if ((rc = mdb_txn_commit(txn)) != 0) return LmdbError("commit", rc);
  return FinishChange(lock, absl::OkStatus(), true,
                      absl::StrCat("key ", KeyIdHex(id), " was deleted"));
}

absl::Status ShareStore::PutAll(absl::Span<const NewRecord> records) {
  if (records.empty()) return absl::OkStatus();
  for (const NewRecord& r : records)
    if (absl::Status st = CheckRecord(r.meta, r.shares); !st.ok()) return st;
  std::unique_lock lock(env_->mu);
  auto begun = env_->BeginWrite();
  if (!begun.ok()) return begun.status();
  MDB_txn* txn = *begun;
  int rc = 0;
  absl::Status st;
  for (const NewRecord& r : records) {
    std::vector<uint8_t> value = EncodeRecord(r.meta, r.shares);
    MDB_val k{kKeyIdSize, const_cast<uint8_t*>(r.meta.key_id.data())};
    MDB_val v{value.size(), value.data()};
    rc = mdb_put(txn, env_->dbi, &k, &v, MDB_NOOVERWRITE);
    OPENSSL_cleanse(value.data(), value.size());
    if (rc == MDB_KEYEXIST) {
      const std::string msg = absl::StrCat("key id ", KeyIdHex(r.meta.key_id),
                                           " is taken on this server");
      st = env_->immutable_ids ? absl::FailedPreconditionError(msg)
                               : absl::AlreadyExistsError(msg);
      break;
    }
    if (rc != 0) {
      st = LmdbError("put", rc);
      break;
    }
  }
  if (!st.ok()) {
    mdb_txn_abort(txn);
    return st;
  }
  if ((rc = mdb_txn_commit(txn)) != 0) return LmdbError("commit", rc);
  return FinishChange(lock, std::move(st), env_->scrub_pending,
                      absl::StrCat(records.size(), " keys were stored"));
}

absl::Status ShareStore::DeleteAll(absl::Span<const KeyId> ids,
                                   std::vector<KeyId>* not_found) {
  std::unique_lock lock(env_->mu);
  auto begun = env_->BeginWrite();
  if (!begun.ok()) return begun.status();
  MDB_txn* txn = *begun;
  int rc = 0;
  size_t deleted = 0;
  for (const KeyId& id : ids) {
    rc = DeleteInTxn(txn, env_->dbi, env_->immutable_ids, id);
    if (rc == MDB_NOTFOUND) {
      if (not_found != nullptr) not_found->push_back(id);
      continue;
    }
    if (rc != 0) {
      mdb_txn_abort(txn);
      return LmdbError("del", rc);
    }
    ++deleted;
  }
  if ((rc = mdb_txn_commit(txn)) != 0) return LmdbError("commit", rc);
  if (deleted == 0) return absl::OkStatus();
  return FinishChange(lock, absl::OkStatus(), true,
                      absl::StrCat(deleted, " keys were deleted"));
}

absl::StatusOr<bool> ShareStore::Edit(const KeyId& id, const RecordEdit& edit) {
  std::unique_lock lock(env_->mu);
  auto begun = env_->BeginWrite();
  if (!begun.ok()) return begun.status();
  MDB_txn* txn = *begun;
  MDB_val v;
  int rc = env_->GetRaw(txn, id, &v);
  if (rc == MDB_NOTFOUND || (rc == 0 && IsTombstone(v))) {
    mdb_txn_abort(txn);
    return absl::NotFoundError(absl::StrCat("unknown key id ", KeyIdHex(id)));
  }
  if (rc != 0) {
    mdb_txn_abort(txn);
    return LmdbError("get", rc);
  }
  auto rec = DecodeRecord(
      id, absl::MakeConstSpan(static_cast<const uint8_t*>(v.mv_data), v.mv_size));
  if (!rec.ok()) {
    mdb_txn_abort(txn);
    return rec.status();
  }
  const KeyMeta before = rec->meta;
  absl::StatusOr<bool> changed = edit(*rec);
  absl::Status st = changed.ok() ? CheckRecord(rec->meta, rec->shares.span())
                                 : changed.status();
  if (st.ok() && (rec->meta.key_id != id || rec->meta.cipher != before.cipher ||
                  rec->meta.kvno != before.kvno || rec->meta.label != before.label))
    st = absl::InternalError("a record edit may change only the kind and the shares");
  if (!st.ok() || !*changed) {
    mdb_txn_abort(txn);
    if (!st.ok()) return st;
    return false;
  }
  std::vector<uint8_t> value = EncodeRecord(rec->meta, rec->shares.span());
  MDB_val k{kKeyIdSize, const_cast<uint8_t*>(id.data())};
  MDB_val nv{value.size(), value.data()};
  rc = mdb_put(txn, env_->dbi, &k, &nv, 0);
  OPENSSL_cleanse(value.data(), value.size());
  if (rc != 0) {
    mdb_txn_abort(txn);
    return LmdbError("put", rc);
  }
  if ((rc = mdb_txn_commit(txn)) != 0) return LmdbError("commit", rc);
  st = FinishChange(lock, absl::OkStatus(), true,
                    absl::StrCat("key ", KeyIdHex(id), " was rewritten"));
  if (!st.ok()) return st;
  return true;
}

absl::StatusOr<bool> ShareStore::Taken(const KeyId& id) const {
  return env_->Read<bool>([&](MDB_txn* txn) -> absl::StatusOr<bool> {
    MDB_val v;
    int rc = env_->GetRaw(txn, id, &v);
    if (rc == MDB_NOTFOUND) return false;
    if (rc != 0) return LmdbError("get", rc);
    return true;  // a tombstone too: the id may not be reused
  });
}

absl::StatusOr<std::vector<KeyMeta>> ShareStore::List() const {
  using Metas = std::vector<KeyMeta>;
  return env_->Read<Metas>([&](MDB_txn* txn) -> absl::StatusOr<Metas> {
    Metas out;
    absl::Status st = env_->ForEach(
        txn, [&](const MDB_val& k, const MDB_val& v) -> absl::StatusOr<bool> {
          auto id = KeyIdFromBytes(
              absl::MakeConstSpan(static_cast<const uint8_t*>(k.mv_data), k.mv_size));
          if (!id.ok()) return absl::DataLossError("store holds a malformed key id");
          if (IsTombstone(v)) return true;
          auto rec = DecodeRecord(*id, absl::MakeConstSpan(
                                           static_cast<const uint8_t*>(v.mv_data), v.mv_size));
          if (!rec.ok()) return rec.status();
          out.push_back(rec->meta);
          return true;
        });
    if (!st.ok()) return st;
    return out;
  });
}

absl::StatusOr<uint64_t> ShareStore::Count() const {
  return env_->Read<uint64_t>([&](MDB_txn* txn) -> absl::StatusOr<uint64_t> {
    uint64_t n = 0;
    absl::Status st = env_->ForEach(txn, [&](const MDB_val&, const MDB_val& v) {
      if (!IsTombstone(v)) ++n;
      return absl::StatusOr<bool>(true);
    });
    if (!st.ok()) return st;
    return n;
  });
}

void ShareStore::set_immutable_ids(bool on) { env_->immutable_ids = on; }

}  // namespace kmpc::store
