/* MIT krb5's own aes*-cts-hmac-sha1-96 (libk5crypto of the patched prefix)
 * for test_cts_jobs.py, in hex on the command line:
 *   s2k ENCTYPE PASSWORD SALT          -> key (krb5_c_string_to_key)
 *   enc ENCTYPE KEY USAGE PLAIN        -> C || T (krb5_c_encrypt)
 *   dec ENCTYPE KEY USAGE CIPHER       -> P (krb5_c_decrypt), exit 2 if
 *                                         the integrity check fails
 *   cksum ENCTYPE KEY USAGE DATA       -> checksum (krb5_c_make_checksum)
 * An empty hex argument is "-". Test code only: it prints keys. */
#include <krb5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *
from_hex(const char *h, size_t *len_out)
{
    size_t n, i;
    unsigned char *out;
    unsigned int v;

    if (strcmp(h, "-") == 0)
        h = "";
    n = strlen(h) / 2;
    out = calloc(n + 1, 1);
    if (out == NULL)
        exit(1);
    for (i = 0; i < n; i++) {
        if (sscanf(h + 2 * i, "%2x", &v) != 1)
            exit(1);
        out[i] = (unsigned char)v;
    }
    *len_out = n;
    return out;
}

static void
print_hex(const void *p, size_t n)
{
    const unsigned char *b = p;
    size_t i;

    for (i = 0; i < n; i++)
        printf("%02x", b[i]);
    printf("\n");
}

static void
check(krb5_context ctx, krb5_error_code ret, const char *what)
{
    if (ret) {
        fprintf(stderr, "%s: %s\n", what, krb5_get_error_message(ctx, ret));
        exit(ret == KRB5KRB_AP_ERR_BAD_INTEGRITY ? 2 : 1);
    }
}

int
main(int argc, char **argv)
{
    krb5_context ctx;
    krb5_enctype et;
    krb5_keyblock kb;
    krb5_data in, out;
    krb5_enc_data ed;
    krb5_checksum ck;
    size_t klen, n, outlen;
    unsigned char *key, *data;

    if (argc < 5)
        return 1;
    check(NULL, krb5_init_context(&ctx), "init");
    et = atoi(argv[2]);
    if (strcmp(argv[1], "s2k") == 0) {
        krb5_data pw = { 0, strlen(argv[3]), argv[3] };
        krb5_data salt = { 0, strlen(argv[4]), argv[4] };
        check(ctx, krb5_c_string_to_key(ctx, et, &pw, &salt, &kb), "s2k");
        print_hex(kb.contents, kb.length);
        return 0;
    }
    if (argc < 6)
        return 1;
    key = from_hex(argv[3], &klen);
    kb.magic = KV5M_KEYBLOCK;
    kb.enctype = et;
    kb.length = klen;
    kb.contents = key;
    data = from_hex(argv[5], &n);
    in.data = (char *)data;
    in.length = n;
    if (strcmp(argv[1], "enc") == 0) {
        check(ctx, krb5_c_encrypt_length(ctx, et, n, &outlen), "length");
        memset(&ed, 0, sizeof(ed));
        ed.ciphertext.data = calloc(outlen, 1);
        ed.ciphertext.length = outlen;
        check(ctx, krb5_c_encrypt(ctx, &kb, atoi(argv[4]), NULL, &in, &ed), "encrypt");
        print_hex(ed.ciphertext.data, ed.ciphertext.length);
    } else if (strcmp(argv[1], "dec") == 0) {
        memset(&ed, 0, sizeof(ed));
        ed.enctype = et;
        ed.ciphertext = in;
        out.data = calloc(n + 1, 1);
        out.length = n;
        check(ctx, krb5_c_decrypt(ctx, &kb, atoi(argv[4]), NULL, &ed, &out), "decrypt");
        print_hex(out.data, out.length);
    } else if (strcmp(argv[1], "cksum") == 0) {
        check(ctx, krb5_c_make_checksum(ctx, 0, &kb, atoi(argv[4]), &in, &ck), "checksum");
        print_hex(ck.contents, ck.length);
    } else {
        return 1;
    }
    krb5_free_context(ctx);
    return 0;
}
