/* -*- mode: c; c-basic-offset: 4; indent-tabs-mode: nil -*- */
/* kdc-plugin/src/kmpc_kdc.c - kdcmpc module "kmpc": crypto in the MPC cluster */
/*
 * The kdcmpc module of kmpc (krb5/kdcmpc_plugin.h): the KDC's jobs under
 * MPC-held keys go to the three MPC servers in batches, and finished jobs
 * come back to the KDC's event loop through an eventfd registered with
 * verto.  This file is the thin krb5-style entry; the batcher and the gRPC
 * client are C++ (core.h).  Registered in kdc.conf as
 *
 *   [plugins]
 *       kdcmpc = {
 *           module = kmpc:/path/to/libkmpc_kdc.so
 *       }
 *   [kdcmpc]
 *       kmpc = {
 *           servers = 127.0.0.1:5000,127.0.0.1:5001,127.0.0.1:5002
 *           certs = /etc/kmpc/certs
 *       }
 *
 * (options: kdc-plugin/src/options.h).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <krb5/krb5.h>
#include <profile.h>
#include <krb5/kdcmpc_plugin.h>
#include <verto.h>
#include "core.h"

/* From libkadm5srv_mit, which krb5kdc links (adm_proto.h is not
 * installed); the KDC log. */
krb5_error_code krb5_klog_syslog(int, const char *, ...);

krb5_error_code
kdcmpc_kmpc_initvt(krb5_context context, int maj_ver, int min_ver,
                   krb5_plugin_vtable vtable)
    __attribute__((visibility("default")));

/* A drain that delivered at most this many completions is a lone exchange's
 * step (one client: one completion per drain): the jobs its callbacks
 * submitted are kicked at once.  Larger drains are load. */
#define KMPC_DRAIN_KICK_MAX 4

struct krb5_kdcmpc_moddata_st {
    krb5_context context;
    verto_ctx *vctx;
    verto_ev *ev;
    krb5_boolean kick;          /* kick the batcher on the next wake-up */
    /* In kmpc_on_ready's completion loop: a job submitted by a done callback
     * is kicked when the loop ends (every callback of the drain returned),
     * without a wake-up of its own. */
    krb5_boolean draining;
    krb5_boolean drain_kick;    /* a job was submitted during the drain */
    kmpc_core *core;
};

/* Log whatever the core's threads have to say, from the loop thread. */
static void
kmpc_drain_logs(krb5_kdcmpc_moddata data)
{
    int level;
    char *line;

    while (kmpc_core_next_log(data->core, &level, &line)) {
        krb5_klog_syslog(level, "%s", line);
        free(line);
    }
}

/* The eventfd is readable: deliver every finished job. */
static void
kmpc_on_ready(verto_ctx *vctx, verto_ev *ev)
{
    krb5_kdcmpc_moddata data = verto_get_private(ev);
    kmpc_completion c;
    unsigned int delivered = 0;

    kmpc_core_ack(data->core);
    if (data->kick) {
        /* The callback that submitted jobs has returned: the jobs of one
         * request (the ticket and the reply of an AS-REQ) are all queued;
         * prepared ones go to FINALIZE now, and an idle cluster (early
         * flush) may get the others now. */
        data->kick = FALSE;
        kmpc_core_kick(data->core);
    }
    kmpc_drain_logs(data);
    data->draining = TRUE;
    while (kmpc_core_next(data->core, &c)) {
        delivered++;
        if (c.code != 0) {
            krb5_set_error_message(data->context, c.code, "%s",
                                   c.message != NULL ? c.message :
                                   "kdcmpc: job failed");
        }
        free(c.message);
        (*c.done)(c.arg, c.code, c.output);
    }
    data->draining = FALSE;
    if (data->drain_kick) {
        data->drain_kick = FALSE;
        if (delivered <= KMPC_DRAIN_KICK_MAX) {
            /* A lone exchange's next step (its Sign after the Run, the KDC
             * signature after the server's, the FINALIZE after that) goes
             * out now, not one eventfd write and loop turn later: every
             * callback that submitted has returned, as a kick requires. */
            kmpc_core_kick(data->core);
        } else if (!data->kick) {
            /* Under load the kick waits for the loop's next turn, so that
             * the requests that arrived meanwhile join the same Sign and
             * FINALIZE calls (fewer calls per login). */
            data->kick = kmpc_core_arm_kick(data->core);
        }
    }
}

