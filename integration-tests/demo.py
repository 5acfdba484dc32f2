#!/usr/bin/env python3
"""`make demo`: the whole kmpc realm on loopback.

Three MPC servers (mutual TLS, their ring); a realm in which kmpc's key
dealer is on from the start, so that MIT's own tools make every key the
demo creates in the cluster: the load-test users' and a service's
(host/svc, dealt as a service's key) with kadmin.local ktadd, which writes
the new key to their keytab while the KDB gets its handle; the krbtgt key
(kadmin.local cpw -randkey; no KDB ever held it); alice with kadmin.local
addprinc. The KDB, read with the master key by kdb_dump_ref.py (the stash
and a dump, its own RFC 3962 decryption), holds no real key but K/M's and
kadmin/history's (kadmind's others are moved: KADMIND_KEYS_IN_CLUSTER). The patched KDC with the kdcmpc module
and kadmind start; alice logs in with Debian's unmodified kinit, Debian's
kvno validates a ticket to host/svc with its keytab, alice changes her
password with kpasswd through kadmind (the new key goes to the cluster),
logs in with it; PKINIT with Debian's krb5-pkinit: an anonymous TGT
(kinit -n) armors alice's login (kinit -T), and carol, who has no key,
logs in with her certificate (deploy/gen-pkinit-certs.sh made the CA, the
KDC's and her certificate); kmpc-admin status --kdb (OK), and a short login storm
when kmpc-storm is built. Everything stays running afterwards; the last
lines say where the logs are and how to stop it.

Passwords and keys are never printed: the demo user's password lives only in
this process and on kinit's / kmpc-admin's stdin.
"""
import os
import re
import secrets
import shutil
import subprocess
import sys

# The realm comes from the test harness (kmpc_harness, beside this file).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kmpc_harness import cluster as kmpc_cluster  # noqa: E402
from kmpc_harness.kmpc_realm import KmpcRealm  # noqa: E402
from kmpc_harness import realm as kmpc_realm  # noqa: E402
from kmpc_harness import pkinit  # noqa: E402

STORM_USERS = 50
USER_ENCTYPES = ("aes256-cts-hmac-sha1-96", "aes128-cts-hmac-sha1-96")
# kadmind's principals whose keys the demo moves into the cluster (kmpc-admin
# share --randkey --service): kadmind has the cluster decrypt the tickets to
# them (krb5 patch 0026-Decrypt-tickets). kadmin/history stays in the KDB
# (kadm5 encrypts the password history under it).
KADMIND_KEYS_IN_CLUSTER = ("kadmin/admin", "kadmin/changepw")
STOCK_KINIT, STOCK_KVNO = "/usr/bin/kinit", "/usr/bin/kvno"
STOCK_PKINIT = "/usr/lib/x86_64-linux-gnu/krb5/plugins/preauth/pkinit.so"
CERT_USER = "carol"  # logs in with a certificate only: she has no key
CTS = "aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96"


def step(msg):
    print(f"\n==> {msg}", flush=True)


def show(text):
    text = text.strip()
    if text:
        print(text, flush=True)


def stock_env(r, workdir):
    """The environment of Debian's unmodified clients: a krb5.conf naming
    only the standard AES enctypes and the realm's PKINIT anchor, none of
    kmpc's variables."""
    conf = os.path.join(workdir, "stock-krb5.conf")
    with open(conf, "w") as f:
        f.write(f"[libdefaults]\n    default_realm = {r.realm}\n"
                f"    dns_lookup_kdc = false\n    rdns = false\n"
                f"    default_tkt_enctypes = {CTS}\n    permitted_enctypes = {CTS}\n"
                f"[realms]\n    {r.realm} = {{\n        kdc = 127.0.0.1:{r.kdc_port}\n"
                + pkinit.client_relation(r.pkinit_certs) + "    }\n")
    env = {k: v for k, v in r.env.items()
           if not k.startswith(("KRB5", "KMPC", "LD_"))}
    env.update(KRB5_CONFIG=conf, LC_ALL="C",
               KRB5CCNAME="FILE:" + os.path.join(workdir, "stock.ccache"))
    return env


