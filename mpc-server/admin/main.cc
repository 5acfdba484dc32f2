// kmpc-admin: moves principals' long-term keys into the MPC cluster.
//
//   kmpc-admin [OPTIONS] share (--password-stdin | --from-existing | --randkey)
//              [--enctype=aes256-ctr-mpc|aes128-ctr-mpc|aes256-cts-hmac-sha1-96|
//                         aes128-cts-hmac-sha1-96] [--keepold] [--force]
//              PRINC...
//   kmpc-admin [OPTIONS] status [--kdb]
//   kmpc-admin [OPTIONS] purge-unreferenced (--dry-run | --i-am-primary) [--yes]
//              [--grace-ms=N]
//   kmpc-admin [OPTIONS] breaker-reset [--cluster=N]
//   kmpc-admin [OPTIONS] rewrite-kdb
//   kmpc-admin [OPTIONS] drop-user-ctr (--all | PRINC...) [--dry-run]
//              [--grace-ms=N]   (admin/user_ctr.h)
//   kmpc-admin [OPTIONS] set-kind --kind=user|service|user+service [--force]
//              (PRINC... | --key-ids KEYID_HEX...)
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
//
// rewrite-kdb (on the KDC host): that rewrite alone, e.g. after
//   kmpc-kdb-handle set or kadmin changes that replaced real keys.
//
// status: each server's health and whether every key id is on all three;
//   with --kdb (on the KDC host) also, by name: every principal holding real
//   keys in the KDB (said apart: one that should be MPC-protected, as it
//   holds a handle or an aes*-ctr-mpc key, or matches the key dealer's
//   patterns in kdc.conf, krbtgt/* by default; kadmind's own kadmin/* and
//   kiprop/* with how to move them), except, on "kdb note:" lines that are
//   no problem, those whose keys stay there by design (kadmin/history's,
//   cross-realm keys; K/M's is not named); every handle without its shares on all three
//   servers; every key migrated from the KDB (older backups hold it); every
//   key on the servers that no handle refers to. Each server's deviation
//   breaker (service/breaker.h): an open one is a problem ("breaker: OPEN").
//   Unless the config file says user_ctr_mpc = true, a user's aes*-ctr-mpc
//   key handle is one too (admin/user_ctr.h: drop-user-ctr removes it), as
//   are kadmin changes that replaced real keys since the KDB was last
//   rewritten (admin/rewrite_due.h: rewrite-kdb clears them).
//   Exit 0 only when all is well.
//
// purge-unreferenced (on the KDC host): removes from every server the
//   shares of the keys no KDB handle refers to (what status --kdb reports
//   as unreferenced: the keys of kvnos `kadmin purgekeys` removed, of a
//   principal changed without the key dealer). It lists them first; with
//   --dry-run that is all, else it asks for confirmation (y) on stdin
//   unless --yes is given. A key dealt or refreshed meanwhile is on the
//   servers before the KDB names it, so a key is removed only when neither
//   of two looks at the KDB and the servers, --grace-ms apart (120 s by
//   default, the key dealer's limit for one dealing), found a reference
//   to it; a refresh's new copy of a key still on the servers is left to
//   kmpc-admin refresh. Only keys whose label names this KDB's realm are
//   considered: clusters shared by realms hold other realms' keys, which
//   no handle of this KDB refers to; a key whose label names no realm is
//   listed and left. It removes nothing without --i-am-primary, the
//   admin's word that this is the realm's primary KDC: a replica's KDB
//   lags the primary's (a key dealt since its last kprop or iprop update
//   looks unreferenced), and MIT's KDB records no role a check could
//   trust (kpropd.acl and the iprop settings are on both roles where the
//   two can switch, docs/admin-guide.md).
//
// breaker-reset: closes the deviation breaker of every server of the
//   cluster (--cluster=N, default every cluster), through the authenticated
//   Admin.ResetBreaker; prints what each cleared. Rotate the keys first
//   (docs/admin-guide.md, "A detected deviation").
//
// set-kind: re-marks the kind of keys already on the servers, without
//   dealing them again (Admin.SetKeyKind): every key handle of each named
//   principal in the KDB (on the KDC host), or the given key ids. Meant for
//   keys stored before key kinds (status and list-keys show them as
//   "kind unrecorded"), which load as a user's but keep the ticket (usage
//   2) and PAC (17) material they were dealt with: --kind=user makes each
//   server rewrite the record with the kind and remove that material (it
//   cannot be given back short of a new key). --kind=service drops the
//   gate on a password-derived key's AS reply (an offline verifier for
//   whoever asks the KDC): refused for such a key unless --force.
//   Reports per server; exit 0 only when every server of every cluster
//   holds the kind. A server not reached keeps the old record, and the
//   servers compare the kind and the material in every job's key view, so
//   the key's jobs fail on all three (JOB_KEY_INCONSISTENT) until the same
//   command is run again, which changes nothing where it was done
//   already. It does not change the principal's kmpc_key_kind string
//   attribute, from which the kadmind key dealer takes the next key's kind.
//
// OPTIONS (or the config file, see config.h):
//   --config=FILE --servers=H:P,H:P,H:P --ca=PEM --cert=PEM --key=PEM
//   -r REALM | --realm=REALM   --timeout-ms=N   -q | --quiet
//
// Exit codes: 0 success, 1 failure (the message says which server or which
// principal), 2 usage.
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "admin/cluster.h"
#include "admin/config.h"
#include "admin/kdb.h"
#include "admin/kdb_rewrite.h"
#include "admin/refresh.h"
#include "admin/user_ctr.h"
#include "client/admin_client.h"
#include "contract.h"
#include "util/hex.h"