static void
kmpc_fini(krb5_context context, krb5_kdcmpc_moddata data)
{
    if (data == NULL)
        return;
    if (data->ev != NULL)
        verto_del(data->ev);
    if (data->core != NULL)
        kmpc_core_destroy(data->core);
    free(data);
}

/* The clock skew the KDC's own checks use (krb5_check_clockskew: the
 * context's [libdefaults] clockskew, kdc.conf included for krb5kdc, MIT's
 * default 300 s), for the module's freshness check of a gate (freshness.h). */
static int
kmpc_clockskew(krb5_context context)
{
    profile_t profile = NULL;
    int skew = 300;

    if (krb5_get_profile(context, &profile) == 0) {
        if (profile_get_integer(profile, "libdefaults", "clockskew", NULL, 300,
                                &skew) != 0 || skew <= 0)
            skew = 300;
        profile_release(profile);
    }
    return skew;
}

static krb5_error_code
kmpc_init(krb5_context context, struct verto_ctx *vctx,
          const char *const *options, krb5_kdcmpc_moddata *data_out)
{
    krb5_error_code ret;
    krb5_kdcmpc_moddata data;
    char *msg = NULL;
    const struct rlimit no_core = { 0, 0 };

    *data_out = NULL;

    /* The KDC process now handles shares of keystreams and session keys:
     * never write them to a core dump (nor let processes of our uid ptrace
     * it).  This makes the whole krb5kdc process non-dumpable
     * (kdc-plugin/README.md); with fs.suid_dumpable = 2 the kernel would
     * still write a root-owned core, so the core size limit goes to 0 too. */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 ||
        setrlimit(RLIMIT_CORE, &no_core) != 0) {
        ret = errno;
        krb5_set_error_message(context, ret,
                               "kdcmpc: cannot disable core dumps: %s",
                               strerror(ret));
        return ret;
    }

    data = calloc(1, sizeof(*data));
    if (data == NULL)
        return ENOMEM;
    data->context = context;
    data->vctx = vctx;

    ret = kmpc_core_create(options, &data->core, &msg);
    if (ret) {
        krb5_set_error_message(context, ret, "%s",
                               msg != NULL ? msg : "kdcmpc: start-up failed");
        goto cleanup;
    }
    kmpc_core_set_clockskew(data->core, kmpc_clockskew(context));
    data->ev = verto_add_io(vctx, VERTO_EV_FLAG_PERSIST | VERTO_EV_FLAG_IO_READ,
                            kmpc_on_ready, kmpc_core_fd(data->core));
    if (data->ev == NULL) {
        ret = ENOMEM;
        krb5_set_error_message(context, ret,
                               "kdcmpc: cannot watch the completion eventfd");
        goto cleanup;
    }
    verto_set_private(data->ev, data, NULL);
    krb5_klog_syslog(LOG_INFO, "kdcmpc: kmpc module ready");

    *data_out = data;
    data = NULL;

cleanup:
    free(msg);
    kmpc_fini(context, data);
    return ret;
}

/* After a call that queued jobs (ret 0) or failed (ret, msg): the error
 * message, or the kick that sends the queued jobs once the current
 * callback is done. */
