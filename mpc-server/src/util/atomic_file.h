// Small state files written so that after a crash they are either absent
// (or their old version) or whole: the breaker's trip, the CRL numbers.
#ifndef KMPC_UTIL_ATOMIC_FILE_H_
#define KMPC_UTIL_ATOMIC_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kmpc::util {

// Writes `text` to path + ".tmp" (mode 0600), fsyncs it, renames it over
// `path` and fsyncs the directory. The directory must exist. On failure
// the temporary file is removed and `path` is as it was; INTERNAL, naming
// the file and the system error.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view text);

}  // namespace kmpc::util

#endif  // KMPC_UTIL_ATOMIC_FILE_H_
