// The Dealer (dealer.h): a key's deal into every configured cluster, the
// kind it is dealt as, and the settling of what a change dealt or replaced
// against the principal's KDB entry, which is read here, never written.
// Sources: kdc.conf's [mpcdealer] patterns (dealer_module.cc), the
// principal's kmpc_key_kind string attribute, kmpc-admin's config file
// (admin/config.h, read on the first deal).
#include "dealer.h"

#include <fnmatch.h>
#include <syslog.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "admin/config.h"
#include "admin/rewrite_due.h"
#include "client/admin_client.h"
#include "contract.h"

extern "C" {
#include <kdb.h>
#include <krb5/kdcmpc_plugin.h>
#include <profile.h>
}

#include "admin/kdb_profile.h"  // after <profile.h>

namespace kmpc::admin::dealer {

// Whether one of `patterns` matches `name` (unparsed, with realm); a
// pattern without a realm matches the name without its realm.
bool Matches(const std::vector<std::string>& patterns, const std::string& name) {
  const size_t at = name.rfind('@');
  for (const std::string& p : patterns) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
    if (p.find('@') == std::string::npos && at != std::string::npos &&
        fnmatch(p.c_str(), name.substr(0, at).c_str(), 0) == 0)
      return true;
  }
  return false;
}

bool ComponentIs(const krb5_data& d, std::string_view s) {
  return d.length == s.size() && std::memcmp(d.data, s.data(), s.size()) == 0;
}

// kadmind's and kpropd's own service principals, whose tickets kadmind
// decrypts in the cluster: kadmin/admin, kadmin/changepw, the host-based
// kadmin/<fqdn>, and kiprop/<fqdn>; not kadmin/history, whose key
// encrypts kadm5's password history and is never dealt.
bool KadmindService(krb5_const_principal p) {
  if (p == nullptr || p->length != 2) return false;
  if (ComponentIs(p->data[0], "kiprop")) return true;
  return ComponentIs(p->data[0], "kadmin") && !ComponentIs(p->data[1], "history");
}

bool KadmindService(krb5_context ctx, const std::string& name) {
  krb5_principal p = nullptr;
  if (krb5_parse_name(ctx, name.c_str(), &p) != 0) return false;
  const bool yes = KadmindService(p);
  krb5_free_principal(ctx, p);
  return yes;
}

absl::StatusOr<std::string> Dealer::Deal(krb5_context ctx, const std::string& name,
                                         krb5_kvno kvno, const krb5_keyblock& key,
                                         bool random, std::set<std::string> replaced) {
  std::lock_guard<std::mutex> lock(mu_);
  SettleAbandoned(ctx);
  absl::Status st = ConnectLocked();
  if (!st.ok()) return st;
  // Only AES keys (aes*-ctr-mpc, aes*-cts-hmac-sha1-96) are kept: an RC4
  // key is the NT hash, a password equivalent, and DES keys are weak.
  const std::optional<engine::Cipher> cipher = CipherOfEnctype(key.enctype);
  if (!cipher || key.length != engine::KeyBytes(*cipher))
    return absl::InvalidArgumentError(absl::StrCat(
        "enctype ", key.enctype, " is not one the cluster holds (aes*-ctr-mpc, "
        "aes128/aes256-cts-hmac-sha1-96)"));
  absl::StatusOr<KeyKind> kind = KindOf(ctx, name, random);
  if (!kind.ok()) return kind.status();
  if (absl::Status one = OneDoorPerPassword(*cipher, *kind, random); !one.ok()) return one;
  std::string key_id(contract::kKeyIdSize, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key_id.data()),
                 contract::kKeyIdSize) != 1)
    return absl::InternalError("no randomness for a key id");
  client::KeyMeta meta{key_id, kvno, name};
  meta.kind = *kind;
  Pending& p = pending_[name];
  p.principal = name;
  p.since = std::time(nullptr);
  if (!p.checked_real) {
    std::set<std::string> held;
    p.checked_real = ReadHandles(ctx, name, &held, &p.replaced_real);
  }
  if (*kind != KeyKind::kService && !random) {
    if (!p.user_origin) {
      std::array<uint8_t, 16> origin;
      if (RAND_bytes(origin.data(), static_cast<int>(origin.size())) != 1)
        return absl::InternalError("no randomness for a deal id");
      p.user_origin = origin;
    }
    meta.origin = p.user_origin;
  }
  st = cluster_->PutKey(*cipher, absl::MakeConstSpan(key.contents, key.length), meta);
  if (!st.ok()) return st;
  p.dealt.insert(key_id);
  if (*kind != KeyKind::kService) p.dealt_user.insert(key_id);
  p.replaced.insert(replaced.begin(), replaced.end());
  return key_id;
}