def dealt_keytab(r, names, keytab, enctype):
    """Principals (new, without keys) whose first key is made in the cluster
    by kadmin.local ktadd: the keytab gets the key, the KDB its handle."""
    cmds = [f"addprinc +requires_preauth -nokey {n}" for n in names]
    for i in range(0, len(names), 200):
        cmds.append(f"ktadd -e {enctype}:normal -k {keytab} " + " ".join(names[i:i + 200]))
    out = r.run(["kadmin.local", "-r", r.realm], input="\n".join(cmds) + "\n",
                timeout=900)
    if out.count("added to keytab") < len(names):
        raise kmpc_realm.RealmError(f"ktadd wrote {out.count('added to keytab')} of "
                                    f"{len(names)} keys:\n{out[-3000:]}")
    os.chmod(keytab, 0o600)


def pkinit_logins(r, workdir, password):
    """Debian's kinit with Debian's krb5-pkinit: anonymous PKINIT, its ticket
    as FAST armor for alice's password login, a certificate login."""
    env = stock_env(r, workdir)
    armor = "FILE:" + os.path.join(workdir, "anonymous.ccache")
    steps = [
        ("anonymous PKINIT: Debian's kinit -n; a TGT for WELLKNOWN/ANONYMOUS "
         "under the MPC-held krbtgt (the reply key from the DH exchange)",
         [STOCK_KINIT, "-n", f"@{r.realm}"], None, armor),
        ("its ccache as FAST armor: Debian's kinit -T for alice (encrypted "
         "challenge under her key, checked in the cluster)",
         [STOCK_KINIT, "-T", armor, "alice"], password + "\n", None),
        (f"a certificate login: Debian's kinit -X X509_user_identity=... "
         f"{CERT_USER} (freshness token checked by the KDC)",
         [STOCK_KINIT, "-X",
          f"X509_user_identity={pkinit.identity(r.pkinit_certs, CERT_USER)}",
          CERT_USER], None, None),
        ("klist", ["/usr/bin/klist"], None, None)]
    for title, argv, stdin, ccache in steps:
        step(title)
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                           timeout=180, env=dict(env, KRB5CCNAME=ccache or env["KRB5CCNAME"]))
        show(p.stdout + p.stderr)
        if p.returncode != 0:
            raise kmpc_realm.RealmError(f"{' '.join(argv[:2])} exited {p.returncode}")


def real_keys_in_kdb(r, workdir):
    """The principals holding real keys in the KDB, read with the master key
    (the stash) from a dump by kdb_dump_ref.py, nothing of kmpc's."""
    import kdb_dump_ref
    dump = os.path.join(workdir, "kdb.dump")
    r.run(["kdb5_util", "-r", r.realm, "dump", dump])
    with open(dump) as f:
        found = kdb_dump_ref.real_keys(os.path.join(r.dir, "stash"), f.read())
    os.unlink(dump)
    return sorted(found)


def find_storm():
    from kmpc_harness import storm_users
    try:
        return storm_users.find_storm()
    except kmpc_realm.RealmError:  # not built
        return None


