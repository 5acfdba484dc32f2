/* -*- mode: c; c-basic-offset: 4; indent-tabs-mode: nil -*- */
/* kdc-plugin/tools/kmpc_kdb_handle.c - write kmpc key handles into the KDB */
/*
 * Usage (run on the KDC host, like kadmin.local; KRB5_CONFIG and
 * KRB5_KDC_PROFILE select the realm's configuration):
 *
 *   kmpc-kdb-handle [-r REALM] set PRINC ENCTYPE KEYID_HEX
 *       Replace all key data of PRINC with one key of ENCTYPE
 *       (aes128-ctr-mpc, aes256-ctr-mpc or aes128/aes256-cts-hmac-sha1-96)
 *       whose contents are the handle
 *       "kmpc-key" || KEYID (32 bytes, 64 hex digits), at kvno + 1.
 *       The replaced keys' bytes stay in the KDB's files (free space, the
 *       update log) until `kmpc-admin rewrite-kdb`, which it says.
 *
 *   kmpc-kdb-handle [-r REALM] get-key PRINC ENCTYPE
 *       Print PRINC's current key of ENCTYPE (aes*-cts-hmac-sha1-96 or
 *       aes*-ctr-mpc) in hex on stdout, for the admin tool that shares a
 *       migrated key with the MPC cluster.  The key goes to stdout only,
 *       never to a log; a key that is already a handle is refused.
 *
 *   kmpc-kdb-handle [-r REALM] keys PRINC
 *       What the KDB holds for PRINC, read with the master key (libkdb5),
 *       one line per key_data entry: "KVNO ENCTYPE handle KEYID_HEX" for a
 *       key handle, "KVNO ENCTYPE key SHA256_HEX" for a real key (the
 *       SHA-256 of its bytes, never the bytes), for tests that check that
 *       no real key of an MPC-protected principal is in the KDB.
 *
 *   kmpc-kdb-handle [-r REALM] history PRINC
 *       PRINC's kadm5 password history (the old keys of its
 *       KRB5_TL_KADM_DATA entry, which kadm5 encrypts in the kadmin/history
 *       key), decrypted with that key as read from the KDB with the master
 *       key: one line per key, "ENTRY KVNO ENCTYPE handle KEYID_HEX" or
 *       "ENTRY KVNO ENCTYPE key SHA256_HEX" as for keys; nothing for an
 *       empty history.
 *
 * The handle is written through kadm5_setkey_principal_4(), which encrypts
 * the key data contents (40 bytes) in the master key like any other key:
 * neither it nor krb5_dbe_encrypt_key_data() checks contents against the
 * enctype's key length, and only libk5crypto does (KRB5_BAD_KEYSIZE), which
 * is the safety net that keeps a handle from ever being used as a key.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <krb5/krb5.h>
#include <kadm5/admin.h>
#include <com_err.h>
#include <kdb.h>
#include <openssl/evp.h>

#define HANDLE_MAGIC "kmpc-key"
#define HANDLE_MAGIC_LEN 8
#define KEY_ID_LEN 32
#define HANDLE_LEN (HANDLE_MAGIC_LEN + KEY_ID_LEN)
#define ENCTYPE_AES128_MPC (-29001)
#define ENCTYPE_AES256_MPC (-29002)

static const char *progname = "kmpc-kdb-handle";

/* kadm5's principal record (lib/kadm5/server_internal.h, not installed),
 * XDR-encoded in the KRB5_TL_KADM_DATA tl_data entry; libkadm5srv exports
 * its XDR function. */
typedef struct {
    int n_key_data;
    krb5_key_data *key_data;
} kmpc_hist_ent;

typedef struct {
    int version;
    char *policy;
    long aux_attributes;
    unsigned int old_key_len;
    unsigned int old_key_next;
    krb5_kvno admin_history_kvno;
    kmpc_hist_ent *old_keys;
} kmpc_adb_ent;

bool_t xdr_osa_princ_ent_rec(XDR *xdrs, kmpc_adb_ent *objp);

static void
usage(void)
{
    fprintf(stderr, "usage: %s [-r REALM] set PRINC ENCTYPE KEYID_HEX\n"
            "       %s [-r REALM] get-key PRINC ENCTYPE\n"
            "       %s [-r REALM] keys PRINC\n"
            "       %s [-r REALM] history PRINC\n",
            progname, progname, progname, progname);
    exit(2);
}

static int
kmpc_is_mpc_enctype(krb5_enctype enctype)
{
    return enctype == ENCTYPE_AES128_MPC || enctype == ENCTYPE_AES256_MPC;
}

