#include "admin/refresh.h"

#include <openssl/rand.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "admin/cluster.h"
#include "admin/kdb.h"
#include "contract.h"
#include "util/hex.h"

namespace kmpc::admin {
namespace {

namespace pb = ::kmpc::v1;
using client::AdminClient;
using client::kParties;

constexpr size_t kHalf = contract::kKeyIdSize / 2;

std::string Hex(const std::string& b) { return absl::BytesToHexString(b); }

// The lineage half of a refreshed id (refresh.h).
std::string LineageTail(const std::string& old_id) {
  static constexpr char kTag[] = "kmpc-refresh-lineage-v1";
  std::string in = std::string(kTag, sizeof kTag - 1) + old_id;
  unsigned char h[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(in.data(), in.size(), h, &len, EVP_sha256(), nullptr) != 1 || len < kHalf)
    std::abort();  // no SHA-256: nothing here can work
  return std::string(reinterpret_cast<const char*>(h), kHalf);
}

// The first error among the three servers' answers, or OK.
absl::Status FirstError(const std::array<absl::Status, kParties>& st) {
  for (const auto& s : st)
    if (!s.ok()) return s;
  return absl::OkStatus();
}

class Run {
 public:
  Run(AdminClient& cluster, const ReferenceHooks& refs, const RefreshOptions& o)
      : cluster_(cluster), refs_(refs), o_(o), start_(absl::Now()) {}

  absl::StatusOr<RefreshReport> Go();

 private:
  // Which servers hold each id (ListKeys on all three).
  absl::Status ListAll();
  // Pairs (X, N) an earlier run left behind among `targets_`: finishes them.
  absl::Status Recover();
  // One batch of RefreshKeys + switches; a cluster error stops the run.
  absl::Status RefreshBatch(const std::vector<std::string>& olds);
  // Deletes the old ids whose grace period is over (all of them: wait).
  void DeleteOld(bool wait_all);
  // Deletes ids nothing refers to from all three servers now.
  void DeleteNow(const std::vector<std::string>& ids, const char* what);
  void Fail(const std::string& id, const std::string& why) {
    ++report_.failed;
    report_.errors.push_back(absl::StrCat(Hex(id), ": ", why));
  }
  void Progress(bool finished) {
    if (!o_.progress) return;
    RefreshProgress p;
    p.done = report_.refreshed;
    p.failed = report_.failed;
    p.total = report_.total;
    const double secs = absl::ToDoubleSeconds(absl::Now() - start_);
    p.rate = secs > 0 ? p.done / secs : 0;
    p.finished = finished;
    o_.progress(p);
  }