absl::Status Dealer::OneDoorPerPassword(engine::Cipher cipher, KeyKind kind,
                                        bool random) const {
  if (random || kind == KeyKind::kService || engine::IsCts(cipher) || user_ctr_mpc_)
    return absl::OkStatus();
  return absl::FailedPreconditionError(
      "kmpc: a password-derived key is held in the cluster under "
      "aes256/aes128-cts-hmac-sha1-96 only; drop aes*-ctr-mpc from this "
      "principal's enctypes (supported_enctypes, or kadmin -e), or set "
      "user_ctr_mpc = true in kmpc-admin's config file (docs/admin-guide.md). "
      "Nothing was changed");
}

void Dealer::WillRemove(const std::string& name, std::set<std::string> handles) {
  std::lock_guard<std::mutex> lock(mu_);
  Pending& p = pending_[name];
  p.principal = name;
  p.replaced.insert(handles.begin(), handles.end());
  p.since = std::time(nullptr);
}

bool Dealer::Settle(krb5_context ctx, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(name);
  if (it == pending_.end()) return false;
  const bool user = SettleOne(ctx, it->second);
  pending_.erase(it);
  return user;
}

void Dealer::SettleAll(krb5_context ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, p] : pending_) SettleOne(ctx, p);
  pending_.clear();
}

absl::Status Dealer::ConnectLocked() {
  if (cluster_) return absl::OkStatus();
  if (config_path_.empty())
    return absl::FailedPreconditionError(
        "kmpc: no cluster configuration ([mpcdealer] kmpc = { config = "
        "FILE } in kdc.conf)");
  auto settings = ReadConfigFile(config_path_);
  if (!settings.ok()) return settings.status();
  Config cfg;
  if (absl::Status st = ApplySettings(*settings, &cfg); !st.ok()) return st;
  auto cl = Clusters::Connect(cfg);
  if (!cl.ok()) return cl.status();
  cluster_ = std::move(*cl);
  user_ctr_mpc_ = cfg.user_ctr_mpc;
  return absl::OkStatus();
}

void Dealer::SettleAbandoned(krb5_context ctx) {
  time_t now = std::time(nullptr);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.since < kAbandonedAfterS) {
      ++it;
      continue;
    }
    SettleOne(ctx, it->second);
    it = pending_.erase(it);
  }
}

bool Dealer::SettleOne(krb5_context ctx, const Pending& p) {
  std::set<std::string> referenced;
  if (!ReadHandles(ctx, p.principal, &referenced)) return false;
  if (ConnectLocked().ok()) {
    for (const std::set<std::string>* ids : {&p.dealt, &p.replaced})
      for (const std::string& id : *ids)
        if (!referenced.count(id)) (void)cluster_->DeleteKey(id);
  }
  bool committed = false;
  for (const std::string& id : p.dealt) committed = committed || referenced.count(id) > 0;
  if (committed && p.replaced_real) NoteReplacedRealKeys(ctx, p.principal);
  for (const std::string& id : p.dealt_user)
    if (referenced.count(id)) return true;
  return false;
}

void Dealer::NoteReplacedRealKeys(krb5_context ctx, const std::string& name) {
  const size_t at = name.rfind('@');
  if (at == std::string::npos) return;
  const std::string dbname = DbName(ctx, name.substr(at + 1));
  if (dbname.empty() || !NoteRewriteDue(dbname, name).ok())
    syslog(LOG_WARNING,
           "kmpc: %s: its real keys were replaced by key handles, but no note "
           "could be written beside the KDB (database_name in kdc.conf): run "
           "kmpc-admin rewrite-kdb",
           name.c_str());
}

std::string Dealer::DbName(krb5_context ctx, const std::string& realm) {
  profile_t prof = nullptr;
  if (krb5_get_profile(ctx, &prof) != 0) return "";
  const KdbModuleSettings m = ReadKdbModuleSettings(prof, realm);
  std::string out = m.database_name;
  if (out.empty()) {
    char* name = nullptr;
    profile_get_string(prof, "realms", realm.c_str(), "database_name", nullptr, &name);
    if (name != nullptr) out = name;
    profile_release_string(name);
  }
  profile_release(prof);
  if (m.library != "db2") return "";
  if (out.empty())
    if (const char* kdc = std::getenv("KRB5_KDC_PROFILE"); kdc != nullptr) {
      const std::string conf = kdc;
      const size_t slash = conf.rfind('/');
      if (slash != std::string::npos) out = conf.substr(0, slash) + "/principal";
    }
  return out;
}

