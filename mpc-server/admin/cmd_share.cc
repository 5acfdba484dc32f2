// kmpc-admin share (--password-stdin | --from-existing | --randkey)
//   [--enctype=aes256-ctr-mpc|aes128-ctr-mpc|aes256-cts-hmac-sha1-96|
//              aes128-cts-hmac-sha1-96] [--keepold] [--force]
//   [--service | --also-service] PRINC...
//
// share: for each principal, get its key (derived from a password read from
//   stdin, one line per principal, with the principal's normal salt as
//   kadmin does; or, with --from-existing, its current AES key read from the
//   KDB, so nobody has to change a password), deal it into replicated
//   2-of-3 XOR shares (core dealer: round keys expanded, H and its powers),
//   store party i's view on server i (all-or-nothing), then replace all of
//   the principal's key data in the KDB with one key handle of the MPC
//   enctype ("kmpc-key" || key id). The key is wiped after use; nothing
//   secret is printed. --randkey: a fresh random key (kadmin's randkey; the
//   krbtgt's key rotation). --keepold (with --password-stdin / --randkey,
//   when every existing key is already a handle): keep the old handles and
//   their shares, as kadmin's -keepold, so tickets under the old kvno stay
//   valid; the next share without --keepold removes them. A new key for a
//   krbtgt/* principal without --keepold makes every TGT issued under the
//   current key unusable at once (every user must log in again): it is
//   refused unless --force is given (kadmin's delprinc -force), and nothing
//   is changed for that principal. --from-existing for a krbtgt/* principal
//   is refused without --force too: the key was in the KDB, so every older
//   dump, backup, iprop log and replica holds it (make a new one in the
//   cluster with --randkey --keepold, or kadmin cpw -randkey -keepold with
//   kmpc's key dealer). Migrated keys are labelled as such on the servers;
//   status reports them until the next password change.
//
//   The key's kind, dealt with it (kmpc.proto KeyKind) and checked by the
//   servers: a user's password-derived key by default (--password-stdin,
//   --from-existing), a service's random key with --randkey. --service: a
//   random key (the admin vouches for it with --from-existing; refused
//   with --password-stdin). A user
//   key's aes*-cts AS reply is computed only when gated on its timestamp
//   or FAST challenge in the same Run, and it gets no ticket (usage 2) or
//   PAC signature (usage 17) material, unless --also-service: a user who
//   is also the server of tickets (kvno user), each of which is an offline
//   password verifier for whoever asks (docs/security-model.md).
//
//   --enctype=aes256-cts-hmac-sha1-96 / aes128-cts-hmac-sha1-96: the handle
//   keeps MIT's standard enctype, which unmodified clients negotiate (the
//   servers deal the key's per-usage material with it, engine::DealKey; the
//   KDC does not compute with such keys yet: docs/limitations.md). With
//   --from-existing every aes*-cts key of the current kvno moves as it is
//   (enctype, kvno and salt kept: the password keeps working and no client
//   changes). Never for krbtgt/* (tickets are encrypted under aes*-ctr-mpc
//   keys only). --from-existing refuses a principal that holds RC4 or DES
//   keys (an RC4 key is the NT hash, a password equivalent), naming them and
//   how to remove them; the other ways replace every old key.
//
//   kvno: a new key (password) takes the next kvno. A migrated key keeps its
//   kvno when it already was of the MPC enctype (same bytes, same enctype:
//   tickets issued under it, e.g. TGTs under the krbtgt key, stay valid and
//   are now decrypted by the cluster); a migrated aes*-cts key takes the
//   next kvno, because tickets issued under it are aes-cts tickets that
//   nothing can decrypt any more (clean "wrong kvno" errors, and the
//   clients get new tickets).
//
//   A share that replaced real keys in the KDB (--from-existing, or any
//   mode for a principal that held real keys) ends by rewriting the KDB
//   into fresh files (admin/kdb_rewrite.h: kdb5_util dump and load, the
//   iprop update log's old entries zeroed), since the db2 module leaves
//   old records in the file's free space; with an LDAP KDB it says what
//   the admin must do instead (docs/admin-guide.md, "Old keys after a
//   move").
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "admin/cluster.h"
#include "admin/command.h"
#include "admin/config.h"
#include "admin/kdb.h"
#include "admin/kdb_rewrite.h"
#include "client/admin_client.h"
#include "contract.h"