  AdminClient& cluster_;
  const ReferenceHooks& refs_;
  const RefreshOptions& o_;
  const absl::Time start_;
  RefreshReport report_;
  std::map<std::string, std::array<bool, kParties>> where_;
  std::vector<std::string> targets_;
  // Old ids to delete and when they may go (switch time + grace).
  struct Old {
    absl::Time when;
    std::string old_id;
    std::string new_id;  // empty: nothing referred to old_id
    int checks = 0;      // KDB checks that found new_id in place
    int tries = 0;       // switches made again, failed checks
  };
  std::deque<Old> old_;
};

absl::Status Run::ListAll() {
  auto lists = cluster_.ListKeys();
  for (int i = 0; i < kParties; ++i) {
    if (!lists[i].ok()) return lists[i].status();
    for (const auto& k : *lists[i]) {
      where_[k.key_id()][i] = true;
    }
  }
  return absl::OkStatus();
}

absl::Status Run::Recover() {
  std::map<std::string, std::string> by_tail;  // lineage tail -> old id
  for (const auto& [id, on] : where_) by_tail[LineageTail(id)] = id;
  std::set<std::string> targets(targets_.begin(), targets_.end());
  std::set<std::string> gone;  // ids no longer to refresh
  std::vector<std::string> partial;
  for (const auto& [n, on] : where_) {
    auto it = by_tail.find(n.substr(kHalf));
    if (it == by_tail.end() || it->second == n) continue;
    const std::string& x = it->second;
    if (!o_.all && targets.count(x) == 0 && targets.count(n) == 0) continue;
    auto ref_x = refs_.is_referenced(x);
    if (!ref_x.ok()) return ref_x.status();
    auto ref_n = refs_.is_referenced(n);
    if (!ref_n.ok()) return ref_n.status();
    const bool n_complete = on[0] && on[1] && on[2];
    // A rebuild's old ids are on the survivors only.
    if (o_.rebuild_party >= 0 && !*ref_x && !*ref_n && !n_complete) {
      partial.push_back(n);
      gone.insert(n);
      ++report_.recovered;
      continue;
    }
    if (*ref_n && !*ref_x) {
      // Switched, old id not yet deleted: delete it after the grace.
      old_.push_back({absl::Now() + o_.grace, x, n});
      gone.insert(x);
      gone.insert(n);
    } else if (*ref_x && !*ref_n) {
      partial.push_back(n);  // never referenced
      gone.insert(n);
    } else if (!*ref_x && !*ref_n) {
      if (n_complete) {
        old_.push_back({absl::Now(), x, ""});  // nothing referred to it
        gone.insert(x);
      } else {
        partial.push_back(n);
      }
      gone.insert(n);
    } else {
      report_.warnings.push_back(absl::StrCat(
          "key ids ", Hex(x), " and ", Hex(n),
          " (a refresh of it) are both referenced: left as they are"));
      gone.insert(x);
      gone.insert(n);
      continue;
    }
    ++report_.recovered;
  }
  DeleteNow(partial, "unreferenced copies left by an earlier refresh");
  std::vector<std::string> kept;
  for (const std::string& t : targets_)
    if (gone.count(t) == 0) kept.push_back(t);
  targets_ = std::move(kept);
  return absl::OkStatus();
}

void Run::DeleteNow(const std::vector<std::string>& ids, const char* what) {
  for (size_t i = 0; i < ids.size(); i += o_.delete_batch) {
    std::vector<std::string> part(ids.begin() + i,
                                  ids.begin() + std::min(ids.size(), i + o_.delete_batch));
    absl::Status st = FirstError(cluster_.DeleteKeysEach(part));
    if (!st.ok())
      report_.warnings.push_back(absl::StrCat(
          "could not delete ", part.size(), " ", what, " (", st.message(),
          "); run refresh again to clean up"));
  }
}

void Run::DeleteOld(bool finish) {
  constexpr int kMaxTries = 10;
  const auto& now_ref = refs_.is_referenced_now ? refs_.is_referenced_now
                                                : refs_.is_referenced;
  while (!old_.empty()) {
    if (!finish && old_.size() < o_.delete_batch) return;  // in bulk
    if (finish) {
      absl::Time first = old_.front().when;
      for (const Old& e : old_) first = std::min(first, e.when);
      const absl::Duration left = first - absl::Now();
      if (left > absl::ZeroDuration()) absl::SleepFor(left);
    }
    const absl::Time now = absl::Now();
    std::vector<std::string> due;
    std::vector<Old> again;
    for (auto it = old_.begin(); it != old_.end();) {
      if (it->when > now) {
        ++it;
        continue;
      }
      Old e = std::move(*it);
      it = old_.erase(it);
      if (e.new_id.empty()) {
        due.push_back(e.old_id);
        continue;
      }
      auto live = now_ref(e.old_id);
      if (live.ok() && *live) {
        // Undone by a concurrent write of the entry: switch again.
        absl::Status sw = refs_.switch_reference(e.old_id, e.new_id);
        if (!sw.ok() || ++e.tries > kMaxTries) {
          report_.warnings.push_back(absl::StrCat(
              "key id ", Hex(e.old_id), " is referenced again after its refresh to ",
              Hex(e.new_id), sw.ok() ? "" : absl::StrCat(" (", sw.message(), ")"),
              ": both kept; run refresh again"));
          continue;
        }
        e.checks = 0;
        ++report_.reswitched;
      } else if (!live.ok()) {
        if (++e.tries > kMaxTries) {
          report_.warnings.push_back(absl::StrCat(
              "cannot check the KDB for key id ", Hex(e.old_id), " (",
              live.status().message(), "): not deleted; run refresh again"));
          continue;
        }
      } else if (++e.checks >= 2) {
        due.push_back(e.old_id);
        continue;
      }
      e.when = now + o_.grace;
      again.push_back(std::move(e));
    }
    for (Old& e : again) old_.push_back(std::move(e));
    DeleteNow(due, "old key ids");
    if (!finish) return;
  }
}

absl::Status Run::RefreshBatch(const std::vector<std::string>& olds) {
  std::vector<AdminClient::RefreshPair> pairs;
  for (const std::string& x : olds) pairs.push_back({x, NewRefreshId(x)});
  auto answers = cluster_.RefreshKeys(pairs, o_.rpc_timeout, o_.rebuild_party);
  absl::Status call;
  for (const auto& a : answers)
    if (!a.ok() && call.ok()) call = a.status();
  std::vector<std::string> drop;  // new ids to take off all three servers
  if (!call.ok()) {
    // Some server may have stored the batch: none of it is used.
    for (const auto& p : pairs) drop.push_back(p.new_key_id);
    DeleteNow(drop, "new key ids of a failed refresh batch");
    for (const auto& p : pairs) Fail(p.old_key_id, std::string(call.message()));
    return IsClusterError(call) ? call : absl::OkStatus();
  }
  for (size_t j = 0; j < pairs.size(); ++j) {
    const auto& [x, n] = pairs[j];
    std::string why;
    for (int i = 0; i < kParties && why.empty(); ++i) {
      const pb::RefreshResult& r = (*answers[i])[j];
      if (r.new_key_id() != n)
        why = absl::StrCat(cluster_.Describe(i), " answered for another pair");
      else if (r.status() != pb::JOB_OK)
        why = absl::StrCat(pb::JobStatus_Name(r.status()), ": ", r.detail());
    }
    if (!why.empty()) {
      drop.push_back(n);
      Fail(x, why);
      continue;
    }
    // N is complete on all three servers: switch the reference, if any.
    auto referenced = refs_.is_referenced(x);
    absl::Status sw = referenced.ok() ? absl::OkStatus() : referenced.status();
    if (sw.ok() && *referenced) sw = refs_.switch_reference(x, n);
    if (!sw.ok()) {
      drop.push_back(n);
      Fail(x, absl::IsNotFound(sw)
                  ? "its key handle changed during the refresh (e.g. a new "
                    "password); left as it is"
                  : absl::StrCat("switching the key handle failed, the old key "
                                 "stays in use: ", sw.message()));
      continue;
    }
    // The KDC may still name X in batches in flight (see refresh.h); an
    // unreferenced X is used by nobody.
    if (*referenced)
      old_.push_back({absl::Now() + o_.grace, x, n});
    else
      old_.push_back({absl::Now(), x, ""});
    ++report_.refreshed;
  }
  DeleteNow(drop, "new key ids of failed refreshes");
  DeleteOld(false);
  return absl::OkStatus();
}

absl::StatusOr<RefreshReport> Run::Go() {
  if (o_.batch == 0 || o_.delete_batch == 0)
    return absl::InvalidArgumentError("batch sizes must be positive");
  if (absl::Status st = cluster_.CheckReachable(); !st.ok())
    return absl::Status(st.code(), absl::StrCat(st.message(), "; nothing was refreshed"));
  if (absl::Status st = ListAll(); !st.ok()) return st;
  if (o_.rebuild_party >= 0) {
    // Every key both survivors hold and the new server does not.
    const int l = o_.rebuild_party, a = (l + 1) % kParties, b = (l + 2) % kParties;
    size_t held = 0;
    for (const auto& [id, on] : where_) {
      if (on[a] && on[b] && !on[l]) targets_.push_back(id);
      if (on[l]) ++held;
    }
    if (held > 0 && targets_.empty() && where_.size() == held)
      report_.warnings.push_back(absl::StrCat(
          cluster_.Describe(l), " already holds every key: nothing to rebuild"));
  } else if (o_.all) {
    for (const auto& [id, on] : where_)
      if (on[0] && on[1] && on[2]) targets_.push_back(id);
  } else {
    for (const std::string& id : o_.key_ids) {
      auto it = where_.find(id);
      if (it == where_.end() || !(it->second[0] && it->second[1] && it->second[2]))
        return absl::NotFoundError(absl::StrCat(
            "key id ", Hex(id), " is not on all three servers (kmpc-admin status); "
            "nothing was refreshed"));
      targets_.push_back(id);
    }
  }
  if (absl::Status st = Recover(); !st.ok()) return st;
  report_.total += targets_.size();
  Progress(false);
  for (size_t i = 0; i < targets_.size(); i += o_.batch) {
    std::vector<std::string> part(targets_.begin() + i,
                                  targets_.begin() + std::min(targets_.size(), i + o_.batch));
    absl::Status st = RefreshBatch(part);
    Progress(false);
    if (!st.ok()) {
      report_.errors.push_back(absl::StrCat(
          "stopping: ", st.message(), "; ", targets_.size() - i - part.size(),
          " keys not attempted (run refresh again)"));
      report_.failed += targets_.size() - i - part.size();
      break;
    }
  }
  DeleteOld(true);
  report_.elapsed = absl::Now() - start_;
  Progress(true);
  return report_;
}

}  // namespace

std::string NewRefreshId(const std::string& old_id) {
  std::string id(kHalf, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(id.data()), kHalf) != 1)
    std::abort();  // no randomness: never make a predictable id
  return id + LineageTail(old_id);
}

