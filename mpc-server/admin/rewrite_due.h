// The record of kadmin changes that replaced real keys by key handles since
// the KDB was last rewritten into fresh files (admin/kdb_rewrite.h).
//
// libkdb5's db2 module leaves a rewritten record's old bytes in the
// database file's free pages, and iprop's update log keeps the old
// entries: after kadmind's key dealer replaced a principal's real keys by
// handles (a kadmin cpw, randkey or ktadd of a principal not yet in the
// cluster), its old keys are still in the KDB files, encrypted in the
// master key. kmpc-admin share rewrites the KDB itself; the dealer cannot
// (a rewrite is a kdb5_util dump and load, which loses a change kadmind
// makes meanwhile), so it notes the principal here, `kmpc-admin status
// --kdb` reports it as a problem, and `kmpc-admin rewrite-kdb` (or a share
// that rewrites) clears the record once the fresh files are in place.
//
// The record: DBNAME + ".kmpc-rewrite-due" beside the db2 database, mode
// 0600, one line per change, "<unix time> <principal>\n", appended with
// O_APPEND (one write per line) and fsync'd. Principal names only.
#ifndef KMPC_ADMIN_REWRITE_DUE_H_
#define KMPC_ADMIN_REWRITE_DUE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kmpc::admin {

std::string RewriteDuePath(const std::string& dbname);

// Appends `principal` to the record of the database `dbname`.
absl::Status NoteRewriteDue(const std::string& dbname, const std::string& principal);

// The principals the record names, each once, in the order first noted;
// empty when there is no record.
absl::StatusOr<std::vector<std::string>> RewritesDue(const std::string& dbname);

// The record's size in bytes (0 when there is none): taken before a
// rewrite's dump, so that ClearRewriteDue keeps a change noted meanwhile.
uint64_t RewriteDueSize(const std::string& dbname);

// Removes the record after a rewrite, unless it grew past `size_before`
// (RewriteDueSize before the dump: a change noted since is not in the
// rewritten files' count). A missing record is no error.
absl::Status ClearRewriteDue(const std::string& dbname, uint64_t size_before);

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_REWRITE_DUE_H_