static krb5_error_code
kmpc_queued(krb5_context context, krb5_kdcmpc_moddata data,
            krb5_error_code ret, char *msg)
{
    if (ret) {
        krb5_set_error_message(context, ret, "%s",
                               msg != NULL ? msg : "kdcmpc: submit failed");
    } else if (data->draining) {
        /* A done callback of kmpc_on_ready: kicked when its loop ends. */
        data->drain_kick = data->drain_kick || kmpc_core_kicks(data->core);
    } else if (!data->kick) {
        /* Wake this loop once more when the current callback is done (a
         * zero verto timeout would wait for libev's 1 ms poll minimum). */
        data->kick = kmpc_core_arm_kick(data->core);
    }
    free(msg);
    return ret;
}

static krb5_error_code
kmpc_submit(krb5_context context, krb5_kdcmpc_moddata data,
            const krb5_kdcmpc_job *job, krb5_kdcmpc_done_fn done, void *arg)
{
    char *msg = NULL;
    krb5_error_code ret = kmpc_core_submit(data->core, job, done, arg, 0, &msg);

    return kmpc_queued(context, data, ret, msg);
}

/* Minor version 3: a ticket signed in the cluster (core.h). */
static krb5_error_code
kmpc_submit_ticket(krb5_context context, krb5_kdcmpc_moddata data,
                   const krb5_kdcmpc_job *job, krb5_kdcmpc_done_fn done,
                   void *arg)
{
    char *msg = NULL;
    krb5_error_code ret = kmpc_core_submit(data->core, job, done, arg, 1, &msg);

    return kmpc_queued(context, data, ret, msg);
}

/* Minor version 2: the exchange plan (core.h, planner.h). */
static krb5_error_code
kmpc_begin(krb5_context context, krb5_kdcmpc_moddata data,
           const krb5_kdcmpc_plan *plan, krb5_kdcmpc_exchange *exch_out)
{
    char *msg = NULL;
    krb5_error_code ret = kmpc_core_begin(data->core, plan, exch_out, &msg);

    return kmpc_queued(context, data, ret, msg);
}

static krb5_error_code
kmpc_submit_item(krb5_context context, krb5_kdcmpc_moddata data,
                 krb5_kdcmpc_exchange exch, int item,
                 const krb5_kdcmpc_job *job, krb5_kdcmpc_done_fn done,
                 void *arg)
{
    char *msg = NULL;
    krb5_error_code ret = kmpc_core_submit_item(data->core, exch, item, job,
                                                done, arg, &msg);

    return kmpc_queued(context, data, ret, msg);
}

static void
kmpc_end(krb5_context context, krb5_kdcmpc_moddata data,
         krb5_kdcmpc_exchange exch)
{
    kmpc_core_end(data->core, exch);
}

krb5_error_code
kdcmpc_kmpc_initvt(krb5_context context, int maj_ver, int min_ver,
                   krb5_plugin_vtable vtable)
{
    krb5_kdcmpc_vtable vt;

    if (maj_ver != 1)
        return KRB5_PLUGIN_VER_NOTSUPP;
    vt = (krb5_kdcmpc_vtable)vtable;
    vt->name = "kmpc";
    vt->init = kmpc_init;
    vt->fini = kmpc_fini;
    vt->submit = kmpc_submit;
    /* One Run per exchange needs the KDC's plans: a KDC of minor version 1
     * would have every job run alone (the module guesses nothing).  Refused,
     * loudly (docs/design/exchange-plan.md 1.3). */
    if (min_ver < 2) {
        krb5_klog_syslog(LOG_ERR, "kdcmpc: module kmpc needs the kdcmpc "
                         "exchange plan (interface 1.2); this KDC offers 1.%d: "
                         "not loaded; jobs under key handles fail as "
                         "KDC_ERR_SVC_UNAVAILABLE", min_ver);
        return KRB5_PLUGIN_VER_NOTSUPP;
    }
    vt->begin = kmpc_begin;
    vt->submit_item = kmpc_submit_item;
    vt->end = kmpc_end;
    if (min_ver >= 3)
        vt->submit_ticket = kmpc_submit_ticket;
    return 0;
}
