#!/usr/bin/env python3
"""`make demo`: the whole kmpc realm on loopback.

Three MPC servers (mutual TLS, their ring), a realm whose krbtgt and users'
keys are moved into the cluster with kmpc-admin (the KDB keeps 40-byte key
handles only), the patched KDC with the kdcmpc module, then a user logs in
(kinit), klist -e, kvno for a service, the cluster's status, and a short
login storm when kmpc-storm is built. Everything stays running afterwards;
the last lines say where the logs are and how to stop it.

Passwords and keys are never printed: the demo user's password lives only in
this process and on kinit's / kmpc-admin's stdin.
"""
import os
import re
import secrets
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kmpc_cluster  # noqa: E402
import kmpc_realm  # noqa: E402

STORM_USERS = 50


def step(msg):
    print(f"\n==> {msg}", flush=True)


def show(text):
    text = text.strip()
    if text:
        print(text, flush=True)


def find_storm():
    try:
        import storm_bench
        return storm_bench.find_storm()
    except Exception:  # not built (or the bench module is missing)
        return None


def main():
    workdir = os.path.join(kmpc_realm.BUILD, "demo")
    kmpc_cluster.stop_dir(workdir)
    kmpc_realm.stop_dir(workdir)
    shutil.rmtree(workdir, ignore_errors=True)

    step("three MPC servers on 127.0.0.1 (certificates from deploy/gen-certs.sh)")
    r = kmpc_cluster.KmpcRealm(workdir)
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

    step("kmpc-admin: move the krbtgt key into the cluster (read from the KDB, "
         "no reset)")
    show(r.setup_krbtgt())
    r.setup_warmup()
    r.add_service()

    step("kmpc-admin: alice's key from her password; "
         f"{STORM_USERS} random-key users migrated from the KDB")
    password = "demo-" + secrets.token_hex(8)
    r.addprinc("alice", password, enctypes=["aes256-ctr-mpc"])
    show(r.share_passwords([("alice", password)]))
    r.add_users(n_random=STORM_USERS)
    print(f"user0..user{STORM_USERS - 1} shared (their keytab: {r.users_keytab})")
    print("the KDB now holds key handles only:")
    show("\n".join(l for l in r.kadmin_local("getprinc alice").splitlines()
                   if l.startswith(("Principal:", "Number of keys", "Key:"))))

    step("starting krb5kdc with the kdcmpc module")
    r.start()
    print(f"krb5kdc pid {r.kdc_proc.pid} listening on 127.0.0.1:{r.kdc_port}")

    step("kinit alice (encrypted-timestamp pre-auth checked inside the MPC)")
    show(r.kinit("alice", password))
    step("klist -e")
    show(r.run(["klist", "-e"]))
    step(f"kvno {kmpc_cluster.SERVICE} (TGS exchange: the TGT decrypted by the cluster)")
    show(r.run(["kvno", kmpc_cluster.SERVICE]))

    step("kmpc-admin status --kdb")
    _, out, err = r.admin("status", "--kdb", expected_code=None)
    show(out + err)

    storm = find_storm()
    step("a short login storm (kmpc-storm, 5 s, 16 logins in flight)")
    if storm is None:
        print("kmpc-storm is not built (mpc-server/storm/): no storm this time")
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
    r.kdc_proc = None  # leave the realm running for the user to play with
    step("the realm is still running; to use it:")
    for k in ("KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME", "KMPC_ADMIN_CONFIG"):
        print(f"  export {k}={r.env[k]}")
    print(f"  {kmpc_realm.PREFIX}/bin/kinit -k -t {r.users_keytab} user0")
    print(f"  {kmpc_cluster.find_built('mpc-server/kmpc-admin')} status --kdb")
    print(f"logs:   {workdir}/krb5kdc.log, {r.cluster.dir}/party-{{0,1,2}}.log")
    print(f"status: /usr/bin/python3 deploy/kmpc_cluster.py status {workdir}")
    print(f"stop:   /usr/bin/python3 deploy/kmpc_cluster.py stop {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
