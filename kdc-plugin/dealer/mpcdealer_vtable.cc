// libkdb5's mpcdealer vtable (krb5/mpcdealer_plugin.h):
// mpcdealer_kmpc_initvt and what it points at. init makes the process
// non-dumpable (no core file either) before it can deal, protects answers
// from kdc.conf's patterns, and deal / deal_origin have the shared Dealer
// (dealer_module.h) deal a new key and hand back its 40-byte handle
// ("kmpc-key" || key id) in place of the key; a key the cluster could not
// store fails the change (KADM5_MPC_DEAL_FAILED), with no handle.
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>

#include "dealer.h"
#include "dealer_module.h"

extern "C" {
#include <kadm5/admin.h>
#include <krb5/kdcmpc_plugin.h>
#include <krb5/krb5.h>
#include <krb5/mpcdealer_plugin.h>
}

namespace kmpc::admin::dealer {
namespace {

// The process that deals (kadmind, kadmin.local) holds each new key in the
// clear, and its round keys and powers of H, while it splits them: keep
// them out of core dumps. Non-dumpable alone still leaves a root-owned core
// when fs.suid_dumpable is 2, so the core size limit goes to 0 as well.
krb5_error_code NoCoreDumps(krb5_context ctx) {
  const struct rlimit none = {0, 0};
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 && setrlimit(RLIMIT_CORE, &none) == 0)
    return 0;
  const krb5_error_code code = errno;
  krb5_set_error_message(ctx, code, "kmpc: cannot disable core dumps of the key dealer: %s",
                         std::strerror(code));
  return code;
}

krb5_error_code DealerInit(krb5_context ctx, krb5_mpcdealer_moddata* data_out) {
  *data_out = nullptr;
  if (krb5_error_code code = NoCoreDumps(ctx); code != 0) return code;
  return Acquire(ctx);
}

void DealerFini(krb5_context ctx, krb5_mpcdealer_moddata) { Release(ctx); }

krb5_boolean DealerProtects(krb5_context ctx, krb5_mpcdealer_moddata,
                            krb5_const_principal princ) {
  std::string name = Unparse(ctx, princ);
  return !name.empty() && g_dealer != nullptr && g_dealer->Protects(name);
}

krb5_error_code DealKey(krb5_context ctx, krb5_const_principal princ, krb5_kvno kvno,
                        const krb5_keyblock* key, bool random,
                        krb5_keyblock* handle_out) {
  std::memset(handle_out, 0, sizeof(*handle_out));
  std::string name = Unparse(ctx, princ);
  if (name.empty() || g_dealer == nullptr) return ENOMEM;
  try {
    std::set<std::string> replaced;
    (void)Dealer::ReadHandles(ctx, name, &replaced);
    auto id = g_dealer->Deal(ctx, name, kvno, *key, random, std::move(replaced));
    if (!id.ok()) {
      krb5_error_code code = KADM5_MPC_DEAL_FAILED;
      krb5_set_error_message(
          ctx, code,
          "kmpc: the new key of %s could not be stored on the MPC servers, so "
          "nothing was changed (the old key stays valid): %s",
          name.c_str(), std::string(id.status().message()).c_str());
      return code;
    }
    auto* contents = static_cast<krb5_octet*>(std::malloc(KRB5_KDCMPC_HANDLE_LEN));
    if (contents == nullptr) return ENOMEM;
    std::memcpy(contents, KRB5_KDCMPC_HANDLE_MAGIC, KRB5_KDCMPC_HANDLE_MAGIC_LEN);
    std::memcpy(contents + KRB5_KDCMPC_HANDLE_MAGIC_LEN, id->data(),
                KRB5_KDCMPC_KEY_ID_LEN);
    handle_out->magic = KV5M_KEYBLOCK;
    handle_out->enctype = key->enctype;
    handle_out->length = KRB5_KDCMPC_HANDLE_LEN;
    handle_out->contents = contents;
    return 0;
  } catch (...) {
    krb5_set_error_message(ctx, ENOMEM, "kmpc: out of memory while dealing a key");
    return ENOMEM;
  }
}

// libkdb5 says whether key is random (mpcdealer minor version 2).
krb5_error_code DealerDealOrigin(krb5_context ctx, krb5_mpcdealer_moddata,
                                 krb5_const_principal princ, krb5_kvno kvno,
                                 const krb5_keyblock* key, krb5_flags flags,
                                 krb5_keyblock* handle_out) {
  return DealKey(ctx, princ, kvno, key, (flags & KRB5_MPCDEALER_RANDOM_KEY) != 0,
                 handle_out);
}

// A libkdb5 of minor version 1 does not say where key came from: it may be
// a password's, so it never gets a random key's powers.
krb5_error_code DealerDeal(krb5_context ctx, krb5_mpcdealer_moddata,
                           krb5_const_principal princ, krb5_kvno kvno,
                           const krb5_keyblock* key, krb5_keyblock* handle_out) {
  return DealKey(ctx, princ, kvno, key, /*random=*/false, handle_out);
}

}  // namespace
}  // namespace kmpc::admin::dealer

extern "C" {

__attribute__((visibility("default"))) krb5_error_code
mpcdealer_kmpc_initvt(krb5_context, int maj_ver, int min_ver, krb5_plugin_vtable vtable) {
  if (maj_ver != 1) return KRB5_PLUGIN_VER_NOTSUPP;
  auto* vt = reinterpret_cast<krb5_mpcdealer_vtable>(vtable);
  vt->name = kmpc::admin::dealer::kModuleName;
  vt->init = kmpc::admin::dealer::DealerInit;
  vt->fini = kmpc::admin::dealer::DealerFini;
  vt->protects = kmpc::admin::dealer::DealerProtects;
  vt->deal = kmpc::admin::dealer::DealerDeal;
  // deal_origin is beyond a minor-1 caller's vtable.
  if (min_ver >= 2) vt->deal_origin = kmpc::admin::dealer::DealerDealOrigin;
  return 0;
}

}  // extern "C"
