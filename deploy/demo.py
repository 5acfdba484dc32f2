#!/usr/bin/env python3
"""`make demo`: a realm on loopback, a user logging in, klist -e, kvno.

What runs today: the patched krb5kdc with aes*-ctr-mpc keys. Parts that later
issues add (the three MPC servers holding the keys, key sharing, the login
storm) are announced as missing, not faked.
"""
import os
import secrets
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kmpc_realm  # noqa: E402


def step(msg):
    print(f"\n==> {msg}", flush=True)


def main():
    workdir = os.path.join(kmpc_realm.BUILD, "demo")
    kmpc_realm.stop_dir(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    step(f"creating realm {kmpc_realm.REALM} in {workdir} (KDC on 127.0.0.1)")
    realm = kmpc_realm.Realm(workdir).create()
    realm.start_kdc()
    print(f"krb5kdc pid {realm.kdc_proc.pid} listening on 127.0.0.1:{realm.kdc_port}")
    password = "demo-" + secrets.token_hex(6)
    realm.addprinc("alice", password)
    realm.addprinc("host/demo.kmpc.test", None, flags="")
    step("kinit alice (encrypted-timestamp pre-auth, aes256-ctr-mpc)")
    print(realm.kinit("alice", password).strip())
    step("klist -e")
    print(realm.run(["klist", "-e"]).strip())
    step("kvno host/demo.kmpc.test (TGS exchange)")
    print(realm.run(["kvno", "host/demo.kmpc.test"]).strip())
    step("not there yet")
    print("- MPC servers holding the keys (the KDB above still holds real keys)")
    print("- key sharing with kmpc-admin, and the login storm")
    realm.kdc_proc = None  # leave the KDC running for the user to play with
    step("the realm is still running; to use it:")
    for k in ("KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME"):
        print(f"  export {k}={realm.env[k]}")
    kt = realm.extract_keytab("alice", os.path.join(workdir, "alice.keytab"))
    print(f"  {kmpc_realm.PREFIX}/bin/kinit -k -t {kt} alice")
    print(f"logs: {workdir}/krb5kdc.log")
    print(f"stop: python3 deploy/kmpc_realm.py stop {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
