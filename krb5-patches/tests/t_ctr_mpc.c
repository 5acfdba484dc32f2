/* -*- mode: c; c-basic-offset: 4; indent-tabs-mode: nil -*- */
/*
 * t_ctr_mpc - tests of the aes128/aes256-ctr-mpc enctypes and the
 * gmac-aes128/256-mpc checksums added by krb5's ctr-mpc enctypes patch, through the public
 * libkrb5/libk5crypto API of the patched build only.
 *
 *   t_ctr_mpc vectors FILE.json      reproduce every shared test vector
 *   t_ctr_mpc tamper                 bit flips, counter ranges, key sizes
 *   t_ctr_mpc api                    names, lengths, similarity, s2k/PRF
 *                                    equality with aes-cts, checksum pairing
 *   t_ctr_mpc permitted              print the permitted enctypes of the
 *                                    profile (KRB5_CONFIG), one a line
 *   t_ctr_mpc encrypt ENCTYPE KEYHEX USAGE PLAINHEX        (krb5_c_encrypt)
 *   t_ctr_mpc encrypt-iov ENCTYPE KEYHEX USAGE PLAINHEX
 *                                    (krb5_c_encrypt_iov, data split over
 *                                    two DATA buffers)
 *   t_ctr_mpc decrypt ENCTYPE KEYHEX USAGE CIPHERHEX       (plain, stream and
 *                                    iov paths must agree; prints plaintext)
 *   t_ctr_mpc checksum ENCTYPE KEYHEX USAGE DATAHEX
 *   t_ctr_mpc verify ENCTYPE KEYHEX USAGE DATAHEX CKSUMHEX (prints valid /
 *                                    invalid)
 *
 * ENCTYPE is a name (aes128-ctr-mpc) or a number.  Outputs are lowercase hex
 * on one line.  Library errors are printed as "error <code> <message>" and
 * give exit status 2; failed assertions print "FAIL: ..." and give exit
 * status 1.
 */

#include <krb5.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ETYPE_128 ENCTYPE_AES128_CTR_MPC
#define ETYPE_256 ENCTYPE_AES256_CTR_MPC

static krb5_context ctx;
static int failures;

static void
fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failures++;
}

static const char *
errname(krb5_error_code code)
{
    static char buf[200];
    const char *msg = krb5_get_error_message(ctx, code);

    snprintf(buf, sizeof(buf), "%ld (%s)", (long)code, msg);
    krb5_free_error_message(ctx, msg);
    return buf;
}

/* Record a failure unless code equals want. */
static void
expect_code(krb5_error_code code, krb5_error_code want, const char *what)
{
    if (code != want) {
        char got[200];

        snprintf(got, sizeof(got), "%s", errname(code));
        fail("%s: got %s, want %s", what, got, errname(want));
    }
}

static void *
xmalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);

    if (p == NULL) {
        perror("calloc");
        exit(3);
    }
    return p;
}

static void
die_code(krb5_error_code code, const char *what)
{
    printf("error %ld %s: %s\n", (long)code, what, errname(code));
    exit(2);
}

/* Parse hex into a freshly allocated buffer; return -1 on malformed input. */
static int
parse_hex(const char *s, krb5_data *out)
{
    size_t len = strlen(s), i;
    unsigned int byte;

    out->magic = KV5M_DATA;
    out->length = 0;
    out->data = NULL;
    if (len % 2 != 0)
        return -1;
    out->data = xmalloc(len / 2);
    for (i = 0; i < len / 2; i++) {
        if (!isxdigit((unsigned char)s[2 * i]) ||
            !isxdigit((unsigned char)s[2 * i + 1]) ||
            sscanf(s + 2 * i, "%2x", &byte) != 1) {
            free(out->data);
            out->data = NULL;
            return -1;
        }
        out->data[i] = (char)byte;
    }
    out->length = len / 2;
    return 0;
}

static krb5_data
hex_or_die(const char *s, const char *what)
{
    krb5_data d;

    if (parse_hex(s, &d) != 0) {
        fprintf(stderr, "malformed hex for %s\n", what);
        exit(3);
    }
    return d;
}

static void
print_hex(const void *p, size_t len)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < len; i++)
        printf("%02x", b[i]);
    printf("\n");
}

static int
data_eq(const void *a, size_t alen, const void *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static krb5_enctype
enctype_arg(const char *s)
{
    krb5_enctype e;
    char *end;
    long v;

    if (krb5_string_to_enctype((char *)s, &e) == 0)
        return e;
    errno = 0;
    v = strtol(s, &end, 10);
    if (*s != '\0' && *end == '\0' && errno == 0)
        return (krb5_enctype)v;
    fprintf(stderr, "unknown enctype %s\n", s);
    exit(3);
}

static krb5_keyusage
usage_arg(const char *s)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0 || v > 0xffffffffUL) {
        fprintf(stderr, "bad usage %s\n", s);
        exit(3);
    }
    return (krb5_keyusage)v;
}

static krb5_cksumtype
cksumtype_for(krb5_enctype e)
{
    return (e == ETYPE_128) ? CKSUMTYPE_GMAC_AES128_MPC :
        CKSUMTYPE_GMAC_AES256_MPC;
}

/* The aes-cts enctype with the same key size. */
static krb5_enctype
cts_for(krb5_enctype e)
{
    return (e == ETYPE_128) ? ENCTYPE_AES128_CTS_HMAC_SHA1_96 :
        ENCTYPE_AES256_CTS_HMAC_SHA1_96;
}

static size_t
keylen_for(krb5_enctype e)
{
    return (e == ETYPE_128) ? 16 : 32;
}

static krb5_keyblock
make_kb(krb5_enctype e, krb5_data *bytes)
{
    krb5_keyblock kb;

    memset(&kb, 0, sizeof(kb));
    kb.magic = KV5M_KEYBLOCK;
    kb.enctype = e;
    kb.length = bytes->length;
    kb.contents = (krb5_octet *)bytes->data;
    return kb;
}

/*** Encryption and decryption through the three API paths ***/

/* krb5_c_encrypt; returns an allocated ctr0 || C || T in *out. */
static krb5_error_code
do_encrypt(const krb5_keyblock *kb, krb5_keyusage usage, const krb5_data *pt,
           krb5_data *out)
{
    krb5_error_code ret;
    krb5_enc_data enc;
    size_t len;

    memset(out, 0, sizeof(*out));
    ret = krb5_c_encrypt_length(ctx, kb->enctype, pt->length, &len);
    if (ret)
        return ret;
    memset(&enc, 0, sizeof(enc));
    enc.ciphertext.data = xmalloc(len);
    enc.ciphertext.length = len;
    ret = krb5_c_encrypt(ctx, kb, usage, NULL, pt, &enc);
    if (ret) {
        free(enc.ciphertext.data);
        return ret;
    }
    *out = enc.ciphertext;
    return 0;
}

/* krb5_c_encrypt_iov with HEADER, two DATA buffers split at an odd offset,
 * PADDING and TRAILER; output concatenated into *out. */
