// libkmpc_dealer.so: kmpc's key dealer inside kadmind, kadmin.local and
// kdb5_util (the patched libkdb5 loads it; krb5/mpcdealer_plugin.h).
//
// Whenever MIT's tools make a new key of an MPC enctype (or of
// aes128/aes256-cts-hmac-sha1-96, dealt with its usage material) for an
// MPC-protected principal (addprinc, cpw with a password or -randkey,
// kpasswd through kadmind, the password change at an expired kinit, ktadd),
// libkdb5 hands the key to Deal() here. It is dealt into replicated 2-of-3
// XOR shares and stored on the three MPC servers all-or-nothing
// (client::AdminClient::PutKey) under a fresh random key id, and libkdb5
// stores only the 40-byte handle "kmpc-key" || key id. If any server is
// down, refuses or times out, the change fails and nothing is written.
// With several clusters in the config file (servers2 = ...), the key is
// dealt to each under the same id, all or nothing across them too
// (Clusters::PutKey, admin/cluster.h).
//
// Shares that end up referenced by no KDB entry are removed again:
//   - the previous keys of a principal (without -keepold) and the keys of a
//     deleted principal, once the change is committed;
//   - the shares of a change that was never committed (refused by a later
//     check such as password history, or a failed KDB write).
// The module learns of commits through the kadm5_hook interface
// (kadm5_hook_kmpc_initvt, same .so) and decides by reading the KDB entry
// itself: what it references stays, the rest of what this process dealt or
// replaced goes. Outside kadm5 (kdb5_util), the same check runs when the
// KDB is closed. kadm5_purgekeys calls no kadm5_hook and deals nothing, so
// the shares of the kvnos it removes stay: `kmpc-admin status --kdb`
// reports them and `kmpc-admin purge-unreferenced` removes them.
//
// Configuration (kdc.conf):
//   [plugins]
//       mpcdealer = { module = kmpc:/path/libkmpc_dealer.so }
//       kadm5_hook = { module = kmpc:/path/libkmpc_dealer.so }
//   [mpcdealer]
//       kmpc = {
//           config = /etc/kmpc/admin.conf   # kmpc-admin's file (config.h)
//           protect = krbtgt/*              # fnmatch patterns; repeatable
//           service = host/*                # protected, keys of kind service
//           user_service = svc-*            # protected, kind user+service
//       }
// `protect` names principals whose keys must be held by the cluster even
// before they hold a handle (default: krbtgt/*); a principal that holds a
// key of an MPC enctype, or whose change asks for one (kadmin -e), is
// protected anyway (krb5/mpcdealer_plugin.h). `service` and
// `user_service` protect too, and name the kind of the keys dealt for the
// principals they match (kmpc.proto KeyKind, which the servers check): a
// principal's kmpc_key_kind string attribute (kadmin setstr) wins over
// them, and a principal none names is a user (a password-derived key whose
// AS reply the servers gate, with no ticket or PAC material). A password
// set on a principal of kind service is dealt as user+service: only a
// random key gets a service key's powers (KindOf below). kadmind's own
// principals (kadmin/*, kiprop/*), once in the cluster, get random service
// keys only (libkdb5 deals their keys only once they hold a handle).
//
// No key, share or password is ever logged or put in a message.
#include <fnmatch.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <syslog.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "admin/cluster.h"
#include "admin/config.h"
#include "admin/rewrite_due.h"
#include "client/admin_client.h"
#include "contract.h"
#include "ticket_decrypt.h"

extern "C" {
#include <kadm5/admin.h>
#include <kdb.h>
#include <krb5/kadm5_hook_plugin.h>
#include <krb5/kdcmpc_plugin.h>
#include <krb5/mpcdealer_plugin.h>
#include <krb5/krb5.h>
#include <profile.h>
}

#include "admin/kdb_profile.h"  // after <profile.h>

