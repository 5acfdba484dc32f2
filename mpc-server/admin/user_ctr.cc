#include "admin/user_ctr.h"

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "admin/cluster.h"

namespace kmpc::admin {
namespace {

// What the servers list of every key id (a key's record is the same on
// all of them: status compares), and the ids every server of every
// cluster lists.
struct Listing {
  KeyInfos infos;
  std::set<std::string> everywhere;
};

absl::StatusOr<Listing> ListInfos(Clusters& clusters) {
  Listing out;
  std::map<std::string, size_t> servers;  // key id -> servers listing it
  for (size_t c = 0; c < clusters.size(); ++c) {
    auto lists = clusters.at(c).ListKeys();
    for (const auto& list : lists) {
      if (!list.ok())
        return absl::Status(list.status().code(),
                            absl::StrCat(clusters.Prefix(c), list.status().message(),
                                         "; nothing was changed"));
      for (const auto& k : *list) {
        out.infos.emplace(k.key_id(), k);
        ++servers[k.key_id()];
      }
    }
  }
  for (const auto& [id, n] : servers)
    if (n == 3 * clusters.size()) out.everywhere.insert(id);
  return out;
}

// What drop-user-ctr does with one principal.
struct Plan {
  std::set<std::string> copies;  // key ids of the aes*-ctr-mpc copies
  std::string blocker;           // why they stay, or empty
};

// An aes*-cts handle the user logs in with once the copies are gone: at
// the current kvno, its shares on every server of every cluster, a user's
// password-derived key (a service's would be another key).
bool UsableCtsHandle(const PrincipalInfo& info, const KeyEntry& e, const Listing& l) {
  if (!e.is_handle || !IsCtsEnctype(e.enctype) || e.kvno != info.kvno ||
      !l.everywhere.count(e.key_id))
    return false;
  const kmpc::v1::KeyKind kind = l.infos.at(e.key_id).kind();
  return kind == kmpc::v1::KEY_KIND_USER || kind == kmpc::v1::KEY_KIND_USER_SERVICE;
}

Plan PlanFor(const PrincipalInfo& info, const Listing& l) {
  Plan plan;
  bool cts_now = false, real = false;
  for (const KeyEntry& e : info.keys) {
    if (!e.is_handle) real = true;
    else if (IsUserCtrCopy(info.name, e, l.infos)) plan.copies.insert(e.key_id);
    else if (UsableCtsHandle(info, e, l)) cts_now = true;
  }
  if (plan.copies.empty()) return plan;
  if (real)
    plan.blocker = "also holds real keys in the KDB: move them first (kmpc-admin share)";
  else if (!cts_now)
    plan.blocker = absl::StrCat(
        "has no aes*-cts handle of a user's key at kvno ", info.kvno,
        " whose shares every server holds: it needs a new password (kadmin cpw, kpasswd, or kmpc-admin share "
        "--password-stdin --enctype=aes256-cts-hmac-sha1-96), which is dealt "
        "under aes*-cts only");
  return plan;
}

}  // namespace

bool IsUserCtrCopy(const std::string& canon, const KeyEntry& e, const KeyInfos& infos) {
  if (!e.is_handle || !IsMpcEnctype(e.enctype) || TicketGranting(canon)) return false;
  auto it = infos.find(e.key_id);
  return it != infos.end() && it->second.kind() != kmpc::v1::KEY_KIND_SERVICE;
}

bool ReportUserCtr(const PrincipalInfo& info, const KeyInfos& infos) {
  std::vector<std::string> copies;
  for (const KeyEntry& e : info.keys)
    if (IsUserCtrCopy(info.name, e, infos))
      copies.push_back(absl::StrCat(EnctypeName(e.enctype), " kvno ", e.kvno));
  if (copies.empty()) return true;
  std::printf("kdb: %s holds an aes*-ctr-mpc copy of a user's key (%s): its "
              "logins' timestamp and reply reach every server whole, an offline "
              "verifier of the password (kmpc-admin drop-user-ctr %s)\n",
              info.name.c_str(), absl::StrJoin(copies, ", ").c_str(), info.name.c_str());
  return false;
}

// What drop-user-ctr did, counted.
struct Tally {
  size_t dropped_from = 0, would = 0, left = 0, failed = 0;
  // Key ids dropped from the KDB, by principal: their shares go after the
  // grace unless the entry names them again by then (a KDC or kadmind
  // that wrote back an entry it read before the drop).
  std::map<std::string, std::set<std::string>> to_delete;
};

// drop-user-ctr for one principal; `listed`: it was named (not --all).
static void DropOne(Kdb& kdb, const Listing& listing, const std::string& name, bool listed,
             bool dry_run, Tally* t) {
  auto info = kdb.Lookup(name);
  if (!info.ok()) {
    if (!listed && absl::IsNotFound(info.status())) return;  // deleted meanwhile
    std::printf("%s: %s\n", name.c_str(), std::string(info.status().message()).c_str());
    ++t->failed;
    return;
  }
  const Plan plan = PlanFor(*info, listing);
  if (plan.copies.empty()) {
    if (listed) std::printf("%s: no aes*-ctr-mpc copy of a user's key\n", info->name.c_str());
    return;
  }
  std::vector<std::string> ids;
  for (const std::string& id : plan.copies) ids.push_back(absl::BytesToHexString(id));
  const std::string which = absl::StrJoin(ids, ", ");
  const char* plural = plan.copies.size() == 1 ? "y" : "ies";
  if (!plan.blocker.empty()) {
    std::printf("%s: LEFT, %s (key ids %s)\n", info->name.c_str(), plan.blocker.c_str(),
                which.c_str());
    ++t->left;
  } else if (dry_run) {
    std::printf("%s: would drop %zu aes*-ctr-mpc cop%s (key ids %s)\n", info->name.c_str(),
                plan.copies.size(), plural, which.c_str());
    ++t->would;
  } else if (absl::StatusOr<std::set<std::string>> gone =
                 kdb.RemoveHandles(info->name, plan.copies);
             !gone.ok()) {
    std::printf("%s: FAILED, the KDB entry is unchanged: %s\n", info->name.c_str(),
                std::string(gone.status().message()).c_str());
    ++t->failed;
  } else {
    std::printf("%s: dropped %zu aes*-ctr-mpc cop%s from the KDB (key ids %s)\n",
                info->name.c_str(), gone->size(), gone->size() == 1 ? "y" : "ies",
                which.c_str());
    ++t->dropped_from;
    if (!gone->empty()) t->to_delete[info->name] = std::move(*gone);
  }
}

int DropUserCtr(Clusters& clusters, Kdb& kdb, const DropUserCtrOptions& options) {
  auto listing = ListInfos(clusters);
  if (!listing.ok()) {
    std::fprintf(stderr, "kmpc-admin: %s\n",
                 std::string(listing.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> names = options.principals;
  if (options.all) {
    auto all = kdb.ListPrincipals();
    if (!all.ok()) {
      std::fprintf(stderr, "kmpc-admin: %s\n", std::string(all.status().message()).c_str());
      return 1;
    }
    names = std::move(*all);
  }
  Tally t;
  for (const std::string& name : names)
    DropOne(kdb, *listing, name, !options.all, options.dry_run, &t);
  if (!t.to_delete.empty()) {
    // A job the KDC sent under a dropped handle before the KDB write may
    // still be in flight (kdcmpc deadline_ms): its shares stay that long.
    absl::SleepFor(options.grace);
    for (const auto& [name, ids] : t.to_delete) {
      auto now = kdb.Lookup(name);
      for (const std::string& id : ids) {
        bool named = !now.ok();  // unreadable: keep the shares
        if (now.ok())
          for (const KeyEntry& e : now->keys) named = named || (e.is_handle && e.key_id == id);
        if (named) {
          std::printf("key id %s: %s names it again (a concurrent write): its shares "
                      "are kept; run drop-user-ctr again\n",
                      absl::BytesToHexString(id).c_str(), name.c_str());
          ++t.failed;
          continue;
        }
        absl::Status st = clusters.DeleteKey(id);
        if (!st.ok()) {
          std::printf("key id %s: dropped from the KDB but its shares are still on a "
                      "server (kmpc-admin purge-unreferenced removes them): %s\n",
                      absl::BytesToHexString(id).c_str(), std::string(st.message()).c_str());
          ++t.failed;
        }
      }
    }
  }
  if (options.dry_run)
    std::printf("drop-user-ctr: dry run, nothing changed; %zu principals would drop "
                "their copies, %zu would keep them, %zu failures\n",
                t.would, t.left, t.failed);
  else
    std::printf("drop-user-ctr: %zu principals dropped their copies, %zu left with "
                "copies, %zu failures\n",
                t.dropped_from, t.left, t.failed);
  return t.would == 0 && t.left == 0 && t.failed == 0 ? 0 : 1;
}

}  // namespace kmpc::admin
