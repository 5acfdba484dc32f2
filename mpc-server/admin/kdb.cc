// Kdb (kdb.h): opening a realm's KDB through kadm5 and libkdb5, reading
// its principals and keys, and deriving keys; writing its key handles is
// kdb_handles.cc.
#include "admin/kdb.h"
#include "admin/kdb_internal.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <unistd.h>

// com_err.h first, as C: Debian's krb5.h (built --with-system-et) includes
// e2fsprogs' <et/com_err.h>, which has no C++ guards of its own.
extern "C" {
#include <com_err.h>
}
#include <krb5/krb5.h>
// kdb.h has no C++ guards of its own (kadm5/admin.h includes it outside
// its extern "C" block): include it first, as C.
extern "C" {
#include <kdb.h>
}
#include <com_err.h>
#include <kadm5/admin.h>
#include <krb5/kdcmpc_plugin.h>
#include <profile.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kmpc::admin {

// The enctype numbers kmpc's tools use are krb5's (the patched krb5.h and
// the kdcmpc interface); a renumbering there must not go unnoticed here.
static_assert(kEnctypeAes128Mpc == ENCTYPE_AES128_CTR_MPC &&
                  kEnctypeAes128Mpc == KRB5_KDCMPC_ENCTYPE_AES128,
              "aes128-ctr-mpc's enctype number differs from krb5's");
static_assert(kEnctypeAes256Mpc == ENCTYPE_AES256_CTR_MPC &&
                  kEnctypeAes256Mpc == KRB5_KDCMPC_ENCTYPE_AES256,
              "aes256-ctr-mpc's enctype number differs from krb5's");
static_assert(kEnctypeAes128Cts == ENCTYPE_AES128_CTS_HMAC_SHA1_96 &&
                  kEnctypeAes256Cts == ENCTYPE_AES256_CTS_HMAC_SHA1_96,
              "aes*-cts-hmac-sha1-96's enctype numbers differ from krb5's");
using kdb_internal::Ctx;
using kdb_internal::DbEntry;
using kdb_internal::IsHandle;
using kdb_internal::kHandleMagicLen;
using kdb_internal::KeyDataList;
using kdb_internal::kKeyIdBytes;
using kdb_internal::Principal;

namespace {

int Preference(int32_t enctype) {
  switch (enctype) {
    case kEnctypeAes256Mpc: return 4;
    case kEnctypeAes256Cts: return 3;
    case kEnctypeAes128Mpc: return 2;
    case kEnctypeAes128Cts: return 1;
    default: return 0;
  }
}

}  // namespace

SecretBytes& SecretBytes::operator=(SecretBytes&& o) noexcept {
  Wipe();
  v_ = std::move(o.v_);
  return *this;
}

void SecretBytes::Wipe() {
  if (!v_.empty()) OPENSSL_cleanse(v_.data(), v_.size());
  v_.clear();
}

const char* EnctypeName(int32_t enctype) {
  switch (enctype) {
    case kEnctypeAes128Mpc: return "aes128-ctr-mpc";
    case kEnctypeAes256Mpc: return "aes256-ctr-mpc";
    case kEnctypeAes128Cts: return "aes128-cts-hmac-sha1-96";
    case kEnctypeAes256Cts: return "aes256-cts-hmac-sha1-96";
    case 23: return "arcfour-hmac";
    case 24: return "arcfour-hmac-exp";
    case 16: return "des3-cbc-sha1";
    case 1: return "des-cbc-crc";
    case 2: return "des-cbc-md4";
    case 3: return "des-cbc-md5";
    default: return "(another enctype)";
  }
}

bool IsCtsEnctype(int32_t enctype) {
  return enctype == kEnctypeAes128Cts || enctype == kEnctypeAes256Cts;
}

bool IsMpcEnctype(int32_t enctype) {
  return enctype == kEnctypeAes128Mpc || enctype == kEnctypeAes256Mpc;
}

// MIT's numbers (krb5.h): DES 1-7 (5-7 raw and old DES3 forms), DES3 16,
// RC4 23 and 24.
bool IsWeakEnctype(int32_t enctype) {
  return (enctype >= 1 && enctype <= 7) || enctype == 16 || enctype == 23 ||
         enctype == 24;
}

int32_t EnctypeOfName(const std::string& name) {
  for (int32_t e : {kEnctypeAes256Mpc, kEnctypeAes128Mpc, kEnctypeAes256Cts,
                    kEnctypeAes128Cts})
    if (name == EnctypeName(e)) return e;
  if (name == "aes256-cts") return kEnctypeAes256Cts;  // MIT's short names
  if (name == "aes128-cts") return kEnctypeAes128Cts;
  return 0;
}