namespace kmpc::admin {
namespace {

// share's options and arguments.
struct ShareOptions {
  bool password_stdin = false;
  bool from_existing = false;
  bool randkey = false;
  bool keepold = false;
  bool force = false;
  bool service = false, also_service = false;  // the key's kind
  std::string enctype;  // empty: aes256-ctr-mpc
  std::vector<std::string> principals;
};

struct ShareOutcome {
  enum { kShared, kSkipped } what = kShared;
  std::string detail;
  bool replaced_real = false;  // real keys in the KDB replaced by handles
};

KeyKind ShareKind(const ShareOptions& a);

// The refusals of share for canon before anything changes.
absl::Status CheckShareAllowed(const ShareOptions& a, const std::string& canon,
                               const KdbKeyFacts& f) {
  if (Unshareable(canon))
    return absl::FailedPreconditionError(absl::StrCat(
        canon, ": the K/M and kadmin/history keys are used by the KDC's own "
               "daemons and cannot be shared"));
  if (KadmindService(canon) && ShareKind(a) != KeyKind::kService)
    return absl::FailedPreconditionError(absl::StrCat(
        canon, ": kadmind decrypts tickets to it in the cluster, which the "
               "servers do under a service's key only: give --service (with "
               "--from-existing) or --randkey. Nothing was changed"));
  if (a.password_stdin && LocalTicketGranting(canon))
    return absl::FailedPreconditionError(absl::StrCat(
        canon, ": a ticket-granting key is a random key (--randkey), never a "
               "password: its AS reply is not gated. Nothing was changed"));
  // A new krbtgt key without the old one: every outstanding TGT (and
  // cross-realm ticket) stops working at once. Only on request.
  if (!a.from_existing && !a.keepold && !a.force &&
      absl::StartsWith(canon, "krbtgt/"))
    return absl::FailedPreconditionError(absl::StrCat(
        canon, ": a new key without --keepold makes every ticket issued under "
               "the current key unusable at once (every user must log in again); ",
        f.all_handles ? "use --keepold to keep the old key until the next rotation"
        : f.current_is_mpc_key
            ? "use --from-existing to move the current key into the cluster "
              "without invalidating tickets"
            : "moving the current key with --from-existing invalidates them too "
              "(an aes-cts key takes the next kvno): plan it as a rotation",
        ", or --force to replace it anyway. Nothing was changed"));
  // A krbtgt key that the KDB held is in every older dump, backup, iprop
  // log and replica of it: whoever has one can mint TGTs under the shared
  // key forever. Make the krbtgt's key in the cluster instead (--randkey, or
  // kadmin cpw -randkey with the dealer), unless asked for explicitly.
  if (a.from_existing && !a.force && absl::StartsWith(canon, "krbtgt/") &&
      !f.current_is_handle)
    return absl::FailedPreconditionError(absl::StrCat(
        canon, ": its current key was in the KDB, so every older dump, backup, "
               "iprop log and replica of the KDB holds it; shared from there it "
               "would still let their holders mint tickets. Make a new key in the "
               "cluster instead (share --randkey --keepold, or kadmin cpw -randkey "
               "-keepold with kmpc's key dealer), or give --force to move this one "
               "anyway. Nothing was changed"));
  if (a.keepold && !f.all_handles)
    return absl::FailedPreconditionError(absl::StrCat(
        canon, ": --keepold would keep keys that are not MPC key handles in the "
               "KDB; share the principal once without --keepold first"));
  return absl::OkStatus();
}

// --enctype's enctype: aes256-ctr-mpc when not given.
int32_t ShareEnctype(const ShareOptions& a) {
  return a.enctype.empty() ? kEnctypeAes256Mpc : EnctypeOfName(a.enctype);
}

// The refusals that depend on the enctypes: a krbtgt key encrypts tickets,
// which the KDC does only under aes*-ctr-mpc keys; RC4 and DES keys (an RC4
// key is the NT hash, a password equivalent) never stay beside a shared key.
// A user's key (ShareKind: not a service's random key) is shared under
// aes*-cts only unless the config file says user_ctr_mpc = true: an
// aes*-ctr-mpc copy of a password-derived key is a second door to the
// password whose timestamp and reply reach every server whole
// (docs/security-model.md); the dealer refuses it likewise.
absl::Status CheckKeysAllowed(const ShareOptions& a, const PrincipalInfo& info, bool user_ctr_mpc) {
  const bool tgs = TicketGranting(info.name);
  if (IsCtsEnctype(ShareEnctype(a)) && tgs)
    return absl::FailedPreconditionError(absl::StrCat(
        info.name, ": a ticket-granting key is shared as aes256-ctr-mpc or "
                   "aes128-ctr-mpc only (the KDC encrypts tickets under those). "
                   "Nothing was changed"));
  if (!tgs && !user_ctr_mpc && ShareKind(a) != KeyKind::kService &&
      !IsCtsEnctype(ShareEnctype(a)))
    return absl::FailedPreconditionError(absl::StrCat(
        info.name, ": a user's key is shared under aes256/aes128-cts-hmac-sha1-96 "
                   "only (--enctype=aes256-cts-hmac-sha1-96; with --from-existing its "
                   "aes*-cts keys keep their enctype), or as a service's random key "
                   "(--randkey, --service). An aes*-ctr-mpc copy of a password is a "
                   "second door to it (user_ctr_mpc in the config file allows one). "
                   "Nothing was changed"));
  if (!a.from_existing) return absl::OkStatus();  // every old key is replaced
  std::vector<std::string> weak;
  for (const KeyEntry& e : info.keys)
    if (!e.is_handle && IsWeakEnctype(e.enctype))
      weak.push_back(absl::StrCat(EnctypeName(e.enctype), " (enctype ", e.enctype,
                                  ") kvno ", e.kvno));
  if (weak.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      info.name, " holds ", absl::StrJoin(weak, ", "),
      ": an RC4 key is the NT hash of the password (a password equivalent) and DES "
      "keys are weak, so they cannot stay in the KDB of an MPC-protected principal "
      "and the cluster does not hold them. Remove them first, e.g. give it a new "
      "password with AES keys only (kadmin: cpw -e "
      "aes256-cts-hmac-sha1-96:normal,aes128-cts-hmac-sha1-96:normal ", info.name,
      "), or share it with --password-stdin. Nothing was changed"));
}

// The key share puts into the cluster, and where it came from.
struct KeyToShare {
  SecretBytes key;
  int32_t enctype = 0;
  uint32_t kvno = 0;
  int16_t salt_type = 0;  // KRB5_KDB_SALTTYPE_NORMAL
  std::string salt;
  std::string source;
  std::string key_id;  // once put into the cluster
};

// --from-existing: the KDB's own key(s). With --enctype=aes*-cts every
// aes*-cts key of the current kvno keeps its enctype, kvno and salt (same
// bytes, same enctype: the password, the clients and outstanding tickets
// are untouched); otherwise the best AES key becomes its aes*-ctr-mpc
// counterpart.
absl::StatusOr<std::vector<KeyToShare>> ExistingKeysToShare(Kdb& kdb, const ShareOptions& a,
                                                            const PrincipalInfo& info) {
  std::vector<ExistingKey> ex;
  if (IsCtsEnctype(ShareEnctype(a))) {
    auto keys = kdb.ExportCtsKeys(info.name);
    if (!keys.ok()) return keys.status();
    ex = std::move(*keys);
  } else {
    auto key = kdb.ExportAesKey(info.name);
    if (!key.ok()) return key.status();
    ex.push_back(std::move(*key));
  }
  std::vector<KeyToShare> out;
  for (ExistingKey& e : ex) {
    KeyToShare k;
    k.enctype = IsCtsEnctype(ShareEnctype(a)) ? e.entry.enctype
                                              : MpcEnctypeFor(e.entry.enctype);
    // Same bytes and enctype: keep the kvno (outstanding tickets stay
    // valid). From aes-cts to ctr-mpc: the next kvno (see the file comment).
    k.kvno = e.entry.enctype == k.enctype ? e.entry.kvno : info.kvno + 1;
    k.salt_type = e.entry.salt_type;
    k.salt = e.entry.salt;
    k.source = absl::StrCat("from its ", EnctypeName(e.entry.enctype), " key kvno ",
                            e.entry.kvno);
    k.key = std::move(e.key);
    out.push_back(std::move(k));
  }
  return out;
}

// The key(s) of --from-existing (the KDB's own), --randkey or a password
// (wiped here once used).
absl::StatusOr<std::vector<KeyToShare>> MakeKeysToShare(Kdb& kdb, const ShareOptions& a,
                                                        const PrincipalInfo& info,
                                                        std::string* password) {
  if (a.from_existing) return ExistingKeysToShare(kdb, a, info);
  KeyToShare k;
  k.enctype = ShareEnctype(a);
  k.kvno = info.kvno + 1;
  absl::StatusOr<SecretBytes> key;
  if (a.randkey) {
    key = kdb.RandomKey(k.enctype);
    k.source = "from a random key";
  } else {
    key = kdb.StringToKey(info.name, k.enctype, *password);
    OPENSSL_cleanse(password->data(), password->size());
    k.source = "from a password";
  }
  if (!key.ok()) return key.status();
  k.key = std::move(*key);
  std::vector<KeyToShare> out;
  out.push_back(std::move(k));
  return out;
}

// Deletes the key ids of `keys` that were put; a note for a message.
std::string Unput(Clusters& cluster, const std::vector<KeyToShare>& keys) {
  std::string failed;
  for (const KeyToShare& k : keys) {
    if (k.key_id.empty()) continue;
    absl::Status undo = cluster.DeleteKey(k.key_id);
    if (!undo.ok())
      absl::StrAppend(&failed, failed.empty() ? "" : "; ", "removing key id ",
                      Hex(k.key_id), " failed: ", undo.message());
  }
  return failed.empty() ? "the shares were removed again" : failed;
}

// The kind of the keys share deals (the file comment).
KeyKind ShareKind(const ShareOptions& a) {
  if (a.also_service) return KeyKind::kUserService;
  if (a.service || a.randkey) return KeyKind::kService;
  return KeyKind::kUser;
}

// The kind of the keys share deals for `canon`: a ticket-granting key is
// random and decrypts tickets, a service's.
KeyKind ShareKindOf(const ShareOptions& a, const std::string& canon) {
  return TicketGranting(canon) ? KeyKind::kService : ShareKind(a);
}

// Puts one key under a fresh key id (k.key_id) and wipes it; `origin`:
// the deal its per-key bounds count under (client::KeyMeta::origin).
absl::Status PutOne(Clusters& cluster, const ShareOptions& a, const std::string& canon,
                    KeyToShare& k, const std::optional<std::array<uint8_t, 16>>& origin) {
  std::string key_id(contract::kKeyIdSize, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key_id.data()),
                 contract::kKeyIdSize) != 1) {
    k.key.Wipe();
    return absl::InternalError("no randomness for the key id");
  }
  const std::optional<engine::Cipher> cipher = CipherOfEnctype(k.enctype);
  if (!cipher) {
    k.key.Wipe();
    return absl::InternalError("the key to share is not of an enctype the cluster holds");
  }
  // The label says where the key came from: status reports migrated keys
  // (older copies of the KDB hold them) until the next password change.
  std::string label = a.from_existing ? absl::StrCat(canon, kMigratedSuffix) : canon;
  client::KeyMeta meta{key_id, k.kvno, label};
  meta.kind = ShareKindOf(a, canon);
  meta.origin = origin;
  absl::Status st = cluster.PutKey(*cipher, absl::MakeConstSpan(k.key.data(), k.key.size()),
                                   meta);
  k.key.Wipe();
  if (st.ok()) k.key_id = key_id;
  return st;
}

