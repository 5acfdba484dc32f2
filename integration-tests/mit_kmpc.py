#!/usr/bin/env python3
"""MIT krb5's own KDC-facing Python tests against kmpc (`make test-mit-kmpc`).

Runs MIT's test scripts (src/tests/t_*.py and friends, on MIT's k5test
harness) from the patched krb5 build tree, as MIT's `make check` does
(`cd build/krb5-obj/<dir> && PYTHONPATH=<src>/util python3
<src>/<dir>/t_x.py`, after `make runenv.py` and the helper programs of the
directory's check-pytests rule), with k5test's kmpc mode (krb5's k5test kmpc-mode patch)
switched on by K5TEST_KMPC:

  krbtgt  every realm a test creates gets three MPC servers of its own and
          its krbtgt key in them; other principals keep ordinary keys
  users   as krbtgt, and every principal the harness creates with a
          password is MPC-protected: its keys of the standard enctypes
          (aes256/aes128-cts-hmac-sha1-96) are key handles into the
          cluster; clients unchanged
  users-ctr-mpc
          as users, but those principals get aes*-ctr-mpc keys (clients
          offer the MPC enctypes)
  all     as users, and every other key but K/M's too: the key dealer
          deals every new random key (services, host/) as a service's,
          keytabs are written by ktadd (a new key), and kadmind's keys move
          with kmpc-admin share --from-existing --service
  stock   MIT's own mode (no kmpc): the baseline on this machine

Each test's output goes to build/mit-kmpc/MODE/<name>.log, k5test's command
log to <name>.testlog, and the daemon logs (KDC, kadmind, MPC servers) of
the realms it left in its test directory to <name>.logs/. Prints one line per test, then
`N passed, M failed` and each failure with the first reason k5test gave.
Exit status 0 only if every test passed.

  mit_kmpc.py [--mode krbtgt|users|users-ctr-mpc|all|stock] [--tests "tests/t_renew ..."]
"""

import argparse
import fcntl
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("KMPC_BUILD", os.path.join(ROOT, "build"))

# MIT's KDC-facing Python tests (issue 15's list), as <dir>/<script> under
# src/ of the krb5 tree.
DEFAULT_TESTS = [
    "tests/t_general", "tests/t_renew", "tests/t_kdcoptions", "tests/t_authdata",
    "tests/t_u2u", "tests/t_crossrealm", "tests/t_referral", "tests/t_keyrollover",
    "tests/t_preauth", "tests/t_skew", "tests/t_sesskeynego", "tests/t_etype_info",
    "tests/t_changepw", "tests/t_kadmin", "tests/t_dump", "tests/gssapi/t_s4u",
    "tests/gssapi/t_gssapi", "appl/user_user/t_user2user", "tests/t_pkinit",
]


def log(msg):
    print(msg, flush=True)