static krb5_error_code
do_encrypt_iov(const krb5_keyblock *kb, krb5_keyusage usage,
               const krb5_data *pt, krb5_data *out)
{
    krb5_error_code ret;
    krb5_crypto_iov iov[5];
    unsigned int split = pt->length / 3;
    char *buf;
    size_t total;

    memset(out, 0, sizeof(*out));
    memset(iov, 0, sizeof(iov));
    iov[0].flags = KRB5_CRYPTO_TYPE_HEADER;
    iov[1].flags = KRB5_CRYPTO_TYPE_DATA;
    iov[1].data.length = split;
    iov[2].flags = KRB5_CRYPTO_TYPE_DATA;
    iov[2].data.length = pt->length - split;
    iov[3].flags = KRB5_CRYPTO_TYPE_PADDING;
    iov[4].flags = KRB5_CRYPTO_TYPE_TRAILER;
    ret = krb5_c_crypto_length_iov(ctx, kb->enctype, iov, 5);
    if (ret)
        return ret;
    if (iov[0].data.length != 16 || iov[3].data.length != 0 ||
        iov[4].data.length != 16)
        fail("crypto_length_iov: header %u padding %u trailer %u",
             iov[0].data.length, iov[3].data.length, iov[4].data.length);
    total = iov[0].data.length + pt->length + iov[3].data.length +
        iov[4].data.length;
    buf = xmalloc(total);
    iov[0].data.data = buf;
    iov[1].data.data = buf + iov[0].data.length;
    iov[2].data.data = iov[1].data.data + split;
    iov[3].data.data = iov[2].data.data + iov[2].data.length;
    iov[4].data.data = iov[3].data.data + iov[3].data.length;
    if (pt->length > 0)
        memcpy(iov[1].data.data, pt->data, pt->length);
    ret = krb5_c_encrypt_iov(ctx, kb, usage, NULL, iov, 5);
    if (ret) {
        free(buf);
        return ret;
    }
    out->data = buf;
    out->length = total;
    return 0;
}

static krb5_error_code
decrypt_plain(const krb5_keyblock *kb, krb5_keyusage usage,
              const krb5_data *ct, krb5_data *out)
{
    krb5_error_code ret;
    krb5_enc_data enc;

    memset(out, 0, sizeof(*out));
    memset(&enc, 0, sizeof(enc));
    enc.enctype = kb->enctype;
    enc.ciphertext = *ct;
    out->data = xmalloc(ct->length);
    out->length = ct->length;
    ret = krb5_c_decrypt(ctx, kb, usage, NULL, &enc, out);
    if (ret) {
        free(out->data);
        memset(out, 0, sizeof(*out));
    }
    return ret;
}

/* *out = an allocated copy of len bytes at p. */
static void
copy_out(krb5_data *out, const char *p, size_t len)
{
    out->data = xmalloc(len);
    out->length = len;
    if (len > 0)
        memcpy(out->data, p, len);
}

/* krb5_c_decrypt_iov with a STREAM buffer. */
static krb5_error_code
decrypt_stream(const krb5_keyblock *kb, krb5_keyusage usage,
               const krb5_data *ct, krb5_data *out)
{
    krb5_error_code ret;
    krb5_crypto_iov iov[2];
    char *buf;

    memset(out, 0, sizeof(*out));
    buf = xmalloc(ct->length);
    if (ct->length > 0)
        memcpy(buf, ct->data, ct->length);
    iov[0].flags = KRB5_CRYPTO_TYPE_STREAM;
    iov[0].data.data = buf;
    iov[0].data.length = ct->length;
    iov[1].flags = KRB5_CRYPTO_TYPE_DATA;
    iov[1].data.data = NULL;
    iov[1].data.length = 0;
    ret = krb5_c_decrypt_iov(ctx, kb, usage, NULL, iov, 2);
    if (ret == 0)
        copy_out(out, iov[1].data.data, iov[1].data.length);
    free(buf);
    return ret;
}

/* krb5_c_decrypt_iov with HEADER, DATA (split in two), PADDING, TRAILER. */
static krb5_error_code
decrypt_iov(const krb5_keyblock *kb, krb5_keyusage usage,
            const krb5_data *ct, krb5_data *out)
{
    krb5_error_code ret;
    krb5_crypto_iov iov[5];
    unsigned int plen, split;
    char *buf;

    memset(out, 0, sizeof(*out));
    if (ct->length < 32)
        return KRB5_BAD_MSIZE;
    plen = ct->length - 32;
    split = (plen * 2) / 3;
    buf = xmalloc(ct->length);
    memcpy(buf, ct->data, ct->length);
    iov[0].flags = KRB5_CRYPTO_TYPE_HEADER;
    iov[0].data.data = buf;
    iov[0].data.length = 16;
    iov[1].flags = KRB5_CRYPTO_TYPE_DATA;
    iov[1].data.data = buf + 16;
    iov[1].data.length = split;
    iov[2].flags = KRB5_CRYPTO_TYPE_DATA;
    iov[2].data.data = buf + 16 + split;
    iov[2].data.length = plen - split;
    iov[3].flags = KRB5_CRYPTO_TYPE_PADDING;
    iov[3].data.data = NULL;
    iov[3].data.length = 0;
    iov[4].flags = KRB5_CRYPTO_TYPE_TRAILER;
    iov[4].data.data = buf + 16 + plen;
    iov[4].data.length = 16;
    ret = krb5_c_decrypt_iov(ctx, kb, usage, NULL, iov, 5);
    if (ret == 0)
        copy_out(out, buf + 16, plen);
    free(buf);
    return ret;
}

/*
 * Decrypt ct by all three paths.  They must agree on the error code and, on
 * success, on the plaintext.  Returns the common code, with the plaintext in
 * *out on success.
 */
static krb5_error_code
decrypt_all(const krb5_keyblock *kb, krb5_keyusage usage,
            const krb5_data *ct, krb5_data *out, const char *what)
{
    krb5_error_code r1, r2, r3;
    krb5_data p1, p2, p3;

    r1 = decrypt_plain(kb, usage, ct, &p1);
    r2 = decrypt_stream(kb, usage, ct, &p2);
    r3 = decrypt_iov(kb, usage, ct, &p3);
    if (r1 != r2 || r1 != r3)
        fail("%s: decrypt paths disagree: plain %ld, stream %ld, iov %ld",
             what, (long)r1, (long)r2, (long)r3);
    else if (r1 == 0 && (!data_eq(p1.data, p1.length, p2.data, p2.length) ||
                         !data_eq(p1.data, p1.length, p3.data, p3.length)))
        fail("%s: decrypt paths give different plaintexts", what);
    free(p2.data);
    free(p3.data);
    *out = p1;
    return r1;
}

static krb5_error_code
do_checksum(const krb5_keyblock *kb, krb5_cksumtype ct, krb5_keyusage usage,
            const krb5_data *d, krb5_checksum *out)
{
    memset(out, 0, sizeof(*out));
    return krb5_c_make_checksum(ctx, ct, kb, usage, d, out);
}