bool IsRefreshOf(const std::string& new_id, const std::string& old_id) {
  return new_id.size() == contract::kKeyIdSize && new_id.substr(kHalf) == LineageTail(old_id);
}

absl::StatusOr<RefreshReport> RefreshKeys(AdminClient& cluster,
                                          const ReferenceHooks& refs,
                                          const RefreshOptions& options) {
  Run run(cluster, refs, options);
  return run.Go();
}

namespace {

// The other clusters' part of a switch (refresh.h): X -> N on each, all
// three servers JOB_OK, before the KDB names N. kFailedPrecondition (not
// a cluster error: the run goes on with the next key) if any refused.
absl::Status MirrorRefresh(Clusters& clusters, size_t run_on,
                           const std::string& old_id, const std::string& new_id,
                           absl::Duration timeout) {
  for (size_t c = 0; c < clusters.size(); ++c) {
    if (c == run_on) continue;
    auto answers = clusters.at(c).RefreshKeys({{old_id, new_id}}, timeout);
    std::string why;
    for (int i = 0; i < kParties && why.empty(); ++i) {
      if (!answers[i].ok())
        why = std::string(answers[i].status().message());
      else if (answers[i]->size() != 1 || (*answers[i])[0].new_key_id() != new_id)
        why = absl::StrCat(clusters.at(c).Describe(i), " answered for another pair");
      else if ((*answers[i])[0].status() != pb::JOB_OK)
        why = absl::StrCat(pb::JobStatus_Name((*answers[i])[0].status()), ": ",
                           (*answers[i])[0].detail());
    }
    if (!why.empty()) {
      // N must not stay half-made on this cluster (nor on those before).
      for (size_t d = 0; d <= c; ++d)
        if (d != run_on) (void)clusters.at(d).DeleteKey(new_id);
      return absl::FailedPreconditionError(
          absl::StrCat(clusters.Prefix(c), "not refreshed there: ", why));
    }
  }
  return absl::OkStatus();
}

// After the run: each other cluster drops the ids that nothing refers to
// and that the run's cluster no longer holds (refresh.h). Listed before the
// run's cluster (see there). Returns warnings.
std::vector<std::string> SyncOthers(Clusters& clusters, size_t run_on,
                                    const ReferenceHooks& refs) {
  std::vector<std::string> warnings;
  for (size_t c = 0; c < clusters.size(); ++c) {
    if (c == run_on) continue;
    std::set<std::string> theirs, ours;
    auto lists = clusters.at(c).ListKeys();
    for (const auto& l : lists) {
      if (!l.ok()) {
        warnings.push_back(absl::StrCat(clusters.Prefix(c), "old ids not removed: ",
                                        l.status().message()));
        theirs.clear();
        break;
      }
      for (const auto& k : *l) theirs.insert(k.key_id());
    }
    if (theirs.empty()) continue;
    auto mine = clusters.at(run_on).ListKeys();
    for (const auto& l : mine) {
      if (!l.ok()) return warnings;  // cannot tell: keep everything
      for (const auto& k : *l) ours.insert(k.key_id());
    }
    std::vector<std::string> drop;
    for (const std::string& id : theirs) {
      if (ours.count(id)) continue;
      auto ref = refs.is_referenced_now ? refs.is_referenced_now(id)
                                        : refs.is_referenced(id);
      if (ref.ok() && !*ref) drop.push_back(id);
    }
    if (drop.empty()) continue;
    absl::Status st = FirstError(clusters.at(c).DeleteKeysEach(drop));
    if (!st.ok())
      warnings.push_back(absl::StrCat(clusters.Prefix(c), drop.size(),
                                      " old ids not removed: ", st.message()));
  }
  return warnings;
}

// The command line of refresh / rebuild-party into *o; 0, or 2 after a
// usage message.
int ParseRefreshArgs(const std::vector<std::string>& args, bool all, int rebuild_party,
                     RefreshOptions* o) {
  o->all = all;
  o->rebuild_party = rebuild_party;
  if (rebuild_party >= 0) {
    if (!args.empty() || all) {
      std::fprintf(stderr, "kmpc-admin: rebuild-party takes only the party index\n");
      return 2;
    }
  } else if (all == !args.empty()) {
    std::fprintf(stderr, "kmpc-admin: refresh needs --all or key ids (hex, as "
                         "`kmpc-admin status` prints them), not both\n");
    return 2;
  }
  for (const std::string& h : args) {
    std::string id;
    if (h.size() != 2 * contract::kKeyIdSize || !util::HexToBytes(h, &id)) {
      std::fprintf(stderr, "kmpc-admin: refresh: %s is not a key id (%zu hex digits)\n",
                   h.c_str(), 2 * contract::kKeyIdSize);
      return 2;
    }
    o->key_ids.push_back(std::move(id));
  }
  return 0;
}

// The index of key handles: key id -> principal, from the KDB as it is now
// (Kdb, kdb.h); a handle changed later is caught by the switch (NOT_FOUND)
// and that key left as it is.
absl::StatusOr<std::map<std::string, std::string>> HandleIndex(const std::string& realm) {
  std::map<std::string, std::string> holder;
  auto kdb = Kdb::Open(realm);
  if (!kdb.ok()) return kdb.status();
  auto names = (*kdb)->ListPrincipals();
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    auto info = (*kdb)->Lookup(name);
    if (!info.ok()) continue;  // deleted meanwhile
    for (const KeyEntry& e : info->keys)
      if (e.is_handle) holder[e.key_id] = info->name;
  }
  return holder;
}

