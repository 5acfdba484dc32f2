// Kdb's writes of key handles (kdb.h): a principal's handles set in
// place of its keys, added beside the old ones, switched to another key id
// and removed, each as kadm5 writes key data (libkdb5 under the entry's
// master key, the modifier recorded, one put that also writes the iprop
// update log). Reading the KDB is kdb.cc.
#include <array>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "admin/kdb.h"
#include "admin/kdb_internal.h"

namespace kmpc::admin {

using kdb_internal::Ctx;
using kdb_internal::DbEntry;
using kdb_internal::kHandleLen;
using kdb_internal::kHandleMagic;
using kdb_internal::kHandleMagicLen;
using kdb_internal::kKeyIdBytes;
using kdb_internal::Principal;

absl::Status Kdb::SetHandle(const std::string& name, int32_t enctype,
                            const std::string& key_id, uint32_t kvno,
                            int16_t salt_type, const std::string& salt,
                            bool keepold) {
  krb5_context ctx = Ctx(context_);
  if (key_id.size() != kKeyIdBytes) return absl::InvalidArgumentError("bad key id");
  Principal p{ctx};
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &p.p);
  if (ret) return Error(ret, "parsing principal name " + name);
  unsigned char contents[kHandleLen];
  std::memcpy(contents, kHandleMagic, kHandleMagicLen);
  std::memcpy(contents + kHandleMagicLen, key_id.data(), kKeyIdBytes);
  std::string salt_copy = salt;
  kadm5_key_data kd;
  std::memset(&kd, 0, sizeof(kd));
  kd.kvno = kvno;  // 0: the next kvno (kadm5_setkey_principal_4)
  kd.key.magic = KV5M_KEYBLOCK;
  kd.key.enctype = enctype;
  kd.key.length = kHandleLen;
  kd.key.contents = contents;
  kd.salt.type = salt_type;
  kd.salt.data.magic = KV5M_DATA;
  kd.salt.data.length = salt_copy.size();
  kd.salt.data.data = salt_copy.empty() ? nullptr : salt_copy.data();
  if (keepold) return AddHandleKeepOld(p.p, name, &kd);
  // The handle replaces every other key of the principal.
  ret = kadm5_setkey_principal_4(handle_, p.p, FALSE, &kd, 1);
  if (ret) return Error(ret, "writing the key handle of " + name);
  return absl::OkStatus();
}

absl::Status Kdb::SetHandles(const std::string& name,
                             const std::vector<Handle>& handles) {
  krb5_context ctx = Ctx(context_);
  if (handles.empty()) return absl::InvalidArgumentError("no key handle");
  Principal p{ctx};
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &p.p);
  if (ret) return Error(ret, "parsing principal name " + name);
  // A handle is no key (enctype.md): these buffers hold nothing secret.
  std::vector<std::array<unsigned char, kHandleLen>> contents(handles.size());
  std::vector<std::string> salts(handles.size());
  std::vector<kadm5_key_data> kd(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    const Handle& h = handles[i];
    if (h.key_id.size() != kKeyIdBytes) return absl::InvalidArgumentError("bad key id");
    std::memcpy(contents[i].data(), kHandleMagic, kHandleMagicLen);
    std::memcpy(contents[i].data() + kHandleMagicLen, h.key_id.data(), kKeyIdBytes);
    salts[i] = h.salt;
    std::memset(&kd[i], 0, sizeof(kd[i]));
    kd[i].kvno = h.kvno;
    kd[i].key.magic = KV5M_KEYBLOCK;
    kd[i].key.enctype = h.enctype;
    kd[i].key.length = kHandleLen;
    kd[i].key.contents = contents[i].data();
    kd[i].salt.type = h.salt_type;
    kd[i].salt.data.magic = KV5M_DATA;
    kd[i].salt.data.length = salts[i].size();
    kd[i].salt.data.data = salts[i].empty() ? nullptr : salts[i].data();
  }
  ret = kadm5_setkey_principal_4(handle_, p.p, FALSE, kd.data(),
                                 static_cast<int>(kd.size()));
  if (ret) return Error(ret, "writing the key handles of " + name);
  return absl::OkStatus();
}