static krb5_error_code
do_verify(const krb5_keyblock *kb, krb5_cksumtype ct, krb5_keyusage usage,
          const krb5_data *d, const krb5_data *ck, krb5_boolean *valid)
{
    krb5_checksum c;

    memset(&c, 0, sizeof(c));
    c.magic = KV5M_CHECKSUM;
    c.checksum_type = ct;
    c.length = ck->length;
    c.contents = (krb5_octet *)ck->data;
    *valid = FALSE;
    return krb5_c_verify_checksum(ctx, kb, usage, d, &c, valid);
}

/*** vectors: a minimal reader for the flat JSON of enctype-vectors.json ***/

#define MAX_FIELDS 12

struct vec {
    char *names[MAX_FIELDS];
    char *values[MAX_FIELDS];
    int n;
};

static const char *
vec_get(const struct vec *v, const char *name)
{
    int i;

    for (i = 0; i < v->n; i++) {
        if (strcmp(v->names[i], name) == 0)
            return v->values[i];
    }
    return NULL;
}

static void
vec_clear(struct vec *v)
{
    int i;

    for (i = 0; i < v->n; i++) {
        free(v->names[i]);
        free(v->values[i]);
    }
    v->n = 0;
}

/* Read a JSON string or number token at *pp into an allocated string.
 * Escapes other than \" and \\ are refused. */
static char *
json_scalar(const char **pp)
{
    const char *p = *pp, *start;
    char *s, *o;

    if (*p == '"') {
        p++;
        s = o = xmalloc(strlen(p) + 1);
        while (*p != '"') {
            if (*p == '\0')
                goto bad;
            if (*p == '\\') {
                p++;
                if (*p != '"' && *p != '\\')
                    goto bad;
            }
            *o++ = *p++;
        }
        *o = '\0';
        *pp = p + 1;
        return s;
    bad:
        free(s);
        return NULL;
    }
    start = p;
    while (*p == '-' || isdigit((unsigned char)*p))
        p++;
    if (p == start)
        return NULL;
    s = xmalloc(p - start + 1);
    memcpy(s, start, p - start);
    *pp = p;
    return s;
}

static void check_s2k_vector(const struct vec *v, int idx);
static void check_enc_vector(const struct vec *v, int idx);
static void check_cksum_vector(const struct vec *v, int idx);

static int
run_vectors(const char *path)
{
    FILE *f;
    char *text, *section = NULL, *key = NULL, *val;
    const char *p;
    long size;
    int depth = 0, counts[3] = { 0, 0, 0 };
    struct vec v;

    f = fopen(path, "r");
    if (f == NULL) {
        perror(path);
        return 3;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0) {
        perror(path);
        fclose(f);
        return 3;
    }
    text = xmalloc(size + 1);
    if (fread(text, 1, size, f) != (size_t)size) {
        perror(path);
        fclose(f);
        return 3;
    }
    fclose(f);
    text[size] = '\0';

    memset(&v, 0, sizeof(v));
    for (p = text; *p != '\0';) {
        if (isspace((unsigned char)*p) || *p == ',') {
            p++;
        } else if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            if (*p == '}' && depth == 3 && section != NULL) {
                if (strcmp(section, "string_to_key") == 0)
                    check_s2k_vector(&v, counts[0]++);
                else if (strcmp(section, "encrypt") == 0)
                    check_enc_vector(&v, counts[1]++);
                else if (strcmp(section, "checksum") == 0)
                    check_cksum_vector(&v, counts[2]++);
                vec_clear(&v);
            }
            depth--;
            p++;
        } else if (*p == ':') {
            p++;
            while (isspace((unsigned char)*p))
                p++;
            if (depth == 1 && key != NULL) {
                free(section);
                section = key;
                key = NULL;
                continue;
            }
            if (*p == '{' || *p == '[' || key == NULL)
                goto malformed;
            val = json_scalar(&p);
            if (val == NULL)
                goto malformed;
            if (depth == 3 && v.n < MAX_FIELDS) {
                v.names[v.n] = key;
                v.values[v.n] = val;
                v.n++;
            } else {
                free(key);
                free(val);
            }
            key = NULL;
        } else if (*p == '"' || *p == '-' || isdigit((unsigned char)*p)) {
            free(key);
            key = json_scalar(&p);
            if (key == NULL)
                goto malformed;
        } else {
            goto malformed;
        }
    }
    free(text);
    free(section);
    free(key);
    printf("vectors: %d string-to-key, %d encryption, %d checksum\n",
           counts[0], counts[1], counts[2]);
    if (counts[0] == 0 || counts[1] == 0 || counts[2] == 0)
        fail("vectors: a section is empty or missing");
    return 0;

malformed:
    fprintf(stderr, "%s: malformed JSON near offset %ld\n", path,
            (long)(p - text));
    return 3;
}

static void
check_s2k_vector(const struct vec *v, int idx)
{
    krb5_error_code ret;
    const char *et = vec_get(v, "enctype"), *pw = vec_get(v, "password");
    const char *salt = vec_get(v, "salt"), *iter = vec_get(v, "iterations");
    const char *keyhex = vec_get(v, "key");
    krb5_enctype e, cts;
    krb5_data pwd, saltd, params, want;
    krb5_keyblock kb, kb_cts;
    unsigned char p4[4];
    unsigned long n;

    if (!et || !pw || !salt || !iter || !keyhex) {
        fail("string_to_key[%d]: missing field", idx);
        return;
    }
    e = enctype_arg(et);
    want = hex_or_die(keyhex, "key");
    n = strtoul(iter, NULL, 10);
    p4[0] = n >> 24;
    p4[1] = n >> 16;
    p4[2] = n >> 8;
    p4[3] = n;
    pwd = (krb5_data){ KV5M_DATA, strlen(pw), (char *)pw };
    saltd = (krb5_data){ KV5M_DATA, strlen(salt), (char *)salt };
    params = (krb5_data){ KV5M_DATA, 4, (char *)p4 };

    memset(&kb, 0, sizeof(kb));
    ret = krb5_c_string_to_key_with_params(ctx, e, &pwd, &saltd, &params,
                                           &kb);
    if (ret) {
        fail("string_to_key[%d] (%s): %s", idx, et, errname(ret));
    } else {
        if (kb.enctype != e)
            fail("string_to_key[%d]: keyblock enctype %d", idx, kb.enctype);
        if (!data_eq(kb.contents, kb.length, want.data, want.length))
            fail("string_to_key[%d] (%s): key differs from the vector",
                 idx, et);
    }

    /* 4096 iterations is also the default: no params gives the same key. */
    if (n == 4096) {
        krb5_keyblock kb2;

        memset(&kb2, 0, sizeof(kb2));
        ret = krb5_c_string_to_key(ctx, e, &pwd, &saltd, &kb2);
        if (ret || !data_eq(kb2.contents, kb2.length, want.data,
                            want.length))
            fail("string_to_key[%d]: krb5_c_string_to_key (default "
                 "iterations) differs", idx);
        krb5_free_keyblock_contents(ctx, &kb2);
    }

    /* Byte-identical to aes*-cts-hmac-sha1-96 from the same inputs. */
    cts = cts_for(e);
    memset(&kb_cts, 0, sizeof(kb_cts));
    ret = krb5_c_string_to_key_with_params(ctx, cts, &pwd, &saltd, &params,
                                           &kb_cts);
    if (ret || !data_eq(kb_cts.contents, kb_cts.length, want.data,
                        want.length))
        fail("string_to_key[%d]: aes-cts key differs from the ctr-mpc key",
             idx);
    krb5_free_keyblock_contents(ctx, &kb);
    krb5_free_keyblock_contents(ctx, &kb_cts);
    free(want.data);
}

