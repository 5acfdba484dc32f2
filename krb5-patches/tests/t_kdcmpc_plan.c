/* -*- mode: c; c-basic-offset: 4; indent-tabs-mode: nil -*- */
/*
 * t_kdcmpc_plan: the test kdcmpc module (krb5 patch "Add a test kdcmpc
 * module", plugins/kdcmpc/test) at interface minor version 2, driven as a
 * KDC of minor version 2 would: the vtable by minor version, a plan's
 * refusal when an item contradicts its role, a renewal-like exchange (the
 * presented ticket given at begin, the new ticket submitted later), a gate
 * that does not decrypt failing the gated item, and fail_item.
 *
 *   t_kdcmpc_plan PLUGIN_SO
 *
 * Exits 0 when every check holds; prints the first failure and exits 1.
 */

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <krb5/krb5.h>
#include <krb5/kdcmpc_plugin.h>
#include <verto.h>

typedef krb5_error_code (*initvt_fn)(krb5_context, int, int,
                                     krb5_plugin_vtable);

struct done {
    int calls;
    krb5_error_code code;
    krb5_data out;
};

static krb5_context ctx;
static verto_ctx *vctx;
static unsigned char key_id[KRB5_KDCMPC_KEY_ID_LEN];
static unsigned char key[32];

