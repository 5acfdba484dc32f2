#include "admin/user_ctr.h"

#include <cstdio>
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

bool IsMpcEnctype(int32_t enctype) {
  return enctype == kEnctypeAes128Mpc || enctype == kEnctypeAes256Mpc;
}

// What the servers list of every key id, from every server of every
// cluster (a key's record is the same on all of them: status compares).
absl::StatusOr<KeyInfos> ListInfos(Clusters& clusters) {
  KeyInfos infos;
  for (size_t c = 0; c < clusters.size(); ++c) {
    auto lists = clusters.at(c).ListKeys();
    for (const auto& list : lists) {
      if (!list.ok())
        return absl::Status(list.status().code(),
                            absl::StrCat(clusters.Prefix(c), list.status().message(),
                                         "; nothing was changed"));
      for (const auto& k : *list) infos.emplace(k.key_id(), k);
    }
  }
  return infos;
}

// What drop-user-ctr does with one principal.
struct Plan {
  std::set<std::string> copies;  // key ids of the aes*-ctr-mpc copies
  std::string blocker;           // why they stay, or empty
};

Plan PlanFor(const PrincipalInfo& info, const KeyInfos& infos) {
  Plan plan;
  bool cts_now = false, real = false;
  for (const KeyEntry& e : info.keys) {
    if (!e.is_handle) real = true;
    else if (IsUserCtrCopy(info.name, e, infos)) plan.copies.insert(e.key_id);
    else if (IsCtsEnctype(e.enctype) && e.kvno == info.kvno) cts_now = true;
  }
  if (plan.copies.empty()) return plan;
  if (real)
    plan.blocker = "also holds real keys in the KDB: move them first (kmpc-admin share)";
  else if (!cts_now)
    plan.blocker = absl::StrCat(
        "has no aes*-cts handle at kvno ", info.kvno,
        ": it needs a new password (kadmin cpw, kpasswd, or kmpc-admin share "
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
  std::vector<std::string> to_delete;  // key ids dropped from the KDB
};

// drop-user-ctr for one principal; `listed`: it was named (not --all).
static void DropOne(Kdb& kdb, const KeyInfos& infos, const std::string& name, bool listed,
             bool dry_run, Tally* t) {
  auto info = kdb.Lookup(name);
  if (!info.ok()) {
    if (!listed && absl::IsNotFound(info.status())) return;  // deleted meanwhile
    std::printf("%s: %s\n", name.c_str(), std::string(info.status().message()).c_str());
    ++t->failed;
    return;
  }
  const Plan plan = PlanFor(*info, infos);
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
  } else if (absl::StatusOr<size_t> n = kdb.RemoveHandles(info->name, plan.copies); !n.ok()) {
    std::printf("%s: FAILED, the KDB entry is unchanged: %s\n", info->name.c_str(),
                std::string(n.status().message()).c_str());
    ++t->failed;
  } else {
    std::printf("%s: dropped %zu aes*-ctr-mpc cop%s from the KDB (key ids %s)\n",
                info->name.c_str(), *n, *n == 1 ? "y" : "ies", which.c_str());
    ++t->dropped_from;
    t->to_delete.insert(t->to_delete.end(), plan.copies.begin(), plan.copies.end());
  }
}

int DropUserCtr(Clusters& clusters, Kdb& kdb, const DropUserCtrOptions& options) {
  auto infos = ListInfos(clusters);
  if (!infos.ok()) {
    std::fprintf(stderr, "kmpc-admin: %s\n", std::string(infos.status().message()).c_str());
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
    DropOne(kdb, *infos, name, !options.all, options.dry_run, &t);
  if (!t.to_delete.empty()) {
    // A job the KDC sent under a dropped handle before the KDB write may
    // still be in flight (kdcmpc deadline_ms): its shares stay that long.
    absl::SleepFor(options.grace);
    for (const std::string& id : t.to_delete) {
      absl::Status st = clusters.DeleteKey(id);
      if (!st.ok()) {
        std::printf("key id %s: dropped from the KDB but its shares are still on a "
                    "server (kmpc-admin purge-unreferenced removes them): %s\n",
                    absl::BytesToHexString(id).c_str(), std::string(st.message()).c_str());
        ++t.failed;
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
