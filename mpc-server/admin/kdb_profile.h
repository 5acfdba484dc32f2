// Where a realm's KDB module is, as libkdb5 reads it from the profile
// (kdb_get_library_name, and the db2 module's configure_context: the
// module's database_name before the realm's). kmpc-admin's FindKdbFiles
// (admin/kdb_rewrite.h) and kadmind's key dealer (its note of a rewrite
// due, admin/rewrite_due.h) both read it here, so that they name the same
// file. Header-only: kmpc_admin_cluster links no krb5 library; the two
// targets that include it do, and include krb5's <profile.h> before it
// (each with the linkage its other krb5 headers need).
#ifndef KMPC_ADMIN_KDB_PROFILE_H_
#define KMPC_ADMIN_KDB_PROFILE_H_

#include <string>

namespace kmpc::admin {

struct KdbModuleSettings {
  std::string library = "db2";  // [dbmodules] MODULE db_library
  std::string database_name;    // [dbmodules] MODULE database_name; empty if unset
};

// MODULE: [realms] REALM database_module, else REALM.
inline KdbModuleSettings ReadKdbModuleSettings(profile_t prof, const std::string& realm) {
  KdbModuleSettings s;
  char *module = nullptr, *lib = nullptr, *name = nullptr;
  profile_get_string(prof, "realms", realm.c_str(), "database_module", realm.c_str(),
                     &module);
  profile_get_string(prof, "dbmodules", module, "db_library", "db2", &lib);
  profile_get_string(prof, "dbmodules", module, "database_name", nullptr, &name);
  if (lib != nullptr) s.library = lib;
  if (name != nullptr) s.database_name = name;
  profile_release_string(module);
  profile_release_string(lib);
  profile_release_string(name);
  return s;
}

}  // namespace kmpc::admin

#endif  // KMPC_ADMIN_KDB_PROFILE_H_