int32_t MpcEnctypeFor(int32_t enctype) {
  switch (enctype) {
    case kEnctypeAes128Mpc:
    case kEnctypeAes128Cts: return kEnctypeAes128Mpc;
    case kEnctypeAes256Mpc:
    case kEnctypeAes256Cts: return kEnctypeAes256Mpc;
    default: return 0;
  }
}

// Every key_data entry of princ, decrypted with the master key through
// libkdb5, in the form kadm5_get_principal_keys gives (which refuses, by
// design, principals holding key handles: krb5's key dealer patch).
static krb5_error_code ReadKeyData(krb5_context ctx, krb5_principal princ,
                                   kadm5_key_data** out, int* n_out) {
  *out = nullptr;
  *n_out = 0;
  DbEntry entry{ctx};
  krb5_error_code ret = krb5_db_get_principal(ctx, princ, 0, &entry.e);
  if (ret == KRB5_KDB_NOENTRY) return KADM5_UNK_PRINC;
  if (ret) return ret;
  const krb5_db_entry* ent = entry.e;
  auto* kd = static_cast<kadm5_key_data*>(
      calloc(ent->n_key_data > 0 ? ent->n_key_data : 1, sizeof(kadm5_key_data)));
  if (kd == nullptr) return ENOMEM;
  int n = 0;
  for (; n < ent->n_key_data; ++n) {
    kd[n].kvno = ent->key_data[n].key_data_kvno;
    ret = krb5_dbe_decrypt_key_data(ctx, nullptr, &ent->key_data[n], &kd[n].key,
                                    &kd[n].salt);
    if (ret) break;
  }
  if (ret) {
    kadm5_free_kadm5_key_data(ctx, n, kd);
    return ret;
  }
  *out = kd;
  *n_out = n;
  return 0;
}

// kadm5_init_krb5_context's KDC context, except that kmpc's key dealer
// (libkmpc_dealer.so, [plugins] mpcdealer and kadm5_hook in kdc.conf) is
// disabled: kmpc-admin deals keys itself and writes handles, and the module
// must not be loaded next to this program's own copy of the cluster client
// (both would register kmpc.proto with the process's protobuf runtime).
// The profile is a private file (profile_path, kept while the context
// lives) that includes krb5.conf and kdc.conf as the KDC context would read
// them and adds the "disable" relations; no configuration file is changed.
static krb5_error_code KdcContextWithoutDealer(krb5_context* out,
                                               std::string* profile_path) {
  *out = nullptr;
  krb5_context base = nullptr;
  krb5_error_code ret = kadm5_init_krb5_context(&base);  // MIT's KDC set-up
  if (ret) return ret;
  // Which of the two interfaces load a "kmpc" module. (Only those get a
  // "disable": krb5 1.20.1's plugin.c dereferences a null module list when
  // an interface with no modules has one.)
  std::vector<std::string> loaded;
  profile_t base_profile = nullptr;
  if (krb5_get_profile(base, &base_profile) == 0) {
    for (const char* iface : {"mpcdealer", "kadm5_hook"}) {
      const char* names[] = {"plugins", iface, "module", nullptr};
      char** values = nullptr;
      if (profile_get_values(base_profile, names, &values) != 0) continue;
      for (char** v = values; *v != nullptr; ++v)
        if (absl::StartsWith(*v, "kmpc:")) {
          loaded.push_back(iface);
          break;
        }
      profile_free_list(values);
    }
    profile_release(base_profile);
  }
  krb5_free_context(base);
  // krb5.conf as libkrb5 finds it: KRB5_CONFIG, else MIT's default path.
  const char* cfg = secure_getenv("KRB5_CONFIG");
  std::string text;
  for (absl::string_view f : absl::StrSplit(
           cfg != nullptr ? cfg : KMPC_DEFAULT_KRB5_CONFIG, ':', absl::SkipEmpty()))
    if (access(std::string(f).c_str(), R_OK) == 0)
      absl::StrAppend(&text, "include ", f, "\n");
  const char* kdc = secure_getenv("KRB5_KDC_PROFILE");
  std::string kdc_profile = kdc != nullptr ? kdc : KMPC_DEFAULT_KDC_PROFILE;
  if (access(kdc_profile.c_str(), R_OK) == 0)
    absl::StrAppend(&text, "include ", kdc_profile, "\n");
  if (loaded.empty()) return kadm5_init_krb5_context(out);
  absl::StrAppend(&text, "[plugins]\n");
  for (const std::string& iface : loaded)
    absl::StrAppend(&text, "    ", iface, " = {\n        disable = kmpc\n    }\n");
  const char* tmpdir = secure_getenv("TMPDIR");
  std::string path = absl::StrCat(tmpdir != nullptr ? tmpdir : "/tmp",
                                  "/kmpc-admin-profile-XXXXXX");
  int fd = mkstemp(path.data());
  if (fd < 0) return errno;
  bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written) {
    unlink(path.c_str());
    return EIO;
  }
  profile_t profile = nullptr;
  ret = profile_init_path(path.c_str(), &profile);
  if (!ret) ret = krb5_init_context_profile(profile, KRB5_INIT_CONTEXT_KDC, out);
  if (profile != nullptr) profile_abandon(profile);
  if (ret) {
    unlink(path.c_str());
    return ret;
  }
  *profile_path = path;
  return 0;
}

