// kmpc-admin refresh: re-randomises the shares of keys on the three MPC
// servers so that shares (or backups of stores) from before and after a
// refresh never combine into a key (kmpc.proto RefreshKeys; the protocol is
// in mpc-server/src/engine/refresh.h: proactive secret sharing, Herzberg et
// al., CRYPTO 1995, in the replicated form of Araki et al., CCS 2016,
// section 2.2). Neither the admin nor any server learns a key or another
// server's mask: the admin only names (old id, new id) pairs.
//
// Per key X, a refresh moves it to a new id N, so that at every moment the
// KDC's reference names a key id that all three servers hold:
//   1. RefreshKeys(X -> N) on all three servers (batches of pairs, in
//      lock-step on their ring); N is used only if all three answered OK,
//      else N is deleted from all three again (X is untouched);
//   2. SwitchReference(X, N): the one KDB write that makes the handle that
//      named X name N (same enctype, kvno, salt): atomic per principal;
//   3. after a grace period (the KDC may have batches in flight that name X:
//      kdcmpc's deadline_ms, 3 s by default, and speculate_ttl_ms, 4 s), and
//      only once the KDB was seen naming N (not X) at two checks a grace
//      period apart (a KDC that writes back a whole entry it read before
//      the switch undoes it: the switch is then made again; krb5's db2 lockout patch
//      keeps kmpc's own db2 KDC from doing so, a KDB back end or replica
//      KDC without it may), X is deleted from all three servers, many ids
//      per call.
// A crash anywhere leaves each key either at X (valid, referenced; maybe an
// unreferenced N) or at N (valid, referenced; maybe an unreferenced X).
// New ids carry their origin: N = 16 random bytes || the first 16 bytes of
// SHA-256("kmpc-refresh-lineage-v1" || X). A re-run recognises such pairs
// among the stored ids and finishes the job (deletes the N that was never
// referenced, or the X that no longer is) before refreshing anything.
// Two refresh runs must not run at the same time (as two kdb5_util loads).
//
// Replacing a lost server (rebuild_party = L, `kmpc-admin rebuild-party L`):
// the same run, with server L new and empty. Every key on the two
// survivors moves to a new id that all three hold (RefreshKeys with
// rebuild_party: the survivors re-randomise their views and give L its
// view without any key being reconstructed, engine/refresh.h); the KDB's
// handles are switched and the old ids deleted from the survivors as in a
// refresh. A crash is resumed by running it again.
#ifndef KMPC_ADMIN_REFRESH_H_
#define KMPC_ADMIN_REFRESH_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/admin_client.h"

namespace kmpc::admin {

// What refers to key ids (the KDB's key handles). Ids are raw 32 bytes.
struct ReferenceHooks {
  // Whether anything refers to `id` (may answer from an index made at the
  // start of the run).
  std::function<absl::StatusOr<bool>(const std::string& id)> is_referenced;
  // The same, read from the KDB now (optional; is_referenced if unset).
  // Checked before an old id is deleted: a KDC that read a principal
  // before the switch and writes the whole entry back afterwards (MIT's
  // db2 lockout update without krb5's db2 lockout patch) puts the old handle back,
  // so the switch is made again and the old id kept.
  std::function<absl::StatusOr<bool>(const std::string& id)> is_referenced_now;
  // Atomically makes what refers to old_id refer to new_id, keeping
  // everything else (enctype, kvno, salt, the other keys). NOT_FOUND when
  // nothing refers to old_id (any more).
  std::function<absl::Status(const std::string& old_id, const std::string& new_id)>
      switch_reference;
};

struct RefreshProgress {
  size_t done = 0;     // keys refreshed so far
  size_t failed = 0;
  size_t total = 0;    // keys to refresh
  double rate = 0;     // keys per second so far
  bool finished = false;
};

struct RefreshOptions {
  bool all = false;                   // every key on all three servers
  // >= 0: rebuild this replaced server (see above); implies every key on
  // the two other servers.
  int rebuild_party = -1;
  std::vector<std::string> key_ids;   // raw ids, when !all
  size_t batch = 256;                 // pairs per RefreshKeys request
  // Before an old id that a reference named is deleted (see above).
  absl::Duration grace = absl::Seconds(10);
  absl::Duration rpc_timeout = absl::Seconds(60);
  size_t delete_batch = 4096;         // old ids per DeleteKeys
  std::function<void(const RefreshProgress&)> progress;  // optional
};

struct RefreshReport {
  size_t total = 0;
  size_t refreshed = 0;
  size_t failed = 0;
  size_t recovered = 0;  // pairs left by an earlier run, finished now
  size_t reswitched = 0;  // switches undone by a concurrent KDB write, redone
  std::vector<std::string> errors;    // one line each: key id hex: reason
  std::vector<std::string> warnings;  // e.g. an old id not deleted
  absl::Duration elapsed;
};

// The new id for old_id (see above), and whether new_id was made so.
std::string NewRefreshId(const std::string& old_id);
bool IsRefreshOf(const std::string& new_id, const std::string& old_id);

// Runs the refresh. An error status: nothing could start (a server down,
// an id not on all three servers); per-key failures are in the report, and
// a cluster failure mid-way stops the run with what was done in the report
// and the error in report.errors.
absl::StatusOr<RefreshReport> RefreshKeys(client::AdminClient& cluster,
                                          const ReferenceHooks& refs,
                                          const RefreshOptions& options);

// `kmpc-admin refresh [--all | KEYID_HEX...]` on the KDC host: references
// are the KDB's key handles of `realm` (Kdb for the index and for the
// switch). Prints progress on a terminal unless quiet; returns the exit
// code (0 all refreshed, 1 failures, 2 usage).
//
// With several clusters (admin/cluster.h: every key under the same id in
// each) the run above goes on cluster `cluster` (for rebuild-party, the
// cluster whose server was replaced; else cluster 1), and each other
// cluster follows it key by key: right before the KDB switch X -> N, X is
// refreshed to N on every other cluster too (RefreshKeys with the same
// pair; a failure there fails that key, which stays at X everywhere), so
// the handle names an id every cluster holds. After the run, every other
// cluster drops the ids that neither the KDB names nor the run's cluster
// holds (the old ids, and the new ids of failed switches); it is listed
// before the run's cluster, so a key being dealt meanwhile (to cluster 1
// first, admin/cluster.h) is never taken for one.
class Clusters;
int RunRefreshCommand(Clusters& clusters, const std::string& realm,
                      const std::vector<std::string>& args, bool all, bool quiet,
                      int rebuild_party = -1, size_t cluster = 0);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_REFRESH_H_
