// kadm5's kadm5_hook vtable (krb5/kadm5_hook_plugin.h):
// kadm5_hook_kmpc_initvt and what it points at. init shares the Dealer
// (dealer_module.h) and registers the ticket hook (ticket_hook.h); a
// committed create or password change settles the principal's pending
// change (what the entry no longer references is deleted from the
// servers) and sets +requires_preauth on a user's entry; a remove retires
// the principal's handles before the commit and settles them after it.
// The hooks never fail kadm5's operation.
#include <set>
#include <string>
#include <utility>

#include "dealer.h"
#include "dealer_module.h"
#include "ticket_hook.h"

extern "C" {
#include <kadm5/admin.h>
#include <kdb.h>
#include <krb5/kadm5_hook_plugin.h>
#include <krb5/krb5.h>
}

namespace kmpc::admin::dealer {
namespace {

// kadmind (and kadmin.local) load the kadm5_hook interface when kadm5
// starts: the ticket decrypter is registered then, process-wide, for the
// AP-REQs kadmind accepts under its own keys.
kadm5_ret_t HookInit(krb5_context ctx, kadm5_hook_modinfo** modinfo) {
  *modinfo = nullptr;
  if (kadm5_ret_t ret = Acquire(ctx); ret != 0) return ret;
  StartTicketHook(ctx);
  return 0;
}

void HookFini(krb5_context ctx, kadm5_hook_modinfo*) {
  StopTicketHook();
  Release(ctx);
}

// Sets +requires_preauth (KRB5_KDB_REQUIRES_PRE_AUTH) on princ's entry, in
// a write of its own after kadm5's (a kadm5_hook cannot change the entry
// kadm5 commits). An AS reply under a user's key is an offline verifier of
// its password: MIT gives one to anyone who asks unless the principal
// requires pre-authentication, and addprinc's default flags do not. The
// patched KDC demands it of every client holding a handle that is not a
// service (krb5 patch 0024-KDC-demand-pre-authentication) from the commit
// on; the flag says so to every KDC and tool reading the entry. A failure
// leaves the entry as kadm5 wrote it: kmpc-admin status --kdb names it.
void RequirePreauth(krb5_context ctx, krb5_const_principal princ) {
  krb5_db_entry* ent = nullptr;
  if (krb5_db_get_principal(ctx, princ, 0, &ent) != 0) return;
  if (!(ent->attributes & KRB5_KDB_REQUIRES_PRE_AUTH)) {
    ent->attributes |= KRB5_KDB_REQUIRES_PRE_AUTH;
    ent->mask = KADM5_ATTRIBUTES;  // what an LDAP KDB writes
    (void)krb5_db_put_principal(ctx, ent);
  }
  krb5_db_free_principal(ctx, ent);
}

void Committed(krb5_context ctx, krb5_const_principal princ) {
  if (g_dealer == nullptr || princ == nullptr) return;
  try {
    if (g_dealer->Settle(ctx, Unparse(ctx, princ))) RequirePreauth(ctx, princ);
  } catch (...) {
  }
}

kadm5_ret_t HookChpass(krb5_context ctx, kadm5_hook_modinfo*, int stage,
                       krb5_principal princ, krb5_boolean, int,
                       krb5_key_salt_tuple*, const char*) {
  if (stage == KADM5_HOOK_STAGE_POSTCOMMIT) Committed(ctx, princ);
  return 0;
}

kadm5_ret_t HookCreate(krb5_context ctx, kadm5_hook_modinfo*, int stage,
                       kadm5_principal_ent_t ent, long, int,
                       krb5_key_salt_tuple*, const char*) {
  if (stage == KADM5_HOOK_STAGE_POSTCOMMIT && ent != nullptr)
    Committed(ctx, ent->principal);
  return 0;
}

kadm5_ret_t HookRemove(krb5_context ctx, kadm5_hook_modinfo*, int stage,
                       krb5_principal princ) {
  if (g_dealer == nullptr || princ == nullptr) return 0;
  try {
    std::string name = Unparse(ctx, princ);
    if (stage == KADM5_HOOK_STAGE_PRECOMMIT) {
      std::set<std::string> handles;
      if (Dealer::ReadHandles(ctx, name, &handles) && !handles.empty())
        g_dealer->WillRemove(name, std::move(handles));
    } else {
      g_dealer->Settle(ctx, name);
    }
  } catch (...) {
  }
  return 0;
}

}  // namespace
}  // namespace kmpc::admin::dealer

extern "C" {

__attribute__((visibility("default"))) krb5_error_code
kadm5_hook_kmpc_initvt(krb5_context, int maj_ver, int, krb5_plugin_vtable vtable) {
  if (maj_ver != 1) return KRB5_PLUGIN_VER_NOTSUPP;
  auto* vt = reinterpret_cast<kadm5_hook_vftable_1*>(vtable);
  vt->name = kmpc::admin::dealer::kModuleName;
  vt->init = kmpc::admin::dealer::HookInit;
  vt->fini = kmpc::admin::dealer::HookFini;
  vt->chpass = kmpc::admin::dealer::HookChpass;
  vt->create = kmpc::admin::dealer::HookCreate;
  vt->remove = kmpc::admin::dealer::HookRemove;
  return 0;
}

}  // extern "C"
