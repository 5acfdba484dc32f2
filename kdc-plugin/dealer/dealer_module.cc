// libkmpc_dealer.so: kmpc's key dealer inside kadmind, kadmin.local and
// kdb5_util (the patched libkdb5 loads it; krb5/mpcdealer_plugin.h).
//
// Whenever MIT's tools make a new key of an MPC enctype (or of
// aes128/aes256-cts-hmac-sha1-96, dealt with its usage material) for an
// MPC-protected principal (addprinc, cpw with a password or -randkey,
// kpasswd through kadmind, the password change at an expired kinit, ktadd),
// libkdb5 hands the key to the mpcdealer vtable (mpcdealer_vtable.cc). The
// Dealer (dealer.h) deals it into replicated 2-of-3 XOR shares, stored on
// the three MPC servers all-or-nothing (client::AdminClient::PutKey) under
// a fresh random key id, and libkdb5 stores only the 40-byte handle
// "kmpc-key" || key id. If any server is down, refuses or times out, the
// change fails and nothing is written. With several clusters in the config
// file (servers2 = ...), the key is dealt to each under the same id, all or
// nothing across them too (Clusters::PutKey, admin/cluster.h).
//
// Shares that end up referenced by no KDB entry are removed again:
//   - the previous keys of a principal (without -keepold) and the keys of a
//     deleted principal, once the change is committed;
//   - the shares of a change that was never committed (refused by a later
//     check such as password history, or a failed KDB write).
// The module learns of commits through the kadm5_hook interface
// (kadm5_hook_kmpc_initvt, same .so) and decides by reading the KDB entry
// itself: what it references stays, the rest of what this process dealt or
// replaced goes. Outside kadm5 (kdb5_util), the same check runs when the
// KDB is closed. kadm5_purgekeys calls no kadm5_hook and deals nothing, so
// the shares of the kvnos it removes stay: `kmpc-admin status --kdb`
// reports them and `kmpc-admin purge-unreferenced` removes them.
//
// Configuration (kdc.conf):
//   [plugins]
//       mpcdealer = { module = kmpc:/path/libkmpc_dealer.so }
//       kadm5_hook = { module = kmpc:/path/libkmpc_dealer.so }
//   [mpcdealer]
//       kmpc = {
//           config = /etc/kmpc/admin.conf   # kmpc-admin's file (config.h)
//           protect = krbtgt/*              # fnmatch patterns; repeatable
//           service = host/*                # protected, keys of kind service
//           user_service = svc-*            # protected, kind user+service
//       }
// `protect` names principals whose keys must be held by the cluster even
// before they hold a handle (default: krbtgt/*); a principal that holds a
// key of an MPC enctype, or whose change asks for one (kadmin -e), is
// protected anyway (krb5/mpcdealer_plugin.h). `service` and
// `user_service` protect too, and name the kind of the keys dealt for the
// principals they match (kmpc.proto KeyKind, which the servers check): a
// principal's kmpc_key_kind string attribute (kadmin setstr) wins over
// them, and a principal none names is a user (a password-derived key whose
// AS reply the servers gate, with no ticket or PAC material). A password
// set on a principal of kind service is dealt as user+service: only a
// random key gets a service key's powers (Dealer::KindOf). kadmind's own
// principals (kadmin/*, kiprop/*), once in the cluster, get random service
// keys only (libkdb5 deals their keys only once they hold a handle).
//
// No key, share or password is ever logged or put in a message.
//
// The module's files: this one, the one Dealer per process that its
// vtables share (dealer_module.h); the Dealer itself (dealer.h); libkdb5's
// mpcdealer vtable (mpcdealer_vtable.cc); kadm5's kadm5_hook vtable, the
// commits (kadm5_hook_vtable.cc); the hook by which libkrb5 has kadmind's
// tickets decrypted in the cluster (ticket_hook.h, over ticket_decrypt.h).
#include "dealer_module.h"

#include <cerrno>
#include <utility>

extern "C" {
#include <profile.h>
}

namespace kmpc::admin::dealer {

std::mutex g_mu;
Dealer* g_dealer = nullptr;

namespace {
int g_refs = 0;  // the vtables' inits not yet followed by their fini
}  // namespace

std::vector<std::string> ProfileValues(krb5_context ctx, const char* name,
                                       const char* section) {
  std::vector<std::string> out;
  profile_t profile = nullptr;
  if (krb5_get_profile(ctx, &profile) != 0) return out;
  const char* path[] = {section, kModuleName, name, nullptr};
  char** values = nullptr;
  if (profile_get_values(profile, path, &values) == 0) {
    for (char** v = values; *v != nullptr; ++v) out.emplace_back(*v);
    profile_free_list(values);
  }
  profile_release(profile);
  return out;
}

krb5_error_code Acquire(krb5_context ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_dealer == nullptr) {
    std::vector<std::string> config = ProfileValues(ctx, "config");
    Patterns patterns{ProfileValues(ctx, "protect"), ProfileValues(ctx, "service"),
                      ProfileValues(ctx, "user_service")};
    if (patterns.protect.empty()) patterns.protect.push_back("krbtgt/*");
    try {
      g_dealer = new Dealer(config.empty() ? "" : config.back(), std::move(patterns));
    } catch (...) {
      return ENOMEM;
    }
  }
  ++g_refs;
  return 0;
}

void Release(krb5_context ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_refs == 0 || --g_refs > 0) return;
  g_dealer->SettleAll(ctx);
  delete g_dealer;
  g_dealer = nullptr;
}

std::string Unparse(krb5_context ctx, krb5_const_principal princ) {
  char* s = nullptr;
  if (krb5_unparse_name(ctx, princ, &s) != 0) return "";
  std::string out(s);
  krb5_free_unparsed_name(ctx, s);
  return out;
}

}  // namespace kmpc::admin::dealer
