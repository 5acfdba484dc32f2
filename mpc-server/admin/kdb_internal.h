// What kdb.cc (reading a realm's KDB) and kdb_handles.cc (writing its
// key handles) share: the handle's layout and the krb5 objects freed on
// every way out. Internal to those two files.
#ifndef KMPC_ADMIN_KDB_INTERNAL_H_
#define KMPC_ADMIN_KDB_INTERNAL_H_

#include <cstddef>
#include <cstring>

// com_err.h first, as C: Debian's krb5.h (built --with-system-et) includes
// e2fsprogs' <et/com_err.h>, which has no C++ guards of its own.
extern "C" {
#include <com_err.h>
}
#include <krb5/krb5.h>
// kdb.h has no C++ guards of its own (kadm5/admin.h includes it outside
// its extern "C" block): include it first, as C.
extern "C" {
#include <kdb.h>
}
#include <kadm5/admin.h>

namespace kmpc::admin::kdb_internal {

// A key handle (key data whose contents are no key): the magic, then the
// 32-byte key id the servers hold the shares under.
constexpr char kHandleMagic[] = "kmpc-key";
constexpr size_t kHandleMagicLen = 8;
constexpr size_t kKeyIdBytes = 32;
constexpr size_t kHandleLen = kHandleMagicLen + kKeyIdBytes;

inline krb5_context Ctx(void* p) { return static_cast<krb5_context>(p); }

inline bool IsHandle(const krb5_keyblock& k) {
  return k.length == kHandleLen &&
         std::memcmp(k.contents, kHandleMagic, kHandleMagicLen) == 0;
}

// Frees kadm5 key data (krb5_free_keyblock_contents wipes the keys).
struct KeyDataList {
  krb5_context ctx = nullptr;
  kadm5_key_data* kd = nullptr;
  int n = 0;
  ~KeyDataList() {
    if (kd != nullptr) kadm5_free_kadm5_key_data(ctx, n, kd);
  }
};

struct Principal {
  krb5_context ctx;
  krb5_principal p = nullptr;
  ~Principal() {
    if (p != nullptr) krb5_free_principal(ctx, p);
  }
};

// A KDB entry read with krb5_db_get_principal, freed on every way out.
struct DbEntry {
  krb5_context ctx;
  krb5_db_entry* e = nullptr;
  ~DbEntry() {
    if (e != nullptr) krb5_db_free_principal(ctx, e);
  }
};

}  // namespace kmpc::admin::kdb_internal

#endif  // KMPC_ADMIN_KDB_INTERNAL_H_