// Shares every key under a fresh key id, then points the KDB at them in
// one write; on any failure the shares already stored are removed again.
absl::Status PutAndSetHandles(Kdb& kdb, Clusters& cluster, const ShareOptions& a,
                              const std::string& canon, std::vector<KeyToShare>& keys) {
  // A user's keys of one password (aes256 and aes128 of --from-existing)
  // are one door: the servers count their gate's failures together.
  std::optional<std::array<uint8_t, 16>> origin;
  if (keys.size() > 1 && ShareKindOf(a, canon) != KeyKind::kService) {
    origin.emplace();
    if (RAND_bytes(origin->data(), static_cast<int>(origin->size())) != 1) {
      for (KeyToShare& k : keys) k.key.Wipe();
      return absl::InternalError("no randomness for the keys' deal id");
    }
  }
  for (KeyToShare& k : keys) {
    absl::Status st = PutOne(cluster, a, canon, k, origin);
    if (!st.ok()) {
      for (KeyToShare& rest : keys) rest.key.Wipe();
      const std::string undo = Unput(cluster, keys);
      return absl::Status(st.code(), absl::StrCat(canon, ": not shared, the KDB is "
                                                  "unchanged: ", st.message(), "; ", undo));
    }
  }
  absl::Status st;
  if (keys.size() == 1) {
    const KeyToShare& k = keys[0];
    st = kdb.SetHandle(canon, k.enctype, k.key_id, k.kvno, k.salt_type, k.salt, a.keepold);
  } else {
    std::vector<Kdb::Handle> handles;
    for (const KeyToShare& k : keys)
      handles.push_back({k.enctype, k.key_id, k.kvno, k.salt_type, k.salt});
    st = kdb.SetHandles(canon, handles);
  }
  if (!st.ok())
    return absl::Status(
        st.code(), absl::StrCat(canon, ": the KDB refused the key handle, the KDB is "
                                "unchanged (", st.message(), "); ", Unput(cluster, keys)));
  return absl::OkStatus();
}

