// The key dealer's state in kadmind, kadmin.local and kdb5_util: which
// principals it protects (kdc.conf's patterns), the kind of each new key,
// the deal of a key into every configured cluster (admin/cluster.h), and
// the shares this process dealt or retired until their change is settled.
// A settled change leaves on the servers exactly what the principal's KDB
// entry references: what it dealt or replaced and the entry no longer
// holds is deleted (dealer_module.cc's header says when changes settle).
// The KDB is read, never written, here. No key, share or password is
// logged or put in a message.
#ifndef KMPC_DEALER_DEALER_H_
#define KMPC_DEALER_DEALER_H_

#include <array>
#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "admin/cluster.h"

extern "C" {
#include <krb5/krb5.h>
}

namespace kmpc::admin::dealer {

// The principal string attribute (kadmin setstr) naming the kind of the
// keys dealt for it: "service" (a random key), "user+service" (a
// password-derived key also used as a service) or "user"; none: the
// dealer's patterns decide.
inline constexpr char kKindAttribute[] = "kmpc_key_kind";
// A dealt key that no entry references this long after it was dealt belongs
// to a change that failed (kadm5 changes take milliseconds).
inline constexpr time_t kAbandonedAfterS = 120;

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

// The dealer's patterns (kdc.conf [mpcdealer] kmpc, dealer_module.cc).
struct Patterns {
  std::vector<std::string> protect;
  std::vector<std::string> service;
  std::vector<std::string> user_service;
};

// Whether one of `patterns` matches `name` (unparsed, with realm); a
// pattern without a realm matches the name without its realm.
bool Matches(const std::vector<std::string>& patterns, const std::string& name);

bool ComponentIs(const krb5_data& d, std::string_view s);

// kadmind's and kpropd's own service principals, whose tickets kadmind
// decrypts in the cluster: kadmin/admin, kadmin/changepw, the host-based
// kadmin/<fqdn>, and kiprop/<fqdn>; not kadmin/history, whose key
// encrypts kadm5's password history and is never dealt.
bool KadmindService(krb5_const_principal p);
bool KadmindService(krb5_context ctx, const std::string& name);

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
                                   bool random, std::set<std::string> replaced);

  // A key that may come from a password (KindOf: a user kind, not marked
  // random) is dealt only under aes128/aes256-cts-hmac-sha1-96, whose login
  // the servers compute on shares of the timestamp and reply and gate
  // (docs/security-model.md, "The servers enforce the gate"). An
  // aes*-ctr-mpc copy of the same password (the same RFC 3962 string-to-key
  // bytes) would be a second door: its timestamp and reply reach every
  // server whole. Only `user_ctr_mpc = true` in kmpc-admin's config file
  // (config.h: a fleet of patched clients, the tests) deals one.
  absl::Status OneDoorPerPassword(engine::Cipher cipher, KeyKind kind, bool random) const;

  // A principal is about to be deleted: its handles go once it is gone.
  void WillRemove(const std::string& name, std::set<std::string> handles);

  // A change of `name` was committed (or, at close, every change is over).
  // True when the entry now holds a key this process dealt as a user kind
  // (KEY_KIND_USER or KEY_KIND_USER_SERVICE: a password-derived key, or a
  // random one that no pattern or attribute names a service's).
  bool Settle(krb5_context ctx, const std::string& name);
  void SettleAll(krb5_context ctx);

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
                                 bool random) const;

  // The kind kKindAttribute names on `name`'s KDB entry; nullopt if the
  // entry or the attribute is absent or names no kind.
  static std::optional<KeyKind> AttributeKind(krb5_context ctx, const std::string& name);

  // The key ids of the handles `name`'s KDB entry holds, and in *real
  // (if given) whether it holds a key that is no handle (of any enctype);
  // false if it could not be read (an absent principal holds none: true).
  static bool ReadHandles(krb5_context ctx, const std::string& name,
                          std::set<std::string>* out, bool* real = nullptr);

 private:
  absl::Status ConnectLocked();
  void SettleAbandoned(krb5_context ctx);

  // Deletes from the servers what `p` dealt or replaced and the entry does
  // not reference now. If the entry cannot be read for another reason than
  // its absence, nothing is deleted (kmpc-admin status reports leftovers).
  // True when the entry references a key `p` dealt as a user kind.
  bool SettleOne(krb5_context ctx, const Pending& p);

  // A committed change replaced `name`'s real keys by handles: the KDB's
  // db2 file keeps the old record until `kmpc-admin rewrite-kdb`, which
  // this dealer cannot run (a dump and load loses a change kadmind makes
  // meanwhile): it is noted for kmpc-admin status --kdb
  // (admin/rewrite_due.h). Best effort: a failure leaves no note.
  static void NoteReplacedRealKeys(krb5_context ctx, const std::string& name);

  // The db2 database file of `realm`'s KDB as libkdb5's db2 module names it
  // ([dbmodules] MODULE database_name, MODULE being the realm's
  // database_module or the realm; else the realm's database_name; else
  // "principal" beside KRB5_KDC_PROFILE, where MIT's defaults put both);
  // empty for another module (LDAP keeps its own storage) or none found.
  static std::string DbName(krb5_context ctx, const std::string& realm);

  const std::string config_path_;
  const Patterns patterns_;
  std::mutex mu_;
  std::unique_ptr<Clusters> cluster_;  // every configured cluster
  bool user_ctr_mpc_ = false;          // config.h user_ctr_mpc
  std::map<std::string, Pending> pending_;
};

}  // namespace kmpc::admin::dealer

#endif  // KMPC_DEALER_DEALER_H_
