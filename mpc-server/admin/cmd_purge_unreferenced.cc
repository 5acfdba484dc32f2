// kmpc-admin purge-unreferenced (--dry-run | --i-am-primary) [--yes]
//   [--grace-ms=N]
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
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "admin/cluster.h"
#include "admin/command.h"
#include "admin/kdb.h"
#include "admin/refresh.h"

namespace kmpc::admin {
namespace {

// purge-unreferenced's options.
struct PurgeOptions {
  bool dry_run = false;
  bool yes = false;           // no question
  bool i_am_primary = false;  // the admin's word
  std::string grace_ms;       // between the two looks
};

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

int PurgeUnreferenced(const PurgeOptions& a, const Config& cfg) {
  if (!a.dry_run && !a.i_am_primary)
    return Usage("purge-unreferenced removes keys only on the realm's primary KDC: run it "
                 "there with --i-am-primary (a replica's KDB lags the primary's, so keys "
                 "dealt since its last update look unreferenced), or with --dry-run");
  // The key dealer gives up on a dealing after 120 s: a key dealt just
  // before the first look and written to the KDB up to then is still
  // referenced at the second look.
  int grace_ms = 120000;
  if (!a.grace_ms.empty() && (!absl::SimpleAtoi(a.grace_ms, &grace_ms) || grace_ms < 0))
    return Usage("--grace-ms must be a number of milliseconds");
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

class PurgeUnreferencedCommand : public Command {
 public:
  void Register(CLI::App& app) override {
    app.add_flag("--dry-run", o_.dry_run);
    app.add_flag("--i-am-primary", o_.i_am_primary);
    app.add_flag("--yes", o_.yes);
    app.add_option("--grace-ms", o_.grace_ms);
  }
  int Run(const Context& ctx) override { return PurgeUnreferenced(o_, ctx.cfg); }

 private:
  PurgeOptions o_;
};

std::unique_ptr<Command> MakePurgeUnreferenced() {
  return std::make_unique<PurgeUnreferencedCommand>();
}

}  // namespace

const CommandSpec kPurgeUnreferencedCommand = {
    "purge-unreferenced",
    "purge-unreferenced (--dry-run | --i-am-primary)\n"
    "                  [--yes] [--grace-ms=N]\n"
    "           remove the shares of this realm's keys no KDB handle refers to\n"
    "           (after kadmin purgekeys); lists them, then asks unless --yes; only\n"
    "           on the realm's primary KDC, which --i-am-primary confirms\n",
    MakePurgeUnreferenced};

}  // namespace kmpc::admin