/* What every encrypt and checksum vector holds: enctype, key, usage, ctr0,
 * and two hex fields of its own. */
struct vec_fields {
    char what[64];
    krb5_enctype e;
    krb5_keyusage usage;
    krb5_keyblock kb;
    krb5_data key, ctr0, a, b;
};

/* Read vector kind[idx] with its own fields fa and fb into *f; 0 (after a
 * failure) when a field is missing. */
static int
vec_load(const struct vec *v, const char *kind, int idx, const char *fa,
         const char *fb, struct vec_fields *f)
{
    const char *et = vec_get(v, "enctype"), *keyhex = vec_get(v, "key");
    const char *us = vec_get(v, "usage"), *c0 = vec_get(v, "ctr0");
    const char *ha = vec_get(v, fa), *hb = vec_get(v, fb);

    if (!et || !keyhex || !us || !c0 || !ha || !hb) {
        fail("%s[%d]: missing field", kind, idx);
        return 0;
    }
    snprintf(f->what, sizeof(f->what), "%s[%d] (%s)", kind, idx, et);
    f->e = enctype_arg(et);
    f->key = hex_or_die(keyhex, "key");
    f->a = hex_or_die(ha, fa);
    f->b = hex_or_die(hb, fb);
    f->ctr0 = hex_or_die(c0, "ctr0");
    f->usage = usage_arg(us);
    f->kb = make_kb(f->e, &f->key);
    return 1;
}

static void
vec_free(struct vec_fields *f)
{
    free(f->key.data);
    free(f->a.data);
    free(f->b.data);
    free(f->ctr0.data);
}

static void
check_enc_vector(const struct vec *v, int idx)
{
    krb5_error_code ret;
    struct vec_fields f;
    krb5_data got, fresh, got2;
    const krb5_data *pt = &f.a, *ct = &f.b;
    const char *what = f.what;

    if (!vec_load(v, "encrypt", idx, "plaintext", "ciphertext", &f))
        return;
    if (ct->length != pt->length + 32 || f.ctr0.length != 16 ||
        memcmp(ct->data, f.ctr0.data, 16) != 0)
        fail("%s: vector is not ctr0 || C || T", what);

    ret = decrypt_all(&f.kb, f.usage, ct, &got, what);
    if (ret)
        fail("%s: decrypt: %s", what, errname(ret));
    else if (!data_eq(got.data, got.length, pt->data, pt->length))
        fail("%s: decrypted plaintext differs from the vector", what);
    free(got.data);

    /* The wrong usage must not decrypt. */
    ret = decrypt_plain(&f.kb, f.usage + 1, ct, &got);
    expect_code(ret, KRB5KRB_AP_ERR_BAD_INTEGRITY, "vector with usage+1");
    free(got.data);

    /* A fresh encryption round-trips and uses a new random ctr0. */
    ret = do_encrypt(&f.kb, f.usage, pt, &fresh);
    if (ret) {
        fail("%s: encrypt: %s", what, errname(ret));
    } else {
        if (fresh.length != ct->length)
            fail("%s: fresh ciphertext length %u", what, fresh.length);
        if (memcmp(fresh.data, ct->data, 16) == 0)
            fail("%s: fresh encryption reused the vector's ctr0", what);
        ret = decrypt_all(&f.kb, f.usage, &fresh, &got2, what);
        if (ret || !data_eq(got2.data, got2.length, pt->data, pt->length))
            fail("%s: fresh encryption does not round-trip", what);
        free(got2.data);
    }
    free(fresh.data);
    vec_free(&f);
}

static void
check_cksum_vector(const struct vec *v, int idx)
{
    krb5_error_code ret;
    struct vec_fields f;
    krb5_boolean valid;
    krb5_checksum fresh;
    const krb5_data *d = &f.a, *ck = &f.b;
    const char *what = f.what;
    krb5_cksumtype ctype;

    if (!vec_load(v, "checksum", idx, "data", "checksum", &f))
        return;
    ctype = cksumtype_for(f.e);
    if (ck->length != 32 || f.ctr0.length != 16 ||
        memcmp(ck->data, f.ctr0.data, 16) != 0)
        fail("%s: vector is not ctr0 || T", what);

    ret = do_verify(&f.kb, ctype, f.usage, d, ck, &valid);
    if (ret || !valid)
        fail("%s: vector does not verify (%s)", what,
             ret ? errname(ret) : "invalid");
    /* Checksum type 0 means the enctype's mandatory type, gmac-*. */
    ret = do_verify(&f.kb, 0, f.usage, d, ck, &valid);
    if (ret || !valid)
        fail("%s: vector does not verify as the mandatory type", what);
    ret = do_verify(&f.kb, ctype, f.usage + 1, d, ck, &valid);
    if (ret || valid)
        fail("%s: verifies under usage+1", what);

    ret = do_checksum(&f.kb, 0, f.usage, d, &fresh);
    if (ret) {
        fail("%s: make_checksum: %s", what, errname(ret));
    } else {
        krb5_data fd = { KV5M_DATA, fresh.length, (char *)fresh.contents };

        if (fresh.checksum_type != ctype || fresh.length != 32)
            fail("%s: mandatory checksum type %d length %u", what,
                 fresh.checksum_type, fresh.length);
        ret = do_verify(&f.kb, ctype, f.usage, d, &fd, &valid);
        if (ret || !valid)
            fail("%s: fresh checksum does not verify", what);
        krb5_free_checksum_contents(ctx, &fresh);
    }
    vec_free(&f);
}

/*** tamper ***/

static void
random_bytes(krb5_data *d, size_t len)
{
    krb5_error_code ret;

    d->magic = KV5M_DATA;
    d->data = xmalloc(len);
    d->length = len;
    if (len == 0)
        return;
    ret = krb5_c_random_make_octets(ctx, d);
    if (ret)
        die_code(ret, "random");
}

