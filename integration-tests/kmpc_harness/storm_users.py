"""The users, keytabs and kmpc-storm binary of a login storm: what the
test harness's storm realms (realm.storm_users_realm,
kmpc_realm.storm_realm) and the benchmarks (integration-tests/bench/)
share. The harness imports no benchmark module; the benchmarks import
this one.
"""
import glob
import os
import subprocess

from kmpc_harness import realm as kmpc_realm

BUILD = kmpc_realm.BUILD
# The service principal of the storms' TGS requests.
SERVICE = "host/storm.kmpc.test"


def find_storm():
    """The kmpc-storm binary: $KMPC_STORM, else $KMPC_CMAKE_BUILD's (the
    build the rest of the harness takes its binaries from, cluster.find_built),
    else the newest build of it."""
    if os.environ.get("KMPC_STORM"):
        return os.environ["KMPC_STORM"]
    if os.environ.get("KMPC_CMAKE_BUILD"):
        own = os.path.join(os.environ["KMPC_CMAKE_BUILD"], "mpc-server", "kmpc-storm")
        if os.access(own, os.X_OK):
            return own
    cands = [p for p in glob.glob(os.path.join(BUILD, "*", "mpc-server", "kmpc-storm"))
             + glob.glob(os.path.join(BUILD, "storm-scratch", "out", "kmpc-storm"))
             if os.access(p, os.X_OK)]
    if not cands:
        raise kmpc_realm.RealmError(
            "kmpc-storm is not built: cmake --build build/cmake --target kmpc-storm")
    return max(cands, key=os.path.getmtime)


def dbmodules_block(realm, **opts):
    """kdc.conf text for [dbmodules] REALM = {...}: where the db2 module
    reads disable_last_success / disable_lockout (MIT kdc.conf(5);
    plugins/kdb/db2/kdb_db2.c looks them up under [dbmodules] only)."""
    lines = "".join(f"        {k} = {v}\n" for k, v in opts.items())
    return f"[dbmodules]\n    {realm} = {{\n{lines}    }}\n"


def populate_users(realm, n, fmt="user{}", enctypes=None, keytab=None,
                   service=SERVICE):
    """n users requiring pre-auth with random keys, a service principal, and
    one keytab holding the users' keys: one kadmin.local process for all."""
    ets = enctypes or realm.enctypes
    ks = ",".join(f"{e}:normal" for e in ets)
    names = [fmt.format(i) for i in range(n)]
    cmds = [f"addprinc +requires_preauth -e {ks} -randkey {u}" for u in names]
    if service:
        cmds.append(f"addprinc -e {ks} -randkey {service}")
    kt = keytab or realm.keytab
    for i in range(0, n, 200):  # ktadd takes many principals per line
        cmds.append(f"ktadd -norandkey -k {kt} " + " ".join(names[i:i + 200]))
    out = realm.run(["kadmin.local", "-r", realm.realm], input="\n".join(cmds) + "\n",
                    timeout=600)
    created = out.count("created.")
    if created != n + (1 if service else 0):
        raise kmpc_realm.RealmError(f"expected {n} principals, kadmin.local created "
                                    f"{created}:\n{out[-3000:]}")
    return kt


def client_keytab_from_passwords(env, passwords, enctypes, path, kvno=1):
    """A keytab holding the keys the *client* derives from each password
    (string-to-key with the default salt, as kinit would): ktutil from the
    private prefix, one process, passwords on its stdin, never printed.
    For realms whose KDC cannot hand out keys (kmpc: the KDB holds handles),
    the users are created with passwords and the storm's keytab is made here.
    passwords: {principal: password}."""
    lines = []
    for princ, pw in passwords.items():
        for e in enctypes:
            lines += [f"addent -password -p {princ} -k {kvno} -e {e}", pw]
    lines += [f"wkt {path}", "quit"]
    p = subprocess.run([kmpc_realm.binpath("ktutil")], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0 or not os.path.exists(path):
        raise kmpc_realm.RealmError(f"ktutil failed ({p.returncode}): {p.stderr[-2000:]}")
    return path