absl::StatusOr<std::unique_ptr<Kdb>> Kdb::Open(const std::string& realm) {
  std::unique_ptr<Kdb> db(new Kdb());
  krb5_context ctx = nullptr;
  krb5_error_code ret = KdcContextWithoutDealer(&ctx, &db->profile_path_);
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
  // As kadmin.local does (kadmin/cli/kadmin.c): with iprop enabled, map the
  // update log. libkdb5 logs a put only while it is mapped, so without it
  // a key kmpc-admin moves or refreshes would reach kpropd on the replicas
  // only with the next full resync, and a refreshed key's old id, deleted
  // after its grace period, would stop their logins.
  ret = kadm5_init_iprop(db->handle_, nullptr);
  if (ret) return db->Error(ret, "mapping the iprop update log of realm " + r);
  return db;
}

Kdb::~Kdb() {
  if (handle_ != nullptr) kadm5_destroy(handle_);
  if (context_ != nullptr) krb5_free_context(Ctx(context_));
  if (!profile_path_.empty()) unlink(profile_path_.c_str());
}

absl::Status Kdb::Error(long ret, const std::string& what) {
  const char* m = krb5_get_error_message(Ctx(context_), ret);
  std::string msg = absl::StrCat(what, ": ", m);
  krb5_free_error_message(Ctx(context_), m);
  if (ret == KADM5_UNK_PRINC) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

std::vector<std::string> Kdb::ProtectPatterns() {
  std::vector<std::string> out;
  profile_t profile = nullptr;
  if (krb5_get_profile(Ctx(context_), &profile) == 0) {
    const char* names[] = {"mpcdealer", "kmpc", "protect", nullptr};
    char** values = nullptr;
    if (profile_get_values(profile, names, &values) == 0) {
      for (char** v = values; *v != nullptr; ++v) out.emplace_back(*v);
      profile_free_list(values);
    }
    profile_release(profile);
  }
  if (out.empty()) out.push_back("krbtgt/*");
  return out;
}

// info's flags, from princ's KDB entry.
static krb5_error_code ReadAttributes(krb5_context ctx, krb5_const_principal princ,
                                      PrincipalInfo* info) {
  DbEntry entry{ctx};
  krb5_error_code ret = krb5_db_get_principal(ctx, princ, 0, &entry.e);
  if (ret) return ret;
  info->requires_preauth = (entry.e->attributes & KRB5_KDB_REQUIRES_PRE_AUTH) != 0;
  return 0;
}

absl::StatusOr<PrincipalInfo> Kdb::Lookup(const std::string& name) {
  krb5_context ctx = Ctx(context_);
  Principal p{ctx};
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &p.p);
  if (ret) return Error(ret, "parsing principal name " + name);
  char* canon = nullptr;
  ret = krb5_unparse_name(ctx, p.p, &canon);
  if (ret) return Error(ret, "unparsing " + name);
  PrincipalInfo info;
  info.name = canon;
  krb5_free_unparsed_name(ctx, canon);
  KeyDataList kd{ctx};
  ret = ReadKeyData(ctx, p.p, &kd.kd, &kd.n);
  if (ret == KADM5_UNK_PRINC)
    return absl::NotFoundError(
        absl::StrCat("principal ", info.name, " does not exist in the KDB"));
  if (ret) return Error(ret, "reading the keys of " + info.name);
  for (int i = 0; i < kd.n; ++i) {
    const kadm5_key_data& k = kd.kd[i];
    KeyEntry e;
    e.enctype = k.key.enctype;
    e.kvno = k.kvno;
    e.is_handle = IsHandle(k.key);
    if (e.is_handle)
      e.key_id.assign(reinterpret_cast<const char*>(k.key.contents) + kHandleMagicLen,
                      kKeyIdBytes);
    e.salt_type = static_cast<int16_t>(k.salt.type);
    if (k.salt.data.length > 0)
      e.salt.assign(k.salt.data.data, k.salt.data.length);
    if (e.kvno > info.kvno) info.kvno = e.kvno;
    info.keys.push_back(std::move(e));
  }
  ret = ReadAttributes(ctx, p.p, &info);
  if (ret) return Error(ret, "reading the attributes of " + info.name);
  return info;
}