static int
kmpc_is_exportable_enctype(krb5_enctype enctype)
{
    return kmpc_is_mpc_enctype(enctype) ||
        enctype == ENCTYPE_AES128_CTS_HMAC_SHA1_96 ||
        enctype == ENCTYPE_AES256_CTS_HMAC_SHA1_96;
}

/* Decode exactly len bytes of hex; return 0 on success. */
static int
kmpc_unhex(const char *str, unsigned char *out, size_t len)
{
    size_t i;
    unsigned int hi, lo;
    const char *digits = "0123456789abcdef";
    const char *p;

    if (strlen(str) != len * 2)
        return -1;
    for (i = 0; i < len; i++) {
        p = strchr(digits, str[2 * i] | 0x20);
        if (p == NULL || str[2 * i] == '\0')
            return -1;
        hi = p - digits;
        p = strchr(digits, str[2 * i + 1] | 0x20);
        if (p == NULL || str[2 * i + 1] == '\0')
            return -1;
        lo = p - digits;
        out[i] = (hi << 4) | lo;
    }
    return 0;
}

static krb5_error_code
kmpc_set(krb5_context context, void *handle, krb5_principal princ,
         krb5_enctype enctype, const char *keyid_hex)
{
    krb5_error_code ret;
    unsigned char contents[HANDLE_LEN];
    kadm5_key_data kd;

    /* The enctypes whose keys the cluster holds (aes*-cts: with their
     * usage material, docs/design/enctype.md). */
    if (!kmpc_is_exportable_enctype(enctype)) {
        fprintf(stderr, "%s: a handle key must be of enctype aes128-ctr-mpc, "
                "aes256-ctr-mpc or aes128/aes256-cts-hmac-sha1-96\n",
                progname);
        return EINVAL;
    }
    memcpy(contents, HANDLE_MAGIC, HANDLE_MAGIC_LEN);
    if (kmpc_unhex(keyid_hex, contents + HANDLE_MAGIC_LEN, KEY_ID_LEN) != 0) {
        fprintf(stderr, "%s: KEYID_HEX must be %d hex digits\n", progname,
                KEY_ID_LEN * 2);
        return EINVAL;
    }

    memset(&kd, 0, sizeof(kd));
    kd.kvno = 0;                        /* the next kvno */
    kd.key.magic = KV5M_KEYBLOCK;
    kd.key.enctype = enctype;
    kd.key.length = HANDLE_LEN;
    kd.key.contents = contents;
    kd.salt.type = KRB5_KDB_SALTTYPE_NORMAL;
    kd.salt.data.length = 0;
    kd.salt.data.data = NULL;

    ret = kadm5_setkey_principal_4(handle, princ, FALSE, &kd, 1);
    if (ret)
        com_err(progname, ret, "while setting the handle key");
    else
        fprintf(stderr, "%s: the KDB's files (the db2 file's free space, the "
                "iprop update log) may still hold the replaced keys: run "
                "kmpc-admin rewrite-kdb (docs/admin-guide.md, \"Old keys after a "
                "move\")\n", progname);
    return ret;
}

static krb5_error_code
kmpc_get_key(krb5_context context, void *handle, krb5_principal princ,
             krb5_enctype enctype)
{
    krb5_error_code ret;
    kadm5_key_data *kd = NULL, *best = NULL;
    int n = 0, i;
    size_t j;

    if (!kmpc_is_exportable_enctype(enctype)) {
        fprintf(stderr, "%s: only aes*-cts-hmac-sha1-96 and aes*-ctr-mpc keys "
                "can be exported\n", progname);
        return EINVAL;
    }
    ret = kadm5_get_principal_keys(handle, princ, 0, &kd, &n);
    if (ret) {
        com_err(progname, ret, "while reading the principal's keys");
        return ret;
    }
    for (i = 0; i < n; i++) {
        if (kd[i].key.enctype != enctype)
            continue;
        if (best == NULL || kd[i].kvno > best->kvno)
            best = &kd[i];
    }
    if (best == NULL) {
        fprintf(stderr, "%s: the principal has no key of that enctype\n",
                progname);
        ret = ENOENT;
        goto cleanup;
    }
    if (best->key.length == HANDLE_LEN &&
        memcmp(best->key.contents, HANDLE_MAGIC, HANDLE_MAGIC_LEN) == 0) {
        fprintf(stderr, "%s: that key is already an MPC key handle\n",
                progname);
        ret = EINVAL;
        goto cleanup;
    }
    for (j = 0; j < best->key.length; j++)
        printf("%02x", best->key.contents[j]);
    printf("\n");
    if (fflush(stdout) != 0)
        ret = errno;

cleanup:
    kadm5_free_kadm5_key_data(context, n, kd);
    return ret;
}

