// The ticket decryption hook kadmind registers with libkrb5 (krb5 patch
// 0026-Decrypt-tickets, krb5_mpc_set_ticket_decrypt): tickets to kadmind's
// own principals of its realm, whose keys the cluster holds as aes*-cts
// handles, are decrypted in the cluster (ticket_decrypt.h); every other
// ticket libk5crypto refused stays refused. The cluster is the KDC's
// ([kdcmpc] kmpc in kdc.conf: servers, certs = DIR or ca / cert / key, as
// kdc-plugin/src/options.h reads them), else kmpc-admin's (the [mpcdealer]
// kmpc `config` file), read when the hook is registered: the krb5
// contexts GSS-API makes to accept a ticket see krb5.conf only, not
// kdc.conf.
#ifndef KMPC_DEALER_TICKET_HOOK_H_
#define KMPC_DEALER_TICKET_HOOK_H_

extern "C" {
#include <krb5/krb5.h>
}

namespace kmpc::admin::dealer {

// Reads the cluster's settings and the default realm (kadm5 makes it
// kadmind's) from ctx, then registers the hook, process-wide.
void StartTicketHook(krb5_context ctx);
// Unregisters the hook, then closes the decrypter's channels.
void StopTicketHook();

}  // namespace kmpc::admin::dealer

#endif  // KMPC_DEALER_TICKET_HOOK_H_