// The KDB's side of a refresh run (refresh.h's ReferenceHooks): which ids a
// handle names, and the switch of a handle from an old id to its new one,
// mirrored first on the other clusters.
struct KdbReferences {
  Clusters& clusters;
  size_t run_on;
  absl::Duration rpc_timeout;
  std::map<std::string, std::string> holder;        // id -> principal, kept current
  std::map<std::string, std::string> first_holder;  // principal of each old id
  std::unique_ptr<Kdb> live_kdb;
  std::set<std::string> mirrored;                   // new ids the other clusters hold

  absl::StatusOr<bool> ReferencedNow(const std::string& id) {
    auto it = first_holder.find(id);
    if (it == first_holder.end()) return holder.count(id) != 0;
    auto info = live_kdb->Lookup(it->second);
    if (absl::IsNotFound(info.status())) return false;
    if (!info.ok()) return info.status();
    for (const KeyEntry& e : info->keys)
      if (e.is_handle && e.key_id == id) return true;
    return false;
  }

  absl::Status Switch(const std::string& old_id, const std::string& new_id) {
    auto it = first_holder.find(old_id);
    if (it == first_holder.end()) return absl::NotFoundError("no handle names it");
    const std::string name = it->second;
    // A switch made again (a KDC wrote the old handle back) finds N on the
    // other clusters already.
    if (clusters.size() > 1 && !mirrored.count(new_id)) {
      if (absl::Status m = MirrorRefresh(clusters, run_on, old_id, new_id, rpc_timeout);
          !m.ok())
        return m;
      mirrored.insert(new_id);
    }
    absl::Status st = live_kdb->SwitchKeyId(name, old_id, new_id);
    if (st.ok()) {
      holder.erase(old_id);
      holder[new_id] = name;
    }
    return st;
  }

