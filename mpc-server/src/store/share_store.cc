#include "store/share_store.h"

#include <lmdb.h>
#include <openssl/crypto.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace kmpc::store {
namespace {

// Record layout (little endian):
//   "KMS1" | cipher u8 | kvno u32 | label_len u16 | label | shares_len u32 |
//   shares
constexpr uint8_t kMagic[4] = {'K', 'M', 'S', '1'};
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
  if (!need(4) || std::memcmp(v.data(), kMagic, 4) != 0) return corrupt("magic");
  pos = 4;
  if (!need(1 + 4 + 2)) return corrupt("truncated header");
  KeyRecord rec;
  rec.meta.key_id = id;
  uint8_t c = v[pos++];
  if (c != 1 && c != 2) return corrupt("cipher");
  rec.meta.cipher = static_cast<Cipher>(c);
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

struct ShareStore::Env {
  MDB_env* env = nullptr;
  MDB_dbi dbi = 0;
  std::string dir;
  ~Env() {
    if (env != nullptr) mdb_env_close(env);
  }
};

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
  int rc = mdb_env_create(&e->env);
  if (rc != 0) return LmdbError("env_create", rc);
  if ((rc = mdb_env_set_mapsize(e->env, map_size)) != 0)
    return LmdbError("set_mapsize", rc);
  // MDB_NOTLS: read transactions are used from gRPC and worker threads.
  if ((rc = mdb_env_open(e->env, dir.c_str(), MDB_NOTLS, 0600)) != 0)
    return LmdbError("env_open", rc);
  MDB_txn* txn = nullptr;
  if ((rc = mdb_txn_begin(e->env, nullptr, 0, &txn)) != 0)
    return LmdbError("txn_begin", rc);
  if ((rc = mdb_dbi_open(txn, nullptr, 0, &e->dbi)) != 0) {
    mdb_txn_abort(txn);
    return LmdbError("dbi_open", rc);
  }
  if ((rc = mdb_txn_commit(txn)) != 0) return LmdbError("txn_commit", rc);
  return std::unique_ptr<ShareStore>(new ShareStore(std::move(e)));
}

std::string ShareStore::data_file() const { return env_->dir + "/data.mdb"; }

absl::Status ShareStore::Put(const KeyMeta& meta,
                             absl::Span<const uint8_t> shares, bool replace) {
  if (meta.label.size() > kMaxLabel)
    return absl::InvalidArgumentError(
        absl::StrCat("label longer than ", kMaxLabel, " bytes"));
  if (shares.empty() || shares.size() > kMaxShares)
    return absl::InvalidArgumentError("shares empty or too large");
  std::vector<uint8_t> value = EncodeRecord(meta, shares);
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env_->env, nullptr, 0, &txn);
  absl::Status st;
  if (rc != 0) {
    st = LmdbError("txn_begin", rc);
  } else {
    MDB_val k{kKeyIdSize, const_cast<uint8_t*>(meta.key_id.data())};
    MDB_val v{value.size(), value.data()};
    rc = mdb_put(txn, env_->dbi, &k, &v, replace ? 0 : MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
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
  return st;
}

absl::StatusOr<KeyRecord> ShareStore::Get(const KeyId& id) const {
  ReadTxn txn(env_->env);
  if (txn.rc() != 0) return LmdbError("txn_begin", txn.rc());
  MDB_val k{kKeyIdSize, const_cast<uint8_t*>(id.data())};
  MDB_val v;
  int rc = mdb_get(txn.get(), env_->dbi, &k, &v);
  if (rc == MDB_NOTFOUND)
    return absl::NotFoundError(absl::StrCat("unknown key id ", KeyIdHex(id)));
  if (rc != 0) return LmdbError("get", rc);
  return DecodeRecord(
      id, absl::MakeConstSpan(static_cast<const uint8_t*>(v.mv_data), v.mv_size));
}

absl::Status ShareStore::Delete(const KeyId& id) {
  MDB_txn* txn = nullptr;
  int rc = mdb_txn_begin(env_->env, nullptr, 0, &txn);
  if (rc != 0) return LmdbError("txn_begin", rc);
  MDB_val k{kKeyIdSize, const_cast<uint8_t*>(id.data())};
  rc = mdb_del(txn, env_->dbi, &k, nullptr);
  if (rc != 0) {
    mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND)
      return absl::NotFoundError(absl::StrCat("unknown key id ", KeyIdHex(id)));
    return LmdbError("del", rc);
  }
  if ((rc = mdb_txn_commit(txn)) != 0) return LmdbError("commit", rc);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KeyMeta>> ShareStore::List() const {
  ReadTxn txn(env_->env);
  if (txn.rc() != 0) return LmdbError("txn_begin", txn.rc());
  MDB_cursor* cur = nullptr;
  int rc = mdb_cursor_open(txn.get(), env_->dbi, &cur);
  if (rc != 0) return LmdbError("cursor_open", rc);
  std::vector<KeyMeta> out;
  MDB_val k, v;
  absl::Status st;
  for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    auto id = KeyIdFromBytes(
        absl::MakeConstSpan(static_cast<const uint8_t*>(k.mv_data), k.mv_size));
    if (!id.ok()) { st = absl::DataLossError("store holds a malformed key id"); break; }
    auto rec = DecodeRecord(*id, absl::MakeConstSpan(
                                     static_cast<const uint8_t*>(v.mv_data), v.mv_size));
    if (!rec.ok()) { st = rec.status(); break; }
    out.push_back(rec->meta);
  }
  mdb_cursor_close(cur);
  if (!st.ok()) return st;
  if (rc != MDB_NOTFOUND) return LmdbError("cursor_get", rc);
  return out;
}

absl::StatusOr<uint64_t> ShareStore::Count() const {
  ReadTxn txn(env_->env);
  if (txn.rc() != 0) return LmdbError("txn_begin", txn.rc());
  MDB_stat stat;
  int rc = mdb_stat(txn.get(), env_->dbi, &stat);
  if (rc != 0) return LmdbError("stat", rc);
  return stat.ms_entries;
}

}  // namespace kmpc::store