absl::Status Kdb::RequirePreauth(const std::string& name) {
  krb5_context ctx = Ctx(context_);
  Principal p{ctx};
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &p.p);
  if (ret) return Error(ret, "parsing principal name " + name);
  kadm5_principal_ent_rec ent;
  std::memset(&ent, 0, sizeof(ent));
  ret = kadm5_get_principal(handle_, p.p, &ent, KADM5_PRINCIPAL | KADM5_ATTRIBUTES);
  if (ret) return Error(ret, "reading " + name);
  if (!(ent.attributes & KRB5_KDB_REQUIRES_PRE_AUTH)) {
    ent.attributes |= KRB5_KDB_REQUIRES_PRE_AUTH;
    ret = kadm5_modify_principal(handle_, &ent, KADM5_ATTRIBUTES);
  }
  kadm5_free_principal_ent(handle_, &ent);
  if (ret) return Error(ret, "setting +requires_preauth on " + name);
  return absl::OkStatus();
}

// Every key of the principal NAME (decrypted: kd wipes them) and its
// current kvno, the highest; refused if a current key is a handle.
static absl::Status ReadCurrentKeys(Kdb* db, krb5_context ctx, const std::string& name,
                                    KeyDataList* kd, uint32_t* kvno) {
  Principal p{ctx};
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &p.p);
  if (ret) return db->Error(ret, "parsing principal name " + name);
  ret = ReadKeyData(ctx, p.p, &kd->kd, &kd->n);
  if (ret == KADM5_UNK_PRINC)
    return absl::NotFoundError(
        absl::StrCat("principal ", name, " does not exist in the KDB"));
  if (ret) return db->Error(ret, "reading the keys of " + name);
  *kvno = 0;
  for (int i = 0; i < kd->n; ++i) *kvno = std::max<uint32_t>(*kvno, kd->kd[i].kvno);
  for (int i = 0; i < kd->n; ++i)
    if (kd->kd[i].kvno == *kvno && IsHandle(kd->kd[i].key))
      return absl::FailedPreconditionError(absl::StrCat(
          "principal ", name, " is already shared (its key is an MPC key handle)"));
  return absl::OkStatus();
}

absl::StatusOr<ExistingKey> Kdb::ExportAesKey(const std::string& name) {
  krb5_context ctx = Ctx(context_);
  KeyDataList kd{ctx};
  uint32_t kvno = 0;
  absl::Status st = ReadCurrentKeys(this, ctx, name, &kd, &kvno);
  if (!st.ok()) return st;
  const kadm5_key_data* best = nullptr;
  for (int i = 0; i < kd.n; ++i) {
    const kadm5_key_data& k = kd.kd[i];
    if (k.kvno != kvno) continue;
    if (Preference(k.key.enctype) == 0) continue;
    if (best == nullptr || Preference(k.key.enctype) > Preference(best->key.enctype))
      best = &k;
  }
  if (best == nullptr)
    return absl::FailedPreconditionError(absl::StrCat(
        "principal ", name, " has no AES key to migrate (needs an "
        "aes256/aes128-cts-hmac-sha1-96 or aes*-ctr-mpc key at its current kvno ",
        kvno, "); share it from a password instead"));
  size_t want = (MpcEnctypeFor(best->key.enctype) == kEnctypeAes256Mpc) ? 32 : 16;
  if (best->key.length != want)
    return absl::FailedPreconditionError(absl::StrCat(
        "principal ", name, ": its ", EnctypeName(best->key.enctype),
        " key has a wrong length"));
  ExistingKey out;
  out.entry.enctype = best->key.enctype;
  out.entry.kvno = best->kvno;
  out.entry.salt_type = static_cast<int16_t>(best->salt.type);
  if (best->salt.data.length > 0)
    out.entry.salt.assign(best->salt.data.data, best->salt.data.length);
  out.key = SecretBytes(best->key.length);
  std::memcpy(out.key.data(), best->key.contents, best->key.length);
  return out;
}

