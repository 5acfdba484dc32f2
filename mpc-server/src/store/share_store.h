// The share store: one LMDB environment per MPC server, keyed by the 32-byte
// key id the KDC's key handles carry (enctype.md, "Inside the KDC").
//
// A record holds public metadata (cipher, kvno, label, kind) and this server's
// serialized KeyShares: its two replicated shares of every round key and of
// the powers of H. One server's store alone reveals no key (enctype.md,
// "Security invariants", 1): the third share lives only on the other two
// servers.
#ifndef KMPC_STORE_SHARE_STORE_H_
#define KMPC_STORE_SHARE_STORE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "store/cipher.h"

namespace kmpc::store {

inline constexpr size_t kKeyIdSize = 32;
using KeyId = std::array<uint8_t, kKeyIdSize>;

// Parses a key id from raw bytes; INVALID_ARGUMENT unless exactly 32 bytes.
absl::StatusOr<KeyId> KeyIdFromBytes(absl::Span<const uint8_t> bytes);
std::string KeyIdHex(const KeyId& id);  // for logs: ids are not secret

// A record's cipher byte is the Cipher value (store/cipher.h).
using ::kmpc::Cipher;

struct KeyMeta {
  KeyId key_id{};
  Cipher cipher = Cipher::kAes128;
  uint32_t kvno = 0;
  std::string label;
  KeyKind kind = KeyKind::kUser;
  // Decoded from a record stored before key kinds ("KMS1"): `kind` is the
  // default it loads as, not a recorded one. Never written: EncodeRecord
  // writes the current format.
  bool kind_unrecorded = false;
};

// Serialized shares; wiped on destruction.
class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(absl::Span<const uint8_t> b) : data_(b.begin(), b.end()) {}
  SecretBytes(SecretBytes&&) = default;
  SecretBytes& operator=(SecretBytes&& o) noexcept;
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;
  ~SecretBytes();
  absl::Span<const uint8_t> span() const { return data_; }
  size_t size() const { return data_.size(); }

 private:
  std::vector<uint8_t> data_;
};

struct KeyRecord {
  KeyMeta meta;
  SecretBytes shares;
};

class ShareStore {
 public:
  // Opens (creating if needed) the LMDB environment in directory `dir`.
  // Holds flock(DIR/kmpc.lock) while open: FAILED_PRECONDITION when another
  // process (or another ShareStore) has the store open.
  static absl::StatusOr<std::unique_ptr<ShareStore>> Open(
      const std::string& dir, size_t map_size = size_t{1} << 30);
  ~ShareStore();
  ShareStore(const ShareStore&) = delete;
  ShareStore& operator=(const ShareStore&) = delete;

  // ALREADY_EXISTS if the id is present and !replace. Replacing a record
  // scrubs the old one from the file before returning (share_store.cc).
  absl::Status Put(const KeyMeta& meta, absl::Span<const uint8_t> shares,
                   bool replace);
  // NOT_FOUND for an unknown id; DATA_LOSS for a corrupt record.
  absl::StatusOr<KeyRecord> Get(const KeyId& id) const;
  // NOT_FOUND for an unknown id. The record is scrubbed from the file
  // before this returns; an error after the deletion says so.
  absl::Status Delete(const KeyId& id);
  absl::StatusOr<std::vector<KeyMeta>> List() const;

  // Rewrites the stored record of `id` in the current format, in one
  // write transaction: `edit` gets the decoded record and may change its
  // kind and its shares (never its id, cipher, kvno or label), returning
  // whether it changed anything. A changed record replaces the old one even
  // with immutable ids (the new record is this server's own record edited,
  // not shares from outside) and the old one is scrubbed from the file
  // before this returns. NOT_FOUND for an unknown or deleted id; edit's
  // error aborts the transaction. Returns whether the record changed.
  using RecordEdit = std::function<absl::StatusOr<bool>(KeyRecord&)>;
  absl::StatusOr<bool> Edit(const KeyId& id, const RecordEdit& edit);

  // Many new records in one transaction (share refresh): all are stored or
  // none. Never replaces: an id stored or deleted before fails the whole
  // call (ALREADY_EXISTS, or FAILED_PRECONDITION with immutable ids).
  struct NewRecord {
    KeyMeta meta;
    absl::Span<const uint8_t> shares;
  };
  absl::Status PutAll(absl::Span<const NewRecord> records);
  // Deletes every stored id of `ids` in one transaction followed by one
  // scrub of the file (instead of one per id). Ids not stored go to
  // *not_found (may be null).
  absl::Status DeleteAll(absl::Span<const KeyId> ids, std::vector<KeyId>* not_found);
  // True when the id holds a record, or a tombstone (immutable ids): a
  // Put without replace would fail.
  absl::StatusOr<bool> Taken(const KeyId& id) const;
  absl::StatusOr<uint64_t> Count() const;

  // Immutable key ids (kmpc-mpc-server's default, --allow_key_replace
  // turns it off): Put with `replace` over a stored record fails with
  // FAILED_PRECONDITION, and Delete leaves a tombstone so that the id can
  // never be stored again. Whoever holds an Admin certificate can then delete
  // keys but not substitute shares of a key they know for an id the KDB
  // already refers to (e.g. the krbtgt's: forged TGTs). kmpc-admin always
  // shares under a fresh random id.
  void set_immutable_ids(bool on);

  // Path of the LMDB data file (tests scan it for key material).
  std::string data_file() const;

  // Tests: `f` runs before a replaced file is zeroed (after a compaction,
  // outside the store's lock); closing the environment simulates a failed
  // reopen after a compaction.
  void set_before_zero_hook_for_test(std::function<void()> f);
  void close_env_for_test();
  // Tests: stores `value` under `id` as it is (a record of an older
  // format, a corrupt one), replacing whatever is there.
  absl::Status put_raw_for_test(const KeyId& id, absl::Span<const uint8_t> value);

 private:
  struct Env;
  explicit ShareStore(std::unique_ptr<Env> env);
  // Compacts the file after a change; called with the exclusive lock.
  // *old_fd: the replaced file, for FinishScrub once the lock is released.
  absl::Status ScrubLocked(absl::string_view what, int* old_fd);
  // Zeroes and closes `old_fd` (no lock held); `st` is the change's status.
  absl::Status FinishScrub(absl::Status st, int old_fd, absl::string_view what);
  // The end of every committed change: scrubs if `scrub` (ScrubLocked),
  // releases `lock`, then FinishScrub. `what` names the change in errors.
  absl::Status FinishChange(std::unique_lock<std::shared_mutex>& lock, absl::Status st,
                            bool scrub, absl::string_view what);
  std::unique_ptr<Env> env_;
};

// Record encoding, exposed for tests (hostile-input parsing).
std::vector<uint8_t> EncodeRecord(const KeyMeta& meta,
                                  absl::Span<const uint8_t> shares);
absl::StatusOr<KeyRecord> DecodeRecord(const KeyId& id,
                                       absl::Span<const uint8_t> value);

}  // namespace kmpc::store

#endif  // KMPC_STORE_SHARE_STORE_H_
