// What the dealer module's vtables share (dealer_module.cc): one Dealer per
// process, made by the first vtable's init and ended by the last one's
// fini, and the profile reads they need. The vtables: libkdb5's mpcdealer
// (mpcdealer_vtable.cc), kadm5's kadm5_hook (kadm5_hook_vtable.cc), and
// through the latter libkrb5's ticket decryption hook (ticket_hook.h).
#ifndef KMPC_DEALER_DEALER_MODULE_H_
#define KMPC_DEALER_DEALER_MODULE_H_

#include <mutex>
#include <string>
#include <vector>

#include "dealer.h"

extern "C" {
#include <krb5/krb5.h>
}

namespace kmpc::admin::dealer {

inline constexpr char kModuleName[] = "kmpc";

// Guards the making and ending of g_dealer, and the ticket hook's state
// (ticket_hook.cc).
extern std::mutex g_mu;
// The process's one Dealer, shared by the mpcdealer and kadm5_hook vtables
// (both are loaded from this .so and live as long as the KDB handle); null
// before the first init and after the last fini.
extern Dealer* g_dealer;

// The values of [section] kmpc = { name = ... } in the process's profile.
std::vector<std::string> ProfileValues(krb5_context ctx, const char* name,
                                       const char* section = "mpcdealer");

// Makes g_dealer from the profile's [mpcdealer] kmpc settings if there is
// none yet, and counts one more user of it.
krb5_error_code Acquire(krb5_context ctx);
// One user less; the last one settles every pending change and ends it.
void Release(krb5_context ctx);

// The principal's name with its realm; "" if it cannot be unparsed.
std::string Unparse(krb5_context ctx, krb5_const_principal princ);

}  // namespace kmpc::admin::dealer

#endif  // KMPC_DEALER_DEALER_MODULE_H_