// Writes ent, whose key data changed, as kadm5 would: modifier
// (kmpc-admin/admin) and time recorded, one put (which also writes the iprop
// update log).
absl::Status Kdb::PutKeyData(void* ent_ptr, const std::string& name) {
  krb5_context ctx = Ctx(context_);
  krb5_db_entry* ent = static_cast<krb5_db_entry*>(ent_ptr);
  krb5_principal mod = nullptr;
  std::string modname = "kmpc-admin/admin@" + realm_;
  if (krb5_parse_name(ctx, modname.c_str(), &mod) == 0) {
    krb5_timestamp now = 0;
    if (krb5_timeofday(ctx, &now) == 0)
      (void)krb5_dbe_update_mod_princ_data(ctx, ent, now, mod);
    krb5_free_principal(ctx, mod);
  }
  ent->mask = KADM5_KEY_DATA | KADM5_MOD_TIME | KADM5_MOD_NAME;
  krb5_error_code ret = krb5_db_put_principal(ctx, ent);
  if (ret) return Error(ret, "writing the key handle of " + name);
  return absl::OkStatus();
}

// kadm5_setkey_principal_4(keepold = TRUE) of krb5 1.20.1 copies the old
// key data but does not count it (n_new_key_data is not increased), so the
// old keys are silently dropped. Done here with libkdb5 instead, as kadm5
// does it: the entry's own master key, the new key first (the KDB keeps key
// data sorted by descending kvno), modifier recorded, one put (which also
// writes the iprop update log).
absl::Status Kdb::AddHandleKeepOld(void* princ_ptr, const std::string& name,
                                   const void* kd_ptr) {
  krb5_context ctx = Ctx(context_);
  krb5_principal princ = static_cast<krb5_principal>(princ_ptr);
  const kadm5_key_data& kd = *static_cast<const kadm5_key_data*>(kd_ptr);
  DbEntry entry{ctx};
  krb5_error_code ret = krb5_db_get_principal(ctx, princ, 0, &entry.e);
  if (ret) return Error(ret, "reading the KDB entry of " + name);
  krb5_db_entry* ent = entry.e;
  for (int i = 0; i < ent->n_key_data; ++i)
    if (ent->key_data[i].key_data_kvno >= kd.kvno)
      return absl::FailedPreconditionError(
          absl::StrCat(name, ": kvno ", kd.kvno, " is taken"));
  krb5_keyblock* mkey = nullptr;
  ret = krb5_dbe_find_mkey(ctx, ent, &mkey);
  if (ret) return Error(ret, "finding the master key of " + name);
  krb5_keysalt ks;
  ks.type = kd.salt.type;
  ks.data = kd.salt.data;
  krb5_key_data enc;
  std::memset(&enc, 0, sizeof(enc));
  ret = krb5_dbe_encrypt_key_data(ctx, mkey, &kd.key, &ks, kd.kvno, &enc);
  if (ret) return Error(ret, "encrypting the key handle of " + name);
  auto* grown = static_cast<krb5_key_data*>(
      realloc(ent->key_data, (ent->n_key_data + 1) * sizeof(krb5_key_data)));
  if (grown == nullptr) {
    krb5_dbe_free_key_data_contents(ctx, &enc);
    return absl::ResourceExhaustedError("out of memory");
  }
  std::memmove(grown + 1, grown, ent->n_key_data * sizeof(krb5_key_data));
  grown[0] = enc;
  ent->key_data = grown;
  ent->n_key_data++;
  return PutKeyData(ent, name);
}