absl::StatusOr<std::vector<ExistingKey>> Kdb::ExportCtsKeys(const std::string& name) {
  krb5_context ctx = Ctx(context_);
  KeyDataList kd{ctx};
  uint32_t kvno = 0;
  absl::Status st = ReadCurrentKeys(this, ctx, name, &kd, &kvno);
  if (!st.ok()) return st;
  std::vector<ExistingKey> out;
  for (int i = 0; i < kd.n; ++i) {
    const kadm5_key_data& k = kd.kd[i];
    if (k.kvno != kvno) continue;
    if (!IsCtsEnctype(k.key.enctype)) continue;
    if (k.key.length != (k.key.enctype == kEnctypeAes256Cts ? 32u : 16u))
      return absl::FailedPreconditionError(absl::StrCat(
          "principal ", name, ": its ", EnctypeName(k.key.enctype),
          " key has a wrong length"));
    ExistingKey e;
    e.entry.enctype = k.key.enctype;
    e.entry.kvno = k.kvno;
    e.entry.salt_type = static_cast<int16_t>(k.salt.type);
    if (k.salt.data.length > 0) e.entry.salt.assign(k.salt.data.data, k.salt.data.length);
    e.key = SecretBytes(k.key.length);
    std::memcpy(e.key.data(), k.key.contents, k.key.length);
    out.push_back(std::move(e));
  }
  if (out.empty())
    return absl::FailedPreconditionError(absl::StrCat(
        "principal ", name, " has no aes256/aes128-cts-hmac-sha1-96 key at its "
        "current kvno ", kvno, "; share it from a password instead"));
  return out;
}

absl::StatusOr<SecretBytes> Kdb::StringToKey(const std::string& name, int32_t enctype,
                                             const std::string& password) {
  krb5_context ctx = Ctx(context_);
  Principal p{ctx};
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &p.p);
  if (ret) return Error(ret, "parsing principal name " + name);
  krb5_data salt = {};
  ret = krb5_principal2salt(ctx, p.p, &salt);
  if (ret) return Error(ret, "making the salt of " + name);
  krb5_data pw;
  pw.magic = KV5M_DATA;
  pw.data = const_cast<char*>(password.data());
  pw.length = password.size();
  krb5_keyblock kb = {};
  ret = krb5_c_string_to_key(ctx, enctype, &pw, &salt, &kb);
  krb5_free_data_contents(ctx, &salt);
  if (ret) return Error(ret, "deriving the key of " + name);
  SecretBytes key(kb.length);
  std::memcpy(key.data(), kb.contents, kb.length);
  krb5_free_keyblock_contents(ctx, &kb);  // wipes
  return key;
}

absl::StatusOr<SecretBytes> Kdb::RandomKey(int32_t enctype) {
  krb5_context ctx = Ctx(context_);
  krb5_keyblock kb = {};
  krb5_error_code ret = krb5_c_make_random_key(ctx, enctype, &kb);
  if (ret) return Error(ret, "making a random key");
  SecretBytes key(kb.length);
  std::memcpy(key.data(), kb.contents, kb.length);
  krb5_free_keyblock_contents(ctx, &kb);  // wipes
  return key;
}

absl::StatusOr<std::vector<std::string>> Kdb::ListPrincipals() {
  char** names = nullptr;
  int n = 0;
  krb5_error_code ret =
      kadm5_get_principals(handle_, const_cast<char*>("*"), &names, &n);
  if (ret) return Error(ret, "listing principals");
  std::vector<std::string> out(names, names + n);
  kadm5_free_name_list(handle_, names, n);
  return out;
}

absl::Status Kdb::ReadEntry(const std::string& name, void* entry_out) {
  krb5_context ctx = Ctx(context_);
  Principal princ{ctx};
  krb5_error_code ret = krb5_parse_name(ctx, name.c_str(), &princ.p);
  if (ret) return Error(ret, "parsing principal name " + name);
  ret = krb5_db_get_principal(ctx, princ.p, 0, static_cast<krb5_db_entry**>(entry_out));
  if (ret) return Error(ret, "reading the KDB entry of " + name);
  return absl::OkStatus();
}

}  // namespace kmpc::admin