def main():
    workdir = os.path.join(kmpc_realm.BUILD, "demo")
    kmpc_cluster.stop_dir(workdir)
    kmpc_realm.stop_dir(workdir)
    shutil.rmtree(workdir, ignore_errors=True)

    step("three MPC servers on 127.0.0.1 (certificates from deploy/gen-certs.sh)")
    # Prometheus /metrics over HTTP from each server and the KDC module.
    # Users' keys (addprinc, kpasswd: supported_enctypes) under the standard
    # enctypes only, which unmodified clients use and whose logins the
    # servers gate on shares; the krbtgt's is made under aes256-ctr-mpc
    # explicitly. kmpc-admin and the dealer refuse a password's
    # aes*-ctr-mpc copy (user_ctr_mpc off, as in a product realm; krb5's
    # test module, used when the real one is not built, knows aes*-ctr-mpc
    # keys only).
    # protect = *: with the MPC enctypes out of supported_enctypes, the
    # dealer's pattern is what puts every new key (alice's) in the cluster.
    # PKINIT: the realm's CA and KDC certificate, and a client certificate
    # for carol (deploy/gen-pkinit-certs.sh); docs/admin-guide.md "PKINIT".
    certs = pkinit.make_certs(os.path.join(workdir, "pkinit"), kmpc_realm.REALM,
                              [CERT_USER])
    r = KmpcRealm(workdir, metrics=True, supported_enctypes=USER_ENCTYPES,
                  user_ctr_mpc=False, protect=["*"],
                  realm_extra=pkinit.kdc_relations(certs),
                  krb5_conf_extra=pkinit.client_relation(certs))
    r.user_ctr_mpc = r.module == "test"
    r.pkinit_certs = certs
    try:
        return run(r, workdir)
    except BaseException:
        print("\ndemo FAILED; daemon logs follow", file=sys.stderr)
        print(r.logs(), file=sys.stderr)
        r.stop()
        raise