// After a new handle: the old handles' shares go unless --keepold kept
// them; the note for share's output line.
std::string DropOldShares(Clusters& cluster, const ShareOptions& a,
                          const std::vector<std::string>& old_ids) {
  if (a.keepold) return absl::StrCat("; ", old_ids.size(), " old key handle(s) kept");
  std::string note;
  for (const std::string& old : old_ids) {
    // The previous handle's shares: nothing refers to them any more.
    absl::Status d = cluster.DeleteKey(old);
    if (!d.ok())
      absl::StrAppend(&note, "; warning: the old key id ", Hex(old),
                      " could not be removed: ", d.message());
  }
  return note;
}

absl::StatusOr<ShareOutcome> ShareOne(Kdb& kdb, Clusters& cluster,
                                      const ShareOptions& a, const std::string& name,
                                      std::string* password, bool user_ctr_mpc) {
  auto info = kdb.Lookup(name);
  if (!info.ok()) return info.status();
  const KdbKeyFacts facts = FactsOf(*info);
  if (absl::Status st = CheckShareAllowed(a, info->name, facts); !st.ok()) return st;
  if (absl::Status st = CheckKeysAllowed(a, *info, user_ctr_mpc); !st.ok()) return st;
  if (a.from_existing && facts.current_is_handle)
    return ShareOutcome{ShareOutcome::kSkipped, "already shared"};
  auto keys = MakeKeysToShare(kdb, a, *info, password);
  if (!keys.ok()) return keys.status();
  // A user kind's entry gets +requires_preauth before its handles, as the
  // dealer's (kdc-plugin/dealer/kadm5_hook_vtable.cc, RequirePreauth).
  if (ShareKindOf(a, info->name) != KeyKind::kService)
    if (absl::Status st = kdb.RequirePreauth(info->name); !st.ok()) return st;
  if (absl::Status st = PutAndSetHandles(kdb, cluster, a, info->name, *keys); !st.ok())
    return st;
  const std::string note = DropOldShares(cluster, a, facts.old_ids);
  std::string detail = "shared";
  for (size_t i = 0; i < keys->size(); ++i) {
    const KeyToShare& k = (*keys)[i];
    absl::StrAppend(&detail, i ? "; " : " ", k.source, " as ", EnctypeName(k.enctype),
                    " kvno ", k.kvno, ", key id ", Hex(k.key_id));
  }
  return ShareOutcome{ShareOutcome::kShared, detail + note, !facts.all_handles};
}