#define CHECK(cond, what)                                               \
    do {                                                                \
        if (!(cond)) {                                                  \
            fprintf(stderr, "t_kdcmpc_plan: %s (line %d)\n", what,      \
                    __LINE__);                                          \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static void
on_done(void *arg, krb5_error_code code, krb5_data out)
{
    struct done *d = arg;

    d->calls++;
    d->code = code;
    d->out = out;
}

static void
on_tick(verto_ctx *c, verto_ev *ev)
{
}

/* Turn the loop until d has been called, 2 s at the most. */
static void
wait_for(struct done *d)
{
    int i;

    for (i = 0; i < 200 && d->calls == 0; i++) {
        verto_add_timeout(vctx, VERTO_EV_FLAG_NONE, on_tick, 10);
        verto_run_once(vctx);
    }
    CHECK(d->calls == 1, "no completion, or more than one");
}

static krb5_keyblock
keyblock(void)
{
    krb5_keyblock kb;

    memset(&kb, 0, sizeof(kb));
    kb.magic = KV5M_KEYBLOCK;
    kb.enctype = KRB5_KDCMPC_ENCTYPE_AES256;
    kb.length = sizeof(key);
    kb.contents = key;
    return kb;
}

/* The ciphertext of plain under the test key, usage 2 (malloc'ed). */
static krb5_data
encrypt_local(const char *plain)
{
    krb5_keyblock kb = keyblock();
    krb5_data in = { KV5M_DATA, strlen(plain), (char *)plain };
    krb5_enc_data enc;
    size_t len;

    CHECK(krb5_c_encrypt_length(ctx, kb.enctype, in.length, &len) == 0,
          "encrypt length");
    memset(&enc, 0, sizeof(enc));
    enc.ciphertext.length = len;
    enc.ciphertext.data = malloc(len);
    CHECK(krb5_c_encrypt(ctx, &kb, 2, NULL, &in, &enc) == 0, "encrypt");
    return enc.ciphertext;
}

static krb5_kdcmpc_item
item(krb5_kdcmpc_role role, krb5_kdcmpc_job_type type, size_t length)
{
    krb5_kdcmpc_item it;

    memset(&it, 0, sizeof(it));
    it.role = role;
    it.type = type;
    it.enctype = KRB5_KDCMPC_ENCTYPE_AES256;
    it.key_id = key_id;
    it.usage = 2;
    it.length = length;
    it.gate = it.ticket = it.splice_from = KRB5_KDCMPC_NO_ITEM;
    return it;
}

/* A module of the test module with `extra` options (NULL: none). */
static krb5_kdcmpc_moddata
start(krb5_kdcmpc_vtable vt, const char *keyfile, const char *extra)
{
    char kf[600];
    const char *opts[4] = { kf, "delay_ms=0", extra, NULL };
    krb5_kdcmpc_moddata data = NULL;

    snprintf(kf, sizeof(kf), "keyfile=%s", keyfile);
    CHECK(vt->init(ctx, vctx, opts, &data) == 0, "init");
    return data;
}

/* Begins a renewal-like plan (0: the presented ticket `ct`, given; 1: the
 * new ticket, gated on 0), checks item 0's completion against `want`
 * (NULL: it must fail), then submits item 1 and returns its completion. */
static struct done
renewal(krb5_kdcmpc_vtable vt, krb5_kdcmpc_moddata data, krb5_data ct,
        const char *want)
{
    krb5_kdcmpc_item items[2];
    krb5_kdcmpc_plan plan;
    krb5_kdcmpc_exchange x = NULL;
    krb5_kdcmpc_job job;
    struct done d0 = { 0 }, d1 = { 0 };
    char plain[] = "a new ticket's EncTicketPart";

    items[0] = item(KRB5_KDCMPC_ROLE_HEADER_TICKET, KRB5_KDCMPC_DECRYPT,
                    ct.length);
    items[0].input = ct;
    items[0].done = on_done;
    items[0].arg = &d0;
    items[1] = item(KRB5_KDCMPC_ROLE_TICKET, KRB5_KDCMPC_ENCRYPT, 100);
    items[1].flags = KRB5_KDCMPC_ITEM_GATED;
    items[1].gate = 0;
    plan.kind = KRB5_KDCMPC_EXCH_RENEW;
    plan.n_items = 2;
    plan.items = items;
    CHECK(vt->begin(ctx, data, &plan, &x) == 0 && x != NULL, "begin");
    wait_for(&d0);
    if (want != NULL) {
        CHECK(d0.code == 0 && d0.out.length == strlen(want) &&
              memcmp(d0.out.data, want, d0.out.length) == 0,
              "the given ticket decrypts");
    } else {
        CHECK(d0.code == KRB5KRB_AP_ERR_BAD_INTEGRITY, "a bad ticket fails");
    }
    free(d0.out.data);
    memset(&job, 0, sizeof(job));
    job.type = KRB5_KDCMPC_ENCRYPT;
    job.enctype = KRB5_KDCMPC_ENCTYPE_AES256;
    job.key_id = key_id;
    job.usage = 3;
    job.input.magic = KV5M_DATA;
    job.input.length = strlen(plain);
    job.input.data = plain;
    CHECK(vt->submit_item(ctx, data, x, 1, &job, on_done, &d1) == EINVAL,
          "a job of another usage than its item is refused");
    job.usage = 2;
    CHECK(vt->submit_item(ctx, data, x, 1, &job, on_done, &d1) == 0,
          "submit_item");
    wait_for(&d1);
    vt->end(ctx, data, x);
    return d1;
}

/* The new ticket (d's output) decrypts to what was submitted. */
static void
check_ticket(struct done d)
{
    krb5_keyblock kb = keyblock();
    krb5_enc_data enc;
    char buf[256];
    krb5_data out = { KV5M_DATA, sizeof(buf), buf };
    const char *want = "a new ticket's EncTicketPart";

    CHECK(d.code == 0, "the new ticket is encrypted");
    memset(&enc, 0, sizeof(enc));
    enc.enctype = kb.enctype;
    enc.ciphertext = d.out;
    CHECK(krb5_c_decrypt(ctx, &kb, 2, NULL, &enc, &out) == 0 &&
          out.length == strlen(want) && memcmp(buf, want, out.length) == 0,
          "the new ticket decrypts to its plaintext");
    free(d.out.data);
}

int
main(int argc, char **argv)
{
    void *so;
    initvt_fn initvt;
    struct krb5_kdcmpc_vtable_st vt1, vt2;
    krb5_kdcmpc_moddata data;
    krb5_kdcmpc_item bad;
    krb5_kdcmpc_plan plan;
    krb5_kdcmpc_exchange x = NULL;
    krb5_data ct;
    struct done d;
    char keyfile[] = "/tmp/t_kdcmpc_plan.XXXXXX";
    FILE *fp;
    int fd;
    size_t i;

    CHECK(argc == 2, "usage: t_kdcmpc_plan PLUGIN_SO");
    CHECK(krb5_init_context(&ctx) == 0, "context");
    vctx = verto_new(NULL, VERTO_EV_TYPE_TIMEOUT);
    CHECK(vctx != NULL, "verto");
    so = dlopen(argv[1], RTLD_NOW);
    CHECK(so != NULL, dlerror());
    initvt = (initvt_fn)dlsym(so, "kdcmpc_test_initvt");
    CHECK(initvt != NULL, "kdcmpc_test_initvt");
    memset(&vt1, 0, sizeof(vt1));
    memset(&vt2, 0, sizeof(vt2));
    CHECK(initvt(ctx, 1, 1, (krb5_plugin_vtable)&vt1) == 0, "initvt 1.1");
    CHECK(vt1.submit != NULL && vt1.begin == NULL, "1.1: submit only");
    CHECK(initvt(ctx, 1, 2, (krb5_plugin_vtable)&vt2) == 0, "initvt 1.2");
    CHECK(vt2.begin != NULL && vt2.submit_item != NULL && vt2.end != NULL,
          "1.2: begin, submit_item, end");

    for (i = 0; i < sizeof(key_id); i++)
        key_id[i] = (unsigned char)i;
    for (i = 0; i < sizeof(key); i++)
        key[i] = (unsigned char)(0xa0 + i);
    fd = mkstemp(keyfile);
    CHECK(fd >= 0, "mkstemp");
    fp = fdopen(fd, "w");
    for (i = 0; i < sizeof(key_id); i++)
        fprintf(fp, "%02x", key_id[i]);
    fputc(' ', fp);
    for (i = 0; i < sizeof(key); i++)
        fprintf(fp, "%02x", key[i]);
    fputc('\n', fp);
    fclose(fp);

    data = start(&vt2, keyfile, NULL);
    /* An item contradicting its role: refused, no exchange. */
    bad = item(KRB5_KDCMPC_ROLE_TICKET, KRB5_KDCMPC_ENCRYPT, 100);
    bad.usage = 3;
    plan.kind = KRB5_KDCMPC_EXCH_TGS;
    plan.n_items = 1;
    plan.items = &bad;
    CHECK(vt2.begin(ctx, data, &plan, &x) == EINVAL && x == NULL,
          "a plan contradicting its role is refused");

    ct = encrypt_local("the presented ticket");
    check_ticket(renewal(&vt2, data, ct, "the presented ticket"));
    /* A presented ticket that does not decrypt: the gated item fails. */
    ct.data[20] ^= 1;
    d = renewal(&vt2, data, ct, NULL);
    CHECK(d.code == KRB5KRB_AP_ERR_BAD_INTEGRITY,
          "a gated item fails when its gate did not decrypt");
    ct.data[20] ^= 1;
    vt2.fini(ctx, data);

    /* fail_item = 6 (TICKET): that item fails as an unavailable cluster. */
    data = start(&vt2, keyfile, "fail_item=6");
    d = renewal(&vt2, data, ct, "the presented ticket");
    CHECK(d.code == KRB5KDC_ERR_SVC_UNAVAILABLE, "fail_item");
    vt2.fini(ctx, data);

    free(ct.data);
    unlink(keyfile);
    verto_free(vctx);
    krb5_free_context(ctx);
    printf("t_kdcmpc_plan: OK\n");
    return 0;
}