static void
tamper_encryption(krb5_enctype e)
{
    static const size_t lens[] = { 0, 1, 16, 17, 40 };
    krb5_error_code ret;
    krb5_data key, pt, ct, got;
    krb5_keyblock kb;
    size_t li, bit;
    char what[96];
    int bad;

    random_bytes(&key, keylen_for(e));
    kb = make_kb(e, &key);
    for (li = 0; li < sizeof(lens) / sizeof(*lens); li++) {
        random_bytes(&pt, lens[li]);
        ret = do_encrypt(&kb, 3, &pt, &ct);
        if (ret)
            die_code(ret, "encrypt");
        bad = 0;
        for (bit = 0; bit < ct.length * 8; bit++) {
            ct.data[bit / 8] ^= (char)(1 << (bit % 8));
            ret = decrypt_all(&kb, 3, &ct, &got, "tampered");
            if (ret != KRB5KRB_AP_ERR_BAD_INTEGRITY) {
                snprintf(what, sizeof(what), "enctype %d len %zu: bit %zu "
                         "of %s flipped", e, lens[li], bit,
                         bit < 128 ? "ctr0" : bit < (16 + lens[li]) * 8 ?
                         "C" : "T");
                expect_code(ret, KRB5KRB_AP_ERR_BAD_INTEGRITY, what);
                bad++;
            }
            free(got.data);
            ct.data[bit / 8] ^= (char)(1 << (bit % 8));
        }
        /* Untampered still decrypts (the flips were undone). */
        ret = decrypt_all(&kb, 3, &ct, &got, "untampered");
        if (ret || !data_eq(got.data, got.length, pt.data, pt.length))
            fail("enctype %d len %zu: untampered message does not decrypt",
                 e, lens[li]);
        free(got.data);
        /* Truncated or extended by one byte: no longer authentic. */
        ct.length--;
        ret = decrypt_plain(&kb, 3, &ct, &got);
        free(got.data);
        if (ret != KRB5KRB_AP_ERR_BAD_INTEGRITY && ret != KRB5_BAD_MSIZE)
            fail("enctype %d len %zu: truncated message gives %s", e,
                 lens[li], errname(ret));
        ct.length++;
        if (bad == 0)
            printf("ok: enctype %d, %zu-byte plaintext: all %zu bit flips "
                   "refused\n", e, lens[li], (size_t)ct.length * 8);
        free(pt.data);
        free(ct.data);
    }
    free(key.data);
}

static void
tamper_counter_ranges(krb5_enctype e)
{
    krb5_error_code ret;
    krb5_data key, msg, got;
    krb5_keyblock kb;
    char what[96];
    size_t plen;
    int i;

    random_bytes(&key, keylen_for(e));
    kb = make_kb(e, &key);
    /* ctr0 = 0 (with 0 and 16 bytes), ctr0 = 2^128 - 1 (1 byte: its first
     * keystream block would be the zero block), ctr0 = 2^128 - 2 with 17
     * bytes (c0 + 2 = 2^128).  Whatever the tag, these must be refused. */
    for (i = 0; i < 4; i++) {
        plen = (i == 0) ? 0 : (i == 1) ? 16 : (i == 2) ? 1 : 17;
        random_bytes(&msg, 32 + plen);
        memset(msg.data, (i < 2) ? 0x00 : 0xff, 16);
        if (i == 3)
            msg.data[15] = (char)0xfe;
        snprintf(what, sizeof(what), "enctype %d: ctr0 %s, %zu bytes", e,
                 (i < 2) ? "0" : (i == 2) ? "2^128-1" : "2^128-2", plen);
        ret = decrypt_all(&kb, 2, &msg, &got, what);
        expect_code(ret, KRB5KRB_AP_ERR_BAD_INTEGRITY, what);
        free(got.data);
        free(msg.data);
    }

    /* A checksum with ctr0 = 0 is never valid. */
    {
        krb5_data d = { KV5M_DATA, 3, "abc" }, ck;
        krb5_boolean valid = TRUE;

        random_bytes(&ck, 32);
        memset(ck.data, 0, 16);
        ret = do_verify(&kb, cksumtype_for(e), 5, &d, &ck, &valid);
        if (ret != 0 || valid)
            fail("enctype %d: checksum with ctr0 = 0 accepted (%s)", e,
                 errname(ret));
        free(ck.data);
    }
    free(key.data);
}

static void
tamper_checksums(krb5_enctype e)
{
    krb5_error_code ret;
    krb5_data key, d;
    krb5_keyblock kb;
    krb5_checksum ck;
    krb5_boolean valid;
    size_t bit;
    int bad = 0;

    random_bytes(&key, keylen_for(e));
    random_bytes(&d, 45);
    kb = make_kb(e, &key);
    ret = do_checksum(&kb, cksumtype_for(e), 9, &d, &ck);
    if (ret)
        die_code(ret, "make_checksum");
    for (bit = 0; bit < ck.length * 8; bit++) {
        krb5_data cd = { KV5M_DATA, ck.length, (char *)ck.contents };

        ck.contents[bit / 8] ^= 1 << (bit % 8);
        ret = do_verify(&kb, cksumtype_for(e), 9, &d, &cd, &valid);
        if (ret != 0 || valid) {
            fail("enctype %d: checksum bit %zu flipped: %s", e, bit,
                 ret ? errname(ret) : "still valid");
            bad++;
        }
        ck.contents[bit / 8] ^= 1 << (bit % 8);
    }
    for (bit = 0; bit < d.length * 8; bit += 7) {
        krb5_data cd = { KV5M_DATA, ck.length, (char *)ck.contents };

        d.data[bit / 8] ^= (char)(1 << (bit % 8));
        ret = do_verify(&kb, cksumtype_for(e), 9, &d, &cd, &valid);
        if (ret != 0 || valid) {
            fail("enctype %d: data bit %zu flipped: checksum still valid",
                 e, bit);
            bad++;
        }
        d.data[bit / 8] ^= (char)(1 << (bit % 8));
    }
    {
        krb5_data cd = { KV5M_DATA, ck.length, (char *)ck.contents };

        ret = do_verify(&kb, cksumtype_for(e), 9, &d, &cd, &valid);
        if (ret != 0 || !valid)
            fail("enctype %d: untampered checksum invalid", e);
        /* Wrong length is a size error, not a crash or a pass. */
        cd.length = 31;
        ret = do_verify(&kb, cksumtype_for(e), 9, &d, &cd, &valid);
        if (ret == 0 && valid)
            fail("enctype %d: 31-byte checksum accepted", e);
    }
    if (bad == 0)
        printf("ok: enctype %d: checksum bit flips refused\n", e);
    krb5_free_checksum_contents(ctx, &ck);
    free(key.data);
    free(d.data);
}