namespace kmpc::admin {
namespace {

constexpr char kUsage[] =
    "usage: kmpc-admin [OPTIONS] share (--password-stdin | --from-existing | --randkey)\n"
    "                  [--enctype=aes256-ctr-mpc|aes128-ctr-mpc|\n"
    "                             aes256-cts-hmac-sha1-96|aes128-cts-hmac-sha1-96]\n"
    "                  [--keepold] [--force] [--service | --also-service]\n"
    "                  PRINC...\n"
    "       kmpc-admin [OPTIONS] status [--kdb]\n"
    "       kmpc-admin [OPTIONS] purge-unreferenced (--dry-run | --i-am-primary)\n"
    "                  [--yes] [--grace-ms=N]\n"
    "           remove the shares of this realm's keys no KDB handle refers to\n"
    "           (after kadmin purgekeys); lists them, then asks unless --yes; only\n"
    "           on the realm's primary KDC, which --i-am-primary confirms\n"
    "       kmpc-admin [OPTIONS] refresh (--all | KEYID_HEX...)  (admin/refresh.h)\n"
    "       kmpc-admin [OPTIONS] rewrite-kdb\n"
    "           rewrite the KDB into fresh files (kdb5_util dump and load), so\n"
    "           that no file holds keys replaced by handles (share does it itself)\n"
    "       kmpc-admin [OPTIONS] drop-user-ctr (--all | PRINC...) [--dry-run]\n"
    "                  [--grace-ms=N]\n"
    "           remove users' aes*-ctr-mpc key handles where an aes*-cts handle\n"
    "           of the same password is held; name those that need a new password\n"
    "       kmpc-admin [OPTIONS] breaker-reset [--cluster=N]\n"
    "           close the servers' deviation breakers (after rotating the keys:\n"
    "           docs/admin-guide.md, a detected deviation)\n"
    "       kmpc-admin [OPTIONS] set-kind --kind=user|service|user+service [--force]\n"
    "                  (PRINC... | --key-ids KEYID_HEX...)\n"
    "           re-mark keys already on the servers (keys stored before key kinds);\n"
    "           --kind=user removes their ticket and PAC material\n"
    "       kmpc-admin [OPTIONS] rebuild-party [--cluster=N] 0|1|2\n"
    "           give a replaced (new, empty) server its shares of every key from\n"
    "           the two others; no key is reconstructed (docs/admin-guide.md: replacing a lost server)\n"
    "OPTIONS: --config=FILE --servers=H:P,H:P,H:P --ca=PEM --cert=PEM --key=PEM\n"
    "         --servers2=H:P,H:P,H:P --ca2=PEM --cert2=PEM --key2=PEM (a second cluster)\n"
    "         -r REALM | --realm=REALM  --timeout-ms=N  -q | --quiet\n";

[[noreturn]] void Usage(const std::string& msg = "") {
  if (!msg.empty()) std::fprintf(stderr, "kmpc-admin: %s\n", msg.c_str());
  std::fputs(kUsage, stderr);
  std::exit(2);
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "kmpc-admin: %s\n", std::string(st.message()).c_str());
  return 1;
}

using client::AdminClient;

struct Args {
  std::string command;
  std::vector<std::string> principals;
  std::map<std::string, std::string> settings;  // from flags, override the file
  std::string config;
  bool password_stdin = false;
  bool from_existing = false;
  bool randkey = false;
  bool keepold = false;
  bool force = false;
  bool kdb = false;
  bool quiet = false;
  bool all = false;  // refresh --all
  bool dry_run = false;  // purge-unreferenced
  bool yes = false;      // purge-unreferenced: no question
  bool i_am_primary = false;  // purge-unreferenced: the admin's word
  std::string grace_ms;  // purge-unreferenced: between its two looks
  bool service = false, also_service = false;  // share's key kind
  std::string kind;       // set-kind --kind
  bool key_ids = false;   // set-kind: the arguments are key ids
  std::string enctype;  // share --enctype; empty: aes256-ctr-mpc
  // --cluster=N: rebuild-party's (1 when not given), breaker-reset's
  // (every cluster when not given).
  std::string cluster;
};

Args ParseArgs(int argc, char** argv) {
  static const std::set<std::string> kValued = {
      "config", "servers", "ca", "cert", "key", "realm", "timeout-ms", "enctype",
      "servers2", "ca2", "cert2", "key2", "cluster", "grace-ms", "kind"};
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (s == "-r") {
      if (++i >= argc) Usage("-r needs a realm");
      a.settings["realm"] = argv[i];
      continue;
    }
    if (s == "-q" || s == "--quiet") {
      a.quiet = true;
      continue;
    }
    if (absl::StartsWith(s, "--")) {
      std::string name = s.substr(2), value;
      bool has_value = false;
      if (size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      if (kValued.count(name)) {
        if (!has_value) {
          if (++i >= argc) Usage("--" + name + " needs a value");
          value = argv[i];
        }
        if (name == "config") a.config = value;
        else if (name == "enctype") a.enctype = value;
        else if (name == "timeout-ms") a.settings["timeout_ms"] = value;
        else if (name == "cluster") a.cluster = value;
        else if (name == "grace-ms") a.grace_ms = value;
        else if (name == "kind") a.kind = value;
        else a.settings[name] = value;
        continue;
      }
      if (has_value) Usage("--" + name + " takes no value");
      if (name == "password-stdin") a.password_stdin = true;
      else if (name == "from-existing") a.from_existing = true;
      else if (name == "randkey") a.randkey = true;
      else if (name == "keepold") a.keepold = true;
      else if (name == "force") a.force = true;
      else if (name == "kdb") a.kdb = true;
      else if (name == "all") a.all = true;
      else if (name == "dry-run") a.dry_run = true;
      else if (name == "yes") a.yes = true;
      else if (name == "i-am-primary") a.i_am_primary = true;
      else if (name == "service") a.service = true;
      else if (name == "also-service") a.also_service = true;
      else if (name == "key-ids") a.key_ids = true;
      else Usage("unknown option " + s);
      continue;
    }
    if (a.command.empty()) a.command = s;
    else a.principals.push_back(s);
  }
  if (a.command.empty()) Usage();
  return a;
}

absl::StatusOr<Config> LoadConfig(const Args& a) {
  Config cfg;
  std::string path = a.config;
  if (path.empty()) {
    if (const char* e = std::getenv("KMPC_ADMIN_CONFIG"); e != nullptr && *e) path = e;
    else if (FILE* f = std::fopen("/etc/kmpc/admin.conf", "r")) {
      std::fclose(f);
      path = "/etc/kmpc/admin.conf";
    }
  }
  if (!path.empty()) {
    auto file = ReadConfigFile(path);
    if (!file.ok()) return file.status();
    if (absl::Status st = ApplySettings(*file, &cfg); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", st.message()));
  }
  if (absl::Status st = ApplySettings(a.settings, &cfg); !st.ok()) return st;
  return cfg;
}

std::string Hex(const std::string& b) { return absl::BytesToHexString(b); }

// Principals whose keys daemons need in the clear: never shared. The
// master key encrypts the KDB; kadmin/history's key encrypts the password
// history kadm5 keeps (krb5_c_encrypt in kadmind).
bool Unshareable(const std::string& canon) {
  return absl::StartsWith(canon, "K/M@") || absl::StartsWith(canon, "kadmin/history@");
}

// kadmind's own service principals: it accepts tickets to them by
// decrypting them in the cluster (krb5 patch 0026-Decrypt-tickets,
// kdc-plugin/dealer/ticket_decrypt.h), which the servers do for a
// service's keys only.
bool KadmindService(const std::string& canon) {
  return absl::StartsWith(canon, "kadmin/") || absl::StartsWith(canon, "kiprop/");
}

struct ShareOutcome {
  enum { kShared, kSkipped } what = kShared;
  std::string detail;
  bool replaced_real = false;  // real keys in the KDB replaced by handles
};

// What the KDB holds for a principal, as share needs to know it.
struct KdbKeyFacts {
  std::vector<std::string> old_ids;  // key ids of its handles, each once
  bool current_is_handle = false;
  bool all_handles = true;
  bool current_is_mpc_key = false;  // an aes*-ctr-mpc key still in the KDB
};

KdbKeyFacts FactsOf(const PrincipalInfo& info) {
  KdbKeyFacts f;
  for (const KeyEntry& e : info.keys) {
    if (!e.is_handle) {
      f.all_handles = false;
      if (e.kvno == info.kvno && IsMpcEnctype(e.enctype)) f.current_is_mpc_key = true;
      continue;
    }
    if (std::find(f.old_ids.begin(), f.old_ids.end(), e.key_id) == f.old_ids.end())
      f.old_ids.push_back(e.key_id);
    if (e.kvno == info.kvno) f.current_is_handle = true;
  }
  return f;
}

KeyKind ShareKind(const Args& a);

// The refusals of share for canon before anything changes.
absl::Status CheckShareAllowed(const Args& a, const std::string& canon,
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
int32_t ShareEnctype(const Args& a) {
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
absl::Status CheckKeysAllowed(const Args& a, const PrincipalInfo& info, bool user_ctr_mpc) {
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
absl::StatusOr<std::vector<KeyToShare>> ExistingKeysToShare(Kdb& kdb, const Args& a,
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
absl::StatusOr<std::vector<KeyToShare>> MakeKeysToShare(Kdb& kdb, const Args& a,
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
KeyKind ShareKind(const Args& a) {
  if (a.also_service) return KeyKind::kUserService;
  if (a.service || a.randkey) return KeyKind::kService;
  return KeyKind::kUser;
}

// The kind of the keys share deals for `canon`: a ticket-granting key is
// random and decrypts tickets, a service's.
KeyKind ShareKindOf(const Args& a, const std::string& canon) {
  return TicketGranting(canon) ? KeyKind::kService : ShareKind(a);
}

// Puts one key under a fresh key id (k.key_id) and wipes it; `origin`:
// the deal its per-key bounds count under (client::KeyMeta::origin).
absl::Status PutOne(Clusters& cluster, const Args& a, const std::string& canon,
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
absl::Status PutAndSetHandles(Kdb& kdb, Clusters& cluster, const Args& a,
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
std::string DropOldShares(Clusters& cluster, const Args& a,
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
                                      const Args& a, const std::string& name,
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
  // dealer's (kdc-plugin/dealer/dealer_module.cc, RequirePreauth).
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

int Share(const Args& a, const Config& cfg) {
  if (a.password_stdin + a.from_existing + a.randkey != 1)
    Usage("share needs exactly one of --password-stdin, --from-existing and --randkey");
  if (a.service && a.also_service)
    Usage("share takes --service or --also-service, not both");
  // A password-derived key dealt as a service's would have its tickets
  // decrypted by the servers (DECRYPT under usage 2) and its AS reply
  // computed ungated: offline verifiers of the password for whoever runs
  // the KDC. A user who is also a service is --also-service (gated).
  if (a.password_stdin && a.service)
    Usage("--service is for a random key (--randkey, or --from-existing of a "
          "service's random key): a key from a password is a user's; give "
          "--also-service for a user who is also the server of tickets");
  if (a.keepold && a.from_existing)
    Usage("--keepold applies to --password-stdin and --randkey (a migrated key "
          "replaces the key it was)");
  if (!a.enctype.empty() && EnctypeOfName(a.enctype) == 0)
    Usage("--enctype must be aes256-ctr-mpc, aes128-ctr-mpc, aes256-cts-hmac-sha1-96 "
          "or aes128-cts-hmac-sha1-96");
  if (a.from_existing && !a.enctype.empty() && !IsCtsEnctype(EnctypeOfName(a.enctype)))
    Usage("--from-existing takes no aes*-ctr-mpc --enctype (a migrated key keeps its "
          "size); --enctype=aes256-cts-hmac-sha1-96 moves the aes*-cts keys as they are");
  if (a.principals.empty()) Usage("share needs at least one principal");
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
    if (!a.quiet || n == 1)
      std::printf("[%zu/%zu] %s: %s\n", i + 1, n, name.c_str(), r->detail.c_str());
    std::fflush(stdout);
  }
  if (n > 1 || failed > 0 || skipped > 0)
    std::printf("kmpc-admin: %zu shared, %zu already shared, %zu failed\n", shared,
                skipped, failed);
  return RewriteAfterShare(std::move(*kdb), replaced, failed == 0 ? 0 : 1);
}

// Matches name ("user@REALM") against a dealer protect pattern, as the
// dealer does: the whole name, or without the realm for a pattern without
// one.
bool MatchesProtect(const std::string& pattern, const std::string& name) {
  if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) return true;
  size_t at = name.rfind('@');
  return pattern.find('@') == std::string::npos && at != std::string::npos &&
         fnmatch(pattern.c_str(), name.substr(0, at).c_str(), 0) == 0;
}

// Why a principal's real keys stay in the KDB by design, or nullopt when
// they should be in the cluster. K/M's is the master key itself (an empty
// reason: not named at all); kadmin/history's (Unshareable: share refuses
// it) encrypts only the password history, whose entries are handles once
// the keys they record are in the cluster; a cross-realm key
// (krbtgt/OTHER@REALM or krbtgt/REALM@OTHER) is shared with the partner
// realm, whose KDB holds the same key: the cluster cannot make it secret
// (docs/admin-guide.md). kadmind's own keys (kadmin/admin, kadmin/changepw,
// kiprop/*) do not stay: with kadmin/changepw a thief forges INITIAL
// tickets to kpasswd and sets any user's password.
std::optional<std::string> WhyRealKeysStay(const std::string& canon,
                                           const std::string& realm) {
  if (absl::StartsWith(canon, "K/M@")) return std::string();
  if (Unshareable(canon))
    return std::string("kadm5 encrypts the password history under it");
  const size_t at = canon.rfind('@');
  if (absl::StartsWith(canon, "krbtgt/") && at != std::string::npos) {
    const std::string second = canon.substr(7, at - 7);
    if (second != realm || canon.substr(at + 1) != realm)
      return std::string("a cross-realm key: the partner realm's KDB holds it too");
  }
  return std::nullopt;
}

// status --kdb's line for a principal holding real keys (real: their
// enctypes and kvnos; should: the dealer protects it), counted in staying
// (a "kdb note:" line), exposed or other_real. True when it is a problem.
bool ReportRealKeys(const std::string& name, const std::string& realm,
                       const std::vector<std::string>& real, bool should,
                       size_t* staying, size_t* exposed, size_t* other_real) {
  const std::string keys = absl::StrJoin(real, ", ");
  if (const std::optional<std::string> stays = WhyRealKeysStay(name, realm)) {
    if (!stays->empty())
      std::printf("kdb note: %s keeps real keys in the KDB (%s): %s\n", name.c_str(),
                  stays->c_str(), keys.c_str());
    ++*staying;
    return false;
  }
  const char* why = KadmindService(name)
      ? " (kadmind's own key: whoever reads the KDB with its master key forges "
        "tickets to kadmind; kmpc-admin share --randkey --service "
        "--enctype=aes256-cts-hmac-sha1-96 moves it into the cluster)"
      : nullptr;
  if (should) {
    std::printf("kdb: %s should be MPC-protected but holds real keys in the KDB: %s%s\n",
                name.c_str(), keys.c_str(), why ? why : "");
    ++*exposed;
    return true;
  }
  std::printf("kdb: %s holds real keys in the KDB: %s%s\n", name.c_str(), keys.c_str(),
              why ? why
                  : " (whoever reads the KDB with its master key has them; "
                    "kmpc-admin share --from-existing or --randkey moves them "
                    "into the cluster)");
  ++*other_real;
  return true;
}

// Notes that `name` refers to key id `id`; false, with a problem line, when
// another principal refers to it already. kmpc deals every key under an id
// of its own, so a shared id is a handle copied from another principal's
// entry (written locally: kadmin.local, a KDB load, a replica fed a crafted
// dump): the KDC then issues tickets to `name` under the other's key.
bool NoteHolder(std::map<std::string, std::string>& holder, const std::string& id,
                const std::string& name) {
  auto [it, first] = holder.emplace(id, name);
  if (first || it->second == name) return true;
  std::printf("kdb: key id %s is referred to by %s and by %s: a handle copied from "
              "another principal's entry; remove the copy, then roll that key\n",
              Hex(id).c_str(), it->second.c_str(), name.c_str());
  return false;
}

// status --kdb's line for a principal holding handles of a user's key
// without +requires_preauth; true when there is none to print. A user's: a
// handle whose key the servers list as KEY_KIND_USER or KEY_KIND_USER_SERVICE
// (or do not list), on a principal that is not ticket-granting, whatever
// its kmpc_key_kind attribute says (a password set on a principal marked
// "service" is dealt as user+service, and the KDC exempts it from
// pre-authentication by that attribute alone). MIT's KDC answers an AS
// request without pre-authentication for such a principal with a reply
// under the key, an offline verifier of its password; kmpc's KDC demands
// pre-authentication anyway (krb5 patch 0024-KDC-demand-pre-authentication),
// and the dealer and share set the flag (a kadmin modprinc can clear it).
bool ReportNoPreauth(const PrincipalInfo& info,
                     const std::map<std::string, kmpc::v1::KeyInfo>& infos) {
  if (info.requires_preauth || absl::StartsWith(info.name, "krbtgt/")) return true;
  bool user = false;
  for (const KeyEntry& e : info.keys) {
    if (!e.is_handle) continue;
    auto it = infos.find(e.key_id);
    user = user || it == infos.end() || it->second.kind() != kmpc::v1::KEY_KIND_SERVICE;
  }
  if (!user) return true;
  std::printf("kdb: %s holds a user's key in the cluster but not +requires_preauth: "
              "a KDC without kmpc's patches would answer anyone's AS request for it "
              "with an offline verifier of its password (kadmin modprinc "
              "+requires_preauth %s)\n",
              info.name.c_str(), info.name.c_str());
  return false;
}

// status --kdb: compares the KDB with the servers' key lists (where: key id
// -> which servers hold it; infos: its metadata). Prints one line per
// problem, naming the principal or key (every principal holding a real key
// is one, unless WhyRealKeysStay says why it stays: a "kdb note:" line);
// returns true when there is none.
bool KdbStatus(Kdb& kdb, const std::map<std::string, std::array<bool, 3>>& where,
               std::map<std::string, kmpc::v1::KeyInfo>& infos, bool lists_ok,
               bool user_ctr_mpc) {
  auto names = kdb.ListPrincipals();
  if (!names.ok()) {
    std::printf("ERROR: %s\n", std::string(names.status().message()).c_str());
    return false;
  }
  const std::vector<std::string> protect = kdb.ProtectPatterns();
  bool ok = true;
  size_t with_handles = 0, missing = 0, exposed = 0, migrated = 0;
  size_t other_real = 0, staying = 0;
  std::map<std::string, std::string> holder;  // key id -> its first principal
  for (const std::string& name : *names) {
    auto info = kdb.Lookup(name);
    if (!info.ok()) continue;  // deleted meanwhile
    bool has_handle = false, has_mpc_key = false;
    std::vector<std::string> real;
    for (const KeyEntry& e : info->keys) {
      if (!e.is_handle) {
        real.push_back(absl::StrCat(EnctypeName(e.enctype), " kvno ", e.kvno));
        if (IsMpcEnctype(e.enctype))
          has_mpc_key = true;
        continue;
      }
      has_handle = true;
      ok = NoteHolder(holder, e.key_id, info->name) && ok;
      if (!lists_ok) continue;
      auto it = where.find(e.key_id);
      if (it == where.end() || !(it->second[0] && it->second[1] && it->second[2])) {
        ++missing;
        ok = false;
        std::printf("kdb: %s kvno %u: key id %s is NOT on all three servers\n",
                    info->name.c_str(), e.kvno, Hex(e.key_id).c_str());
      } else if (absl::EndsWith(infos[e.key_id].label(), kMigratedSuffix)) {
        ++migrated;
        ok = false;
        std::printf("kdb: %s kvno %u: migrated from the KDB: older dumps, backups "
                    "and replicas of the KDB hold this key until the next password "
                    "change (key id %s)\n",
                    info->name.c_str(), e.kvno, Hex(e.key_id).c_str());
      }
    }
    if (has_handle) ++with_handles;
    if (has_handle && !ReportNoPreauth(*info, infos)) ok = false;
    if (has_handle && !user_ctr_mpc && !ReportUserCtr(*info, infos)) ok = false;
    if (real.empty()) continue;
    // kdb5_util create gives kadmind's principals a key of every supported
    // enctype: an aes*-ctr-mpc one among them is no sign of protection.
    bool should = has_handle || (has_mpc_key && !KadmindService(info->name));
    for (const std::string& p : protect) should = should || MatchesProtect(p, info->name);
    if (ReportRealKeys(info->name, kdb.realm(), real, should, &staying, &exposed,
                       &other_real))
      ok = false;
  }
  if (!ReportRewritesDue(kdb.realm())) ok = false;
  if (!lists_ok) {
    std::printf("kdb: realm %s, %zu principals, %zu with key handles, %zu "
                "exposed, %zu others with real keys (shares not checked: not "
                "every server answered)\n",
                kdb.realm().c_str(), names->size(), with_handles, exposed, other_real);
    return false;
  }
  size_t unreferenced = 0;
  for (const auto& [id, on] : where) {
    if (holder.count(id)) continue;
    ++unreferenced;
    ok = false;
    std::printf("kdb: key %s (%s, kvno %u) is on the servers but no KDB handle "
                "refers to it (kmpc-admin purge-unreferenced removes it)\n",
                Hex(id).c_str(), infos[id].label().c_str(), infos[id].kvno());
  }
  std::printf("kdb: realm %s, %zu principals, %zu with key handles, %zu exposed, "
              "%zu handles without shares, %zu migrated, %zu unreferenced keys on "
              "the servers, %zu others with real keys, %zu keeping them by design "
              "(K/M included)\n",
              kdb.realm().c_str(), names->size(), with_handles, exposed, missing,
              migrated, unreferenced, other_real, staying);
  return ok;
}

// False, with a line saying so, when the servers that answered report
// different --security modes ("unknown": a server older than the Health
// field). They compare their engine options before every batch and refuse
// each other's while these differ (engine.cc, the agreement).
bool SameSecurity(const std::set<std::string>& modes, const char* pre) {
  if (modes.size() <= 1) return true;
  std::printf("%ssecurity: MISMATCH, the servers run %s: they refuse each other's "
              "batches; run all three with the same --security\n",
              pre, absl::StrJoin(modes, " and ").c_str());
  return false;
}

// A server's deviation breaker (service/breaker.h): false, with a line
// saying so, when it is open; a line for deviations it detected while
// the breaker stayed closed.
bool BreakerStatus(const kmpc::v1::HealthResponse& h, const char* pre,
                   const std::string& who) {
  if (h.breaker_open()) {
    std::printf("%s%s: breaker: OPEN (%s): a server of this cluster deviated from "
                "the protocol; this server refuses every batch "
                "(BATCH_BREAKER_OPEN). Rotate the keys, then kmpc-admin "
                "breaker-reset (docs/admin-guide.md, a detected deviation)\n",
                pre, who.c_str(), h.breaker_detail().c_str());
    return false;
  }
  if (h.deviations() > 0)
    std::printf("%s%s: breaker: closed, %lu deviations detected since the server "
                "started (kmpc_deviations_total)\n",
                pre, who.c_str(), static_cast<unsigned long>(h.deviations()));
  return true;
}

// breaker-reset: Admin.ResetBreaker on every server of the chosen
// clusters. Exit 0 when every server answered.
int BreakerReset(const Args& a, const Config& cfg) {
  if (!a.principals.empty()) Usage("breaker-reset takes no arguments");
  auto clusters = Clusters::Connect(cfg);
  if (!clusters.ok()) return Fail(clusters.status());
  int only = 0;  // 0: every cluster
  if (!a.cluster.empty() &&
      (!absl::SimpleAtoi(a.cluster, &only) || only < 1 ||
       only > static_cast<int>((*clusters)->size())))
    Usage(absl::StrCat("--cluster must be 1 to ", (*clusters)->size()));
  bool ok = true;
  for (size_t c = 0; c < (*clusters)->size(); ++c) {
    if (only != 0 && static_cast<int>(c) + 1 != only) continue;
    AdminClient& cluster = (*clusters)->at(c);
    auto r = cluster.ResetBreaker();
    for (int i = 0; i < 3; ++i) {
      const std::string who = (*clusters)->Prefix(c) + cluster.Describe(i);
      if (!r[i].ok()) {
        ok = false;
        std::printf("ERROR: %s\n", std::string(r[i].status().message()).c_str());
      } else if (r[i]->was_open()) {
        std::printf("%s: breaker cleared (was %s)\n", who.c_str(), r[i]->detail().c_str());
      } else {
        std::printf("%s: breaker was closed\n", who.c_str());
      }
    }
  }
  return ok ? 0 : 1;
}

// set-kind's keys: (key id, what to call it in the report).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SetKindTargets(
    const Args& a, const Config& cfg) {
  std::vector<std::pair<std::string, std::string>> out;
  if (a.key_ids) {
    for (const std::string& hex : a.principals) {
      std::string id;
      if (hex.size() != 2 * contract::kKeyIdSize || !util::HexToBytes(hex, &id))
        return absl::InvalidArgumentError(
            absl::StrCat(hex, ": not a key id (", 2 * contract::kKeyIdSize, " hex digits)"));
      out.emplace_back(std::move(id),
                       absl::StrCat("key ", absl::AsciiStrToLower(hex)));
    }
    return out;
  }
  auto kdb = Kdb::Open(cfg.realm);
  if (!kdb.ok()) return kdb.status();
  for (const std::string& name : a.principals) {
    auto info = (*kdb)->Lookup(name);
    if (!info.ok()) return info.status();
    const KdbKeyFacts f = FactsOf(*info);
    if (f.old_ids.empty())
      return absl::FailedPreconditionError(absl::StrCat(
          info->name, ": holds no key handle (its keys are not in the cluster)"));
    for (const std::string& id : f.old_ids)
      out.emplace_back(id, absl::StrCat("key ", Hex(id), " of ", info->name));
  }
  return out;
}

const char* KindName(kmpc::v1::KeyKind k) {
  switch (k) {
    case kmpc::v1::KEY_KIND_USER: return "user";
    case kmpc::v1::KEY_KIND_SERVICE: return "service";
    case kmpc::v1::KEY_KIND_USER_SERVICE: return "user+service";
    default: return "unknown";
  }
}

// One server's answer to set-kind, printed: 0 done, 1 refused (a service's
// kind for a password-derived key without --force, or not in that server's
// --allow_ungate_keys: nothing changed), 2 another error.
int ReportSetKind(const absl::StatusOr<kmpc::v1::SetKeyKindResponse>& r,
                   const std::string& who, const std::string& what, KeyKind kind, bool force) {
  const char* want = KindName(static_cast<kmpc::v1::KeyKind>(kind));
  if (!r.ok()) {
    // With --force sent, a refusal is the server operator's list's, which
    // the message names.
    std::printf("%s: %s: NOT changed: %s%s\n", who.c_str(), what.c_str(),
                std::string(r.status().message()).c_str(),
                absl::IsFailedPrecondition(r.status()) && !force ? " (--force)" : "");
    return absl::IsFailedPrecondition(r.status()) ? 1 : 2;
  }
  std::string from = KindName(r->previous_kind());
  if (r->was_unrecorded()) from = "unrecorded (loaded as user)";
  if (r->changed()) std::printf("%s: %s: %s -> %s", who.c_str(), what.c_str(), from.c_str(), want);
  else std::printf("%s: %s: already %s", who.c_str(), what.c_str(), want);
  if (r->dropped_materials() > 0)
    std::printf(", %u ticket/PAC materials removed", r->dropped_materials());
  if (kind != KeyKind::kUser && !r->holds_ticket_material())
    std::printf(" (holds no ticket material: tickets to it fail until its next key)");
  std::printf("\n");
  return 0;
}

// set-kind: Admin.SetKeyKind for every target on every server.
int SetKind(const Args& a, const Config& cfg) {
  KeyKind kind;
  if (a.kind == "user") kind = KeyKind::kUser;
  else if (a.kind == "service") kind = KeyKind::kService;
  else if (a.kind == "user+service") kind = KeyKind::kUserService;
  else Usage("set-kind needs --kind=user, --kind=service or --kind=user+service");
  if (a.principals.empty()) Usage("set-kind needs principals (or --key-ids and key ids)");
  auto targets = SetKindTargets(a, cfg);
  if (!targets.ok()) return Fail(targets.status());
  auto clusters = Clusters::Connect(cfg);
  if (!clusters.ok()) return Fail(clusters.status());
  size_t failed = 0, refused = 0;
  bool stop = false;  // a server down or refusing us: the next keys would fail too
  for (const auto& [id, what] : *targets) {
    if (stop) {
      std::printf("%s: NOT changed: stopped after a cluster error\n", what.c_str());
      ++failed;
      continue;
    }
    for (size_t c = 0; c < (*clusters)->size(); ++c) {
      AdminClient& cluster = (*clusters)->at(c);
      auto r = cluster.SetKeyKind(id, kind, a.force);
      for (int i = 0; i < 3; ++i) {
        const int got = ReportSetKind(r[i], (*clusters)->Prefix(c) + cluster.Describe(i),
                                      what, kind, a.force);
        refused += got == 1;
        failed += got == 2;
        if (!r[i].ok() && IsClusterError(r[i].status())) stop = true;
      }
    }
  }
  if (failed == 0 && refused == 0) {
    std::printf("set-kind: %zu keys are %s on every server\n", targets->size(), a.kind.c_str());
    return 0;
  }
  if (refused > 0)
    std::printf("set-kind: %zu answers refused the service's kind for a password-derived "
                "key (no gate on its AS reply): if that is meant, --force, and each "
                "server's operator lists the key id in its --allow_ungate_keys\n",
                refused);
  if (failed == 0) return 1;
  std::printf("set-kind: %zu records NOT changed: until every server holds the same kind, "
              "a key's jobs fail (JOB_KEY_INCONSISTENT); run the same command again\n",
              failed);
  return 1;
}

// status: the keys stored before key kinds (as some server listed them).
// Not a problem by itself (they load as users' keys), but those holding
// ticket and PAC material keep it until set-kind or a new key.
void ReportUnrecorded(const std::map<std::string, kmpc::v1::KeyInfo>& infos) {
  size_t unrecorded = 0;
  for (const auto& [id, info] : infos)
    if (info.kind_unrecorded()) ++unrecorded;
  if (unrecorded > 0)
    std::printf("keys: %zu stored before key kinds (kind unrecorded): kmpc-admin set-kind\n",
                unrecorded);
}

// One cluster's part of status: each server's health, and every key id
// on all three; prints with `prefix` ("cluster 2: " or ""). Adds what it
// lists to *where (key id -> on which servers) and *infos; false when there
// is a problem, *lists_ok false when a server did not list its keys.
bool ClusterStatus(AdminClient& cluster, const std::string& prefix,
                   std::map<std::string, std::array<bool, 3>>* where,
                   std::map<std::string, kmpc::v1::KeyInfo>* infos,
                   bool* lists_ok) {
  bool ok = true;
  auto health = cluster.Health();
  auto lists = cluster.ListKeys();
  const char* pre = prefix.c_str();
  std::set<std::string> modes;
  for (int i = 0; i < 3; ++i) {
    std::string who = cluster.Describe(i);
    if (!health[i].ok()) {
      ok = false;
      std::printf("%sERROR: %s\n", pre,
                  std::string(health[i].status().message()).c_str());
      continue;
    }
    const auto& h = *health[i];
    bool good = h.ring_up() && h.party() == static_cast<uint32_t>(i);
    const std::string& mode = *modes.insert(h.security().empty() ? "unknown" : h.security()).first;
    std::printf("%s%s: %s, party %u, ring %s, %u workers, %lu keys, batches ok %lu "
                "failed %lu, security %s\n",
                pre, who.c_str(), good ? "ok" : "DEGRADED", h.party(),
                h.ring_up() ? "up" : "DOWN", h.workers(),
                static_cast<unsigned long>(h.keys()),
                static_cast<unsigned long>(h.batches_ok()),
                static_cast<unsigned long>(h.batches_failed()), mode.c_str());
    if (h.party() != static_cast<uint32_t>(i))
      std::printf("%s%s: says it is party %u: list the servers in party order\n",
                  pre, who.c_str(), h.party());
    ok = BreakerStatus(h, pre, who) && good && ok;
  }
  ok = SameSecurity(modes, pre) && ok;
  bool mine_ok = true;
  std::map<std::string, std::array<bool, 3>> mine;
  for (int i = 0; i < 3; ++i) {
    if (!lists[i].ok()) {
      mine_ok = false;
      if (health[i].ok())
        std::printf("%sERROR: %s\n", pre,
                    std::string(lists[i].status().message()).c_str());
      continue;
    }
    for (const auto& k : *lists[i]) {
      mine[k.key_id()][i] = true;
      infos->emplace(k.key_id(), k);
    }
  }
  size_t complete = 0;
  for (const auto& [id, on] : mine) {
    if (on[0] && on[1] && on[2]) {
      ++complete;
      continue;
    }
    if (!mine_ok) continue;
    ok = false;
    std::vector<int> missing;
    for (int i = 0; i < 3; ++i)
      if (!on[i]) missing.push_back(i);
    std::printf("%skey %s (%s, kvno %u): MISSING on server %s\n", pre,
                Hex(id).c_str(), (*infos)[id].label().c_str(),
                (*infos)[id].kvno(), absl::StrJoin(missing, ", ").c_str());
  }
  if (mine_ok)
    std::printf("%skeys: %zu on all three servers, %zu incomplete\n", pre,
                complete, mine.size() - complete);
  else
    std::printf("%skeys: cannot compare, not every server answered\n", pre);
  *lists_ok = *lists_ok && mine_ok;
  // Across clusters a key counts as on server i only where every cluster's
  // server i holds it (a key missing from one cluster is missing).
  for (auto& [id, on] : *where)
    if (!mine.count(id)) on = {false, false, false};
  for (const auto& [id, on] : mine) {
    auto [it, fresh] = where->emplace(id, on);
    if (!fresh)
      for (int i = 0; i < 3; ++i) it->second[i] = it->second[i] && on[i];
  }
  return ok;
}

int Status(const Args& a, const Config& cfg) {
  auto clusters = Clusters::Connect(cfg);
  if (!clusters.ok()) return Fail(clusters.status());
  bool ok = true;
  std::map<std::string, std::array<bool, 3>> where;
  std::map<std::string, kmpc::v1::KeyInfo> infos;
  bool lists_ok = true;
  for (size_t c = 0; c < (*clusters)->size(); ++c) {
    // A key some earlier cluster lacks is missing whatever this one holds.
    std::map<std::string, std::array<bool, 3>> before = where;
    if (!ClusterStatus((*clusters)->at(c), (*clusters)->Prefix(c), &where,
                       &infos, &lists_ok))
      ok = false;
    if (c > 0)
      for (auto& [id, on] : where)
        if (!before.count(id)) on = {false, false, false};
  }
  ReportUnrecorded(infos);
  if (a.kdb) {
    auto kdb = Kdb::Open(cfg.realm);
    if (!kdb.ok()) return Fail(kdb.status());
    if (!KdbStatus(**kdb, where, infos, lists_ok, cfg.user_ctr_mpc)) ok = false;
    if (!lists_ok) {
      std::printf("status: PROBLEMS (see above)\n");
      return 1;
    }
  }
  std::printf("status: %s\n", ok ? "OK" : "PROBLEMS (see above)");
  return ok ? 0 : 1;
}

// purge-unreferenced: one look at what the servers hold and what the KDB
// refers to.
struct PurgeLook {
  std::map<std::string, kmpc::v1::KeyInfo> listed;  // on any server, this realm's
  std::set<std::string> referenced;                 // by a KDB handle
  std::map<std::string, kmpc::v1::KeyInfo> elsewhere;  // labelled with no or another realm
};

absl::StatusOr<PurgeLook> LookForPurge(Clusters& clusters, Kdb& kdb) {
  PurgeLook look;
  for (size_t c = 0; c < clusters.size(); ++c) {
    auto lists = clusters.at(c).ListKeys();
    for (int i = 0; i < 3; ++i) {
      // A server that does not list its keys may hold any: nothing is
      // decided without every list.
      if (!lists[i].ok())
        return absl::Status(lists[i].status().code(),
                            absl::StrCat(clusters.Prefix(c), lists[i].status().message(),
                                         "; nothing was removed"));
      for (const auto& k : *lists[i]) {
        if (LabelRealm(k.label()) == kdb.realm()) look.listed.emplace(k.key_id(), k);
        else look.elsewhere.emplace(k.key_id(), k);
      }
    }
  }
  auto names = kdb.ListPrincipals();
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    auto info = kdb.Lookup(name);
    if (!info.ok()) {
      if (absl::IsNotFound(info.status())) continue;  // deleted meanwhile
      return info.status();
    }
    for (const KeyEntry& e : info->keys)
      if (e.is_handle) look.referenced.insert(e.key_id);
  }
  return look;
}

// The ids of look no handle refers to, less a refresh's new copy of a key
// that is still on the servers (refresh.h: kmpc-admin refresh finishes or
// removes it); *in_refresh counts those.
std::vector<std::string> Unreferenced(const PurgeLook& look, size_t* in_refresh) {
  std::vector<std::string> out;
  *in_refresh = 0;
  for (const auto& [id, info] : look.listed) {
    if (look.referenced.count(id)) continue;
    bool copy = false;
    for (const auto& [old, old_info] : look.listed)
      if (old != id && IsRefreshOf(id, old)) copy = true;
    if (copy) {
      ++*in_refresh;
      continue;
    }
    out.push_back(id);
  }
  return out;
}

// Asks on stdin; true for "y" or "yes".
bool Confirmed(size_t n) {
  std::printf("Remove the shares of these %zu keys from every server? Nothing "
              "can log in under them afterwards. [y/N] ",
              n);
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line)) return false;
  return line == "y" || line == "Y" || line == "yes";
}

// Removes the ids both looks found unreferenced; the exit code.
int RemoveUnreferenced(Clusters& clusters, const std::vector<std::string>& first,
                       const PurgeLook& second, const std::set<std::string>& now) {
  size_t removed = 0, kept = 0, failed = 0;
  for (const std::string& id : first) {
    const kmpc::v1::KeyInfo& info = second.listed.count(id) ? second.listed.at(id)
                                                            : kmpc::v1::KeyInfo();
    if (!now.count(id)) {
      ++kept;
      std::printf("key %s: referenced (or gone) at the second look: kept\n",
                  Hex(id).c_str());
      continue;
    }
    absl::Status st = clusters.DeleteKey(id);
    if (!st.ok()) {
      ++failed;
      std::printf("key %s (%s, kvno %u): NOT removed: %s\n", Hex(id).c_str(),
                  info.label().c_str(), info.kvno(), std::string(st.message()).c_str());
      continue;
    }
    ++removed;
    std::printf("key %s (%s, kvno %u): removed from every server\n", Hex(id).c_str(),
                info.label().c_str(), info.kvno());
  }
  std::printf("purge-unreferenced: %zu removed, %zu kept, %zu failed\n", removed, kept,
              failed);
  return failed == 0 ? 0 : 1;
}

int PurgeUnreferenced(const Args& a, const Config& cfg) {
  if (!a.dry_run && !a.i_am_primary)
    Usage("purge-unreferenced removes keys only on the realm's primary KDC: run it "
          "there with --i-am-primary (a replica's KDB lags the primary's, so keys "
          "dealt since its last update look unreferenced), or with --dry-run");
  // The key dealer gives up on a dealing after 120 s: a key dealt just
  // before the first look and written to the KDB up to then is still
  // referenced at the second look.
  int grace_ms = 120000;
  if (!a.grace_ms.empty() && (!absl::SimpleAtoi(a.grace_ms, &grace_ms) || grace_ms < 0))
    Usage("--grace-ms must be a number of milliseconds");
  auto clusters = Clusters::Connect(cfg);
  if (!clusters.ok()) return Fail(clusters.status());
  auto kdb = Kdb::Open(cfg.realm);
  if (!kdb.ok()) return Fail(kdb.status());
  auto first = LookForPurge(**clusters, **kdb);
  if (!first.ok()) return Fail(first.status());
  if (!first->elsewhere.empty())
    std::printf("%zu keys whose label names no realm or another realm than %s left as "
                "they are\n",
                first->elsewhere.size(), (*kdb)->realm().c_str());
  size_t in_refresh = 0;
  const std::vector<std::string> ids = Unreferenced(*first, &in_refresh);
  for (const std::string& id : ids)
    std::printf("key %s (%s, kvno %u): no KDB handle refers to it\n", Hex(id).c_str(),
                first->listed[id].label().c_str(), first->listed[id].kvno());
  if (in_refresh > 0)
    std::printf("%zu unreferenced new copies of a refresh in progress or interrupted "
                "left as they are (kmpc-admin refresh finishes it)\n",
                in_refresh);
  if (ids.empty()) {
    std::printf("purge-unreferenced: no unreferenced key\n");
    return 0;
  }
  if (a.dry_run) {
    std::printf("purge-unreferenced: dry run, %zu keys would be removed\n", ids.size());
    return 0;
  }
  if (!a.yes && !Confirmed(ids.size())) {
    std::printf("purge-unreferenced: nothing was removed\n");
    return 1;
  }
  std::printf("purge-unreferenced: looking again in %d s (--grace-ms)\n", grace_ms / 1000);
  std::fflush(stdout);
  absl::SleepFor(absl::Milliseconds(grace_ms));
  auto second = LookForPurge(**clusters, **kdb);
  if (!second.ok()) return Fail(second.status());
  std::vector<std::string> again = Unreferenced(*second, &in_refresh);
  return RemoveUnreferenced(**clusters, ids, *second,
                            std::set<std::string>(again.begin(), again.end()));
}

int DropUserCtrCommand(const Args& a, const Config& cfg) {
  if (a.all == !a.principals.empty()) Usage("drop-user-ctr takes --all or principals");
  DropUserCtrOptions o;
  o.all = a.all;
  o.principals = a.principals;
  o.dry_run = a.dry_run;
  if (!a.grace_ms.empty()) {
    int ms = 0;
    if (!absl::SimpleAtoi(a.grace_ms, &ms) || ms < 0) Usage("--grace-ms needs a number");
    o.grace = absl::Milliseconds(ms);
  }
  auto clusters = Clusters::Connect(cfg);
  if (!clusters.ok()) return Fail(clusters.status());
  auto kdb = Kdb::Open(cfg.realm);
  if (!kdb.ok()) return Fail(kdb.status());
  return DropUserCtr(**clusters, **kdb, o);
}

}  // namespace
}  // namespace kmpc::admin

int main(int argc, char** argv) {
  using namespace kmpc::admin;
  // Never write a key (a password, a KDB key, the dealt shares) to a core
  // dump: no core file, and not dumpable (no ptrace by our uid either).
  {
    struct rlimit none = {0, 0};
    if (setrlimit(RLIMIT_CORE, &none) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
      std::perror("kmpc-admin: cannot disable core dumps");
      return 1;
    }
  }
  // Our own messages name the server and the cause; gRPC's internal log
  // lines would only repeat them (GRPC_VERBOSITY=ERROR brings them back).
  setenv("GRPC_VERBOSITY", "NONE", /*overwrite=*/0);
  Args a = ParseArgs(argc, argv);
  auto cfg = LoadConfig(a);
  if (!cfg.ok()) return Fail(cfg.status());
  if (a.command == "share") return Share(a, *cfg);
  if (a.command == "refresh") {
    auto clusters = Clusters::Connect(*cfg);
    if (!clusters.ok()) return Fail(clusters.status());
    return RunRefreshCommand(**clusters, cfg->realm, a.principals, a.all, a.quiet);
  }
  if (a.command == "rebuild-party") {
    if (a.principals.size() != 1 ||
        (a.principals[0] != "0" && a.principals[0] != "1" && a.principals[0] != "2"))
      Usage("rebuild-party takes one party index: 0, 1 or 2");
    if (a.all) Usage("rebuild-party takes no --all: it covers every key");
    auto clusters = Clusters::Connect(*cfg);
    if (!clusters.ok()) return Fail(clusters.status());
    int c = 1;
    if ((!a.cluster.empty() && !absl::SimpleAtoi(a.cluster, &c)) || c < 1 ||
        c > static_cast<int>((*clusters)->size()))
      Usage(absl::StrCat("--cluster must be 1 to ", (*clusters)->size()));
    return RunRefreshCommand(**clusters, cfg->realm, {}, false, a.quiet,
                             a.principals[0][0] - '0', c - 1);
  }
  if (a.command == "breaker-reset") return BreakerReset(a, *cfg);
  if (a.command == "rewrite-kdb") {
    if (!a.principals.empty()) Usage("rewrite-kdb takes no arguments");
    auto kdb = Kdb::Open(cfg->realm);
    if (!kdb.ok()) return Fail(kdb.status());
    return RewriteKdbAfterMove(std::move(*kdb), "rewrite-kdb") ? 0 : 1;
  }
  if (a.command == "set-kind") return SetKind(a, *cfg);
  if (a.command == "drop-user-ctr") return DropUserCtrCommand(a, *cfg);
  if (a.command == "purge-unreferenced") {
    if (!a.principals.empty()) Usage("purge-unreferenced takes no arguments");
    return PurgeUnreferenced(a, *cfg);
  }
  if (a.command == "status") {
    if (!a.principals.empty()) Usage("status takes no principals");
    return Status(a, *cfg);
  }
  Usage("unknown command " + a.command);
}