// share's usage errors, found before anything is read or changed; "" when
// the options go together.
std::string ShareUsageError(const ShareOptions& a) {
  if (a.password_stdin + a.from_existing + a.randkey != 1)
    return "share needs exactly one of --password-stdin, --from-existing and --randkey";
  if (a.service && a.also_service) return "share takes --service or --also-service, not both";
  // A password-derived key dealt as a service's would have its tickets
  // decrypted by the servers (DECRYPT under usage 2) and its AS reply
  // computed ungated: offline verifiers of the password for whoever runs
  // the KDC. A user who is also a service is --also-service (gated).
  if (a.password_stdin && a.service)
    return "--service is for a random key (--randkey, or --from-existing of a "
           "service's random key): a key from a password is a user's; give "
           "--also-service for a user who is also the server of tickets";
  if (a.keepold && a.from_existing)
    return "--keepold applies to --password-stdin and --randkey (a migrated key "
           "replaces the key it was)";
  if (!a.enctype.empty() && EnctypeOfName(a.enctype) == 0)
    return "--enctype must be aes256-ctr-mpc, aes128-ctr-mpc, aes256-cts-hmac-sha1-96 "
           "or aes128-cts-hmac-sha1-96";
  if (a.from_existing && !a.enctype.empty() && !IsCtsEnctype(EnctypeOfName(a.enctype)))
    return "--from-existing takes no aes*-ctr-mpc --enctype (a migrated key keeps its "
           "size); --enctype=aes256-cts-hmac-sha1-96 moves the aes*-cts keys as they are";
  if (a.principals.empty()) return "share needs at least one principal";
  return "";
}