namespace kmpc::admin {
namespace {

constexpr char kModuleName[] = "kmpc";
// The principal string attribute (kadmin setstr) naming the kind of the
// keys dealt for it: "service" (a random key), "user+service" (a
// password-derived key also used as a service) or "user"; none: the
// dealer's patterns decide.
constexpr char kKindAttribute[] = "kmpc_key_kind";
// A dealt key that no entry references this long after it was dealt belongs
// to a change that failed (kadm5 changes take milliseconds).
constexpr time_t kAbandonedAfterS = 120;

// Shares this process dealt or retired, not yet known to be settled.
struct Pending {
  std::string principal;              // unparsed, with realm
  std::set<std::string> dealt;        // key ids dealt for the change
  std::set<std::string> dealt_user;   // those of a user kind (not kService)
  std::set<std::string> replaced;     // key ids the entry held before it
  // The deal the change's user-kind keys count under on the servers
  // (client::KeyMeta::origin): one password's aes256 and aes128 keys share
  // one failure budget.
  std::optional<std::array<uint8_t, 16>> user_origin = std::nullopt;
  // Whether the entry held a real key (not a handle) before the change
  // (read at its first deal): once the change is committed, its old keys
  // are in the KDB files' free space until a rewrite (admin/rewrite_due.h).
  bool checked_real = false;
  bool replaced_real = false;
  time_t since = 0;
};

// The dealer's patterns (kdc.conf [mpcdealer] kmpc, above).
struct Patterns {
  std::vector<std::string> protect;
  std::vector<std::string> service;
  std::vector<std::string> user_service;
};

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

class Dealer {
 public:
  Dealer(std::string config_path, Patterns patterns)
      : config_path_(std::move(config_path)), patterns_(std::move(patterns)) {}

  bool Protects(const std::string& name) const {
    return Matches(patterns_.protect, name) || Matches(patterns_.service, name) ||
           Matches(patterns_.user_service, name);
  }

  // Deals key (a random one if `random`, else possibly derived from a
  // password); returns the key id. Messages name servers, never secrets.
  absl::StatusOr<std::string> Deal(krb5_context ctx, const std::string& name,
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

  // A key that may come from a password (KindOf: a user kind, not marked
  // random) is dealt only under aes128/aes256-cts-hmac-sha1-96, whose login
  // the servers compute on shares of the timestamp and reply and gate
  // (docs/security-model.md, "The servers enforce the gate"). An
  // aes*-ctr-mpc copy of the same password (the same RFC 3962 string-to-key
  // bytes) would be a second door: its timestamp and reply reach every
  // server whole. Only `user_ctr_mpc = true` in kmpc-admin's config file
  // (config.h: a fleet of patched clients, the tests) deals one.
  absl::Status OneDoorPerPassword(engine::Cipher cipher, KeyKind kind, bool random) const {
    if (random || kind == KeyKind::kService || engine::IsCts(cipher) || user_ctr_mpc_)
      return absl::OkStatus();
    return absl::FailedPreconditionError(
        "kmpc: a password-derived key is held in the cluster under "
        "aes256/aes128-cts-hmac-sha1-96 only; drop aes*-ctr-mpc from this "
        "principal's enctypes (supported_enctypes, or kadmin -e), or set "
        "user_ctr_mpc = true in kmpc-admin's config file (docs/admin-guide.md). "
        "Nothing was changed");
  }

  // A principal is about to be deleted: its handles go once it is gone.
  void WillRemove(const std::string& name, std::set<std::string> handles) {
    std::lock_guard<std::mutex> lock(mu_);
    Pending& p = pending_[name];
    p.principal = name;
    p.replaced.insert(handles.begin(), handles.end());
    p.since = std::time(nullptr);
  }

  // A change of `name` was committed (or, at close, every change is over).
  // True when the entry now holds a key this process dealt as a user kind
  // (KEY_KIND_USER or KEY_KIND_USER_SERVICE: a password-derived key, or a
  // random one that no pattern or attribute names a service's).
  bool Settle(krb5_context ctx, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(name);
    if (it == pending_.end()) return false;
    const bool user = SettleOne(ctx, it->second);
    pending_.erase(it);
    return user;
  }

  void SettleAll(krb5_context ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, p] : pending_) SettleOne(ctx, p);
    pending_.clear();
  }

