// kmpc-admin status [--kdb]
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
#include <fnmatch.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "admin/cluster.h"
#include "admin/command.h"
#include "admin/kdb.h"
#include "admin/kdb_rewrite.h"
#include "admin/user_ctr.h"
#include "client/admin_client.h"

namespace kmpc::admin {
namespace {

using client::AdminClient;

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

// status --kdb's lines for the keys on the servers (where) that no KDB
// handle refers to (holder: key id -> its first principal); how many.
size_t ReportUnreferenced(const std::map<std::string, std::array<bool, 3>>& where,
                          const std::map<std::string, std::string>& holder,
                          std::map<std::string, kmpc::v1::KeyInfo>& infos) {
  size_t unreferenced = 0;
  for (const auto& [id, on] : where) {
    if (holder.count(id)) continue;
    ++unreferenced;
    std::printf("kdb: key %s (%s, kvno %u) is on the servers but no KDB handle "
                "refers to it (kmpc-admin purge-unreferenced removes it)\n",
                Hex(id).c_str(), infos[id].label().c_str(), infos[id].kvno());
  }
  return unreferenced;
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
  const size_t unreferenced = ReportUnreferenced(where, holder, infos);
  if (unreferenced > 0) ok = false;
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
// each other's while these differ (batch_agreement.cc, the agreement).
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

// One line per server of a cluster: its health (health: what each answered),
// its breaker, and whether the three run the same --security mode; false
// when there is a problem.
bool HealthStatus(
    AdminClient& cluster,
    const std::array<absl::StatusOr<kmpc::v1::HealthResponse>, client::kParties>& health,
    const char* pre) {
  bool ok = true;
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
  return SameSecurity(modes, pre) && ok;
}

// One cluster's part of status: each server's health, and every key id
// on all three; prints with `prefix` ("cluster 2: " or ""). Adds what it
// lists to *where (key id -> on which servers) and *infos; false when there
// is a problem, *lists_ok false when a server did not list its keys.
bool ClusterStatus(AdminClient& cluster, const std::string& prefix,
                   std::map<std::string, std::array<bool, 3>>* where,
                   std::map<std::string, kmpc::v1::KeyInfo>* infos,
                   bool* lists_ok) {
  auto health = cluster.Health();
  auto lists = cluster.ListKeys();
  const char* pre = prefix.c_str();
  bool ok = HealthStatus(cluster, health, pre);
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

int Status(bool with_kdb, const Config& cfg) {
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
  if (with_kdb) {
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

class StatusCommand : public Command {
 public:
  void Register(CLI::App& app) override { app.add_flag("--kdb", kdb_); }
  int Run(const Context& ctx) override { return Status(kdb_, ctx.cfg); }

 private:
  bool kdb_ = false;
};

std::unique_ptr<Command> MakeStatus() { return std::make_unique<StatusCommand>(); }

}  // namespace

const CommandSpec kStatusCommand = {"status", "status [--kdb]\n", MakeStatus};

}  // namespace kmpc::admin
