// The KDB rewritten into fresh files after kmpc-admin replaced real keys by
// key handles. libkdb5's db2 module overwrites a principal's record in
// place or moves it, so the old record (its keys encrypted in the master
// key) stays in the database file's free pages, and iprop's update log
// (principal.ulog) keeps the old entries: whoever reads those files with
// the master key would get the keys the move put into the cluster.
//
// The rewrite is MIT's own: `kdb5_util dump` (copied by this process into
// an unnamed 0600 file next to the database, which no path names and which
// is zeroed before it is closed), then `kdb5_util load` of it, which builds
// a fresh database and renames it over the old one (kadmin/dbutil/dump.c
// load_db, plugins/kdb/db2/kdb_db2.c ctx_promote) and, with iprop on,
// resets the update log's header (ulog_init_header). A reset header still
// leaves the old entries' bytes in the log's blocks (lib/kdb/kdb_log.c
// reset_ulog writes the header and one dummy entry header only), so every
// byte of the log that no live entry uses is zeroed here, under the log's
// lock (with iprop off, a log left from when it was on is named for
// deletion). The replaced database file is zeroed through a descriptor opened
// before the load (once the load renamed the new one over it, no process
// reads it: db2 reopens the file by name under each lock, ctx_lock), which
// overwrites its blocks in place where the filesystem does; its disk
// blocks are freed, not erased (docs/admin-guide.md: encrypted disks, or
// shred).
#ifndef KMPC_ADMIN_KDB_REWRITE_H_
#define KMPC_ADMIN_KDB_REWRITE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "admin/kdb.h"

namespace kmpc::admin {

// Where a realm's KDB lives, as libkdb5 and kdb5_util find it (kdc.conf).
struct KdbFiles {
  std::string realm;
  std::string library;  // the database module's db_library: "db2", "kldap", ...
  std::string dbname;   // db2: the principal database file
  bool iprop = false;   // iprop_enable
  std::string ulog;     // iprop_logfile
  uint32_t ulog_entries = 0;  // iprop_ulogsize
};

// The realm's KDB files (KRB5_CONFIG and KRB5_KDC_PROFILE, as Kdb::Open).
absl::StatusOr<KdbFiles> FindKdbFiles(const std::string& realm);

// Rewrites a db2 KDB into fresh files (the file comment); `principals`:
// how many the dump must hold (Kdb::ListPrincipals just before). Returns
// what was done, for the output. An error from the dump or the load leaves
// the old database in place, working; one from zeroing the update log
// comes after the new database is in place. Refused when the dump's
// principals are not `principals` or, with iprop on, when the update log
// moved during the dump (a change meanwhile). A change made through
// kadmind between the end of the dump and the load's rename is lost, as
// with any `kdb5_util load` (docs/admin-guide.md: make no changes then).
absl::StatusOr<std::string> RewriteKdb(const KdbFiles& files, size_t principals);

// Rewrites the KDB of kdb, which is closed here (the rewrite replaces its
// files), and prints on stderr, after `why` ("after replacing ..."), what
// was rewritten, or for another KDB module than db2 (LDAP) what the admin
// must do instead. False when the rewrite failed (the error is printed;
// the KDB works, with the handles).
bool RewriteKdbAfterMove(std::unique_ptr<Kdb> kdb, const std::string& why);

// status --kdb's line for key changes kadmind's dealer noted since the
// KDB was last rewritten (admin/rewrite_due.h); true when there is none.
bool ReportRewritesDue(const std::string& realm);

// share's exit code: rc, after RewriteKdbAfterMove when it replaced the
// real keys of `replaced` principals (1 if that failed).
int RewriteAfterShare(std::unique_ptr<Kdb> kdb, size_t replaced, int rc);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_KDB_REWRITE_H_