 private:
  absl::Status ConnectLocked() {
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

  void SettleAbandoned(krb5_context ctx) {
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

  // Deletes from the servers what `p` dealt or replaced and the entry does
  // not reference now. If the entry cannot be read for another reason than
  // its absence, nothing is deleted (kmpc-admin status reports leftovers).
  // True when the entry references a key `p` dealt as a user kind.
  bool SettleOne(krb5_context ctx, const Pending& p) {
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

  // A committed change replaced `name`'s real keys by handles: the KDB's
  // db2 file keeps the old record until `kmpc-admin rewrite-kdb`, which
  // this dealer cannot run (a dump and load loses a change kadmind makes
  // meanwhile): it is noted for kmpc-admin status --kdb
  // (admin/rewrite_due.h). Best effort: a failure leaves no note.
  static void NoteReplacedRealKeys(krb5_context ctx, const std::string& name) {
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

  // The db2 database file of `realm`'s KDB as libkdb5's db2 module names it
  // ([dbmodules] MODULE database_name, MODULE being the realm's
  // database_module or the realm; else the realm's database_name; else
  // "principal" beside KRB5_KDC_PROFILE, where MIT's defaults put both);
  // empty for another module (LDAP keeps its own storage) or none found.
  static std::string DbName(krb5_context ctx, const std::string& realm) {
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

 public:
  // The kind of a new key of `name` (kmpc.proto KeyKind): the principal's
  // string attribute kKindAttribute (kadmin setstr), else the first of the
  // user_service and service patterns that matches, else a user's
  // password-derived key, whose AS reply the servers gate and which gets no
  // ticket or PAC material (a principal added right now has no attributes
  // yet: its patterns decide until the admin sets one and changes the key).
  // A service key is a random key: the servers release its AS reply without
  // a gate and decrypt tickets under it, which for a password-derived key
  // would hand out a verifier to guess the password against offline
  // (docs/security-model.md). So a key that may come from a password is
  // dealt as user+service where the name says service, and kadmind's
  // principals, whose tickets kadmind decrypts in the cluster, take random
  // keys only.
  absl::StatusOr<KeyKind> KindOf(krb5_context ctx, const std::string& name,
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

  // The kind kKindAttribute names on `name`'s KDB entry; nullopt if the
  // entry or the attribute is absent or names no kind.
  static std::optional<KeyKind> AttributeKind(krb5_context ctx, const std::string& name) {
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

  // The key ids of the handles `name`'s KDB entry holds, and in *real
  // (if given) whether it holds a key that is no handle (of any enctype);
  // false if it could not be read (an absent principal holds none: true).
  static bool ReadHandles(krb5_context ctx, const std::string& name,
                          std::set<std::string>* out, bool* real = nullptr) {
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

 private:
  const std::string config_path_;
  const Patterns patterns_;
  std::mutex mu_;
  std::unique_ptr<Clusters> cluster_;  // every configured cluster
  bool user_ctr_mpc_ = false;          // config.h user_ctr_mpc
  std::map<std::string, Pending> pending_;
};

// One dealer per process, shared by the mpcdealer and kadm5_hook vtables
// (both are loaded from this .so and live as long as the KDB handle).
std::mutex g_mu;
Dealer* g_dealer = nullptr;
int g_refs = 0;

// The values of [section] kmpc = { name = ... } in the process's profile.
std::vector<std::string> ProfileValues(krb5_context ctx, const char* name,
                                       const char* section = "mpcdealer") {
  std::vector<std::string> out;
  profile_t profile = nullptr;
  if (krb5_get_profile(ctx, &profile) != 0) return out;
  const char* path[] = {section, kModuleName, name, nullptr};
  char** values = nullptr;
  if (profile_get_values(profile, path, &values) == 0) {
    for (char** v = values; *v != nullptr; ++v) out.emplace_back(*v);
    profile_free_list(values);
  }
  profile_release(profile);
  return out;
}

krb5_error_code Acquire(krb5_context ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_dealer == nullptr) {
    std::vector<std::string> config = ProfileValues(ctx, "config");
    Patterns patterns{ProfileValues(ctx, "protect"), ProfileValues(ctx, "service"),
                      ProfileValues(ctx, "user_service")};
    if (patterns.protect.empty()) patterns.protect.push_back("krbtgt/*");
    try {
      g_dealer = new Dealer(config.empty() ? "" : config.back(), std::move(patterns));
    } catch (...) {
      return ENOMEM;
    }
  }
  ++g_refs;
  return 0;
}

void Release(krb5_context ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_refs == 0 || --g_refs > 0) return;
  g_dealer->SettleAll(ctx);
  delete g_dealer;
  g_dealer = nullptr;
}

std::string Unparse(krb5_context ctx, krb5_const_principal princ) {
  char* s = nullptr;
  if (krb5_unparse_name(ctx, princ, &s) != 0) return "";
  std::string out(s);
  krb5_free_unparsed_name(ctx, s);
  return out;
}

// ---- mpcdealer vtable ------------------------------------------------------

// The process that deals (kadmind, kadmin.local) holds each new key in the
// clear, and its round keys and powers of H, while it splits them: keep
// them out of core dumps. Non-dumpable alone still leaves a root-owned core
// when fs.suid_dumpable is 2, so the core size limit goes to 0 as well.
krb5_error_code NoCoreDumps(krb5_context ctx) {
  const struct rlimit none = {0, 0};
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 && setrlimit(RLIMIT_CORE, &none) == 0)
    return 0;
  const krb5_error_code code = errno;
  krb5_set_error_message(ctx, code, "kmpc: cannot disable core dumps of the key dealer: %s",
                         std::strerror(code));
  return code;
}

krb5_error_code DealerInit(krb5_context ctx, krb5_mpcdealer_moddata* data_out) {
  *data_out = nullptr;
  if (krb5_error_code code = NoCoreDumps(ctx); code != 0) return code;
  return Acquire(ctx);
}

void DealerFini(krb5_context ctx, krb5_mpcdealer_moddata) { Release(ctx); }

krb5_boolean DealerProtects(krb5_context ctx, krb5_mpcdealer_moddata,
                            krb5_const_principal princ) {
  std::string name = Unparse(ctx, princ);
  return !name.empty() && g_dealer != nullptr && g_dealer->Protects(name);
}

krb5_error_code DealKey(krb5_context ctx, krb5_const_principal princ, krb5_kvno kvno,
                        const krb5_keyblock* key, bool random,
                        krb5_keyblock* handle_out) {
  std::memset(handle_out, 0, sizeof(*handle_out));
  std::string name = Unparse(ctx, princ);
  if (name.empty() || g_dealer == nullptr) return ENOMEM;
  try {
    std::set<std::string> replaced;
    (void)Dealer::ReadHandles(ctx, name, &replaced);
    auto id = g_dealer->Deal(ctx, name, kvno, *key, random, std::move(replaced));
    if (!id.ok()) {
      krb5_error_code code = KADM5_MPC_DEAL_FAILED;
      krb5_set_error_message(
          ctx, code,
          "kmpc: the new key of %s could not be stored on the MPC servers, so "
          "nothing was changed (the old key stays valid): %s",
          name.c_str(), std::string(id.status().message()).c_str());
      return code;
    }
    auto* contents = static_cast<krb5_octet*>(std::malloc(KRB5_KDCMPC_HANDLE_LEN));
    if (contents == nullptr) return ENOMEM;
    std::memcpy(contents, KRB5_KDCMPC_HANDLE_MAGIC, KRB5_KDCMPC_HANDLE_MAGIC_LEN);
    std::memcpy(contents + KRB5_KDCMPC_HANDLE_MAGIC_LEN, id->data(),
                KRB5_KDCMPC_KEY_ID_LEN);
    handle_out->magic = KV5M_KEYBLOCK;
    handle_out->enctype = key->enctype;
    handle_out->length = KRB5_KDCMPC_HANDLE_LEN;
    handle_out->contents = contents;
    return 0;
  } catch (...) {
    krb5_set_error_message(ctx, ENOMEM, "kmpc: out of memory while dealing a key");
    return ENOMEM;
  }
}

// libkdb5 says whether key is random (mpcdealer minor version 2).
krb5_error_code DealerDealOrigin(krb5_context ctx, krb5_mpcdealer_moddata,
                                 krb5_const_principal princ, krb5_kvno kvno,
                                 const krb5_keyblock* key, krb5_flags flags,
                                 krb5_keyblock* handle_out) {
  return DealKey(ctx, princ, kvno, key, (flags & KRB5_MPCDEALER_RANDOM_KEY) != 0,
                 handle_out);
}

// A libkdb5 of minor version 1 does not say where key came from: it may be
// a password's, so it never gets a random key's powers.
krb5_error_code DealerDeal(krb5_context ctx, krb5_mpcdealer_moddata,
                           krb5_const_principal princ, krb5_kvno kvno,
                           const krb5_keyblock* key, krb5_keyblock* handle_out) {
  return DealKey(ctx, princ, kvno, key, /*random=*/false, handle_out);
}

// ---- tickets under handles (kadmind's own keys) -----------------------------

// The cluster kadmind runs ticket DECRYPTs on (ticket_decrypt.h): the KDC's
// ([kdcmpc] kmpc in kdc.conf: servers, certs = DIR or ca / cert / key, as
// kdc-plugin/src/options.h reads them), else kmpc-admin's (`config`).
// Read when kadm5 loads the hook: the krb5 contexts GSS-API makes to
// accept a ticket see krb5.conf only, not kdc.conf.
std::optional<client::ClusterConfig> g_ticket_cfg;
std::string g_realm;  // kadmind's realm (kadm5 makes it the default realm)
std::unique_ptr<TicketDecrypter> g_decrypter;  // made on first use, under g_mu

std::vector<std::string> KdcValues(krb5_context ctx, const char* name) {
  return ProfileValues(ctx, name, "kdcmpc");
}

std::optional<client::ClusterConfig> TicketClusterConfig(krb5_context ctx) {
  client::ClusterConfig cfg;
  std::vector<std::string> servers = KdcValues(ctx, "servers");
  if (servers.size() == 1) {
    std::vector<std::string> split;
    size_t at = 0;
    for (size_t comma; (comma = servers[0].find(',', at)) != std::string::npos;
         at = comma + 1)
      split.push_back(servers[0].substr(at, comma - at));
    split.push_back(servers[0].substr(at));
    servers = split;
  }
  if (servers.size() == client::kParties) {
    for (int i = 0; i < client::kParties; ++i) cfg.servers[i] = servers[i];
    std::vector<std::string> dir = KdcValues(ctx, "certs");
    if (!dir.empty()) {
      cfg.ca = dir.back() + "/ca.pem";
      cfg.cert = dir.back() + "/kdc.pem";
      cfg.key = dir.back() + "/kdc.key";
    }
    for (auto [name, field] : {std::pair{"ca", &cfg.ca}, std::pair{"cert", &cfg.cert},
                               std::pair{"key", &cfg.key}})
      if (std::vector<std::string> v = KdcValues(ctx, name); !v.empty()) *field = v.back();
    return cfg;
  }
  std::vector<std::string> config = ProfileValues(ctx, "config");
  if (config.empty()) return std::nullopt;
  auto settings = ReadConfigFile(config.back());
  Config admin;
  if (!settings.ok() || !ApplySettings(*settings, &admin).ok()) return std::nullopt;
  cfg.servers = admin.servers;
  cfg.ca = admin.ca;
  cfg.cert = admin.cert;
  cfg.key = admin.key;
  cfg.rpc_timeout = absl::Milliseconds(admin.timeout_ms);
  return cfg;
}

// Whether kadmind may have a ticket to `server` decrypted in the cluster:
// only a ticket to one of its own principals of its realm. The KDB: keytab
// kadmind reads hands it any principal's key, so without this an AP-REQ
// carrying a ticket to any service in the cluster (host/, HTTP/) would be
// decrypted through it.
bool KadmindMayDecrypt(krb5_const_principal server) {
  std::lock_guard<std::mutex> lock(g_mu);
  return server != nullptr && !g_realm.empty() && ComponentIs(server->realm, g_realm) &&
         KadmindService(server);
}

// The hook of krb5 patch 0026-Decrypt-tickets (krb5_mpc_set_ticket_decrypt):
// libkrb5 calls it for a ticket whose service key libk5crypto refused; it
// decrypts those to kadmind's own principals whose key is an aes*-cts
// handle in the cluster and refuses the rest as libk5crypto did.
krb5_error_code DecryptTicket(krb5_context ctx, void*, krb5_const_principal server,
                              const krb5_keyblock* key, const krb5_enc_data* enc,
                              krb5_data* output) {
  if (!KadmindMayDecrypt(server)) {
    krb5_set_error_message(ctx, KRB5KRB_AP_ERR_NOKEY,
                           "kmpc: kadmind decrypts tickets to its own principals "
                           "only, in the cluster");
    return KRB5KRB_AP_ERR_NOKEY;
  }
  if (key->length != KRB5_KDCMPC_HANDLE_LEN ||
      std::memcmp(key->contents, KRB5_KDCMPC_HANDLE_MAGIC,
                  KRB5_KDCMPC_HANDLE_MAGIC_LEN) != 0 ||
      (key->enctype != ENCTYPE_AES128_CTS_HMAC_SHA1_96 &&
       key->enctype != ENCTYPE_AES256_CTS_HMAC_SHA1_96))
    return KRB5_BAD_KEYSIZE;
  const std::string key_id(
      reinterpret_cast<const char*>(key->contents) + KRB5_KDCMPC_HANDLE_MAGIC_LEN,
      KRB5_KDCMPC_KEY_ID_LEN);
  absl::Status st;
  size_t len = 0;
  try {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_ticket_cfg) {
      st = absl::FailedPreconditionError(
          "no cluster configuration ([kdcmpc] kmpc or [mpcdealer] kmpc config)");
    } else if (!g_decrypter) {
      auto d = TicketDecrypter::Open(*g_ticket_cfg);
      if (d.ok()) g_decrypter = std::move(*d);
      else st = d.status();
    }
    if (st.ok())
      st = g_decrypter->Decrypt(
          static_cast<kmpc::v1::Cipher>(key->enctype), key_id,
          absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(enc->ciphertext.data),
                              enc->ciphertext.length),
          absl::MakeSpan(reinterpret_cast<uint8_t*>(output->data), output->length),
          &len);
  } catch (...) {
    st = absl::ResourceExhaustedError("out of memory");
  }
  if (st.ok()) {
    output->length = len;
    return 0;
  }
  const krb5_error_code code = st.code() == absl::StatusCode::kUnauthenticated
                                   ? KRB5KRB_AP_ERR_BAD_INTEGRITY
                                   : KRB5KRB_AP_ERR_NOKEY;
  krb5_set_error_message(ctx, code, "kmpc: a ticket under an MPC-held key: %s",
                         std::string(st.message()).c_str());
  return code;
}

// ---- kadm5_hook vtable: commits ---------------------------------------------

// kadmind (and kadmin.local) load the kadm5_hook interface when kadm5
// starts: the ticket decrypter is registered then, process-wide, for the
// AP-REQs kadmind accepts under its own keys.
kadm5_ret_t HookInit(krb5_context ctx, kadm5_hook_modinfo** modinfo) {
  *modinfo = nullptr;
  if (kadm5_ret_t ret = Acquire(ctx); ret != 0) return ret;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    try {
      g_ticket_cfg = TicketClusterConfig(ctx);
      char* realm = nullptr;
      g_realm.clear();
      if (krb5_get_default_realm(ctx, &realm) == 0) {
        g_realm = realm;
        krb5_free_default_realm(ctx, realm);
      }
    } catch (...) {
      g_ticket_cfg.reset();
    }
  }
  krb5_mpc_set_ticket_decrypt(DecryptTicket, nullptr);
  return 0;
}

void HookFini(krb5_context ctx, kadm5_hook_modinfo*) {
  krb5_mpc_set_ticket_decrypt(nullptr, nullptr);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_decrypter.reset();
  }
  Release(ctx);
}

// Sets +requires_preauth (KRB5_KDB_REQUIRES_PRE_AUTH) on princ's entry, in
// a write of its own after kadm5's (a kadm5_hook cannot change the entry
// kadm5 commits). An AS reply under a user's key is an offline verifier of
// its password: MIT gives one to anyone who asks unless the principal
// requires pre-authentication, and addprinc's default flags do not. The
// patched KDC demands it of every client holding a handle that is not a
// service (krb5 patch 0024-KDC-demand-pre-authentication) from the commit
// on; the flag says so to every KDC and tool reading the entry. A failure
// leaves the entry as kadm5 wrote it: kmpc-admin status --kdb names it.
void RequirePreauth(krb5_context ctx, krb5_const_principal princ) {
  krb5_db_entry* ent = nullptr;
  if (krb5_db_get_principal(ctx, princ, 0, &ent) != 0) return;
  if (!(ent->attributes & KRB5_KDB_REQUIRES_PRE_AUTH)) {
    ent->attributes |= KRB5_KDB_REQUIRES_PRE_AUTH;
    ent->mask = KADM5_ATTRIBUTES;  // what an LDAP KDB writes
    (void)krb5_db_put_principal(ctx, ent);
  }
  krb5_db_free_principal(ctx, ent);
}

void Committed(krb5_context ctx, krb5_const_principal princ) {
  if (g_dealer == nullptr || princ == nullptr) return;
  try {
    if (g_dealer->Settle(ctx, Unparse(ctx, princ))) RequirePreauth(ctx, princ);
  } catch (...) {
  }
}

kadm5_ret_t HookChpass(krb5_context ctx, kadm5_hook_modinfo*, int stage,
                       krb5_principal princ, krb5_boolean, int,
                       krb5_key_salt_tuple*, const char*) {
  if (stage == KADM5_HOOK_STAGE_POSTCOMMIT) Committed(ctx, princ);
  return 0;
}

kadm5_ret_t HookCreate(krb5_context ctx, kadm5_hook_modinfo*, int stage,
                       kadm5_principal_ent_t ent, long, int,
                       krb5_key_salt_tuple*, const char*) {
  if (stage == KADM5_HOOK_STAGE_POSTCOMMIT && ent != nullptr)
    Committed(ctx, ent->principal);
  return 0;
}

kadm5_ret_t HookRemove(krb5_context ctx, kadm5_hook_modinfo*, int stage,
                       krb5_principal princ) {
  if (g_dealer == nullptr || princ == nullptr) return 0;
  try {
    std::string name = Unparse(ctx, princ);
    if (stage == KADM5_HOOK_STAGE_PRECOMMIT) {
      std::set<std::string> handles;
      if (Dealer::ReadHandles(ctx, name, &handles) && !handles.empty())
        g_dealer->WillRemove(name, std::move(handles));
    } else {
      g_dealer->Settle(ctx, name);
    }
  } catch (...) {
  }
  return 0;
}

}  // namespace
}  // namespace kmpc::admin