// libkdb5 as kadm5 does (and Kdb::AddHandleKeepOld): read the entry,
// decrypt each key data entry with its master key, re-encrypt the changed
// handles under the entry's master key with the same kvno and salt, record
// the modifier, one put (which also writes the iprop update log).
absl::Status Kdb::SwitchKeyId(const std::string& name, const std::string& old_id,
                                   const std::string& new_id) {
  if (old_id.size() != kKeyIdBytes || new_id.size() != kKeyIdBytes)
    return absl::InvalidArgumentError("bad key id");
  krb5_context ctx = Ctx(context_);
  DbEntry entry{ctx};
  if (absl::Status st = ReadEntry(name, &entry.e); !st.ok()) return st;
  krb5_db_entry* ent = entry.e;
  krb5_keyblock* mkey = nullptr;
  krb5_error_code ret = krb5_dbe_find_mkey(ctx, ent, &mkey);
  if (ret) return Error(ret, "finding the master key of " + name);
  int switched = 0;
  for (int i = 0; i < ent->n_key_data; ++i) {
    krb5_key_data& kd = ent->key_data[i];
    krb5_keyblock kb = {};
    krb5_keysalt salt = {};
    ret = krb5_dbe_decrypt_key_data(ctx, nullptr, &kd, &kb, &salt);
    if (ret) return Error(ret, "decrypting the key data of " + name);
    const bool match =
        kb.length == kHandleLen &&
        std::memcmp(kb.contents, kHandleMagic, kHandleMagicLen) == 0 &&
        std::memcmp(kb.contents + kHandleMagicLen, old_id.data(), kKeyIdBytes) == 0;
    if (match) {
      // A handle is no key (enctype.md): the new contents are public too.
      std::memcpy(kb.contents + kHandleMagicLen, new_id.data(), kKeyIdBytes);
      krb5_key_data enc;
      std::memset(&enc, 0, sizeof(enc));
      ret = krb5_dbe_encrypt_key_data(ctx, mkey, &kb, &salt, kd.key_data_kvno, &enc);
      if (ret == 0) {
        krb5_dbe_free_key_data_contents(ctx, &kd);
        kd = enc;
        ++switched;
      }
    }
    krb5_free_keyblock_contents(ctx, &kb);
    krb5_free_data_contents(ctx, &salt.data);
    if (ret) return Error(ret, "encrypting the new key handle of " + name);
  }
  if (switched == 0)
    return absl::NotFoundError(
        absl::StrCat(name, " holds no key handle naming the old key id"));
  return PutKeyData(ent, name);
}

// As SwitchKeyId: the key data entries that are handles naming one of
// `ids` leave the entry, the others stay as they are (same encryption,
// kvno and salt), one put. FAILED_PRECONDITION when that would leave the
// entry without keys.
absl::StatusOr<std::set<std::string>> Kdb::RemoveHandles(const std::string& name,
                                                         const std::set<std::string>& ids) {
  krb5_context ctx = Ctx(context_);
  DbEntry entry{ctx};
  if (absl::Status st = ReadEntry(name, &entry.e); !st.ok()) return st;
  krb5_db_entry* ent = entry.e;
  std::vector<bool> drop(ent->n_key_data, false);
  std::set<std::string> removed;
  size_t dropped = 0;
  for (int i = 0; i < ent->n_key_data; ++i) {
    krb5_keyblock kb = {};
    krb5_error_code ret = krb5_dbe_decrypt_key_data(ctx, nullptr, &ent->key_data[i], &kb, nullptr);
    if (ret) return Error(ret, "decrypting the key data of " + name);
    if (kb.length == kHandleLen &&
        std::memcmp(kb.contents, kHandleMagic, kHandleMagicLen) == 0) {
      std::string id(reinterpret_cast<const char*>(kb.contents) + kHandleMagicLen,
                     kKeyIdBytes);
      drop[i] = ids.count(id) > 0;
      if (drop[i]) removed.insert(std::move(id));
    }
    krb5_free_keyblock_contents(ctx, &kb);
    if (drop[i]) ++dropped;
  }
  if (dropped == 0) return removed;
  if (dropped == static_cast<size_t>(ent->n_key_data))
    return absl::FailedPreconditionError(
        absl::StrCat(name, ": removing those handles would leave it no key"));
  int kept = 0;
  for (int i = 0; i < ent->n_key_data; ++i) {
    if (drop[i]) krb5_dbe_free_key_data_contents(ctx, &ent->key_data[i]);
    else ent->key_data[kept++] = ent->key_data[i];
  }
  ent->n_key_data = kept;
  if (absl::Status st = PutKeyData(ent, name); !st.ok()) return st;
  return removed;
}

std::string LabelRealm(const std::string& label) {
  std::string s = label;
  const std::string suffix = kMigratedSuffix;
  if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0)
    s.resize(s.size() - suffix.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;  // the escaped character
    } else if (s[i] == '@') {
      return s.substr(i + 1);
    }
  }
  return "";
}

}  // namespace kmpc::admin
