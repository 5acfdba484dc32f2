/* -*- mode: c; c-basic-offset: 4; indent-tabs-mode: nil -*- */
/*
 * kdc-plugin/src/core.h - the C interface of the kmpc module's C++ core.
 *
 * The C entry file (kmpc_kdc.c) talks to krb5kdc and verto; the core
 * (module.cc) batches jobs, talks to the MPC cluster over gRPC and hands
 * finished jobs back through an eventfd.  Every function here catches every
 * C++ exception: none unwinds into krb5kdc.  Error detail comes back as a
 * malloc'ed string (never key material, shares or plaintext) for
 * krb5_set_error_message.
 */
#ifndef KMPC_KDC_PLUGIN_CORE_H
#define KMPC_KDC_PLUGIN_CORE_H

#include <krb5/krb5.h>
#include <krb5/kdcmpc_plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kmpc_core kmpc_core;

/* One finished job, for the KDC's event loop. */
typedef struct {
    krb5_kdcmpc_done_fn done;
    void *arg;
    krb5_error_code code;
    krb5_data output;           /* malloc'ed, ownership passes on */
    char *message;              /* malloc'ed detail when code != 0, or NULL */
} kmpc_completion;

/* Parse options, connect and start the batcher. */
krb5_error_code kmpc_core_create(const char *const *options,
                                 kmpc_core **core_out, char **msg_out);

/* The KDC's clock skew in seconds (krb5.conf / kdc.conf clockskew): a gate
 * proves its shapes only if its timestamp is within it (freshness.h). */
void kmpc_core_set_clockskew(kmpc_core *core, int seconds);

/* The eventfd that becomes readable when completions or log lines wait. */
int kmpc_core_fd(kmpc_core *core);

/* Queue a job (copied); done will be called through kmpc_core_next.  With
 * ticket (kdcmpc minor version 3, submit_ticket): a ticket's ENCRYPT under
 * an aes*-cts key whose PAC server and KDC signatures are made in its Run
 * (kmpc.proto Job.sign_pad), queued with a signing PAD of the krbtgt. */
krb5_error_code kmpc_core_submit(kmpc_core *core, const krb5_kdcmpc_job *job,
                                 krb5_kdcmpc_done_fn done, void *arg,
                                 int ticket, char **msg_out);

/* kdcmpc minor version 2 (krb5/kdcmpc_plugin.h): begin an exchange with its
 * plan (its items given now are queued with what is prepared for the
 * others; their callbacks come through kmpc_core_next), submit a later
 * item's job, end it (its metrics are recorded, its prepared state wiped).
 * Items under aes*-cts keys are served as cts_items.h says (the AS
 * exchange's, a REQ_CHECKSUM only spliced into the REPLY: that item gets
 * its one callback after the REPLY's, with its code and no output); any
 * other such item, and any other splice, is refused with EINVAL. */
krb5_error_code kmpc_core_begin(kmpc_core *core, const krb5_kdcmpc_plan *plan,
                                krb5_kdcmpc_exchange *exch_out, char **msg_out);
krb5_error_code kmpc_core_submit_item(kmpc_core *core,
                                      krb5_kdcmpc_exchange exch, int item,
                                      const krb5_kdcmpc_job *job,
                                      krb5_kdcmpc_done_fn done, void *arg,
                                      char **msg_out);
void kmpc_core_end(kmpc_core *core, krb5_kdcmpc_exchange exch);

/* Reset the eventfd; then take everything that waits. */
void kmpc_core_ack(kmpc_core *core);

/* With early flush or prepared work: make the eventfd readable so that the
 * loop calls kmpc_core_kick once the current callback has returned; return 1
 * if so (also when the eventfd's counter is full: it is readable already).
 * If the eventfd cannot be written, kick at once (logged once) and return
 * 0: a kick is never lost. */
int kmpc_core_arm_kick(kmpc_core *core);

/* Return 1 if the core wants kmpc_core_kick after the loop's callbacks that
 * submit (early flush or prepared work), as kmpc_core_arm_kick but without
 * making the eventfd readable: for a caller that kicks itself once the
 * callback returned. */
int kmpc_core_kicks(kmpc_core *core);

/* The loop thread has submitted what it had for now: prepared jobs go to
 * FINALIZE, and an idle cluster (early flush) may get the queued jobs without
 * waiting for the coalesce delay. */
void kmpc_core_kick(kmpc_core *core);

/* Return 1 and fill *out if a log line waits (free *line_out). */
int kmpc_core_next_log(kmpc_core *core, int *level_out, char **line_out);
/* Return 1 and fill *out if a completion waits. */
int kmpc_core_next(kmpc_core *core, kmpc_completion *out);

/* Stop threads, abandon pending jobs (their callbacks are never called),
 * free everything. */
void kmpc_core_destroy(kmpc_core *core);

#ifdef __cplusplus
}
#endif

#endif /* KMPC_KDC_PLUGIN_CORE_H */