absl::StatusOr<KeyKind> Dealer::KindOf(krb5_context ctx, const std::string& name,
                                       bool random) const {
  if (KadmindService(ctx, name)) {
    if (!random)
      return absl::FailedPreconditionError(
          "kadmind's keys in the cluster are random keys (cpw -randkey or "
          "ktadd), never a password");
    return KeyKind::kService;
  }
  // A ticket-granting key decrypts tickets: a service's. The realm's own
  // is random (a password would give its AS reply, ungated, as an
  // offline verifier); a cross-realm one may come from the password the
  // two realms share (MIT's practice; docs/limitations.md).
  if (TicketGranting(name)) {
    if (!random && LocalTicketGranting(name))
      return absl::FailedPreconditionError(
          "a ticket-granting key in the cluster is a random key (cpw -randkey), "
          "never a password");
    return KeyKind::kService;
  }
  KeyKind kind = KeyKind::kUser;
  if (std::optional<KeyKind> k = AttributeKind(ctx, name)) kind = *k;
  else if (Matches(patterns_.user_service, name)) kind = KeyKind::kUserService;
  else if (Matches(patterns_.service, name)) kind = KeyKind::kService;
  if (kind == KeyKind::kService && !random) return KeyKind::kUserService;
  return kind;
}

std::optional<KeyKind> Dealer::AttributeKind(krb5_context ctx, const std::string& name) {
  krb5_principal princ = nullptr;
  if (krb5_parse_name(ctx, name.c_str(), &princ) != 0) return std::nullopt;
  krb5_db_entry* ent = nullptr;
  krb5_error_code ret = krb5_db_get_principal(ctx, princ, 0, &ent);
  krb5_free_principal(ctx, princ);
  if (ret != 0) return std::nullopt;
  char* value = nullptr;
  std::optional<KeyKind> kind;
  if (krb5_dbe_get_string(ctx, ent, kKindAttribute, &value) == 0 && value != nullptr) {
    if (std::strcmp(value, "service") == 0) kind = KeyKind::kService;
    else if (std::strcmp(value, "user+service") == 0) kind = KeyKind::kUserService;
    else if (std::strcmp(value, "user") == 0) kind = KeyKind::kUser;
    krb5_dbe_free_string(ctx, value);
  }
  krb5_db_free_principal(ctx, ent);
  return kind;
}

bool Dealer::ReadHandles(krb5_context ctx, const std::string& name,
                         std::set<std::string>* out, bool* real) {
  krb5_principal princ = nullptr;
  if (krb5_parse_name(ctx, name.c_str(), &princ) != 0) return false;
  krb5_db_entry* ent = nullptr;
  krb5_error_code ret = krb5_db_get_principal(ctx, princ, 0, &ent);
  krb5_free_principal(ctx, princ);
  if (ret == KRB5_KDB_NOENTRY) return true;
  if (ret != 0) return false;
  bool ok = true;
  for (int i = 0; i < ent->n_key_data; ++i) {
    krb5_key_data* kd = &ent->key_data[i];
    // Handles are stored as key data of the enctypes the cluster holds.
    if (!CipherOfEnctype(kd->key_data_type[0])) {
      if (real != nullptr) *real = true;
      continue;
    }
    krb5_keyblock kb;
    std::memset(&kb, 0, sizeof(kb));
    if (krb5_dbe_decrypt_key_data(ctx, nullptr, kd, &kb, nullptr) != 0) {
      ok = false;
      continue;
    }
    if (kb.length == KRB5_KDCMPC_HANDLE_LEN &&
        std::memcmp(kb.contents, KRB5_KDCMPC_HANDLE_MAGIC,
                    KRB5_KDCMPC_HANDLE_MAGIC_LEN) == 0)
      out->insert(std::string(
          reinterpret_cast<const char*>(kb.contents) + KRB5_KDCMPC_HANDLE_MAGIC_LEN,
          KRB5_KDCMPC_KEY_ID_LEN));
    else if (real != nullptr)
      *real = true;
    krb5_free_keyblock_contents(ctx, &kb);
  }
  krb5_db_free_principal(ctx, ent);
  return ok;
}

}  // namespace kmpc::admin::dealer
