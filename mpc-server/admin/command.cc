#include "admin/command.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"

namespace kmpc::admin {

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "kmpc-admin: %s\n", std::string(st.message()).c_str());
  return 1;
}

std::string Hex(const std::string& bytes) { return absl::BytesToHexString(bytes); }

bool Unshareable(const std::string& canon) {
  return absl::StartsWith(canon, "K/M@") || absl::StartsWith(canon, "kadmin/history@");
}

bool KadmindService(const std::string& canon) {
  return absl::StartsWith(canon, "kadmin/") || absl::StartsWith(canon, "kiprop/");
}

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

}  // namespace kmpc::admin