/* 40-byte kmpc key handles, and AES keys of the other size. */
static void
tamper_keysize(krb5_enctype e)
{
    krb5_error_code ret;
    unsigned char handle[40];
    krb5_data hd = { KV5M_DATA, sizeof(handle), (char *)handle };
    krb5_data other, good, pt = { KV5M_DATA, 5, "hello" }, ct, got, prfout;
    krb5_keyblock kb, kb_good;
    krb5_key k = NULL;
    krb5_checksum ck, ckbad;
    krb5_boolean valid;
    krb5_crypto_iov iov[4];
    char buf[64], what[96];
    const char *label;
    krb5_data *bad_keys[2];
    size_t prflen;
    int i;

    int before = failures;

    memcpy(handle, "kmpc-key", 8);
    memset(handle + 8, 0xA5, 32);
    random_bytes(&other, (e == ETYPE_128) ? 32 : 16);
    random_bytes(&good, keylen_for(e));
    kb_good = make_kb(e, &good);
    bad_keys[0] = &hd;
    bad_keys[1] = &other;

    /* A genuine ciphertext and checksum to decrypt and verify. */
    ret = do_encrypt(&kb_good, 1, &pt, &ct);
    if (ret)
        die_code(ret, "encrypt");
    ret = do_checksum(&kb_good, cksumtype_for(e), 1, &pt, &ck);
    if (ret)
        die_code(ret, "make_checksum");

    for (i = 0; i < 2; i++) {
        label = (i == 0) ? "40-byte handle" : "wrong-size AES key";
        kb = make_kb(e, bad_keys[i]);

        snprintf(what, sizeof(what), "enctype %d, %s: encrypt", e, label);
        ret = do_encrypt(&kb, 1, &pt, &got);
        expect_code(ret, KRB5_BAD_KEYSIZE, what);
        free(got.data);

        snprintf(what, sizeof(what), "enctype %d, %s: encrypt_iov", e, label);
        ret = do_encrypt_iov(&kb, 1, &pt, &got);
        expect_code(ret, KRB5_BAD_KEYSIZE, what);
        free(got.data);

        snprintf(what, sizeof(what), "enctype %d, %s: decrypt", e, label);
        ret = decrypt_all(&kb, 1, &ct, &got, what);
        expect_code(ret, KRB5_BAD_KEYSIZE, what);
        free(got.data);

        snprintf(what, sizeof(what), "enctype %d, %s: make_checksum", e,
                 label);
        ret = do_checksum(&kb, cksumtype_for(e), 1, &pt, &ckbad);
        expect_code(ret, KRB5_BAD_KEYSIZE, what);
        if (ret == 0)
            krb5_free_checksum_contents(ctx, &ckbad);
        snprintf(what, sizeof(what), "enctype %d, %s: make_checksum (type 0)",
                 e, label);
        ret = do_checksum(&kb, 0, 1, &pt, &ckbad);
        expect_code(ret, KRB5_BAD_KEYSIZE, what);
        if (ret == 0)
            krb5_free_checksum_contents(ctx, &ckbad);

        snprintf(what, sizeof(what), "enctype %d, %s: verify_checksum", e,
                 label);
        {
            krb5_data cd = { KV5M_DATA, 32, buf };

            memset(buf, 1, 32);
            ret = do_verify(&kb, cksumtype_for(e), 1, &pt, &cd, &valid);
            expect_code(ret, KRB5_BAD_KEYSIZE, what);
            if (valid)
                fail("%s: reported valid", what);
        }

        snprintf(what, sizeof(what), "enctype %d, %s: prf", e, label);
        ret = krb5_c_prf_length(ctx, e, &prflen);
        if (ret || prflen > sizeof(buf))
            die_code(ret, "prf_length");
        prfout = (krb5_data){ KV5M_DATA, prflen, buf };
        ret = krb5_c_prf(ctx, &kb, &pt, &prfout);
        expect_code(ret, KRB5_BAD_KEYSIZE, what);

        /* The krb5_key variants (krb5_k_create_key accepts any length). */
        snprintf(what, sizeof(what), "enctype %d, %s: krb5_k_encrypt_iov", e,
                 label);
        ret = krb5_k_create_key(ctx, &kb, &k);
        if (ret)
            die_code(ret, "krb5_k_create_key");
        memset(buf, 0, sizeof(buf));
        iov[0].flags = KRB5_CRYPTO_TYPE_HEADER;
        iov[0].data = (krb5_data){ KV5M_DATA, 16, buf };
        iov[1].flags = KRB5_CRYPTO_TYPE_DATA;
        iov[1].data = (krb5_data){ KV5M_DATA, 5, buf + 16 };
        iov[2].flags = KRB5_CRYPTO_TYPE_PADDING;
        iov[2].data = (krb5_data){ KV5M_DATA, 0, buf + 21 };
        iov[3].flags = KRB5_CRYPTO_TYPE_TRAILER;
        iov[3].data = (krb5_data){ KV5M_DATA, 16, buf + 21 };
        ret = krb5_k_encrypt_iov(ctx, k, 1, NULL, iov, 4);
        expect_code(ret, KRB5_BAD_KEYSIZE, what);
        krb5_k_free_key(ctx, k);
        k = NULL;
    }
    if (failures == before)
        printf("ok: enctype %d: 40-byte handles and wrong-size AES keys "
               "refused with KRB5_BAD_KEYSIZE\n", e);
    krb5_free_checksum_contents(ctx, &ck);
    free(ct.data);
    free(other.data);
    free(good.data);
}

/* Nonempty SIGN_ONLY data cannot be authenticated and is refused. */
static void
tamper_sign_only(krb5_enctype e)
{
    krb5_error_code ret;
    krb5_data key;
    krb5_keyblock kb;
    krb5_crypto_iov iov[5];
    char buf[64], sign[] = "associated";

    random_bytes(&key, keylen_for(e));
    kb = make_kb(e, &key);
    memset(buf, 0, sizeof(buf));
    iov[0].flags = KRB5_CRYPTO_TYPE_HEADER;
    iov[0].data = (krb5_data){ KV5M_DATA, 16, buf };
    iov[1].flags = KRB5_CRYPTO_TYPE_DATA;
    iov[1].data = (krb5_data){ KV5M_DATA, 5, buf + 16 };
    iov[2].flags = KRB5_CRYPTO_TYPE_SIGN_ONLY;
    iov[2].data = (krb5_data){ KV5M_DATA, sizeof(sign) - 1, sign };
    iov[3].flags = KRB5_CRYPTO_TYPE_PADDING;
    iov[3].data = (krb5_data){ KV5M_DATA, 0, buf + 21 };
    iov[4].flags = KRB5_CRYPTO_TYPE_TRAILER;
    iov[4].data = (krb5_data){ KV5M_DATA, 16, buf + 21 };
    ret = krb5_c_encrypt_iov(ctx, &kb, 1, NULL, iov, 5);
    expect_code(ret, EINVAL, "encrypt_iov with SIGN_ONLY data");
    ret = krb5_c_decrypt_iov(ctx, &kb, 1, NULL, iov, 5);
    expect_code(ret, EINVAL, "decrypt_iov with SIGN_ONLY data");
    /* An empty SIGN_ONLY buffer is harmless. */
    iov[2].data.length = 0;
    ret = krb5_c_encrypt_iov(ctx, &kb, 1, NULL, iov, 5);
    expect_code(ret, 0, "encrypt_iov with empty SIGN_ONLY");
    ret = krb5_c_decrypt_iov(ctx, &kb, 1, NULL, iov, 5);
    expect_code(ret, 0, "decrypt_iov with empty SIGN_ONLY");
    free(key.data);
}