  ReferenceHooks Hooks() {
    ReferenceHooks refs;
    refs.is_referenced = [this](const std::string& id) -> absl::StatusOr<bool> {
      return holder.count(id) != 0;
    };
    refs.is_referenced_now = [this](const std::string& id) { return ReferencedNow(id); };
    refs.switch_reference = [this](const std::string& old_id, const std::string& new_id) {
      return Switch(old_id, new_id);
    };
    return refs;
  }
};

// Progress on stderr: a line updated in place on a terminal, else only the
// last one; none when quiet.
std::function<void(const RefreshProgress&)> ProgressPrinter(bool quiet, const char* what) {
  if (quiet) return nullptr;
  const bool tty = isatty(STDERR_FILENO);
  return [tty, what](const RefreshProgress& p) {
    if (!tty && !p.finished) return;
    std::fprintf(stderr, "%s%s: %zu/%zu keys, %zu failed, %.0f keys/s%s",
                 tty ? "\r" : "", what, p.done, p.total, p.failed, p.rate,
                 p.finished || !tty ? "\n" : "");
    std::fflush(stderr);
  };
}

int PrintReport(const RefreshReport& report, const char* what, bool rebuild) {
  for (const std::string& e : report.errors)
    std::fprintf(stderr, "kmpc-admin: %s: %s\n", what, e.c_str());
  for (const std::string& w : report.warnings)
    std::fprintf(stderr, "kmpc-admin: %s: warning: %s\n", what, w.c_str());
  std::printf("kmpc-admin: %zu %s, %zu failed, %zu finished from an earlier "
              "run, in %.1f s (%zu key handle switches undone by the KDC's "
              "concurrent writes and made again)\n",
              report.refreshed, rebuild ? "rebuilt" : "refreshed", report.failed,
              report.recovered, absl::ToDoubleSeconds(report.elapsed), report.reswitched);
  return report.failed == 0 ? 0 : 1;
}

