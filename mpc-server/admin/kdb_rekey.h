// Switching a key handle to a new key id in the KDB (share refresh,
// refresh.h): the one KDB operation kdb.h does not have. Runs on the KDC
// host like kdb.h, with the kadm5 server API and libkdb5 of the patched
// krb5.
#ifndef KMPC_ADMIN_KDB_REKEY_H_
#define KMPC_ADMIN_KDB_REKEY_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kmpc::admin {

class KdbRekey {
 public:
  // realm empty: the default realm of the profile.
  static absl::StatusOr<std::unique_ptr<KdbRekey>> Open(const std::string& realm);
  ~KdbRekey();
  KdbRekey(const KdbRekey&) = delete;
  KdbRekey& operator=(const KdbRekey&) = delete;

  // In principal `name`, every key handle naming old_id (32 bytes) names
  // new_id instead; enctype, kvno, salt and every other key data entry stay
  // as they are. One krb5_db_put_principal: the KDC sees the old entry or
  // the new one, never a mix. NOT_FOUND when the principal does not exist
  // or holds no handle naming old_id.
  absl::Status SwitchKeyId(const std::string& name, const std::string& old_id,
                           const std::string& new_id);

 private:
  KdbRekey() = default;
  absl::Status Error(long ret, const std::string& what);

  void* context_ = nullptr;  // krb5_context
  void* handle_ = nullptr;   // kadm5 server handle
  std::string realm_;
};

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_KDB_REKEY_H_