static int
run_tamper(void)
{
    static const krb5_enctype etypes[] = { ETYPE_128, ETYPE_256 };
    size_t i;

    for (i = 0; i < 2; i++) {
        tamper_encryption(etypes[i]);
        tamper_counter_ranges(etypes[i]);
        tamper_checksums(etypes[i]);
        tamper_keysize(etypes[i]);
        tamper_sign_only(etypes[i]);
    }
    return 0;
}

/*** api ***/

static int
list_has(const krb5_enctype *list, krb5_enctype e)
{
    for (; list != NULL && *list; list++) {
        if (*list == e)
            return 1;
    }
    return 0;
}

static void
api_names(krb5_enctype e, const char *name, krb5_cksumtype c,
          const char *cname)
{
    krb5_error_code ret;
    krb5_enctype got;
    krb5_cksumtype gotc;
    krb5_boolean similar;
    char buf[128];
    unsigned int len;
    size_t slen;
    krb5_enctype cts = cts_for(e);

    if (krb5_string_to_enctype((char *)name, &got) != 0 || got != e)
        fail("krb5_string_to_enctype(%s)", name);
    if (krb5_enctype_to_name(e, FALSE, buf, sizeof(buf)) != 0 ||
        strcmp(buf, name) != 0)
        fail("krb5_enctype_to_name(%d) = %s", e, buf);
    if (!krb5_c_valid_enctype(e))
        fail("%s not valid", name);
    if (krb5_string_to_cksumtype((char *)cname, &gotc) != 0 || gotc != c)
        fail("krb5_string_to_cksumtype(%s)", cname);
    if (!krb5_c_valid_cksumtype(c) || !krb5_c_is_keyed_cksum(c))
        fail("%s not a valid keyed checksum type", cname);
    if (krb5_c_checksum_length(ctx, c, &slen) != 0 || slen != 32)
        fail("%s checksum length %zu", cname, slen);

    ret = krb5_c_enctype_compare(ctx, e, cts, &similar);
    if (ret || similar)
        fail("%s reported similar to aes-cts", name);
    ret = krb5_c_enctype_compare(ctx, e, e, &similar);
    if (ret || !similar)
        fail("%s not similar to itself", name);
    ret = krb5_c_enctype_compare(ctx, ETYPE_128, ETYPE_256, &similar);
    if (ret || similar)
        fail("aes128-ctr-mpc similar to aes256-ctr-mpc");

    if (krb5_c_crypto_length(ctx, e, KRB5_CRYPTO_TYPE_HEADER, &len) ||
        len != 16)
        fail("%s header length %u", name, len);
    if (krb5_c_crypto_length(ctx, e, KRB5_CRYPTO_TYPE_TRAILER, &len) ||
        len != 16)
        fail("%s trailer length %u", name, len);
    if (krb5_c_crypto_length(ctx, e, KRB5_CRYPTO_TYPE_PADDING, &len) ||
        len != 0)
        fail("%s padding length %u", name, len);
    if (krb5_c_crypto_length(ctx, e, KRB5_CRYPTO_TYPE_CHECKSUM, &len) ||
        len != 32)
        fail("%s checksum crypto length %u", name, len);
    if (krb5_c_encrypt_length(ctx, e, 1000, &slen) || slen != 1032)
        fail("%s encrypt_length(1000) = %zu", name, slen);
    {
        size_t kbytes, klen;

        if (krb5_c_keylengths(ctx, e, &kbytes, &klen) != 0 ||
            kbytes != keylen_for(e) || klen != keylen_for(e))
            fail("%s keylengths", name);
    }
}

/* A checksum of type ct with kb over a fixed message gives code want. */
static void
expect_checksum(const krb5_keyblock *kb, krb5_cksumtype ct,
                krb5_error_code want, const char *what)
{
    krb5_data d = { KV5M_DATA, 4, "data" };
    krb5_checksum ck;
    krb5_error_code ret;

    ret = do_checksum(kb, ct, 1, &d, &ck);
    expect_code(ret, want, what);
    if (ret == 0)
        krb5_free_checksum_contents(ctx, &ck);
}

static void
api_pairing(krb5_enctype e)
{
    krb5_error_code ret;
    krb5_cksumtype *types = NULL, c = cksumtype_for(e);
    krb5_enctype cts = cts_for(e);
    krb5_cksumtype hmac = (e == ETYPE_128) ? CKSUMTYPE_HMAC_SHA1_96_AES128 :
        CKSUMTYPE_HMAC_SHA1_96_AES256;
    unsigned int count, i;
    krb5_data key;
    krb5_keyblock kb, kb_cts;

    ret = krb5_c_keyed_checksum_types(ctx, e, &count, &types);
    if (ret || count != 1 || types[0] != c)
        fail("keyed checksum types of %d: want exactly %d (got %u)", e, c,
             count);
    krb5_free_cksumtypes(ctx, types);
    ret = krb5_c_keyed_checksum_types(ctx, cts, &count, &types);
    for (i = 0; ret == 0 && i < count; i++) {
        if (types[i] == c)
            fail("gmac-mpc listed as keyed checksum type of aes-cts");
    }
    krb5_free_cksumtypes(ctx, types);

    random_bytes(&key, keylen_for(e));
    kb = make_kb(e, &key);
    kb_cts = make_kb(cts, &key);
    /* The raw ctr-mpc key must not key another checksum, nor gmac-mpc
     * another enctype's key. */
    expect_checksum(&kb, hmac, KRB5_BAD_ENCTYPE,
                    "hmac-sha1-96-aes with a ctr-mpc key");
    expect_checksum(&kb, CKSUMTYPE_HMAC_MD5_ARCFOUR, KRB5_BAD_ENCTYPE,
                    "hmac-md5 with a ctr-mpc key");
    expect_checksum(&kb_cts, c, KRB5_BAD_ENCTYPE, "gmac-mpc with an aes-cts key");
    /* Unkeyed checksums do not use the key and stay available. */
    expect_checksum(&kb, CKSUMTYPE_RSA_MD5, 0, "md5 with a ctr-mpc key");
    free(key.data);
}

/* PRF equal to the aes-cts PRF for the same key bytes (RFC 3962). */
static void
api_prf(krb5_enctype e)
{
    krb5_error_code ret;
    krb5_enctype cts = cts_for(e);
    krb5_data key, in = { KV5M_DATA, 4, "test" }, o1, o2;
    krb5_keyblock kb, kb_cts;
    char b1[64], b2[64];
    size_t l1, l2;

    random_bytes(&key, keylen_for(e));
    kb = make_kb(e, &key);
    kb_cts = make_kb(cts, &key);
    if (krb5_c_prf_length(ctx, e, &l1) || krb5_c_prf_length(ctx, cts, &l2) ||
        l1 != l2 || l1 > sizeof(b1)) {
        fail("prf length of %d", e);
        free(key.data);
        return;
    }
    o1 = (krb5_data){ KV5M_DATA, l1, b1 };
    o2 = (krb5_data){ KV5M_DATA, l2, b2 };
    ret = krb5_c_prf(ctx, &kb, &in, &o1);
    if (ret == 0)
        ret = krb5_c_prf(ctx, &kb_cts, &in, &o2);
    if (ret || memcmp(b1, b2, l1) != 0)
        fail("PRF of %d differs from aes-cts PRF (%s)", e, errname(ret));
    free(key.data);
}