int PrintError(const absl::Status& st) {
  std::fprintf(stderr, "kmpc-admin: %s\n", std::string(st.message()).c_str());
  return 1;
}

}  // namespace

int RunRefreshCommand(Clusters& clusters, const std::string& realm,
                      const std::vector<std::string>& args, bool all, bool quiet,
                      int rebuild_party, size_t run_on) {
  const char* what = rebuild_party >= 0 ? "rebuild" : "refresh";
  RefreshOptions o;
  if (int usage = ParseRefreshArgs(args, all, rebuild_party, &o); usage != 0) return usage;
  auto holder = HandleIndex(realm);
  if (!holder.ok()) return PrintError(holder.status());
  auto live_kdb = Kdb::Open(realm);
  if (!live_kdb.ok()) return PrintError(live_kdb.status());
  KdbReferences kdb{clusters, run_on, o.rpc_timeout, *holder, *holder, *std::move(live_kdb), {}};
  const ReferenceHooks refs = kdb.Hooks();
  o.progress = ProgressPrinter(quiet, what);
  if (clusters.size() > 1) {
    if (absl::Status st = clusters.CheckReachable(); !st.ok()) {
      std::fprintf(stderr, "kmpc-admin: %s; nothing was %s\n",
                   std::string(st.message()).c_str(),
                   rebuild_party >= 0 ? "rebuilt" : "refreshed");
      return 1;
    }
  }
  auto report = RefreshKeys(clusters.at(run_on), refs, o);
  if (!report.ok()) return PrintError(report.status());
  if (clusters.size() > 1)
    for (std::string& w : SyncOthers(clusters, run_on, refs))
      report->warnings.push_back(std::move(w));
  return PrintReport(*report, what, rebuild_party >= 0);
}

}  // namespace kmpc::admin