int Share(const ShareOptions& a, const Context& ctx) {
  const Config& cfg = ctx.cfg;
  if (const std::string bad = ShareUsageError(a); !bad.empty()) return Usage(bad);
  auto cluster = Clusters::Connect(cfg);
  if (!cluster.ok()) return Fail(cluster.status());
  auto kdb = Kdb::Open(cfg.realm);
  if (!kdb.ok()) return Fail(kdb.status());
  // Fail fast, before any principal, when a server is down, refuses us or
  // is not the party its position says (always: there is no way around it).
  if (absl::Status st = (*cluster)->CheckReachable(); !st.ok())
    return Fail(absl::Status(st.code(), absl::StrCat(st.message(),
                                                     "; nothing was shared")));
  const size_t n = a.principals.size();
  size_t shared = 0, skipped = 0, failed = 0, replaced = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = a.principals[i];
    std::string password;
    // Room for any sane password up front: growing the string would leave
    // unwiped copies in freed memory.
    password.reserve(4096);
    if (a.password_stdin) {
      if (!std::getline(std::cin, password)) {
        std::fprintf(stderr, "kmpc-admin: %s: no password on stdin (one line per principal)\n",
                     name.c_str());
        ++failed;
        break;
      }
      if (!password.empty() && password.back() == '\r') password.pop_back();
      if (password.empty()) {
        std::fprintf(stderr, "kmpc-admin: %s: empty password\n", name.c_str());
        ++failed;
        continue;
      }
    }
    auto r = ShareOne(**kdb, **cluster, a, name, &password, cfg.user_ctr_mpc);
    OPENSSL_cleanse(password.data(), password.size());
    if (!r.ok()) {
      ++failed;
      std::fprintf(stderr, "kmpc-admin: [%zu/%zu] %s\n", i + 1, n,
                   std::string(r.status().message()).c_str());
      if (IsClusterError(r.status())) {
        std::fprintf(stderr, "kmpc-admin: stopping: %zu shared, %zu not attempted\n",
                     shared, n - i - 1);
        return RewriteAfterShare(std::move(*kdb), replaced, 1);
      }
      continue;
    }
    if (r->what == ShareOutcome::kSkipped) ++skipped;
    else ++shared;
    replaced += r->replaced_real;
    if (!ctx.quiet || n == 1)
      std::printf("[%zu/%zu] %s: %s\n", i + 1, n, name.c_str(), r->detail.c_str());
    std::fflush(stdout);
  }
  if (n > 1 || failed > 0 || skipped > 0)
    std::printf("kmpc-admin: %zu shared, %zu already shared, %zu failed\n", shared,
                skipped, failed);
  return RewriteAfterShare(std::move(*kdb), replaced, failed == 0 ? 0 : 1);
}

class ShareCommand : public Command {
 public:
  void Register(CLI::App& app) override {
    app.add_flag("--password-stdin", o_.password_stdin);
    app.add_flag("--from-existing", o_.from_existing);
    app.add_flag("--randkey", o_.randkey);
    app.add_flag("--keepold", o_.keepold);
    app.add_flag("--force", o_.force);
    app.add_flag("--service", o_.service);
    app.add_flag("--also-service", o_.also_service);
    app.add_option("--enctype", o_.enctype);
    app.add_option("PRINC", o_.principals);
  }
  int Run(const Context& ctx) override { return Share(o_, ctx); }

 private:
  ShareOptions o_;
};

std::unique_ptr<Command> MakeShare() { return std::make_unique<ShareCommand>(); }

}  // namespace

const CommandSpec kShareCommand = {
    "share",
    "share (--password-stdin | --from-existing | --randkey)\n"
    "                  [--enctype=aes256-ctr-mpc|aes128-ctr-mpc|\n"
    "                             aes256-cts-hmac-sha1-96|aes128-cts-hmac-sha1-96]\n"
    "                  [--keepold] [--force] [--service | --also-service]\n"
    "                  PRINC...\n",
    MakeShare};

}  // namespace kmpc::admin