/* Print "KVNO ENCTYPE handle KEYID_HEX" or "KVNO ENCTYPE key SHA256_HEX"
 * for kb (never its bytes) and a newline. */
static void
kmpc_print_key(int kvno, const krb5_keyblock *kb)
{
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen, j;
    char etname[64];

    if (krb5_enctype_to_name(kb->enctype, FALSE, etname, sizeof(etname)))
        snprintf(etname, sizeof(etname), "%d", (int)kb->enctype);
    printf("%d %s ", kvno, etname);
    if (kb->length == HANDLE_LEN &&
        memcmp(kb->contents, HANDLE_MAGIC, HANDLE_MAGIC_LEN) == 0) {
        printf("handle ");
        for (j = HANDLE_MAGIC_LEN; j < HANDLE_LEN; j++)
            printf("%02x", kb->contents[j]);
    } else {
        dlen = 0;
        if (!EVP_Digest(kb->contents, kb->length, digest, &dlen,
                        EVP_sha256(), NULL))
            dlen = 0;
        printf("key ");
        for (j = 0; j < dlen; j++)
            printf("%02x", digest[j]);
    }
    printf("\n");
}

static krb5_error_code
kmpc_list_keys(krb5_context context, krb5_principal princ)
{
    krb5_error_code ret;
    krb5_db_entry *ent = NULL;
    krb5_keyblock kb;
    int i;

    ret = krb5_db_get_principal(context, princ, 0, &ent);
    if (ret) {
        com_err(progname, ret, "while reading the principal's entry");
        return ret;
    }
    for (i = 0; i < ent->n_key_data; i++) {
        memset(&kb, 0, sizeof(kb));
        ret = krb5_dbe_decrypt_key_data(context, NULL, &ent->key_data[i], &kb,
                                        NULL);
        if (ret) {
            com_err(progname, ret, "while decrypting key data");
            goto cleanup;
        }
        kmpc_print_key(ent->key_data[i].key_data_kvno, &kb);
        krb5_free_keyblock_contents(context, &kb);
    }
    if (fflush(stdout) != 0)
        ret = errno;

cleanup:
    krb5_db_free_principal(context, ent);
    return ret;
}

/* The kadmin/history keys (*keys, *n), read with the master key. */
static krb5_error_code
kmpc_hist_keys(krb5_context context, krb5_keyblock **keys, int *n)
{
    krb5_error_code ret;
    krb5_principal hist = NULL;
    krb5_db_entry *ent = NULL;
    int i;

    *keys = NULL;
    *n = 0;
    ret = krb5_parse_name(context, KADM5_HIST_PRINCIPAL, &hist);
    if (!ret)
        ret = krb5_db_get_principal(context, hist, 0, &ent);
    krb5_free_principal(context, hist);
    if (ret)
        return ret;
    *keys = calloc(ent->n_key_data + 1, sizeof(**keys));
    if (*keys == NULL)
        ret = ENOMEM;
    for (i = 0; !ret && i < ent->n_key_data; i++) {
        ret = krb5_dbe_decrypt_key_data(context, NULL, &ent->key_data[i],
                                        &(*keys)[i], NULL);
        if (!ret)
            *n = i + 1;
    }
    krb5_db_free_principal(context, ent);
    return ret;
}

/* Print one history entry (number e) decrypted with the first of the n
 * history keys that decrypts it. */
static void
kmpc_print_hist_ent(krb5_context context, unsigned int e,
                    const kmpc_hist_ent *h, krb5_keyblock *keys, int n)
{
    krb5_keyblock kb;
    int i, k;

    for (i = 0; i < h->n_key_data; i++) {
        for (k = 0; k < n; k++) {
            memset(&kb, 0, sizeof(kb));
            if (krb5_dbe_decrypt_key_data(context, &keys[k], &h->key_data[i],
                                          &kb, NULL) == 0)
                break;
        }
        printf("%u ", e);
        if (k == n) {
            printf("%d %d undecryptable\n", h->key_data[i].key_data_kvno,
                   h->key_data[i].key_data_type[0]);
            continue;
        }
        kmpc_print_key(h->key_data[i].key_data_kvno, &kb);
        krb5_free_keyblock_contents(context, &kb);
    }
}

