#include "admin/kdb_rekey.h"

#include <cstring>

#include <krb5/krb5.h>
// kdb.h has no C++ guards of its own (see kdb.cc).
extern "C" {
#include <kdb.h>
}
#include <com_err.h>
#include <kadm5/admin.h>

#include "absl/strings/str_cat.h"

namespace kmpc::admin {
namespace {

// enctype.md, "Inside the KDC: key handles".
constexpr char kHandleMagic[] = "kmpc-key";
constexpr size_t kHandleMagicLen = 8;
constexpr size_t kKeyIdBytes = 32;
constexpr size_t kHandleLen = kHandleMagicLen + kKeyIdBytes;

krb5_context Ctx(void* p) { return static_cast<krb5_context>(p); }

}  // namespace

// The same set-up as Kdb::Open (kdb.cc): kadm5's server library opens the
// KDB and loads the master key list into the context.
absl::StatusOr<std::unique_ptr<KdbRekey>> KdbRekey::Open(const std::string& realm) {
  std::unique_ptr<KdbRekey> db(new KdbRekey());
  krb5_context ctx = nullptr;
  krb5_error_code ret = kadm5_init_krb5_context(&ctx);
  if (ret)
    return absl::FailedPreconditionError(
        absl::StrCat("cannot initialize krb5 (KRB5_CONFIG, KRB5_KDC_PROFILE): ",
                     error_message(ret)));
  db->context_ = ctx;
  kadm5_config_params params;
  std::memset(&params, 0, sizeof(params));
  std::string r = realm;
  if (!r.empty()) {
    params.mask |= KADM5_CONFIG_REALM;
    params.realm = r.data();
    ret = krb5_set_default_realm(ctx, r.c_str());
    if (ret) return db->Error(ret, "setting the realm");
  } else {
    char* def = nullptr;
    ret = krb5_get_default_realm(ctx, &def);
    if (ret) return db->Error(ret, "finding the default realm");
    r = def;
    krb5_free_default_realm(ctx, def);
  }
  db->realm_ = r;
  std::string client = "kmpc-admin/admin@" + r;
  ret = kadm5_init_with_password(ctx, client.data(), nullptr,
                                 const_cast<char*>(KADM5_ADMIN_SERVICE), &params,
                                 KADM5_STRUCT_VERSION, KADM5_API_VERSION_4,
                                 nullptr, &db->handle_);
  if (ret) return db->Error(ret, "opening the KDB of realm " + r);
  return db;
}

KdbRekey::~KdbRekey() {
  if (handle_ != nullptr) kadm5_destroy(handle_);
  if (context_ != nullptr) krb5_free_context(Ctx(context_));
}

absl::Status KdbRekey::Error(long ret, const std::string& what) {
  const char* m = krb5_get_error_message(Ctx(context_), ret);
  std::string msg = absl::StrCat(what, ": ", m);
  krb5_free_error_message(Ctx(context_), m);
  if (ret == KADM5_UNK_PRINC || ret == KRB5_KDB_NOENTRY) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

// libkdb5 as kadm5 does (and Kdb::AddHandleKeepOld): read the entry,
// decrypt each key data entry with its master key, re-encrypt the changed
// handles under the entry's master key with the same kvno and salt, record
// the modifier, one put (which also writes the iprop update log).
absl::Status KdbRekey::SwitchKeyId(const std::string& name, const std::string& old_id,
                                   const std::string& new_id) {
  if (old_id.size() != kKeyIdBytes || new_id.size() != kKeyIdBytes)
    return absl::InvalidArgumentError("bad key id");
  krb5_context ctx = Ctx(context_);
  krb5_principal princ = nullptr;
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &princ);
  if (ret) return Error(ret, "parsing principal name " + name);
  struct PrincFree {
    krb5_context c;
    krb5_principal p;
    ~PrincFree() { krb5_free_principal(c, p); }
  } princ_free{ctx, princ};
  krb5_db_entry* ent = nullptr;
  ret = krb5_db_get_principal(ctx, princ, 0, &ent);
  if (ret) return Error(ret, "reading the KDB entry of " + name);
  struct EntryFree {
    krb5_context c;
    krb5_db_entry* e;
    ~EntryFree() { krb5_db_free_principal(c, e); }
  } ent_free{ctx, ent};
  krb5_keyblock* mkey = nullptr;
  ret = krb5_dbe_find_mkey(ctx, ent, &mkey);
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
  krb5_principal mod = nullptr;
  std::string modname = "kmpc-admin/admin@" + realm_;
  if (krb5_parse_name(ctx, modname.c_str(), &mod) == 0) {
    krb5_timestamp now = 0;
    if (krb5_timeofday(ctx, &now) == 0)
      (void)krb5_dbe_update_mod_princ_data(ctx, ent, now, mod);
    krb5_free_principal(ctx, mod);
  }
  ent->mask = KADM5_KEY_DATA | KADM5_MOD_TIME | KADM5_MOD_NAME;
  ret = krb5_db_put_principal(ctx, ent);
  if (ret) return Error(ret, "writing the key handle of " + name);
  return absl::OkStatus();
}

}  // namespace kmpc::admin