/* Random keys, fresh ctr0 for every encryption, never in default lists. */
static void
api_misc(krb5_enctype e)
{
    krb5_error_code ret;
    krb5_keyblock kb;
    krb5_data pt = { KV5M_DATA, 3, "abc" }, c1, c2, got;
    krb5_enctype *list = NULL;

    ret = krb5_c_make_random_key(ctx, e, &kb);
    if (ret || kb.length != keylen_for(e) || kb.enctype != e)
        fail("make_random_key(%d)", e);
    if (ret)
        return;
    if (do_encrypt(&kb, 4, &pt, &c1) || do_encrypt(&kb, 4, &pt, &c2)) {
        fail("encrypt with random key");
    } else {
        if (memcmp(c1.data, c2.data, 16) == 0)
            fail("two encryptions share ctr0");
        if (memcmp(c1.data + 16, c2.data + 16, c1.length - 16) == 0)
            fail("two encryptions are identical");
        ret = decrypt_all(&kb, 4, &c2, &got, "random key");
        if (ret || !data_eq(got.data, got.length, pt.data, pt.length))
            fail("random-key round trip");
        free(got.data);
        free(c1.data);
        free(c2.data);
    }
    krb5_free_keyblock_contents(ctx, &kb);

    ret = krb5_get_permitted_enctypes(ctx, &list);
    if (ret == 0 && list_has(list, e))
        fail("%d is in the default permitted enctypes", e);
    krb5_free_enctypes(ctx, list);
}

static int
run_api(void)
{
    api_names(ETYPE_128, "aes128-ctr-mpc", CKSUMTYPE_GMAC_AES128_MPC,
              "gmac-aes128-mpc");
    api_names(ETYPE_256, "aes256-ctr-mpc", CKSUMTYPE_GMAC_AES256_MPC,
              "gmac-aes256-mpc");
    if (ETYPE_128 != -29001 || ETYPE_256 != -29002 ||
        CKSUMTYPE_GMAC_AES128_MPC != -29101 ||
        CKSUMTYPE_GMAC_AES256_MPC != -29102)
        fail("enctype or checksum numbers differ from the spec");
    api_pairing(ETYPE_128);
    api_pairing(ETYPE_256);
    api_prf(ETYPE_128);
    api_prf(ETYPE_256);
    api_misc(ETYPE_128);
    api_misc(ETYPE_256);
    return 0;
}

/* Print the permitted enctypes of the profile in KRB5_CONFIG, one number a
 * line (to check how enctype lists in krb5.conf expand). */
static int
run_permitted(void)
{
    krb5_error_code ret;
    krb5_enctype *list = NULL, *e;

    ret = krb5_get_permitted_enctypes(ctx, &list);
    if (ret)
        die_code(ret, "krb5_get_permitted_enctypes");
    for (e = list; *e; e++)
        printf("%d\n", (int)*e);
    krb5_free_enctypes(ctx, list);
    return 0;
}

/*** single operations for the Python cross-check ***/

static int
run_op(int argc, char **argv)
{
    krb5_error_code ret;
    const char *op = argv[1];
    krb5_enctype e;
    krb5_keyusage usage;
    krb5_data key, in, out;
    krb5_keyblock kb;

    if (argc < 6)
        return -1;
    e = enctype_arg(argv[2]);
    key = hex_or_die(argv[3], "key");
    usage = usage_arg(argv[4]);
    in = hex_or_die(argv[5], "input");
    kb = make_kb(e, &key);

    if (strcmp(op, "encrypt") == 0 || strcmp(op, "encrypt-iov") == 0 ||
        strcmp(op, "decrypt") == 0) {
        if (op[0] == 'd')
            ret = decrypt_all(&kb, usage, &in, &out, "decrypt");
        else if (op[7] == '\0')
            ret = do_encrypt(&kb, usage, &in, &out);
        else
            ret = do_encrypt_iov(&kb, usage, &in, &out);
        if (ret)
            die_code(ret, op);
        print_hex(out.data, out.length);
        free(out.data);
    } else if (strcmp(op, "checksum") == 0) {
        krb5_checksum ck;

        ret = do_checksum(&kb, cksumtype_for(e), usage, &in, &ck);
        if (ret)
            die_code(ret, op);
        print_hex(ck.contents, ck.length);
        krb5_free_checksum_contents(ctx, &ck);
    } else if (strcmp(op, "verify") == 0) {
        krb5_data ck;
        krb5_boolean valid;

        if (argc < 7)
            return -1;
        ck = hex_or_die(argv[6], "checksum");
        ret = do_verify(&kb, cksumtype_for(e), usage, &in, &ck, &valid);
        if (ret)
            die_code(ret, op);
        printf("%s\n", valid ? "valid" : "invalid");
        free(ck.data);
    } else {
        return -1;
    }
    free(key.data);
    free(in.data);
    return 0;
}

static void
usage_exit(void)
{
    fprintf(stderr, "usage: t_ctr_mpc vectors FILE.json | tamper | api | "
            "permitted |\n"
            "       t_ctr_mpc encrypt|encrypt-iov|decrypt|checksum ENCTYPE "
            "KEYHEX USAGE HEX |\n"
            "       t_ctr_mpc verify ENCTYPE KEYHEX USAGE DATAHEX CKSUMHEX\n");
    exit(3);
}

int
main(int argc, char **argv)
{
    krb5_error_code ret;
    int status;

    if (argc < 2)
        usage_exit();
    ret = krb5_init_context(&ctx);
    if (ret) {
        fprintf(stderr, "krb5_init_context: %ld\n", (long)ret);
        return 3;
    }
    if (strcmp(argv[1], "vectors") == 0 && argc == 3)
        status = run_vectors(argv[2]);
    else if (strcmp(argv[1], "tamper") == 0 && argc == 2)
        status = run_tamper();
    else if (strcmp(argv[1], "api") == 0 && argc == 2)
        status = run_api();
    else if (strcmp(argv[1], "permitted") == 0 && argc == 2)
        status = run_permitted();
    else if ((status = run_op(argc, argv)) < 0)
        usage_exit();
    krb5_free_context(ctx);
    if (status != 0)
        return status;
    if (failures > 0) {
        printf("%d FAILURES\n", failures);
        return 1;
    }
    if (strcmp(argv[1], "vectors") == 0 || strcmp(argv[1], "tamper") == 0 ||
        strcmp(argv[1], "api") == 0)
        printf("%s: all checks passed\n", argv[1]);
    return 0;
}
