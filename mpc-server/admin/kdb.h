// The KDB side of kmpc-admin: the kadm5 server API of the patched krb5, as
// kadmin.local uses it (run on the KDC host; KRB5_CONFIG and
// KRB5_KDC_PROFILE select the realm). Absorbs kdc-plugin/tools/
// kmpc_kdb_handle.c: reading a principal's key for migration and writing
// the 40-byte handle ("kmpc-key" || key id, enctype.md) in its place.
#ifndef KMPC_ADMIN_KDB_H_
#define KMPC_ADMIN_KDB_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kmpc::admin {

// Key bytes that wipe themselves.
class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(size_t n) : v_(n) {}
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;
  SecretBytes(SecretBytes&& o) noexcept : v_(std::move(o.v_)) {}
  SecretBytes& operator=(SecretBytes&& o) noexcept;
  ~SecretBytes() { Wipe(); }
  void Wipe();
  uint8_t* data() { return v_.data(); }
  const uint8_t* data() const { return v_.data(); }
  size_t size() const { return v_.size(); }

 private:
  std::vector<uint8_t> v_;
};

inline constexpr int32_t kEnctypeAes128Mpc = -29001;
inline constexpr int32_t kEnctypeAes256Mpc = -29002;
inline constexpr int32_t kEnctypeAes128Cts = 17;
inline constexpr int32_t kEnctypeAes256Cts = 18;

// One key_data entry, without its contents.
struct KeyEntry {
  int32_t enctype = 0;
  uint32_t kvno = 0;
  bool is_handle = false;
  std::string key_id;  // handles only: the 32-byte key id
  int16_t salt_type = 0;
  std::string salt;    // salt data (public)
};

struct PrincipalInfo {
  std::string name;  // canonical, with realm
  uint32_t kvno = 0;  // highest kvno
  std::vector<KeyEntry> keys;
  bool requires_preauth = false;  // +requires_preauth (KRB5_KDB_REQUIRES_PRE_AUTH)
};

// The key --from-existing moves into the cluster.
struct ExistingKey {
  KeyEntry entry;  // the source key (enctype, kvno, salt)
  SecretBytes key;
};

class Kdb {
 public:
  // realm empty: the default realm of the profile.
  static absl::StatusOr<std::unique_ptr<Kdb>> Open(const std::string& realm);
  ~Kdb();
  Kdb(const Kdb&) = delete;
  Kdb& operator=(const Kdb&) = delete;

  const std::string& realm() const { return realm_; }

  // NOT_FOUND "principal ... does not exist" for an unknown principal.
  absl::StatusOr<PrincipalInfo> Lookup(const std::string& name);

  // The principal's current AES key (highest kvno; aes256 before aes128,
  // aes*-ctr-mpc before aes*-cts-hmac-sha1-96, whose key derivation and
  // bytes are identical). FAILED_PRECONDITION when it has none, or when its
  // current key is already a handle.
  absl::StatusOr<ExistingKey> ExportAesKey(const std::string& name);

  // The principal's aes128/aes256-cts-hmac-sha1-96 keys at its current
  // (highest) kvno, each with its enctype, kvno and salt: what
  // share --from-existing --enctype=aes*-cts moves into the cluster.
  // FAILED_PRECONDITION when it has none, or when its current key is
  // already a handle.
  absl::StatusOr<std::vector<ExistingKey>> ExportCtsKeys(const std::string& name);

  // RFC 3962 string-to-key of the MPC enctype with the principal's normal
  // salt, exactly as kadmin's cpw would derive it.
  absl::StatusOr<SecretBytes> StringToKey(const std::string& name, int32_t enctype,
                                          const std::string& password);

  // Replaces every key of the principal with one handle key of `enctype`
  // at `kvno` (0: the next kvno), with the given salt (what clients get in
  // ETYPE-INFO2, so they derive the key that was shared). keepold: keep the
  // existing keys too (the caller makes sure they are all handles).
  absl::Status SetHandle(const std::string& name, int32_t enctype,
                         const std::string& key_id, uint32_t kvno,
                         int16_t salt_type, const std::string& salt,
                         bool keepold = false);