def run(r, workdir):
    r.create()
    print(f"MPC servers (parties 0, 1, 2): {r.cluster.servers}")
    module = ("kmpc (kdc-plugin/libkmpc_kdc.so: batches to the three servers)"
              if r.module == "real" else
              "krb5's TEST module (holds keys itself): the real module is not built")
    print(f"realm {r.realm} created in {workdir}; kdcmpc module: {module}")

    dealer = r.module == "real"
    if dealer:
        step("kmpc's key dealer on (kdc.conf [plugins] mpcdealer, kadm5_hook; "
             "[mpcdealer] protect = *, service = host/*, user*, kmpc/warmup): MIT's "
             "tools put every new key into the cluster, users' under aes*-cts only")
        # The load-test users and the warm-up principal log in with random
        # keys from keytabs, no password: dealt as services' keys (no gate:
        # a random key is no password verifier), so that status --kdb,
        # which names a user's kind under aes*-ctr-mpc as a password's
        # copy, finds nothing to report.
        r.dealer_kinds = [("service", "host/*"), ("service", "user*"),
                          ("service", r.WARMUP)]
        r.enable_dealer()
        step(f"kadmin.local ktadd: {STORM_USERS} load-test users and the warm-up "
             "principal get random keys made in the cluster; ktadd writes them to "
             "their keytab, the KDB gets the handles")
        dealt_keytab(r, [r.WARMUP], os.path.join(r.dir, "warmup.keytab"),
                     "aes256-ctr-mpc")
        users = [f"user{i}" for i in range(STORM_USERS)]
        dealt_keytab(r, users, r.users_keytab, "aes256-ctr-mpc")
        print(f"user0..user{STORM_USERS - 1}: keytab {r.users_keytab}")
        step(f"kadmin.local ktadd {kmpc_cluster.SERVICE}: a service's random key, "
             "dealt as a service's, in its keytab; only the handle in the KDB")
        svc_keytab = os.path.join(workdir, "svc.keytab")
        r.kadmin_local(f"addprinc -nokey {kmpc_cluster.SERVICE}")
        show(r.kadmin_local(f"ktadd -e aes256-cts-hmac-sha1-96:normal -k {svc_keytab} "
                            f"{kmpc_cluster.SERVICE}"))
        step(f"kmpc-admin share --randkey --service {' '.join(KADMIND_KEYS_IN_CLUSTER)}: "
             "kadmind's keys in the cluster")
        show(r.move_kadmind_keys(KADMIND_KEYS_IN_CLUSTER))
        r.kadmin_local(f"setstr {r.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
        step(f"kadmin.local cpw -randkey -e aes256-ctr-mpc:normal {r.tgs}: the "
             "krbtgt key made in the cluster; no KDB, dump or backup ever held it")
        show(r.kadmin_local(f"cpw -randkey -e aes256-ctr-mpc:normal {r.tgs}"))
        step("kmpc-admin rewrite-kdb: the KDB rewritten into fresh files, so that no "
             "file keeps the real keys the dealer replaced (the krbtgt's first) in "
             "its free space (docs/admin-guide.md, \"Old keys after a move\")")
        show(r.admin("rewrite-kdb")[2])
    else:
        r.setup_warmup()
        r.add_service()
        step(f"kmpc-admin: {STORM_USERS} random-key load-test users migrated from "
             "the KDB (their keytab drives the storm)")
        r.add_users(n_random=STORM_USERS)
        step("kmpc-admin: a new krbtgt key in the cluster")
        show(r.setup_krbtgt())

    password = "demo-" + secrets.token_hex(8)
    if dealer:
        step("kadmin.local addprinc alice: her aes*-cts keys go to the cluster")
        show(r.kadmin_local(f"addprinc +requires_preauth -pw {password} alice"))
    else:
        step("kmpc-admin: alice's key from her password")
        r.addprinc("alice", password, enctypes=["aes256-ctr-mpc"])
        show(r.share_passwords([("alice", password)]))
    step(f"kadmin.local addprinc -nokey {pkinit.ANONYMOUS} and {CERT_USER}: "
         "anonymous PKINIT and a certificate-only user need no key")
    pkinit.add_anonymous(r)
    show(r.kadmin_local(f"addprinc +requires_preauth -nokey {CERT_USER}"))
    print("the KDB holds key handles (read with the master key: "
          "kmpc-kdb-handle keys):")
    for princ in ("alice", r.tgs, kmpc_cluster.SERVICE):
        for kvno, enctype, kind, value in r.kdb_keys(princ):
            print(f"  {princ} kvno {kvno} {enctype}: {kind} {value[:16]}...")
    if dealer:
        step("the KDB read with the master key by kdb_dump_ref.py (the stash and "
             "kdb5_util dump, its own RFC 3962 decryption): who holds real keys")
        real = real_keys_in_kdb(r, workdir)
        print("  " + ", ".join(real))
        stay = ("K/M@",) + tuple(p for p in ("kadmin/admin", "kadmin/changepw",
                                             "kadmin/history")
                                 if p not in KADMIND_KEYS_IN_CLUSTER)
        others = [n for n in real if not n.startswith(stay)]
        if others:
            raise kmpc_realm.RealmError(f"real keys in the KDB: {others}")
        print("  (K/M's and kadmin/history's stay, and kadmind's others unless "
              "KADMIND_KEYS_IN_CLUSTER names them)")

    step("starting krb5kdc with the kdcmpc module")
    r.start()
    print(f"krb5kdc pid {r.kdc_proc.pid} listening on 127.0.0.1:{r.kdc_port}")

    step("kinit alice (encrypted-timestamp pre-auth checked inside the MPC)")
    show(r.kinit("alice", password))
    step("klist -e")
    show(r.run(["klist", "-e"]))
    if dealer and os.path.exists(STOCK_KINIT) and os.path.exists(STOCK_KVNO):
        env = stock_env(r, workdir)
        step(f"Debian's unmodified {STOCK_KINIT} alice and {STOCK_KVNO} -k "
             f"svc.keytab {kmpc_cluster.SERVICE}: both keys in the cluster")
        for argv, stdin in (([STOCK_KINIT, "alice"], password + "\n"),
                            ([STOCK_KVNO, "-k", os.path.join(workdir, "svc.keytab"),
                              kmpc_cluster.SERVICE], None)):
            p = subprocess.run(argv, input=stdin, env=env, capture_output=True,
                               text=True, timeout=180)
            show(p.stdout + p.stderr)
            if p.returncode != 0:
                raise kmpc_realm.RealmError(f"{argv[0]} exited {p.returncode}")
    else:
        step(f"kvno {kmpc_cluster.SERVICE} (TGS exchange: the TGT decrypted by "
             "the cluster)")
        show(r.run(["kvno", kmpc_cluster.SERVICE]))

    if dealer:
        step("kadmind; alice changes her password with kpasswd")
        r.start_kadmind()
        new_password = "demo-" + secrets.token_hex(8)
        # From a fresh credential cache: with alice's TGT in the cache kpasswd
        # would armor its request with it (FAST), which the KDC does not do
        # yet with the krbtgt in the cluster (issue 15).
        env = dict(r.env, KRB5CCNAME="FILE:" + os.path.join(workdir, "kpasswd.ccache"))
        show(r.run(["kpasswd", "alice"], env=env,
                   input=f"{password}\n{new_password}\n{new_password}\n"))
        for kvno, enctype, kind, value in r.kdb_keys("alice"):
            print(f"  alice kvno {kvno} {enctype}: {kind} {value[:16]}...")
        step("kinit alice with the new password; the old one fails")
        show(r.kinit("alice", new_password))
        out = r.kinit("alice", password, expected_code=1)
        show(out.splitlines()[-1] if out else "")

    if dealer and os.path.exists(STOCK_KINIT) and os.path.exists(STOCK_PKINIT):
        pkinit_logins(r, workdir, new_password)

    step("kmpc-admin status --kdb")
    rc, out, err = r.admin("status", "--kdb", expected_code=None)
    lines = (out + err).splitlines()
    n_migrated = sum("migrated from the KDB:" in l for l in lines)
    show("\n".join(l for l in lines if "migrated from the KDB:" not in l))
    if n_migrated:
        # Only without the dealer: the load-test users migrated from the KDB
        # (older KDB copies hold their keys until their next key change).
        print(f"({n_migrated} 'migrated from the KDB' lines not shown)")
    elif dealer and rc != 0:
        raise kmpc_realm.RealmError("kmpc-admin status --kdb found problems")

    storm = find_storm()
    step("a short login storm (kmpc-storm, 5 s, 16 logins in flight)")
    if storm is None:
        print("kmpc-storm is not built (integration-tests/storm/): no storm this time")
    else:
        js = os.path.join(workdir, "storm.json")
        p = subprocess.run(
            [storm, "--keytab", r.users_keytab, "--principals",
             f"user%d@{r.realm}", "--users", str(STORM_USERS), "-c", "16", "-d", "5",
             "-w", "1", "--json", js, "--no-progress",
             "--watch-pid", str(r.kdc_proc.pid)],
            env=r.env, capture_output=True, text=True, timeout=120)
        show(p.stdout)
        if p.returncode != 0:
            show(p.stderr[-2000:])
            print(f"kmpc-storm exited {p.returncode}")

    if not r.alive():
        raise kmpc_realm.RealmError("a daemon died during the demo")
    # Leave the realm running for the user to play with.
    r.kdc_proc = None
    r.kadmind_proc = None
    step("the realm is still running; to use it:")
    for k in ("KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME", "KMPC_ADMIN_CONFIG"):
        print(f"  export {k}={r.env[k]}")
    print(f"  {kmpc_realm.PREFIX}/bin/kinit -k -t {r.users_keytab} user0")
    if r.dealer:
        print(f"  {kmpc_realm.PREFIX}/sbin/kadmin.local -q 'addprinc bob'   "
              "# his key goes to the cluster")
    print(f"  {kmpc_cluster.find_built('mpc-server/kmpc-admin')} status --kdb")
    for url in [r.kdc_metrics_url] + [r.cluster.metrics_url(i) for i in range(3)]:
        if url:
            print(f"  curl -s {url}   # Prometheus metrics")
    print(f"logs:   {workdir}/krb5kdc.log, {r.cluster.dir}/party-{{0,1,2}}.log")
    print(f"status: /usr/bin/python3 integration-tests/kmpc_harness/cluster.py status {workdir}")
    print(f"stop:   /usr/bin/python3 integration-tests/kmpc_harness/cluster.py stop {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