def build_lock():
    """The krb5 build's lock (krb5-patches/build-krb5.sh): no rebuild of the
    tree while its helper programs are made."""
    f = open(os.path.join(BUILD, ".krb5.lock"), "a")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def run_lock(obj):
    """The locks a run of MIT's scripts holds: the build tree's (fixed
    test directories in it) and the machine's, since k5test's realms listen
    on fixed ports (61000 up) whichever tree they run from; two realms on
    the same port share its UDP traffic (the KDC sets SO_REUSEADDR), so a
    client's request can reach another run's KDC. A run in a network
    namespace of its own names another machine lock in
    KMPC_K5TEST_PORTS_LOCK."""
    locks = []
    for path in (os.path.join(obj, ".mit-kmpc.lock"),
                 os.environ.get("KMPC_K5TEST_PORTS_LOCK") or
                 os.path.join(tempfile.gettempdir(), "kmpc-k5test-ports.lock")):
        f = open(path, "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        locks.append(f)
    return locks


def prepare(obj, dirs, out):
    """runenv.py and the helper programs each directory's check-pytests
    rule depends on: the rule runs with RUNPYTEST=: so that make builds its
    prerequisites and runs no script."""
    with build_lock(), open(os.path.join(out, "prepare.log"), "w") as f:
        for argv in [["make", "runenv.py"]] + [
                ["make", "-C", d, "check-pytests", "RUNPYTEST=:", "PYTESTFLAGS="]
                for d in dirs]:
            p = subprocess.run(argv, cwd=obj, stdout=f, stderr=subprocess.STDOUT)
            if p.returncode != 0:
                sys.exit(f"mit_kmpc: {' '.join(argv)} failed in {obj} "
                         f"(log: {f.name})")


def first_reason(output):
    """k5test's failure message ('*** Failure: ...') with the failed
    command's last output line, else the last line of a traceback."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("*** Failure:"):
            reason = line[len("*** Failure:"):].strip()
            cmd = next((l.split(":", 1)[1].strip() for l in lines[i + 1:]
                        if l.startswith("*** Last command")), None)
            out = []
            if "*** Output of last command:" in lines[i:]:
                j = lines.index("*** Output of last command:", i)
                out = [l for l in lines[j + 1:] if l.strip()
                       and not l.startswith(("***", "For details", "Or re-run",
                                             "    cd ", "    PYTHONPATH", "Use --",
                                             "--stop-after", "attach to", "options."))]
            if cmd:
                reason += f" [{os.path.basename(cmd.split()[0])}"
                reason += f": {out[-1].strip()}]" if out else "]"
            return reason
    tail = [l for l in lines if l.strip()]
    return tail[-1].strip() if tail else "no output"


def kmpc_coverage(testlog):
    """(realms the test created with MPC servers, of them the realms whose
    krbtgt went into the cluster), from k5test's command log: shared by
    kmpc-admin after kdb5_util create, or, for a realm on MIT's test KDB
    module (database_module = test: keys made from kdc.conf, read-only),
    given MPC key handles whose keys k5test put into the cluster."""
    realms = len(re.findall(r"^\*\*\* kmpc: MPC servers \d", testlog, re.M))
    shared = len(re.findall(r"^\[\d+/\d+\] krbtgt/([^@\s]+)@\1: shared from a random key",
                            testlog, re.M))
    shared += len(re.findall(r"^\*\*\* kmpc: krbtgt/([^@\s]+)@\1: test KDB module keys",
                             testlog, re.M))
    return realms, shared


def kadmind_coverage(testlog):
    """Realms whose kadmind keys (kadmin/changepw, with kadmin/admin) went
    into the cluster (mode all: kmpc-admin share --service)."""
    return len(re.findall(r"^\[\d+/\d+\] kadmin/changepw(@\S+)?: shared from",
                          testlog, re.M))


# Real keys that stay in a KDB in mode all, by design: the master key and
# kadmin/history's (kadm5 encrypts the password history under it).
KDB_KEYS_THAT_STAY = ("K/M@", "kadmin/history@")


def kdb_real_keys(obj, cwd):
    """{realm directory: [principal holding a real key, K/M and
    kadmin/history aside] or an error string} for each realm a test left in
    its test directory with a KDB and a stash: `kdb5_util dump`, read by
    kdb_dump_ref.py (the stash and the dump, decrypted by its own RFC 3962
    code, nothing of kmpc's)."""
    sys.path.insert(0, os.path.join(ROOT, "integration-tests"))
    import kdb_dump_ref
    found = {}
    for stash in sorted(glob.glob(os.path.join(cwd, "testdir", "**", "stash"),
                                  recursive=True)):
        d = os.path.dirname(stash)
        rel = os.path.relpath(d, cwd)
        try:
            with open(os.path.join(d, "krb5.conf")) as f:
                realm = re.search(r"default_realm\s*=\s*(\S+)", f.read()).group(1)
            dump = os.path.join(d, "kmpc-check.dump")
            env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(obj, "lib"),
                       KRB5_CONFIG=os.path.join(d, "krb5.conf"),
                       KRB5_KDC_PROFILE=os.path.join(d, "kdc.conf"))
            subprocess.run([os.path.join(obj, "kadmin", "dbutil", "kdb5_util"), "-r",
                            realm, "dump", dump], env=env, check=True,
                           capture_output=True, timeout=120)
            with open(dump) as f:
                keys = kdb_dump_ref.real_keys(stash, f.read())
            os.unlink(dump)
            found[rel] = sorted(n for n in keys if not n.startswith(KDB_KEYS_THAT_STAY))
        except Exception as e:  # a test's own KDB (LDAP, des3 master): not read
            found[rel] = f"not read: {type(e).__name__}: {str(e)[:120]}"
    return found


def leaked_servers(cwd):
    """MPC servers a test left running (their pid files under its testdir):
    killed here by pid; their pids are returned."""
    pids = []
    for pf in glob.glob(os.path.join(cwd, "testdir", "**", "party-*.pid"), recursive=True):
        try:
            pid = int(open(pf).read().strip() or 0)
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            continue
        pids.append(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def run_test(name, mode, src, obj, out, env, timeout):
    d, script = os.path.split(name)
    cwd = os.path.join(obj, d)
    base = name.replace("/", "_")
    logf = os.path.join(out, base + ".log")
    for old in glob.glob(os.path.join(out, base + ".*")):
        shutil.rmtree(old) if os.path.isdir(old) else os.unlink(old)
    start = time.time()
    with open(logf, "w") as f:
        p = subprocess.Popen([sys.executable, os.path.join(src, d, script + ".py")],
                             cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = p.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            # The test's own process group (its daemons and MPC servers).
            os.killpg(p.pid, signal.SIGKILL)
            code = p.wait()
            timed_out = True
    elapsed = time.time() - start
    leaked = leaked_servers(cwd)
    with open(logf, errors="replace") as f:
        output = f.read()
    testlog = ""
    if os.path.exists(os.path.join(cwd, "testlog")):
        shutil.copy(os.path.join(cwd, "testlog"), os.path.join(out, base + ".testlog"))
        with open(os.path.join(cwd, "testlog"), errors="replace") as f:
            testlog = f.read()
    realms, shared = kmpc_coverage(testlog)
    kdb = kdb_real_keys(obj, cwd) if mode == "all" else None
    ok = code == 0 and not timed_out and not leaked
    reason = None
    if not ok:
        reason = (f"timed out after {timeout} s" if timed_out else first_reason(output))
        if leaked:
            reason += f" (and left {len(leaked)} MPC servers running)"
    # The daemons' logs (KDC, kadmind, MPC servers) of the realm(s) the test
    # left behind: its last realm in each test directory.
    keep = os.path.join(out, base + ".logs")
    for lf in glob.glob(os.path.join(cwd, "testdir", "**", "*.log"), recursive=True):
        rel = os.path.relpath(lf, os.path.join(cwd, "testdir"))
        os.makedirs(os.path.dirname(os.path.join(keep, rel)), exist_ok=True)
        shutil.copy(lf, os.path.join(keep, rel))
    return {"test": name, "passed": ok, "seconds": round(elapsed, 1), "reason": reason,
            "realms": realms, "krbtgt_in_cluster": shared,
            "kadmind_in_cluster": kadmind_coverage(testlog), "kdb_real_keys": kdb}


def kdb_summary(r):
    """What the KDBs a test left hold besides K/M's (and kadmin/history's)
    key, in words."""
    if not r["kdb_real_keys"]:
        return "no KDB left to read"
    parts = []
    for d, v in r["kdb_real_keys"].items():
        parts.append(f"{d}: " + (v if isinstance(v, str) else
                                 ("no other real key" if not v else
                                  "real keys of " + ", ".join(v))))
    return "; ".join(parts)


def test_env(src, mode, certs):
    """The environment MIT's scripts run in: the caller's without its
    krb5 and k5test settings, k5test on PYTHONPATH and, unless mode is
    stock, k5test's kmpc mode with the certificates in certs
    (K5TEST_KMPC_WORKERS and K5TEST_KMPC_PROTECT pass through)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LD_", "KRB5", "KPROP", "K5TEST", "GSS_"))}
    env["PYTHONPATH"] = os.path.join(src, "util")
    if mode != "stock":
        env.update(K5TEST_KMPC=mode, K5TEST_KMPC_ROOT=ROOT, K5TEST_KMPC_CERTS=certs,
                   K5TEST_KMPC_WORKERS=os.environ.get("K5TEST_KMPC_WORKERS", "1"))
        if os.environ.get("K5TEST_KMPC_PROTECT"):
            env["K5TEST_KMPC_PROTECT"] = os.environ["K5TEST_KMPC_PROTECT"]
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", default="krbtgt", choices=("krbtgt", "users", "users-ctr-mpc", "all", "stock"))
    ap.add_argument("--tests", default="",
                    help="space-separated <dir>/<script> names (default: issue 15's list)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per test")
    ap.add_argument("--out", default=os.path.join(BUILD, "mit-kmpc"))
    args = ap.parse_args()
    tests = args.tests.split() or DEFAULT_TESTS
    src = os.path.join(BUILD, "krb5-src", "src")
    obj = os.path.join(BUILD, "krb5-obj")
    for t in tests:
        if not os.path.exists(os.path.join(src, t + ".py")):
            sys.exit(f"mit_kmpc: no test {t} ({src}/{t}.py)")
    if not os.path.exists(os.path.join(obj, "config.status")):
        sys.exit(f"mit_kmpc: no krb5 build tree in {obj} (make krb5)")
    if args.mode != "stock":
        with open(os.path.join(src, "util", "k5test.py")) as f:
            if "K5TEST_KMPC" not in f.read():
                sys.exit("mit_kmpc: k5test.py has no kmpc mode (krb5's k5test kmpc-mode patch "
                         "not applied: make krb5)")
    out = os.path.join(os.path.abspath(args.out), args.mode)
    os.makedirs(out, exist_ok=True)
    # MIT's tests use fixed directories in the build tree (testdir) and
    # fixed ports (61000 up): one run at a time per build tree and machine.
    locks = run_lock(obj)  # noqa: F841 (held until exit)
    prepare(obj, sorted({os.path.dirname(t) for t in tests}), out)

    certs = None
    if args.mode != "stock":
        certs = os.path.join(out, "certs")
        shutil.rmtree(certs, ignore_errors=True)
        subprocess.run(["bash", os.path.join(ROOT, "deploy", "gen-certs.sh"), certs],
                       check=True, capture_output=True, timeout=120)
    env = test_env(src, args.mode, certs)
    log(f"== MIT krb5 tests against kmpc, mode {args.mode} (logs: {out}) ==")
    results = []
    for t in tests:
        r = run_test(t, args.mode, src, obj, out, env, args.timeout)
        results.append(r)
        cov = (f", krbtgt in the cluster in {r['krbtgt_in_cluster']} of {r['realms']} realms"
               if args.mode != "stock" else "")
        if args.mode == "all":
            cov += f", kadmind's keys in {r['kadmind_in_cluster']}; {kdb_summary(r)}"
        log(f"{'PASS' if r['passed'] else 'FAIL'} {t} ({r['seconds']} s{cov})"
            + (f": {r['reason']}" if r["reason"] else ""))
    failed = [r for r in results if not r["passed"]]
    summary = [f"{len(results) - len(failed)} passed, {len(failed)} failed "
               f"(mode {args.mode})"]
    summary += [f"  FAIL {r['test']}: {r['reason']}" for r in failed]
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write("\n".join(summary) + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"mode": args.mode, "results": results}, f, indent=1)
    log("\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
