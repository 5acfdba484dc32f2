"""Key handles are taken only from the KDB (docs/security-model.md, "Key
handles come only from the KDB"; krb5 patch 0008 kdc_mpc_check_ticket_keys).

A key handle is recognised by its bytes (40 bytes, "kmpc-key" and a key
id). A session key inside a ticket is chosen by whoever made the ticket: if
one of that form reached kdc_mpc_submit(), the ticket's contents would name
a cluster key id for an ENCRYPT job. The reachable case is a user-to-user
TGS-REQ, whose new ticket is encrypted in the second ticket's session key
(kdc_mpc_tgs.c kdc_mpc_tgs_encrypt_ticket).

The realm has no MPC server (clusters=0, krb5's test module, which journals
every job): the krbtgt key is local, so the test, holding it from a keytab,
forges a TGT for alice whose session key is a handle naming the key id of
an MPC-held service key, and sends it as a u2u second ticket. The KDC must
refuse the request (KDC_ERR_POLICY, logged) and submit no job; without the
check it submitted an ENCRYPT job under the service's key id and issued the
ticket.
"""
import subprocess

import kmpc_harness.realm as realm_mod
from kmpc_harness.cluster import password as _password

SERVICE = "host/mpc.kmpc.test"

# forge_u2u KEYTAB MODE [KEYID]: take the TGT from the default ccache,
# decrypt it with the krbtgt key from KEYTAB, and (MODE "handle") replace its
# session key by a handle naming KEYID (aes256-ctr-mpc), re-encrypt it and
# ask for a user-to-user ticket to the TGT's client with it as the second
# ticket (MODE "plain": the TGT unchanged). Prints "issued" or the error.
FORGE_U2U = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <krb5.h>
#include <krb5/kdcmpc_plugin.h>

/* libkrb5 exports these; MIT declares them in its private k5-int.h. */
krb5_error_code encode_krb5_ticket(const krb5_ticket *, krb5_data **);
krb5_error_code krb5_encrypt_tkt_part(krb5_context, const krb5_keyblock *,
                                      krb5_ticket *);
krb5_error_code KRB5_CALLCONV krb5_decrypt_tkt_part(krb5_context,
                                                    const krb5_keyblock *,
                                                    krb5_ticket *);

static void
check(krb5_context ctx, krb5_error_code ret, const char *what)
{
    if (ret) {
        fprintf(stderr, "%s: %s\n", what, krb5_get_error_message(ctx, ret));
        exit(2);
    }
}

static void
set_handle(krb5_keyblock *kb, const char *hex)
{
    unsigned char *h = calloc(1, KRB5_KDCMPC_HANDLE_LEN);
    unsigned int i, b;

    memcpy(h, KRB5_KDCMPC_HANDLE_MAGIC, KRB5_KDCMPC_HANDLE_MAGIC_LEN);
    for (i = 0; i < KRB5_KDCMPC_HANDLE_LEN - KRB5_KDCMPC_HANDLE_MAGIC_LEN; i++) {
        sscanf(hex + 2 * i, "%2x", &b);
        h[KRB5_KDCMPC_HANDLE_MAGIC_LEN + i] = (unsigned char)b;
    }
    free(kb->contents);
    kb->contents = h;
    kb->length = KRB5_KDCMPC_HANDLE_LEN;
    kb->enctype = KRB5_KDCMPC_ENCTYPE_AES256;
}

int
main(int argc, char **argv)
{
    krb5_context ctx;
    krb5_ccache cc;
    krb5_keytab kt;
    krb5_keytab_entry ent;
    krb5_principal client, tgs;
    krb5_creds mcreds, tgt, in, *out = NULL;
    krb5_ticket *tkt;
    krb5_data *der;
    krb5_error_code ret;
    int handle = strcmp(argv[2], "handle") == 0;

    check(NULL, krb5_init_context(&ctx), "init");
    check(ctx, krb5_cc_default(ctx, &cc), "ccache");
    check(ctx, krb5_cc_get_principal(ctx, cc, &client), "client");
    check(ctx, krb5_build_principal_ext(ctx, &tgs, client->realm.length,
                                        client->realm.data, 6, "krbtgt",
                                        client->realm.length,
                                        client->realm.data, 0), "tgs");
    memset(&mcreds, 0, sizeof(mcreds));
    mcreds.client = client;
    mcreds.server = tgs;
    check(ctx, krb5_cc_retrieve_cred(ctx, cc, 0, &mcreds, &tgt), "TGT");
    check(ctx, krb5_decode_ticket(&tgt.ticket, &tkt), "decode");
    check(ctx, krb5_kt_resolve(ctx, argv[1], &kt), "keytab");
    check(ctx, krb5_kt_get_entry(ctx, kt, tkt->server, tkt->enc_part.kvno,
                                 tkt->enc_part.enctype, &ent), "krbtgt key");
    check(ctx, krb5_decrypt_tkt_part(ctx, &ent.key, tkt), "decrypt");
    if (handle)
        set_handle(tkt->enc_part2->session, argv[3]);
    check(ctx, krb5_encrypt_tkt_part(ctx, &ent.key, tkt), "encrypt");
    check(ctx, encode_krb5_ticket(tkt, &der), "encode");

    memset(&in, 0, sizeof(in));
    in.client = client;
    in.server = client;
    in.second_ticket = *der;
    in.keyblock.enctype = tkt->enc_part2->session->enctype;
    ret = krb5_get_credentials(ctx, KRB5_GC_USER_USER | KRB5_GC_NO_STORE, cc,
                               &in, &out);
    if (ret) {
        printf("error %ld: %s\n", (long)ret, krb5_get_error_message(ctx, ret));
        return 1;
    }
    printf("issued\n");
    return 0;
}
"""


def _build_forger(tmp_path):
    return realm_mod.build_c_text(FORGE_U2U, tmp_path, "forge_u2u")


def _forge(m, exe, keytab, *args):
    p = subprocess.run([exe, keytab, *args], capture_output=True, text=True,
                       env=m.env, timeout=120)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    return p.stdout.strip()


def test_handle_shaped_session_key_in_a_second_ticket_is_refused(kmpc_factory,
                                                                 tmp_path):
    exe = _build_forger(tmp_path)
    m = kmpc_factory(clusters=0)
    # alice and the krbtgt keep local keys: only the forged ticket could
    # make a job.
    pw = _password()
    m.addprinc("alice", pw, enctypes=["aes256-cts-hmac-sha1-96"])
    m.passwords["alice"] = pw
    spw = _password()
    m.addprinc(SERVICE, spw, enctypes=["aes256-ctr-mpc"], flags="")
    key_id = m.migrate(SERVICE, spw)
    keytab = str(tmp_path / "krbtgt.keytab")
    m.extract_keytab(m.tgs, keytab)
    m.start_kdc()
    m.login("alice")

    # The forger works: the unchanged TGT as a second ticket gets a u2u
    # ticket (encrypted locally, no job).
    assert _forge(m, exe, keytab, "plain") == "issued"
    assert m.journal_lines() == []

    out = _forge(m, exe, keytab, "handle", key_id)
    assert out.startswith("error"), out
    assert "KDC policy rejects request" in out, out
    log = m.kdc_log_text()
    assert ("kdcmpc: refusing second ticket: a key in it has the form of a "
            "key handle") in log, log
    assert key_id not in log
    # No job reached the module: nothing names the service's key id.
    assert m.journal_lines() == [], m.journal_lines()
    assert m.kdc_alive()