extern "C" {

__attribute__((visibility("default"))) krb5_error_code
mpcdealer_kmpc_initvt(krb5_context, int maj_ver, int min_ver, krb5_plugin_vtable vtable) {
  if (maj_ver != 1) return KRB5_PLUGIN_VER_NOTSUPP;
  auto* vt = reinterpret_cast<krb5_mpcdealer_vtable>(vtable);
  vt->name = kmpc::admin::kModuleName;
  vt->init = kmpc::admin::DealerInit;
  vt->fini = kmpc::admin::DealerFini;
  vt->protects = kmpc::admin::DealerProtects;
  vt->deal = kmpc::admin::DealerDeal;
  // deal_origin is beyond a minor-1 caller's vtable.
  if (min_ver >= 2) vt->deal_origin = kmpc::admin::DealerDealOrigin;
  return 0;
}

__attribute__((visibility("default"))) krb5_error_code
kadm5_hook_kmpc_initvt(krb5_context, int maj_ver, int, krb5_plugin_vtable vtable) {
  if (maj_ver != 1) return KRB5_PLUGIN_VER_NOTSUPP;
  auto* vt = reinterpret_cast<kadm5_hook_vftable_1*>(vtable);
  vt->name = kmpc::admin::kModuleName;
  vt->init = kmpc::admin::HookInit;
  vt->fini = kmpc::admin::HookFini;
  vt->chpass = kmpc::admin::HookChpass;
  vt->create = kmpc::admin::HookCreate;
  vt->remove = kmpc::admin::HookRemove;
  return 0;
}

}  // extern "C"