static krb5_error_code
kmpc_list_history(krb5_context context, krb5_principal princ)
{
    krb5_error_code ret;
    krb5_db_entry *ent = NULL;
    krb5_tl_data tl;
    krb5_keyblock *keys = NULL;
    kmpc_adb_ent adb;
    XDR xdrs;
    int i, n = 0;
    unsigned int e;

    memset(&adb, 0, sizeof(adb));
    ret = krb5_db_get_principal(context, princ, 0, &ent);
    if (ret) {
        com_err(progname, ret, "while reading the principal's entry");
        return ret;
    }
    tl.tl_data_type = KRB5_TL_KADM_DATA;
    ret = krb5_dbe_lookup_tl_data(context, ent, &tl);
    if (ret || tl.tl_data_length == 0)
        goto cleanup;  /* no kadm5 record: no history */
    ret = kmpc_hist_keys(context, &keys, &n);
    if (ret) {
        com_err(progname, ret, "while reading the kadmin/history key");
        goto cleanup;
    }
    xdrmem_create(&xdrs, (caddr_t)tl.tl_data_contents, tl.tl_data_length,
                  XDR_DECODE);
    if (!xdr_osa_princ_ent_rec(&xdrs, &adb)) {
        fprintf(stderr, "%s: cannot decode the kadm5 record\n", progname);
        ret = EINVAL;
    }
    xdr_destroy(&xdrs);
    for (e = 0; !ret && e < adb.old_key_len; e++)
        kmpc_print_hist_ent(context, e, &adb.old_keys[e], keys, n);
    xdrs.x_op = XDR_FREE;
    xdr_osa_princ_ent_rec(&xdrs, &adb);
    if (!ret && fflush(stdout) != 0)
        ret = errno;

cleanup:
    for (i = 0; i < n; i++)
        krb5_free_keyblock_contents(context, &keys[i]);
    free(keys);
    krb5_db_free_principal(context, ent);
    return ret;
}

/* The number of arguments of cmd, the command included; usage() if cmd is
 * unknown. */
static int
command_nargs(const char *cmd)
{
    if (strcmp(cmd, "set") == 0)
        return 4;
    if (strcmp(cmd, "get-key") == 0)
        return 3;
    if (strcmp(cmd, "keys") == 0 || strcmp(cmd, "history") == 0)
        return 2;
    usage();
    return 0;
}

int
main(int argc, char **argv)
{
    krb5_error_code ret;
    krb5_context context = NULL;
    kadm5_config_params params;
    void *handle = NULL;
    krb5_principal princ = NULL;
    krb5_enctype enctype = 0;
    char *realm = NULL, *cmd;
    int opt, nargs;

    while ((opt = getopt(argc, argv, "r:")) != -1) {
        if (opt == 'r')
            realm = optarg;
        else
            usage();
    }
    argc -= optind;
    argv += optind;
    if (argc < 1)
        usage();
    cmd = argv[0];
    nargs = command_nargs(cmd);
    if (argc != nargs)
        usage();

    ret = kadm5_init_krb5_context(&context);
    if (ret) {
        com_err(progname, ret, "while initializing krb5");
        return 1;
    }
    memset(&params, 0, sizeof(params));
    if (realm != NULL) {
        params.mask |= KADM5_CONFIG_REALM;
        params.realm = realm;
        ret = krb5_set_default_realm(context, realm);
        if (ret)
            goto cleanup;
    }

    ret = nargs < 3 ? 0 : krb5_string_to_enctype(argv[2], &enctype);
    if (ret) {
        fprintf(stderr, "%s: unknown enctype %s\n", progname, argv[2]);
        goto cleanup;
    }
    ret = krb5_parse_name(context, argv[1], &princ);
    if (ret) {
        com_err(progname, ret, "while parsing the principal name");
        goto cleanup;
    }

    ret = kadm5_init_with_password(context, "kmpc-kdb-handle/admin", NULL,
                                   KADM5_ADMIN_SERVICE, &params,
                                   KADM5_STRUCT_VERSION, KADM5_API_VERSION_4,
                                   NULL, &handle);
    if (ret) {
        com_err(progname, ret, "while opening the KDB");
        goto cleanup;
    }

    if (strcmp(cmd, "set") == 0)
        ret = kmpc_set(context, handle, princ, enctype, argv[3]);
    else if (strcmp(cmd, "keys") == 0)
        ret = kmpc_list_keys(context, princ);
    else if (strcmp(cmd, "history") == 0)
        ret = kmpc_list_history(context, princ);
    else
        ret = kmpc_get_key(context, handle, princ, enctype);

cleanup:
    if (handle != NULL)
        kadm5_destroy(handle);
    krb5_free_principal(context, princ);
    krb5_free_context(context);
    return ret ? 1 : 0;
}