  // Replaces every key of the principal with these handles (one write);
  // each names its enctype, key id, kvno and salt.
  struct Handle {
    int32_t enctype = 0;
    std::string key_id;
    uint32_t kvno = 0;
    int16_t salt_type = 0;
    std::string salt;
  };
  absl::Status SetHandles(const std::string& name, const std::vector<Handle>& handles);

  // Sets +requires_preauth on the principal (kadm5_modify_principal, as
  // kadmin's modprinc): a user's AS reply is an offline verifier of its
  // password, which MIT's KDC gives without pre-authentication otherwise.
  absl::Status RequirePreauth(const std::string& name);

  // A fresh random key of the enctype (krb5_c_make_random_key, as kadmin's
  // randkey).
  absl::StatusOr<SecretBytes> RandomKey(int32_t enctype);

  // Every principal name in the realm.
  absl::StatusOr<std::vector<std::string>> ListPrincipals();

  // In principal `name`, every key handle naming old_id (32 bytes) names
  // new_id instead; enctype, kvno, salt and every other key data entry stay
  // as they are. One krb5_db_put_principal: the KDC sees the old entry or
  // the new one, never a mix. NOT_FOUND when the principal does not exist
  // or holds no handle naming old_id.
  absl::Status SwitchKeyId(const std::string& name, const std::string& old_id,
                           const std::string& new_id);

  // In principal `name`, the key handles naming one of `ids` (32-byte key
  // ids) are removed; every other key data entry stays as it is. One
  // krb5_db_put_principal. The ids removed (none named: empty, nothing
  // written); FAILED_PRECONDITION when no key would be left.
  absl::StatusOr<std::set<std::string>> RemoveHandles(const std::string& name,
                                                      const std::set<std::string>& ids);

  // The key dealer's protect patterns (kdc.conf [mpcdealer] kmpc = {
  // protect = ... }; krbtgt/* when none is given, as the dealer does).
  std::vector<std::string> ProtectPatterns();

  // WHAT failed with krb5 error RET, as a status (the error's message,
  // never key material).
  absl::Status Error(long ret, const std::string& what);

 private:
  std::string profile_path_;  // the context's private profile (kdb.cc)
  Kdb() = default;
  // SetHandle with keepold (krb5_principal, const kadm5_key_data*).
  absl::Status AddHandleKeepOld(void* princ, const std::string& name,
                                const void* kd);
  // Reads `name`'s KDB entry into *entry_out (a krb5_db_entry**; the
  // caller frees it).
  absl::Status ReadEntry(const std::string& name, void* entry_out);
  // ent: a krb5_db_entry* whose key data changed.
  absl::Status PutKeyData(void* ent, const std::string& name);

  void* context_ = nullptr;  // krb5_context
  void* handle_ = nullptr;   // kadm5 server handle
  std::string realm_;
};

const char* EnctypeName(int32_t enctype);
// The MPC enctype holding the same key as `enctype` (0 if none).
int32_t MpcEnctypeFor(int32_t enctype);
// aes128/aes256-cts-hmac-sha1-96.
bool IsCtsEnctype(int32_t enctype);
// aes128/aes256-ctr-mpc (the MPC enctypes).
bool IsMpcEnctype(int32_t enctype);
// RC4 (its key is the NT hash: a password equivalent) and single and triple
// DES: keys the cluster never holds and a protected principal never keeps.
bool IsWeakEnctype(int32_t enctype);
// The enctype a share --enctype value names (MIT's names; 0 if none).
int32_t EnctypeOfName(const std::string& name);

// What kmpc-admin share and the key dealer append to the label of a key
// migrated from the KDB (the label is otherwise the principal's canonical
// name, with its realm: krb5_unparse_name).
inline constexpr char kMigratedSuffix[] = " (migrated from the KDB)";
// The realm a key's label names: the text after the principal's first
// unescaped '@' (krb5_unparse_name escapes an '@' inside a component as
// "\@"), without kMigratedSuffix. Empty when the label names no realm.
std::string LabelRealm(const std::string& label);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_KDB_H_
